//! The outermost step: every answer of the MCP endpoint (and of the 404 beside it) counted
//! by status class for `/metrics`, the edge's own refusals included.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::Request;
use axum::response::Response;

use super::step::{After, Inner, Step, Then};

/// HTTP responses by status class: 2xx, 3xx, 4xx, 5xx (1xx counts as 2xx, as it always has).
#[derive(Default)]
pub(crate) struct ResponseCounts([AtomicU64; 4]);

impl ResponseCounts {
    /// The count of each class, in the order 2xx, 3xx, 4xx, 5xx.
    pub(crate) fn classes(&self) -> [u64; 4] {
        std::array::from_fn(|i| self.0[i].load(Ordering::Relaxed))
    }
}

/// Counts every answer that passes out.
#[derive(Clone)]
pub(crate) struct CountResponses(pub(super) Arc<ResponseCounts>);

impl<S: Inner> Step<S> for CountResponses {
    type Future = Then<S::Future, Self>;

    fn call(&self, inner: &mut S, req: Request) -> Self::Future {
        Then::new(inner.call(req), Some(self.clone()))
    }
}

impl After for CountResponses {
    fn after(self, answer: Response) -> Response {
        let class = (answer.status().as_u16() / 100).clamp(2, 5) as usize - 2;
        self.0.0[class].fetch_add(1, Ordering::Relaxed);
        answer
    }
}
