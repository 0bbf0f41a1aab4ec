//! Legacy sessions that roam between replicas through a [`SessionHub`]: this replica's side.
//!
//! A session's notification stream (its GET stream) is served by one replica at a time, the
//! holder. Opening the stream here makes this replica the holder: it announces itself (the
//! previous holder stops and closes its stream), registers the session's recorded
//! subscriptions in its own registry, and from then on appends each notice to the session's
//! log and hands it, with the log's event id, to the open stream. A `Last-Event-ID` resume
//! replays the log first, so it works on any replica; when notices after the client's last
//! may be gone from the log (it was lost and begun again, or purged), the resumed stream
//! also says that each subscribed resource may have changed. Subscriptions made through any replica
//! are recorded in the hub; the holder re-reads them when told.
//!
//! Limits, said plainly: notices are produced only while some replica holds the session (a
//! client that never opens a GET stream gets none, as before); during a hand-over both
//! holders may log the same change once each, and a change the old holder logs after the
//! new one replayed the log is not in the new stream.

use mcpr_core::sync::lock;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt as _};
use rmcp::model::ServerJsonRpcMessage;
use rmcp::transport::streamable_http_server::SessionManager as _;
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use tokio::sync::{Notify, mpsc, oneshot};

use super::hub::{EventId, Replay, SessionHub, SessionSignal};
use crate::grant::Grant;
use crate::registry::Notice;
use crate::service::Service;

/// The grants of GET requests on their way to the session manager, by session id: the edge
/// authenticated them, and the holder's list-change notices must keep to what the caller may
/// see (rmcp does not hand the request to the session manager).
pub(crate) type PendingGrants = Arc<Mutex<HashMap<String, Option<Grant>>>>;

/// A stream of one session's notifications, as rmcp wants it.
pub(crate) type EventStream =
    std::pin::Pin<Box<dyn Stream<Item = ServerSseMessage> + Send + Sync + 'static>>;

/// This replica's part in roaming sessions.
pub(crate) struct Roaming {
    hub: Arc<dyn SessionHub>,
    service: Service,
    local: Arc<LocalSessionManager>,
    pub(crate) grants: PendingGrants,
    /// This replica's random prefix of holder tokens.
    me: String,
    next: AtomicU64,
    holders: Mutex<HashMap<String, Holder>>,
    /// Events a stream may have waiting before the oldest are dropped.
    capacity: usize,
    /// A holder whose stream stayed closed this long stops watching.
    idle: Duration,
    /// Session → when this replica last asked the hub to keep it alive.
    touched: Mutex<HashMap<String, std::time::Instant>>,
}

struct Holder {
    /// The session's key in signals.
    key: String,
    token: String,
    /// The open GET stream, if any.
    out: Arc<Mutex<Option<mpsc::Sender<ServerSseMessage>>>>,
    resync: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Holder {
    fn drop(&mut self) {
        // The task owns the registry subscriber: aborting it releases the watches, and the
        // stream ends with the last sender.
        self.task.abort();
    }
}

impl Roaming {
    pub(crate) fn new(
        hub: Arc<dyn SessionHub>,
        service: Service,
        local: Arc<LocalSessionManager>,
        capacity: usize,
        idle: Duration,
    ) -> Arc<Self> {
        let me = {
            use std::hash::{BuildHasher as _, Hasher as _};
            // Randomly keyed per process: tells this replica's holders from the others'.
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u32(std::process::id());
            format!("{:016x}", h.finish())
        };
        let this = Arc::new(Self {
            hub,
            service,
            local,
            grants: PendingGrants::default(),
            me,
            next: AtomicU64::new(0),
            holders: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
            idle,
            touched: Mutex::new(HashMap::new()),
        });
        let mut signals = this.hub.signals();
        let weak = Arc::downgrade(&this);
        tokio::spawn(async move {
            loop {
                let signal = match signals.recv().await {
                    Ok(s) => s,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(missed = n, "session signals lagged");
                        continue;
                    }
                    Err(_) => return,
                };
                let Some(this) = weak.upgrade() else { return };
                this.on_signal(signal).await;
            }
        });
        this
    }

    async fn on_signal(&self, signal: SessionSignal) {
        match signal {
            SessionSignal::Ended(key) => {
                drop(self.take_holder(&key, None));
                let ids: Vec<_> = self
                    .local
                    .sessions
                    .read()
                    .await
                    .keys()
                    .filter(|id| self.hub.key(id) == key)
                    .cloned()
                    .collect();
                for id in ids {
                    if let Err(e) = self.local.close_session(&id).await {
                        tracing::debug!(error = %e, "cannot close an ended session");
                    }
                }
            }
            SessionSignal::Subscriptions(key) => {
                let holders = lock(&self.holders);
                if let Some(h) = holders.values().find(|h| h.key == key) {
                    h.resync.notify_one();
                }
            }
            SessionSignal::Holder { session, holder } => {
                drop(self.take_holder(&session, Some(&holder)));
            }
        }
    }

