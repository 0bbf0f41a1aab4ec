//! Loading `mcp-resources.toml`: the binary's own table (`[server]`) and the keys every
//! mount shares (`kind`, `scope`, `ttl_ms`, `cache_scope`, `shared`). The other tables go to
//! the crates that define them, which read and validate their own keys: `[http]` to the
//! server's HTTP transport, `[cluster]` to the cluster crate, the rest of each `[[mount]]`
//! to the factory registered for its kind (see `providers.rs`); no provider key is named
//! here. Unknown keys and bad values are errors that name the file, line and key; `${NAME}`
//! reads the environment.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use mcpr_core::config::{
    ConfigError, ConfigFile, ConfigTable, IntOrString, MOUNT_SHARED_KEYS, MountCommon, MountSpec,
    MountTable, ProviderRegistry, Sharing,
};
use mcpr_core::{CacheHints, CacheScope};
use serde::Deserialize;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// The largest `max_read_bytes` (and `http.max_body_bytes`) accepted.
pub use mcpr_server::MAX_READ_LIMIT;

/// A validated configuration.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// `[server]`.
    pub server: mcpr_server::Settings,
    /// The mounts in order.
    pub mounts: Vec<Mount>,
    /// `[http]`, when present.
    pub http: Option<HttpConfig>,
    /// `[cluster]`, when present: this replica joins a cluster over NATS.
    pub cluster: Option<ClusterConfig>,
    /// `[server] max_conversions`: HTML conversions at once in the whole process, shared by
    /// every web mount; `None` leaves the process's budget at one per core.
    pub max_conversions: Option<usize>,
}

/// Allowed `[server] max_conversions`: the range of a web mount's own `max_conversions`.
#[cfg(feature = "http")]
const MAX_CONVERSIONS: std::ops::RangeInclusive<u64> = mcpr_provider_http::MAX_CONVERSIONS;
/// Allowed `[server] max_conversions` (without web mounts compiled in it bounds nothing).
#[cfg(not(feature = "http"))]
const MAX_CONVERSIONS: std::ops::RangeInclusive<u64> = 1..=256;

/// `[cluster]`: read and validated by the cluster crate.
#[cfg(feature = "cluster")]
pub use mcpr_cluster::ClusterConfig;

/// Without the `cluster` feature a `[cluster]` table is refused, so there is never one.
#[cfg(not(feature = "cluster"))]
#[derive(Debug, Clone)]
pub enum ClusterConfig {}

/// One mount: its validated provider settings, and who may see it over HTTP.
#[derive(Debug, Clone)]
pub struct Mount {
    /// The provider's validated settings; building it opens the source.
    pub spec: Arc<dyn MountSpec>,
    /// The token scope needed to see it over authenticated HTTP.
    pub scope: Option<String>,
    /// Whether every replica of a cluster sees the same source, so one replica watches it
    /// for all: the provider's [`Sharing`] (always for databases, git, HTTP and S3;
    /// `shared = true` for files).
    pub shared: bool,
    /// Where the mount was declared, to prefix the errors of opening it as parse errors are:
    /// `team.toml:12: mount 2 (git)`, or `serve argument ./docs`.
    pub origin: String,
    /// `skills` (+ `skills_prefix`, `skills_ref`): the folder whose skills it publishes.
    pub skills: Option<mcpr_server::skills::SkillsSetting>,
}

/// `[http]`: read and validated by the server crate, which defines the transport.
pub use mcpr_server::http::HttpConfig;
/// An address to listen on (`--http ADDR`, `http.listen`).
pub use mcpr_server::http::parse_listen;

/// The file's own tables; `mount` is taken out before this is read.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    server: Option<RawServer>,
    /// `http`, `cluster` and `mount` are taken out before this is read (their owners read
    /// them); named here so an unknown top-level key's message lists them among the keys
    /// expected.
    #[allow(dead_code)]
    http: Option<serde::de::IgnoredAny>,
    #[allow(dead_code)]
    cluster: Option<serde::de::IgnoredAny>,
    #[allow(dead_code)]
    mount: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    name: Option<Spanned<String>>,
    page_size: Option<Spanned<IntOrString>>,
    max_read_bytes: Option<Spanned<IntOrString>>,
    request_timeout_ms: Option<Spanned<IntOrString>>,
    max_subscriptions_per_session: Option<Spanned<IntOrString>>,
    max_inflight_read_bytes: Option<Spanned<IntOrString>>,
    max_listen_streams_per_client: Option<Spanned<IntOrString>>,
    max_watches: Option<Spanned<IntOrString>>,
    max_conversions: Option<Spanned<IntOrString>>,
    tools: Option<bool>,
}

/// The keys every mount shares, taken out of its table before the factory sees it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawShared {
    scope: Option<Spanned<String>>,
    ttl_ms: Option<Spanned<IntOrString>>,
    cache_scope: Option<Spanned<String>>,
    shared: Option<Spanned<bool>>,
    skills: Option<Spanned<String>>,
    skills_prefix: Option<Spanned<String>>,
    skills_ref: Option<Spanned<String>>,
}

/// Read and validate the file at `path`.
pub fn load(path: &Path, registry: &ProviderRegistry) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError(format!("{}: cannot read config: {e}", path.display())))?;
    parse(path, &text, &|name| std::env::var(name).ok(), registry)
}

