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
//!   reconnect); every replica answers with its whole interest set for the mount (`reset`),
//!   chunked under NATS's payload limit. A replica also re-announces after its own reconnect.
//! - `mcpr.<c>.alive`: every replica's id, every `lease_ttl / 3`; the watcher forgets the
//!   interests of a replica silent for longer than `lease_ttl`.
//!
//! Every message is sealed ([`Seal`]) for its subject, answers for the requester's inbox;
//! what does not verify, or arrives a second time (a captured removal replayed would drop
//! another replica's watch), is dropped and counted. A replica's interests beyond
//! `max_watches` (the budget its own registry keeps to) are refused on the watcher.
//!
//! Only the watcher publishes a shared mount's events, so each change reaches each replica
//! once; around a handover or a NATS restart two replicas may briefly both watch (a duplicate
//! notification, never a lost subscription).

use mcpr_core::sync::lock;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use mcpr_core::{
    ChangeBus, ChangeEvent, ChangeSink, ClusterStatus, Error, ErrorKind, LocalWatching, Provider,
    ResourceUri, Result, WatchGuard, Watching,
};
use mcpr_server::{Layered, Mount};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::seal::{Kind, Seal};
use crate::{ClusterConfig, Lease};

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
    /// What this replica's clients watch, with how many guards hold each.
    interests: Mutex<HashMap<ChangeEvent, usize>>,
    /// Whether this replica holds the mount's lease (and runs its watches).
    held: AtomicBool,
    /// How many topics this replica watches for the cluster while it holds the lease.
    running: AtomicUsize,
}

