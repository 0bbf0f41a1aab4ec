//! The per-mount response cache: a moka cache weighted by bytes, and the HTTP freshness
//! rules (`Cache-Control` max-age, s-maxage, no-store, no-cache, private; `Expires`; `Age`)
//! that decide how long an entry may be served without asking the upstream again.
//!
//! The mount is a shared cache in front of many clients, so `s-maxage` wins over `max-age`.
//! `private` answers are still kept: every client of the mount gets the same upstream
//! identity (the mount's headers), so the answer is not more private to one of them than to
//! another; the result is marked `cacheScope: private` instead, so clients do not share it.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use http::HeaderMap;
use http::header::{AGE, CACHE_CONTROL, DATE, ETAG, EXPIRES, LAST_MODIFIED};

/// What the upstream said about caching one response.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Policy {
    /// Do not keep it at all.
    pub(crate) no_store: bool,
    /// Keep it, but revalidate before every use.
    pub(crate) no_cache: bool,
    /// Only the asking client may keep it.
    pub(crate) private: bool,
    /// How long it is fresh from now; `None`: no freshness headers.
    pub(crate) lifetime: Option<Duration>,
}

impl Policy {
    /// Read the caching headers of a response.
    pub(crate) fn of(headers: &HeaderMap) -> Self {
        let mut p = Policy::default();
        let mut max_age = None;
        let mut s_maxage = None;
        for v in headers.get_all(CACHE_CONTROL) {
            let Ok(v) = v.to_str() else { continue };
            for d in v.split(',') {
                let d = d.trim();
                let (name, arg) = match d.split_once('=') {
                    Some((n, a)) => (n.trim(), Some(a.trim().trim_matches('"'))),
                    None => (d, None),
                };
                let secs = || arg.and_then(|a| a.parse::<u64>().ok());
                match name.to_ascii_lowercase().as_str() {
                    "no-store" => p.no_store = true,
                    "no-cache" => p.no_cache = true,
                    "private" => p.private = true,
                    "max-age" => max_age = secs().or(Some(0)),
                    "s-maxage" => s_maxage = secs().or(Some(0)),
                    _ => {}
                }
            }
        }
        let age = headers
            .get(AGE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
        p.lifetime = match s_maxage.or(max_age) {
            Some(s) => Some(Duration::from_secs(s.saturating_sub(age))),
            None => expires(headers),
        };
        p
    }

    /// How long the response is fresh: its own lifetime, `default_ttl` without one, zero for
    /// `no-cache`.
    pub(crate) fn freshness(&self, default_ttl: Duration) -> Duration {
        if self.no_cache || self.no_store {
            Duration::ZERO
        } else {
            self.lifetime.unwrap_or(default_ttl)
        }
    }
}

/// `Expires` relative to the response's `Date` (or now); an unparseable `Expires` means
/// "already expired", as RFC 9111 §5.3 says.
fn expires(headers: &HeaderMap) -> Option<Duration> {
    let exp = headers.get(EXPIRES)?;
    let Some(exp) = exp
        .to_str()
        .ok()
        .and_then(|s| httpdate::parse_http_date(s).ok())
    else {
        return Some(Duration::ZERO);
    };
    let date = headers
        .get(DATE)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| httpdate::parse_http_date(s).ok())
        .unwrap_or_else(SystemTime::now);
    Some(exp.duration_since(date).unwrap_or(Duration::ZERO))
}

/// The validators of a response, for conditional requests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Validators {
    pub(crate) etag: Option<String>,
    pub(crate) last_modified: Option<String>,
}

impl Validators {
    pub(crate) fn of(headers: &HeaderMap) -> Self {
        let get = |h| {
            headers
                .get(h)
                .and_then(|v: &http::HeaderValue| v.to_str().ok())
                .map(str::to_owned)
        };
        Self {
            etag: get(ETAG),
            last_modified: get(LAST_MODIFIED),
        }
    }

    pub(crate) fn any(&self) -> bool {
        self.etag.is_some() || self.last_modified.is_some()
    }
}

/// One cached response, as served (after HTML conversion).
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) body: Arc<Body>,
    pub(crate) validators: Validators,
    pub(crate) private: bool,
    /// Fresh until then; in the past: revalidate (or fetch) before use.
    pub(crate) fresh_until: Instant,
}

/// A response body as served.
#[derive(Debug, PartialEq)]
pub(crate) struct Body {
    pub(crate) mime_type: Option<String>,
    pub(crate) content: mcpr_core::ContentsBody,
}

impl Body {
    pub(crate) fn len(&self) -> u64 {
        match &self.content {
            mcpr_core::ContentsBody::Text(t) => t.len() as u64,
            mcpr_core::ContentsBody::Blob(b) => b.len() as u64,
        }
    }

