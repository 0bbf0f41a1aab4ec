//! The terminal client over the 2024-11-05 HTTP+SSE transport (a `GET` event stream whose
//! `endpoint` event names where to `POST`), against real servers of that transport: the
//! reference `@modelcontextprotocol/server-everything` in `sse` mode (TypeScript SDK) and the
//! Python SDK's `MCPServer` (FastMCP) run with `transport="sse"`; and against a scripted
//! loopback server for what no real server does on request: a cross-origin endpoint, refusals
//! that must not fall back, and a server that never answers.
//!
//! `cargo xtask test` installs Node 22 with server-everything in `.cache/node22` and the SDK in
//! `.cache/venv`; without them those tests say SKIPPED and pass, except under `CI=true`.

mod client_common;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use client_common::{Guard, Lines, bin, run};
use serde_json::Value;

const PACKAGE: &str = "@modelcontextprotocol/server-everything";
const DOCUMENT: &str = "demo://resource/static/document/architecture.md";
const TEXT_TEMPLATE: &str = "demo://resource/dynamic/text/{resourceId}";

/// A free loopback port (a server told to listen there takes it next).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// The client with `args`, then `--url url`.
fn client(args: &[&str], url: &str) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(args).args(["--url", url]);
    cmd
}

/// Start `cmd` (a server) and wait for a stderr line containing `ready`; the stderr lines
/// keep arriving on the returned channel.
fn start(mut cmd: Command, ready: &str) -> (Guard, mpsc::Receiver<String>) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the server");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let guard = Guard(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("the server did not say {ready:?} within 20 s"));
        if line.contains(ready) {
            return (guard, rx);
        }
    }
}

/// server-everything in `sse` mode: its event stream's URL and its stderr (where it names each
/// session), or `None` (skip) when not installed.
fn everything_sse() -> Option<(Guard, String, mpsc::Receiver<String>)> {
    let (node, entry) = client_common::npm_server(PACKAGE)?;
    let port = free_port();
    let mut cmd = Command::new(node);
    cmd.arg(entry).arg("sse").env("PORT", port.to_string());
    let (guard, rx) = start(cmd, "Server is running on port");
    Some((guard, format!("http://127.0.0.1:{port}/sse"), rx))
}

#[test]
fn everything_over_http_sse() {
    let Some((_server, url, log)) = everything_sse() else {
        return;
    };
    // `auto`: a POST to the stream's URL is refused (404), so the client falls back.
    let ls = run(client(&["ls", "--json"], &url)).ok();
    let uris: Vec<String> = ls
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["uri"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert!(uris.contains(&DOCUMENT.to_owned()), "{uris:?}");
    // Asked for by name, it goes straight to the stream.
    let doc = run(client(&["cat", DOCUMENT, "--protocol", "2024-11-05"], &url)).ok();
    assert!(doc.contains("Architecture"), "{doc}");
    let templates = run(client(&["templates"], &url)).ok();
    assert!(templates.contains(TEXT_TEMPLATE), "{templates}");
    let text = run(client(&["cat", "demo://resource/dynamic/text/7"], &url)).ok();
    assert!(text.contains('7'), "{text}");
    let sum = run(client(
        &["call", "get-sum", "--arg", "a:=2", "--arg", "b:=3"],
        &url,
    ))
    .ok();
    assert!(sum.contains("The sum of 2 and 3 is 5"), "{sum}");
    // A JSON-RPC error from the server, answered on the stream: exit 4.
    let missing = run(client(&["cat", "demo://resource/nope"], &url));
    assert_eq!(missing.code, Some(4), "{}", missing.stderr);

    // --verbose says why and how the transport changed; --header goes on the GET and on every
    // POST, and its value is never shown.
    let traced = run(client(
        &[
            "ping",
            "-v",
            "--header",
            "Authorization: Bearer s3cret-token",
        ],
        &url,
    ));
    assert_eq!(traced.code, Some(0), "{}", traced.stderr);
    let err = &traced.stderr;
    assert!(
        err.contains("(HTTP 404 Not Found): falling back to the 2024-11-05 HTTP+SSE transport"),
        "{err}"
    );
    assert!(!err.contains("s3cret"), "{err}");
    let get = err
        .lines()
        .find(|l| l.starts_with("-> GET ") && l.contains("/sse"))
        .unwrap_or_else(|| panic!("no GET in {err}"));
    assert!(get.contains("authorization: ***"), "{get}");
    let endpoint_posts: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("-> POST ") && l.contains("/message"))
        .collect();
    assert!(endpoint_posts.len() >= 3, "{err}");
    assert!(
        endpoint_posts
            .iter()
            .all(|l| l.contains("authorization: ***") && !l.contains("sessionId")),
        "{endpoint_posts:?}"
    );

    // `--protocol legacy` means Streamable HTTP only: no fallback, the refusal is the answer.
    let legacy = run(client(&["ls", "--protocol", "legacy"], &url));
    assert_eq!(legacy.code, Some(3), "{}", legacy.stderr);
    assert!(legacy.stderr.contains("404"), "{}", legacy.stderr);

    // Watch, learn the session from the server's log, and switch its simulated updates on
    // with a tool call posted to that session's endpoint: its answer goes to the watch's
    // stream (an id the watch never sent, so ignored), then every 5 s an update.
    while log.try_recv().is_ok() {}
    let watch = Lines::spawn(client(&["watch", "--json", DOCUMENT], &url));
    let deadline = Instant::now() + Duration::from_secs(15);
    let session = loop {
        let line = log
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("the watch opens a session");
        if let Some(id) = line.strip_prefix("Client Connected:") {
            break id.trim().to_owned();
        }
    };
    // The subscription first: its "watching" line says it is in place.
    while !watch.stderr().contains("watching") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(watch.stderr(), "watching 1 resource (Ctrl-C stops)\n");
    let status = post(
        &url,
        &format!("/message?sessionId={session}"),
        r#"{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"toggle-subscriber-updates","arguments":{}}}"#,
    );
    assert_eq!(status, 202);
    let line = watch
        .next_within(Duration::from_secs(12))
        .unwrap_or_else(|| panic!("no update; stderr: {}", watch.stderr()));
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["method"], "notifications/resources/updated", "{line}");
    assert_eq!(v["uri"], DOCUMENT);
}

