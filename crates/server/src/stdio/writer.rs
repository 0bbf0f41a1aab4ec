//! The writing side of the stdio transport: the answer queue and its back-pressure (the
//! [`Backlog`]: past its bounds no request is read and notifications are held back, one of
//! each), the writer thread that writes every answer that is ready in one `write`, and the
//! reader thread's own write that never blocks ([`Output::write_now`]). Both write under one
//! lock, each batch whole, so lines never mix.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use mcpr_core::sync::lock;
use rmcp::model::{ClientNotification, ClientRequest, JsonRpcMessage, RequestId};
use rmcp::service::{RoleServer, RxJsonRpcMessage};
use tokio::sync::mpsc;

use super::{BATCH_BYTES, BATCH_ROOM, MAX_DEFERRED, MAX_PENDING_REQUESTS, closed};

/// The writer thread's work (see [`super::StdioTransport::on_threads`]): writes every answer
/// that is ready in one go; then releases what it wrote from the backlog and, once the
/// backlog is under its bound, the notifications held back. Each batch is written whole under the output's lock, after what the reader thread left unwritten
/// ([`Out::carry`]), and counted off the backlog before the lock is released, so the reader
/// sees an empty backlog only once everything queued before is out.
pub(super) fn write_answers(
    output: &Output,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
    backlog: &Backlog,
) {
    let mut batch: Vec<u8> = Vec::with_capacity(BATCH_ROOM);
    while let Some(first) = rx.blocking_recv() {
        let (messages, bytes) = gather(&first, &mut rx, &mut batch);
        let result = {
            let mut o = output.lock();
            let mut result = write_all_fd(o.fd.as_fd(), &o.carry);
            o.carry.clear();
            if result.is_ok() {
                result = write_all_fd(o.fd.as_fd(), chosen(&first, &batch));
            }
            // Before the backlog wakes anyone: the next big read takes it, pages and all.
            mcpr_core::spare::give_back(first);
            if result.is_ok() {
                let deferred = backlog.written(bytes, messages);
                if !deferred.is_empty() {
                    result = write_all_fd(o.fd.as_fd(), &deferred.concat());
                }
            }
            result
        };
        if !done_with(result, backlog, &mut batch) {
            return;
        }
    }
    // The transport is closed: a reader thread waiting for room must not wait for ever.
    backlog.drained.notify_waiters();
}

/// After a batch's writes: `false` once stdout is gone; a burst's big batch is not kept.
fn done_with(result: io::Result<()>, backlog: &Backlog, batch: &mut Vec<u8>) -> bool {
    if let Err(e) = result {
        stdout_gone(backlog, &e);
        return false;
    }
    shrink(batch);
    true
}

/// A batch grown by a burst is not kept at that size.
fn shrink(batch: &mut Vec<u8>) {
    if batch.capacity() > 4 * BATCH_BYTES {
        *batch = Vec::with_capacity(BATCH_ROOM);
    }
}

/// Puts `first` and the answers queued behind it into `batch`, up to [`BATCH_BYTES`], unless
/// `first` is big enough to go alone; how many answers and bytes that is.
fn gather(
    first: &[u8],
    rx: &mut mpsc::UnboundedReceiver<Vec<u8>>,
    batch: &mut Vec<u8>,
) -> (usize, usize) {
    if first.len() >= BATCH_BYTES {
        return (1, first.len());
    }
    let (mut messages, mut bytes) = (1, first.len());
    batch.clear();
    batch.extend_from_slice(first);
    while batch.len() < BATCH_BYTES {
        match rx.try_recv() {
            Ok(next) => {
                messages += 1;
                bytes += next.len();
                batch.extend_from_slice(&next);
            }
            Err(_) => break,
        }
    }
    (messages, bytes)
}

/// What [`gather`] made: a big answer as it is (no copy), else the batch.
fn chosen<'a>(first: &'a [u8], batch: &'a [u8]) -> &'a [u8] {
    if first.len() >= BATCH_BYTES {
        first
    } else {
        batch
    }
}

