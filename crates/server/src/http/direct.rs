//! The direct path for stateless `resources/read` over HTTP, for speed: a well-formed
//! 2026-07-28 read is answered here, in front of rmcp's `StreamableHttpService`; every other
//! request, and any read this path has the least doubt about, goes to rmcp unchanged.
//!
//! In stateless mode rmcp builds a whole service per request: it decodes the body through
//! its untagged `ClientRequest` union, serialises the message back to a `serde_json::Value`
//! to check the `Mcp-*` headers, spawns a task with a one-shot transport and its
//! cancellation tokens, and passes the answer back over a channel. In callgrind that was
//! most of a stateless read (about 194k of 224k instructions were rmcp, hyper and axum),
//! and it held the benchmark under its 20,000 reads/s target.
//!
//! This path answers only what rmcp would answer with the same bytes: it takes a request
//! only when every check rmcp makes would pass (allowed `Host`, no `Origin`, `Accept` and
//! `Content-Type`, the protocol version header, `Mcp-Method`/`Mcp-Name` equal to the body,
//! the required `_meta`), decodes it with the same tagged decode as the stdio transport
//! (rmcp's own `Deserialize` for `ReadResourceRequest`), runs the handler's read, and writes
//! the JSON-RPC answer with the status rmcp gives it. Anything else, including every
//! malformed request and every request whose error rmcp must word, is rmcp's to answer.
//! A test compares both paths' answers byte for byte.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use futures::FutureExt as _;
use futures::future::{BoxFuture, Either};
use http::{HeaderMap, Method, Request, StatusCode, header};
use http_body_util::BodyExt as _;
use rmcp::model::{
    ClientRequest, GetMeta as _, JsonRpcMessage, ReadResourceRequestParams, RequestId,
};
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::SessionManager;
use tokio_util::sync::CancellationToken;

use crate::McpHandler;
use crate::errors::to_mcp_error;
use crate::grant::Grant;
use crate::handler::{Wire, WireAnswer};
use crate::http::edge::WholeBody;
use crate::http::in_place::InPlaceReads;
use crate::wire::era::Era;
use crate::wire::http_answers;
use crate::wire::http_checks::{
    AllowedHosts, JSON, MCP_NAME, content_type_is_json, direct_read_len, sole, status_of,
};
use crate::wire::{decode, encode, era, http_refusals};

/// What the direct path needs to decide and answer.
pub(crate) struct DirectSettings {
    /// The same allow-list rmcp's service is configured with; empty accepts any host.
    pub allowed_hosts: AllowedHosts,
    /// The same `Origin` allow-list rmcp's service is configured with; empty allows none.
    pub allowed_origins: Vec<String>,
    /// rmcp's body limit; larger bodies are rmcp's to refuse.
    pub max_body_bytes: usize,
    /// Off answers everything through rmcp (the test that compares the two paths).
    pub enabled: bool,
    /// Reads answered here, for `/metrics`.
    pub answered: Arc<AtomicU64>,
    /// Cancelled when the streams close, after the grace and the moment given to the answers
    /// of cut reads, as rmcp's own requests are: a read still running then is cut off instead
    /// of holding the exit.
    pub shutdown: CancellationToken,
    /// Cancelled when `shutdown_grace_ms` is over (before `shutdown`): a large answer still
    /// going out then is cut. The moment between the two is for the small error answers of
    /// cut reads, not for a result to finish in.
    pub grace_over: CancellationToken,
    /// Where reads in place run; `None` runs them on the runtime worker (unit tests).
    pub in_place: Option<InPlaceReads>,
}

/// rmcp's `StreamableHttpService` with the direct read path in front.
pub(crate) struct DirectRead<M: SessionManager> {
    /// Shared: axum clones the service for every request, and rmcp's clone copies its whole
    /// configuration (the host and origin lists) each time.
    inner: Arc<StreamableHttpService<McpHandler, M>>,
    handler: Arc<McpHandler>,
    settings: Arc<DirectSettings>,
}

impl<M: SessionManager> Clone for DirectRead<M> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            handler: self.handler.clone(),
            settings: self.settings.clone(),
        }
    }
}

impl<M: SessionManager> DirectRead<M> {
    pub(crate) fn new(
        inner: StreamableHttpService<McpHandler, M>,
        handler: McpHandler,
        settings: DirectSettings,
    ) -> Self {
        Self {
            inner: Arc::new(inner),
            handler: Arc::new(handler),
            settings: Arc::new(settings),
        }
    }
}

