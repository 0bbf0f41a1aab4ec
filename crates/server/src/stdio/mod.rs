//! The stdio transport: newline-delimited JSON-RPC on stdin and stdout (a pipe pair, a
//! socket pair, any descriptor), with a tagged decode of the hot resource requests, direct
//! answers to the reads rmcp would only hand to the handler, and batched writes, for
//! throughput. What it copies from rmcp (the decode, the encoder, the refusals, the mirror
//! of rmcp's handshake) is in `crate::wire`. Its parts:
//!
//! - [`framing`]: bytes to lines to messages, and the answers to lines no message comes from;
//! - [`reader`]: the thread that reads stdin, and the watchdog of its reads in place;
//! - [`direct`]: the direct answers, and the reads still running that a cancellation stops;
//! - [`writer`]: the answer queue with its back-pressure, and the writer thread;
//! - this file: rmcp's `Transport` over them, and how a session ends.
//!
//! rmcp's own line transport decodes every message through its untagged `ClientRequest`
//! union, which tries the variants one by one over a buffered copy of the message: a
//! `resources/read` fails nine variants (nine `serde_json` errors built and dropped) before
//! it matches, and that was 27 % of a whole stdio read in callgrind. Here the method name is
//! read first and the message is parsed once as the one type that method names, through
//! rmcp's own `Deserialize` for that type, so the result is the value rmcp would have built.
//! Every other line (other methods, responses, notifications, anything unusual) goes through
//! rmcp's `JsonRpcMessageCodec` unchanged, so its compatibility rules and errors still apply.
//!
//! Stdin is read on a thread of its own, blocking in `read` as the least program answering a
//! line with a file does, instead of waiting in `epoll_wait` for the runtime to wake and
//! read: that thread frames and decodes the lines, answers the direct reads that finish on
//! their first poll, writes their answers itself (the answers made from one read of input
//! together, in one `write`, as far as the output takes them without waiting) and hands the
//! other messages to `receive` over a bounded channel. The answers rmcp sends, and whatever
//! the reader could not write at once, are written by a second thread, every answer that is
//! ready in one `write`. The reader writes only when it can take the output's lock at once
//! and no answer queued before is unwritten, so lines never mix, answers rmcp sent keep
//! their order, and a client that writes many requests before reading gets them answered up
//! to the backlog's bounds. The lifecycle mirror counts an `initialize` as answered only
//! once its answer is queued, so no direct answer goes out before it. With one request in
//! flight on one CPU this saves the runtime's wake-ups, an `epoll_wait` and a hand-off to a
//! writer task on every request.
//!
//! With [`StdioTransport::with_direct_reads`], a `resources/read` is answered by the reader
//! thread instead of being handed to rmcp's serve loop, whose per-request task,
//! cancellation-token pair, request map entries, span and answer channel cost as much as
//! the read itself (the direct path took a 1 KiB read from about 150k to about 265k
//! requests/s). A read qualifies only when rmcp's dispatch would do nothing to it but call
//! the handler, which the transport tells from the lifecycle it has seen (`Lifecycle`): in a
//! session opened by an `initialize` answered below 2026-07-28, a read whose `_meta` names
//! no protocol version of its own; in any opened session, a read naming exactly 2026-07-28
//! with every `_meta` member that version requires. The answer gets what rmcp's dispatch
//! gives an answer of that era and the same handler call and metrics; every other message
//! goes to rmcp as before. A read still running when the client cancels it gets no answer,
//! as rmcp drops the answer to a cancelled request. Once stdout is gone, no direct read is
//! done any more.
//!
//! A read in place runs on the reader thread before any timer, so one that hangs (a provider
//! stuck on a network) would leave stdin unread: no cancellation, ping or other request
//! would be taken any more. The reader thread's reads in place are watched
//! (`reader::InPlace`), by the policy the HTTP direct path follows (`crate::hung`): once
//! one has run for a quarter of the request timeout (at most 100 ms), a new reader thread
//! reads on with the state the stuck one left unlocked, and the stuck read waits as a read
//! that waits does: a cancellation stops it, and it is answered when it ends, or with the
//! timeout error the other paths give at the request timeout.
//!
//! The end of input ends the stream only once every request read before it is answered:
//! once `receive` has ended, rmcp sends its handlers' answers for a fixed 5 s more and no
//! notification at all (the mirror of that is `crate::wire::eof`), and a direct read runs
//! outside rmcp altogether. So `receive` holds the stream open after EOF until no request
//! handed to rmcp and no direct read is left unanswered and every listen is acknowledged,
//! at most the drain bound ([`StdioTransport::with_eof_drain`]); then it has the handler end
//! the open listens ([`StdioEnd::input_over`]) and waits briefly for their final answers,
//! which also go through rmcp's loop. A client that leaves before choosing a lifecycle makes rmcp's
//! handshake fail and drop the transport unclosed; [`StdioEnd`] lets the binary still wait
//! for the answers queued until then, and tell a clean end of input from a read error.

