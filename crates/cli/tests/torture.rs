//! Protocol torture over the real binary (issue #19, section 2): the built `mcp-resources`
//! driven over stdio and over HTTP with malformed and hostile input. Every message that has
//! an id gets the right JSON-RPC error (or its answer), a message without one gets an error
//! with a null id or nothing, the process never crashes or hangs, and its RSS (from
//! `/proc/PID/status`) stays under [`RSS_LIMIT_KIB`].
//!
//! Raw bytes on the wire, no MCP client library: the point is input no client would send.
//! Every wait has a deadline, so a hang fails the test instead of stalling CI.

mod client_common;

use std::collections::HashSet;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The longest the server may take to answer one message.
const ANSWER_WITHIN: Duration = Duration::from_secs(20);
/// The bound on the server's resident memory through every case (stdio line limit 16 MiB,
/// HTTP body limit 1 MiB, 1,000 subscriptions per session).
const RSS_LIMIT_KIB: u64 = 256 * 1024;
/// The stdio line limit the binary enforces.
const MAX_LINE: usize = 16 * 1024 * 1024;

const LEGACY: &str = "2025-11-25";
const MODERN: &str = "2026-07-28";

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

/// A temporary root with `a.txt` and `n/0.txt` … `n/{files-1}.txt`.
fn tree(files: usize) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::write(root.join("a.txt"), "torture\n").unwrap();
    std::fs::create_dir(root.join("n")).unwrap();
    for i in 0..files {
        std::fs::write(root.join(format!("n/{i}.txt")), "x").unwrap();
    }
    (dir, root)
}