/// Validate config `text` (from `path`, for messages) with environment lookup `env`, building
/// each mount's settings through `registry`.
pub fn parse(
    path: &Path,
    text: &str,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
    registry: &ProviderRegistry,
) -> Result<Config, ConfigError> {
    let file = ConfigFile::new(path, text, env);
    let root = file.parse()?;
    let root_span = root.span();
    let mut root = root.into_inner();
    let mounts = root.remove("mount");
    let http = root.remove("http");
    let cluster = root.remove("cluster");
    let raw: RawConfig = file.deserialize_table(&Spanned::new(root_span, root), "")?;
    let mut cfg = Config::default();
    if let Some(s) = raw.server {
        if let Some(v) = &s.max_conversions {
            cfg.max_conversions =
                Some(file.int(v, "server.max_conversions", MAX_CONVERSIONS)? as usize);
        }
        server_config(&file, s, &mut cfg.server)?;
    }
    if let Some(h) = http {
        let span = h.span();
        let DeValue::Table(t) = h.into_inner() else {
            return file.err(span, "http", "write `[http]` as a table");
        };
        let table = ConfigTable::new(&file, "http", span.clone(), Spanned::new(span, t));
        cfg.http = Some(HttpConfig::from_table(&table)?);
    }
    if let Some(c) = cluster {
        cfg.cluster = Some(cluster_config(&file, c, cfg.server.max_watches)?);
    }
    // Every replica continues the others' listings: their cursors are sealed under the
    // secret they share (each derives its own key from it, apart from the bus's keys).
    #[cfg(feature = "cluster")]
    if let Some(c) = &cfg.cluster {
        cfg.server.cursor_secret = Some(mcpr_core::CursorSecret::new(c.secret.as_bytes()));
    }
    let Some(mounts) = mounts else {
        return Ok(cfg);
    };
    let mounts_span = mounts.span();
    let DeValue::Array(list) = mounts.into_inner() else {
        return file.err(mounts_span, "mount", "write mounts as [[mount]] tables");
    };
    for (i, m) in list.into_iter().enumerate() {
        let span = m.span();
        let DeValue::Table(table) = m.into_inner() else {
            return file.err(span, "mount", "write mounts as [[mount]] tables");
        };
        let m = mount(&file, registry, i + 1, Spanned::new(span, table))?;
        if let Some(skills) = &m.skills {
            cfg.server.skills.push(skills.clone());
        }
        cfg.mounts.push(m);
    }
    Ok(cfg)
}

fn server_config(
    file: &ConfigFile<'_>,
    s: RawServer,
    out: &mut mcpr_server::Settings,
) -> Result<(), ConfigError> {
    if let Some(n) = &s.name {
        out.name = file.expand(n, "server.name")?;
    }
    if let Some(p) = &s.page_size {
        out.page_size = file.int(p, "server.page_size", 1..=1000)? as usize;
    }
    if let Some(m) = &s.max_read_bytes {
        out.max_read_bytes = file.size(m, "server.max_read_bytes", MAX_READ_LIMIT)?;
    }
    if let Some(v) = &s.request_timeout_ms {
        out.request_timeout =
            Duration::from_millis(file.int(v, "server.request_timeout_ms", 1..=3_600_000)?);
    }
    if let Some(v) = &s.max_subscriptions_per_session {
        out.max_subscriptions_per_session =
            file.int(v, "server.max_subscriptions_per_session", 1..=1_000_000)? as usize;
    }
    if let Some(v) = &s.max_inflight_read_bytes {
        out.max_inflight_read_bytes = file.size(v, "server.max_inflight_read_bytes", 1 << 40)?;
    }
    if let Some(v) = &s.max_listen_streams_per_client {
        out.max_listen_streams_per_client =
            file.int(v, "server.max_listen_streams_per_client", 1..=100_000)? as usize;
    }
    if let Some(v) = &s.max_watches {
        out.max_watches = file.int(v, "server.max_watches", 1..=100_000_000)? as usize;
    }
    if let Some(on) = s.tools {
        out.tools = on;
    }
    Ok(())
}

/// One `[[mount]]`: the shared keys here, the rest through the kind's factory.
fn mount(
    file: &ConfigFile<'_>,
    registry: &ProviderRegistry,
    number: usize,
    table: Spanned<DeTable<'_>>,
) -> Result<Mount, ConfigError> {
    let span = table.span();
    let mut table = table.into_inner();
    let Some(kind) = table.remove("kind") else {
        return file.err(
            span,
            "mount.kind",
            format!(
                "every mount needs a `kind`; available: {}",
                registry.kinds().join(", ")
            ),
        );
    };
    let kind_span = kind.span();
    let Some(kind_s) = kind.get_ref().as_str().map(str::to_owned) else {
        return file.err(kind_span, "mount.kind", "`kind` must be a string");
    };
    let mut shared = DeTable::default();
    // The core's list, which an unknown key's hint names too.
    for key in MOUNT_SHARED_KEYS {
        if let Some((k, v)) = table.remove_entry(*key) {
            shared.insert(k, v);
        }
    }
    let shared: RawShared = file.deserialize_table(&Spanned::new(span.clone(), shared), "mount")?;
    let Some(factory) = registry.factory(&kind_s) else {
        return file.err(
            kind_span,
            "mount.kind",
            crate::providers::unavailable(&kind_s, registry),
        );
    };
    // Whether every replica reaches the same source is the provider's answer.
    let sharing = factory.sharing();
    let is_shared = match (&shared.shared, sharing) {
        (Some(v), Sharing::OptIn) => *v.get_ref(),
        (Some(v), _) => {
            let opt_in: Vec<&str> = registry
                .kinds()
                .into_iter()
                .filter(|k| registry.factory(k).map(|f| f.sharing()) == Some(Sharing::OptIn))
                .collect();
            let how = if sharing == Sharing::Always {
                "always watched once per cluster"
            } else {
                "never shared"
            };
            return file.err(
                v.span(),
                "mount.shared",
                format!(
                    "`shared` is a setting of {} mounts only; {kind_s} mounts are {how}",
                    opt_in.join(", ")
                ),
            );
        }
        (None, s) => s.by_default(),
    };
    let scope = shared
        .scope
        .as_ref()
        .map(|v| file.expand(v, "mount.scope"))
        .transpose()?;
    let common = MountCommon {
        cache: cache_hints(file, &shared)?,
    };
    let origin = format!(
        "{}:{}: mount {number} ({kind_s})",
        file.path().display(),
        file.line(kind_span.start)
    );
    let skills = skills_setting(file, &shared, number - 1, &kind_s)?;
    let table = MountTable::new(
        file,
        Spanned::new(kind_span, kind_s),
        Spanned::new(span, table),
    );
    let spec = factory.configure(&table, &common)?;
    Ok(Mount {
        spec: Arc::from(spec),
        scope,
        shared: is_shared,
        origin,
        skills,
    })
}

