//! The connection to the upstream and everything that lives with it: connecting (stdio or
//! Streamable HTTP, the configured era) through rmcp's client, reconnecting with backoff,
//! re-establishing every live subscription after a reconnect and announcing each URI once,
//! and relaying the upstream's change notices to our subscribers, merged per URI and at
//! most `max_notifications_per_second`.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use mcpr_core::sync::lock;
use mcpr_core::{ChangeSink, Error, ErrorKind, Result, TemplateMeta};
use rmcp::model::{
    ClientConfig, Implementation, PaginatedRequestParams, ProtocolVersion,
    ResourceUpdatedNotificationParam, ServerNotification, SubscribeRequestParams,
    SubscriptionFilter, UnsubscribeRequestParams,
};
use rmcp::service::{
    ClientCacheConfig, ClientLifecycleMode, NotificationContext, RunningService, Subscription,
    serve_client_with_lifecycle,
};
use rmcp::{ClientHandler, Peer, RoleClient, ServiceError};
use tokio::sync::Notify;

use crate::cache::ReadCache;
use crate::config::{MAX_TEMPLATES, McpConfig, Protocol, Upstream};
use crate::error;
use crate::process::Child;
use crate::uri::{UriMap, clean_description, clean_name};

/// The first wait before a reconnect; each failure doubles it up to [`BACKOFF_MAX`].
const BACKOFF_FIRST: Duration = Duration::from_millis(250);
/// The longest wait between two connection attempts.
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// A connection that lived this long starts the next backoff from the first wait again.
const STABLE: Duration = Duration::from_secs(30);
/// Requests in a row that got no answer within the timeout before the connection is taken
/// for hung and started again.
const HUNG_AFTER: u32 = 3;
/// How often the connection (busy or not) is asked whether it is still there.
const HEARTBEAT: Duration = Duration::from_secs(5);
/// The most template pages asked of the upstream at connect.
const MAX_TEMPLATE_PAGES: usize = 100;
/// How long a new list watch waits (at most; the request timeout when shorter) for a
/// 2026-07-28 upstream to acknowledge its list listen. What asks for the list watch waits
/// that long: a client's `subscriptions/listen` for list changes, or a legacy client's
/// first listing after `initialize`. An upstream answers a listen in milliseconds when it
/// answers at all, so a second covers a slow one, while one that hangs holds a new listener
/// for this second rather than the whole request timeout (30 s by default); an
/// acknowledgment later than this is announced once with a list change instead (a listener
/// told too early hears one then, so nothing changed meanwhile is lost).
const LIST_ACK_WAIT: Duration = Duration::from_secs(1);

/// The protocol era a connection speaks, fixed by its handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Era {
    /// `initialize` (2025-11-25 and older): `ping`, `resources/subscribe`, and
    /// `list_changed` on the session unasked.
    Legacy,
    /// 2026-07-28 (`server/discover`): stateless, with `subscriptions/listen` and no `ping`.
    Modern,
}

impl Era {
    /// As the config's `protocol` and the logs name it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Era::Legacy => "legacy",
            Era::Modern => "2026-07-28",
        }
    }
}

/// One live connection.
pub(crate) struct Conn {
    pub(crate) peer: Peer<RoleClient>,
    /// 2026-07-28 (`subscriptions/listen`) or legacy (`resources/subscribe`).
    pub(crate) era: Era,
    /// The upstream declares `resources.subscribe` (legacy) .
    pub(crate) subscribe: bool,
    /// The upstream declares SEP-2640 `resources/directory/read`.
    pub(crate) directory: bool,
    /// Which connection this is (1 for the first).
    pub(crate) generation: u64,
    /// The upstream's name and version, as it gave them.
    pub(crate) server: String,
}

enum State {
    /// No connection yet, or between attempts; the last failure when there was one.
    Down(String),
    Up(Arc<Conn>),
}

/// One subscribed URI: one upstream subscription for every watch of it. The server's
/// registry watches a URI once, but a cluster replica rejoining runs its own watch beside
/// the cluster watcher's for a while, each with its own sink: both must hear every change,
/// and the first released must not end the other's.
struct Watch {
    /// Set when the upstream subscription is opened (the first watch's id), so a listen
    /// stream opened for an entry since released and made again is not attached to it.
    id: u64,
    ours: String,
    sinks: HashMap<u64, ChangeSink>,
    /// The 2026-07-28 listen stream that carries its updates.
    listen: Option<Listen>,
}

/// A listen stream's task, and the connection (its generation) it listens on.
struct Listen {
    task: tokio::task::AbortHandle,
    generation: u64,
}

/// Whether `slot` holds a listen on `conn` already: a watch made just after the connection
/// came up opened it, and the connection's `reestablish` must not open a second one
/// (cancelling the first, which an upstream may have acknowledged by then).
fn listens_on(slot: &Option<Listen>, conn: &Conn) -> bool {
    slot.as_ref()
        .is_some_and(|l| l.generation == conn.generation)
}

/// Put `task`, listening on `conn`, in `slot`, ending the listen it replaces.
fn replace_listen(slot: &mut Option<Listen>, task: tokio::task::AbortHandle, conn: &Conn) {
    let generation = conn.generation;
    if let Some(old) = slot.replace(Listen { task, generation }) {
        old.task.abort();
    }
}

/// The list watches: one upstream list subscription for all of them.
struct ListWatch {
    id: u64,
    sinks: HashMap<u64, ChangeSink>,
    /// The task of the list listen.
    listen: Option<Listen>,
    /// How far the 2026-07-28 list listen of the current connection got; `None` when none
    /// is being opened (no connection, or a legacy one, whose session carries list changes
    /// from the start).
    ack: Option<Arc<tokio::sync::watch::Sender<ListAck>>>,
}

/// How far a list listen got, shared by the task opening it and the watches waiting for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListPhase {
    /// Asked, not acknowledged yet (or asked again after a failure).
    Opening,
    /// Acknowledged with list changes: changes from now on are heard.
    Live,
    /// The upstream will not report list changes (an error, or an acknowledgment without
    /// them); asking again would not change that.
    Refused,
}

#[derive(Debug, Clone, Copy)]
struct ListAck {
    phase: ListPhase,
    /// Someone was told the list is watched before the listen was live: the task announces
    /// a list change once it is. Set and read under the channel's lock, so an acknowledgment
    /// racing a waiter giving up is either in time or announced, never neither.
    late: bool,
}

#[derive(Default)]
struct Watches {
    next_id: u64,
    /// By upstream URI.
    uris: HashMap<String, Watch>,
    list: Option<ListWatch>,
}

