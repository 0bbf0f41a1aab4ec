//! The process's budget of HTML conversions ([`ConversionBudget`], `[server]
//! max_conversions`): conversion is CPU work, so however many web mounts there are, the
//! process runs at most this many at once; each mount's own `max_conversions` caps that
//! mount on top.
//!
//! The budget is shared by a fair queue rather than split into fixed shares. A fixed share
//! (`budget / web mounts` each) leaves cores idle whenever one mount is busy and the others
//! are not, which is the common case. Instead a mount takes any free place up to its own
//! cap; once places run out, requests queue, and every place that comes free goes to the
//! waiting mount that holds the fewest places (first come first served between requests of
//! one mount, and between mounts holding as many). So a mount never takes another place
//! while a mount holding fewer waits: a second mount starts converting at the first
//! conversion that ends (each is bounded by its mount's `timeout_ms`), however long the
//! first mount's queue, and the places even out between busy mounts (max-min fairness).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use mcpr_core::{Error, Result};
use tokio::sync::oneshot;

/// A process-wide limit of HTML conversions running at once, shared fairly by mounts.
pub struct ConversionBudget {
    state: Mutex<State>,
    /// Names mounts ([`Share`]s) apart.
    next_mount: AtomicU64,
}

struct State {
    total: usize,
    held: usize,
    /// Places held per mount; a mount holding none has no entry.
    by_mount: HashMap<u64, usize>,
    /// Requests waiting, oldest first.
    queue: VecDeque<Waiter>,
    next_ticket: u64,
}

struct Waiter {
    ticket: u64,
    mount: u64,
    cap: usize,
    tx: oneshot::Sender<()>,
}

impl State {
    fn holding(&self, mount: u64) -> usize {
        self.by_mount.get(&mount).copied().unwrap_or(0)
    }

    fn can_take(&self, mount: u64, cap: usize) -> bool {
        self.held < self.total && self.holding(mount) < cap
    }

    fn take(&mut self, mount: u64) {
        self.held += 1;
        *self.by_mount.entry(mount).or_insert(0) += 1;
    }

    fn give_back(&mut self, mount: u64) {
        self.held -= 1;
        if let Some(n) = self.by_mount.get_mut(&mount) {
            *n -= 1;
            if *n == 0 {
                self.by_mount.remove(&mount);
            }
        }
    }

    /// Hands free places to waiters: each to the waiter, among those under their mount's
    /// cap, whose mount holds the fewest, the oldest of those first. Runs after every change,
    /// so no waiter that could start is left waiting while a place is free.
    fn dispatch(&mut self) {
        while self.held < self.total {
            let next = self
                .queue
                .iter()
                .enumerate()
                .filter(|(_, w)| self.holding(w.mount) < w.cap)
                .min_by_key(|(i, w)| (self.holding(w.mount), *i))
                .map(|(i, _)| i);
            let Some(i) = next else { break };
            let w = self.queue.remove(i).expect("index from the queue");
            self.take(w.mount);
            // The receiver lives as long as its entry is queued (its drop removes the entry
            // under this lock first), so this cannot fail; if it did, the place goes back.
            if w.tx.send(()).is_err() {
                self.give_back(w.mount);
            }
        }
    }
}

impl ConversionBudget {
    /// A budget of `total` conversions at once (at least 1).
    pub fn new(total: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                total: total.max(1),
                held: 0,
                by_mount: HashMap::new(),
                queue: VecDeque::new(),
                next_ticket: 0,
            }),
            next_mount: AtomicU64::new(0),
        })
    }

    /// The process's budget, which the mounts of the configuration file share: one
    /// conversion per core until the binary sets `[server] max_conversions`
    /// ([`ConversionBudget::set_total`]).
    pub fn process() -> &'static Arc<Self> {
        static PROCESS: OnceLock<Arc<ConversionBudget>> = OnceLock::new();
        PROCESS.get_or_init(|| Self::new(crate::config::default_conversions()))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is consistent after every statement that a panic could interrupt.
        mcpr_core::sync::lock(&self.state)
    }

    /// Changes the budget (at least 1). A smaller one takes effect as conversions end.
    pub fn set_total(&self, total: usize) {
        let mut s = self.lock();
        s.total = total.max(1);
        s.dispatch();
    }

    /// The budget.
    pub fn total(&self) -> usize {
        self.lock().total
    }

    /// Conversions holding a place now, in every mount.
    pub fn running(&self) -> usize {
        self.lock().held
    }

    /// Requests waiting for a place now.
    pub fn waiting(&self) -> usize {
        self.lock().queue.len()
    }

    /// A mount's handle on the budget, capped at `cap` places at once.
    pub fn share(self: &Arc<Self>, cap: usize) -> Share {
        Share {
            budget: self.clone(),
            mount: self.next_mount.fetch_add(1, Ordering::Relaxed),
            cap: cap.max(1),
        }
    }
}

