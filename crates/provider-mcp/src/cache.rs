//! The mount's read cache, on when `ttl_ms > 0`: answers of `resources/read` kept in a moka
//! cache bounded by bytes (`cache_max_bytes`), keyed by the upstream URI as asked (a window's
//! query included, so each window is its own entry), each for the answer's own freshness
//! (the mount's `ttl_ms`, shortened by the upstream's `ttlMs`). A `cacheScope: private`
//! answer is never kept.
//!
//! An upstream `updated` for a URI drops its entries (every window of it too); a
//! `list_changed`, a lost connection and a new one drop everything. A read that was under
//! way when its URI was dropped must not store the older answer it then gets: every read
//! and every drop takes a number from one sequence, and an entry is served only when no drop
//! of its URI (or of everything) came after its read began.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mcpr_core::sync::lock;
use mcpr_core::{Contents, ContentsBody};

/// The most URIs whose drop is remembered; past it (a flood of notices for distinct URIs)
/// everything is dropped instead, which keeps the memory bounded and is always correct.
const MAX_DROPS: usize = 4096;

/// One kept answer.
struct Entry {
    contents: Vec<Contents>,
    /// The sequence number taken when its read began.
    stamp: u64,
    fresh_until: Instant,
    /// Its content bytes, as a read limit counts them.
    bytes: u64,
}

/// What was dropped, and when in the sequence.
#[derive(Default)]
struct Drops {
    /// The number of the last drop of everything.
    all: u64,
    /// By URI without query or fragment: the number and the time of its last drop.
    uris: HashMap<String, (u64, Instant)>,
}

/// A hit: the contents, how long they are still fresh, and their bytes.
pub(crate) struct Hit {
    pub(crate) contents: Vec<Contents>,
    pub(crate) remaining: Duration,
    pub(crate) bytes: u64,
}

/// A read under way, from [`ReadCache::begin`].
pub(crate) struct Ticket {
    stamp: u64,
    began: Instant,
}

pub(crate) struct ReadCache {
    store: moka::sync::Cache<String, Arc<Entry>>,
    seq: AtomicU64,
    drops: Mutex<Drops>,
    /// How long a drop must be remembered: a read begun before it stores its answer within
    /// `late` of beginning (or not at all), and that answer lives at most the mount's TTL.
    late: Duration,
    remember: Duration,
    pub(crate) hits: AtomicU64,
    pub(crate) misses: AtomicU64,
}

/// The URI an `updated` notice names for `uri`: without query (window parameters) or
/// fragment.
fn base(uri: &str) -> &str {
    uri.split(['?', '#']).next().unwrap_or(uri)
}

/// The content bytes of `contents`, as the read limit counts them.
pub(crate) fn content_bytes(contents: &[Contents]) -> u64 {
    contents
        .iter()
        .map(|c| match &c.body {
            ContentsBody::Text(t) => t.len() as u64,
            ContentsBody::Blob(b) => b.len() as u64,
        })
        .sum()
}

