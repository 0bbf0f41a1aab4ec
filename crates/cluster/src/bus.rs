//! The NATS change bus: events of shared mounts travel as NATS messages on subjects derived
//! from the mount and URI, and a replica subscribes only to the subjects its registry
//! declared interest in. Events of local mounts (a files mount each replica watches on its
//! own disk) never leave the process. Every event is sealed ([`Seal`]) for its subject;
//! what arrives unsealed, sealed for another subject, too late or a second time is dropped
//! and counted.

use mcpr_core::sync::lock;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::StreamExt as _;
use mcpr_core::change::Feeds;
use mcpr_core::{ChangeBus, ChangeEvent, ChangeFeed, Interest};
use tokio::sync::{broadcast, mpsc};

use crate::seal::{Kind, Seal};

/// How many events may wait to be handed to the NATS client; beyond that (NATS down for long
/// under a flood of changes) new ones are dropped with a warning rather than grow memory.
const OUTBOX: usize = 65_536;

/// See the module docs.
#[derive(Clone)]
pub struct NatsBus {
    inner: Arc<Inner>,
}

struct Inner {
    client: async_nats::Client,
    seal: Arc<Seal>,
    cluster: String,
    /// Mounts whose events stay in this process.
    local: HashSet<String>,
    feeds: Feeds,
    raw: broadcast::Sender<ChangeEvent>,
    outbox: mpsc::Sender<(String, bytes::Bytes)>,
    /// Subject → (interests held, the task reading its subscription).
    subs: Mutex<HashMap<String, (usize, tokio::task::JoinHandle<()>)>>,
    /// Subscriptions asked for and not yet handed to the connection; `settled` waits for
    /// them, then confirms them all with one round trip through the server.
    pending: AtomicUsize,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.feeds.close();
        for (_, (_, task)) in lock(&self.subs).drain() {
            task.abort();
        }
    }
}

impl NatsBus {
    /// A bus for cluster `cluster` over `client`, sealing and checking events with `seal`;
    /// events of the mounts named in `local` stay in this process. Must be called inside a
    /// tokio runtime.
    pub fn new(
        client: async_nats::Client,
        seal: Arc<Seal>,
        cluster: &str,
        local: HashSet<String>,
    ) -> Self {
        let (outbox, mut rx) = mpsc::channel::<(String, bytes::Bytes)>(OUTBOX);
        let sender = client.clone();
        let sealer = seal.clone();
        // One task keeps publications in order, sealing each as it goes so that their
        // sequence numbers rise in the order receivers get them; the client queues them
        // while disconnected.
        tokio::spawn(async move {
            while let Some((subject, payload)) = rx.recv().await {
                let payload = sealer.seal(Kind::Event, &subject, &payload);
                if let Err(e) = sender.publish(subject, payload).await {
                    tracing::warn!(error = %e, "cannot hand a change event to NATS");
                }
            }
        });
        let (raw, _) = broadcast::channel(4096);
        Self {
            inner: Arc::new(Inner {
                client,
                seal,
                cluster: cluster.to_owned(),
                local,
                feeds: Feeds::default(),
                raw,
                outbox,
                subs: Mutex::new(HashMap::new()),
                pending: AtomicUsize::new(0),
            }),
        }
    }

    /// Wait (at most `within`) until every interest declared so far is subscribed at the
    /// server (confirmed by a round trip through it); false if NATS did not confirm in time
    /// (it is unreachable).
    pub async fn settled(&self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        while self.inner.pending.load(Ordering::SeqCst) > 0 {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // async-nats's flush only empties the socket buffer; the server may not have read the
        // subscriptions yet, and a change published from another connection meanwhile would
        // reach nobody. The server handles one connection's operations in order, so hearing
        // our own message back on this connection proves every subscription before it is in
        // place.
        let client = &self.inner.client;
        let inbox = client.new_inbox();
        let round_trip = async {
            let mut echo = client.subscribe(inbox.clone()).await.ok()?;
            client.publish(inbox, bytes::Bytes::new()).await.ok()?;
            echo.next().await
        };
        tokio::time::timeout_at(deadline, round_trip)
            .await
            .is_ok_and(|m| m.is_some())
    }

    /// Whether the NATS connection is up now.
    pub fn connected(&self) -> bool {
        self.inner.client.connection_state() == async_nats::connection::State::Connected
    }

    /// Subjects this replica is subscribed to now (for tests and metrics).
    pub fn subscriptions(&self) -> usize {
        lock(&self.inner.subs).len()
    }
}

/// The bus of a replica's own watches of shared mounts while it is cut off (see
/// `ClusterWatching`): their events reach this replica's clients only. Sent through NATS
/// they would wait in the client's buffer for the heal and then reach every replica late, a
/// second time after the watcher's own.
struct InProcess(Arc<Inner>);

impl ChangeBus for InProcess {
    fn publish(&self, _mount: &str, event: ChangeEvent) {
        self.0.deliver(event);
    }

