//! Settings of one `api` or `web` mount: the typed [`HttpConfig`], its one validation, and
//! the `kind = "api" | "web"` tables of the configuration file ([`HttpFactory`]).
//!
//! Header values and URL userinfo are secrets: the `Debug` of every type here prints header
//! names only and URLs without their userinfo, and no message built here echoes them.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mcpr_core::config::{
    ConfigError, IntOrString, MountCommon, MountSpec, MountTable, ProviderFactory, SettingError,
};
use mcpr_core::template::{Operator, Part};
use mcpr_core::{CacheHints, Provider, UriTemplate};
use serde::Deserialize;
use toml::Spanned;

/// Allowed `timeout_ms` (connect plus the whole response, every redirect included).
pub const TIMEOUT_MS: RangeInclusive<u64> = 100..=600_000;
/// Allowed `max_redirects`.
pub const MAX_REDIRECTS: RangeInclusive<u64> = 0..=20;
/// Allowed `poll_interval_ms`.
pub const POLL_INTERVAL_MS: RangeInclusive<u64> = 100..=86_400_000;
/// Allowed `max_poll_requests_per_second`, as for every polling provider.
pub use mcpr_core::poll::MAX_POLL_REQUESTS_PER_SECOND;
/// The default `max_poll_requests_per_second`: gentle on an upstream with its own rate limit,
/// and 300 subscribed upstream URLs at the default 30 s interval.
pub const DEFAULT_MAX_POLL_REQUESTS_PER_SECOND: u32 = 10;
/// Allowed `cache_max_bytes` (1 byte to 16 GiB).
pub const CACHE_MAX_BYTES: RangeInclusive<u64> = 1..=(16 << 30);
/// Allowed `default_ttl_ms` (0: an answer without freshness headers is never reused unchecked).
pub const DEFAULT_TTL_MS: RangeInclusive<u64> = 0..=604_800_000;
/// Allowed `max_convert_bytes` (web: the largest HTML converted to Markdown), 1 KiB to 64 MiB.
pub const MAX_CONVERT_BYTES: RangeInclusive<u64> = 1024..=(64 << 20);
/// Allowed `max_html_depth` (web: element nesting converted as structure; deeper is text).
pub const MAX_HTML_DEPTH: RangeInclusive<u64> = 16..=1024;
/// Allowed `max_conversions` (web: HTML conversions running at once).
pub const MAX_CONVERSIONS: RangeInclusive<u64> = 1..=256;
/// The most endpoints (api) or allow prefixes and pages (web) one mount may have.
pub const MAX_ENTRIES: usize = 10_000;

/// Which of the two kinds a mount is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpKind {
    /// `api://` resources mapped to upstream URLs by configured endpoints.
    Api,
    /// The `https://` (and allowed `http://`) URLs themselves, within allow prefixes.
    Web,
}

impl HttpKind {
    /// The kind as written in config.
    pub fn as_str(self) -> &'static str {
        match self {
            HttpKind::Api => "api",
            HttpKind::Web => "web",
        }
    }
}

/// What a web mount does with `text/html`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HtmlMode {
    /// Convert to Markdown (`text/markdown`): what a model reads best.
    Markdown,
    /// Serve the HTML as the upstream sent it.
    Raw,
}

/// The checks on one template variable of an endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParamSpec {
    /// When set, the value must be one of these (and completion suggests them).
    pub allowed: Option<Vec<String>>,
    /// When set, the whole value must match this regular expression.
    pub pattern: Option<String>,
}

/// One header sent with an endpoint's requests. The value is a secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Header {
    /// The header name.
    pub name: String,
    /// The value, `${NAME}` already expanded.
    pub value: String,
}

impl fmt::Debug for Header {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: <redacted>", self.name)
    }
}

