//! [`NatsSessionStore`]: legacy HTTP sessions shared by a cluster's replicas, in JetStream
//! (spoken to with raw `$JS.API` requests, so that servers from 2.9 on work), as rmcp's
//! `SessionStore` and our `SessionHub`.
//!
//! Two file-backed streams per cluster (so a NATS restart loses no session), whose messages
//! expire after the idle session TTL unless a replica using the session rewrites them
//! ([`SessionHub::touch`]). They are created on first use, not at start, so a replica whose
//! NATS is down at start still starts (its roaming sessions fail clearly until NATS is up),
//! and again whenever NATS says one is missing (deleted by a client of the NATS account, or
//! lost by a NATS without its storage): the operation that found it missing creates it and
//! runs once more, and the recreation is counted ([`Seal::streams_recreated`]).
//!
//! Records lost with a deleted or purged records stream are written back by the replicas
//! that hold their sessions, so those sessions still roam: each replica keeps the sessions it
//! created or served within the idle TTL (at most [`REMEMBERED`], with their records' data)
//! and a mark of its own in the stream (`mcpr.<cluster>.sess.<sender>.mark`). While it holds
//! any session it looks for its mark every [`CHECK_EVERY`]; a mark gone before it could
//! expire means the records went with it, and the replica writes back every record of its
//! sessions that it remembers, each only onto an empty subject (a record another replica
//! wrote since is kept), counted ([`Seal::records_restored`]). A session used here whose
//! record is missing (a purge of some subjects only) has it written back at its next
//! refresh ([`SessionHub::touch`]). A session ended anywhere is forgotten first, so none
//! comes back. The notification logs are not kept in memory: a lost log loses the notices
//! it held, and a recreated events stream numbers events from 1 again. So an event id
//! names the log's incarnation too (its epoch: when the NATS server created the stream,
//! read from the answer to a creation request, which finds a stream that exists), and a
//! resumption from an id of an earlier incarnation, or from one older than the stream's
//! first message (a purge), replays what the log holds and says it is not complete
//! ([`Replay`]).
//! - `MCPR_<cluster>_SESSIONS`, one message per subject, `mcpr.<cluster>.sess.<h>.<record>`
//!   where `<h>` hashes the session id and `<record>` is `state` (rmcp's handshake), `owner`
//!   (a hash of the creating identity) or `subs` (the subscribed URIs, changed with a
//!   compare-and-set on the subject's last sequence);
//! - `MCPR_<cluster>_SESSION_EVENTS`, the notification log, `mcpr.<cluster>.sev.<h>`, at most
//!   `events_per_session` messages per subject. An event's id is its stream's epoch and
//!   its sequence there; a replay reads only the session's own subject, so an id of another session's event
//!   replays nothing of that session.
//!
//! Signals (a session ended, its subscriptions changed, its stream changed holder) travel on
//! core NATS subject `mcpr.<cluster>.sctl`, naming sessions by the same hash, not their ids.
//!
//! Every record, log entry and signal is sealed ([`Seal`]) for its subject: a log entry that
//! does not verify is never replayed, a signal that does not verify (or arrives a second
//! time) is dropped, a record that does not verify is not believed (an owner record is then
//! an error: the session is refused rather than handed to anyone), each counted. Owner
//! records are keyed hashes ([`Seal::owner`]).
//!
//! While this replica stands aside for replicas of an older release (see `watch.rs`),
//! every operation fails with the reason, naming them: it neither reads nor writes the
//! store.
//!
//! A stranger can still read a sealed record and write it again later, or hold a signal
//! back. So each record carries a version inside its seal (one more on every change; a
//! subscriptions signal names the new one), and each holder signal an epoch above every one
//! its sender knew of the session. A replica remembers the newest version of each record it
//! read, wrote or was told of, and the highest holder epoch of each session (bounded: the
//! most recently used [`REMEMBERED`]): an older record is refused (the newer copy it
//! remembers is used and written back in its place, or, with none, the read fails) and an
//! older holder signal is dropped, each counted.

use mcpr_core::sync::lock;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use mcpr_server::http::{
    EventId, Replay, SessionHub, SessionSignal, SessionState, SessionStore, SessionStoreError,
};
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::js::{self, Incarnation, JsError};
use crate::seal::{Kind, Seal, Stream};

/// How long a JetStream request may take before the store counts NATS unreachable.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The most record versions and holder epochs a replica remembers (each).
pub(crate) const REMEMBERED: usize = 16_384;

/// How often a replica that holds sessions looks for its mark (see the module docs).
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// The records of a session, by the last token of their subject.
const RECORDS: [&str; 3] = ["state", "owner", "subs"];

/// How many sessions' records are written back at once after a loss.
const RESTORE_AT_ONCE: usize = 16;

