//! The concurrency limit: one of `max_concurrent_requests` permits per request, held until
//! the endpoint has answered (its headers: a stream does not hold one for its life); with
//! none left, 503 at once rather than a queue.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::Request;
use axum::response::Response;
use futures::future::{Either, Ready, ready};
use http::StatusCode;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::refuse;
use super::step::{After, Inner, Step, Then};
use crate::wire::codes;

/// Takes a permit for every request, or refuses it.
#[derive(Clone)]
pub(crate) struct Permits {
    permits: Arc<Semaphore>,
    /// `max_concurrent_requests`, for the refusal.
    max: usize,
}

impl Permits {
    pub(super) fn new(max: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(max.max(1))),
            max,
        }
    }
}

impl<S: Inner> Step<S> for Permits {
    type Future =
        Either<Ready<Result<Response, Infallible>>, Then<S::Future, OwnedSemaphorePermit>>;

    fn call(&self, inner: &mut S, req: Request) -> Self::Future {
        match self.permits.clone().try_acquire_owned() {
            Ok(permit) => Either::Right(Then::new(inner.call(req), Some(permit))),
            Err(_) => Either::Left(ready(Ok(refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                codes::INTERNAL_ERROR,
                format!(
                    "server busy: {} requests are already being handled (max_concurrent_requests)",
                    self.max
                ),
            )))),
        }
    }
}

/// A request's permit is given back when its answer has come.
impl After for OwnedSemaphorePermit {
    fn after(self, answer: Response) -> Response {
        answer
    }
}