/// POST `body` to `path` on `url`'s host; the status.
fn post(url: &str, path: &str, body: &str) -> u16 {
    let addr = url.trim_start_matches("http://").split('/').next().unwrap();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// A Python SDK server run with `transport="sse"`: a resource, a template, `add(a, b)`, a
/// `die()` that ends the process after its request was accepted, and subscriptions whose
/// `resources/subscribe` is followed, shortly after its answer, by an update of that URI.
const FASTMCP: &str = r#"
import asyncio, os, sys
from mcp.server.mcpserver import MCPServer
from mcp.types import EmptyResult, SubscribeRequestParams

app = MCPServer("sse-2024")

@app.resource("note://today", mime_type="text/plain")
def today() -> str:
    return "buy milk"

@app.resource("note://day/{day}")
def day(day: str) -> str:
    return f"notes of {day}"

@app.tool()
def add(a: int, b: int) -> str:
    """Add two numbers."""
    return f"{a + b}"

@app.tool()
def die() -> str:
    """Ends the server without answering."""
    os._exit(1)

pending = set()

async def subscribe(ctx, params: SubscribeRequestParams) -> EmptyResult:
    async def later():
        await asyncio.sleep(0.3)
        await ctx.session.send_resource_updated(params.uri)
    task = asyncio.get_running_loop().create_task(later())
    pending.add(task)
    return EmptyResult()

app._lowlevel_server.add_request_handler("resources/subscribe", SubscribeRequestParams, subscribe)
app.run("sse", port=int(sys.argv[1]))
"#;

/// The SDK server on a free port: it and its stream's URL, or `None` (skip) without the SDK.
fn fastmcp_sse(dir: &tempfile::TempDir) -> Option<(Guard, String)> {
    let python = client_common::python_sdk()?;
    let script = dir.path().join("server.py");
    std::fs::write(&script, FASTMCP).unwrap();
    let port = free_port();
    let mut cmd = Command::new(python);
    cmd.arg(&script).arg(port.to_string());
    let (guard, _log) = start(cmd, "Uvicorn running on");
    Some((guard, format!("http://127.0.0.1:{port}/sse")))
}

#[test]
fn fastmcp_over_http_sse() {
    let dir = tempfile::tempdir().unwrap();
    let Some((_server, url)) = fastmcp_sse(&dir) else {
        return;
    };
    let ls = run(client(&["ls"], &url)).ok();
    assert!(ls.contains("note://today"), "{ls}");
    assert_eq!(
        run(client(
            &["cat", "note://today", "--protocol", "2024-11-05"],
            &url
        ))
        .ok(),
        "buy milk"
    );
    assert_eq!(
        run(client(&["cat", "note://day/monday"], &url)).ok(),
        "notes of monday"
    );
    let templates = run(client(&["templates"], &url)).ok();
    assert!(templates.contains("note://day/{day}"), "{templates}");
    let sum = run(client(
        &["call", "add", "--arg", "a:=20", "--arg", "b:=22"],
        &url,
    ))
    .ok();
    assert_eq!(sum.trim(), "42");
    // Its POST to the stream's URL is refused with 405 (the route is GET only).
    let info = run(client(&["info", "--json", "-v"], &url));
    assert_eq!(info.code, Some(0), "{}", info.stderr);
    assert!(
        info.stderr
            .contains("(HTTP 405 Method Not Allowed): falling back"),
        "{}",
        info.stderr
    );

    // A config entry of `"type": "sse"` (as VS Code and Cursor write one) goes to the stream
    // at once, without a POST to it first.
    let servers = dir.path().join("servers.json");
    std::fs::write(
        &servers,
        format!(r#"{{"mcpServers": {{"old": {{"type": "sse", "url": "{url}"}}}}}}"#),
    )
    .unwrap();
    let mut listed = Command::new(bin());
    listed.arg("servers").arg("--servers").arg(&servers);
    let listed = run(listed).ok();
    assert!(listed.contains(&format!("{url} (HTTP+SSE)")), "{listed}");
    let mut by_entry = Command::new(bin());
    by_entry
        .args(["cat", "note://today", "-v", "--server", "old", "--servers"])
        .arg(&servers);
    let by_entry = run(by_entry);
    assert_eq!(by_entry.code, Some(0), "{}", by_entry.stderr);
    assert_eq!(by_entry.text(), "buy milk");
    assert!(
        by_entry
            .stderr
            .contains("-- the entry's type is sse: the 2024-11-05 HTTP+SSE transport"),
        "{}",
        by_entry.stderr
    );
    assert!(
        !by_entry
            .stderr
            .lines()
            .any(|l| l.starts_with("-> POST ") && l.contains("/sse [")),
        "{}",
        by_entry.stderr
    );

    let watch = Lines::spawn(client(&["watch", "--json", "note://today"], &url));
    let line = watch
        .next_within(Duration::from_secs(10))
        .unwrap_or_else(|| panic!("no update; stderr: {}", watch.stderr()));
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["method"], "notifications/resources/updated", "{line}");
    assert_eq!(v["uri"], "note://today");
    assert_eq!(watch.stderr(), "watching 1 resource (Ctrl-C stops)\n");
    drop(watch);

    // The server dies after accepting the request (202) and before answering: the stream's
    // end (cut mid-chunk, as a killed process leaves it) is the connection's, named as such.
    let died = run(client(&["call", "die"], &url));
    assert_eq!(died.code, Some(3), "{}", died.stderr);
    assert!(
        died.stderr.starts_with("error: ")
            && died
                .stderr
                .contains("HTTP+SSE event stream (http://127.0.0.1:"),
        "{}",
        died.stderr
    );
}

/// What the scripted server does with each request it gets.
#[derive(Clone, Copy)]
enum Script {
    /// POST refused with this status; GET is an event stream whose endpoint event is
    /// `endpoint` (`{other}` replaced by the other listener's address), and posts to it are
    /// accepted and never answered.
    Refuse(u16, &'static str),
    /// POST refused (404); GET is an event stream that never names its endpoint.
    NoEndpoint,
    /// POST refused (404); GET names the endpoint, then starts an event of over 1 MiB.
    Huge,
    /// 404 to everything, as at a mistyped path.
    NotFound,
}

/// A running scripted server.
struct Scripted {
    /// Its event stream's URL (`/sse`).
    url: String,
    /// The requests it saw: `METHOD path` and the `authorization` header line.
    seen: Arc<Mutex<Vec<String>>>,
    /// Connections to a second listener, on another port (another origin).
    stolen: Arc<Mutex<u32>>,
}

/// A scripted loopback server (see [`Scripted`]).
fn scripted(script: Script) -> Scripted {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    let other_addr = other.local_addr().unwrap();
    let stolen = Arc::new(Mutex::new(0));
    let count = stolen.clone();
    std::thread::spawn(move || {
        for c in other.incoming() {
            if c.is_ok() {
                *count.lock().unwrap() += 1;
            }
        }
    });
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { break };
            let log = log.clone();
            std::thread::spawn(move || serve_one(conn, script, other_addr, &log));
        }
    });
    Scripted {
        url: format!("http://{addr}/sse"),
        seen,
        stolen,
    }
}

