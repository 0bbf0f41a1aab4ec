//! The subscription registry: which subscribers (legacy sessions, listen streams) care about
//! which URIs, with one provider watch per URI however many subscribe, released with the
//! last. A fan-out task reads the change bus and forwards each event to the subscribers
//! that asked for it.
//!
//! Watching and hearing are separate: a provider watch publishes on the bus, and the fan-out
//! hears only what comes back from the bus (declared with [`ChangeBus::interest`] for each
//! watched URI and mount list). With the in-process bus the two are the same process; with a
//! broker bus a change is delivered once per replica that has an interest, whichever replica
//! watched it, and never a second time from the local watch.

use mcpr_core::sync::lock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use mcpr_core::{
    ChangeBus, ChangeEvent, ChangeFeed, ChangeSink, Error, ErrorKind, FeedItem, Interest,
    ResourceUri, Result, WatchGuard, Watching,
};

use crate::layers::{Layered, Op, declares};
use crate::router::Router;

/// What a subscriber is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// `notifications/resources/updated` for this URI.
    Updated(String),
    /// `notifications/resources/list_changed`.
    ListChanged,
}

/// Counts for metrics and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RegistryStats {
    /// Live subscribers (sessions and listen streams that registered).
    pub subscribers: usize,
    /// URIs with a provider watch.
    pub watched_uris: usize,
    /// Subscribers that want list changes.
    pub list_listeners: usize,
    /// Whether the mounts' list watches are held.
    pub list_watch_active: bool,
    /// Subscriptions held, over every subscriber: each URI a session subscribed to or a
    /// listen stream watches counts one (what `max_watches` bounds).
    pub subscriptions: usize,
    /// Open `subscriptions/listen` streams.
    pub listen_streams: usize,
}

struct Sub {
    tx: crate::mailbox::Sender,
    /// Mounts whose list changes this subscriber may hear of; `None` for all.
    mounts: Option<Vec<u32>>,
    /// Each URI subscribed, as the subscriber named it, with the URI watched for it: the
    /// same, or for a `skill://` URI the mount URI holding its bytes.
    uris: HashMap<String, String>,
    list: bool,
}

struct UriWatch {
    /// Subscribers, each with the names it subscribed to this URI under (the URI itself,
    /// `skill://` URIs whose bytes it holds).
    subs: HashMap<u64, Vec<String>>,
    _guard: WatchGuard,
    _interest: Interest,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    subs: HashMap<u64, Sub>,
    uris: HashMap<String, UriWatch>,
    list_refs: usize,
    list_acquiring: bool,
    list_guards: Vec<(WatchGuard, Interest)>,
    /// The sum of every subscriber's `uris`.
    held: usize,
    /// Open listen streams per client identity.
    listens: HashMap<String, usize>,
}

/// See the module docs.
pub struct Registry {
    router: Router,
    bus: Arc<dyn ChangeBus>,
    /// Who runs the provider watches: this process, or a cluster's watcher of the mount.
    watching: Arc<dyn Watching>,
    /// The request timeout, bounding each watch start ([`Layered`]).
    timeout: std::time::Duration,
    inner: Mutex<Inner>,
    /// False while list watches are being started.
    list_ready: tokio::sync::watch::Sender<bool>,
    /// The most subscriptions held at once over every subscriber (`max_watches`).
    max_watches: AtomicUsize,
    /// Closes the fan-out task's feed when the registry goes away.
    feed: Arc<mcpr_core::change::FeedShared>,
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.feed.close();
    }
}

/// The error of a subscription beyond the global budget.
pub(crate) fn over_budget(max: usize) -> Error {
    Error::over_watch_budget(
        max,
        format!(
            "the server already holds {max} subscriptions over all sessions and listen streams, the limit (max_watches); try again after some are released"
        ),
    )
}

/// Whether `e` is the global budget's refusal.
pub(crate) fn is_over_budget(e: &Error) -> bool {
    e.details
        .as_ref()
        .and_then(|d| d.get("setting"))
        .is_some_and(|s| s == "server.max_watches")
}

