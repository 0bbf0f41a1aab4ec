//! The limits at the HTTP edge, as one axum middleware in front of the MCP endpoint: shutdown
//! draining, per-client rate limit, concurrency limit, body size, session cap, and HTTP
//! request counters. Each refusal is a clear HTTP status with a JSON-RPC error body naming
//! the limit.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, Method, StatusCode};
use http_body_util::BodyExt as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use tokio::sync::{Notify, Semaphore};

/// Limits of the HTTP edge.
#[derive(Debug, Clone)]
pub struct HttpLimits {
    /// Largest accepted POST body.
    pub max_body_bytes: usize,
    /// Requests handled at once; more answer 503.
    pub max_concurrent_requests: usize,
    /// Sustained requests per second per client address (0 disables).
    pub rate_limit_per_second: f64,
    /// Requests a client may burst above the sustained rate.
    pub rate_limit_burst: u32,
    /// Legacy sessions open at once; more `initialize` requests answer 503.
    pub max_sessions: usize,
    /// A legacy session idle this long is closed and its subscriptions released.
    pub session_idle_timeout: Duration,
    /// How long shutdown waits for in-flight requests.
    pub shutdown_grace: Duration,
    /// Events of a session's notification stream kept for `Last-Event-ID` resumption.
    pub event_store_capacity: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            max_body_bytes: 1024 * 1024,
            max_concurrent_requests: 512,
            rate_limit_per_second: 0.0,
            rate_limit_burst: 100,
            max_sessions: 1000,
            session_idle_timeout: Duration::from_secs(300),
            shutdown_grace: Duration::from_secs(10),
            event_store_capacity: 64,
        }
    }
}

struct Bucket {
    tokens: f64,
    last: Instant,
}

/// Shared state of the edge middleware.
pub struct Edge {
    pub(crate) limits: HttpLimits,
    buckets: Mutex<HashMap<IpAddr, Bucket>>,
    concurrency: Arc<Semaphore>,
    pub(crate) sessions: Arc<LocalSessionManager>,
    draining: AtomicBool,
    inflight: AtomicUsize,
    idle: Notify,
    /// HTTP responses by status class: 2xx, 3xx, 4xx, 5xx.
    pub(crate) by_status: [AtomicU64; 4],
}

impl Edge {
    pub(crate) fn new(limits: HttpLimits, sessions: Arc<LocalSessionManager>) -> Arc<Self> {
        Arc::new(Self {
            concurrency: Arc::new(Semaphore::new(limits.max_concurrent_requests.max(1))),
            limits,
            buckets: Mutex::new(HashMap::new()),
            sessions,
            draining: AtomicBool::new(false),
            inflight: AtomicUsize::new(0),
            idle: Notify::new(),
            by_status: Default::default(),
        })
    }

    /// Refuse new requests and wait (at most the grace period) for in-flight ones to finish.
    pub(crate) async fn drain(&self) {
        self.draining.store(true, Ordering::SeqCst);
        let deadline = tokio::time::Instant::now() + self.limits.shutdown_grace;
        while self.inflight.load(Ordering::SeqCst) > 0 {
            let notified = self.idle.notified();
            if self.inflight.load(Ordering::SeqCst) == 0 {
                break;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                tracing::warn!(
                    inflight = self.inflight.load(Ordering::SeqCst),
                    "shutdown grace period over; closing with requests still running"
                );
                break;
            }
        }
    }

    /// Requests being answered now (streams excluded).
    pub fn inflight(&self) -> usize {
        self.inflight.load(Ordering::SeqCst)
    }

    fn take_token(&self, ip: IpAddr) -> Result<(), Duration> {
        let rate = self.limits.rate_limit_per_second;
        if rate <= 0.0 {
            return Ok(());
        }
        let burst = f64::from(self.limits.rate_limit_burst.max(1));
        let now = Instant::now();
        let mut buckets = self.buckets.lock().expect("rate lock");
        if buckets.len() > 100_000 {
            // Forget clients idle long enough to have refilled; bounds memory under a flood
            // of distinct addresses.
            buckets.retain(|_, b| now.duration_since(b.last).as_secs_f64() * rate < burst);
        }
        let b = buckets.entry(ip).or_insert(Bucket {
            tokens: burst,
            last: now,
        });
        b.tokens = (b.tokens + now.duration_since(b.last).as_secs_f64() * rate).min(burst);
        b.last = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - b.tokens) / rate))
        }
    }
}

