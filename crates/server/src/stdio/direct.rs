//! The direct answers of the stdio transport: a `resources/read` that rmcp's dispatch would
//! only hand to the handler is answered here, from the reader thread, without rmcp's serve
//! loop (see the transport's documentation for when a read qualifies and what it saves).
//! A read is tried in place first; one that waits finishes on a task of its own, listed in
//! [`Waiting`] so a cancellation can stop it, as is a read in place that hangs once the
//! reader thread's watchdog has put a new thread in its place ([`Direct::taken_over`]).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;

use mcpr_core::sync::lock;
use rmcp::model::{
    ClientRequest, JsonRpcMessage, JsonRpcRequest, JsonRpcVersion2_0, ReadResourceRequestParams,
    RequestId, RequestMetaObject,
};
use rmcp::service::{RoleServer, RxJsonRpcMessage};
use tokio_util::sync::CancellationToken;

use super::BATCH_BYTES;
use super::framing::as_line;
use super::writer::Queue;
use crate::McpHandler;
use crate::handler::{Wire, WireAnswer};
use crate::wire::cancel;
use crate::wire::encode::to_json;
use crate::wire::era::Era;
use crate::wire::lifecycle::Lifecycle;

/// The direct path's state, shared by the reader threads and the transport.
#[derive(Clone)]
pub(super) struct Direct {
    /// The handler that answers, when the direct path is on.
    pub(super) handler: Option<Arc<McpHandler>>,
    /// Reads the direct path has taken.
    pub(super) answered: Arc<AtomicU64>,
    /// Direct reads still running.
    pub(super) waiting: Arc<Waiting>,
    /// What the transport has seen of the session's lifecycle: the reading side tracks the
    /// requests, `send` the `initialize` answers.
    pub(super) lifecycle: Arc<Mutex<Lifecycle>>,
}

impl Direct {
    pub(super) fn new(lifecycle: Arc<Mutex<Lifecycle>>) -> Self {
        Self {
            handler: None,
            answered: Arc::default(),
            waiting: Arc::default(),
            lifecycle,
        }
    }

    /// Takes `msg` when it is a `resources/read` that rmcp would hand to the handler
    /// unchanged ([`Directly::Now`]: the reader thread tries it in place, then
    /// [`Direct::finish`]), and returns it for rmcp otherwise. A cancellation also stops the
    /// direct read it names, as rmcp stops its own ([`cancel`]). Once stdout is gone, a direct read is dropped unread: its answer
    /// could go nowhere, and the read would cost the source for nothing.
    pub(super) fn take(&self, msg: RxJsonRpcMessage<RoleServer>, out: &Queue) -> Directly {
        let Some(handler) = self.handler.clone() else {
            return Directly::Rmcp(msg);
        };
        // One look at the lifecycle per message: `send` changes it only on an `initialize`
        // answer.
        let mut lifecycle = lock(&self.lifecycle);
        match &msg {
            JsonRpcMessage::Request(r) => {
                if lifecycle.saw(&r.request, &handler) {
                    return Directly::Rmcp(msg);
                }
            }
            _ => lifecycle.saw_other(),
        }
        // The notification still goes to rmcp, which finds nothing of its own.
        if let Some(id) = cancel::cancelled(&msg) {
            self.waiting.cancel(id);
        }
        let (id, params, era) = match msg {
            JsonRpcMessage::Request(JsonRpcRequest {
                id,
                request: ClientRequest::ReadResourceRequest(read),
                ..
            }) => match lifecycle.era(read.extensions.get::<RequestMetaObject>()) {
                Some(era) => (id, read.params, era),
                None => {
                    return Directly::Rmcp(JsonRpcMessage::Request(JsonRpcRequest {
                        jsonrpc: JsonRpcVersion2_0,
                        id,
                        request: ClientRequest::ReadResourceRequest(read),
                    }));
                }
            },
            other => return Directly::Rmcp(other),
        };
        drop(lifecycle);
        if out.backlog.closed.load(Ordering::Acquire) {
            tracing::debug!(%id, uri = %params.uri, "stdout is gone; a read dropped unread");
            return Directly::Dropped;
        }
        self.answered.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(%id, uri = %params.uri, "resources/read answered by the direct path");
        Directly::Now(NowRead {
            handler,
            params,
            id,
            era,
        })
    }

    /// Finishes a direct read after its try in place ([`NowRead::try_now`]): a done one's
    /// answer appended to `batch`, which the reader thread writes; one that waits on a task
    /// of its own, so the requests behind it are not held up, and listed so that a
    /// cancellation stops it.
    pub(super) fn finish(&self, tried: Tried, out: &Queue, batch: &mut Vec<u8>) {
        match tried {
            Tried::Done(answer) => deliver(answer, out, batch),
            Tried::Waits(id, read) => {
                let (entry, cancelled) = self.waiting.insert(&id);
                // Only a read that waits takes a handle on the queue (a count on the channel).
                let (out, waiting) = (out.clone(), self.waiting.clone());
                tokio::spawn(async move {
                    let answer = tokio::select! {
                        answer = read => Some(answer),
                        () = cancelled.cancelled() => None,
                    };
                    answered(&waiting, &id, entry, answer, &out);
                });
            }
        }
    }

