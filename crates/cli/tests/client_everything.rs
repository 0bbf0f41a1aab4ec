//! The terminal client against a server that is not ours: the reference
//! `@modelcontextprotocol/server-everything@2026.8.31` (TypeScript SDK, legacy era only),
//! over stdio and Streamable HTTP: its resources, templates, completion and subscription, and
//! its tools and prompts.
//!
//! `cargo xtask test` installs it (with Node 22) into `.cache/node22`; without it these tests
//! say SKIPPED and pass, except under `CI=true`, where they fail.

mod client_common;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use client_common::{Guard, Lines, bin, run};
use serde_json::Value;

/// The pinned package; `xtask/src/main.rs` installs the same version.
const PACKAGE: &str = "@modelcontextprotocol/server-everything";

/// The static documents it lists (its `docs` folder).
const DOCUMENT: &str = "demo://resource/static/document/architecture.md";
const TEXT_TEMPLATE: &str = "demo://resource/dynamic/text/{resourceId}";
const BLOB_TEMPLATE: &str = "demo://resource/dynamic/blob/{resourceId}";

/// Node 22 and the package's entry point, or `None` (skip) when not installed.
fn everything() -> Option<(PathBuf, PathBuf)> {
    client_common::npm_server(PACKAGE)
}

/// The client's arguments, then `-- node index.js stdio`.
fn over_stdio(args: &[&str], node: &PathBuf, entry: &PathBuf) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(args).arg("--").arg(node).arg(entry).arg("stdio");
    cmd
}

/// The server in `streamableHttp` mode on a free port, with its stdout lines (where it
/// announces session ids) on a channel.
fn over_http(node: &PathBuf, entry: &PathBuf) -> (Guard, String, mpsc::Receiver<String>) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let mut child = Command::new(node)
        .arg(entry)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start server-everything");
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let (ready_tx, ready_rx) = mpsc::channel();
    let stderr = child.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("listening on port") {
                let _ = ready_tx.send(());
            }
        }
    });
    let guard = Guard(child);
    ready_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("server-everything starts listening");
    (guard, format!("http://127.0.0.1:{port}/mcp"), rx)
}

