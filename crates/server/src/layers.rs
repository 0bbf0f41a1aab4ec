//! The behaviour that wraps every operation rather than living inside one: the layer around
//! each provider call ([`Layered`]: capability check, request timeout and the per-mount
//! call counts `mcp_provider_calls_total`), the request
//! metrics around each service operation ([`metered`]), and the memory budget of reads in
//! progress ([`ReadBudget`]).
//!
//! Both are generic future wrappers, not [`Provider`] implementations. The `Provider` trait
//! is an `async_trait`, so a wrapping provider would box a second future on every call, the
//! smallest read included (one more allocation on a path that handles well over 100k reads a
//! second on stdio); a generic wrapper adds nothing to the future the service already awaits.
//!
//! The invariant: the server reaches a provider only through [`Layered`] — the service's
//! list, read, complete and change tokens, the registry's watches and list watches, and
//! `/readyz`'s readiness alike —
//! so an operation a mount did not declare is refused in one place with one message, and no
//! provider call can hold a request past `request_timeout`.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use mcpr_core::{
    ChangeSink, Completion, CompletionRequest, Error, ErrorKind, FolderDetails, Page, PageRequest,
    Provider, ReadLimits, ReadOutput, ResourceMeta, ResourceUri, Result, TemplateMeta, WatchGuard,
    Watching,
};

use crate::metrics::Metrics;
use crate::router::Mount;

/// A provider operation that a mount declares in its capabilities (or not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// `list`.
    List,
    /// `read`.
    Read,
    /// `complete`.
    Complete,
    /// `watch` and `change_token`.
    Watch,
    /// `watch_list`.
    WatchList,
}

/// Whether `mount` declares `op`: where a caller walks mounts and passes over those that do
/// not (a listing, the `listChanged` capability), rather than being refused.
pub(crate) fn declares(mount: &Mount, op: Op) -> bool {
    let c = &mount.provider.info().capabilities;
    match op {
        Op::List => c.list,
        Op::Read => c.read,
        Op::Complete => c.complete,
        Op::Watch => c.watch,
        Op::WatchList => c.list_changed,
    }
}

/// The one refusal of an operation `mount` did not declare (about `uri`, when there is one).
fn unsupported(mount: &Mount, op: Op, uri: Option<&ResourceUri>) -> Error {
    let kind = mount.provider.info().kind;
    let message = match op {
        Op::List => format!("{kind} mounts cannot list resources"),
        Op::Read => format!("{kind} mounts cannot be read"),
        Op::Complete => format!("{kind} mounts do not complete arguments"),
        Op::Watch => match uri {
            Some(uri) => format!("{kind} mounts do not support subscriptions: {uri}"),
            None => format!("{kind} mounts do not support subscriptions"),
        },
        Op::WatchList => format!("{kind} mounts do not report list changes"),
    };
    Error::unsupported(message)
}

/// The positions in [`crate::metrics::PROVIDER_OPS`] of the calls the layer counts.
mod call {
    pub(super) const LIST: usize = 0;
    pub(super) const READ: usize = 1;
    pub(super) const COMPLETE: usize = 2;
    pub(super) const WATCH: usize = 3;
    pub(super) const WATCH_LIST: usize = 4;
    pub(super) const CHANGE_TOKEN: usize = 5;
    pub(super) const READINESS: usize = 6;
    pub(super) const READ_DIRECTORY: usize = 7;
}

/// The position of "unsupported" in [`crate::metrics::PROVIDER_OUTCOMES`].
const UNSUPPORTED: usize = 2;

/// The position in [`crate::metrics::PROVIDER_OUTCOMES`] of how a call ended.
fn outcome<T>(r: &Result<T>) -> usize {
    match r {
        Ok(_) => 0,
        Err(e) => match e.kind {
            ErrorKind::Unsupported => UNSUPPORTED,
            ErrorKind::Timeout => 3,
            _ => 1,
        },
    }
}