/// One `[[mount.endpoint]]` of an api mount.
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The resource: a fixed `api://…` URI or an RFC 6570 template of one.
    pub uri: String,
    /// The upstream URL or URL template; its variables are the `uri`'s.
    pub url: String,
    /// The resource or template name.
    pub name: String,
    /// What it is.
    pub description: Option<String>,
    /// Overrides the upstream `Content-Type`.
    pub mime_type: Option<String>,
    /// Headers sent with every request (not on redirects to another origin).
    pub headers: Vec<Header>,
    /// Checks per variable; a variable without an entry takes any value.
    pub params: BTreeMap<String, ParamSpec>,
    /// Let a value in the URL's path carry an encoded `/` or `\` (`%2F`, `%5C`), for
    /// upstreams whose identifiers hold them (`group%2Fproject`). Off: such a value is
    /// refused, since many servers decode them before routing. Encoded `.`/`..` segments are
    /// refused either way.
    pub allow_encoded_slash: bool,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("uri", &self.uri)
            .field("url", &mcpr_core::redact_url(&self.url))
            .field("name", &self.name)
            .field("mime_type", &self.mime_type)
            .field("headers", &self.headers)
            .field("params", &self.params)
            .field("allow_encoded_slash", &self.allow_encoded_slash)
            .finish()
    }
}

impl Endpoint {
    /// An endpoint serving `url` at `uri`, named after the URI, with no headers or checks.
    pub fn new(uri: impl Into<String>, url: impl Into<String>) -> Self {
        let uri = uri.into();
        Self {
            name: uri.clone(),
            uri,
            url: url.into(),
            description: None,
            mime_type: None,
            headers: Vec::new(),
            params: BTreeMap::new(),
            allow_encoded_slash: false,
        }
    }

    /// Whether a request to this endpoint carries credentials (headers or URL userinfo):
    /// its answers are then `cacheScope: private`.
    pub fn has_credentials(&self) -> bool {
        !self.headers.is_empty() || mcpr_core::redact::userinfo_span(&self.url).is_some()
    }
}

/// One `api` or `web` mount.
#[derive(Clone)]
pub struct HttpConfig {
    /// `api` or `web`.
    pub kind: HttpKind,
    /// A label for logs and metrics.
    pub name: String,
    /// Connect plus the whole response, redirects included.
    pub timeout: Duration,
    /// The most redirects one read follows; one more is an error.
    pub max_redirects: u32,
    /// How often subscribed URIs are re-fetched (with jitter).
    pub poll_interval: Duration,
    /// The most upstream requests a second polling makes, however many URIs are subscribed;
    /// checks beyond it wait their turn.
    pub max_poll_requests_per_second: u32,
    /// Allow loopback, private, link-local and other non-public addresses.
    pub allow_private: bool,
    /// The response cache's bound, in bytes.
    pub cache_max_bytes: u64,
    /// Freshness of an answer that has no `Cache-Control`/`Expires`.
    pub default_ttl: Duration,
    /// api: the endpoints.
    pub endpoints: Vec<Endpoint>,
    /// web: URL prefixes; any other URL is not found.
    pub allow: Vec<String>,
    /// web: what `resources/list` shows.
    pub pages: Vec<String>,
    /// web: what `text/html` becomes.
    pub html: HtmlMode,
    /// web: larger HTML is not converted to Markdown (the read answers "too large").
    pub max_convert_bytes: u64,
    /// web: elements nested deeper than this are converted as their text.
    pub max_html_depth: u32,
    /// web: HTML conversions running at once in this mount; more wait. The process's budget
    /// (`[server] max_conversions`, [`crate::ConversionBudget`]) bounds all mounts together.
    pub max_conversions: usize,
    /// The mount's own cache hints (the per-result ones come from the upstream).
    pub cache: CacheHints,
}

impl fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpConfig")
            .field("kind", &self.kind)
            .field("name", &self.name)
            .field("timeout", &self.timeout)
            .field("max_redirects", &self.max_redirects)
            .field("poll_interval", &self.poll_interval)
            .field(
                "max_poll_requests_per_second",
                &self.max_poll_requests_per_second,
            )
            .field("allow_private", &self.allow_private)
            .field("cache_max_bytes", &self.cache_max_bytes)
            .field("default_ttl", &self.default_ttl)
            .field("endpoints", &self.endpoints)
            .field("allow", &self.allow)
            .field("pages", &self.pages)
            .field("html", &self.html)
            .field("max_convert_bytes", &self.max_convert_bytes)
            .field("max_html_depth", &self.max_html_depth)
            .field("max_conversions", &self.max_conversions)
            .finish()
    }
}

