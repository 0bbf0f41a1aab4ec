//! HTTP/2 with prior knowledge on loopback: requests carry their host in `:authority` and no
//! `Host` header (reqwest sends none over HTTP/2), and every Host check reads it from there.

mod common;

use std::sync::Arc;

use mcpr_core::Provider;
use mcpr_provider_files::{FilesConfig, FilesProvider};
use mcpr_server::http::HttpSettings;
use mcpr_server::{ServerState, Settings};
use serde_json::json;

async fn server() -> (tempfile::TempDir, std::net::SocketAddr) {
    let docs = tempfile::tempdir().unwrap();
    std::fs::write(docs.path().join("a.md"), "# a").unwrap();
    let provider: Arc<dyn Provider> =
        Arc::new(FilesProvider::new(FilesConfig::new(docs.path())).unwrap());
    let state = ServerState::new(Settings::default(), vec![provider]);
    let mut http = HttpSettings::new("127.0.0.1:0".parse().unwrap());
    http.allowed_hosts = vec!["mcp.example.test".into()];
    let base = common::spawn_http(state, http).await;
    let addr = base.trim_start_matches("http://").parse().unwrap();
    (docs, addr)
}

/// An HTTP/2-only client that sends every name to the test server's address.
fn h2_client(addr: std::net::SocketAddr) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .http2_prior_knowledge()
        .resolve("mcp.example.test", addr)
        .resolve("evil.example", addr)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_requests_without_host_are_checked_by_their_authority() {
    let (_docs, addr) = server().await;
    let client = h2_client(addr);
    let port = addr.port();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}});
    for (host, want) in [("mcp.example.test", 200), ("evil.example", 403)] {
        // The operational endpoints (`ops_gate`).
        let resp = client
            .get(format!("http://{host}:{port}/readyz"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.version(), reqwest::Version::HTTP_2);
        assert_eq!(resp.status().as_u16(), want, "/readyz as {host}");
        // The MCP endpoint (rmcp's own Host check).
        let resp = client
            .post(format!("http://{host}:{port}/mcp"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .json(&initialize)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let body = resp.text().await.unwrap();
        assert_eq!(status, want, "/mcp as {host}: {body}");
        if want == 200 {
            assert!(body.contains("serverInfo"), "{body}");
        }
    }
}