impl<M: SessionManager> tower::Service<Request<Body>> for DirectRead<M> {
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Request<Body>) -> Self::Future {
        let this = self.clone();
        // Taken off the request whatever happens next: rmcp keeps a request's extensions for
        // as long as its handler runs (a listen stream: for hours), and the body is in the
        // request already.
        let whole = req.extensions_mut().remove::<WholeBody>();
        Box::pin(async move {
            let req = if this.settings.enabled
                && let Some(len) = eligible(req.method(), req.headers(), &this.settings)
            {
                match this.try_answer(req, len, whole.clone()).await {
                    Ok(answer) => return Ok(answer),
                    Err(req) => req,
                }
            } else {
                req
            };
            if req.method() == Method::POST
                && let Some(len) = json_body_len(req.headers(), &this.settings)
            {
                return Ok(this.checked(req, len, whole).await);
            }
            Ok(this.inner.handle(req).await.map(Body::new))
        })
    }
}

/// The body length of a POST whose JSON body may be checked here.
fn json_body_len(headers: &HeaderMap, settings: &DirectSettings) -> Option<usize> {
    if !content_type_is_json(sole(headers, header::CONTENT_TYPE)?)
        || headers.contains_key(header::TRANSFER_ENCODING)
    {
        return None;
    }
    let len: usize = sole(headers, header::CONTENT_LENGTH)?.parse().ok()?;
    (len <= settings.max_body_bytes).then_some(len)
}

impl<M: SessionManager> DirectRead<M> {
    /// Whether the tool bridge is on (`tools/*` are then methods this server has).
    fn tools(&self) -> bool {
        self.handler.service().state().settings.tools
    }

    /// A POST with a JSON body of `len` bytes: rmcp's answer, except where it would answer
    /// with a bare HTTP error or misread the body ([`http_refusals::answered`]).
    async fn checked(&self, req: Request<Body>, len: usize, whole: Option<WholeBody>) -> Response {
        let (parts, body) = req.into_parts();
        let bytes = match body_bytes(body, len, whole).await {
            Ok(bytes) => bytes,
            Err(refused) => return refused,
        };
        let gate = (
            &self.settings.allowed_hosts,
            &self.settings.allowed_origins[..],
        );
        http_refusals::answered(parts, bytes, gate, self.tools(), async |req| {
            self.inner.handle(req).await.map(Body::new)
        })
        .await
    }
}

impl<M: SessionManager> DirectRead<M> {
    /// Answer `req` directly, or hand it back (with its body, as read) for rmcp. `whole` is
    /// the body the edge already read, if it did.
    async fn try_answer(
        &self,
        req: Request<Body>,
        len: usize,
        whole: Option<WholeBody>,
    ) -> Result<Response, Request<Body>> {
        let (parts, body) = req.into_parts();
        let bytes = match body_bytes(body, len, whole).await {
            Ok(bytes) => bytes,
            Err(refused) => return Ok(refused),
        };
        let Some(JsonRpcMessage::Request(request)) = decode::decode_hot(&bytes) else {
            return Err(Request::from_parts(parts, Body::from(bytes)));
        };
        let well_formed = era::complete_2026_07_28(request.request.get_meta());
        let ClientRequest::ReadResourceRequest(read) = request.request else {
            return Err(Request::from_parts(parts, Body::from(bytes)));
        };
        let named = parts
            .headers
            .get(MCP_NAME)
            .is_some_and(|h| h.as_bytes() == read.params.uri.as_bytes());
        if !well_formed || !named {
            return Err(Request::from_parts(parts, Body::from(bytes)));
        }
        self.settings.answered.fetch_add(1, Ordering::Relaxed);
        let grant = parts.extensions.get::<Grant>();
        let id = request.id;
        // Most reads (a small file) are done in place, on a reader thread, without a future.
        let answer = match self.read_in_place(read.params, grant, id).await {
            Ok(answer) => answer,
            Err((params, id)) => match self.read_later(params, grant, id).await {
                Ok(answer) => answer,
                Err(cut_off) => return Ok(cut_off),
            },
        };
        let (status, body) = match answer {
            Ok(body) => (StatusCode::OK, body),
            Err(message) => (status_of(&message), encode::to_json(message)),
        };
        Ok(match body {
            Ok(body) => Response::builder()
                .status(status)
                .header(header::CONTENT_TYPE, JSON)
                .header(header::CONTENT_LENGTH, body.len())
                .body(until_shutdown(body, self.settings.grace_over.clone()))
                .expect("valid response"),
            Err(e) => http_answers::unserializable(e),
        })
    }
}

