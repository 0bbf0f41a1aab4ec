//! Loading `mcp-resources.toml`: strict parsing (unknown keys and bad values are errors that
//! name the file, line and key), `${NAME}` expansion from the environment, and conversion
//! into provider configs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use mcpr_core::{CacheHints, CacheScope};
use mcpr_provider_files::{FilesConfig, ListWatchMode, TemplateConfig};
use mcpr_provider_sql::SqlKind;
use serde::Deserialize;
use toml::Spanned;

/// The largest `max_read_bytes` accepted. Past this a single stdio message (base64 adds a
/// third) outgrows what common clients buffer; windows are the way to read more.
pub const MAX_READ_LIMIT: u64 = 64 * 1024 * 1024;

/// A validated configuration.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// `[server]`.
    pub server: mcpr_server::Settings,
    /// The mounts in order.
    pub mounts: Vec<Mount>,
    /// `[http]`, when present.
    pub http: Option<HttpConfig>,
}

/// One mount: what it serves, and who may see it over HTTP.
#[derive(Debug, Clone)]
pub struct Mount {
    /// The provider configuration.
    pub source: MountConfig,
    /// The token scope needed to see it over authenticated HTTP.
    pub scope: Option<String>,
}

/// `[http]`: the Streamable HTTP transport.
#[derive(Debug, Clone, Default)]
pub struct HttpConfig {
    /// `listen`, when given.
    pub listen: Option<std::net::SocketAddr>,
    /// `path`.
    pub path: Option<String>,
    /// `allowed_hosts`.
    pub allowed_hosts: Option<Vec<String>>,
    /// `allowed_origins`.
    pub allowed_origins: Option<Vec<String>>,
    /// `public_url`: this endpoint's externally visible URL (for OAuth metadata).
    pub public_url: Option<String>,
    /// Resolved bearer tokens with their scopes (`None` = every mount).
    pub tokens: Vec<(String, Option<Vec<String>>)>,
    /// OAuth 2.1 resource-server mode.
    pub jwt: Option<mcpr_server::http::JwtSettings>,
    /// `json_response`.
    pub json_response: Option<bool>,
    /// Limits.
    pub limits: mcpr_server::http::HttpLimits,
}

/// One validated mount.
#[derive(Debug, Clone)]
pub enum MountConfig {
    /// `kind = "files"`.
    Files(FilesConfig),
    /// `kind = "conformance"`: the official conformance suite's fixtures (tests only).
    Conformance,
    /// `kind = "git"`.
    Git(mcpr_provider_git::GitConfig),
    /// `kind = "sqlite"`, `"postgres"` or `"mysql"`.
    Sql(mcpr_provider_sql::SqlConfig),
}

