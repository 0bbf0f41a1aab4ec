//! The HTTP edge, as one tower service in front of the MCP endpoint, in this order:
//! shutdown draining, per-client rate limit, authentication on the headers, the binding of a
//! legacy session to the identity that created it, the concurrency limit, the body (size
//! and time limits), the session cap, and HTTP request counters. Authentication comes before
//! the permit and the body, so unauthenticated clients cannot hold permits. Each
//! refusal is a clear HTTP status with a JSON-RPC error body naming the limit.
//!
//! [`ops_gate`] applies the same Host and Origin checks to `/healthz`, `/readyz`, `/metrics`
//! and the OAuth metadata; [`authority_as_host`], in front of everything, gives an HTTP/2
//! request without `Host` its `:authority` as `Host` for those checks.

use mcpr_core::sync::lock;
use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, Method, StatusCode};
use http_body_util::BodyExt as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use tokio::sync::{Notify, Semaphore};

use super::auth::Auth;
use crate::grant::{Grant, Identity};

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
    /// The longest a client may take to send a request body; slower ones answer 408.
    pub body_timeout: Duration,
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
            body_timeout: Duration::from_secs(10),
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
    /// Authentication, when configured.
    auth: Option<Arc<Auth>>,
    /// The mounts, to keep a scoped caller's listen filter to what it may see.
    router: crate::Router,
    /// With authentication: legacy session id → the hash of the identity that created it.
    /// Another identity presenting the id is told the session does not exist.
    owners: Mutex<HashMap<String, String>>,
    /// Sessions roaming between replicas: the hub (owners of sessions created elsewhere,
    /// sessions this replica has not restored yet) and where GET requests leave their grant.
    cluster: Option<(Arc<dyn super::SessionHub>, super::roaming::PendingGrants)>,
}

impl Edge {
    pub(crate) fn new(
        limits: HttpLimits,
        sessions: Arc<LocalSessionManager>,
        auth: Option<Arc<Auth>>,
        router: crate::Router,
        cluster: Option<(Arc<dyn super::SessionHub>, super::roaming::PendingGrants)>,
    ) -> Arc<Self> {
        Arc::new(Self {
            concurrency: Arc::new(Semaphore::new(limits.max_concurrent_requests.max(1))),
            limits,
            buckets: Mutex::new(HashMap::new()),
            sessions,
            draining: AtomicBool::new(false),
            inflight: AtomicUsize::new(0),
            idle: Notify::new(),
            by_status: Default::default(),
            auth,
            router,
            owners: Mutex::new(HashMap::new()),
            cluster,
        })
    }

    /// Whether `identity` may use legacy session `id`: sessions are bound only when
    /// requests are authenticated, and one the edge never saw created is left to rmcp. With
    /// a hub, the owner of a session created on another replica is looked up there; if the
    /// hub cannot answer, the request is refused rather than risk a stranger's use.
    async fn may_use(&self, id: &str, identity: &Identity) -> bool {
        if self.auth.is_none() {
            return true;
        }
        let mine = self.owner_of(identity);
        if let Some(owner) = lock(&self.owners).get(id) {
            return *owner == mine;
        }
        let Some((hub, _)) = &self.cluster else {
            return true;
        };
        match hub.owner(id).await {
            Ok(Some(owner)) => {
                let ok = owner == mine;
                if ok {
                    self.owners
                        .lock()
                        .expect("owners lock")
                        .insert(id.to_owned(), owner);
                }
                ok
            }
            // No owner recorded: not a session of this cluster (rmcp answers 404).
            Ok(None) => true,
            Err(e) => {
                tracing::warn!(error = %e, "cannot look up a session's owner");
                false
            }
        }
    }

    /// The owner record of `identity`: keyed by the cluster's secret with a hub.
    fn owner_of(&self, identity: &Identity) -> String {
        match &self.cluster {
            Some((hub, _)) => hub.owner_of(identity.as_str()),
            None => super::hub::owner_hash(identity),
        }
    }