/// One mount's provider as the server may call it: each call refused unless the mount
/// declares it, bounded by the request timeout (`[server] request_timeout_ms`), so a stuck
/// source answers a clear error instead of holding the request, and its client, forever;
/// and counted per mount, operation and outcome (`mcp_provider_calls_total`).
///
/// Public for the cluster's watcher, which starts watches for other replicas through it
/// (bounded by the lease TTL, see [`Layered::bounded_by`]).
pub struct Layered<'a> {
    mount: &'a Mount,
    limit: Duration,
    /// The setting `limit` comes from, named in the timeout error.
    setting: &'static str,
}

impl<'a> Layered<'a> {
    /// `mount`'s provider with each call limited to `limit`, the request timeout.
    pub(crate) fn new(mount: &'a Mount, limit: Duration) -> Self {
        Self::bounded_by(mount, limit, "request_timeout")
    }

    /// `mount`'s provider with each call limited to `limit`, which comes from `setting` (the
    /// timeout error names it).
    pub fn bounded_by(mount: &'a Mount, limit: Duration, setting: &'static str) -> Self {
        Self {
            mount,
            limit,
            setting,
        }
    }

    fn provider(&self) -> &'a dyn Provider {
        &*self.mount.provider
    }

    /// `Ok` when the mount declares `op`, else the one "unsupported" refusal, counted as a
    /// refused call of `op` (callers that refuse early, before taking a read budget or a
    /// subscription slot, check here first; the call that follows is then not refused again).
    pub(crate) fn check(&self, op: Op, uri: Option<&ResourceUri>) -> Result<()> {
        let n = match op {
            Op::List => call::LIST,
            Op::Read => call::READ,
            Op::Complete => call::COMPLETE,
            Op::Watch => call::WATCH,
            Op::WatchList => call::WATCH_LIST,
        };
        self.checked(op, n, uri)
    }

    /// `Ok` when the mount declares `op`, else the refusal, counted as call `n`'s.
    fn checked(&self, op: Op, n: usize, uri: Option<&ResourceUri>) -> Result<()> {
        if declares(self.mount, op) {
            return Ok(());
        }
        self.mount.calls.record(n, UNSUPPORTED);
        Err(unsupported(self.mount, op, uri))
    }

    /// `fut`, call `n` of the provider, bounded by the request timeout and counted.
    async fn bounded<T>(
        &self,
        n: usize,
        uri: Option<&str>,
        fut: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let r = within(self.limit, uri, self.setting, fut).await;
        self.mount.calls.record(n, outcome(&r));
        r
    }

    /// [`Provider::readiness`], bounded: a source that does not say in time whether it can
    /// serve is not ready, with the timeout error as the reason.
    pub(crate) async fn readiness(&self) -> Result<()> {
        self.bounded(call::READINESS, None, self.provider().readiness())
            .await
    }

    /// [`Provider::list`], checked and bounded.
    pub(crate) async fn list(&self, page: PageRequest) -> Result<Page<ResourceMeta>> {
        self.checked(Op::List, call::LIST, None)?;
        self.bounded(call::LIST, None, self.provider().list(page))
            .await
    }

    /// [`Provider::read`], checked and bounded; a timeout names `uri`.
    pub(crate) async fn read(&self, uri: &ResourceUri, limits: &ReadLimits) -> Result<ReadOutput> {
        self.checked(Op::Read, call::READ, Some(uri))?;
        self.bounded(
            call::READ,
            Some(uri.as_str()),
            self.provider().read(uri, limits),
        )
        .await
    }

    /// [`Provider::read_now`], checked and counted as [`Layered::read`] counts its call. It
    /// runs on the calling thread with no timer: nothing can interrupt a call already running
    /// there, so a provider answers in place only what cannot hang (the files provider: a
    /// small file on a local file system; never a network or FUSE one), and the transports
    /// run it on a watched thread (`crate::hung`). `None` (the read would wait) counts
    /// nothing: the `read` that follows counts the call. With [`Layered::read`], the layer's
    /// one read entry point in the provider's two forms: a plain call cannot be a future.
    pub(crate) fn read_now(
        &self,
        uri: &ResourceUri,
        limits: &ReadLimits,
    ) -> Option<Result<ReadOutput>> {
        if let Err(e) = self.checked(Op::Read, call::READ, Some(uri)) {
            return Some(Err(e));
        }
        let r = self.provider().read_now(uri, limits)?;
        self.mount.calls.record(call::READ, outcome(&r));
        Some(r)
    }

    /// [`Provider::read_directory`] of `uri`, checked as a read and bounded; a provider
    /// without directories answers its own "unsupported", counted as such.
    pub(crate) async fn read_directory(
        &self,
        uri: &ResourceUri,
        page: PageRequest,
    ) -> Result<Page<ResourceMeta>> {
        self.checked(Op::Read, call::READ_DIRECTORY, Some(uri))?;
        self.bounded(
            call::READ_DIRECTORY,
            Some(uri.as_str()),
            self.provider().read_directory(uri, page),
        )
        .await
    }

    /// [`Provider::folder_details`] of `uri`, checked as a read and bounded. Not counted in
    /// `mcp_provider_calls_total`: it completes a directory read the walk made and counted,
    /// and a provider without it (s3) answers without asking its source.
    pub(crate) async fn folder_details(&self, uri: &ResourceUri) -> Result<FolderDetails> {
        self.checked(Op::Read, call::READ_DIRECTORY, Some(uri))?;
        within(
            self.limit,
            Some(uri.as_str()),
            self.setting,
            self.provider().folder_details(uri),
        )
        .await
    }

    /// [`Provider::relayed_skills`], bounded as one request: the skills catalog's listing of
    /// a gateway mount's upstream skills. Not counted in `mcp_provider_calls_total`, like
    /// the catalog's other bookkeeping calls.
    pub(crate) async fn relayed_skills(&self) -> Result<Option<Vec<mcpr_core::RelayedSkill>>> {
        within(
            self.limit,
            None,
            self.setting,
            self.provider().relayed_skills(),
        )
        .await
    }

    /// [`Provider::templates`]: what the provider holds now (built when it was mounted, or a
    /// gateway's upstream's, bounded when fetched), so there is nothing to bound.
    pub(crate) fn templates(&self) -> std::sync::Arc<[TemplateMeta]> {
        self.provider().templates()
    }

    /// [`Provider::complete`], checked and bounded.
    pub(crate) async fn complete(&self, req: CompletionRequest) -> Result<Completion> {
        self.checked(Op::Complete, call::COMPLETE, None)?;
        self.bounded(call::COMPLETE, None, self.provider().complete(req))
            .await
    }

    /// [`Provider::watch`] of `uri` as `watching` runs it (in this process, or by the
    /// cluster's watcher of the mount), checked and bounded: a source that is slow to start
    /// a watch (the http provider fetches the upstream first) answers the timeout error
    /// rather than holding the subscribe.
    pub async fn watch(
        &self,
        watching: &dyn Watching,
        uri: &ResourceUri,
        sink: ChangeSink,
    ) -> Result<WatchGuard> {
        self.checked(Op::Watch, call::WATCH, Some(uri))?;
        self.bounded(
            call::WATCH,
            Some(uri.as_str()),
            watching.watch(&self.mount.name, &self.mount.provider, uri, sink),
        )
        .await
    }

    /// [`Provider::watch_list`] as `watching` runs it, checked and bounded.
    pub async fn watch_list(
        &self,
        watching: &dyn Watching,
        sink: ChangeSink,
    ) -> Result<WatchGuard> {
        self.checked(Op::WatchList, call::WATCH_LIST, None)?;
        self.bounded(
            call::WATCH_LIST,
            None,
            watching.watch_list(&self.mount.name, &self.mount.provider, sink),
        )
        .await
    }

    /// [`Provider::change_token`] of `uri`, bounded; `None` when the mount does not watch or
    /// the token did not come in time (then a change during set-up can only be missed the
    /// way it would be for a provider without tokens, never wrongly reported).
    pub async fn change_token(&self, uri: &ResourceUri) -> Option<String> {
        // Local watching asks the mount's own provider.
        self.change_token_via(&mcpr_core::LocalWatching, uri).await
    }

    /// [`Layered::change_token`] as `watching` sees it: where the watch of a cluster's
    /// shared mount runs on another replica, that replica's token (see
    /// [`Watching::change_token`]).
    pub async fn change_token_via(
        &self,
        watching: &dyn Watching,
        uri: &ResourceUri,
    ) -> Option<String> {
        self.checked(Op::Watch, call::CHANGE_TOKEN, Some(uri))
            .ok()?;
        self.bounded(call::CHANGE_TOKEN, Some(uri.as_str()), async {
            Ok(watching
                .change_token(&self.mount.name, &self.mount.provider, uri)
                .await)
        })
        .await
        .ok()
        .flatten()
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
    setting: &str,
    fut: impl Future<Output = Result<T>>,
) -> Result<T> {
    // Most calls finish on their first poll (a small file on a local file system is read in
    // place; a provider reads in place only what cannot hang): they need no
    // timer, and arming one (the runtime's handle, the entry) was most of the 1 % of a small
    // read's CPU the timeout cost. The deadline is still taken before the first poll, so a
    // call that works a while and then waits is held to the same bound as before.
    let deadline = tokio::time::Instant::now() + limit;
    let mut fut = std::pin::pin!(fut);
    if let Poll::Ready(r) = poll_once(fut.as_mut()).await {
        return r;
    }
    match tokio::time::timeout_at(deadline, fut).await {
        Ok(r) => r,
        Err(_) => Err(timed_out_after(limit, uri, setting)),
    }
}