fn file_uri(root: &Path, rel: &str) -> String {
    format!("file://{}/{rel}", root.display())
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The binary serving `root` over stdio, its stdout read line by line on a thread.
struct Stdio_ {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<Vec<u8>>,
    peak_rss: u64,
}

impl Stdio_ {
    fn start(root: &Path) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_mcp-resources"))
            .args(["serve", "--log-level", "error"])
            .arg(root)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the binary starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::with_capacity(1 << 20, stdout);
            loop {
                let mut line = Vec::new();
                match r.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if tx.send(line).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        Self {
            stdin: child.stdin.take(),
            child,
            lines,
            peak_rss: 0,
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).expect("the server reads its stdin");
        stdin.flush().unwrap();
    }

    fn send_json(&mut self, v: &Value) {
        let mut line = serde_json::to_vec(v).unwrap();
        line.push(b'\n');
        self.send(&line);
    }

    fn sample_rss(&mut self) -> u64 {
        let rss = rss_kib(self.child.id());
        self.peak_rss = self.peak_rss.max(rss);
        assert!(
            rss < RSS_LIMIT_KIB,
            "RSS {rss} KiB is over the bound of {RSS_LIMIT_KIB} KiB"
        );
        rss
    }

    /// The next message the server writes.
    fn recv(&mut self, what: &str) -> Value {
        let line = self
            .lines
            .recv_timeout(ANSWER_WITHIN)
            .unwrap_or_else(|_| panic!("{what}: no answer within {ANSWER_WITHIN:?}"));
        serde_json::from_slice(&line).unwrap_or_else(|e| {
            panic!(
                "{what}: the server wrote a line that is not JSON ({e}): {}",
                String::from_utf8_lossy(&line[..line.len().min(300)])
            )
        })
    }

    /// The next message that is not a notification.
    fn answer(&mut self, what: &str) -> Value {
        loop {
            let v = self.recv(what);
            if v.get("id").is_some() {
                return v;
            }
        }
    }

    fn request(&mut self, v: &Value, what: &str) -> Value {
        self.send_json(v);
        self.answer(what)
    }

    /// The server is alive and answering: a ping gets its result.
    fn alive(&mut self, what: &str) {
        let id = format!("alive-{what}");
        let a = self.request(&json!({"jsonrpc":"2.0","id":id,"method":"ping"}), what);
        assert_eq!(a["id"], json!(id), "{what}: {a}");
        assert!(a.get("result").is_some(), "{what}: ping failed: {a}");
        self.sample_rss();
    }

    fn initialize(&mut self, version: &str) -> Value {
        let a = self.request(
            &json!({"jsonrpc":"2.0","id":"init","method":"initialize","params":{
                "protocolVersion": version, "capabilities": {},
                "clientInfo": {"name": "torture", "version": "1"}}}),
            "initialize",
        );
        self.send_json(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
        a
    }

    /// Closes stdin and waits for a clean exit.
    fn finish(mut self) -> u64 {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "the server exited with {status}");
                return self.peak_rss;
            }
            assert!(
                Instant::now() < deadline,
                "the server did not exit within 15 s of stdin closing"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Stdio_ {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[track_caller]
fn assert_error(a: &Value, id: &Value, code: i64, what: &str) {
    assert_eq!(a["jsonrpc"], "2.0", "{what}: {a}");
    assert_eq!(&a["id"], id, "{what}: wrong id: {a}");
    assert_eq!(a["error"]["code"], code, "{what}: wrong code: {a}");
    let msg = a["error"]["message"].as_str().unwrap_or("");
    assert!(!msg.is_empty(), "{what}: an error without a message: {a}");
}

/// Nested arrays `depth` deep inside a ping's params.
fn deep(depth: usize, id: u64) -> Vec<u8> {
    let mut v =
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping","params":{{"x":"#).into_bytes();
    v.extend(std::iter::repeat_n(b'[', depth));
    v.extend(std::iter::repeat_n(b']', depth));
    v.extend_from_slice(b"}}\n");
    v
}

/// Requests of every known method with params of the wrong type, and the member named.
/// `tools/*` and `prompts/*` are not known methods of a server run without `--tools` (they
/// answer -32601 whatever their params; `crates/server/tests/tool_bridge.rs` covers them).
fn wrong_params(root: &Path) -> Vec<(&'static str, Value)> {
    let uri = file_uri(root, "a.txt");
    let mut cases = Vec::new();
    for method in [
        "initialize",
        "completion/complete",
        "logging/setLevel",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "resources/subscribe",
        "resources/unsubscribe",
        "subscriptions/listen",
    ] {
        for params in [json!(12), json!("x"), json!([1]), json!(true)] {
            cases.push((method, params));
        }
    }
    let members = [
        (
            "initialize",
            json!({"protocolVersion": 1, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
        ),
        (
            "completion/complete",
            json!({"ref": 1, "argument": {"name": "a", "value": "b"}}),
        ),
        ("logging/setLevel", json!({"level": 7})),
        ("resources/list", json!({"cursor": 5})),
        ("resources/templates/list", json!({"cursor": {}})),
        ("resources/read", json!({"uri": 12})),
        ("resources/read", json!({"uri": [uri]})),
        ("resources/subscribe", json!({"uri": null})),
        ("resources/unsubscribe", json!({"uri": false})),
        ("subscriptions/listen", json!({"filter": 3})),
    ];
    cases.extend(members);
    cases
}

#[test]
fn stdio_survives_malformed_and_hostile_lines() {
    let (_dir, root) = tree(0);
    let mut s = Stdio_::start(&root);
    let init = s.initialize(LEGACY);
    assert_eq!(init["result"]["protocolVersion"], LEGACY, "{init}");

    // Not JSON, not UTF-8, not one message.
    for (bytes, what) in [
        (&b"{foo\n"[..], "invalid JSON"),
        (b"\xff\xfe{\"jsonrpc\":\"2.0\"}\n", "invalid UTF-8"),
        (
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"} {}\n",
            "two values on a line",
        ),
        (b"\"just a string\"\n", "no object"),
        (
            b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]\n",
            "a batch",
        ),
        (b"[]\n", "an empty batch"),
    ] {
        s.send(bytes);
        let a = s.answer(what);
        let code = if what == "invalid JSON"
            || what == "invalid UTF-8"
            || what == "two values on a line"
        {
            -32700
        } else {
            -32600
        };
        assert_error(&a, &Value::Null, code, what);
    }
    s.alive("malformed");

    // 100,000-deep nesting, arrays and objects: a parse error, no stack overflow.
    s.send(&deep(100_000, 3));
    assert_error(
        &s.answer("deep arrays"),
        &Value::Null,
        -32700,
        "deep arrays",
    );
    let mut objects = br#"{"jsonrpc":"2.0","id":4,"method":"ping","params":"#.to_vec();
    objects.extend(b"{\"a\":".repeat(100_000));
    objects.extend_from_slice(b"1");
    objects.extend(std::iter::repeat_n(b'}', 100_000));
    objects.extend_from_slice(b"}\n");
    s.send(&objects);
    assert_error(
        &s.answer("deep objects"),
        &Value::Null,
        -32700,
        "deep objects",
    );
    s.alive("deep");

    // A line of 64 MiB: refused as over the limit (no id can be read from it), discarded
    // without being held whole.
    let mut big = br#"{"jsonrpc":"2.0","id":5,"method":"ping","params":{"pad":""#.to_vec();
    big.resize(64 << 20, b'x');
    big.extend_from_slice(b"\"}}\n");
    s.send(&big);
    drop(big);
    let a = s.answer("64 MiB line");
    assert_error(&a, &Value::Null, -32600, "64 MiB line");
    let msg = a["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains(&MAX_LINE.to_string()),
        "the limit is named: {msg}"
    );
    s.alive("64 MiB");

    // Ids of every JSON type: strings and integers are echoed; anything else cannot be.
    let long_id = "i".repeat(1 << 20);
    for id in [
        json!("s"),
        json!(""),
        json!(0),
        json!(-7),
        json!(i64::MAX),
        json!(long_id),
    ] {
        let a = s.request(&json!({"jsonrpc":"2.0","id":id,"method":"ping"}), "id");
        assert_eq!(a["id"], id, "echoed id");
        assert!(a.get("result").is_some(), "{a}");
    }
    for (raw, what) in [
        ("1.5", "fraction"),
        ("1e400", "huge number"),
        ("true", "bool"),
        ("[1]", "array"),
        ("{\"a\":1}", "object"),
    ] {
        s.send(format!(r#"{{"jsonrpc":"2.0","id":{raw},"method":"ping"}}"#).as_bytes());
        s.send(b"\n");
        assert_error(&s.answer(what), &Value::Null, -32600, what);
    }
    // A null id is no request id: an invalid request.
    s.send(b"{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}\n");
    assert_error(&s.answer("null id"), &Value::Null, -32600, "null id");
    s.alive("ids");

    // Wrong parameter types for every method: -32602 with the id.
    for (i, (method, params)) in wrong_params(&root).into_iter().enumerate() {
        let id = json!(format!("wrong-{i}"));
        let what = format!("{method} with params {params}");
        let a = s.request(
            &json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}),
            &what,
        );
        assert_error(&a, &id, -32602, &what);
    }
    // An unknown method: -32601.
    let a = s.request(
        &json!({"jsonrpc":"2.0","id":"u","method":"no/such"}),
        "unknown",
    );
    assert_error(&a, &json!("u"), -32601, "unknown method");

    // Cancellations for ids that were never sent: no answer, nothing breaks.
    for id in [json!(424242), json!("nobody"), json!(-1)] {
        s.send_json(
            &json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":id}}),
        );
    }
    s.alive("cancellations");

    // A second initialize: answered with its id, and the session goes on.
    let a = s.request(
        &json!({"jsonrpc":"2.0","id":"init2","method":"initialize","params":{
            "protocolVersion": LEGACY, "capabilities": {},
            "clientInfo": {"name": "torture", "version": "1"}}}),
        "second initialize",
    );
    assert_eq!(a["id"], "init2", "{a}");
    s.alive("repeated initialize");

    // Eras mixed in one session: a 2026-07-28 read inside a legacy session is answered.
    let uri = file_uri(&root, "a.txt");
    let a = s.request(
        &json!({"jsonrpc":"2.0","id":"modern","method":"resources/read",
                "params":{"uri": uri, "_meta": meta()}}),
        "modern read in a legacy session",
    );
    assert_eq!(a["id"], "modern", "{a}");
    assert!(a.get("result").is_some() || a.get("error").is_some(), "{a}");
    let a = s.request(
        &json!({"jsonrpc":"2.0","id":"legacy","method":"resources/read","params":{"uri": uri}}),
        "legacy read",
    );
    assert_eq!(a["result"]["contents"][0]["text"], "torture\n", "{a}");

    let peak = s.finish();
    println!("stdio torture: peak RSS {peak} KiB");
}

#[test]
fn stdio_before_initialize_and_unfinished_line() {
    let (_dir, root) = tree(0);
    let uri = file_uri(&root, "a.txt");
    // A request before `initialize` gets an answer with its id, whatever the lifecycle.
    let mut s = Stdio_::start(&root);
    let a = s.request(
        &json!({"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri": uri}}),
        "read before initialize",
    );
    assert_eq!(a["id"], 1, "{a}");
    assert!(a.get("error").is_some(), "{a}");
    // A 2026-07-28 request needs no initialize at all.
    let a = s.request(
        &json!({"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri": uri, "_meta": meta()}}),
        "modern read without initialize",
    );
    assert_eq!(a["result"]["contents"][0]["text"], "torture\n", "{a}");
    // A last line without its newline, then EOF: not a message; a clean exit.
    s.send(br#"{"jsonrpc":"2.0","id":77,"method":"ping"}"#);
    drop(s.stdin.take());
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut extra = Vec::new();
    while let Ok(line) = s
        .lines
        .recv_timeout(deadline.saturating_duration_since(Instant::now()))
    {
        extra.push(String::from_utf8_lossy(&line).into_owned());
    }
    assert!(
        extra.iter().all(|l| !l.contains("\"id\":77")),
        "an unfinished line was answered: {extra:?}"
    );
    s.finish();
}

#[test]
fn stdio_ten_thousand_requests_in_flight() {
    const N: usize = 10_000;
    let (_dir, root) = tree(0);
    let mut s = Stdio_::start(&root);
    s.initialize(LEGACY);
    let uri = file_uri(&root, "a.txt");
    // Every request written before any answer is read (the reader thread keeps stdout
    // drained, as a client with a big buffer would).
    let mut batch = Vec::with_capacity(N * 120);
    for i in 0..N {
        let method = if i % 2 == 0 { "resources/read" } else { "ping" };
        let params = if i % 2 == 0 {
            json!({"uri": uri})
        } else {
            json!({})
        };
        serde_json::to_writer(
            &mut batch,
            &json!({"jsonrpc":"2.0","id":i,"method":method,"params":params}),
        )
        .unwrap();
        batch.push(b'\n');
    }
    let started = Instant::now();
    s.send(&batch);
    let mut seen = HashSet::new();
    while seen.len() < N {
        let a = s.answer("10,000 in flight");
        assert!(a.get("result").is_some(), "{a}");
        assert!(
            seen.insert(a["id"].as_u64().unwrap()),
            "answered twice: {a}"
        );
        if seen.len() % 1000 == 0 {
            s.sample_rss();
        }
    }
    println!(
        "10,000 requests in flight: all answered in {:?}",
        started.elapsed()
    );
    s.alive("after 10,000");
    let peak = s.finish();
    println!("in flight: peak RSS {peak} KiB");
}

#[test]
fn stdio_one_hundred_thousand_subscriptions() {
    const N: usize = 100_000;
    // The default limit per session.
    const LIMIT: usize = 1000;
    let (_dir, root) = tree(LIMIT + 10);
    let mut s = Stdio_::start(&root);
    s.initialize(LEGACY);
    let mut batch = Vec::with_capacity(N * 120);
    for i in 0..N {
        let uri = file_uri(&root, &format!("n/{i}.txt"));
        serde_json::to_writer(
            &mut batch,
            &json!({"jsonrpc":"2.0","id":i,"method":"resources/subscribe","params":{"uri": uri}}),
        )
        .unwrap();
        batch.push(b'\n');
    }
    let started = Instant::now();
    s.send(&batch);
    drop(batch);
    let (mut ok, mut limited) = (0, 0);
    for n in 0..N {
        let a = s.answer("100,000 subscriptions");
        if a.get("result").is_some() {
            ok += 1;
        } else {
            let msg = a["error"]["message"].as_str().unwrap_or_default();
            assert_eq!(a["error"]["code"], -32602, "{a}");
            if msg.contains("max_subscriptions_per_session") {
                limited += 1;
            }
        }
        if n % 10_000 == 0 {
            s.sample_rss();
        }
    }
    assert_eq!(ok, LIMIT, "subscriptions held: the limit");
    assert!(
        limited >= N - LIMIT - 10,
        "refusals naming the limit: {limited}"
    );
    println!("100,000 subscriptions: answered in {:?}", started.elapsed());
    s.alive("after subscriptions");
    let peak = s.finish();
    println!("subscriptions: peak RSS {peak} KiB");
}

/// The binary serving `root` over HTTP on a free loopback port.
struct Http {
    child: Child,
    addr: String,
    /// The server's stderr (`--log-level error`), shown when an answer fails.
    stderr: tempfile::NamedTempFile,
}

impl Http {
    fn start(root: &Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let stderr = tempfile::NamedTempFile::new().unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_mcp-resources"))
            .args(["serve", "--log-level", "error", "--http", &addr])
            .arg(root)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr.reopen().unwrap())
            .spawn()
            .expect("the binary starts");
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(&addr).is_err() {
            assert!(Instant::now() < deadline, "no HTTP listener on {addr}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Self {
            child,
            addr,
            stderr,
        }
    }

    /// [`post`], failing with the server's state and stderr beside the reason: one run
    /// (of dozens) got an empty answer to its first request, and nothing said why.
    fn post(&self, headers: &[(&str, &str)], body: &[u8]) -> (u16, Option<Value>) {
        let tried = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            post(&self.addr, headers, body)
        }));
        tried.unwrap_or_else(|e| {
            let why = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            let running = client_common::running(&self.child.id().to_string());
            let log = std::fs::read_to_string(self.stderr.path()).unwrap_or_default();
            panic!("{why}; the server is running: {running}; its stderr: {log:?}")
        })
    }

    fn rss(&self) -> u64 {
        let rss = rss_kib(self.child.id());
        assert!(
            rss < RSS_LIMIT_KIB,
            "RSS {rss} KiB is over {RSS_LIMIT_KIB} KiB"
        );
        rss
    }
}

/// One POST to `/mcp` on a fresh connection: status and the JSON-RPC answer (from a JSON
/// body or the first SSE `data:` event), if any.
fn post(addr: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, Option<Value>) {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(ANSWER_WITHIN)).unwrap();
    c.set_write_timeout(Some(ANSWER_WITHIN)).unwrap();
    let mut head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        addr,
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    c.write_all(head.as_bytes()).unwrap();
    // The server may answer and close before a body over its limit is all sent.
    let _ = c.write_all(body);
    let mut raw = Vec::new();
    let _ = c.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status: u16 = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {:?}", &text[..text.len().min(200)]));
    let Some((head, mut body)) = text
        .split_once("\r\n\r\n")
        .map(|(h, b)| (h.to_ascii_lowercase(), b.to_owned()))
    else {
        return (status, None);
    };
    if head.contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    let json = if head.contains("text/event-stream") {
        body.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim)
            .find(|d| d.starts_with('{'))
            .and_then(|d| serde_json::from_str(d).ok())
    } else {
        serde_json::from_str(body.trim()).ok()
    };
    (status, json)
}

