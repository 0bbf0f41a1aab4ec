//! Change events and the bus that carries them from provider watchers to subscribers.
//!
//! Providers publish through a [`ChangeSink`]; the server's subscription registry reads the
//! bus through a [`ChangeFeed`] and fans events out to the sessions and listen streams that
//! care. The bus is a trait so a deployment with several replicas can carry events through a
//! broker instead: events are serialisable and name mounts by name (never by their position
//! in one replica's config), and the registry declares which events it needs with
//! [`ChangeBus::interest`], so a broker bus subscribes to exactly those.

use crate::sync::lock;
use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex, Weak};

use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, broadcast};

/// Something changed at a source. An event also names what it is about, so the same value
/// serves as the topic a reader declares interest in ([`ChangeBus::interest`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ChangeEvent {
    /// The resource at `uri` changed (modified, replaced or deleted).
    Updated {
        /// The URI exactly as it was subscribed.
        uri: String,
    },
    /// The set of resources of the mount named `mount` changed.
    ListChanged {
        /// The mount's name ([`ChangeSink::mount`]), the same on every replica that mounts
        /// the same source.
        mount: String,
    },
}

/// Carries change events from watchers to the subscription registry.
pub trait ChangeBus: Send + Sync + 'static {
    /// Publish one event detected by a watcher of mount `mount`. Never blocks.
    fn publish(&self, mount: &str, event: ChangeEvent);

    /// A reader for the registry: every event it declared [`interest`](ChangeBus::interest)
    /// in (the in-process bus hands it everything), coalesced so a slow reader never loses
    /// one (see [`ChangeFeed`]).
    fn feed(&self) -> ChangeFeed;

    /// Declare that this process has readers for `topic` of mount `mount` until the returned
    /// guard is dropped. The in-process bus delivers everything and ignores this; a broker bus
    /// subscribes to the topic's subject so a replica receives only what its clients watch.
    fn interest(&self, mount: &str, topic: &ChangeEvent) -> Interest {
        let _ = (mount, topic);
        Interest::none()
    }

    /// A raw reader of every event published through this process from now on, for tools and
    /// tests that watch one provider directly. A slow reader loses events and is told so
    /// through `RecvError::Lagged`; the registry uses [`ChangeBus::feed`] instead.
    fn subscribe(&self) -> broadcast::Receiver<ChangeEvent>;
}

/// Keeps a declared interest alive ([`ChangeBus::interest`]); dropping it withdraws it.
pub struct Interest(#[allow(dead_code)] Option<Box<dyn Send + Sync>>);

impl Interest {
    /// An interest that needs no bookkeeping.
    pub fn none() -> Self {
        Self(None)
    }

    /// An interest that is withdrawn when `inner` is dropped.
    pub fn new(inner: impl Send + Sync + 'static) -> Self {
        Self(Some(Box::new(inner)))
    }
}

impl std::fmt::Debug for Interest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Interest")
    }
}

/// The most distinct pending events a feed holds. A notification only says "this may have
/// changed", so a repeat of a pending event adds nothing and is merged; distinct events are
/// bounded by what is watched (`max_watches` URIs plus one list topic per mount), so this is
/// reached only by a bus publishing far more than anyone watches.
pub const FEED_CAPACITY: usize = 65_536;

/// What a [`ChangeFeed`] yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedItem {
    /// One event, delivered once however often it was published while pending.
    Event(ChangeEvent),
    /// More than [`FEED_CAPACITY`] distinct events were pending and were dropped: anything
    /// may have changed.
    Overflow,
}

#[derive(Default)]
struct FeedState {
    queue: VecDeque<ChangeEvent>,
    pending: HashSet<ChangeEvent>,
    overflowed: bool,
    closed: bool,
}

/// The shared side of a feed, held by the bus that fills it.
#[derive(Default)]
pub struct FeedShared {
    state: Mutex<FeedState>,
    ready: Notify,
}

