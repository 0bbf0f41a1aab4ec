//! A POST's body, read whole within `max_body_bytes` and `body_timeout`, and looked at once:
//! what kind of request it is (an `initialize` opening a session, a `subscriptions/listen`
//! stream, anything else), and for a scoped caller's `subscriptions/listen`, a filter without
//! the URIs of mounts it may not see. The body goes on whole, its bytes also as
//! [`WholeBody`] for the direct path and the layers below. GET and DELETE pass untouched.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::body::{Body, HttpBody as _};
use axum::extract::Request;
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Method, StatusCode, header};
use pin_project_lite::pin_project;
use tokio::time::Sleep;

use super::step::{Inner, Step};
use super::{Kind, WholeBody, refuse, session_of};
use crate::grant::Grant;
use crate::wire::codes;

/// The limits of a body and what the listen filter is checked against.
pub(crate) struct BodyRules {
    pub(super) max_bytes: usize,
    pub(super) timeout: Duration,
    /// The mounts, to keep a scoped caller's listen filter to what it may see.
    pub(super) router: crate::Router,
}

/// Reads every POST's body whole.
#[derive(Clone)]
pub(crate) struct ReadBody(pub(super) Arc<BodyRules>);

impl<S: Inner + Clone> Step<S> for ReadBody {
    type Future = Reading<S, S::Future>;

    fn call(&self, inner: &mut S, req: Request) -> Self::Future {
        if req.method() != Method::POST {
            // GET opens the session's notification stream; DELETE is quick but not worth
            // waiting on.
            return Reading::Passed {
                call: inner.call(req),
            };
        }
        let in_session = session_of(req.headers()).is_some();
        let (parts, body) = req.into_parts();
        // The service polled ready for this request waits with it; a clone stays for the next.
        let clone = inner.clone();
        Reading::Body {
            body: Whole::new(body, self.0.max_bytes),
            deadline: tokio::time::sleep(self.0.timeout),
            parts: Some(parts),
            in_session,
            rules: self.0.clone(),
            inner: std::mem::replace(inner, clone),
        }
    }
}

pin_project! {
    /// A POST's body on its way, then the inner service's answer.
    #[project = ReadingProj]
    pub(crate) enum Reading<S, F> {
        /// The body arriving, within the deadline.
        Body {
            body: Whole,
            #[pin]
            deadline: Sleep,
            parts: Option<http::request::Parts>,
            in_session: bool,
            rules: Arc<BodyRules>,
            inner: S,
        },
        /// Passed on: the inner service's answer is the layer's.
        Passed { #[pin] call: F },
    }
}

impl<S, F> Future for Reading<S, F>
where
    S: Inner<Future = F>,
    F: Future<Output = Result<Response, Infallible>>,
{
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            match self.as_mut().project() {
                ReadingProj::Passed { call } => return call.poll(cx),
                ReadingProj::Body {
                    body,
                    deadline,
                    parts,
                    in_session,
                    rules,
                    inner,
                } => {
                    // The body first, then the clock, as `tokio::time::timeout` does: a body
                    // that is there wins.
                    let bytes = match body.poll_whole(cx) {
                        Poll::Ready(Ok(bytes)) => bytes,
                        Poll::Ready(Err(e)) => return Poll::Ready(Ok(rules.refusal(e))),
                        Poll::Pending => {
                            ready!(deadline.poll(cx));
                            return Poll::Ready(Ok(rules.refusal(Unread::Late)));
                        }
                    };
                    let parts = parts.take().expect("Reading polled after it answered");
                    let call = inner.call(rules.whole(parts, bytes, *in_session));
                    self.set(Reading::Passed { call });
                }
            }
        }
    }
}

/// Why a body was not read.
enum Unread {
    /// Over `max_body_bytes`.
    TooLarge,
    /// The client or the connection failed.
    Failed(axum::Error),
    /// Not whole within `body_timeout`.
    Late,
}

