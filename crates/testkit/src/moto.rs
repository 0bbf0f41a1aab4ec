//! A real S3-compatible server for tests: moto's `moto_server` on a loopback port, with
//! unsigned bucket creation and object writes (moto accepts them) over plain HTTP/1.1, so a
//! test needs no S3 client of its own. [`moto`] is one server shared by a test binary; a test
//! that stops, restarts or checks credentials starts one of its own ([`Moto::start`]).
//!
//! `moto_server` is found at `$MCPR_MOTO`, then the project venv (`.cache/venv/bin`), then
//! `PATH`. Without it a test says SKIPPED and passes, except under `CI=true`, where it fails.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A running moto server. Dropping it stops moto.
pub struct Moto {
    port: u16,
    bin: PathBuf,
    /// Whether requests must be signed by a known IAM user (moto's
    /// `INITIAL_NO_AUTH_ACTION_COUNT=0`); any test key is then refused.
    auth: bool,
    shell: Option<Shell>,
}

/// The `sh` that runs moto and reads its stdin: when the test process ends (however it ends)
/// the pipe closes and the shell stops moto. Dropping it closes the pipe and waits until the
/// shell has killed moto and waited for it, so the port is closed.
struct Shell(Child);

impl Drop for Shell {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.wait();
    }
}

impl Moto {
    /// moto `bin` on a free port of its own, ready.
    pub fn start(bin: PathBuf) -> Self {
        Self::start_fresh(bin, false)
    }

    /// [`start`](Self::start), with moto refusing every request not signed by a user it
    /// knows (so every test key is refused, as a real store refuses a revoked one).
    pub fn start_checking_credentials(bin: PathBuf) -> Self {
        Self::start_fresh(bin, true)
    }

    /// The port picked free can be taken by another server (of this test binary, another
    /// moto too) before moto binds it; moto then says so and exits, and a new port is tried.
    fn start_fresh(bin: PathBuf, auth: bool) -> Self {
        for _ in 0..3 {
            let port = free_port();
            if let Some(shell) = launch(&bin, port, auth) {
                return Self {
                    port,
                    bin,
                    auth,
                    shell: Some(shell),
                };
            }
        }
        panic!("moto_server did not get a port of its own in three tries");
    }

    /// moto `bin` on `port`, for a test that needs the port before the server (a mount set
    /// up while its store is down); a failure if another server took the port first.
    pub fn start_on(bin: PathBuf, port: u16) -> Self {
        let mut m = Self {
            port,
            bin,
            auth: false,
            shell: None,
        };
        m.restart();
        m
    }

    /// Start it again on the same port (after [`stop`](Self::stop)): moto keeps everything
    /// in memory, so a restarted server has no buckets. A failure if another server took
    /// the port while this one was down (the test's mounts cannot follow it elsewhere).
    pub fn restart(&mut self) {
        self.stop();
        let shell = launch(&self.bin, self.port, self.auth).unwrap_or_else(|| {
            panic!(
                "moto_server could not listen on port {}: another server took it",
                self.port
            )
        });
        self.shell = Some(shell);
    }

    /// Stop it; when this returns, moto has exited and its port is closed.
    pub fn stop(&mut self) {
        self.shell = None;
    }

    /// Its loopback port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The endpoint URL, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Create `bucket`, writable without signing: moto refuses an unsigned write over an
    /// object that exists unless the bucket's ACL lets anyone write.
    pub fn create_bucket(&self, bucket: &str) {
        self.request(
            "PUT",
            &format!("/{bucket}"),
            "x-amz-acl: public-read-write\r\n",
            b"",
        );
    }

    /// Put `body` at `key` of `bucket` (a new object or over one); `key` is sent as written,
    /// unnormalised (`a//b`, `a/./b` and `reports/` stay what they are).
    pub fn put(&self, bucket: &str, key: &str, body: &[u8]) {
        self.request("PUT", &format!("/{bucket}/{key}"), "", body);
    }