/// What a replica remembers of the sessions it served (see the module docs).
#[derive(Default)]
struct Memory {
    /// Record subject → the newest version known, its data when this replica read or wrote
    /// it (not when a signal only named it), and when it was last used.
    records: HashMap<String, (u64, Option<Vec<u8>>, Instant)>,
    /// Session key → the highest holder epoch known, and when.
    epochs: HashMap<String, (u64, Instant)>,
    /// Session key → when this replica last created, restored or served the session: the
    /// sessions whose records it writes back after a loss.
    held: HashMap<String, Instant>,
}

/// `map[key] = value`, keeping at most [`REMEMBERED`] entries: those unused for `ttl` go
/// first, then the least recently used.
fn remember<K: Eq + Hash + Clone, V>(
    map: &mut HashMap<K, V>,
    key: K,
    value: V,
    ttl: Duration,
    used: impl Fn(&V) -> Instant,
) {
    if !map.contains_key(&key) && map.len() >= REMEMBERED {
        map.retain(|_, v| used(v).elapsed() < ttl);
        if map.len() >= REMEMBERED
            && let Some(oldest) = map
                .iter()
                .min_by_key(|(_, v)| used(v))
                .map(|(k, _)| k.clone())
        {
            map.remove(&oldest);
        }
    }
    map.insert(key, value);
}

/// A verified session record.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    version: u64,
    data: Vec<u8>,
}

impl Record {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + self.data.len());
        out.extend_from_slice(&self.version.to_be_bytes());
        out.extend_from_slice(&self.data);
        out
    }

    fn decode(payload: &[u8]) -> Option<Self> {
        let version = u64::from_be_bytes(payload.get(..8)?.try_into().ok()?);
        Some(Self {
            version,
            data: payload[8..].to_vec(),
        })
    }
}

/// A session record as this replica believes it.
enum Current {
    /// No record.
    Absent,
    /// A record that does not verify, at this sequence.
    Unverified(u64),
    /// The record at this sequence, or, when NATS holds one older than this replica
    /// remembers (`restored`), the remembered one, to write in its place.
    Valid {
        seq: u64,
        record: Record,
        restored: bool,
    },
    /// NATS holds a record older than the version this replica was told of, and it
    /// remembers no newer copy.
    Older { known: u64 },
}

/// See the module docs.
pub struct NatsSessionStore {
    client: async_nats::Client,
    seal: Arc<Seal>,
    cluster: String,
    ttl: Duration,
    signals: broadcast::Sender<SessionSignal>,
    /// Shared with the task that hears signals.
    memory: Arc<Mutex<Memory>>,
    /// Session → when this replica last rewrote its records.
    touched: Mutex<HashMap<String, Instant>>,
    task: tokio::task::JoinHandle<()>,
    events_per_session: usize,
    /// Whether the streams are known to exist (cleared when NATS says one is missing): read
    /// on every operation, so not behind the lock that creating them takes.
    streams: AtomicBool,
    /// Held while the streams are being created, so concurrent first uses create them once.
    creating: tokio::sync::Mutex<()>,
    /// Per stream (records, events): found missing since it was last created, so its next
    /// creation is a recreation, counted.
    lost: [AtomicBool; 2],
    /// This replica's mark in the records stream (see the module docs).
    mark: String,
    /// The notification log stream as this replica last found it: when its incarnation was
    /// created (the epoch of the event ids it hands out), and the highest sequence it saw
    /// stored in it.
    log_epoch: Mutex<(u64, u64)>,
    /// The task that looks for the mark.
    keeper: tokio::task::JoinHandle<()>,
}

impl Drop for NatsSessionStore {
    fn drop(&mut self) {
        self.task.abort();
        self.keeper.abort();
    }
}

fn error(e: impl std::fmt::Display) -> SessionStoreError {
    e.to_string().into()
}

