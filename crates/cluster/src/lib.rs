//! Scale-out over NATS: a [`ChangeBus`](mcpr_core::ChangeBus) that carries change events
//! between replicas ([`NatsBus`]), a per-mount watcher lease in JetStream ([`Lease`]), the
//! cluster's [`Watching`](mcpr_core::Watching) seam ([`ClusterWatching`], joined with
//! [`join`]) that runs each shared mount's watches on its lease holder only, for every
//! replica's subscribers, and legacy HTTP sessions shared by the replicas
//! ([`NatsSessionStore`], a `SessionHub`). The binary wires it when the config has `[cluster]`,
//! which this crate reads and validates ([`ClusterConfig::from_table`]). Everything the
//! replicas publish or record is sealed with the cluster's secret ([`Seal`]).

mod bus;
mod config;
mod js;
mod lease;
mod seal;
mod sessions;
mod watch;

/// The NATS connection a replica joined with ([`Joined::client`]).
pub use async_nats::Client as NatsClient;
pub use bus::NatsBus;
pub use config::{ClusterConfig, LEASE_TTL_MS, default_replica};
pub use lease::{Allowed, Lease};
pub use seal::{CLOCK_SKEW, Kind, MESSAGE_MAX_AGE, MIN_SECRET_BYTES, Seal};
pub use sessions::NatsSessionStore;
pub use watch::{ClusterMount, ClusterWatching, Joined, join};

use sha2::{Digest, Sha256};

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
            // The user information as the one redaction finds it, so that what is taken out
            // here is what is masked when shown (a `/` in a password included).
            match mcpr_core::redact::userinfo_span(one) {
                Some(span) => {
                    let info = &one[span.start..span.end - 1];
                    if found.is_none() {
                        found = Some(match info.split_once(':') {
                            Some((u, p)) => Credentials::UserPassword(decode(u), decode(p)),
                            None => Credentials::Token(decode(info)),
                        });
                    }
                    format!("{}{}", &one[..span.start], &one[span.end..])
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
    hex(&Sha256::digest(s.as_bytes())[..bytes])
}

/// `bytes` as lowercase hex: how hashes and ids appear in subjects and records.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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
    fn a_base64_password_with_a_slash_leaves_the_url_whole() {
        // A URL parser would end the authority at the `/` and keep `app:a` as the host; the
        // password goes to the client as an option, and nothing of it stays in the URL.
        let (url, c) = split_credentials("nats://app:a/b+c=@127.0.0.1:4222");
        assert_eq!(url, "nats://127.0.0.1:4222");
        assert_eq!(
            c,
            Some(Credentials::UserPassword("app".into(), "a/b+c=".into()))
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