    /// A read in place the reader thread's watchdog took over (see
    /// [`super::reader::InPlace`]): its request `id`, `uri` and `era`, and `handed`, which
    /// gets what the stuck thread's try gave once it returns. Listed as a read that waits, so
    /// that a cancellation stops it (no answer, as rmcp gives none) and the end of input
    /// waits for it; answered with what it gives if that comes by `deadline`, else with the
    /// timeout error then.
    // Called once per read taken over, from the watchdog, with what it holds: a struct to
    // carry these would be built for this one call.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn taken_over(
        &self,
        id: RequestId,
        uri: String,
        era: Era,
        timeout: std::time::Duration,
        deadline: tokio::time::Instant,
        handed: tokio::sync::oneshot::Receiver<Tried>,
        out: Queue,
        rt: &tokio::runtime::Handle,
    ) {
        let (entry, cancelled) = self.waiting.insert(&id);
        let waiting = self.waiting.clone();
        rt.spawn(async move {
            let read = async {
                match handed.await {
                    Ok(Tried::Done(answer)) => answer,
                    Ok(Tried::Waits(_, read)) => read.await,
                    // The stuck thread ended without handing its read over: the timeout
                    // answers.
                    Err(_) => std::future::pending().await,
                }
            };
            let answer = tokio::select! {
                biased;
                () = cancelled.cancelled() => None,
                answer = tokio::time::timeout_at(deadline, read) => Some(match answer {
                    Ok(answer) => answer,
                    Err(_) => {
                        tracing::warn!(%id, %uri, "a read in place hung past the request \
                            timeout; answered with the timeout error");
                        timed_out(&id, &uri, era, timeout)
                    }
                }),
            };
            answered(&waiting, &id, entry, answer, &out);
        });
    }
}

/// A direct read that waited is done (`answer`), or cancelled (`None`): taken off the list
/// and its answer sent under one lock, so a cancellation is either before (no answer) or
/// after (the answer is already out).
fn answered(
    waiting: &Waiting,
    id: &RequestId,
    entry: u64,
    answer: Option<Option<Vec<u8>>>,
    out: &Queue,
) {
    waiting.done(id, entry, || {
        if let Some(Some(bytes)) = answer {
            let _ = out.send(bytes);
        }
    });
    // A `receive` holding the stream open after EOF counts the reads still running.
    out.backlog.drained.notify_waiters();
}

/// The timeout error's line for the read of `uri` answering `id` in `era`, as the bounded
/// path words it.
fn timed_out(id: &RequestId, uri: &str, era: Era, timeout: std::time::Duration) -> Option<Vec<u8>> {
    let e = crate::layers::timed_out(timeout, Some(uri));
    let message =
        crate::wire::era::read_message(Err(crate::errors::to_mcp_error(e)), id.clone(), era);
    line_of(Err(message))
}

/// What a direct read's try gave.
pub(super) enum Tried {
    /// Done: its answer's line (`None` when it could not be encoded, which is logged).
    Done(Option<Vec<u8>>),
    /// It waits: the request's id and the read, to finish on a task.
    Waits(
        RequestId,
        Pin<Box<dyn Future<Output = Option<Vec<u8>>> + Send>>,
    ),
}

/// What [`Direct::take`] made of a message.
// Returned once per message and matched at once, as the `Option` of a message it replaced
// was; boxing the message would cost an allocation for every message rmcp answers.
#[allow(clippy::large_enum_variant)]
pub(super) enum Directly {
    /// Not the direct path's: for rmcp.
    Rmcp(RxJsonRpcMessage<RoleServer>),
    /// A direct read, dropped unread because stdout is gone.
    Dropped,
    /// A direct read to try in place ([`NowRead::try_now`]), which the reader thread does
    /// itself with its state unlocked, so that the watchdog can hand that state to a new
    /// thread if the read hangs (see [`super::reader::InPlace`]); then [`Direct::finish`].
    Now(NowRead),
}

/// A direct read taken, not yet tried in place.
pub(super) struct NowRead {
    handler: Arc<McpHandler>,
    pub(super) params: ReadResourceRequestParams,
    pub(super) id: RequestId,
    pub(super) era: Era,
}

impl NowRead {
    /// The read tried where it stands: in place if it can be ([`McpHandler::read_now`]),
    /// else its future polled once (a large file's read often finishes on that poll, which
    /// has no waker to call; the task the read then goes to polls it again, with its own).
    pub(super) fn try_now(self) -> Tried {
        if let Some(answer) = self
            .handler
            .read_now::<Wire>(&self.params, None, &self.id, self.era)
        {
            return Tried::Done(line_of(answer));
        }
        let Tried::Waits(id, mut read) = self.later() else {
            unreachable!("a read for later waits");
        };
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match read.as_mut().poll(&mut cx) {
            Poll::Ready(answer) => Tried::Done(answer),
            Poll::Pending => Tried::Waits(id, read),
        }
    }

