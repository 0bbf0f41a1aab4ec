//! Authentication of everything the replicas say to each other and record in NATS: every
//! message and every JetStream record is sealed with an HMAC-SHA256 tag under a key derived
//! from the cluster's secret (`[cluster] secret`), bound to its kind and to the subject it
//! travels on, stamped with the time it was written and with its sender (a random id per
//! process) and that sender's sequence number. What does not verify (another client of the
//! NATS account, a record copied to another subject, a captured message replayed after its
//! time, or while fresh to a replica that already had it) is dropped and counted per kind
//! ([`Seal::rejected`], `mcp_cluster_rejected_total`).
//!
//! The envelope: one format byte ([`FORMAT`]), the kind, the write time (milliseconds since
//! the Unix epoch, 8 bytes big-endian), the sender (8 bytes), its sequence number (8 bytes
//! big-endian), the 32-byte tag, then the payload. The tag covers all of them and the
//! subject (length-prefixed), under a key whose derivation names the format: the format is
//! the protocol's version, carried by every message and record.
//!
//! Replicas of two formats never work together (their rules differ: leases, heartbeats,
//! re-announcements). A release that changes the protocol bumps [`FORMAT`] and still
//! authenticates the heartbeats and records of the format before it ([`PREVIOUS`]):
//! that is how it knows a replica of the previous release runs on the cluster
//! ([`Seal::previous_alive`], [`Seal::previous_holder`]; a session record of that release
//! is a session unknown here, [`Seal::previous_record`]), and it then stands aside (see
//! `watch.rs`) until none has been heard for one and a half TTLs. Everything else of
//! another format is refused and counted: an older format with a warning (format 1 had no
//! kind, sender or sequence: its messages cannot be told from replays), a newer one with a
//! warning naming it, since its replica is the one that stands aside.
//!
//! Messages on core NATS ([`Seal::receive`]) are accepted at most [`MESSAGE_MAX_AGE`] after
//! they were written, the clock skew counted inside that window, and at most once per
//! receiving process: each receiver keeps, per sender and kind, the highest sequence it
//! accepted and which of the [`REPLAY_WINDOW`] before it it saw, and drops what it saw or
//! what is older than that window. A sender's entry is forgotten once everything it covers
//! is too old to be accepted anyway, so memory stays bounded by the senders heard from in the
//! last [`MESSAGE_MAX_AGE`]. Records in JetStream ([`Seal::open_record`]) are read many
//! times by design; their own rules (lease compare-and-sets, session record versions) stop
//! an old copy written again.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, KeyInit, Mac};
use mcpr_core::sync::lock;
use sha2::{Digest as _, Sha256};

/// The shortest secret accepted, in bytes: as many as the key it becomes.
pub const MIN_SECRET_BYTES: usize = 32;

/// How far another replica's clock may run ahead of or behind this one's.
pub const CLOCK_SKEW: Duration = Duration::from_secs(10);

/// The longest a message on core NATS (events, interests, heartbeats, signals) is accepted
/// after it was written, [`CLOCK_SKEW`] included: such messages are delivered at once or not
/// at all, so anything older is a replay. A receiver accepts one written up to this minus
/// the skew ago by its own clock, or up to the skew ahead of it, so a sender whose clock is
/// within the skew sees its messages refused at most this long after it wrote them.
pub const MESSAGE_MAX_AGE: Duration = Duration::from_secs(30);

/// How many sequence numbers before the highest one a receiver accepted from a sender (per
/// kind) it still tells apart: a message that far behind arrives too late to be accepted.
/// Messages of one sender on different subjects reach a receiver in different tasks and may
/// overtake each other; this is how far.
pub(crate) const REPLAY_WINDOW: u64 = 8192;

/// The format this build seals with and the only one it opens: the protocol's version. 3
/// since replicas let go of leases and survive partitions by rules a replica of format 2
/// does not follow.
pub(crate) const FORMAT: u8 = 3;
/// The format of the release before, whose heartbeats and lease records this build
/// authenticates only to know such a replica runs (see the module docs).
pub(crate) const PREVIOUS: u8 = 2;
const TAG_LEN: usize = 32;
const TAG_AT: usize = 1 + 1 + 8 + 8 + 8;
const HEADER_LEN: usize = TAG_AT + TAG_LEN;
/// The most (sender, kind) pairs remembered; see [`Seen`].
const MAX_SENDERS: usize = 4096;

/// A JetStream stream of the cluster, by role: the `stream` label of
/// `mcp_cluster_streams_recreated_total` (never the stream's name, which holds the
/// cluster's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stream {
    /// `MCPR_<cluster>_LEASES`: watcher leases and clock records.
    Leases = 0,
    /// `MCPR_<cluster>_SESSIONS`: legacy sessions' records.
    Sessions = 1,
    /// `MCPR_<cluster>_SESSION_EVENTS`: legacy sessions' notification logs.
    SessionEvents = 2,
}