impl FeedShared {
    /// Queue `event` unless the same event is already waiting.
    pub fn push(&self, event: ChangeEvent) {
        {
            let mut s = lock(&self.state);
            if s.closed || s.overflowed || s.pending.contains(&event) {
                return;
            }
            if s.queue.len() >= FEED_CAPACITY {
                s.queue.clear();
                s.pending.clear();
                s.overflowed = true;
            } else {
                s.pending.insert(event.clone());
                s.queue.push_back(event);
            }
        }
        self.ready.notify_one();
    }

    /// End the feed: its reader gets `None` once the queue is drained.
    pub fn close(&self) {
        lock(&self.state).closed = true;
        self.ready.notify_one();
    }
}

/// A coalescing queue of events for one reader: a reader that falls behind gets every
/// distinct pending event once, rather than losing events and having to assume everything
/// changed.
pub struct ChangeFeed {
    shared: Arc<FeedShared>,
}

impl ChangeFeed {
    /// A new, empty feed and the handle a bus pushes into.
    pub fn new() -> (Self, Arc<FeedShared>) {
        let shared = Arc::new(FeedShared::default());
        (
            Self {
                shared: shared.clone(),
            },
            shared,
        )
    }

    /// A handle that can close this feed from elsewhere (its owner going away).
    pub fn handle(&self) -> Arc<FeedShared> {
        self.shared.clone()
    }

    /// The next item; `None` once the feed is closed and drained.
    pub async fn recv(&mut self) -> Option<FeedItem> {
        loop {
            let notified = self.shared.ready.notified();
            {
                let mut s = lock(&self.shared.state);
                if s.overflowed {
                    s.overflowed = false;
                    return Some(FeedItem::Overflow);
                }
                if let Some(ev) = s.queue.pop_front() {
                    s.pending.remove(&ev);
                    return Some(FeedItem::Event(ev));
                }
                if s.closed {
                    return None;
                }
            }
            notified.await;
        }
    }
}

impl std::fmt::Debug for ChangeFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChangeFeed")
    }
}

/// Feeds a bus fills, forgetting those whose reader is gone.
#[derive(Default)]
pub struct Feeds(Mutex<Vec<Weak<FeedShared>>>);

impl Feeds {
    /// A new feed registered here.
    pub fn add(&self) -> ChangeFeed {
        let (feed, shared) = ChangeFeed::new();
        lock(&self.0).push(Arc::downgrade(&shared));
        feed
    }

    /// Push `event` into every live feed.
    pub fn push(&self, event: &ChangeEvent) {
        let mut feeds = lock(&self.0);
        feeds.retain(|f| match f.upgrade() {
            Some(f) => {
                f.push(event.clone());
                true
            }
            None => false,
        });
    }

    /// Close every feed (the bus is going away).
    pub fn close(&self) {
        for f in lock(&self.0).drain(..) {
            if let Some(f) = f.upgrade() {
                f.close();
            }
        }
    }
}

/// The in-process bus: every event reaches every feed of this process.
#[derive(Clone)]
pub struct LocalBus {
    inner: Arc<LocalInner>,
}

struct LocalInner {
    tx: broadcast::Sender<ChangeEvent>,
    feeds: Feeds,
}

impl Drop for LocalInner {
    fn drop(&mut self) {
        self.feeds.close();
    }
}

impl std::fmt::Debug for LocalBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LocalBus")
    }
}

impl LocalBus {
    /// A bus whose raw readers ([`ChangeBus::subscribe`]) buffer up to `capacity` events.
    pub fn new(capacity: usize) -> Self {
        let (tx, _) = broadcast::channel(capacity.max(16));
        Self {
            inner: Arc::new(LocalInner {
                tx,
                feeds: Feeds::default(),
            }),
        }
    }
}

impl Default for LocalBus {
    fn default() -> Self {
        Self::new(4096)
    }
}

impl ChangeBus for LocalBus {
    fn publish(&self, _mount: &str, event: ChangeEvent) {
        self.inner.feeds.push(&event);
        // No raw reader is not an error: nobody is listening right now.
        let _ = self.inner.tx.send(event);
    }

    fn feed(&self) -> ChangeFeed {
        self.inner.feeds.add()
    }

    fn subscribe(&self) -> broadcast::Receiver<ChangeEvent> {
        self.inner.tx.subscribe()
    }
}

