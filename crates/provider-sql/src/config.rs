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

/// One SQL mount. Only `sqlite://PATH` URLs are served so far.
#[derive(Debug, Clone)]
pub struct SqlConfig {
    /// The mount name: tables are `db://{name}/tables/{table}`. `[A-Za-z0-9._-]{1,64}`.
    pub name: String,
    /// `sqlite://PATH` (relative paths are relative to the working directory; the file must
    /// exist, it is never created).
    pub url: String,
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
    /// A mount with the defaults: 100 rows per page, 1000 rows per query, 4 MiB per read, 5 s
    /// per statement, 4 connections, no queries.
    pub fn new(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            url: url.into(),
            queries: Vec::new(),
            page_size: 100,
            max_rows: 1000,
            max_bytes: 4 * 1024 * 1024,
            statement_timeout: Duration::from_secs(5),
            max_connections: 4,
            cache: CacheHints::default(),
        }
    }

    /// The SQLite file the URL names.
    pub(crate) fn sqlite_path(&self) -> Result<PathBuf> {
        let Some(rest) = self.url.strip_prefix("sqlite://") else {
            // Only the scheme is echoed: a postgres/mysql URL may carry a password.
            let scheme = self.url.split("://").next().unwrap_or_default();
            return Err(Error::unsupported(format!(
                "sql mount {:?}: only sqlite:// URLs are supported so far, not {scheme}://",
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
        Ok(())
    }
}
