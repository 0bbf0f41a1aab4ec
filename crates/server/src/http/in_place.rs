//! Where the HTTP direct path's reads in place run, so that a read that hangs costs its own
//! request rather than the runtime.
//!
//! A read in place ([`crate::service::Service::read_now`]) is a plain call with no timer:
//! nothing can interrupt it once it runs. On a runtime worker, one stuck in `statx` on a dead
//! disk (or in a provider's `read_now` that blocks) holds that worker for good, with every
//! connection it was serving; with two workers, two such reads froze `/healthz`. So a read in
//! place runs in a task or on a thread of its own, and the request's task awaits its answer
//! for at most the request timeout, then answers the timeout error as a read on the bounded
//! path does. Two places take it:
//! - **A spare worker.** The runtime may have workers beyond those it needs
//!   (`HttpSettings::spare_workers`); as many reads as it has spares run at once in a task of
//!   their own on a worker, each holding a slot ([`WorkerSlot`]) until it returns. That costs
//!   a task and no thread hand-off. One that hangs keeps its slot, so at most the spares are
//!   ever in such reads, stuck or not, and the workers the runtime needs serve on.
//! - **A reader thread**, when no slot is free: one of a few threads, woken for it (a futex
//!   round trip and a context switch, about 4 to 10 µs a read on a 2-vCPU VM, which is why
//!   the slots come first).
//!
//! A watchdog replaces a reader that has been in one read longer than
//! [`hung::slow_after`]: a new thread takes its place at once, so the reads queued behind it
//! go on, and the slow one ends once its read returns. Replaced threads that have not
//! returned are counted; past [`hung::MAX_STUCK`] of them no read is taken in place any more
//! (the caller reads on the bounded path, which costs a task and a timer but cannot hang
//! anything), until some return. Threads are thus bounded by `readers + MAX_STUCK`. That
//! policy is the stdio transport's too ([`crate::hung`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use mcpr_core::sync::lock;
use tokio::sync::oneshot;

use crate::hung;

/// Reader threads for a server: as many as the runtime has workers (one per CPU), at least
/// two so that one slow read never holds the rest up until the watchdog looks, and at most
/// four: a read in place takes microseconds, and more threads would only take turns.
pub(crate) fn readers() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 4))
}

type Job = Box<dyn FnOnce() + Send>;

/// The reader threads; dropping this ends them (a reader in a read ends when it returns).
pub(crate) struct InPlaceReads {
    shared: Arc<Shared>,
    /// Free slots for a read on a spare runtime worker.
    worker_slots: Arc<AtomicUsize>,
}

/// A read's hold on a spare worker, given back when dropped: when the read returns, panics or
/// its task is dropped at shutdown.
pub(crate) struct WorkerSlot(Arc<AtomicUsize>);

impl Drop for WorkerSlot {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Release);
    }
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    slow_after: Duration,
    /// Readers replaced while in a read that has not returned yet.
    stuck: hung::Stuck,
    /// The readers running, for the watchdog.
    slots: Mutex<Vec<Arc<Slot>>>,
    /// The origin of [`Slot::busy_since`].
    epoch: Instant,
    /// Entered on each reader thread: a provider's `read_now` may look for the runtime.
    rt: tokio::runtime::Handle,
    closed: AtomicBool,
}

struct Queue {
    jobs: VecDeque<Job>,
    /// Readers waiting for a job: a job wakes one only when one waits, since a wake is a
    /// system call on every read otherwise.
    idle: usize,
}

/// One reader thread, as the watchdog sees it.
#[derive(Default)]
struct Slot {
    /// Nanoseconds since [`Shared::epoch`] (plus one) at which the current read began; zero
    /// while the reader waits for a job.
    busy_since: AtomicU64,
    /// Set by the watchdog when another thread has taken this one's place.
    replaced: AtomicBool,
}

