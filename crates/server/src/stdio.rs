//! The stdio transport: newline-delimited JSON-RPC on a pipe pair, with a tagged decode of
//! the hot resource requests and batched writes, for throughput. This file frames lines, writes
//! answers (the writer task and its backlog) and runs the direct reads; what they copy from
//! rmcp (the decode, the encoder, the refusals, the mirror of rmcp's handshake) is in
//! `crate::wire`.
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
//! Answers are serialised when rmcp hands them over and written by one writer, which
//! puts every answer that is ready into one `write`: with many requests in flight that is one
//! system call for a batch instead of one per answer.
//!
//! With [`StdioTransport::with_direct_reads`], a `resources/read` is answered here instead of
//! being handed to rmcp's serve loop, whose per-request task, cancellation-token pair,
//! request map entries, span and answer channel cost as much as the read itself (the direct
//! path took a 1 KiB read from about 150k to about 265k requests/s). A read qualifies only
//! when rmcp's dispatch would do nothing to it but call the handler, which the transport
//! tells from the lifecycle it has seen (`Lifecycle`): in a session opened by an
//! `initialize` answered below 2026-07-28, a read whose `_meta` names no protocol version of
//! its own; in any opened session, a read naming exactly 2026-07-28 with every `_meta`
//! member that version requires. The answer gets what rmcp's dispatch gives an answer of
//! that era and the same handler call and metrics; every other message goes to rmcp as
//! before. A read still running when the client cancels it gets no answer, as rmcp drops
//! the answer to a cancelled request.
//!
//! The binary's transport ([`StdioTransport::stdio`], [`StdioTransport::on_threads`]) reads
//! on a thread of its own, blocking in `read` as the least program answering a line with a
//! file does, instead of waiting in `epoll_wait` for the runtime to wake and read: that
//! thread frames and decodes the lines, answers the direct reads that finish on their first
//! poll, writes their answers itself (the answers made from one read of input together, in
//! one `write`, as far as the output takes them without waiting) and hands the other
//! messages to `receive` over a bounded channel. The answers rmcp sends, and whatever the
//! reader could not write at once, are written by a second thread. The reader writes only
//! when it can take the output's lock at once and no answer queued before is unwritten, so
//! lines never mix, answers rmcp sent keep their order, and a client that writes many
//! requests before reading gets them answered up to the backlog's bounds, as on the
//! runtime. The lifecycle mirror counts an `initialize` as answered only once its answer
//! is queued, so no direct answer goes out before it. With one request in flight on one
//! CPU this saves the runtime's wake-ups, an `epoll_wait` and the hand-off to the writer
//! task on every request. [`StdioTransport::new`] reads and writes on the
//! runtime, from any `AsyncRead` and `AsyncWrite` (tests' in-memory pipes); both share
//! everything from the framing on.
//!
//! A read in place runs on the reader thread before any timer, so one that hangs (a provider
//! stuck on a network) would leave stdin unread: no cancellation, ping or other request
//! would be taken any more. The reader thread's reads in place are watched ([`InPlace`]):
//! one still running after the request timeout is answered with the timeout error the other
//! paths give, and a new reader thread reads on with the state the stuck one left unlocked.
//!
//! The end of input ends the stream only once every request read before it is answered:
//! rmcp stops reading at once and gives its handlers a fixed 5 s before cancelling them, and
//! a direct read runs outside rmcp altogether. So `receive` holds the stream open after EOF
//! until no request handed to rmcp and no direct read is left unanswered, at most the drain
//! bound ([`StdioTransport::with_eof_drain`]); then it has the handler end the open listens
//! ([`StdioEnd::input_over`]) and waits briefly for their final answers, which also go
//! through rmcp's loop. A client that leaves before choosing a
//! lifecycle makes rmcp's handshake fail and drop the transport unclosed; [`StdioEnd`] lets
//! the binary still wait for the answers queued until then, and tell a clean end of input
//! from a read error.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::Poll;

