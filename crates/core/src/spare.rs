//! Large buffers handed back by one read for the next, so a large read does not pay for
//! allocating and faulting in its buffer each time.
//!
//! With jemalloc (the binary's allocator) an allocation of 8 MiB or more comes from an arena
//! that returns its pages to the system the moment it is freed, and smaller large buffers
//! that coalesce past 8 MiB go the same way; so each such buffer is faulted in again, a page
//! at a time, every time it is made. An 8 MiB blob read makes two (the file's bytes and the
//! 11 MB answer): about 4,800 page faults and 16 ms of CPU per read on the benchmark VM, more
//! than the rest of the read. Readers take their large buffers here ([`buffer`]) and hand
//! them back when done ([`give_back`]), and the next read takes them with their pages.
//!
//! What is kept is bounded: at most [`MAX_KEPT`] buffers and [`MAX_KEPT_BYTES`] together,
//! each for [`KEEP_FOR`] after it was handed back; then it is freed (its pages go
//! back to the system), so a server that has stopped reading large files holds none, and one
//! that never read one never held any.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

/// Buffers smaller than this are left to the allocator, which keeps their pages itself.
pub const MIN_BYTES: usize = 1 << 20;
/// The most buffers kept at once: a read's file bytes and its answer, twice.
pub const MAX_KEPT: usize = 4;
/// The most bytes kept at once: a 16 MiB read's bytes and answer (22 MB) fit, twice over.
pub const MAX_KEPT_BYTES: usize = 48 << 20;
/// How long a buffer is kept after it was handed back: as long as jemalloc keeps the freed
/// pages of smaller allocations (its default `dirty_decay_ms`). With 1 s, a client that read
/// a big file every second or two paid the page faults of fresh buffers on every read: in
/// the benchmark, whose blob rounds alternate with the floor's for about 2 s each, the first
/// 8 MiB read of every round took 14 ms more, which was the whole of the p99 row's excess.
pub const KEEP_FOR: Duration = Duration::from_secs(10);

struct Kept {
    /// Handed back when, and the buffer; oldest first.
    bufs: Vec<(Instant, Vec<u8>)>,
    /// Whether a task is on its way to free what has been kept too long.
    reaper: bool,
}

static KEPT: Mutex<Kept> = Mutex::new(Kept {
    bufs: Vec::new(),
    reaper: false,
});

fn kept() -> MutexGuard<'static, Kept> {
    crate::sync::lock(&KEPT)
}

/// An empty buffer with room for at least `capacity` bytes: the smallest kept one that is
/// large enough, else a new one.
pub fn buffer(capacity: usize) -> Vec<u8> {
    if capacity >= MIN_BYTES {
        let mut k = kept();
        let fit = k
            .bufs
            .iter()
            .enumerate()
            .filter(|(_, (_, b))| b.capacity() >= capacity)
            .min_by_key(|(_, (_, b))| b.capacity())
            .map(|(i, _)| i);
        if let Some(i) = fit {
            return k.bufs.remove(i).1;
        }
    }
    Vec::with_capacity(capacity)
}

