//! The cluster's [`Watching`]: each shared mount (SQL, git, HTTP, S3, files with
//! `shared = true`) is watched by one replica at a time, the holder of the mount's [`Lease`],
//! for the union of every live replica's interests; the others only announce what their
//! clients watch. Mounts that are not shared are watched by each replica locally.
//!
//! The protocol runs on core NATS, per shared mount (`<tok>` a hash of its name):
//! - `mcpr.<c>.want.<tok>`: a replica's interests, `{replica, add, remove, reset}`. A single
//!   new interest is a request: the watcher answers once the provider's watch started, or with
//!   the provider's error (a subscription to a missing resource fails as it would without a
//!   cluster). No answer (no watcher yet) still records it: it is replayed on sync.
//! - `mcpr.<c>.sync.<tok>`: published by a new watcher (and by the watcher after its
//!   reconnect, and when it hears again from a replica whose interests it forgot); every
//!   replica answers with its whole interest set for the mount (`reset` on the first chunk,
//!   `done` on the last), chunked under NATS's payload limit. The watcher applies it as a
//!   difference: watches the replica still wants keep running (no "may have changed" for
//!   them), the ones it no longer names end. A replica also re-announces after its own
//!   reconnect.
//! - `mcpr.<c>.alive`: every replica's id, every `lease_ttl / 3`. The watcher keeps the
//!   interests of a replica it no longer hears for twelve TTLs, at least a minute
//!   ([`forget_after`]): a cut replica lives on, and its watches run through the cut. A
//!   replica that stops says goodbye (an empty set, [`ClusterWatching::leave`]); one silent
//!   longer is forgotten, and asked for its interests again (a sync) once it is heard
//!   again, as it announces them on its reconnect, so none is lost for good.
//!
//! Partitions: the client pings NATS every `lease_ttl / 5` and drops a connection that
//! missed three pongs, so a replica cut off from NATS reports it (`/readyz`,
//! `mcp_cluster_connected`) within a TTL and reconnects with a new connection as soon as
//! the link is back, rather than waiting out TCP's retransmission back-off on the old one.
//! While it is cut off, or while its clock is too far from the NATS server's (measured
//! every TTL against the server's time of a record it writes), a replica watches its own
//! clients' subscriptions of shared mounts itself, one watch per subscribed topic,
//! delivering their events to its own clients only (`mcp_cluster_standalone_watches`); it
//! stops a TTL after it is back, so a change around the heal reaches its clients at least
//! once (and once only where the source gives change tokens, below). Finding itself cut
//! off, it says once per subscribed topic its own watches did not cover yet that it may have
//! changed, through its own tokened bus: the events between the cut and its noticing went to
//! the connection it dropped, and a state its clients were told of already is dropped as any
//! repeat is. A replica whose clock is off holds no lease and announces no
//! interests: its records and messages would be taken for stale ones.
//!
//! Releases: a replica never shares a cluster with one of the previous protocol format
//! (see `seal.rs`). It listens for half a TTL after it first connects before it takes part
//! (every replica beats every third), and while a replica of the previous release has been
//! heard within one and a half TTLs (a heartbeat, or its record on a lease) it stands aside
//! (`mind_releases`): no lease, no heartbeat, interest or clock record, legacy sessions
//! refused, `/readyz` not ready naming that replica, its own clients' subscriptions watched
//! by itself as when cut off. So the older release runs the cluster undisturbed, and the
//! newer takes over about one and a half TTLs after the last older replica's end.
//!
//! Every message is sealed ([`Seal`]) for its subject, answers for the requester's inbox;
//! what does not verify, or arrives a second time (a captured removal replayed would drop
//! another replica's watch), is dropped and counted. A replica's interests beyond
//! `max_watches` (the budget its own registry keeps to) are refused on the watcher.
//!
//! Only the watcher publishes a shared mount's events, so each change reaches each replica
//! once. A handover never has two watchers at once: the holder stops before its record can
//! expire (the partition test proves it from the replicas' logs of their holdings, see
//! `lease.rs`); only when NATS loses the lease stream itself (a restart without storage, a
//! deleted stream) may two replicas briefly both watch, until the old holder's next renewal
//! finds the new record. A new watcher says of each resource that it may have changed
//! (nobody watched in between). Each
//! event about one resource carries the source's change token read after it ([`Tokened`]),
//! and a replica drops one whose token it delivered last (`bus.rs`): a second notice of a
//! state already announced never reaches its clients, a change is never dropped. Sources
//! without tokens get the duplicate notification, never a lost subscription.

use mcpr_core::sync::lock;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use mcpr_core::{
    ChangeBus, ChangeEvent, ChangeFeed, ChangeSink, ClusterStatus, Error, ErrorKind, LocalWatching,
    Provider, ResourceUri, Result, WatchGuard, Watching,
};
use mcpr_server::{Layered, Mount};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::seal::{Kind, Seal};
use crate::{Allowed, ClusterConfig, Lease};

/// The most bytes of interests sent in one message; NATS's default `max_payload` is 1 MiB.
const CHUNK_BYTES: usize = 512 * 1024;

/// One mount as the cluster sees it.
pub struct ClusterMount {
    /// The server's mount (its name on the change bus, its provider and the count of calls
    /// made to it): the watcher calls the provider through the server's layer with it.
    pub mount: Mount,
    /// Whether every replica sees the same source (watched once per cluster).
    pub shared: bool,
}

/// A shared mount's state on this replica.
struct Shared {
    mount: Mount,
    token: String,
    /// Where the watcher's watches publish (every replica), with each event's change token.
    to_cluster: Arc<dyn ChangeBus>,
    /// Where this replica's own watches publish (its own clients), with each event's token.
    to_own: Arc<dyn ChangeBus>,
    /// What this replica's clients watch, with how many guards hold each.
    interests: Mutex<HashMap<ChangeEvent, usize>>,
    /// Whether this replica holds the mount's lease (and runs its watches).
    held: AtomicBool,
    /// How many topics this replica watches for the cluster while it holds the lease.
    running: AtomicUsize,
    /// How many of this replica's own topics it watches by itself (cut off, or clock off).
    alone: AtomicUsize,
    /// Whether its lease was tried since this replica was allowed to (`Lease::decided`),
    /// and the lease's state: until the first try, and until a lease won has its watcher
    /// running, this replica is joining, not ready (a client subscribing then would find no
    /// watcher yet, and later hear the new watcher's "may have changed").
    lease: std::sync::OnceLock<(Arc<AtomicBool>, watch::Receiver<bool>)>,
    /// Set once the above was first true: later handovers are not joining.
    settled: AtomicBool,
}

struct Inner {
    client: async_nats::Client,
    seal: Arc<Seal>,
    cfg: ClusterConfig,
    shared: HashMap<String, Shared>,
    /// Why the lease stream cannot be used, when it cannot (not a connection problem).
    lease_problem: Mutex<Option<String>>,
    /// When each replica was last heard of.
    alive: Mutex<HashMap<String, Instant>>,
    /// Why this replica's clock keeps it out of the leases, when it does.
    skew: Mutex<Option<String>>,
    /// This replica's clock against the NATS server's, as last measured.
    clock: Mutex<Option<ClockReading>>,
    /// Why this replica stands aside for replicas of the previous release, while it does.
    older: Mutex<Option<String>>,
    /// Whether this replica has listened long enough, since it first connected, to have
    /// heard every running replica's heartbeat (half a TTL; they beat every third).
    listened: AtomicBool,
    /// Whether this replica may hold leases (false while its clock is off, while it stands
    /// aside for the previous release, and until it has listened).
    lease_allowed: watch::Sender<bool>,
    /// Woken when a local interest is added, so a replica on its own watches it at once.
    poke: Arc<tokio::sync::Notify>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for t in lock(&self.tasks).drain(..) {
            t.abort();
        }
    }
}

/// See the module docs.
#[derive(Clone)]
pub struct ClusterWatching {
    inner: Arc<Inner>,
}

/// The cluster's pieces for one replica: the bus to give the server and the watching seam.
pub struct Joined {
    /// The change bus (events of shared mounts travel through NATS).
    pub bus: crate::NatsBus,
    /// The watch seam.
    pub watching: ClusterWatching,
    /// The NATS connection (for the session store).
    pub client: async_nats::Client,
    /// The cluster's keys (for the session store).
    pub seal: Arc<Seal>,
}

