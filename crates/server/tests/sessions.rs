//! In-process protocol tests: the real handler and the real files provider, connected to
//! rmcp's client through an in-memory byte pipe, in both protocol eras.

// resources/subscribe is deprecated in rmcp because it is legacy-only; the legacy era is
// exactly what the first test exercises.
#![allow(deprecated)]

use std::sync::Arc;
use std::time::Duration;

use mcpr_core::Provider;
use mcpr_provider_files::{FilesConfig, FilesProvider, encode_path_uri};
use mcpr_server::{McpHandler, ServerState, Settings};
use rmcp::model::{
    ClientConfig, PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams,
    ServerNotification, SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams,
};
use rmcp::service::{
    ClientLifecycleMode, NotificationContext, RoleClient, serve_client_with_lifecycle,
};
use rmcp::{ClientHandler, ServiceExt};
use tokio::sync::mpsc;

#[derive(Clone)]
struct Client {
    tx: mpsc::UnboundedSender<String>,
}

impl ClientHandler for Client {
    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _ctx: NotificationContext<RoleClient>,
    ) {
        let _ = self.tx.send(params.uri);
    }

    async fn on_resource_list_changed(&self, _ctx: NotificationContext<RoleClient>) {
        let _ = self.tx.send("list_changed".into());
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::default()
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    state: Arc<ServerState>,
}

fn setup(page_size: usize) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    for i in 0..23 {
        std::fs::write(root.join(format!("f{i:02}.txt")), format!("file {i}")).unwrap();
    }
    let mut cfg = FilesConfig::new(&root);
    cfg.debounce = Duration::from_millis(10);
    let provider: Arc<dyn Provider> = Arc::new(FilesProvider::new(cfg).unwrap());
    let settings = Settings {
        page_size,
        ..Settings::default()
    };
    Setup {
        _dir: dir,
        root,
        state: ServerState::new(settings, vec![provider]),
    }
}

