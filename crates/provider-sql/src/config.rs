//! Settings of one SQL mount: the typed [`SqlConfig`], its one validation, and the
//! `kind = "sqlite" | "postgres" | "mysql"` tables of the configuration file ([`SqlFactory`]).
//! [`crate::SqlProvider::new`] validates again and checks every named query against the
//! database.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mcpr_core::config::{
    ConfigError, IntOrString, MountCommon, MountSpec, MountTable, ProviderFactory, SettingError,
};
use mcpr_core::{CacheHints, Error, Provider, Result};
use serde::Deserialize;
use toml::Spanned;

/// Allowed `page_size`.
pub const PAGE_SIZE: RangeInclusive<u64> = 1..=10_000;
/// Allowed `max_rows`.
pub const MAX_ROWS: RangeInclusive<u64> = 1..=1_000_000;
/// Allowed `max_bytes` (the server's own `max_read_bytes` applies too).
pub const MAX_BYTES: RangeInclusive<u64> = 1024..=(1 << 40);
/// Allowed `statement_timeout_ms`.
pub const STATEMENT_TIMEOUT_MS: RangeInclusive<u64> = 10..=600_000;
/// Allowed `max_connections`.
pub const MAX_CONNECTIONS: RangeInclusive<u64> = 1..=64;
/// Allowed `poll_interval_ms`.
pub const POLL_INTERVAL_MS: RangeInclusive<u64> = 10..=3_600_000;

/// How a named-query parameter is bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ParamType {
    /// Bound as TEXT, exactly as written in the URI (after percent-decoding).
    #[default]
    Text,
    /// Must parse as a signed 64-bit integer; bound as INTEGER.
    Integer,
}

/// The checks on one `:name` parameter of a templated query.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParamSpec {
    /// How the value is bound.
    pub kind: ParamType,
    /// When set, the value must be one of these (and completion suggests them).
    pub allowed: Option<Vec<String>>,
    /// When set, the whole value must match this regular expression.
    pub pattern: Option<String>,
    /// When set, completion suggests values found in this `(table, column)` of the mount's
    /// database (prefix search, bounded, under the statement timeout).
    pub complete_from: Option<(String, String)>,
}

/// One `[[mount.query]]`: SQL served at a fixed URI or a URI template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedQuery {
    /// `db://users/active/list` (fixed) or `db://users/{status}/list` (templated: each
    /// `{var}` is one path segment, bound to `:var` in the SQL).
    pub uri: String,
    /// One read-only statement (`SELECT` or `WITH … SELECT`); `:var` placeholders only.
    pub sql: String,
    /// Checks per parameter; every `{var}` of the URI needs an entry (defaults are fine).
    pub params: BTreeMap<String, ParamSpec>,
    /// Shown as the resource or template description.
    pub description: Option<String>,
}

/// The database engine of a mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqlKind {
    /// An SQLite file, embedded (`sqlite://PATH`).
    Sqlite,
    /// A PostgreSQL server (`postgres://` or `postgresql://`).
    Postgres,
    /// A MySQL or MariaDB server (`mysql://` or `mariadb://`).
    MySql,
}

impl SqlKind {
    /// The config name of the kind.
    pub fn as_str(self) -> &'static str {
        match self {
            SqlKind::Sqlite => "sqlite",
            SqlKind::Postgres => "postgres",
            SqlKind::MySql => "mysql",
        }
    }

    /// The kind a URL's scheme names, if any.
    pub fn of_url(url: &str) -> Option<Self> {
        let scheme = url.split("://").next()?.to_ascii_lowercase();
        match scheme.as_str() {
            "sqlite" => Some(SqlKind::Sqlite),
            "postgres" | "postgresql" => Some(SqlKind::Postgres),
            "mysql" | "mariadb" => Some(SqlKind::MySql),
            _ => None,
        }
    }
}