impl HttpConfig {
    fn new(kind: HttpKind, name: impl Into<String>) -> Self {
        Self {
            kind,
            name: name.into(),
            timeout: Duration::from_secs(10),
            max_redirects: 5,
            poll_interval: Duration::from_secs(30),
            max_poll_requests_per_second: DEFAULT_MAX_POLL_REQUESTS_PER_SECOND,
            allow_private: false,
            cache_max_bytes: 64 << 20,
            default_ttl: Duration::from_secs(5),
            endpoints: Vec::new(),
            allow: Vec::new(),
            pages: Vec::new(),
            html: HtmlMode::Markdown,
            max_convert_bytes: 2 << 20,
            max_html_depth: 256,
            max_conversions: default_conversions(),
            cache: CacheHints::default(),
        }
    }

    /// An api mount named `name` with the defaults (10 s timeout, 5 redirects, polling every
    /// 30 s, public addresses only, a 64 MiB cache, 5 s default freshness) and `endpoints`.
    pub fn api(name: impl Into<String>, endpoints: Vec<Endpoint>) -> Self {
        let mut c = Self::new(HttpKind::Api, name);
        c.endpoints = endpoints;
        c
    }

    /// A web mount of the URLs under `allow`, with the same defaults and HTML as Markdown
    /// (at most 2 MiB of HTML converted, 256 levels of nesting, one conversion per core at
    /// once).
    pub fn web(allow: Vec<String>) -> Self {
        let mut c = Self::new(HttpKind::Web, "web");
        c.allow = allow;
        c
    }

    /// The one validation of an http mount, made by the configuration loader and again by
    /// [`crate::HttpProvider::new`]. Keys are relative to the mount (`endpoint.2.url`).
    pub fn validate(&self) -> Result<(), SettingError> {
        SettingError::check_range("timeout_ms", self.timeout.as_millis() as u64, &TIMEOUT_MS)?;
        SettingError::check_range(
            "max_redirects",
            u64::from(self.max_redirects),
            &MAX_REDIRECTS,
        )?;
        SettingError::check_range(
            "poll_interval_ms",
            self.poll_interval.as_millis() as u64,
            &POLL_INTERVAL_MS,
        )?;
        SettingError::check_range(
            "max_poll_requests_per_second",
            u64::from(self.max_poll_requests_per_second),
            &MAX_POLL_REQUESTS_PER_SECOND,
        )?;
        SettingError::check_range("cache_max_bytes", self.cache_max_bytes, &CACHE_MAX_BYTES)?;
        SettingError::check_range(
            "default_ttl_ms",
            self.default_ttl.as_millis() as u64,
            &DEFAULT_TTL_MS,
        )?;
        SettingError::check_range(
            "max_convert_bytes",
            self.max_convert_bytes,
            &MAX_CONVERT_BYTES,
        )?;
        SettingError::check_range(
            "max_html_depth",
            u64::from(self.max_html_depth),
            &MAX_HTML_DEPTH,
        )?;
        SettingError::check_range(
            "max_conversions",
            self.max_conversions as u64,
            &MAX_CONVERSIONS,
        )?;
        if self.name.is_empty() || self.name.len() > 64 || self.name.chars().any(char::is_control) {
            return Err(SettingError::new(
                "name",
                "must be 1 to 64 characters without control characters",
            ));
        }
        match self.kind {
            HttpKind::Api => self.validate_api(),
            HttpKind::Web => self.validate_web(),
        }
    }

