//! The HTTP edge in front of the MCP endpoint: one tower service ([`EdgeService`]) that
//! runs the edge's steps in order, each a small function that does one thing and refuses
//! with a clear HTTP status and a JSON-RPC error body naming the limit (codes from
//! [`crate::wire::codes`]): shutdown draining, the per-client rate limit, authentication on
//! the headers, the binding of a legacy session to the identity that created it, the
//! concurrency limit, the body (size and time limits), the session cap, then the endpoint,
//! the in-flight count and HTTP request counters (see [`guarded`] for the order and why).
//! Answers given in rmcp's place are rmcp's words, from [`crate::wire::http_answers`].
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
use crate::wire::http_checks::origin_allowed;
use crate::wire::{codes, http_answers};

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
                    lock(&self.owners).insert(id.to_owned(), owner);
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

/// The edge's steps, in order, each one thing; a step that refuses ends the request with its
/// answer (`Err`), otherwise the request goes on to the next:
///
/// 1. [`Edge::open`]: draining on shutdown;
/// 2. [`Edge::within_rate`]: the per-client rate limit;
/// 3. [`Edge::authenticated`]: authentication on the headers, so that a client that cannot
///    authenticate never holds a permit nor makes the server wait for its body;
/// 4. [`Edge::session_allowed`]: a legacy session used only by the identity that made it;
/// 5. [`Edge::permit`]: the concurrency limit;
/// 6. [`Edge::whole_body`] and [`Edge::within_session_cap`]: a POST's body, in its size and
///    time limits, then the session cap for an `initialize`;
/// 7. the MCP endpoint, then for a stream [`Edge::deleted`] (rmcp's 202 to a DELETE as 204), for a
///    request the binding of a new session to its creator ([`Edge::bind_created`]) and the
///    in-flight count ([`Edge::in_flight`]) until its answer's body is done.
async fn guarded<S>(edge: &Arc<Edge>, peer: SocketAddr, req: Request, next: S) -> Response
where
    S: tower::Service<Request, Response = Response, Error = Infallible>,
{
    match through(edge, peer, req, next).await {
        Ok(resp) | Err(resp) => resp,
    }
}

async fn through<S>(
    edge: &Arc<Edge>,
    peer: SocketAddr,
    req: Request,
    next: S,
) -> Result<Response, Response>
where
    S: tower::Service<Request, Response = Response, Error = Infallible>,
{
    use tower::ServiceExt as _;
    edge.open()?;
    edge.within_rate(peer.ip())?;
    let (mut parts, body) = req.into_parts();
    let identity = edge.authenticated(peer, &mut parts).await?;
    let session = session_of(&parts.headers);
    if let Some(id) = &session {
        edge.session_allowed(id, &identity, &mut parts).await?;
    }
    let _permit = edge.permit()?;
    let req = Request::from_parts(parts, body);
    let method = req.method().clone();
    let (req, post) = if method == Method::POST {
        let (req, post) = edge.whole_body(req, session.is_some()).await?;
        if post == Post::Initialize {
            edge.within_session_cap().await?;
        }
        (req, post)
    } else {
        // GET opens the session's notification stream; DELETE is quick but not worth waiting on.
        (req, Post::Streaming)
    };
    if post == Post::Streaming {
        let Ok(resp) = next.oneshot(req).await;
        return Ok(edge.deleted(&method, session.as_deref(), resp));
    }
    let in_flight = edge.in_flight();
    let Ok(resp) = next.oneshot(req).await;
    if post == Post::Initialize {
        edge.bind_created(resp.headers(), identity).await?;
    }
    Ok(in_flight.until_done(resp))
}

