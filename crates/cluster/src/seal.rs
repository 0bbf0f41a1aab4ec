//! Authentication of everything the replicas say to each other and record in NATS: every
//! message and every JetStream record is sealed with an HMAC-SHA256 tag under a key derived
//! from the cluster's secret (`[cluster] secret`), bound to the subject it travels on and
//! stamped with the time it was written. What does not verify (another client of the NATS
//! account, a record copied to another subject, a captured message replayed after its time)
//! is dropped and counted per kind ([`Seal::rejected`], `mcp_cluster_rejected_total`).
//!
//! The envelope: one version byte, the write time (milliseconds since the Unix epoch, 8 bytes
//! big-endian), the 32-byte tag, then the payload. The tag covers the version, the subject
//! (length-prefixed), the time and the payload.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The shortest secret accepted, in bytes: as many as the key it becomes.
pub const MIN_SECRET_BYTES: usize = 32;

/// How far another replica's clock may run ahead of or behind this one's.
pub const CLOCK_SKEW: Duration = Duration::from_secs(30);

/// How old a message on core NATS (events, interests, heartbeats, signals) may be: they are
/// delivered at once or not at all, so anything older is a replay.
pub const MESSAGE_MAX_AGE: Duration = Duration::from_secs(30);

const VERSION: u8 = 1;
const TAG_LEN: usize = 32;
const HEADER_LEN: usize = 1 + 8 + TAG_LEN;

/// What a rejected message was, for the metric's `kind` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// A watcher lease record.
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

/// The cluster's keys and the count of what failed to verify. See the module docs.
pub struct Seal {
    messages: [u8; 32],
    owners: [u8; 32],
    rejected: [AtomicU64; KINDS.len()],
}

impl std::fmt::Debug for Seal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Seal").finish_non_exhaustive()
    }
}

fn hmac(key: &[u8]) -> Hmac<Sha256> {
    <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC accepts keys of any length")
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
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
        // One key per use, so a tag of one kind can never stand for the other.
        let derive = |label: &[u8]| -> [u8; 32] {
            let mut m = hmac(secret);
            m.update(label);
            m.finalize().into_bytes().into()
        };
        Ok(Self {
            messages: derive(b"mcp-resources cluster messages v1"),
            owners: derive(b"mcp-resources session owners v1"),
            rejected: Default::default(),
        })
    }

    fn tag(&self, subject: &str, stamp: u64, payload: &[u8]) -> Hmac<Sha256> {
        let mut m = hmac(&self.messages);
        m.update(&[VERSION]);
        m.update(
            &u32::try_from(subject.len())
                .unwrap_or(u32::MAX)
                .to_be_bytes(),
        );
        m.update(subject.as_bytes());
        m.update(&stamp.to_be_bytes());
        m.update(payload);
        m
    }

    /// `payload` sealed for `subject`, stamped now.
    pub fn seal(&self, subject: &str, payload: &[u8]) -> bytes::Bytes {
        let stamp = now_ms();
        let tag = self.tag(subject, stamp, payload).finalize().into_bytes();
        let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
        out.push(VERSION);
        out.extend_from_slice(&stamp.to_be_bytes());
        out.extend_from_slice(&tag);
        out.extend_from_slice(payload);
        out.into()
    }

    /// The payload of `sealed`, if it was sealed with this cluster's key for `subject` and
    /// written at most `max_age` ago (give or take [`CLOCK_SKEW`]); otherwise `None`, counted
    /// as a rejected `kind`.
    pub fn open<'a>(
        &self,
        kind: Kind,
        subject: &str,
        sealed: &'a [u8],
        max_age: Duration,
    ) -> Option<&'a [u8]> {
        let opened = self.verify(subject, sealed, max_age);
        if opened.is_none() {
            let i = KINDS.iter().position(|(k, _)| *k == kind).unwrap_or(0);
            self.rejected[i].fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                kind = KINDS[i].1,
                "cluster: dropped a message that does not verify"
            );
        }
        opened
    }

    fn verify<'a>(&self, subject: &str, sealed: &'a [u8], max_age: Duration) -> Option<&'a [u8]> {
        if sealed.len() < HEADER_LEN || sealed[0] != VERSION {
            return None;
        }
        let stamp = u64::from_be_bytes(sealed[1..9].try_into().ok()?);
        let payload = &sealed[HEADER_LEN..];
        // verify_slice compares in constant time.
        self.tag(subject, stamp, payload)
            .verify_slice(&sealed[9..HEADER_LEN])
            .ok()?;
        let now = now_ms();
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let skew = ms(CLOCK_SKEW);
        let fresh = stamp <= now.saturating_add(skew)
            && now.saturating_sub(stamp) <= ms(max_age).saturating_add(skew);
        fresh.then_some(payload)
    }

    /// The owner record of a session created by `identity`: a keyed hash, so that a store
    /// readable by others holds nothing from which an identity (a subject, an address) can
    /// be guessed and checked.
    pub fn owner(&self, identity: &str) -> String {
        let mut m = hmac(&self.owners);
        m.update(identity.as_bytes());
        m.finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
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
    fn a_sealed_message_opens_only_with_its_key_subject_and_time() {
        let seal = Seal::new(SECRET).unwrap();
        let other = Seal::new(b"another secret of thirty-two bytes!").unwrap();
        let m = seal.seal("mcpr.c.alive", b"r1");
        let age = Duration::from_secs(5);
        assert_eq!(
            seal.open(Kind::Alive, "mcpr.c.alive", &m, age),
            Some(&b"r1"[..])
        );
        assert_eq!(other.open(Kind::Alive, "mcpr.c.alive", &m, age), None);
        assert_eq!(seal.open(Kind::Alive, "mcpr.c.sync.x", &m, age), None);
        let mut flipped = m.to_vec();
        *flipped.last_mut().unwrap() ^= 1;
        assert_eq!(seal.open(Kind::Alive, "mcpr.c.alive", &flipped, age), None);
        assert_eq!(seal.open(Kind::Alive, "mcpr.c.alive", b"r1", age), None);
        // A message stamped long ago (a captured one replayed) is refused.
        let old = now_ms() - 120_000;
        let tag = seal.tag("mcpr.c.alive", old, b"r1").finalize().into_bytes();
        let mut replayed = vec![VERSION];
        replayed.extend_from_slice(&old.to_be_bytes());
        replayed.extend_from_slice(&tag);
        replayed.extend_from_slice(b"r1");
        assert_eq!(seal.open(Kind::Alive, "mcpr.c.alive", &replayed, age), None);
        assert!(
            seal.open(
                Kind::Alive,
                "mcpr.c.alive",
                &replayed,
                Duration::from_secs(600)
            )
            .is_some()
        );
        let counted: u64 = seal
            .rejected()
            .iter()
            .filter(|(k, _)| k == "alive")
            .map(|(_, n)| *n)
            .sum();
        // The other key's refusal is counted by its own seal.
        assert_eq!(counted, 4);
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
