//! The reading side of the stdio transport: a thread that blocks in `read` on stdin, as the
//! least program answering a line with a file does, instead of waiting in `epoll_wait` for
//! the runtime to wake and read. It frames and decodes the lines, answers the direct reads
//! (writing their answers itself, those made from one read of input together), and hands
//! every other message to rmcp over a bounded channel. Its reads in place are watched
//! ([`InPlace`]), so one that hangs costs its own request, not the session: within a tenth
//! of a second another thread reads stdin in its place.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mcpr_core::sync::lock;
use rmcp::model::RequestId;
use rmcp::service::{RoleServer, RxJsonRpcMessage};
use tokio::sync::{mpsc, oneshot};

use super::direct::{Direct, Directly, Tried};
use super::framing::Lines;
use super::writer::{Output, Queue, WeakQueue, ready};
use super::{BATCH_BYTES, BATCH_ROOM, Ending, READ_CHUNK};
use crate::hung;
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

/// The reader thread's reads in place, watched, by the policy the HTTP direct path's reader
/// threads follow too ([`crate::hung`]). A read in place runs before any timer (see
/// [`crate::service::Service::read_now`]), and one that hangs (a provider stuck on a
/// network) would hold the only thread reading stdin, so that no cancellation, ping or other
/// request is read any more. The watchdog thread looks every [`hung::tick`]; once it has
/// seen the reader thread in one read in place for [`hung::slow_after`] (at most 100 ms), it
/// takes that read over and a new reader thread reads on with the state the stuck one left
/// unlocked. The read taken over is listed with the reads that wait
/// ([`Direct::taken_over`]): a cancellation stops it, its answer goes out if the stuck
/// thread's read returns within the request timeout, and the timeout error at the timeout
/// otherwise. The stuck thread, when its read returns, hands what it gave over and ends.
/// Past [`hung::MAX_STUCK`] stuck threads, reads are no longer tried in place but go to a
/// task at once, until some return. A stuck read costs its own request and a parked thread,
/// nothing else.
pub(super) struct InPlace {
    /// Odd while the reader thread is in a read in place; one more at each entry and exit,
    /// and at a takeover, which the watchdog and the stuck thread race for with one
    /// compare-and-swap each, so exactly one of them finishes the read.
    turn: AtomicU64,
    /// The request timeout.
    timeout: Duration,
    /// How long a read in place may run before the watchdog takes it over.
    slow_after: Duration,
    /// Reading has ended: the watchdog ends too.
    over: AtomicBool,
    /// Reader threads replaced in a read that has not returned.
    stuck: hung::Stuck,
    /// The reads taken over whose thread has not returned, by turn: where that thread
    /// hands over what its read gave. The watchdog takes a read over under this lock, so
    /// the thread that finds itself taken over finds its entry.
    taken: Mutex<Vec<(u64, oneshot::Sender<Tried>)>>,
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

    /// The watchdog takes over the read in place of `turn`, if it still runs: where the
    /// stuck thread will hand what it gives.
    fn take_over(&self, turn: u64) -> Option<oneshot::Receiver<Tried>> {
        let mut taken = lock(&self.taken);
        if !self.leave(turn) {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        taken.push((turn, tx));
        self.stuck.replaced();
        Some(rx)
    }

    /// A thread whose read of `turn` was taken over hands over what it gave.
    fn hand_over(&self, turn: u64, tried: Tried) {
        let to = {
            let mut taken = lock(&self.taken);
            let at = taken.iter().position(|(t, _)| *t == turn);
            at.map(|at| taken.swap_remove(at).1)
        };
        self.stuck.returned();
        // A read already answered (timed out, or cancelled) drops what it gave.
        if let Some(to) = to {
            let _ = to.send(tried);
        }
    }
}

/// How a reader thread ended.
enum Ended {
    /// At the end of input, or with the transport: reading is over.
    Over,
    /// Stuck in a read in place: another thread reads on.
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
        let watched = timeout.is_some();
        let timeout = timeout.unwrap_or_default();
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
                timeout,
                slow_after: hung::slow_after(timeout),
                over: AtomicBool::new(false),
                stuck: hung::Stuck::default(),
                taken: Mutex::new(Vec::new()),
            }),
        };
        tracing::debug!(
            output = reader.output.lock().nowait.kind(),
            "stdio: stdin read on a thread of its own"
        );
        let rt = tokio::runtime::Handle::current();
        if watched {
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
                    // Too many threads stuck already: not tried here at all.
                    Directly::Now(read) if !self.in_place.stuck.accepting() => {
                        st.direct.finish(read.later(), &out, &mut st.batch);
                    }
                    Directly::Now(read) => {
                        st.current = Some((read.id.clone(), read.params.uri.clone(), read.era));
                        let turn = self.in_place.enter();
                        drop(guard);
                        let tried = read.try_now();
                        if !self.in_place.leave(turn) {
                            // Taken over by the watchdog, and another thread reads on.
                            self.in_place.hand_over(turn, tried);
                            return Ended::Replaced;
                        }
                        guard = lock(&self.state);
                        let st = &mut *guard;
                        st.current = None;
                        st.direct.finish(tried, &out, &mut st.batch);
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

    /// The watchdog of [`InPlace`]: until reading is over, looks every [`hung::tick`]
    /// whether the reader thread has been in the same read in place for
    /// [`hung::slow_after`]; if so, takes that read over and starts a new reader thread.
    fn watch(self, rt: tokio::runtime::Handle) {
        let slow_after = self.in_place.slow_after;
        let tick = hung::tick(slow_after);
        // The turn of the read in place last seen, and when it was first seen: a read seen
        // running for `slow_after` has run at least that long.
        let mut seen: Option<(u64, Instant)> = None;
        while !self.in_place.over.load(Ordering::Acquire) {
            std::thread::sleep(tick);
            let turn = self.in_place.turn.load(Ordering::Acquire);
            if turn.is_multiple_of(2) {
                seen = None;
                continue;
            }
            let since = match seen {
                Some((t, since)) if t == turn => since,
                _ => {
                    seen = Some((turn, Instant::now()));
                    continue;
                }
            };
            if since.elapsed() < slow_after {
                continue;
            }
            seen = None;
            let Some(handed) = self.in_place.take_over(turn) else {
                continue;
            };
            // The stuck thread holds no lock, and will not touch the state again.
            let (current, direct) = {
                let mut st = lock(&self.state);
                (st.current.take(), st.direct.clone())
            };
            if let (Some((id, uri, era)), Some(out)) = (current, self.out.upgrade()) {
                tracing::warn!(%id, %uri, after_ms = slow_after.as_millis() as u64,
                    "a read in place is taking too long; stdin is read on by a new thread, \
                    and the read answered when it ends or at the request timeout");
                let timeout = self.in_place.timeout;
                // The read began before it was first seen: its timeout is no earlier.
                let deadline = tokio::time::Instant::from_std(since + timeout);
                direct.taken_over(id, uri, era, timeout, deadline, handed, out, &rt);
            }
            if let Err(e) = self.clone().spawn(rt.clone()) {
                tracing::error!("cannot start a new thread reading stdin: {e}");
                let _ = self.ending.read_error.set(e);
                self.in_place.over.store(true, Ordering::Release);
                lock(&self.state).to_rmcp = None;
                return;
            }
        }
    }
}