/// One open listen stream counted against its client's limit, until dropped.
pub struct ListenSlot {
    registry: Arc<Registry>,
    client: String,
}

impl Drop for ListenSlot {
    fn drop(&mut self) {
        let mut inner = lock(&self.registry.inner);
        if let Some(n) = inner.listens.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                inner.listens.remove(&self.client);
            }
        }
    }
}

impl Registry {
    /// A registry over `router`'s mounts, reading `bus`, with watches run by `watching`, each
    /// watch start bounded by `timeout` (the request timeout). Starts the fan-out task.
    pub fn new(
        router: Router,
        bus: Arc<dyn ChangeBus>,
        watching: Arc<dyn Watching>,
        timeout: std::time::Duration,
    ) -> Arc<Self> {
        let feed = bus.feed();
        let this = Arc::new(Self {
            router,
            bus,
            watching,
            timeout,
            inner: Mutex::new(Inner::default()),
            list_ready: tokio::sync::watch::Sender::new(true),
            max_watches: AtomicUsize::new(usize::MAX),
            feed: feed.handle(),
        });
        tokio::spawn(fan_out(Arc::downgrade(&this), feed));
        this
    }

    /// Who runs the provider watches (and reports the cluster's state).
    pub(crate) fn watching(&self) -> &dyn Watching {
        &*self.watching
    }

    /// Register a subscriber; its notices arrive on the returned receiver until
    /// [`Registry::remove`] is called with its id.
    pub fn add_subscriber(&self) -> (u64, crate::mailbox::Receiver) {
        self.add_scoped_subscriber(None)
    }

    /// Like [`Registry::add_subscriber`], hearing list changes only of `mounts` (a caller
    /// whose token lacks a mount's scope must not learn that its contents changed).
    pub fn add_scoped_subscriber(
        &self,
        mounts: Option<Vec<u32>>,
    ) -> (u64, crate::mailbox::Receiver) {
        let (tx, rx) = crate::mailbox::mailbox();
        let mut inner = lock(&self.inner);
        inner.next_id += 1;
        let id = inner.next_id;
        inner.subs.insert(
            id,
            Sub {
                tx,
                mounts,
                uris: HashMap::new(),
                list: false,
            },
        );
        (id, rx)
    }

    /// Set the most subscriptions held at once over every subscriber (`max_watches`).
    pub fn set_max_watches(&self, max: usize) {
        self.max_watches.store(max, Ordering::Relaxed);
    }

    /// The subscriptions still available under `max_watches`.
    pub fn watch_budget_left(&self) -> usize {
        let held = lock(&self.inner).held;
        self.max_watches
            .load(Ordering::Relaxed)
            .saturating_sub(held)
    }

    /// Count one more listen stream of `client`, refused beyond `max` of them.
    pub fn open_listen(self: &Arc<Self>, client: &str, max: usize) -> Result<ListenSlot> {
        let mut inner = lock(&self.inner);
        let open = inner.listens.entry(client.to_owned()).or_default();
        if *open >= max {
            let mut details = serde_json::Map::new();
            details.insert("limit".into(), max.into());
            details.insert(
                "setting".into(),
                "server.max_listen_streams_per_client".into(),
            );
            let mut e = Error::new(
                ErrorKind::Unavailable,
                format!(
                    "too many subscriptions/listen streams: this client already has {max} open, the limit (max_listen_streams_per_client); close one first"
                ),
            );
            e.details = Some(details);
            return Err(e);
        }
        *open += 1;
        Ok(ListenSlot {
            registry: self.clone(),
            client: client.to_owned(),
        })
    }

    /// Subscribe `id` to `uri`, asking the owning provider to watch it if nobody did yet.
    /// A subscription beyond `max_watches` (over every subscriber) is refused.
    pub async fn subscribe(&self, id: u64, uri: &ResourceUri) -> Result<()> {
        self.subscribe_as(id, uri.as_str(), uri).await
    }