/// One SQL mount.
#[derive(Clone)]
pub struct SqlConfig {
    /// The engine; the URL's scheme must match it.
    pub kind: SqlKind,
    /// The mount name: tables are `db://{name}/tables/{table}`. `[A-Za-z0-9._-]{1,64}`.
    pub name: String,
    /// `sqlite://PATH` (relative paths are relative to the working directory; the file must
    /// exist, it is never created), `postgres://user:pass@host:port/db`, or
    /// `mysql://user:pass@host:port/db`. Never logged or echoed with its credentials.
    pub url: String,
    /// PostgreSQL: the schema that short `db://{name}/tables/{table}` URIs mean ("public").
    pub default_schema: String,
    /// How often subscribed resources are re-checked when no change event comes first.
    pub poll_interval: Duration,
    /// PostgreSQL: a channel to LISTEN on; a notification on it re-checks subscribed
    /// resources, and polling is off.
    pub notify_channel: Option<String>,
    /// Named queries.
    pub queries: Vec<NamedQuery>,
    /// Rows per table page (1..=10000).
    pub page_size: usize,
    /// The most rows a named query may return; more is a "too large" error, never a silently
    /// cut result (1..=1000000).
    pub max_rows: usize,
    /// The most bytes of JSON one read may return (the server's own read limit applies too).
    pub max_bytes: u64,
    /// How long one statement may run before it is interrupted (10 ms..=10 min).
    pub statement_timeout: Duration,
    /// How many connections may run statements at once (1..=64).
    pub max_connections: usize,
    /// Cache hints on results from this mount.
    pub cache: CacheHints,
}

/// Written by hand: the URL may hold a password, and embedders print configs in
/// diagnostics; everything but the URL's credentials and query string is shown.
impl std::fmt::Debug for SqlConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlConfig")
            .field("kind", &self.kind)
            .field("name", &self.name)
            .field("url", &self.redacted_url())
            .field("default_schema", &self.default_schema)
            .field("poll_interval", &self.poll_interval)
            .field("notify_channel", &self.notify_channel)
            .field("queries", &self.queries)
            .field("page_size", &self.page_size)
            .field("max_rows", &self.max_rows)
            .field("max_bytes", &self.max_bytes)
            .field("statement_timeout", &self.statement_timeout)
            .field("max_connections", &self.max_connections)
            .field("cache", &self.cache)
            .finish()
    }
}

impl SqlConfig {
    /// A mount with the defaults: the kind from the URL's scheme (SQLite when unknown, which
    /// then fails validation), 100 rows per page, 1000 rows per query, 4 MiB per read, 5 s per
    /// statement, 4 connections, polling every second, no queries.
    pub fn new(name: impl Into<String>, url: impl Into<String>) -> Self {
        let url = url.into();
        Self {
            kind: SqlKind::of_url(&url).unwrap_or(SqlKind::Sqlite),
            name: name.into(),
            url,
            default_schema: "public".into(),
            poll_interval: Duration::from_secs(1),
            notify_channel: None,
            queries: Vec::new(),
            page_size: 100,
            max_rows: 1000,
            max_bytes: 4 * 1024 * 1024,
            statement_timeout: Duration::from_secs(5),
            max_connections: 4,
            cache: CacheHints::default(),
        }
    }

    /// The URL with its credentials masked and without its query string, for labels and
    /// logs ([`mcpr_core::redact_url`]).
    pub fn redacted_url(&self) -> String {
        mcpr_core::redact_url(&self.url)
    }

    /// The SQLite file the URL names.
    pub(crate) fn sqlite_path(&self) -> Result<PathBuf> {
        let Some(rest) = self.url.strip_prefix("sqlite://") else {
            return Err(Error::invalid_params(format!(
                "sql mount {:?}: a sqlite mount needs a sqlite://PATH URL",
                self.name
            )));
        };
        let path = rest.split('?').next().unwrap_or_default();
        if path.is_empty() {
            return Err(Error::invalid_params(format!(
                "sql mount {:?}: sqlite:// URL has no path",
                self.name
            )));
        }
        Ok(PathBuf::from(path))
    }

