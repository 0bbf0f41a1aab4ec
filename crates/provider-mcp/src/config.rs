//! Settings of one `mcp` mount (a gateway to another MCP server): the typed [`McpConfig`],
//! its one validation, and the `kind = "mcp"` table of the configuration file
//! ([`McpFactory`]).
//!
//! `env` and `headers` values are secrets: the `Debug` of every type here, the mount's label
//! and every message built here name them by key only, and a URL is shown without its
//! userinfo.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mcpr_core::config::{
    ConfigError, IntOrString, MountCommon, MountSpec, MountTable, ProviderFactory, SettingError,
};
use mcpr_core::{CacheHints, Provider};
use serde::Deserialize;
use toml::Spanned;

/// Allowed `timeout_ms`: one upstream request, and the connection's set-up.
pub const TIMEOUT_MS: RangeInclusive<u64> = 100..=600_000;
/// Allowed `max_message_bytes`: one message from the upstream, 1 KiB to 256 MiB.
pub const MAX_MESSAGE_BYTES: RangeInclusive<u64> = 1024..=(256 << 20);
/// Allowed `max_notifications_per_second`: change notices relayed to clients per second.
pub const MAX_NOTIFICATIONS_PER_SECOND: RangeInclusive<u64> = 1..=1000;
/// Allowed `cache_max_bytes`: the read cache's bound, 1 byte to 16 GiB (as the web mounts').
pub const CACHE_MAX_BYTES: RangeInclusive<u64> = 1..=(16 << 30);
/// The default `cache_max_bytes`.
pub const DEFAULT_CACHE_MAX_BYTES: u64 = 64 << 20;
/// The most entries one upstream list page may hold; a longer page is refused.
pub const MAX_PAGE_ENTRIES: usize = 10_000;
/// The longest name or title relayed, in characters; longer ones are cut.
pub const MAX_NAME_CHARS: usize = 256;
/// The longest description relayed, in characters; longer ones are cut.
pub const MAX_DESCRIPTION_CHARS: usize = 4096;
/// The most templates taken from the upstream.
pub const MAX_TEMPLATES: usize = 1000;
/// The longest upstream cursor kept inside one of our positions.
pub const MAX_UPSTREAM_CURSOR: usize = 4096;

/// Which protocol era to speak to the upstream, as the terminal client's `--protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Try 2026-07-28 (`server/discover`), fall back to the legacy `initialize`.
    Auto,
    /// Only the legacy `initialize` handshake (2025-11-25 and older).
    Legacy,
    /// Only 2026-07-28.
    Modern,
}

impl Protocol {
    /// As written in config.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Auto => "auto",
            Protocol::Legacy => "legacy",
            Protocol::Modern => "2026-07-28",
        }
    }
}

/// One `KEY = value` whose value is a secret (`env`, `headers`).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    /// The name (environment variable or header).
    pub name: String,
    /// The value, `${NAME}` already expanded.
    pub value: String,
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}=<redacted>", self.name)
    }
}

/// How the upstream is reached.
#[derive(Clone, PartialEq, Eq)]
pub enum Upstream {
    /// A program speaking MCP on its stdin and stdout.
    Stdio {
        /// The program (looked up on `PATH`).
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Its environment besides `PATH` and `HOME`.
        env: Vec<Secret>,
    },
    /// A Streamable HTTP endpoint.
    Http {
        /// The endpoint URL.
        url: String,
        /// Headers sent with every request.
        headers: Vec<Secret>,
    },
}

impl fmt::Debug for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Upstream {
    /// What it runs or reaches, secrets named by key only.
    pub fn describe(&self) -> String {
        match self {
            Upstream::Stdio { command, args, env } => {
                let mut s = format!("runs `{}`", shell_words(command, args));
                if !env.is_empty() {
                    let names: Vec<&str> = env.iter().map(|e| e.name.as_str()).collect();
                    s.push_str(&format!(" with env {}", names.join(", ")));
                }
                s
            }
            Upstream::Http { url, headers } => {
                let mut s = format!("reaches {}", mcpr_core::redact_url(url));
                if !headers.is_empty() {
                    let names: Vec<&str> = headers.iter().map(|h| h.name.as_str()).collect();
                    s.push_str(&format!(" with headers {}", names.join(", ")));
                }
                s
            }
        }
    }
}