impl NatsSessionStore {
    /// Listen for cluster `cluster`'s session signals; the session streams are created (or
    /// found, with the same settings) on first use. Never waits for NATS. A session unused for `idle_ttl` is forgotten; each keeps at
    /// most `events_per_session` notifications for `Last-Event-ID` resumption. Replicas of
    /// one cluster must agree on both. Set the result as `HttpSettings::session_hub`.
    pub async fn connect(
        client: async_nats::Client,
        seal: Arc<Seal>,
        cluster: &str,
        idle_ttl: Duration,
        events_per_session: usize,
    ) -> Result<Arc<Self>, String> {
        let (signals, _) = broadcast::channel(1024);
        let mut sub = client
            .subscribe(control_subject(cluster))
            .await
            .map_err(|e| format!("cannot subscribe to session signals: {e}"))?;
        // No flush: with NATS down at start the subscription is sent once it connects (and
        // again after every reconnect, by the client).
        let tx = signals.clone();
        let opener = seal.clone();
        let memory = Arc::new(Mutex::new(Memory::default()));
        let heard = memory.clone();
        let name = cluster.to_owned();
        let task = tokio::spawn(async move {
            while let Some(msg) = sub.next().await {
                let Some(payload) = opener.receive(Kind::Signal, &msg.subject, &msg.payload) else {
                    continue;
                };
                let Some((signal, order)) = parse_signal(payload) else {
                    tracing::warn!("malformed session signal");
                    continue;
                };
                let mut m = lock(&heard);
                match &signal {
                    SessionSignal::Holder { session, .. } => {
                        let known = m.epochs.get(session).map_or(0, |(e, _)| *e);
                        if order < known {
                            // Held back and delivered after a newer holder's: obeying it
                            // would stop the live stream.
                            opener.refuse(Kind::Signal);
                            tracing::debug!(
                                "cluster: dropped a holder signal older than one heard"
                            );
                            continue;
                        }
                        remember(
                            &mut m.epochs,
                            session.clone(),
                            (order, Instant::now()),
                            idle_ttl,
                            |v| v.1,
                        );
                    }
                    SessionSignal::Subscriptions(key) => {
                        let subject = format!("mcpr.{name}.sess.{key}.subs");
                        let known = m.records.get(&subject).map_or(0, |r| r.0);
                        if order > known {
                            remember(
                                &mut m.records,
                                subject,
                                (order, None, Instant::now()),
                                idle_ttl,
                                |v| v.2,
                            );
                        }
                    }
                    // Never written back: an ended session must stay ended.
                    SessionSignal::Ended(key) => {
                        m.held.remove(key);
                    }
                }
                drop(m);
                let _ = tx.send(signal);
            }
        });
        Ok(Arc::new_cyclic(|this: &std::sync::Weak<Self>| {
            let keeper = tokio::spawn(keep(this.clone()));
            Self {
                client,
                mark: format!("mcpr.{cluster}.sess.{}.mark", seal.sender_token()),
                seal,
                cluster: cluster.to_owned(),
                ttl: idle_ttl,
                signals,
                memory,
                touched: Mutex::new(HashMap::new()),
                task,
                events_per_session,
                streams: AtomicBool::new(false),
                creating: tokio::sync::Mutex::new(()),
                lost: Default::default(),
                log_epoch: Mutex::new((0, 0)),
                keeper,
            }
        }))
    }

    /// Create the streams unless they are known to exist.
    async fn ensure_streams(&self) -> Result<(), SessionStoreError> {
        if self.streams.load(Ordering::Acquire) {
            return Ok(());
        }
        let _creating = self.creating.lock().await;
        if self.streams.load(Ordering::Acquire) {
            return Ok(());
        }
        for role in [Stream::Sessions, Stream::SessionEvents] {
            let config = self.stream_config(role);
            let name = self.stream_name(role);
            match js::create_stream(&self.client, &config, REQUEST_TIMEOUT).await {
                Ok(info) => {
                    if role == Stream::SessionEvents {
                        self.learn_log(Incarnation::of(&info).created);
                    }
                    if self.lost[lost_index(role)].swap(false, Ordering::AcqRel) {
                        let lost = match role {
                            Stream::SessionEvents => "the notices it logged are lost",
                            _ => "the replicas holding its sessions write their records back",
                        };
                        tracing::warn!(
                            stream = %name,
                            "cluster: a session stream was missing; created it again ({lost})"
                        );
                        self.seal.recreated_stream(role);
                    }
                }
                Err(JsError::Api { description, .. }) => {
                    return Err(error(format!(
                        "cannot create the session stream {name} (do all replicas use the same session_idle_timeout and event_store_capacity?): {description}"
                    )));
                }
                Err(e) => {
                    return Err(error(format!(
                        "cannot create the session stream {name}: {e}"
                    )));
                }
            }
        }
        self.streams.store(true, Ordering::Release);
        Ok(())
    }

    /// The settings of session stream `role`: every replica creates it with these, so a
    /// creation finds the stream another made.
    fn stream_config(&self, role: Stream) -> Value {
        let cluster = &self.cluster;
        let (subjects, per_subject) = match role {
            Stream::SessionEvents => (
                format!("mcpr.{cluster}.sev.>"),
                i64::try_from(self.events_per_session.max(1)).unwrap_or(i64::MAX),
            ),
            _ => (format!("mcpr.{cluster}.sess.>"), 1),
        };
        json!({
            "name": self.stream_name(role),
            "subjects": [subjects],
            "max_msgs_per_subject": per_subject,
            "max_age": u64::try_from(self.ttl.as_nanos()).unwrap_or(u64::MAX),
            "storage": "file",
            "num_replicas": 1,
            "discard": "old",
        })
    }

    /// Note the notification log's incarnation `created`: a new one (the log was lost and
    /// begun again) numbers from 1, so the sequences seen in the last are forgotten.
    fn learn_log(&self, created: u64) {
        let mut log = lock(&self.log_epoch);
        if log.0 != created {
            *log = (created, 0);
        }
    }