/// Join cluster `cfg` with `mounts`: connect to NATS in the background (never waiting for
/// it: a replica whose NATS is down serves reads and local watches and joins when NATS comes
/// back), compete for the lease of every shared mount and answer the protocol. Must be called
/// inside a tokio runtime.
pub async fn join(
    cfg: ClusterConfig,
    mounts: Vec<ClusterMount>,
) -> std::result::Result<Joined, String> {
    cfg.validate().map_err(|e| format!("cluster: {e}"))?;
    let seal = Arc::new(Seal::new(cfg.secret.as_bytes())?);
    // Every (re)connection bumps this, so the tasks re-announce and re-sync.
    let (epoch_tx, epoch_rx) = watch::channel(0u64);
    let redacted = mcpr_core::redact_url(&cfg.nats_url);
    let (url, credentials) = crate::split_credentials(&cfg.nats_url);
    let options = match credentials {
        Some(crate::Credentials::UserPassword(user, pass)) => {
            async_nats::ConnectOptions::with_user_and_password(user, pass)
        }
        Some(crate::Credentials::Token(token)) => async_nats::ConnectOptions::with_token(token),
        None => async_nats::ConnectOptions::new(),
    };
    let client = options
        .name(format!("mcp-resources {}", cfg.replica))
        .retry_on_initial_connect()
        .max_reconnects(None)
        // A cut link sends no error: only missed pongs tell. Three missed pongs drop the
        // connection (async-nats's rule), so at a fifth of the TTL a replica cut off
        // reports it within a TTL.
        .ping_interval((cfg.lease_ttl / 5).max(Duration::from_millis(100)))
        // An attempt into a cut link waits for its SYN's retransmissions; a short one tries
        // again sooner after the heal.
        .connection_timeout(
            cfg.lease_ttl
                .clamp(Duration::from_secs(1), Duration::from_secs(5)),
        )
        // Rejoin fast after NATS comes back: a replica out of the cluster misses changes.
        .reconnect_delay_callback(|attempts| {
            Duration::from_millis((attempts as u64 * 200).clamp(100, 2000))
        })
        .event_callback(move |event| {
            let epoch = epoch_tx.clone();
            async move {
                match event {
                    async_nats::Event::Connected => {
                        tracing::info!("cluster: connected to NATS");
                        epoch.send_modify(|e| *e += 1);
                    }
                    async_nats::Event::Disconnected => {
                        tracing::warn!("cluster: NATS connection lost; reconnecting");
                    }
                    other => tracing::debug!(event = %other, "cluster: NATS event"),
                }
            }
        })
        .connect(url.as_str())
        .await
        // The URL is not in the error: async-nats may print it with its credentials.
        .map_err(|e| format!("cluster: cannot use NATS at {redacted}: {}", e.kind()))?;
    let local: HashSet<String> = mounts
        .iter()
        .filter(|m| !m.shared)
        .map(|m| m.mount.name.to_string())
        .collect();
    let bus = crate::NatsBus::new(client.clone(), seal.clone(), &cfg.name, local);
    let shared = mounts
        .into_iter()
        .filter(|m| m.shared)
        .map(|m| {
            let token = crate::token(&m.mount.name, 8);
            let limit = cfg.lease_ttl;
            (
                m.mount.name.to_string(),
                Shared {
                    to_cluster: Tokened::start(&m.mount, bus.clone(), To::Cluster, limit),
                    to_own: Tokened::start(&m.mount, bus.clone(), To::Own, limit),
                    mount: m.mount,
                    token,
                    interests: Mutex::new(HashMap::new()),
                    held: AtomicBool::new(false),
                    running: AtomicUsize::new(0),
                    alone: AtomicUsize::new(0),
                    lease: std::sync::OnceLock::new(),
                    settled: AtomicBool::new(false),
                },
            )
        })
        .collect();
    let inner = Arc::new(Inner {
        client: client.clone(),
        seal: seal.clone(),
        cfg,
        shared,
        lease_problem: Mutex::new(None),
        alive: Mutex::new(HashMap::new()),
        skew: Mutex::new(None),
        clock: Mutex::new(None),
        older: Mutex::new(None),
        listened: AtomicBool::new(false),
        lease_allowed: watch::channel(false).0,
        poke: Arc::new(tokio::sync::Notify::new()),
        tasks: Mutex::new(Vec::new()),
    });
    let weak = Arc::downgrade(&inner);
    let mut tasks = vec![
        tokio::spawn(heartbeat(weak.clone())),
        tokio::spawn(hear_alive(weak.clone())),
        tokio::spawn(answer_sync(weak.clone())),
        tokio::spawn(on_connect(weak.clone(), epoch_rx.clone())),
        tokio::spawn(measure_clock(weak.clone())),
        tokio::spawn(stand_alone(weak.clone(), inner.poke.clone())),
        tokio::spawn(mind_releases(weak.clone())),
    ];
    for name in inner.shared.keys() {
        tasks.push(tokio::spawn(run_watcher(
            weak.clone(),
            name.clone(),
            epoch_rx.clone(),
        )));
    }
    lock(&inner.tasks).extend(tasks);
    Ok(Joined {
        bus,
        watching: ClusterWatching { inner },
        client,
        seal,
    })
}

impl Inner {
    fn subject(&self, kind: &str, token: &str) -> String {
        format!("mcpr.{}.{kind}.{token}", self.cfg.name)
    }

    fn connected(&self) -> bool {
        self.client.connection_state() == async_nats::connection::State::Connected
    }

    /// Whether this replica's clock is too far off to take part.
    fn skewed(&self) -> bool {
        lock(&self.skew).is_some()
    }

    /// Whether this replica stands aside for the previous release, or has not listened yet
    /// for whether one runs: it then says nothing to the cluster.
    fn aside(&self) -> bool {
        lock(&self.older).is_some() || !self.listened.load(Ordering::SeqCst)
    }

    /// Whether this replica is still joining: not listened yet, or a shared mount's lease
    /// not tried yet (a client subscribing then would find no watcher).
    fn joining(&self) -> bool {
        !self.listened.load(Ordering::SeqCst)
            || self.shared.values().any(|m| {
                if m.settled.load(Ordering::SeqCst) {
                    return false;
                }
                let settled = m.lease.get().is_some_and(|(decided, held)| {
                    decided.load(Ordering::SeqCst)
                        && *held.borrow() == m.held.load(Ordering::SeqCst)
                });
                if settled {
                    m.settled.store(true, Ordering::SeqCst);
                }
                !settled
            })
    }

    /// Whether this replica takes part in the cluster's watching now: connected, its clock
    /// right, no replica of the previous release running.
    fn takes_part(&self) -> bool {
        self.connected() && !self.skewed() && !self.aside()
    }

    /// Publish `payload` on `subject`, sealed as `kind` for it.
    async fn publish(&self, kind: Kind, subject: String, payload: &[u8]) -> Result<(), String> {
        let sealed = self.seal.seal(kind, &subject, payload);
        self.client
            .publish(subject, sealed)
            .await
            .map_err(|e| e.to_string())
    }

    /// Ask the watcher of the mount whose subjects carry `token`: `payload` sealed as a
    /// `want`, and its reply within `within` (`Err(None)`: none came in time).
    async fn ask_watcher(
        &self,
        token: &str,
        payload: &Value,
        within: Duration,
    ) -> Result<async_nats::Message, Option<async_nats::RequestError>> {
        let subject = self.subject("want", token);
        let sealed = self.seal.seal(
            Kind::Want,
            &subject,
            &serde_json::to_vec(payload).expect("json"),
        );
        match tokio::time::timeout(within, self.client.request(subject, sealed)).await {
            Ok(reply) => reply.map_err(Some),
            Err(_) => Err(None),
        }
    }

    fn touch(&self, replica: &str) {
        lock(&self.alive).insert(replica.to_owned(), Instant::now());
    }

    /// Publish this replica's whole interest set for `mount` (replacing what the watcher
    /// holds for it), in chunks under NATS's payload limit.
    async fn announce_all(&self, mount: &str) {
        let Some(m) = self.shared.get(mount) else {
            return;
        };
        if self.skewed() || self.aside() {
            // Its messages would be refused as stale, or it stands aside; it watches its
            // own (`stand_alone`).
            return;
        }
        let topics: Vec<ChangeEvent> = lock(&m.interests).keys().cloned().collect();
        let subject = self.subject("want", &m.token);
        let mut chunk: Vec<Value> = Vec::new();
        let mut size = 0;
        let mut first = true;
        let send = |chunk: Vec<Value>, reset: bool, done: bool| {
            let payload =
                json!({"replica": self.cfg.replica, "reset": reset, "done": done, "add": chunk});
            let subject = subject.clone();
            async move {
                let payload = serde_json::to_vec(&payload).expect("json");
                if let Err(e) = self.publish(Kind::Want, subject, &payload).await {
                    tracing::warn!(error = %e, "cluster: cannot announce interests");
                }
            }
        };
        for t in topics {
            let v = serde_json::to_value(&t).expect("events serialise");
            size += v.to_string().len() + 1;
            chunk.push(v);
            if size >= CHUNK_BYTES {
                send(std::mem::take(&mut chunk), first, false).await;
                first = false;
                size = 0;
            }
        }
        // Always a last message, possibly empty: `done` is what ends the watches the
        // replica no longer names.
        send(chunk, first, true).await;
    }

