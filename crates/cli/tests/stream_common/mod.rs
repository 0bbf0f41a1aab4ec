//! What the cluster tests share (cluster.rs, cluster_streams.rs, gateway_cluster.rs): a free
//! loopback port, the TLS provider reqwest needs, a stream's JSON-RPC messages collected in
//! the background, and waiting for a condition with a deadline.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use serde_json::Value;

/// reqwest is built without a default TLS provider; the workspace uses ring.
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The JSON-RPC messages of an SSE or JSON body.
pub fn messages(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|l| {
            let data = l.strip_prefix("data:").map(str::trim).unwrap_or(l.trim());
            serde_json::from_str(data).ok()
        })
        .collect()
}

/// A stream's messages, collected in the background.
#[derive(Clone, Default)]
pub struct Heard(Arc<Mutex<Vec<Value>>>);

impl Heard {
    pub fn follow(resp: reqwest::Response) -> Self {
        let heard = Self::default();
        let h = heard.clone();
        tokio::spawn(async move {
            let mut buf = String::new();
            let mut body = resp.bytes_stream();
            while let Some(Ok(chunk)) = body.next().await {
                buf.push_str(&String::from_utf8_lossy(&chunk));
                while let Some(end) = buf.find("\n\n") {
                    let event: String = buf.drain(..end + 2).collect();
                    h.0.lock().unwrap().extend(messages(&event));
                }
            }
        });
        heard
    }

    /// How many `notifications/resources/updated` of `uri` were heard.
    pub fn updates(&self, uri: &str) -> usize {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|m| {
                m["method"] == "notifications/resources/updated" && m["params"]["uri"] == uri
            })
            .count()
    }

    pub fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// Wait until `ok`, polling every 25 ms; fail naming `what` after `within`.
pub async fn wait_for(what: &str, within: Duration, mut ok: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + within;
    loop {
        if ok().await {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
