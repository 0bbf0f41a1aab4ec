//! Reads in place that hang: the one policy both transports apply to them.
//!
//! A read in place ([`crate::service::Service::read_now`]) is a plain call with no timer:
//! nothing can interrupt it once it runs. Both transports run it on a thread a watchdog
//! looks at every [`tick`]: the HTTP direct path on reader threads of its own
//! (`http/in_place.rs`; a read it runs on a spare runtime worker instead holds that worker's
//! slot, so the spares bound those), the stdio transport on the thread that reads stdin
//! (`stdio/reader.rs`). A thread in one read for longer than [`slow_after`] is replaced: a
//! new thread takes its place at once, so what was queued behind the read (other requests,
//! and over stdio every ping and cancellation) goes on, and the stuck thread ends once its
//! read returns. The stuck read's request gets its answer if the read ends within the
//! request timeout, else the timeout error at the timeout, as a read on the bounded path
//! does. Replaced threads whose read has not returned are counted ([`Stuck`]); past
//! [`MAX_STUCK`] of them no read is taken in place any more: reads go the bounded path (a
//! task and a timer, which cannot hold a thread) until some return. So a stuck `stat`
//! costs its own request and a parked thread (or an HTTP spare worker), never a worker the
//! runtime needs or the stdin reader, and the threads a client can park are bounded.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Threads stuck in a read (replaced, not returned) past which reads are no longer taken in
/// place.
pub(crate) const MAX_STUCK: usize = 32;

/// How long a thread may be in one read before another takes its place: a read in place is
/// meant to take microseconds (a small file on a local disk), so this is far above an
/// honest one even on a loaded machine, and well below the request timeout, so that what is
/// queued behind a stuck read waits little.
pub(crate) fn slow_after(request_timeout: Duration) -> Duration {
    (request_timeout / 4).clamp(Duration::from_millis(5), Duration::from_millis(100))
}

/// How often a watchdog looks: a quarter of [`slow_after`], so a stuck thread is replaced at
/// most a quarter later than that (a thread asleep costs nothing meanwhile).
pub(crate) fn tick(slow_after: Duration) -> Duration {
    slow_after / 4
}

/// The threads a watchdog replaced while in a read that has not returned yet.
#[derive(Default)]
pub(crate) struct Stuck(AtomicUsize);

impl Stuck {
    /// Whether reads are taken in place now: not while [`MAX_STUCK`] threads are stuck.
    pub(crate) fn accepting(&self) -> bool {
        self.0.load(Ordering::Relaxed) < MAX_STUCK
    }

    /// A thread was replaced in a read. Counted before its replacement starts, so that
    /// [`Stuck::accepting`] refuses as soon as the cap is reached.
    pub(crate) fn replaced(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// A replaced thread's read returned.
    pub(crate) fn returned(&self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }

    /// How many are stuck now.
    #[cfg(test)]
    pub(crate) fn count(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    /// Sets the count (the tests of the cap).
    #[cfg(test)]
    pub(crate) fn set(&self, n: usize) {
        self.0.store(n, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stuck_read_is_replaced_within_a_tenth_of_a_second_whatever_the_timeout() {
        let ms = Duration::from_millis;
        assert_eq!(slow_after(Duration::from_secs(30)), ms(100));
        assert_eq!(slow_after(ms(300)), ms(75));
        assert_eq!(slow_after(ms(1)), ms(5));
        assert_eq!(tick(ms(100)), ms(25));
        let stuck = Stuck::default();
        for _ in 0..MAX_STUCK - 1 {
            stuck.replaced();
        }
        assert!(stuck.accepting());
        stuck.replaced();
        assert!(!stuck.accepting());
        stuck.returned();
        assert!(stuck.accepting());
        assert_eq!(stuck.count(), MAX_STUCK - 1);
    }
}