/// `skills`, `skills_prefix` and `skills_ref` of mount `index` (of kind `kind`). A gateway
/// (`mcp`) mount always carries skills: its upstream's, when it declares any, under its
/// `skills_prefix`; it takes no folder.
fn skills_setting(
    file: &ConfigFile<'_>,
    shared: &RawShared,
    index: usize,
    kind: &str,
) -> Result<Option<mcpr_server::skills::SkillsSetting>, ConfigError> {
    let relay = kind == "mcp";
    let path = match &shared.skills {
        Some(path) if relay => {
            return file.err(
                path.span(),
                "mount.skills",
                "an mcp mount relays its upstream's skills, if it declares any, with no folder to name: leave `skills` out (`skills_prefix` still applies)",
            );
        }
        Some(path) => Some(path),
        None if relay => None,
        None => {
            for (v, key) in [
                (&shared.skills_prefix, "mount.skills_prefix"),
                (&shared.skills_ref, "mount.skills_ref"),
            ] {
                if let Some(v) = v {
                    return file.err(
                        v.span(),
                        key,
                        "applies to a mount that carries skills: set `skills` (the skills folder, \".\" for the root) too",
                    );
                }
            }
            return Ok(None);
        }
    };
    let value = match path {
        None => ".".to_owned(),
        Some(path) => {
            if !matches!(kind, "files" | "git" | "s3") {
                return file.err(
                    path.span(),
                    "mount.skills",
                    format!(
                        "skills are published from files, git and s3 mounts, not {kind} mounts"
                    ),
                );
            }
            let value = file.expand(path, "mount.skills")?;
            let bad_segment = |s: &str| s.is_empty() || s == ".." || s.contains('\0');
            if value.starts_with('/')
                || value
                    .trim_end_matches('/')
                    .split('/')
                    .any(|s| bad_segment(s) || (s == "." && value.trim_end_matches('/') != "."))
            {
                return file.err(
                    path.span(),
                    "mount.skills",
                    "the skills folder is a path inside the mount, like \"skills\" or \".\" for its root (no leading /, no . or .. segments)",
                );
            }
            value
        }
    };
    let prefix = match &shared.skills_prefix {
        None => String::new(),
        Some(p) => {
            let p_s = file.expand(p, "mount.skills_prefix")?;
            let ok = !p_s.is_empty()
                && p_s.split('/').all(|seg| {
                    !seg.is_empty()
                        && seg
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
                });
            if !ok {
                return file.err(
                    p.span(),
                    "mount.skills_prefix",
                    "segments of letters, digits, - . _ ~ separated by /, like \"acme\" or \"acme/team\"",
                );
            }
            p_s
        }
    };
    let rev = match &shared.skills_ref {
        None => None,
        Some(r) if kind != "git" => {
            return file.err(
                r.span(),
                "mount.skills_ref",
                format!("`skills_ref` picks a git ref; {kind} mounts have none"),
            );
        }
        Some(r) => Some(file.expand(r, "mount.skills_ref")?),
    };
    Ok(Some(mcpr_server::skills::SkillsSetting {
        mount: index,
        path: value,
        prefix,
        rev,
    }))
}

/// `[cluster]`, handed to the cluster crate, which owns its keys and rules.
fn cluster_config(
    file: &ConfigFile<'_>,
    table: Spanned<DeValue<'_>>,
    max_watches: usize,
) -> Result<ClusterConfig, ConfigError> {
    let span = table.span();
    let DeValue::Table(t) = table.into_inner() else {
        return file.err(span, "cluster", "write `[cluster]` as a table");
    };
    #[cfg(feature = "cluster")]
    {
        let table = ConfigTable::new(file, "cluster", span.clone(), Spanned::new(span, t));
        ClusterConfig::from_table(&table, max_watches)
    }
    #[cfg(not(feature = "cluster"))]
    {
        let _ = (t, max_watches);
        file.err(
            span,
            "cluster",
            "`[cluster]` is not compiled into this binary (cargo feature `cluster`)",
        )
    }
}

