//! What the cluster tests share (cluster.rs, cluster_streams.rs, gateway_cluster.rs): a
//! replica (the built binary serving HTTP on a loopback port), a free port, the TLS provider
//! reqwest needs, a stream's JSON-RPC messages collected in the background, and waiting for a
//! condition with a deadline.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use serde_json::Value;

/// reqwest is built without a default TLS provider; the workspace uses ring.
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One replica: the built binary serving `config` over HTTP on a loopback port, its log in a
/// file; killed when dropped, its log's tail printed when the test failed.
pub struct Replica {
    child: Option<Child>,
    pub base: String,
    pub log: PathBuf,
}

impl Replica {
    pub fn start(config: &Path, log: PathBuf) -> Self {
        Self::start_binary(Path::new(env!("CARGO_BIN_EXE_mcp-resources")), config, log)
    }

    /// [`Replica::start`] of another build of the binary (an older release's).
    pub fn start_binary(bin: &Path, config: &Path, log: PathBuf) -> Self {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
        Self::spawn(Command::new(bin), addr, &[], config, log)
    }

    /// The built binary run in network namespace `ns` (`ip netns exec`, which execs it, so
    /// the child is the server), serving HTTP on `addr` there, reached from this namespace
    /// over a link of the test's. That address is not loopback: the server is told the
    /// link is private (`--insecure-no-auth`), and `config` must allow the address as a
    /// `Host`.
    pub fn start_in_namespace(
        ns: &str,
        addr: std::net::SocketAddr,
        config: &Path,
        log: PathBuf,
    ) -> Self {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_mcp-resources")]);
        Self::spawn(cmd, addr, &["--insecure-no-auth"], config, log)
    }

    /// `cmd serve` on `addr` with `extra` arguments, once it accepts connections.
    fn spawn(
        mut cmd: Command,
        addr: std::net::SocketAddr,
        extra: &[&str],
        config: &Path,
        log: PathBuf,
    ) -> Self {
        let child = cmd
            .args(["serve", "--log-level", "info", "--http"])
            .arg(addr.to_string())
            .args(extra)
            .arg("--config")
            .arg(config)
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "{} did not start", log.display());
            std::thread::sleep(Duration::from_millis(20));
        }
        Self {
            child: Some(child),
            base: format!("http://{addr}"),
            log,
        }
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    pub async fn get(&self, path: &str) -> (u16, String) {
        // No proxy: a replica may be on a link of the test's (see `start_in_namespace`).
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        let r = http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    /// A legacy (2025-11-25) POST of `body` here, in session `sid` when given.
    pub async fn legacy_post(
        &self,
        http: &reqwest::Client,
        sid: Option<&str>,
        body: Value,
    ) -> reqwest::Response {
        let mut b = http
            .post(self.url())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25");
        if let Some(s) = sid {
            b = b.header("mcp-session-id", s);
        }
        b.body(body.to_string()).send().await.unwrap()
    }

    /// A legacy session initialized here (`initialize`, then `notifications/initialized`):
    /// its id.
    pub async fn legacy_initialize(&self, http: &reqwest::Client) -> String {
        let resp = self
            .legacy_post(
                http,
                None,
                serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                    "protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"}}}),
            )
            .await;
        let sid = resp.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let _ = resp.text().await;
        let resp = self
            .legacy_post(
                http,
                Some(&sid),
                serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            )
            .await;
        assert_eq!(resp.status(), 202);
        sid
    }

    /// Legacy session `sid`'s GET stream here, its messages collected.
    pub async fn legacy_stream(&self, http: &reqwest::Client, sid: &str) -> Heard {
        self.legacy_resume(http, sid, None).await
    }

    /// Legacy session `sid`'s GET stream here, resumed after `last_event_id` when given,
    /// its messages collected.
    pub async fn legacy_resume(
        &self,
        http: &reqwest::Client,
        sid: &str,
        last_event_id: Option<&str>,
    ) -> Heard {
        let mut get = http
            .get(self.url())
            .header("accept", "text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .header("mcp-session-id", sid);
        if let Some(id) = last_event_id {
            get = get.header("last-event-id", id);
        }
        let get = get.send().await.unwrap();
        assert_eq!(get.status(), 200);
        Heard::follow(get)
    }

    /// A 2026-07-28 `subscriptions/listen` stream for `uris`, its messages collected; waits
    /// for the acknowledgment.
    pub async fn listen(&self, http: &reqwest::Client, uris: &[&str]) -> Heard {
        self.listen_to(http, serde_json::json!({"resourceSubscriptions": uris}))
            .await
    }

    /// A 2026-07-28 `subscriptions/listen` stream asking for `notifications` (such as
    /// `{"resourcesListChanged": true}`), its messages collected; waits for the
    /// acknowledgment.
    pub async fn listen_to(&self, http: &reqwest::Client, notifications: Value) -> Heard {
        let meta = serde_json::json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}});
        let resp = http
            .post(self.url())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "subscriptions/listen")
            .body(
                serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen",
                    "params": {"notifications": notifications, "_meta": meta}})
                .to_string(),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let heard = Heard::follow(resp);
        let h = heard.clone();
        wait_for(
            "the listen's acknowledgment",
            Duration::from_secs(10),
            async || h.len() > 0,
        )
        .await;
        heard
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
        // A failed run's only account of what the replicas did: their logs go with the
        // temporary folder.
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(80)..];
            eprintln!(
                "--- {} (last {} lines)\n{}",
                self.log.display(),
                tail.len(),
                tail.join("\n")
            );
        }
    }
}

