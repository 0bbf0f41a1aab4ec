//! What every layer of the edge is: a [`Step`], a small struct named for its one concern
//! that says what it does with a request on its way in. [`StepLayer`] and [`StepService`]
//! make any step a tower `Layer` and `Service` (written once, for all of them); [`Then`] is
//! the future of a step that looks at the answer on its way out ([`After`]).

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::extract::Request;
use axum::response::Response;
use pin_project_lite::pin_project;
use tower::{Layer, Service};

/// The rest of the stack below a step: a service of requests that always answers.
pub(crate) trait Inner: Service<Request, Response = Response, Error = Infallible> {}

impl<S> Inner for S where S: Service<Request, Response = Response, Error = Infallible> {}

/// One step of the edge, in front of `S`.
pub(crate) trait Step<S: Inner>: Clone {
    /// A concrete type: a step costs no boxed future.
    type Future: Future<Output = Result<Response, Infallible>>;

    /// Handle `req`: answer it (a refusal), or pass it on to `inner`, which was polled
    /// ready for it.
    fn call(&self, inner: &mut S, req: Request) -> Self::Future;
}

/// A step as a tower layer.
#[derive(Clone)]
pub(crate) struct StepLayer<T>(pub(crate) T);

impl<T: Clone, S> Layer<S> for StepLayer<T> {
    type Service = StepService<T, S>;

    fn layer(&self, inner: S) -> Self::Service {
        StepService {
            step: self.0.clone(),
            inner,
        }
    }
}

/// A step in front of the rest of the stack, as a tower service.
#[derive(Clone)]
pub(crate) struct StepService<T, S> {
    step: T,
    inner: S,
}

impl<T: Step<S>, S: Inner> Service<Request> for StepService<T, S> {
    type Response = Response;
    type Error = Infallible;
    type Future = T::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        self.step.call(&mut self.inner, req)
    }
}

/// What a step does with the answer: `self` is what it kept of the request (a permit, a
/// guard, the counters), dropped once the answer has come.
pub(crate) trait After {
    fn after(self, answer: Response) -> Response;
}

pin_project! {
    /// The inner answer, then what a step does with it (nothing, with `after` empty).
    pub(crate) struct Then<F, A> {
        #[pin]
        call: F,
        after: Option<A>,
    }
}

impl<F, A> Then<F, A> {
    pub(super) fn new(call: F, after: Option<A>) -> Self {
        Self { call, after }
    }
}

impl<F, A> Future for Then<F, A>
where
    F: Future<Output = Result<Response, Infallible>>,
    A: After,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Ok(answer) = ready!(this.call.poll(cx));
        Poll::Ready(Ok(match this.after.take() {
            Some(after) => after.after(answer),
            None => answer,
        }))
    }
}
