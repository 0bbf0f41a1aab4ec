//! The mirror of the checks rmcp's streamable HTTP service makes before it takes a request
//! (Host allow-list, Origin allow-list, `Content-Type`, `Accept` with its weights, the
//! 2026-07-28 headers) and of the status it gives a stateless answer. The direct read path
//! takes a request only when [`direct_read_len`] says rmcp would accept it; the operational
//! endpoints apply the same Host and Origin checks.
//!
//! Mirrors rmcp 3.11.0's `transport/streamable_http_server/tower.rs`
//! (`validate_dns_rebinding_headers`, `handle_post`'s header checks) and the status mapping of
//! its stateless answers. Paired with rmcp by the tests below, by `http_refusals.rs`'s (the
//! Host and Origin check against rmcp's service) and by `tests/http_direct.rs`, which sends
//! the same requests through the direct path and through rmcp and compares the answers byte
//! for byte.

use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use rmcp::model::{ErrorCode, JsonRpcMessage, ServerJsonRpcMessage};

pub(crate) const JSON: &str = "application/json";
const EVENT_STREAM: &str = "text/event-stream";
const PROTOCOL_VERSION: &str = "2026-07-28";
const READ: &str = "resources/read";
// Named once: a lookup by `HeaderName` hashes it as it is, where a `&str` is parsed first.
pub(crate) const MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
pub(crate) const MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
pub(crate) const MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");
const MCP_SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");

/// The body length when `method` and `headers` are those of a stateless 2026-07-28
/// `resources/read` that rmcp would accept (allowed `Host`, no `Origin`, JSON in and JSON
/// and SSE accepted, the protocol version, `Mcp-Method` and `Mcp-Name` headers, a body of
/// known length within `max_body_bytes`), so the direct path may take it; `None` leaves
/// the request to rmcp.
pub(crate) fn direct_read_len(
    method: &Method,
    headers: &HeaderMap,
    allowed_hosts: &AllowedHosts,
    max_body_bytes: usize,
) -> Option<usize> {
    if method != Method::POST
        || headers.contains_key(header::ORIGIN)
        || headers.contains_key(header::TRANSFER_ENCODING)
        || headers.contains_key(MCP_SESSION_ID)
        || headers.contains_key(LAST_EVENT_ID)
        || sole(headers, MCP_PROTOCOL_VERSION)? != PROTOCOL_VERSION
        || sole(headers, MCP_METHOD)? != READ
        || sole(headers, MCP_NAME)?.starts_with("=?")
        || !allowed_hosts.allows(sole(headers, header::HOST)?)
        || !content_type_is_json(sole(headers, header::CONTENT_TYPE)?)
        || !accepts_json_and_sse(headers)?
    {
        return None;
    }
    let len: usize = sole(headers, header::CONTENT_LENGTH)?.parse().ok()?;
    (len <= max_body_bytes).then_some(len)
}

/// Whether rmcp's first check of every request, `validate_dns_rebinding_headers` (rmcp
/// 3.11.0, `transport/streamable_http_server/tower.rs`), passes `headers`: a `Host` that
/// `hosts` allows, and an `Origin`, when there is one, that `origins` allows (an empty list
/// allows none, as this server configures rmcp: `enforce_origin_validation`). A `Host`
/// missing or given twice fails here, where rmcp may take HTTP/2's `:authority` or the
/// first one: a doubt leaves the request to rmcp, never the other way round.
pub(crate) fn passes_host_and_origin(
    headers: &HeaderMap,
    hosts: &AllowedHosts,
    origins: &[String],
) -> bool {
    sole(headers, header::HOST).is_some_and(|h| hosts.allows(h))
        && match headers.get(header::ORIGIN) {
            None => true,
            Some(origin) => origin.to_str().is_ok_and(|o| origin_allowed(o, origins)),
        }
}

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

