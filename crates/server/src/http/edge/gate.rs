//! [`Gate`], the future of every layer that looks at a request before passing it on: it
//! answers the layer's refusal, or waits for a check that cannot be made at once, or is the
//! inner service's future itself. A concrete type, so a layer costs no boxed future; only a
//! check that waits on something (a JWT's keys, the session hub) is boxed, and only on the
//! requests that need it.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::extract::Request;
use axum::response::Response;
use futures::future::BoxFuture;
use pin_project_lite::pin_project;

use super::step::Inner;

/// A check that waits: the request to pass on, or the refusal to answer.
pub(crate) type Check = BoxFuture<'static, Result<Request, Response>>;

pin_project! {
    /// The future of a layer that checks a request before passing it to `S`, whose future is
    /// `F`; see the module docs.
    #[project = GateProj]
    pub(crate) enum Gate<S, F> {
        /// The layer's own answer, a refusal: the inner service is never called.
        Refused { answer: Option<Response> },
        /// A check on its way; `inner` is the service that was polled ready for the request.
        Waiting { #[pin] check: Check, inner: S },
        /// Passed on: the inner service's answer is the layer's.
        Passed { #[pin] call: F },
    }
}

impl<S, F> Gate<S, F>
where
    S: Inner<Future = F>,
{
    /// Pass `req` on to `inner` now.
    pub(super) fn pass(inner: &mut S, req: Request) -> Self {
        Self::Passed {
            call: inner.call(req),
        }
    }

    /// Answer `answer` instead of passing the request on.
    pub(super) fn refuse(answer: Response) -> Self {
        Self::Refused {
            answer: Some(answer),
        }
    }

    /// Pass the request `verdict` holds on, or answer its refusal.
    pub(super) fn decide(inner: &mut S, verdict: Result<Request, Response>) -> Self {
        match verdict {
            Ok(req) => Self::pass(inner, req),
            Err(answer) => Self::refuse(answer),
        }
    }

    /// Wait for `check`, then pass on the request it gives back. `inner` was polled ready for
    /// this request: it goes with the check, and a clone of it stays for the next request
    /// (tower's way of calling a service later than `call`).
    pub(super) fn wait(inner: &mut S, check: Check) -> Self
    where
        S: Clone,
    {
        let clone = inner.clone();
        Self::Waiting {
            check,
            inner: std::mem::replace(inner, clone),
        }
    }
}

impl<S, F> Future for Gate<S, F>
where
    S: Inner<Future = F>,
    F: Future<Output = Result<Response, Infallible>>,
{
    type Output = Result<Response, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            match self.as_mut().project() {
                GateProj::Passed { call } => return call.poll(cx),
                GateProj::Refused { answer } => {
                    // A future is not polled again once it has answered (`Future`'s contract).
                    return Poll::Ready(Ok(answer.take().expect("Gate polled after it answered")));
                }
                GateProj::Waiting { check, inner } => {
                    let next = Self::decide(inner, ready!(check.poll(cx)));
                    self.set(next);
                }
            }
        }
    }
}