    /// One request with the extra header lines `headers` (each ending in CRLF).
    fn request(&self, method: &str, path: &str, headers: &str, body: &[u8]) {
        let answer = exchange(self.port, method, path, headers, body).expect("connect to moto");
        assert!(
            answer.starts_with("HTTP/1.1 200"),
            "moto {method} {path}: {}",
            answer.lines().next().unwrap_or("no answer")
        );
    }
}

/// A loopback port nothing listens on right now (something may by the time it is used).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// moto on `port`, once it listens there and has answered a bucket creation (its first
/// request loads the S3 backend); `None` when another server holds the port. That moto bound
/// the port is read from its own output, not from a connection: another server (another moto
/// too) answering there is no sign that this one does.
fn launch(bin: &Path, port: u16, auth: bool) -> Option<Shell> {
    static N: AtomicUsize = AtomicUsize::new(0);
    let log = std::env::temp_dir().join(format!(
        "mcpr-moto-{}-{}.log",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let script = format!(
        "'{}' -H 127.0.0.1 -p {port} >'{}' 2>&1 & m=$!; read _; kill $m; wait $m",
        bin.display(),
        log.display()
    );
    let mut cmd = Command::new("sh");
    if auth {
        cmd.env("INITIAL_NO_AUTH_ACTION_COUNT", "0");
    }
    let shell = Shell(
        cmd.args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start moto_server"),
    );
    // werkzeug's lines: this after binding the port, or "Address already in use" and exit.
    let listening = format!("Running on http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let bound = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains(&listening) {
            break true;
        }
        if text.contains("in use") {
            break false;
        }
        if Instant::now() > deadline {
            let _ = std::fs::remove_file(&log);
            panic!("moto_server did not listen on port {port} within 30 s: {text}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // moto keeps writing its request log into the unlinked file, freed when it exits.
    let _ = std::fs::remove_file(&log);
    if !bound {
        return None;
    }
    // With credentials checked the unsigned creation is refused, an answer all the same.
    let probe = format!("/mcpr-ready-{port}");
    while Instant::now() < deadline {
        match exchange(port, "PUT", &probe, "", b"") {
            Ok(answer) if answer.starts_with("HTTP/1.1 ") => return Some(shell),
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    panic!("moto_server listened on port {port} but answered no request within 30 s");
}

/// One HTTP/1.1 request to `127.0.0.1:port`, the answer whole (the connection is closed).
fn exchange(
    port: u16,
    method: &str,
    path: &str,
    headers: &str,
    body: &[u8],
) -> std::io::Result<String> {
    let host = format!("127.0.0.1:{port}");
    let mut s = TcpStream::connect(&host)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    Ok(answer)
}

/// Where `moto_server` is, if anywhere.
fn binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("MCPR_MOTO") {
        return Some(PathBuf::from(p));
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.cache/venv/bin/moto_server");
    if venv.exists() {
        return Some(venv);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("moto_server"))
        .find(|p| p.exists())
}

/// The `moto_server` binary for a test's own [`Moto`]; `None` (after saying SKIPPED) when
/// moto is not installed, a panic instead under `CI=true`.
pub fn binary_or_skip() -> Option<PathBuf> {
    let bin = binary();
    if bin.is_none() {
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "moto_server is required under CI=true: install it with `.cache/venv/bin/pip install -r tests/e2e/requirements.txt` or set MCPR_MOTO"
        );
        eprintln!("SKIPPED: moto_server not found (MCPR_MOTO, .cache/venv/bin, PATH)");
    }
    bin
}

/// The shared moto server of this test binary; `None` as [`binary_or_skip`] says.
pub fn moto() -> Option<&'static Moto> {
    static MOTO: OnceLock<Option<Moto>> = OnceLock::new();
    MOTO.get_or_init(|| binary_or_skip().map(Moto::start))
        .as_ref()
}
