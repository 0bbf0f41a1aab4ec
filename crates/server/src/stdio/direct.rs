//! The direct answers of the stdio transport: a `resources/read` that rmcp's dispatch would
//! only hand to the handler is answered here, from the reader thread, without rmcp's serve
//! loop (see the transport's documentation for when a read qualifies and what it saves).
//! A read is tried in place first; one that waits finishes on a task of its own, listed in
//! [`Waiting`] so a cancellation can stop it.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;

use mcpr_core::sync::lock;
use rmcp::model::{
    ClientNotification, ClientRequest, JsonRpcMessage, JsonRpcRequest, JsonRpcVersion2_0,
    ReadResourceRequestParams, RequestId, RequestMetaObject,
};
use rmcp::service::{RoleServer, RxJsonRpcMessage, TxJsonRpcMessage};
use tokio_util::sync::CancellationToken;

use super::BATCH_BYTES;
use super::framing::as_line;
use super::writer::Queue;
use crate::McpHandler;
use crate::handler::ReadAnswer;
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
    /// direct read it names. Once stdout is gone, a direct read is dropped unread: its answer
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
        // rmcp drops the answer to a request cancelled before it is done; so does this
        // path. The notification still goes to rmcp, which finds nothing of its own.
        if let JsonRpcMessage::Notification(n) = &msg
            && let ClientNotification::CancelledNotification(c) = &n.notification
            && let Some(id) = &c.params.request_id
        {
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

    /// Finishes a direct read after its try in place: `answer` when it gave one (appended to
    /// `batch`, which the reader thread writes), else on a task of its own, so the requests
    /// behind it are not held up, and it can be cancelled while it waits. That task's read
    /// is polled once here first (a large file's read often finishes on it): that poll has
    /// no waker to call, and the task polls the read again, with its own, as it starts.
    pub(super) fn finish(
        &self,
        read: NowRead,
        answer: ReadAnswer,
        out: &Queue,
        batch: &mut Vec<u8>,
    ) {
        if let Some(answer) = answer {
            deliver(line_of(answer), out, batch);
            return;
        }
        let NowRead {
            handler,
            params,
            id,
            era,
        } = read;
        let answer_id = id.clone();
        let mut read =
            Box::pin(
                async move { line_of(handler.read_answer_as(params, None, answer_id, era).await) },
            );
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        if let Poll::Ready(answer) = read.as_mut().poll(&mut cx) {
            deliver(answer, out, batch);
            return;
        }
        // Only a read that waits takes a handle on the queue (a count on the channel).
        let out = out.clone();
        let (entry, cancelled) = self.waiting.insert(&id);
        let waiting = self.waiting.clone();
        tokio::spawn(async move {
            let answer = tokio::select! {
                answer = read => Some(answer),
                () = cancelled.cancelled() => None,
            };
            // Taken off the list and sent under one lock, so a cancellation is either
            // before (no answer) or after (the answer is already out).
            waiting.done(&id, entry, || {
                if let Some(Some(bytes)) = answer {
                    let _ = out.send(bytes);
                }
            });
            // A `receive` holding the stream open after EOF counts the reads still running.
            out.backlog.drained.notify_waiters();
        });
    }
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
    /// A direct read to try in place, which the reader thread does itself with its state
    /// unlocked, so that the watchdog can hand that state to a new thread if the read
    /// hangs (see [`super::reader::InPlace`]); then [`Direct::finish`].
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
    /// The read done in place, if it can be ([`McpHandler::read_answer_now`]).
    pub(super) fn now(&self) -> ReadAnswer {
        self.handler
            .read_answer_now(&self.params, None, &self.id, self.era)
    }
}

/// A direct read's answer as a line of the stream (`None` when it cannot be encoded, which
/// is logged).
pub(super) fn line_of(
    answer: Result<io::Result<Vec<u8>>, TxJsonRpcMessage<RoleServer>>,
) -> Option<Vec<u8>> {
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