    fn validate_api(&self) -> Result<(), SettingError> {
        if !self.allow.is_empty() || !self.pages.is_empty() {
            return Err(SettingError::new(
                "allow",
                "`allow` and `pages` are settings of web mounts; an api mount has endpoints",
            ));
        }
        if self.endpoints.is_empty() || self.endpoints.len() > MAX_ENTRIES {
            return Err(SettingError::new(
                "endpoint",
                format!(
                    "an api mount needs 1 to {MAX_ENTRIES} [[mount.endpoint]] tables (uri and url)"
                ),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, e) in self.endpoints.iter().enumerate() {
            let key = |k: &str| format!("endpoint.{i}.{k}");
            check_endpoint(e).map_err(|(k, msg)| SettingError::new(key(k), msg))?;
            if !seen.insert(e.uri.as_str()) {
                return Err(SettingError::new(
                    key("uri"),
                    format!("{:?} is served by an earlier endpoint already", e.uri),
                ));
            }
        }
        Ok(())
    }

    fn validate_web(&self) -> Result<(), SettingError> {
        if !self.endpoints.is_empty() {
            return Err(SettingError::new(
                "endpoint",
                "endpoints are a setting of api mounts; a web mount has `allow` prefixes",
            ));
        }
        if self.allow.is_empty() || self.allow.len() > MAX_ENTRIES {
            return Err(SettingError::new(
                "allow",
                format!("a web mount needs 1 to {MAX_ENTRIES} URL prefixes in `allow`"),
            ));
        }
        if self.pages.len() > MAX_ENTRIES {
            return Err(SettingError::new(
                "pages",
                format!("at most {MAX_ENTRIES} pages"),
            ));
        }
        for (i, a) in self.allow.iter().enumerate() {
            check_prefix(a).map_err(|m| SettingError::new(format!("allow.{i}"), m))?;
        }
        for (i, p) in self.pages.iter().enumerate() {
            let ok = crate::target::web_url(&self.allow, p).is_some();
            if !ok {
                return Err(SettingError::new(
                    format!("pages.{i}"),
                    format!("{p:?} is not an http(s) URL under one of the `allow` prefixes"),
                ));
            }
        }
        Ok(())
    }
}

/// One HTML conversion at a time per core: conversion is CPU work, more at once only queues
/// memory.
pub(crate) fn default_conversions() -> usize {
    std::thread::available_parallelism()
        .map_or(2, usize::from)
        .clamp(1, *MAX_CONVERSIONS.end() as usize)
}

/// An allow prefix: an absolute http(s) URL with a host, no userinfo, query or fragment,
/// written as the URL parser writes it (so prefix checks compare like with like).
fn check_prefix(a: &str) -> Result<(), String> {
    let url = reqwest::Url::parse(a).map_err(|e| format!("{a:?} is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!(
            "{a:?} must be an http:// or https:// URL with a host"
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("an allow prefix must not carry userinfo (user:password@)".into());
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!("{a:?} must not have a query or fragment"));
    }
    if url.as_str() != a {
        return Err(format!(
            "write the prefix as {:?} (the normalised form URLs are compared in)",
            url.as_str()
        ));
    }
    UriTemplate::parse(a).map_err(|e| format!("{a:?} cannot start a URI template: {e}"))?;
    Ok(())
}

/// One endpoint's checks; the error names the endpoint key that is wrong.
fn check_endpoint(e: &Endpoint) -> Result<(), (&'static str, String)> {
    let uri = UriTemplate::parse(&e.uri).map_err(|err| ("uri", format!("{err}")))?;
    let host = e.uri.strip_prefix("api://").unwrap_or_default();
    let host_end = host.find(['/', '{', '?', '#']).unwrap_or(host.len());
    if host_end == 0 {
        return Err((
            "uri",
            format!(
                "{:?} must start with api://NAME (a literal name, then the path)",
                e.uri
            ),
        ));
    }
    if e.name.is_empty() {
        return Err(("name", "must not be empty".into()));
    }
    // Only ever expanded, never matched: it may name a variable twice (`?id={id}`).
    let url = UriTemplate::parse_for_expansion(&e.url).map_err(|err| ("url", format!("{err}")))?;
    // The scheme and host must be literal: a value may never choose where the request goes.
    let prefix = url.literal_prefix();
    let scheme_ok = prefix.starts_with("https://") || prefix.starts_with("http://");
    let after_scheme = prefix.split_once("://").map(|(_, r)| r).unwrap_or_default();
    let host_literal = after_scheme.find(['/', '?']).is_some_and(|i| i > 0)
        || (!after_scheme.is_empty() && url.variables().is_empty());
    if !scheme_ok || !host_literal {
        return Err((
            "url",
            "must be an http:// or https:// URL whose scheme and host are written out (variables only after the host)"
                .into(),
        ));
    }
    for part in url.parts() {
        if let Part::Expr(x) = part
            && matches!(x.op, Operator::Reserved | Operator::Fragment)
        {
            return Err((
                "url",
                "`{+var}` and `{#var}` would let a value add path segments, a query or a fragment; use `{var}`, `{/var}` or `{?var}`"
                    .into(),
            ));
        }
    }
    let uri_vars = uri.variables();
    for v in url.variables() {
        if !uri_vars.contains(&v) {
            return Err((
                "url",
                format!("variable `{v}` is not a variable of the endpoint's uri"),
            ));
        }
    }
    for (name, p) in &e.params {
        if !uri_vars.contains(&name.as_str()) {
            return Err((
                "params",
                format!("`{name}` is not a variable of the endpoint's uri"),
            ));
        }
        if let Some(pat) = &p.pattern {
            regex_automata::meta::Regex::new(&format!("^(?:{pat})$"))
                .map_err(|err| ("params", format!("{name}.pattern: {err}")))?;
        }
        if p.allowed.as_ref().is_some_and(Vec::is_empty) {
            return Err(("params", format!("{name}.enum must not be empty")));
        }
    }
    for h in &e.headers {
        if http::HeaderName::from_bytes(h.name.as_bytes()).is_err() {
            return Err((
                "headers",
                format!("{:?} is not a valid header name", h.name),
            ));
        }
        if http::HeaderValue::from_str(&h.value).is_err() {
            // The value is a secret: name the header only.
            return Err((
                "headers",
                format!(
                    "the value of {} is not a valid header value (control characters?)",
                    h.name
                ),
            ));
        }
    }
    if let Some(m) = &e.mime_type
        && (m.is_empty() || !m.contains('/'))
    {
        return Err(("mime_type", format!("{m:?} is not a MIME type")));
    }
    Ok(())
}

/// An api or web mount's table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpToml {
    name: Option<Spanned<String>>,
    timeout_ms: Option<Spanned<IntOrString>>,
    max_redirects: Option<Spanned<IntOrString>>,
    poll_interval_ms: Option<Spanned<IntOrString>>,
    max_poll_requests_per_second: Option<Spanned<IntOrString>>,
    allow_private: Option<bool>,
    cache_max_bytes: Option<Spanned<IntOrString>>,
    default_ttl_ms: Option<Spanned<IntOrString>>,
    #[serde(default)]
    endpoint: Vec<EndpointToml>,
    allow: Option<Vec<Spanned<String>>>,
    pages: Option<Vec<Spanned<String>>>,
    html: Option<Spanned<String>>,
    max_convert_bytes: Option<Spanned<IntOrString>>,
    max_html_depth: Option<Spanned<IntOrString>>,
    max_conversions: Option<Spanned<IntOrString>>,
}

/// One `[[mount.endpoint]]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EndpointToml {
    uri: Spanned<String>,
    url: Spanned<String>,
    name: Option<String>,
    description: Option<String>,
    mime_type: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, Spanned<String>>,
    #[serde(default)]
    params: BTreeMap<String, ParamToml>,
    #[serde(default)]
    allow_encoded_slash: bool,
}

