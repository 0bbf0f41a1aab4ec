//! Scale-out over NATS: a [`ChangeBus`](mcpr_core::ChangeBus) that carries change events
//! between replicas ([`NatsBus`]), a per-mount watcher lease in JetStream ([`Lease`]), the
//! cluster's [`Watching`](mcpr_core::Watching) seam ([`ClusterWatching`], joined with
//! [`join`]) that runs each shared mount's watches on its lease holder only, for every
//! replica's subscribers, and legacy HTTP sessions shared by the replicas
//! ([`NatsSessionStore`], a `SessionHub`). The binary wires it when the config has `[cluster]`.
//! Everything the replicas publish or record is sealed with the cluster's secret ([`Seal`]).

mod bus;
mod js;
mod lease;
mod seal;
mod sessions;
mod watch;

/// The NATS connection a replica joined with ([`Joined::client`]).
pub use async_nats::Client as NatsClient;
pub use bus::NatsBus;
pub use lease::Lease;
pub use seal::{CLOCK_SKEW, Kind, MESSAGE_MAX_AGE, MIN_SECRET_BYTES, Seal};
pub use sessions::NatsSessionStore;
pub use watch::{ClusterMount, ClusterWatching, Joined, join};

use sha2::{Digest, Sha256};

/// Where a cluster's replicas meet.
#[derive(Clone)]
pub struct ClusterConfig {
    /// The NATS server, possibly with credentials (`nats://user:pass@host:4222`). Never
    /// printed: see [`mcpr_core::redact_url`].
    pub nats_url: String,
    /// The cluster's name: replicas with the same name share events and leases. Letters,
    /// digits, `-` and `_` (it becomes a NATS subject token and a bucket name).
    pub name: String,
    /// This replica's id, unique in the cluster.
    pub replica: String,
    /// How long a watcher's lease lasts without renewal.
    pub lease_ttl: std::time::Duration,
    /// The secret every replica shares (at least [`MIN_SECRET_BYTES`]): the key of every
    /// message and record. Never printed.
    pub secret: String,
    /// The most interests one replica may hold on a mount's watcher (`server.max_watches`,
    /// the budget its own registry enforces): more from one replica is refused.
    pub max_watches: usize,
}

impl std::fmt::Debug for ClusterConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterConfig")
            .field("nats_url", &mcpr_core::redact_url(&self.nats_url))
            .field("name", &self.name)
            .field("replica", &self.replica)
            .field("lease_ttl", &self.lease_ttl)
            .field("secret", &"[redacted]")
            .field("max_watches", &self.max_watches)
            .finish()
    }
}

impl ClusterConfig {
    /// Check the name (it becomes a subject token and a bucket name).
    pub fn check(&self) -> Result<(), String> {
        let ok = |s: &str| {
            !s.is_empty()
                && s.len() <= 64
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        if !ok(&self.name) {
            return Err(format!(
                "cluster name must be 1 to 64 letters, digits, '-' or '_', got {:?}",
                self.name
            ));
        }
        if self.replica.is_empty() || self.replica.len() > 256 {
            return Err("cluster replica id must be 1 to 256 bytes".into());
        }
        if self.secret.len() < MIN_SECRET_BYTES {
            return Err(format!(
                "the cluster secret must be at least {MIN_SECRET_BYTES} bytes, got {}",
                self.secret.len()
            ));
        }
        if self.lease_ttl < std::time::Duration::from_millis(500) {
            return Err(format!(
                "lease_ttl_ms must be at least 500, got {}",
                self.lease_ttl.as_millis()
            ));
        }
        Ok(())
    }
}

/// `url` without its user information, and the credentials it held: `user:password` or a
/// token. They go to the client as connect options, never inside the URL it is handed,
/// which async-nats prints (password included) in its debug logs of every connection
/// attempt. Several URLs separated by commas are each cleaned; the first credentials found
/// are used.
pub fn split_credentials(url: &str) -> (String, Option<Credentials>) {
    let mut found = None;
    let clean: Vec<String> = mcpr_core::redact::split_urls(url)
        .into_iter()
        .map(|one| {
            let one = one.trim();
            let (scheme, rest) = match one.split_once("://") {
                Some((s, r)) => (format!("{s}://"), r),
                None => (String::new(), one),
            };
            let host_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            match rest[..host_end].rfind('@') {
                Some(at) => {
                    let info = &rest[..at];
                    if found.is_none() {
                        found = Some(match info.split_once(':') {
                            Some((u, p)) => Credentials::UserPassword(decode(u), decode(p)),
                            None => Credentials::Token(decode(info)),
                        });
                    }
                    format!("{scheme}{}", &rest[at + 1..])
                }
                None => one.to_owned(),
            }
        })
        .collect();
    (clean.join(","), found)
}

/// Percent-decoding of URL user information (`p%40ss` is `p@ss`).
fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| char::from(c).to_digit(16);
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2]))
        {
            out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// NATS credentials taken out of a URL ([`split_credentials`]). `Debug` never shows them.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    /// `nats://user:password@host`.
    UserPassword(String, String),
    /// `nats://token@host`.
    Token(String),
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::UserPassword(..) => f.write_str("UserPassword(***)"),
            Self::Token(_) => f.write_str("Token(***)"),
        }
    }
}