impl Drop for Http {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || after.len() < n {
            out.push_str(&after[..n.min(after.len())]);
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}

#[test]
fn http_survives_malformed_and_hostile_bodies() {
    let (_dir, root) = tree(0);
    let h = Http::start(&root);
    let uri = file_uri(&root, "a.txt");
    let modern = [("MCP-Protocol-Version", MODERN)];

    for (body, what, code) in [
        (&b"{foo"[..], "invalid JSON", -32700),
        (b"\xff\xfe{}", "invalid UTF-8", -32700),
        (
            b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]",
            "a batch",
            -32600,
        ),
        (b"\"x\"", "no object", -32600),
    ] {
        let (status, a) = h.post(&modern, body);
        assert!((400..500).contains(&status), "{what}: status {status}");
        let a = a.unwrap_or_else(|| panic!("{what}: no JSON-RPC error in the body"));
        assert_error(&a, &Value::Null, code, what);
    }

    // 100,000-deep nesting (200 KB, under the body limit): a parse error.
    let body = deep(100_000, 3);
    let (status, a) = h.post(
        &[("MCP-Protocol-Version", MODERN), ("Mcp-Method", "ping")],
        &body,
    );
    assert!((400..500).contains(&status), "deep: status {status}");
    assert_error(
        &a.expect("deep: an answer"),
        &Value::Null,
        -32700,
        "deep nesting",
    );