    /// Subscribe `id` to `uri` under the name `name`: its notices name `name`. A `skill://`
    /// URI is watched as the mount URI holding its bytes, through the same watch (and, in a
    /// cluster, the same interest keyed by mount and URI) as a subscription to that URI, so
    /// a change is delivered once per subscriber and name however many replicas watch it.
    pub async fn subscribe_as(&self, id: u64, name: &str, uri: &ResourceUri) -> Result<()> {
        let key = uri.as_str().to_owned();
        let max = self.max_watches.load(Ordering::Relaxed);
        {
            let mut inner = lock(&self.inner);
            let inner = &mut *inner;
            let Some(sub) = inner.subs.get(&id) else {
                return Err(Error::internal("subscriber is gone"));
            };
            if sub.uris.contains_key(name) {
                return Ok(());
            }
            if inner.held >= max {
                return Err(over_budget(max));
            }
            if let Some(w) = inner.uris.get_mut(&key) {
                w.subs.entry(id).or_default().push(name.to_owned());
                inner
                    .subs
                    .get_mut(&id)
                    .expect("checked")
                    .uris
                    .insert(name.to_owned(), key);
                inner.held += 1;
                return Ok(());
            }
        }
        let mount = self
            .router
            .route(uri)
            .ok_or_else(|| Error::not_found(uri.as_str()))?;
        let layered = Layered::new(mount, self.timeout);
        layered.check(Op::Watch, Some(uri))?;
        // Interest first: a change the new watch reports at once must find it in place.
        let interest = self
            .bus
            .interest(&mount.name, &ChangeEvent::Updated { uri: key.clone() });
        let guard = layered
            .watch(
                &*self.watching,
                uri,
                ChangeSink::new(self.bus.clone(), mount.name.clone()),
            )
            .await?;
        // The watch and interest go into the registry, or, when they are not needed after
        // all, come back out of the locked block to be dropped after it: stopping a watch
        // runs the provider's code (and a cluster's), which may take locks of its own.
        let (result, unused) = {
            let mut inner = lock(&self.inner);
            let inner = &mut *inner;
            match inner.subs.get_mut(&id) {
                // Gone meanwhile, or subscribed meanwhile under the same name.
                None => (Ok(()), Some((guard, interest))),
                Some(sub) if sub.uris.contains_key(name) => (Ok(()), Some((guard, interest))),
                // Others may have subscribed while the watch was being set up.
                Some(_) if inner.held >= max => (Err(over_budget(max)), Some((guard, interest))),
                Some(sub) => {
                    sub.uris.insert(name.to_owned(), key.clone());
                    inner.held += 1;
                    // Another subscriber may have started a watch meanwhile; ours is then
                    // redundant.
                    let (w, unused) = match inner.uris.entry(key) {
                        std::collections::hash_map::Entry::Occupied(e) => {
                            (e.into_mut(), Some((guard, interest)))
                        }
                        std::collections::hash_map::Entry::Vacant(e) => (
                            e.insert(UriWatch {
                                subs: HashMap::new(),
                                _guard: guard,
                                _interest: interest,
                            }),
                            None,
                        ),
                    };
                    w.subs.entry(id).or_default().push(name.to_owned());
                    (Ok(()), unused)
                }
            }
        };
        drop(unused);
        result
    }

    /// Unsubscribe `id` from `uri` (the name it subscribed under); the provider watch ends
    /// with the last subscriber.
    pub fn unsubscribe(&self, id: u64, uri: &str) {
        let released = {
            let mut inner = lock(&self.inner);
            let target = inner.subs.get_mut(&id).and_then(|sub| sub.uris.remove(uri));
            match target {
                Some(target) => {
                    inner.held -= 1;
                    release_uri(&mut inner, id, &target, uri)
                }
                None => None,
            }
        };
        drop(released);
    }