impl ReadCache {
    /// A cache of at most `max_bytes`, whose entries live at most `ttl`, for reads that take
    /// at most `timeout`.
    pub(crate) fn new(max_bytes: u64, ttl: Duration, timeout: Duration) -> Self {
        let store = moka::sync::Cache::builder()
            .max_capacity(max_bytes)
            .weigher(|k: &String, e: &Arc<Entry>| {
                // Keys, URIs and MIME types count too, and a little for the bookkeeping.
                let meta: u64 = e
                    .contents
                    .iter()
                    .map(|c| {
                        c.uri.len() as u64 + c.mime_type.as_ref().map_or(0, |m| m.len() as u64) + 64
                    })
                    .sum();
                u32::try_from(k.len() as u64 + e.bytes + meta + 128).unwrap_or(u32::MAX)
            })
            .expire_after(Freshness)
            .build();
        let late = timeout + Duration::from_secs(5);
        Self {
            store,
            seq: AtomicU64::new(0),
            drops: Mutex::default(),
            late,
            remember: late + ttl,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    fn next(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Whether a drop came after the read numbered `stamp` of `key` began.
    fn dropped_since(&self, key: &str, stamp: u64) -> bool {
        let d = lock(&self.drops);
        stamp <= d.all || d.uris.get(base(key)).is_some_and(|(s, _)| *s > stamp)
    }

    /// The fresh entry of `key`, if there is one.
    pub(crate) fn get(&self, key: &str) -> Option<Hit> {
        let e = self.store.get(key)?;
        let remaining = e.fresh_until.saturating_duration_since(Instant::now());
        if remaining.is_zero() || self.dropped_since(key, e.stamp) {
            self.store.invalidate(key);
            return None;
        }
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some(Hit {
            contents: e.contents.clone(),
            remaining,
            bytes: e.bytes,
        })
    }

    /// A read of the upstream begins (the cache had nothing fresh).
    pub(crate) fn begin(&self) -> Ticket {
        self.misses.fetch_add(1, Ordering::Relaxed);
        Ticket {
            stamp: self.next(),
            began: Instant::now(),
        }
    }

    /// Keep the answer of the read `ticket` of `key` for `ttl`, unless its URI was dropped
    /// while it was read (it may be older than the change), or it took too long to tell.
    pub(crate) fn put(&self, key: &str, ticket: Ticket, contents: &[Contents], ttl: Duration) {
        if ttl.is_zero()
            || ticket.began.elapsed() > self.late
            || self.dropped_since(key, ticket.stamp)
        {
            return;
        }
        let entry = Entry {
            contents: contents.to_vec(),
            stamp: ticket.stamp,
            fresh_until: Instant::now() + ttl,
            bytes: content_bytes(contents),
        };
        self.store.insert(key.to_owned(), Arc::new(entry));
    }

    /// The upstream says `uri` changed: its entries go, every window of it included.
    pub(crate) fn drop_uri(&self, uri: &str) {
        let stamp = self.next();
        let now = Instant::now();
        let all = {
            let mut d = lock(&self.drops);
            d.uris.insert(base(uri).to_owned(), (stamp, now));
            if d.uris.len() > MAX_DROPS {
                let remember = self.remember;
                d.uris
                    .retain(|_, (_, at)| now.duration_since(*at) < remember);
            }
            if d.uris.len() > MAX_DROPS {
                d.all = stamp;
                d.uris.clear();
                true
            } else {
                false
            }
        };
        if all {
            self.store.invalidate_all();
        } else {
            // The whole read goes now; windows go when next looked up.
            self.store.invalidate(base(uri));
            self.store.invalidate(uri);
        }
    }

    /// Everything goes (the list changed, or the connection was lost or made again).
    pub(crate) fn drop_all(&self) {
        let stamp = self.next();
        {
            let mut d = lock(&self.drops);
            d.all = stamp;
            d.uris.clear();
        }
        self.store.invalidate_all();
    }
}

/// Each entry lives for its own freshness.
struct Freshness;

impl moka::Expiry<String, Arc<Entry>> for Freshness {
    fn expire_after_create(
        &self,
        _key: &String,
        value: &Arc<Entry>,
        created_at: Instant,
    ) -> Option<Duration> {
        Some(value.fresh_until.saturating_duration_since(created_at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(uri: &str, t: &str) -> Vec<Contents> {
        vec![Contents {
            uri: uri.to_owned(),
            mime_type: None,
            body: ContentsBody::Text(t.to_owned()),
            meta: None,
        }]
    }

    fn cache() -> ReadCache {
        ReadCache::new(1 << 20, Duration::from_secs(60), Duration::from_secs(5))
    }

    fn body(h: &Hit) -> &str {
        match &h.contents[0].body {
            ContentsBody::Text(t) => t,
            ContentsBody::Blob(_) => unreachable!("text"),
        }
    }

    #[test]
    fn kept_until_dropped_with_every_window() {
        let c = cache();
        let ttl = Duration::from_secs(60);
        for key in ["x://a", "x://a?head=1", "x://b"] {
            let t = c.begin();
            c.put(key, t, &text(key, key), ttl);
        }
        assert_eq!(body(&c.get("x://a?head=1").unwrap()), "x://a?head=1");
        assert_eq!(c.hits.load(Ordering::Relaxed), 1);
        c.drop_uri("x://a");
        assert!(c.get("x://a").is_none());
        assert!(c.get("x://a?head=1").is_none(), "a window of it too");
        assert!(c.get("x://b").is_some(), "another URI stays");
        c.drop_all();
        assert!(c.get("x://b").is_none());
    }

    #[test]
    fn a_read_that_crossed_a_drop_is_not_kept() {
        let c = cache();
        let ttl = Duration::from_secs(60);
        let t = c.begin();
        c.drop_uri("x://a");
        c.put("x://a", t, &text("x://a", "old"), ttl);
        assert!(c.get("x://a").is_none());
        let t = c.begin();
        c.drop_all();
        c.put("x://a", t, &text("x://a", "old"), ttl);
        assert!(c.get("x://a").is_none());
        // A read begun after the drop is kept.
        let t = c.begin();
        c.put("x://a", t, &text("x://a", "new"), ttl);
        assert_eq!(body(&c.get("x://a").unwrap()), "new");
    }

    #[test]
    fn entries_expire_and_no_ttl_keeps_nothing() {
        let c = cache();
        let t = c.begin();
        c.put("x://a", t, &text("x://a", "a"), Duration::from_millis(30));
        assert!(c.get("x://a").unwrap().remaining <= Duration::from_millis(30));
        std::thread::sleep(Duration::from_millis(40));
        assert!(c.get("x://a").is_none());
        let t = c.begin();
        c.put("x://a", t, &text("x://a", "a"), Duration::ZERO);
        assert!(c.get("x://a").is_none());
    }

    #[test]
    fn bounded_in_bytes() {
        let c = ReadCache::new(64 << 10, Duration::from_secs(60), Duration::from_secs(5));
        let big = "b".repeat(10 << 10);
        for i in 0..50 {
            let key = format!("x://{i}");
            let t = c.begin();
            c.put(&key, t, &text(&key, &big), Duration::from_secs(60));
        }
        c.store.run_pending_tasks();
        assert!(
            c.store.weighted_size() <= 64 << 10,
            "{}",
            c.store.weighted_size()
        );
        assert!(c.store.entry_count() < 10);
    }

    #[test]
    fn a_flood_of_drops_stays_bounded() {
        let c = cache();
        let t = c.begin();
        c.put(
            "x://keep",
            t,
            &text("x://keep", "k"),
            Duration::from_secs(60),
        );
        for i in 0..(MAX_DROPS + 10) {
            c.drop_uri(&format!("x://n{i}"));
        }
        assert!(lock(&c.drops).uris.len() <= MAX_DROPS);
        assert!(
            c.get("x://keep").is_none(),
            "past the bound everything goes"
        );
    }
}
