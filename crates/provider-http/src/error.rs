//! Mapping of HTTP failures to the core error kinds, in one place. Messages name the
//! resource URI and the upstream's origin (scheme, host, port), never a full upstream URL:
//! its path or query may carry a key, and its userinfo a password.

use std::time::Duration;

use mcpr_core::{Error, ErrorKind};

use crate::net::Refused;

/// `https://host:port` of `url`, for messages.
pub(crate) fn origin(url: &reqwest::Url) -> String {
    url.origin().ascii_serialization()
}

/// `10 s`, `1500 ms`.
pub(crate) fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{ms} ms")
    }
}

/// The whole exchange took longer than `timeout_ms`.
pub(crate) fn timeout(uri: &str, url: &reqwest::Url, limit: Duration) -> Error {
    Error::new(
        ErrorKind::Timeout,
        format!(
            "{uri}: the upstream {} timed out after {} (timeout_ms)",
            origin(url),
            human(limit)
        ),
    )
    .with_uri(uri)
}

/// The upstream answered an error status (404 and 410 are not found instead).
pub(crate) fn status(uri: &str, url: &reqwest::Url, status: reqwest::StatusCode) -> Error {
    if matches!(status.as_u16(), 404 | 410) {
        return Error::not_found(uri);
    }
    Error::new(
        ErrorKind::Unavailable,
        format!("{uri}: the upstream {} answered HTTP {status}", origin(url)),
    )
    .with_uri(uri)
    .with_detail("status", status.as_u16())
}

/// A request the SSRF guard or the allow list refused.
pub(crate) fn refused(uri: &str, why: impl std::fmt::Display) -> Error {
    Error::invalid_params(format!("{uri}: refused: {why}")).with_uri(uri)
}

/// A transport failure (connect, TLS, a broken body) from reqwest. The URL reqwest would
/// print is dropped; the causes are kept, because "certificate expired" or "connection
/// refused" is what the user needs to know.
pub(crate) fn transport(uri: &str, url: &reqwest::Url, err: reqwest::Error) -> Error {
    let err = err.without_url();
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&err);
    let mut parts: Vec<String> = Vec::new();
    while let Some(c) = cause {
        if let Some(r) = c.downcast_ref::<Refused>() {
            return refused(uri, r);
        }
        let s = c.to_string();
        if !parts.iter().any(|p| p == &s) {
            parts.push(s);
        }
        cause = c.source();
    }
    let kind = if err.is_timeout() {
        ErrorKind::Timeout
    } else {
        ErrorKind::Unavailable
    };
    let what = if err.is_connect() {
        "cannot connect to"
    } else {
        "failed talking to"
    };
    let detail = if parts.is_empty() {
        "error sending request".to_owned()
    } else {
        parts.join(": ")
    };
    Error::new(
        kind,
        format!("{uri}: {what} the upstream {}: {detail}", origin(url)),
    )
    .with_uri(uri)
}