/// Polls `fut` once, with the calling task's waker, and says what that poll gave: the hot
/// paths finish a call that is ready at once in place, and only a call that waits gets a
/// timer or a task of its own. A `Pending` future has registered its waker and may be
/// polled again (or moved on, pinned) as usual.
pub(crate) async fn poll_once<F: Future + ?Sized>(
    mut fut: std::pin::Pin<&mut F>,
) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await
}

/// The error a call that ran out of time answers, whichever path it took (the layer's
/// timer, or a read in place that hung, over either transport): "<uri> timed out after N ms
/// (request_timeout)", which the client gets as -32001, the SDKs' request timeout
/// ([`crate::wire::codes::REQUEST_TIMEOUT`], through `errors::code_of`), `data.temporary`.
pub(crate) fn timed_out(limit: Duration, uri: Option<&str>) -> Error {
    timed_out_after(limit, uri, "request_timeout")
}

/// [`timed_out`] for a call bounded by `setting` (the cluster's watcher bounds by the lease;
/// a listing's later mounts by what the page had left).
fn timed_out_after(limit: Duration, uri: Option<&str>, setting: &str) -> Error {
    let what = uri.unwrap_or("the request");
    let e = Error::new(
        ErrorKind::Timeout,
        format!(
            "{what} timed out after {} ms ({setting})",
            limit.as_millis()
        ),
    );
    match uri {
        Some(u) => e.with_uri(u),
        None => e,
    }
}