impl InPlaceReads {
    /// `readers` threads and their watchdog, entering `rt`, and `spare_workers` slots for
    /// reads on `rt`'s workers: at most one fewer than it has, so that one worker at least is
    /// never in a read in place whatever the setting (none on a current-thread runtime).
    pub(crate) fn start(
        readers: usize,
        spare_workers: usize,
        request_timeout: Duration,
        rt: tokio::runtime::Handle,
    ) -> std::io::Result<Self> {
        let workers = match rt.runtime_flavor() {
            tokio::runtime::RuntimeFlavor::MultiThread => rt.metrics().num_workers(),
            _ => 0,
        };
        let worker_slots = Arc::new(AtomicUsize::new(
            spare_workers.min(workers.saturating_sub(1)),
        ));
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                jobs: VecDeque::new(),
                idle: 0,
            }),
            wake: Condvar::new(),
            slow_after: hung::slow_after(request_timeout),
            stuck: hung::Stuck::default(),
            slots: Mutex::new(Vec::new()),
            epoch: Instant::now(),
            rt,
            closed: AtomicBool::new(false),
        });
        let this = Self {
            shared,
            worker_slots,
        };
        for _ in 0..readers.max(1) {
            // On failure `this` is dropped, which ends the readers already started.
            spawn_reader(&this.shared)?;
        }
        let watched = this.shared.clone();
        std::thread::Builder::new()
            .name("mcpr-read-watch".into())
            .spawn(move || watch(&watched))?;
        Ok(this)
    }

    /// Whether reads are taken in place now: not while [`hung::MAX_STUCK`] readers are
    /// stuck (then read on the bounded path).
    pub(crate) fn accepting(&self) -> bool {
        self.shared.stuck.accepting()
    }

    /// A slot for one read on a spare worker, if one is free.
    pub(crate) fn worker_slot(&self) -> Option<WorkerSlot> {
        self.worker_slots
            .fetch_update(Ordering::Acquire, Ordering::Relaxed, |n| n.checked_sub(1))
            .ok()
            .map(|_| WorkerSlot(self.worker_slots.clone()))
    }

    /// Runs `job` on a reader thread; its result comes on the receiver. A job whose
    /// receiver is gone before a reader takes it is skipped.
    pub(crate) fn run<T: Send + 'static>(
        &self,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> oneshot::Receiver<T> {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move || {
            if !tx.is_closed() {
                let _ = tx.send(job());
            }
        });
        let mut queue = lock(&self.shared.queue);
        queue.jobs.push_back(job);
        let wake = queue.idle > 0;
        drop(queue);
        if wake {
            self.shared.wake.notify_one();
        }
        rx
    }

    /// Readers replaced in a read that has not returned yet.
    #[cfg(test)]
    fn stuck(&self) -> usize {
        self.shared.stuck.count()
    }
}

impl Drop for InPlaceReads {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        // Under the lock, so no reader is between its check and its wait.
        drop(lock(&self.shared.queue));
        self.shared.wake.notify_all();
    }
}

fn spawn_reader(shared: &Arc<Shared>) -> std::io::Result<()> {
    let slot = Arc::new(Slot::default());
    lock(&shared.slots).push(slot.clone());
    let (shared2, slot2) = (shared.clone(), slot.clone());
    let started = std::thread::Builder::new()
        .name("mcpr-read-in-place".into())
        .spawn(move || read_jobs(&shared2, &slot2));
    if started.is_err() {
        // No thread will ever leave this slot.
        leave(shared, &slot);
    }
    started.map(drop)
}

/// A reader thread: takes jobs until the pool closes or the watchdog replaces it.
fn read_jobs(shared: &Arc<Shared>, slot: &Arc<Slot>) {
    let _rt = shared.rt.enter();
    loop {
        let job = {
            let mut queue = lock(&shared.queue);
            loop {
                if shared.closed.load(Ordering::Acquire) {
                    drop(queue);
                    leave(shared, slot);
                    return;
                }
                if let Some(job) = queue.jobs.pop_front() {
                    break job;
                }
                queue.idle += 1;
                queue = shared
                    .wake
                    .wait(queue)
                    .unwrap_or_else(PoisonError::into_inner);
                queue.idle -= 1;
            }
        };
        let since = shared.epoch.elapsed().as_nanos() as u64 + 1;
        slot.busy_since.store(since, Ordering::Release);
        // The job's own panics are caught where the read runs; one in the answer's encoding
        // drops the sender, which its request answers as an internal error, and this thread
        // goes on.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
        slot.busy_since.store(0, Ordering::Release);
        if slot.replaced.load(Ordering::Acquire) {
            shared.stuck.returned();
            leave(shared, slot);
            return;
        }
    }
}