mod direct;
mod framing;
mod reader;
mod writer;

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use mcpr_core::sync::lock;
use rmcp::model::{GetMeta, JsonRpcMessage, ServerNotification, ServerResult};
use rmcp::service::{RoleServer, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::McpHandler;
use crate::wire::encode::to_json;
use crate::wire::eof::{ANSWERS_AFTER_EOF, NOTIFIES_AFTER_EOF};
use crate::wire::lifecycle::Lifecycle;
use direct::Direct;
use framing::{Lines, as_line};
use reader::Reader;
use writer::{Backlog, Output, Queue};

/// A batch stops growing here, so one huge batch does not hold every answer behind it.
const BATCH_BYTES: usize = 1 << 20;
/// The room a batch starts with, and goes back to after a burst.
const BATCH_ROOM: usize = 64 * 1024;
/// Bytes asked of the pipe per read.
const READ_CHUNK: usize = 64 * 1024;
/// The stdout pipe's capacity asked for at start.
const PIPE_BYTES: usize = 1 << 20;
/// How long `close` waits for queued answers to reach the pipe.
const CLOSE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// How long the listens get to end once the end of input has ended them (they end at once,
/// unless busy sending).
const LISTENS_END_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);
/// How long after the end of input the stream stays open for unanswered requests, unless
/// [`StdioTransport::with_eof_drain`] says otherwise (the default request timeout).
pub const DEFAULT_EOF_DRAIN: std::time::Duration = std::time::Duration::from_secs(30);
/// Unwritten answers (bytes) over which the transport stops reading requests: a client that
/// does not read stdout then holds at most about this much, plus the answers of requests
/// already taken, instead of growing the server without bound.
pub const MAX_BACKLOG_BYTES: usize = 32 << 20;
/// Unwritten answers (count) over which the transport stops reading requests.
pub const MAX_BACKLOG_MESSAGES: usize = 4096;
/// Requests handed to rmcp and not answered yet over which no more are read: their answers
/// are not in the backlog until they are made, and rmcp takes requests faster than it
/// answers them.
pub const MAX_PENDING_REQUESTS: usize = 1024;
/// Distinct notifications held back while the backlog is over its bound; more are dropped
/// (each is a "something changed" hint, and one held back per resource is enough).
const MAX_DEFERRED: usize = 4096;