    /// A hash of what is served, for change detection.
    pub(crate) fn hash(&self) -> [u8; 32] {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        h.update(self.mime_type.as_deref().unwrap_or_default().as_bytes());
        h.update([0]);
        match &self.content {
            mcpr_core::ContentsBody::Text(t) => h.update(t.as_bytes()),
            mcpr_core::ContentsBody::Blob(b) => h.update(b),
        }
        h.finalize().into()
    }
}

impl Entry {
    pub(crate) fn remaining(&self) -> Duration {
        self.fresh_until.saturating_duration_since(Instant::now())
    }
}

/// Cache counters, exported for metrics.
#[derive(Debug, Default)]
pub struct CacheStats {
    hits: AtomicU64,
    misses: AtomicU64,
    revalidations: AtomicU64,
}

/// A snapshot of [`CacheStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheCounts {
    /// Reads served from a fresh entry without asking the upstream.
    pub hits: u64,
    /// Reads that fetched the whole response.
    pub misses: u64,
    /// Conditional requests the upstream answered 304 Not Modified.
    pub revalidations: u64,
}

impl CacheStats {
    pub(crate) fn hit(&self) {
        self.hits.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn miss(&self) {
        self.misses.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn revalidated(&self) {
        self.revalidations.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn counts(&self) -> CacheCounts {
        CacheCounts {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            revalidations: self.revalidations.load(Ordering::Relaxed),
        }
    }
}

/// The mount's cache: upstream URL (as requested first) → entry, bounded by bytes.
/// Reads of one URI that miss the cache together: the first fetches and the others wait for
/// it, then look in the cache again. A cold cache in front of many agents asking for the
/// same document sends one request upstream, not one per agent.
#[derive(Default)]
pub(crate) struct Flights(std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>);

/// The one fetch of a URI in flight; dropping it (done, failed or cancelled) lets the
/// readers waiting on it go on.
pub(crate) struct Lead<'a> {
    flights: &'a Flights,
    uri: String,
    _guard: tokio::sync::OwnedMutexGuard<()>,
}

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        mcpr_core::sync::lock(&self.flights.0).remove(&self.uri);
    }
}

impl Flights {
    /// `Some` for the first reader of `uri`, which then fetches; `None`, once the first
    /// reader is done, for a reader that arrived while it was fetching.
    pub(crate) async fn join(&self, uri: &str) -> Option<Lead<'_>> {
        let lock = {
            let mut map = mcpr_core::sync::lock(&self.0);
            match map.get(uri) {
                Some(lock) => lock.clone(),
                None => {
                    let lock = Arc::new(tokio::sync::Mutex::new(()));
                    map.insert(uri.to_owned(), lock.clone());
                    let guard = lock.try_lock_owned().expect("a new lock is free");
                    return Some(Lead {
                        flights: self,
                        uri: uri.to_owned(),
                        _guard: guard,
                    });
                }
            }
        };
        // Only the wait matters: a reader that still finds nothing cached (an uncacheable
        // answer, or a failed fetch) fetches for itself rather than one after another.
        drop(lock.lock().await);
        None
    }
}

pub(crate) type Store = moka::sync::Cache<String, Entry>;

/// A cache holding at most `max_bytes` of bodies (and keys).
pub(crate) fn store(max_bytes: u64) -> Store {
    moka::sync::Cache::builder()
        .max_capacity(max_bytes)
        .weigher(|k: &String, e: &Entry| {
            let w = k.len() as u64 + e.body.len() + 64;
            u32::try_from(w).unwrap_or(u32::MAX)
        })
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn freshness_rules() {
        let d = Duration::from_secs(5);
        let p = Policy::of(&headers(&[("cache-control", "public, max-age=60")]));
        assert_eq!(p.freshness(d), Duration::from_secs(60));
        let p = Policy::of(&headers(&[("cache-control", "max-age=60, s-maxage=10")]));
        assert_eq!(p.freshness(d), Duration::from_secs(10));
        let p = Policy::of(&headers(&[("cache-control", "max-age=60"), ("age", "50")]));
        assert_eq!(p.freshness(d), Duration::from_secs(10));
        let p = Policy::of(&headers(&[("cache-control", "no-store")]));
        assert!(p.no_store);
        assert_eq!(p.freshness(d), Duration::ZERO);
        let p = Policy::of(&headers(&[("cache-control", "no-cache, max-age=60")]));
        assert_eq!(p.freshness(d), Duration::ZERO);
        let p = Policy::of(&headers(&[("cache-control", "private, max-age=3")]));
        assert!(p.private);
        assert_eq!(p.freshness(d), Duration::from_secs(3));
        let p = Policy::of(&headers(&[]));
        assert_eq!(p.freshness(d), d);
        let p = Policy::of(&headers(&[
            ("date", "Sun, 06 Nov 1994 08:49:37 GMT"),
            ("expires", "Sun, 06 Nov 1994 08:50:37 GMT"),
        ]));
        assert_eq!(p.freshness(d), Duration::from_secs(60));
        let p = Policy::of(&headers(&[("expires", "0")]));
        assert_eq!(p.freshness(d), Duration::ZERO);
    }
}