/// One mount's part of a [`ConversionBudget`].
pub struct Share {
    budget: Arc<ConversionBudget>,
    mount: u64,
    cap: usize,
}

impl Share {
    /// A place to convert in, once this mount's turn comes. Dropping the future while it
    /// waits (the read timed out, its client went away) leaves the queue, and a place it was
    /// handed meanwhile goes to the next waiter.
    pub async fn acquire(&self) -> Result<Permit> {
        let (ticket, rx) = {
            let mut s = self.budget.lock();
            if s.can_take(self.mount, self.cap) {
                s.take(self.mount);
                return Ok(self.permit());
            }
            let ticket = s.next_ticket;
            s.next_ticket += 1;
            let (tx, rx) = oneshot::channel();
            s.queue.push_back(Waiter {
                ticket,
                mount: self.mount,
                cap: self.cap,
                tx,
            });
            (ticket, rx)
        };
        let mut waiting = Waiting {
            budget: &self.budget,
            mount: self.mount,
            ticket,
            granted: false,
        };
        rx.await
            .map_err(|_| Error::internal("the HTML conversion queue is closed"))?;
        waiting.granted = true;
        Ok(self.permit())
    }

    fn permit(&self) -> Permit {
        Permit {
            budget: self.budget.clone(),
            mount: self.mount,
        }
    }

    /// Conversions of this mount holding a place now.
    pub fn running(&self) -> usize {
        self.budget.lock().holding(self.mount)
    }
}

/// A request in the queue; dropped before it was granted, it leaves the queue, or gives
/// back the place it was handed between the grant and its waking.
struct Waiting<'a> {
    budget: &'a ConversionBudget,
    mount: u64,
    ticket: u64,
    granted: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.granted {
            return;
        }
        let mut s = self.budget.lock();
        if let Some(i) = s.queue.iter().position(|w| w.ticket == self.ticket) {
            s.queue.remove(i);
        } else {
            // Only `dispatch` takes an entry out otherwise, and it took the place for us.
            s.give_back(self.mount);
            s.dispatch();
        }
    }
}

/// A place in the budget, given back when dropped (on the conversion's thread, when the work
/// really ends).
pub struct Permit {
    budget: Arc<ConversionBudget>,
    mount: u64,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut s = self.budget.lock();
        s.give_back(self.mount);
        s.dispatch();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Whether `f` completes within a short while (it is waiting otherwise).
    async fn ready<T>(f: impl std::future::Future<Output = T>) -> Option<T> {
        tokio::time::timeout(Duration::from_millis(50), f)
            .await
            .ok()
    }

    #[tokio::test]
    async fn a_lone_mount_uses_the_whole_budget_and_no_more() {
        let b = ConversionBudget::new(3);
        let a = b.share(10);
        let held: Vec<_> = futures_take(&a, 3).await;
        assert_eq!(b.running(), 3);
        assert!(ready(a.acquire()).await.is_none(), "a fourth waits");
        assert_eq!(b.waiting(), 0, "the dropped wait left the queue");
        drop(held);
        assert_eq!(b.running(), 0);
    }

