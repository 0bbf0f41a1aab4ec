//! The legacy session store seam: two servers over the same directory share an in-memory
//! `SessionStore`, as replicas share one in a cluster. A session created on one is continued
//! on the other (rmcp restores it from the stored handshake); without a store it is unknown
//! there. Real servers on loopback, raw HTTP.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use mcpr_core::Provider;
use mcpr_provider_files::{FilesConfig, FilesProvider};
use mcpr_server::http::{HttpSettings, SessionState, SessionStore, SessionStoreError};
use mcpr_server::{ServerState, Settings};
use serde_json::{Value, json};

#[derive(Default)]
struct MemoryStore(Mutex<HashMap<String, SessionState>>);

#[async_trait::async_trait]
impl SessionStore for MemoryStore {
    async fn load(&self, id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        Ok(self.0.lock().unwrap().get(id).cloned())
    }
    async fn store(&self, id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        self.0.lock().unwrap().insert(id.to_owned(), state.clone());
        Ok(())
    }
    async fn delete(&self, id: &str) -> Result<(), SessionStoreError> {
        self.0.lock().unwrap().remove(id);
        Ok(())
    }
}

async fn replica(root: &std::path::Path, store: Option<Arc<dyn SessionStore>>) -> String {
    replica_with_state(root, store).await.0
}

/// A replica's endpoint and its state (for its metrics).
async fn replica_with_state(
    root: &std::path::Path,
    store: Option<Arc<dyn SessionStore>>,
) -> (String, Arc<ServerState>) {
    let provider: Arc<dyn Provider> = Arc::new(FilesProvider::new(FilesConfig::new(root)).unwrap());
    let state = ServerState::new(Settings::default(), vec![provider]);
    let mut http = HttpSettings::new("127.0.0.1:0".parse().unwrap());
    http.session_store = store;
    let url = format!("{}/mcp", common::spawn_http(state.clone(), http).await);
    (url, state)
}

async fn post(url: &str, session: Option<&str>, message: Value) -> reqwest::Response {
    let mut req = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25");
    if let Some(id) = session {
        req = req.header("mcp-session-id", id);
    }
    req.json(&message).send().await.unwrap()
}

async fn initialize(url: &str) -> String {
    let resp = post(
        url,
        None,
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
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(resp.status(), 202);
    id
}

fn list() -> Value {
    json!({"jsonrpc": "2.0", "id": 7, "method": "resources/list", "params": {}})
}

#[tokio::test]
async fn a_session_created_on_one_replica_continues_on_another_through_the_store() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("a.md"), "a").unwrap();
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::default());
    let a = replica(&root, Some(store.clone())).await;
    let b = replica(&root, Some(store.clone())).await;
    let alone = replica(&root, None).await;

    let id = initialize(&a).await;
    let resp = post(&b, Some(&id), list()).await;
    assert_eq!(resp.status(), 200);
    let body = resp.text().await.unwrap();
    assert!(body.contains("a.md"), "{body}");

    // A replica without the store does not know the session.
    let resp = post(&alone, Some(&id), list()).await;
    assert_eq!(resp.status(), 404, "{}", resp.text().await.unwrap());
}

/// rmcp replays the stored `initialize` to restore a session on another replica: no client
/// asked for it there, so that replica's `/metrics` does not count it.
#[tokio::test]
async fn a_restored_session_is_not_counted_as_an_initialize() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::default());
    let (a, a_state) = replica_with_state(&root, Some(store.clone())).await;
    let (b, b_state) = replica_with_state(&root, Some(store)).await;
    let id = initialize(&a).await;
    let resp = post(&b, Some(&id), list()).await;
    assert_eq!(resp.status(), 200);
    let _ = resp.text().await;
    assert_eq!(a_state.metrics().count("initialize", "ok"), 1);
    assert_eq!(b_state.metrics().count("initialize", "ok"), 0);
    assert_eq!(b_state.metrics().count("resources/list", "ok"), 1);
}

#[test]
fn a_shared_store_with_authentication_is_refused() {
    let mut http = HttpSettings::new("127.0.0.1:0".parse().unwrap());
    http.session_store = Some(Arc::new(MemoryStore::default()));
    http.auth = Some(mcpr_server::http::AuthSettings {
        tokens: vec![mcpr_server::http::StaticToken {
            token: "t".into(),
            scopes: None,
            name: None,
        }],
        ..Default::default()
    });
    let e = http.check().unwrap_err();
    assert!(e.contains("session store"), "{e}");
}