/// A change waiting to be relayed: our URI and its upstream URI, whose sinks are looked up
/// when it is relayed (a watch released meanwhile hears nothing).
enum Pending {
    Updated(String, String),
    ListChanged,
}

#[derive(Default)]
struct Queue {
    order: VecDeque<Pending>,
    /// Our URIs waiting (`""` for the list change): a repeat merges into the one waiting.
    waiting: HashSet<String>,
}

/// Counters for `/metrics`.
#[derive(Default)]
pub(crate) struct Counts {
    pub(crate) connects: AtomicU64,
    pub(crate) relayed: AtomicU64,
    pub(crate) merged: AtomicU64,
}

/// What the provider, the connection task and the relay share.
pub(crate) struct Shared {
    pub(crate) config: McpConfig,
    pub(crate) map: UriMap,
    state: Mutex<State>,
    /// Bumped on every connection attempt's end, for [`Shared::first_attempt`].
    attempts: tokio::sync::watch::Sender<u64>,
    /// The upstream's templates as last fetched (at every connect, and after its
    /// `list_changed`), swapped whole; empty until the first fetch.
    templates: Mutex<Arc<[TemplateMeta]>>,
    /// Asks the refresh task ([`refresh_templates`]) to fetch the templates again; a flood of
    /// `list_changed` makes at most one fetch under way and one waiting.
    templates_stale: Notify,
    watches: Mutex<Watches>,
    /// One turn per URI whose upstream subscription is being opened or closed: a URI's
    /// subscribe and unsubscribe go upstream one at a time, in the order asked, so the
    /// upstream ends in the state last asked (an unsubscribe never lands after a fresh
    /// subscribe), and a second watch joins a subscription only once it is in place. Only
    /// the turns someone holds or waits for are kept.
    turns: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    queue: Mutex<Queue>,
    queued: Notify,
    /// Wakes the connection task when [`Shared::restart_gen`] asks it to start again.
    restart: Notify,
    /// The generation of the connection to end (hung, or its transport broken); a request
    /// about an older connection does not end a newer one.
    restart_gen: AtomicU64,
    timeouts_in_row: AtomicU32,
    pub(crate) counts: Counts,
    /// The read cache, when `ttl_ms > 0`.
    pub(crate) cache: Option<ReadCache>,
}

impl Shared {
    pub(crate) fn new(config: McpConfig) -> Arc<Self> {
        let map = UriMap::new(&config.name, &config.prefixes);
        let cache = config.caches_reads().then(|| {
            ReadCache::new(
                config.cache_max_bytes,
                Duration::from_millis(config.cache.ttl_ms),
                config.timeout,
            )
        });
        Arc::new(Self {
            config,
            map,
            state: Mutex::new(State::Down("connecting".to_owned())),
            attempts: tokio::sync::watch::channel(0).0,
            templates: Mutex::new(Arc::new([])),
            templates_stale: Notify::new(),
            watches: Mutex::default(),
            turns: Mutex::default(),
            queue: Mutex::default(),
            queued: Notify::new(),
            restart: Notify::new(),
            restart_gen: AtomicU64::new(0),
            timeouts_in_row: AtomicU32::new(0),
            counts: Counts::default(),
            cache,
        })
    }

    pub(crate) fn name(&self) -> &str {
        &self.config.name
    }

    /// The upstream's templates as last fetched (ours).
    pub(crate) fn templates(&self) -> Arc<[TemplateMeta]> {
        lock(&self.templates).clone()
    }

    /// Fetch the templates over `peer` and keep them; an upstream without templates has
    /// none, and a failure keeps the ones there were.
    async fn fetch_and_keep_templates(&self, peer: &Peer<RoleClient>) {
        match fetch_templates(self, peer).await {
            Ok(t) => *lock(&self.templates) = t.into(),
            Err(e) if e.kind == ErrorKind::Unsupported => *lock(&self.templates) = Arc::new([]),
            Err(e) => tracing::warn!(mount = %self.name(), "templates: {e}"),
        }
    }

    /// The live connection, or why there is none.
    pub(crate) fn conn(&self) -> Result<Arc<Conn>> {
        match &*lock(&self.state) {
            State::Up(c) => Ok(c.clone()),
            State::Down(why) => Err(error::unavailable(self.name(), why)),
        }
    }

    /// Ok when connected and answering.
    pub(crate) fn readiness(&self) -> Result<()> {
        self.conn()?;
        let n = self.timeouts_in_row.load(Ordering::Relaxed);
        if n > 0 {
            return Err(Error::new(
                ErrorKind::Unavailable,
                format!(
                    "mcp mount \"{}\": the upstream did not answer its last {n} request(s) within {} (timeout_ms)",
                    self.name(),
                    error::human(self.config.timeout)
                ),
            ));
        }
        Ok(())
    }

    /// Wait until the first connection attempt has ended (or `within` passed).
    pub(crate) async fn first_attempt(&self, within: Duration) {
        let mut rx = self.attempts.subscribe();
        let _ = tokio::time::timeout(within, rx.wait_for(|n| *n > 0)).await;
    }

