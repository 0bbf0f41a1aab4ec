//! The reading side of the stdio transport: a thread that blocks in `read` on stdin, as the
//! least program answering a line with a file does, instead of waiting in `epoll_wait` for
//! the runtime to wake and read. It frames and decodes the lines, answers the direct reads
//! (writing their answers itself, those made from one read of input together), and hands
//! every other message to rmcp over a bounded channel. Its reads in place are watched
//! ([`InPlace`]), so one that hangs costs its own request, not the session.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use mcpr_core::sync::lock;
use rmcp::model::RequestId;
use rmcp::service::{RoleServer, RxJsonRpcMessage};
use tokio::sync::mpsc;

use super::direct::{Direct, Directly, line_of};
use super::framing::Lines;
use super::writer::{Output, Queue, WeakQueue, ready};
use super::{BATCH_BYTES, BATCH_ROOM, Ending, READ_CHUNK};
use crate::wire::era::Era;

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

/// The reader thread (see [`super::StdioTransport::on_threads`]). Cloned
/// for the watchdog, which starts a new reader thread with it when one hangs in a read in
/// place ([`InPlace`]).
#[derive(Clone)]
pub(super) struct Reader {
    /// What reading carries from line to line. The reader thread holds the lock at all times
    /// but while it tries a read in place, so a thread stuck in one holds none of it.
    state: Arc<Mutex<ReaderState>>,
    fd: Arc<OwnedFd>,
    output: Arc<Output>,
    /// The answer queue, without keeping it open: when the transport closes it, the writer
    /// ends once the answers queued are out, whatever this thread is waiting for.
    out: WeakQueue,
    ending: Arc<Ending>,
    in_place: Arc<InPlace>,
}

/// The reading side's state.
struct ReaderState {
    lines: Lines,
    direct: Direct,
    /// Direct answers made since the last write.
    batch: Vec<u8>,
    /// To `receive`. Dropped when reading is over for good (not when a stuck thread is
    /// replaced), which ends the stream once every message is taken.
    to_rmcp: Option<mpsc::Sender<RxJsonRpcMessage<RoleServer>>>,
    /// The read in place now: its id, URI and era, for the watchdog's answer.
    current: Option<(RequestId, String, Era)>,
}

/// The reader thread's reads in place, watched: a read in place runs before any timer (see
/// [`crate::service::Service::read_now`]), and one that hangs (a provider stuck on a
/// network) would hold the only thread reading stdin, so that no cancellation or ping is
/// read any more. The watchdog thread looks every eighth of the request timeout; a read in
/// place still running after the request timeout is answered with the timeout error the
/// other paths give, and a new reader thread reads on with the state the stuck one left
/// unlocked; the stuck thread, when its read ends, finds it has been replaced and ends
/// without answering. A stuck read costs its own request and a parked thread, nothing else.
pub(super) struct InPlace {
    /// Odd while the reader thread is in a read in place; one more at each entry and exit,
    /// and at a takeover, which the watchdog and the stuck thread race for with one
    /// compare-and-swap each, so exactly one of them answers.
    turn: AtomicU64,
    /// The request timeout.
    timeout: std::time::Duration,
    /// Reading has ended: the watchdog ends too.
    over: AtomicBool,
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
    /// Starts reading `fd` on a thread of its own (with a watchdog when the direct path is
    /// on); the messages for rmcp come out of the receiver returned.
    pub(super) fn start(
        lines: Lines,
        direct: Direct,
        fd: OwnedFd,
        output: Arc<Output>,
        out: &Queue,
        ending: Arc<Ending>,
    ) -> io::Result<mpsc::Receiver<RxJsonRpcMessage<RoleServer>>> {
        let (to, rx) = mpsc::channel(TO_RMCP);
        // Reads in place are watched, so one that hangs costs its request only.
        let timeout = direct
            .handler
            .as_ref()
            .map(|h| h.service().state().settings.request_timeout);
        let reader = Reader {
            state: Arc::new(Mutex::new(ReaderState {
                lines,
                direct,
                batch: Vec::with_capacity(BATCH_ROOM),
                to_rmcp: Some(to),
                current: None,
            })),
            fd: Arc::new(fd),
            output,
            out: out.downgrade(),
            ending,
            in_place: Arc::new(InPlace {
                turn: AtomicU64::new(0),
                timeout: timeout.unwrap_or_default(),
                over: AtomicBool::new(false),
            }),
        };
        tracing::debug!(
            output = reader.output.lock().nowait.kind(),
            "stdio: stdin read on a thread of its own"
        );
        let rt = tokio::runtime::Handle::current();
        if timeout.is_some() {
            let (watchdog, rt) = (reader.clone(), rt.clone());
            std::thread::Builder::new()
                .name("mcpr-stdin-watch".into())
                .spawn(move || watchdog.watch(rt))
                .inspect_err(|e| {
                    tracing::error!("cannot start the watchdog of the thread reading stdin: {e}");
                })?;
        }
        let in_place = reader.in_place.clone();
        reader.spawn(rt).inspect_err(|e| {
            in_place.over.store(true, Ordering::Release);
            tracing::error!("cannot start the thread reading stdin: {e}");
        })?;
        Ok(rx)
    }

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
                // Back-pressure: no new request while the client leaves too much unread (or
                // rmcp has too many to answer).
                if out.backlog.over() {
                    over = true;
                    break;
                }
                let st = &mut *guard;
                let Some(line) = st.lines.next_line(&out) else {
                    break;
                };
                let Some(msg) = st.lines.decode(line, &out) else {
                    continue;
                };
                match st.direct.take(msg, &out) {
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
                                self.output.write_now(&mut st.batch, &out);
                                return Ended::Over;
                            }
                        }
                    }
                    Directly::Dropped => {}
                    Directly::Now(read) => {
                        st.current = Some((read.id.clone(), read.params.uri.clone(), read.era));
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
                        st.direct.finish(read, answer, &out, &mut st.batch);
                    }
                }
                if guard.batch.len() >= BATCH_BYTES {
                    let st = &mut *guard;
                    self.output.write_now(&mut st.batch, &out);
                }
            }
            // The answers made so far go out before this thread waits.
            let st = &mut *guard;
            self.output.write_now(&mut st.batch, &out);
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
            if let (Some((id, uri, era)), Some(out)) = (current, self.out.upgrade()) {
                tracing::warn!(%id, %uri, "a read in place hung past the request timeout; \
                    answered with the timeout error, and stdin is read on by a new thread");
                let e = crate::layers::timed_out(timeout, Some(&uri));
                let message =
                    crate::wire::era::read_message(Err(crate::errors::to_mcp_error(e)), id, era);
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
}