/// rmcp's `Transport` for the server side of stdio.
pub struct StdioTransport {
    /// What the reader thread starts with, until the first `receive` starts it.
    start: Option<(Lines, OwnedFd)>,
    /// The messages the reader thread hands to rmcp, once started.
    from: Option<mpsc::Receiver<RxJsonRpcMessage<RoleServer>>>,
    /// The output descriptor, written by the writer and the reader thread.
    output: Arc<Output>,
    /// To the writer. Unbounded so that `send` queues synchronously, in the order rmcp calls
    /// it (rmcp runs each returned future on its own task, in no set order); bounded instead
    /// by [`Backlog`]: past it, no more requests are read (so no more answers are made) and
    /// notifications are held back, one of each.
    out: Option<Queue>,
    /// What the writer has not written yet.
    backlog: Arc<Backlog>,
    /// The writer and how input ended, shared with [`StdioEnd`].
    ending: Arc<Ending>,
    /// How long after EOF the stream waits for unanswered requests.
    eof_drain: std::time::Duration,
    /// When that wait ends, from the first `receive` that found EOF (kept across calls:
    /// rmcp drops and repeats the call).
    drain_deadline: Option<tokio::time::Instant>,
    /// When the wait for the listens to end after that ends.
    listens_deadline: Option<tokio::time::Instant>,
    /// The direct path: its handler, counters, reads running and the lifecycle mirror.
    direct: Direct,
}

/// What outlives the transport: rmcp drops it without `close` when its handshake fails.
struct Ending {
    /// The writer thread, until `close` or [`StdioEnd::flushed`] waits for it.
    writer: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The error that ended reading, when input did not end cleanly.
    read_error: std::sync::OnceLock<io::Error>,
    /// Cancelled once input is over and every request read before is answered (or the drain
    /// bound passed): the listens are ended then.
    input_over: CancellationToken,
    /// The answers not yet written, and whether the output is gone.
    backlog: Arc<Backlog>,
}

/// A handle on how a [`StdioTransport`]'s session ends, for the binary: whether input ended
/// cleanly, when every request read was answered, and the last answers reaching the output.
#[derive(Clone)]
pub struct StdioEnd(Arc<Ending>);

impl StdioEnd {
    /// Cancelled once input has ended and every request read before it is answered (or the
    /// drain bound passed). A `subscriptions/listen` stream still open then has no reader,
    /// and the stream of messages does not end while one is open: give this token to the
    /// session's handler ([`McpHandler::ending_listens_on`]) to end them.
    pub fn input_over(&self) -> CancellationToken {
        self.0.input_over.clone()
    }

    /// The error reading input stopped at, if it did not end with a clean end of file.
    pub fn read_error(&self) -> Option<&io::Error> {
        self.0.read_error.get()
    }

    /// Whether the output is gone: a write failed (the client closed its end). No answer is
    /// written after that, and no direct read is done any more.
    pub fn output_gone(&self) -> bool {
        self.0.backlog.closed.load(Ordering::Acquire)
    }

    /// Waits, at most 5 s, for the answers queued so far to be written and flushed. Call it
    /// once the transport is closed or dropped: the writer ends when its queue does.
    pub async fn flushed(&self) {
        let writer = lock(&self.0.writer).take();
        if let Some(writer) = writer
            && tokio::time::timeout(CLOSE_TIMEOUT, writer).await.is_err()
        {
            tracing::warn!("stdout did not take the last answers in time");
        }
    }
}

impl StdioTransport {
    /// The process's own stdin and stdout ([`StdioTransport::on_threads`]). Must be called
    /// inside a Tokio runtime.
    pub fn stdio() -> io::Result<Self> {
        // A 1 MiB pipe (the unprivileged maximum) instead of 64 KiB: an 8 MiB blob then
        // crosses in 11 wake-ups of the reader, not 170. Not a pipe, or not allowed: as is.
        for size in [PIPE_BYTES, PIPE_BYTES / 4] {
            if rustix::pipe::fcntl_setpipe_size(std::io::stdout(), size).is_ok() {
                break;
            }
        }
        // Not inherited by child processes (a git or sql provider's).
        let input = rustix::io::fcntl_dupfd_cloexec(std::io::stdin(), 0)?;
        let output = rustix::io::fcntl_dupfd_cloexec(std::io::stdout(), 0)?;
        Ok(Self::on_threads(input, output))
    }

