//! Legacy sessions roaming over three replicas (in-process servers on loopback, each with its
//! own NATS connection, [`NatsBus`] and [`NatsSessionStore`]) against a real
//! `nats-server -js` this test starts on a random port. Raw HTTP. Without the binary the
//! tests say so and pass, except under `CI=true`, where it is a failure.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use mcpr_cluster::{Kind, NatsBus, NatsSessionStore, Seal};
use mcpr_core::Provider;
use mcpr_provider_files::{FilesConfig, FilesProvider};
use mcpr_server::http::{AuthSettings, HttpSettings, StaticToken};
use mcpr_server::{ServerState, Settings};
use mcpr_testkit::nats::NatsServer;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// What every test starts from: a NATS server of its own and a directory holding `a.md`
/// (its real path, as replicas name it). `None`: no nats-server here (the test is skipped).
fn setup() -> Option<(NatsServer, tempfile::TempDir, std::path::PathBuf)> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let nats = NatsServer::started()?;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("a.md"), "a").unwrap();
    Some((nats, dir, root))
}

/// The secret every replica of these tests shares.
const SECRET: &[u8] = b"the test cluster's secret, 32+ bytes";

fn seal() -> Arc<Seal> {
    Arc::new(Seal::new(SECRET).unwrap())
}

/// One replica over `root`: its MCP endpoint's URL.
async fn replica(root: &std::path::Path, port: u16, auth: Option<AuthSettings>) -> String {
    replica_with_ttl(root, port, auth, Duration::from_secs(60)).await
}

/// A replica whose sessions are forgotten after `ttl` unused.
async fn replica_with_ttl(
    root: &std::path::Path,
    port: u16,
    auth: Option<AuthSettings>,
    ttl: Duration,
) -> String {
    let client = async_nats::connect(format!("nats://127.0.0.1:{port}"))
        .await
        .unwrap();
    let bus = NatsBus::new(client.clone(), seal(), &cluster_of(ttl), HashSet::new());
    let provider: Arc<dyn Provider> = Arc::new(FilesProvider::new(FilesConfig::new(root)).unwrap());
    let state = ServerState::with_bus(Settings::default(), vec![(provider, None)], Arc::new(bus));
    let hub = NatsSessionStore::connect(client, seal(), &cluster_of(ttl), ttl, 16)
        .await
        .unwrap();
    let mut http = HttpSettings::new("127.0.0.1:0".parse().unwrap());
    http.limits.session_idle_timeout = ttl;
    http.session_hub = Some(hub);
    http.auth = auth;
    let server = mcpr_server::http::serve(state, http, std::future::pending())
        .await
        .unwrap();
    let url = format!("http://{}/mcp", server.local_addr);
    tokio::spawn(async move {
        let _ = server.wait().await;
    });
    url
}

/// Replicas of one cluster must agree on the TTL: one cluster name per TTL.
fn cluster_of(ttl: Duration) -> String {
    if ttl == Duration::from_secs(60) {
        "roam".into()
    } else {
        format!("roam{}", ttl.as_millis())
    }
}