fn leave(shared: &Shared, slot: &Arc<Slot>) {
    lock(&shared.slots).retain(|s| !Arc::ptr_eq(s, slot));
}

/// The watchdog: every [`hung::tick`], replaces each reader that has been in one read for
/// longer than `slow_after`.
fn watch(shared: &Arc<Shared>) {
    let tick = hung::tick(shared.slow_after);
    while !shared.closed.load(Ordering::Acquire) {
        std::thread::sleep(tick);
        let now = shared.epoch.elapsed().as_nanos() as u64 + 1;
        let slow = shared.slow_after.as_nanos() as u64;
        let stuck: Vec<Arc<Slot>> = lock(&shared.slots)
            .iter()
            .filter(|s| {
                let since = s.busy_since.load(Ordering::Acquire);
                since != 0
                    && now.saturating_sub(since) > slow
                    && !s.replaced.load(Ordering::Acquire)
            })
            .cloned()
            .collect();
        for slot in stuck {
            if slot
                .replaced
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                continue;
            }
            // The replaced thread uncounts itself when its read returns.
            shared.stuck.replaced();
            tracing::warn!(
                after_ms = shared.slow_after.as_millis() as u64,
                "a read in place is taking too long; another thread reads in its place"
            );
            if let Err(e) = spawn_reader(shared) {
                tracing::error!("cannot start a thread for reads in place: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stuck_reader_is_replaced_and_the_cap_refuses_in_place_reads() {
        let reads = InPlaceReads::start(
            1,
            0,
            Duration::from_millis(40),
            tokio::runtime::Handle::current(),
        )
        .unwrap();
        // One reader, stuck until released.
        let (release, stuck) = mpsc::channel::<()>();
        let stuck = Arc::new(Mutex::new(stuck));
        let held = stuck.clone();
        let first = reads.run(move || {
            let _ = lock(&held).recv();
            1
        });
        // Queued behind it, it is read once the watchdog has put another thread in its place.
        let second = reads.run(|| 2);
        assert_eq!(
            tokio::time::timeout(Duration::from_secs(10), second)
                .await
                .unwrap()
                .unwrap(),
            2
        );
        assert_eq!(reads.stuck(), 1);
        release.send(()).unwrap();
        assert_eq!(first.await.unwrap(), 1);
        // The replaced thread uncounts itself once its read has returned.
        let deadline = Instant::now() + Duration::from_secs(10);
        while reads.stuck() > 0 {
            assert!(Instant::now() < deadline, "the stuck count did not go down");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // At the cap, nothing more is taken in place.
        reads.shared.stuck.set(hung::MAX_STUCK);
        assert!(!reads.accepting());
        reads.shared.stuck.set(0);
        assert!(reads.accepting());
        assert_eq!(reads.run(|| 4).await.unwrap(), 4);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_whose_request_left_is_skipped_and_a_panic_drops_only_its_answer() {
        let reads = InPlaceReads::start(
            1,
            0,
            Duration::from_secs(30),
            tokio::runtime::Handle::current(),
        )
        .unwrap();
        let ran = Arc::new(AtomicBool::new(false));
        let (gate_tx, gate_rx) = mpsc::channel::<()>();
        let gate = Arc::new(Mutex::new(gate_rx));
        let g = gate.clone();
        let blocker = reads.run(move || lock(&g).recv().is_ok());
        let r = ran.clone();
        drop(reads.run(move || r.store(true, Ordering::SeqCst)));
        gate_tx.send(()).unwrap();
        assert!(blocker.await.unwrap());
        let panicked = reads.run(|| -> u8 { panic!("boom") });
        assert!(panicked.await.is_err());
        assert_eq!(reads.run(|| 5).await.unwrap(), 5);
        assert!(!ran.load(Ordering::SeqCst), "a job nobody waits for ran");
    }
}