    /// A transport reading requests from `input` on a thread of its own and writing answers
    /// to `output` from threads (a pipe, a file, a terminal, a socket: any descriptor, in
    /// blocking mode or not). Must be called inside a Tokio runtime.
    ///
    /// The reader thread blocks in `read`, as the least program answering a line with a file
    /// does, instead of waiting in `epoll_wait` for the runtime to read: a direct read is
    /// answered on that thread, its answer written by it with every other answer from the
    /// same read of input, and no task is woken for it. Everything else goes to
    /// rmcp through `receive`. Answers rmcp sends are written by a second thread, one batch
    /// at a time, under the same lock; a direct answer waits behind answers queued before it,
    /// so an `initialize` answer is out before the first read it opens.
    ///
    /// The reader thread ends at the end of input, or when it next wakes after the transport
    /// is closed or dropped; until then it holds `input`. A session that ends while the
    /// client keeps its end open (a failed handshake) leaves it blocked in `read`, which the
    /// binary's exit ends.
    pub fn on_threads(input: OwnedFd, output: OwnedFd) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let backlog = Arc::new(Backlog::new(MAX_BACKLOG_BYTES, MAX_BACKLOG_MESSAGES));
        let output = Arc::new(Output::new(output));
        let writer = {
            let (output, backlog) = (output.clone(), backlog.clone());
            tokio::task::spawn_blocking(move || writer::write_answers(&output, rx, &backlog))
        };
        let lifecycle = Arc::new(Mutex::new(Lifecycle::Opening));
        Self {
            start: Some((Lines::new(), input)),
            from: None,
            output,
            out: Some(Queue {
                tx,
                backlog: backlog.clone(),
            }),
            ending: Arc::new(Ending {
                writer: Mutex::new(Some(writer)),
                read_error: std::sync::OnceLock::new(),
                input_over: CancellationToken::new(),
                backlog: backlog.clone(),
            }),
            backlog,
            eof_drain: DEFAULT_EOF_DRAIN,
            drain_deadline: None,
            listens_deadline: None,
            direct: Direct::new(lifecycle),
        }
    }

    /// Answer the `resources/read` requests rmcp would only hand to the handler here, with
    /// `handler`, instead of through rmcp's serve loop (see the module documentation).
    /// `handler` is a handler of its own over the same server state: a read touches no
    /// per-session state. Set before the first `receive`.
    pub fn with_direct_reads(mut self, handler: McpHandler) -> Self {
        if let Some((lines, _)) = &mut self.start {
            lines.tools = handler.service().state().settings.tools;
            self.direct.handler = Some(Arc::new(handler));
        }
        self
    }

    /// How many reads the direct path has answered (for tests and diagnostics).
    pub fn direct_reads(&self) -> Arc<AtomicU64> {
        self.direct.answered.clone()
    }

    /// Stop reading requests while more than `bytes` or `messages` of answers are unwritten,
    /// or `messages` requests wait for rmcp's answer (defaults [`MAX_BACKLOG_BYTES`],
    /// [`MAX_BACKLOG_MESSAGES`], [`MAX_PENDING_REQUESTS`]).
    pub fn with_backlog_limit(self, bytes: usize, messages: usize) -> Self {
        self.backlog.set_limits(bytes, messages);
        self
    }

    /// The bytes of answers queued and not yet written (for tests and diagnostics).
    pub fn backlog_bytes(&self) -> impl Fn() -> usize + Send + Sync + 'static {
        let backlog = self.backlog.clone();
        move || backlog.bytes.load(Ordering::Relaxed)
    }

    /// After the end of input, keep the stream open at most `bound` for requests not yet
    /// answered (default [`DEFAULT_EOF_DRAIN`]); what is still unanswered then is left to
    /// rmcp's own short drain. The binary passes its request bounds.
    pub fn with_eof_drain(mut self, bound: std::time::Duration) -> Self {
        self.eof_drain = bound;
        self
    }

    /// How the session ends (see [`StdioEnd`]); it stays valid after the transport is gone.
    pub fn end(&self) -> StdioEnd {
        StdioEnd(self.ending.clone())
    }

    /// Lines longer than this are dropped (rmcp's default is 16 MiB). Set before the first
    /// `receive`.
    pub fn with_max_line_length(mut self, max: usize) -> Self {
        if let Some((lines, _)) = &mut self.start {
            lines.max_line = max;
        }
        self
    }

    /// The next message from the reader thread, starting it on the first call; `None` once
    /// it has read to the end of input (or could not start).
    async fn next_from_thread(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        if let Some((lines, fd)) = self.start.take() {
            let out = self.out.as_ref()?;
            let started = Reader::start(
                lines,
                self.direct.clone(),
                fd,
                self.output.clone(),
                out,
                self.ending.clone(),
            );
            match started {
                Ok(from) => self.from = Some(from),
                Err(e) => {
                    let _ = self.ending.read_error.set(e);
                    return None;
                }
            }
        }
        self.from.as_mut()?.recv().await
    }

    /// After the end of input: waits until no request handed to rmcp waits for its answer
    /// (a listen for its acknowledgment) and no direct read is running, at most `eof_drain`
    /// after the end; then ends the listens ([`StdioEnd::input_over`]) and waits, at most
    /// [`LISTENS_END_TIMEOUT`], for their final answers. rmcp's loop keeps running meanwhile
    /// (it polls `receive` beside its handlers' answers and its own sends), so everything it
    /// owes is sent and counted off here; once `receive` ends, rmcp stops serving its
    /// handlers' notifications (a listen's acknowledgment among them). Cancel-safe: the
    /// deadlines are kept across calls.
    async fn drain(&mut self) {
        if !self.ending.input_over.is_cancelled() {
            let bound = self.eof_drain;
            let deadline = *self
                .drain_deadline
                .get_or_insert_with(|| tokio::time::Instant::now() + bound);
            let waiting = self.direct.waiting.clone();
            let open = drained_by(&self.backlog, deadline, move |b| {
                b.pending_count.load(Ordering::Acquire) + waiting.len()
            })
            .await;
            if open > 0 {
                tracing::warn!(
                    "input ended; {open} request(s) still unanswered {} ms later, the bound; \
                     ending without waiting for them (rmcp sends answers for {} s more)",
                    bound.as_millis(),
                    ANSWERS_AFTER_EOF.as_secs()
                );
            }
            self.ending.input_over.cancel();
        }
        let deadline = *self
            .listens_deadline
            .get_or_insert_with(|| tokio::time::Instant::now() + LISTENS_END_TIMEOUT);
        let open = drained_by(&self.backlog, deadline, |b| {
            b.listening_count.load(Ordering::Acquire)
        })
        .await;
        if open > 0 {
            tracing::debug!("input ended; {open} listen stream(s) did not end in time");
        }
    }
}

