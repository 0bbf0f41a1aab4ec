//! `[cluster]`: where a deployment's replicas meet, read and validated here as a provider
//! reads its mount (one struct, one `validate`, errors at the file's line and key).

use std::time::Duration;

use mcpr_core::config::{ConfigError, ConfigTable, IntOrString, SettingError};
use serde::Deserialize;
use toml::Spanned;

use crate::MIN_SECRET_BYTES;

/// The `lease_ttl_ms` allowed: shorter and a busy replica loses its leases between
/// renewals; longer and a replica that died leaves its mounts unwatched for as long.
pub const LEASE_TTL_MS: std::ops::RangeInclusive<u64> = 500..=600_000;

/// Where a cluster's replicas meet.
#[derive(Clone)]
pub struct ClusterConfig {
    /// The NATS server, possibly with credentials (`nats://user:pass@host:4222`), or several
    /// separated by commas. Never printed: see [`mcpr_core::redact_url`].
    pub nats_url: String,
    /// The cluster's name: replicas with the same name share events and leases. Letters,
    /// digits, `-` and `_` (it becomes a NATS subject token and a bucket name).
    pub name: String,
    /// This replica's id, unique in the cluster (default: [`default_replica`], the host
    /// name and the process id).
    pub replica: String,
    /// Whether `replica` is the default rather than written in the file: another process
    /// of the same config (a `check-config`) then says what `serve` will be called, not
    /// its own name.
    pub replica_is_default: bool,
    /// How long a watcher's lease lasts without renewal ([`LEASE_TTL_MS`]).
    pub lease_ttl: Duration,
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
            .field("replica_is_default", &self.replica_is_default)
            .field("lease_ttl", &self.lease_ttl)
            .field("secret", &"[redacted]")
            .field("max_watches", &self.max_watches)
            .finish()
    }
}

/// The keys of `[cluster]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterToml {
    nats_url: Option<Spanned<String>>,
    name: Option<Spanned<String>>,
    replica: Option<Spanned<String>>,
    lease_ttl_ms: Option<Spanned<IntOrString>>,
    secret: Option<Spanned<String>>,
}

impl ClusterConfig {
    /// Read and validate `[cluster]`; `max_watches` is `server.max_watches`. Each key is
    /// checked as it is read, in the order of the table's documentation, so the first
    /// problem named is the first key that has one.
    pub fn from_table(table: &ConfigTable<'_>, max_watches: usize) -> Result<Self, ConfigError> {
        let raw: ClusterToml = table.parse()?;
        let file = table.file();
        let at = |e: SettingError| table.setting_error(e);
        let Some(url) = &raw.nats_url else {
            return Err(table.error(
                "nats_url",
                "`[cluster]` needs `nats_url`, like nats://127.0.0.1:4222",
            ));
        };
        let nats_url = file.expand(url, "cluster.nats_url")?;
        check_nats_url(&nats_url).map_err(at)?;
        let Some(name) = &raw.name else {
            return Err(table.error(
                "name",
                "`[cluster]` needs `name`: replicas with the same name form one cluster",
            ));
        };
        let name = file.expand(name, "cluster.name")?;
        check_name(&name).map_err(at)?;
        let replica = match &raw.replica {
            Some(v) => file.expand(v, "cluster.replica")?,
            None => default_replica(std::process::id()),
        };
        check_replica(&replica).map_err(at)?;
        let lease_ttl = match &raw.lease_ttl_ms {
            Some(v) => Duration::from_millis(file.number(v, "cluster.lease_ttl_ms")?),
            None => Duration::from_secs(5),
        };
        check_lease_ttl(lease_ttl).map_err(at)?;
        let Some(secret) = &raw.secret else {
            return Err(table.error(
                "secret",
                "`[cluster]` needs `secret`, shared by every replica, at least 32 bytes, like secret = \"${MCPR_CLUSTER_SECRET}\": it authenticates what the replicas say to each other over NATS",
            ));
        };
        let secret = file.expand(secret, "cluster.secret")?;
        check_secret(&secret).map_err(at)?;
        Ok(Self {
            nats_url,
            name,
            replica,
            replica_is_default: raw.replica.is_none(),
            lease_ttl,
            secret,
            max_watches,
        })
    }

