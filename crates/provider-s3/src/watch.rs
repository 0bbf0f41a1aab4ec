//! Change detection for `s3://` subscriptions, on core's poll-and-compare watcher
//! ([`mcpr_core::poll`]): S3 sends no events a server can receive without extra
//! infrastructure, so every `poll_interval_ms` (with 10 % jitter) each subscribed key gets a
//! `HEAD` (`If-None-Match` with the last ETag, so an unchanged object costs a 304) and a new
//! ETag, or a deletion, is `resources/updated`; while anyone wants `list_changed`, the keys
//! under the mount's prefix are listed and a key appearing or going is `list_changed`.
//!
//! The core [`Poller`] makes one check per object however many URIs and subscribers: every
//! URI of one key (the object itself, `?head=1`, `?head=2`, `?tail=…` windows, other
//! percent-encodings of the same key) has the key as its [`PollKey`], so it is one HEAD per
//! interval that notifies each of those URIs. A URI of an object already polled joins it
//! without a first look of its own. The poller stops with the last subscriber, and treats a
//! failed check (the store down) as "could not look", not a change: it keeps the last
//! fingerprint and retries with backoff, so recovery notifies only what really changed
//! meanwhile. What a subscribed object's poll last saw is also its change token
//! ([`Watches::token`]), so a token costs no request.
//!
//! Cost: a subscribed object is one HEAD per interval. A watched listing is one list request
//! per 1,000 keys per interval, bounded at [`LIST_WATCH_MAX_PAGES`] requests (100,000 keys):
//! in a bigger bucket (or prefix) keys beyond the first 100,000 in key order are not watched
//! (a warning says so once). Whatever is subscribed, the mount's checks are capped at
//! `max_poll_requests_per_second` (core's rate limit: checks over it wait their turn and are
//! counted in `mcp_poll_throttled_total`); a listing check counts as one, however many pages.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use mcpr_core::poll::{PollConfig, PollKey, PollSource, Poller, Watched, token_digest};
use mcpr_core::{ChangeSink, Counter, Error, ResourceUri, Result, WatchGuard};
use object_store::{GetOptions, ObjectStore as _};

use crate::list::STORE_PAGE_MAX;
use crate::provider::Inner;
use crate::read::object_path;
use crate::uri::Target;

/// How long a subscription waits for its first look at the store.
pub const FIRST_LOOK_TIMEOUT: Duration = Duration::from_secs(3);

/// The most list requests one check of a watched listing makes.
pub const LIST_WATCH_MAX_PAGES: usize = 100;

/// What a check saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seen {
    /// An object's ETag (size and time when the store gives none); `None`: no such object.
    Object(Option<String>),
    /// A hash of the keys listed.
    List(u64),
}

/// The watched keys and listings of one mount.
pub(crate) struct Watches {
    /// The poller holds the source weakly; this keeps it as long as the mount lives.
    source: Arc<S3Source>,
    poller: Poller<S3Source>,
}

struct S3Source {
    /// Weak: the mount owns its watches, not the other way round.
    inner: Weak<Inner>,
    /// Whether the "listing too big to watch whole" warning was given.
    warned: AtomicBool,
}

impl Watches {
    pub(crate) fn new(label: &str, inner: Weak<Inner>, poll: Duration, max_rate: u32) -> Self {
        let source = Arc::new(S3Source {
            inner,
            warned: AtomicBool::new(false),
        });
        let config = PollConfig::every(poll).with_max_checks_per_second(max_rate);
        let poller = Poller::new(label, Arc::downgrade(&source), config);
        Self { source, poller }
    }

    /// Watch the object `key` (at `uri`). Its state now is the starting point, so a change
    /// from here on is reported (when the store is down now, the first answer is one); an
    /// object already polled for another URI (another window of it) starts from what that
    /// poll saw, without a request.
    pub(crate) async fn add_object(&self, uri: ResourceUri, sink: ChangeSink) -> WatchGuard {
        let key = Watched::Resource(uri);
        if let Some(guard) = self.poller.join(&key, &sink) {
            return guard;
        }
        let first = self.first_look(&key).await;
        self.poller.watch(key, sink, first)
    }

    /// Watch the listing of the mount.
    pub(crate) async fn add_list(&self, sink: ChangeSink) -> WatchGuard {
        if let Some(guard) = self.poller.join(&Watched::List, &sink) {
            return guard;
        }
        let first = self.first_look(&Watched::List).await;
        self.poller.watch(Watched::List, sink, first)
    }