    /// Record one more local interest in `topic` of shared mount `mount` and tell the
    /// watcher; the provider's refusal comes back as the error.
    async fn want(self: &Arc<Self>, mount: &str, topic: ChangeEvent) -> Result<WatchGuard> {
        let m = &self.shared[mount];
        let first = {
            let mut i = lock(&m.interests);
            let n = i.entry(topic.clone()).or_insert(0);
            *n += 1;
            *n == 1
        };
        let guard = WatchGuard::new(Release {
            inner: Arc::downgrade(self),
            mount: mount.to_owned(),
            topic: topic.clone(),
        });
        if first {
            self.poke.notify_one();
        }
        if !first || !self.takes_part() {
            // Announced already, or replayed on the watcher's sync after NATS is back;
            // meanwhile this replica watches it itself (`stand_alone`).
            return Ok(guard);
        }
        let payload = json!({"replica": self.cfg.replica, "add": [topic]});
        let within = self.cfg.lease_ttl + Duration::from_secs(2);
        match self.ask_watcher(&m.token, &payload, within).await {
            Ok(msg) => match self
                .seal
                .receive(Kind::Answer, &msg.subject, &msg.payload)
                .map(serde_json::from_slice::<Value>)
                .unwrap_or_else(|| Ok(json!({"forged": true})))
            {
                Ok(v) if v.get("error").is_some() => {
                    // The watcher did not add it: nothing to withdraw there.
                    std::mem::forget(guard);
                    self.forget(mount, &topic);
                    Err(error_from_json(&v["error"]))
                }
                Ok(v) if v.get("forged").is_some() => {
                    // Not the watcher's answer: the interest stays, as with no answer.
                    Ok(guard)
                }
                Ok(_) => Ok(guard),
                Err(e) => {
                    tracing::warn!(error = %e, "cluster: malformed answer from a watcher");
                    Ok(guard)
                }
            },
            // No watcher yet, or it is slow: the interest stays recorded and is replayed
            // when a watcher syncs.
            Err(Some(e)) => {
                tracing::debug!(error = %e, "cluster: no watcher answered");
                Ok(guard)
            }
            Err(None) => Ok(guard),
        }
    }

    /// The change token of `uri` of shared mount `mount` as its watcher sees it (hashed as
    /// tokens travel, [`Seal::change_token`]): asked of the watcher, bounded by half a TTL (at
    /// most a second), since a listen's acknowledgment waits for it. `None` when no watcher
    /// answers in time, or its watch has no token.
    async fn watcher_token(&self, mount: &str, uri: &ResourceUri) -> Option<String> {
        let m = self.shared.get(mount)?;
        let topic = ChangeEvent::Updated {
            uri: uri.as_str().to_owned(),
        };
        let payload = json!({"replica": self.cfg.replica, "token_of": topic});
        let within = (self.cfg.lease_ttl / 2).min(Duration::from_secs(1));
        let msg = self.ask_watcher(&m.token, &payload, within).await.ok()?;
        let answer = self
            .seal
            .receive(Kind::Answer, &msg.subject, &msg.payload)?;
        let v: Value = serde_json::from_slice(answer).ok()?;
        v.get("token").and_then(Value::as_str).map(str::to_owned)
    }

    /// Drop one local interest; true when it was the last.
    fn forget(&self, mount: &str, topic: &ChangeEvent) -> bool {
        let Some(m) = self.shared.get(mount) else {
            return false;
        };
        let mut i = lock(&m.interests);
        match i.get_mut(topic) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            Some(_) => {
                i.remove(topic);
                true
            }
            None => false,
        }
    }
}

/// Withdraws a local interest when the registry releases its watch.
struct Release {
    inner: std::sync::Weak<Inner>,
    mount: String,
    topic: ChangeEvent,
}

impl Drop for Release {
    fn drop(&mut self) {
        let Some(inner) = self.inner.upgrade() else {
            return;
        };
        if !inner.forget(&self.mount, &self.topic) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let subject = inner.subject("want", &inner.shared[&self.mount].token);
        let payload = json!({"replica": inner.cfg.replica, "remove": [self.topic]});
        let payload = serde_json::to_vec(&payload).expect("json");
        // A removal lost while NATS is down is corrected by the next sync (a reset).
        rt.spawn(async move {
            let _ = inner.publish(Kind::Want, subject, &payload).await;
        });
    }
}

#[async_trait::async_trait]
impl Watching for ClusterWatching {
    async fn watch(
        &self,
        mount: &str,
        provider: &Arc<dyn Provider>,
        uri: &ResourceUri,
        sink: ChangeSink,
    ) -> Result<WatchGuard> {
        if !self.inner.shared.contains_key(mount) {
            return provider.watch(uri, sink).await;
        }
        self.inner
            .want(
                mount,
                ChangeEvent::Updated {
                    uri: uri.as_str().to_owned(),
                },
            )
            .await
    }

    async fn watch_list(
        &self,
        mount: &str,
        provider: &Arc<dyn Provider>,
        sink: ChangeSink,
    ) -> Result<WatchGuard> {
        if !self.inner.shared.contains_key(mount) {
            return provider.watch_list(sink).await;
        }
        self.inner
            .want(
                mount,
                ChangeEvent::ListChanged {
                    mount: mount.to_owned(),
                },
            )
            .await
    }

    /// On a shared mount: this replica's own token where its provider has one (files and
    /// git always; S3, SQL and api only for a resource this replica watches itself), else
    /// the watcher's. Hashed either way, so the two compare: a listen takes one before its
    /// acknowledgment and one once its watches are in place, and a replica that is not the
    /// watcher has no watch of its own, so without the watcher's token it could not tell a
    /// change in between (its event may reach this replica before the listen's subscription
    /// is in the registry, and is then lost to that listen).
    async fn change_token(
        &self,
        mount: &str,
        provider: &Arc<dyn Provider>,
        uri: &ResourceUri,
    ) -> Option<String> {
        let i = &self.inner;
        let Some(m) = i.shared.get(mount) else {
            return provider.change_token(uri).await;
        };
        if let Some(t) = provider.change_token(uri).await {
            return Some(i.seal.change_token(&t));
        }
        if m.held.load(Ordering::SeqCst) || !i.takes_part() {
            // The watcher's watches are this provider's; cut off, nobody else can answer.
            return None;
        }
        i.watcher_token(mount, uri).await
    }

    fn cluster(&self) -> Option<ClusterStatus> {
        let connected = self.inner.connected();
        let problem = if connected {
            lock(&self.inner.older)
                .clone()
                .or_else(|| lock(&self.inner.skew).clone())
                .or_else(|| {
                    self.inner.joining().then(|| {
                        "cluster: joining (listening for the running replicas' heartbeats)"
                            .to_owned()
                    })
                })
                .or_else(|| lock(&self.inner.lease_problem).clone())
        } else {
            Some(format!(
                "cluster: NATS unreachable at {}",
                mcpr_core::redact_url(&self.inner.cfg.nats_url)
            ))
        };
        let mut watchers: Vec<(String, bool)> = self
            .inner
            .shared
            .iter()
            .map(|(name, m)| (name.clone(), m.held.load(Ordering::SeqCst)))
            .collect();
        watchers.sort();
        let mut standalone: Vec<(String, usize)> = self
            .inner
            .shared
            .iter()
            .map(|(name, m)| (name.clone(), m.alone.load(Ordering::SeqCst)))
            .collect();
        standalone.sort();
        Some(ClusterStatus {
            connected,
            problem,
            watchers,
            rejected: self.inner.seal.rejected(),
            standalone,
            clock_offset_ms: lock(&self.inner.clock).map(|c| c.offset_ms),
            streams_recreated: self.inner.seal.streams_recreated(),
            session_records_restored: self.inner.seal.records_restored(),
        })
    }
}

impl ClusterWatching {
    /// How many topics of shared mount `mount` this replica watches for the cluster now (0
    /// when another replica is its watcher).
    pub fn running(&self, mount: &str) -> usize {
        self.inner
            .shared
            .get(mount)
            .map_or(0, |m| m.running.load(Ordering::SeqCst))
    }