    /// `fut` (an upstream request `what`, about `uri`), within the timeout; a run of
    /// timeouts marks the upstream hung and starts the connection again.
    pub(crate) async fn call<T>(
        &self,
        what: &str,
        uri: Option<&str>,
        fut: impl Future<Output = std::result::Result<T, ServiceError>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.config.timeout, fut).await {
            Err(_) => {
                let n = self.timeouts_in_row.fetch_add(1, Ordering::Relaxed) + 1;
                if n >= HUNG_AFTER {
                    tracing::warn!(mount = %self.name(), "the upstream did not answer {n} requests in a row; connecting again");
                    self.request_restart();
                }
                let e = error::timeout(self.name(), what, self.config.timeout);
                Err(match uri {
                    Some(u) => e.with_uri(u),
                    None => e,
                })
            }
            Ok(r) => {
                self.timeouts_in_row.store(0, Ordering::Relaxed);
                if let Err(e) = &r
                    && let Some(max) = error::http_too_large(e)
                {
                    // Only this answer was too large: the connection is sound.
                    return Err(error::too_large(self.name(), what, uri, max));
                }
                if let Err(ServiceError::TransportSend(_) | ServiceError::TransportClosed) = &r {
                    // The connection is broken (an HTTP upstream that went away keeps its
                    // client alive): start again rather than fail every request until then.
                    self.request_restart();
                }
                r.map_err(|e| error::service(self.name(), what, uri, e))
            }
        }
    }

    /// Ask the connection task to end the current connection and connect again.
    fn request_restart(&self) {
        if let State::Up(c) = &*lock(&self.state) {
            self.restart_gen.store(c.generation, Ordering::Relaxed);
            self.restart.notify_waiters();
        }
    }

    /// Resolves when connection `generation` is asked to end.
    async fn restart_requested(&self, generation: u64) {
        loop {
            let woken = self.restart.notified();
            if self.restart_gen.load(Ordering::Relaxed) == generation {
                return;
            }
            woken.await;
        }
    }

    /// Ask the upstream something cheap every [`HEARTBEAT`] (legacy: `ping`; 2026-07-28,
    /// which has none: `resources/templates/list`); resolves with the reason once it fails
    /// with a broken transport. Any JSON-RPC answer, an error included, proves it alive; a
    /// run of timeouts is the hung case of [`Shared::call`].
    async fn heartbeat(&self, conn: &Conn) -> String {
        loop {
            tokio::time::sleep(HEARTBEAT).await;
            let r = if conn.era == Era::Modern {
                tokio::time::timeout(self.config.timeout, conn.peer.list_resource_templates(None))
                    .await
                    .map(|r| r.map(|_| ()))
            } else {
                tokio::time::timeout(
                    self.config.timeout,
                    conn.peer
                        .send_request(rmcp::model::ClientRequest::PingRequest(Default::default())),
                )
                .await
                .map(|r| r.map(|_| ()))
            };
            match r {
                Ok(Ok(())) | Ok(Err(ServiceError::McpError(_))) => {
                    self.timeouts_in_row.store(0, Ordering::Relaxed);
                }
                Ok(Err(e)) => {
                    return format!(
                        "it stopped answering: {}",
                        crate::uri::clean_message(&e.to_string())
                    );
                }
                Err(_) => {
                    let n = self.timeouts_in_row.fetch_add(1, Ordering::Relaxed) + 1;
                    if n >= HUNG_AFTER {
                        return format!(
                            "it did not answer {n} requests in a row within {} (hung)",
                            error::human(self.config.timeout)
                        );
                    }
                }
            }
        }
    }

    /// Wait for `up`'s turn to be subscribed or unsubscribed upstream (see
    /// [`Shared::turns`]); the turn passes on when the guard is dropped.
    async fn turn(&self, up: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let turn = {
            let mut turns = lock(&self.turns);
            turns.retain(|_, t| Arc::strong_count(t) > 1);
            turns.entry(up.to_owned()).or_default().clone()
        };
        turn.lock_owned().await
    }

    /// Subscribe `ours` (upstream `up`) for `sink`: registered now, established upstream
    /// when connected (and again after every reconnect). Returns the registration's id.
    pub(crate) async fn watch(
        self: &Arc<Self>,
        ours: &str,
        up: &str,
        sink: ChangeSink,
    ) -> Result<u64> {
        let _turn = self.turn(up).await;
        let (id, first) = {
            let mut w = lock(&self.watches);
            w.next_id += 1;
            let id = w.next_id;
            match w.uris.get_mut(up) {
                Some(watch) => {
                    watch.sinks.insert(id, sink);
                    (id, None)
                }
                None => {
                    w.uris.insert(
                        up.to_owned(),
                        Watch {
                            id,
                            ours: ours.to_owned(),
                            sinks: HashMap::from([(id, sink)]),
                            listen: None,
                        },
                    );
                    (id, Some(id))
                }
            }
        };
        // A second watch of a URI joins the subscription the first opened.
        let Some(first) = first else { return Ok(id) };
        if let Ok(conn) = self.conn() {
            match self.establish(&conn, up, first).await {
                Ok(()) => {}
                // The upstream being away is the outage's business: the watch stays and is
                // established after the reconnect.
                Err(e) if e.is_temporary() => {}
                Err(e) => {
                    // Refused: there is no upstream subscription to close.
                    self.forget(up, id);
                    return Err(e);
                }
            }
        }
        Ok(id)
    }

    /// Open the upstream subscription of watch `id` on `up` over `conn`. On a 2026-07-28
    /// upstream this waits (within the request timeout) for the upstream's acknowledgment of
    /// the listen, so that a client told it is subscribed is: a refusal, or an acknowledgment
    /// that leaves `up` out, fails the subscription. An upstream that does not answer in time
    /// leaves the stream to be opened in the background (the outage's business), announced
    /// once when it is.
    async fn establish(self: &Arc<Self>, conn: &Arc<Conn>, up: &str, id: u64) -> Result<()> {
        if conn.era == Era::Modern {
            let filter = SubscriptionFilter::builder()
                .resource_subscriptions([up.to_owned()])
                .build();
            let what = Listened::Uri(up.to_owned());
            let (first, result) = match self.open_listen(conn, &filter, &what).await {
                Ok(sub) => (Some(sub), Ok(())),
                Err(e) if e.is_temporary() => (None, Err(e)),
                Err(e) => return Err(e),
            };
            // Opened later, it was not live when the client was told it was subscribed.
            let announce = first.is_none();
            let task = tokio::spawn(listen(
                Arc::downgrade(self),
                conn.clone(),
                filter,
                what,
                first,
                announce,
            ));
            let mut w = lock(&self.watches);
            match w.uris.get_mut(up) {
                Some(watch) if watch.id == id => {
                    replace_listen(&mut watch.listen, task.abort_handle(), conn)
                }
                _ => task.abort(),
            }
            return result;
        }
        if !conn.subscribe {
            return Err(Error::unsupported(format!(
                "mcp mount \"{}\": the upstream does not offer resource subscriptions",
                self.name()
            )));
        }
        #[allow(deprecated)]
        let fut = conn.peer.subscribe(SubscribeRequestParams::new(up));
        self.call("resources/subscribe", Some(up), fut).await
    }

    /// One `subscriptions/listen` for `filter` over `conn`, once the upstream acknowledged
    /// it (within the request timeout); refused when the acknowledgment leaves out `what`
    /// was asked (the upstream will not watch it).
    async fn open_listen(
        &self,
        conn: &Conn,
        filter: &SubscriptionFilter,
        what: &Listened,
    ) -> Result<Subscription> {
        let sub = self
            .call(
                "subscriptions/listen",
                None,
                conn.peer.listen(filter.clone()),
            )
            .await?;
        let ack = sub.acknowledged();
        let accepted = match what {
            Listened::Uri(up) => ack
                .resource_subscriptions
                .as_ref()
                .is_some_and(|uris| uris.iter().any(|u| u == up)),
            Listened::List(_) => ack.resources_list_changed == Some(true),
        };
        if !accepted {
            return Err(Error::unsupported(format!(
                "mcp mount \"{}\": the upstream refused to watch {}: its acknowledgment of subscriptions/listen left it out",
                self.name(),
                match what {
                    Listened::Uri(up) => format!("{:?}", self.map.ours(up)),
                    Listened::List(_) => "its resource list".to_owned(),
                }
            )));
        }
        Ok(sub)
    }

    /// Remove watch `id` of `up`; the entry of `up` when it was its last (its listen
    /// stream, if any, cancelled).
    fn forget(&self, up: &str, id: u64) -> Option<Watch> {
        let mut w = lock(&self.watches);
        let last = w
            .uris
            .get_mut(up)
            .is_some_and(|watch| watch.sinks.remove(&id).is_some() && watch.sinks.is_empty());
        let mut watch = if last { w.uris.remove(up) } else { None }?;
        if let Some(l) = watch.listen.take() {
            // Dropping the stream's handle cancels the listen upstream.
            l.task.abort();
        }
        Some(watch)
    }

    /// Release watch `id` on `up`: with the last watch of `up`, its upstream subscription
    /// is closed, in `up`'s turn, unless it was watched again meanwhile (that watch's
    /// subscribe, asked last, stands).
    pub(crate) fn unwatch(self: &Arc<Self>, up: &str, id: u64) {
        if self.forget(up, id).is_none() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let this = self.clone();
        let up = up.to_owned();
        rt.spawn(async move {
            let _turn = this.turn(&up).await;
            if lock(&this.watches).uris.contains_key(&up) {
                return;
            }
            let Ok(conn) = this.conn() else { return };
            if conn.era != Era::Legacy || !conn.subscribe {
                return;
            }
            #[allow(deprecated)]
            let fut = conn.peer.unsubscribe(UnsubscribeRequestParams::new(&up));
            let _ = this.call("resources/unsubscribe", Some(&up), fut).await;
        });
    }

    /// Report list changes to `sink` until [`Shared::unwatch_list`] with the returned id;
    /// [`Shared::list_live`] then waits for the upstream's list listen.
    pub(crate) fn watch_list(self: &Arc<Self>, sink: ChangeSink) -> u64 {
        let id = {
            let mut w = lock(&self.watches);
            w.next_id += 1;
            let id = w.next_id;
            match &mut w.list {
                Some(list) => {
                    list.sinks.insert(id, sink);
                    return id;
                }
                None => {
                    w.list = Some(ListWatch {
                        id,
                        sinks: HashMap::from([(id, sink)]),
                        listen: None,
                        ack: None,
                    })
                }
            }
            id
        };
        if let Ok(conn) = self.conn() {
            self.establish_list(&conn, id, false);
        }
        id
    }

    /// Wait until the list listen of a 2026-07-28 upstream is live, refused, or
    /// [`LIST_ACK_WAIT`] (the request timeout when shorter) has passed; after that, the
    /// listen is announced with one list change once it is live, so whoever was told the
    /// list is watched misses no change made before the upstream's acknowledgment. Before
    /// the first connection there is nothing to wait for: the mount is listed unavailable
    /// meanwhile, and the connection's `reestablish` opens the listen with that announcement.
    pub(crate) async fn list_live(&self) {
        let Some(ack) = lock(&self.watches)
            .list
            .as_ref()
            .and_then(|l| l.ack.clone())
        else {
            return;
        };
        let bound = self.config.timeout.min(LIST_ACK_WAIT);
        let mut rx = ack.subscribe();
        if tokio::time::timeout(bound, rx.wait_for(|a| a.phase != ListPhase::Opening))
            .await
            .is_err()
        {
            ack.send_if_modified(|a| {
                if a.phase == ListPhase::Opening {
                    a.late = true;
                }
                // Nobody waits on `late`: the listen task reads it.
                false
            });
            tracing::debug!(mount = %self.name(), "the upstream did not acknowledge the list listen within {}; it is announced once it does", error::human(bound));
        }
    }

    /// Open the upstream list listen of list watch `id` over `conn` in the background (a
    /// legacy session carries list changes unasked). `late`: announce a list change once
    /// the listen is live (after a reconnect: changes while there was none are unknown).
    fn establish_list(self: &Arc<Self>, conn: &Arc<Conn>, id: u64, late: bool) {
        if conn.era == Era::Legacy {
            if let Some(list) = lock(&self.watches).list.as_mut() {
                list.ack = None;
            }
            return;
        }
        if lock(&self.watches)
            .list
            .as_ref()
            .is_some_and(|l| l.id == id && listens_on(&l.listen, conn))
        {
            return;
        }
        let filter = SubscriptionFilter::builder()
            .resources_list_changed()
            .build();
        let ack = Arc::new(tokio::sync::watch::Sender::new(ListAck {
            phase: ListPhase::Opening,
            late,
        }));
        let task = tokio::spawn(listen(
            Arc::downgrade(self),
            conn.clone(),
            filter,
            Listened::List(ack.clone()),
            None,
            false,
        ));
        let mut w = lock(&self.watches);
        match &mut w.list {
            Some(list) if list.id == id => {
                list.ack = Some(ack);
                replace_listen(&mut list.listen, task.abort_handle(), conn);
            }
            _ => task.abort(),
        }
    }

    /// Release list watch `id`; with the last, the upstream list subscription ends.
    pub(crate) fn unwatch_list(&self, id: u64) {
        let mut w = lock(&self.watches);
        let last = w
            .list
            .as_mut()
            .is_some_and(|l| l.sinks.remove(&id).is_some() && l.sinks.is_empty());
        if last
            && let Some(ListWatch {
                listen: Some(l), ..
            }) = w.list.take()
        {
            l.task.abort();
        }
    }

    /// The upstream says `up` changed: its cached reads go, and the change is relayed when
    /// it is watched.
    fn upstream_updated(&self, up: &str) {
        if let Some(c) = &self.cache {
            c.drop_uri(up);
        }
        let ours = lock(&self.watches).uris.get(up).map(|w| w.ours.clone());
        if let Some(ours) = ours {
            self.enqueue(ours.clone(), Pending::Updated(ours, up.to_owned()));
        }
    }

    /// The upstream says its list changed: every cached read goes (what was at a URI may be
    /// another resource now), and the change is relayed when someone watches the list.
    fn upstream_list_changed(&self) {
        self.drop_cache();
        // Templates have no change notice of their own: a list change may be theirs.
        self.templates_stale.notify_one();
        if lock(&self.watches).list.is_some() {
            self.enqueue(String::new(), Pending::ListChanged);
        }
    }

    /// Drop every cached read.
    fn drop_cache(&self) {
        if let Some(c) = &self.cache {
            c.drop_all();
        }
    }

    /// Queue a change; one already waiting for the same URI absorbs it. The queue holds at
    /// most one entry per watched URI plus the list, however much the upstream sends.
    fn enqueue(&self, key: String, p: Pending) {
        {
            let mut q = lock(&self.queue);
            if !q.waiting.insert(key) {
                self.counts.merged.fetch_add(1, Ordering::Relaxed);
                return;
            }
            q.order.push_back(p);
        }
        self.queued.notify_one();
    }

    /// Every watch's upstream subscription opened again over `conn`, then each URI (and
    /// the list) announced once: a change made while we were not subscribed is not lost.
    async fn reestablish(self: &Arc<Self>, conn: &Arc<Conn>) {
        let uris: Vec<(String, u64)> = lock(&self.watches)
            .uris
            .iter()
            .map(|(up, w)| (up.clone(), w.id))
            .collect();
        for (up, id) in &uris {
            // A connection asked to end meanwhile (hung) is not waited on for every URI.
            if conn.peer.is_transport_closed()
                || self.restart_gen.load(Ordering::Relaxed) == conn.generation
            {
                break;
            }
            let _turn = self.turn(up).await;
            // Released meanwhile (its unsubscribe waits for this turn), released and
            // watched again (that watch subscribed itself), or watched first just after the
            // connection came up (its listen is on this connection already).
            if lock(&self.watches)
                .uris
                .get(up)
                .is_none_or(|w| w.id != *id || listens_on(&w.listen, conn))
            {
                continue;
            }
            if let Err(e) = self.establish(conn, up, *id).await {
                tracing::warn!(mount = %self.name(), "cannot subscribe to {up:?} again: {e}");
            }
        }
        let list = lock(&self.watches).list.as_ref().map(|l| l.id);
        if let Some(id) = list {
            // A 2026-07-28 list listen announces itself once live: announced now, a change
            // between this and the upstream's acknowledgment would be lost.
            self.establish_list(conn, id, true);
        }
        for (up, _) in &uris {
            self.upstream_updated(up);
        }
        if list.is_some() && conn.era == Era::Legacy {
            self.upstream_list_changed();
        }
    }
}