/// One `params.NAME = { ... }` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ParamToml {
    #[serde(rename = "enum")]
    allowed: Option<Vec<String>>,
    pattern: Option<String>,
}

/// Builds `kind = "api"` and `kind = "web"` mounts.
pub struct HttpFactory;

impl ProviderFactory for HttpFactory {
    fn kinds(&self) -> &'static [&'static str] {
        &["api", "web"]
    }

    fn configure(
        &self,
        table: &MountTable<'_>,
        common: &MountCommon,
    ) -> Result<Box<dyn MountSpec>, ConfigError> {
        let kind = if table.kind() == "web" {
            HttpKind::Web
        } else {
            HttpKind::Api
        };
        let raw: HttpToml = table.parse()?;
        let file = table.file();
        let mut c = HttpConfig::new(kind, kind.as_str());
        if let Some(v) = &raw.name {
            c.name = file.expand(v, "mount.name")?;
        }
        let ms =
            |v: &Spanned<IntOrString>, key: &str| file.number(v, key).map(Duration::from_millis);
        if let Some(v) = &raw.timeout_ms {
            c.timeout = ms(v, "mount.timeout_ms")?;
        }
        if let Some(v) = &raw.poll_interval_ms {
            c.poll_interval = ms(v, "mount.poll_interval_ms")?;
        }
        if let Some(v) = &raw.max_poll_requests_per_second {
            let n = file.int(
                v,
                "mount.max_poll_requests_per_second",
                MAX_POLL_REQUESTS_PER_SECOND,
            )?;
            c.max_poll_requests_per_second = n as u32;
        }
        if let Some(v) = &raw.default_ttl_ms {
            c.default_ttl = ms(v, "mount.default_ttl_ms")?;
        }
        if let Some(v) = &raw.max_redirects {
            c.max_redirects = file
                .number(v, "mount.max_redirects")?
                .min(u64::from(u32::MAX)) as u32;
        }
        if let Some(v) = raw.allow_private {
            c.allow_private = v;
        }
        if let Some(v) = &raw.cache_max_bytes {
            c.cache_max_bytes = file.size(v, "mount.cache_max_bytes", u64::MAX)?;
        }
        if let Some(v) = &raw.html {
            c.html = file.choice(
                v,
                "mount.html",
                &[("markdown", HtmlMode::Markdown), ("raw", HtmlMode::Raw)],
            )?;
        }
        for (i, a) in raw.allow.iter().flatten().enumerate() {
            c.allow.push(file.expand(a, &format!("mount.allow.{i}"))?);
        }
        for (i, p) in raw.pages.iter().flatten().enumerate() {
            c.pages.push(file.expand(p, &format!("mount.pages.{i}"))?);
        }
        if let Some(v) = &raw.max_convert_bytes {
            c.max_convert_bytes = file.size(v, "mount.max_convert_bytes", u64::MAX)?;
        }
        if let Some(v) = &raw.max_html_depth {
            c.max_html_depth = file
                .number(v, "mount.max_html_depth")?
                .min(u64::from(u32::MAX)) as u32;
        }
        if let Some(v) = &raw.max_conversions {
            c.max_conversions = file
                .number(v, "mount.max_conversions")?
                .min(u64::from(u32::MAX)) as usize;
        }
        if kind == HttpKind::Api {
            let web_only = [
                ("html", raw.html.is_some()),
                ("max_convert_bytes", raw.max_convert_bytes.is_some()),
                ("max_html_depth", raw.max_html_depth.is_some()),
                ("max_conversions", raw.max_conversions.is_some()),
            ];
            if let Some((key, _)) = web_only.iter().find(|(_, set)| *set) {
                return Err(table.error(key, format!("`{key}` is a setting of web mounts")));
            }
        }
        for (i, e) in raw.endpoint.iter().enumerate() {
            let uri = file.expand(&e.uri, &format!("mount.endpoint.{i}.uri"))?;
            let url = file.expand(&e.url, &format!("mount.endpoint.{i}.url"))?;
            let mut ep = Endpoint::new(uri, url);
            if let Some(n) = &e.name {
                ep.name = n.clone();
            }
            ep.description = e.description.clone();
            ep.mime_type = e.mime_type.clone();
            ep.allow_encoded_slash = e.allow_encoded_slash;
            for (name, v) in &e.headers {
                let value = file.expand(v, &format!("mount.endpoint.{i}.headers.{name}"))?;
                ep.headers.push(Header {
                    name: name.clone(),
                    value,
                });
            }
            for (name, p) in &e.params {
                ep.params.insert(
                    name.clone(),
                    ParamSpec {
                        allowed: p.allowed.clone(),
                        pattern: p.pattern.clone(),
                    },
                );
            }
            c.endpoints.push(ep);
        }
        c.cache = common.cache;
        c.validate().map_err(|e| table.setting_error(e))?;
        Ok(Box::new(HttpSpec(c)))
    }
}