    /// The change token of the object `uri` from its poll: a digest of the ETag (or of the
    /// size and time standing in for one) its last HEAD saw, or `absent` when that HEAD
    /// found no object. No request: `None` while nobody subscribes to the object (a HEAD
    /// per token would cost every caller, the skills catalog's walks among them, a request
    /// per file), or while its checks fail.
    pub(crate) fn token(&self, uri: &ResourceUri) -> Option<String> {
        match self.poller.last_seen(&Watched::Resource(uri.clone()))? {
            Seen::Object(Some(etag)) => Some(token_digest(&[b"s3 object", etag.as_bytes()])),
            Seen::Object(None) => Some("absent".to_owned()),
            // A listing's state is the list watch's; list changes carry no token.
            Seen::List(_) => None,
        }
    }

    /// The checks the rate limit deferred, for `/metrics`.
    pub(crate) fn throttled(&self) -> Counter {
        self.poller.throttled_counter()
    }

    /// What `key` looks like now, within [`FIRST_LOOK_TIMEOUT`]: a store that is down must
    /// not hold a subscription for its whole retry budget. Unknown (`None`) makes the first
    /// answer after it a change, so nothing is missed.
    async fn first_look(&self, key: &Watched) -> Option<Seen> {
        tokio::time::timeout(FIRST_LOOK_TIMEOUT, self.source.check(key, None))
            .await
            .ok()?
            .ok()
    }
}

impl S3Source {
    async fn check_object(
        &self,
        inner: &Inner,
        uri: &ResourceUri,
        last: Option<&Seen>,
    ) -> Result<Seen> {
        let key = match inner.keys.parse(uri)? {
            Target::Object(k) => k,
            Target::Dir(_) => return Err(Error::invalid_params("a prefix is not watched")),
        };
        let Some(path) = object_path(&key) else {
            return Ok(Seen::Object(None));
        };
        let etag = match last {
            // A real ETag, not the `@size-time` stand-in below.
            Some(Seen::Object(Some(e))) if !e.starts_with('@') => Some(e.clone()),
            _ => None,
        };
        let opts = GetOptions {
            head: true,
            if_none_match: etag,
            ..Default::default()
        };
        match inner.store.get_opts(&path, opts).await {
            Ok(r) => Ok(Seen::Object(Some(r.meta.e_tag.clone().unwrap_or_else(
                || {
                    format!(
                        "@{}-{}",
                        r.meta.size,
                        r.meta.last_modified.timestamp_millis()
                    )
                },
            )))),
            Err(object_store::Error::NotModified { .. }) => {
                Ok(last.cloned().unwrap_or(Seen::Object(None)))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(Seen::Object(None)),
            Err(e) => Err(inner
                .ctx
                .map(e, &format!("checking {uri} for changes"), None)),
        }
    }

    async fn check_list(&self, inner: &Inner) -> Result<Seen> {
        let mut h = DefaultHasher::new();
        let mut after: Option<String> = None;
        for _ in 0..LIST_WATCH_MAX_PAGES {
            let r = inner
                .list_once(
                    &inner.config.prefix,
                    after.clone(),
                    STORE_PAGE_MAX,
                    false,
                    "checking the listing for changes",
                )
                .await?;
            // Folder markers are not resources, so they are not list changes either.
            for o in r.objects.iter().filter(|o| !o.key.ends_with('/')) {
                o.key.hash(&mut h);
            }
            match (r.truncated, r.last) {
                (true, Some(last)) => after = Some(last),
                _ => return Ok(Seen::List(h.finish())),
            }
        }
        if !self.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                bucket = %inner.config.bucket,
                "more than {} keys under the mount's prefix: list changes are watched among the first {} only",
                LIST_WATCH_MAX_PAGES * STORE_PAGE_MAX,
                LIST_WATCH_MAX_PAGES * STORE_PAGE_MAX
            );
        }
        Ok(Seen::List(h.finish()))
    }
}

#[async_trait]
impl PollSource for S3Source {
    type Fingerprint = Seen;

    /// The object's key: a window (`?head=`, `?tail=`, `?offset=`) and any other spelling of
    /// the key look at the same object, and a HEAD's answer is the same for all of them.
    fn poll_key(&self, key: &Watched) -> PollKey {
        if let (Watched::Resource(uri), Some(inner)) = (key, self.inner.upgrade())
            && let Ok(Target::Object(k)) = inner.keys.parse(uri)
        {
            return PollKey::Object(k);
        }
        PollKey::of(key)
    }

    async fn check(&self, key: &Watched, last: Option<&Seen>) -> Result<Seen> {
        let inner = self
            .inner
            .upgrade()
            .ok_or_else(|| Error::internal("the s3 mount is gone"))?;
        match key {
            Watched::Resource(uri) => self.check_object(&inner, uri, last).await,
            Watched::List => self.check_list(&inner).await,
        }
    }
}
