//! The session cap: an `initialize` outside a session may not open one more legacy session
//! than `max_sessions`: 503.

use std::sync::Arc;

use axum::extract::Request;
use http::StatusCode;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

use super::gate::Gate;
use super::step::{Inner, Step};
use super::{Kind, kind_of, refuse};
use crate::wire::codes;

/// Refuses an `initialize` when `max` sessions are open.
#[derive(Clone)]
pub(crate) struct SessionCap {
    pub(super) sessions: Arc<LocalSessionManager>,
    pub(super) max: usize,
}

impl<S> Step<S> for SessionCap
where
    S: Inner + Clone + Send + 'static,
{
    type Future = Gate<S, S::Future>;

    fn call(&self, inner: &mut S, req: Request) -> Self::Future {
        if kind_of(&req) != Kind::Initialize {
            return Gate::pass(inner, req);
        }
        // Counting the sessions waits on the session manager's lock: boxed, once a session.
        let cap = self.clone();
        Gate::wait(
            inner,
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