/// The labels of [`Stream`], in its order.
const STREAMS: [&str; 3] = ["leases", "sessions", "session_events"];

/// What a rejected message was, for the metric's `kind` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A change event of a shared mount.
    Event,
    /// A replica's interests (`want`).
    Want,
    /// A watcher's call for every replica's interests (`sync`).
    Sync,
    /// A replica's heartbeat.
    Alive,
    /// A watcher's answer to a `want` request.
    Answer,
    /// A watcher lease record, or its holder's notice of a renewal.
    Lease,
    /// A session signal (ended, subscriptions, holder).
    Signal,
    /// A legacy session's record (handshake, owner, subscriptions).
    Record,
    /// An entry of a legacy session's notification log.
    Log,
}

const KINDS: [(Kind, &str); 9] = [
    (Kind::Event, "event"),
    (Kind::Want, "want"),
    (Kind::Sync, "sync"),
    (Kind::Alive, "alive"),
    (Kind::Answer, "answer"),
    (Kind::Lease, "lease"),
    (Kind::Signal, "signal"),
    (Kind::Record, "record"),
    (Kind::Log, "log"),
];

fn index(kind: Kind) -> usize {
    KINDS.iter().position(|(k, _)| *k == kind).unwrap_or(0)
}

/// Why a sealed message was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    /// Sealed in another format (an older release).
    Format(u8),
    /// Not sealed with this cluster's key for this subject and kind.
    Forged,
    /// Written too long ago, or too far in the future.
    Stale,
    /// Accepted once already, or older than what this receiver tells apart.
    Replayed,
}

/// The cluster's keys, this process's sender id and sequences, what it accepted, and the
/// count of what failed to verify; also the count of JetStream streams this replica found
/// missing and created again (the one place every part of a replica shares). See the module
/// docs.
pub struct Seal {
    messages: [u8; 32],
    /// The key of [`PREVIOUS`], to authenticate that release's heartbeats and lease records.
    previous: [u8; 32],
    owners: [u8; 32],
    /// The key of [`Seal::change_token`].
    tokens: [u8; 32],
    sender: [u8; 8],
    sequences: [AtomicU64; KINDS.len()],
    seen: Mutex<HashMap<([u8; 8], Kind), Seen>>,
    rejected: [AtomicU64; KINDS.len()],
    /// Streams found missing and created again, per [`Stream`].
    recreated: [AtomicU64; STREAMS.len()],
    /// Legacy session records written back after NATS lost them.
    restored: AtomicU64,
    /// When an old format was last warned of (ms since the epoch), so a replica of an older
    /// release is named once a minute, not once per message.
    warned: AtomicU64,
    /// Replicas of the previous release heard from (an authentic heartbeat or lease record),
    /// and when (ms since the epoch).
    older: Mutex<HashMap<String, u64>>,
    /// Why this replica stands aside from the cluster, when it does: the session store
    /// refuses legacy sessions with it.
    aside: Mutex<Option<String>>,
}

impl std::fmt::Debug for Seal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Seal").finish_non_exhaustive()
    }
}

/// The first `bytes` of `s`'s HMAC under `key`, as hex: a value others may read but from
/// which `s` cannot be guessed and checked without the key.
fn keyed(key: &[u8; 32], s: &str, bytes: usize) -> String {
    let mut m = hmac(key);
    m.update(s.as_bytes());
    crate::hex(&m.finalize().into_bytes()[..bytes])
}

