//! Settings of one SQL mount, as the CLI's config loader hands them over; checked again by
//! [`crate::SqlProvider::new`], which also checks every named query against the database.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use mcpr_core::{CacheHints, Error, Result};

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
#[derive(Debug, Clone)]
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

    /// The URL without credentials or query string, for labels and logs.
    pub fn redacted_url(&self) -> String {
        redact_url(&self.url)
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

    /// Check the settings that do not need the database.
    pub(crate) fn validate(&self) -> Result<()> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 64
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !name_ok {
            return Err(Error::invalid_params(format!(
                "sql mount name {:?} must be 1 to 64 letters, digits, '-', '_' or '.'",
                self.name
            )));
        }
        let range = |what: &str, v: u128, lo: u128, hi: u128| {
            if (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(Error::invalid_params(format!(
                    "sql mount {:?}: {what} must be between {lo} and {hi}, not {v}",
                    self.name
                )))
            }
        };
        range("page_size", self.page_size as u128, 1, 10_000)?;
        range("max_rows", self.max_rows as u128, 1, 1_000_000)?;
        range("max_bytes", self.max_bytes as u128, 1024, 1 << 40)?;
        range(
            "statement_timeout (ms)",
            self.statement_timeout.as_millis(),
            10,
            600_000,
        )?;
        range("max_connections", self.max_connections as u128, 1, 64)?;
        range(
            "poll_interval (ms)",
            self.poll_interval.as_millis(),
            10,
            3_600_000,
        )?;
        // Only the scheme is ever echoed: the URL may carry a password.
        let scheme = self.url.split("://").next().unwrap_or_default();
        if SqlKind::of_url(&self.url) != Some(self.kind) {
            return Err(Error::invalid_params(format!(
                "sql mount {:?}: a {} mount needs a {} URL, not {scheme}://",
                self.name,
                self.kind.as_str(),
                match self.kind {
                    SqlKind::Sqlite => "sqlite://PATH",
                    SqlKind::Postgres => "postgres://user@host/database",
                    SqlKind::MySql => "mysql://user@host/database",
                }
            )));
        }
        if let Some(ch) = &self.notify_channel {
            let ok = !ch.is_empty()
                && ch.len() <= 63
                && ch.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !ok || self.kind != SqlKind::Postgres {
                return Err(Error::invalid_params(format!(
                    "sql mount {:?}: notify_channel must be 1 to 63 letters, digits or '_', and only postgres mounts have one",
                    self.name
                )));
            }
        }
        if self.default_schema.is_empty() {
            return Err(Error::invalid_params(format!(
                "sql mount {:?}: schema must not be empty",
                self.name
            )));
        }
        Ok(())
    }
}

/// `scheme://host:port/path` of a URL: user, password and query string (which may hold
/// `password=`) removed.
pub(crate) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "(unparsable URL)".into();
    };
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let host = authority.rsplit('@').next().unwrap_or_default();
    format!("{scheme}://{host}{path}")
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn urls_lose_their_credentials() {
        assert_eq!(
            redact_url("postgres://app:s3cr%40t@db.example:5432/app?sslmode=require&password=x"),
            "postgres://db.example:5432/app"
        );
        assert_eq!(
            redact_url("mysql://root@127.0.0.1/test"),
            "mysql://127.0.0.1/test"
        );
        assert_eq!(redact_url("sqlite://./a.db"), "sqlite://./a.db");
        assert_eq!(redact_url("nonsense"), "(unparsable URL)");
    }
}