    /// The notification log's incarnation now, learnt (see [`NatsSessionStore::learn_log`]).
    /// A creation request that finds the stream: the replicas' NATS user may send it, and
    /// its answer has the stream's creation time and state.
    async fn log_incarnation(&self) -> Result<Incarnation, SessionStoreError> {
        self.not_aside()?;
        let name = self.stream_name(Stream::SessionEvents);
        let info = js::create_stream(
            &self.client,
            &self.stream_config(Stream::SessionEvents),
            REQUEST_TIMEOUT,
        )
        .await
        .map_err(|e| error(format!("cannot read the stream {name}: {e}")))?;
        let found = Incarnation::of(&info);
        self.learn_log(found.created);
        Ok(found)
    }

    /// Session log `subject`'s events after sequence `after`, as stored in the log of epoch
    /// `epoch`, those that verify.
    async fn read_log(
        &self,
        subject: &str,
        after: u64,
        epoch: u64,
    ) -> Result<Vec<(EventId, Vec<u8>)>, SessionStoreError> {
        let mut out = Vec::new();
        let mut next = after.saturating_add(1);
        while let Some((seq, data)) = self
            .get(
                Stream::SessionEvents,
                &json!({ "seq": next, "next_by_subj": subject }),
            )
            .await?
        {
            // Another client of the NATS account may append to the log: only what a replica
            // sealed for this session's log is replayed to its client.
            if let Some(event) = self.seal.open_record(Kind::Log, subject, &data, self.ttl) {
                out.push((EventId { epoch, seq }, event.to_vec()));
            }
            next = seq + 1;
        }
        Ok(out)
    }

    /// Note that `stream` was found missing: the streams are created again on the next
    /// operation, and that creation of `stream` is counted.
    fn lose(&self, stream: Stream) {
        self.lost[lost_index(stream)].store(true, Ordering::Release);
        self.streams.store(false, Ordering::Release);
    }

    /// Run `op` on `stream` (after creating the streams unless they are known to exist);
    /// when it finds `stream` missing, create the streams again and run it once more. Its
    /// error is the store's, prefixed with `what`.
    async fn on_stream<T, F, Fut>(
        &self,
        stream: Stream,
        what: &str,
        op: F,
    ) -> Result<T, SessionStoreError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, JsError>>,
    {
        self.not_aside()?;
        self.ensure_streams().await?;
        let first = match op().await {
            Err(e) if js::stream_missing(&e) => e,
            done => return done.map_err(|e| error(format!("{what}: {e}"))),
        };
        tracing::debug!(error = %first, "cluster: a session stream is missing");
        self.lose(stream);
        self.ensure_streams().await?;
        op().await.map_err(|e| {
            if js::stream_missing(&e) {
                self.lose(stream);
            }
            error(format!("{what}: {e}"))
        })
    }

    /// Publish a signal to every replica (this one included).
    /// Refused while this replica stands aside for replicas of an older release (see
    /// `watch.rs`): legacy sessions are theirs until they are stopped, and this replica
    /// writes nothing they would refuse.
    fn not_aside(&self) -> Result<(), SessionStoreError> {
        match self.seal.aside() {
            Some(why) => Err(error(format!(
                "the shared session store is not used: {why}"
            ))),
            None => Ok(()),
        }
    }

    async fn send(&self, signal: &Value) -> Result<(), SessionStoreError> {
        self.not_aside()?;
        let payload = serde_json::to_vec(signal).expect("json");
        let subject = control_subject(&self.cluster);
        let sealed = self.seal.seal(Kind::Signal, &subject, &payload);
        self.client.publish(subject, sealed).await.map_err(error)?;
        self.client.flush().await.map_err(error)?;
        Ok(())
    }

    fn record(&self, session: &str, record: &str) -> String {
        format!(
            "mcpr.{}.sess.{}.{record}",
            self.cluster,
            crate::token(session, 16)
        )
    }

    fn log(&self, session: &str) -> String {
        format!("mcpr.{}.sev.{}", self.cluster, crate::token(session, 16))
    }

    /// The last record on `subject` as this replica believes it (see [`Current`]).
    async fn current(&self, subject: &str) -> Result<Current, SessionStoreError> {
        let Some((seq, data)) = self
            .get(Stream::Sessions, &json!({ "last_by_subj": subject }))
            .await?
        else {
            return Ok(Current::Absent);
        };
        let Some(record) = self
            .seal
            .open_record(Kind::Record, subject, &data, self.ttl)
            .and_then(Record::decode)
        else {
            if self
                .seal
                .previous_record(Kind::Record, subject, &data, self.ttl)
                .is_some()
            {
                // A session of the previous release: unknown to this one, which cannot take
                // it over (its client is told so and starts a new one).
                return Ok(Current::Absent);
            }
            return Ok(Current::Unverified(seq));
        };
        let mut memory = lock(&self.memory);
        match memory.records.get_mut(subject) {
            Some((known, data, used)) if *known > record.version => {
                // An old copy written again by a stranger: not believed.
                self.seal.refuse(Kind::Record);
                *used = Instant::now();
                Ok(match data {
                    Some(data) => Current::Valid {
                        seq,
                        record: Record {
                            version: *known,
                            data: data.clone(),
                        },
                        restored: true,
                    },
                    None => Current::Older { known: *known },
                })
            }
            _ => {
                remember(
                    &mut memory.records,
                    subject.to_owned(),
                    (record.version, Some(record.data.clone()), Instant::now()),
                    self.ttl,
                    |v| v.2,
                );
                Ok(Current::Valid {
                    seq,
                    record,
                    restored: false,
                })
            }
        }
    }

