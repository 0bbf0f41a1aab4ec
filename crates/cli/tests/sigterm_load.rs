//! SIGTERM under load over the built binary (issue #19 section 4): sixty reads in flight over
//! HTTP against an api mount whose upstream is slow (half of them answered a second after
//! the signal, within the grace) or never answers (the other half), some on the direct
//! stateless path, some through rmcp. Reads that can finish within `shutdown_grace_ms`
//! finish with their contents, the rest answer a JSON-RPC error saying the server is
//! shutting down (never a hang, never a stream cut with no answer), a request arriving
//! after the signal is refused, and the process exits 0 within the grace plus the moment it
//! gives answers and SSE streams to close.
//!
//! Raw HTTP on loopback, a thread per request; every wait has a deadline.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const MODERN: &str = "2026-07-28";
const LEGACY: &str = "2025-11-25";
/// `[http] shutdown_grace_ms` in the test's config.
const GRACE: Duration = Duration::from_secs(4);
/// Reads of each kind in flight at the signal.
const EACH: usize = 30;

/// The upstream: `/slow/N` is answered once `release` is set, `/stuck/N` never (the
/// connection is held until the test ends). Counts the requests that arrived of each kind.
struct Upstream {
    port: u16,
    release: Arc<AtomicBool>,
    slow: Arc<AtomicUsize>,
    stuck: Arc<AtomicUsize>,
    done: Arc<AtomicBool>,
}

impl Upstream {
    fn start() -> Self {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let up = Self {
            port: l.local_addr().unwrap().port(),
            release: Arc::default(),
            slow: Arc::default(),
            stuck: Arc::default(),
            done: Arc::default(),
        };
        let (release, slow, stuck, done) = (
            up.release.clone(),
            up.slow.clone(),
            up.stuck.clone(),
            up.done.clone(),
        );
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { return };
                let (release, slow, stuck, done) =
                    (release.clone(), slow.clone(), stuck.clone(), done.clone());
                std::thread::spawn(move || {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 2048];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let line = String::from_utf8_lossy(&head)
                        .lines()
                        .next()
                        .unwrap_or("")
                        .to_owned();
                    let path = line.split(' ').nth(1).unwrap_or("").to_owned();
                    let held = path.starts_with("/stuck/");
                    if held { &stuck } else { &slow }.fetch_add(1, SeqCst);
                    while !done.load(SeqCst) && (held || !release.load(SeqCst)) {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    if held {
                        return;
                    }
                    let body = json!({ "path": path }).to_string();
                    let _ = write!(
                        s,
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                });
            }
        });
        up
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.done.store(true, SeqCst);
    }
}

/// The binary serving the api mount over HTTP; killed if the test ends before it exits.
struct Server {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start(upstream: u16) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("c.toml");
        std::fs::write(
            &cfg,
            format!(
                r#"[server]
request_timeout_ms = 60000

[http]
shutdown_grace_ms = {grace}

[[mount]]
kind = "api"
name = "up"
allow_private = true
timeout_ms = 60000
default_ttl_ms = 0

[[mount.endpoint]]
uri = "api://up/slow/{{n}}"
url = "http://127.0.0.1:{upstream}/slow/{{n}}"
name = "slow"
params.n = {{ pattern = "^[0-9]+$" }}

[[mount.endpoint]]
uri = "api://up/stuck/{{n}}"
url = "http://127.0.0.1:{upstream}/stuck/{{n}}"
name = "stuck"
params.n = {{ pattern = "^[0-9]+$" }}
"#,
                grace = GRACE.as_millis()
            ),
        )
        .unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let child = Command::new(env!("CARGO_BIN_EXE_mcp-resources"))
            .args(["serve", "--log-level", "error", "--http", &addr, "--config"])
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
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
            _dir: dir,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What became of one request.
#[derive(Debug)]
enum Outcome {
    /// An HTTP answer: its status and body.
    Answer(u16, String),
    /// No answer: the connection was refused, closed or reset before one.
    Cut(String),
}

/// One POST to `/mcp` on a fresh connection with `headers` (each ending in CRLF).
fn post(addr: &str, headers: &str, body: &str) -> Outcome {
    let mut c = match TcpStream::connect(addr) {
        Ok(c) => c,
        Err(e) => return Outcome::Cut(format!("connect: {e}")),
    };
    // Longer than the grace and the exit: a request still waiting then is a hang.
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let req = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    if let Err(e) = c.write_all(req.as_bytes()) {
        return Outcome::Cut(format!("write: {e}"));
    }
    let mut raw = Vec::new();
    if let Err(e) = c.read_to_end(&mut raw) {
        assert!(
            !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "a request hung past the shutdown: {body}"
        );
        if raw.is_empty() {
            return Outcome::Cut(format!("read: {e}"));
        }
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    match text.split(' ').nth(1).and_then(|s| s.parse().ok()) {
        Some(status) => Outcome::Answer(status, text),
        None => Outcome::Cut(format!("no HTTP answer: {text:?}")),
    }
}

fn read_body(uri: &str, meta: bool) -> String {
    let mut params = json!({ "uri": uri });
    if meta {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
        });
    }
    json!({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": params}).to_string()
}

/// A stateless `resources/read` of `uri` (the 2026-07-28 era), which the server answers on
/// its direct path.
fn read_stateless(addr: &str, uri: &str) -> Outcome {
    let headers = format!(
        "MCP-Protocol-Version: {MODERN}\r\nMcp-Method: resources/read\r\nMcp-Name: {uri}\r\n"
    );
    post(addr, &headers, &read_body(uri, true))
}

/// A `resources/read` of `uri` in a legacy session of its own (initialize, initialized,
/// read), which rmcp answers.
fn read_in_session(addr: &str, uri: &str) -> Outcome {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": LEGACY, "capabilities": {},
        "clientInfo": {"name": "sigterm-load", "version": "0"}}})
    .to_string();
    let Outcome::Answer(200, text) = post(addr, "", &init) else {
        panic!("initialize failed before the signal");
    };
    let session = text
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("mcp-session-id")
                .then(|| v.trim().to_owned())
        })
        .expect("a session id");
    let headers = format!("MCP-Protocol-Version: {LEGACY}\r\nMcp-Session-Id: {session}\r\n");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    let Outcome::Answer(202, _) = post(addr, &headers, &initialized) else {
        panic!("notifications/initialized was not accepted");
    };
    post(addr, &headers, &read_body(uri, false))
}