    /// Check the settings that do not need the database: the one validation of an SQL
    /// mount, made by the configuration loader and again by [`crate::SqlProvider::new`].
    pub fn validate(&self) -> std::result::Result<(), SettingError> {
        SettingError::check_mount_name("name", "sql", &self.name)?;
        SettingError::check_range("page_size", self.page_size as u64, &PAGE_SIZE)?;
        SettingError::check_range("max_rows", self.max_rows as u64, &MAX_ROWS)?;
        SettingError::check_range("max_bytes", self.max_bytes, &MAX_BYTES)?;
        SettingError::check_range(
            "statement_timeout_ms",
            self.statement_timeout.as_millis() as u64,
            &STATEMENT_TIMEOUT_MS,
        )?;
        SettingError::check_range(
            "max_connections",
            self.max_connections as u64,
            &MAX_CONNECTIONS,
        )?;
        SettingError::check_range(
            "poll_interval_ms",
            self.poll_interval.as_millis() as u64,
            &POLL_INTERVAL_MS,
        )?;
        // Only the scheme is ever echoed: the URL may carry a password.
        if SqlKind::of_url(&self.url) != Some(self.kind) {
            let scheme = match self.url.split_once("://") {
                Some((scheme, _)) => format!("{scheme}://"),
                None => "(none)".into(),
            };
            return Err(SettingError::new(
                "url",
                format!(
                    "a {} mount needs a URL like {}; this one's scheme is {scheme}",
                    self.kind.as_str(),
                    self.kind.example_url()
                ),
            ));
        }
        if let Some(ch) = &self.notify_channel {
            let ok = !ch.is_empty()
                && ch.len() <= 63
                && ch.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !ok || self.kind != SqlKind::Postgres {
                return Err(SettingError::new(
                    "notify_channel",
                    "must be 1 to 63 letters, digits or '_', and only postgres mounts have one",
                ));
            }
        }
        if self.default_schema.is_empty() {
            return Err(SettingError::new("schema", "must not be empty"));
        }
        Ok(())
    }
}

impl SqlKind {
    /// A URL of this kind, for messages.
    pub fn example_url(self) -> &'static str {
        match self {
            SqlKind::Sqlite => "sqlite://PATH",
            SqlKind::Postgres => "postgres://user:${PGPASSWORD}@host:5432/database",
            SqlKind::MySql => "mysql://user:${MYSQL_PASSWORD}@host:3306/database",
        }
    }
}

/// An SQL mount's table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SqlToml {
    name: Option<Spanned<String>>,
    url: Option<Spanned<String>>,
    schema: Option<Spanned<String>>,
    notify_channel: Option<Spanned<String>>,
    poll_interval_ms: Option<Spanned<IntOrString>>,
    page_size: Option<Spanned<IntOrString>>,
    max_rows: Option<Spanned<IntOrString>>,
    max_bytes: Option<Spanned<IntOrString>>,
    statement_timeout_ms: Option<Spanned<IntOrString>>,
    max_connections: Option<Spanned<IntOrString>>,
    #[serde(default)]
    query: Vec<QueryToml>,
}

/// One `[[mount.query]]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QueryToml {
    uri: Spanned<String>,
    sql: Spanned<String>,
    description: Option<String>,
    #[serde(default)]
    params: BTreeMap<String, ParamToml>,
}

/// One `params.NAME = { ... }` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ParamToml {
    #[serde(rename = "enum")]
    allowed: Option<Vec<String>>,
    pattern: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    /// `table.column` (or `schema.table.column`) whose values completion suggests.
    from: Option<String>,
}

/// Builds `kind = "sqlite"`, `"postgres"` and `"mysql"` mounts.
pub struct SqlFactory;

