//! Graceful shutdown at the edge: [`Shutdown`] (whether the server is draining, and how many
//! requests are still being answered) and the step that refuses new requests once it is.
//! The count is kept by the in-flight layer ([`super::in_flight`]), deeper in the stack.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::Request;
use http::StatusCode;
use tokio::sync::Notify;

use super::gate::Gate;
use super::refuse;
use super::step::{Inner, Step};
use crate::wire::codes;

/// Whether shutdown has begun, and the requests it waits for.
pub(crate) struct Shutdown {
    draining: AtomicBool,
    pub(super) inflight: AtomicUsize,
    /// Woken when the last request in flight is done.
    pub(super) idle: Notify,
    /// How long [`Shutdown::drain`] waits for them.
    grace: Duration,
}

impl Shutdown {
    pub(super) fn new(grace: Duration) -> Self {
        Self {
            draining: AtomicBool::new(false),
            inflight: AtomicUsize::new(0),
            idle: Notify::new(),
            grace,
        }
    }

    /// Refuse new requests and wait (at most the grace period) for in-flight ones to finish.
    pub(crate) async fn drain(&self) {
        self.draining.store(true, Ordering::SeqCst);
        let deadline = tokio::time::Instant::now() + self.grace;
        while self.inflight.load(Ordering::SeqCst) > 0 {
            let notified = self.idle.notified();
            if self.inflight.load(Ordering::SeqCst) == 0 {
                break;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                tracing::warn!(
                    inflight = self.inflight.load(Ordering::SeqCst),
                    "shutdown grace period over; closing with requests still running"
                );
                break;
            }
        }
    }

    /// Requests being answered now (streams excluded).
    pub(crate) fn inflight(&self) -> usize {
        self.inflight.load(Ordering::SeqCst)
    }
}

/// No new request once shutdown has begun: 503.
#[derive(Clone)]
pub(crate) struct Draining(pub(super) Arc<Shutdown>);

impl<S: Inner> Step<S> for Draining {
    type Future = Gate<S, S::Future>;

    fn call(&self, inner: &mut S, req: Request) -> Self::Future {
        if self.0.draining.load(Ordering::SeqCst) {
            return Gate::refuse(refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                codes::INTERNAL_ERROR,
                "the server is shutting down".into(),
            ));
        }
        Gate::pass(inner, req)
    }
}
