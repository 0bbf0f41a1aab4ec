//! The cluster seam of legacy HTTP sessions: what replicas sharing sessions keep in common
//! beyond rmcp's [`SessionStore`] (the stored handshake). A [`SessionHub`] also holds each
//! session's owner (a hash of the identity that created it), its subscriptions, and a bounded
//! log of its notifications, and carries [`SessionSignal`]s between replicas.
//!
//! The replica holding a session's GET stream (its "holder") is the one that watches the
//! recorded subscriptions and appends the notices to the log; the stream it serves reads
//! the log, so a client resuming with `Last-Event-ID` on another replica is replayed what it
//! missed, and that replica becomes the holder. `mcpr-cluster` implements this over NATS.

use tokio::sync::broadcast;

pub use rmcp::transport::streamable_http_server::session::{SessionStore, SessionStoreError};

/// What one replica tells the others about a session, named by its key
/// ([`SessionHub::key`]), never its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionSignal {
    /// The session was ended (`DELETE`): drop the local copy and close its streams.
    Ended(String),
    /// The session's recorded subscriptions changed: its holder re-reads them.
    Subscriptions(String),
    /// `holder` (a replica's stream token) now serves the session's notification stream;
    /// any other holder stops.
    Holder {
        /// The session's key.
        session: String,
        /// The new holder's token.
        holder: String,
    },
}

/// A logged notification's place: `seq` orders the events of one log, and `epoch` names the
/// log itself, which changes when the log is lost and begun again (its sequence numbers
/// then begin again too), so that an id from an earlier log is never read as a place in
/// the current one. Its SSE event id is `{epoch:x}-{seq}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventId {
    /// Which log.
    pub epoch: u64,
    /// Where in it (never 0).
    pub seq: u64,
}

impl EventId {
    /// The id of `{epoch:x}-{seq}`, as [`EventId`]'s `Display` writes it; `None` for
    /// anything else.
    pub fn parse(s: &str) -> Option<Self> {
        let (epoch, seq) = s.split_once('-')?;
        let hex = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_hexdigit());
        let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
        if !hex(epoch) || !digits(seq) {
            return None;
        }
        Some(Self {
            epoch: u64::from_str_radix(epoch, 16).ok()?,
            seq: seq.parse().ok()?,
        })
    }
}

impl std::fmt::Display for EventId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:x}-{}", self.epoch, self.seq)
    }
}

/// What a resumption replays.
#[derive(Debug)]
pub struct Replay {
    /// The logged events after the client's last, oldest first.
    pub events: Vec<(EventId, Vec<u8>)>,
    /// `false` when notices logged after the client's last event may be gone: its log was
    /// lost and begun again since (its id names an earlier log: everything the current log
    /// holds of the session is replayed), or events after it were removed (a purge, or age).
    /// The stream then tells the client that each resource it subscribes to may have
    /// changed.
    pub complete: bool,
}

/// See the module docs. Every method is scoped to one session id: nothing one session
/// records or logs is visible through another id.
#[async_trait::async_trait]
pub trait SessionHub: SessionStore {
    /// How signals name `session`: a hash, so that ids, which let a client use a session,
    /// never travel between replicas.
    fn key(&self, session: &str) -> String;
    /// The owner record of `identity` (the text of an [`Identity`](crate::Identity)): a
    /// hash keyed with the cluster's secret, so the store holds nothing an identity can be
    /// checked against without it.
    fn owner_of(&self, identity: &str) -> String;
    /// Record the owner of `session` ([`SessionHub::owner_of`] its creator, never a token).
    async fn set_owner(&self, session: &str, owner: &str) -> Result<(), SessionStoreError>;
    /// The recorded owner of `session`, if any.
    async fn owner(&self, session: &str) -> Result<Option<String>, SessionStoreError>;
    /// The URIs `session` is subscribed to.
    async fn subscriptions(&self, session: &str) -> Result<Vec<String>, SessionStoreError>;
    /// Add (`subscribed`) or remove `uri` from the session's subscriptions and tell the
    /// holder; returns the set afterwards.
    async fn set_subscription(
        &self,
        session: &str,
        uri: &str,
        subscribed: bool,
    ) -> Result<Vec<String>, SessionStoreError>;
    /// Append a notification (a JSON-RPC message as JSON) to the session's log; its event
    /// id, after every earlier one of the session in the same log.
    async fn append(&self, session: &str, event: &[u8]) -> Result<EventId, SessionStoreError>;
    /// The logged events of `session` after event id `after`, oldest first, and whether
    /// they are all that was logged after it (see [`Replay`]).
    async fn replay(&self, session: &str, after: EventId) -> Result<Replay, SessionStoreError>;
    /// Tell every replica (this one included) `signal`.
    async fn announce(&self, signal: SessionSignal) -> Result<(), SessionStoreError>;
    /// Signals from every replica (this one included).
    fn signals(&self) -> broadcast::Receiver<SessionSignal>;
    /// The session is in use: keep its records from expiring as idle (cheap to call often).
    async fn touch(&self, session: &str);
}

/// The owner record of an identity without a hub: a hash, kept in this process only (a hub
/// keys its own, [`SessionHub::owner_of`]).
pub(crate) fn owner_hash(identity: &crate::Identity) -> String {
    use sha2::{Digest as _, Sha256};
    Sha256::digest(identity.as_str().as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A hub records the subscriptions of the sessions it shares: the service's view of it.
#[async_trait::async_trait]
impl<T: SessionHub + ?Sized> crate::service::SubscriptionRecord for T {
    async fn subscriptions(&self, session: &str) -> Result<Vec<String>, SessionStoreError> {
        SessionHub::subscriptions(self, session).await
    }

    async fn set_subscription(
        &self,
        session: &str,
        uri: &str,
        subscribed: bool,
    ) -> Result<Vec<String>, SessionStoreError> {
        SessionHub::set_subscription(self, session, uri, subscribed).await
    }
}

impl std::fmt::Debug for dyn SessionHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<SessionHub>")
    }
}

#[cfg(test)]
mod tests {
    use super::EventId;

    #[test]
    fn event_ids_read_back_and_nothing_else_reads() {
        let id = EventId {
            epoch: 0x18f2_a3b4_c5d6_e7f8,
            seq: 42,
        };
        assert_eq!(id.to_string(), "18f2a3b4c5d6e7f8-42");
        assert_eq!(EventId::parse(&id.to_string()), Some(id));
        assert_eq!(EventId::parse("0-1"), Some(EventId { epoch: 0, seq: 1 }));
        // rmcp's own ids (a standalone stream's `n`, a request stream's `n/m`), and garbage.
        for bad in [
            "42", "3/1", "-1", "a-", "-", "g-1", "a-1x", "a-+1", "a--1", "",
        ] {
            assert_eq!(EventId::parse(bad), None, "{bad}");
        }
    }
}