    /// Tell the subscribers that hear list changes of mount `index` here that its list
    /// changed, without the bus: for a change this replica found itself (the skills catalog
    /// seeing a skill appear or go), which every replica finds on its own, so each stream
    /// hears of it once.
    pub(crate) fn list_changed_here(&self, index: u32) {
        let inner = lock(&self.inner);
        for s in inner.subs.values() {
            if s.list && s.mounts.as_ref().is_none_or(|m| m.contains(&index)) {
                s.tx.send(Notice::ListChanged);
            }
        }
    }

    /// Whether any subscriber hears list changes.
    pub(crate) fn has_list_listeners(&self) -> bool {
        lock(&self.inner).list_refs > 0
    }

    /// Register `id` for list changes without waiting for the watches. Returns true when the
    /// caller must now run [`Registry::acquire_list_watches`] (nobody holds them yet).
    ///
    /// Split from the waiting part so a legacy session can register while answering
    /// `initialize` and still answer at once; `list_resources` then waits for the watches
    /// (see [`Registry::wait_list_ready`]), so no change after a first listing is missed.
    pub fn register_list_listener(&self, id: u64) -> bool {
        let mut inner = lock(&self.inner);
        let Some(sub) = inner.subs.get_mut(&id) else {
            return false;
        };
        if sub.list {
            return false;
        }
        sub.list = true;
        inner.list_refs += 1;
        if inner.list_refs > 1 || inner.list_acquiring {
            return false;
        }
        inner.list_acquiring = true;
        self.list_ready.send_replace(false);
        true
    }

    /// Start every mount's list watch (after [`Registry::register_list_listener`] said so).
    pub async fn acquire_list_watches(&self) {
        // All at once: a mount whose upstream is slow to acknowledge its watch (a gateway
        // mount waits up to a second) holds the first listing up by its own wait, not by the
        // sum of every such mount's.
        let starts = self
            .router
            .mounts()
            .iter()
            .filter(|m| declares(m, Op::WatchList))
            .map(|m| async move {
                let interest = self.bus.interest(
                    &m.name,
                    &ChangeEvent::ListChanged {
                        mount: m.name.to_string(),
                    },
                );
                match Layered::new(m, self.timeout)
                    .watch_list(
                        &*self.watching,
                        ChangeSink::new(self.bus.clone(), m.name.clone()),
                    )
                    .await
                {
                    Ok(g) => Some((g, interest)),
                    Err(e) => {
                        tracing::warn!(mount = %m.provider.info().label, error = %e, "cannot watch for list changes");
                        None
                    }
                }
            });
        let guards: Vec<_> = futures::future::join_all(starts)
            .await
            .into_iter()
            .flatten()
            .collect();
        let mut inner = lock(&self.inner);
        inner.list_acquiring = false;
        let unused = if inner.list_refs > 0 {
            inner.list_guards = guards;
            Vec::new()
        } else {
            guards
        };
        drop(inner);
        self.list_ready.send_replace(true);
        drop(unused);
    }

    /// Register `id` for list changes and wait until the watches are in place. Returns true
    /// when this call started them, so changes made meanwhile may have been missed.
    pub async fn add_list_listener(&self, id: u64) -> bool {
        if self.register_list_listener(id) {
            self.acquire_list_watches().await;
            true
        } else {
            self.wait_list_ready().await;
            false
        }
    }

    /// Wait while list watches are being started.
    pub async fn wait_list_ready(&self) {
        let mut rx = self.list_ready.subscribe();
        // An error means the sender is gone, which cannot happen while `self` lives.
        let _ = rx.wait_for(|ready| *ready).await;
    }