    /// Say goodbye, as a replica that stops: for each shared mount, an empty interest set,
    /// so the watcher ends the watches only this replica wanted now rather than after
    /// [`forget_after`] of silence. Bounded by a second (NATS may be unreachable).
    pub async fn leave(&self) {
        let i = &self.inner;
        if !i.takes_part() {
            return;
        }
        let bye = async {
            for m in i.shared.values() {
                let payload =
                    json!({"replica": i.cfg.replica, "reset": true, "done": true, "add": []});
                let payload = serde_json::to_vec(&payload).expect("json");
                let _ = i
                    .publish(Kind::Want, i.subject("want", &m.token), &payload)
                    .await;
            }
            let _ = i.client.flush().await;
        };
        if tokio::time::timeout(Duration::from_secs(1), bye)
            .await
            .is_err()
        {
            tracing::debug!("cluster: the goodbye did not reach NATS in time");
        }
    }

    /// How many of this replica's own topics of shared mount `mount` it watches by itself
    /// now (cut off from NATS, or its clock off).
    pub fn standalone(&self, mount: &str) -> usize {
        self.inner
            .shared
            .get(mount)
            .map_or(0, |m| m.alone.load(Ordering::SeqCst))
    }
}

/// While this replica does not take part in the cluster (NATS unreachable, or its clock
/// off), watch its own clients' topics of every shared mount itself, delivering in process:
/// the cluster's watcher cannot reach it. Stops a TTL after it takes part again, once its
/// interests are announced again and the watcher covers them (the overlap costs at most a
/// duplicate; a gap would lose a change). When it finds itself cut off, each topic its
/// clients watched then is said to have maybe changed once its own watch runs: the events of
/// the time between the cut and its noticing (three missed pongs) went to the connection it
/// dropped, and its own watch started after them.
async fn stand_alone(inner: std::sync::Weak<Inner>, poke: Arc<tokio::sync::Notify>) {
    let mut running: HashMap<String, HashMap<ChangeEvent, WatchGuard>> = HashMap::new();
    // Topics whose watch failed, and when: tried again a TTL later, not every tick.
    let mut failed: HashMap<ChangeEvent, Instant> = HashMap::new();
    let mut was_alone = false;
    // Before it first joins, a replica is not cut off: it is starting (or NATS is down,
    // which `/readyz` names).
    let mut joined = false;
    let mut back_since: Option<Instant> = None;
    // (mount, topic) watched when this replica found itself cut off, not yet said to have
    // maybe changed.
    let mut owed: HashSet<(String, ChangeEvent)> = HashSet::new();
    let mut was_apart = false;
    loop {
        let Some(i) = inner.upgrade() else { return };
        let ttl = i.cfg.lease_ttl;
        let apart = !i.takes_part();
        let alone = if apart {
            back_since = None;
            true
        } else if was_alone {
            back_since.get_or_insert_with(Instant::now).elapsed() < ttl
        } else {
            false
        };
        // Cut off (again): what its own watches do not cover yet is owed a notice. Also
        // within the grace after a return, whose watches cover only the earlier outage.
        if apart && !was_apart && joined {
            for (name, m) in &i.shared {
                let run = running.get(name);
                owed.extend(
                    lock(&m.interests)
                        .keys()
                        .filter(|t| !run.is_some_and(|r| r.contains_key(*t)))
                        .map(|t| (name.clone(), t.clone())),
                );
            }
        }
        was_apart = apart;
        joined |= !apart;
        if alone && !was_alone && joined {
            tracing::warn!(
                "cluster: this replica is on its own (NATS unreachable, its clock off, or standing \
                 aside for an older release); it watches its own clients' subscriptions of \
                 shared mounts itself"
            );
        } else if was_alone && !alone {
            tracing::info!(
                "cluster: this replica takes part again; the cluster's watchers serve its \
                 subscriptions"
            );
            back_since = None;
            owed.clear();
        }
        was_alone = alone;
        failed.retain(|_, at| at.elapsed() < ttl);
        for (name, m) in &i.shared {
            let run = running.entry(name.clone()).or_default();
            let want: HashSet<ChangeEvent> = if alone {
                lock(&m.interests)
                    .keys()
                    // Back in the cluster, only the watches that served the outage run out
                    // their grace; a topic wanted since is announced to the watcher.
                    .filter(|t| apart || run.contains_key(*t))
                    .cloned()
                    .collect()
            } else {
                HashSet::new()
            };
            // Guards of the providers' watches end outside any lock.
            let ended: Vec<WatchGuard> = run
                .extract_if(|t, _| !want.contains(t))
                .map(|(_, g)| g)
                .collect();
            drop(ended);
            for t in want {
                if run.contains_key(&t) || failed.contains_key(&t) {
                    continue;
                }
                let sink = ChangeSink::new(m.to_own.clone(), name.clone());
                match start_with(&m.mount, sink, &t, ttl).await {
                    Ok(g) => {
                        if owed.remove(&(name.clone(), t.clone())) {
                            m.to_own.publish(name, t.clone());
                        }
                        run.insert(t, g);
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "cluster: a replica's own watch failed");
                        failed.insert(t, Instant::now());
                    }
                }
            }
            m.alone.store(run.len(), Ordering::SeqCst);
        }
        drop(i);
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(200)) => {}
            () = poke.notified() => {}
        }
    }
}

/// A measurement of this replica's clock ([`judge_clock`]).
#[derive(Clone, Copy)]
struct ClockReading {
    /// This replica's clock minus the NATS server's, in ms.
    offset_ms: i64,
    /// This replica's wall clock (ms) and monotonic clock when it was taken, so that a step
    /// of the wall clock since (NTP, an operator) shows ([`clock_holds`]).
    wall_ms: u64,
    at: Instant,
}

/// How far (in ms) a replica's clock may be from the NATS server's: two replicas within it
/// are within [`crate::CLOCK_SKEW`] of each other, which their sealed messages and records
/// tolerate.
fn clock_limit_ms() -> i64 {
    i64::try_from(crate::CLOCK_SKEW.as_millis() / 2).unwrap_or(i64::MAX)
}

/// Compare this replica's clock with the NATS server's every TTL (at least every second):
/// write a record into the lease stream and read back when the server stored it. Until the
/// first measurement the leases wait for it ([`allow_leases`]), so it is tried again every
/// twentieth of a TTL until it succeeds, not a period later.
async fn measure_clock(inner: std::sync::Weak<Inner>) {
    loop {
        let Some(i) = inner.upgrade() else { return };
        let period = i.cfg.lease_ttl.max(Duration::from_secs(1));
        // Standing aside for the previous release, it writes nothing in the lease stream.
        if i.connected() && lock(&i.older).is_none() {
            match clock_offset(&i, period).await {
                Ok(Some(offset)) => judge_clock(&i, offset),
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "cluster: cannot read the NATS server's clock")
                }
            }
        }
        let pause = match *lock(&i.clock) {
            Some(_) => period,
            None => (i.cfg.lease_ttl / 20).max(Duration::from_millis(10)),
        };
        drop(i);
        tokio::time::sleep(pause).await;
    }
}

/// This replica's clock minus the NATS server's, in ms; `None` when the round trip took
/// too long for the answer to mean anything.
async fn clock_offset(i: &Inner, within: Duration) -> std::result::Result<Option<i64>, String> {
    let subject = format!(
        "mcpr.{}.lease.clock.{}",
        i.cfg.name,
        crate::token(&i.cfg.replica, 8)
    );
    let stream = format!("MCPR_{}_LEASES", i.cfg.name);
    let before = crate::seal::now_ms();
    let seq = crate::js::publish(&i.client, &subject, bytes::Bytes::new(), None, within)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("no sequence")?;
    let after = crate::seal::now_ms();
    let server = crate::js::stored_at(&i.client, &stream, seq, within)
        .await
        .map_err(|e| e.to_string())?;
    let as_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    // The server stored it between `before` and `after` by this clock.
    let uncertainty = as_i64(after.saturating_sub(before)) / 2;
    if uncertainty > clock_limit_ms() / 4 {
        return Ok(None);
    }
    Ok(Some(as_i64(before) + uncertainty - as_i64(server)))
}

