//! A resource URI parsed once at the edge: scheme, the part before the query, and the query.
//!
//! Providers receive this typed value, never a raw string, so every one of them agrees on
//! where the query starts and what the scheme is.

use crate::error::{Error, Result};

/// The longest URI the server accepts. Longer ones are refused before any provider sees them,
/// so a hostile client cannot make a provider percent-decode megabytes.
pub const MAX_URI_LEN: usize = 64 * 1024;

/// A syntactically valid absolute URI as sent by a client.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResourceUri {
    raw: String,
    scheme_end: usize,
    query_start: Option<usize>,
}

impl ResourceUri {
    /// Parse `raw`. Only the outer shape is checked here (a scheme, no whitespace or control
    /// characters, a bounded length); what the rest means is each provider's business.
    pub fn parse(raw: &str) -> Result<Self> {
        if raw.len() > MAX_URI_LEN {
            return Err(Error::invalid_params(format!(
                "URI is {} bytes long; the limit is {MAX_URI_LEN} bytes",
                raw.len()
            )));
        }
        let scheme_end = raw.find(':').filter(|&i| i > 0).ok_or_else(|| {
            Error::invalid_params(format!("not an absolute URI (no scheme): {raw:?}"))
        })?;
        let scheme = &raw[..scheme_end];
        let scheme_ok = scheme.as_bytes()[0].is_ascii_alphabetic()
            && scheme
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b));
        if !scheme_ok {
            return Err(Error::invalid_params(format!(
                "invalid URI scheme {scheme:?}"
            )));
        }
        if raw.chars().any(|c| c.is_control() || c == ' ') {
            return Err(Error::invalid_params(
                "URI contains a space or control character; percent-encode it",
            ));
        }
        let query_start = raw.find('?');
        Ok(Self {
            raw: raw.to_owned(),
            scheme_end,
            query_start,
        })
    }

    /// The URI exactly as given.
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// The URI as mounts are matched against it: a `file` URI whose host is `localhost`
    /// names the same file as one with an empty host (RFC 8089 §2), so `file://localhost/x`
    /// is matched as `file:///x`. Every other URI is as given.
    pub fn routing_form(&self) -> std::borrow::Cow<'_, str> {
        match self.raw.strip_prefix("file://localhost/") {
            Some(rest) => std::borrow::Cow::Owned(format!("file:///{rest}")),
            None => std::borrow::Cow::Borrowed(&self.raw),
        }
    }

    /// The scheme in lower case as written (`file`, `db`, ...).
    pub fn scheme(&self) -> &str {
        &self.raw[..self.scheme_end]
    }

    /// Everything before `?`.
    pub fn without_query(&self) -> &str {
        match self.query_start {
            Some(q) => &self.raw[..q],
            None => &self.raw,
        }
    }

    /// The raw query after `?`, if any.
    pub fn query(&self) -> Option<&str> {
        self.query_start.map(|q| &self.raw[q + 1..])
    }

    /// The query split into raw `(key, value)` pairs; a key without `=` has an empty value.
    pub fn query_pairs(&self) -> Vec<(&str, &str)> {
        self.query()
            .filter(|q| !q.is_empty())
            .map(|q| {
                q.split('&')
                    .map(|kv| kv.split_once('=').unwrap_or((kv, "")))
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl std::fmt::Display for ResourceUri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_scheme_path_and_query() {
        let u = ResourceUri::parse("file:///srv/a%20b.md?head=10&tail").unwrap();
        assert_eq!(u.scheme(), "file");
        assert_eq!(u.without_query(), "file:///srv/a%20b.md");
        assert_eq!(u.query_pairs(), vec![("head", "10"), ("tail", "")]);
    }

    #[test]
    fn file_localhost_routes_as_an_empty_host() {
        let u = ResourceUri::parse("file://localhost/srv/a.md?head=1").unwrap();
        assert_eq!(u.routing_form(), "file:///srv/a.md?head=1");
        assert_eq!(u.as_str(), "file://localhost/srv/a.md?head=1");
        for same in [
            "file:///srv/a.md",
            "db://localhost/x",
            "file://localhostx/a",
        ] {
            assert_eq!(ResourceUri::parse(same).unwrap().routing_form(), same);
        }
    }

    #[test]
    fn rejects_relative_and_oversized() {
        assert!(ResourceUri::parse("no-scheme").is_err());
        assert!(ResourceUri::parse(":x").is_err());
        assert!(ResourceUri::parse("1a:x").is_err());
        assert!(ResourceUri::parse("file:///a b").is_err());
        assert!(ResourceUri::parse(&format!("file:///{}", "a".repeat(MAX_URI_LEN))).is_err());
    }
}
