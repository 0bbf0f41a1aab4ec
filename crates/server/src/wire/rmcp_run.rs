//! rmcp's own code, run for the pairing tests of the mirrors in this folder: its serve loop
//! over a scripted transport, and its streamable HTTP service configured as `http::serve`
//! configures it.

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use http::{Method, Request, StatusCode};
use rmcp::service::{RoleServer, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ServerHandler, ServiceExt};
use tokio::time::Instant;

/// An answer of rmcp's HTTP service.
pub(crate) type RmcpResponse =
    http::Response<http_body_util::combinators::BoxBody<bytes::Bytes, std::convert::Infallible>>;

/// What rmcp sent, each message with the time since the start.
pub(crate) type Sent = Vec<(Duration, TxJsonRpcMessage<RoleServer>)>;

/// A transport that gives rmcp `input` (JSON-RPC lines), then ends it `eof_after` the start,
/// and keeps what rmcp sends with the time it was sent.
struct Scripted {
    input: VecDeque<RxJsonRpcMessage<RoleServer>>,
    start: Instant,
    eof_after: Duration,
    sent: Arc<Mutex<Sent>>,
}

impl Transport<RoleServer> for Scripted {
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), io::Error>> + Send + 'static {
        mcpr_core::sync::lock(&self.sent).push((self.start.elapsed(), item));
        std::future::ready(Ok(()))
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        if let Some(msg) = self.input.pop_front() {
            return Some(msg);
        }
        tokio::time::sleep_until(self.start + self.eof_after).await;
        None
    }

    async fn close(&mut self) -> Result<(), io::Error> {
        Ok(())
    }
}

/// rmcp's serve loop run with `handler` over `input`, to its end (input ends `eof_after` the
/// start): what it sent.
pub(crate) async fn serve<H: ServerHandler>(
    handler: H,
    input: &[String],
    eof_after: Duration,
) -> Sent {
    let sent = Arc::default();
    let transport = Scripted {
        input: input
            .iter()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect(),
        start: Instant::now(),
        eof_after,
        sent: Arc::clone(&sent),
    };
    let running = handler.serve(transport).await.unwrap();
    let _ = running.waiting().await;
    std::mem::take(&mut *mcpr_core::sync::lock(&sent))
}

/// The `initialize` of a session below 2026-07-28, id 0, and its `initialized`.
pub(crate) fn legacy_opening() -> [String; 2] {
    [
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#.into(),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.into(),
    ]
}

/// The `_meta` a 2026-07-28 request carries.
pub(crate) const META_2026: &str = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"}}"#;

/// The hosts `http::serve` allows by default.
pub(crate) const HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// rmcp's streamable HTTP service configured as `http::serve` configures it (JSON answers,
/// sessions for the legacy era, the default hosts, `origins` or none), over the handlers
/// `handler` makes.
/// `shutdown` is the token whose cancellation closes its streams, as at the server's
/// shutdown.
pub(crate) fn http_service<H: ServerHandler>(
    handler: impl Fn() -> H + Send + Sync + 'static,
    origins: &[String],
    shutdown: tokio_util::sync::CancellationToken,
) -> StreamableHttpService<H, LocalSessionManager> {
    http_service_for(handler, &HOSTS.map(str::to_owned), origins, shutdown)
}

/// [`http_service`] allowing `hosts` (an empty list: any host, as `http::serve` configures
/// rmcp for an empty `allowed_hosts`).
pub(crate) fn http_service_for<H: ServerHandler>(
    handler: impl Fn() -> H + Send + Sync + 'static,
    hosts: &[String],
    origins: &[String],
    shutdown: tokio_util::sync::CancellationToken,
) -> StreamableHttpService<H, LocalSessionManager> {
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts.to_vec())
        .with_cancellation_token(shutdown)
        .with_json_response(true);
    config = if origins.is_empty() {
        config.enforce_origin_validation()
    } else {
        config.with_allowed_origins(origins.to_vec())
    };
    StreamableHttpService::new(move || Ok(handler()), Arc::default(), config)
}

/// A POST to `/mcp` as a 2026-07-28 client sends one, with `Host` and `Origin` as given.
pub(crate) fn post(method: &str, body: Body, host: &str, origin: Option<&str>) -> Request<Body> {
    let mut req = Request::builder()
        .method(Method::POST)
        .uri("/mcp")
        .header("host", host)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(origin) = origin {
        req = req.header("origin", origin);
    }
    req.body(body).unwrap()
}

/// A POST to `/mcp` as a client of a legacy session sends one: no 2026-07-28 headers, the
/// session's id if any.
pub(crate) fn legacy_post(body: &str, session: Option<&str>) -> Request<Body> {
    let mut req = Request::builder()
        .method(Method::POST)
        .uri("/mcp")
        .header("host", "localhost:8080")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(session) = session {
        req = req.header("mcp-session-id", session);
    }
    req.body(Body::from(body.to_owned())).unwrap()
}

/// An answer's status, `Content-Type` and body.
pub(crate) async fn parts_of(resp: Response) -> (StatusCode, Option<String>, Vec<u8>) {
    let status = resp.status();
    let content_type = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_owned());
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, content_type, body.to_vec())
}
