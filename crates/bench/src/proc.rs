//! Child processes under test: spawning, a newline-delimited JSON-RPC pipe client, a
//! watchdog so a wedged server cannot hang the run, and memory from `/proc/PID/status`.

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// `VmRSS` and `VmHWM` (peak) of a process, in bytes.
pub fn rss(pid: u32) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Kills a process when a deadline passes, unless disarmed first: a server that stops
/// answering turns into an error (EOF on its pipe) instead of a hung benchmark.
pub struct Watchdog(Arc<AtomicBool>);

impl Watchdog {
    /// Kill `pid` after `limit`.
    pub fn arm(pid: u32, limit: Duration) -> Self {
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            while start.elapsed() < limit {
                if flag.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            if !flag.load(Ordering::Relaxed) {
                eprintln!("bench: process {pid} exceeded {limit:?}; killing it");
                let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            }
        });
        Self(done)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A server speaking newline-delimited JSON-RPC on its stdin/stdout.
pub struct StdioServer {
    child: Child,
    /// `None` once closed ([`StdioServer::end`]).
    stdin: Option<BufWriter<ChildStdin>>,
    /// `None` once handed to a reader thread (`take_reader`).
    stdout: Option<BufReader<ChildStdout>>,
    line: Vec<u8>,
}

/// Whether a line is a notification or a server-to-client request rather than a response
/// to us. Every server puts `method` before any large payload, so the head suffices.
fn is_response(line: &[u8]) -> bool {
    let head = &line[..line.len().min(96)];
    !head.windows(9).any(|w| w == b"\"method\":")
}

impl StdioServer {
    /// Start `cmd` with piped stdin/stdout; its stderr is discarded unless `keep_stderr`.
    pub fn spawn(cmd: &mut Command, keep_stderr: bool) -> Result<Self, String> {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(if keep_stderr {
                Stdio::inherit()
            } else {
                Stdio::null()
            });
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
        let stdin = BufWriter::with_capacity(64 * 1024, child.stdin.take().expect("piped"));
        let stdout = BufReader::with_capacity(1 << 20, child.stdout.take().expect("piped"));
        Ok(Self {
            child,
            stdin: Some(stdin),
            stdout: Some(stdout),
            line: Vec::with_capacity(1 << 16),
        })
    }

    /// The process id (for memory readings and the watchdog).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Queue one message (a newline is appended); it leaves on `flush`.
    pub fn send(&mut self, msg: &[u8]) -> Result<(), String> {
        let stdin = self.stdin.as_mut().ok_or("the server's input is closed")?;
        stdin
            .write_all(msg)
            .and_then(|()| stdin.write_all(b"\n"))
            .map_err(|e| format!("write to server: {e}"))
    }

    /// Send what is queued.
    pub fn flush(&mut self) -> Result<(), String> {
        self.stdin
            .as_mut()
            .ok_or("the server's input is closed")?
            .flush()
            .map_err(|e| format!("write to server: {e}"))
    }

    /// Close the server's input and give it `within` to exit on its own (a profiler around
    /// it then writes its report), after which it is killed.
    pub fn end(mut self, within: Duration) {
        self.stdin = None;
        let deadline = std::time::Instant::now() + within;
        while std::time::Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Queue and send one message.
    pub fn send_now(&mut self, msg: &[u8]) -> Result<(), String> {
        self.send(msg)?;
        self.flush()
    }

    /// Hand the server's stdout to someone else (a thread stamping arrival times).
    pub fn take_reader(&mut self) -> BufReader<ChildStdout> {
        self.stdout.take().expect("stdout taken once")
    }

    /// The next line, whatever it is.
    pub fn recv_line(&mut self) -> Result<&[u8], String> {
        self.line.clear();
        let n = self
            .stdout
            .as_mut()
            .ok_or("stdout was handed to a reader thread")?
            .read_until(b'\n', &mut self.line)
            .map_err(|e| format!("read from server: {e}"))?;
        if n == 0 {
            return Err("the server closed its stdout (exited?)".into());
        }
        Ok(&self.line)
    }

    /// The next response, skipping notifications and server requests.
    pub fn recv_response(&mut self) -> Result<&[u8], String> {
        loop {
            self.recv_line()?;
            if is_response(&self.line) {
                return Ok(&self.line);
            }
        }
    }

    /// Send one request and wait for its response, parsed.
    pub fn call(&mut self, msg: &str) -> Result<serde_json::Value, String> {
        self.send_now(msg.as_bytes())?;
        let line = self.recv_response()?;
        let v: serde_json::Value = serde_json::from_slice(line)
            .map_err(|e| format!("bad JSON from server: {e}: {}", preview(line)))?;
        if let Some(err) = v.get("error") {
            return Err(format!("server answered an error: {err}"));
        }
        Ok(v)
    }

    /// The legacy handshake: `initialize` then `notifications/initialized`.
    pub fn initialize(&mut self) -> Result<(), String> {
        self.call(INITIALIZE)?;
        self.send_now(INITIALIZED.as_bytes())
    }

    /// Memory of the server process.
    pub fn rss(&self) -> (u64, u64) {
        rss(self.pid())
    }
}

impl Drop for StdioServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The legacy-era `initialize` request (no client capabilities: no roots, no sampling).
pub const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"mcpr-bench","version":"0"}}}"#;
/// Completes the legacy handshake.
pub const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

/// The first bytes of a message, for error messages.
pub fn preview(b: &[u8]) -> String {
    String::from_utf8_lossy(&b[..b.len().min(300)]).into_owned()
}