/// Record the measured `offset`; beyond [`clock_limit_ms`], name it (`/readyz`, a warning
/// once) and stand aside from the leases until it is back within.
fn judge_clock(i: &Inner, offset: i64) {
    *lock(&i.clock) = Some(ClockReading {
        offset_ms: offset,
        wall_ms: crate::seal::now_ms(),
        at: Instant::now(),
    });
    let limit = clock_limit_ms();
    let was = i.skewed();
    if offset.abs() > limit {
        let problem = format!(
            "cluster: this replica's clock is {} ms {} the NATS server's, more than the {limit} ms \
             allowed; it holds no watcher lease and watches its own clients' subscriptions \
             itself until its clock is set right (NTP)",
            offset.abs(),
            if offset > 0 { "ahead of" } else { "behind" },
        );
        if !was {
            tracing::warn!(offset_ms = offset, limit_ms = limit, "{problem}");
        }
        *lock(&i.skew) = Some(problem);
        allow_leases(i);
    } else {
        if was {
            tracing::info!(
                offset_ms = offset,
                "cluster: this replica's clock agrees with the NATS server's again; it takes part in watching"
            );
        }
        *lock(&i.skew) = None;
        allow_leases(i);
    }
}

/// Whether this replica's clock is still within [`clock_limit_ms`] of the NATS server's:
/// its last measured offset plus however far its wall clock has moved since, against its
/// monotonic clock. A lease asks this before every write, because a clock stepped 40 s
/// ahead makes the holder's record look expired at once, while the next measurement is up
/// to a period away: a replica whose clock was stepped took the lease from its live holder
/// in that moment (two holders for 28 ms), before its measurement told it to stand aside.
fn clock_holds(i: &Inner) -> bool {
    let Some(c) = *lock(&i.clock) else {
        return false;
    };
    let elapsed = u64::try_from(c.at.elapsed().as_millis()).unwrap_or(u64::MAX);
    offset_now(c.offset_ms, c.wall_ms, elapsed, crate::seal::now_ms()).abs() <= clock_limit_ms()
}

/// The clock's offset now: `offset` as measured when the wall clock read `wall`, plus how
/// much further the wall clock (now `wall_now`) moved than the monotonic clock did
/// (`elapsed`, ms) since.
fn offset_now(offset: i64, wall: u64, elapsed: u64, wall_now: u64) -> i64 {
    let i = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let stepped = i(wall_now)
        .saturating_sub(i(wall))
        .saturating_sub(i(elapsed));
    offset.saturating_add(stepped)
}

/// Whether this replica may hold leases now (its clock measured and right, not standing
/// aside), told to the leases (and the re-announcement) only on a change: every receiver
/// wakes on a send, and an unchanged verdict every TTL would re-announce every interest every
/// TTL. Not before the first measurement: until then nothing says its clock is right, and a
/// clock far off takes live records for expired ones ([`clock_holds`]).
fn allow_leases(i: &Inner) {
    let measured = lock(&i.clock).is_some();
    let allowed = measured && !i.skewed() && !i.aside();
    i.lease_allowed.send_if_modified(|a| {
        let changed = *a != allowed;
        *a = allowed;
        changed
    });
}

/// Decide, every twentieth of a TTL, whether this replica takes part or stands aside: it
/// takes part once it has listened for half a TTL since it first connected (every running
/// replica beats every third) and while no replica of the previous release has been heard
/// for one and a half TTLs (its heartbeats, or its records on a lease). Standing aside, it holds no lease,
/// says nothing to the cluster, answers `/readyz` not ready naming those replicas, refuses
/// legacy sessions, and watches its own clients' subscriptions itself (`stand_alone`), so the
/// previous release runs the cluster undisturbed.
async fn mind_releases(inner: std::sync::Weak<Inner>) {
    let mut first_connected: Option<Instant> = None;
    loop {
        let Some(i) = inner.upgrade() else { return };
        let ttl = i.cfg.lease_ttl;
        if i.connected() {
            let since = *first_connected.get_or_insert_with(Instant::now);
            if since.elapsed() >= ttl / 2 {
                i.listened.store(true, Ordering::SeqCst);
            }
        }
        mind(&i);
        drop(i);
        tokio::time::sleep((ttl / 20).max(Duration::from_millis(10))).await;
    }
}

/// Stand aside while a replica of the previous release has been heard within one and a
/// half TTLs, and take part again once none has; tell the leases. Half a TTL more than its
/// silence takes to show: that release renews its lease every third of a TTL, each record
/// lasting a TTL, so a record of its last renewal is gone by then and this replica's first
/// write does not find it (which would make it stand aside once more).
fn mind(i: &Inner) {
    let older = i.seal.previous_replicas(i.cfg.lease_ttl * 3 / 2);
    let problem = (!older.is_empty()).then(|| {
        format!(
            "cluster: replica {} of an older release (protocol format {}) runs on cluster {}; \
             this release (format {}) cannot share a cluster with it, so this replica stands \
             aside: it holds no watcher lease and serves its own clients only, until every \
             replica of the older release is stopped (docs/cluster.md, Upgrading)",
            older.join(", "),
            crate::seal::PREVIOUS,
            i.cfg.name,
            crate::seal::FORMAT,
        )
    });
    let mut current = lock(&i.older);
    if *current != problem {
        match &problem {
            Some(p) => tracing::warn!("{p}"),
            None => tracing::info!(
                "cluster: no replica of the older release heard for one and a half lease TTLs; \
                 this replica takes part in the cluster"
            ),
        }
        i.seal.set_aside(problem.clone());
        *current = problem;
    }
    drop(current);
    allow_leases(i);
}

/// Announce this replica every `lease_ttl / 3`.
async fn heartbeat(inner: std::sync::Weak<Inner>) {
    loop {
        let Some(i) = inner.upgrade() else { return };
        let period = i.cfg.lease_ttl / 3;
        // A replica standing aside says nothing, so the previous release's replicas hear
        // nothing they would refuse.
        if i.connected() && !i.aside() {
            let _ = i
                .publish(
                    Kind::Alive,
                    format!("mcpr.{}.alive", i.cfg.name),
                    i.cfg.replica.as_bytes(),
                )
                .await;
        }
        drop(i);
        tokio::time::sleep(period).await;
    }
}

/// Note when each replica was last heard of.
async fn hear_alive(inner: std::sync::Weak<Inner>) {
    let sub = {
        let Some(i) = inner.upgrade() else { return };
        i.client
            .subscribe(format!("mcpr.{}.alive", i.cfg.name))
            .await
    };
    let Ok(mut sub) = sub else {
        tracing::warn!("cluster: cannot subscribe to heartbeats");
        return;
    };
    while let Some(msg) = sub.next().await {
        let Some(i) = inner.upgrade() else { return };
        let Some(payload) = i.seal.receive(Kind::Alive, &msg.subject, &msg.payload) else {
            // A replica of the previous release (`mind_releases` stands aside for it).
            if i.seal.previous_alive(&msg.subject, &msg.payload).is_some() {
                mind(&i);
            }
            continue;
        };
        if let Ok(replica) = std::str::from_utf8(payload) {
            i.touch(replica);
        }
    }
}

/// Answer every watcher's sync with this replica's interests in its mount.
async fn answer_sync(inner: std::sync::Weak<Inner>) {
    let sub = {
        let Some(i) = inner.upgrade() else { return };
        i.client
            .subscribe(format!("mcpr.{}.sync.*", i.cfg.name))
            .await
    };
    let Ok(mut sub) = sub else {
        tracing::warn!("cluster: cannot subscribe to watcher syncs");
        return;
    };
    while let Some(msg) = sub.next().await {
        let Some(i) = inner.upgrade() else { return };
        if i.seal
            .receive(Kind::Sync, &msg.subject, &msg.payload)
            .is_none()
        {
            continue;
        }
        let token = msg.subject.rsplit('.').next().unwrap_or_default();
        let mount = i
            .shared
            .iter()
            .find(|(_, m)| m.token == token)
            .map(|(n, _)| n.clone());
        if let Some(mount) = mount {
            i.announce_all(&mount).await;
        }
    }
}

/// After every (re)connection: make sure the lease stream exists (a restarted NATS lost it)
/// and re-announce every interest (a watcher may have lost them with the connection).
async fn on_connect(inner: std::sync::Weak<Inner>, mut epoch: watch::Receiver<u64>) {
    loop {
        // Prepared once at start too: the first connection may come before this task runs.
        loop {
            let Some(i) = inner.upgrade() else { return };
            if i.connected() {
                match Lease::prepare(&i.client, &i.cfg.name, i.cfg.lease_ttl).await {
                    Ok(()) => {
                        *lock(&i.lease_problem) = None;
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cluster: cannot prepare the watcher leases");
                        if e.contains("lease_ttl_ms") {
                            *lock(&i.lease_problem) = Some(format!("cluster: {e}"));
                        }
                    }
                }
            }
            drop(i);
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        // A clock set right again, or the end of standing aside, is a reason to announce too
        // (a skewed replica, or one standing aside, announces nothing). Subscribed first, so
        // a change during the announcement is not missed.
        let mut allowed = match inner.upgrade() {
            Some(i) => i.lease_allowed.subscribe(),
            None => return,
        };
        announce_everything(&inner).await;
        loop {
            tokio::select! {
                changed = epoch.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    break;
                }
                changed = allowed.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    if *allowed.borrow_and_update() {
                        announce_everything(&inner).await;
                    }
                }
            }
        }
    }
}