fn hmac(key: &[u8]) -> Hmac<Sha256> {
    <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC accepts keys of any length")
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A sender id unlikely to be any other process's: it only has to be unique (a sender that
/// shared it would have its messages taken for replays), not secret, so the process's
/// randomly keyed hasher, its id and the time are enough.
fn sender_id() -> [u8; 8] {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    static COUNT: AtomicU64 = AtomicU64::new(0);
    h.write_u64(COUNT.fetch_add(1, Ordering::Relaxed));
    let d = Sha256::digest(h.finish().to_be_bytes());
    d[..8].try_into().expect("8 bytes")
}

/// What a receiver accepted from one sender of one kind: the highest sequence, which of the
/// [`REPLAY_WINDOW`] before it (a ring indexed by sequence), and when it last accepted one.
struct Seen {
    top: u64,
    bits: Vec<u64>,
    heard_ms: u64,
}

impl Seen {
    fn new() -> Self {
        Self {
            top: 0,
            bits: vec![0; usize::try_from(REPLAY_WINDOW / 64).unwrap_or(128)],
            heard_ms: 0,
        }
    }

    fn slot(seq: u64) -> (usize, u64) {
        let i = seq % REPLAY_WINDOW;
        (usize::try_from(i / 64).unwrap_or(0), 1 << (i % 64))
    }

    /// Whether `seq` is new; if so it is marked seen.
    fn accept(&mut self, seq: u64) -> bool {
        if seq > self.top {
            // Slots of the sequences skipped are cleared: they are new when they come.
            if seq - self.top >= REPLAY_WINDOW {
                self.bits.fill(0);
            } else {
                for s in self.top + 1..=seq {
                    let (w, b) = Self::slot(s);
                    self.bits[w] &= !b;
                }
            }
            self.top = seq;
        } else if self.top - seq >= REPLAY_WINDOW {
            return false;
        }
        let (w, b) = Self::slot(seq);
        if self.bits[w] & b != 0 {
            return false;
        }
        self.bits[w] |= b;
        true
    }
}

impl Seal {
    /// The keys of a cluster whose secret is `secret` (at least [`MIN_SECRET_BYTES`]).
    pub fn new(secret: &[u8]) -> Result<Self, String> {
        if secret.len() < MIN_SECRET_BYTES {
            return Err(format!(
                "the cluster secret must be at least {MIN_SECRET_BYTES} bytes, got {}",
                secret.len()
            ));
        }
        // One key per use, so a tag of one kind can never stand for the other. The label
        // names the format: a tag of format 1 never verifies as one of this.
        let derive = |label: &[u8]| -> [u8; 32] {
            let mut m = hmac(secret);
            m.update(label);
            m.finalize().into_bytes().into()
        };
        Ok(Self {
            messages: derive(b"mcp-resources cluster messages v3"),
            previous: derive(b"mcp-resources cluster messages v2"),
            owners: derive(b"mcp-resources session owners v1"),
            tokens: derive(b"mcp-resources change tokens v1"),
            sender: sender_id(),
            sequences: Default::default(),
            seen: Mutex::new(HashMap::new()),
            rejected: Default::default(),
            recreated: Default::default(),
            restored: AtomicU64::new(0),
            warned: AtomicU64::new(0),
            older: Mutex::new(HashMap::new()),
            aside: Mutex::new(None),
        })
    }

    /// The tag of a message of `format` under `key` (format 2 and 3 differ only in the key
    /// and the format byte).
    fn tag(
        key: &[u8; 32],
        format: u8,
        kind: Kind,
        subject: &str,
        head: &[u8],
        payload: &[u8],
    ) -> Hmac<Sha256> {
        let mut m = hmac(key);
        m.update(&[format, u8::try_from(index(kind)).unwrap_or(0)]);
        m.update(
            &u32::try_from(subject.len())
                .unwrap_or(u32::MAX)
                .to_be_bytes(),
        );
        m.update(subject.as_bytes());
        m.update(head);
        m.update(payload);
        m
    }

    /// `payload` of `kind` sealed for `subject`, stamped now, with this process's next
    /// sequence number of that kind.
    pub fn seal(&self, kind: Kind, subject: &str, payload: &[u8]) -> bytes::Bytes {
        let seq = self.sequences[index(kind)].fetch_add(1, Ordering::Relaxed) + 1;
        self.seal_as(kind, subject, payload, now_ms(), seq)
    }

    fn seal_as(
        &self,
        kind: Kind,
        subject: &str,
        payload: &[u8],
        stamp: u64,
        seq: u64,
    ) -> bytes::Bytes {
        let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
        out.push(FORMAT);
        out.push(u8::try_from(index(kind)).unwrap_or(0));
        out.extend_from_slice(&stamp.to_be_bytes());
        out.extend_from_slice(&self.sender);
        out.extend_from_slice(&seq.to_be_bytes());
        let tag = Self::tag(
            &self.messages,
            FORMAT,
            kind,
            subject,
            &out[2..TAG_AT],
            payload,
        )
        .finalize()
        .into_bytes();
        out.extend_from_slice(&tag);
        out.extend_from_slice(payload);
        out.into()
    }

    /// The payload of the JetStream record `sealed`, if it was sealed as `kind` with this
    /// cluster's key for `subject` and written at most `max_age` ago (give or take
    /// [`CLOCK_SKEW`]); otherwise `None`, counted as a rejected `kind`. Records are read
    /// again and again, so nothing here stops one from being read twice.
    pub fn open_record<'a>(
        &self,
        kind: Kind,
        subject: &str,
        sealed: &'a [u8],
        max_age: Duration,
    ) -> Option<&'a [u8]> {
        let checked = self
            .verify(kind, subject, sealed)
            .and_then(|(stamp, _, _)| {
                let now = now_ms();
                let skew = ms(CLOCK_SKEW);
                let fresh = stamp <= now.saturating_add(skew)
                    && now.saturating_sub(stamp) <= ms(max_age).saturating_add(skew);
                if fresh { Ok(()) } else { Err(Refused::Stale) }
            });
        self.outcome(kind, checked, sealed)
    }

    /// The payload of the core NATS message `sealed`, if it was sealed as `kind` with this
    /// cluster's key for `subject`, within [`MESSAGE_MAX_AGE`], and this process has not
    /// accepted it before (see the module docs); otherwise `None`, counted as a rejected
    /// `kind`.
    pub fn receive<'a>(&self, kind: Kind, subject: &str, sealed: &'a [u8]) -> Option<&'a [u8]> {
        let checked = self
            .verify(kind, subject, sealed)
            .and_then(|(stamp, sender, seq)| {
                let now = now_ms();
                let skew = ms(CLOCK_SKEW);
                let age = ms(MESSAGE_MAX_AGE).saturating_sub(skew);
                if stamp > now.saturating_add(skew) || now.saturating_sub(stamp) > age {
                    return Err(Refused::Stale);
                }
                if self.first_time(kind, sender, seq, now) {
                    Ok(())
                } else {
                    Err(Refused::Replayed)
                }
            });
        self.outcome(kind, checked, sealed)
    }

    /// Whether `seq` of `sender` and `kind` is new here; if so it is remembered.
    fn first_time(&self, kind: Kind, sender: [u8; 8], seq: u64, now: u64) -> bool {
        let mut seen = lock(&self.seen);
        if !seen.contains_key(&(sender, kind)) && seen.len() >= MAX_SENDERS {
            // Everything a sender sent before its last acceptance plus the window is
            // refused as stale anyway: its entry protects nothing more.
            let expiry = ms(MESSAGE_MAX_AGE) + 1000;
            seen.retain(|_, s| now.saturating_sub(s.heard_ms) <= expiry);
            if seen.len() >= MAX_SENDERS
                && let Some(oldest) = seen.iter().min_by_key(|(_, s)| s.heard_ms).map(|(k, _)| *k)
            {
                seen.remove(&oldest);
            }
        }
        let entry = seen.entry((sender, kind)).or_insert_with(Seen::new);
        let new = entry.accept(seq);
        if new {
            entry.heard_ms = now;
        }
        new
    }

    /// The stamp, sender and sequence of `sealed` if its tag verifies for `kind` and
    /// `subject`.
    fn verify(
        &self,
        kind: Kind,
        subject: &str,
        sealed: &[u8],
    ) -> Result<(u64, [u8; 8], u64), Refused> {
        match sealed.first() {
            Some(&FORMAT) => Self::check(&self.messages, FORMAT, kind, subject, sealed),
            // Format 1 began with its version byte and held a time and a tag.
            Some(&v) if v < FORMAT && sealed.len() >= 1 + 8 + TAG_LEN => Err(Refused::Format(v)),
            // A newer release's, whose header is at least as long as this one's.
            Some(&v) if v > FORMAT && sealed.len() >= HEADER_LEN => Err(Refused::Format(v)),
            _ => Err(Refused::Forged),
        }
    }

    /// The stamp, sender and sequence of `sealed` if it is of `format` and its tag verifies
    /// under `key` for `kind` and `subject`.
    fn check(
        key: &[u8; 32],
        format: u8,
        kind: Kind,
        subject: &str,
        sealed: &[u8],
    ) -> Result<(u64, [u8; 8], u64), Refused> {
        if sealed.first() != Some(&format)
            || sealed.len() < HEADER_LEN
            || usize::from(sealed[1]) != index(kind)
        {
            return Err(Refused::Forged);
        }
        let payload = &sealed[HEADER_LEN..];
        // verify_slice compares in constant time.
        Self::tag(key, format, kind, subject, &sealed[2..TAG_AT], payload)
            .verify_slice(&sealed[TAG_AT..HEADER_LEN])
            .map_err(|_| Refused::Forged)?;
        let u64_at =
            |at: usize| u64::from_be_bytes(sealed[at..at + 8].try_into().unwrap_or([0; 8]));
        let sender = sealed[10..18].try_into().unwrap_or([0; 8]);
        Ok((u64_at(2), sender, u64_at(18)))
    }

    /// The replica whose heartbeat `sealed` is, if it is an authentic one of the previous
    /// release ([`PREVIOUS`]) for `subject`, fresh and not heard before (the rules of
    /// [`Seal::receive`]); it is remembered ([`Seal::previous_replicas`]).
    pub(crate) fn previous_alive(&self, subject: &str, sealed: &[u8]) -> Option<String> {
        let (stamp, sender, seq) =
            Self::check(&self.previous, PREVIOUS, Kind::Alive, subject, sealed).ok()?;
        let now = now_ms();
        let skew = ms(CLOCK_SKEW);
        let age = ms(MESSAGE_MAX_AGE).saturating_sub(skew);
        if stamp > now.saturating_add(skew) || now.saturating_sub(stamp) > age {
            return None;
        }
        if !self.first_time(Kind::Alive, sender, seq, now) {
            return None;
        }
        self.heard_previous(&sealed[HEADER_LEN..], now)
    }

    /// The replica whose lease record `sealed` is, if it is an authentic one of the previous
    /// release for `subject` written at most `max_age` ago (the rules of
    /// [`Seal::open_record`]); it is remembered ([`Seal::previous_replicas`]).
    pub(crate) fn previous_holder(
        &self,
        subject: &str,
        sealed: &[u8],
        max_age: Duration,
    ) -> Option<String> {
        let (stamp, holder) = self.previous_record(Kind::Lease, subject, sealed, max_age)?;
        // Heard when it wrote the record, not now: the record outlives its writer by up to
        // a TTL, and a replica gone for a TTL must not be taken for a running one.
        self.heard_previous(holder, stamp.min(now_ms()))
    }

    /// The write time and payload of `sealed` if it is an authentic record of `kind` of the
    /// previous release for `subject`, written at most `max_age` ago (the rules of
    /// [`Seal::open_record`]): such a record is that release's, not a forgery.
    pub(crate) fn previous_record<'a>(
        &self,
        kind: Kind,
        subject: &str,
        sealed: &'a [u8],
        max_age: Duration,
    ) -> Option<(u64, &'a [u8])> {
        let (stamp, _, _) = Self::check(&self.previous, PREVIOUS, kind, subject, sealed).ok()?;
        let now = now_ms();
        let skew = ms(CLOCK_SKEW);
        if stamp > now.saturating_add(skew)
            || now.saturating_sub(stamp) > ms(max_age).saturating_add(skew)
        {
            return None;
        }
        Some((stamp, &sealed[HEADER_LEN..]))
    }

    fn heard_previous(&self, replica: &[u8], at_ms: u64) -> Option<String> {
        let replica = std::str::from_utf8(replica).ok()?.to_owned();
        let mut older = lock(&self.older);
        if !older.contains_key(&replica) && older.len() >= MAX_SENDERS {
            // Bounded like the senders: the one heard longest ago goes.
            if let Some(oldest) = older
                .iter()
                .min_by_key(|(_, t)| **t)
                .map(|(r, _)| r.clone())
            {
                older.remove(&oldest);
            }
        }
        let at = older.entry(replica.clone()).or_insert(at_ms);
        *at = (*at).max(at_ms);
        Some(replica)
    }

    /// The replicas of the previous release heard from within `within`, sorted; the others
    /// are forgotten.
    pub(crate) fn previous_replicas(&self, within: Duration) -> Vec<String> {
        let now = now_ms();
        let mut older = lock(&self.older);
        older.retain(|_, t| now.saturating_sub(*t) <= ms(within));
        let mut names: Vec<String> = older.keys().cloned().collect();
        names.sort();
        names
    }

    /// Record why this replica stands aside from the cluster (`None`: it takes part).
    pub(crate) fn set_aside(&self, why: Option<String>) {
        *lock(&self.aside) = why;
    }

    /// Why this replica stands aside from the cluster, if it does.
    pub(crate) fn aside(&self) -> Option<String> {
        lock(&self.aside).clone()
    }

    fn outcome<'a>(
        &self,
        kind: Kind,
        checked: Result<(), Refused>,
        sealed: &'a [u8],
    ) -> Option<&'a [u8]> {
        match checked {
            Ok(()) => Some(&sealed[HEADER_LEN..]),
            Err(why) => {
                let i = index(kind);
                self.rejected[i].fetch_add(1, Ordering::Relaxed);
                // The previous release's replica is named by the watch, which stands aside
                // for it; any other format is named here.
                if let Refused::Format(v) = why
                    && v != PREVIOUS
                {
                    let now = now_ms();
                    let last = self.warned.load(Ordering::Relaxed);
                    if now.saturating_sub(last) >= 60_000
                        && self
                            .warned
                            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                            .is_ok()
                    {
                        if v < FORMAT {
                            tracing::warn!(
                                kind = KINDS[i].1,
                                format = v,
                                "cluster: refused a message sealed in format {v} by an older release; \
                                 replicas of releases with different formats cannot share a cluster: \
                                 stop the replicas of the older release (docs/cluster.md, Upgrading)"
                            );
                        } else {
                            tracing::warn!(
                                kind = KINDS[i].1,
                                format = v,
                                "cluster: refused a message sealed in format {v} by a newer release \
                                 (this one seals in format {FORMAT}); the newer replica stands aside \
                                 until every replica of this release is stopped (docs/cluster.md, Upgrading)"
                            );
                        }
                    }
                }
                tracing::debug!(
                    kind = KINDS[i].1,
                    reason = ?why,
                    "cluster: dropped a message that does not verify"
                );
                None
            }
        }
    }

    /// The owner record of a session created by `identity`: a keyed hash, so that a store
    /// readable by others holds nothing from which an identity (a subject, an address) can
    /// be guessed and checked.
    pub fn owner(&self, identity: &str) -> String {
        keyed(&self.owners, identity, 32)
    }

    /// A source's change token as it travels between replicas: a keyed hash of it. Replicas
    /// only compare tokens for equality, and the raw one (an ETag, a digest of a row set or
    /// of a small file's state) would let a reader of the NATS account check guesses about a
    /// resource's contents.
    pub(crate) fn change_token(&self, token: &str) -> String {
        keyed(&self.tokens, token, 16)
    }

    /// Count one record of `kind` refused for a reason the caller found (a session record
    /// older than one this replica has seen).
    pub(crate) fn refuse(&self, kind: Kind) {
        self.rejected[index(kind)].fetch_add(1, Ordering::Relaxed);
    }

    /// Count one `stream` found missing (deleted by a client of the NATS account, or lost by
    /// NATS) and created again by this replica.
    pub(crate) fn recreated_stream(&self, stream: Stream) {
        self.recreated[stream as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Streams this replica found missing and created again, by role (every role listed):
    /// `mcp_cluster_streams_recreated_total`.
    pub fn streams_recreated(&self) -> Vec<(String, u64)> {
        STREAMS
            .iter()
            .zip(&self.recreated)
            .map(|(name, n)| ((*name).to_owned(), n.load(Ordering::Relaxed)))
            .collect()
    }

    /// Count `n` legacy session records written back after NATS lost them (a deleted or
    /// purged sessions stream).
    pub(crate) fn restored_records(&self, n: u64) {
        self.restored.fetch_add(n, Ordering::Relaxed);
    }

    /// Legacy session records this replica wrote back after NATS lost them:
    /// `mcp_cluster_session_records_restored_total`.
    pub fn records_restored(&self) -> u64 {
        self.restored.load(Ordering::Relaxed)
    }

    /// This process's sender id as a subject token (16 hex digits): unique to the process,
    /// and no secret (every sealed message carries it).
    pub(crate) fn sender_token(&self) -> String {
        crate::hex(&self.sender)
    }

    /// Messages dropped because they did not verify, per kind (every kind listed).
    pub fn rejected(&self) -> Vec<(String, u64)> {
        KINDS
            .iter()
            .zip(&self.rejected)
            .map(|((_, name), n)| ((*name).to_owned(), n.load(Ordering::Relaxed)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    #[test]
    fn change_tokens_travel_keyed_equal_for_equal_states_only() {
        let a = Seal::new(SECRET).unwrap();
        let b = Seal::new(SECRET).unwrap();
        let other = Seal::new(b"another secret of at least 32 bytes..").unwrap();
        let raw = "etag:\"5d41402abc4b2a76\"";
        let t = a.change_token(raw);
        assert_eq!(
            t,
            b.change_token(raw),
            "replicas of one cluster compare equal"
        );
        assert_ne!(t, a.change_token("etag:\"other\""));
        assert_ne!(t, other.change_token(raw), "keyed by the cluster secret");
        assert!(!t.contains("5d41402abc4b2a76"));
        assert_eq!(t.len(), 32);
    }

    fn counted(seal: &Seal, kind: &str) -> u64 {
        seal.rejected()
            .iter()
            .filter(|(k, _)| k == kind)
            .map(|(_, n)| *n)
            .sum()
    }

    #[test]
    fn a_sealed_record_opens_only_with_its_key_kind_subject_and_time() {
        let seal = Seal::new(SECRET).unwrap();
        let other = Seal::new(b"another secret of thirty-two bytes!").unwrap();
        let m = seal.seal(Kind::Lease, "mcpr.c.lease.x", b"r1");
        let age = Duration::from_secs(5);
        let open = |s: &Seal, kind, subject, m: &[u8], age| {
            s.open_record(kind, subject, m, age).map(<[u8]>::to_vec)
        };
        assert_eq!(
            open(&seal, Kind::Lease, "mcpr.c.lease.x", &m, age),
            Some(b"r1".to_vec())
        );
        // Records are read again and again.
        assert!(open(&seal, Kind::Lease, "mcpr.c.lease.x", &m, age).is_some());
        assert_eq!(open(&other, Kind::Lease, "mcpr.c.lease.x", &m, age), None);
        assert_eq!(open(&seal, Kind::Lease, "mcpr.c.lease.y", &m, age), None);
        assert_eq!(open(&seal, Kind::Record, "mcpr.c.lease.x", &m, age), None);
        let mut flipped = m.to_vec();
        *flipped.last_mut().unwrap() ^= 1;
        assert_eq!(
            open(&seal, Kind::Lease, "mcpr.c.lease.x", &flipped, age),
            None
        );
        assert_eq!(open(&seal, Kind::Lease, "mcpr.c.lease.x", b"r1", age), None);
        // A record written long ago (a captured one written again) is refused.
        let old = seal.seal_as(Kind::Lease, "mcpr.c.lease.x", b"r1", now_ms() - 120_000, 9);
        assert_eq!(open(&seal, Kind::Lease, "mcpr.c.lease.x", &old, age), None);
        assert!(
            open(
                &seal,
                Kind::Lease,
                "mcpr.c.lease.x",
                &old,
                Duration::from_secs(600)
            )
            .is_some()
        );
        // The other key's refusal is counted by its own seal.
        assert_eq!(counted(&seal, "lease"), 4);
        assert_eq!(counted(&seal, "record"), 1);
    }

    #[test]
    fn a_message_is_accepted_once_per_receiver_and_per_sender() {
        let sender = Seal::new(SECRET).unwrap();
        let another = Seal::new(SECRET).unwrap();
        let receiver = Seal::new(SECRET).unwrap();
        let second = Seal::new(SECRET).unwrap();
        let s = "mcpr.c.want.x";
        let m = sender.seal(Kind::Want, s, b"remove");
        assert_eq!(receiver.receive(Kind::Want, s, &m), Some(&b"remove"[..]));
        // Replayed while fresh: refused by the receiver that had it, not by another.
        assert_eq!(receiver.receive(Kind::Want, s, &m), None);
        assert_eq!(second.receive(Kind::Want, s, &m), Some(&b"remove"[..]));
        // Another sender's first message, and one of another kind, are new.
        let n = another.seal(Kind::Want, s, b"add");
        assert!(receiver.receive(Kind::Want, s, &n).is_some());
        let alive = sender.seal(Kind::Alive, "mcpr.c.alive", b"r");
        assert!(
            receiver
                .receive(Kind::Alive, "mcpr.c.alive", &alive)
                .is_some()
        );
        // Messages that overtook each other are both accepted, each once.
        let a = sender.seal(Kind::Want, s, b"a");
        let b = sender.seal(Kind::Want, s, b"b");
        assert!(receiver.receive(Kind::Want, s, &b).is_some());
        assert!(receiver.receive(Kind::Want, s, &a).is_some());
        assert!(receiver.receive(Kind::Want, s, &a).is_none());
        assert!(receiver.receive(Kind::Want, s, &b).is_none());
        // One older than the window a receiver tells apart is refused.
        let late = sender.seal(Kind::Want, s, b"late");
        for _ in 0..REPLAY_WINDOW {
            sender.seal(Kind::Want, s, b"");
        }
        let last = sender.seal(Kind::Want, s, b"last");
        assert!(receiver.receive(Kind::Want, s, &last).is_some());
        assert!(receiver.receive(Kind::Want, s, &late).is_none());
        assert_eq!(counted(&receiver, "want"), 4);
    }

    #[test]
    fn a_message_is_refused_once_its_window_with_the_skew_inside_is_over() {
        let sender = Seal::new(SECRET).unwrap();
        let receiver = Seal::new(SECRET).unwrap();
        let s = "mcpr.c.alive";
        let now = now_ms();
        let window = ms(MESSAGE_MAX_AGE);
        let skew = ms(CLOCK_SKEW);
        let at = |stamp: u64, seq: u64| sender.seal_as(Kind::Alive, s, b"r", stamp, seq);
        // Written by a clock behind ours, up to the window minus the skew ago: accepted.
        assert!(
            receiver
                .receive(Kind::Alive, s, &at(now - (window - skew) + 500, 1))
                .is_some()
        );
        // Older: refused, so no message lives longer than the window, skew included.
        assert!(
            receiver
                .receive(Kind::Alive, s, &at(now - (window - skew) - 500, 2))
                .is_none()
        );
        // A clock ahead by up to the skew: accepted; further ahead: refused.
        assert!(
            receiver
                .receive(Kind::Alive, s, &at(now + skew - 500, 3))
                .is_some()
        );
        assert!(
            receiver
                .receive(Kind::Alive, s, &at(now + skew + 500, 4))
                .is_none()
        );
        assert_eq!(counted(&receiver, "alive"), 2);
    }

    #[test]
    fn a_message_of_the_older_format_is_refused_not_misread() {
        let seal = Seal::new(SECRET).unwrap();
        // Format 1: version, time, a 32-byte tag, the payload.
        let mut old = vec![1u8];
        old.extend_from_slice(&now_ms().to_be_bytes());
        old.extend_from_slice(&[7u8; 32]);
        old.extend_from_slice(br#"{"replica":"r1","remove":[]}"#);
        assert_eq!(seal.receive(Kind::Want, "mcpr.c.want.x", &old), None);
        assert_eq!(
            seal.verify(Kind::Want, "mcpr.c.want.x", &old),
            Err(Refused::Format(1))
        );
        assert_eq!(counted(&seal, "want"), 1);
    }

    /// A message as a replica of format 2 seals it (the release before, kept minimal): its
    /// key's label, the format byte 2, then the same header and tag as format 3.
    fn sealed_by_format_2(kind: Kind, subject: &str, payload: &[u8], stamp: u64) -> Vec<u8> {
        let mut key = hmac(SECRET);
        key.update(b"mcp-resources cluster messages v2");
        let key: [u8; 32] = key.finalize().into_bytes().into();
        let mut out = vec![2u8, u8::try_from(index(kind)).unwrap()];
        out.extend_from_slice(&stamp.to_be_bytes());
        out.extend_from_slice(&[9u8; 8]);
        out.extend_from_slice(&1u64.to_be_bytes());
        let mut m = hmac(&key);
        m.update(&out[..2]);
        m.update(&u32::try_from(subject.len()).unwrap().to_be_bytes());
        m.update(subject.as_bytes());
        m.update(&out[2..]);
        m.update(payload);
        out.extend_from_slice(&m.finalize().into_bytes());
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn the_previous_format_is_refused_yet_its_replicas_are_known() {
        let seal = Seal::new(SECRET).unwrap();
        let alive = "mcpr.c.alive";
        let old = sealed_by_format_2(Kind::Alive, alive, b"old-1", now_ms());
        // Never opened as a message of this format...
        assert_eq!(seal.receive(Kind::Alive, alive, &old), None);
        assert_eq!(
            seal.verify(Kind::Alive, alive, &old),
            Err(Refused::Format(2))
        );
        assert_eq!(counted(&seal, "alive"), 1);
        // ...but its replica is named, once per heartbeat.
        assert_eq!(seal.previous_alive(alive, &old).as_deref(), Some("old-1"));
        assert_eq!(seal.previous_alive(alive, &old), None, "a replay");
        assert_eq!(seal.previous_replicas(Duration::from_secs(5)), ["old-1"]);
        // Only an authentic heartbeat, for its subject, of this cluster, and fresh.
        let other = Seal::new(b"another secret of thirty-two bytes!").unwrap();
        let fresh = sealed_by_format_2(Kind::Alive, alive, b"old-2", now_ms());
        assert_eq!(other.previous_alive(alive, &fresh), None);
        assert_eq!(seal.previous_alive("mcpr.d.alive", &fresh), None);
        let stale = sealed_by_format_2(Kind::Alive, alive, b"old-3", now_ms() - 60_000);
        assert_eq!(seal.previous_alive(alive, &stale), None);
        // A lease record of the previous release names its holder while it lasts.
        let lease = "mcpr.c.lease.x";
        let record = sealed_by_format_2(Kind::Lease, lease, b"old-4", now_ms());
        assert_eq!(
            seal.open_record(Kind::Lease, lease, &record, Duration::from_secs(5)),
            None
        );
        assert_eq!(
            seal.previous_holder(lease, &record, Duration::from_secs(5))
                .as_deref(),
            Some("old-4")
        );
        assert_eq!(
            seal.previous_holder(lease, &old, Duration::from_secs(5)),
            None,
            "a heartbeat is no lease record"
        );
        // A replica heard long enough ago is forgotten.
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(
            seal.previous_replicas(Duration::from_millis(10)),
            Vec::<String>::new()
        );
        // A newer format is refused by its number, not misread.
        let mut newer = seal.seal(Kind::Alive, alive, b"new").to_vec();
        newer[0] = FORMAT + 1;
        assert_eq!(
            seal.verify(Kind::Alive, alive, &newer),
            Err(Refused::Format(FORMAT + 1))
        );
        assert_eq!(seal.previous_alive(alive, &newer), None);
    }

    #[test]
    fn short_secrets_are_refused_and_owners_depend_on_the_key() {
        let e = Seal::new(b"short").unwrap_err();
        assert!(e.contains("at least 32 bytes, got 5"), "{e}");
        let a = Seal::new(SECRET).unwrap();
        let b = Seal::new(b"another secret of thirty-two bytes!").unwrap();
        assert_eq!(a.owner("subject alice"), a.owner("subject alice"));
        assert_ne!(a.owner("subject alice"), b.owner("subject alice"));
        assert_ne!(a.owner("subject alice"), a.owner("subject bob"));
    }
}