/// A JSON-RPC error as an HTTP response.
pub(crate) fn refuse(status: StatusCode, code: i32, message: String) -> Response {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}});
    (status, axum::Json(body)).into_response()
}

/// Decrements the in-flight count when the response body is done (or dropped).
struct InflightGuard(Arc<Edge>);

impl Drop for InflightGuard {
    fn drop(&mut self) {
        if self.0.inflight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// The edge middleware; see the module docs.
pub async fn edge(
    State(edge): State<Arc<Edge>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
    next: Next,
) -> Response {
    let resp = guarded(&edge, peer, req, next).await;
    let class = (resp.status().as_u16() / 100).clamp(2, 5) as usize - 2;
    edge.by_status[class].fetch_add(1, Ordering::Relaxed);
    resp
}

async fn guarded(edge: &Arc<Edge>, peer: SocketAddr, req: Request, next: Next) -> Response {
    if edge.draining.load(Ordering::SeqCst) {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            -32603,
            "the server is shutting down".into(),
        );
    }
    if let Err(wait) = edge.take_token(peer.ip()) {
        let mut r = refuse(
            StatusCode::TOO_MANY_REQUESTS,
            -32603,
            format!(
                "rate limit exceeded: at most {} requests per second per client (burst {}); retry in {} ms",
                edge.limits.rate_limit_per_second,
                edge.limits.rate_limit_burst,
                wait.as_millis()
            ),
        );
        let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
        if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
            r.headers_mut().insert(http::header::RETRY_AFTER, v);
        }
        return r;
    }
    let Ok(_permit) = edge.concurrency.clone().try_acquire_owned() else {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            -32603,
            format!(
                "server busy: {} requests are already being handled (max_concurrent_requests)",
                edge.limits.max_concurrent_requests
            ),
        );
    };
    let (req, streaming) = if req.method() == Method::POST {
        match inspect_post(edge, req).await {
            Ok(x) => x,
            Err(resp) => return resp,
        }
    } else {
        // GET opens the session's notification stream; DELETE is quick but not worth waiting on.
        (req, true)
    };
    if streaming {
        return next.run(req).await;
    }
    edge.inflight.fetch_add(1, Ordering::SeqCst);
    let guard = InflightGuard(edge.clone());
    let resp = next.run(req).await;
    // The request is in flight until its body (JSON or a per-request SSE stream) is done.
    let (parts, body) = resp.into_parts();
    let body = Body::new(body.map_frame(move |f| {
        let _ = &guard;
        f
    }));
    Response::from_parts(parts, body)
}

/// Buffer a POST body within the size limit and look at its JSON-RPC method: an
/// `initialize` may not exceed the session cap, and a `subscriptions/listen` is a stream,
/// not a request that shutdown should wait for.
async fn inspect_post(edge: &Arc<Edge>, req: Request) -> Result<(Request, bool), Response> {
    let (parts, body) = req.into_parts();
    let limit = edge.limits.max_body_bytes;
    let bytes = match http_body_util::Limited::new(body, limit).collect().await {
        Ok(c) => c.to_bytes(),
        Err(_) => {
            return Err(refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                -32600,
                format!("request body is larger than the limit of {limit} bytes (max_body_bytes)"),
            ));
        }
    };
    #[derive(serde::Deserialize)]
    struct Peek<'a> {
        #[serde(borrow)]
        method: Option<std::borrow::Cow<'a, str>>,
    }
    let method = serde_json::from_slice::<Peek<'_>>(&bytes)
        .ok()
        .and_then(|p| p.method)
        .map(|m| m.into_owned());
    let has_session = parts.headers.contains_key("mcp-session-id");
    if method.as_deref() == Some("initialize") && !has_session {
        let open = edge.sessions.sessions.read().await.len();
        if open >= edge.limits.max_sessions {
            return Err(refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                -32603,
                format!(
                    "too many sessions: {open} are open, the limit is {} (max_sessions)",
                    edge.limits.max_sessions
                ),
            ));
        }
    }
    let streaming = method.as_deref() == Some("subscriptions/listen");
    Ok((Request::from_parts(parts, Body::from(bytes)), streaming))
}