    /// The version after the newest this replica knows of `subject` (or `after`).
    fn next_version(&self, subject: &str, after: u64) -> u64 {
        let memory = lock(&self.memory);
        let known = memory.records.get(subject).map_or(0, |r| r.0);
        known.max(after) + 1
    }

    /// Note that this replica wrote `record` on `subject`.
    fn wrote(&self, subject: &str, record: &Record) {
        let mut memory = lock(&self.memory);
        remember(
            &mut memory.records,
            subject.to_owned(),
            (record.version, Some(record.data.clone()), Instant::now()),
            self.ttl,
            |v| v.2,
        );
    }

    /// Note that this replica holds `session` now (created, restored or served it here).
    fn hold(&self, session: &str) {
        let mut memory = lock(&self.memory);
        remember(
            &mut memory.held,
            self.key(session),
            Instant::now(),
            self.ttl,
            |t| *t,
        );
    }

    /// Write back `subject`'s record as this replica remembers it, if it does, onto an
    /// empty subject only (a record another replica wrote since the loss is kept): whether
    /// it was written.
    async fn restore(&self, subject: &str) -> Result<bool, SessionStoreError> {
        let remembered = {
            let memory = lock(&self.memory);
            memory.records.get(subject).and_then(|(version, data, _)| {
                data.clone().map(|data| Record {
                    version: *version,
                    data,
                })
            })
        };
        let Some(record) = remembered else {
            return Ok(false);
        };
        let written = self
            .put(Kind::Record, subject, &record.encode(), Some(0))
            .await?
            .is_some();
        if written {
            self.seal.restored_records(1);
        }
        Ok(written)
    }

    /// Look for this replica's mark while it holds sessions; when the mark is gone before
    /// it could expire (`marked`: when it was last written), write back the records of
    /// every session held (see the module docs).
    async fn check(&self, marked: &mut Option<Instant>) {
        let held: Vec<String> = {
            let memory = lock(&self.memory);
            memory
                .held
                .iter()
                .filter(|(_, t)| t.elapsed() < self.ttl)
                .map(|(k, _)| k.clone())
                .collect()
        };
        if held.is_empty() || self.seal.aside().is_some() {
            return;
        }
        let found = match self
            .get(Stream::Sessions, &json!({ "last_by_subj": self.mark }))
            .await
        {
            Ok(found) => found.is_some(),
            Err(e) => {
                tracing::debug!(error = %e, "cluster: cannot look for this replica's session mark");
                return;
            }
        };
        // Written at `marked` or later, it expires a TTL after that at the earliest.
        let lost = !found && marked.is_some_and(|t| t.elapsed() < self.ttl);
        if lost {
            let sessions = held.len();
            let written: usize = futures::stream::iter(held)
                .map(|key| async move {
                    let mut n = 0;
                    // Ended since the list was taken: left ended.
                    if !lock(&self.memory).held.contains_key(&key) {
                        return n;
                    }
                    for record in RECORDS {
                        let subject = format!("mcpr.{}.sess.{key}.{record}", self.cluster);
                        match self.restore(&subject).await {
                            Ok(true) => n += 1,
                            Ok(false) => {}
                            Err(e) => {
                                tracing::debug!(error = %e, "cluster: cannot write back a session record");
                            }
                        }
                    }
                    n
                })
                .buffer_unordered(RESTORE_AT_ONCE)
                .fold(0, |all, n| async move { all + n })
                .await;
            tracing::warn!(
                sessions,
                records = written,
                "cluster: the legacy sessions' records were lost from NATS (their stream deleted or purged); wrote back those of the sessions this replica holds"
            );
        }
        if !found || marked.is_none_or(|t| t.elapsed() >= self.ttl / 4) {
            let sent = Instant::now();
            match self.put(Kind::Record, &self.mark, &[], None).await {
                Ok(_) => *marked = Some(sent),
                Err(e) => {
                    tracing::debug!(error = %e, "cluster: cannot write this replica's session mark")
                }
            }
        }
    }

    /// Write `data` on `subject` as its next version (no compare-and-set: records written
    /// once).
    async fn write(&self, subject: &str, data: Vec<u8>) -> Result<(), SessionStoreError> {
        let record = Record {
            version: self.next_version(subject, 0),
            data,
        };
        self.put(Kind::Record, subject, &record.encode(), None)
            .await?;
        self.wrote(subject, &record);
        Ok(())
    }