    /// Remember that `identity` created session `id` (with a hub, for every replica).
    async fn bind(&self, id: &str, identity: Identity) -> Result<(), String> {
        if self.auth.is_none() {
            return Ok(());
        }
        let owner = self.owner_of(&identity);
        if let Some((hub, _)) = &self.cluster {
            hub.set_owner(id, &owner)
                .await
                .map_err(|e| format!("cannot record the session's owner: {e}"))?;
        }
        // Sessions that expired on their own never pass through DELETE; forget them now and
        // then, so the map stays as small as the set of live sessions.
        let prune = lock(&self.owners).len() > 1024;
        let live: Option<std::collections::HashSet<String>> = if prune {
            let live = self.sessions.sessions.read().await;
            Some(live.keys().map(|k| k.to_string()).collect())
        } else {
            None
        };
        let mut owners = lock(&self.owners);
        if let Some(live) = live {
            owners.retain(|k, _| live.contains(k));
        }
        owners.insert(id.to_owned(), owner);
        Ok(())
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
        let mut buckets = lock(&self.buckets);
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

/// The edge in front of the MCP endpoint's service `S`; see the module docs.
///
/// A tower service of its own rather than an axum `from_fn` middleware: that one boxes a
/// handle on the next service for every request, on top of the future: an allocation per
/// request on the hottest path.
#[derive(Clone)]
pub(crate) struct EdgeService<S> {
    edge: Arc<Edge>,
    inner: S,
}

impl<S> EdgeService<S> {
    pub(crate) fn new(edge: Arc<Edge>, inner: S) -> Self {
        Self { edge, inner }
    }
}

impl<S> tower::Service<Request> for EdgeService<S>
where
    S: tower::Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send,
{
    type Response = Response;
    type Error = Infallible;
    type Future = futures::future::BoxFuture<'static, Result<Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut std::task::Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let edge = self.edge.clone();
        let inner = self.inner.clone();
        Box::pin(async move {
            // Served with `into_make_service_with_connect_info`, so every request has it; the
            // extractor this replaces answered 500 without it too.
            let Some(&ConnectInfo(peer)) = req.extensions().get::<ConnectInfo<SocketAddr>>() else {
                return Ok(StatusCode::INTERNAL_SERVER_ERROR.into_response());
            };
            let resp = guarded(&edge, peer, req, inner).await;
            let class = (resp.status().as_u16() / 100).clamp(2, 5) as usize - 2;
            edge.by_status[class].fetch_add(1, Ordering::Relaxed);
            Ok(resp)
        })
    }
}

/// rmcp's answer to an unknown session id, word for word: a session bound to someone else
/// must look exactly like one that does not exist.
fn no_such_session() -> Response {
    (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response()
}

async fn guarded<S>(edge: &Arc<Edge>, peer: SocketAddr, req: Request, next: S) -> Response
where
    S: tower::Service<Request, Response = Response, Error = Infallible>,
{
    use tower::ServiceExt as _;
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
    // Authenticate on the headers alone: a client that cannot authenticate never holds a
    // permit nor makes the server wait for its body.
    let (mut parts, body) = req.into_parts();
    let identity = match &edge.auth {
        Some(auth) => match auth.authenticate(&parts.headers).await {
            Ok((grant, identity)) => {
                parts.extensions.insert(grant);
                identity
            }
            Err(refusal) => return refusal,
        },
        None => Identity::address(peer.ip()),
    };
    parts.extensions.insert(identity.clone());
    let session = parts
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(id) = &session {
        if !edge.may_use(id, &identity).await {
            return no_such_session();
        }
        if parts.method == Method::DELETE
            && !edge
                .sessions
                .sessions
                .read()
                .await
                .contains_key(id.as_str())
        {
            // rmcp would accept the DELETE of a session that does not exist; with a hub, one
            // created on another replica exists if the hub has it.
            let elsewhere = match &edge.cluster {
                Some((hub, _)) => hub.load(id).await.is_ok_and(|s| s.is_some()),
                None => false,
            };
            if !elsewhere {
                return no_such_session();
            }
        }
        if parts.method == Method::GET
            && let Some((_, grants)) = &edge.cluster
        {
            let mut grants = lock(grants);
            if grants.len() > 4096 {
                // GETs refused before reaching the session manager leave theirs behind.
                grants.clear();
            }
            grants.insert(id.clone(), parts.extensions.get::<Grant>().cloned());
        }
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
    let req = Request::from_parts(parts, body);
    let method = req.method().clone();
    let (req, post) = if method == Method::POST {
        match inspect_post(edge, req, session.is_some()).await {
            Ok(x) => x,
            Err(resp) => return resp,
        }
    } else {
        // GET opens the session's notification stream; DELETE is quick but not worth waiting on.
        (req, Post::Streaming)
    };
    if post == Post::Streaming {
        let Ok(mut resp) = next.oneshot(req).await;
        if method == Method::DELETE && resp.status() == StatusCode::ACCEPTED {
            // The session is gone once rmcp answers; clients (the Python SDK among them)
            // expect 200 or 204 to a DELETE, and log a failure for rmcp's 202.
            if let Some(id) = &session {
                lock(&edge.owners).remove(id);
            }
            *resp.status_mut() = StatusCode::NO_CONTENT;
        }
        return resp;
    }
    edge.inflight.fetch_add(1, Ordering::SeqCst);
    let guard = InflightGuard(edge.clone());
    let Ok(resp) = next.oneshot(req).await;
    if post == Post::Initialize
        && let Some(id) = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
    {
        // Bound before the client can learn the id: the answer has not left yet.
        if let Err(e) = edge.bind(id, identity).await {
            tracing::warn!(error = %e, "session refused");
            if let Some((hub, _)) = &edge.cluster {
                let _ = hub.delete(id).await;
            }
            return refuse(StatusCode::SERVICE_UNAVAILABLE, -32603, e);
        }
    }
    // The request is in flight until its body (JSON or a per-request SSE stream) is done.
    let (parts, body) = resp.into_parts();
    let body = Body::new(body.map_frame(move |f| {
        let _ = &guard;
        f
    }));
    Response::from_parts(parts, body)
}

/// What kind of POST a request is, as far as the edge cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Post {
    /// An `initialize` outside a session: it creates one, subject to `max_sessions`.
    Initialize,
    /// A `subscriptions/listen`: a stream, not a request that shutdown should wait for.
    Streaming,
    /// Anything else.
    Request,
}

/// Buffer a POST body within the size and time limits and look at its JSON-RPC method: an
/// `initialize` may not exceed the session cap, and a `subscriptions/listen` is a stream,
/// not a request that shutdown should wait for. A scoped caller's listen filter loses the
/// URIs of mounts it may not see.
async fn inspect_post(
    edge: &Arc<Edge>,
    req: Request,
    has_session: bool,
) -> Result<(Request, Post), Response> {
    let (parts, body) = req.into_parts();
    let limit = edge.limits.max_body_bytes;
    let timeout = edge.limits.body_timeout;
    let read = http_body_util::Limited::new(body, limit).collect();
    let bytes = match tokio::time::timeout(timeout, read).await {
        Ok(Ok(c)) => c.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            return Err(refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                -32600,
                format!("request body is larger than the limit of {limit} bytes (max_body_bytes)"),
            ));
        }
        Ok(Err(e)) => {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                -32600,
                format!("cannot read the request body: {e}"),
            ));
        }
        Err(_) => {
            let mut r = refuse(
                StatusCode::REQUEST_TIMEOUT,
                -32600,
                format!(
                    "the request body did not arrive within {} ms (body_timeout_ms)",
                    timeout.as_millis()
                ),
            );
            // The rest of the body may still be on its way; the connection cannot be reused.
            r.headers_mut()
                .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
            return Err(r);
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
    let kind = match method.as_deref() {
        Some("initialize") if !has_session => Post::Initialize,
        Some("subscriptions/listen") => Post::Streaming,
        _ => Post::Request,
    };
    if kind == Post::Initialize {
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
    let bytes = match (kind, parts.extensions.get::<Grant>()) {
        (Post::Streaming, Some(grant)) => {
            match super::auth::hide_subscriptions(&bytes, &edge.router, grant) {
                Some(rewritten) => bytes::Bytes::from(rewritten),
                None => bytes,
            }
        }
        _ => bytes,
    };
    // The body is whole now: say so. A chunked request keeps no `Transfer-Encoding` past this
    // point, so the layers behind see a body of known length and check it as they check any
    // other (a malformed chunked body got rmcp's bare 415 instead of a JSON-RPC error).
    let mut parts = parts;
    parts.headers.remove(http::header::TRANSFER_ENCODING);
    parts
        .headers
        .insert(http::header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
    // The direct read path takes the bytes from here rather than collecting the body again.
    parts.extensions.insert(WholeBody(bytes.clone()));
    Ok((Request::from_parts(parts, Body::from(bytes)), kind))
}

/// The request body the edge has already read whole, as the body it passes on holds it.
#[derive(Clone)]
pub(crate) struct WholeBody(pub(crate) bytes::Bytes);

/// Which requests to `/healthz`, `/readyz`, `/metrics` and the OAuth metadata are refused:
/// the Host and Origin checks of the MCP endpoint.
pub(crate) struct OpsGate {
    pub(crate) allowed_hosts: crate::wire::http_checks::AllowedHosts,
    pub(crate) allowed_origins: Vec<String>,
}

/// The Host and Origin checks in front of the operational endpoints, as rmcp makes them for
/// the MCP endpoint: a web page (DNS rebinding, cross-site requests) learns nothing here.
pub async fn ops_gate(State(gate): State<Arc<OpsGate>>, req: Request, next: Next) -> Response {
    let host_ok = req
        .headers()
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .is_some_and(|h| gate.allowed_hosts.allows(h) || is_ip_literal(h))
        || gate.allowed_hosts.accepts_any();
    if !host_ok {
        return (
            StatusCode::FORBIDDEN,
            "Forbidden: Host header is not allowed",
        )
            .into_response();
    }
    if let Some(origin) = req.headers().get(http::header::ORIGIN)
        && !origin
            .to_str()
            .is_ok_and(|o| origin_allowed(o, &gate.allowed_origins))
    {
        return (
            StatusCode::FORBIDDEN,
            "Forbidden: Origin header is not allowed",
        )
            .into_response();
    }
    next.run(req).await
}

/// An HTTP/2 (or HTTP/3) request names its host in the `:authority` pseudo-header, which
/// hyper puts in the request URI; `Host` is then optional (RFC 9113 §8.3.1). Every Host check
/// (rmcp's, the direct read path's, [`ops_gate`]) reads the `Host` header, so a request
/// without one gets its authority as `Host` here, in front of them all: the same checks then
/// apply to both protocol versions. A `Host` that is present is left as it is. Only HTTP/2
/// and later: an HTTP/1.1 request in absolute form (`GET http://h/ HTTP/1.1`) also has an
/// authority in its URI, but HTTP/1.1 requires `Host`, so one without it still fails.
///
/// A plain function of the request (a `MapRequest` layer, not an async middleware): it
/// runs on every request, and needs neither a boxed future nor a handle on the next service.
pub fn authority_as_host(mut req: Request) -> Request {
    if req.version() >= http::Version::HTTP_2
        && !req.headers().contains_key(http::header::HOST)
        && let Some(authority) = req.uri().authority()
    {
        // `:authority` may not carry userinfo (RFC 9113 §8.3.1); if it does, it is not a host.
        let host = authority.as_str().rsplit('@').next().unwrap_or_default();
        if let Ok(v) = HeaderValue::from_str(host) {
            req.headers_mut().insert(http::header::HOST, v);
        }
    }
    req
}

/// Whether `host` (a Host header) names an IP address rather than a name. The operational
/// endpoints accept these beyond `allowed_hosts`: health probes address a server by IP (a
/// pod's address), and DNS rebinding, what the Host check guards against, needs a name.
fn is_ip_literal(host: &str) -> bool {
    http::uri::Authority::try_from(host).is_ok_and(|a| {
        a.host()
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok()
    })
}

/// Whether `origin` matches an entry of `allowed` the way rmcp matches them: scheme and host
/// (case aside), and the port when the entry names one (`:*` for any). An empty list allows
/// no Origin at all.
fn origin_allowed(origin: &str, allowed: &[String]) -> bool {
    fn parts(value: &str) -> Option<(String, String, Option<u16>)> {
        let uri = http::Uri::try_from(value.trim()).ok()?;
        let scheme = uri.scheme_str()?.to_ascii_lowercase();
        let authority = uri.authority()?;
        let host = authority
            .host()
            .trim_matches(['[', ']'])
            .to_ascii_lowercase();
        Some((scheme, host, authority.port_u16()))
    }
    let default_port = |scheme: &str| match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    };
    if origin.trim().eq_ignore_ascii_case("null") {
        return allowed
            .iter()
            .any(|a| a.trim().eq_ignore_ascii_case("null"));
    }
    let Some((scheme, host, port)) = parts(origin) else {
        return false;
    };
    allowed.iter().any(|entry| {
        let (entry, any_port) = match entry.trim().strip_suffix(":*") {
            Some(base) => (base, true),
            None => (entry.trim(), false),
        };
        let Some((a_scheme, a_host, a_port)) = parts(entry) else {
            return false;
        };
        a_scheme == scheme
            && a_host == host
            && (any_port
                || a_port.is_none_or(|p| port.or_else(|| default_port(&scheme)) == Some(p)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_match_as_rmcp_matches_them() {
        let list: Vec<String> = ["http://localhost:*", "https://app.example:8443", "null"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        assert!(origin_allowed("http://localhost:3000", &list));
        assert!(origin_allowed("HTTP://LOCALHOST", &list));
        assert!(origin_allowed("https://app.example:8443", &list));
        assert!(origin_allowed("null", &list));
        assert!(!origin_allowed("https://app.example", &list));
        assert!(!origin_allowed("https://localhost:3000", &list));
        assert!(!origin_allowed("http://evil.example", &list));
        assert!(!origin_allowed("garbage", &list));
        assert!(!origin_allowed("http://localhost:3000", &[]));
    }

    #[test]
    fn ip_literal_hosts() {
        assert!(is_ip_literal("127.0.0.1:8080"));
        assert!(is_ip_literal("10.1.2.3"));
        assert!(is_ip_literal("[::1]:80"));
        assert!(!is_ip_literal("evil.example"));
        assert!(!is_ip_literal("127.0.0.1.nip.io:80"));
        assert!(!is_ip_literal("bad host"));
    }
}