/// Whether `origin` (an Origin header) matches an entry of `allowed` the way rmcp matches them: scheme and host
/// (case aside), and the port when the entry names one (`:*` for any). An empty list allows
/// no Origin at all.
pub(crate) fn origin_allowed(origin: &str, allowed: &[String]) -> bool {
    fn parts(value: &str) -> Option<(String, String, Option<u16>)> {
        let uri = http::Uri::try_from(value.trim()).ok()?;
        let scheme = uri.scheme_str()?.to_ascii_lowercase();
        let authority = uri.authority()?;
        let host = authority
            .host()
            .trim_matches(['[', ']'])
            .to_ascii_lowercase();
        Some((scheme, host, authority.port_u16()))
    }
    let default_port = |scheme: &str| match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    };
    if origin.trim().eq_ignore_ascii_case("null") {
        return allowed
            .iter()
            .any(|a| a.trim().eq_ignore_ascii_case("null"));
    }
    let Some((scheme, host, port)) = parts(origin) else {
        return false;
    };
    allowed.iter().any(|entry| {
        let (entry, any_port) = match entry.trim().strip_suffix(":*") {
            Some(base) => (base, true),
            None => (entry.trim(), false),
        };
        let Some((a_scheme, a_host, a_port)) = parts(entry) else {
            return false;
        };
        a_scheme == scheme
            && a_host == host
            && (any_port
                || a_port.is_none_or(|p| port.or_else(|| default_port(&scheme)) == Some(p)))
    })
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
    fn origins_match_as_rmcp_matches_them() {
        let list: Vec<String> = ["http://localhost:*", "https://app.example:8443", "null"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        assert!(origin_allowed("http://localhost:3000", &list));
        assert!(origin_allowed("HTTP://LOCALHOST", &list));
        assert!(origin_allowed("https://app.example:8443", &list));
        assert!(origin_allowed("null", &list));
        assert!(!origin_allowed("https://app.example", &list));
        assert!(!origin_allowed("https://localhost:3000", &list));
        assert!(!origin_allowed("http://evil.example", &list));
        assert!(!origin_allowed("garbage", &list));
        assert!(!origin_allowed("http://localhost:3000", &[]));
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

    const GOOD: &[(&str, &str)] = &[
        ("host", "127.0.0.1:8080"),
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("content-length", "100"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "resources/read"),
        ("mcp-name", "file:///a"),
    ];

    fn eligible(method: &Method, headers: &HeaderMap, hosts: &AllowedHosts) -> Option<usize> {
        direct_read_len(method, headers, hosts, 1000)
    }

    #[test]
    fn only_reads_rmcp_would_accept_are_taken_directly() {
        let s = AllowedHosts::new(&["localhost".into(), "127.0.0.1".into(), "::1".into()]);
        assert_eq!(eligible(&Method::POST, &headers(GOOD), &s), Some(100));
        assert_eq!(eligible(&Method::GET, &headers(GOOD), &s), None);
        // Each of these changes one thing that rmcp checks, so rmcp must answer.
        let changes: &[(&str, Option<&str>)] = &[
            ("host", Some("evil.example")),
            ("host", None),
            ("origin", Some("http://localhost:3000")),
            ("content-type", Some("text/plain")),
            ("accept", Some("application/json")),
            ("accept", Some("application/json, text/event-stream;q=0")),
            ("accept", Some("application/json;x=\"a,text/event-stream\"")),
            ("content-length", Some("1001")),
            ("content-length", None),
            ("mcp-protocol-version", Some("2025-11-25")),
            ("mcp-protocol-version", None),
            ("mcp-method", Some("resources/list")),
            ("mcp-method", None),
            ("mcp-name", None),
            ("mcp-name", Some("=?base64?ZmlsZTovLy9h?=")),
            ("mcp-session-id", Some("abc")),
            ("transfer-encoding", Some("chunked")),
        ];
        for (name, value) in changes {
            let mut h: Vec<(&str, &str)> =
                GOOD.iter().filter(|(k, _)| k != name).copied().collect();
            if let Some(v) = value {
                h.push((name, v));
            }
            assert_eq!(
                eligible(&Method::POST, &headers(&h), &s),
                None,
                "{name}: {value:?}"
            );
        }
        // A repeated header is rmcp's to refuse.
        let mut h = GOOD.to_vec();
        h.push(("mcp-method", "resources/read"));
        assert_eq!(eligible(&Method::POST, &headers(&h), &s), None);
    }
}