/// The handle a provider's watcher uses to report changes for one mount.
#[derive(Clone)]
pub struct ChangeSink {
    bus: Arc<dyn ChangeBus>,
    mount: Arc<str>,
}

impl std::fmt::Debug for ChangeSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChangeSink")
            .field("mount", &self.mount)
            .finish()
    }
}

impl ChangeSink {
    /// A sink that publishes on `bus` on behalf of the mount named `mount`.
    pub fn new(bus: Arc<dyn ChangeBus>, mount: impl Into<Arc<str>>) -> Self {
        Self {
            bus,
            mount: mount.into(),
        }
    }

    /// The name of the mount this sink reports for.
    pub fn mount(&self) -> &str {
        &self.mount
    }

    /// Report that the resource `uri` changed.
    pub fn updated(&self, uri: impl Into<String>) {
        self.bus
            .publish(&self.mount, ChangeEvent::Updated { uri: uri.into() });
    }

    /// Report that the mount's set of resources changed.
    pub fn list_changed(&self) {
        self.bus.publish(
            &self.mount,
            ChangeEvent::ListChanged {
                mount: self.mount.to_string(),
            },
        );
    }
}

/// Keeps a watch alive; dropping it releases the watch.
pub struct WatchGuard(#[allow(dead_code)] Option<Box<dyn Send + Sync>>);

impl WatchGuard {
    /// A guard that releases its watch when `inner` is dropped.
    pub fn new(inner: impl Send + Sync + 'static) -> Self {
        Self(Some(Box::new(inner)))
    }
}

impl std::fmt::Debug for WatchGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WatchGuard")
    }
}

/// Who runs provider watches: the seam between the registry (which knows what its
/// subscribers want) and the providers (which watch). The in-process implementation,
/// [`LocalWatching`], asks the provider directly; a cluster implementation runs the watches
/// of a source shared by several replicas on one of them only and makes the others' interests
/// known to it, so each source is watched once per cluster.
#[async_trait::async_trait]
pub trait Watching: Send + Sync + 'static {
    /// Have `uri` of the mount named `mount` (served by `provider`) watched, its changes
    /// published through `sink`, until the guard is dropped. A provider's refusal (not found,
    /// unsupported) is returned as is.
    async fn watch(
        &self,
        mount: &str,
        provider: &Arc<dyn crate::Provider>,
        uri: &crate::ResourceUri,
        sink: ChangeSink,
    ) -> crate::Result<WatchGuard>;

    /// Have the set of resources of the mount named `mount` watched, like
    /// [`Watching::watch`].
    async fn watch_list(
        &self,
        mount: &str,
        provider: &Arc<dyn crate::Provider>,
        sink: ChangeSink,
    ) -> crate::Result<WatchGuard>;

    /// The change token of `uri` ([`crate::Provider::change_token`]) as seen where its watch
    /// runs: in this process, the provider's. A cluster asks the replica watching a shared
    /// mount when this one has none (sources whose token is what their own watch last saw:
    /// S3, SQL, api), so a listen compares tokens on every replica as on one.
    async fn change_token(
        &self,
        mount: &str,
        provider: &Arc<dyn crate::Provider>,
        uri: &crate::ResourceUri,
    ) -> Option<String> {
        let _ = mount;
        provider.change_token(uri).await
    }

    /// The cluster's state for `/readyz` and `/metrics`; `None` when there is no cluster.
    fn cluster(&self) -> Option<ClusterStatus> {
        None
    }
}

/// What a cluster [`Watching`] reports about itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterStatus {
    /// Whether the broker connection is up now.
    pub connected: bool,
    /// Why this replica is not ready, when it is not (never holds a secret).
    pub problem: Option<String>,
    /// Each shared mount by name, and whether this replica runs its watches now.
    pub watchers: Vec<(String, bool)>,
    /// Messages from the broker dropped because they did not verify, by kind.
    pub rejected: Vec<(String, u64)>,
    /// Each shared mount by name, and how many of this replica's own subscriptions of it
    /// the replica watches by itself now, because it is cut off from the broker or its clock
    /// is too far off to take part (0 when the cluster's watcher serves them).
    pub standalone: Vec<(String, usize)>,
    /// How far this replica's clock is from the broker's, in milliseconds (positive: ahead),
    /// as last measured; `None` before the first measurement.
    pub clock_offset_ms: Option<i64>,
    /// The broker's streams this replica found missing (deleted, or lost by the broker) and
    /// created again, by role.
    pub streams_recreated: Vec<(String, u64)>,
    /// Legacy session records this replica wrote back after the broker lost them (a
    /// deleted or purged stream).
    pub session_records_restored: u64,
}

