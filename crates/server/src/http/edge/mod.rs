//! The HTTP edge in front of the MCP endpoint: a stack of tower layers, each one thing, put
//! together in one place, [`Edge::around`], where their order is written down with the
//! reason for it. Each layer refuses with a clear HTTP status and a JSON-RPC error body
//! naming the limit ([`refuse`], codes from [`crate::wire::codes`]); answers given in rmcp's
//! place are rmcp's words, from [`crate::wire::http_answers`], and the rules of rmcp's the
//! edge applies (which DELETE to check, the Host and Origin check) come from `wire/` too,
//! where an rmcp upgrade reviews them. Outermost first:
//!
//! | step | file | refuses with |
//! |---|---|---|
//! | [`CountResponses`] | `count.rs` | (counts every answer by status class) |
//! | [`Draining`] | `draining.rs` | 503 once shutdown has begun |
//! | [`RateLimit`] | `rate.rs` | 429 + `Retry-After`, per client address |
//! | [`Authenticate`] | `authenticate.rs` | 401/403 + `WWW-Authenticate` ([`crate::http::auth`]) |
//! | [`SessionOwner`] | `owners.rs` | rmcp's 404 to a session another identity created, or to a DELETE of one that does not exist |
//! | [`Permits`] | `permits.rs` | 503 past `max_concurrent_requests` |
//! | [`ReadBody`] | `body.rs` | 413, 408 (`Connection: close`), 400 |
//! | [`SessionCap`] | `session_cap.rs` | 503 for an `initialize` past `max_sessions` |
//! | [`OwnerRecords`] | `owners.rs` | 503 when a new session's owner cannot be recorded |
//! | [`InFlight`] | `in_flight.rs` | (counts the request until its body is done) |
//! | [`DeletedAs204`] | `deleted.rs` | (rmcp's 202 to a DELETE goes out as 204) |
//!
//! Each is a small struct, named for its one concern, holding only its part of the state,
//! with one method: what it does with a request ([`step::Step`]). One adapter makes any step
//! a tower `Layer` and `Service` ([`StepLayer`], in `step.rs`), so the stack is put
//! together with tower's `ServiceBuilder`.
//!
//! Each step's future is a concrete type ([`gate::Gate`] for those that check and pass on,
//! [`step::Then`] for those that look at the answer), so the stack adds no boxed future to
//! the one axum's router already makes for the route. A check that has to wait on something
//! is boxed, on the requests that wait only: a JWT's validation (its keys may be fetched), a
//! legacy session whose owner the hub is asked for, a DELETE (the session manager's lock),
//! an `initialize` (the session count; the binding of the session it made).
//!
//! Allocations a request costs in the edge, counted once for this stack with a counting
//! global allocator around one `oneshot` through it, in front of an endpoint that allocates
//! nothing (hyper, axum's router with its boxed route future, and the endpoint are not
//! counted; the workspace forbids the `unsafe` such an allocator needs, so it is no test):
//!
//! | request | one service, one boxed async block (before) | these layers |
//! |---|---|---|
//! | POST `resources/read`, body in one frame, no authentication | 9 | 4 |
//! | the same with a static token | 11 | 6 |
//! | GET (a legacy session's stream) | 2 | 1 |
//!
//! The four: the `Identity` and `WholeBody` extensions, the body passed on and the answer's
//! body wrapped for the in-flight count (axum's `Body` boxes both). A token adds its `Grant`
//! and the extensions map growing to a fourth entry. Gone: the boxed future, the list
//! `collect` kept the body's frames in (a body in one frame is kept as it is), the method
//! as an owned `String` (serde's `Cow` inside an `Option` never borrows), and a new
//! `Content-Length` (two allocations) when the request's already says the length. A body in
//! several frames adds their join; a JWT, a hub lookup, a DELETE and an `initialize` add
//! their boxed check.
//!
//! One behaviour moved: a request without the client's address (never, served as `serve`
//! serves) is answered 500 by the layers that need the address (the rate limit when it is
//! on, authentication when it is off) rather than before every layer, and passes when none
//! of them does.
//!
//! [`OpsGate`] applies rmcp's Host and Origin check (from `wire/`) to `/healthz`, `/readyz`,
//! `/metrics` and the OAuth metadata, IP addresses allowed besides; [`authority_as_host`], in front of everything, gives an
//! HTTP/2 request without `Host` its `:authority` as `Host` for those checks.

