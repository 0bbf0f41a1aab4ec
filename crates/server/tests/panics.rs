//! A panic while answering a request costs that request alone: on the direct read paths
//! (stdio, on the binary's threads, and HTTP) and on rmcp's own dispatch (`resources/list`),
//! the request is answered with an internal error (-32603) and the session goes on answering
//! reads, lists and pings (over HTTP, where 2026-07-28 has no ping, template lists). Over stdio the panicking requests also leave no slot taken: more
//! than `MAX_PENDING_REQUESTS` of them in a row do not stop the transport reading.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mcpr_core::{Page, PageRequest, Provider, ReadLimits, ReadOutput, ResourceMeta, ResourceUri};
use mcpr_provider_files::{FilesConfig, FilesProvider, encode_path_uri};
use mcpr_server::stdio::{MAX_PENDING_REQUESTS, StdioTransport};
use mcpr_server::{McpHandler, Served, ServerState, Settings};
use rmcp::ServiceExt;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const INIT: &str = r#"{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
const META: &str = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"}}"#;
/// What the test provider's panics say, so the panic hook can keep them off the output.
const PANIC: &str = "the test provider panics here";

/// A files mount that panics on reads of names containing "panic" (in place and not), and
/// on `resources/list` while `panic_lists` is set.
struct Panicking {
    files: FilesProvider,
    panic_lists: AtomicBool,
}

#[async_trait::async_trait]
impl Provider for Panicking {
    fn info(&self) -> &mcpr_core::ProviderInfo {
        self.files.info()
    }

    async fn list(&self, page: PageRequest) -> mcpr_core::Result<Page<ResourceMeta>> {
        if self.panic_lists.load(Ordering::SeqCst) {
            panic!("{PANIC}: list");
        }
        self.files.list(page).await
    }

    async fn read(&self, uri: &ResourceUri, limits: &ReadLimits) -> mcpr_core::Result<ReadOutput> {
        if uri.as_str().contains("panic") {
            panic!("{PANIC}: read");
        }
        self.files.read(uri, limits).await
    }

    fn read_now(
        &self,
        uri: &ResourceUri,
        limits: &ReadLimits,
    ) -> Option<mcpr_core::Result<ReadOutput>> {
        if uri.as_str().contains("panic") {
            panic!("{PANIC}: read_now");
        }
        self.files.read_now(uri, limits)
    }
}

/// The test provider's panics are expected: their messages are kept off the test output,
/// every other panic is reported as usual.
fn quiet_expected_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let expected = info
            .payload()
            .downcast_ref::<String>()
            .is_some_and(|m| m.starts_with(PANIC));
        if !expected {
            default(info);
        }
    }));
}

/// A root with `a.txt` and `panic.txt`, a server over a [`Panicking`] mount of it.
fn fixture() -> (
    tempfile::TempDir,
    String,
    String,
    Arc<Panicking>,
    Arc<ServerState>,
) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("a.txt"), "fine").unwrap();
    std::fs::write(root.join("panic.txt"), "never read").unwrap();
    let provider = Arc::new(Panicking {
        files: FilesProvider::new(FilesConfig::new(&root)).unwrap(),
        panic_lists: AtomicBool::new(false),
    });
    let state = ServerState::new(Settings::default(), vec![provider.clone()]);
    let a = encode_path_uri(&root.join("a.txt"));
    let p = encode_path_uri(&root.join("panic.txt"));
    (dir, a, p, provider, state)
}

fn read(id: &str, uri: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"resources/read","params":{{"uri":{}}}}}"#,
        serde_json::to_string(uri).unwrap()
    )
}

/// A stdio client on real pipes to a server on the binary's threads (served as the binary
/// serves it), with the direct read path on.
struct Stdio {
    w: tokio::fs::File,
    r: BufReader<tokio::fs::File>,
}

impl Stdio {
    async fn start(state: Arc<ServerState>) -> Self {
        let (server_r, client_w) = rustix::pipe::pipe().unwrap();
        let (client_r, server_w) = rustix::pipe::pipe().unwrap();
        let transport = StdioTransport::on_threads(server_r, server_w)
            .with_direct_reads(McpHandler::new(state.clone()));
        tokio::spawn(async move {
            let running = Served::from(McpHandler::new(state))
                .serve(transport)
                .await
                .unwrap();
            let _ = running.waiting().await;
        });
        let mut s = Self {
            w: tokio::fs::File::from_std(std::fs::File::from(client_w)),
            r: BufReader::new(tokio::fs::File::from_std(std::fs::File::from(client_r))),
        };
        s.send(&[INIT.to_owned()]).await;
        assert_eq!(s.answer().await["id"], "init");
        s.send(&[INITIALIZED.to_owned()]).await;
        s
    }

    async fn send(&mut self, lines: &[String]) {
        let all = lines.join("\n") + "\n";
        self.w.write_all(all.as_bytes()).await.unwrap();
        self.w.flush().await.unwrap();
    }

    /// The next answer; fails after 10 s without one (a request left unanswered).
    async fn answer(&mut self) -> Value {
        let mut line = String::new();
        let n = tokio::time::timeout(Duration::from_secs(10), self.r.read_line(&mut line))
            .await
            .expect("an answer within 10 s")
            .unwrap();
        assert!(n > 0, "the server closed its output");
        serde_json::from_str(&line).unwrap()
    }