// The drain above holds the stream for a listen until its acknowledgment, a notification,
// is out: rmcp sends none once `receive` has ended.
const _: () = assert!(!NOTIFIES_AFTER_EOF);

/// Waits until `open` counts nothing in `backlog` or `deadline` passes; what it counts then.
async fn drained_by(
    backlog: &Backlog,
    deadline: tokio::time::Instant,
    open: impl Fn(&Backlog) -> usize + Send + Sync,
) -> usize {
    loop {
        let drained = backlog.drained.notified();
        tokio::pin!(drained);
        // Registered before the count, so a change between the two wakes it.
        drained.as_mut().enable();
        if open(backlog) == 0 {
            return 0;
        }
        if tokio::time::timeout_at(deadline, drained).await.is_err() {
            return open(backlog);
        }
    }
}

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "the stdio transport is closed")
}

impl Transport<RoleServer> for StdioTransport {
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let initialized = match &item {
            JsonRpcMessage::Response(r) => match &r.result {
                ServerResult::InitializeResult(init) => Some(init.protocol_version.clone()),
                _ => None,
            },
            _ => None,
        };
        let notification = matches!(item, JsonRpcMessage::Notification(_));
        match &item {
            JsonRpcMessage::Response(r) => self.backlog.answered(&r.id),
            // A listen is open once acknowledged: its handler then only waits for changes.
            // Until then it counts as unanswered, because the acknowledgment needs rmcp's loop
            // running, which stops once `receive` ends.
            JsonRpcMessage::Notification(n)
                if matches!(
                    n.notification,
                    ServerNotification::SubscriptionsAcknowledgedNotification(_)
                ) =>
            {
                if let Some(id) = n.notification.get_meta().subscription_id() {
                    self.backlog.acknowledged(&id);
                }
            }
            JsonRpcMessage::Error(e) => {
                if let Some(id) = &e.id {
                    self.backlog.answered(id);
                }
            }
            _ => {}
        }
        // An `initialize` answer is queued and counted as answered under the lifecycle's
        // lock: the writer thread may write it (and the client answer it with reads) before
        // `initialized` runs, and the reader thread must not see those reads while the
        // session still looks unopened.
        let mut lifecycle = initialized.is_some().then(|| lock(&self.direct.lifecycle));
        // Serialised and queued here, so answers reach the pipe in the order rmcp sent them.
        let queued = to_json(item)
            .map(as_line)
            .and_then(|bytes| match &self.out {
                // A notification does not wait behind a full backlog, nor grow it: it is held
                // back (once) until the client reads again.
                Some(out) if notification => out.send_or_defer(bytes),
                Some(out) => out.send(bytes),
                None => Err(closed()),
            });
        // Only once the `initialize` answer is queued may the reader thread answer reads
        // itself: it writes a direct answer at once only when nothing queued is unwritten.
        if let (Some(version), Some(lifecycle)) = (initialized, lifecycle.as_mut()) {
            lifecycle.initialized(&version);
        }
        drop(lifecycle);
        std::future::ready(queued)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        // Cancel-safe: rmcp polls this inside a `select!`. A message from the reader thread
        // is taken off its channel whole, and the drain keeps its deadlines across calls.
        if let Some(msg) = self.next_from_thread().await {
            return Some(msg);
        }
        self.drain().await;
        None
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // Dropping the last sender ends the writer once it has written everything queued
        // (the reader thread holds only a weak one).
        self.out = None;
        self.end().flushed().await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{ClientRequest, ErrorData, RequestId};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

