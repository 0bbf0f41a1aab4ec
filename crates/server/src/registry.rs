//! The subscription registry: which subscribers (legacy sessions, listen streams) care about
//! which URIs, with one provider watch per URI however many subscribe, released with the
//! last. A fan-out task reads the change bus and forwards each event to the subscribers
//! that asked for it.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use mcpr_core::{ChangeBus, ChangeEvent, ChangeSink, Error, ResourceUri, Result, WatchGuard};
use tokio::sync::{broadcast, mpsc};

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
}

struct Sub {
    tx: mpsc::UnboundedSender<Notice>,
    /// Mounts whose list changes this subscriber may hear of; `None` for all.
    mounts: Option<Vec<u32>>,
    uris: HashSet<String>,
    list: bool,
}

struct UriWatch {
    subs: HashSet<u64>,
    _guard: WatchGuard,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    subs: HashMap<u64, Sub>,
    uris: HashMap<String, UriWatch>,
    list_refs: usize,
    list_acquiring: bool,
    list_guards: Vec<WatchGuard>,
}

/// See the module docs.
pub struct Registry {
    router: Router,
    bus: Arc<dyn ChangeBus>,
    inner: Mutex<Inner>,
    /// False while list watches are being started.
    list_ready: tokio::sync::watch::Sender<bool>,
}

impl Registry {
    /// A registry over `router`'s mounts, reading `bus`. Starts the fan-out task.
    pub fn new(router: Router, bus: Arc<dyn ChangeBus>) -> Arc<Self> {
        let this = Arc::new(Self {
            router,
            bus: bus.clone(),
            inner: Mutex::new(Inner::default()),
            list_ready: tokio::sync::watch::Sender::new(true),
        });
        tokio::spawn(fan_out(Arc::downgrade(&this), bus.subscribe()));
        this
    }

    /// Register a subscriber; its notices arrive on the returned receiver until
    /// [`Registry::remove`] is called with its id.
    pub fn add_subscriber(&self) -> (u64, mpsc::UnboundedReceiver<Notice>) {
        self.add_scoped_subscriber(None)
    }

    /// Like [`Registry::add_subscriber`], hearing list changes only of `mounts` (a caller
    /// whose token lacks a mount's scope must not learn that its contents changed).
    pub fn add_scoped_subscriber(
        &self,
        mounts: Option<Vec<u32>>,
    ) -> (u64, mpsc::UnboundedReceiver<Notice>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut inner = self.inner.lock().expect("registry lock");
        inner.next_id += 1;
        let id = inner.next_id;
        inner.subs.insert(
            id,
            Sub {
                tx,
                mounts,
                uris: HashSet::new(),
                list: false,
            },
        );
        (id, rx)
    }

    /// Subscribe `id` to `uri`, asking the owning provider to watch it if nobody did yet.
    pub async fn subscribe(&self, id: u64, uri: &ResourceUri) -> Result<()> {
        let key = uri.as_str().to_owned();
        {
            let mut inner = self.inner.lock().expect("registry lock");
            let inner = &mut *inner;
            if !inner.subs.contains_key(&id) {
                return Err(Error::internal("subscriber is gone"));
            }
            if let Some(w) = inner.uris.get_mut(&key) {
                w.subs.insert(id);
                inner.subs.get_mut(&id).expect("checked").uris.insert(key);
                return Ok(());
            }
        }
        let mount = self
            .router
            .route(uri)
            .ok_or_else(|| Error::not_found(uri.as_str()))?;
        if !mount.provider.info().capabilities.watch {
            return Err(Error::unsupported(format!(
                "{} mounts do not support subscriptions: {uri}",
                mount.provider.info().kind
            )));
        }
        let guard = mount
            .provider
            .watch(uri, ChangeSink::new(self.bus.clone(), mount.index))
            .await?;
        let mut inner = self.inner.lock().expect("registry lock");
        let inner = &mut *inner;
        let Some(sub) = inner.subs.get_mut(&id) else {
            return Ok(());
        };
        sub.uris.insert(key.clone());
        // Another subscriber may have started a watch meanwhile; ours is then redundant and
        // is dropped here.
        inner
            .uris
            .entry(key)
            .or_insert_with(|| UriWatch {
                subs: HashSet::new(),
                _guard: guard,
            })
            .subs
            .insert(id);
        Ok(())
    }