    fn feed(&self) -> ChangeFeed {
        self.0.feeds.add()
    }

    fn subscribe(&self) -> broadcast::Receiver<ChangeEvent> {
        self.0.raw.subscribe()
    }
}

impl NatsBus {
    /// A bus that hands events to this replica's registry only, never to NATS.
    pub(crate) fn in_process(&self) -> Arc<dyn ChangeBus> {
        Arc::new(InProcess(self.inner.clone()))
    }
}

impl Inner {
    fn deliver(&self, event: ChangeEvent) {
        self.feeds.push(&event);
        let _ = self.raw.send(event);
    }
}

/// Drops one interest in a subject; the subscription ends with the last.
struct Held {
    bus: Weak<Inner>,
    subject: String,
}

impl Drop for Held {
    fn drop(&mut self) {
        let Some(bus) = self.bus.upgrade() else {
            return;
        };
        let mut subs = lock(&bus.subs);
        if let Some((n, _)) = subs.get_mut(&self.subject) {
            *n -= 1;
            if *n == 0
                && let Some((_, task)) = subs.remove(&self.subject)
            {
                // Dropping the subscriber inside the task unsubscribes at the server.
                task.abort();
            }
        }
    }
}

impl ChangeBus for NatsBus {
    fn publish(&self, mount: &str, event: ChangeEvent) {
        if self.inner.local.contains(mount) {
            self.inner.deliver(event);
            return;
        }
        let subject = crate::subject(&self.inner.cluster, mount, &event);
        let payload = bytes::Bytes::from(serde_json::to_vec(&event).expect("events serialise"));
        if self.inner.outbox.try_send((subject, payload)).is_err() {
            tracing::warn!(mount, "change event dropped: too many waiting for NATS");
        }
    }

    fn feed(&self) -> ChangeFeed {
        self.inner.feeds.add()
    }

    fn interest(&self, mount: &str, topic: &ChangeEvent) -> Interest {
        if self.inner.local.contains(mount) {
            return Interest::none();
        }
        let subject = crate::subject(&self.inner.cluster, mount, topic);
        let mut subs = lock(&self.inner.subs);
        match subs.get_mut(&subject) {
            Some((n, _)) => *n += 1,
            None => {
                let client = self.inner.client.clone();
                let bus = Arc::downgrade(&self.inner);
                let s = subject.clone();
                self.inner.pending.fetch_add(1, Ordering::SeqCst);
                let task = tokio::spawn(async move {
                    // The client re-subscribes by itself after a reconnect.
                    let sub = client.subscribe(s.clone()).await;
                    if let Some(bus) = bus.upgrade() {
                        bus.pending.fetch_sub(1, Ordering::SeqCst);
                    }
                    let mut sub = match sub {
                        Ok(sub) => sub,
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot subscribe to change events");
                            return;
                        }
                    };
                    while let Some(msg) = sub.next().await {
                        let Some(bus) = bus.upgrade() else { return };
                        let Some(payload) =
                            bus.seal.receive(Kind::Event, &msg.subject, &msg.payload)
                        else {
                            continue;
                        };
                        match serde_json::from_slice::<ChangeEvent>(payload) {
                            Ok(ev) => bus.deliver(ev),
                            Err(e) => tracing::warn!(error = %e, "malformed change event"),
                        }
                    }
                });
                subs.insert(subject.clone(), (1, task));
            }
        }
        Interest::new(Held {
            bus: Arc::downgrade(&self.inner),
            subject,
        })
    }

    fn subscribe(&self) -> broadcast::Receiver<ChangeEvent> {
        self.inner.raw.subscribe()
    }
}
