//! The in-flight count graceful shutdown waits for: a request counts from the moment it
//! reaches the endpoint until its answer's body is done (JSON, or a per-request SSE stream).
//! A stream that outlives requests (a legacy session's GET, `subscriptions/listen`) and a
//! DELETE do not count: shutdown would wait the whole grace for them.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, ready};

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use http_body_util::BodyExt as _;
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use super::draining::Shutdown;
use super::{Kind, kind_of};

/// Counts the requests being answered in [`Shutdown`].
#[derive(Clone)]
pub(crate) struct InFlightLayer(pub(super) Arc<Shutdown>);

impl<S> Layer<S> for InFlightLayer {
    type Service = InFlight<S>;

    fn layer(&self, inner: S) -> Self::Service {
        InFlight {
            shutdown: self.0.clone(),
            inner,
        }
    }
}

/// The service of [`InFlightLayer`].
#[derive(Clone)]
pub(crate) struct InFlight<S> {
    shutdown: Arc<Shutdown>,
    inner: S,
}

impl<S> Service<Request> for InFlight<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Tracked<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let guard = (kind_of(&req) != Kind::Stream).then(|| InflightGuard::new(&self.shutdown));
        Tracked {
            call: self.inner.call(req),
            guard,
        }
    }
}

pin_project! {
    /// The inner answer, its body holding the request's place in the count.
    pub(crate) struct Tracked<F> {
        #[pin]
        call: F,
        guard: Option<InflightGuard>,
    }
}

impl<F> Future for Tracked<F>
where
    F: Future<Output = Result<Response, Infallible>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Ok(resp) = ready!(this.call.poll(cx));
        Poll::Ready(Ok(match this.guard.take() {
            Some(guard) => guard.until_done(resp),
            None => resp,
        }))
    }
}

/// One request in flight; the count goes down when it is dropped.
pub(crate) struct InflightGuard(Arc<Shutdown>);

impl InflightGuard {
    fn new(shutdown: &Arc<Shutdown>) -> Self {
        shutdown.inflight.fetch_add(1, Ordering::SeqCst);
        Self(shutdown.clone())
    }

    /// `resp`, in flight until its body is done (or dropped).
    fn until_done(self, resp: Response) -> Response {
        let (parts, body) = resp.into_parts();
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
