//! A real S3-compatible server for the tests: moto's `moto_server` on loopback, one per test
//! binary (shared, random port), unique bucket names per test.
//!
//! `moto_server` is found at `$MCPR_MOTO`, then the project venv (`.cache/venv/bin`, where
//! `cargo xtask test` installs it from `tests/e2e/requirements.txt`), then `PATH`. Without it a
//! test says so and passes, except under `CI=true`, where it is a failure.

#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use mcpr_provider_s3::S3Config;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path;
use object_store::{ObjectStoreExt as _, PutPayload};

/// Where `moto_server` is, if anywhere.
pub fn moto_binary() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("MCPR_MOTO") {
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

/// A moto server process. Started under `sh` that reads its stdin: when the test process
/// ends (however it ends) the pipe closes and the shell stops moto, so no server outlives
/// the tests.
pub struct Moto {
    pub port: u16,
    child: Option<Child>,
    bin: PathBuf,
    /// Whether requests must be signed by a known IAM user (moto's
    /// `INITIAL_NO_AUTH_ACTION_COUNT=0`); the tests' keys are then refused.
    pub auth: bool,
}

impl Moto {
    /// Start moto on a free port and wait until it answers.
    pub fn start(bin: PathBuf) -> Self {
        Self::start_on(bin, free_port())
    }

    /// Start moto on `port`.
    pub fn start_on(bin: PathBuf, port: u16) -> Self {
        Self::start_with(bin, port, false)
    }

    /// Start moto on `port`, checking credentials when `auth`.
    pub fn start_with(bin: PathBuf, port: u16, auth: bool) -> Self {
        let mut m = Self {
            port,
            child: None,
            bin,
            auth,
        };
        m.restart();
        m
    }

    /// Start it (again) on the same port: moto keeps everything in memory, so a restarted
    /// server has no buckets.
    pub fn restart(&mut self) {
        let script = format!(
            "'{}' -H 127.0.0.1 -p {} >/dev/null 2>&1 & m=$!; read _; kill $m",
            self.bin.display(),
            self.port
        );
        let mut cmd = Command::new("sh");
        if self.auth {
            cmd.env("INITIAL_NO_AUTH_ACTION_COUNT", "0");
        }
        let child = cmd
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start moto_server");
        self.child = Some(child);
        let addr: SocketAddr = ([127, 0, 0, 1], self.port).into();
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            assert!(
                Instant::now() < deadline,
                "moto_server did not listen on {addr} within 30 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stop it and wait until the port is closed.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // Closing stdin makes the shell kill moto.
            drop(c.stdin.take());
            let _ = c.wait();
        }
        let addr: SocketAddr = ([127, 0, 0, 1], self.port).into();
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
            assert!(Instant::now() < deadline, "moto_server did not stop");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The shared server of this test binary; `None` (and a note) when moto is not installed
/// outside CI.
pub fn moto() -> Option<&'static Moto> {
    static MOTO: OnceLock<Option<Moto>> = OnceLock::new();
    MOTO.get_or_init(|| moto_bin_or_skip().map(Moto::start))
        .as_ref()
}

/// The moto binary, or `None` with a note (a panic under CI=true).
pub fn moto_bin_or_skip() -> Option<PathBuf> {
    match moto_binary() {
        Some(b) => Some(b),
        None if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!(
                "moto_server is required under CI=true: install it with `.cache/venv/bin/pip install -r tests/e2e/requirements.txt` or set MCPR_MOTO"
            )
        }
        None => {
            eprintln!(
                "SKIPPED: moto_server not found (MCPR_MOTO, .cache/venv/bin, PATH); install it with `pip install -r tests/e2e/requirements.txt`"
            );
            None
        }
    }
}

/// A bucket name no other test uses.
pub fn unique_bucket(tag: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "t-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// Test credentials: moto accepts any.
pub const KEY_ID: &str = "AKIAMOTOTESTKEY12345";
pub const SECRET: &str = "motoSecretKeyThatMustNeverBeShown0000";

/// Create `bucket` on the server (moto accepts unsigned requests).
pub async fn create_bucket(endpoint: &str, bucket: &str) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let r = reqwest::Client::new()
        .put(format!("{endpoint}/{bucket}"))
        .send()
        .await
        .expect("create bucket");
    assert!(
        r.status().is_success(),
        "create bucket {bucket}: {}",
        r.status()
    );
}

/// A writing client for the tests (the provider itself never writes).
pub fn writer(endpoint: &str, bucket: &str) -> AmazonS3 {
    let _ = rustls::crypto::ring::default_provider().install_default();
    AmazonS3Builder::new()
        .with_endpoint(endpoint)
        .with_allow_http(true)
        .with_bucket_name(bucket)
        .with_region("us-east-1")
        .with_access_key_id(KEY_ID)
        .with_secret_access_key(SECRET)
        .build()
        .unwrap()
}

/// Put one object.
pub async fn put(s: &AmazonS3, key: &str, bytes: &[u8]) {
    s.put(&Path::parse(key).unwrap(), PutPayload::from(bytes.to_vec()))
        .await
        .unwrap_or_else(|e| panic!("put {key}: {e}"));
}

/// Put many objects, 32 at a time.
pub async fn put_many(s: &AmazonS3, objects: Vec<(String, Vec<u8>)>) {
    futures::stream::iter(objects)
        .map(|(k, b)| async move { put(s, &k, &b).await })
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
}

/// Delete one object.
pub async fn delete(s: &AmazonS3, key: &str) {
    s.delete(&Path::parse(key).unwrap()).await.unwrap();
}

/// A mount of `bucket` on `endpoint` with a short poll interval.
pub fn config(endpoint: &str, bucket: &str) -> S3Config {
    let mut c = S3Config::new(bucket, "us-east-1");
    c.endpoint = Some(endpoint.to_owned());
    c.allow_http = true;
    c.access_key_id = Some(KEY_ID.into());
    c.secret_access_key = Some(SECRET.into());
    c.poll_interval = Duration::from_millis(150);
    c
}

/// Percent-encode a key like the provider (unreserved and `/` stay).
pub fn enc(key: &str) -> String {
    let mut out = String::new();
    for &b in key.as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Put `body` at the key whose request path (after `/{bucket}/`) is `raw_path`, sent as
/// written: keys object_store cannot write (`a//b`, `a/./b`, `reports/`) and that a URL
/// library would normalise. moto accepts unsigned requests.
pub fn put_raw(endpoint: &str, bucket: &str, raw_path: &str, body: &[u8]) {
    use std::io::{Read as _, Write as _};
    let host = endpoint.trim_start_matches("http://");
    let mut s = TcpStream::connect(host).expect("connect to moto");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = format!(
        "PUT /{bucket}/{raw_path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "raw put {raw_path}: {}",
        answer.lines().next().unwrap_or("")
    );
}

/// Put one object with a stored Content-Type.
pub async fn put_typed(s: &AmazonS3, key: &str, bytes: &[u8], content_type: &str) {
    use object_store::{Attribute, Attributes, ObjectStore as _, PutOptions};
    let opts = PutOptions {
        attributes: Attributes::from_iter([(Attribute::ContentType, content_type.to_owned())]),
        ..Default::default()
    };
    s.put_opts(
        &Path::parse(key).unwrap(),
        PutPayload::from(bytes.to_vec()),
        opts,
    )
    .await
    .unwrap_or_else(|e| panic!("put {key}: {e}"));
}
