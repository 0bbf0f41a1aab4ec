//! The in-flight count graceful shutdown waits for: a request counts from the moment it
//! reaches the endpoint until its answer's body is done (JSON, or a per-request SSE stream).
//! A stream that outlives requests (a legacy session's GET, `subscriptions/listen`) and a
//! DELETE do not count: shutdown would wait the whole grace for them.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use http_body_util::BodyExt as _;

use super::draining::Shutdown;
use super::step::{After, Inner, Step, Then};
use super::{Kind, kind_of};

/// Counts the requests being answered in [`Shutdown`].
#[derive(Clone)]
pub(crate) struct InFlight(pub(super) Arc<Shutdown>);

impl<S: Inner> Step<S> for InFlight {
    type Future = Then<S::Future, InflightGuard>;

    fn call(&self, inner: &mut S, req: Request) -> Self::Future {
        let guard = (kind_of(&req) != Kind::Stream).then(|| InflightGuard::new(&self.0));
        Then::new(inner.call(req), guard)
    }
}

/// One request in flight; the count goes down when it is dropped.
pub(crate) struct InflightGuard(Arc<Shutdown>);

impl InflightGuard {
    fn new(shutdown: &Arc<Shutdown>) -> Self {
        shutdown.inflight.fetch_add(1, Ordering::SeqCst);
        Self(shutdown.clone())
    }
}

impl After for InflightGuard {
    /// The answer, in flight until its body is done (or dropped).
    fn after(self, answer: Response) -> Response {
        let (parts, body) = answer.into_parts();
        let body = Body::new(body.map_frame(move |f| {
            let _ = &self;
            f
        }));
        Response::from_parts(parts, body)
    }
}

impl Drop for InflightGuard {
    fn drop(&mut self) {
        if self.0.inflight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}