/// stdout is gone: nothing will drain now. Let the reader go on (to the end of input;
/// answers are refused by the closed queue) instead of waiting for room forever.
fn stdout_gone(backlog: &Backlog, e: &io::Error) {
    tracing::debug!("stdout closed: {e}");
    backlog.set_limits(usize::MAX, usize::MAX);
    backlog.closed.store(true, Ordering::Release);
    backlog.drained.notify_waiters();
}

/// The output descriptor of a transport on threads: one writer at a time, each batch whole
/// (a pipe splits a write larger than its buffer, and two writers' pieces would mix).
pub(super) struct Output(std::sync::Mutex<Out>);

pub(super) struct Out {
    fd: OwnedFd,
    /// How the reader thread writes without ever blocking.
    pub(super) nowait: NoWait,
    /// The end of a batch the reader thread wrote only in part (the pipe was full): the
    /// writer thread writes it before anything else, so no line is split by another.
    carry: Vec<u8>,
}

/// A write that never blocks, on the output descriptor.
pub(super) enum NoWait {
    /// A pipe: a description of its own, opened with `O_NONBLOCK` through `/proc/self/fd`
    /// (setting the flag on the shared one would make the process's stdout, and a stderr
    /// sharing it, non-blocking for everyone).
    Fifo(OwnedFd),
    /// A socket (Node's `child_process` gives its children socket pairs): `MSG_DONTWAIT`.
    Socket,
    /// Anything else: the reader thread leaves every answer to the writer thread.
    Never,
}

impl Output {
    pub(super) fn new(fd: OwnedFd) -> Self {
        let nowait = match rustix::fs::fstat(&fd)
            .map(|st| rustix::fs::FileType::from_raw_mode(st.st_mode))
        {
            Ok(rustix::fs::FileType::Fifo) => {
                let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
                let flags = rustix::fs::OFlags::WRONLY
                    | rustix::fs::OFlags::NONBLOCK
                    | rustix::fs::OFlags::CLOEXEC;
                match rustix::fs::open(path, flags, rustix::fs::Mode::empty()) {
                    Ok(own) => NoWait::Fifo(own),
                    Err(_) => NoWait::Never,
                }
            }
            Ok(rustix::fs::FileType::Socket) => NoWait::Socket,
            _ => NoWait::Never,
        };
        Self(std::sync::Mutex::new(Out {
            fd,
            nowait,
            carry: Vec::new(),
        }))
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Out> {
        // A descriptor and a buffer: nothing a panic could leave half-changed.
        lock(&self.0)
    }

    /// The lock if nobody holds it: the writer thread holds it while it writes, maybe
    /// blocked on a full pipe, and the reader thread must not wait for that.
    fn try_lock(&self) -> Option<std::sync::MutexGuard<'_, Out>> {
        match self.0.try_lock() {
            Ok(o) => Some(o),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }
}

impl NoWait {
    /// What the reader thread writes to, for the log.
    pub(super) fn kind(&self) -> &'static str {
        match self {
            NoWait::Fifo(_) => "pipe",
            NoWait::Socket => "socket",
            NoWait::Never => "neither pipe nor socket: answers through the writer thread",
        }
    }
}