/// Hand `buf` back for the next read; its contents are dropped. A buffer too small or too
/// large to keep is freed, and so is one handed back outside a Tokio runtime (nothing would
/// free it later).
pub fn give_back(mut buf: Vec<u8>) {
    let size = buf.capacity();
    if !(MIN_BYTES..=MAX_KEPT_BYTES).contains(&size) {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    buf.clear();
    let mut freed = Vec::new();
    let mut k = kept();
    k.bufs.push((Instant::now(), buf));
    while k.bufs.len() > MAX_KEPT
        || k.bufs.iter().map(|(_, b)| b.capacity()).sum::<usize>() > MAX_KEPT_BYTES
    {
        freed.push(k.bufs.remove(0));
    }
    let start = !std::mem::replace(&mut k.reaper, true);
    drop(k);
    drop(freed);
    if start {
        runtime.spawn(reap(Reaping));
    }
}

/// The reaper's flag, cleared if its task is dropped before it ends (its runtime shutting
/// down, perhaps before the first poll), so the next buffer handed back starts a new one.
/// Made before the task is spawned and moved into it.
struct Reaping;

impl Drop for Reaping {
    fn drop(&mut self) {
        kept().reaper = false;
    }
}

/// Frees each buffer once it has been kept for [`KEEP_FOR`], until nothing is kept.
async fn reap(reaping: Reaping) {
    loop {
        // The oldest buffer is due first.
        let due = {
            let mut k = kept();
            match k.bufs.first() {
                Some((at, _)) => *at + KEEP_FOR,
                None => {
                    // Under the lock that `give_back` checks the flag with, so a buffer
                    // handed back now starts a new task.
                    k.reaper = false;
                    drop(k);
                    std::mem::forget(reaping);
                    return;
                }
            }
        };
        tokio::time::sleep_until(due).await;
        let mut k = kept();
        let now = Instant::now();
        let stale = k
            .bufs
            .iter()
            .take_while(|(at, _)| now.duration_since(*at) >= KEEP_FOR)
            .count();
        let freed: Vec<_> = k.bufs.drain(..stale).collect();
        drop(k);
        drop(freed);
    }
}

/// The buffers kept now and their total capacity (for tests and diagnostics).
pub fn kept_now() -> (usize, usize) {
    let k = kept();
    (k.bufs.len(), k.bufs.iter().map(|(_, b)| b.capacity()).sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test: the list is process-wide.
    #[tokio::test(start_paused = true)]
    async fn buffers_come_back_bounded_and_go_after_a_while() {
        // Small and outsized buffers are never kept.
        give_back(Vec::with_capacity(MIN_BYTES - 1));
        give_back(Vec::with_capacity(MAX_KEPT_BYTES + 1));
        assert_eq!(kept_now().0, 0);
        // A buffer handed back is taken again, pages and all (the same allocation).
        let mut a = buffer(2 * MIN_BYTES);
        a.extend_from_slice(&[7; 100]);
        let at = a.as_ptr();
        give_back(a);
        assert_eq!(kept_now(), (1, 2 * MIN_BYTES));
        let b = buffer(MIN_BYTES);
        assert_eq!(b.as_ptr(), at);
        assert!(b.is_empty() && b.capacity() >= 2 * MIN_BYTES);
        // Too small for the request: a new buffer, and the kept one stays.
        give_back(b);
        let c = buffer(3 * MIN_BYTES);
        assert_ne!(c.as_ptr(), at);
        assert_eq!(kept_now().0, 1);
        // At most MAX_KEPT, the oldest going first.
        for _ in 0..MAX_KEPT {
            give_back(Vec::with_capacity(MIN_BYTES));
        }
        assert_eq!(kept_now(), (MAX_KEPT, MAX_KEPT * MIN_BYTES));
        drop(c);
        // Each is freed once kept for KEEP_FOR, not later: kept a moment before, gone a
        // moment after.
        tokio::time::sleep(KEEP_FOR - Duration::from_millis(10)).await;
        assert_eq!(kept_now().0, MAX_KEPT);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(kept_now(), (0, 0));
        // A buffer handed back after the list went empty is freed in turn (a new task).
        give_back(Vec::with_capacity(MIN_BYTES));
        assert_eq!(kept_now().0, 1);
        tokio::time::sleep(KEEP_FOR + Duration::from_millis(10)).await;
        assert_eq!(kept_now(), (0, 0));
        // One handed back while another is kept goes at its own time, not the other's
        // next turn.
        give_back(Vec::with_capacity(MIN_BYTES));
        tokio::time::sleep(KEEP_FOR / 2).await;
        give_back(Vec::with_capacity(2 * MIN_BYTES));
        tokio::time::sleep(KEEP_FOR / 2 + Duration::from_millis(10)).await;
        assert_eq!(kept_now(), (1, 2 * MIN_BYTES));
        tokio::time::sleep(KEEP_FOR / 2).await;
        assert_eq!(kept_now(), (0, 0));
    }
}