/// `[server] max_inflight_read_bytes`: the memory all reads in progress may hold together.
///
/// A read reserves the most it can return before its provider runs and gives it back when it
/// is done, so a flood of large reads (or of directory listings) cannot hold more than the
/// budget at once. Taking and returning a reservation is one atomic operation each, on the
/// path of every read; only a read that finds the budget spent waits (on a [`Notify`],
/// woken by returns only while someone waits), up to the request timeout.
///
/// [`Notify`]: tokio::sync::Notify
pub(crate) struct ReadBudget {
    total: u64,
    free: AtomicU64,
    waiters: AtomicUsize,
    returned: tokio::sync::Notify,
}

/// A read's share of the [`ReadBudget`], given back when dropped.
pub(crate) struct Reservation<'a> {
    budget: &'a ReadBudget,
    bytes: u64,
}

impl ReadBudget {
    /// A budget of `total` bytes.
    pub(crate) fn new(total: u64) -> Self {
        Self {
            total,
            free: AtomicU64::new(total),
            waiters: AtomicUsize::new(0),
            returned: tokio::sync::Notify::new(),
        }
    }

    /// Bytes not reserved right now.
    #[cfg(test)]
    fn free(&self) -> u64 {
        self.free.load(Ordering::SeqCst)
    }

    fn try_take(&self, bytes: u64) -> bool {
        self.free
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |free| {
                free.checked_sub(bytes)
            })
            .is_ok()
    }

    /// Reserve `bytes` (at most the whole budget) if they are free now, without waiting.
    pub(crate) fn try_reserve(&self, bytes: u64) -> Option<Reservation<'_>> {
        let bytes = bytes.min(self.total);
        // `then`, not `then_some`: a reservation made and dropped gives its bytes back.
        self.try_take(bytes).then(|| Reservation {
            budget: self,
            bytes,
        })
    }

    /// Reserve `bytes` (at most the whole budget, so any one read can run), waiting up to
    /// `limit` for reads in progress to give theirs back; past it, a temporary "server busy"
    /// error naming the setting.
    pub(crate) async fn reserve(&self, bytes: u64, limit: Duration) -> Result<Reservation<'_>> {
        if let Some(held) = self.try_reserve(bytes) {
            return Ok(held);
        }
        let bytes = bytes.min(self.total);
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let waited = tokio::time::timeout(limit, async {
            loop {
                let returned = self.returned.notified();
                tokio::pin!(returned);
                // Registered before the retry, so a return between the two wakes this wait.
                returned.as_mut().enable();
                if self.try_take(bytes) {
                    return;
                }
                returned.await;
            }
        })
        .await;
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        match waited {
            Ok(()) => Ok(Reservation {
                budget: self,
                bytes,
            }),
            Err(_) => Err(Error::new(
                ErrorKind::Unavailable,
                format!(
                    "server busy: reads in progress hold all of max_inflight_read_bytes ({} bytes) \
                     and none finished within {} ms (request_timeout); try again shortly",
                    self.total,
                    limit.as_millis()
                ),
            )),
        }
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.budget.free.fetch_add(self.bytes, Ordering::SeqCst);
        if self.budget.waiters.load(Ordering::SeqCst) > 0 {
            self.budget.returned.notify_waiters();
        }
    }
}

