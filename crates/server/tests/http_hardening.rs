//! What an attacker's probe of the HTTP side found (issue #20), each test named for what it
//! shows, against a real server on loopback: listen streams capped per client and the watch
//! budget, slow request bodies, the operational endpoints and scoped mounts, legacy sessions
//! bound to their token, and the case of the `Bearer` scheme.

mod common;

use std::sync::Arc;
use std::time::Duration;

use mcpr_core::Provider;
use mcpr_provider_files::{FilesConfig, FilesProvider, encode_path_uri};
use mcpr_server::http::{AuthSettings, HttpLimits, HttpSettings, StaticToken};
use mcpr_server::{ServerState, Settings};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const ALL: &str = "token-all";
const OTHER: &str = "token-other";
const DOCS: &str = "token-docs";

const META: &str = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;

struct Fixture {
    _dirs: Vec<tempfile::TempDir>,
    docs_root: std::path::PathBuf,
    finance_root: std::path::PathBuf,
    state: Arc<ServerState>,
    base: String,
    url: String,
    http: reqwest::Client,
}

/// Two mounts, `docs` (scope docs) and `finance` (scope finance), with files `f0..f9` each;
/// static tokens: two unscoped ones (two identities) and one for docs only.
async fn start(settings: Settings, limits: HttpLimits) -> Fixture {
    // reqwest needs a process-wide TLS provider even for plain http URLs.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let docs_dir = tempfile::tempdir().unwrap();
    let fin_dir = tempfile::tempdir().unwrap();
    for i in 0..10 {
        std::fs::write(docs_dir.path().join(format!("f{i}.md")), "docs").unwrap();
        std::fs::write(fin_dir.path().join(format!("f{i}.csv")), "a,b").unwrap();
    }
    let docs_root = docs_dir.path().canonicalize().unwrap();
    let finance_root = fin_dir.path().canonicalize().unwrap();
    let docs: Arc<dyn Provider> =
        Arc::new(FilesProvider::new(FilesConfig::new(&docs_root)).unwrap());
    let fin: Arc<dyn Provider> =
        Arc::new(FilesProvider::new(FilesConfig::new(&finance_root)).unwrap());
    let state = ServerState::with_bus(
        settings,
        vec![(docs, Some("docs".into())), (fin, Some("finance".into()))],
        Arc::new(mcpr_core::LocalBus::default()),
    );
    let mut http = HttpSettings::new("127.0.0.1:0".parse().unwrap());
    http.limits = limits;
    http.auth = Some(AuthSettings {
        tokens: vec![
            StaticToken {
                token: ALL.into(),
                scopes: None,
                name: None,
            },
            StaticToken {
                token: OTHER.into(),
                scopes: None,
                name: None,
            },
            StaticToken {
                token: DOCS.into(),
                scopes: Some(["docs".to_owned()].into()),
                name: None,
            },
        ],
        ..Default::default()
    });
    let base = common::spawn_http(state.clone(), http).await;
    Fixture {
        _dirs: vec![docs_dir, fin_dir],
        docs_root,
        finance_root,
        state,
        url: format!("{base}/mcp"),
        base,
        http: reqwest::Client::new(),
    }
}

impl Fixture {
    fn docs_uri(&self, i: usize) -> String {
        encode_path_uri(&self.docs_root.join(format!("f{i}.md")))
    }

