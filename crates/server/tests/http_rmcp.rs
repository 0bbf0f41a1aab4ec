//! rmcp's own client against the server over real loopback HTTP, in both eras: reads,
//! subscriptions, and release of every watch when a session or listen stream ends.

// resources/subscribe is deprecated in rmcp because it is legacy-only; the legacy era is
// exactly what the first test exercises.
#![allow(deprecated)]

use std::sync::Arc;
use std::time::Duration;

use mcpr_core::Provider;
use mcpr_provider_files::{FilesConfig, FilesProvider, encode_path_uri};
use mcpr_server::http::HttpSettings;
use mcpr_server::{ServerState, Settings};
use rmcp::model::{
    ClientConfig, ProtocolVersion, ReadResourceRequestParams, ResourceContents, ServerNotification,
    SubscribeRequestParams, SubscriptionFilter,
};
use rmcp::service::{
    ClientLifecycleMode, NotificationContext, RoleClient, serve_client_with_lifecycle,
};
use rmcp::transport::StreamableHttpClientTransport;
use tokio::sync::mpsc;

#[derive(Clone)]
struct Client(mpsc::UnboundedSender<String>);

impl rmcp::ClientHandler for Client {
    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _ctx: NotificationContext<RoleClient>,
    ) {
        let _ = self.0.send(params.uri);
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::default()
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    state: Arc<ServerState>,
    url: String,
}

async fn start() -> Fixture {
    // rmcp's HTTP client builds a reqwest client, which needs a process-wide TLS provider
    // even for plain http URLs.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("a.md"), "# a\n").unwrap();
    std::fs::write(root.join("b.bin"), [0u8, 255, 1, 2]).unwrap();
    let mut cfg = FilesConfig::new(&root);
    cfg.debounce = Duration::from_millis(10);
    let provider: Arc<dyn Provider> = Arc::new(FilesProvider::new(cfg).unwrap());
    let state = ServerState::new(Settings::default(), vec![provider]);
    let server = mcpr_server::http::serve(
        state.clone(),
        HttpSettings::new("127.0.0.1:0".parse().unwrap()),
        std::future::pending(),
    )
    .await
    .unwrap();
    let url = format!("http://{}/mcp", server.local_addr);
    tokio::spawn(server.wait());
    Fixture {
        _dir: dir,
        root,
        state,
        url,
    }
}

async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..300 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting until {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_session_over_http() {
    let f = start().await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let transport = StreamableHttpClientTransport::from_uri(f.url.clone());
    let client =
        serve_client_with_lifecycle(Client(tx), transport, ClientLifecycleMode::Initialize)
            .await
            .unwrap();
    let list = client.list_resources(None).await.unwrap();
    assert_eq!(list.resources.len(), 2);
    let blob = encode_path_uri(&f.root.join("b.bin"));
    let read = client
        .read_resource(ReadResourceRequestParams::new(blob))
        .await
        .unwrap();
    assert!(
        matches!(&read.contents[0], ResourceContents::BlobResourceContents { blob, .. } if blob == "AP8BAg==")
    );

    let uri = encode_path_uri(&f.root.join("a.md"));
    client
        .subscribe(SubscribeRequestParams::new(uri.clone()))
        .await
        .unwrap();
    std::fs::write(f.root.join("a.md"), "# changed\n").unwrap();
    let got = tokio::time::timeout(Duration::from_secs(2), rx.recv())
        .await
        .expect("update over the GET stream");
    assert_eq!(got.as_deref(), Some(uri.as_str()));
    assert_eq!(f.state.registry().stats().watched_uris, 1);

    // Ending the client ends the session (DELETE); its subscriptions are released.
    client.cancel().await.unwrap();
    wait_until("the session's watches are released", || {
        f.state.registry().stats().watched_uris == 0
    })
    .await;
    wait_until("the session's subscriber is gone", || {
        f.state.registry().stats().subscribers == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateless_listen_over_http() {
    let f = start().await;
    let (tx, _rx) = mpsc::unbounded_channel();
    let transport = StreamableHttpClientTransport::from_uri(f.url.clone());
    let mode = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    let client = serve_client_with_lifecycle(Client(tx), transport, mode)
        .await
        .unwrap();
    let uri = encode_path_uri(&f.root.join("a.md"));
    let read = client
        .read_resource(ReadResourceRequestParams::new(uri.clone()))
        .await
        .unwrap();
    assert!(
        matches!(&read.contents[0], ResourceContents::TextResourceContents { text, .. } if text == "# a\n")
    );

    let mut filter = SubscriptionFilter::default();
    filter.resource_subscriptions = Some(vec![uri.clone()]);
    let mut sub = client.listen(filter).await.unwrap();
    wait_until("the listen stream watches the file", || {
        f.state.registry().stats().watched_uris == 1
    })
    .await;
    std::fs::write(f.root.join("a.md"), "# changed\n").unwrap();
    let n = tokio::time::timeout(Duration::from_secs(2), sub.next())
        .await
        .expect("update on the listen stream")
        .unwrap();
    assert!(
        matches!(n, Some(ServerNotification::ResourceUpdatedNotification(u)) if u.params.uri == uri)
    );

    // Dropping the subscription closes its stream, which cancels the listen and releases
    // its watch; the client itself stays connected.
    drop(sub);
    wait_until("the listen stream's watch is released", || {
        f.state.registry().stats().watched_uris == 0
    })
    .await;
    wait_until("the listen stream's subscriber is gone", || {
        f.state.registry().stats().subscribers == 0
    })
    .await;
    client
        .read_resource(ReadResourceRequestParams::new(uri))
        .await
        .unwrap();
}