    /// The read as a future not polled yet, to run on a task: nothing of it runs on the
    /// calling thread.
    pub(super) fn later(self) -> Tried {
        let NowRead {
            handler,
            params,
            id,
            era,
        } = self;
        let answer_id = id.clone();
        Tried::Waits(
            id,
            Box::pin(
                async move { line_of(handler.read::<Wire>(&params, None, &answer_id, era).await) },
            ),
        )
    }
}

/// A direct read's answer as a line of the stream (`None` when it cannot be encoded, which
/// is logged).
pub(super) fn line_of(answer: WireAnswer) -> Option<Vec<u8>> {
    let answer = match answer {
        Ok(json) => json.map(as_line),
        Err(refused) => to_json(refused).map(as_line),
    };
    answer
        .inspect_err(|e| tracing::error!("cannot encode an answer: {e}"))
        .ok()
}

/// A direct answer ready at once: appended to `batch` (the reader thread writes it), or,
/// when big (a blob), queued as it is instead of copied.
fn deliver(answer: Option<Vec<u8>>, out: &Queue, batch: &mut Vec<u8>) {
    match answer {
        Some(bytes) if bytes.len() < BATCH_BYTES => {
            batch.extend_from_slice(&bytes);
            mcpr_core::spare::give_back(bytes);
        }
        Some(bytes) => {
            let _ = out.send(bytes);
        }
        None => {}
    }
}

/// Direct reads still running, by request id, so a cancellation can stop them.
///
/// A client may reuse an id: two reads in flight under one id, or an id used again once
/// its answer is out. Each read therefore has an entry of its own, told apart by a number
/// no other read gets, so that one read finishing never takes another's entry (which would
/// drop the other's answer as if cancelled). A cancellation names only the id, so it stops
/// every read running under that id: the client has said it wants no answer to that id.
#[derive(Default)]
pub(super) struct Waiting {
    entries: Mutex<Entries>,
    /// How many reads are listed, readable without the lock.
    count: AtomicUsize,
}

#[derive(Default)]
struct Entries {
    /// The number the next entry gets.
    next: u64,
    by_id: HashMap<RequestId, Vec<(u64, CancellationToken)>>,
}

impl Waiting {
    /// Lists a read running under `id`: its entry's number, and the token a cancellation
    /// cancels.
    pub(super) fn insert(&self, id: &RequestId) -> (u64, CancellationToken) {
        let token = CancellationToken::new();
        let mut entries = lock(&self.entries);
        let entry = entries.next;
        entries.next += 1;
        entries
            .by_id
            .entry(id.clone())
            .or_default()
            .push((entry, token.clone()));
        self.count.fetch_add(1, Ordering::AcqRel);
        (entry, token)
    }

    /// Cancels every read running under `id`, and takes them off the list.
    pub(super) fn cancel(&self, id: &RequestId) {
        let removed = lock(&self.entries).by_id.remove(id);
        for (_, token) in removed.into_iter().flatten() {
            self.count.fetch_sub(1, Ordering::AcqRel);
            token.cancel();
        }
    }

    /// The read `entry` under `id` is done: if it is still listed (not cancelled), takes it
    /// off and calls `send` under the same lock.
    pub(super) fn done(&self, id: &RequestId, entry: u64, send: impl FnOnce()) {
        let mut entries = lock(&self.entries);
        let Some(reads) = entries.by_id.get_mut(id) else {
            return;
        };
        let Some(at) = reads.iter().position(|(e, _)| *e == entry) else {
            return;
        };
        reads.swap_remove(at);
        if reads.is_empty() {
            entries.by_id.remove(id);
        }
        self.count.fetch_sub(1, Ordering::AcqRel);
        send();
    }

    /// How many reads are running.
    pub(super) fn len(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_under_one_id_are_told_apart_and_cancelled_together() {
        let w = Waiting::default();
        let id = RequestId::Number(7);
        let (a, ta) = w.insert(&id);
        let (b, tb) = w.insert(&id);
        assert_eq!(w.len(), 2);
        // The second finishes first: the first is still listed and still answers.
        let mut sent = Vec::new();
        w.done(&id, b, || sent.push("b"));
        w.done(&id, a, || sent.push("a"));
        assert_eq!(sent, ["b", "a"]);
        assert_eq!(w.len(), 0);
        assert!(!ta.is_cancelled() && !tb.is_cancelled());
        // The id reused after both answers, twice: one cancellation stops both.
        let (c, tc) = w.insert(&id);
        let (d, td) = w.insert(&id);
        let (other, to) = w.insert(&RequestId::Number(8));
        w.cancel(&id);
        assert!(tc.is_cancelled() && td.is_cancelled() && !to.is_cancelled());
        w.done(&id, c, || sent.push("c"));
        w.done(&id, d, || sent.push("d"));
        assert_eq!(sent, ["b", "a"], "a cancelled read answers nothing");
        assert_eq!(w.len(), 1);
        w.done(&RequestId::Number(8), other, || sent.push("other"));
        assert_eq!(sent, ["b", "a", "other"]);
        assert_eq!(w.len(), 0);
    }
}
