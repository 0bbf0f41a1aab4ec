//! The behaviour that wraps every operation rather than living inside one: the request
//! timeout around each provider call ([`Bounded`]) and the request metrics around each
//! service operation ([`metered`]).
//!
//! Both are generic future wrappers, not [`Provider`] implementations. The `Provider` trait
//! is an `async_trait`, so a wrapping provider would box a second future on every call, the
//! smallest read included (one more allocation on a path that handles well over 100k reads a
//! second on stdio); a generic wrapper adds nothing to the future the service already awaits.
//! Every provider call the service makes goes through [`Bounded`], so the service has no
//! unbounded way to reach a provider.

use std::future::Future;
use std::time::{Duration, Instant};

use mcpr_core::{
    CacheHints, Completion, CompletionRequest, Contents, Error, ErrorKind, Page, PageRequest,
    Provider, ReadLimits, ResourceMeta, ResourceUri, Result,
};

use crate::metrics::Metrics;

/// A provider whose every call is bounded by the request timeout (`[server]
/// request_timeout_ms`), so a stuck source answers a clear error instead of holding the
/// request, and its client, forever.
pub(crate) struct Bounded<'a> {
    provider: &'a dyn Provider,
    limit: Duration,
}

impl<'a> Bounded<'a> {
    /// `provider` with each call limited to `limit`.
    pub(crate) fn new(provider: &'a dyn Provider, limit: Duration) -> Self {
        Self { provider, limit }
    }

    /// [`Provider::list`], bounded.
    pub(crate) async fn list(&self, page: PageRequest) -> Result<Page<ResourceMeta>> {
        within(self.limit, None, self.provider.list(page)).await
    }

    /// [`Provider::read_hinted`], bounded; a timeout names `uri`.
    pub(crate) async fn read(
        &self,
        uri: &ResourceUri,
        limits: &ReadLimits,
    ) -> Result<(Vec<Contents>, Option<CacheHints>)> {
        within(
            self.limit,
            Some(uri.as_str()),
            self.provider.read_hinted(uri, limits),
        )
        .await
    }

    /// [`Provider::complete`], bounded.
    pub(crate) async fn complete(&self, req: CompletionRequest) -> Result<Completion> {
        within(self.limit, None, self.provider.complete(req)).await
    }
}

/// Run `fut` for at most `limit`; past it, a [`ErrorKind::Timeout`] error about `uri` (or
/// "the request" when the call is not about one resource).
///
/// tokio's timer is registered only when `fut` is not ready on its first poll, so a read that
/// completes at once (a small file) costs no timer work.
async fn within<T>(
    limit: Duration,
    uri: Option<&str>,
    fut: impl Future<Output = Result<T>>,
) -> Result<T> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r,
        Err(_) => Err(timed_out(limit, uri)),
    }
}

/// The error a call that ran out of time answers, in the words clients have always seen.
fn timed_out(limit: Duration, uri: Option<&str>) -> Error {
    let what = uri.unwrap_or("the request");
    let e = Error::new(
        ErrorKind::Timeout,
        format!(
            "{what} did not finish within {} ms (request_timeout)",
            limit.as_millis()
        ),
    );
    match uri {
        Some(u) => e.with_uri(u),
        None => e,
    }
}

/// Run `fut`, one operation of MCP method `method`, and record its outcome and latency in
/// `metrics` (`mcp_requests_total`, `mcp_request_duration_seconds`).
///
/// The outcome label is the class of JSON-RPC error the client sees for the error's kind
/// ([`crate::errors::code_of`]), so the series read the same whichever adapter answered.
pub(crate) async fn metered<T>(
    metrics: &Metrics,
    method: &'static str,
    fut: impl Future<Output = Result<T>>,
) -> Result<T> {
    let start = Instant::now();
    let result = fut.await;
    let outcome = match &result {
        Ok(_) => "ok",
        Err(e) => crate::metrics::outcome_of(crate::errors::code_of(e.kind).0),
    };
    metrics.record(method, outcome, start.elapsed());
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_call_past_the_limit_answers_the_timeout_error() {
        let slow = std::future::pending::<Result<()>>();
        let err = within(Duration::from_millis(20), Some("file:///x"), slow)
            .await
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::Timeout);
        assert_eq!(
            err.message,
            "file:///x did not finish within 20 ms (request_timeout)"
        );
        assert_eq!(err.uri.as_deref(), Some("file:///x"));
        let err = within(
            Duration::from_millis(20),
            None,
            std::future::pending::<Result<()>>(),
        )
        .await
        .unwrap_err();
        assert_eq!(
            err.message,
            "the request did not finish within 20 ms (request_timeout)"
        );
        assert_eq!(err.uri, None);
    }

    #[tokio::test]
    async fn metered_records_the_outcome_the_client_sees() {
        let m = Metrics::default();
        let _ = metered(&m, "resources/read", async { Ok(()) }).await;
        let _ = metered(&m, "resources/read", async {
            Err::<(), _>(Error::not_found("file:///x"))
        })
        .await;
        let _ = metered(&m, "resources/read", async {
            Err::<(), _>(Error::unsupported("no"))
        })
        .await;
        let _ = metered(&m, "resources/read", async {
            Err::<(), _>(Error::new(ErrorKind::Timeout, "slow"))
        })
        .await;
        assert_eq!(m.count("resources/read", "ok"), 1);
        assert_eq!(m.count("resources/read", "not_found"), 1);
        assert_eq!(m.count("resources/read", "invalid_params"), 1);
        assert_eq!(m.count("resources/read", "internal"), 1);
    }
}
