//! The floors the benchmark measures against: each answers every line or request, the file
//! floor really reads the file, beneath its directory, the way the files provider does, and
//! the machine floors give our answer byte for byte.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

/// Run `mcpr-bench` with `args`, feed it `lines`, and collect what it wrote and its status.
fn run(args: &[&str], lines: &[&str]) -> (Vec<String>, bool) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcpr-bench"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("mcpr-bench starts");
    let mut stdin = child.stdin.take().expect("stdin");
    for l in lines {
        // A floor that already exited makes this fail; its status tells the test.
        let _ = writeln!(stdin, "{l}");
    }
    drop(stdin);
    let out = BufReader::new(child.stdout.take().expect("stdout"))
        .lines()
        .map(|l| l.expect("a line"))
        .collect();
    (out, child.wait().expect("exits").success())
}

#[test]
fn the_echo_floor_writes_every_line_back() {
    let lines = [r#"{"jsonrpc":"2.0","id":1}"#, "second", ""];
    let (out, ok) = run(&["echo"], &lines);
    assert!(ok);
    assert_eq!(out, lines);
}

#[test]
fn the_file_floor_answers_each_line_with_the_file_as_it_is_now() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f.txt"), "a \"quoted\"\nline\\").unwrap();
    let d = dir.path().to_str().unwrap();
    let req = r#"{"jsonrpc":"2.0","id":7,"method":"resources/read"}"#;
    // The six-call floor and the minimal one answer alike.
    for floor in ["file-echo", "min-file-echo"] {
        let (out, ok) = run(&[floor, d, "f.txt"], &[req, req]);
        assert!(ok, "{floor}");
        assert_eq!(out.len(), 2, "{floor}");
        for line in &out {
            let v: serde_json::Value = serde_json::from_str(line).expect("JSON");
            assert_eq!(v["echo"]["id"], 7);
            assert_eq!(v["text"], "a \"quoted\"\nline\\");
        }
    }
}

#[test]
fn the_file_floor_refuses_what_the_provider_refuses() {
    // openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, as the direct read asks: a symlink
    // (even one pointing inside) and a path out of the directory are both refused.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f.txt"), "x").unwrap();
    std::os::unix::fs::symlink("f.txt", dir.path().join("link.txt")).unwrap();
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let req = r#"{"id":1}"#;
    let (out, ok) = run(
        &["file-echo", dir.path().to_str().unwrap(), "link.txt"],
        &[req],
    );
    assert!(!ok && out.is_empty(), "{out:?}");
    let (out, ok) = run(&["file-echo", sub.to_str().unwrap(), "../f.txt"], &[req]);
    assert!(!ok && out.is_empty(), "{out:?}");
    let (out, ok) = run(
        &["file-echo", sub.to_str().unwrap(), "../sub/../f.txt"],
        &[req],
    );
    assert!(!ok && out.is_empty(), "{out:?}");
}

/// A POST of `body` to `addr` on a new connection, and the whole response as text.
fn post(addr: &str, body: &str) -> String {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    write!(
        s,
        "POST /mcp HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).expect("an answer");
    out
}

#[test]
fn the_machine_floor_answers_each_line_as_our_server_does() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("f.txt");
    std::fs::write(&f, "a \"quoted\"\nline\\ \u{1}é").unwrap();
    let d = dir.path().to_str().unwrap();
    let req = |id: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"resources/read","params":{{"uri":"file:///x/f \"q\".txt"}}}}"#
        )
    };
    let (out, ok) = run(
        &["machine-floor", d, "f.txt"],
        &[&req("7"), &req("\"s,}\"")],
    );
    assert!(ok);
    assert_eq!(
        out,
        [
            r#"{"jsonrpc":"2.0","id":7,"result":{"contents":[{"uri":"file:///x/f \"q\".txt","mimeType":"text/plain","text":"a \"quoted\"\nline\\ \u0001é"}]}}"#,
            r#"{"jsonrpc":"2.0","id":"s,}","result":{"contents":[{"uri":"file:///x/f \"q\".txt","mimeType":"text/plain","text":"a \"quoted\"\nline\\ \u0001é"}]}}"#,
        ]
    );
}