fn cache_hints(file: &ConfigFile<'_>, m: &RawShared) -> Result<CacheHints, ConfigError> {
    let mut cache = CacheHints::default();
    if let Some(v) = &m.ttl_ms {
        cache.ttl_ms = file.int(v, "mount.ttl_ms", 0..=u64::from(u32::MAX))?;
    }
    if let Some(v) = &m.cache_scope {
        cache.scope = file.choice(
            v,
            "mount.cache_scope",
            &[
                ("public", CacheScope::Public),
                ("private", CacheScope::Private),
            ],
        )?;
    }
    Ok(cache)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(text: &str) -> Result<Config, ConfigError> {
        parse(
            Path::new("test.toml"),
            text,
            &|n| (n == "DOCS").then(|| "/tmp".to_owned()),
            &crate::providers::registry(),
        )
    }

    #[test]
    fn skills_settings_name_their_mount_and_are_checked() {
        let c = parse_str("[[mount]]\nkind = \"files\"\nroot = \"/tmp\"\n[[mount]]\nkind = \"files\"\nroot = \"${DOCS}\"\nskills = \"team/skills\"\nskills_prefix = \"acme\"\n").unwrap();
        assert_eq!(
            c.server.skills,
            vec![mcpr_server::skills::SkillsSetting {
                mount: 1,
                path: "team/skills".into(),
                prefix: "acme".into(),
                rev: None,
            }]
        );
        let root =
            parse_str("[[mount]]\nkind = \"files\"\nroot = \"/tmp\"\nskills = \".\"\n").unwrap();
        assert_eq!(root.server.skills[0].path, ".");
        for (extra, key, says) in [
            (
                "skills = \"../up\"",
                "mount.skills",
                "path inside the mount",
            ),
            ("skills = \"/abs\"", "mount.skills", "no leading /"),
            ("skills = \"a/./b\"", "mount.skills", "no . or .."),
            (
                "skills_prefix = \"acme\"",
                "mount.skills_prefix",
                "set `skills`",
            ),
            (
                "skills = \"s\"\nskills_prefix = \"a b\"",
                "mount.skills_prefix",
                "segments",
            ),
            (
                "skills = \"s\"\nskills_ref = \"main\"",
                "mount.skills_ref",
                "git ref",
            ),
        ] {
            let e = parse_str(&format!(
                "[[mount]]\nkind = \"files\"\nroot = \"/tmp\"\n{extra}\n"
            ))
            .unwrap_err()
            .to_string();
            assert!(e.contains(key) && e.contains(says), "{extra}: {e}");
        }
    }

    #[cfg(feature = "mcp")]
    #[test]
    fn an_mcp_mount_relays_its_upstreams_skills_under_its_prefix() {
        let mcp = "[[mount]]\nkind = \"files\"\nroot = \"/tmp\"\n[[mount]]\nkind = \"mcp\"\nname = \"up\"\ncommand = \"true\"\n";
        let c = parse_str(mcp).unwrap();
        assert_eq!(
            c.server.skills,
            vec![mcpr_server::skills::SkillsSetting {
                mount: 1,
                path: ".".into(),
                prefix: String::new(),
                rev: None,
            }]
        );
        let c = parse_str(&format!("{mcp}skills_prefix = \"gw/up\"\n")).unwrap();
        assert_eq!(c.server.skills[0].prefix, "gw/up");
        for (extra, key, says) in [
            ("skills = \"skills\"", "mount.skills", "leave `skills` out"),
            ("skills_ref = \"main\"", "mount.skills_ref", "git ref"),
            ("skills_prefix = \"a b\"", "mount.skills_prefix", "segments"),
        ] {
            let e = parse_str(&format!("{mcp}{extra}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(key) && e.contains(says), "{extra}: {e}");
        }
    }

    #[test]
    fn valid_config_with_env() {
        let c = parse_str("[server]\npage_size = 7\nmax_read_bytes = \"1MiB\"\n[[mount]]\nkind = \"files\"\nroot = \"${DOCS}\"\ndeny = [\"*.sqlite\"]\nscope = \"docs\"\nttl_ms = 5\n").unwrap();
        assert_eq!(c.server.page_size, 7);
        assert_eq!(c.server.max_read_bytes, 1 << 20);
        assert_eq!(
            c.server.max_inflight_read_bytes,
            mcpr_server::DEFAULT_MAX_INFLIGHT_READ_BYTES
        );
        let inflight = parse_str("[server]\nmax_inflight_read_bytes = \"64MiB\"\n").unwrap();
        assert_eq!(inflight.server.max_inflight_read_bytes, 64 << 20);
        assert_eq!(c.max_conversions, None);
        let conv = parse_str("[server]\nmax_conversions = 3\n").unwrap();
        assert_eq!(conv.max_conversions, Some(3));
        let e = parse_str("[server]\nmax_conversions = 0\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(":2: `server.max_conversions`: 0 is out of range; allowed 1..=256"),
            "{e}"
        );
        assert_eq!(c.mounts[0].spec.kind(), "files");
        assert_eq!(c.mounts[0].scope.as_deref(), Some("docs"));
        let dbg = format!("{:?}", c.mounts[0].spec);
        assert!(
            dbg.contains("\"/tmp\"") && dbg.contains("*.sqlite") && dbg.contains("ttl_ms: 5"),
            "{dbg}"
        );
    }

    #[test]
    fn cluster_table_is_parsed_and_checked() {
        let env = |n: &str| match n {
            "NATS_PW" => Some("hunter2".to_owned()),
            "SECRET" => Some("a-cluster-secret-of-at-least-32-bytes".to_owned()),
            "SHORT" => Some("hunter2-short".to_owned()),
            _ => None,
        };
        let p = |t: &str| {
            parse(
                Path::new("test.toml"),
                t,
                &env,
                &crate::providers::registry(),
            )
        };
        let c = p("[cluster]\nnats_url = \"nats://u:${NATS_PW}@127.0.0.1:4222\"\nname = \"team-data\"\nreplica = \"r1\"\nlease_ttl_ms = 1000\nsecret = \"${SECRET}\"\n[[mount]]\nkind = \"files\"\nroot = \"/tmp\"\nshared = true\n[[mount]]\nkind = \"files\"\nroot = \"/usr\"\n[[mount]]\nkind = \"sqlite\"\nname = \"a\"\nurl = \"sqlite:///tmp/a.db\"\n").unwrap();
        let cl = c.cluster.as_ref().unwrap();
        assert_eq!(cl.nats_url, "nats://u:hunter2@127.0.0.1:4222");
        assert_eq!((cl.name.as_str(), cl.replica.as_str()), ("team-data", "r1"));
        assert_eq!(cl.lease_ttl, Duration::from_millis(1000));
        assert!(!format!("{c:?}").contains("hunter2"));
        let shared: Vec<bool> = c.mounts.iter().map(|m| m.shared).collect();
        assert_eq!(shared, [true, false, true]);
        let d = p("[cluster]\nnats_url = \"tls://h:4222\"\nname = \"x\"\nsecret = \"${SECRET}\"\n")
            .unwrap();
        let d = d.cluster.unwrap();
        assert_eq!(d.lease_ttl, Duration::from_secs(5));
        assert!(
            d.replica.ends_with(&format!("-{}", std::process::id())),
            "{}",
            d.replica
        );
        let e = p("[cluster]\nname = \"x\"\n").unwrap_err().0;
        assert!(e.starts_with("test.toml:1: `cluster.nats_url`"), "{e}");
        let e = p("[cluster]\nnats_url = \"http://u:hunter2@h\"\nname = \"x\"\n")
            .unwrap_err()
            .0;
        assert!(
            e.starts_with("test.toml:2: `cluster.nats_url`") && !e.contains("hunter2"),
            "{e}"
        );
        let e = p("[cluster]\nnats_url = \"nats://h\"\nname = \"a.b\"\n")
            .unwrap_err()
            .0;
        assert!(e.starts_with("test.toml:3: `cluster.name`"), "{e}");
        let e = p("[cluster]\nnats_url = \"nats://h\"\nname = \"a\"\nlease_ttl_ms = 10\n")
            .unwrap_err()
            .0;
        assert!(e.starts_with("test.toml:4: `cluster.lease_ttl_ms`"), "{e}");
        let e = p("[cluster]\nnats_url = \"nats://h\"\nname = \"a\"\nport = 1\n")
            .unwrap_err()
            .0;
        assert!(e.contains("`cluster.port`"), "{e}");
        assert!(!format!("{d:?}").contains("a-cluster-secret"));
        let e = p("[[mount]]\nkind = \"sqlite\"\nname = \"a\"\nurl = \"sqlite:///tmp/a.db\"\nshared = false\n").unwrap_err().0;
        assert!(e.starts_with("test.toml:5: `mount.shared`"), "{e}");
    }

    #[test]
    fn a_cluster_without_a_long_enough_secret_is_refused() {
        let env = |n: &str| (n == "SHORT").then(|| "hunter2-short".to_owned());
        let p = |t: &str| {
            parse(
                Path::new("test.toml"),
                t,
                &env,
                &crate::providers::registry(),
            )
        };
        let e = p("[cluster]\nnats_url = \"nats://h\"\nname = \"a\"\n")
            .unwrap_err()
            .0;
        assert!(
            e.starts_with("test.toml:1: `cluster.secret`") && e.contains("needs `secret`"),
            "{e}"
        );
        let e = p("[cluster]\nnats_url = \"nats://h\"\nname = \"a\"\nsecret = \"${SHORT}\"\n")
            .unwrap_err()
            .0;
        assert!(
            e.starts_with("test.toml:4: `cluster.secret`")
                && e.contains("at least 32 bytes, got 13")
                && !e.contains("hunter2"),
            "{e}"
        );
        let e = p("[cluster]\nnats_url = \"nats://h\"\nname = \"a\"\nsecret = \"${UNSET}\"\n")
            .unwrap_err()
            .0;
        assert!(e.contains("`cluster.secret`") && e.contains("UNSET"), "{e}");
    }

    #[test]
    fn listen_and_body_limits_are_settings() {
        let c = parse_str("[server]\nmax_listen_streams_per_client = 3\nmax_watches = 500\n[http]\nbody_timeout_ms = 2500\n").unwrap();
        assert_eq!(c.server.max_listen_streams_per_client, 3);
        assert_eq!(c.server.max_watches, 500);
        let http = c.http.expect("an [http] table");
        assert_eq!(
            http.limits.body_timeout,
            std::time::Duration::from_millis(2500)
        );
        let e = parse_str("[server]\nmax_watches = 0\n").unwrap_err().0;
        assert!(e.contains("max_watches"), "{e}");
        assert!(parse_str("[server]\ntools = true\n").unwrap().server.tools);
        assert!(!parse_str("[server]\n").unwrap().server.tools);
        let e = parse_str("[server]\ntools = \"yes\"\n").unwrap_err().0;
        assert!(e.contains("tools"), "{e}");
        let e = parse_str("[http]\nbody_timeout_ms = 5\n").unwrap_err().0;
        assert!(e.contains("body_timeout_ms"), "{e}");
    }

    #[test]
    fn two_scoped_token_entries_may_not_share_a_name() {
        let e = parse_str(
            "[http.auth]\n[[http.auth.scoped_token]]\ntoken = \"env:MCPR_T1\"\nscopes = [\"docs\"]\nname = \"team\"\n[[http.auth.scoped_token]]\ntoken = \"env:MCPR_T2\"\nscopes = [\"db\"]\nname = \"team\"\n",
        )
        .unwrap_err()
        .0;
        assert!(
            e.starts_with("test.toml:9: `http.auth.scoped_token.name`: \"team\" names another"),
            "{e}"
        );
    }

    #[test]
    fn errors_name_file_line_and_key() {
        let e = parse_str("[server]\npage_size = 5000\n").unwrap_err().0;
        assert!(
            e.contains("test.toml:2") && e.contains("server.page_size") && e.contains("1..=1000"),
            "{e}"
        );
        let e = parse_str("[server]\nnope = 1\n").unwrap_err().0;
        assert!(
            e.starts_with("test.toml:2: `server.nope`: unknown field `nope`"),
            "{e}"
        );
        let e = parse_str("[[mount]]\nkind = \"files\"\nroot = \"${MISSING}\"\n")
            .unwrap_err()
            .0;
        assert!(e.contains("test.toml:3") && e.contains("MISSING"), "{e}");
        let e = parse_str("[[mount]]\nkind = \"ftp\"\n").unwrap_err().0;
        assert!(
            e.starts_with("test.toml:2: `mount.kind`: unknown mount kind `ftp`"),
            "{e}"
        );
        let e = parse_str("[[mount]]\nkind = \"s3\"\n").unwrap_err().0;
        assert!(
            e.starts_with("test.toml:2: `mount`") && e.contains("needs `bucket`"),
            "{e}"
        );
        let e = parse_str(
            "[[mount]]\nkind = \"s3\"\nbucket = \"b-1\"\nregion = \"us-east-1\"\nendpoint = \"http://127.0.0.1:9\"\n",
        )
        .unwrap_err()
        .0;
        assert!(
            e.starts_with("test.toml:5: `mount.endpoint`") && e.contains("allow_http"),
            "{e}"
        );
        let e = parse_str("[server]\nmax_read_bytes = \"1GiB\"\n")
            .unwrap_err()
            .0;
        assert!(
            e.contains("max_read_bytes") && e.contains("67108864"),
            "{e}"
        );
        let e =
            parse_str("[[mount]]\nkind = \"files\"\nroot = \"/tmp\"\ncache_scope = \"everyone\"\n")
                .unwrap_err()
                .0;
        assert!(e.starts_with("test.toml:4: `mount.cache_scope`"), "{e}");
    }

    /// Each kind refuses the keys of the others, at the key's own line: a git mount with
    /// `respect_gitignore = true` used to pass check-config and be ignored.
    fn refused(mount: &str, key: &str, line: usize) {
        let e = parse_str(mount).expect_err(mount).0;
        let want = format!("test.toml:{line}: `mount.{key}`: unknown field `{key}`");
        assert!(e.starts_with(&want), "{mount}\n{e}");
    }

    #[test]
    fn files_refuses_keys_of_other_kinds() {
        refused(
            "[[mount]]\nkind = \"files\"\nroot = \"/tmp\"\nurl = \"sqlite://x\"\n",
            "url",
            4,
        );
        refused(
            "[[mount]]\nkind = \"files\"\nroot = \"/tmp\"\n\nrepo = \".\"\n",
            "repo",
            5,
        );
        refused(
            "[[mount]]\nkind = \"files\"\nroot = \"/tmp\"\n[[mount.query]]\nuri = \"db://a\"\n",
            "query",
            4,
        );
    }

    #[test]
    fn max_poll_requests_per_second_is_range_checked_and_kept() {
        let s3 = "[[mount]]\nkind = \"s3\"\nbucket = \"my-bucket\"\nregion = \"us-east-1\"\n";
        let api = "[[mount]]\nkind = \"api\"\n[[mount.endpoint]]\nuri = \"api://w/x\"\nurl = \"https://h/x\"\n[[mount]]\nkind = \"web\"\nallow = [\"https://d.example/\"]\n";
        for (head, line) in [(s3, 5), (api, 9)] {
            for bad in ["0", "10001"] {
                let e = parse_str(&format!("{head}max_poll_requests_per_second = {bad}\n"))
                    .unwrap_err()
                    .0;
                assert!(
                    e.starts_with(&format!(
                        "test.toml:{line}: `mount.max_poll_requests_per_second`: {bad} is out of range; allowed 1..=10000"
                    )),
                    "{e}"
                );
            }
            let m = parse_str(&format!("{head}max_poll_requests_per_second = 3\n")).unwrap();
            assert!(
                format!("{m:?}").contains("max_poll_requests_per_second: 3"),
                "{m:?}"
            );
        }
    }

    #[test]
    fn s3_refuses_keys_of_other_kinds_and_checks_its_own() {
        let head = "[[mount]]\nkind = \"s3\"\nbucket = \"my-bucket\"\nregion = \"us-east-1\"\n";
        refused(&format!("{head}root = \"/tmp\"\n"), "root", 5);
        refused(&format!("{head}url = \"sqlite://x\"\n"), "url", 5);
        refused(&format!("{head}debounce_ms = 5\n"), "debounce_ms", 5);
        let e = parse_str(&format!("{head}poll_interval_ms = 10\n"))
            .unwrap_err()
            .0;
        assert!(
            e.starts_with("test.toml:5: `mount.poll_interval_ms`") && e.contains("100"),
            "{e}"
        );
        let e = parse_str(
            "[[mount]]\nkind = \"s3\"\nbucket = \"Bad_Bucket\"\nregion = \"us-east-1\"\n",
        )
        .unwrap_err()
        .0;
        assert!(e.starts_with("test.toml:3: `mount.bucket`"), "{e}");
        // Keys from the environment; the mount's Debug never shows them.
        let m = parse_str(&format!(
            "{head}access_key_id = \"AKIAVISIBLEKEY\"\nsecret_access_key = \"s3cr3t-value\"\n"
        ))
        .unwrap();
        let d = format!("{m:?}");
        assert!(
            !d.contains("AKIAVISIBLEKEY") && !d.contains("s3cr3t-value"),
            "{d}"
        );
    }

    #[test]
    fn git_refuses_keys_of_other_kinds() {
        refused(
            "[[mount]]\nkind = \"git\"\nrepo = \"/tmp\"\nrespect_gitignore = true\n",
            "respect_gitignore",
            4,
        );
        refused(
            "[[mount]]\nkind = \"git\"\nrepo = \"/tmp\"\nhidden = true\n",
            "hidden",
            4,
        );
        refused(
            "[[mount]]\nkind = \"git\"\nrepo = \"/tmp\"\n[[mount.template]]\nuri_template = \"x\"\nname = \"x\"\n",
            "template",
            4,
        );
    }

    #[test]
    fn http_refuses_keys_of_other_kinds() {
        refused(
            "[[mount]]\nkind = \"api\"\nname = \"w\"\nroot = \"/tmp\"\n",
            "root",
            4,
        );
        refused(
            "[[mount]]\nkind = \"web\"\nallow = [\"https://d.example/\"]\n\nrepo = \".\"\n",
            "repo",
            5,
        );
        let e = parse_str("[[mount]]\nkind = \"api\"\n[[mount.endpoint]]\nuri = \"api://w/x\"\nurl = \"https://h/x\"\nsql = \"select 1\"\n").unwrap_err().0;
        assert!(
            e.starts_with("test.toml:6: `mount.endpoint.sql`: unknown field `sql`"),
            "{e}"
        );
        // The provider's own checks land on the key's line.
        let e = parse_str("[[mount]]\nkind = \"api\"\ntimeout_ms = 5\n[[mount.endpoint]]\nuri = \"api://w/x\"\nurl = \"https://h/x\"\n").unwrap_err().0;
        assert!(
            e.starts_with("test.toml:3: `mount.timeout_ms`: 5 is out of range"),
            "{e}"
        );
        let e = parse_str("[[mount]]\nkind = \"api\"\n[[mount.endpoint]]\nuri = \"api://w/{p}\"\nurl = \"https://h/{+p}\"\n").unwrap_err().0;
        assert!(e.starts_with("test.toml:5: `mount.endpoint.0.url`"), "{e}");
        let e = parse_str(
            "[[mount]]\nkind = \"web\"\nallow = [\"https://d.example/\", \"ftp://x/\"]\n",
        )
        .unwrap_err()
        .0;
        assert!(e.starts_with("test.toml:3: `mount.allow.1`"), "{e}");
        let ok = parse_str(
            "[[mount]]\nkind = \"api\"\nname = \"weather\"\ncache_max_bytes = \"64MiB\"\n[[mount.endpoint]]\nuri = \"api://weather/{city}/forecast\"\nurl = \"https://api.example.com/v1/forecast/{city}?units=metric\"\nheaders = { Authorization = \"Bearer x\" }\nparams.city = { enum = [\"beijing\", \"shanghai\"] }\n",
        );
        assert!(ok.is_ok(), "{ok:?}");
    }

    #[test]
    fn mcp_refuses_keys_of_other_kinds_and_checks_its_own() {
        refused(
            "[[mount]]\nkind = \"mcp\"\nname = \"up\"\ncommand = \"srv\"\nroot = \"/tmp\"\n",
            "root",
            5,
        );
        let e = parse_str("[[mount]]\nkind = \"mcp\"\nname = \"a+b\"\ncommand = \"srv\"\n")
            .unwrap_err()
            .0;
        assert!(e.starts_with("test.toml:3: `mount.name`"), "{e}");
        let e = parse_str("[[mount]]\nkind = \"mcp\"\nname = \"up\"\n")
            .unwrap_err()
            .0;
        assert!(
            e.contains("needs `command`") && e.contains("or `url`"),
            "{e}"
        );
        let e = parse_str(
            "[[mount]]\nkind = \"mcp\"\nname = \"up\"\ncommand = \"srv\"\nurl = \"http://h/mcp\"\n",
        )
        .unwrap_err()
        .0;
        assert!(e.starts_with("test.toml:5: `mount.url`: set either"), "{e}");
        let e = parse_str(
            "[[mount]]\nkind = \"mcp\"\nname = \"up\"\ncommand = \"srv\"\nprotocol = \"2025\"\n",
        )
        .unwrap_err()
        .0;
        assert!(e.starts_with("test.toml:5: `mount.protocol`"), "{e}");
        let ok = parse_str(
            "[[mount]]\nkind = \"mcp\"\nname = \"tools\"\nurl = \"https://tools.example.com/mcp\"\nheaders = { Authorization = \"Bearer x\" }\nprefixes = [\"test://\"]\n",
        );
        assert!(ok.is_ok(), "{ok:?}");
    }

    #[test]
    fn sql_refuses_keys_of_other_kinds() {
        refused(
            "[[mount]]\nkind = \"sqlite\"\nname = \"a\"\nurl = \"sqlite:///tmp/a.db\"\nroot = \"/tmp\"\n",
            "root",
            5,
        );
        refused(
            "[[mount]]\nkind = \"postgres\"\nname = \"a\"\nurl = \"postgres://h/d\"\ndefault_ref = \"main\"\n",
            "default_ref",
            5,
        );
        refused(
            "[[mount]]\nkind = \"mysql\"\nname = \"a\"\nurl = \"mysql://h/d\"\nlist_changed = \"off\"\n",
            "list_changed",
            5,
        );
        let e = parse_str("[[mount]]\nkind = \"sqlite\"\nname = \"a\"\nurl = \"sqlite:///tmp/a.db\"\nnotify_channel = \"c\"\n").unwrap_err().0;
        assert!(e.starts_with("test.toml:5: `mount.notify_channel`: `notify_channel` is not a setting of sqlite mounts"), "{e}");
        // The provider's own range, checked once: 1 TiB is allowed, more is not.
        let ok = parse_str(
            "[[mount]]\nkind = \"postgres\"\nname = \"a\"\nurl = \"postgres://h/d\"\nmax_bytes = \"1TiB\"\n",
        );
        assert!(ok.is_ok(), "{ok:?}");
        let e = parse_str("[[mount]]\nkind = \"postgres\"\nname = \"a\"\nurl = \"postgres://h/d\"\nmax_bytes = \"2TiB\"\n").unwrap_err().0;
        assert!(e.starts_with("test.toml:5: `mount.max_bytes`"), "{e}");
        let e = parse_str(
            "[[mount]]\nkind = \"sqlite\"\nname = \"bad name\"\nurl = \"sqlite:///tmp/a.db\"\n",
        )
        .unwrap_err()
        .0;
        assert!(e.starts_with("test.toml:3: `mount.name`"), "{e}");
    }

    /// A provider's range and pattern checks run once, in its `validate`, and still point at
    /// the line of the value that failed.
    #[test]
    fn validation_errors_point_at_their_line() {
        let e = parse_str("[[mount]]\nkind = \"git\"\nrepo = \"/tmp\"\npoll_interval_ms = 5\n")
            .unwrap_err()
            .0;
        assert_eq!(
            e,
            "test.toml:4: `mount.poll_interval_ms`: 5 is out of range; allowed 100..=3600000"
        );
        let e = parse_str(
            "[[mount]]\nkind = \"files\"\nroot = \"/tmp\"\ndeny = [\n  \"*.a\",\n  \"[z-a]\",\n]\n",
        )
        .unwrap_err()
        .0;
        assert!(
            e.starts_with("test.toml:6: `mount.deny.1`: bad pattern \"[z-a]\""),
            "{e}"
        );
        let e = parse_str("[[mount]]\nkind = \"files\"\nroot = \"/tmp\"\n[[mount.template]]\nuri_template = \"a.md\"\nname = \"a\"\n[[mount.template]]\nname = \"b\"\nuri_template = \"{x\"\n")
            .unwrap_err()
            .0;
        assert!(
            e.starts_with("test.toml:9: `mount.template.1.uri_template`"),
            "{e}"
        );
        let e = parse_str("[[mount]]\nkind = \"sqlite\"\nname = \"a\"\nurl = \"sqlite:///tmp/a.db\"\nmax_rows = -1\n")
            .unwrap_err()
            .0;
        assert_eq!(e, "test.toml:5: `mount.max_rows`: -1 must not be negative");
    }

    /// git and s3 mounts take `deny` as files mounts do, checked the same way.
    #[test]
    fn git_and_s3_mounts_take_deny_patterns() {
        let c = parse_str("[[mount]]\nkind = \"git\"\nrepo = \"/tmp\"\ndeny = [\"reports/private/\"]\n[[mount]]\nkind = \"s3\"\nbucket = \"bkt\"\nregion = \"us-east-1\"\ndeny = [\"exports/raw/\"]\n").unwrap();
        let git = format!("{:?}", c.mounts[0].spec);
        assert!(git.contains("reports/private/"), "{git}");
        let s3 = format!("{:?}", c.mounts[1].spec);
        assert!(s3.contains("exports/raw/"), "{s3}");
        for (kind, rest) in [
            ("git", "repo = \"/tmp\""),
            ("s3", "bucket = \"bkt\"\nregion = \"us-east-1\""),
        ] {
            let e = parse_str(&format!(
                "[[mount]]\nkind = \"{kind}\"\n{rest}\ndeny = [\n  \"*.a\",\n  \"[z-a]\",\n]\n"
            ))
            .unwrap_err()
            .0;
            assert!(
                e.contains("`mount.deny.1`: bad pattern \"[z-a]\""),
                "{kind}: {e}"
            );
        }
    }

    #[cfg(feature = "conformance")]
    #[test]
    fn conformance_refuses_every_setting() {
        refused(
            "[[mount]]\nkind = \"conformance\"\nroot = \"/tmp\"\n",
            "root",
            3,
        );
        assert!(parse_str("[[mount]]\nkind = \"conformance\"\nscope = \"s\"\n").is_ok());
    }
}
