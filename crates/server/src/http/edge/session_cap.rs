//! The session cap: an `initialize` outside a session may not open one more legacy session
//! than `max_sessions`: 503.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::response::Response;
use http::StatusCode;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use tower::{Layer, Service};

use super::gate::Gate;
use super::{Kind, kind_of, refuse};
use crate::wire::codes;

/// Refuses an `initialize` when `max` sessions are open.
#[derive(Clone)]
pub(crate) struct SessionCapLayer {
    pub(super) sessions: Arc<LocalSessionManager>,
    pub(super) max: usize,
}

impl<S> Layer<S> for SessionCapLayer {
    type Service = SessionCap<S>;

    fn layer(&self, inner: S) -> Self::Service {
        SessionCap {
            cap: self.clone(),
            inner,
        }
    }
}

/// The service of [`SessionCapLayer`].
#[derive(Clone)]
pub(crate) struct SessionCap<S> {
    cap: SessionCapLayer,
    inner: S,
}

impl<S> Service<Request> for SessionCap<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Gate<S, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        if kind_of(&req) != Kind::Initialize {
            return Gate::pass(&mut self.inner, req);
        }
        // Counting the sessions waits on the session manager's lock: boxed, once a session.
        let cap = self.cap.clone();
        Gate::wait(
            &mut self.inner,
            Box::pin(async move {
                let open = cap.sessions.sessions.read().await.len();
                if open >= cap.max {
                    return Err(refuse(
                        StatusCode::SERVICE_UNAVAILABLE,
                        codes::INTERNAL_ERROR,
                        format!(
                            "too many sessions: {open} are open, the limit is {} (max_sessions)",
                            cap.max
                        ),
                    ));
                }
                Ok(req)
            }),
        )
    }
}