    /// Sends `lines` and returns their answers by id (as JSON text of the id).
    async fn answers(&mut self, lines: Vec<String>) -> std::collections::HashMap<String, Value> {
        let n = lines.len();
        // Written on a task of its own: the server stops reading while its answers go unread.
        let mut w = self.w.try_clone().await.unwrap();
        let writer = tokio::spawn(async move {
            w.write_all((lines.join("\n") + "\n").as_bytes())
                .await
                .unwrap();
            w.flush().await.unwrap();
        });
        let mut got = std::collections::HashMap::new();
        for _ in 0..n {
            let v = self.answer().await;
            assert!(got.insert(v["id"].to_string(), v).is_none(), "two answers");
        }
        writer.await.unwrap();
        got
    }
}

fn code(v: &Value) -> i64 {
    v["error"]["code"].as_i64().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_over_stdio_costs_one_request_and_no_slot() {
    quiet_expected_panics();
    let (_dir, a, p, provider, state) = fixture();
    let mut c = Stdio::start(state.clone()).await;

    // On the direct path (answered by the reader thread, in place), more than the
    // in-flight bound of them.
    let n = MAX_PENDING_REQUESTS + 100;
    let lines = (0..n).map(|i| read(&i.to_string(), &p)).collect();
    let got = c.answers(lines).await;
    for i in 0..n {
        let v = &got[&i.to_string()];
        assert_eq!(code(v), -32603, "{v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains("panic"), "{message}");
    }
    assert_eq!(state.metrics().count("resources/read", "ok"), 0);

    // On rmcp's dispatch: more panicking lists than the transport lets wait for rmcp at once.
    provider.panic_lists.store(true, Ordering::SeqCst);
    let lines = (0..n)
        .map(|i| format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"resources/list"}}"#))
        .collect();
    let got = c.answers(lines).await;
    for i in 0..n {
        assert_eq!(
            code(&got[&i.to_string()]),
            -32603,
            "{}",
            got[&i.to_string()]
        );
    }
    provider.panic_lists.store(false, Ordering::SeqCst);

    // The session goes on: a read, a list and a ping.
    let got = c
        .answers(vec![
            read("\"r\"", &a),
            r#"{"jsonrpc":"2.0","id":"l","method":"resources/list"}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":"p","method":"ping"}"#.to_owned(),
        ])
        .await;
    assert_eq!(got["\"r\""]["result"]["contents"][0]["text"], "fine");
    assert!(
        got["\"l\""]["result"]["resources"].is_array(),
        "{}",
        got["\"l\""]
    );
    assert!(got["\"p\""]["result"].is_object(), "{}", got["\"p\""]);
}

/// One 2026-07-28 request over HTTP: the status and the JSON-RPC answer (from a JSON body or
/// the one event of an SSE body).
async fn call(http: &reqwest::Client, base: &str, method: &str, params: Value) -> (u16, Value) {
    let mut params = params;
    params["_meta"] = serde_json::from_str(META).unwrap();
    let mut req = http
        .post(format!("{base}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(uri) = params["uri"].as_str() {
        req = req.header("mcp-name", uri);
    }
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let resp = tokio::time::timeout(Duration::from_secs(10), req.json(&body).send())
        .await
        .expect("an answer within 10 s")
        .unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    let json = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .find_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .or_else(|| serde_json::from_str(&text).ok())
        .unwrap_or_else(|| panic!("no JSON-RPC answer in {status} {text:?}"));
    (status, json)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_over_http_costs_one_request() {
    quiet_expected_panics();
    // reqwest needs a process-wide TLS provider even for plain http URLs.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (_dir, a, p, provider, state) = fixture();
    let http = reqwest::Client::new();
    // On the direct path, more than once on each of the runtime's two workers: without a
    // spare worker the reads in place run on the reader threads, with one in a task on it.
    let mut base = String::new();
    for spare in [0, 1] {
        let mut settings = mcpr_server::http::HttpSettings::new("127.0.0.1:0".parse().unwrap());
        settings.spare_workers = spare;
        base = common::spawn_http(state.clone(), settings).await;
        for _ in 0..4 {
            let (status, v) = call(
                &http,
                &base,
                "resources/read",
                serde_json::json!({"uri": p}),
            )
            .await;
            assert_eq!((status, code(&v)), (200, -32603), "spare {spare}: {v}");
        }
    }
    // On rmcp's dispatch.
    provider.panic_lists.store(true, Ordering::SeqCst);
    let (status, v) = call(&http, &base, "resources/list", serde_json::json!({})).await;
    assert_eq!((status, code(&v)), (200, -32603), "{v}");
    provider.panic_lists.store(false, Ordering::SeqCst);
    // The server goes on.
    let (_, v) = call(
        &http,
        &base,
        "resources/read",
        serde_json::json!({"uri": a}),
    )
    .await;
    assert_eq!(v["result"]["contents"][0]["text"], "fine", "{v}");
    let (_, v) = call(&http, &base, "resources/list", serde_json::json!({})).await;
    assert!(v["result"]["resources"].is_array(), "{v}");
    let (_, v) = call(
        &http,
        &base,
        "resources/templates/list",
        serde_json::json!({}),
    )
    .await;
    assert!(v["result"]["resourceTemplates"].is_array(), "{v}");
}
