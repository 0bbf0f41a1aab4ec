//! Fault injection at the HTTP edge (issue #19 section 4): a `subscriptions/listen` client
//! that never reads its stream while its resources keep changing, and clients that vanish in
//! the middle of their SSE streams (a listen stream and a legacy session's GET stream).
//! Neither may stall other clients' notifications, hold the server's memory, or keep their
//! subscriptions once gone.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use mcpr_core::Provider;
use mcpr_provider_files::{FilesConfig, FilesProvider, encode_path_uri};
use mcpr_server::http::HttpSettings;
use mcpr_server::{ServerState, Settings};
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const META: &str = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;
const FILES: usize = 200;

struct Fixture {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    state: Arc<ServerState>,
    addr: String,
}

async fn start() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    for i in 0..FILES {
        std::fs::write(root.join(format!("f{i:03}.txt")), "0").unwrap();
    }
    let mut cfg = FilesConfig::new(&root);
    cfg.debounce = Duration::from_millis(5);
    let p: Arc<dyn Provider> = Arc::new(FilesProvider::new(cfg).unwrap());
    let state = ServerState::with_bus(
        Settings::default(),
        vec![(p, None)],
        Arc::new(mcpr_core::LocalBus::default()),
    );
    let base = common::spawn_http(
        state.clone(),
        HttpSettings::new("127.0.0.1:0".parse().unwrap()),
    )
    .await;
    Fixture {
        _dir: dir,
        root,
        state,
        addr: base.trim_start_matches("http://").to_owned(),
    }
}

impl Fixture {
    fn uri(&self, i: usize) -> String {
        encode_path_uri(&self.root.join(format!("f{i:03}.txt")))
    }