mod authenticate;
mod body;
mod count;
mod deleted;
mod draining;
mod gate;
mod in_flight;
mod ops;
mod owners;
mod permits;
mod rate;
mod session_cap;
mod step;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, Request};
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use tower::{Service, ServiceBuilder};

use super::auth::Auth;
use authenticate::Authenticate;
use body::ReadBody;
use count::{CountResponses, ResponseCounts};
use deleted::DeletedAs204;
use draining::{Draining, Shutdown};
use in_flight::InFlight;
pub(crate) use ops::{OpsGate, authority_as_host};
use owners::{OwnerRecords, SessionOwner};
use permits::Permits;
use rate::RateLimit;
use session_cap::SessionCap;
use step::StepLayer;

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

/// The edge's state, each part held by the layers that need it (and read by `/metrics` and
/// shutdown), and the one place the stack is put together.
pub(crate) struct Edge {
    /// Draining, and the requests in flight that shutdown waits for.
    pub(crate) shutdown: Arc<Shutdown>,
    /// Answers by status class, for `/metrics`.
    pub(crate) responses: Arc<ResponseCounts>,
    /// The legacy sessions open here (their count, for `/metrics` and the session cap).
    pub(crate) sessions: Arc<LocalSessionManager>,
    rate: Arc<rate::RateLimiter>,
    auth: Option<Arc<Auth>>,
    owners: Arc<owners::Owners>,
    permits: Permits,
    body: Arc<body::BodyRules>,
    max_sessions: usize,
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
            shutdown: Arc::new(Shutdown::new(limits.shutdown_grace)),
            responses: Arc::default(),
            rate: Arc::new(rate::RateLimiter::new(
                limits.rate_limit_per_second,
                limits.rate_limit_burst,
            )),
            owners: Arc::new(owners::Owners::new(
                auth.is_some(),
                sessions.clone(),
                cluster,
            )),
            auth,
            permits: Permits::new(limits.max_concurrent_requests),
            body: Arc::new(body::BodyRules {
                max_bytes: limits.max_body_bytes,
                timeout: limits.body_timeout,
                router,
            }),
            max_sessions: limits.max_sessions,
            sessions,
        })
    }

    /// `endpoint` behind the edge's layers, in the order below. The first ones refuse what
    /// costs nothing to tell; anything that holds a permit or waits for a body comes after
    /// authentication, so a client that cannot authenticate never holds a permit nor makes the
    /// server wait for its body.
    pub(crate) fn around<S>(
        &self,
        endpoint: S,
    ) -> impl Service<Request, Response = Response, Error = Infallible, Future: Send + 'static>
    + Clone
    + Send
    + Sync
    + 'static
    where
        S: Service<Request, Response = Response, Error = Infallible>
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
    {
        ServiceBuilder::new()
            // Outermost, so the refusals of every step below are counted too.
            .layer(StepLayer(CountResponses(self.responses.clone())))
            // A server shutting down takes nothing new, whoever asks.
            .layer(StepLayer(Draining(self.shutdown.clone())))
            // Before authentication: a flood of bad tokens is a flood like any other, and
            // checking a JWT costs more than a token of the bucket.
            .layer(StepLayer(RateLimit(self.rate.clone())))
            // Who asks, on the headers alone; every step below may rely on the `Identity`
            // (and `Grant`) in the request's extensions.
            .layer(StepLayer(Authenticate(self.auth.clone())))
            // Needs the identity; a stranger's use of a session costs no permit.
            .layer(StepLayer(SessionOwner(self.owners.clone())))
            // Held from here until the endpoint has answered: reading the body counts.
            .layer(StepLayer(self.permits.clone()))
            // Under a permit, so slow bodies are bounded in number as well as in time. The
            // steps below read the request's kind in the `WholeBody` it leaves.
            .layer(StepLayer(ReadBody(self.body.clone())))
            // Knows an `initialize` only once the body is read.
            .layer(StepLayer(SessionCap {
                sessions: self.sessions.clone(),
                max: self.max_sessions,
            }))
            // Binds a new session before its answer (and so its id) leaves; forgets one
            // ended by a DELETE.
            .layer(StepLayer(OwnerRecords(self.owners.clone())))
            // Only what reaches the endpoint is in flight; its answer's body holds the count.
            .layer(StepLayer(InFlight(self.shutdown.clone())))
            // Next to rmcp, whose answer it corrects: every step above sees the 204.
            .layer(StepLayer(DeletedAs204))
            .service(endpoint)
    }
}

