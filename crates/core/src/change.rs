//! Change events and the bus that carries them from provider watchers to subscribers.
//!
//! Providers publish through a [`ChangeSink`]; the server's subscription registry reads the
//! bus and fans events out to the sessions and listen streams that care. The bus is a trait
//! so a deployment with several replicas can carry events through a broker instead.

use std::sync::Arc;

use tokio::sync::broadcast;

/// Something changed at a source.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ChangeEvent {
    /// The resource at `uri` changed (modified, replaced or deleted).
    Updated {
        /// The URI exactly as it was subscribed.
        uri: String,
    },
    /// The set of resources of mount number `mount` changed.
    ListChanged {
        /// Index of the mount in the server's mount list.
        mount: u32,
    },
}

/// Carries change events from watchers to the subscription registry.
pub trait ChangeBus: Send + Sync + 'static {
    /// Publish one event. Never blocks: a slow reader loses events and is told so through
    /// `RecvError::Lagged`, and must then re-check everything it watches.
    fn publish(&self, event: ChangeEvent);
    /// A new reader that sees every event published from now on.
    fn subscribe(&self) -> broadcast::Receiver<ChangeEvent>;
}

/// The in-process bus: a bounded tokio broadcast channel.
#[derive(Debug, Clone)]
pub struct LocalBus {
    tx: broadcast::Sender<ChangeEvent>,
}

impl LocalBus {
    /// A bus that buffers up to `capacity` events per slow reader.
    pub fn new(capacity: usize) -> Self {
        let (tx, _) = broadcast::channel(capacity.max(16));
        Self { tx }
    }
}

impl Default for LocalBus {
    fn default() -> Self {
        Self::new(4096)
    }
}

impl ChangeBus for LocalBus {
    fn publish(&self, event: ChangeEvent) {
        // No reader is not an error: nobody is subscribed right now.
        let _ = self.tx.send(event);
    }

    fn subscribe(&self) -> broadcast::Receiver<ChangeEvent> {
        self.tx.subscribe()
    }
}

/// The handle a provider's watcher uses to report changes for one mount.
#[derive(Clone)]
pub struct ChangeSink {
    bus: Arc<dyn ChangeBus>,
    mount: u32,
}

impl std::fmt::Debug for ChangeSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChangeSink")
            .field("mount", &self.mount)
            .finish()
    }
}

impl ChangeSink {
    /// A sink that publishes on `bus` on behalf of mount number `mount`.
    pub fn new(bus: Arc<dyn ChangeBus>, mount: u32) -> Self {
        Self { bus, mount }
    }

    /// The mount this sink reports for.
    pub fn mount(&self) -> u32 {
        self.mount
    }

    /// Report that the resource `uri` changed.
    pub fn updated(&self, uri: impl Into<String>) {
        self.bus.publish(ChangeEvent::Updated { uri: uri.into() });
    }

    /// Report that the mount's set of resources changed.
    pub fn list_changed(&self) {
        self.bus
            .publish(ChangeEvent::ListChanged { mount: self.mount });
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