/// The rmcp client handler: the upstream's notices that do not arrive on a listen stream
/// (a legacy session's `updated` and `list_changed`).
pub(crate) struct Handler {
    shared: Weak<Shared>,
}

impl ClientHandler for Handler {
    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if let Some(s) = self.shared.upgrade() {
            s.upstream_updated(&params.uri);
        }
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        if let Some(s) = self.shared.upgrade() {
            s.upstream_list_changed();
        }
    }

    fn get_info(&self) -> ClientConfig {
        let mut c = ClientConfig::default();
        c.client_info = Implementation::new("mcp-resources-gateway", env!("CARGO_PKG_VERSION"));
        // What a legacy `initialize` asks for: the newest version that has the handshake
        // (the default, the newest of all, would make a server that echoes it look modern).
        c.protocol_version = ProtocolVersion::LATEST_WITH_INITIALIZE;
        c
    }
}

/// What one listen stream carries: one URI's updates, or the list's changes (with how far
/// its opening got, for the watches waiting on it).
#[derive(Debug, Clone)]
enum Listened {
    Uri(String),
    List(Arc<tokio::sync::watch::Sender<ListAck>>),
}

/// One `subscriptions/listen` stream on a 2026-07-28 upstream (`first`, when the caller
/// opened it already), relaying what it carries; a stream the upstream ends, or that lags
/// (rmcp ends it then), is opened again while the connection and the watch live, and each
/// stream opened again is announced once (an `updated`, or a list change), as after a
/// reconnect: what changed while none was open is unknown. `announce` says whether the
/// first stream opened here is announced too; a list stream is also announced when a watch
/// gave up waiting for it (see [`ListAck::late`]).
async fn listen(
    shared: Weak<Shared>,
    conn: Arc<Conn>,
    filter: SubscriptionFilter,
    what: Listened,
    mut first: Option<Subscription>,
    mut announce: bool,
) {
    let mut wait = Duration::from_millis(500);
    loop {
        let opened = match first.take() {
            Some(sub) => Ok(sub),
            None => {
                let Some(s) = shared.upgrade() else { return };
                let opened = s.open_listen(&conn, &filter, &what).await;
                let mut tell = announce;
                if let Listened::List(ack) = &what {
                    ack.send_modify(|a| match &opened {
                        Ok(_) => {
                            tell |= a.late;
                            a.phase = ListPhase::Live;
                        }
                        Err(e) if !e.is_temporary() => a.phase = ListPhase::Refused,
                        Err(_) => {}
                    });
                }
                if opened.is_ok() && tell {
                    match &what {
                        Listened::Uri(up) => s.upstream_updated(up),
                        Listened::List(_) => s.upstream_list_changed(),
                    }
                }
                opened
            }
        };
        announce = true;
        match opened {
            Ok(mut sub) => {
                wait = Duration::from_millis(500);
                while let Ok(Some(n)) = sub.next().await {
                    let Some(s) = shared.upgrade() else { return };
                    match n {
                        ServerNotification::ResourceUpdatedNotification(u) => {
                            s.upstream_updated(&u.params.uri)
                        }
                        ServerNotification::ResourceListChangedNotification(_) => {
                            s.upstream_list_changed()
                        }
                        _ => {}
                    }
                }
            }
            Err(e) => {
                if let Some(s) = shared.upgrade() {
                    tracing::warn!(mount = %s.name(), "subscriptions/listen: {e}");
                }
                // A refusal (not found, not supported) will not change by asking again.
                if !e.is_temporary() {
                    return;
                }
            }
        }
        if conn.peer.is_transport_closed() {
            return;
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(BACKOFF_MAX);
    }
}

/// Fetch the templates again whenever [`Shared::upstream_list_changed`] asks, over the
/// connection of the moment (a connection being made fetches them itself).
pub(crate) async fn refresh_templates(shared: Weak<Shared>) {
    loop {
        let stale = {
            let Some(s) = shared.upgrade() else { return };
            // The task holds the state while it waits; the provider aborts it on drop.
            async move {
                s.templates_stale.notified().await;
                s
            }
        };
        let s = stale.await;
        if let Ok(conn) = s.conn() {
            s.fetch_and_keep_templates(&conn.peer).await;
        }
    }
}

/// Relay queued changes to the sinks, at most `max_notifications_per_second` in any one
/// second: the times of the last that many relays are kept, and the next waits until the
/// oldest of them is a second old. (A window reset every second let twice the limit through
/// around a reset: a full window's worth at its end, another at the next one's start.)
pub(crate) async fn relay(shared: Weak<Shared>) {
    let mut recent: VecDeque<Instant> = VecDeque::new();
    loop {
        let Some(s) = shared.upgrade() else { return };
        let limit = s.config.max_notifications_per_second as usize;
        let next = {
            let mut q = lock(&s.queue);
            let p = q.order.pop_front();
            if let Some(p) = &p {
                let key = match p {
                    Pending::Updated(u, _) => u.as_str(),
                    Pending::ListChanged => "",
                };
                let key = key.to_owned();
                q.waiting.remove(&key);
            }
            p
        };
        let Some(p) = next else {
            // Registered before the queue is looked at again, so a push in between wakes
            // it. The task holds the state while it waits; the provider aborts it on drop.
            let notified = s.queued.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if lock(&s.queue).order.is_empty() {
                notified.await;
            }
            continue;
        };
        while recent.len() >= limit.max(1) {
            let oldest = recent.pop_front().expect("not empty");
            let rest = Duration::from_secs(1).saturating_sub(oldest.elapsed());
            if !rest.is_zero() {
                // Meanwhile, more of the same URI merge into the one queued after the change
                // in hand. The provider aborts this task when dropped, sleeping or not.
                tokio::time::sleep(rest).await;
            }
        }
        deliver(&s, p);
        recent.push_back(Instant::now());
    }
}

fn deliver(s: &Shared, p: Pending) {
    s.counts.relayed.fetch_add(1, Ordering::Relaxed);
    // The sinks are told outside the lock: a sink hands the change to a bus.
    let sinks: Vec<ChangeSink> = {
        let w = lock(&s.watches);
        match &p {
            Pending::Updated(_, up) => w.uris.get(up).map(|w| w.sinks.values().cloned().collect()),
            Pending::ListChanged => w.list.as_ref().map(|l| l.sinks.values().cloned().collect()),
        }
        .unwrap_or_default()
    };
    for sink in sinks {
        match &p {
            Pending::Updated(ours, _) => sink.updated(ours.clone()),
            Pending::ListChanged => sink.list_changed(),
        }
    }
}

/// A connection attempt's outcome: the running client and what keeps its process alive.
type Running = (RunningService<RoleClient, Handler>, Option<Child>);

/// Connect to the upstream once, within the timeout (a 2026-07-28 probe of an `auto`
/// upstream may take up to 10 s of it before the legacy fallback).
async fn connect(shared: &Arc<Shared>) -> std::result::Result<Running, String> {
    let c = &shared.config;
    let handler = Handler {
        shared: Arc::downgrade(shared),
    };
    let mode = match c.protocol {
        Protocol::Auto => ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
        },
        Protocol::Legacy => ClientLifecycleMode::Initialize,
        Protocol::Modern => ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    };
    let limit = c.timeout.max(Duration::from_secs(15));
    let max = usize::try_from(c.max_message_bytes).unwrap_or(usize::MAX);
    match &c.upstream {
        Upstream::Stdio { command, args, env } => {
            let (mut child, stdout, stdin) = Child::spawn(&c.name, command, args, env)?;
            // Our bound first, so that an oversized answer fails its request naming the
            // limit; the transport's, the same, drops the line we cut off.
            let stdout = crate::frame::Bounded::new(stdout, &c.name, c.max_message_bytes);
            let transport = crate::stdio::UpstreamStdio::new(stdout, stdin, max);
            match tokio::time::timeout(limit, serve_client_with_lifecycle(handler, transport, mode))
                .await
            {
                Ok(Ok(running)) => Ok((running, Some(child))),
                Ok(Err(e)) => {
                    // Give an upstream that is exiting a moment to say how.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Err(match child.exited() {
                        Some(status) => format!(
                            "`{command}` exited ({status}) during initialization: {}",
                            init_error(&e)
                        ),
                        None => format!("initialization failed: {}", init_error(&e)),
                    })
                }
                Err(_) => Err(format!(
                    "`{command}` did not complete initialization within {}",
                    error::human(limit)
                )),
            }
        }
        Upstream::Http { url, headers } => {
            use rmcp::transport::StreamableHttpClientTransport;
            use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
            let shown = mcpr_core::redact_url(url);
            // rustls needs a process-wide crypto provider; ring is the one the workspace builds.
            let _ = rustls::crypto::ring::default_provider().install_default();
            let client = reqwest::Client::builder()
                .connect_timeout(c.timeout)
                // A redirect would replay our headers somewhere else.
                .redirect(reqwest::redirect::Policy::none())
                .user_agent(concat!("mcp-resources/", env!("CARGO_PKG_VERSION")))
                .build()
                .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
            let mut custom = HashMap::new();
            for h in headers {
                let (Ok(name), Ok(mut value)) = (
                    reqwest::header::HeaderName::from_bytes(h.name.as_bytes()),
                    reqwest::header::HeaderValue::from_str(&h.value),
                ) else {
                    return Err(format!("header {} cannot be sent", h.name));
                };
                // Any Debug of the transport's settings then prints `Sensitive`.
                value.set_sensitive(true);
                custom.insert(name, value);
            }
            let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                .custom_headers(custom)
                .max_sse_event_size(max)
                .max_json_response_size(max);
            let transport = StreamableHttpClientTransport::with_client(client, config);
            match tokio::time::timeout(limit, serve_client_with_lifecycle(handler, transport, mode))
                .await
            {
                Ok(Ok(running)) => Ok((running, None)),
                Ok(Err(e)) if e.is_authorization_required() => Err(format!(
                    "{shown} refused our credentials (HTTP 401/403; check `headers`)"
                )),
                Ok(Err(e)) => Err(format!(
                    "{shown}: initialization failed: {}",
                    init_error(&e)
                )),
                Err(_) => Err(format!(
                    "{shown} did not complete initialization within {}",
                    error::human(limit)
                )),
            }
        }
    }
}