impl ProviderFactory for SqlFactory {
    fn kinds(&self) -> &'static [&'static str] {
        &["sqlite", "postgres", "mysql"]
    }

    fn configure(
        &self,
        table: &MountTable<'_>,
        common: &MountCommon,
    ) -> std::result::Result<Box<dyn MountSpec>, ConfigError> {
        let kind = match table.kind() {
            "postgres" => SqlKind::Postgres,
            "mysql" => SqlKind::MySql,
            _ => SqlKind::Sqlite,
        };
        let k = kind.as_str();
        let raw: SqlToml = table.parse()?;
        let file = table.file();
        if kind != SqlKind::Postgres {
            // One table shape serves all three engines; these two only mean something to
            // PostgreSQL, and a user who writes them on another engine expects them to work.
            for (key, v) in [
                ("schema", &raw.schema),
                ("notify_channel", &raw.notify_channel),
            ] {
                if let Some(v) = v {
                    return file.err(
                        v.span(),
                        &format!("mount.{key}"),
                        format!("`{key}` is not a setting of {k} mounts (only postgres)"),
                    );
                }
            }
        }
        let (Some(name), Some(url)) = (&raw.name, &raw.url) else {
            return Err(table.error_at_mount(format!(
                "a {k} mount needs `name` (db://{{name}}/…) and `url` ({})",
                kind.example_url()
            )));
        };
        let name = file.expand(name, "mount.name")?;
        let mut url_s = file.expand(url, "mount.url")?;
        if let Some(path) = url_s.strip_prefix("sqlite://")
            && !path.starts_with('/')
        {
            // A relative database path is relative to the config file, like every other path,
            // and made absolute so messages name the file really opened.
            url_s = format!("sqlite://{}", file.resolve_path(path).display());
        }
        let mut c = SqlConfig::new(name, url_s);
        c.kind = kind;
        if let Some(v) = &raw.schema {
            c.default_schema = file.expand(v, "mount.schema")?;
        }
        if let Some(v) = &raw.notify_channel {
            c.notify_channel = Some(file.expand(v, "mount.notify_channel")?);
        }
        let ms =
            |v: &Spanned<IntOrString>, key: &str| file.number(v, key).map(Duration::from_millis);
        if let Some(v) = &raw.poll_interval_ms {
            c.poll_interval = ms(v, "mount.poll_interval_ms")?;
        }
        if let Some(v) = &raw.statement_timeout_ms {
            c.statement_timeout = ms(v, "mount.statement_timeout_ms")?;
        }
        if let Some(v) = &raw.page_size {
            c.page_size = file.number(v, "mount.page_size")? as usize;
        }
        if let Some(v) = &raw.max_rows {
            c.max_rows = file.number(v, "mount.max_rows")? as usize;
        }
        if let Some(v) = &raw.max_bytes {
            c.max_bytes = file.size(v, "mount.max_bytes", u64::MAX)?;
        }
        if let Some(v) = &raw.max_connections {
            c.max_connections = file.number(v, "mount.max_connections")? as usize;
        }
        c.cache = common.cache;
        for q in &raw.query {
            c.queries.push(named_query(file, q)?);
        }
        c.validate().map_err(|e| table.setting_error(e))?;
        Ok(Box::new(SqlSpec(c)))
    }
}

/// One named query from its table; errors point at the query's `uri` line.
fn named_query(
    file: &mcpr_core::config::ConfigFile<'_>,
    q: &QueryToml,
) -> std::result::Result<NamedQuery, ConfigError> {
    let mut params = BTreeMap::new();
    for (k, p) in &q.params {
        let bad = |msg: String| file.error(q.uri.span(), "mount.query.params", msg);
        let kind = match p.kind.as_deref() {
            None | Some("text") => ParamType::Text,
            Some("integer") => ParamType::Integer,
            Some(other) => {
                return Err(bad(format!(
                    "parameter `{k}`: type {other:?} is not \"text\" or \"integer\""
                )));
            }
        };
        let complete_from = match p.from.as_deref() {
            None => None,
            Some(f) => match f.rsplit_once('.') {
                Some((table, column)) if !table.is_empty() && !column.is_empty() => {
                    Some((table.to_owned(), column.to_owned()))
                }
                _ => {
                    return Err(bad(format!(
                        "parameter `{k}`: from = {f:?} must be \"table.column\" (or \"schema.table.column\")"
                    )));
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
    Ok(NamedQuery {
        uri: file.expand(&q.uri, "mount.query.uri")?,
        // SQL text is never expanded: `$1` and dollar quoting are SQL, not variables.
        sql: q.sql.get_ref().clone(),
        params,
        description: q.description.clone(),
    })
}

/// A validated SQL mount; building it connects (lazily for servers) and checks the queries.
/// Its `Debug` is `SqlConfig`'s, which redacts the URL.
#[derive(Debug)]
struct SqlSpec(SqlConfig);

#[async_trait]
impl MountSpec for SqlSpec {
    fn kind(&self) -> &str {
        self.0.kind.as_str()
    }

    async fn build(&self) -> Result<Arc<dyn Provider>> {
        Ok(Arc::new(crate::SqlProvider::new(self.0.clone()).await?))
    }

    /// An SQLite file is on this machine; PostgreSQL and MySQL are servers.
    fn is_local(&self) -> bool {
        self.0.kind == SqlKind::Sqlite
    }

    fn addresses(&self) -> Option<Vec<String>> {
        crate::provider::addresses(&self.0)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn debug_of_a_config_and_a_spec_hides_the_password() {
        let config = super::SqlConfig::new("app", "postgres://app:hunter2@db.example/app");
        let printed = format!("{config:?} {:?}", super::SqlSpec(config.clone()));
        assert!(!printed.contains("hunter2"), "{printed}");
        assert!(
            printed.contains("postgres://***@db.example/app"),
            "{printed}"
        );
    }
}