    /// Forget subscriber `id` and release every watch only it needed.
    pub fn remove(&self, id: u64) {
        let mut released = Vec::new();
        let mut released_list = Vec::new();
        {
            let mut inner = lock(&self.inner);
            let Some(sub) = inner.subs.remove(&id) else {
                return;
            };
            inner.held -= sub.uris.len();
            for (name, target) in &sub.uris {
                released.extend(release_uri(&mut inner, id, target, name));
            }
            if sub.list {
                inner.list_refs -= 1;
                if inner.list_refs == 0 {
                    released_list = std::mem::take(&mut inner.list_guards);
                }
            }
        }
        // Watches are dropped outside the lock: a provider may take its own locks to stop.
        drop(released);
        drop(released_list);
    }

    /// How many URIs subscriber `id` is subscribed to.
    pub fn subscription_count(&self, id: u64) -> usize {
        let inner = lock(&self.inner);
        inner.subs.get(&id).map_or(0, |s| s.uris.len())
    }

    /// Whether subscriber `id` is already subscribed to `uri`.
    pub fn is_subscribed(&self, id: u64, uri: &str) -> bool {
        let inner = lock(&self.inner);
        inner
            .subs
            .get(&id)
            .is_some_and(|s| s.uris.contains_key(uri))
    }

    /// Current counts.
    pub fn stats(&self) -> RegistryStats {
        let inner = lock(&self.inner);
        RegistryStats {
            subscribers: inner.subs.len(),
            watched_uris: inner.uris.len(),
            list_listeners: inner.list_refs,
            list_watch_active: !inner.list_guards.is_empty(),
            subscriptions: inner.held,
            listen_streams: inner.listens.values().sum(),
        }
    }

    fn deliver(&self, item: FeedItem) {
        let inner = lock(&self.inner);
        match item {
            FeedItem::Event(ChangeEvent::Updated { uri }) => {
                if let Some(w) = inner.uris.get(&uri) {
                    for (id, names) in &w.subs {
                        if let Some(s) = inner.subs.get(id) {
                            // Named as subscribed: the URI itself, or each `skill://` URI
                            // whose bytes it holds.
                            for name in names {
                                s.tx.send(Notice::Updated(name.clone()));
                            }
                        }
                    }
                }
            }
            FeedItem::Event(ChangeEvent::ListChanged { mount }) => {
                // A mount this configuration does not have is news to nobody here.
                let Some(mount) = self.router.by_name(&mount).map(|m| m.index) else {
                    return;
                };
                let hears =
                    |s: &&Sub| s.list && s.mounts.as_ref().is_none_or(|m| m.contains(&mount));
                for s in inner.subs.values().filter(hears) {
                    s.tx.send(Notice::ListChanged);
                }
            }
            FeedItem::Overflow => {
                // The feed coalesces repeats, so this needs more distinct pending events than
                // anything watches (see `FEED_CAPACITY`). Events were lost: tell everyone
                // everything may have changed, rather than leave a subscriber believing a
                // stale resource is current.
                for s in inner.subs.values() {
                    for uri in s.uris.keys() {
                        s.tx.send(Notice::Updated(uri.clone()));
                    }
                    if s.list {
                        s.tx.send(Notice::ListChanged);
                    }
                }
            }
        }
    }
}

/// Remove `id`'s name `name` from `uri`'s watchers; returns the guard when it was the last.
fn release_uri(inner: &mut Inner, id: u64, uri: &str, name: &str) -> Option<UriWatch> {
    let w = inner.uris.get_mut(uri)?;
    if let Some(names) = w.subs.get_mut(&id) {
        names.retain(|n| n != name);
        if names.is_empty() {
            w.subs.remove(&id);
        }
    }
    if w.subs.is_empty() {
        inner.uris.remove(uri)
    } else {
        None
    }
}

async fn fan_out(registry: std::sync::Weak<Registry>, mut feed: ChangeFeed) {
    // The feed closes when the registry drops, so this task ends with it.
    while let Some(item) = feed.recv().await {
        if matches!(item, FeedItem::Overflow) {
            tracing::warn!("change feed overflowed; notifying every subscriber");
        }
        let Some(registry) = registry.upgrade() else {
            return;
        };
        registry.deliver(item);
    }
}
