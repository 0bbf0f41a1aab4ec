//! The HTTP direct path's mirror of rmcp's streamable HTTP service: the header checks it
//! makes before it takes a request (Host allow-list, `Content-Type`, `Accept` with its
//! weights) and the status it gives a stateless answer. The direct path takes a request only
//! when each of these says rmcp would accept it.

use http::{HeaderMap, HeaderValue, StatusCode, header};
use rmcp::model::{ErrorCode, JsonRpcMessage, ServerJsonRpcMessage};

pub(crate) const JSON: &str = "application/json";
const EVENT_STREAM: &str = "text/event-stream";

/// The HTTP status rmcp gives a stateless answer whose request `_meta` was well formed.
pub(crate) fn status_of(message: &ServerJsonRpcMessage) -> StatusCode {
    let JsonRpcMessage::Error(e) = message else {
        return StatusCode::OK;
    };
    match e.error.code {
        ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
        | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
        | ErrorCode::HEADER_MISMATCH => StatusCode::BAD_REQUEST,
        ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
        _ => StatusCode::OK,
    }
}

/// The one value of header `name` as visible ASCII; absent, repeated or otherwise is `None`.
/// A `HeaderName` (a constant) is looked up as it is; a `&str` is parsed first.
pub(crate) fn sole(headers: &HeaderMap, name: impl http::header::AsHeaderName) -> Option<&str> {
    let mut all = headers.get_all(name).iter();
    let value: &HeaderValue = all.next()?;
    if all.next().is_some() {
        return None;
    }
    value.to_str().ok()
}

/// rmcp's Host check on an `allowed_hosts` list, parsed once at start-up so a check on every
/// request parses only the `Host` it is given: the name (brackets and case aside)
/// must be on the list, and the port too when the list entry names one.
#[derive(Clone)]
pub(crate) struct AllowedHosts {
    /// An empty list accepts any well-formed host.
    any: bool,
    /// Each entry's name, without brackets and in lower case, and its port if it names one;
    /// blank entries match nothing and are left out.
    entries: Vec<(String, Option<u16>)>,
}

impl AllowedHosts {
    pub(crate) fn new(allowed: &[String]) -> Self {
        let entries = allowed
            .iter()
            .map(|a| a.trim())
            .filter(|a| !a.is_empty())
            .map(|a| match http::uri::Authority::try_from(a) {
                Ok(entry) => (normalize(entry.host()), entry.port_u16()),
                Err(_) => (normalize(a), None),
            })
            .collect();
        Self {
            any: allowed.is_empty(),
            entries,
        }
    }

    /// Whether the list was empty: every well-formed host passes.
    pub(crate) fn accepts_any(&self) -> bool {
        self.any
    }

    /// Whether `host` (a Host header) passes.
    pub(crate) fn allows(&self, host: &str) -> bool {
        let Ok(host) = http::uri::Authority::try_from(host) else {
            return false;
        };
        if self.any {
            return true;
        }
        let name = host.host().trim_matches('[').trim_matches(']');
        self.entries.iter().any(|(entry, port)| {
            entry.eq_ignore_ascii_case(name) && port.is_none_or(|p| host.port_u16() == Some(p))
        })
    }
}

fn normalize(host: &str) -> String {
    host.trim_matches('[')
        .trim_matches(']')
        .to_ascii_lowercase()
}

pub(crate) fn content_type_is_json(value: &str) -> bool {
    let essence = value.split_once(';').map_or(value, |(e, _)| e);
    essence.trim().eq_ignore_ascii_case(JSON)
}

/// Whether `Accept` names both JSON and SSE, as rmcp reads it; a quoted parameter (which
/// rmcp's splitter treats specially) is `None`, left to rmcp.
pub(crate) fn accepts_json_and_sse(headers: &HeaderMap) -> Option<bool> {
    let (mut json, mut sse) = (false, false);
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else {
            continue;
        };
        if value.contains('"') {
            return None;
        }
        for entry in value.split(',') {
            let mut parts = entry.split(';');
            let essence = parts.next().unwrap_or_default().trim();
            let weighted_out = parts.any(|p| {
                p.split_once('=').is_some_and(|(name, q)| {
                    name.trim().eq_ignore_ascii_case("q") && !quality_acceptable(q.trim())
                })
            });
            if weighted_out {
                continue;
            }
            json |= essence.eq_ignore_ascii_case(JSON);
            sse |= essence.eq_ignore_ascii_case(EVENT_STREAM);
        }
    }
    Some(json && sse)
}

/// RFC 9110 weights: only an explicit zero excludes a range; a malformed weight is ignored.
fn quality_acceptable(q: &str) -> bool {
    let (whole, fraction) = q.split_once('.').unwrap_or((q, ""));
    if fraction.len() > 3 || !fraction.bytes().all(|d| d.is_ascii_digit()) {
        return true;
    }
    whole != "0" || fraction.bytes().any(|d| d != b'0')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    fn host_allowed(host: &str, allowed: &[String]) -> bool {
        AllowedHosts::new(allowed).allows(host)
    }

    #[test]
    fn host_check_matches_rmcps() {
        let list = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(host_allowed("LOCALHOST:1", &list(&["localhost"])));
        assert!(host_allowed("[::1]:9", &list(&["::1"])));
        assert!(host_allowed("a:80", &list(&["a:80"])));
        assert!(!host_allowed("a:81", &list(&["a:80"])));
        assert!(!host_allowed("a", &list(&["a:80"])));
        assert!(!host_allowed("b", &list(&["a"])));
        assert!(host_allowed("anything", &[]));
        assert!(!host_allowed("bad host", &[]));
        // Entries are trimmed; a blank one matches nothing, and a list of blanks is no list.
        assert!(host_allowed("A:5", &list(&[" a "])));
        assert!(!host_allowed("a", &list(&[" "])));
        // An entry that is no authority is compared as a name.
        assert!(!host_allowed("a", &list(&["a b"])));
    }

    #[test]
    fn accept_weights_as_rmcp_reads_them() {
        let h = |v: &str| headers(&[("accept", v)]);
        assert_eq!(
            accepts_json_and_sse(&h("application/json;q=0.5, text/event-stream")),
            Some(true)
        );
        assert_eq!(
            accepts_json_and_sse(&h("application/json;q=0.000, text/event-stream")),
            Some(false)
        );
        assert_eq!(
            accepts_json_and_sse(&h("application/json;q=0.0001, text/event-stream")),
            Some(true)
        );
        assert_eq!(accepts_json_and_sse(&h("*/*")), Some(false));
    }
}