/// The in-process [`Watching`]: every watch runs in this process.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalWatching;

#[async_trait::async_trait]
impl Watching for LocalWatching {
    async fn watch(
        &self,
        _mount: &str,
        provider: &Arc<dyn crate::Provider>,
        uri: &crate::ResourceUri,
        sink: ChangeSink,
    ) -> crate::Result<WatchGuard> {
        provider.watch(uri, sink).await
    }

    async fn watch_list(
        &self,
        _mount: &str,
        provider: &Arc<dyn crate::Provider>,
        sink: ChangeSink,
    ) -> crate::Result<WatchGuard> {
        provider.watch_list(sink).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(uri: &str) -> ChangeEvent {
        ChangeEvent::Updated { uri: uri.into() }
    }

    #[test]
    fn events_serialise_by_mount_name_and_uri() {
        let ev = ChangeEvent::ListChanged {
            mount: "docs".into(),
        };
        let json = serde_json::to_string(&ev).unwrap();
        assert_eq!(json, r#"{"event":"list_changed","mount":"docs"}"#);
        assert_eq!(serde_json::from_str::<ChangeEvent>(&json).unwrap(), ev);
        let json = serde_json::to_string(&up("file:///a")).unwrap();
        assert_eq!(json, r#"{"event":"updated","uri":"file:///a"}"#);
    }

    #[tokio::test]
    async fn a_slow_feed_gets_each_distinct_event_once_and_loses_none() {
        let bus = LocalBus::new(16);
        let mut feed = bus.feed();
        // Far more than the raw channel holds: the feed must not lag.
        for round in 0..100 {
            for i in 0..50 {
                bus.publish("m", up(&format!("x://{i}")));
            }
            if round == 0 {
                bus.publish("m", ChangeEvent::ListChanged { mount: "m".into() });
            }
        }
        let mut got = Vec::new();
        while let Ok(Some(item)) =
            tokio::time::timeout(std::time::Duration::from_millis(50), feed.recv()).await
        {
            got.push(item);
        }
        assert_eq!(got.len(), 51, "{got:?}");
        assert!(got.iter().all(|i| matches!(i, FeedItem::Event(_))));
        let distinct: HashSet<_> = got.iter().map(|i| format!("{i:?}")).collect();
        assert_eq!(distinct.len(), 51);
        // Once read, the same event is news again.
        bus.publish("m", up("x://1"));
        assert_eq!(feed.recv().await, Some(FeedItem::Event(up("x://1"))));
    }

    #[tokio::test]
    async fn a_feed_overflows_to_one_resync_not_to_memory_growth() {
        let bus = LocalBus::new(16);
        let mut feed = bus.feed();
        for i in 0..=FEED_CAPACITY {
            bus.publish("m", up(&format!("x://{i}")));
        }
        bus.publish("m", up("x://after"));
        assert_eq!(feed.recv().await, Some(FeedItem::Overflow));
        // Events pushed after the overflow was noted are dropped with it: the resync covers
        // them. New ones after the reader caught up are delivered again.
        let next = tokio::time::timeout(std::time::Duration::from_millis(50), feed.recv()).await;
        assert!(next.is_err(), "{next:?}");
        bus.publish("m", up("x://later"));
        assert_eq!(feed.recv().await, Some(FeedItem::Event(up("x://later"))));
    }

    #[tokio::test]
    async fn a_feed_ends_when_its_bus_is_dropped() {
        let bus = LocalBus::default();
        let mut feed = bus.feed();
        bus.publish("m", up("x://a"));
        drop(bus);
        assert_eq!(feed.recv().await, Some(FeedItem::Event(up("x://a"))));
        assert_eq!(feed.recv().await, None);
    }
}