fn serve_one(
    mut conn: TcpStream,
    script: Script,
    other: std::net::SocketAddr,
    log: &Mutex<Vec<String>>,
) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    let mut length = 0;
    let mut auth = String::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).is_err() || h.trim().is_empty() {
            break;
        }
        let lower = h.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        if lower.starts_with("authorization:") {
            auth = h.trim().to_owned();
        }
    }
    let mut body = vec![0; length];
    let _ = reader.read_exact(&mut body);
    let mut words = request_line.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    log.lock().unwrap().push(format!("{method} {path} {auth}"));
    let (status, endpoint) = match script {
        Script::Refuse(status, endpoint) => (status, Some(endpoint)),
        Script::NoEndpoint => (404, None),
        Script::Huge => (404, Some("/message")),
        Script::NotFound => (404, None),
    };
    match (method, path) {
        ("POST", "/sse") => {
            let _ = write!(
                conn,
                "HTTP/1.1 {status} Refused\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
        ("GET", _) if matches!(script, Script::NotFound) => {
            let _ = write!(
                conn,
                "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nConnection: close\r\n\r\nno route."
            );
        }
        ("GET", "/sse") => {
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n: hello\n\n"
            );
            if let Some(endpoint) = endpoint {
                let endpoint = endpoint.replace("{other}", &other.to_string());
                let _ = write!(conn, "event: endpoint\ndata: {endpoint}\n\n");
            }
            if matches!(script, Script::Huge) {
                let _ = conn.write_all(b"event: message\ndata: ");
                let _ = conn.write_all(&vec![b'x'; 2 << 20]);
            }
            // The stream stays open, as a server's does, until the client leaves.
            let _ = conn.read(&mut [0; 1]);
        }
        _ => {
            let _ = write!(
                conn,
                "HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
    }
}

#[test]
fn a_cross_origin_endpoint_is_refused_before_anything_is_sent_there() {
    let Scripted { url, seen, stolen } = scripted(Script::Refuse(405, "http://{other}/steal"));
    let out = run(client(
        &["ls", "--header", "Authorization: Bearer s3cret-token"],
        &url,
    ));
    assert_eq!(out.code, Some(3), "{}", out.stderr);
    assert!(out.stderr.contains("another origin"), "{}", out.stderr);
    assert!(!out.stderr.contains("s3cret"), "{}", out.stderr);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        *stolen.lock().unwrap(),
        0,
        "nothing reached the other origin"
    );
    // The header went on the GET of the stream (same origin, where it was meant to go).
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.iter()
            .any(|r| r.starts_with("GET /sse") && r.contains("Bearer s3cret-token")),
        "{seen:?}"
    );
}