    /// Check every setting: the same checks the file's keys get, for programmatic
    /// construction ([`join`](crate::join) calls it). No message quotes the URL or the
    /// secret.
    pub fn validate(&self) -> Result<(), SettingError> {
        check_nats_url(&self.nats_url)?;
        check_name(&self.name)?;
        check_replica(&self.replica)?;
        check_lease_ttl(self.lease_ttl)?;
        check_secret(&self.secret)
    }
}

fn check_nats_url(url: &str) -> Result<(), SettingError> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(SettingError::new(
            "nats_url",
            "must be a nats:// or tls:// URL, like nats://127.0.0.1:4222",
        ));
    };
    if !["nats", "tls"].contains(&scheme) || rest.is_empty() {
        // The value may hold a password: only its scheme is quoted.
        return Err(SettingError::new(
            "nats_url",
            format!("must be a nats:// or tls:// URL, not {scheme}://"),
        ));
    }
    Ok(())
}

/// It becomes a NATS subject token and a bucket name.
fn check_name(name: &str) -> Result<(), SettingError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(SettingError::new(
            "name",
            format!("{name:?} must be 1 to 64 letters, digits, '-' or '_'"),
        ))
    }
}

fn check_replica(replica: &str) -> Result<(), SettingError> {
    if replica.is_empty() || replica.len() > 256 {
        return Err(SettingError::new("replica", "must be 1 to 256 bytes"));
    }
    Ok(())
}

fn check_lease_ttl(ttl: Duration) -> Result<(), SettingError> {
    let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    SettingError::check_range("lease_ttl_ms", ms, &LEASE_TTL_MS)
}

fn check_secret(secret: &str) -> Result<(), SettingError> {
    if secret.len() < MIN_SECRET_BYTES {
        // Only its length is told: the value is a secret.
        return Err(SettingError::new(
            "secret",
            format!(
                "must be at least {MIN_SECRET_BYTES} bytes, got {} (generate one with `openssl rand -hex 32`)",
                secret.len()
            ),
        ));
    }
    Ok(())
}

/// The replica id of a `[cluster]` that sets none, for the process `pid` (`serve` passes
/// its own; `check-config` a placeholder, not knowing the id `serve` will run as): the host
/// name and the process id, unique per replica on one host and across hosts.
pub fn default_replica(pid: impl std::fmt::Display) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "replica".into());
    format!("{host}-{pid}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> ClusterConfig {
        ClusterConfig {
            nats_url: "nats://u:hunter2@h".into(),
            name: "team".into(),
            replica: "r1".into(),
            replica_is_default: false,
            lease_ttl: Duration::from_secs(5),
            secret: "a-cluster-secret-of-32-bytes-or-more".into(),
            max_watches: 10,
        }
    }

    #[test]
    fn debug_hides_the_password_and_the_secret() {
        let shown = format!("{:?}", cfg());
        assert!(
            !shown.contains("hunter2") && !shown.contains("a-cluster-secret"),
            "{shown}"
        );
        assert!(shown.contains("nats://***@h"), "{shown}");
    }

    #[test]
    fn every_setting_is_checked_in_one_place() {
        let mut c = cfg();
        c.validate().unwrap();
        c.name = "team.data".into();
        let e = c.validate().unwrap_err();
        assert!(e.key == "name" && e.message.contains("team.data"), "{e}");
        c.name = "team-data".into();
        c.lease_ttl = Duration::from_millis(10);
        assert_eq!(c.validate().unwrap_err().key, "lease_ttl_ms");
        // The upper bound the binary used to check alone holds for `join` too.
        c.lease_ttl = Duration::from_secs(601);
        assert_eq!(c.validate().unwrap_err().key, "lease_ttl_ms");
        c.lease_ttl = Duration::from_secs(5);
        c.secret = "short".into();
        let e = c.validate().unwrap_err();
        assert!(
            e.key == "secret" && e.message.contains("at least 32 bytes"),
            "{e}"
        );
        c = cfg();
        c.nats_url = "http://u:hunter2@h".into();
        let e = c.validate().unwrap_err();
        assert!(e.key == "nats_url" && !e.message.contains("hunter2"), "{e}");
        c.nats_url = "nats://h".into();
        c.replica = String::new();
        assert_eq!(c.validate().unwrap_err().key, "replica");
    }
}