    /// The data of the last record on `subject`, an error if it does not verify or is older
    /// than one this replica knows of and cannot put back.
    async fn verified(&self, subject: &str) -> Result<Option<Vec<u8>>, SessionStoreError> {
        match self.current(subject).await? {
            Current::Absent => Ok(None),
            Current::Valid { record, .. } => Ok(Some(record.data)),
            Current::Unverified(_) => Err(error(
                "a session record in NATS does not verify with the cluster's secret (another client of the NATS account wrote it, or a replica of a release that seals differently)",
            )),
            Current::Older { known } => Err(older(known)),
        }
    }

    async fn get(
        &self,
        stream: Stream,
        request: &Value,
    ) -> Result<Option<(u64, Vec<u8>)>, SessionStoreError> {
        let name = self.stream_name(stream);
        self.on_stream(stream, "message get failed", || {
            js::get(&self.client, &name, request, REQUEST_TIMEOUT)
        })
        .await
    }

    fn stream_name(&self, stream: Stream) -> String {
        match stream {
            Stream::SessionEvents => events_stream(&self.cluster),
            _ => records_stream(&self.cluster),
        }
    }

    /// Publish `payload` of `kind` on `subject` (captured by a stream); with `expected`, only if the
    /// subject's last sequence is that (0: no message). `Ok(None)`: the check failed.
    async fn put(
        &self,
        kind: Kind,
        subject: &str,
        payload: &[u8],
        expected: Option<u64>,
    ) -> Result<Option<u64>, SessionStoreError> {
        // No stream captures a log entry's subject but the events stream, nor a record's
        // but the records stream: a publish nobody answers names which one is missing.
        let stream = match kind {
            Kind::Log => Stream::SessionEvents,
            _ => Stream::Sessions,
        };
        let sealed = self.seal.seal(kind, subject, payload);
        self.on_stream(stream, "publish failed", || {
            js::publish(
                &self.client,
                subject,
                sealed.clone(),
                expected,
                REQUEST_TIMEOUT,
            )
        })
        .await
    }

    async fn purge(&self, stream: Stream, filter: &str) -> Result<(), SessionStoreError> {
        let subject = format!("$JS.API.STREAM.PURGE.{}", self.stream_name(stream));
        let body = json!({ "filter": filter });
        self.on_stream(stream, "purge failed", || async {
            js::api(&self.client, &subject, &body, REQUEST_TIMEOUT)
                .await
                .map(drop)
        })
        .await
    }
}

/// Every [`CHECK_EVERY`], [`NatsSessionStore::check`] until the store is dropped.
async fn keep(store: std::sync::Weak<NatsSessionStore>) {
    let mut marked = None;
    loop {
        tokio::time::sleep(CHECK_EVERY).await;
        let Some(store) = store.upgrade() else { return };
        store.check(&mut marked).await;
    }
}

/// The index of `stream` in [`NatsSessionStore::lost`].
fn lost_index(stream: Stream) -> usize {
    usize::from(stream == Stream::SessionEvents)
}

fn records_stream(cluster: &str) -> String {
    format!("MCPR_{cluster}_SESSIONS")
}

fn events_stream(cluster: &str) -> String {
    format!("MCPR_{cluster}_SESSION_EVENTS")
}

fn control_subject(cluster: &str) -> String {
    format!("mcpr.{cluster}.sctl")
}

/// The wire form of `s`; `order` is a holder signal's epoch, a subscriptions signal's
/// record version.
fn signal_json(s: &SessionSignal, order: u64) -> Value {
    match s {
        SessionSignal::Ended(id) => json!({ "ended": id }),
        SessionSignal::Subscriptions(id) => subscriptions_json(id, order),
        SessionSignal::Holder { session, holder } => {
            json!({ "holder": holder, "session": session, "epoch": order })
        }
    }
}

fn subscriptions_json(key: &str, version: u64) -> Value {
    json!({ "subscriptions": key, "version": version })
}

/// A signal and its order (see [`signal_json`]; 0 for an end).
fn parse_signal(payload: &[u8]) -> Option<(SessionSignal, u64)> {
    let v: Value = serde_json::from_slice(payload).ok()?;
    let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    let number = |k: &str| v.get(k).and_then(Value::as_u64);
    if let Some(id) = text("ended") {
        Some((SessionSignal::Ended(id), 0))
    } else if let Some(id) = text("subscriptions") {
        Some((SessionSignal::Subscriptions(id), number("version")?))
    } else {
        let signal = SessionSignal::Holder {
            session: text("session")?,
            holder: text("holder")?,
        };
        Some((signal, number("epoch")?))
    }
}