    /// A raw `subscriptions/listen` of `uris` on its own connection, its response head read;
    /// the body is left to the caller (or to nobody).
    async fn raw_listen(&self, uris: &[String]) -> tokio::net::TcpStream {
        let body = json!({
            "jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen",
            "params": {"notifications": {"resourceSubscriptions": uris},
                       "_meta": serde_json::from_str::<serde_json::Value>(META).unwrap()}
        })
        .to_string();
        let head = format!(
            "POST /mcp HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\nmcp-method: subscriptions/listen\r\ncontent-length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        // A small receive buffer, so the stream backs up into the server soon.
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut s = socket.connect(self.addr.parse().unwrap()).await.unwrap();
        s.write_all(head.as_bytes()).await.unwrap();
        let mut got = Vec::new();
        let mut b = [0u8; 1];
        while !got.ends_with(b"\r\n\r\n") {
            assert_eq!(s.read(&mut b).await.unwrap(), 1, "closed before the head");
            got.push(b[0]);
        }
        let head = String::from_utf8_lossy(&got);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        s
    }

    async fn wait_for(&self, what: &str, cond: impl Fn(mcpr_server::RegistryStats) -> bool) {
        let start = Instant::now();
        while !cond(self.state.registry().stats()) {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{what}: {:?}",
                self.state.registry().stats()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The resident memory of this process (the server runs in it), in KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Reads `s` until `needle` has arrived, or `within` passes; whether it arrived.
async fn arrives(s: &mut tokio::net::TcpStream, needle: &str, within: Duration) -> bool {
    let mut seen = Vec::new();
    let mut buf = [0u8; 8192];
    tokio::time::timeout(within, async {
        loop {
            let n = s.read(&mut buf).await.unwrap_or(0);
            if n == 0 {
                return false;
            }
            seen.extend_from_slice(&buf[..n]);
            if String::from_utf8_lossy(&seen).contains(needle) {
                return true;
            }
        }
    })
    .await
    .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_client_that_never_reads_holds_no_memory_and_stalls_no_one() {
    let f = start().await;
    let all: Vec<String> = (0..FILES).map(|i| f.uri(i)).collect();
    // The client that never reads past the response head.
    let stuck = f.raw_listen(&all).await;
    // A client that reads, watching one file.
    let mut reader = f.raw_listen(&[f.uri(0)]).await;
    f.wait_for("both listens watching", |s| {
        s.subscribers == 2 && s.watched_uris == FILES
    })
    .await;
    let before = rss_kib();

    // 60 rounds of changing every file: 12,000 notifications for the stuck client, far more
    // than its socket buffers hold.
    for round in 0..60 {
        for i in 0..FILES {
            std::fs::write(f.root.join(format!("f{i:03}.txt")), round.to_string()).unwrap();
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
        // The reader hears of its file meanwhile: the stuck client holds up no one.
        if round % 20 == 19 {
            assert!(
                arrives(
                    &mut reader,
                    "notifications/resources/updated",
                    Duration::from_secs(5)
                )
                .await,
                "a client that never reads stalled another client's notifications (round {round})"
            );
        }
    }
    let grown = rss_kib().saturating_sub(before);
    // A coarse guard on the whole process; the exact bound (one pending notice per URI,
    // here 200 instead of 12,000) is pinned by `mailbox`'s own tests.
    assert!(
        grown < 32 * 1024,
        "RSS grew {grown} KiB behind a client that never reads"
    );

    // The stuck client goes away without a word: its stream and its 200 watches go with it,
    // the reader's watch of its one file stays.
    drop(stuck);
    f.wait_for("the vanished listen released", |s| {
        s.subscribers == 1 && s.watched_uris == 1 && s.listen_streams == 1
    })
    .await;
    std::fs::write(f.root.join("f000.txt"), "after").unwrap();
    assert!(
        arrives(
            &mut reader,
            "notifications/resources/updated",
            Duration::from_secs(5)
        )
        .await,
        "the remaining listen stopped hearing of its file"
    );
    drop(reader);
    f.wait_for("everything released", |s| {
        s.subscribers == 0 && s.watched_uris == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_client_that_vanishes_mid_sse_keeps_its_session_and_subscription() {
    // reqwest needs a process-wide TLS provider even for plain http URLs.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let f = start().await;
    let http = reqwest::Client::new();
    let url = format!("http://{}/mcp", f.addr);
    let post = |sid: Option<&str>, body: serde_json::Value| {
        let mut r = http
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(sid) = sid {
            r = r
                .header("mcp-session-id", sid)
                .header("mcp-protocol-version", "2025-11-25");
        }
        r.send()
    };
    let init = post(
        None,
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "faults", "version": "0"}}}),
    )
    .await
    .unwrap();
    let sid = init.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    drop(init);
    post(
        Some(&sid),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await
    .unwrap();
    let r = post(
        Some(&sid),
        json!({"jsonrpc": "2.0", "id": 1, "method": "resources/subscribe", "params": {"uri": f.uri(7)}}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    let _ = r.text().await;
    let get = |sid: &str| {
        let head = format!(
            "GET /mcp HTTP/1.1\r\nhost: {}\r\naccept: text/event-stream\r\nmcp-session-id: {sid}\r\nmcp-protocol-version: 2025-11-25\r\n\r\n",
            f.addr
        );
        let addr = f.addr.clone();
        async move {
            let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
            s.write_all(head.as_bytes()).await.unwrap();
            s
        }
    };
    // The GET stream: one notification arrives, then the client vanishes mid-stream.
    let mut stream = get(&sid).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    std::fs::write(f.root.join("f007.txt"), "1").unwrap();
    assert!(
        arrives(
            &mut stream,
            "notifications/resources/updated",
            Duration::from_secs(5)
        )
        .await
    );
    drop(stream);
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The session and its subscription outlive the dropped connection ...
    let s = f.state.registry().stats();
    assert_eq!((s.subscribers, s.watched_uris), (1, 1), "{s:?}");
    // ... and a change while no stream is open reaches the next one (replayed or live).
    std::fs::write(f.root.join("f007.txt"), "2").unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut again = get(&sid).await;
    std::fs::write(f.root.join("f007.txt"), "3").unwrap();
    assert!(
        arrives(
            &mut again,
            "notifications/resources/updated",
            Duration::from_secs(5)
        )
        .await,
        "the session's subscription was lost with its first stream"
    );
    drop(again);
    // Deleting the session releases the subscription.
    let del = http
        .delete(&url)
        .header("mcp-session-id", &sid)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert!(del.status().is_success(), "{}", del.status());
    f.wait_for("the deleted session released", |s| {
        s.subscribers == 0 && s.watched_uris == 0
    })
    .await;
}