    /// Unsubscribe `id` from `uri`; the provider watch ends with the last subscriber.
    pub fn unsubscribe(&self, id: u64, uri: &str) {
        let released = {
            let mut inner = self.inner.lock().expect("registry lock");
            if let Some(sub) = inner.subs.get_mut(&id) {
                sub.uris.remove(uri);
            }
            release_uri(&mut inner, id, uri)
        };
        drop(released);
    }

    /// Register `id` for list changes without waiting for the watches. Returns true when the
    /// caller must now run [`Registry::acquire_list_watches`] (nobody holds them yet).
    ///
    /// Split from the waiting part so a legacy session can register while answering
    /// `initialize` and still answer at once; `list_resources` then waits for the watches
    /// (see [`Registry::wait_list_ready`]), so no change after a first listing is missed.
    pub fn register_list_listener(&self, id: u64) -> bool {
        let mut inner = self.inner.lock().expect("registry lock");
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
        let mut guards = Vec::new();
        for m in self.router.mounts() {
            if !m.provider.info().capabilities.list_changed {
                continue;
            }
            match m
                .provider
                .watch_list(ChangeSink::new(self.bus.clone(), m.index))
                .await
            {
                Ok(g) => guards.push(g),
                Err(e) => {
                    tracing::warn!(mount = %m.provider.info().label, error = %e, "cannot watch for list changes")
                }
            }
        }
        let mut inner = self.inner.lock().expect("registry lock");
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
            let mut inner = self.inner.lock().expect("registry lock");
            let Some(sub) = inner.subs.remove(&id) else {
                return;
            };
            for uri in &sub.uris {
                released.extend(release_uri(&mut inner, id, uri));
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
        let inner = self.inner.lock().expect("registry lock");
        inner.subs.get(&id).map_or(0, |s| s.uris.len())
    }

    /// Whether subscriber `id` is already subscribed to `uri`.
    pub fn is_subscribed(&self, id: u64, uri: &str) -> bool {
        let inner = self.inner.lock().expect("registry lock");
        inner.subs.get(&id).is_some_and(|s| s.uris.contains(uri))
    }

    /// Current counts.
    pub fn stats(&self) -> RegistryStats {
        let inner = self.inner.lock().expect("registry lock");
        RegistryStats {
            subscribers: inner.subs.len(),
            watched_uris: inner.uris.len(),
            list_listeners: inner.list_refs,
            list_watch_active: !inner.list_guards.is_empty(),
        }
    }

    fn deliver(&self, event: Option<ChangeEvent>) {
        let inner = self.inner.lock().expect("registry lock");
        match event {
            Some(ChangeEvent::Updated { uri }) => {
                if let Some(w) = inner.uris.get(&uri) {
                    for id in &w.subs {
                        if let Some(s) = inner.subs.get(id) {
                            let _ = s.tx.send(Notice::Updated(uri.clone()));
                        }
                    }
                }
            }
            Some(ChangeEvent::ListChanged { mount }) => {
                let hears =
                    |s: &&Sub| s.list && s.mounts.as_ref().is_none_or(|m| m.contains(&mount));
                for s in inner.subs.values().filter(hears) {
                    let _ = s.tx.send(Notice::ListChanged);
                }
            }
            None => {
                // Events were lost: tell everyone everything may have changed, rather than
                // leave a subscriber believing a stale resource is current.
                for s in inner.subs.values() {
                    for uri in &s.uris {
                        let _ = s.tx.send(Notice::Updated(uri.clone()));
                    }
                    if s.list {
                        let _ = s.tx.send(Notice::ListChanged);
                    }
                }
            }
        }
    }
}

/// Remove `id` from `uri`'s watchers; returns the guard when it was the last.
fn release_uri(inner: &mut Inner, id: u64, uri: &str) -> Option<UriWatch> {
    let w = inner.uris.get_mut(uri)?;
    w.subs.remove(&id);
    if w.subs.is_empty() {
        inner.uris.remove(uri)
    } else {
        None
    }
}

async fn fan_out(registry: std::sync::Weak<Registry>, mut rx: broadcast::Receiver<ChangeEvent>) {
    loop {
        let event = match rx.recv().await {
            Ok(ev) => Some(ev),
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!(
                    lost = n,
                    "change bus overflowed; notifying every subscriber"
                );
                None
            }
            Err(broadcast::error::RecvError::Closed) => return,
        };
        let Some(registry) = registry.upgrade() else {
            return;
        };
        registry.deliver(event);
    }
}