fn request(
    method: reqwest::Method,
    url: &str,
    session: Option<&str>,
    token: Option<&str>,
) -> reqwest::RequestBuilder {
    let mut req = reqwest::Client::new()
        .request(method, url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25");
    if let Some(id) = session {
        req = req.header("mcp-session-id", id);
    }
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    req
}

async fn post(
    url: &str,
    session: Option<&str>,
    token: Option<&str>,
    message: Value,
) -> reqwest::Response {
    request(reqwest::Method::POST, url, session, token)
        .header("content-type", "application/json")
        .json(&message)
        .send()
        .await
        .unwrap()
}

/// The JSON-RPC message of a response, plain JSON or one SSE event.
async fn answer(resp: reqwest::Response) -> Value {
    let status = resp.status();
    let text = resp.text().await.unwrap();
    assert_eq!(status, 200, "{text}");
    let body = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .find(|d| !d.trim().is_empty())
        .unwrap_or(&text);
    serde_json::from_str(body.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

async fn initialize(url: &str, token: Option<&str>) -> String {
    let resp = post(
        url,
        None,
        token,
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let id = resp.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let _ = resp.text().await;
    let resp = post(
        url,
        Some(&id),
        token,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(resp.status(), 202);
    id
}

fn list() -> Value {
    json!({"jsonrpc": "2.0", "id": 7, "method": "resources/list", "params": {}})
}

/// An open GET stream: its events as (id, data) pairs.
async fn open_stream(
    url: &str,
    session: &str,
    last: Option<&str>,
) -> mpsc::UnboundedReceiver<(String, String)> {
    let mut req = request(reqwest::Method::GET, url, Some(session), None);
    if let Some(l) = last {
        req = req.header("last-event-id", l);
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut body = resp.bytes_stream();
        let mut buf = String::new();
        while let Some(Ok(chunk)) = body.next().await {
            buf.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buf.find("\n\n") {
                let block: String = buf.drain(..end + 2).collect();
                let mut id = String::new();
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        id = v.trim().to_owned();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim());
                    }
                }
                // Priming events and keep-alives carry no message.
                if !data.is_empty() && tx.send((id, data)).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

/// The sequence of event id `id` (`{epoch:x}-{seq}`).
fn seq_of(id: &str) -> u64 {
    id.split_once('-')
        .and_then(|(_, seq)| seq.parse().ok())
        .unwrap_or_else(|| panic!("event id {id:?}"))
}

/// The id before every event of the log that event id `id` is from: its epoch, sequence 0.
fn start_of(id: &str) -> String {
    let (epoch, _) = id
        .split_once('-')
        .unwrap_or_else(|| panic!("event id {id:?}"));
    format!("{epoch}-0")
}

async fn next_event(rx: &mut mpsc::UnboundedReceiver<(String, String)>) -> (String, String) {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("no notification within 10 s")
        .expect("stream ended")
}

/// Nothing more arrives for a while, and the stream stays open.
async fn quiet(rx: &mut mpsc::UnboundedReceiver<(String, String)>, what: &str) {
    match tokio::time::timeout(Duration::from_millis(1500), rx.recv()).await {
        Err(_) => {}
        Ok(Some(ev)) => panic!("{what}: unexpected event {ev:?}"),
        Ok(None) => panic!("{what}: the stream ended"),
    }
}

async fn status_within(url: &str, session: &str, want: u16) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    loop {
        let resp = post(url, Some(session), None, list()).await;
        if resp.status() == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{url}: still {} after 3 s, wanted {want}",
            resp.status()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_roams_over_three_replicas() {
    let Some((nats, _dir, root)) = setup() else {
        return;
    };
    let a = replica(&root, nats.port(), None).await;
    let b = replica(&root, nats.port(), None).await;
    let c = replica(&root, nats.port(), None).await;

    // Everything the replicas signal each other, to check no session id travels.
    let spy = async_nats::connect(format!("nats://127.0.0.1:{}", nats.port()))
        .await
        .unwrap();
    let mut signals = spy.subscribe("mcpr.roam.sctl").await.unwrap();
    spy.flush().await.unwrap();

    // Created on A, continued on B: subscribe there.
    let id = initialize(&a, None).await;
    let listed = answer(post(&b, Some(&id), None, list()).await).await;
    let uri = listed["result"]["resources"][0]["uri"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(uri.ends_with("a.md"), "{listed}");
    let sub =
        json!({"jsonrpc": "2.0", "id": 8, "method": "resources/subscribe", "params": {"uri": uri}});
    let done = answer(post(&b, Some(&id), None, sub).await).await;
    assert!(done.get("result").is_some(), "{done}");

    // The notification stream on C; a change arrives there, once.
    let mut on_c = open_stream(&c, &id, None).await;
    std::fs::write(root.join("a.md"), "changed once").unwrap();
    let (first, data) = next_event(&mut on_c).await;
    assert!(
        data.contains("notifications/resources/updated") && data.contains(&uri),
        "{data}"
    );
    let first_n = seq_of(&first);
    quiet(&mut on_c, "a single change on C").await;

    // A second session, its stream on B, hears nothing of the first's.
    let other = initialize(&c, None).await;
    let mut other_stream = open_stream(&b, &other, Some(&start_of(&first))).await;

    // Resume on A from before the first event: replayed there, then live; C's stream ends.
    let mut on_a = open_stream(&a, &id, Some(&start_of(&first))).await;
    let (again, data) = next_event(&mut on_a).await;
    assert_eq!(again, first, "{data}");
    let closed = tokio::time::timeout(Duration::from_secs(3), on_c.recv()).await;
    assert!(
        matches!(closed, Ok(None)),
        "the old holder's stream should end: {closed:?}"
    );
    std::fs::write(root.join("a.md"), "changed twice").unwrap();
    let (second, data) = next_event(&mut on_a).await;
    assert!(data.contains(&uri), "{data}");
    let second_n = seq_of(&second);
    assert!(second_n > first_n, "{second_n} after {first_n}");
    quiet(&mut on_a, "a single change on A").await;

    // Resume on B after the first event: only the second is replayed.
    let mut on_b = open_stream(&b, &id, Some(&first)).await;
    let (replayed, _) = next_event(&mut on_b).await;
    assert_eq!(replayed, second);
    quiet(&mut on_b, "replay after the first event").await;

    // The other session, even resuming from this one's event ids, sees none of them.
    quiet(&mut other_stream, "another session's stream").await;
    let mut prying = open_stream(&a, &other, Some(&first)).await;
    quiet(&mut prying, "another session resuming from this one's id").await;

    // Unsubscribe through C: B, the holder now, stops watching.
    let unsub = json!({"jsonrpc": "2.0", "id": 9, "method": "resources/unsubscribe", "params": {"uri": uri}});
    let done = answer(post(&c, Some(&id), None, unsub).await).await;
    assert!(done.get("result").is_some(), "{done}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    std::fs::write(root.join("a.md"), "changed, unsubscribed").unwrap();
    quiet(&mut on_b, "after unsubscribe").await;

    // DELETE through A ends it everywhere.
    let resp = request(reqwest::Method::DELETE, &a, Some(&id), None)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
    for url in [&a, &b, &c] {
        status_within(url, &id, 404).await;
    }
    let closed = tokio::time::timeout(Duration::from_secs(3), on_b.recv()).await;
    assert!(
        matches!(closed, Ok(None)),
        "B's stream should end: {closed:?}"
    );
    let resp = request(reqwest::Method::GET, &c, Some(&id), None)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    // The other session lives on.
    status_within(&a, &other, 200).await;

    let mut seen = 0;
    while let Ok(Some(msg)) = tokio::time::timeout(Duration::from_millis(200), signals.next()).await
    {
        let text = String::from_utf8_lossy(&msg.payload).into_owned();
        assert!(!text.contains(&id) && !text.contains(&other), "{text}");
        seen += 1;
    }
    // Subscribe, unsubscribe, three holders, the other session's holders, the end.
    assert!(seen >= 6, "only {seen} signals");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_roaming_session_stays_bound_to_its_creator() {
    let Some((nats, _dir, root)) = setup() else {
        return;
    };
    let auth = AuthSettings {
        tokens: vec![
            StaticToken {
                token: "alice-token".into(),
                scopes: None,
                name: None,
            },
            StaticToken {
                token: "mallory-token".into(),
                scopes: None,
                name: None,
            },
        ],
        // The replicas name a token alike: keyed by the cluster's secret, as the binary does.
        identity_key: Some(mcpr_server::http::IdentityKey::derive(SECRET)),
        ..Default::default()
    };
    let a = replica(&root, nats.port(), Some(auth.clone())).await;
    let b = replica(&root, nats.port(), Some(auth)).await;

    let id = initialize(&a, Some("alice-token")).await;
    // Another token is told the session does not exist, on the replica that never saw it
    // created and on the one that did.
    for url in [&b, &a] {
        let resp = post(url, Some(&id), Some("mallory-token"), list()).await;
        assert_eq!(resp.status(), 404, "{}", resp.text().await.unwrap());
    }
    let listed = answer(post(&b, Some(&id), Some("alice-token"), list()).await).await;
    assert!(listed.to_string().contains("a.md"), "{listed}");
    let resp = request(
        reqwest::Method::DELETE,
        &b,
        Some(&id),
        Some("mallory-token"),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(resp.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_in_use_stays_shared_and_an_idle_one_is_forgotten() {
    let Some((nats, _dir, root)) = setup() else {
        return;
    };
    let ttl = Duration::from_secs(2);
    let a = replica_with_ttl(&root, nats.port(), None, ttl).await;
    let b = replica_with_ttl(&root, nats.port(), None, ttl).await;
    let c = replica_with_ttl(&root, nats.port(), None, ttl).await;

    // Used on A for twice the TTL: its shared records are kept alive, B restores it.
    let id = initialize(&a, None).await;
    for _ in 0..8 {
        answer(post(&a, Some(&id), None, list()).await).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    answer(post(&b, Some(&id), None, list()).await).await;
    // Unused for longer than the TTL: gone from the store, unknown to C.
    tokio::time::sleep(ttl + Duration::from_secs(1)).await;
    let resp = post(&c, Some(&id), None, list()).await;
    assert_eq!(resp.status(), 404, "{}", resp.text().await.unwrap());
}

/// Only one session's records purged (the stream, and so the replicas' marks, kept): the
/// replica using it writes them back at its next refresh, after which another replica
/// continues it, subscription included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_records_alone_were_purged_gets_them_back_from_its_replica() {
    let Some((nats, _dir, root)) = setup() else {
        return;
    };
    // Refreshed at most every quarter TTL: 1 s.
    let ttl = Duration::from_secs(4);
    let a = replica_with_ttl(&root, nats.port(), None, ttl).await;
    let b = replica_with_ttl(&root, nats.port(), None, ttl).await;
    let (id, uri) = subscribed(&a).await;
    let cluster = cluster_of(ttl);
    let vandal = async_nats::connect(format!("nats://127.0.0.1:{}", nats.port()))
        .await
        .unwrap();
    let filter = json!({ "filter": format!("mcpr.{cluster}.sess.{}.>", session_token(&id)) });
    let purged = vandal
        .request(
            format!("$JS.API.STREAM.PURGE.MCPR_{cluster}_SESSIONS"),
            filter.to_string().into(),
        )
        .await
        .unwrap();
    let purged: Value = serde_json::from_slice(&purged.payload).unwrap();
    assert_eq!(
        purged["purged"], 2,
        "the handshake and subscriptions: {purged}"
    );
    // Unknown to B now.
    let resp = post(&b, Some(&id), None, list()).await;
    assert_eq!(resp.status(), 404);
    // Used on A once its refresh is due: A writes the records back.
    tokio::time::sleep(ttl / 4 + Duration::from_millis(100)).await;
    answer(post(&a, Some(&id), None, list()).await).await;
    status_within(&b, &id, 200).await;
    let mut on_b = open_stream(&b, &id, None).await;
    std::fs::write(root.join("a.md"), "changed").unwrap();
    let (_, data) = next_event(&mut on_b).await;
    assert!(
        data.contains("notifications/resources/updated") && data.contains(&uri),
        "{data}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_nats_a_subscribe_fails_clearly_and_other_requests_go_on() {
    let Some((nats, _dir, root)) = setup() else {
        return;
    };
    let a = replica(&root, nats.port(), None).await;
    let id = initialize(&a, None).await;
    let listed = answer(post(&a, Some(&id), None, list()).await).await;
    let uri = listed["result"]["resources"][0]["uri"].clone();
    drop(nats);

    // The session lives on this replica: requests that need no shared record still work.
    answer(post(&a, Some(&id), None, list()).await).await;
    let started = std::time::Instant::now();
    let sub =
        json!({"jsonrpc": "2.0", "id": 8, "method": "resources/subscribe", "params": {"uri": uri}});
    let done = answer(post(&a, Some(&id), None, sub).await).await;
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    let message = done["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("shared session store"), "{done}");
}

/// The subject token of session `id` (its log and records are named by it).
fn session_token(id: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(id.as_bytes())[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A session on `url` subscribed to `a.md` (its URI returned).
async fn subscribed(url: &str) -> (String, String) {
    let id = initialize(url, None).await;
    let listed = answer(post(url, Some(&id), None, list()).await).await;
    let uri = listed["result"]["resources"][0]["uri"]
        .as_str()
        .unwrap()
        .to_owned();
    let sub =
        json!({"jsonrpc": "2.0", "id": 8, "method": "resources/subscribe", "params": {"uri": uri}});
    let done = answer(post(url, Some(&id), None, sub).await).await;
    assert!(done.get("result").is_some(), "{done}");
    (id, uri)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_log_entry_is_never_replayed() {
    let Some((nats, _dir, root)) = setup() else {
        return;
    };
    let a = replica(&root, nats.port(), None).await;
    let b = replica(&root, nats.port(), None).await;
    let (id, uri) = subscribed(&a).await;
    let mut on_a = open_stream(&a, &id, None).await;
    std::fs::write(root.join("a.md"), "changed").unwrap();
    let (first, data) = next_event(&mut on_a).await;
    assert!(data.contains(&uri), "{data}");

    // Another client of the NATS account appends a request to the session's log, as plain
    // JSON and sealed with another cluster's secret.
    let forger = async_nats::connect(format!("nats://127.0.0.1:{}", nats.port()))
        .await
        .unwrap();
    let log = format!("mcpr.roam.sev.{}", session_token(&id));
    let forged = json!({"jsonrpc": "2.0", "id": 99, "method": "sampling/createMessage",
        "params": {"messages": [], "maxTokens": 1}});
    let forged = serde_json::to_vec(&forged).unwrap();
    let stranger = Seal::new(b"another cluster's secret, 32 bytes+").unwrap();
    for payload in [
        forged.clone().into(),
        stranger.seal(Kind::Log, &log, &forged),
    ] {
        // A request: JetStream acknowledges the stored message.
        let ack = forger.request(log.clone(), payload).await.unwrap();
        assert!(
            String::from_utf8_lossy(&ack.payload).contains("\"seq\""),
            "{:?}",
            ack.payload
        );
    }

    // Resuming on B after the first event replays nothing, and the live stream there
    // carries the next real change only.
    let mut on_b = open_stream(&b, &id, Some(&first)).await;
    quiet(&mut on_b, "resume after a forged append").await;
    std::fs::write(root.join("a.md"), "changed again").unwrap();
    let (_, data) = next_event(&mut on_b).await;
    assert!(data.contains(&uri) && !data.contains("sampling"), "{data}");
    // From the start: the real events only.
    let mut from_start = open_stream(&a, &id, Some(&start_of(&first))).await;
    for _ in 0..2 {
        let (_, data) = next_event(&mut from_start).await;
        assert!(!data.contains("sampling"), "{data}");
    }
    quiet(&mut from_start, "replay from the start").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_ended_signal_does_not_close_a_stream() {
    let Some((nats, _dir, root)) = setup() else {
        return;
    };
    let a = replica(&root, nats.port(), None).await;
    let b = replica(&root, nats.port(), None).await;
    let (id, uri) = subscribed(&a).await;
    let mut on_b = open_stream(&b, &id, None).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let forger = async_nats::connect(format!("nats://127.0.0.1:{}", nats.port()))
        .await
        .unwrap();
    let subject = "mcpr.roam.sctl";
    let ended = serde_json::to_vec(&json!({ "ended": session_token(&id) })).unwrap();
    let stranger = Seal::new(b"another cluster's secret, 32 bytes+").unwrap();
    forger.publish(subject, ended.clone().into()).await.unwrap();
    forger
        .publish(subject, stranger.seal(Kind::Signal, subject, &ended))
        .await
        .unwrap();
    forger.flush().await.unwrap();

    // The stream stays open and the session usable on both replicas.
    quiet(&mut on_b, "after a forged end").await;
    std::fs::write(root.join("a.md"), "changed").unwrap();
    let (_, data) = next_event(&mut on_b).await;
    assert!(data.contains(&uri), "{data}");
    for url in [&a, &b] {
        status_within(url, &id, 200).await;
    }
}

/// The URI of `name` as `url` lists it.
async fn uri_of(url: &str, session: &str, name: &str) -> String {
    let listed = answer(post(url, Some(session), None, list()).await).await;
    listed["result"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["uri"].as_str())
        .find(|u| u.ends_with(name))
        .unwrap_or_else(|| panic!("{name} not listed: {listed}"))
        .to_owned()
}

async fn subscribe(url: &str, session: &str, uri: &str, on: bool) {
    let method = if on {
        "resources/subscribe"
    } else {
        "resources/unsubscribe"
    };
    let msg = json!({"jsonrpc": "2.0", "id": 8, "method": method, "params": {"uri": uri}});
    let done = answer(post(url, Some(session), None, msg).await).await;
    assert!(done.get("result").is_some(), "{done}");
}

/// The payload of a sealed signal, read as a replica would (the attacker cannot, but the
/// test looks at what it captured).
fn signal_payload(sealed: &[u8]) -> Value {
    let opened = seal()
        .open_record(
            Kind::Signal,
            "mcpr.roam.sctl",
            sealed,
            Duration::from_secs(600),
        )
        .expect("a replica's signal");
    serde_json::from_slice(opened).unwrap()
}

/// Every signal `spy` captured within `within`, sealed as they travelled.
async fn captured(spy: &mut async_nats::Subscriber, within: Duration) -> Vec<bytes::Bytes> {
    let mut out = Vec::new();
    while let Ok(Some(msg)) = tokio::time::timeout(within, spy.next()).await {
        out.push(msg.payload);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_subscription_record_written_again_drops_no_subscription() {
    let Some((nats, _dir, root)) = setup() else {
        return;
    };
    std::fs::write(root.join("b.md"), "b").unwrap();
    let a = replica(&root, nats.port(), None).await;
    let b = replica(&root, nats.port(), None).await;
    let attacker = async_nats::connect(format!("nats://127.0.0.1:{}", nats.port()))
        .await
        .unwrap();
    let mut spy = attacker.subscribe("mcpr.roam.sctl").await.unwrap();
    attacker.flush().await.unwrap();

    let id = initialize(&a, None).await;
    let (uri_a, uri_b) = (uri_of(&a, &id, "a.md").await, uri_of(&a, &id, "b.md").await);
    subscribe(&a, &id, &uri_a, true).await;
    // The attacker keeps a copy of the record ([a.md]) and of the signal that announced it.
    let subs = format!("mcpr.roam.sess.{}.subs", session_token(&id));
    let get = json!({ "last_by_subj": subs }).to_string();
    let reply = attacker
        .request("$JS.API.STREAM.MSG.GET.MCPR_roam_SESSIONS", get.into())
        .await
        .unwrap();
    let reply: Value = serde_json::from_slice(&reply.payload).unwrap();
    use base64::Engine as _;
    let old_record = base64::engine::general_purpose::STANDARD
        .decode(reply["message"]["data"].as_str().unwrap())
        .unwrap();
    let old_signal = captured(&mut spy, Duration::from_millis(300))
        .await
        .into_iter()
        .find(|s| signal_payload(s).get("subscriptions").is_some())
        .expect("the subscriptions signal");

    // The stream is held on B; b.md is subscribed through A: the record is [a.md, b.md].
    let mut on_b = open_stream(&b, &id, None).await;
    subscribe(&a, &id, &uri_b, true).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    // The attacker writes the old record again and replays its signal; then the client
    // unsubscribes a.md (through A), which reads the record to change it.
    let ack = attacker
        .request(subs.clone(), old_record.into())
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&ack.payload).contains("\"seq\""));
    attacker
        .publish("mcpr.roam.sctl", old_signal)
        .await
        .unwrap();
    attacker.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    subscribe(&a, &id, &uri_a, false).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    // b.md is still watched for the session: its change is notified once.
    std::fs::write(root.join("b.md"), "changed").unwrap();
    let (_, data) = next_event(&mut on_b).await;
    assert!(data.contains(&uri_b), "{data}");
    quiet(&mut on_b, "one change of b.md").await;
    // a.md was unsubscribed.
    std::fs::write(root.join("a.md"), "changed").unwrap();
    quiet(&mut on_b, "a change of the unsubscribed a.md").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_holder_signal_does_not_silence_the_live_stream() {
    let Some((nats, _dir, root)) = setup() else {
        return;
    };
    let a = replica(&root, nats.port(), None).await;
    let b = replica(&root, nats.port(), None).await;
    let attacker = async_nats::connect(format!("nats://127.0.0.1:{}", nats.port()))
        .await
        .unwrap();
    let mut spy = attacker.subscribe("mcpr.roam.sctl").await.unwrap();
    attacker.flush().await.unwrap();
    let (id, uri) = subscribed(&a).await;

    // The stream is held on A (the attacker captures that holder signal), then moves to B.
    let mut on_a = open_stream(&a, &id, None).await;
    let old = captured(&mut spy, Duration::from_millis(300))
        .await
        .into_iter()
        .find(|s| signal_payload(s).get("holder").is_some())
        .expect("A's holder signal");
    let mut on_b = open_stream(&b, &id, None).await;
    let closed = tokio::time::timeout(Duration::from_secs(3), on_a.recv()).await;
    assert!(
        matches!(closed, Ok(None)),
        "A's stream should end: {closed:?}"
    );

    // The captured signal replayed, and the same signal held back and delivered late (sealed
    // anew, as by a replica whose message was delayed): B's stream is not silenced.
    attacker
        .publish("mcpr.roam.sctl", old.clone())
        .await
        .unwrap();
    let late = serde_json::to_vec(&signal_payload(&old)).unwrap();
    attacker
        .publish(
            "mcpr.roam.sctl",
            seal().seal(Kind::Signal, "mcpr.roam.sctl", &late),
        )
        .await
        .unwrap();
    attacker.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;

    std::fs::write(root.join("a.md"), "changed").unwrap();
    let (_, data) = next_event(&mut on_b).await;
    assert!(data.contains(&uri), "{data}");
    quiet(&mut on_b, "one change").await;
}