/// A validated http mount.
#[derive(Debug)]
struct HttpSpec(HttpConfig);

#[async_trait]
impl MountSpec for HttpSpec {
    fn kind(&self) -> &str {
        self.0.kind.as_str()
    }

    async fn build(&self) -> mcpr_core::Result<Arc<dyn Provider>> {
        // The configuration file's mounts share the process's budget of conversions.
        Ok(Arc::new(crate::HttpProvider::with_budget(
            self.0.clone(),
            Arc::new(crate::SystemResolver),
            Vec::new(),
            crate::ConversionBudget::process(),
        )?))
    }

    fn addresses(&self) -> Option<Vec<String>> {
        Some(mcpr_core::addresses(
            &crate::target::router_prefixes(&self.0),
            &crate::provider::templates(&self.0),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_must_keep_scheme_and_host_literal() {
        let bad = [
            "https://{host}/x",
            "{scheme}://h/x",
            "https://h/{+path}",
            "https://h/x{#frag}",
            "ftp://h/x",
            "https://h{city}/x",
        ];
        for url in bad {
            let c = HttpConfig::api("w", vec![Endpoint::new("api://w/{host}", url)]);
            let e = c.validate().unwrap_err();
            assert_eq!(e.key, "endpoint.0.url", "{url}: {e}");
        }
        let c = HttpConfig::api(
            "w",
            vec![Endpoint::new(
                "api://w/{city}{?q}",
                "https://h/v1/{city}/x{?q}",
            )],
        );
        c.validate().unwrap();
    }

    /// The `template` fuzz finding: a resource URI may not name a variable twice (its match
    /// would be ambiguous), while the upstream URL, only expanded, may.
    #[test]
    fn repeated_variable_only_in_the_url() {
        let c = HttpConfig::api(
            "w",
            vec![Endpoint::new("api://w/{id}/{id}", "https://h/v1/{id}")],
        );
        let e = c.validate().unwrap_err();
        assert_eq!(e.key, "endpoint.0.uri", "{e}");
        assert!(
            e.message.contains("\"id\"") && e.message.contains("byte offset 14"),
            "{e}"
        );
        let ep = Endpoint::new("api://w/{id}", "https://h/v1/{id}?ref={id}");
        HttpConfig::api("w", vec![ep.clone()]).validate().unwrap();
        let c = crate::target::Compiled::new(&ep).unwrap();
        let url = crate::target::api_target(&[c], "api://w/a%20b")
            .unwrap()
            .url;
        assert_eq!(url.as_str(), "https://h/v1/a%20b?ref=a%20b");
    }

    #[test]
    fn secrets_stay_out_of_debug_and_errors() {
        let mut ep = Endpoint::new("api://w/x", "https://user:hunter2@h/x");
        ep.headers.push(Header {
            name: "Authorization".into(),
            value: "Bearer s3cret".into(),
        });
        let c = HttpConfig::api("w", vec![ep.clone()]);
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("hunter2") && !dbg.contains("s3cret"), "{dbg}");
        assert!(dbg.contains("Authorization"), "{dbg}");
        ep.headers[0].value = "Bearer s3cret\r\nX: y".into();
        let e = HttpConfig::api("w", vec![ep]).validate().unwrap_err();
        assert!(!e.message.contains("s3cret"), "{e}");
        assert!(dbg.contains("\"https://***@h/x\""), "{dbg}");
    }

    #[test]
    fn web_prefixes_and_pages() {
        let mut c = HttpConfig::web(vec!["https://docs.example.com/".into()]);
        c.pages = vec!["https://docs.example.com/index.html".into()];
        c.validate().unwrap();
        c.pages = vec!["https://evil.example.com/".into()];
        assert_eq!(c.validate().unwrap_err().key, "pages.0");
        for a in [
            "https://u:p@docs.example.com/",
            "ftp://x/",
            "https://docs.example.com/?q",
            "https://docs.example.com",
        ] {
            let c = HttpConfig::web(vec![a.into()]);
            assert_eq!(c.validate().unwrap_err().key, "allow.0", "{a}");
        }
    }

    #[test]
    fn ranges_name_the_key() {
        let mut c = HttpConfig::web(vec!["https://d/".into()]);
        c.timeout = Duration::from_millis(5);
        let e = c.validate().unwrap_err();
        assert_eq!(e.key, "timeout_ms");
        assert!(e.message.contains("allowed 100..=600000"), "{e}");
        let mut c = HttpConfig::web(vec!["https://d/".into()]);
        c.max_redirects = 21;
        assert_eq!(c.validate().unwrap_err().key, "max_redirects");
        let mut c = HttpConfig::web(vec!["https://d/".into()]);
        c.max_convert_bytes = 100;
        let e = c.validate().unwrap_err();
        assert_eq!(e.key, "max_convert_bytes", "{e}");
        let mut c = HttpConfig::web(vec!["https://d/".into()]);
        c.max_html_depth = 5000;
        assert_eq!(c.validate().unwrap_err().key, "max_html_depth");
        let mut c = HttpConfig::web(vec!["https://d/".into()]);
        c.max_conversions = 0;
        assert_eq!(c.validate().unwrap_err().key, "max_conversions");
        let c = HttpConfig::web(vec!["https://d/".into()]);
        assert!(c.max_conversions >= 1 && c.max_convert_bytes == 2 << 20);
        c.validate().unwrap();
    }
}