/// A subject token for `s`: a hash, because mount names and URIs contain `.`, `*`, `>` and
/// spaces, which NATS subjects cannot. A collision only costs a spurious delivery, which the
/// registry drops (it matches the event's exact URI).
fn token(s: &str, bytes: usize) -> String {
    Sha256::digest(s.as_bytes())[..bytes]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The subject of `event` published for mount `mount` in cluster `cluster`:
/// `mcpr.<cluster>.<mount>.u.<uri>` or `mcpr.<cluster>.<mount>.l`, each name a hash token.
pub fn subject(cluster: &str, mount: &str, event: &mcpr_core::ChangeEvent) -> String {
    match event {
        mcpr_core::ChangeEvent::Updated { uri } => {
            format!("mcpr.{cluster}.{}.u.{}", token(mount, 8), token(uri, 12))
        }
        mcpr_core::ChangeEvent::ListChanged { .. } => {
            format!("mcpr.{cluster}.{}.l", token(mount, 8))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_never_show() {
        let cfg = ClusterConfig {
            nats_url: "nats://u:hunter2@h".into(),
            name: "team".into(),
            replica: "r1".into(),
            lease_ttl: std::time::Duration::from_secs(5),
            secret: "a-cluster-secret-of-32-bytes-or-more".into(),
            max_watches: 10,
        };
        assert!(!format!("{cfg:?}").contains("hunter2"));
        assert!(!format!("{cfg:?}").contains("a-cluster-secret"));
    }

    #[test]
    fn names_are_checked() {
        let mut cfg = ClusterConfig {
            nats_url: "nats://h".into(),
            name: "team.data".into(),
            replica: "r1".into(),
            lease_ttl: std::time::Duration::from_secs(5),
            secret: "a-cluster-secret-of-32-bytes-or-more".into(),
            max_watches: 10,
        };
        assert!(cfg.check().unwrap_err().contains("team.data"));
        cfg.name = "team-data".into();
        cfg.check().unwrap();
        cfg.lease_ttl = std::time::Duration::from_millis(10);
        assert!(cfg.check().unwrap_err().contains("lease_ttl_ms"));
        cfg.lease_ttl = std::time::Duration::from_secs(5);
        cfg.secret = "short".into();
        assert!(cfg.check().unwrap_err().contains("at least 32 bytes"));
    }

    #[test]
    fn credentials_leave_the_url_handed_to_the_client() {
        let (url, c) = split_credentials("nats://mcpr:p%40ss@h:4222");
        assert_eq!(url, "nats://h:4222");
        assert_eq!(
            c,
            Some(Credentials::UserPassword("mcpr".into(), "p@ss".into()))
        );
        assert!(!format!("{c:?}").contains("p@ss"));
        let (url, c) = split_credentials("tls://t0ken@a:1, nats://b:2");
        assert_eq!(url, "tls://a:1,nats://b:2");
        assert_eq!(c, Some(Credentials::Token("t0ken".into())));
        assert_eq!(split_credentials("nats://h").0, "nats://h");
        assert_eq!(split_credentials("nats://h").1, None);
        // A comma inside the password does not start another URL.
        let (url, c) = split_credentials("nats://u:pa,ss@h:1,nats://b:2");
        assert_eq!(url, "nats://h:1,nats://b:2");
        assert_eq!(
            c,
            Some(Credentials::UserPassword("u".into(), "pa,ss".into()))
        );
    }

    #[test]
    fn subjects_are_valid_tokens_per_mount_and_uri() {
        let a = subject(
            "c",
            "file:///srv/a b/",
            &mcpr_core::ChangeEvent::Updated {
                uri: "file:///srv/a b/x.*>".into(),
            },
        );
        assert!(a.starts_with("mcpr.c."));
        assert!(!a.contains(' ') && !a.contains('*') && !a.contains('>'));
        assert_eq!(a.split('.').count(), 5);
        let l = subject(
            "c",
            "file:///srv/a b/",
            &mcpr_core::ChangeEvent::ListChanged {
                mount: "file:///srv/a b/".into(),
            },
        );
        assert_eq!(&a[..a.len() - 27], &l[..l.len() - 2], "{a} {l}");
    }
}