/// The JSON-RPC messages of an SSE or JSON body.
pub fn messages(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|l| {
            let data = l.strip_prefix("data:").map(str::trim).unwrap_or(l.trim());
            serde_json::from_str(data).ok()
        })
        .collect()
}

/// A stream's messages, collected in the background, with the SSE event id each came
/// with (if any).
#[derive(Clone, Default)]
pub struct Heard(
    Arc<Mutex<Vec<Value>>>,
    Arc<Mutex<Vec<Option<String>>>>,
    Reader,
);

/// The task reading a stream, to end it (and so close the stream) at will.
#[derive(Clone, Default)]
struct Reader(Arc<Mutex<Option<tokio::task::AbortHandle>>>);

impl Heard {
    pub fn follow(resp: reqwest::Response) -> Self {
        let heard = Self::default();
        let h = heard.clone();
        let task = tokio::spawn(async move {
            let mut buf = String::new();
            let mut body = resp.bytes_stream();
            while let Some(Ok(chunk)) = body.next().await {
                buf.push_str(&String::from_utf8_lossy(&chunk));
                while let Some(end) = buf.find("\n\n") {
                    let event: String = buf.drain(..end + 2).collect();
                    let id = event
                        .lines()
                        .find_map(|l| l.strip_prefix("id:"))
                        .map(|id| id.trim().to_owned());
                    let found = messages(&event);
                    let mut ids = h.1.lock().unwrap();
                    ids.extend(found.iter().map(|_| id.clone()));
                    h.0.lock().unwrap().extend(found);
                }
            }
        });
        *heard.2.0.lock().unwrap() = Some(task.abort_handle());
        heard
    }

    /// Close the stream, as a client going away does.
    pub fn close(&self) {
        if let Some(task) = self.2.0.lock().unwrap().take() {
            task.abort();
        }
    }

    /// The messages heard, each with the event id it came with.
    pub fn with_ids(&self) -> Vec<(Option<String>, Value)> {
        let ids = self.1.lock().unwrap().clone();
        let messages = self.0.lock().unwrap().clone();
        ids.into_iter().zip(messages).collect()
    }

    /// The last event id heard.
    pub fn last_event_id(&self) -> Option<String> {
        self.1.lock().unwrap().iter().rev().find_map(Clone::clone)
    }

    /// How many `notifications/resources/updated` of `uri` were heard.
    pub fn updates(&self, uri: &str) -> usize {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|m| {
                m["method"] == "notifications/resources/updated" && m["params"]["uri"] == uri
            })
            .count()
    }

    /// How many messages of method `method` were heard.
    pub fn count(&self, method: &str) -> usize {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|m| m["method"] == method)
            .count()
    }

    pub fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// Wait until `ok`, polling every 25 ms; fail naming `what` after `within`.
pub async fn wait_for(what: &str, within: Duration, mut ok: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + within;
    loop {
        if ok().await {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
