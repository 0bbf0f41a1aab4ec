//! The concurrency limit: one of `max_concurrent_requests` permits per request, held until
//! the endpoint has answered (its headers: a stream does not hold one for its life); with
//! none left, 503 at once rather than a queue.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::response::Response;
use futures::future::{Either, Ready, ready};
use http::StatusCode;
use pin_project_lite::pin_project;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::{Layer, Service};

use super::refuse;
use crate::wire::codes;

/// Takes a permit for every request, or refuses it.
#[derive(Clone)]
pub(crate) struct PermitsLayer {
    permits: Arc<Semaphore>,
    /// `max_concurrent_requests`, for the refusal.
    max: usize,
}

impl PermitsLayer {
    pub(super) fn new(max: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(max.max(1))),
            max,
        }
    }
}

impl<S> Layer<S> for PermitsLayer {
    type Service = Permits<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Permits {
            layer: self.clone(),
            inner,
        }
    }
}

/// The service of [`PermitsLayer`].
#[derive(Clone)]
pub(crate) struct Permits<S> {
    layer: PermitsLayer,
    inner: S,
}

impl<S> Service<Request> for Permits<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<Ready<Result<Response, Infallible>>, Held<S::Future>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        match self.layer.permits.clone().try_acquire_owned() {
            Ok(permit) => Either::Right(Held {
                call: self.inner.call(req),
                _permit: permit,
            }),
            Err(_) => Either::Left(ready(Ok(refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                codes::INTERNAL_ERROR,
                format!(
                    "server busy: {} requests are already being handled (max_concurrent_requests)",
                    self.layer.max
                ),
            )))),
        }
    }
}

pin_project! {
    /// The inner answer, a permit held until it comes.
    pub(crate) struct Held<F> {
        #[pin]
        call: F,
        _permit: OwnedSemaphorePermit,
    }
}

impl<F: Future> Future for Held<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().call.poll(cx)
    }
}