#[async_trait::async_trait]
impl SessionStore for NatsSessionStore {
    async fn load(&self, session: &str) -> Result<Option<SessionState>, SessionStoreError> {
        match self.verified(&self.record(session, "state")).await? {
            Some(data) => {
                let state = serde_json::from_slice(&data).map_err(error)?;
                // rmcp restores the session here.
                self.hold(session);
                Ok(Some(state))
            }
            None => Ok(None),
        }
    }

    async fn store(&self, session: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let data = serde_json::to_vec(state).map_err(error)?;
        self.write(&self.record(session, "state"), data).await?;
        self.hold(session);
        Ok(())
    }

    async fn delete(&self, session: &str) -> Result<(), SessionStoreError> {
        let h = crate::token(session, 16);
        self.purge(
            Stream::Sessions,
            &format!("mcpr.{}.sess.{h}.>", self.cluster),
        )
        .await?;
        self.purge(Stream::SessionEvents, &self.log(session))
            .await?;
        lock(&self.touched).remove(session);
        lock(&self.memory).held.remove(&self.key(session));
        self.announce(SessionSignal::Ended(self.key(session))).await
    }
}

#[async_trait::async_trait]
impl SessionHub for NatsSessionStore {
    fn key(&self, session: &str) -> String {
        crate::token(session, 16)
    }

    fn owner_of(&self, identity: &str) -> String {
        self.seal.owner(identity)
    }

    async fn set_owner(&self, session: &str, owner: &str) -> Result<(), SessionStoreError> {
        self.write(&self.record(session, "owner"), owner.as_bytes().to_vec())
            .await
    }

    async fn owner(&self, session: &str) -> Result<Option<String>, SessionStoreError> {
        Ok(self
            .verified(&self.record(session, "owner"))
            .await?
            .map(|d| String::from_utf8_lossy(&d).into_owned()))
    }

    async fn subscriptions(&self, session: &str) -> Result<Vec<String>, SessionStoreError> {
        match self.verified(&self.record(session, "subs")).await? {
            Some(d) => serde_json::from_slice(&d).map_err(error),
            None => Ok(Vec::new()),
        }
    }

    async fn set_subscription(
        &self,
        session: &str,
        uri: &str,
        subscribed: bool,
    ) -> Result<Vec<String>, SessionStoreError> {
        let subject = self.record(session, "subs");
        // Compare-and-set: two replicas changing one session's set at once both count.
        for _ in 0..16 {
            let (seq, version, mut uris) = match self.current(&subject).await? {
                Current::Valid { seq, record, .. } => (
                    seq,
                    record.version,
                    serde_json::from_slice::<Vec<String>>(&record.data).map_err(error)?,
                ),
                // A record that does not verify is not believed: overwritten.
                Current::Unverified(seq) => (seq, 0, Vec::new()),
                Current::Absent => (0, 0, Vec::new()),
                Current::Older { known } => return Err(older(known)),
            };
            let present = uris.iter().any(|u| u == uri);
            match (subscribed, present) {
                (true, true) | (false, false) => return Ok(uris),
                (true, false) => uris.push(uri.to_owned()),
                (false, true) => uris.retain(|u| u != uri),
            }
            let record = Record {
                version: self.next_version(&subject, version),
                data: serde_json::to_vec(&uris).map_err(error)?,
            };
            if self
                .put(Kind::Record, &subject, &record.encode(), Some(seq))
                .await?
                .is_some()
            {
                self.wrote(&subject, &record);
                self.send(&subscriptions_json(&self.key(session), record.version))
                    .await?;
                return Ok(uris);
            }
        }
        Err(error(
            "the session's subscriptions kept changing under this update; try again",
        ))
    }

    async fn append(&self, session: &str, event: &[u8]) -> Result<EventId, SessionStoreError> {
        let seq = self
            .put(Kind::Log, &self.log(session), event, None)
            .await?
            .ok_or_else(|| error("publish refused"))?;
        let known = {
            let mut log = lock(&self.log_epoch);
            if seq > log.1 {
                log.1 = seq;
                Some(log.0)
            } else {
                None
            }
        };
        let epoch = match known {
            Some(epoch) => epoch,
            // One stream's sequences only grow: a smaller one than this replica saw means the
            // log was lost and begun again by another replica since (or two appends crossed,
            // and the look finds the same log).
            None => {
                let now = self.log_incarnation().await?.created;
                let mut log = lock(&self.log_epoch);
                log.1 = log.1.max(seq);
                now
            }
        };
        Ok(EventId { epoch, seq })
    }

