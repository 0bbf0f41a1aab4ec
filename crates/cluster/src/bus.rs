//! The NATS change bus: events of shared mounts travel as NATS messages on subjects derived
//! from the mount and URI, and a replica subscribes only to the subjects its registry
//! declared interest in. Events of local mounts (a files mount each replica watches on its
//! own disk) never leave the process. Every event is sealed ([`Seal`]) for its subject;
//! what arrives unsealed, sealed for another subject, too late or a second time is dropped
//! and counted.
//!
//! An event about one resource may carry the source's change token for it, read after the
//! change ([`mcpr_core::Provider::change_token`]: a file's inode, size and mtime, a git
//! object's id, what an S3, SQL or api/web watch last saw). A replica remembers, per
//! subscribed resource, the token of the last event it delivered, and drops an event with
//! the same token: its clients were already told of that state (by the watcher before a
//! lease move, or by this replica's own watch around a cut). Events without a token (list
//! changes, sources without tokens) always pass. A token travels as a hash keyed by the
//! cluster secret ([`Seal::change_token`]): replicas only compare them, and the raw one could
//! let a reader of the NATS account check guesses about a small resource's contents.

use mcpr_core::sync::lock;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::StreamExt as _;
use mcpr_core::change::Feeds;
use mcpr_core::{ChangeBus, ChangeEvent, ChangeFeed, Interest};
use serde_json::Value;
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
    /// The token of the last event delivered, per subject with interests here.
    announced: Mutex<Announced>,
}

/// Per subject, the change token of the last event a replica delivered to its clients.
#[derive(Default)]
pub(crate) struct Announced {
    last: HashMap<String, String>,
    /// Events dropped as announced already (counted for the unit tests).
    dropped: u64,
}

impl Announced {
    /// Whether an event on `subject` carrying `token` is news: no token (nothing to compare),
    /// or a token other than the last delivered. A token equal to the last one names a state
    /// already announced; an older token coming back (a late copy, or a source that went back
    /// to an earlier content) differs from the last and passes, so no change is ever dropped.
    pub(crate) fn news(&mut self, subject: &str, token: Option<&str>) -> bool {
        let Some(token) = token else {
            return true;
        };
        if self.last.get(subject).is_some_and(|l| l == token) {
            self.dropped += 1;
            return false;
        }
        self.last.insert(subject.to_owned(), token.to_owned());
        true
    }

    /// The last interest in `subject` ended: its memory goes (bounded by the interests).
    fn forget(&mut self, subject: &str) {
        self.last.remove(subject);
    }
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
                announced: Mutex::new(Announced::default()),
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

    /// Publish `event` of mount `mount` with the source's change `token` for its resource
    /// (read after the change), for every replica to compare with what it delivered last.
    pub(crate) fn publish_with_token(
        &self,
        mount: &str,
        event: ChangeEvent,
        token: Option<String>,
    ) {
        if self.inner.local.contains(mount) {
            self.inner.deliver(event);
            return;
        }
        let subject = crate::subject(&self.inner.cluster, mount, &event);
        let mut v = serde_json::to_value(&event).expect("events serialise");
        if let (Some(t), Some(o)) = (token, v.as_object_mut()) {
            o.insert(
                "token".into(),
                Value::String(self.inner.seal.change_token(&t)),
            );
        }
        let payload = bytes::Bytes::from(serde_json::to_vec(&v).expect("json"));
        if self.inner.outbox.try_send((subject, payload)).is_err() {
            tracing::warn!(mount, "change event dropped: too many waiting for NATS");
        }
    }

    /// Hand `event` of shared mount `mount` to this replica's clients only, unless `token`
    /// is the one delivered last for its resource: the events of a replica's own watches
    /// while it is cut off (see `ClusterWatching`). Sent through NATS they would wait in the
    /// client's buffer for the heal and then reach every replica late, after the watcher's.
    pub(crate) fn deliver_own(&self, mount: &str, event: ChangeEvent, token: Option<String>) {
        let subject = crate::subject(&self.inner.cluster, mount, &event);
        // Keyed as the tokens that come through NATS are, so the two compare.
        let token = token.map(|t| self.inner.seal.change_token(&t));
        self.inner.deliver_news(&subject, event, token.as_deref());
    }
}

impl Inner {
    fn deliver(&self, event: ChangeEvent) {
        self.feeds.push(&event);
        let _ = self.raw.send(event);
    }

    /// [`Inner::deliver`] unless `token` says its clients know this state already.
    fn deliver_news(&self, subject: &str, event: ChangeEvent, token: Option<&str>) {
        if lock(&self.announced).news(subject, token) {
            self.deliver(event);
        } else {
            tracing::debug!(
                subject,
                "cluster: a change event of a state already announced dropped"
            );
        }
    }
}

/// A change event as it travels: the event's own fields and, when known, `token`.
fn decode(payload: &[u8]) -> Result<(ChangeEvent, Option<String>), serde_json::Error> {
    let mut v: Value = serde_json::from_slice(payload)?;
    let token = v
        .as_object_mut()
        .and_then(|o| o.remove("token"))
        .and_then(|t| t.as_str().map(str::to_owned));
    Ok((serde_json::from_value(v)?, token))
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
                lock(&bus.announced).forget(&self.subject);
            }
        }
    }
}

impl ChangeBus for NatsBus {
    fn publish(&self, mount: &str, event: ChangeEvent) {
        self.publish_with_token(mount, event, None);
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
                        match decode(payload) {
                            Ok((ev, token)) => bus.deliver_news(&msg.subject, ev, token.as_deref()),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_delivered_last_is_dropped_any_other_passes() {
        let mut a = Announced::default();
        assert!(a.news("s", Some("t1")), "nothing delivered yet");
        assert!(!a.news("s", Some("t1")), "the same state again");
        assert!(a.news("s", None), "no token: always");
        assert!(!a.news("s", Some("t1")), "no token forgets nothing");
        assert!(a.news("s2", Some("t1")), "per subject");
        assert!(a.news("s", Some("t2")));
        // Back to an earlier state (a git file reverted): a change, delivered.
        assert!(a.news("s", Some("t1")));
        assert_eq!(a.dropped, 2);
        a.forget("s");
        assert!(a.news("s", Some("t1")), "forgotten with the last interest");
    }

    #[test]
    fn an_event_travels_with_its_token_or_without() {
        let ev = ChangeEvent::Updated {
            uri: "file:///a".into(),
        };
        let mut v = serde_json::to_value(&ev).unwrap();
        v["token"] = "7:2:x".into();
        let (back, token) = decode(&serde_json::to_vec(&v).unwrap()).unwrap();
        assert_eq!((back, token.as_deref()), (ev.clone(), Some("7:2:x")));
        let (back, token) = decode(&serde_json::to_vec(&ev).unwrap()).unwrap();
        assert_eq!((back, token), (ev, None));
        assert!(decode(b"{\"token\":\"x\"}").is_err());
    }
}