/// Start the handler on one end of a pipe and rmcp's client on the other.
async fn connect(
    state: &Arc<ServerState>,
    mode: ClientLifecycleMode,
) -> (
    rmcp::service::RunningService<RoleClient, Client>,
    mpsc::UnboundedReceiver<String>,
    tokio::task::JoinHandle<()>,
) {
    let (client_io, server_io) = tokio::io::duplex(1 << 20);
    let handler = McpHandler::new(state.clone());
    let server = tokio::spawn(async move {
        if let Ok(running) = handler.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    let (tx, rx) = mpsc::unbounded_channel();
    let client = serve_client_with_lifecycle(Client { tx }, client_io, mode)
        .await
        .expect("client connects");
    (client, rx, server)
}

async fn recv(rx: &mut mpsc::UnboundedReceiver<String>, within: Duration) -> Option<String> {
    tokio::time::timeout(within, rx.recv()).await.ok().flatten()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_pagination_subscription_and_release_on_session_end() {
    let s = setup(5);
    let (client, mut rx, server) = connect(&s.state, ClientLifecycleMode::Initialize).await;

    // Pagination across several pages: every file once, in order.
    let mut uris = Vec::new();
    let mut cursor = None;
    loop {
        let mut params = PaginatedRequestParams::default();
        params.cursor = cursor;
        let page = client.list_resources(Some(params)).await.unwrap();
        assert!(page.resources.len() <= 5);
        uris.extend(page.resources.into_iter().map(|r| r.uri));
        cursor = page.next_cursor;
        if cursor.is_none() {
            break;
        }
    }
    let expected: Vec<String> = (0..23)
        .map(|i| encode_path_uri(&s.root.join(format!("f{i:02}.txt"))))
        .collect();
    assert_eq!(uris, expected);

    // A tampered cursor is invalid params.
    let mut params = PaginatedRequestParams::default();
    params.cursor = Some("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".into());
    let err = client.list_resources(Some(params)).await.unwrap_err();
    assert!(format!("{err:?}").contains("-32602"), "{err:?}");

    // Subscribe, modify, get notified; the registry holds one watch.
    let uri = expected[0].clone();
    client
        .subscribe(SubscribeRequestParams::new(uri.clone()))
        .await
        .unwrap();
    assert_eq!(s.state.registry().stats().watched_uris, 1);
    std::fs::write(s.root.join("f00.txt"), "changed").unwrap();
    loop {
        let got = recv(&mut rx, Duration::from_secs(2))
            .await
            .expect("update within 2 s");
        if got == uri {
            break;
        }
        assert_eq!(got, "list_changed", "unexpected notification {got}");
    }
    client
        .unsubscribe(UnsubscribeRequestParams::new(uri.clone()))
        .await
        .unwrap();
    assert_eq!(s.state.registry().stats().watched_uris, 0);

    // Subscribe again, then end the session: everything it held is released.
    client
        .subscribe(SubscribeRequestParams::new(expected[1].clone()))
        .await
        .unwrap();
    let stats = s.state.registry().stats();
    assert_eq!((stats.subscribers, stats.watched_uris), (1, 1));
    assert!(
        stats.list_listeners == 1,
        "a legacy session listens for list changes: {stats:?}"
    );
    client.cancel().await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("server session ends")
        .unwrap();
    let stats = s.state.registry().stats();
    assert_eq!(
        (stats.subscribers, stats.watched_uris, stats.list_listeners),
        (0, 0, 0),
        "{stats:?}"
    );
    assert!(!stats.list_watch_active);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modern_listen_notifies_and_releases_on_cancel() {
    let s = setup(100);
    let mode = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    let (client, _rx, _server) = connect(&s.state, mode).await;
    let uri = encode_path_uri(&s.root.join("f03.txt"));

    // Not found is -32602 with data.uri in this era.
    let missing = encode_path_uri(&s.root.join("nope.txt"));
    let err = client
        .read_resource(ReadResourceRequestParams::new(missing.clone()))
        .await
        .unwrap_err();
    let text = format!("{err:?}");
    assert!(text.contains("-32602") && text.contains(&missing), "{text}");

    let mut filter = SubscriptionFilter::default();
    filter.resource_subscriptions = Some(vec![uri.clone()]);
    filter.resources_list_changed = Some(true);
    let mut sub = client.listen(filter).await.unwrap();
    assert_eq!(
        sub.acknowledged().resource_subscriptions.as_deref(),
        Some(&[uri.clone()][..])
    );
    // The listen loop registers asynchronously after the acknowledgment.
    for _ in 0..100 {
        if s.state.registry().stats().watched_uris == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    std::fs::write(s.root.join("f03.txt"), "changed").unwrap();
    let mut saw_update = false;
    while !saw_update {
        let n = tokio::time::timeout(Duration::from_secs(2), sub.next())
            .await
            .expect("notification within 2 s")
            .unwrap();
        match n {
            Some(ServerNotification::ResourceUpdatedNotification(u)) => {
                assert_eq!(u.params.uri, uri);
                saw_update = true;
            }
            Some(ServerNotification::ResourceListChangedNotification(_)) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    std::fs::write(s.root.join("brand-new.txt"), "new").unwrap();
    loop {
        let n = tokio::time::timeout(Duration::from_secs(2), sub.next())
            .await
            .expect("list change within 2 s")
            .unwrap();
        if matches!(
            n,
            Some(ServerNotification::ResourceListChangedNotification(_))
        ) {
            break;
        }
    }
    drop(sub);
    for _ in 0..200 {
        if s.state.registry().stats() == Default::default() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        s.state.registry().stats(),
        Default::default(),
        "cancelling the listen releases every watch"
    );
    // Reads still carry cache hints in this era.
    let r = client
        .read_resource(ReadResourceRequestParams::new(uri))
        .await
        .unwrap();
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["ttlMs"], 0, "{json}");
    assert_eq!(json["cacheScope"], "public", "{json}");
}

/// Issue #20, item 3, over a byte pipe (what stdio is): the one peer's listen streams are
/// capped by `max_listen_streams_per_client`, and subscriptions of both eras by
/// `max_watches`; each refusal names its setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_and_watch_limits_over_a_pipe() {
    let mut s = setup(100);
    s.state = ServerState::new(
        Settings {
            max_listen_streams_per_client: 1,
            max_watches: 2,
            ..Settings::default()
        },
        s.state
            .router()
            .mounts()
            .iter()
            .map(|m| m.provider.clone())
            .collect(),
    );
    let uri = |i: usize| encode_path_uri(&s.root.join(format!("f{i:02}.txt")));

    // Legacy era: the third subscription goes past the budget.
    let (legacy, _rx, _server) = connect(&s.state, ClientLifecycleMode::Initialize).await;
    for i in 0..2 {
        legacy
            .subscribe(SubscribeRequestParams::new(uri(i)))
            .await
            .unwrap();
    }
    let err = legacy
        .subscribe(SubscribeRequestParams::new(uri(2)))
        .await
        .unwrap_err();
    let text = format!("{err:?}");
    assert!(text.contains("max_watches"), "{text}");
    legacy
        .unsubscribe(UnsubscribeRequestParams::new(uri(0)))
        .await
        .unwrap();

    // 2026-07-28 era: one listen stream is allowed, a second is refused.
    let mode = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    let (client, _rx2, _server2) = connect(&s.state, mode).await;
    let mut filter = SubscriptionFilter::default();
    filter.resource_subscriptions = Some(vec![uri(5)]);
    let _first = client.listen(filter.clone()).await.unwrap();
    // The stream is counted before its watches are in place: wait for both, or a loaded
    // machine sees the stream with its subscription still on the way.
    for _ in 0..500 {
        let stats = s.state.registry().stats();
        if stats.listen_streams == 1 && stats.subscriptions == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(s.state.registry().stats().subscriptions, 2);
    let second = match client.listen(filter).await {
        Err(e) => format!("{e:?}"),
        Ok(mut sub) => format!(
            "{:?}",
            tokio::time::timeout(Duration::from_secs(2), sub.next()).await
        ),
    };
    assert!(second.contains("max_listen_streams_per_client"), "{second}");
    assert_eq!(s.state.registry().stats().listen_streams, 1);
}