/// The legacy session a request names (`Mcp-Session-Id`), if any.
fn session_of(headers: &http::HeaderMap) -> Option<String> {
    headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

// A step's `Err` is the refusal, the response itself: the rare path, where boxing it would
// cost an allocation for nothing.
#[allow(clippy::result_large_err)]
impl Edge {
    /// Step 1: no new request once shutdown has begun.
    fn open(&self) -> Result<(), Response> {
        if self.draining.load(Ordering::SeqCst) {
            return Err(refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                codes::INTERNAL_ERROR,
                "the server is shutting down".into(),
            ));
        }
        Ok(())
    }

    /// Step 2: a token of the client's bucket, or 429 with `Retry-After`.
    fn within_rate(&self, ip: IpAddr) -> Result<(), Response> {
        let Err(wait) = self.take_token(ip) else {
            return Ok(());
        };
        let mut r = refuse(
            StatusCode::TOO_MANY_REQUESTS,
            codes::INTERNAL_ERROR,
            format!(
                "rate limit exceeded: at most {} requests per second per client (burst {}); retry in {} ms",
                self.limits.rate_limit_per_second,
                self.limits.rate_limit_burst,
                wait.as_millis()
            ),
        );
        let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
        if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
            r.headers_mut().insert(http::header::RETRY_AFTER, v);
        }
        Err(r)
    }

    /// Step 3: who asks, on the headers alone: the grant and identity of a valid token (both
    /// left in the request's extensions), or the client's address without authentication.
    async fn authenticated(
        &self,
        peer: SocketAddr,
        parts: &mut http::request::Parts,
    ) -> Result<Identity, Response> {
        let identity = match &self.auth {
            Some(auth) => {
                let (grant, identity) = auth.authenticate(&parts.headers).await?;
                parts.extensions.insert(grant);
                identity
            }
            None => Identity::address(peer.ip()),
        };
        parts.extensions.insert(identity.clone());
        Ok(identity)
    }

    /// Step 4: legacy session `id` is one `identity` may use, answered as rmcp answers an
    /// unknown session otherwise; a GET (the session's stream) leaves its grant for the
    /// replica that restores the session.
    async fn session_allowed(
        &self,
        id: &str,
        identity: &Identity,
        parts: &mut http::request::Parts,
    ) -> Result<(), Response> {
        if !self.may_use(id, identity).await {
            return Err(http_answers::no_such_session());
        }
        if parts.method == Method::DELETE && !self.sessions.sessions.read().await.contains_key(id) {
            // rmcp would accept the DELETE of a session that does not exist; with a hub, one
            // created on another replica exists if the hub has it.
            let elsewhere = match &self.cluster {
                Some((hub, _)) => hub.load(id).await.is_ok_and(|s| s.is_some()),
                None => false,
            };
            if !elsewhere {
                return Err(http_answers::no_such_session());
            }
        }
        if parts.method == Method::GET
            && let Some((_, grants)) = &self.cluster
        {
            let mut grants = lock(grants);
            if grants.len() > 4096 {
                // GETs refused before reaching the session manager leave theirs behind.
                grants.clear();
            }
            grants.insert(id.to_owned(), parts.extensions.get::<Grant>().cloned());
        }
        Ok(())
    }

    /// Step 5: one of `max_concurrent_requests` permits, held until the request is answered.
    fn permit(&self) -> Result<tokio::sync::OwnedSemaphorePermit, Response> {
        self.concurrency.clone().try_acquire_owned().map_err(|_| {
            refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                codes::INTERNAL_ERROR,
                format!(
                    "server busy: {} requests are already being handled (max_concurrent_requests)",
                    self.limits.max_concurrent_requests
                ),
            )
        })
    }

    /// Step 6, the cap: an `initialize` outside a session may not open one more session than
    /// `max_sessions`.
    async fn within_session_cap(&self) -> Result<(), Response> {
        let open = self.sessions.sessions.read().await.len();
        if open >= self.limits.max_sessions {
            return Err(refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                codes::INTERNAL_ERROR,
                format!(
                    "too many sessions: {open} are open, the limit is {} (max_sessions)",
                    self.limits.max_sessions
                ),
            ));
        }
        Ok(())
    }

    /// Step 7, after a stream: the DELETE of session `id` that rmcp accepted has ended it, so
    /// its owner is forgotten, and rmcp's 202 goes out as 204 ([`http_answers::deleted`]).
    fn deleted(&self, method: &Method, session: Option<&str>, mut resp: Response) -> Response {
        if *method == Method::DELETE
            && http_answers::deleted(&mut resp)
            && let Some(id) = session
        {
            lock(&self.owners).remove(id);
        }
        resp
    }

    /// Step 7, after an `initialize`: the session it created (named in the `answer`'s
    /// headers) is bound to its creator before the client can learn its id (the answer has not left yet); if that cannot be recorded,
    /// the session is refused.
    async fn bind_created(
        &self,
        answer: &http::HeaderMap,
        identity: Identity,
    ) -> Result<(), Response> {
        let Some(id) = answer.get("mcp-session-id").and_then(|v| v.to_str().ok()) else {
            return Ok(());
        };
        if let Err(e) = self.bind(id, identity).await {
            tracing::warn!(error = %e, "session refused");
            if let Some((hub, _)) = &self.cluster {
                let _ = hub.delete(id).await;
            }
            return Err(refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                codes::INTERNAL_ERROR,
                e,
            ));
        }
        Ok(())
    }

    /// Step 7: the request counts as in flight (what shutdown waits for) until the guard's
    /// [`InflightGuard::until_done`] lets it go.
    fn in_flight(self: &Arc<Self>) -> InflightGuard {
        self.inflight.fetch_add(1, Ordering::SeqCst);
        InflightGuard(self.clone())
    }
}