    /// A 2026-07-28 request, ready to send.
    fn modern(&self, token: &str, method: &str, mut params: Value) -> reqwest::RequestBuilder {
        params["_meta"] = serde_json::from_str(META).unwrap();
        self.http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method)
            .bearer_auth(token)
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
    }

    /// One 2026-07-28 request: status and body as text.
    async fn call(&self, token: &str, method: &str, params: Value) -> (u16, String) {
        let resp = self.modern(token, method, params).send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.text().await.unwrap())
    }

    /// Open a `subscriptions/listen` stream for `uris`; the response, still streaming.
    async fn listen(&self, token: &str, uris: &[String]) -> reqwest::Response {
        let resp = self
            .modern(
                token,
                "subscriptions/listen",
                json!({"notifications": {"resourceSubscriptions": uris}}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        resp
    }

    /// A legacy `initialize`: the session id.
    async fn initialize(&self, token: &str) -> String {
        let resp = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .bearer_auth(token)
            .json(
                &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"}}}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let id = resp.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let _ = resp.text().await;
        let resp = self
            .legacy(
                token,
                &id,
                json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            )
            .await;
        assert_eq!(resp.status(), 202);
        id
    }

    /// POST `message` in legacy session `id`.
    async fn legacy(&self, token: &str, id: &str, message: Value) -> reqwest::Response {
        self.http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .header("mcp-session-id", id)
            .bearer_auth(token)
            .json(&message)
            .send()
            .await
            .unwrap()
    }
}

/// Read `resp`'s body until `needle` shows up (or `within` passes); what was read.
async fn read_until(resp: &mut reqwest::Response, needle: &str, within: Duration) -> String {
    let mut seen = String::new();
    let _ = tokio::time::timeout(within, async {
        while let Ok(Some(chunk)) = resp.chunk().await {
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if seen.contains(needle) {
                break;
            }
        }
    })
    .await;
    seen
}

async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..500 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting until {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_streams_per_client_are_capped() {
    let settings = Settings {
        max_listen_streams_per_client: 2,
        ..Settings::default()
    };
    let f = start(settings, HttpLimits::default()).await;
    let uris = vec![f.docs_uri(0)];
    let mut first = f.listen(ALL, &uris).await;
    let _second = f.listen(ALL, &uris).await;
    let state = f.state.clone();
    wait_until("two listens are registered", || {
        state.registry().stats().listen_streams == 2
    })
    .await;

    // A third stream of the same client ends with an error naming the limit and setting.
    let mut third = f.listen(ALL, &uris).await;
    let body = read_until(
        &mut third,
        "max_listen_streams_per_client",
        Duration::from_secs(5),
    )
    .await;
    assert!(
        body.contains("max_listen_streams_per_client") && body.contains("\"code\":-32603"),
        "{body}"
    );
    assert!(body.contains("\"limit\":2"), "{body}");
    assert_eq!(f.state.registry().stats().listen_streams, 2);

    // Another client is not affected.
    let _theirs = f.listen(OTHER, &uris).await;
    let state = f.state.clone();
    wait_until("the other client's listen is registered", || {
        state.registry().stats().listen_streams == 3
    })
    .await;

    // Closing a stream frees its place.
    let _ = tokio::time::timeout(Duration::from_millis(200), first.chunk()).await;
    drop(first);
    let state = f.state.clone();
    wait_until("the closed listen is released", || {
        state.registry().stats().listen_streams == 2
    })
    .await;
    let mut again = f.listen(ALL, &uris).await;
    let body = read_until(
        &mut again,
        "max_listen_streams_per_client",
        Duration::from_millis(500),
    )
    .await;
    assert!(!body.contains("max_listen_streams_per_client"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_budget_is_global_and_named() {
    let settings = Settings {
        max_watches: 3,
        ..Settings::default()
    };
    let f = start(settings, HttpLimits::default()).await;

    // Legacy era: a session subscribes up to the budget, the next subscription is refused.
    let session = f.initialize(ALL).await;
    for i in 0..3 {
        let resp = f
            .legacy(
                ALL,
                &session,
                json!({"jsonrpc": "2.0", "id": 10 + i, "method": "resources/subscribe",
                "params": {"uri": f.docs_uri(i as usize)}}),
            )
            .await;
        let text = resp.text().await.unwrap();
        assert!(text.contains("\"result\""), "{text}");
    }
    assert_eq!(f.state.registry().stats().subscriptions, 3);
    let resp = f
        .legacy(
            ALL,
            &session,
            json!({"jsonrpc": "2.0", "id": 20, "method": "resources/subscribe",
            "params": {"uri": f.docs_uri(3)}}),
        )
        .await;
    let text = resp.text().await.unwrap();
    assert!(
        text.contains("max_watches")
            && text.contains("server.max_watches")
            && text.contains("-32603"),
        "{text}"
    );

    // 2026-07-28 era, another client: a listen that would go past the budget is refused whole.
    let mut listen = f.listen(OTHER, &[f.docs_uri(4)]).await;
    let body = read_until(&mut listen, "max_watches", Duration::from_secs(5)).await;
    assert!(body.contains("max_watches"), "{body}");
    assert_eq!(f.state.registry().stats().subscriptions, 3);

    // Releasing the session's subscriptions makes room again.
    let resp = f
        .legacy(
            ALL,
            &session,
            json!({"jsonrpc": "2.0", "id": 21, "method": "resources/unsubscribe",
            "params": {"uri": f.docs_uri(0)}}),
        )
        .await;
    assert!(resp.text().await.unwrap().contains("\"result\""));
    let _listen = f.listen(OTHER, &[f.docs_uri(4)]).await;
    let state = f.state.clone();
    wait_until("the listen holds its subscription", || {
        state.registry().stats().subscriptions == 3
    })
    .await;
}

/// Open a raw connection and send the headers of a POST whose body then trickles in.
async fn slow_post(base: &str, token: Option<&str>) -> tokio::net::TcpStream {
    let addr = base.trim_start_matches("http://");
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let auth = token.map_or(String::new(), |t| format!("authorization: Bearer {t}\r\n"));
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\ncontent-length: 1000\r\n{auth}\r\n{{"
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp
}

/// What the server answered on a raw connection, within `within`.
async fn raw_answer(tcp: &mut tokio::net::TcpStream, within: Duration) -> String {
    let mut buf = vec![0u8; 4096];
    match tokio::time::timeout(within, tcp.read(&mut buf)).await {
        Ok(Ok(n)) => String::from_utf8_lossy(&buf[..n]).into_owned(),
        _ => String::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_unauthenticated_bodies_do_not_starve_authenticated_clients() {
    let limits = HttpLimits {
        max_concurrent_requests: 4,
        ..HttpLimits::default()
    };
    let f = start(Settings::default(), limits).await;
    // Far more slow, unauthenticated bodies than there are permits: each is refused on its
    // headers, without the server waiting for the body.
    let mut slow = Vec::new();
    for _ in 0..20 {
        slow.push(slow_post(&f.base, None).await);
    }
    for tcp in &mut slow {
        let answer = raw_answer(tcp, Duration::from_secs(2)).await;
        assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    }
    for tcp in &mut slow {
        let _ = tcp.write_all(b" ").await;
    }
    let (status, body) = f.call(ALL, "resources/list", json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"resources\""), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_body_times_out_with_408() {
    let limits = HttpLimits {
        max_concurrent_requests: 2,
        body_timeout: Duration::from_millis(800),
        ..HttpLimits::default()
    };
    let f = start(Settings::default(), limits).await;
    // Two authenticated clients that never finish their bodies hold both permits...
    let mut a = slow_post(&f.base, Some(ALL)).await;
    let mut b = slow_post(&f.base, Some(ALL)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (status, body) = f.call(ALL, "resources/list", json!({})).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("max_concurrent_requests"), "{body}");
    // ...only until the body timeout, which answers 408 naming the setting.
    for tcp in [&mut a, &mut b] {
        let answer = raw_answer(tcp, Duration::from_secs(5)).await;
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(
            answer.contains("body_timeout_ms") && answer.contains("800 ms"),
            "{answer}"
        );
    }
    let (status, body) = f.call(ALL, "resources/list", json!({})).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ops_endpoints_check_host_and_origin() {
    let f = start(Settings::default(), HttpLimits::default()).await;
    for path in ["/healthz", "/readyz", "/metrics"] {
        let url = format!("{}{path}", f.base);
        let resp = f
            .http
            .get(&url)
            .header("host", "evil.example")
            .bearer_auth(ALL)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 403, "{path} with a foreign Host");
        let resp = f
            .http
            .get(&url)
            .header("origin", "http://evil.example")
            .bearer_auth(ALL)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 403, "{path} with a foreign Origin");
        let resp = f
            .http
            .get(&url)
            .header("origin", "http://localhost:3000")
            .bearer_auth(ALL)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{path} from a local page");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ops_endpoints_with_configured_hosts() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let docs = tempfile::tempdir().unwrap();
    let provider: Arc<dyn Provider> =
        Arc::new(FilesProvider::new(FilesConfig::new(docs.path())).unwrap());
    let state = ServerState::new(Settings::default(), vec![provider]);
    let mut http = HttpSettings::new("127.0.0.1:0".parse().unwrap());
    http.allowed_hosts = vec!["mcp.example.test".into()];
    let base = common::spawn_http(state, http).await;
    let client = reqwest::Client::new();
    let status = |host: &'static str| {
        let req = client.get(format!("{base}/readyz")).header("host", host);
        async move { req.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(status("mcp.example.test").await, 200);
    assert_eq!(status("evil.example").await, 403);
    assert_eq!(status("localhost").await, 403);
    // An address, as a health probe sends it, cannot be a DNS rebinding.
    assert_eq!(status("10.0.0.7:8080").await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_detail_and_metrics_need_a_token() {
    let f = start(Settings::default(), HttpLimits::default()).await;
    let docs = f.docs_root.display().to_string();
    let finance = f.finance_root.display().to_string();
    let get = |path: &str, token: Option<&str>| {
        let mut req = f.http.get(format!("{}{path}", f.base));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        async move {
            let resp = req.send().await.unwrap();
            (resp.status().as_u16(), resp.text().await.unwrap())
        }
    };
    // Unauthenticated: the status and a bare word, no paths.
    let (status, body) = get("/readyz", None).await;
    assert_eq!((status, body.as_str()), (200, "ready\n"));
    let (status, body) = get("/readyz", Some("wrong")).await;
    assert_eq!((status, body.as_str()), (200, "ready\n"));
    // A token sees the mounts it may see, and only those.
    let (status, body) = get("/readyz", Some(ALL)).await;
    assert_eq!(status, 200);
    assert!(body.contains(&docs) && body.contains(&finance), "{body}");
    let (status, body) = get("/readyz", Some(DOCS)).await;
    assert_eq!(status, 200);
    assert!(body.contains(&docs) && !body.contains(&finance), "{body}");
    // Metrics need a token.
    let (status, _) = get("/metrics", None).await;
    assert_eq!(status, 401);
    let (status, body) = get("/metrics", Some(ALL)).await;
    assert_eq!(status, 200);
    assert!(body.contains("mcp_listen_streams 0"), "{body}");
    // The liveness probe stays open.
    assert_eq!(get("/healthz", None).await.0, 200);
    // Any other path goes through the edge too: authenticated first, then not found.
    assert_eq!(get("/elsewhere", None).await.0, 401);
    assert_eq!(get("/elsewhere", Some(ALL)).await.0, 404);
}

/// `/metrics` names each mount in its per-mount series (a files mount by its absolute
/// path): a token scoped to one mount gets that mount's series and none of another's, as on
/// `/readyz`; an unscoped token gets every mount's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_a_scoped_token_only_the_series_of_its_mounts() {
    let f = start(Settings::default(), HttpLimits::default()).await;
    let docs = f.docs_root.display().to_string();
    let finance = f.finance_root.display().to_string();
    let metrics = |token: &'static str| {
        let req = f.http.get(format!("{}/metrics", f.base)).bearer_auth(token);
        async move {
            let resp = req.send().await.unwrap();
            assert_eq!(resp.status(), 200);
            resp.text().await.unwrap()
        }
    };
    let mount_lines = |body: &str, root: &str| {
        body.lines()
            .filter(|l| l.contains("mount=\"") && l.contains(root))
            .count()
    };
    let all = metrics(ALL).await;
    assert!(
        mount_lines(&all, &docs) > 0 && mount_lines(&all, &finance) > 0,
        "{all}"
    );
    let scoped = metrics(DOCS).await;
    assert!(mount_lines(&scoped, &docs) > 0, "{scoped}");
    assert!(
        !scoped.contains(&finance),
        "a docs-scoped token sees the finance mount's series:\n{scoped}"
    );
    // The series of every other kind are there for both.
    for body in [&all, &scoped] {
        assert!(body.contains("mcp_listen_streams 0"), "{body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoped_mounts_hidden_from_initialize_and_discover() {
    let f = start(Settings::default(), HttpLimits::default()).await;
    let docs = f.docs_root.display().to_string();
    let finance = f.finance_root.display().to_string();
    // server/discover (2026-07-28).
    let (status, body) = f.call(DOCS, "server/discover", json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(&docs) && !body.contains(&finance), "{body}");
    let (_, body) = f.call(ALL, "server/discover", json!({})).await;
    assert!(body.contains(&docs) && body.contains(&finance), "{body}");
    // initialize (legacy).
    for (token, sees_finance) in [(DOCS, false), (ALL, true)] {
        let resp = f
            .http
            .post(&f.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .bearer_auth(token)
            .json(
                &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"}}}),
            )
            .send()
            .await
            .unwrap();
        let body = resp.text().await.unwrap();
        assert!(
            body.contains("instructions") && body.contains(&docs),
            "{body}"
        );
        assert_eq!(body.contains(&finance), sees_finance, "{body}");
    }
    // Templates and the listing keep to the caller's mounts too.
    let (_, body) = f.call(DOCS, "resources/templates/list", json!({})).await;
    assert!(!body.contains(&finance), "{body}");
    let (_, body) = f.call(DOCS, "resources/list", json!({})).await;
    assert!(body.contains(&docs) && !body.contains(&finance), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_session_bound_to_its_token() {
    let f = start(Settings::default(), HttpLimits::default()).await;
    let session = f.initialize(ALL).await;
    // Another token holding the id: the session does not exist for it.
    let resp = f
        .http
        .get(&f.url)
        .header("accept", "text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .header("mcp-session-id", &session)
        .bearer_auth(OTHER)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    let resp = f
        .legacy(
            OTHER,
            &session,
            json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
        )
        .await;
    assert_eq!(resp.status(), 404);
    let delete = |token: &'static str| {
        f.http
            .delete(&f.url)
            .header("mcp-protocol-version", "2025-11-25")
            .header("mcp-session-id", &session)
            .bearer_auth(token)
            .send()
    };
    assert_eq!(delete(OTHER).await.unwrap().status(), 404);
    // The owner still has it, and ends it with 204, which clients expect of a DELETE.
    let resp = f
        .legacy(
            ALL,
            &session,
            json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}),
        )
        .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(delete(ALL).await.unwrap().status(), 204);
    assert_eq!(delete(ALL).await.unwrap().status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_scheme_is_case_insensitive() {
    let f = start(Settings::default(), HttpLimits::default()).await;
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        let resp = f
            .http
            .post(&f.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "resources/list")
            .header("authorization", format!("{scheme} {ALL}"))
            .json(
                &json!({"jsonrpc": "2.0", "id": 1, "method": "resources/list",
                "params": {"_meta": serde_json::from_str::<Value>(META).unwrap()}}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{scheme}");
    }
    let resp = f
        .http
        .get(format!("{}/metrics", f.base))
        .header("authorization", format!("Basic {ALL}"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
}