use bytes::{Buf, BytesMut};
use mcpr_core::sync::lock;
use rmcp::model::{
    ClientNotification, ClientRequest, ErrorData, GetMeta, JsonRpcMessage, JsonRpcRequest,
    JsonRpcVersion2_0, RequestId, RequestMetaObject, ServerNotification, ServerResult,
};
use rmcp::service::{RoleServer, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::{
    DEFAULT_MAX_LINE_LENGTH, JsonRpcMessageCodec, JsonRpcMessageCodecError,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::codec::Decoder;
use tokio_util::sync::CancellationToken;

use crate::McpHandler;
use crate::wire::decode::decode_hot;
use crate::wire::encode::{own_answer_json, to_json};
use crate::wire::lifecycle::Lifecycle;
use crate::wire::refusals::{self, Checked, check_line, error_answer, is_list_without_params};

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
/// Unwritten answers (bytes) over which the transport stops reading requests: a client that does not read stdout then holds at most about this much, plus the
/// answers of requests already taken, instead of growing the server without bound.
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

/// rmcp's `Transport` for the server side of a stdio pipe pair.
pub struct StdioTransport<R> {
    /// Where requests come from.
    input: Input<R>,
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
    /// Reads the direct path has taken.
    direct_answered: Arc<AtomicU64>,
    /// Direct reads still running.
    waiting: Waiting,
    /// What the transport has seen of the session's lifecycle: the reading side tracks the
    /// requests, `send` the `initialize` answers.
    lifecycle: Arc<std::sync::Mutex<Lifecycle>>,
}

/// Where a [`StdioTransport`] reads its requests.
enum Input<R> {
    /// On the runtime, in `receive`, from any `AsyncRead` ([`StdioTransport::new`]).
    Here { reader: R, lines: Lines, eof: bool },
    /// On a thread of its own ([`StdioTransport::on_threads`]), started by the first
    /// `receive`: it blocks in `read` on the descriptor, answers the direct reads itself
    /// and writes their answers, and hands everything else to `receive` over `from`.
    Thread {
        start: Option<(Lines, OwnedFd)>,
        output: Arc<Output>,
        from: Option<mpsc::Receiver<RxJsonRpcMessage<RoleServer>>>,
    },
}

/// The type parameter of a [`StdioTransport`] that reads on a thread of its own: it reads no
/// `AsyncRead`, and no value of this type exists.
pub enum OnThread {}

impl AsyncRead for OnThread {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        _: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match *self {}
    }
}

/// The reading side's state: the bytes read and not yet framed, the decode, and the direct
/// path. Owned by `receive` or by the reader thread, never both.
struct Lines {
    buf: BytesMut,
    /// Where the search for the next newline resumes (bytes before it hold none).
    scanned: usize,
    /// Inside an over-long line: drop bytes up to the next newline.
    discarding: bool,
    max_line: usize,
    codec: JsonRpcMessageCodec<RxJsonRpcMessage<RoleServer>>,
    /// The direct read path, when enabled (see [`StdioTransport::with_direct_reads`]).
    direct: Option<Arc<McpHandler>>,
    direct_answered: Arc<AtomicU64>,
    waiting: Waiting,
    lifecycle: Arc<std::sync::Mutex<Lifecycle>>,
    /// Whether the tool bridge is on, so `tools/*` are methods this server has; taken from
    /// the direct path's handler (the server's own state).
    tools: bool,
    /// Whether reads in place are handed back to the reader thread ([`Directly::Now`]),
    /// which does them under its watchdog.
    watched: bool,
}

/// What outlives the transport: rmcp drops it without `close` when its handshake fails.
struct Ending {
    /// The writer task, until `close` or [`StdioEnd::flushed`] waits for it.
    writer: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The error that ended reading, when input did not end cleanly.
    read_error: std::sync::OnceLock<io::Error>,
    /// Cancelled once input is over and every request read before is answered (or the drain
    /// bound passed): the listens are ended then.
    input_over: CancellationToken,
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

impl StdioTransport<OnThread> {
    /// The process's own stdin and stdout, read and written by threads of their own
    /// ([`StdioTransport::on_threads`]). Must be called inside a Tokio runtime.
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
            tokio::task::spawn_blocking(move || write_on_thread(&output, rx, &backlog))
        };
        let lifecycle = Arc::new(std::sync::Mutex::new(Lifecycle::Opening));
        let lines = Lines::new(&lifecycle);
        Self::with_input(
            Input::Thread {
                start: Some((lines, input)),
                output,
                from: None,
            },
            Queue { tx, backlog },
            writer,
            lifecycle,
        )
    }
}

impl<R: AsyncRead + Unpin + Send> StdioTransport<R> {
    /// A transport reading requests from `reader` and writing answers to `writer`, both on
    /// the runtime. Must be called inside a Tokio runtime (it starts the writer task).
    pub fn new<W: AsyncWrite + Unpin + Send + 'static>(reader: R, writer: W) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let backlog = Arc::new(Backlog::new(MAX_BACKLOG_BYTES, MAX_BACKLOG_MESSAGES));
        let writer = tokio::spawn(write_loop(writer, rx, backlog.clone()));
        let lifecycle = Arc::new(std::sync::Mutex::new(Lifecycle::Opening));
        let lines = Lines::new(&lifecycle);
        Self::with_input(
            Input::Here {
                reader,
                lines,
                eof: false,
            },
            Queue { tx, backlog },
            writer,
            lifecycle,
        )
    }
}

impl<R> StdioTransport<R> {
    fn with_input(
        input: Input<R>,
        out: Queue,
        writer: tokio::task::JoinHandle<()>,
        lifecycle: Arc<std::sync::Mutex<Lifecycle>>,
    ) -> Self {
        let (direct_answered, waiting) = match &input {
            Input::Here { lines, .. }
            | Input::Thread {
                start: Some((lines, _)),
                ..
            } => (lines.direct_answered.clone(), lines.waiting.clone()),
            Input::Thread { start: None, .. } => unreachable!("a transport starts unstarted"),
        };
        Self {
            input,
            backlog: out.backlog.clone(),
            out: Some(out),
            ending: Arc::new(Ending {
                writer: std::sync::Mutex::new(Some(writer)),
                read_error: std::sync::OnceLock::new(),
                input_over: CancellationToken::new(),
            }),
            eof_drain: DEFAULT_EOF_DRAIN,
            drain_deadline: None,
            listens_deadline: None,
            direct_answered,
            waiting,
            lifecycle,
        }
    }

    /// The reading side's state, while nothing reads yet (a reader thread takes it).
    fn lines_mut(&mut self) -> Option<&mut Lines> {
        match &mut self.input {
            Input::Here { lines, .. }
            | Input::Thread {
                start: Some((lines, _)),
                ..
            } => Some(lines),
            Input::Thread { start: None, .. } => None,
        }
    }

    /// Answer the `resources/read` requests rmcp would only hand to the handler here, with
    /// `handler`, instead of through rmcp's serve loop (see the module documentation).
    /// `handler` is a handler of its own over the same server state: a read touches no
    /// per-session state. Set before the first `receive`.
    pub fn with_direct_reads(mut self, handler: McpHandler) -> Self {
        if let Some(lines) = self.lines_mut() {
            lines.tools = handler.service().state().settings.tools;
            lines.direct = Some(Arc::new(handler));
        }
        self
    }

    /// How many reads the direct path has answered (for tests and diagnostics).
    pub fn direct_reads(&self) -> Arc<AtomicU64> {
        self.direct_answered.clone()
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
        if let Some(lines) = self.lines_mut() {
            lines.max_line = max;
        }
        self
    }

    fn queue(&self, bytes: Vec<u8>) -> io::Result<()> {
        match &self.out {
            Some(out) => out.send(bytes),
            None => Err(closed()),
        }
    }