    /// Remove this replica's holder of the session keyed `key`, unless its token is `keep`.
    fn take_holder(&self, key: &str, keep: Option<&str>) -> Option<Holder> {
        let mut holders = lock(&self.holders);
        let id = holders
            .iter()
            .find(|(_, h)| h.key == key && Some(h.token.as_str()) != keep)
            .map(|(id, _)| id.clone())?;
        holders.remove(&id)
    }

    /// The session is in use on this replica. In the background: a request must not wait
    /// on NATS for bookkeeping.
    pub(crate) fn touch(&self, id: &str) {
        {
            // A task only when a refresh may be due: most requests spawn nothing.
            let now = std::time::Instant::now();
            let mut touched = lock(&self.touched);
            if touched
                .get(id)
                .is_some_and(|t| now.duration_since(*t) < self.idle / 8)
            {
                return;
            }
            if touched.len() > 4096 {
                touched.retain(|_, t| now.duration_since(*t) < self.idle);
            }
            touched.insert(id.to_owned(), now);
        }
        let hub = self.hub.clone();
        let id = id.to_owned();
        tokio::spawn(async move { hub.touch(&id).await });
    }

    /// Open the session's notification stream here: replay the log after `after` (when
    /// resuming), then what this replica, now the holder, logs.
    pub(crate) async fn open(self: &Arc<Self>, id: &str, after: Option<EventId>) -> EventStream {
        let grant = lock(&self.grants).remove(id).flatten();
        let (tx, rx) = mpsc::channel(self.capacity);
        let existing = {
            let mut holders = lock(&self.holders);
            holders.retain(|_, h| !h.task.is_finished());
            holders.get(id).map(|h| {
                // A new stream replaces the one open here (its sender drops: it ends).
                *lock(&h.out) = Some(tx.clone());
            })
        };
        if existing.is_none() {
            let token = format!("{}-{}", self.me, self.next.fetch_add(1, Ordering::Relaxed));
            // Announce first: the previous holder stops logging before this one replays.
            if let Err(e) = self
                .hub
                .announce(SessionSignal::Holder {
                    session: self.hub.key(id),
                    holder: token.clone(),
                })
                .await
            {
                tracing::warn!(error = %e, "cannot announce a session's new stream holder");
            }
            let out = Arc::new(Mutex::new(Some(tx.clone())));
            let resync = Arc::new(Notify::new());
            let (ready_tx, ready_rx) = oneshot::channel();
            // Spawned and inserted under the lock: a subscriptions signal is either handled
            // before (the task's first read sees the change) or finds the holder.
            {
                let mut holders = lock(&self.holders);
                let task = tokio::spawn(hold(
                    self.clone(),
                    id.to_owned(),
                    grant,
                    out.clone(),
                    resync.clone(),
                    ready_tx,
                ));
                holders.insert(
                    id.to_owned(),
                    Holder {
                        key: self.hub.key(id),
                        token,
                        out,
                        resync,
                        task,
                    },
                );
            }
            // The stream opens once the subscriptions are watched here: a change the client
            // makes after seeing it open is not missed.
            let _ = ready_rx.await;
        }
        drop(tx);
        let mut rx = rx;
        let live = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
        let Some(after) = after else {
            return Box::pin(live);
        };
        let replayed = match self.hub.replay(id, after).await {
            Ok(replayed) => replayed,
            Err(e) => {
                tracing::warn!(error = %e, "cannot replay a session's notifications");
                Replay {
                    events: Vec::new(),
                    complete: false,
                }
            }
        };
        let mut last = after;
        let mut head = Vec::with_capacity(replayed.events.len());
        for (seq, bytes) in replayed.events {
            if let Some(ev) = event(Some(seq), &bytes) {
                last = seq;
                head.push(ev);
            }
        }
        if !replayed.complete {
            // Notices logged after the client's last may be gone: told, for each resource
            // it subscribes to, that it may have changed (and that the list may have), as
            // after any other gap in watching. Logged like any notice, after the replayed
            // ones; `last` stays the replay's own, so that a live notice the holder logged
            // meanwhile is not taken for one replayed.
            head.extend(self.gap_notices(id).await);
        }
        // Live events the replay already gave are skipped.
        let live = live.filter(move |ev| {
            let replayed = ev
                .event_id
                .as_deref()
                .and_then(EventId::parse)
                .is_some_and(|seq| seq.epoch == last.epoch && seq.seq <= last.seq);
            futures::future::ready(!replayed)
        });
        Box::pin(futures::stream::iter(head).chain(live))
    }

