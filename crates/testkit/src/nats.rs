//! A NATS server with JetStream of a test's own, on a random loopback port with its own store
//! directory, so a test can stop and restart it without touching the machine's shared one.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// See the module docs. Dropping it kills the server.
pub struct NatsServer {
    bin: PathBuf,
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl NatsServer {
    /// A server ready to [`start`](Self::start), or `None` (after saying SKIPPED) when no
    /// `nats-server` is installed; under `CI=true` a missing server is a failure instead.
    /// `MCPR_NATS_SERVER` names the binary when it is not in the usual places.
    pub fn find() -> Option<Self> {
        let bin = std::env::var_os("MCPR_NATS_SERVER")
            .map(PathBuf::from)
            .into_iter()
            .chain(
                [
                    "/usr/sbin/nats-server",
                    "/usr/bin/nats-server",
                    "/usr/local/bin/nats-server",
                ]
                .map(PathBuf::from),
            )
            .find(|p| p.exists());
        let Some(bin) = bin else {
            assert!(
                !std::env::var("CI").is_ok_and(|v| v == "true"),
                "nats-server is required under CI=true: install it (apt-get install nats-server) or set MCPR_NATS_SERVER"
            );
            eprintln!("SKIPPED: no nats-server found (set MCPR_NATS_SERVER)");
            return None;
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        Some(Self {
            bin,
            port,
            dir: tempfile::tempdir().expect("a temporary directory"),
            child: None,
        })
    }

    /// [`find`](Self::find), then [`start`](Self::start).
    pub fn started() -> Option<Self> {
        let mut s = Self::find()?;
        s.start();
        Some(s)
    }

    /// Start the server (again, on the same port and store) and wait until it listens.
    pub fn start(&mut self) {
        self.stop();
        let child = Command::new(&self.bin)
            .args([
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-sd",
            ])
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server starts");
        // Owned at once: killed and waited for however the test ends.
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "nats-server did not listen on {} within 10 s",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kill the server (a crash, as far as its clients can tell).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The `nats-server` binary found, for a test that starts it with a command line of its
    /// own (a documented one, with this port and store).
    pub fn bin(&self) -> &std::path::Path {
        &self.bin
    }

    /// Its JetStream store directory (`-sd`), removed with it.
    pub fn store_dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// Its loopback port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.stop();
    }
}