    /// The next message from the reader thread, starting it on the first call; `None` once
    /// it has read to the end of input (or could not start).
    async fn next_from_thread(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        let Input::Thread {
            start,
            output,
            from,
        } = &mut self.input
        else {
            return None;
        };
        if let Some((mut lines, fd)) = start.take() {
            let out = self.out.as_ref()?;
            let (to, rx) = mpsc::channel(TO_RMCP);
            // Reads in place are watched, so one that hangs costs its request only.
            let timeout = lines
                .direct
                .as_ref()
                .map(|h| h.service().state().settings.request_timeout);
            lines.watched = timeout.is_some();
            let reader = Reader {
                state: Arc::new(std::sync::Mutex::new(ReaderState {
                    lines,
                    batch: Vec::with_capacity(BATCH_ROOM),
                    to_rmcp: Some(to),
                    current: None,
                })),
                fd: Arc::new(fd),
                output: output.clone(),
                out: out.downgrade(),
                ending: self.ending.clone(),
                in_place: Arc::new(InPlace {
                    turn: AtomicU64::new(0),
                    timeout: timeout.unwrap_or_default(),
                    over: std::sync::atomic::AtomicBool::new(false),
                }),
            };
            tracing::debug!(
                output = output.lock().nowait.kind(),
                "stdio: stdin read on a thread of its own"
            );
            let rt = tokio::runtime::Handle::current();
            if timeout.is_some() {
                let (watchdog, rt) = (reader.clone(), rt.clone());
                let started = std::thread::Builder::new()
                    .name("mcpr-stdin-watch".into())
                    .spawn(move || watchdog.watch(rt));
                if let Err(e) = started {
                    tracing::error!("cannot start the watchdog of the thread reading stdin: {e}");
                    let _ = self.ending.read_error.set(e);
                    return None;
                }
            }
            if let Err(e) = reader.clone().spawn(rt) {
                reader.in_place.over.store(true, Ordering::Release);
                tracing::error!("cannot start the thread reading stdin: {e}");
                let _ = self.ending.read_error.set(e);
                return None;
            }
            *from = Some(rx);
        }
        from.as_mut()?.recv().await
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
            let waiting = self.waiting.clone();
            let open = drained_by(&self.backlog, deadline, move |b| {
                b.pending_count.load(Ordering::Acquire) + lock(&waiting).len()
            })
            .await;
            if open > 0 {
                tracing::warn!(
                    "input ended; {open} request(s) still unanswered {} ms later, the bound; \
                     ending without waiting for them",
                    bound.as_millis()
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

impl Lines {
    fn new(lifecycle: &Arc<std::sync::Mutex<Lifecycle>>) -> Self {
        Self {
            buf: BytesMut::with_capacity(READ_CHUNK),
            scanned: 0,
            discarding: false,
            max_line: DEFAULT_MAX_LINE_LENGTH,
            codec: JsonRpcMessageCodec::default(),
            direct: None,
            direct_answered: Arc::default(),
            waiting: Arc::default(),
            lifecycle: lifecycle.clone(),
            tools: false,
            watched: false,
        }
    }

    /// The next whole line, with its `\n`, or `None` until more bytes arrive. An over-long
    /// line is answered through `out` and dropped.
    fn next_line(&mut self, out: Option<&Queue>) -> Option<BytesMut> {
        loop {
            match memchr::memchr(b'\n', &self.buf[self.scanned..]) {
                Some(at) => {
                    let end = self.scanned + at;
                    self.scanned = 0;
                    if self.discarding {
                        self.buf.advance(end + 1);
                        self.discarding = false;
                        continue;
                    }
                    if end > self.max_line {
                        // A whole over-long line that arrived in one read: refused the same.
                        self.buf.advance(end + 1);
                        self.refuse_long_line(out);
                        continue;
                    }
                    return Some(self.buf.split_to(end + 1));
                }
                None if self.discarding => {
                    self.buf.clear();
                    self.scanned = 0;
                    return None;
                }
                None if self.buf.len() > self.max_line => {
                    self.refuse_long_line(out);
                    self.buf.clear();
                    self.scanned = 0;
                    self.discarding = true;
                    return None;
                }
                None => {
                    self.scanned = self.buf.len();
                    return None;
                }
            }
        }
    }

    /// One line (with its `\n`) to a message: the tagged decode when it applies, else rmcp's
    /// codec, which takes the framed line as it is. A line no message can come from gets its
    /// JSON-RPC error through `out`: the client is waiting for an
    /// answer, and dropping the line silently would hang it.
    fn decode(
        &mut self,
        mut framed: BytesMut,
        out: Option<&Queue>,
    ) -> Option<RxJsonRpcMessage<RoleServer>> {
        let line = framed.strip_suffix(b"\n").unwrap_or(&framed);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            return None;
        }
        if let Some(msg) = decode_hot(line) {
            // rmcp's decode of a list drops a `cursor` of the wrong type (and with it the
            // params) instead of refusing it; a list without params is checked again.
            if !is_list_without_params(&msg) {
                return Some(msg);
            }
            return match check_line(line, self.tools) {
                Checked::Answer(answer) => {
                    answer_with(out, *answer);
                    None
                }
                Checked::Pass(_) => Some(msg),
            };
        }
        let request = match check_line(line, self.tools) {
            Checked::Answer(answer) => {
                answer_with(out, *answer);
                return None;
            }
            Checked::Pass(request) => request,
        };
        match self.codec.decode(&mut framed) {
            Ok(msg) => msg,
            Err(JsonRpcMessageCodecError::Serde(e)) => {
                tracing::debug!("Protocol error on incoming message: {e}");
                answer_with(out, refusals::undecodable(&e, request));
                None
            }
            Err(e) => {
                tracing::error!("Error decoding an incoming message: {e}");
                None
            }
        }
    }

    /// Answer a line over the limit, which is dropped unread: its id cannot be known
    /// without reading it all, so the answer has none.
    fn refuse_long_line(&self, out: Option<&Queue>) {
        tracing::error!(
            max_line_length = self.max_line,
            "Incoming message exceeded the maximum line length, discarding it"
        );
        answer_with(
            out,
            error_answer(
                ErrorData::invalid_request(
                    format!(
                        "Invalid request: the message is longer than {} bytes, the limit for \
                         one line; it was discarded",
                        self.max_line
                    ),
                    None,
                ),
                None,
            ),
        );
    }

    /// Answers `msg` here when it is a `resources/read` that rmcp would hand to the handler
    /// unchanged, and returns it otherwise. A read that finishes on its first poll (a small
    /// file) has its answer appended to `batch` when there is one (the reader thread writes
    /// it), else queued; one that waits (a large file, a slow source) finishes on a task of
    /// its own, so the requests behind it are not held up, and can be cancelled while it
    /// waits. That first poll has no waker to call: the task polls the read again, with its
    /// own, as soon as it starts.
    fn answer_directly(
        &mut self,
        msg: RxJsonRpcMessage<RoleServer>,
        out: Option<&Queue>,
        batch: Option<&mut Vec<u8>>,
    ) -> Directly {
        let Some(handler) = self.direct.clone() else {
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
            && let Some(waiting) = lock(&self.waiting).remove(id)
        {
            waiting.cancel();
        }
        let (id, params, modern) = match msg {
            JsonRpcMessage::Request(JsonRpcRequest {
                id,
                request: ClientRequest::ReadResourceRequest(read),
                ..
            }) => match lifecycle.era(read.extensions.get::<RequestMetaObject>()) {
                Some(modern) => (id, read.params, modern),
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
        // A closed transport answers nothing, as rmcp's would not.
        let Some(out) = out else {
            return Directly::Taken;
        };
        self.direct_answered.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(%id, uri = %params.uri, "resources/read answered by the direct path");
        let read = NowRead {
            handler,
            params,
            id,
            modern,
        };
        if self.watched {
            return Directly::Now(read);
        }
        // Most reads (a small file) are done in place, without a future.
        let answer = read.now();
        self.finish(read, answer, out, batch);
        Directly::Taken
    }

    /// Finishes a direct read after its try in place: `answer` when it gave one (appended to
    /// `batch`, or queued), else on a task of its own (see [`Lines::answer_directly`]).
    fn finish(
        &mut self,
        read: NowRead,
        answer: crate::handler::ReadAnswer,
        out: &Queue,
        batch: Option<&mut Vec<u8>>,
    ) {
        if let Some(answer) = answer {
            deliver(line_of(answer), out, batch);
            return;
        }
        let NowRead {
            handler,
            params,
            id,
            modern,
        } = read;
        let answer_id = id.clone();
        let mut read = Box::pin(async move {
            line_of(
                handler
                    .read_answer_as(params, None, answer_id, modern)
                    .await,
            )
        });
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        if let Poll::Ready(answer) = read.as_mut().poll(&mut cx) {
            deliver(answer, out, batch);
            return;
        }
        // Only a read that waits takes a handle on the queue (a count on the channel).
        let out = out.clone();
        let cancelled = CancellationToken::new();
        lock(&self.waiting).insert(id.clone(), cancelled.clone());
        let waiting = self.waiting.clone();
        tokio::spawn(async move {
            let answer = tokio::select! {
                answer = read => answer,
                () = cancelled.cancelled() => return,
            };
            // Taken off the list and sent under one lock, so a cancellation is either
            // before (no answer) or after (the answer is already out).
            let mut waiting = lock(&waiting);
            if waiting.remove(&id).is_some()
                && let Some(bytes) = answer
            {
                let _ = out.send(bytes);
            }
            drop(waiting);
            // A `receive` holding the stream open after EOF counts the reads still running.
            out.backlog.drained.notify_waiters();
        });
    }
}

/// What [`Lines::answer_directly`] made of a message.
// Returned once per message and matched at once, as the `Option` of a message it replaced
// was; boxing the message would cost an allocation for every message rmcp answers.
#[allow(clippy::large_enum_variant)]
enum Directly {
    /// Not the direct path's: for rmcp.
    Rmcp(RxJsonRpcMessage<RoleServer>),
    /// Answered, left running on a task of its own, or dropped (the transport is closed).
    Taken,
    /// A direct read to try in place, which the reader thread does itself with its state
    /// unlocked, so that the watchdog can hand that state to a new thread if the read
    /// hangs (see [`InPlace`]); then [`Lines::finish`].
    Now(NowRead),
}

/// A direct read taken, not yet tried in place.
struct NowRead {
    handler: Arc<McpHandler>,
    params: rmcp::model::ReadResourceRequestParams,
    id: RequestId,
    modern: bool,
}

impl NowRead {
    /// The read done in place, if it can be ([`McpHandler::read_answer_now`]).
    fn now(&self) -> crate::handler::ReadAnswer {
        self.handler
            .read_answer_now(&self.params, None, &self.id, self.modern)
    }
}

/// A direct read's answer as a line of the stream (`None` when it cannot be encoded, which
/// is logged).
fn line_of(answer: Result<io::Result<Vec<u8>>, TxJsonRpcMessage<RoleServer>>) -> Option<Vec<u8>> {
    let answer = match answer {
        Ok(json) => json.map(as_line),
        Err(refused) => encode(refused),
    };
    answer
        .inspect_err(|e| tracing::error!("cannot encode an answer: {e}"))
        .ok()
}

/// A direct answer ready at once: appended to `batch` when there is one (the reader thread
/// writes it), else queued.
fn deliver(answer: Option<Vec<u8>>, out: &Queue, batch: Option<&mut Vec<u8>>) {
    match (answer, batch) {
        // A big answer (a blob) is not copied into the batch: the writer writes it as it is.
        (Some(bytes), Some(batch)) if bytes.len() < BATCH_BYTES => {
            batch.extend_from_slice(&bytes);
            mcpr_core::spare::give_back(bytes);
        }
        (Some(bytes), _) => {
            let _ = out.send(bytes);
        }
        (None, _) => {}
    }
}

/// Queue an answer the transport gives itself (to a line rmcp never sees).
fn answer_with(out: Option<&Queue>, answer: TxJsonRpcMessage<RoleServer>) {
    let encoded = own_answer_json(answer).map(as_line);
    let queued = encoded.and_then(|b| match out {
        Some(out) => out.send(b),
        None => Err(closed()),
    });
    if let Err(e) = queued {
        tracing::debug!("cannot answer an invalid message: {e}");
    }
}

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

/// Direct reads still running, by request id, so a cancellation can stop them.
type Waiting = Arc<std::sync::Mutex<HashMap<RequestId, CancellationToken>>>;

/// Direct answers in a row before `receive` yields to the other tasks.
const DIRECT_RUN: usize = 64;

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "the stdio transport is closed")
}

fn encode(item: TxJsonRpcMessage<RoleServer>) -> io::Result<Vec<u8>> {
    to_json(item).map(as_line)
}

/// A JSON message as a line of the stream: with its newline.
fn as_line(mut json: Vec<u8>) -> Vec<u8> {
    json.push(b'\n');
    json
}

impl<R: AsyncRead + Unpin + Send> Transport<RoleServer> for StdioTransport<R> {
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
        let mut lifecycle = initialized.is_some().then(|| lock(&self.lifecycle));
        // Serialised and queued here, so answers reach the pipe in the order rmcp sent them.
        let queued = encode(item).and_then(|bytes| match &self.out {
            // A notification does not wait behind a full backlog, nor grow it: it is held
            // back (once) until the client reads again.
            Some(out) if notification => out.send_or_defer(bytes),
            _ => self.queue(bytes),
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
        // Cancel-safe: rmcp polls this inside a `select!`. Bytes are only appended to `buf`
        // by a completed read, and a line is decoded and returned (or answered) with no await
        // in between; a message from the reader thread is taken off its channel whole.
        if matches!(self.input, Input::Thread { .. }) {
            if let Some(msg) = self.next_from_thread().await {
                return Some(msg);
            }
            self.drain().await;
            return None;
        }
        let Input::Here { reader, lines, eof } = &mut self.input else {
            return None;
        };
        let mut run = 0usize;
        loop {
            // Back-pressure: no new request while the client leaves too much unread. Waiting
            // here changes no state, so it is cancel-safe too.
            // The writer task ends only with this transport.
            self.backlog.wait_below(|| false).await;
            let out = self.out.as_ref();
            if let Some(line) = lines.next_line(out) {
                if let Some(msg) = lines.decode(line, out) {
                    match lines.answer_directly(msg, out, None) {
                        Directly::Rmcp(msg) => {
                            self.backlog.handed_to_rmcp(&msg);
                            return Some(msg);
                        }
                        // Only the reader thread has its reads in place done apart.
                        Directly::Now(read) => {
                            if let Some(out) = out {
                                let answer = read.now();
                                lines.finish(read, answer, out, None);
                            }
                        }
                        Directly::Taken => {
                            // Many buffered reads answered in a row: let the writer and
                            // rmcp's loop run, so answers leave while the rest are read.
                            run += 1;
                            if run.is_multiple_of(DIRECT_RUN) {
                                tokio::task::yield_now().await;
                            }
                        }
                    }
                }
                continue;
            }
            if *eof {
                break;
            }
            lines.buf.reserve(READ_CHUNK);
            match reader.read_buf(&mut lines.buf).await {
                Ok(0) => *eof = true,
                Ok(_) => {}
                Err(e) => {
                    // The lines read before still get their answers; the binary reports the
                    // error once they are out.
                    tracing::error!("Error reading from stdin: {e}");
                    let _ = self.ending.read_error.set(e);
                    *eof = true;
                }
            }
        }
        // Bytes after the last newline are an unfinished message: nothing to deliver. The
        // requests before it are answered before the stream ends.
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

/// Writes every answer that is ready in one go, then flushes; then releases what it wrote
/// from the backlog and, once the backlog is under its bound, the notifications held back.
async fn write_loop<W: AsyncWrite + Unpin>(
    mut w: W,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
    backlog: Arc<Backlog>,
) {
    let mut batch: Vec<u8> = Vec::with_capacity(BATCH_ROOM);
    while let Some(first) = rx.recv().await {
        let (messages, bytes) = gather(&first, &mut rx, &mut batch);
        let mut result = w.write_all(chosen(&first, &batch)).await;
        // Before anything else is waited for: the next big read takes it, pages and all.
        mcpr_core::spare::give_back(first);
        result = result.and(w.flush().await);
        if result.is_ok() {
            let deferred = backlog.written(bytes, messages);
            if !deferred.is_empty() {
                let all: Vec<u8> = deferred.concat();
                result = w.write_all(&all).await.and(w.flush().await);
            }
        }
        if !done_with(result, &backlog, &mut batch) {
            return;
        }
    }
}

/// [`write_loop`] on a thread of its own, for [`StdioTransport::on_threads`]: each batch is
/// written whole under the output's lock, after what the reader thread left unwritten
/// ([`Out::carry`]), and counted off the backlog before the lock is released, so the reader
/// sees an empty backlog only once everything queued before is out.
fn write_on_thread(output: &Output, mut rx: mpsc::UnboundedReceiver<Vec<u8>>, backlog: &Backlog) {
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
struct Output(std::sync::Mutex<Out>);

struct Out {
    fd: OwnedFd,
    /// How the reader thread writes without ever blocking.
    nowait: NoWait,
    /// The end of a batch the reader thread wrote only in part (the pipe was full): the
    /// writer thread writes it before anything else, so no line is split by another.
    carry: Vec<u8>,
}

/// A write that never blocks, on the output descriptor.
enum NoWait {
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
    fn new(fd: OwnedFd) -> Self {
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

    fn lock(&self) -> std::sync::MutexGuard<'_, Out> {
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
    fn kind(&self) -> &'static str {
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

/// Reads what `fd` has into the spare room of `scratch` (cleared first), waiting when the
/// descriptor is non-blocking and empty; 0 at the end of input.
fn read_fd(fd: BorrowedFd<'_>, scratch: &mut Vec<u8>) -> io::Result<usize> {
    scratch.clear();
    loop {
        match rustix::io::read(fd, rustix::buffer::spare_capacity(&mut *scratch)) {
            Ok(n) => return Ok(n),
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::AGAIN) => ready(fd, rustix::event::PollFlags::IN)?,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Blocks until `fd` is ready for `flags` (or hung up, or failed: the next call says which).
fn ready(fd: BorrowedFd<'_>, flags: rustix::event::PollFlags) -> io::Result<()> {
    let mut fds = [rustix::event::PollFd::from_borrowed_fd(fd, flags)];
    match rustix::event::poll(&mut fds, None) {
        Ok(_) | Err(rustix::io::Errno::INTR) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The reader thread of a transport on threads (see [`StdioTransport::on_threads`]). Cloned
/// for the watchdog, which starts a new reader thread with it when one hangs in a read in
/// place ([`InPlace`]).
#[derive(Clone)]
struct Reader {
    /// What reading carries from line to line. The reader thread holds the lock at all times
    /// but while it tries a read in place, so a thread stuck in one holds none of it.
    state: Arc<std::sync::Mutex<ReaderState>>,
    fd: Arc<OwnedFd>,
    output: Arc<Output>,
    /// The answer queue, without keeping it open: when the transport closes it, the writer
    /// ends once the answers queued are out, whatever this thread is waiting for.
    out: WeakQueue,
    ending: Arc<Ending>,
    in_place: Arc<InPlace>,
}

/// The reading side's state on threads.
struct ReaderState {
    lines: Lines,
    /// Direct answers made since the last write.
    batch: Vec<u8>,
    /// To `receive`. Dropped when reading is over for good (not when a stuck thread is
    /// replaced), which ends the stream once every message is taken.
    to_rmcp: Option<mpsc::Sender<RxJsonRpcMessage<RoleServer>>>,
    /// The read in place now: its id, URI and era, for the watchdog's answer.
    current: Option<(RequestId, String, bool)>,
}

/// The reader thread's reads in place, watched: a read in place runs before any timer (see
/// [`crate::service::Service::read_now`]), and one that hangs (a provider stuck on a
/// network) would hold the only thread reading stdin, so that no cancellation or ping is
/// read any more. The watchdog thread looks every eighth of the request timeout; a read in
/// place still running after the request timeout is answered with the timeout error the
/// other paths give, and a new reader thread reads on with the state the stuck one left
/// unlocked; the stuck thread, when its read ends, finds it has been replaced and ends
/// without answering. A stuck read costs its own request and a parked thread, nothing else.
struct InPlace {
    /// Odd while the reader thread is in a read in place; one more at each entry and exit,
    /// and at a takeover, which the watchdog and the stuck thread race for with one
    /// compare-and-swap each, so exactly one of them answers.
    turn: AtomicU64,
    /// The request timeout.
    timeout: std::time::Duration,
    /// Reading has ended: the watchdog ends too.
    over: std::sync::atomic::AtomicBool,
}

impl InPlace {
    /// The reader thread enters a read in place: its turn, to leave with.
    fn enter(&self) -> u64 {
        self.turn.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// The reader thread's read in place ended: `false` when the watchdog has taken over.
    fn leave(&self, turn: u64) -> bool {
        self.turn
            .compare_exchange(turn, turn + 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

/// How a reader thread ended.
enum Ended {
    /// At the end of input, or with the transport: reading is over.
    Over,
    /// Stuck in a read in place past the timeout: another thread reads on.
    Replaced,
}

/// Messages read ahead for rmcp: past this the reader thread waits for rmcp to take them.
const TO_RMCP: usize = 256;

impl Reader {
    /// Starts a reader thread on `rt`'s context.
    fn spawn(self, rt: tokio::runtime::Handle) -> io::Result<()> {
        std::thread::Builder::new()
            .name("mcpr-stdin".into())
            .spawn(move || {
                let _rt = rt.enter();
                self.run();
            })
            .map(drop)
    }

    /// [`Reader::read`], and a panic in it reported as a read error, not as the end of input.
    fn run(self) {
        let ended = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.read()));
        match ended {
            Ok(Ended::Replaced) => return,
            Ok(Ended::Over) => {}
            Err(_) => {
                let _ = self
                    .ending
                    .read_error
                    .set(io::Error::other("the thread reading stdin panicked"));
            }
        }
        // After the error is recorded: `receive` ends once this sender is gone.
        self.in_place.over.store(true, Ordering::Release);
        lock(&self.state).to_rmcp = None;
    }

    /// Reads to the end of input (or until the transport is gone): frames and decodes each
    /// line, answers the direct reads and writes their answers after each read of input (or
    /// before it waits), hands the rest to `receive`. Runs inside the runtime's context, so
    /// a read that waits can start its task and timers.
    fn read(&self) -> Ended {
        let mut scratch: Vec<u8> = Vec::with_capacity(READ_CHUNK);
        let mut guard = lock(&self.state);
        loop {
            let Some(out) = self.out.upgrade() else {
                return Ended::Over;
            };
            let mut over = false;
            // A message for rmcp that found its channel full.
            let mut waiting = None;
            loop {
                // Back-pressure, as in `receive`: no new request while the client leaves too
                // much unread (or rmcp has too many to answer).
                if out.backlog.over() {
                    over = true;
                    break;
                }
                let st = &mut *guard;
                let Some(line) = st.lines.next_line(Some(&out)) else {
                    break;
                };
                let Some(msg) = st.lines.decode(line, Some(&out)) else {
                    continue;
                };
                match st
                    .lines
                    .answer_directly(msg, Some(&out), Some(&mut st.batch))
                {
                    Directly::Rmcp(msg) => {
                        out.backlog.handed_to_rmcp(&msg);
                        let Some(to_rmcp) = &st.to_rmcp else {
                            return Ended::Over;
                        };
                        match to_rmcp.try_send(msg) {
                            Ok(()) => {}
                            Err(mpsc::error::TrySendError::Full(msg)) => {
                                waiting = Some(msg);
                                break;
                            }
                            Err(mpsc::error::TrySendError::Closed(_)) => {
                                self.write(&mut st.batch, &out);
                                return Ended::Over;
                            }
                        }
                    }
                    Directly::Taken => {}
                    Directly::Now(read) => {
                        st.current = Some((read.id.clone(), read.params.uri.clone(), read.modern));
                        let turn = self.in_place.enter();
                        drop(guard);
                        let answer = read.now();
                        if !self.in_place.leave(turn) {
                            // Answered by the watchdog, and another thread reads on.
                            return Ended::Replaced;
                        }
                        guard = lock(&self.state);
                        let st = &mut *guard;
                        st.current = None;
                        st.lines.finish(read, answer, &out, Some(&mut st.batch));
                    }
                }
                if guard.batch.len() >= BATCH_BYTES {
                    self.write(&mut guard.batch, &out);
                }
            }
            // The answers made so far go out before this thread waits.
            self.write(&mut guard.batch, &out);
            // Not held while blocked: a closed transport must end its writer.
            drop(out);
            if let Some(msg) = waiting {
                // rmcp has 256 messages to take: wait for it (a cancellation behind them
                // must not overtake them).
                let Some(to_rmcp) = guard.to_rmcp.clone() else {
                    return Ended::Over;
                };
                if futures::executor::block_on(to_rmcp.send(msg)).is_err() {
                    return Ended::Over;
                }
                continue;
            }
            if over {
                let closed = || self.out.upgrade().is_none();
                if !futures::executor::block_on(self.out.backlog.wait_below(closed)) {
                    return Ended::Over;
                }
                continue;
            }
            match read_fd(self.fd.as_fd(), &mut scratch) {
                Ok(0) => return Ended::Over,
                Ok(_) => guard.lines.buf.extend_from_slice(&scratch),
                Err(e) => {
                    // The lines read before still get their answers; the binary reports the
                    // error once they are out.
                    tracing::error!("Error reading from stdin: {e}");
                    let _ = self.ending.read_error.set(e);
                    return Ended::Over;
                }
            }
        }
    }

    /// The watchdog of [`InPlace`]: until reading is over, looks every eighth of the request
    /// timeout whether the reader thread has been in the same read in place for the whole
    /// timeout; if so, answers that read with the timeout error and starts a new reader
    /// thread.
    fn watch(self, rt: tokio::runtime::Handle) {
        let timeout = self.in_place.timeout;
        let tick = (timeout / 8).max(std::time::Duration::from_millis(5));
        // The turn last seen in a read, and how many ticks it has been seen since.
        let mut seen = (0u64, 0u32);
        while !self.in_place.over.load(Ordering::Acquire) {
            std::thread::sleep(tick);
            let turn = self.in_place.turn.load(Ordering::Acquire);
            if turn.is_multiple_of(2) || turn != seen.0 {
                seen = (turn, 0);
                continue;
            }
            seen.1 += 1;
            if tick * seen.1 < timeout {
                continue;
            }
            if !self.in_place.leave(turn) {
                continue;
            }
            // The stuck thread holds no lock, and will not touch the state again.
            let current = lock(&self.state).current.take();
            if let (Some((id, uri, modern)), Some(out)) = (current, self.out.upgrade()) {
                tracing::warn!(%id, %uri, "a read in place hung past the request timeout; \
                    answered with the timeout error, and stdin is read on by a new thread");
                let e = crate::layers::timed_out(timeout, Some(&uri));
                let message =
                    crate::wire::era::read_message(Err(crate::errors::to_mcp_error(e)), id, modern);
                if let Some(line) = line_of(Err(message)) {
                    let _ = out.send(line);
                }
            }
            if let Err(e) = self.clone().spawn(rt.clone()) {
                tracing::error!("cannot start a new thread reading stdin: {e}");
                let _ = self.ending.read_error.set(e);
                self.in_place.over.store(true, Ordering::Release);
                lock(&self.state).to_rmcp = None;
                return;
            }
            seen = (0, 0);
        }
    }

    /// Writes the direct answers in `batch` now, as far as the output takes them without
    /// waiting, when nothing queued before them is still unwritten; whatever is left goes to
    /// the writer thread, behind what is queued. This thread never blocks on the output: a
    /// client that writes many requests before it reads an answer has them read and answered
    /// up to the backlog's bounds, as with the writer task.
    fn write(&self, batch: &mut Vec<u8>, out: &Queue) {
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
        let written = match self.output.try_lock() {
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
struct Queue {
    tx: mpsc::UnboundedSender<Vec<u8>>,
    backlog: Arc<Backlog>,
}

impl Queue {
    /// A handle that does not keep the queue open (see [`Reader`]).
    fn downgrade(&self) -> WeakQueue {
        WeakQueue {
            tx: self.tx.downgrade(),
            backlog: self.backlog.clone(),
        }
    }

    /// Queue an answer (always: the request was taken, its answer is owed).
    fn send(&self, bytes: Vec<u8>) -> io::Result<()> {
        self.backlog.add(bytes.len());
        let len = bytes.len();
        self.tx.send(bytes).map_err(|_| {
            self.backlog.written(len, 1);
            closed()
        })
    }

    /// Queue a notification, or hold it back while the backlog is over its bound.
    fn send_or_defer(&self, bytes: Vec<u8>) -> io::Result<()> {
        match self.backlog.defer_if_over(bytes) {
            None => Ok(()),
            Some(bytes) => self.send(bytes),
        }
    }
}

/// A [`Queue`] that does not keep the writer running.
#[derive(Clone)]
struct WeakQueue {
    tx: mpsc::WeakUnboundedSender<Vec<u8>>,
    backlog: Arc<Backlog>,
}

impl WeakQueue {
    fn upgrade(&self) -> Option<Queue> {
        Some(Queue {
            tx: self.tx.upgrade()?,
            backlog: self.backlog.clone(),
        })
    }
}

/// Answers queued and not yet written, against the bound past which no request is read.
/// Counted with atomics (the hot path adds and the writer subtracts, no lock); the lock is
/// taken only to hold a notification back and, by the writer, to release them.
struct Backlog {
    bytes: AtomicUsize,
    messages: AtomicUsize,
    max_bytes: AtomicUsize,
    max_messages: AtomicUsize,
    max_pending: AtomicUsize,
    /// Signalled by the writer after each write.
    drained: tokio::sync::Notify,
    /// Notifications held back, in arrival order, each once.
    deferred: std::sync::Mutex<Vec<Vec<u8>>>,
    /// Notifications dropped because [`MAX_DEFERRED`] were already held back.
    dropped: AtomicU64,
    /// Requests rmcp has and has not answered (a listen, answered only when it ends, until it
    /// is acknowledged); a cancelled one leaves too, as rmcp drops its answer.
    pending: std::sync::Mutex<std::collections::HashSet<RequestId>>,
    pending_count: AtomicUsize,
    /// Listens handed to rmcp and not ended (by their final answer or a cancellation): the
    /// end of input waits for them too, once it has ended them (see `receive`).
    listening: std::sync::Mutex<std::collections::HashSet<RequestId>>,
    listening_count: AtomicUsize,
    /// stdout is gone: nothing bounds reading any more.
    closed: std::sync::atomic::AtomicBool,
}

impl Backlog {
    fn new(max_bytes: usize, max_messages: usize) -> Self {
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
            closed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// `msg` goes to rmcp: a request is pending until answered (a listen until acknowledged);
    /// a cancellation ends one.
    fn handed_to_rmcp(&self, msg: &RxJsonRpcMessage<RoleServer>) {
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
    fn answered(&self, id: &RequestId) {
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
    fn acknowledged(&self, id: &RequestId) {
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

    fn set_limits(&self, bytes: usize, messages: usize) {
        self.max_bytes.store(bytes, Ordering::Relaxed);
        self.max_messages.store(messages, Ordering::Relaxed);
        self.max_pending
            .store(messages.min(MAX_PENDING_REQUESTS), Ordering::Relaxed);
    }

    fn add(&self, bytes: usize) {
        self.bytes.fetch_add(bytes, Ordering::AcqRel);
        self.messages.fetch_add(1, Ordering::AcqRel);
    }

    fn over(&self) -> bool {
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
    fn defer_if_over(&self, bytes: Vec<u8>) -> Option<Vec<u8>> {
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
    fn written(&self, bytes: usize, messages: usize) -> Vec<Vec<u8>> {
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
    async fn wait_below(&self, closed: impl Fn() -> bool) -> bool {
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
    use crate::wire::decode::rmcp_decode;
    use tokio::io::AsyncBufReadExt;

    /// A client on one end of in-memory pipes, the transport on the other.
    async fn pair(
        max_line: usize,
    ) -> (
        StdioTransport<tokio::io::DuplexStream>,
        tokio::io::DuplexStream,
        tokio::io::BufReader<tokio::io::DuplexStream>,
    ) {
        let (client_w, server_r) = tokio::io::duplex(1 << 20);
        let (server_w, client_r) = tokio::io::duplex(1 << 20);
        let t = StdioTransport::new(server_r, server_w).with_max_line_length(max_line);
        (t, client_w, tokio::io::BufReader::new(client_r))
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

    #[tokio::test]
    async fn frames_lines_in_order_across_partial_writes() {
        let (t, mut w, mut r) = pair(1024).await;
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
                tokio::task::yield_now().await;
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
        let (mut t, _w, mut r) = pair(1024).await;
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
        let mut rest = String::new();
        assert_eq!(
            r.read_line(&mut rest).await.unwrap(),
            0,
            "nothing after the last answer"
        );
        let msg =
            TxJsonRpcMessage::<RoleServer>::error(ErrorData::invalid_params("late", None), None);
        assert!(
            t.send(msg).await.is_err(),
            "a closed transport refuses answers"
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
    async fn still_open(t: &mut StdioTransport<tokio::io::DuplexStream>) -> bool {
        tokio::time::timeout(std::time::Duration::from_millis(50), t.receive())
            .await
            .is_err()
    }

    #[tokio::test]
    async fn the_end_of_input_waits_for_the_answers_to_the_requests_read_before_it() {
        let (mut t, mut w, _r) = pair(1024).await;
        w.write_all(line(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).as_bytes())
            .await
            .unwrap();
        w.write_all(line(r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#).as_bytes())
            .await
            .unwrap();
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
        let (t, mut w, _r) = pair(1024).await;
        let mut t = t.with_eof_drain(bound);
        w.write_all(line(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).as_bytes())
            .await
            .unwrap();
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
        let (mut t, mut w, _r) = pair(1024).await;
        let listen = r#"{"jsonrpc":"2.0","id":5,"method":"subscriptions/listen","params":{"notifications":{"resourcesListChanged":true},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"}}}}"#;
        w.write_all(line(listen).as_bytes()).await.unwrap();
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

    /// A reader that gives `first`, then fails.
    struct Failing(Option<Vec<u8>>);

    impl AsyncRead for Failing {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            match self.0.take() {
                Some(bytes) => {
                    buf.put_slice(&bytes);
                    Poll::Ready(Ok(()))
                }
                None => Poll::Ready(Err(io::Error::other("the pipe broke"))),
            }
        }
    }

    #[tokio::test]
    async fn a_read_error_is_kept_and_the_answers_before_it_still_go_out() {
        let (server_w, client_r) = tokio::io::duplex(1 << 16);
        let mut t = StdioTransport::new(Failing(Some(b"not json\n".to_vec())), server_w);
        let end = t.end();
        // The refused line is answered by the transport itself; then the error ends input.
        assert!(t.receive().await.is_none());
        assert_eq!(
            end.read_error().map(ToString::to_string).as_deref(),
            Some("the pipe broke")
        );
        // Dropped unclosed, as rmcp's failed handshake does: the answer still arrives.
        drop(t);
        end.flushed().await;
        let mut r = tokio::io::BufReader::new(client_r);
        let mut answer = String::new();
        r.read_line(&mut answer).await.unwrap();
        let v: serde_json::Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(v["error"]["code"], -32700, "{answer}");
    }
}