/// Announce this replica's interests in every shared mount.
async fn announce_everything(inner: &std::sync::Weak<Inner>) {
    if let Some(i) = inner.upgrade() {
        let mounts: Vec<String> = i.shared.keys().cloned().collect();
        for m in mounts {
            i.announce_all(&m).await;
        }
    }
}

/// A watched topic on the watcher: which replicas want it, and the provider's watch.
struct Watched {
    replicas: HashSet<String>,
    _guard: WatchGuard,
}

/// Compete for `mount`'s lease; while holding it, run the watches every replica wants.
async fn run_watcher(
    inner: std::sync::Weak<Inner>,
    mount: String,
    mut epoch: watch::Receiver<u64>,
) {
    let (lease, ttl) = {
        let Some(i) = inner.upgrade() else { return };
        (
            Lease::compete_while(
                i.client.clone(),
                i.seal.clone(),
                &i.cfg.name,
                &mount,
                &i.cfg.replica,
                i.cfg.lease_ttl,
                Allowed {
                    verdict: i.lease_allowed.subscribe(),
                    clock_holds: {
                        let inner = inner.clone();
                        Arc::new(move || inner.upgrade().is_some_and(|i| clock_holds(&i)))
                    },
                },
            ),
            i.cfg.lease_ttl,
        )
    };
    if let Some(i) = inner.upgrade()
        && let Some(m) = i.shared.get(&mount)
    {
        let _ = m.lease.set((lease.decided(), lease.changes()));
    }
    let mut held = lease.changes();
    loop {
        if held.wait_for(|h| *h).await.is_err() {
            return;
        }
        let Some(i) = inner.upgrade() else { return };
        let m = &i.shared[&mount];
        // Read before the subscription through which this replica starts acting as the
        // mount's watcher: the interval it logs covers all of its watching.
        let (since, since_us) = crate::lease::moment();
        let sub = i.client.subscribe(i.subject("want", &m.token)).await;
        let mut sub = match sub {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cluster: cannot take the watcher's subject");
                drop(i);
                tokio::time::sleep(ttl / 3).await;
                continue;
            }
        };
        m.held.store(true, Ordering::SeqCst);
        tracing::info!(
            target: "mcpr_cluster::lease",
            mount = %mount,
            revision = lease.revision(),
            since = %since,
            since_monotonic_us = since_us,
            "cluster: this replica now watches the mount"
        );
        let _ = i.client.flush().await;
        let sync = i.subject("sync", &m.token);
        let _ = i.publish(Kind::Sync, sync.clone(), b"").await;
        let mut book = Book::default();
        let mut sweep = tokio::time::interval(ttl / 3);
        epoch.mark_unchanged();
        let acting = async {
            loop {
                tokio::select! {
                    msg = sub.next() => {
                        let Some(msg) = msg else {
                            return "its subscription to the interests ended";
                        };
                        handle_want(&i, &mount, &mut book, msg).await;
                        m.running.store(book.topics.len(), Ordering::SeqCst);
                    }
                    changed = epoch.changed() => {
                        if changed.is_err() {
                            return "the cluster connection is gone";
                        }
                        // Interests announced while this replica was disconnected were lost.
                        let _ = i.publish(Kind::Sync, sync.clone(), b"").await;
                    }
                    _ = sweep.tick() => {
                        let alive = lock(&i.alive).clone();
                        let keep = forget_after(ttl);
                        let fresh = |r: &String| alive.get(r).is_some_and(|t| t.elapsed() <= keep);
                        // A replica silent that long is taken for gone (a replica that stops
                        // says so, `ClusterWatching::leave`; one killed cannot). If it was only
                        // cut off, it is asked for its interests (a sync) once it is heard
                        // again, and it announces them on its reconnect: never lost for good.
                        if book.forget_silent(fresh) {
                            let _ = i.publish(Kind::Sync, sync.clone(), b"").await;
                        }
                        // Watches replayed by a sync that failed for a passing reason (a
                        // database down during a handover) are tried again, so the
                        // subscriptions they serve do not stay silent.
                        let pending: Vec<ChangeEvent> = book.retry.keys().cloned().collect();
                        for t in pending {
                            if let Ok(guard) = start_replayed(&i, &mount, &t).await {
                                let replicas = book.retry.remove(&t).unwrap_or_default();
                                book.topics.insert(t, Watched { replicas, _guard: guard });
                            }
                        }
                        m.running.store(book.topics.len(), Ordering::SeqCst);
                    }
                }
            }
        };
        // The lease let go ends the watching at once, even in the middle of starting a
        // watch (a provider slow to answer, NATS slow to take a reply): the lease task lets
        // go a third of a TTL before its record can expire, and that third is for the
        // watches to stop, not for a provider to finish.
        let why = tokio::select! {
            why = acting => why,
            lost = held.wait_for(|h| !*h) => match lost {
                Ok(_) => lease.why_let_go(),
                Err(_) => "the lease task ended",
            },
        };
        m.held.store(false, Ordering::SeqCst);
        m.running.store(0, Ordering::SeqCst);
        // Dropping the subscriber and the guards ends this replica's watches of the mount;
        // the time is read after, so the interval logged covers them.
        drop(sub);
        drop(book);
        let (until, until_us) = crate::lease::moment();
        tracing::info!(
            target: "mcpr_cluster::lease",
            mount = %mount,
            why,
            until = %until,
            until_monotonic_us = until_us,
            "cluster: this replica no longer watches the mount"
        );
    }
}

/// How long the watcher keeps the interests of a replica it no longer hears (every replica
/// beats every third of a TTL): twelve TTLs, at least a minute. A replica cut off from NATS
/// lives on and keeps its clients' subscriptions; keeping its interests, the watcher's
/// watches run on through the cut, and its re-announcement on its reconnect ends none of
/// them (no "may have changed" for them). Only a replica that died without a word
/// ([`ClusterWatching::leave`]) keeps watches running for nobody that long.
pub(crate) fn forget_after(ttl: Duration) -> Duration {
    (ttl * 12).max(Duration::from_secs(60))
}

/// Topics whose watch failed for a passing reason, with the replicas that want them.
type Retry = HashMap<ChangeEvent, HashSet<String>>;

/// What the watcher of a mount runs, for which replicas. A topic is in `topics` or in
/// `retry`, never both.
#[derive(Default)]
struct Book {
    topics: HashMap<ChangeEvent, Watched>,
    retry: Retry,
    /// How many topics (watched or waiting for a retry) each replica wants: bounded by
    /// `max_watches`, as each replica's registry bounds its own.
    per_replica: HashMap<String, usize>,
    /// Per replica announcing its whole set (between its `reset` and its `done`): the topics
    /// it held before and has not named again yet.
    unnamed: HashMap<String, HashSet<ChangeEvent>>,
    /// Replicas whose interests were forgotten for their silence, to be asked again once
    /// heard.
    silent: HashSet<String>,
}

/// The most silent replicas remembered; beyond it the oldest memory is cleared (a replica
/// that comes back then re-announces on its own reconnect only).
const MAX_SILENT: usize = 1024;

impl Book {
    fn count(&self, replica: &str) -> usize {
        self.per_replica.get(replica).copied().unwrap_or(0)
    }

    fn entered(&mut self, replica: &str) {
        *self.per_replica.entry(replica.to_owned()).or_insert(0) += 1;
    }

    fn left(per_replica: &mut HashMap<String, usize>, replica: &str) {
        if let Some(n) = per_replica.get_mut(replica) {
            *n -= 1;
            if *n == 0 {
                per_replica.remove(replica);
            }
        }
    }

    /// Forget the interests of the replicas `fresh` refuses (silent for [`forget_after`]), remembering
    /// them; true when one of those remembered is fresh again (its interests must be asked
    /// for again).
    fn forget_silent(&mut self, fresh: impl Fn(&String) -> bool) -> bool {
        let before: Vec<String> = self.per_replica.keys().cloned().collect();
        self.retain_replicas(&fresh);
        for r in before {
            if !self.per_replica.contains_key(&r) {
                if self.silent.len() >= MAX_SILENT {
                    self.silent.clear();
                }
                self.unnamed.remove(&r);
                self.silent.insert(r);
            }
        }
        let back = self.silent.iter().any(&fresh);
        if back {
            self.silent.retain(|r| !fresh(r));
        }
        back
    }