#[test]
fn the_machine_http_floor_answers_each_read_on_one_connection() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("f.txt");
    std::fs::write(&f, "a \"quoted\"\nline").unwrap();
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcpr-bench"))
        .args([
            "machine-http-floor",
            &addr,
            dir.path().to_str().unwrap(),
            "f.txt",
        ])
        .stderr(Stdio::null())
        .spawn()
        .expect("mcpr-bench starts");
    let start = std::time::Instant::now();
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(start.elapsed().as_secs() < 20, "the floor never listened");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let req = |id: u64, last: bool| {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"resources/read","params":{{"uri":"file:///x/f.txt"}}}}"#
        );
        format!(
            "POST /mcp HTTP/1.1\r\nhost: {addr}\r\nContent-Length: {}\r\n{}\r\n{body}",
            body.len(),
            if last { "connection: close\r\n" } else { "" }
        )
    };
    // Two requests in one write on one keep-alive connection, the second asking to close.
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    write!(s, "{}{}", req(7, false), req(8, true)).unwrap();
    let mut both = String::new();
    s.read_to_string(&mut both).expect("answers, then the end");
    std::fs::write(&f, "changed").unwrap();
    let changed = post(&addr, r#"{"id":9,"params":{"uri":"u"}}"#);
    let bad = post(&addr, "not json");
    let _ = child.kill();
    let _ = child.wait();
    let answer = |id: u64, uri: &str, text: &str| {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"resultType":"complete","ttlMs":0,"cacheScope":"public","contents":[{{"uri":"{uri}","mimeType":"text/plain","text":{text}}}]}}}}"#
        );
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    let text = serde_json::to_string("a \"quoted\"\nline").unwrap();
    assert_eq!(
        both,
        answer(7, "file:///x/f.txt", &text) + &answer(8, "file:///x/f.txt", &text)
    );
    assert_eq!(changed, answer(9, "u", "\"changed\""));
    assert!(bad.starts_with("HTTP/1.1 400"), "{bad}");
}

#[test]
fn the_http_floor_answers_each_read_with_the_file_as_it_is_now() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("f.txt");
    std::fs::write(&f, "a \"quoted\"\nline").unwrap();
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcpr-bench"))
        .args(["http-floor", &addr, dir.path().to_str().unwrap(), "f.txt"])
        .stderr(Stdio::null())
        .spawn()
        .expect("mcpr-bench starts");
    let start = std::time::Instant::now();
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(start.elapsed().as_secs() < 20, "the floor never listened");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let req = |id: u64| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"resources/read","params":{{"uri":"file:///x/f.txt"}}}}"#
        )
    };
    let first = post(&addr, &req(7));
    std::fs::write(&f, "changed").unwrap();
    let second = post(&addr, &req(8));
    let bad = post(&addr, "not json");
    let _ = child.kill();
    let _ = child.wait();
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    assert!(
        first
            .to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{first}"
    );
    assert!(
        first.ends_with(
            r#"{"jsonrpc":"2.0","id":7,"result":{"resultType":"complete","ttlMs":0,"cacheScope":"public","contents":[{"uri":"file:///x/f.txt","mimeType":"text/plain","text":"a \"quoted\"\nline"}]}}"#
        ),
        "{first}"
    );
    assert!(second.ends_with(r#""id":8,"result":{"resultType":"complete","ttlMs":0,"cacheScope":"public","contents":[{"uri":"file:///x/f.txt","mimeType":"text/plain","text":"changed"}]}}"#), "{second}");
    assert!(bad.starts_with("HTTP/1.1 400"), "{bad}");
}
