//! [`NatsSessionStore`]: legacy HTTP sessions shared by a cluster's replicas, in JetStream
//! (spoken to with raw `$JS.API` requests, so that servers from 2.9 on work), as rmcp's
//! `SessionStore` and our `SessionHub`.
//!
//! Two file-backed streams per cluster (so a NATS restart loses no session), whose messages
//! expire after the idle session TTL unless a replica using the session rewrites them
//! ([`SessionHub::touch`]). They are created on first use, not at start, so a replica whose
//! NATS is down at start still starts (its roaming sessions fail clearly until NATS is up),
//! and again whenever NATS says they are missing (a NATS that lost its storage):
//! - `MCPR_<cluster>_SESSIONS`, one message per subject, `mcpr.<cluster>.sess.<h>.<record>`
//!   where `<h>` hashes the session id and `<record>` is `state` (rmcp's handshake), `owner`
//!   (a hash of the creating identity) or `subs` (the subscribed URIs, changed with a
//!   compare-and-set on the subject's last sequence);
//! - `MCPR_<cluster>_SESSION_EVENTS`, the notification log, `mcpr.<cluster>.sev.<h>`, at most
//!   `events_per_session` messages per subject. An event's id is its stream sequence; a
//!   replay reads only the session's own subject, so an id of another session's event
//!   replays nothing of that session.
//!
//! Signals (a session ended, its subscriptions changed, its stream changed holder) travel on
//! core NATS subject `mcpr.<cluster>.sctl`, naming sessions by the same hash, not their ids.
//!
//! Every record, log entry and signal is sealed ([`Seal`]) for its subject: a log entry that
//! does not verify is never replayed, a signal that does not verify is dropped, a record that
//! does not verify is not believed (an owner record is then an error: the session is refused
//! rather than handed to anyone), each counted. Owner records are keyed hashes
//! ([`Seal::owner`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use mcpr_server::http::{SessionHub, SessionSignal, SessionState, SessionStore, SessionStoreError};
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::js::{self, JsError};
use crate::seal::{Kind, MESSAGE_MAX_AGE, Seal};

/// How long a JetStream request may take before the store counts NATS unreachable.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// See the module docs.
pub struct NatsSessionStore {
    client: async_nats::Client,
    seal: Arc<Seal>,
    cluster: String,
    ttl: Duration,
    signals: broadcast::Sender<SessionSignal>,
    /// Session → when this replica last rewrote its records.
    touched: Mutex<HashMap<String, Instant>>,
    task: tokio::task::JoinHandle<()>,
    events_per_session: usize,
    /// Whether the streams are known to exist (cleared when NATS says one is missing): read
    /// on every operation, so not behind the lock that creating them takes.
    streams: AtomicBool,
    /// Held while the streams are being created, so concurrent first uses create them once.
    creating: tokio::sync::Mutex<()>,
}