    /// `replica` starts announcing its whole set. With `ends` (it will say `done`), what it
    /// held and does not name again ends at the end ([`Book::end_set`]): the watches it names
    /// again go on, so no "may have changed" is sent for them. Without (a replica of an
    /// earlier release), everything it held ends now.
    fn begin_set(&mut self, replica: &str, ends: bool) {
        if ends {
            let held = self.held_by(replica);
            self.unnamed.insert(replica.to_owned(), held);
        } else {
            self.retain_replicas(|r| r != replica);
        }
    }

    /// `replica` named `topic` in the set it is announcing.
    fn named(&mut self, replica: &str, topic: &ChangeEvent) {
        if let Some(unnamed) = self.unnamed.get_mut(replica) {
            unnamed.remove(topic);
        }
    }

    /// `replica`'s set is complete: what it did not name ends.
    fn end_set(&mut self, replica: &str) {
        for t in self.unnamed.remove(replica).unwrap_or_default() {
            self.remove(&t, replica);
        }
    }

    /// The topics `replica` holds (watched or waiting for a retry).
    fn held_by(&self, replica: &str) -> HashSet<ChangeEvent> {
        self.topics
            .iter()
            .filter(|(_, w)| w.replicas.contains(replica))
            .map(|(t, _)| t)
            .chain(
                self.retry
                    .iter()
                    .filter(|(_, r)| r.contains(replica))
                    .map(|(t, _)| t),
            )
            .cloned()
            .collect()
    }

    /// Forget every interest of the replicas `keep` refuses.
    fn retain_replicas(&mut self, keep: impl Fn(&String) -> bool) {
        let per = &mut self.per_replica;
        let mut kept = |r: &String| {
            let k = keep(r);
            if !k {
                Self::left(per, r);
            }
            k
        };
        self.topics.retain(|_, w| {
            w.replicas.retain(&mut kept);
            !w.replicas.is_empty()
        });
        self.retry.retain(|_, r| {
            r.retain(&mut kept);
            !r.is_empty()
        });
    }

    /// `replica` no longer wants `topic`.
    fn remove(&mut self, topic: &ChangeEvent, replica: &str) {
        if let Some(r) = self.retry.get_mut(topic) {
            if r.remove(replica) {
                Self::left(&mut self.per_replica, replica);
            }
            if r.is_empty() {
                self.retry.remove(topic);
            }
        }
        if let Some(w) = self.topics.get_mut(topic) {
            if w.replicas.remove(replica) {
                Self::left(&mut self.per_replica, replica);
            }
            if w.replicas.is_empty() {
                self.topics.remove(topic);
            }
        }
    }
}

/// One `want` message on the watcher.
async fn handle_want(i: &Arc<Inner>, mount: &str, book: &mut Book, msg: async_nats::Message) {
    let Some(payload) = i.seal.receive(Kind::Want, &msg.subject, &msg.payload) else {
        return;
    };
    let Ok(v) = serde_json::from_slice::<Value>(payload) else {
        tracing::warn!("cluster: malformed interest message");
        return;
    };
    let Some(replica) = v.get("replica").and_then(Value::as_str) else {
        return;
    };
    i.touch(replica);
    if let Some(topic) = v.get("token_of") {
        // A replica asking for the token of a resource this watcher watches (its own
        // provider has none): read through the layer, hashed as tokens travel.
        let token = match serde_json::from_value::<ChangeEvent>(topic.clone()) {
            Ok(ChangeEvent::Updated { uri }) => match ResourceUri::parse(&uri) {
                Ok(uri) => Layered::bounded_by(
                    &i.shared[mount].mount,
                    i.cfg.lease_ttl,
                    "the cluster's lease_ttl_ms",
                )
                .change_token(&uri)
                .await
                .map(|t| i.seal.change_token(&t)),
                Err(_) => None,
            },
            _ => None,
        };
        if let Some(reply) = msg.reply {
            let answer = serde_json::to_vec(&json!({ "token": token })).expect("json");
            let _ = i.publish(Kind::Answer, reply.to_string(), &answer).await;
        }
        return;
    }
    let events = |key: &str| -> Vec<ChangeEvent> {
        v.get(key)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|e| serde_json::from_value(e.clone()).ok())
                    .collect()
            })
            .unwrap_or_default()
    };
    let done = v.get("done").and_then(Value::as_bool);
    if v.get("reset").and_then(Value::as_bool) == Some(true) {
        book.begin_set(replica, done.is_some());
    }
    book.silent.remove(replica);
    for t in events("remove") {
        book.remove(&t, replica);
    }
    let max = i.cfg.max_watches;
    let mut refused = 0usize;
    let mut outcome: Result<()> = Ok(());
    for t in events("add") {
        book.named(replica, &t);
        let known = book
            .topics
            .get(&t)
            .map(|w| &w.replicas)
            .or_else(|| book.retry.get(&t))
            .is_some_and(|r| r.contains(replica));
        if known {
            continue;
        }
        if book.count(replica) >= max {
            refused += 1;
            outcome = Err(over_budget(max));
            continue;
        }
        if let Some(w) = book.topics.get_mut(&t) {
            w.replicas.insert(replica.to_owned());
            book.entered(replica);
            continue;
        }
        if msg.reply.is_none()
            && let Some(r) = book.retry.get_mut(&t)
        {
            // Retried on the next sweep, with the others that want it.
            r.insert(replica.to_owned());
            book.entered(replica);
            continue;
        }
        // A request is a new subscription; a message without a reply replays an interest.
        let started = if msg.reply.is_some() {
            start(i, mount, &t).await
        } else {
            start_replayed(i, mount, &t).await
        };
        match started {
            Ok(guard) => {
                let mut replicas = book.retry.remove(&t).unwrap_or_default();
                replicas.insert(replica.to_owned());
                book.topics.insert(
                    t,
                    Watched {
                        replicas,
                        _guard: guard,
                    },
                );
                book.entered(replica);
            }
            Err(e) => {
                tracing::debug!(error = %e, "cluster: a wanted watch failed");
                // A request hears the error (and its replica drops the interest); a replayed
                // interest has nobody to tell, so a passing failure is retried.
                if msg.reply.is_none() && e.kind.is_temporary() {
                    book.retry.entry(t).or_default().insert(replica.to_owned());
                    book.entered(replica);
                }
                outcome = Err(e);
            }
        }
    }
    if done == Some(true) {
        book.end_set(replica);
    }
    if refused > 0 {
        tracing::warn!(
            replica,
            refused,
            limit = max,
            "cluster: a replica wants more watches of a mount than max_watches; the rest are refused"
        );
    }
    if let Some(reply) = msg.reply {
        let answer = match outcome {
            Ok(()) => json!({"ok": true}),
            Err(e) => json!({"error": error_to_json(&e)}),
        };
        let _ = i
            .publish(
                Kind::Answer,
                reply.to_string(),
                &serde_json::to_vec(&answer).expect("json"),
            )
            .await;
    }
}

/// The refusal of an interest beyond a replica's `max_watches`, as its registry words it.
fn over_budget(max: usize) -> Error {
    Error::over_watch_budget(
        max,
        format!(
            "the cluster's watcher already holds {max} subscriptions of this replica, the limit (max_watches); try again after some are released"
        ),
    )
}

/// Start the provider's watch of `topic`, publishing on the cluster's bus.
///
/// Through the server's layer ([`Layered`]), as this replica's own watches are: a mount
/// that does not declare watching is refused, and the call is counted in
/// `mcp_provider_calls_total`. Bounded by the lease TTL rather than the request timeout: the
/// watcher of a mount handles one interest at a time, so a source slow to start a watch
/// (the http provider fetches the upstream first) would hold every other interest in the
/// mount, and the lease's loss, behind it. The requester waits a TTL and two seconds, so it
/// hears this timeout rather than its own.
async fn start(i: &Inner, mount: &str, topic: &ChangeEvent) -> Result<WatchGuard> {
    let sink = ChangeSink::new(i.shared[mount].to_cluster.clone(), mount.to_owned());
    start_with(&i.shared[mount].mount, sink, topic, i.cfg.lease_ttl).await
}

/// The provider's watch of `topic` reporting to `sink`, through the server's layer, bounded
/// by `limit` (the lease TTL).
async fn start_with(
    mount: &Mount,
    sink: ChangeSink,
    topic: &ChangeEvent,
    limit: Duration,
) -> Result<WatchGuard> {
    let layered = Layered::bounded_by(mount, limit, "the cluster's lease_ttl_ms");
    match topic {
        ChangeEvent::Updated { uri } => {
            layered
                .watch(&LocalWatching, &ResourceUri::parse(uri)?, sink)
                .await
        }
        ChangeEvent::ListChanged { .. } => layered.watch_list(&LocalWatching, sink).await,
    }
}