    #[tokio::test]
    async fn a_mount_own_cap_holds_under_the_budget() {
        let b = ConversionBudget::new(4);
        let a = b.share(2);
        let other = b.share(4);
        let _held = futures_take(&a, 2).await;
        assert!(ready(a.acquire()).await.is_none(), "capped at 2 of 4");
        // The places it may not take are another mount's.
        let _o = futures_take(&other, 2).await;
        assert_eq!(b.running(), 4);
    }

    #[tokio::test]
    async fn a_waiting_mount_gets_the_next_free_place_before_the_busy_one() {
        let b = ConversionBudget::new(2);
        let (a, c) = (b.share(2), b.share(2));
        let mut held = futures_take(&a, 2).await;
        // The busy mount queues first, the other after it: the freed place goes to the
        // mount holding none all the same.
        let a_more = a.acquire();
        let c_one = c.acquire();
        tokio::pin!(a_more, c_one);
        assert!(ready(&mut a_more).await.is_none());
        assert!(ready(&mut c_one).await.is_none());
        held.pop();
        let _pc = ready(&mut c_one)
            .await
            .expect("the idle mount's request starts")
            .unwrap();
        assert!(ready(&mut a_more).await.is_none(), "the busy mount waits");
        assert_eq!((a.running(), c.running()), (1, 1));
        held.pop();
        let _pa = ready(&mut a_more)
            .await
            .expect("then the busy mount, holding fewer")
            .unwrap();
        assert_eq!((a.running(), c.running(), b.waiting()), (1, 1, 0));
    }

    #[tokio::test]
    async fn places_even_out_between_busy_mounts() {
        let b = ConversionBudget::new(4);
        let (a, c) = (b.share(4), b.share(4));
        let mut held = futures_take(&a, 4).await;
        let mut waits_a: Vec<_> = (0..4).map(|_| Box::pin(a.acquire())).collect();
        let mut waits_c: Vec<_> = (0..4).map(|_| Box::pin(c.acquire())).collect();
        for w in waits_a.iter_mut().chain(waits_c.iter_mut()) {
            assert!(ready(w).await.is_none());
        }
        let mut got_c = Vec::new();
        // Two of the first mount's conversions end: both places go to the other mount.
        for _ in 0..2 {
            held.pop();
            let w = waits_c.remove(0);
            got_c.push(ready(w).await.expect("to the mount holding fewer").unwrap());
        }
        assert_eq!((a.running(), c.running()), (2, 2));
        // The next end is the first mount's again, which now holds fewer: its oldest waiter.
        held.pop();
        let _p = ready(waits_a.remove(0))
            .await
            .expect("to the mount holding fewer")
            .unwrap();
        assert_eq!((a.running(), c.running(), b.running()), (2, 2, 4));
    }

    #[tokio::test]
    async fn a_place_handed_to_a_request_dropped_before_waking_goes_on() {
        let b = ConversionBudget::new(1);
        let (a, c) = (b.share(1), b.share(1));
        let held = a.acquire().await.unwrap();
        let mut first = Box::pin(c.acquire());
        assert!(ready(&mut first).await.is_none());
        let mut second = Box::pin(a.acquire());
        assert!(ready(&mut second).await.is_none());
        // The place is handed to `first` now, which is dropped without polling again.
        drop(held);
        assert_eq!(b.running(), 1);
        drop(first);
        let _p = ready(second).await.expect("passed on").unwrap();
        assert_eq!((a.running(), c.running(), b.waiting()), (1, 0, 0));
    }

    #[tokio::test]
    async fn a_smaller_budget_takes_effect_as_conversions_end() {
        let b = ConversionBudget::new(3);
        let a = b.share(3);
        let mut held = futures_take(&a, 3).await;
        b.set_total(1);
        held.pop();
        assert!(ready(a.acquire()).await.is_none(), "2 held, budget 1");
        held.clear();
        let _p = ready(a.acquire()).await.unwrap().unwrap();
        b.set_total(0);
        assert_eq!(b.total(), 1, "never below one");
    }

    async fn futures_take(s: &Share, n: usize) -> Vec<Permit> {
        let mut v = Vec::new();
        for _ in 0..n {
            v.push(ready(s.acquire()).await.expect("a free place").unwrap());
        }
        v
    }
}