/// An rmcp initialization error, one line and bounded (it never holds a header value).
fn init_error(e: &rmcp::service::ClientInitializeError) -> String {
    let mut parts = vec![e.to_string()];
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        let t = s.to_string();
        if !parts.iter().any(|p| p.contains(&t)) {
            parts.push(t);
        }
        src = s.source();
    }
    // A transport error may quote the URL, whose userinfo or query may hold a secret.
    crate::uri::clean(&mcpr_core::redact_urls_in(&parts.join(": ")), 500)
}

/// The upstream's templates (every page, bounded), ours.
async fn fetch_templates(shared: &Shared, peer: &Peer<RoleClient>) -> Result<Vec<TemplateMeta>> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_TEMPLATE_PAGES {
        let params = PaginatedRequestParams::default().with_cursor(cursor.clone());
        let page = shared
            .call(
                "resources/templates/list",
                None,
                peer.list_resource_templates(Some(params)),
            )
            .await?;
        for t in page.resource_templates {
            if out.len() >= MAX_TEMPLATES {
                break;
            }
            // One that cannot be a URI (a space, a control character, no scheme) is left
            // out, as such an entry of a listing is.
            let Some(uri_template) = shared.map.ours_checked(&t.uri_template) else {
                continue;
            };
            out.push(TemplateMeta {
                uri_template,
                name: clean_name(&t.name),
                title: t.title.as_deref().map(clean_name),
                description: t.description.as_deref().map(clean_description),
                mime_type: t.mime_type.as_deref().map(clean_name),
            });
        }
        match page.next_cursor {
            Some(c) if out.len() < MAX_TEMPLATES && Some(&c) != cursor.as_ref() => cursor = Some(c),
            _ => break,
        }
    }
    Ok(out)
}