    /// "May have changed" for each resource session `id` subscribes to, and a list change
    /// when this server reports them, each logged (sent without an id when it cannot be).
    async fn gap_notices(&self, id: &str) -> Vec<ServerSseMessage> {
        let mut notices: Vec<Notice> = match self.hub.subscriptions(id).await {
            Ok(uris) => uris.into_iter().map(Notice::Updated).collect(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read a session's subscriptions");
                Vec::new()
            }
        };
        if self.service.reports_list_changes() {
            notices.push(Notice::ListChanged);
        }
        let mut out = Vec::with_capacity(notices.len());
        for notice in notices {
            let bytes = crate::wire::notify::notification_json(&notice);
            out.extend(event(self.log(id, &bytes).await, &bytes));
        }
        out
    }

    /// Append `bytes` to session `id`'s log: its event id, `None` when it could not be
    /// logged (the notice then goes out without one).
    async fn log(&self, id: &str, bytes: &[u8]) -> Option<EventId> {
        match self.hub.append(id, bytes).await {
            Ok(seq) => Some(seq),
            Err(e) => {
                tracing::warn!(error = %e, "cannot log a session notification; sending it unlogged");
                None
            }
        }
    }
}

/// The SSE event of a logged notification (`seq` `None`: not logged, so without an id).
fn event(seq: Option<EventId>, bytes: &[u8]) -> Option<ServerSseMessage> {
    match serde_json::from_slice::<ServerJsonRpcMessage>(bytes) {
        Ok(message) => {
            let mut ev = ServerSseMessage::from_message(message);
            ev.event_id = seq.map(|s| s.to_string());
            Some(ev)
        }
        Err(e) => {
            tracing::warn!(error = %e, "malformed logged notification");
            None
        }
    }
}

/// A holder's life: keep this replica's registry subscriber in step with the recorded
/// subscriptions, log each notice and pass it to the open stream. Ends (dropping the
/// subscriber) when aborted, or when no stream has been open for `idle`.
async fn hold(
    roaming: Arc<Roaming>,
    id: String,
    grant: Option<Grant>,
    out: Arc<Mutex<Option<mpsc::Sender<ServerSseMessage>>>>,
    resync: Arc<Notify>,
    ready: oneshot::Sender<()>,
) {
    let service = roaming.service.clone();
    let (subscriber, mut rx) = service.add_subscriber(grant.as_ref());
    let sid = subscriber.id();
    if service.reports_list_changes() {
        service.listen_for_list_changes(sid);
    }
    let mut held: HashSet<String> = HashSet::new();
    sync(&roaming, &id, sid, &mut held).await;
    let _ = ready.send(());
    let tick = (roaming.idle / 4).max(Duration::from_millis(100));
    let mut closed_since: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            notice = rx.recv() => {
                let Some(notice) = notice else { break };
                let bytes = crate::wire::notify::notification_json(&notice);
                let seq = roaming.log(&id, &bytes).await;
                let Some(ev) = event(seq, &bytes) else { continue };
                let tx = lock(&out).clone();
                if let Some(tx) = tx
                    && tx.try_send(ev).is_err()
                {
                    // A full or closed stream: the client resumes from the log.
                    tracing::debug!("session stream not reading; the notice stays in the log");
                }
            }
            () = resync.notified() => sync(&roaming, &id, sid, &mut held).await,
            () = tokio::time::sleep(tick) => {
                let open = lock(&out).as_ref().is_some_and(|t| !t.is_closed());
                if open {
                    closed_since = None;
                    roaming.touch(&id);
                } else {
                    let since = *closed_since.get_or_insert_with(tokio::time::Instant::now);
                    if since.elapsed() >= roaming.idle {
                        break;
                    }
                }
            }
        }
    }
    drop(subscriber);
}

/// Subscribe `sid` to exactly the session's recorded URIs.
async fn sync(roaming: &Roaming, id: &str, sid: u64, held: &mut HashSet<String>) {
    let wanted: HashSet<String> = match roaming.hub.subscriptions(id).await {
        Ok(v) => v.into_iter().collect(),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read a session's subscriptions");
            return;
        }
    };
    let registry = roaming.service.state().registry().clone();
    for uri in held.difference(&wanted) {
        registry.unsubscribe(sid, uri);
    }
    held.retain(|u| wanted.contains(u));
    for uri in wanted {
        if held.contains(&uri) {
            continue;
        }
        match roaming.service.subscribe_recorded_here(sid, &uri).await {
            Ok(()) => {
                held.insert(uri);
            }
            Err(e) => tracing::warn!(error = %e.message, "cannot watch a session's subscription"),
        }
    }
}