/// A JSON-RPC error as an HTTP response: every refusal of the edge (and of authentication).
pub(crate) fn refuse(status: StatusCode, code: i32, message: String) -> Response {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}});
    (status, axum::Json(body)).into_response()
}

/// The client's address. Served with `into_make_service_with_connect_info`, every request
/// has it; a layer that needs it answers [`no_peer`] without it.
fn peer(req: &Request) -> Option<SocketAddr> {
    req.extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|&ConnectInfo(peer)| peer)
}

/// The answer to a request that reached the edge without its client's address: a server
/// built wrong, not the client's fault.
fn no_peer() -> Response {
    StatusCode::INTERNAL_SERVER_ERROR.into_response()
}

/// The legacy session a request (or an answer) names (`Mcp-Session-Id`), if any.
fn session_of(headers: &http::HeaderMap) -> Option<&str> {
    headers.get("mcp-session-id").and_then(|v| v.to_str().ok())
}

/// What kind of request it is, as far as the edge cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An `initialize` outside a session: it creates one, subject to `max_sessions`.
    Initialize,
    /// A stream, not a request shutdown should wait for: a `subscriptions/listen` POST, or
    /// any other method than POST (GET opens a legacy session's stream; a DELETE is quick,
    /// but not worth waiting on).
    Stream,
    /// Any other POST.
    Request,
}

impl Kind {
    /// The kind of a POST whose body is `bytes` (`in_session`: it names a legacy session).
    fn of_post(bytes: &[u8], in_session: bool) -> Self {
        // The method borrowed from the body: serde's `Cow` inside an `Option` is always owned,
        // an allocation per request.
        #[derive(serde::Deserialize)]
        struct Peek<'a> {
            #[serde(borrow)]
            method: Option<&'a str>,
        }
        #[derive(serde::Deserialize)]
        struct Escaped {
            method: Option<String>,
        }
        let method = match serde_json::from_slice::<Peek<'_>>(bytes) {
            Ok(peek) => peek.method.map(std::borrow::Cow::Borrowed),
            // A method written with escapes cannot be borrowed (nor can anything be of a body
            // that is no JSON object, which fails again here).
            Err(_) => serde_json::from_slice::<Escaped>(bytes)
                .ok()
                .and_then(|e| e.method)
                .map(std::borrow::Cow::Owned),
        };
        match method.as_deref() {
            Some("initialize") if !in_session => Self::Initialize,
            Some("subscriptions/listen") => Self::Stream,
            _ => Self::Request,
        }
    }
}

/// The kind of `req`, from the [`WholeBody`] the body layer left on a POST.
fn kind_of(req: &Request) -> Kind {
    req.extensions()
        .get::<WholeBody>()
        .map_or(Kind::Stream, |w| w.kind)
}

/// The request body the edge has already read whole, as the body it passes on holds it, and
/// what kind of request it is.
#[derive(Clone)]
pub(crate) struct WholeBody {
    pub(crate) bytes: bytes::Bytes,
    kind: Kind,
}

#[cfg(test)]
mod tests;