/// The connection's life: connect, serve until it ends, reconnect with backoff; after
/// every (re)connect, every watch is re-established and announced.
pub(crate) async fn run(shared: Weak<Shared>) {
    let mut backoff = BACKOFF_FIRST;
    let mut generation = 0u64;
    loop {
        let Some(s) = shared.upgrade() else { return };
        let attempt = connect(&s).await;
        let mut lived = Duration::ZERO;
        match attempt {
            Ok((running, child)) => {
                let started = Instant::now();
                generation += 1;
                let peer = running.peer().clone();
                peer.set_response_cache_config(ClientCacheConfig::disabled())
                    .await;
                let info = peer.peer_info();
                // The era is the handshake's: a version without `initialize` is 2026-07-28.
                let era = if info
                    .as_ref()
                    .is_some_and(|i| !i.protocol_version.has_initialize())
                {
                    Era::Modern
                } else {
                    Era::Legacy
                };
                let caps = info.as_ref().map(|i| &i.capabilities);
                let subscribe = caps
                    .and_then(|c| c.resources.as_ref())
                    .and_then(|r| r.subscribe)
                    .unwrap_or(false);
                let directory = caps.is_some_and(|c| c.supports_directory_read());
                let server = info
                    .as_ref()
                    .and_then(|i| i.server_info.as_ref())
                    .map(|i| clean_name(format!("{} {}", i.name, i.version).trim()))
                    .unwrap_or_else(|| "an unnamed server".to_owned());
                let conn = Arc::new(Conn {
                    peer: peer.clone(),
                    era,
                    subscribe,
                    directory,
                    generation,
                    server: server.clone(),
                });
                // Again at every connect: the upstream may have been replaced by one with
                // other templates.
                s.fetch_and_keep_templates(&peer).await;
                s.timeouts_in_row.store(0, Ordering::Relaxed);
                // Nothing was heard while there was no connection: what is kept may be old.
                s.drop_cache();
                *lock(&s.state) = State::Up(conn.clone());
                s.counts.connects.fetch_add(1, Ordering::Relaxed);
                s.attempts.send_modify(|n| *n += 1);
                tracing::info!(
                    mount = %s.name(),
                    "connected to the upstream {server} ({}, connection {generation})",
                    era.as_str()
                );
                s.reestablish(&conn).await;
                // The task holds the state while it waits; the provider aborts it on drop.
                let ct = running.cancellation_token();
                let why = tokio::select! {
                    r = running.waiting() => match r {
                        Ok(rmcp::service::QuitReason::Closed) => "the upstream closed the connection".to_owned(),
                        Ok(rmcp::service::QuitReason::Cancelled) => "the connection was cancelled".to_owned(),
                        Ok(rmcp::service::QuitReason::JoinError(e)) | Err(e) => format!("the client task failed: {e}"),
                        Ok(_) => "the connection ended".to_owned(),
                    },
                    _ = s.restart_requested(generation) => {
                        ct.cancel();
                        "it stopped answering or its transport broke".to_owned()
                    }
                    why = s.heartbeat(&conn) => {
                        ct.cancel();
                        why
                    }
                };
                drop(child);
                // No change notice can arrive now: nothing kept is served past this point.
                s.drop_cache();
                lived = started.elapsed();
                tracing::warn!(mount = %s.name(), "the upstream connection ended: {why}; reconnecting");
                *lock(&s.state) = State::Down(format!("the connection ended: {why}; reconnecting"));
            }
            Err(why) => {
                tracing::warn!(mount = %s.name(), "cannot connect to the upstream: {why}");
                *lock(&s.state) = State::Down(why);
                s.attempts.send_modify(|n| *n += 1);
            }
        }
        if lived >= STABLE {
            backoff = BACKOFF_FIRST;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use mcpr_core::{LocalBus, Provider as _, ReadLimits, ResourceUri};

    /// A legacy upstream that keeps the set of URIs it is subscribed to and serves it at
    /// `x://state`, one per line.
    const SUBSCRIBED: &str = r#"
subs = set()
def send(mid, result):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": mid, "result": result}) + "\n"); sys.stdout.flush()
for method, mid, p in requests():
    if method == "initialize":
        send(mid, {"protocolVersion": p.get("protocolVersion"), "serverInfo": {"name": "subs", "version": "1"},
                   "capabilities": {"resources": {"subscribe": True}}})
    elif method == "resources/subscribe":
        subs.add(p["uri"]); send(mid, {})
    elif method == "resources/unsubscribe":
        subs.discard(p["uri"]); send(mid, {})
    elif method == "resources/read" and p["uri"] == "x://bad":
        send(mid, {"contents": [{"uri": "x://bad\u001b]52;c;cm0K\u0007\n", "text": "bad"}]})
    elif method == "resources/read":
        send(mid, {"contents": [{"uri": p["uri"], "text": "\n".join(sorted(subs))}]})
    elif method == "resources/templates/list":
        send(mid, {"resourceTemplates": [{"uriTemplate": "x://{id}", "name": "good"},
            {"uriTemplate": "x://\u001b[2J{id}", "name": "escape"}, {"uriTemplate": "no scheme {id}", "name": "bad"}]})
    else:
        send(mid, {})
"#;

    /// The Python interpreter, or `None` (a skip) where there is none; under CI its absence
    /// fails the test, so that a skip cannot hide that nothing was checked.
    fn python() -> Option<String> {
        let found = std::process::Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|p| p.trim().to_owned());
        if found.is_none() {
            assert!(std::env::var("CI").is_err(), "python3 is needed under CI");
            eprintln!("skipped: no python3");
        }
        found
    }

    /// A mount `m` on the legacy upstream [`SUBSCRIBED`] (with the folder holding its script),
    /// or `None` where there is no Python.
    async fn subscribed() -> Option<(tempfile::TempDir, crate::McpProvider)> {
        on_script(SUBSCRIBED, Protocol::Legacy).await
    }

    /// What every upstream script starts with: the requests it is sent (notices skipped).
    const PY_REQUESTS: &str = r#"import json, sys
def requests():
    for line in sys.stdin:
        msg = json.loads(line)
        if msg.get("id") is not None:
            yield msg.get("method"), msg.get("id"), msg.get("params") or {}
"#;

    /// A mount `m` on the Python upstream `script` (after [`PY_REQUESTS`]) in era `protocol`
    /// (with the folder holding the script), or `None` where there is no Python.
    async fn on_script(
        script: &str,
        protocol: Protocol,
    ) -> Option<(tempfile::TempDir, crate::McpProvider)> {
        let python = python()?;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("upstream.py");
        std::fs::write(&path, [PY_REQUESTS, script].concat()).unwrap();
        let mut config = McpConfig::new(
            "m",
            Upstream::Stdio {
                command: python,
                args: vec![path.display().to_string()],
                env: Vec::new(),
            },
        );
        config.protocol = protocol;
        let provider = crate::McpProvider::start(config).await.unwrap();
        Some((dir, provider))
    }

    /// An upstream's template or read `contents[].uri` that cannot be a URI (a control
    /// character, a space, no scheme) is never relayed: the template is left out, as such an
    /// entry of a listing is, and the read refused naming the mount.
    #[tokio::test]
    async fn unparseable_uris_of_templates_and_contents_are_not_relayed() {
        let Some((_dir, provider)) = subscribed().await else {
            return;
        };
        let templates: Vec<String> = provider
            .templates()
            .iter()
            .map(|t| t.uri_template.clone())
            .collect();
        assert_eq!(templates, ["m+x://{id}"]);
        let limits = ReadLimits { max_bytes: 1 << 20 };
        let bad = ResourceUri::parse("m+x://bad").unwrap();
        let e = provider.read(&bad, &limits).await.unwrap_err();
        assert!(
            e.message.contains("mcp mount \"m\"") && !e.message.contains('\u{1b}'),
            "{e}"
        );
        let good = ResourceUri::parse("m+x://good").unwrap();
        let out = provider.read(&good, &limits).await.unwrap();
        assert_eq!(out.contents[0].uri, "m+x://good");
    }

    /// A watch released and made again at once (the registry does so when a client
    /// unsubscribes and subscribes again): the upstream ends subscribed, every time. On one
    /// thread the release's unsubscribe, were it sent from a task of its own, would go out
    /// after the fresh subscribe and undo it.
    #[tokio::test]
    async fn an_unsubscribe_never_lands_after_a_fresh_subscribe() {
        let Some((_dir, provider)) = subscribed().await else {
            return;
        };
        let sink = ChangeSink::new(Arc::new(LocalBus::new(16)), "m");
        let uri = ResourceUri::parse("m+x://a").unwrap();
        let state = ResourceUri::parse("m+x://state").unwrap();
        let limits = ReadLimits { max_bytes: 1 << 20 };
        let subscribed = async || {
            // Whatever was spawned has run by the time this read is answered.
            tokio::time::sleep(Duration::from_millis(20)).await;
            let out = provider.read(&state, &limits).await.unwrap();
            match &out.contents[0].body {
                mcpr_core::ContentsBody::Text(t) => t.clone(),
                other => panic!("{other:?}"),
            }
        };
        for round in 0..5 {
            let first = provider.watch(&uri, sink.clone()).await.unwrap();
            assert_eq!(subscribed().await, "x://a", "round {round}");
            drop(first);
            let again = provider.watch(&uri, sink.clone()).await.unwrap();
            assert_eq!(
                subscribed().await,
                "x://a",
                "round {round}: the last asked stands"
            );
            drop(again);
            assert_eq!(subscribed().await, "", "round {round}: released");
        }
    }

    /// A 2026-07-28 upstream that counts the listens for list changes it was asked for and
    /// serves the count at any URI.
    const LISTENS: &str = r#"
listens = 0
def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n"); sys.stdout.flush()
for method, mid, p in requests():
    if method == "server/discover":
        send({"jsonrpc": "2.0", "id": mid, "result": {"resultType": "complete", "supportedVersions": ["2026-07-28"],
              "ttlMs": 0, "cacheScope": "private", "capabilities": {"resources": {"subscribe": True, "listChanged": True}},
              "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "listens", "version": "1"}}}})
    elif method == "subscriptions/listen":
        wanted = p.get("notifications") or {}
        if wanted.get("resourcesListChanged"):
            listens += 1
        send({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
              "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": mid}, "notifications": wanted}})
    elif method == "resources/read":
        send({"jsonrpc": "2.0", "id": mid, "result": {"resultType": "complete",
              "contents": [{"uri": p["uri"], "text": str(listens)}]}})
    elif method == "resources/templates/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"resultType": "complete", "resourceTemplates": []}})
    else:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no " + str(method)}})
"#;

    /// A list watch made while a connection is up opens its listen on it; the connection's
    /// re-establishment, when it runs after that watch (they race at every connect), finds
    /// the listen and opens no second one (which would cancel the first, perhaps already
    /// acknowledged: an upstream that ignores the cancellation then sends every list change
    /// twice).
    #[tokio::test]
    async fn a_list_listen_already_on_the_connection_is_not_opened_again() {
        let Some((_dir, provider)) = on_script(LISTENS, Protocol::Modern).await else {
            return;
        };
        let shared = provider.shared.clone();
        let conn = shared.conn().expect("connected");
        let sink = ChangeSink::new(Arc::new(LocalBus::new(16)), "m");
        let id = shared.watch_list(sink);
        shared.list_live().await;
        // What `reestablish` does for the list watch when it runs after the watch.
        shared.establish_list(&conn, id, true);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let limits = ReadLimits { max_bytes: 1 << 20 };
        let count = ResourceUri::parse("m+x://count").unwrap();
        let out = provider.read(&count, &limits).await.unwrap();
        match &out.contents[0].body {
            mcpr_core::ContentsBody::Text(t) => assert_eq!(t, "1", "list listens opened"),
            other => panic!("{other:?}"),
        }
    }
}
