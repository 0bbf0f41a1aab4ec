//! rmcp answers the DELETE of a session 202 Accepted, which clients refuse; it goes out as
//! 204 No Content ([`http_answers::deleted`], where the rmcp mirrors live).

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::extract::Request;
use axum::response::Response;
use http::Method;
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use crate::wire::http_answers;

/// Rewrites rmcp's 202 to a DELETE as 204.
#[derive(Clone, Copy)]
pub(crate) struct DeletedAs204Layer;

impl<S> Layer<S> for DeletedAs204Layer {
    type Service = DeletedAs204<S>;

    fn layer(&self, inner: S) -> Self::Service {
        DeletedAs204 { inner }
    }
}

/// The service of [`DeletedAs204Layer`].
#[derive(Clone)]
pub(crate) struct DeletedAs204<S> {
    inner: S,
}

impl<S> Service<Request> for DeletedAs204<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Rewritten<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        Rewritten {
            delete: req.method() == Method::DELETE,
            call: self.inner.call(req),
        }
    }
}

pin_project! {
    /// The inner answer, a DELETE's rewritten.
    pub(crate) struct Rewritten<F> {
        #[pin]
        call: F,
        delete: bool,
    }
}

impl<F> Future for Rewritten<F>
where
    F: Future<Output = Result<Response, Infallible>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Ok(mut resp) = ready!(this.call.poll(cx));
        if *this.delete {
            http_answers::deleted(&mut resp);
        }
        Poll::Ready(Ok(resp))
    }
}
