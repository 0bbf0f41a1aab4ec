//! A real S3-compatible server for tests outside the s3 provider's own (the skills checks
//! over an s3 mount): moto's `moto_server` on a random loopback port, one per test binary,
//! with unsigned bucket creation and object writes (moto accepts them) over plain HTTP/1.1,
//! so a test needs no S3 client of its own.
//!
//! `moto_server` is found at `$MCPR_MOTO`, then the project venv (`.cache/venv/bin`), then
//! `PATH`. Without it a test says SKIPPED and passes, except under `CI=true`, where it fails.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A running moto server. Started under `sh` reading its stdin: when the test process
/// ends (however it ends) the pipe closes and the shell stops moto.
pub struct Moto {
    port: u16,
    _child: Child,
}

impl Moto {
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

    /// Put `body` at `key` of `bucket` (a new object or over one); `key` is sent as written
    /// (keep it to URL-safe characters and `/`).
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

fn start(bin: PathBuf) -> Moto {
    // The port is free when picked and taken by moto a moment later; another server of the
    // same test binary may take it first (a listener that answers, then goes). So moto is
    // ready only once an S3 request is answered as moto answers it; else a new port.
    for _ in 0..3 {
        if let Some(moto) = try_start(&bin) {
            return moto;
        }
    }
    panic!("moto_server did not answer on a port of its own in three tries");
}

/// moto on a fresh port, once it answers a bucket creation; `None` when something else
/// answered on that port or nothing did within 30 s.
fn try_start(bin: &std::path::Path) -> Option<Moto> {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port();
    let script = format!(
        "'{}' -H 127.0.0.1 -p {port} >/dev/null 2>&1 & m=$!; read _; kill $m",
        bin.display()
    );
    let child = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start moto_server");
    let deadline = Instant::now() + Duration::from_secs(30);
    let probe = format!("/mcpr-ready-{port}");
    while Instant::now() < deadline {
        match exchange(port, "PUT", &probe, "", b"") {
            Ok(answer) if answer.starts_with("HTTP/1.1 200") => {
                return Some(Moto {
                    port,
                    _child: child,
                });
            }
            // Something that is not moto answered: the port was taken first.
            Ok(_) => break,
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    // Dropping the child closes its stdin: the shell stops this moto, if it started.
    drop(child);
    None
}

/// The shared moto server of this test binary; `None` (after saying SKIPPED) when moto is
/// not installed, a panic instead under `CI=true`.
pub fn moto() -> Option<&'static Moto> {
    static MOTO: OnceLock<Option<Moto>> = OnceLock::new();
    MOTO.get_or_init(|| match binary() {
        Some(bin) => Some(start(bin)),
        None => {
            assert!(
                !std::env::var("CI").is_ok_and(|v| v == "true"),
                "moto_server is required under CI=true: install it with `.cache/venv/bin/pip install -r tests/e2e/requirements.txt` or set MCPR_MOTO"
            );
            eprintln!("SKIPPED: moto_server not found (MCPR_MOTO, .cache/venv/bin, PATH)");
            None
        }
    })
    .as_ref()
}