/// Run `fut`, one operation of MCP method `method`, and record its outcome and latency in
/// `metrics` (`mcp_requests_total`, `mcp_request_duration_seconds`).
///
/// The outcome label is the class of JSON-RPC error the client sees for the error's kind
/// ([`crate::errors::code_of`]), so the series read the same whichever adapter answered.
///
/// A panic in `fut` (a bug in a provider or here) ends this operation alone, as an internal
/// error ([`panicked`]): unwinding further would end the task rmcp runs the request on
/// without an answer, leaving the client waiting and the stdio transport counting the
/// request as in progress for ever.
pub(crate) async fn metered<T>(
    metrics: &Metrics,
    method: &'static str,
    fut: impl Future<Output = Result<T>>,
) -> Result<T> {
    use futures::FutureExt as _;
    let start = Instant::now();
    let result = std::panic::AssertUnwindSafe(fut)
        .catch_unwind()
        .await
        .unwrap_or_else(|_| Err(panicked(method)));
    record(metrics, method, start, &result);
    result
}

/// The error an operation of `method` that panicked answers (-32603 to the client). The
/// panic's own message is not repeated here: it may hold anything the failing code had in
/// hand, and the panic hook has already printed it to stderr.
pub(crate) fn panicked(method: &str) -> mcpr_core::Error {
    tracing::error!(
        method,
        "a request panicked; it is answered with an internal error and the session goes on"
    );
    mcpr_core::Error::internal(format!(
        "{method} failed: the server hit an internal error (a panic) while handling this \
         request; other requests are not affected"
    ))
}

/// Records in `metrics` the outcome of `result`, one operation of MCP `method` begun at
/// `start`, as [`metered`] does (for the paths that finish without a future).
pub(crate) fn record<T>(
    metrics: &Metrics,
    method: &'static str,
    start: Instant,
    result: &Result<T>,
) {
    let outcome = match result {
        Ok(_) => "ok",
        Err(e) => crate::metrics::outcome_of(crate::errors::code_of(e.kind).0),
    };
    metrics.record(method, outcome, start.elapsed());
}