    // A 64 MiB body: 413 naming the limit, without reading it all.
    let mut big = br#"{"jsonrpc":"2.0","id":5,"method":"ping","params":{"pad":""#.to_vec();
    big.resize(64 << 20, b'x');
    big.extend_from_slice(b"\"}}");
    let (status, _) = h.post(&modern, &big);
    assert_eq!(status, 413, "64 MiB body");
    drop(big);
    h.rss();

    // Ids of every type on a stateless read.
    let long_id = "i".repeat(512 * 1024);
    for id in [json!("s"), json!(0), json!(-7), json!(long_id)] {
        let body = json!({"jsonrpc":"2.0","id":id,"method":"resources/read","params":{"uri": uri, "_meta": meta()}});
        let (status, a) = h.post(
            &[
                ("MCP-Protocol-Version", MODERN),
                ("Mcp-Method", "resources/read"),
                ("Mcp-Name", &uri),
            ],
            body.to_string().as_bytes(),
        );
        assert_eq!(
            status,
            200,
            "id {}",
            &id.to_string()[..20.min(id.to_string().len())]
        );
        let a = a.expect("an answer");
        assert_eq!(a["id"], id);
        assert_eq!(a["result"]["contents"][0]["text"], "torture\n");
    }
    for raw in ["1.5", "1e400", "true", "[1]", "{}"] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{raw},"method":"resources/list","params":{{"_meta":{}}}}}"#,
            meta()
        );
        let (status, a) = h.post(
            &[
                ("MCP-Protocol-Version", MODERN),
                ("Mcp-Method", "resources/list"),
            ],
            body.as_bytes(),
        );
        assert!((400..500).contains(&status), "id {raw}: status {status}");
        assert_error(&a.expect("an answer"), &Value::Null, -32600, raw);
    }

    // Wrong parameter types for every method of the 2026-07-28 era, with `_meta` kept.
    for (i, (method, params)) in wrong_params(&root).into_iter().enumerate() {
        if [
            "initialize",
            "logging/setLevel",
            "resources/subscribe",
            "resources/unsubscribe",
        ]
        .contains(&method)
        {
            continue; // removed in 2026-07-28: method not found, checked below
        }
        let params = match params {
            Value::Object(mut m) => {
                m.insert("_meta".into(), meta());
                Value::Object(m)
            }
            other => other,
        };
        let what = format!("{method} with params {params}");
        let body = json!({"jsonrpc":"2.0","id":i,"method":method,"params":params});
        let (status, a) = h.post(
            &[("MCP-Protocol-Version", MODERN), ("Mcp-Method", method)],
            body.to_string().as_bytes(),
        );
        let a = a.unwrap_or_else(|| panic!("{what}: status {status} and no JSON-RPC answer"));
        assert_error(&a, &json!(i), -32602, &what);
    }
    let body = json!({"jsonrpc":"2.0","id":"sub","method":"resources/subscribe","params":{"uri": uri, "_meta": meta()}});
    let (_, a) = h.post(
        &[
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "resources/subscribe"),
            ("Mcp-Name", &uri),
        ],
        body.to_string().as_bytes(),
    );
    assert_error(
        &a.expect("an answer"),
        &json!("sub"),
        -32601,
        "removed method",
    );

    // Many requests from many connections at once: each answered or refused with a status.
    let started = Instant::now();
    let threads: Vec<_> = (0..16)
        .map(|t| {
            let addr = h.addr.clone();
            let uri = uri.clone();
            std::thread::spawn(move || {
                let mut ok = 0;
                for i in 0..125 {
                    let id = t * 1000 + i;
                    let body = json!({"jsonrpc":"2.0","id":id,"method":"resources/read","params":{"uri": uri, "_meta": meta()}});
                    let (status, a) = post(
                        &addr,
                        &[("MCP-Protocol-Version", MODERN), ("Mcp-Method", "resources/read"), ("Mcp-Name", &uri)],
                        body.to_string().as_bytes(),
                    );
                    if status == 200 {
                        assert_eq!(a.expect("an answer")["id"], id);
                        ok += 1;
                    } else {
                        assert!([429, 503].contains(&status), "status {status}");
                    }
                }
                ok
            })
        })
        .collect();
    let ok: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(ok > 0, "no request of 2,000 was served");
    println!(
        "HTTP: 2,000 requests from 16 connections at a time, {ok} served, in {:?}",
        started.elapsed()
    );
    println!("HTTP torture: RSS {} KiB", h.rss());
}