/// The JSON-RPC message in an HTTP answer (a JSON body or the first SSE `data:` event).
fn message(text: &str) -> Option<Value> {
    let (_, body) = text.split_once("\r\n\r\n")?;
    body.lines()
        .map(|l| l.strip_prefix("data:").unwrap_or(l).trim())
        .find(|l| l.starts_with('{'))
        .and_then(|l| serde_json::from_str(l).ok())
}

#[test]
fn sigterm_with_sixty_reads_in_flight() {
    let up = Upstream::start();
    let mut srv = Server::start(up.port);
    let (tx, rx) = mpsc::channel();
    for i in 0..EACH * 2 {
        let (tx, addr) = (tx.clone(), srv.addr.clone());
        std::thread::spawn(move || {
            let kind = if i % 2 == 0 { "slow" } else { "stuck" };
            let uri = format!("api://up/{kind}/{i}");
            let outcome = if i % 4 < 2 {
                read_stateless(&addr, &uri)
            } else {
                read_in_session(&addr, &uri)
            };
            let _ = tx.send((kind, i, outcome));
        });
    }
    drop(tx);
    let deadline = Instant::now() + Duration::from_secs(15);
    while up.slow.load(SeqCst) < EACH || up.stuck.load(SeqCst) < EACH {
        assert!(
            Instant::now() < deadline,
            "not all reads reached the upstream: {} slow, {} stuck; answered before: {:?}",
            up.slow.load(SeqCst),
            up.stuck.load(SeqCst),
            rx.try_iter().take(3).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let sigterm = Instant::now();
    let ok = Command::new("kill")
        .args(["-TERM", &srv.child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -TERM failed");
    // A request after the signal is refused: 503 or no connection at all.
    std::thread::sleep(Duration::from_millis(300));
    match read_stateless(&srv.addr, "api://up/slow/999") {
        Outcome::Cut(_) => {}
        Outcome::Answer(status, text) => assert_eq!(
            status, 503,
            "a request after SIGTERM was not refused: {text}"
        ),
    }
    assert_eq!(
        up.slow.load(SeqCst),
        EACH,
        "a refused request reached the upstream"
    );
    // The slow upstream answers a second after the signal: well within the grace.
    std::thread::sleep(Duration::from_millis(700));
    up.release.store(true, SeqCst);

    let exited = loop {
        if let Some(status) = srv.child.try_wait().unwrap() {
            break (status, sigterm.elapsed());
        }
        assert!(
            sigterm.elapsed() < GRACE + Duration::from_secs(10),
            "the process had not exited {:?} after SIGTERM (grace {GRACE:?})",
            sigterm.elapsed()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        exited.0.success(),
        "exit status after SIGTERM: {:?}",
        exited.0
    );
    // The stuck reads held the shutdown for the whole grace, and no longer: then at most
    // half a second for their answers, a second for streams to close and the runtime's
    // 200 ms; the bound leaves margin for a loaded machine, but is far from a hang.
    assert!(
        exited.1 >= GRACE,
        "exited {:?} after SIGTERM, before the grace of {GRACE:?} with reads in flight",
        exited.1
    );
    assert!(
        exited.1 < GRACE + Duration::from_secs(3),
        "exited {:?} after SIGTERM with a grace of {GRACE:?}",
        exited.1
    );

    let (mut finished, mut cut) = (0, 0);
    for (kind, i, outcome) in rx.iter() {
        match (kind, outcome) {
            ("slow", Outcome::Answer(200, text)) => {
                let m = message(&text).unwrap_or_else(|| panic!("slow {i}: no message in {text}"));
                let contents = &m["result"]["contents"][0];
                assert_eq!(contents["uri"], json!(format!("api://up/slow/{i}")), "{m}");
                assert!(
                    contents["text"]
                        .as_str()
                        .is_some_and(|t| t.contains(&format!("/slow/{i}"))),
                    "slow {i}: {m}"
                );
                finished += 1;
            }
            ("slow", other) => panic!("slow {i}, answerable within the grace, got {other:?}"),
            (_, Outcome::Answer(_, text)) => {
                // Still running when the grace ended: a JSON-RPC error that says why.
                let m = message(&text).unwrap_or_else(|| panic!("stuck {i}: no answer in {text}"));
                assert_eq!(m["id"], json!(1), "{m}");
                assert!(
                    m["error"]["message"]
                        .as_str()
                        .is_some_and(|t| t.contains("shutting down")),
                    "stuck {i}: {m}"
                );
                cut += 1;
            }
            (_, Outcome::Cut(why)) => panic!("stuck {i}: no answer at all ({why})"),
        }
    }
    assert_eq!((finished, cut), (EACH, EACH), "every read answered once");
    drop(up);
}