    type Client = (tokio::fs::File, tokio::io::BufReader<tokio::fs::File>);

    /// A client on one end of two pipes, the transport on the other.
    fn pair(
        max_line: usize,
    ) -> (
        StdioTransport,
        tokio::fs::File,
        tokio::io::BufReader<tokio::fs::File>,
    ) {
        let (server_r, client_w) = rustix::pipe::pipe().unwrap();
        let (client_r, server_w) = rustix::pipe::pipe().unwrap();
        let t = StdioTransport::on_threads(server_r, server_w).with_max_line_length(max_line);
        let (w, r): Client = (
            tokio::fs::File::from_std(std::fs::File::from(client_w)),
            tokio::io::BufReader::new(tokio::fs::File::from_std(std::fs::File::from(client_r))),
        );
        (t, w, r)
    }

    fn read_uri(msg: &RxJsonRpcMessage<RoleServer>) -> String {
        match msg {
            JsonRpcMessage::Request(r) => match &r.request {
                ClientRequest::ReadResourceRequest(r) => r.params.uri.clone(),
                ClientRequest::PingRequest(_) => "ping".into(),
                other => format!("{other:?}"),
            },
            other => format!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn frames_lines_in_order_across_partial_writes() {
        let (t, mut w, mut r) = pair(1024);
        // No rmcp here answers the requests: the end of input must not wait for them.
        let mut t = t.with_eof_drain(std::time::Duration::ZERO);
        let read = |id: u32, uri: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"resources/read","params":{{"uri":"{uri}"}}}}"#
            )
        };
        let input = format!(
            "{}\n\n\r\n{}\r\nnot json\n{{\"no\":\"rpc\"}}\n{}{}\n{}\n",
            read(1, "u1"),
            read(2, "u2"),
            // An over-long line is dropped whole; the line after it is read.
            "x".repeat(3000),
            "y".repeat(10),
            r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#,
        );
        let writer = tokio::spawn(async move {
            // Odd-sized pieces so lines and CRLFs straddle reads.
            for chunk in input.as_bytes().chunks(7) {
                w.write_all(chunk).await.unwrap();
                w.flush().await.unwrap();
            }
            w
        });
        assert_eq!(read_uri(&t.receive().await.unwrap()), "u1");
        assert_eq!(read_uri(&t.receive().await.unwrap()), "u2");
        assert_eq!(read_uri(&t.receive().await.unwrap()), "ping");
        // Garbage is a parse error, the well-formed non-message an invalid request, and the
        // over-long line one too, each answered with a null id (no id can be read).
        for code in [-32700, -32600, -32600] {
            let mut answer = String::new();
            r.read_line(&mut answer).await.unwrap();
            let v: serde_json::Value = serde_json::from_str(&answer).unwrap();
            assert_eq!(v["error"]["code"], code, "{answer}");
            assert!(v["id"].is_null(), "{answer}");
        }
        drop(writer.await.unwrap());
        assert!(t.receive().await.is_none(), "EOF ends the stream");
    }

    #[tokio::test]
    async fn answers_keep_their_order_and_close_flushes_them() {
        let (mut t, _w, mut r) = pair(1024);
        let mut sends = Vec::new();
        for i in 0..500 {
            let msg = TxJsonRpcMessage::<RoleServer>::error(
                ErrorData::invalid_params(format!("n{i}"), None),
                Some(RequestId::Number(i)),
            );
            sends.push(t.send(msg));
        }
        // rmcp runs each send future on its own task; they may run in any order, but what
        // they carry was queued in call order.
        let handles: Vec<_> = sends.into_iter().rev().map(tokio::spawn).collect();
        for h in handles {
            h.await.unwrap().unwrap();
        }
        t.close().await.unwrap();
        for i in 0..500 {
            let mut line = String::new();
            r.read_line(&mut line).await.unwrap();
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(v["id"], i, "{line}");
        }
        let msg =
            TxJsonRpcMessage::<RoleServer>::error(ErrorData::invalid_params("late", None), None);
        assert!(
            t.send(msg).await.is_err(),
            "a closed transport refuses answers"
        );
        // The output closes with the transport.
        drop(t);
        let mut rest = String::new();
        assert_eq!(
            r.read_line(&mut rest).await.unwrap(),
            0,
            "nothing after the last answer: {rest}"
        );
    }

    fn line(json: &str) -> String {
        format!("{json}\n")
    }

    fn empty_answer(id: i64) -> TxJsonRpcMessage<RoleServer> {
        TxJsonRpcMessage::<RoleServer>::response(ServerResult::empty(()), RequestId::Number(id))
    }

    /// Whether `receive` is still holding the stream open 50 ms later (it is cancel-safe, so
    /// asking costs nothing).
    async fn still_open(t: &mut StdioTransport) -> bool {
        tokio::time::timeout(std::time::Duration::from_millis(50), t.receive())
            .await
            .is_err()
    }

    #[tokio::test]
    async fn the_end_of_input_waits_for_the_answers_to_the_requests_read_before_it() {
        let (mut t, mut w, _r) = pair(1024);
        w.write_all(line(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).as_bytes())
            .await
            .unwrap();
        w.write_all(line(r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#).as_bytes())
            .await
            .unwrap();
        w.flush().await.unwrap();
        drop(w);
        assert_eq!(read_uri(&t.receive().await.unwrap()), "ping");
        assert_eq!(read_uri(&t.receive().await.unwrap()), "ping");
        let over = t.end().input_over();
        assert!(
            still_open(&mut t).await,
            "ended with two requests unanswered"
        );
        t.send(empty_answer(2)).await.unwrap();
        assert!(
            still_open(&mut t).await,
            "ended with one request unanswered"
        );
        assert!(!over.is_cancelled());
        t.send(empty_answer(1)).await.unwrap();
        assert!(t.receive().await.is_none(), "every request is answered");
        assert!(over.is_cancelled());
        assert!(t.end().read_error().is_none(), "a clean end of input");
    }

    #[tokio::test]
    async fn a_request_never_answered_holds_the_end_of_input_only_for_the_bound() {
        let bound = std::time::Duration::from_millis(400);
        let (t, mut w, _r) = pair(1024);
        let mut t = t.with_eof_drain(bound);
        w.write_all(line(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).as_bytes())
            .await
            .unwrap();
        w.flush().await.unwrap();
        drop(w);
        t.receive().await.unwrap();
        let start = tokio::time::Instant::now();
        // Asked again and again, as rmcp's loop does: the bound counts from the end of input.
        for _ in 0..3 {
            assert!(still_open(&mut t).await);
        }
        assert!(t.receive().await.is_none());
        let waited = start.elapsed();
        assert!(
            waited >= bound && waited < bound * 3,
            "{waited:?} for a bound of {bound:?}"
        );
    }

    #[tokio::test]
    async fn the_end_of_input_ends_open_listens_after_their_acknowledgment() {
        let (mut t, mut w, _r) = pair(1024);
        let listen = r#"{"jsonrpc":"2.0","id":5,"method":"subscriptions/listen","params":{"notifications":{"resourcesListChanged":true},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"}}}}"#;
        w.write_all(line(listen).as_bytes()).await.unwrap();
        w.flush().await.unwrap();
        drop(w);
        t.receive().await.unwrap();
        let over = t.end().input_over();
        // Not acknowledged yet: the acknowledgment needs rmcp's loop, so the stream stays.
        assert!(still_open(&mut t).await);
        assert!(!over.is_cancelled(), "listens ended before acknowledged");
        let ack: TxJsonRpcMessage<RoleServer> = serde_json::from_str(
            r#"{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":5},"notifications":{"resourcesListChanged":true}}}"#,
        )
        .unwrap();
        t.send(ack).await.unwrap();
        // Acknowledged and nothing else unanswered: the listens are told to end, and the
        // stream stays until the listen's final answer.
        assert!(still_open(&mut t).await);
        assert!(over.is_cancelled());
        t.send(empty_answer(5)).await.unwrap();
        assert!(t.receive().await.is_none());
    }

    #[tokio::test]
    async fn a_read_error_is_kept_and_the_answers_queued_still_go_out() {
        // A directory reads as an error (EISDIR) at once.
        let dir = tempfile::tempdir().unwrap();
        let input = OwnedFd::from(std::fs::File::open(dir.path()).unwrap());
        let (client_r, server_w) = rustix::pipe::pipe().unwrap();
        let mut t = StdioTransport::on_threads(input, server_w);
        let end = t.end();
        assert!(t.receive().await.is_none(), "the error ends the stream");
        let error = end.read_error().map(|e| e.kind());
        assert_eq!(
            error,
            Some(io::ErrorKind::IsADirectory),
            "{:?}",
            end.read_error()
        );
        t.send(empty_answer(1)).await.unwrap();
        // Dropped unclosed, as rmcp's failed handshake does: the answer still arrives.
        drop(t);
        end.flushed().await;
        let mut r =
            tokio::io::BufReader::new(tokio::fs::File::from_std(std::fs::File::from(client_r)));
        let mut answer = String::new();
        r.read_line(&mut answer).await.unwrap();
        let v: serde_json::Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(v["id"], 1, "{answer}");
    }
}