#[test]
fn only_400_404_405_fall_back() {
    for status in [401, 403, 500, 503] {
        let Scripted { url, seen, .. } = scripted(Script::Refuse(status, "/message"));
        let out = run(client(&["ls", "--timeout", "5"], &url));
        assert_eq!(out.code, Some(3), "HTTP {status}: {}", out.stderr);
        assert!(out.stderr.contains(&status.to_string()), "{}", out.stderr);
        let seen = seen.lock().unwrap().clone();
        assert!(
            seen.iter().all(|r| r.starts_with("POST /sse")),
            "HTTP {status} must not fall back: {seen:?}"
        );
    }
}

#[test]
fn a_server_that_never_answers_times_out_in_time() {
    // 400 falls back; the endpoint takes requests (202) and never answers them.
    let Scripted { url, seen, .. } = scripted(Script::Refuse(400, "message?sessionId=x"));
    let started = Instant::now();
    let out = run(client(&["ls", "--timeout", "1"], &url));
    let took = started.elapsed();
    assert_eq!(out.code, Some(6), "{}", out.stderr);
    assert!(
        out.stderr.contains("no answer to initialize"),
        "{}",
        out.stderr
    );
    assert!(took < Duration::from_millis(1500), "took {took:?}");
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.iter()
            .any(|r| r.starts_with("POST /message?sessionId=x")),
        "{seen:?}"
    );
}

#[test]
fn a_stream_without_an_endpoint_event_times_out_naming_it() {
    let Scripted { url, .. } = scripted(Script::NoEndpoint);
    let started = Instant::now();
    let out = run(client(&["ls", "--timeout", "1"], &url));
    assert_eq!(out.code, Some(6), "{}", out.stderr);
    assert!(out.stderr.contains("no endpoint event"), "{}", out.stderr);
    assert!(started.elapsed() < Duration::from_millis(1500));
}

#[test]
fn an_event_past_max_message_mib_ends_the_connection() {
    let Scripted { url, .. } = scripted(Script::Huge);
    let out = run(client(&["ls", "--max-message-mib", "1"], &url));
    assert_eq!(out.code, Some(3), "{}", out.stderr);
    assert!(
        out.stderr.contains("HTTP+SSE") && out.stderr.contains("--max-message-mib"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_url_refused_both_ways_says_so() {
    let Scripted { url, seen, .. } = scripted(Script::NotFound);
    let out = run(client(&["ls"], &url));
    assert_eq!(out.code, Some(3), "{}", out.stderr);
    assert!(
        out.stderr.starts_with(
            "error: the server speaks neither Streamable HTTP (it refused initialize with HTTP 404 Not Found) nor HTTP+SSE at this URL: "
        ) && out.stderr.contains("no route."),
        "{}",
        out.stderr
    );
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen.iter().filter(|r| r.starts_with("GET /sse")).count(),
        1,
        "{seen:?}"
    );
}
