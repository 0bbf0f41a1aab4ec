//! Scale-out over NATS: a [`ChangeBus`](mcpr_core::ChangeBus) that carries change events
//! between replicas ([`NatsBus`]), a per-mount watcher lease in JetStream ([`Lease`]), the
//! cluster's [`Watching`](mcpr_core::Watching) seam ([`ClusterWatching`], joined with
//! [`join`]) that runs each shared mount's watches on its lease holder only, for every
//! replica's subscribers, and legacy HTTP sessions shared by the replicas
//! ([`NatsSessionStore`], a `SessionHub`). The binary wires it when the config has `[cluster]`.

mod bus;
mod js;
mod lease;
mod sessions;
mod watch;

/// The NATS connection a replica joined with ([`Joined::client`]).
pub use async_nats::Client as NatsClient;
pub use bus::NatsBus;
pub use lease::Lease;
pub use sessions::NatsSessionStore;
pub use watch::{ClusterMount, ClusterWatching, Joined, join};

use sha2::{Digest, Sha256};

/// Where a cluster's replicas meet.
#[derive(Clone)]
pub struct ClusterConfig {
    /// The NATS server, possibly with credentials (`nats://user:pass@host:4222`). Never
    /// printed: see [`redact_url`].
    pub nats_url: String,
    /// The cluster's name: replicas with the same name share events and leases. Letters,
    /// digits, `-` and `_` (it becomes a NATS subject token and a bucket name).
    pub name: String,
    /// This replica's id, unique in the cluster.
    pub replica: String,
    /// How long a watcher's lease lasts without renewal.
    pub lease_ttl: std::time::Duration,
}

impl std::fmt::Debug for ClusterConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterConfig")
            .field("nats_url", &redact_url(&self.nats_url))
            .field("name", &self.name)
            .field("replica", &self.replica)
            .field("lease_ttl", &self.lease_ttl)
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
        if self.lease_ttl < std::time::Duration::from_millis(500) {
            return Err(format!(
                "lease_ttl_ms must be at least 500, got {}",
                self.lease_ttl.as_millis()
            ));
        }
        Ok(())
    }
}

/// `url` with any user information replaced by `***`, for logs and errors.
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) => (format!("{s}://"), r),
        None => (String::new(), url),
    };
    let host_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..host_end].rfind('@') {
        Some(at) => format!("{scheme}***@{}", &rest[at + 1..]),
        None => url.to_owned(),
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
        assert_eq!(
            redact_url("nats://user:s3cret@host:4222"),
            "nats://***@host:4222"
        );
        assert_eq!(redact_url("tls://tok@h/x@y"), "tls://***@h/x@y");
        assert_eq!(redact_url("nats://h:4222"), "nats://h:4222");
        let cfg = ClusterConfig {
            nats_url: "nats://u:hunter2@h".into(),
            name: "team".into(),
            replica: "r1".into(),
            lease_ttl: std::time::Duration::from_secs(5),
        };
        assert!(!format!("{cfg:?}").contains("hunter2"));
    }

    #[test]
    fn names_are_checked() {
        let mut cfg = ClusterConfig {
            nats_url: "nats://h".into(),
            name: "team.data".into(),
            replica: "r1".into(),
            lease_ttl: std::time::Duration::from_secs(5),
        };
        assert!(cfg.check().unwrap_err().contains("team.data"));
        cfg.name = "team-data".into();
        cfg.check().unwrap();
        cfg.lease_ttl = std::time::Duration::from_millis(10);
        assert!(cfg.check().unwrap_err().contains("lease_ttl_ms"));
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
