//! `/metrics` counts the handshakes: `initialize` (legacy era) and `server/discover`
//! (2026-07-28) appear in `mcp_requests_total` and `mcp_request_duration_seconds` like every
//! other method, over stdio and over HTTP, with rmcp's own client making them.

mod common;

use std::sync::Arc;

use mcpr_core::Provider;
use mcpr_provider_files::{FilesConfig, FilesProvider};
use mcpr_server::http::HttpSettings;
use mcpr_server::{McpHandler, ServerState, Settings};
use rmcp::ServiceExt as _;
use rmcp::model::{ClientConfig, ProtocolVersion};
use rmcp::service::{ClientLifecycleMode, serve_client_with_lifecycle};
use rmcp::transport::StreamableHttpClientTransport;

#[derive(Clone)]
struct Client;

impl rmcp::ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::default()
    }
}

fn state(root: &std::path::Path) -> Arc<ServerState> {
    let provider: Arc<dyn Provider> = Arc::new(FilesProvider::new(FilesConfig::new(root)).unwrap());
    ServerState::new(Settings::default(), vec![provider])
}

fn lifecycle(modern: bool) -> ClientLifecycleMode {
    if modern {
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        }
    } else {
        ClientLifecycleMode::Initialize
    }
}

/// The value of one `/metrics` line, by its name and labels.
fn sample(text: &str, series: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_and_discover_are_counted_in_both_transports() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.md"), "# a\n").unwrap();

    // stdio, the binary's way: our transport with direct reads, one client per era.
    let stdio = state(dir.path());
    for modern in [false, true] {
        let (transport, client_r, client_w) = common::stdio_socket();
        let transport = transport.with_direct_reads(McpHandler::new(stdio.clone()));
        let handler = McpHandler::new(stdio.clone());
        tokio::spawn(async move {
            if let Ok(running) = handler.serve(transport).await {
                let _ = running.waiting().await;
            }
        });
        let client = serve_client_with_lifecycle(Client, (client_r, client_w), lifecycle(modern))
            .await
            .expect("the client connects");
        client.list_resources(None).await.unwrap();
        client.cancel().await.unwrap();
    }
    let m = stdio.metrics();
    assert_eq!(m.count("initialize", "ok"), 1, "stdio");
    assert_eq!(m.count("server/discover", "ok"), 1, "stdio");
    assert_eq!(m.count("resources/list", "ok"), 2, "stdio");

    // HTTP: a legacy session and a 2026-07-28 client, then what /metrics says.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = state(dir.path());
    let base = common::spawn_http(
        http.clone(),
        HttpSettings::new("127.0.0.1:0".parse().unwrap()),
    )
    .await;
    for modern in [false, true] {
        let transport = StreamableHttpClientTransport::from_uri(format!("{base}/mcp"));
        let client = serve_client_with_lifecycle(Client, transport, lifecycle(modern))
            .await
            .expect("the client connects");
        client.list_resources(None).await.unwrap();
        client.cancel().await.unwrap();
    }
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for method in ["initialize", "server/discover"] {
        assert_eq!(
            sample(
                &text,
                &format!("mcp_requests_total{{method=\"{method}\",outcome=\"ok\"}}")
            ),
            Some(1),
            "{method}: {text}"
        );
        assert_eq!(
            sample(
                &text,
                &format!("mcp_request_duration_seconds_count{{method=\"{method}\"}}")
            ),
            Some(1),
            "{method}: {text}"
        );
    }
    assert_eq!(
        sample(
            &text,
            "mcp_requests_total{method=\"resources/list\",outcome=\"ok\"}"
        ),
        Some(2),
        "{text}"
    );
}