    async fn replay(&self, session: &str, after: EventId) -> Result<Replay, SessionStoreError> {
        let subject = self.log(session);
        // A log found missing here is created again (and counted) before its incarnation
        // is read.
        self.get(Stream::SessionEvents, &json!({ "last_by_subj": subject }))
            .await?;
        for _ in 0..3 {
            let before = self.log_incarnation().await?;
            // An id of an earlier log places the client nowhere in this one: all of this
            // log is after it.
            let same = after.epoch == before.created;
            let from = if same { after.seq } else { 0 };
            let events = self.read_log(&subject, from, before.created).await?;
            let now = self.log_incarnation().await?;
            if now.created != before.created {
                // Lost and begun again while being read: read the new one.
                continue;
            }
            // Read after the events, so that a purge before or during the read counts.
            let complete = same && after.seq.saturating_add(1) >= now.first_seq;
            return Ok(Replay { events, complete });
        }
        Err(error(
            "the notification log stream kept being deleted while it was read",
        ))
    }

    async fn announce(&self, signal: SessionSignal) -> Result<(), SessionStoreError> {
        let order = match &signal {
            SessionSignal::Holder { session, .. } => {
                // Above every epoch known here, and the time when that is higher, so that a
                // holder on a replica that never heard of the session still comes after the
                // ones before it.
                let mut memory = lock(&self.memory);
                let known = memory.epochs.get(session).map_or(0, |(e, _)| *e);
                let epoch = known.saturating_add(1).max(crate::seal::now_ms());
                remember(
                    &mut memory.epochs,
                    session.clone(),
                    (epoch, Instant::now()),
                    self.ttl,
                    |v| v.1,
                );
                epoch
            }
            SessionSignal::Subscriptions(key) => {
                let subject = format!("mcpr.{}.sess.{key}.subs", self.cluster);
                let memory = lock(&self.memory);
                memory.records.get(&subject).map_or(0, |r| r.0)
            }
            SessionSignal::Ended(_) => 0,
        };
        self.send(&signal_json(&signal, order)).await
    }

    fn signals(&self) -> broadcast::Receiver<SessionSignal> {
        self.signals.subscribe()
    }

    async fn touch(&self, session: &str) {
        self.hold(session);
        // Rewrite the records a few times per TTL, not on every request.
        {
            let now = Instant::now();
            let mut touched = lock(&self.touched);
            if touched
                .get(session)
                .is_some_and(|t| now.duration_since(*t) < self.ttl / 4)
            {
                return;
            }
            if touched.len() > 4096 {
                touched.retain(|_, t| now.duration_since(*t) < self.ttl);
            }
            touched.insert(session.to_owned(), now);
        }
        for record in RECORDS {
            let subject = self.record(session, record);
            match self.current(&subject).await {
                // The same record again, sealed anew (the seal's time is the record's age),
                // unless another replica changed it meanwhile; an older copy a stranger
                // wrote is replaced by the newer one remembered here. One that does not
                // verify is left to expire.
                Ok(Current::Valid {
                    seq,
                    record,
                    restored,
                }) => {
                    if restored {
                        tracing::warn!(
                            "cluster: a session record in NATS was an older copy; putting back the newer one"
                        );
                    }
                    if let Err(e) = self
                        .put(Kind::Record, &subject, &record.encode(), Some(seq))
                        .await
                    {
                        tracing::debug!(error = %e, "cannot refresh a session record");
                    }
                }
                // Lost (the session is live here, so it did not expire): written back when
                // remembered.
                Ok(Current::Absent) => match self.restore(&subject).await {
                    // Counted; not a line per record (a purge may take thousands).
                    Ok(true) => tracing::debug!(
                        "cluster: a record of a session in use here was missing in NATS; wrote it back"
                    ),
                    Ok(false) => {}
                    Err(e) => tracing::debug!(error = %e, "cannot write back a session record"),
                },
                Ok(Current::Unverified(_) | Current::Older { .. }) => {}
                Err(e) => tracing::debug!(error = %e, "cannot refresh a session record"),
            }
        }
    }
}

/// The refusal of a record older than version `known`.
fn older(known: u64) -> SessionStoreError {
    error(format!(
        "a session record in NATS is older than version {known}, which this replica was told of (another client of the NATS account wrote an old copy again); try again once the replica holding the newer one restores it"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_survive_the_wire_and_garbage_is_refused() {
        for s in [
            SessionSignal::Ended("a".into()),
            SessionSignal::Subscriptions("b".into()),
            SessionSignal::Holder {
                session: "c".into(),
                holder: "r-1".into(),
            },
        ] {
            let order = if matches!(s, SessionSignal::Ended(_)) {
                0
            } else {
                7
            };
            let wire = serde_json::to_vec(&signal_json(&s, order)).unwrap();
            assert_eq!(parse_signal(&wire), Some((s, order)));
        }
        // Without its epoch or version (as an older release wrote them): refused.
        assert_eq!(parse_signal(br#"{"holder": "x", "session": "c"}"#), None);
        assert_eq!(parse_signal(br#"{"subscriptions": "b"}"#), None);
        assert_eq!(parse_signal(b"{}"), None);
        assert_eq!(parse_signal(b"not json"), None);
        assert_eq!(parse_signal(br#"{"holder": "x"}"#), None);
    }
}
