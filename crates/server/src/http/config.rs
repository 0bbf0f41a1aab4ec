//! `[http]` and `[http.auth]`: the Streamable HTTP transport's settings, read and validated
//! here where the transport defines them, as a provider reads its mount table. The binary
//! hands over the table; every error names the file, the line and the key.

use std::time::Duration;

use mcpr_core::config::{ConfigError, ConfigFile, ConfigTable, IntOrString};
use serde::Deserialize;
use toml::Spanned;

use crate::MAX_READ_LIMIT;

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
    /// Resolved bearer tokens with their scopes (`None` = every mount) and the name the
    /// config gives them (the identity of their holders).
    pub tokens: Vec<(String, Option<Vec<String>>, Option<String>)>,
    /// OAuth 2.1 resource-server mode.
    pub jwt: Option<crate::http::JwtSettings>,
    /// `json_response`.
    pub json_response: Option<bool>,
    /// Limits.
    pub limits: crate::http::HttpLimits,
}

/// The keys of `[http]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpToml {
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
    body_timeout_ms: Option<Spanned<IntOrString>>,
    auth: Option<AuthToml>,
}

/// `[http.auth]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AuthToml {
    #[serde(default)]
    bearer_tokens: Vec<Spanned<String>>,
    issuer: Option<Spanned<String>>,
    jwks_url: Option<Spanned<String>>,
    audience: Option<Spanned<String>>,
    leeway_s: Option<Spanned<IntOrString>>,
    #[serde(default)]
    required_scopes: Vec<String>,
    #[serde(default)]
    scoped_token: Vec<ScopedTokenToml>,
}

/// One `[[http.auth.scoped_token]]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScopedTokenToml {
    token: Spanned<String>,
    scopes: Vec<String>,
    name: Option<Spanned<String>>,
}

impl HttpConfig {
    /// Read and validate `[http]` (with `[http.auth]`), its keys named `http.…` at their
    /// line.
    pub fn from_table(table: &ConfigTable<'_>) -> Result<Self, ConfigError> {
        let h: HttpToml = table.parse()?;
        http_config(table.file(), h)
    }
}

fn http_config(cx: &ConfigFile<'_>, h: HttpToml) -> Result<HttpConfig, ConfigError> {
    let mut out = HttpConfig::default();
    if let Some(v) = &h.listen {
        let s = cx.expand(v, "http.listen")?;
        out.listen = Some(match parse_listen(&s) {
            Ok(a) => a,
            Err(e) => return cx.err(v.span(), "http.listen", e),
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
        l.max_body_bytes = cx.size(v, "http.max_body_bytes", MAX_READ_LIMIT)? as usize;
    }
    if let Some(v) = &h.max_concurrent_requests {
        l.max_concurrent_requests =
            cx.int(v, "http.max_concurrent_requests", 1..=1_000_000)? as usize;
    }
    if let Some(v) = &h.rate_limit_per_second {
        l.rate_limit_per_second = cx.int(v, "http.rate_limit_per_second", 0..=1_000_000)? as f64;
    }
    if let Some(v) = &h.rate_limit_burst {
        l.rate_limit_burst = cx.int(v, "http.rate_limit_burst", 1..=1_000_000)? as u32;
    }
    if let Some(v) = &h.max_sessions {
        l.max_sessions = cx.int(v, "http.max_sessions", 1..=10_000_000)? as usize;
    }
    if let Some(v) = &h.session_idle_timeout_ms {
        l.session_idle_timeout =
            Duration::from_millis(cx.int(v, "http.session_idle_timeout_ms", 1000..=86_400_000)?);
    }
    if let Some(v) = &h.shutdown_grace_ms {
        l.shutdown_grace =
            Duration::from_millis(cx.int(v, "http.shutdown_grace_ms", 0..=600_000)?);
    }
    if let Some(v) = &h.event_store_capacity {
        l.event_store_capacity = cx.int(v, "http.event_store_capacity", 1..=10_000_000)? as usize;
    }
    if let Some(v) = &h.body_timeout_ms {
        l.body_timeout =
            Duration::from_millis(cx.int(v, "http.body_timeout_ms", 100..=3_600_000)?);
    }
    if let Some(auth) = &h.auth {
        for t in &auth.bearer_tokens {
            for tok in token_source(cx, t, "http.auth.bearer_tokens")? {
                out.tokens.push((tok, None, None));
            }
        }
        match (&auth.issuer, &auth.jwks_url, &auth.audience) {
            (None, None, None) => {}
            (Some(iss), Some(jwks), Some(aud)) => {
                let leeway = match &auth.leeway_s {
                    Some(v) => cx.int(v, "http.auth.leeway_s", 0..=600)?,
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
                out.jwt = Some(crate::http::JwtSettings {
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
        // A name is one identity: the tokens of one entry (a file of them, old and new
        // during a rotation) share it, but two entries may not, since their holders would
        // then own each other's sessions whatever their scopes.
        let mut names = std::collections::HashSet::new();
        for spanned in auth.scoped_token.iter().filter_map(|st| st.name.as_ref()) {
            let n = spanned.get_ref();
            if !names.insert(n) {
                return cx.err(
                    spanned.span(),
                    "http.auth.scoped_token.name",
                    format!(
                        "{n:?} names another scoped_token entry too: each entry's name is its holders' identity (their sessions), so names must differ"
                    ),
                );
            }
        }
        for st in &auth.scoped_token {
            let name = st.name.as_ref().map(|n| n.get_ref().clone());
            for tok in token_source(cx, &st.token, "http.auth.scoped_token.token")? {
                out.tokens
                    .push((tok, Some(st.scopes.clone()), name.clone()));
            }
        }
    }
    Ok(out)
}

/// An address to listen on, `IP:PORT`. A bare port, `:PORT` or a host name (`localhost:8080`)
/// is refused with the address to write instead: names are not looked up, and a bare port
/// would leave open whether every interface was meant.
pub fn parse_listen(s: &str) -> Result<std::net::SocketAddr, String> {
    if let Ok(a) = s.trim().parse() {
        return Ok(a);
    }
    let t = s.trim();
    let port = t.rsplit_once(':').map_or(t, |(_, p)| p).parse::<u16>().ok();
    Err(match port {
        Some(p) => format!(
            "{t:?} is not an IP address and port: use 127.0.0.1:{p} (this machine only), or 0.0.0.0:{p} for every interface (which needs [http.auth])"
        ),
        None => format!("{t:?} is not an IP address and port like 127.0.0.1:8080"),
    })
}

/// Resolve a token source: `env:NAME` (the variable's value) or `file:PATH` (one token per
/// non-empty line, `#` comments allowed). Tokens never appear literally in the config, so the
/// file can be shared and committed.
fn token_source(
    cx: &ConfigFile<'_>,
    v: &Spanned<String>,
    key: &str,
) -> Result<Vec<String>, ConfigError> {
    let s = v.get_ref();
    if let Some(name) = s.strip_prefix("env:") {
        return match cx.env(name) {
            Some(t) if !t.trim().is_empty() => Ok(vec![t.trim().to_owned()]),
            _ => cx.err(
                v.span(),
                key,
                format!("environment variable `{name}` is not set or empty"),
            ),
        };
    }
    if let Some(path) = s.strip_prefix("file:") {
        // Relative to the config file, like every path in it.
        let path = cx.resolve_path(path);
        let path = path.display();
        return match std::fs::read_to_string(path.to_string()) {
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