impl<M: SessionManager> DirectRead<M> {
    /// The read done in place ([`McpHandler::read_now`]) where [`InPlaceReads`] has room:
    /// in a task of its own on a spare worker, or on a reader thread, never in this task, so
    /// that a read that hangs costs this request, answered with the timeout error once the
    /// request timeout is over, and not the worker with every connection it serves. `Err`
    /// gives the request back when the read would wait or reads are not taken in place now:
    /// it goes the bounded path.
    // The request given back is moved, not copied, and only when the read would wait.
    #[allow(clippy::result_large_err)]
    async fn read_in_place(
        &self,
        params: ReadResourceRequestParams,
        grant: Option<&Grant>,
        id: RequestId,
    ) -> Result<WireAnswer, (ReadResourceRequestParams, RequestId)> {
        let readers = match &self.settings.in_place {
            None => {
                return match self
                    .handler
                    .read_now::<Wire>(&params, grant, &id, Era::Modern)
                {
                    Some(answer) => Ok(answer),
                    None => Err((params, id)),
                };
            }
            Some(readers) if !readers.accepting() => return Err((params, id)),
            Some(readers) => readers,
        };
        let timeout = self.handler.service().state().settings.request_timeout;
        // Kept for the timeout's answer, written here while the reader still holds the
        // request.
        let (uri, id_kept) = (params.uri.clone(), id.clone());
        let handler = self.handler.clone();
        let grant = grant.cloned();
        let read = move || match handler.read_now::<Wire>(&params, grant.as_ref(), &id, Era::Modern)
        {
            Some(answer) => Ok(answer),
            None => Err((params, id)),
        };
        // On a spare worker when one is free: a task of its own, so that this one can answer
        // the timeout if the read hangs; else on a reader thread.
        // `Err(())`: the read panicked, its answer with it.
        let done = match readers.worker_slot() {
            Some(slot) => Either::Left(
                tokio::spawn(async move {
                    let _slot = slot;
                    read()
                })
                .map(|r| r.map_err(drop)),
            ),
            None => Either::Right(readers.run(read).map(|r| r.map_err(drop))),
        };
        // Not raced with shutdown as `read_later` is: the timeout bounds it, and the server
        // cuts off what outlives the shutdown grace.
        let e = match tokio::time::timeout(timeout, done).await {
            Ok(Ok(done)) => return done,
            Ok(Err(_)) => crate::layers::panicked("resources/read").with_uri(&uri),
            Err(_) => {
                tracing::warn!(%uri, "a read in place hung past the request timeout; \
                    answered with the timeout error");
                crate::layers::timed_out(timeout, Some(&uri))
            }
        };
        Ok(Err(era::read_message(
            Err(to_mcp_error(e)),
            id_kept,
            Era::Modern,
        )))
    }

    /// A read that waits, until it is done or shutdown cuts it off (then `Err` is the
    /// response rmcp gives a stateless request cut off so).
    async fn read_later(
        &self,
        params: ReadResourceRequestParams,
        grant: Option<&Grant>,
        id: RequestId,
    ) -> Result<WireAnswer, Response> {
        let read = self.handler.read::<Wire>(&params, grant, &id, Era::Modern);
        tokio::select! {
            answer = read => Ok(answer),
            // The words rmcp answers a stateless request with when shutdown cuts it off.
            () = self.settings.shutdown.cancelled() => {
                tracing::warn!("a stateless read was cut off by shutdown");
                Err(http_answers::cut_off())
            }
        }
    }
}

/// The request body of `len` bytes: the one the edge already read (`whole`) when it has that
/// length, or read here. A body that cannot be read (the client went away, or sent more than
/// it announced) gets the words rmcp uses for one.
async fn body_bytes(body: Body, len: usize, whole: Option<WholeBody>) -> Result<Bytes, Response> {
    if let Some(WholeBody { bytes, .. }) = whole.filter(|w| w.bytes.len() == len) {
        return Ok(bytes);
    }
    http_body_util::Limited::new(body, len)
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(http_answers::unreadable_body)
}

/// Answers up to this size go out as one frame.
const FRAME: usize = 256 * 1024;

/// `body` as the response body. A large one goes out a frame at a time and is cut off (the
/// connection aborted, never a short body passed off as whole) once the shutdown grace is
/// over, so a big answer still crossing a slow link does not hold the exit.
fn until_shutdown(body: Vec<u8>, shutdown: CancellationToken) -> Body {
    if body.len() <= FRAME {
        return Body::from(body);
    }
    let body = Bytes::from(body);
    let frames = futures::stream::unfold(0, move |at| {
        let body = body.clone();
        let shutdown = shutdown.clone();
        async move {
            if at >= body.len() {
                return None;
            }
            if shutdown.is_cancelled() {
                let cut = std::io::Error::other("shutdown grace period over");
                return Some((Err(cut), usize::MAX));
            }
            let end = (at + FRAME).min(body.len());
            Some((Ok(body.slice(at..end)), end))
        }
    });
    Body::from_stream(frames)
}

/// Whether the headers are those of a stateless read rmcp would accept (see
/// [`direct_read_len`]): the body length, when the body is worth reading here.
fn eligible(method: &Method, headers: &HeaderMap, settings: &DirectSettings) -> Option<usize> {
    direct_read_len(
        method,
        headers,
        &settings.allowed_hosts,
        settings.max_body_bytes,
    )
}