impl InflightGuard {
    /// `resp`, in flight until its body (JSON or a per-request SSE stream) is done.
    fn until_done(self, resp: Response) -> Response {
        let (parts, body) = resp.into_parts();
        let body = Body::new(body.map_frame(move |f| {
            let _ = &self;
            f
        }));
        Response::from_parts(parts, body)
    }
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

impl Edge {
    /// Step 6, the body: a POST's body read whole within the size and time limits, and its
    /// JSON-RPC method looked at: what kind of POST it is, and for a scoped caller's
    /// `subscriptions/listen`, a filter without the URIs of mounts it may not see.
    async fn whole_body(
        &self,
        req: Request,
        has_session: bool,
    ) -> Result<(Request, Post), Response> {
        let (mut parts, body) = req.into_parts();
        let bytes = self.read_body(body).await?;
        let kind = match method_of(&bytes).as_deref() {
            Some("initialize") if !has_session => Post::Initialize,
            Some("subscriptions/listen") => Post::Streaming,
            _ => Post::Request,
        };
        let bytes = match (kind, parts.extensions.get::<Grant>()) {
            (Post::Streaming, Some(grant)) => {
                match super::auth::hide_subscriptions(&bytes, &self.router, grant) {
                    Some(rewritten) => bytes::Bytes::from(rewritten),
                    None => bytes,
                }
            }
            _ => bytes,
        };
        // The body is whole now: say so. A chunked request keeps no `Transfer-Encoding` past
        // this point, so the layers behind see a body of known length and check it as they
        // check any other (a malformed chunked body got rmcp's bare 415 instead of a JSON-RPC
        // error).
        parts.headers.remove(http::header::TRANSFER_ENCODING);
        parts
            .headers
            .insert(http::header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
        // The direct read path takes the bytes from here rather than collecting the body again.
        parts.extensions.insert(WholeBody(bytes.clone()));
        Ok((Request::from_parts(parts, Body::from(bytes)), kind))
    }

    /// `body`, at most `max_body_bytes` of it, arrived within `body_timeout`.
    async fn read_body(&self, body: Body) -> Result<bytes::Bytes, Response> {
        let limit = self.limits.max_body_bytes;
        let timeout = self.limits.body_timeout;
        let read = http_body_util::Limited::new(body, limit).collect();
        match tokio::time::timeout(timeout, read).await {
            Ok(Ok(c)) => Ok(c.to_bytes()),
            Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                codes::INVALID_REQUEST,
                format!("request body is larger than the limit of {limit} bytes (max_body_bytes)"),
            )),
            Ok(Err(e)) => Err(refuse(
                StatusCode::BAD_REQUEST,
                codes::INVALID_REQUEST,
                format!("cannot read the request body: {e}"),
            )),
            Err(_) => {
                let mut r = refuse(
                    StatusCode::REQUEST_TIMEOUT,
                    codes::INVALID_REQUEST,
                    format!(
                        "the request body did not arrive within {} ms (body_timeout_ms)",
                        timeout.as_millis()
                    ),
                );
                // The rest of the body may still be on its way; the connection cannot be reused.
                r.headers_mut()
                    .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
                Err(r)
            }
        }
    }
}

/// The JSON-RPC method a body names, if it is an object with a string `method`.
fn method_of(bytes: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Peek<'a> {
        #[serde(borrow)]
        method: Option<std::borrow::Cow<'a, str>>,
    }
    serde_json::from_slice::<Peek<'_>>(bytes)
        .ok()
        .and_then(|p| p.method)
        .map(|m| m.into_owned())
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
        return http_answers::host_not_allowed();
    }
    if let Some(origin) = req.headers().get(http::header::ORIGIN)
        && !origin
            .to_str()
            .is_ok_and(|o| origin_allowed(o, &gate.allowed_origins))
    {
        return http_answers::origin_not_allowed();
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

#[cfg(test)]
mod tests {
    use super::*;

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