struct Inner {
    client: async_nats::Client,
    seal: Arc<Seal>,
    cfg: ClusterConfig,
    bus: Arc<dyn ChangeBus>,
    shared: HashMap<String, Shared>,
    /// Why the lease stream cannot be used, when it cannot (not a connection problem).
    lease_problem: Mutex<Option<String>>,
    /// When each replica was last heard of.
    alive: Mutex<HashMap<String, Instant>>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for t in self.tasks.get_mut().expect("tasks lock").drain(..) {
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
            (
                m.mount.name.to_string(),
                Shared {
                    mount: m.mount,
                    token,
                    interests: Mutex::new(HashMap::new()),
                    held: AtomicBool::new(false),
                    running: AtomicUsize::new(0),
                },
            )
        })
        .collect();
    let inner = Arc::new(Inner {
        client: client.clone(),
        seal: seal.clone(),
        cfg,
        bus: Arc::new(bus.clone()),
        shared,
        lease_problem: Mutex::new(None),
        alive: Mutex::new(HashMap::new()),
        tasks: Mutex::new(Vec::new()),
    });
    let weak = Arc::downgrade(&inner);
    let mut tasks = vec![
        tokio::spawn(heartbeat(weak.clone())),
        tokio::spawn(hear_alive(weak.clone())),
        tokio::spawn(answer_sync(weak.clone())),
        tokio::spawn(on_connect(weak.clone(), epoch_rx.clone())),
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

    /// Publish `payload` on `subject`, sealed as `kind` for it.
    async fn publish(&self, kind: Kind, subject: String, payload: &[u8]) -> Result<(), String> {
        let sealed = self.seal.seal(kind, &subject, payload);
        self.client
            .publish(subject, sealed)
            .await
            .map_err(|e| e.to_string())
    }

    fn touch(&self, replica: &str) {
        self.alive
            .lock()
            .expect("alive lock")
            .insert(replica.to_owned(), Instant::now());
    }

    /// Publish this replica's whole interest set for `mount` (replacing what the watcher
    /// holds for it), in chunks under NATS's payload limit.
    async fn announce_all(&self, mount: &str) {
        let Some(m) = self.shared.get(mount) else {
            return;
        };
        let topics: Vec<ChangeEvent> = m
            .interests
            .lock()
            .expect("interests lock")
            .keys()
            .cloned()
            .collect();
        let subject = self.subject("want", &m.token);
        let mut chunk: Vec<Value> = Vec::new();
        let mut size = 0;
        let mut first = true;
        let send = |chunk: Vec<Value>, reset: bool| {
            let payload = json!({"replica": self.cfg.replica, "reset": reset, "add": chunk});
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
                send(std::mem::take(&mut chunk), first).await;
                first = false;
                size = 0;
            }
        }
        if first || !chunk.is_empty() {
            send(chunk, first).await;
        }
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
        if !first || !self.connected() {
            // Announced already, or replayed on the watcher's sync after NATS is back.
            return Ok(guard);
        }
        let payload = json!({"replica": self.cfg.replica, "add": [topic]});
        let within = self.cfg.lease_ttl + Duration::from_secs(2);
        let subject = self.subject("want", &m.token);
        let sealed = self.seal.seal(
            Kind::Want,
            &subject,
            &serde_json::to_vec(&payload).expect("json"),
        );
        let reply = tokio::time::timeout(within, self.client.request(subject, sealed)).await;
        match reply {
            Ok(Ok(msg)) => match self
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
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "cluster: no watcher answered");
                Ok(guard)
            }
            Err(_) => Ok(guard),
        }
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

    fn cluster(&self) -> Option<ClusterStatus> {
        let connected = self.inner.connected();
        let problem = if connected {
            lock(&self.inner.lease_problem).clone()
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
        Some(ClusterStatus {
            connected,
            problem,
            watchers,
            rejected: self.inner.seal.rejected(),
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
}

/// Announce this replica every `lease_ttl / 3`.
async fn heartbeat(inner: std::sync::Weak<Inner>) {
    loop {
        let Some(i) = inner.upgrade() else { return };
        let period = i.cfg.lease_ttl / 3;
        if i.connected() {
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
        if let Some(i) = inner.upgrade() {
            let mounts: Vec<String> = i.shared.keys().cloned().collect();
            for m in mounts {
                i.announce_all(&m).await;
            }
        }
        if epoch.changed().await.is_err() {
            return;
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
            Lease::compete(
                i.client.clone(),
                i.seal.clone(),
                &i.cfg.name,
                &mount,
                &i.cfg.replica,
                i.cfg.lease_ttl,
            ),
            i.cfg.lease_ttl,
        )
    };
    let mut held = lease.changes();
    loop {
        if held.wait_for(|h| *h).await.is_err() {
            return;
        }
        let Some(i) = inner.upgrade() else { return };
        let m = &i.shared[&mount];
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
        tracing::info!(mount = %mount, "cluster: this replica now watches the mount");
        let _ = i.client.flush().await;
        let sync = i.subject("sync", &m.token);
        let _ = i.publish(Kind::Sync, sync.clone(), b"").await;
        let mut book = Book::default();
        let mut sweep = tokio::time::interval(ttl / 3);
        epoch.mark_unchanged();
        loop {
            tokio::select! {
                msg = sub.next() => {
                    let Some(msg) = msg else { break };
                    handle_want(&i, &mount, &mut book, msg).await;
                    m.running.store(book.topics.len(), Ordering::SeqCst);
                }
                changed = held.changed() => {
                    if changed.is_err() || !*held.borrow() {
                        break;
                    }
                }
                changed = epoch.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    // Interests announced while this replica was disconnected were lost.
                    let _ = i.publish(Kind::Sync, sync.clone(), b"").await;
                }
                _ = sweep.tick() => {
                    let alive = lock(&i.alive).clone();
                    let fresh = |r: &String| alive.get(r).is_some_and(|t| t.elapsed() <= ttl);
                    book.retain_replicas(fresh);
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
        m.held.store(false, Ordering::SeqCst);
        m.running.store(0, Ordering::SeqCst);
        tracing::info!(mount = %mount, "cluster: this replica no longer watches the mount");
        // Dropping the subscriber and the guards ends this replica's watches of the mount.
        drop(sub);
        drop(book);
    }
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
}

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
    if v.get("reset").and_then(Value::as_bool) == Some(true) {
        book.retain_replicas(|r| r != replica);
    }
    for t in events("remove") {
        book.remove(&t, replica);
    }
    let max = i.cfg.max_watches;
    let mut refused = 0usize;
    let mut outcome: Result<()> = Ok(());
    for t in events("add") {
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
    let layered = Layered::bounded_by(
        &i.shared[mount].mount,
        i.cfg.lease_ttl,
        "the cluster's lease_ttl_ms",
    );
    let sink = ChangeSink::new(i.bus.clone(), mount.to_owned());
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
/// would go unseen. Say it may have changed: at most a duplicate for the subscriber, never a
/// lost change.
async fn start_replayed(i: &Inner, mount: &str, topic: &ChangeEvent) -> Result<WatchGuard> {
    let guard = start(i, mount, topic).await?;
    i.bus.publish(mount, topic.clone());
    Ok(guard)
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
    fn errors_cross_the_wire_with_their_kind() {
        for (kind, _) in KINDS {
            let mut e = Error::new(*kind, "m");
            e.uri = Some("x://y".into());
            let back = error_from_json(&error_to_json(&e));
            assert_eq!(back, e);
        }
    }
}
