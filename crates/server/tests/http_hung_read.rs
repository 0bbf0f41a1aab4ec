//! A read in place that hangs costs its own request over HTTP, not a runtime worker: with
//! more such reads at once than the runtime has workers (spares included; a read in place
//! runs on a spare worker while one is free, else on a reader thread), each answers the request timeout's
//! error (the words of the bounded path and of stdio) once the timeout is over, `/healthz`
//! answers meanwhile, and reads of another mount go on, taken directly as before.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{Hanging, Release};
use mcpr_core::Provider;
use mcpr_provider_files::{FilesConfig, FilesProvider, encode_path_uri};
use mcpr_server::http::HttpSettings;
use mcpr_server::{ServerState, Settings};
use serde_json::Value;

const META: &str = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"}}"#;
const TIMEOUT: Duration = Duration::from_millis(1000);
/// Hung reads at once: more than the test runtime's two workers, and than the reader threads.
const HUNG: usize = 6;

/// The server's runtime, shut down without waiting when the test ends (a runtime may not be
/// dropped inside another).
struct ServerRuntime(Option<tokio::runtime::Runtime>);

impl ServerRuntime {
    fn handle(&self) -> &tokio::runtime::Handle {
        self.0.as_ref().unwrap().handle()
    }
}

impl Drop for ServerRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

async fn read(http: &reqwest::Client, base: &str, id: usize, uri: &str) -> (u16, Value) {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"resources/read","params":{{"uri":{},"_meta":{META}}}}}"#,
        serde_json::to_string(uri).unwrap()
    );
    let resp = http
        .post(format!("{base}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "resources/read")
        .header("mcp-name", uri)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}

async fn direct_reads(http: &reqwest::Client, base: &str) -> u64 {
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("mcp_http_direct_reads_total "))
        .unwrap()
        .parse()
        .unwrap()
}

/// The binary's HTTP runtime: two workers and two spares, each of which takes one read in
/// place at a time; the other reads go to the reader threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_reads_in_place_cost_their_own_requests_only() {
    let on = hung_reads(2).await;
    let on_workers = on.iter().filter(|t| *t == "server-worker").count();
    let on_readers = on.iter().filter(|t| *t == "mcpr-read-in-place").count();
    assert_eq!(
        (on_workers, on_readers),
        (2, HUNG - 2),
        "the hung reads ran on {on:?}"
    );
}

/// With no spare worker, every read in place goes to the reader threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_spare_worker_every_read_in_place_is_on_a_reader_thread() {
    let on = hung_reads(0).await;
    assert!(
        on.len() == HUNG && on.iter().all(|t| t == "mcpr-read-in-place"),
        "the hung reads ran on {on:?}"
    );
}

/// More hung reads at once than the server's runtime has workers (two, and `spare` spares):
/// each costs only its own request. Returns the names of the threads they hung on.
async fn hung_reads(spare: usize) -> Vec<String> {
    let (slow_dir, fine_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let slow_root = slow_dir.path().canonicalize().unwrap();
    let fine_root = fine_dir.path().canonicalize().unwrap();
    std::fs::write(slow_root.join("hang.txt"), "late").unwrap();
    std::fs::write(fine_root.join("a.txt"), "fine").unwrap();
    let hanging = Arc::new(Hanging::new(
        FilesProvider::new(FilesConfig::new(&slow_root)).unwrap(),
        |_| true,
    ));
    let _release = Release(hanging.clone());
    let fine: Arc<dyn Provider> =
        Arc::new(FilesProvider::new(FilesConfig::new(&fine_root)).unwrap());
    let settings = Settings {
        request_timeout: TIMEOUT,
        ..Settings::default()
    };
    let state = ServerState::new(settings, vec![hanging.clone(), fine]);
    // The server on a runtime of its own: if hung reads held its workers, the client here (on
    // the test's runtime, with a timeout) would fail rather than freeze with it.
    let server_rt = ServerRuntime(Some(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2 + spare)
            .thread_name("server-worker")
            .enable_all()
            .build()
            .unwrap(),
    ));
    let mut settings = HttpSettings::new("127.0.0.1:0".parse().unwrap());
    settings.spare_workers = spare;
    let base = server_rt
        .handle()
        .spawn(common::spawn_http(state, settings))
        .await
        .unwrap();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder()
        .timeout(TIMEOUT + Duration::from_secs(5))
        .build()
        .unwrap();
    let (hang, a) = (
        encode_path_uri(&slow_root.join("hang.txt")),
        encode_path_uri(&fine_root.join("a.txt")),
    );
    // The other mount's reads are taken directly before the hang, as after it.
    assert_eq!(
        read(&http, &base, 0, &a).await.1["result"]["contents"][0]["text"],
        "fine"
    );
    let taken = direct_reads(&http, &base).await;
    assert_eq!(taken, 1);

    let start = Instant::now();
    let hung: Vec<_> = (1..=HUNG)
        .map(|id| {
            let (http, base, hang) = (http.clone(), base.clone(), hang.clone());
            tokio::spawn(async move { (read(&http, &base, id, &hang).await, start.elapsed()) })
        })
        .collect();
    // Until every hung read has reached a spare worker or a reader thread.
    tokio::time::sleep(Duration::from_millis(200)).await;

    // Meanwhile the runtime serves everything else.
    let health = http.get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    for id in 100..103 {
        let (status, v) = read(&http, &base, id, &a).await;
        assert_eq!(status, 200);
        assert_eq!(v["result"]["contents"][0]["text"], "fine", "{v}");
    }
    assert!(
        start.elapsed() < TIMEOUT,
        "the other reads waited for the hung ones: {:?}",
        start.elapsed()
    );

    for task in hung {
        let ((status, v), waited) = task.await.unwrap();
        assert_eq!(status, 200, "{v}");
        assert!(
            waited >= TIMEOUT && waited < TIMEOUT + Duration::from_secs(3),
            "answered after {waited:?}"
        );
        // The SDKs' request timeout, as the bounded path answers one.
        assert_eq!(v["error"]["code"], -32001, "{v}");
        assert_eq!(v["error"]["data"]["temporary"], true, "{v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert_eq!(
            message,
            format!("{hang} timed out after 1000 ms (request_timeout)")
        );
    }
    let health = http.get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    // Every read to the fine mount was taken directly; the hung ones too (and answered by
    // the timeout).
    assert_eq!(direct_reads(&http, &base).await, taken + 3 + HUNG as u64);

    // Once the stuck reads return, nothing is answered twice and reads in place go on.
    hanging.release();
    let deadline = Instant::now() + Duration::from_secs(10);
    while hanging.ended.load(Ordering::SeqCst) < HUNG {
        assert!(Instant::now() < deadline, "the hung reads never ended");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (status, v) = read(&http, &base, 200, &hang).await;
    assert_eq!(
        (status, &v["result"]["contents"][0]["text"]),
        (200, &Value::from("late")),
        "{v}"
    );
    mcpr_core::sync::lock(&hanging.hung_on).clone()
}
