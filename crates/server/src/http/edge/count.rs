//! The outermost layer: every answer of the MCP endpoint (and of the 404 beside it) counted
//! by status class for `/metrics`, the edge's own refusals included.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};

use axum::extract::Request;
use axum::response::Response;
use http::StatusCode;
use pin_project_lite::pin_project;
use tower::{Layer, Service};

/// HTTP responses by status class: 2xx, 3xx, 4xx, 5xx (1xx counts as 2xx, as it always has).
#[derive(Default)]
pub(crate) struct ResponseCounts([AtomicU64; 4]);

impl ResponseCounts {
    fn record(&self, status: StatusCode) {
        let class = (status.as_u16() / 100).clamp(2, 5) as usize - 2;
        self.0[class].fetch_add(1, Ordering::Relaxed);
    }

    /// The count of each class, in the order 2xx, 3xx, 4xx, 5xx.
    pub(crate) fn classes(&self) -> [u64; 4] {
        std::array::from_fn(|i| self.0[i].load(Ordering::Relaxed))
    }
}

/// Counts every response that passes out.
#[derive(Clone)]
pub(crate) struct CountResponsesLayer(pub(super) Arc<ResponseCounts>);

impl<S> Layer<S> for CountResponsesLayer {
    type Service = CountResponses<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CountResponses {
            counts: self.0.clone(),
            inner,
        }
    }
}

/// The service of [`CountResponsesLayer`].
#[derive(Clone)]
pub(crate) struct CountResponses<S> {
    counts: Arc<ResponseCounts>,
    inner: S,
}

impl<S> Service<Request> for CountResponses<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Counted<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        Counted {
            call: self.inner.call(req),
            counts: self.counts.clone(),
        }
    }
}

pin_project! {
    /// The inner answer, counted as it passes.
    pub(crate) struct Counted<F> {
        #[pin]
        call: F,
        counts: Arc<ResponseCounts>,
    }
}

impl<F> Future for Counted<F>
where
    F: Future<Output = Result<Response, Infallible>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Ok(resp) = ready!(this.call.poll(cx));
        this.counts.record(resp.status());
        Poll::Ready(Ok(resp))
    }
}