/// `67108864` as `64MiB`, as the setting may be written.
fn size_words(n: u64) -> String {
    for (unit, m) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if n >= m && n.is_multiple_of(m) {
            return format!("{}{unit}", n / m);
        }
    }
    format!("{n} bytes")
}

/// `cmd a b` with arguments holding spaces quoted, for messages.
fn shell_words(command: &str, args: &[String]) -> String {
    std::iter::once(command)
        .chain(args.iter().map(String::as_str))
        .map(|w| {
            if w.is_empty() || w.contains([' ', '"', '\'']) {
                format!("{w:?}")
            } else {
                w.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// One `mcp` mount.
#[derive(Clone, Debug)]
pub struct McpConfig {
    /// The scheme word its URIs start with: `{name}+{upstream URI}`.
    pub name: String,
    /// How the upstream is reached.
    pub upstream: Upstream,
    /// The era spoken to it.
    pub protocol: Protocol,
    /// Upstream URI prefixes served as they are, not as `{name}+{uri}`.
    pub prefixes: Vec<String>,
    /// One upstream request (and the connection's set-up) may take this long.
    pub timeout: Duration,
    /// The largest message taken from the upstream.
    pub max_message_bytes: u64,
    /// Change notices relayed to clients per second, at most; more wait (merged per URI).
    pub max_notifications_per_second: u32,
    /// The mount's own cache hints; the upstream's are kept but capped by these. A `ttl_ms`
    /// above 0 also turns the read cache on.
    pub cache: CacheHints,
    /// The read cache's bound, in bytes (contents, URIs and bookkeeping).
    pub cache_max_bytes: u64,
}

impl McpConfig {
    /// A mount named `name` of the upstream `upstream`, every other setting at its default.
    pub fn new(name: impl Into<String>, upstream: Upstream) -> Self {
        Self {
            name: name.into(),
            upstream,
            protocol: Protocol::Auto,
            prefixes: Vec::new(),
            timeout: Duration::from_secs(30),
            max_message_bytes: 32 << 20,
            max_notifications_per_second: 1000,
            cache: CacheHints::default(),
            cache_max_bytes: DEFAULT_CACHE_MAX_BYTES,
        }
    }

    /// The one validation, for the file and for programmatic construction alike.
    pub fn validate(&self) -> Result<(), SettingError> {
        check_scheme_word(&self.name)?;
        match &self.upstream {
            Upstream::Stdio { command, env, .. } => {
                if command.is_empty() {
                    return Err(SettingError::new("command", "must not be empty"));
                }
                for e in env {
                    if e.name.is_empty() || e.name.contains(['=', '\0']) {
                        return Err(SettingError::new(
                            format!("env.{}", e.name),
                            "an environment variable name must be non-empty, without '=' or NUL",
                        ));
                    }
                    if e.value.contains('\0') {
                        return Err(SettingError::new(
                            format!("env.{}", e.name),
                            "the value holds a NUL character",
                        ));
                    }
                }
            }
            Upstream::Http { url, headers } => {
                let shown = mcpr_core::redact_url(url);
                let parsed = url::Url::parse(url)
                    .map_err(|e| SettingError::new("url", format!("{shown} is not a URL: {e}")))?;
                if !matches!(parsed.scheme(), "http" | "https") {
                    return Err(SettingError::new(
                        "url",
                        format!("{shown}: only http:// and https:// upstreams are supported"),
                    ));
                }
                for h in headers {
                    let key = format!("headers.{}", h.name);
                    if reqwest::header::HeaderName::from_bytes(h.name.as_bytes()).is_err() {
                        return Err(SettingError::new(key, "not a valid HTTP header name"));
                    }
                    if reqwest::header::HeaderValue::from_str(&h.value).is_err() {
                        // The value is a secret: say what is wrong, not what it is.
                        return Err(SettingError::new(
                            key,
                            "the value holds a character a header cannot carry (a line break or control character)",
                        ));
                    }
                    let lower = h.name.to_ascii_lowercase();
                    if [
                        "accept",
                        "mcp-session-id",
                        "mcp-protocol-version",
                        "last-event-id",
                    ]
                    .contains(&lower.as_str())
                    {
                        return Err(SettingError::new(
                            key,
                            "the MCP transport sets this header itself",
                        ));
                    }
                }
            }
        }
        for (i, p) in self.prefixes.iter().enumerate() {
            let ok = p
                .find(':')
                .is_some_and(|c| c > 0 && p.len() > c + 1 && !p.starts_with(&self.plus()));
            if !ok {
                return Err(SettingError::new(
                    format!("prefixes.{i}"),
                    format!(
                        "{p:?} is not a URI prefix (a scheme, ':' and at least one more character, e.g. \"test://\")"
                    ),
                ));
            }
            // `skill://` URIs are the skills catalog's: it serves the upstream's skills there
            // itself, their bytes checked against the upstream's digests.
            if p.get(..6).is_some_and(|s| s.eq_ignore_ascii_case("skill:")) {
                return Err(SettingError::new(
                    format!("prefixes.{i}"),
                    format!(
                        "{p:?}: skill:// URIs are the skills catalog's, which relays the upstream's skills there itself (under the mount's `skills_prefix`)"
                    ),
                ));
            }
        }
        SettingError::check_range(
            "timeout_ms",
            self.timeout.as_millis().min(u128::from(u64::MAX)) as u64,
            &TIMEOUT_MS,
        )?;
        SettingError::check_range(
            "max_message_bytes",
            self.max_message_bytes,
            &MAX_MESSAGE_BYTES,
        )?;
        SettingError::check_range(
            "max_notifications_per_second",
            u64::from(self.max_notifications_per_second),
            &MAX_NOTIFICATIONS_PER_SECOND,
        )?;
        SettingError::check_range("cache_max_bytes", self.cache_max_bytes, &CACHE_MAX_BYTES)?;
        Ok(())
    }

    /// Whether reads are cached: `ttl_ms` above 0 and the mount not `cache_scope = "private"`
    /// (its every answer is private, and a private answer is never kept).
    pub fn caches_reads(&self) -> bool {
        self.cache.ttl_ms > 0 && self.cache.scope == mcpr_core::CacheScope::Public
    }

    /// The read cache as `check-config` shows it: `read cache 64MiB, ttl_ms 5000`, or why
    /// there is none.
    pub fn read_cache(&self) -> String {
        if self.caches_reads() {
            format!(
                "read cache {}, ttl_ms {}",
                size_words(self.cache_max_bytes),
                self.cache.ttl_ms
            )
        } else if self.cache.ttl_ms == 0 {
            "read cache off: ttl_ms = 0".to_owned()
        } else {
            "read cache off: cache_scope = \"private\"".to_owned()
        }
    }

    /// `{name}+`, the start of every URI not under [`McpConfig::prefixes`].
    pub fn plus(&self) -> String {
        format!("{}+", self.name)
    }
}

/// A URI scheme word that can start `{name}+{uri}`: a letter, then letters, digits, `-` or
/// `.` (RFC 3986 allows `+` too; it is the separator here), at most 64.
fn check_scheme_word(name: &str) -> Result<(), SettingError> {
    let ok = name.len() <= 64
        && name.bytes().next().is_some_and(|b| b.is_ascii_alphabetic())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(SettingError::new(
            "name",
            format!(
                "{name:?} is not a URI scheme word: 1 to 64 letters, digits, '-' or '.', starting with a letter (its URIs are {name}+<upstream URI>)"
            ),
        ))
    }
}

/// The `kind = "mcp"` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct McpToml {
    name: Spanned<String>,
    command: Option<Spanned<String>>,
    #[serde(default)]
    args: Vec<Spanned<String>>,
    #[serde(default)]
    env: BTreeMap<String, Spanned<String>>,
    url: Option<Spanned<String>>,
    #[serde(default)]
    headers: BTreeMap<String, Spanned<String>>,
    protocol: Option<Spanned<String>>,
    #[serde(default)]
    prefixes: Vec<Spanned<String>>,
    timeout_ms: Option<Spanned<IntOrString>>,
    max_message_bytes: Option<Spanned<IntOrString>>,
    max_notifications_per_second: Option<Spanned<IntOrString>>,
    cache_max_bytes: Option<Spanned<IntOrString>>,
}

/// The factory of `kind = "mcp"` mounts.
pub struct McpFactory;

impl ProviderFactory for McpFactory {
    fn kinds(&self) -> &'static [&'static str] {
        &["mcp"]
    }

    fn configure(
        &self,
        table: &MountTable<'_>,
        common: &MountCommon,
    ) -> Result<Box<dyn MountSpec>, ConfigError> {
        let raw: McpToml = table.parse()?;
        let file = table.file();
        let name = file.expand(&raw.name, "mount.name")?;
        let upstream = match (&raw.command, &raw.url) {
            (Some(command), None) => {
                if !raw.headers.is_empty() {
                    return Err(table.error("headers", "`headers` is for an HTTP upstream (`url`)"));
                }
                let mut args = Vec::new();
                for (i, a) in raw.args.iter().enumerate() {
                    args.push(file.expand(a, &format!("mount.args.{i}"))?);
                }
                let mut env = Vec::new();
                for (k, v) in &raw.env {
                    env.push(Secret {
                        name: k.clone(),
                        value: file.expand(v, &format!("mount.env.{k}"))?,
                    });
                }
                Upstream::Stdio {
                    command: file.expand(command, "mount.command")?,
                    args,
                    env,
                }
            }
            (None, Some(url)) => {
                if !raw.args.is_empty() || !raw.env.is_empty() {
                    return Err(table.error(
                        if raw.args.is_empty() { "env" } else { "args" },
                        "`args` and `env` are for a stdio upstream (`command`)",
                    ));
                }
                let mut headers = Vec::new();
                for (k, v) in &raw.headers {
                    headers.push(Secret {
                        name: k.clone(),
                        value: file.expand(v, &format!("mount.headers.{k}"))?,
                    });
                }
                Upstream::Http {
                    url: file.expand(url, "mount.url")?,
                    headers,
                }
            }
            (Some(_), Some(_)) => {
                return Err(table.error(
                    "url",
                    "set either `command` (a stdio upstream) or `url` (an HTTP one), not both",
                ));
            }
            (None, None) => {
                return Err(table.error_at_mount(
                    "an mcp mount needs `command` (a stdio upstream) or `url` (a Streamable HTTP one)",
                ));
            }
        };
        let mut c = McpConfig::new(name, upstream);
        if let Some(v) = &raw.protocol {
            c.protocol = file.choice(
                v,
                "mount.protocol",
                &[
                    ("auto", Protocol::Auto),
                    ("legacy", Protocol::Legacy),
                    ("2026-07-28", Protocol::Modern),
                ],
            )?;
        }
        for (i, p) in raw.prefixes.iter().enumerate() {
            c.prefixes
                .push(file.expand(p, &format!("mount.prefixes.{i}"))?);
        }
        if let Some(v) = &raw.timeout_ms {
            c.timeout = Duration::from_millis(file.number(v, "mount.timeout_ms")?);
        }
        if let Some(v) = &raw.max_message_bytes {
            c.max_message_bytes = file.size(v, "mount.max_message_bytes", u64::MAX)?;
        }
        if let Some(v) = &raw.max_notifications_per_second {
            c.max_notifications_per_second = file
                .number(v, "mount.max_notifications_per_second")?
                .min(u64::from(u32::MAX)) as u32;
        }
        if let Some(v) = &raw.cache_max_bytes {
            c.cache_max_bytes = file.size(v, "mount.cache_max_bytes", u64::MAX)?;
        }
        c.cache = common.cache;
        c.validate().map_err(|e| table.setting_error(e))?;
        Ok(Box::new(McpSpec(c)))
    }
}

/// A validated mcp mount.
#[derive(Debug)]
struct McpSpec(McpConfig);

#[async_trait]
impl MountSpec for McpSpec {
    fn kind(&self) -> &str {
        "mcp"
    }

    async fn build(&self) -> mcpr_core::Result<Arc<dyn Provider>> {
        Ok(Arc::new(crate::McpProvider::start(self.0.clone()).await?))
    }

    fn addresses(&self) -> Option<Vec<String>> {
        Some(crate::uri::UriMap::new(&self.0.name, &self.0.prefixes).router_prefixes())
    }

    fn describe(&self) -> Option<String> {
        Some(format!(
            "mcp {}: {} (protocol {}, {})",
            self.0.name,
            self.0.upstream.describe(),
            self.0.protocol.as_str(),
            self.0.read_cache()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stdio() -> Upstream {
        Upstream::Stdio {
            command: "srv".into(),
            args: vec!["a b".into(), "c".into()],
            env: vec![Secret {
                name: "API_KEY".into(),
                value: "hunter2".into(),
            }],
        }
    }

    #[test]
    fn names_must_be_scheme_words() {
        for bad in ["", "9x", "a+b", "a b", "a/b", &"x".repeat(65)] {
            let e = McpConfig::new(bad, stdio()).validate().unwrap_err();
            assert_eq!(e.key, "name", "{bad}");
        }
        McpConfig::new("every-thing.2", stdio()).validate().unwrap();
    }

    #[test]
    fn secrets_stay_out_of_debug_and_descriptions() {
        let c = McpConfig::new("e", stdio());
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("hunter2") && dbg.contains("API_KEY"), "{dbg}");
        assert_eq!(
            c.upstream.describe(),
            "runs `srv \"a b\" c` with env API_KEY"
        );
        let h = Upstream::Http {
            url: "https://u:pw@h.example/mcp".into(),
            headers: vec![Secret {
                name: "Authorization".into(),
                value: "Bearer s3cret".into(),
            }],
        };
        let c = McpConfig::new("e", h);
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("s3cret") && !dbg.contains("pw@"), "{dbg}");
        let mut bad = c.clone();
        bad.upstream = Upstream::Http {
            url: "https://h/mcp".into(),
            headers: vec![Secret {
                name: "Authorization".into(),
                value: "Bearer s3cret\r\nX: y".into(),
            }],
        };
        let e = bad.validate().unwrap_err();
        assert!(!e.message.contains("s3cret"), "{e}");
        assert_eq!(e.key, "headers.Authorization");
    }

    #[test]
    fn a_skill_prefix_is_refused() {
        let mut c = McpConfig::new("m", stdio());
        c.prefixes = vec!["test://".into(), "skill://".into()];
        let e = c.validate().unwrap_err();
        assert_eq!(e.key, "prefixes.1");
        assert!(e.message.contains("skills catalog"), "{}", e.message);
    }

    #[test]
    fn the_read_cache_is_on_with_a_ttl_and_bounded() {
        let mut c = McpConfig::new("e", stdio());
        assert!(!c.caches_reads());
        assert_eq!(c.read_cache(), "read cache off: ttl_ms = 0");
        c.cache.ttl_ms = 5000;
        assert!(c.caches_reads());
        assert_eq!(c.read_cache(), "read cache 64MiB, ttl_ms 5000");
        c.cache_max_bytes = 1500;
        assert_eq!(c.read_cache(), "read cache 1500 bytes, ttl_ms 5000");
        c.cache.scope = mcpr_core::CacheScope::Private;
        assert!(!c.caches_reads(), "every answer private: nothing kept");
        assert_eq!(c.read_cache(), "read cache off: cache_scope = \"private\"");
        c.cache_max_bytes = 0;
        assert_eq!(c.validate().unwrap_err().key, "cache_max_bytes");
        c.cache_max_bytes = (16 << 30) + 1;
        assert_eq!(c.validate().unwrap_err().key, "cache_max_bytes");
    }

    #[test]
    fn prefixes_and_ranges_name_their_key() {
        let mut c = McpConfig::new("e", stdio());
        c.prefixes = vec!["test://".into(), "nope".into()];
        assert_eq!(c.validate().unwrap_err().key, "prefixes.1");
        c.prefixes = vec!["e+x://".into()];
        assert_eq!(c.validate().unwrap_err().key, "prefixes.0");
        let mut c = McpConfig::new("e", stdio());
        c.max_notifications_per_second = 5000;
        let e = c.validate().unwrap_err();
        assert_eq!(e.key, "max_notifications_per_second");
        assert!(e.message.contains("1..=1000"), "{e}");
    }
}