impl Drop for NatsSessionStore {
    fn drop(&mut self) {
        self.task.abort();
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
        let task = tokio::spawn(async move {
            while let Some(msg) = sub.next().await {
                let Some(payload) =
                    opener.open(Kind::Signal, &msg.subject, &msg.payload, MESSAGE_MAX_AGE)
                else {
                    continue;
                };
                match parse_signal(payload) {
                    Some(s) => {
                        let _ = tx.send(s);
                    }
                    None => tracing::warn!("malformed session signal"),
                }
            }
        });
        Ok(Arc::new(Self {
            client,
            seal,
            cluster: cluster.to_owned(),
            ttl: idle_ttl,
            signals,
            touched: Mutex::new(HashMap::new()),
            task,
            events_per_session,
            streams: AtomicBool::new(false),
            creating: tokio::sync::Mutex::new(()),
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
        let cluster = &self.cluster;
        let max_age = u64::try_from(self.ttl.as_nanos()).unwrap_or(u64::MAX);
        for (name, subjects, per_subject) in [
            (records_stream(cluster), format!("mcpr.{cluster}.sess.>"), 1),
            (
                events_stream(cluster),
                format!("mcpr.{cluster}.sev.>"),
                i64::try_from(self.events_per_session.max(1)).unwrap_or(i64::MAX),
            ),
        ] {
            let config = json!({
                "name": name,
                "subjects": [subjects],
                "max_msgs_per_subject": per_subject,
                "max_age": max_age,
                "storage": "file",
                "num_replicas": 1,
                "discard": "old",
            });
            match js::create_stream(&self.client, &config, REQUEST_TIMEOUT).await {
                Ok(()) => {}
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

    /// `e` as the store's error; when it says a stream is missing (NATS lost it), the
    /// streams are created again on the next operation.
    fn failed(&self, what: &str, e: JsError) -> SessionStoreError {
        if matches!(
            e,
            JsError::NoResponders
                | JsError::Api {
                    code: js::STREAM_NOT_FOUND,
                    ..
                }
        ) {
            self.streams.store(false, Ordering::Release);
        }
        error(format!("{what}: {e}"))
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

    /// The last record on `subject`: its sequence, and its payload if it verifies (`None`:
    /// there is a message, but it was not sealed by a replica for this subject, or is stale).
    async fn last(
        &self,
        subject: &str,
    ) -> Result<Option<(u64, Option<Vec<u8>>)>, SessionStoreError> {
        let stream = records_stream(&self.cluster);
        Ok(self
            .get(&stream, &json!({ "last_by_subj": subject }))
            .await?
            .map(|(seq, data)| {
                let opened = self
                    .seal
                    .open(Kind::Record, subject, &data, self.ttl)
                    .map(<[u8]>::to_vec);
                (seq, opened)
            }))
    }

    /// The payload of the last record on `subject`, an error if it does not verify.
    async fn verified(&self, subject: &str) -> Result<Option<Vec<u8>>, SessionStoreError> {
        match self.last(subject).await? {
            None => Ok(None),
            Some((_, Some(data))) => Ok(Some(data)),
            Some((_, None)) => Err(error(
                "a session record in NATS does not verify with the cluster's secret (another client of the NATS account wrote it)",
            )),
        }
    }

    async fn get(
        &self,
        stream: &str,
        request: &Value,
    ) -> Result<Option<(u64, Vec<u8>)>, SessionStoreError> {
        self.ensure_streams().await?;
        js::get(&self.client, stream, request, REQUEST_TIMEOUT)
            .await
            .map_err(|e| self.failed("message get failed", e))
    }

    /// Publish `payload` on `subject` (captured by a stream); with `expected`, only if the
    /// subject's last sequence is that (0: no message). `Ok(None)`: the check failed.
    async fn put(
        &self,
        subject: &str,
        payload: &[u8],
        expected: Option<u64>,
    ) -> Result<Option<u64>, SessionStoreError> {
        self.ensure_streams().await?;
        js::publish(
            &self.client,
            subject,
            self.seal.seal(subject, payload),
            expected,
            REQUEST_TIMEOUT,
        )
        .await
        .map_err(|e| self.failed("publish failed", e))
    }

    async fn purge(&self, stream: &str, filter: &str) -> Result<(), SessionStoreError> {
        self.ensure_streams().await?;
        js::api(
            &self.client,
            &format!("$JS.API.STREAM.PURGE.{stream}"),
            &json!({ "filter": filter }),
            REQUEST_TIMEOUT,
        )
        .await
        .map(drop)
        .map_err(|e| self.failed("purge failed", e))
    }
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

fn signal_json(s: &SessionSignal) -> Value {
    match s {
        SessionSignal::Ended(id) => json!({ "ended": id }),
        SessionSignal::Subscriptions(id) => json!({ "subscriptions": id }),
        SessionSignal::Holder { session, holder } => {
            json!({ "holder": holder, "session": session })
        }
    }
}

fn parse_signal(payload: &[u8]) -> Option<SessionSignal> {
    let v: Value = serde_json::from_slice(payload).ok()?;
    let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    if let Some(id) = text("ended") {
        Some(SessionSignal::Ended(id))
    } else if let Some(id) = text("subscriptions") {
        Some(SessionSignal::Subscriptions(id))
    } else {
        Some(SessionSignal::Holder {
            session: text("session")?,
            holder: text("holder")?,
        })
    }
}

#[async_trait::async_trait]
impl SessionStore for NatsSessionStore {
    async fn load(&self, session: &str) -> Result<Option<SessionState>, SessionStoreError> {
        match self.verified(&self.record(session, "state")).await? {
            Some(data) => Ok(Some(serde_json::from_slice(&data).map_err(error)?)),
            None => Ok(None),
        }
    }

    async fn store(&self, session: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let data = serde_json::to_vec(state).map_err(error)?;
        self.put(&self.record(session, "state"), &data, None)
            .await?;
        Ok(())
    }

    async fn delete(&self, session: &str) -> Result<(), SessionStoreError> {
        let h = crate::token(session, 16);
        self.purge(
            &records_stream(&self.cluster),
            &format!("mcpr.{}.sess.{h}.>", self.cluster),
        )
        .await?;
        self.purge(&events_stream(&self.cluster), &self.log(session))
            .await?;
        self.touched.lock().expect("touched lock").remove(session);
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
        self.put(&self.record(session, "owner"), owner.as_bytes(), None)
            .await?;
        Ok(())
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
            let (seq, mut uris) = match self.last(&subject).await? {
                Some((seq, Some(d))) => (
                    seq,
                    serde_json::from_slice::<Vec<String>>(&d).map_err(error)?,
                ),
                // A record that does not verify is not believed: overwritten.
                Some((seq, None)) => (seq, Vec::new()),
                None => (0, Vec::new()),
            };
            let present = uris.iter().any(|u| u == uri);
            match (subscribed, present) {
                (true, true) | (false, false) => return Ok(uris),
                (true, false) => uris.push(uri.to_owned()),
                (false, true) => uris.retain(|u| u != uri),
            }
            let data = serde_json::to_vec(&uris).map_err(error)?;
            if self.put(&subject, &data, Some(seq)).await?.is_some() {
                self.announce(SessionSignal::Subscriptions(self.key(session)))
                    .await?;
                return Ok(uris);
            }
        }
        Err(error(
            "the session's subscriptions kept changing under this update; try again",
        ))
    }

    async fn append(&self, session: &str, event: &[u8]) -> Result<u64, SessionStoreError> {
        self.put(&self.log(session), event, None)
            .await?
            .ok_or_else(|| error("publish refused"))
    }

    async fn replay(
        &self,
        session: &str,
        after: u64,
    ) -> Result<Vec<(u64, Vec<u8>)>, SessionStoreError> {
        let stream = events_stream(&self.cluster);
        let subject = self.log(session);
        let mut out = Vec::new();
        let mut next = after.saturating_add(1);
        while let Some((seq, data)) = self
            .get(&stream, &json!({ "seq": next, "next_by_subj": subject }))
            .await?
        {
            // Another client of the NATS account may append to the log: only what a replica
            // sealed for this session's log is replayed to its client.
            if let Some(event) = self.seal.open(Kind::Log, &subject, &data, self.ttl) {
                out.push((seq, event.to_vec()));
            }
            next = seq + 1;
        }
        Ok(out)
    }

    async fn announce(&self, signal: SessionSignal) -> Result<(), SessionStoreError> {
        let payload = serde_json::to_vec(&signal_json(&signal)).expect("json");
        let subject = control_subject(&self.cluster);
        let sealed = self.seal.seal(&subject, &payload);
        self.client.publish(subject, sealed).await.map_err(error)?;
        self.client.flush().await.map_err(error)?;
        Ok(())
    }

    fn signals(&self) -> broadcast::Receiver<SessionSignal> {
        self.signals.subscribe()
    }

    async fn touch(&self, session: &str) {
        // Rewrite the records a few times per TTL, not on every request.
        {
            let now = Instant::now();
            let mut touched = self.touched.lock().expect("touched lock");
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
        for record in ["state", "owner", "subs"] {
            let subject = self.record(session, record);
            match self.last(&subject).await {
                // The same content again, sealed anew (the seal's time is the record's age),
                // unless another replica changed it meanwhile. One that does not verify is
                // left to expire.
                Ok(Some((seq, Some(data)))) => {
                    if let Err(e) = self.put(&subject, &data, Some(seq)).await {
                        tracing::debug!(error = %e, "cannot refresh a session record");
                    }
                }
                Ok(None | Some((_, None))) => {}
                Err(e) => tracing::debug!(error = %e, "cannot refresh a session record"),
            }
        }
    }
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
            let wire = serde_json::to_vec(&signal_json(&s)).unwrap();
            assert_eq!(parse_signal(&wire), Some(s));
        }
        assert_eq!(parse_signal(b"{}"), None);
        assert_eq!(parse_signal(b"not json"), None);
        assert_eq!(parse_signal(br#"{"holder": "x"}"#), None);
    }
}