impl MountConfig {
    /// The kind as written in config.
    pub fn kind(&self) -> &'static str {
        match self {
            MountConfig::Files(_) => "files",
            MountConfig::Conformance => "conformance",
            MountConfig::Git(_) => "git",
            MountConfig::Sql(c) => c.kind.as_str(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    server: Option<RawServer>,
    http: Option<RawHttp>,
    #[serde(default)]
    mount: Vec<Spanned<RawMount>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    listen: Option<Spanned<String>>,
    path: Option<Spanned<String>>,
    allowed_hosts: Option<Vec<Spanned<String>>>,
    allowed_origins: Option<Vec<Spanned<String>>>,
    public_url: Option<Spanned<String>>,
    json_response: Option<bool>,
    max_body_bytes: Option<Spanned<IntOrString>>,
    max_concurrent_requests: Option<Spanned<IntOrString>>,
    rate_limit_per_second: Option<Spanned<IntOrString>>,
    rate_limit_burst: Option<Spanned<IntOrString>>,
    max_sessions: Option<Spanned<IntOrString>>,
    session_idle_timeout_ms: Option<Spanned<IntOrString>>,
    shutdown_grace_ms: Option<Spanned<IntOrString>>,
    event_store_capacity: Option<Spanned<IntOrString>>,
    auth: Option<RawAuth>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuth {
    #[serde(default)]
    bearer_tokens: Vec<Spanned<String>>,
    issuer: Option<Spanned<String>>,
    jwks_url: Option<Spanned<String>>,
    audience: Option<Spanned<String>>,
    leeway_s: Option<Spanned<IntOrString>>,
    #[serde(default)]
    required_scopes: Vec<String>,
    #[serde(default)]
    scoped_token: Vec<RawScopedToken>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScopedToken {
    token: Spanned<String>,
    scopes: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    name: Option<Spanned<String>>,
    page_size: Option<Spanned<IntOrString>>,
    max_read_bytes: Option<Spanned<IntOrString>>,
    request_timeout_ms: Option<Spanned<IntOrString>>,
    max_subscriptions_per_session: Option<Spanned<IntOrString>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum IntOrString {
    Int(i64),
    Str(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMount {
    kind: Spanned<String>,
    root: Option<Spanned<String>>,
    deny: Option<Vec<Spanned<String>>>,
    respect_gitignore: Option<bool>,
    hidden: Option<bool>,
    debounce_ms: Option<Spanned<IntOrString>>,
    list_changed: Option<Spanned<String>>,
    poll_interval_ms: Option<Spanned<IntOrString>>,
    ttl_ms: Option<Spanned<IntOrString>>,
    cache_scope: Option<Spanned<String>>,
    scope: Option<Spanned<String>>,
    #[serde(default)]
    template: Vec<RawTemplate>,
    // git
    repo: Option<Spanned<String>>,
    name: Option<Spanned<String>>,
    default: Option<bool>,
    default_ref: Option<Spanned<String>>,
    watch: Option<Spanned<String>>,
    last_modified_depth: Option<Spanned<IntOrString>>,
    history_scan_limit: Option<Spanned<IntOrString>>,
    // sqlite, postgres, mysql
    url: Option<Spanned<String>>,
    schema: Option<Spanned<String>>,
    notify_channel: Option<Spanned<String>>,
    page_size: Option<Spanned<IntOrString>>,
    max_rows: Option<Spanned<IntOrString>>,
    max_bytes: Option<Spanned<IntOrString>>,
    statement_timeout_ms: Option<Spanned<IntOrString>>,
    max_connections: Option<Spanned<IntOrString>>,
    #[serde(default)]
    query: Vec<RawQuery>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawQuery {
    uri: Spanned<String>,
    sql: Spanned<String>,
    description: Option<String>,
    #[serde(default)]
    params: std::collections::BTreeMap<String, RawParam>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawParam {
    #[serde(rename = "enum")]
    allowed: Option<Vec<String>>,
    pattern: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    /// `table.column` (or `schema.table.column`) whose values completion suggests.
    from: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTemplate {
    uri_template: Spanned<String>,
    name: Spanned<String>,
    description: Option<Spanned<String>>,
}

/// A config error: the message already names file, line and key.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

struct Ctx<'a> {
    file: &'a Path,
    text: &'a str,
    env: &'a dyn Fn(&str) -> Option<String>,
}

impl Ctx<'_> {
    fn line(&self, span: std::ops::Range<usize>) -> usize {
        self.text[..span.start.min(self.text.len())]
            .bytes()
            .filter(|&b| b == b'\n')
            .count()
            + 1
    }

    fn err<T>(
        &self,
        span: std::ops::Range<usize>,
        key: &str,
        msg: impl std::fmt::Display,
    ) -> Result<T, ConfigError> {
        Err(ConfigError(format!(
            "{}:{}: `{key}`: {msg}",
            self.file.display(),
            self.line(span)
        )))
    }

    /// Expand `${NAME}` (and `$$` for a literal `$`) in a string value.
    fn expand(&self, v: &Spanned<String>, key: &str) -> Result<String, ConfigError> {
        let s = v.get_ref();
        let mut out = String::with_capacity(s.len());
        let mut rest = s.as_str();
        while let Some(i) = rest.find('$') {
            out.push_str(&rest[..i]);
            let tail = &rest[i..];
            if let Some(t) = tail.strip_prefix("$$") {
                out.push('$');
                rest = t;
            } else if let Some(t) = tail.strip_prefix("${") {
                let Some(end) = t.find('}') else {
                    return self.err(
                        v.span(),
                        key,
                        "unclosed `${` (write `$$` for a literal `$`)",
                    );
                };
                let name = &t[..end];
                if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                {
                    return self.err(
                        v.span(),
                        key,
                        format!("`${{{name}}}` is not a valid environment variable name"),
                    );
                }
                match (self.env)(name) {
                    Some(val) => out.push_str(&val),
                    None => {
                        return self.err(
                            v.span(),
                            key,
                            format!("environment variable `{name}` is not set"),
                        );
                    }
                }
                rest = &t[end + 1..];
            } else {
                out.push('$');
                rest = &tail[1..];
            }
        }
        out.push_str(rest);
        Ok(out)
    }

    fn int(
        &self,
        v: &Spanned<IntOrString>,
        key: &str,
        min: i64,
        max: i64,
    ) -> Result<u64, ConfigError> {
        let n = match v.get_ref() {
            IntOrString::Int(n) => *n,
            IntOrString::Str(s) => {
                let s = self.expand(&Spanned::new(v.span(), s.clone()), key)?;
                match s.trim().parse::<i64>() {
                    Ok(n) => n,
                    Err(_) => {
                        return self.err(
                            v.span(),
                            key,
                            format!("expected a whole number, got {s:?}"),
                        );
                    }
                }
            }
        };
        if n < min || n > max {
            return self.err(
                v.span(),
                key,
                format!("{n} is out of range; allowed {min}..={max}"),
            );
        }
        Ok(n as u64)
    }

    fn size(&self, v: &Spanned<IntOrString>, key: &str) -> Result<u64, ConfigError> {
        let n = match v.get_ref() {
            IntOrString::Int(n) if *n > 0 => *n as u64,
            IntOrString::Int(n) => return self.err(v.span(), key, format!("{n} must be positive")),
            IntOrString::Str(s) => {
                let s = self.expand(&Spanned::new(v.span(), s.clone()), key)?;
                match parse_size(&s) {
                    Some(n) if n > 0 => n,
                    _ => {
                        return self.err(v.span(), key, format!(
                            "{s:?} is not a size; write bytes or a number with KiB, MiB, GiB, KB, MB or GB"
                        ));
                    }
                }
            }
        };
        if n > MAX_READ_LIMIT {
            return self.err(
                v.span(),
                key,
                format!("{n} bytes is more than the maximum of {MAX_READ_LIMIT} bytes (64MiB)"),
            );
        }
        Ok(n)
    }
}

/// `8MiB`, `512 KiB`, `10MB`, `1048576`.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" | "k" => 1 << 10,
        "mib" | "m" => 1 << 20,
        "gib" | "g" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// Read and validate the file at `path`.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError(format!("{}: cannot read config: {e}", path.display())))?;
    parse(path, &text, &|name| std::env::var(name).ok())
}

/// Validate config `text` (from `file`, for messages) with environment lookup `env`.
pub fn parse(
    file: &Path,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let raw: RawConfig =
        toml::from_str(text).map_err(|e| ConfigError(format!("{}: {e}", file.display())))?;
    let cx = Ctx { file, text, env };
    let base = file.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut cfg = Config::default();
    if let Some(s) = raw.server {
        if let Some(n) = &s.name {
            cfg.server.name = cx.expand(n, "server.name")?;
        }
        if let Some(p) = &s.page_size {
            cfg.server.page_size = cx.int(p, "server.page_size", 1, 1000)? as usize;
        }
        if let Some(m) = &s.max_read_bytes {
            cfg.server.max_read_bytes = cx.size(m, "server.max_read_bytes")?;
        }
        if let Some(v) = &s.request_timeout_ms {
            cfg.server.request_timeout =
                Duration::from_millis(cx.int(v, "server.request_timeout_ms", 1, 3_600_000)?);
        }
        if let Some(v) = &s.max_subscriptions_per_session {
            cfg.server.max_subscriptions_per_session =
                cx.int(v, "server.max_subscriptions_per_session", 1, 1_000_000)? as usize;
        }
    }
    if let Some(h) = raw.http {
        cfg.http = Some(http_config(&cx, h)?);
    }
    for m in raw.mount {
        let m = m.into_inner();
        let kind = m.kind.get_ref().as_str();
        let scope = m
            .scope
            .as_ref()
            .map(|v| cx.expand(v, "mount.scope"))
            .transpose()?;
        let source = match kind {
            "files" => MountConfig::Files(files_mount(&cx, &base, m)?),
            "conformance" => {
                // The fixtures provider takes no settings; anything else is a mistake.
                if m.root.is_some() || m.deny.is_some() || !m.template.is_empty() {
                    return cx.err(
                        m.kind.span(),
                        "mount.kind",
                        "a conformance mount takes no settings besides `scope`",
                    );
                }
                MountConfig::Conformance
            }
            "git" => MountConfig::Git(git_mount(&cx, &base, m)?),
            "sqlite" => MountConfig::Sql(sql_mount(&cx, &base, m, SqlKind::Sqlite)?),
            "postgres" => MountConfig::Sql(sql_mount(&cx, &base, m, SqlKind::Postgres)?),
            "mysql" => MountConfig::Sql(sql_mount(&cx, &base, m, SqlKind::MySql)?),
            "api" | "web" | "s3" => {
                return cx.err(
                    m.kind.span(),
                    "mount.kind",
                    format!(
                        "mount kind `{kind}` is not available in this version; available: files, git, sqlite, postgres, mysql"
                    ),
                );
            }
            _ => {
                return cx.err(
                    m.kind.span(),
                    "mount.kind",
                    format!(
                        "unknown mount kind `{kind}`; available: files, git, sqlite, postgres, mysql"
                    ),
                );
            }
        };
        cfg.mounts.push(Mount { source, scope });
    }
    Ok(cfg)
}

fn http_config(cx: &Ctx<'_>, h: RawHttp) -> Result<HttpConfig, ConfigError> {
    let mut out = HttpConfig::default();
    if let Some(v) = &h.listen {
        let s = cx.expand(v, "http.listen")?;
        out.listen = Some(match s.parse() {
            Ok(a) => a,
            Err(_) => {
                return cx.err(
                    v.span(),
                    "http.listen",
                    format!("{s:?} is not an address like 127.0.0.1:8080"),
                );
            }
        });
    }
    if let Some(v) = &h.path {
        let p = cx.expand(v, "http.path")?;
        if !p.starts_with('/') {
            return cx.err(v.span(), "http.path", format!("{p:?} must start with '/'"));
        }
        out.path = Some(p);
    }
    if let Some(list) = &h.allowed_hosts {
        out.allowed_hosts = Some(
            list.iter()
                .map(|v| cx.expand(v, "http.allowed_hosts"))
                .collect::<Result<_, _>>()?,
        );
    }
    if let Some(list) = &h.allowed_origins {
        let mut origins = Vec::new();
        for v in list {
            let o = cx.expand(v, "http.allowed_origins")?;
            if !o.contains("://") && o != "null" {
                return cx.err(
                    v.span(),
                    "http.allowed_origins",
                    format!("{o:?} needs a scheme, like https://app.example.com"),
                );
            }
            origins.push(o);
        }
        out.allowed_origins = Some(origins);
    }
    if let Some(v) = &h.public_url {
        out.public_url = Some(cx.expand(v, "http.public_url")?);
    }
    out.json_response = h.json_response;
    let l = &mut out.limits;
    if let Some(v) = &h.max_body_bytes {
        l.max_body_bytes = cx.size(v, "http.max_body_bytes")? as usize;
    }
    if let Some(v) = &h.max_concurrent_requests {
        l.max_concurrent_requests =
            cx.int(v, "http.max_concurrent_requests", 1, 1_000_000)? as usize;
    }
    if let Some(v) = &h.rate_limit_per_second {
        l.rate_limit_per_second = cx.int(v, "http.rate_limit_per_second", 0, 1_000_000)? as f64;
    }
    if let Some(v) = &h.rate_limit_burst {
        l.rate_limit_burst = cx.int(v, "http.rate_limit_burst", 1, 1_000_000)? as u32;
    }
    if let Some(v) = &h.max_sessions {
        l.max_sessions = cx.int(v, "http.max_sessions", 1, 10_000_000)? as usize;
    }
    if let Some(v) = &h.session_idle_timeout_ms {
        l.session_idle_timeout =
            Duration::from_millis(cx.int(v, "http.session_idle_timeout_ms", 1000, 86_400_000)?);
    }
    if let Some(v) = &h.shutdown_grace_ms {
        l.shutdown_grace =
            Duration::from_millis(cx.int(v, "http.shutdown_grace_ms", 0, 600_000)?);
    }
    if let Some(v) = &h.event_store_capacity {
        l.event_store_capacity = cx.int(v, "http.event_store_capacity", 1, 10_000_000)? as usize;
    }
    if let Some(auth) = &h.auth {
        for t in &auth.bearer_tokens {
            for tok in token_source(cx, t, "http.auth.bearer_tokens")? {
                out.tokens.push((tok, None));
            }
        }
        match (&auth.issuer, &auth.jwks_url, &auth.audience) {
            (None, None, None) => {}
            (Some(iss), Some(jwks), Some(aud)) => {
                let leeway = match &auth.leeway_s {
                    Some(v) => cx.int(v, "http.auth.leeway_s", 0, 600)?,
                    None => 30,
                };
                let jwks_url = cx.expand(jwks, "http.auth.jwks_url")?;
                if !jwks_url.starts_with("https://") && !jwks_url.starts_with("http://") {
                    return cx.err(
                        jwks.span(),
                        "http.auth.jwks_url",
                        format!("{jwks_url:?} is not an http(s) URL"),
                    );
                }
                out.jwt = Some(mcpr_server::http::JwtSettings {
                    issuer: cx.expand(iss, "http.auth.issuer")?,
                    jwks_url,
                    audience: cx.expand(aud, "http.auth.audience")?,
                    leeway: Duration::from_secs(leeway),
                    required_scopes: auth.required_scopes.clone(),
                });
            }
            _ => {
                let span = auth
                    .issuer
                    .as_ref()
                    .or(auth.jwks_url.as_ref())
                    .or(auth.audience.as_ref())
                    .map(|v| v.span())
                    .unwrap_or(0..0);
                return cx.err(
                    span,
                    "http.auth",
                    "OAuth mode needs all three of `issuer`, `jwks_url` and `audience`",
                );
            }
        }
        for st in &auth.scoped_token {
            for tok in token_source(cx, &st.token, "http.auth.scoped_token.token")? {
                out.tokens.push((tok, Some(st.scopes.clone())));
            }
        }
    }
    Ok(out)
}

/// Resolve a token source: `env:NAME` (the variable's value) or `file:PATH` (one token per
/// non-empty line, `#` comments allowed). Tokens never appear literally in the config, so the
/// file can be shared and committed.
fn token_source(cx: &Ctx<'_>, v: &Spanned<String>, key: &str) -> Result<Vec<String>, ConfigError> {
    let s = v.get_ref();
    if let Some(name) = s.strip_prefix("env:") {
        return match (cx.env)(name) {
            Some(t) if !t.trim().is_empty() => Ok(vec![t.trim().to_owned()]),
            _ => cx.err(
                v.span(),
                key,
                format!("environment variable `{name}` is not set or empty"),
            ),
        };
    }
    if let Some(path) = s.strip_prefix("file:") {
        return match std::fs::read_to_string(path) {
            Ok(text) => {
                let toks: Vec<String> = text
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(str::to_owned)
                    .collect();
                if toks.is_empty() {
                    cx.err(v.span(), key, format!("{path} holds no token"))
                } else {
                    Ok(toks)
                }
            }
            Err(e) => cx.err(v.span(), key, format!("cannot read {path}: {e}")),
        };
    }
    cx.err(
        v.span(),
        key,
        "a token source must be `env:NAME` or `file:PATH`; tokens do not belong in the config file",
    )
}

/// Keys that belong to one kind of mount; a key of another kind is a mistake worth naming.
fn reject_foreign(
    cx: &Ctx<'_>,
    kind: &str,
    present: &[(&str, Option<std::ops::Range<usize>>)],
) -> Result<(), ConfigError> {
    for (key, span) in present {
        if let Some(span) = span {
            return cx.err(
                span.clone(),
                &format!("mount.{key}"),
                format!("`{key}` is not a setting of {kind} mounts"),
            );
        }
    }
    Ok(())
}

fn git_mount(
    cx: &Ctx<'_>,
    base: &Path,
    m: RawMount,
) -> Result<mcpr_provider_git::GitConfig, ConfigError> {
    use mcpr_provider_git::{GitConfig, RefWatchMode};
    reject_foreign(
        cx,
        "git",
        &[
            ("root", m.root.as_ref().map(|v| v.span())),
            (
                "deny",
                m.deny.as_ref().and_then(|d| d.first()).map(|v| v.span()),
            ),
            ("list_changed", m.list_changed.as_ref().map(|v| v.span())),
        ],
    )?;
    let Some(repo) = &m.repo else {
        return cx.err(
            m.kind.span(),
            "mount.repo",
            "a git mount needs `repo`, the repository to serve",
        );
    };
    let repo_s = cx.expand(repo, "mount.repo")?;
    let mut path = PathBuf::from(&repo_s);
    if path.is_relative() {
        path = base.join(path);
    }
    if !path.is_dir() {
        return cx.err(
            repo.span(),
            "mount.repo",
            format!("{} is not a directory", path.display()),
        );
    }
    let mut g = GitConfig::new(path);
    if let Some(v) = &m.name {
        g.name = Some(cx.expand(v, "mount.name")?);
        // A named mount is reached through git://@{name}/… unless it is marked default.
        g.default = false;
    }
    if let Some(d) = m.default {
        g.default = d;
    }
    if let Some(v) = &m.default_ref {
        g.default_ref = Some(cx.expand(v, "mount.default_ref")?);
    }
    if let Some(v) = &m.debounce_ms {
        g.debounce = Duration::from_millis(cx.int(v, "mount.debounce_ms", 0, 60_000)?);
    }
    if let Some(v) = &m.poll_interval_ms {
        g.poll_interval =
            Duration::from_millis(cx.int(v, "mount.poll_interval_ms", 100, 3_600_000)?);
    }
    if let Some(v) = &m.watch {
        g.watch = match cx.expand(v, "mount.watch")?.as_str() {
            "auto" => RefWatchMode::Auto,
            "poll" => RefWatchMode::Poll,
            "off" => RefWatchMode::Off,
            other => {
                return cx.err(
                    v.span(),
                    "mount.watch",
                    format!("{other:?} is not one of \"auto\", \"poll\", \"off\""),
                );
            }
        };
    }
    if let Some(v) = &m.last_modified_depth {
        g.last_modified_depth = cx.int(v, "mount.last_modified_depth", 0, 1_000_000)? as usize;
    }
    if let Some(v) = &m.history_scan_limit {
        g.history_scan_limit = cx.int(v, "mount.history_scan_limit", 1, 10_000_000)? as usize;
    }
    g.cache = cache_hints(cx, &m)?;
    Ok(g)
}

fn sql_mount(
    cx: &Ctx<'_>,
    base: &Path,
    m: RawMount,
    kind: SqlKind,
) -> Result<mcpr_provider_sql::SqlConfig, ConfigError> {
    use mcpr_provider_sql::{NamedQuery, ParamSpec, ParamType, SqlConfig};
    let k = kind.as_str();
    reject_foreign(
        cx,
        k,
        &[
            ("root", m.root.as_ref().map(|v| v.span())),
            ("repo", m.repo.as_ref().map(|v| v.span())),
            ("default_ref", m.default_ref.as_ref().map(|v| v.span())),
            (
                "schema",
                m.schema
                    .as_ref()
                    .filter(|_| kind != SqlKind::Postgres)
                    .map(|v| v.span()),
            ),
            (
                "notify_channel",
                m.notify_channel
                    .as_ref()
                    .filter(|_| kind != SqlKind::Postgres)
                    .map(|v| v.span()),
            ),
        ],
    )?;
    let example = match kind {
        SqlKind::Sqlite => "sqlite://PATH",
        SqlKind::Postgres => "postgres://user:${PGPASSWORD}@host:5432/database",
        SqlKind::MySql => "mysql://user:${MYSQL_PASSWORD}@host:3306/database",
    };
    let (Some(name), Some(url)) = (&m.name, &m.url) else {
        return cx.err(
            m.kind.span(),
            "mount",
            format!("a {k} mount needs `name` (db://{{name}}/…) and `url` ({example})"),
        );
    };
    let name = cx.expand(name, "mount.name")?;
    let mut url_s = cx.expand(url, "mount.url")?;
    if SqlKind::of_url(&url_s) != Some(kind) {
        // Only the scheme is echoed: the URL may hold a password.
        let scheme = url_s.split("://").next().unwrap_or_default();
        let scheme = if scheme.len() == url_s.len() {
            "(none)"
        } else {
            scheme
        };
        return cx.err(
            url.span(),
            "mount.url",
            format!("a {k} mount needs a URL like {example}; this one's scheme is {scheme}"),
        );
    }
    if let Some(path) = url_s.strip_prefix("sqlite://")
        && !path.starts_with('/')
    {
        // A relative database path is relative to the config file, like every other path
        // (a leading `./` dropped, so the mount's label reads `examples/app.db`).
        url_s = format!(
            "sqlite://{}",
            base.join(path.trim_start_matches("./")).display()
        );
    }
    let mut c = SqlConfig::new(name, url_s);
    c.kind = kind;
    if let Some(v) = &m.schema {
        c.default_schema = cx.expand(v, "mount.schema")?;
    }
    if let Some(v) = &m.notify_channel {
        c.notify_channel = Some(cx.expand(v, "mount.notify_channel")?);
    }
    if let Some(v) = &m.poll_interval_ms {
        c.poll_interval =
            Duration::from_millis(cx.int(v, "mount.poll_interval_ms", 10, 3_600_000)?);
    }
    if let Some(v) = &m.page_size {
        c.page_size = cx.int(v, "mount.page_size", 1, 10_000)? as usize;
    }
    if let Some(v) = &m.max_rows {
        c.max_rows = cx.int(v, "mount.max_rows", 1, 1_000_000)? as usize;
    }
    if let Some(v) = &m.max_bytes {
        c.max_bytes = cx.size(v, "mount.max_bytes")?;
    }
    if let Some(v) = &m.statement_timeout_ms {
        c.statement_timeout =
            Duration::from_millis(cx.int(v, "mount.statement_timeout_ms", 10, 600_000)?);
    }
    if let Some(v) = &m.max_connections {
        c.max_connections = cx.int(v, "mount.max_connections", 1, 64)? as usize;
    }
    c.cache = cache_hints(cx, &m)?;
    for q in &m.query {
        let mut params = std::collections::BTreeMap::new();
        for (k, p) in &q.params {
            let kind = match p.kind.as_deref() {
                None | Some("text") => ParamType::Text,
                Some("integer") => ParamType::Integer,
                Some(other) => {
                    return cx.err(
                        q.uri.span(),
                        "mount.query.params",
                        format!("parameter `{k}`: type {other:?} is not \"text\" or \"integer\""),
                    );
                }
            };
            let complete_from = match p.from.as_deref() {
                None => None,
                Some(f) => match f.rsplit_once('.') {
                    Some((table, column)) if !table.is_empty() && !column.is_empty() => {
                        Some((table.to_owned(), column.to_owned()))
                    }
                    _ => {
                        return cx.err(
                            q.uri.span(),
                            "mount.query.params",
                            format!(
                                "parameter `{k}`: from = {f:?} must be \"table.column\" (or \"schema.table.column\")"
                            ),
                        );
                    }
                },
            };
            params.insert(
                k.clone(),
                ParamSpec {
                    kind,
                    allowed: p.allowed.clone(),
                    pattern: p.pattern.clone(),
                    complete_from,
                },
            );
        }
        c.queries.push(NamedQuery {
            uri: cx.expand(&q.uri, "mount.query.uri")?,
            sql: q.sql.get_ref().clone(),
            params,
            description: q.description.clone(),
        });
    }
    Ok(c)
}

fn cache_hints(cx: &Ctx<'_>, m: &RawMount) -> Result<CacheHints, ConfigError> {
    let mut cache = CacheHints::default();
    if let Some(v) = &m.ttl_ms {
        cache.ttl_ms = cx.int(v, "mount.ttl_ms", 0, i64::from(u32::MAX))?;
    }
    if let Some(v) = &m.cache_scope {
        cache.scope = match cx.expand(v, "mount.cache_scope")?.as_str() {
            "public" => CacheScope::Public,
            "private" => CacheScope::Private,
            other => {
                return cx.err(
                    v.span(),
                    "mount.cache_scope",
                    format!("{other:?} is not \"public\" or \"private\""),
                );
            }
        };
    }
    Ok(cache)
}

fn files_mount(cx: &Ctx<'_>, base: &Path, m: RawMount) -> Result<FilesConfig, ConfigError> {
    let Some(root) = &m.root else {
        return cx.err(
            m.kind.span(),
            "mount.root",
            "a files mount needs `root`, the directory to serve",
        );
    };
    let root_s = cx.expand(root, "mount.root")?;
    let mut root_path = PathBuf::from(&root_s);
    if root_path.is_relative() {
        // Relative roots are relative to the config file, not to wherever the server started.
        root_path = base.join(root_path);
    }
    match std::fs::metadata(&root_path) {
        Ok(md) if md.is_dir() => {}
        Ok(_) => {
            return cx.err(
                root.span(),
                "mount.root",
                format!("{} is not a directory", root_path.display()),
            );
        }
        Err(e) => {
            return cx.err(
                root.span(),
                "mount.root",
                format!("{}: {e}", root_path.display()),
            );
        }
    }
    let mut fc = FilesConfig::new(root_path);
    for d in m.deny.iter().flatten() {
        let pat = cx.expand(d, "mount.deny")?;
        if let Err(e) = ignore::gitignore::GitignoreBuilder::new("/").add_line(None, &pat) {
            return cx.err(d.span(), "mount.deny", format!("bad pattern {pat:?}: {e}"));
        }
        fc.deny.push(pat);
    }
    if let Some(v) = m.respect_gitignore {
        fc.respect_gitignore = v;
    }
    if let Some(v) = m.hidden {
        fc.hidden = v;
    }
    if let Some(v) = &m.debounce_ms {
        fc.debounce = Duration::from_millis(cx.int(v, "mount.debounce_ms", 0, 60_000)?);
    }
    if let Some(v) = &m.poll_interval_ms {
        fc.poll_interval =
            Duration::from_millis(cx.int(v, "mount.poll_interval_ms", 100, 3_600_000)?);
    }
    if let Some(v) = &m.list_changed {
        fc.list_watch = match cx.expand(v, "mount.list_changed")?.as_str() {
            "auto" => ListWatchMode::Auto,
            "poll" => ListWatchMode::Poll,
            "off" => ListWatchMode::Off,
            other => {
                return cx.err(
                    v.span(),
                    "mount.list_changed",
                    format!("{other:?} is not one of \"auto\", \"poll\", \"off\""),
                );
            }
        };
    }
    fc.cache = cache_hints(cx, &m)?;
    for t in &m.template {
        let uri_template = cx.expand(&t.uri_template, "mount.template.uri_template")?;
        if let Err(e) = mcpr_core::UriTemplate::parse(&uri_template) {
            return cx.err(t.uri_template.span(), "mount.template.uri_template", e);
        }
        fc.templates.push(TemplateConfig {
            uri_template,
            name: cx.expand(&t.name, "mount.template.name")?,
            description: t
                .description
                .as_ref()
                .map(|d| cx.expand(d, "mount.template.description"))
                .transpose()?,
        });
    }
    Ok(fc)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(text: &str) -> Result<Config, ConfigError> {
        parse(Path::new("test.toml"), text, &|n| {
            (n == "DOCS").then(|| "/tmp".to_owned())
        })
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("8MiB"), Some(8 << 20));
        assert_eq!(parse_size("512 KiB"), Some(512 << 10));
        assert_eq!(parse_size("10MB"), Some(10_000_000));
        assert_eq!(parse_size("12"), Some(12));
        assert_eq!(parse_size("8 parsecs"), None);
    }

    #[test]
    fn valid_config_with_env() {
        let c = parse_str("[server]\npage_size = 7\nmax_read_bytes = \"1MiB\"\n[[mount]]\nkind = \"files\"\nroot = \"${DOCS}\"\ndeny = [\"*.sqlite\"]\n").unwrap();
        assert_eq!(c.server.page_size, 7);
        assert_eq!(c.server.max_read_bytes, 1 << 20);
        let MountConfig::Files(f) = &c.mounts[0].source else {
            panic!("expected a files mount");
        };
        assert_eq!(f.root, PathBuf::from("/tmp"));
        assert_eq!(f.deny, vec!["*.sqlite".to_owned()]);
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
            e.contains("test.toml") && e.contains("line 2") && e.contains("nope"),
            "{e}"
        );
        let e = parse_str("[[mount]]\nkind = \"files\"\nroot = \"${MISSING}\"\n")
            .unwrap_err()
            .0;
        assert!(e.contains("test.toml:3") && e.contains("MISSING"), "{e}");
        let e = parse_str("[[mount]]\nkind = \"ftp\"\n").unwrap_err().0;
        assert!(e.contains("test.toml:2") && e.contains("ftp"), "{e}");
        let e = parse_str("[server]\nmax_read_bytes = \"1GiB\"\n")
            .unwrap_err()
            .0;
        assert!(
            e.contains("max_read_bytes") && e.contains("67108864"),
            "{e}"
        );
    }
}