/// What every transport must show: the listing, a read of each kind, templates, completion,
/// and a clear refusal of the era this server does not speak.
fn check_resources(client: impl Fn(&[&str]) -> Command) {
    let out = run(client(&["ls", "--json"])).ok();
    let uris: Vec<String> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["uri"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert!(uris.contains(&DOCUMENT.to_owned()), "{uris:?}");
    assert!(
        uris.iter()
            .all(|u| u.starts_with("demo://resource/static/document/")),
        "{uris:?}"
    );
    // Its resources carry a description, a field our table leaves out but --json keeps.
    assert!(
        out.contains(
            "\"description\":\"Static document file exposed from /docs: architecture.md\""
        ),
        "{out}"
    );
    let table = run(client(&["ls"])).ok();
    assert!(
        table
            .lines()
            .any(|l| l.starts_with(DOCUMENT) && l.contains("text/markdown")),
        "{table}"
    );

    let doc = run(client(&["cat", DOCUMENT])).ok();
    assert!(doc.len() > 100, "the document's text: {doc}");
    let text = run(client(&["cat", "demo://resource/dynamic/text/7"])).ok();
    assert!(text.contains('7'), "{text}");
    let blob = run(client(&["cat", "demo://resource/dynamic/blob/7"]));
    assert_eq!(blob.code, Some(0), "{}", blob.stderr);
    assert!(!blob.stdout.is_empty());
    assert!(
        std::str::from_utf8(&blob.stdout).is_ok_and(|s| s.contains('7')),
        "the blob decoded, not base64"
    );

    let templates = run(client(&["templates"])).ok();
    assert!(
        templates.contains(TEXT_TEMPLATE) && templates.contains(BLOB_TEMPLATE),
        "{templates}"
    );
    let json = run(client(&["templates", "--json"])).ok();
    assert_eq!(json.lines().count(), 2, "{json}");

    assert_eq!(
        run(client(&["complete", TEXT_TEMPLATE, "resourceId", "12"])).ok(),
        "12\n"
    );
    assert_eq!(
        run(client(&["complete", TEXT_TEMPLATE, "resourceId", "x"])).ok(),
        ""
    );

    let missing = run(client(&["cat", "demo://resource/nope"]));
    assert_eq!(missing.code, Some(4));
    assert!(
        missing.stderr.starts_with("error: ") && missing.stderr.lines().count() == 1,
        "{}",
        missing.stderr
    );

    let modern = run(client(&["ls", "--protocol", "2026-07-28"]));
    assert_eq!(modern.code, Some(4));
    assert!(
        modern.stderr.contains("does not speak 2026-07-28"),
        "{}",
        modern.stderr
    );
}

/// Its tools and prompts: listed (every page, `--json` parsed back), a text tool with a
/// string and with number arguments, an image tool's bytes to `-o`, a prompt with an
/// argument, and the completion of a prompt's arguments.
fn check_primitives(client: impl Fn(&[&str]) -> Command) {
    let tools = run(client(&["tools", "--json"])).ok();
    let names: Vec<String> = tools
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["name"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    for want in ["echo", "get-sum", "get-tiny-image"] {
        assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
    }
    let echo = run(client(&["call", "echo", "--arg", "message=hi there"])).ok();
    assert_eq!(echo.trim(), "Echo: hi there");
    let sum = run(client(&[
        "call", "get-sum", "--arg", "a:=2", "--arg", "b:=3",
    ]))
    .ok();
    assert!(sum.contains("The sum of 2 and 3 is 5"), "{sum}");
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("tiny.png");
    let image = run(client(&[
        "call",
        "get-tiny-image",
        "-o",
        png.to_str().unwrap(),
    ]));
    assert_eq!(image.code, Some(0), "{}", image.stderr);
    let bytes = std::fs::read(&png).expect("the image written to -o");
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");

    let prompts = run(client(&["prompts", "--json"])).ok();
    assert!(prompts.contains("\"args-prompt\""), "{prompts}");
    let prompt = run(client(&["prompt", "args-prompt", "--arg", "city=Paris"])).ok();
    assert!(prompt.contains("Paris"), "{prompt}");
    // Its prompt whose second argument's values depend on the first (`context.arguments`).
    let department = run(client(&[
        "complete",
        "--prompt",
        "completable-prompt",
        "department",
        "E",
    ]))
    .ok();
    assert_eq!(department, "Engineering\n");
    let name = run(client(&[
        "complete",
        "--prompt",
        "completable-prompt",
        "name",
        "",
        "--arg",
        "department=Sales",
    ]))
    .ok();
    assert_eq!(name, "David\nEve\nFrank\n");
}

#[test]
fn everything_over_stdio() {
    let Some((node, entry)) = everything() else {
        return;
    };
    check_resources(|args| over_stdio(args, &node, &entry));
    check_primitives(|args| over_stdio(args, &node, &entry));

    // It only sends updates after a tool call, which this client does not make; what can be
    // seen here is that the subscription is accepted and the watch stays up.
    let mut watch = Lines::spawn(over_stdio(&["watch", DOCUMENT], &node, &entry));
    // It says when the subscription is in place (Node may take a few seconds to start).
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while !watch.stderr().contains('\n') && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(watch.stderr(), "watching 1 resource (Ctrl-C stops)\n");
    assert_eq!(
        watch.next_within(Duration::from_secs(2)),
        None,
        "{}",
        watch.stderr()
    );
    assert_eq!(watch.stderr(), "watching 1 resource (Ctrl-C stops)\n");
    assert!(
        watch.child.0.try_wait().unwrap().is_none(),
        "the watch runs until interrupted"
    );
}

#[test]
fn everything_over_http_with_updates() {
    let Some((node, entry)) = everything() else {
        return;
    };
    let (_server, url, sessions) = over_http(&node, &entry);
    let over_http = |args: &[&str]| {
        let mut cmd = Command::new(bin());
        cmd.args(args).args(["--url", &url]);
        cmd
    };
    check_resources(over_http);
    check_primitives(over_http);

    // Watch, learn the session it opened from the server's log, and switch on the server's
    // simulated updates for that session (a tool call, made here by hand): every 5 s it sends
    // notifications/resources/updated for what the session subscribed to.
    while sessions.try_recv().is_ok() {}
    let mut cmd = Command::new(bin());
    cmd.args(["watch", "--json", "--read", DOCUMENT, "--url", &url]);
    let watch = Lines::spawn(cmd);
    let deadline = Instant::now() + Duration::from_secs(15);
    let session = loop {
        let line = sessions
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("the watch opens a session");
        if let Some(id) = line.strip_prefix("Session initialized with ID: ") {
            break id.trim().to_owned();
        }
    };
    let answer = toggle_updates(&url, &session);
    assert!(
        answer.contains("Started simulated resource updated"),
        "{answer}"
    );
    let line = watch
        .next_within(Duration::from_secs(12))
        .unwrap_or_else(|| panic!("no update; stderr: {}", watch.stderr()));
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["method"], "notifications/resources/updated", "{line}");
    assert_eq!(v["uri"], DOCUMENT);
    assert!(
        v["contents"][0]["text"]
            .as_str()
            .is_some_and(|t| t.len() > 100),
        "--read: {line}"
    );
}

/// Call the server's `toggle-subscriber-updates` tool in `session`, over a plain HTTP/1.1
/// POST; returns the response body.
fn toggle_updates(url: &str, session: &str) -> String {
    let addr = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .expect("host:port");
    let body = r#"{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"toggle-subscriber-updates","arguments":{}}}"#;
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-11-25\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    let mut buf = [0u8; 4096];
    // The SSE answer ends after the tool's result; stop reading there or at the deadline.
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline && !answer.contains("\"id\":99") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.push_str(&String::from_utf8_lossy(&buf[..n])),
        }
    }
    answer
}