impl BodyRules {
    /// The request that goes on: `bytes` as its body and as [`WholeBody`], what kind of
    /// request it is, and a scoped caller's listen filter kept to the mounts it may see.
    fn whole(&self, mut parts: http::request::Parts, bytes: Bytes, in_session: bool) -> Request {
        let kind = Kind::of_post(&bytes, in_session);
        let bytes = match (kind, parts.extensions.get::<Grant>()) {
            (Kind::Stream, Some(grant)) => {
                match crate::http::auth::hide_subscriptions(&bytes, &self.router, grant) {
                    Some(rewritten) => Bytes::from(rewritten),
                    None => bytes,
                }
            }
            _ => bytes,
        };
        // The body is whole now: say so. A chunked request keeps no `Transfer-Encoding` past
        // this point, so the layers behind see a body of known length and check it as they
        // check any other (a malformed chunked body got rmcp's bare 415 instead of a JSON-RPC
        // error). A `Content-Length` that says so already stays (writing one allocates).
        parts.headers.remove(header::TRANSFER_ENCODING);
        let mut lengths = parts.headers.get_all(header::CONTENT_LENGTH).iter();
        let said =
            lengths.next().is_some_and(|v| says_length(v, bytes.len())) && lengths.next().is_none();
        if !said {
            parts
                .headers
                .insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
        }
        parts.extensions.insert(WholeBody {
            bytes: bytes.clone(),
            kind,
        });
        Request::from_parts(parts, Body::from(bytes))
    }

    /// The answer to a body that was not read.
    fn refusal(&self, why: Unread) -> Response {
        match why {
            Unread::TooLarge => refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                codes::INVALID_REQUEST,
                format!(
                    "request body is larger than the limit of {} bytes (max_body_bytes)",
                    self.max_bytes
                ),
            ),
            Unread::Failed(e) => refuse(
                StatusCode::BAD_REQUEST,
                codes::INVALID_REQUEST,
                format!("cannot read the request body: {e}"),
            ),
            Unread::Late => {
                let mut r = refuse(
                    StatusCode::REQUEST_TIMEOUT,
                    codes::INVALID_REQUEST,
                    format!(
                        "the request body did not arrive within {} ms (body_timeout_ms)",
                        self.timeout.as_millis()
                    ),
                );
                // The rest of the body may still be on its way; the connection cannot be
                // reused.
                r.headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
                r
            }
        }
    }
}

/// Whether `value` is `n` as `Content-Length` writes it: decimal digits, no sign, no leading
/// zero.
fn says_length(value: &HeaderValue, n: usize) -> bool {
    let v = value.as_bytes();
    !v.is_empty()
        && v.iter().all(u8::is_ascii_digit)
        && (v[0] != b'0' || v.len() == 1)
        && std::str::from_utf8(v)
            .ok()
            .and_then(|s| s.parse::<usize>().ok())
            == Some(n)
}

/// A body being read whole, at most `limit` bytes of it. Most bodies come in one frame,
/// which is kept as it is: no copy, and no list of frames to allocate.
pub(crate) struct Whole {
    body: Body,
    limit: usize,
    first: Option<Bytes>,
    /// The frames so far, joined, once there is more than one.
    joined: Option<BytesMut>,
}

impl Whole {
    fn new(body: Body, limit: usize) -> Self {
        Self {
            body,
            limit,
            first: None,
            joined: None,
        }
    }

    fn len(&self) -> usize {
        match (&self.joined, &self.first) {
            (Some(j), _) => j.len(),
            (None, Some(f)) => f.len(),
            (None, None) => 0,
        }
    }

    fn poll_whole(&mut self, cx: &mut Context<'_>) -> Poll<Result<Bytes, Unread>> {
        loop {
            let Some(frame) = ready!(Pin::new(&mut self.body).poll_frame(cx)) else {
                let whole = match (self.joined.take(), self.first.take()) {
                    (Some(joined), _) => joined.freeze(),
                    (None, first) => first.unwrap_or_default(),
                };
                return Poll::Ready(Ok(whole));
            };
            let data = match frame.map(|f| f.into_data()) {
                Err(e) => return Poll::Ready(Err(Unread::Failed(e))),
                Ok(Ok(data)) => data,
                // Trailers: nothing of the request.
                Ok(Err(_)) => continue,
            };
            if data.len() > self.limit - self.len() {
                return Poll::Ready(Err(Unread::TooLarge));
            }
            match (&mut self.joined, self.first.take()) {
                (Some(joined), _) => joined.extend_from_slice(&data),
                (None, None) => self.first = Some(data),
                (None, Some(first)) => {
                    let mut joined = BytesMut::with_capacity(first.len() + data.len());
                    joined.extend_from_slice(&first);
                    joined.extend_from_slice(&data);
                    self.joined = Some(joined);
                }
            }
        }
    }
}