/// [`metered`] for a method the handler answers itself (`initialize`, `server/discover`),
/// whose errors are already JSON-RPC errors: the same series, the outcome from their code.
pub(crate) async fn metered_rpc<T>(
    metrics: &Metrics,
    method: &'static str,
    fut: impl Future<Output = std::result::Result<T, rmcp::ErrorData>>,
) -> std::result::Result<T, rmcp::ErrorData> {
    let start = Instant::now();
    let result = fut.await;
    let outcome = match &result {
        Ok(_) => "ok",
        Err(e) => crate::metrics::outcome_of(e.code.0),
    };
    metrics.record(method, outcome, start.elapsed());
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layer counts calls by position in the metric's label lists: each position names
    /// the operation and outcome the layer means, so a label added in `metrics` in the
    /// wrong place fails here rather than counting reads as lists.
    #[test]
    fn call_positions_name_the_metric_labels() {
        use crate::metrics::{PROVIDER_OPS, PROVIDER_OUTCOMES};
        let ops = [
            (call::LIST, "list"),
            (call::READ, "read"),
            (call::COMPLETE, "complete"),
            (call::WATCH, "watch"),
            (call::WATCH_LIST, "watch_list"),
            (call::CHANGE_TOKEN, "change_token"),
            (call::READINESS, "readiness"),
            (call::READ_DIRECTORY, "read_directory"),
        ];
        for (n, name) in ops {
            assert_eq!(PROVIDER_OPS[n], name);
        }
        assert_eq!(PROVIDER_OPS.len(), ops.len());
        let outcomes = [
            (outcome::<()>(&Ok(())), "ok"),
            (outcome::<()>(&Err(Error::internal("x"))), "error"),
            (UNSUPPORTED, "unsupported"),
            (
                outcome::<()>(&Err(Error::new(ErrorKind::Timeout, "x"))),
                "timeout",
            ),
        ];
        for (n, name) in outcomes {
            assert_eq!(PROVIDER_OUTCOMES[n], name);
        }
    }

    #[tokio::test]
    async fn a_call_past_the_limit_answers_the_timeout_error() {
        let slow = std::future::pending::<Result<()>>();
        let err = within(
            Duration::from_millis(20),
            Some("file:///x"),
            "request_timeout",
            slow,
        )
        .await
        .unwrap_err();
        assert_eq!(err.kind, ErrorKind::Timeout);
        assert_eq!(
            err.message,
            "file:///x timed out after 20 ms (request_timeout)"
        );
        assert_eq!(err.uri.as_deref(), Some("file:///x"));
        let err = within(
            Duration::from_millis(20),
            None,
            "request_timeout",
            std::future::pending::<Result<()>>(),
        )
        .await
        .unwrap_err();
        assert_eq!(
            err.message,
            "the request timed out after 20 ms (request_timeout)"
        );
        assert_eq!(err.uri, None);
    }

    #[tokio::test]
    async fn read_budget_waits_then_answers_server_busy() {
        let b = std::sync::Arc::new(ReadBudget::new(100));
        let limit = Duration::from_millis(50);
        let first = b.reserve(60, limit).await.unwrap();
        assert_eq!(b.free(), 40);
        // More than the whole budget is clamped to it, so it waits for everything.
        let err = match b.reserve(1000, limit).await {
            Err(e) => e,
            Ok(_) => panic!("reserved past the budget"),
        };
        assert_eq!(err.kind, ErrorKind::Unavailable);
        assert!(err.message.contains("server busy"), "{err}");
        assert!(
            err.message.contains("max_inflight_read_bytes (100 bytes)"),
            "{err}"
        );
        assert!(err.kind.is_temporary());
        assert_eq!(b.free(), 40, "a refused reservation takes nothing");
        // A waiting read goes on as soon as one in progress gives its share back.
        let waiter = {
            let b = b.clone();
            tokio::spawn(async move {
                let r = b.reserve(80, Duration::from_secs(10)).await.map(|_| ());
                r.is_ok()
            })
        };
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(!waiter.is_finished(), "80 bytes fit in 40");
        drop(first);
        assert!(waiter.await.unwrap());
        assert_eq!(b.free(), 100);
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
        let _ = metered(&m, "resources/read", async {
            Err::<(), _>(Error::internal("broken"))
        })
        .await;
        assert_eq!(m.count("resources/read", "ok"), 1);
        assert_eq!(m.count("resources/read", "not_found"), 1);
        assert_eq!(m.count("resources/read", "invalid_params"), 1);
        assert_eq!(m.count("resources/read", "timeout"), 1);
        assert_eq!(m.count("resources/read", "internal"), 1);
    }
}