/// [`start`] for a replayed interest nobody here watched: this replica is taking the mount
/// over (or rejoining, or retrying), and a change between the last watch's end and this one
/// would go unseen. Say it may have changed, with the resource's change token read now: a
/// replica that delivered that token last drops it (nothing changed since its clients were
/// told), the others deliver it (a change, or a source without tokens: never a lost change).
async fn start_replayed(i: &Inner, mount: &str, topic: &ChangeEvent) -> Result<WatchGuard> {
    let guard = start(i, mount, topic).await?;
    i.shared[mount].to_cluster.publish(mount, topic.clone());
    Ok(guard)
}

/// Where a [`Tokened`] bus hands its events.
#[derive(Clone, Copy)]
enum To {
    /// Every replica, through NATS.
    Cluster,
    /// This replica's own clients.
    Own,
}

/// The bus a shared mount's watches publish on: for each event about one resource it reads
/// the source's change token (after the change, so a client told of it reads that state or
/// a later one), then hands both on, in the order the events came. Tokens let each replica
/// drop an event of a state it announced already (`bus.rs`).
struct Tokened {
    queue: tokio::sync::mpsc::Sender<ChangeEvent>,
    bus: crate::NatsBus,
    to: To,
}

/// How many events may wait for their token; beyond that they go on without one (so never
/// lost, only not deduplicated).
const TOKEN_QUEUE: usize = 4096;

impl Tokened {
    /// The bus for `mount`'s events towards `to`, each token read within `limit`. Its task
    /// ends with the last sink holding it.
    fn start(mount: &Mount, bus: crate::NatsBus, to: To, limit: Duration) -> Arc<dyn ChangeBus> {
        let (queue, mut events) = tokio::sync::mpsc::channel::<ChangeEvent>(TOKEN_QUEUE);
        let mount = mount.clone();
        let out = bus.clone();
        tokio::spawn(async move {
            while let Some(event) = events.recv().await {
                let token = match &event {
                    ChangeEvent::Updated { uri } => match ResourceUri::parse(uri) {
                        Ok(uri) => {
                            Layered::bounded_by(&mount, limit, "the cluster's lease_ttl_ms")
                                .change_token(&uri)
                                .await
                        }
                        Err(_) => None,
                    },
                    ChangeEvent::ListChanged { .. } => None,
                };
                hand_on(&out, to, &mount.name, event, token);
            }
        });
        Arc::new(Self { queue, bus, to })
    }
}

fn hand_on(bus: &crate::NatsBus, to: To, mount: &str, event: ChangeEvent, token: Option<String>) {
    match to {
        To::Cluster => bus.publish_with_token(mount, event, token),
        To::Own => bus.deliver_own(mount, event, token),
    }
}

impl ChangeBus for Tokened {
    fn publish(&self, mount: &str, event: ChangeEvent) {
        if let Err(e) = self.queue.try_send(event) {
            let (tokio::sync::mpsc::error::TrySendError::Full(event)
            | tokio::sync::mpsc::error::TrySendError::Closed(event)) = e;
            hand_on(&self.bus, self.to, mount, event, None);
        }
    }

    fn feed(&self) -> ChangeFeed {
        self.bus.feed()
    }

    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<ChangeEvent> {
        self.bus.subscribe()
    }
}

const KINDS: &[(ErrorKind, &str)] = &[
    (ErrorKind::NotFound, "not_found"),
    (ErrorKind::InvalidParams, "invalid_params"),
    (ErrorKind::InvalidCursor, "invalid_cursor"),
    (ErrorKind::TooLarge, "too_large"),
    (ErrorKind::Unsupported, "unsupported"),
    (ErrorKind::Unavailable, "unavailable"),
    (ErrorKind::Timeout, "timeout"),
    (ErrorKind::Internal, "internal"),
];

fn error_to_json(e: &Error) -> Value {
    let kind = KINDS
        .iter()
        .find(|(k, _)| *k == e.kind)
        .map_or("internal", |(_, s)| s);
    json!({"kind": kind, "message": e.message, "uri": e.uri, "details": e.details})
}

fn error_from_json(v: &Value) -> Error {
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or("internal");
    let kind = KINDS
        .iter()
        .find(|(_, s)| *s == kind)
        .map_or(ErrorKind::Internal, |(k, _)| *k);
    let mut e = Error::new(
        kind,
        v.get("message")
            .and_then(Value::as_str)
            .unwrap_or("the cluster's watcher refused the watch"),
    );
    e.uri = v.get("uri").and_then(Value::as_str).map(str::to_owned);
    e.details = v.get("details").and_then(Value::as_object).cloned();
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wall_clock_step_since_the_measurement_moves_the_offset() {
        let t = 1_800_000_000_000u64;
        // Both clocks advanced alike: the offset measured.
        assert_eq!(offset_now(300, t, 5_000, t + 5_000), 300);
        // Stepped 40 s ahead 2 s later, and 20 s back.
        assert_eq!(offset_now(0, t, 2_000, t + 42_000), 40_000);
        assert_eq!(offset_now(100, t, 2_000, t - 18_000), -19_900);
        assert!(offset_now(0, t, 2_000, t + 42_000).abs() > clock_limit_ms());
        // Drift of a few ms, as between two measurements, stays within.
        assert!(offset_now(1_000, t, 1_000, t + 1_003).abs() <= clock_limit_ms());
    }

    fn up(uri: &str) -> ChangeEvent {
        ChangeEvent::Updated { uri: uri.into() }
    }

    /// A watch whose end is counted.
    fn watched(ended: &Arc<AtomicUsize>, replicas: &[&str]) -> Watched {
        struct Count(Arc<AtomicUsize>);
        impl Drop for Count {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        Watched {
            replicas: replicas.iter().map(|r| (*r).to_owned()).collect(),
            _guard: WatchGuard::new(Count(ended.clone())),
        }
    }

    fn book(ended: &Arc<AtomicUsize>) -> Book {
        let mut b = Book::default();
        b.topics.insert(up("a"), watched(ended, &["r1"]));
        b.topics.insert(up("b"), watched(ended, &["r1", "r2"]));
        b.topics.insert(up("c"), watched(ended, &["r1"]));
        b.per_replica.insert("r1".into(), 3);
        b.per_replica.insert("r2".into(), 1);
        b
    }

    #[test]
    fn a_replica_announcing_its_whole_set_again_keeps_the_watches_it_names() {
        let ended = Arc::new(AtomicUsize::new(0));
        let mut b = book(&ended);
        // r1 announces {a, b} in two chunks: nothing ends before the last.
        b.begin_set("r1", true);
        b.named("r1", &up("a"));
        assert_eq!(ended.load(Ordering::SeqCst), 0);
        b.named("r1", &up("b"));
        b.end_set("r1");
        // Only c, which it no longer names, ended; a and b kept running.
        assert_eq!(ended.load(Ordering::SeqCst), 1);
        assert!(b.topics.contains_key(&up("a")) && b.topics.contains_key(&up("b")));
        assert!(!b.topics.contains_key(&up("c")));
        assert_eq!(b.count("r1"), 2);
        assert_eq!(b.count("r2"), 1);
        // A replica of an earlier release (no `done`): its set replaces the old at once.
        b.begin_set("r1", false);
        assert_eq!(b.count("r1"), 0);
        assert_eq!(ended.load(Ordering::SeqCst), 2, "a ended, b is r2's too");
    }

    #[test]
    fn a_silent_replica_is_forgotten_then_asked_again_once_heard() {
        let ended = Arc::new(AtomicUsize::new(0));
        let mut b = book(&ended);
        // r1 silent: its interests go, r2's stay; nobody to ask yet.
        assert!(!b.forget_silent(|r| r == "r2"));
        assert_eq!(b.count("r1"), 0);
        assert_eq!(b.count("r2"), 1);
        assert_eq!(ended.load(Ordering::SeqCst), 2);
        assert!(!b.forget_silent(|r| r == "r2"), "still silent");
        // r1 heard again: it is asked for its interests, once.
        assert!(b.forget_silent(|_| true));
        assert!(!b.forget_silent(|_| true));
    }

    #[test]
    fn errors_cross_the_wire_with_their_kind() {
        for (kind, _) in KINDS {
            let mut e = Error::new(*kind, "m");
            e.uri = Some("x://y".into());
            let back = error_from_json(&error_to_json(&e));
            assert_eq!(back, e);
        }
    }
}