impl Out {
    /// Writes what fits of `bytes` now, without blocking; how much that was.
    fn try_write(&self, bytes: &[u8]) -> io::Result<usize> {
        loop {
            let written = match &self.nowait {
                NoWait::Fifo(own) => rustix::io::write(own, bytes),
                NoWait::Socket => {
                    rustix::net::send(&self.fd, bytes, rustix::net::SendFlags::DONTWAIT)
                }
                NoWait::Never => return Ok(0),
            };
            match written {
                Ok(n) => return Ok(n),
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) => return Ok(0),
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// Writes all of `bytes`, waiting for room when the descriptor is non-blocking and full.
fn write_all_fd(fd: BorrowedFd<'_>, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        match rustix::io::write(fd, bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::AGAIN) => ready(fd, rustix::event::PollFlags::OUT)?,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Blocks until `fd` is ready for `flags` (or hung up, or failed: the next call says which).
pub(super) fn ready(fd: BorrowedFd<'_>, flags: rustix::event::PollFlags) -> io::Result<()> {
    let mut fds = [rustix::event::PollFd::from_borrowed_fd(fd, flags)];
    match rustix::event::poll(&mut fds, None) {
        Ok(_) | Err(rustix::io::Errno::INTR) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

impl Output {
    /// Writes the answers in `batch` (made by the reader thread) now, as far as the output
    /// takes them without
    /// waiting, when nothing queued before them is still unwritten; whatever is left goes to
    /// the writer thread, behind what is queued. This thread never blocks on the output: a
    /// client that writes many requests before it reads an answer has them read and answered
    /// up to the backlog's bounds.
    pub(super) fn write_now(&self, batch: &mut Vec<u8>, out: &Queue) {
        if batch.is_empty() {
            return;
        }
        if out.backlog.closed.load(Ordering::Acquire) {
            // Nobody reads the answers any more.
            batch.clear();
            return;
        }
        // What goes out now: nothing while the writer thread holds the output (it may be
        // blocked on a full pipe) or has anything queued before these; else as much as the
        // output takes without waiting. An error is the writer thread's to find out, with
        // its blocking write (a socket's ENOBUFS passes).
        let written = match self.try_lock() {
            Some(mut o)
                if o.carry.is_empty() && out.backlog.messages.load(Ordering::Acquire) == 0 =>
            {
                let n = o.try_write(batch).unwrap_or(0);
                if n > 0 && n < batch.len() {
                    // Part of a line may be out: its end goes first, whoever writes next.
                    o.carry.extend_from_slice(&batch[n..]);
                }
                n
            }
            _ => 0,
        };
        match written {
            0 => {
                let _ = out.send(std::mem::take(batch));
            }
            n if n == batch.len() => batch.clear(),
            _ => {
                batch.clear();
                // Wakes the writer thread for the carry (an empty answer, counted as one).
                let _ = out.send(Vec::new());
            }
        }
        shrink(batch);
    }
}

/// The sending side of the answer queue, counting what it queues into the [`Backlog`].
#[derive(Clone)]
pub(super) struct Queue {
    pub(super) tx: mpsc::UnboundedSender<Vec<u8>>,
    pub(super) backlog: Arc<Backlog>,
}

impl Queue {
    /// A handle that does not keep the queue open (see [`Reader`]).
    pub(super) fn downgrade(&self) -> WeakQueue {
        WeakQueue {
            tx: self.tx.downgrade(),
            backlog: self.backlog.clone(),
        }
    }

    /// Queue an answer (always: the request was taken, its answer is owed).
    pub(super) fn send(&self, bytes: Vec<u8>) -> io::Result<()> {
        self.backlog.add(bytes.len());
        let len = bytes.len();
        self.tx.send(bytes).map_err(|_| {
            self.backlog.written(len, 1);
            closed()
        })
    }

    /// Queue a notification, or hold it back while the backlog is over its bound.
    pub(super) fn send_or_defer(&self, bytes: Vec<u8>) -> io::Result<()> {
        match self.backlog.defer_if_over(bytes) {
            None => Ok(()),
            Some(bytes) => self.send(bytes),
        }
    }
}

/// A [`Queue`] that does not keep the writer running.
#[derive(Clone)]
pub(super) struct WeakQueue {
    tx: mpsc::WeakUnboundedSender<Vec<u8>>,
    pub(super) backlog: Arc<Backlog>,
}

impl WeakQueue {
    pub(super) fn upgrade(&self) -> Option<Queue> {
        Some(Queue {
            tx: self.tx.upgrade()?,
            backlog: self.backlog.clone(),
        })
    }
}

/// Answers queued and not yet written, against the bound past which no request is read.
/// Counted with atomics (the hot path adds and the writer subtracts, no lock); the lock is
/// taken only to hold a notification back and, by the writer, to release them.
pub(super) struct Backlog {
    pub(super) bytes: AtomicUsize,
    pub(super) messages: AtomicUsize,
    max_bytes: AtomicUsize,
    max_messages: AtomicUsize,
    max_pending: AtomicUsize,
    /// Signalled by the writer after each write.
    pub(super) drained: tokio::sync::Notify,
    /// Notifications held back, in arrival order, each once.
    pub(super) deferred: std::sync::Mutex<Vec<Vec<u8>>>,
    /// Notifications dropped because [`MAX_DEFERRED`] were already held back.
    dropped: AtomicU64,
    /// Requests rmcp has and has not answered (a listen, answered only when it ends, until it
    /// is acknowledged); a cancelled one leaves too, as rmcp drops its answer.
    pending: std::sync::Mutex<std::collections::HashSet<RequestId>>,
    pub(super) pending_count: AtomicUsize,
    /// Listens handed to rmcp and not ended (by their final answer or a cancellation): the
    /// end of input waits for them too, once it has ended them (see `receive`).
    listening: std::sync::Mutex<std::collections::HashSet<RequestId>>,
    pub(super) listening_count: AtomicUsize,
    /// stdout is gone: nothing bounds reading any more.
    pub(super) closed: AtomicBool,
}

impl Backlog {
    pub(super) fn new(max_bytes: usize, max_messages: usize) -> Self {
        Self {
            bytes: AtomicUsize::new(0),
            messages: AtomicUsize::new(0),
            max_bytes: AtomicUsize::new(max_bytes),
            max_messages: AtomicUsize::new(max_messages),
            max_pending: AtomicUsize::new(MAX_PENDING_REQUESTS),
            drained: tokio::sync::Notify::new(),
            deferred: std::sync::Mutex::new(Vec::new()),
            dropped: AtomicU64::new(0),
            pending: std::sync::Mutex::new(std::collections::HashSet::new()),
            pending_count: AtomicUsize::new(0),
            listening: std::sync::Mutex::new(std::collections::HashSet::new()),
            listening_count: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
        }
    }

    /// `msg` goes to rmcp: a request is pending until answered (a listen until acknowledged);
    /// a cancellation ends one.
    pub(super) fn handed_to_rmcp(&self, msg: &RxJsonRpcMessage<RoleServer>) {
        match msg {
            JsonRpcMessage::Request(r) => {
                if matches!(r.request, ClientRequest::SubscriptionsListenRequest(_)) {
                    let mut listening = lock(&self.listening);
                    listening.insert(r.id.clone());
                    self.listening_count
                        .store(listening.len(), Ordering::Release);
                }
                let mut pending = lock(&self.pending);
                if pending.insert(r.id.clone()) {
                    self.pending_count.store(pending.len(), Ordering::Release);
                }
            }
            JsonRpcMessage::Notification(n) => {
                if let ClientNotification::CancelledNotification(c) = &n.notification
                    && let Some(id) = &c.params.request_id
                {
                    self.answered(id);
                }
            }
            _ => {}
        }
    }

    /// Request `id` was answered (or will never be).
    pub(super) fn answered(&self, id: &RequestId) {
        self.acknowledged(id);
        if self.listening_count.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut listening = lock(&self.listening);
        if listening.remove(id) {
            self.listening_count
                .store(listening.len(), Ordering::Release);
            drop(listening);
            self.drained.notify_waiters();
        }
    }

    /// Request `id` needs nothing more of rmcp's loop: answered, or a listen acknowledged.
    pub(super) fn acknowledged(&self, id: &RequestId) {
        if self.pending_count.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut pending = lock(&self.pending);
        if pending.remove(id) {
            self.pending_count.store(pending.len(), Ordering::Release);
            drop(pending);
            self.drained.notify_waiters();
        }
    }

    pub(super) fn set_limits(&self, bytes: usize, messages: usize) {
        self.max_bytes.store(bytes, Ordering::Relaxed);
        self.max_messages.store(messages, Ordering::Relaxed);
        self.max_pending
            .store(messages.min(MAX_PENDING_REQUESTS), Ordering::Relaxed);
    }

    pub(super) fn add(&self, bytes: usize) {
        self.bytes.fetch_add(bytes, Ordering::AcqRel);
        self.messages.fetch_add(1, Ordering::AcqRel);
    }

    pub(super) fn over(&self) -> bool {
        !self.closed.load(Ordering::Acquire)
            && (self.over_answers()
                || self.pending_count.load(Ordering::Acquire)
                    >= self.max_pending.load(Ordering::Relaxed))
    }

    /// Over the bound of unwritten answers (what holds notifications back).
    fn over_answers(&self) -> bool {
        self.bytes.load(Ordering::Acquire) > self.max_bytes.load(Ordering::Relaxed)
            || self.messages.load(Ordering::Acquire) > self.max_messages.load(Ordering::Relaxed)
    }

    /// Holds `bytes` back when over the bound (returning `None`), else gives it back to be
    /// queued. Under the lock the writer releases with, so a notification held back just as
    /// the backlog drains is released by that same write.
    pub(super) fn defer_if_over(&self, bytes: Vec<u8>) -> Option<Vec<u8>> {
        let mut deferred = lock(&self.deferred);
        if !self.over_answers() && deferred.is_empty() {
            return Some(bytes);
        }
        if deferred.contains(&bytes) {
            return None;
        }
        if deferred.len() >= MAX_DEFERRED {
            if self.dropped.fetch_add(1, Ordering::Relaxed) == 0 {
                tracing::warn!(
                    "the client is not reading its notifications; dropping some (at most {MAX_DEFERRED} are held back)"
                );
            }
            return None;
        }
        deferred.push(bytes);
        None
    }

    /// The writer wrote `bytes` in `messages`: count them off, wake a reader waiting for
    /// room, and return the notifications held back if there is room for them now.
    pub(super) fn written(&self, bytes: usize, messages: usize) -> Vec<Vec<u8>> {
        let mut deferred = lock(&self.deferred);
        self.bytes.fetch_sub(bytes, Ordering::AcqRel);
        self.messages.fetch_sub(messages, Ordering::AcqRel);
        self.drained.notify_waiters();
        if self.over_answers() {
            return Vec::new();
        }
        std::mem::take(&mut *deferred)
    }

    /// Returns `true` once the backlog is under its bound, or `false` once `closed` says
    /// nobody will write it any more.
    pub(super) async fn wait_below(&self, closed: impl Fn() -> bool) -> bool {
        // Checked first without a waiter: `receive` asks before every line.
        if !self.over() {
            return true;
        }
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            // Registered before the checks, so a write between a check and the wait wakes it.
            drained.as_mut().enable();
            if !self.over() {
                return true;
            }
            if closed() {
                return false;
            }
            drained.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::decode::{decode_hot, rmcp_decode};

    #[test]
    fn notifications_held_back_once_each_until_the_backlog_drains() {
        let b = Backlog::new(10, 100);
        assert_eq!(b.defer_if_over(b"n0".to_vec()), Some(b"n0".to_vec()));
        b.add(20);
        assert!(b.over());
        for n in [&b"a"[..], b"b", b"a", b"b", b"a"] {
            assert_eq!(b.defer_if_over(n.to_vec()), None);
        }
        assert_eq!(lock(&b.deferred).len(), 2, "each held back once");
        // Still over after a partial write: nothing released yet.
        b.add(5);
        assert!(b.written(5, 1).is_empty());
        assert_eq!(b.written(20, 1), vec![b"a".to_vec(), b"b".to_vec()]);
        assert!(!b.over());
        assert_eq!(b.defer_if_over(b"c".to_vec()), Some(b"c".to_vec()));
        // The number held back is bounded.
        b.add(100);
        for i in 0..MAX_DEFERRED + 10 {
            assert_eq!(b.defer_if_over(i.to_string().into_bytes()), None);
        }
        assert_eq!(lock(&b.deferred).len(), MAX_DEFERRED);
    }

    #[test]
    fn requests_rmcp_has_not_answered_count_against_the_bound() {
        let b = Backlog::new(1 << 20, 2);
        b.set_limits(1 << 20, 2);
        let ping = |id: u32| {
            decode_hot(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#).as_bytes())
                .unwrap()
        };
        b.handed_to_rmcp(&ping(1));
        b.handed_to_rmcp(&ping(1));
        assert!(!b.over(), "a repeated id is one request");
        b.handed_to_rmcp(&ping(2));
        assert!(b.over(), "two requests wait for rmcp");
        b.answered(&RequestId::Number(1));
        assert!(!b.over());
        // A cancelled request is never answered by rmcp: the cancellation ends it.
        b.handed_to_rmcp(&ping(3));
        assert!(b.over());
        let cancel = rmcp_decode(
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}"#,
        )
        .unwrap()
        .unwrap();
        b.handed_to_rmcp(&cancel);
        assert!(!b.over());
    }
}
