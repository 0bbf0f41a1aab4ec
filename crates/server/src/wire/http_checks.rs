//! The mirror of the checks rmcp's streamable HTTP service makes before it takes a request
//! (Host allow-list, Origin allow-list, `Content-Type`, `Accept` with its weights, the
//! 2026-07-28 headers) and of the status it gives a stateless answer. The direct read path
//! takes a request only when [`direct_read_len`] says rmcp would accept it; the operational
//! endpoints (the edge's `OpsGate`) apply rmcp's Host and Origin check itself,
//! [`host_and_origin`], and answer its refusals in rmcp's words.
//!
//! Mirrors rmcp 3.11.0's `transport/streamable_http_server/tower.rs`
//! (`validate_dns_rebinding_headers` with `parse_host_header`, `host_is_allowed`,
//! `validate_origin_header`, `parse_origin_value` and `origin_is_allowed`; `handle_post`'s
//! header checks) and the status mapping of its stateless answers. Paired with rmcp by the
//! tests below (`host_and_origin` against rmcp's service, request by request), by
//! `http_refusals.rs`'s and by `tests/http_direct.rs`, which sends the same requests through
//! the direct path and through rmcp and compares the answers byte for byte.

use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, header};
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

/// Why rmcp's first check of every request refuses it; [`http_answers::host_or_origin`]
/// gives rmcp's answer to each.
///
/// [`http_answers::host_or_origin`]: super::http_answers::host_or_origin
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HostOrOrigin {
    /// No `Host` header and no authority in the request's URI (400).
    MissingHost,
    /// A `Host` that is not visible ASCII (400).
    HostEncoding,
    /// A `Host` that is no authority (400).
    InvalidHost,
    /// A `Host` outside the allowed hosts (403).
    HostNotAllowed,
    /// An `Origin` that is not visible ASCII (403).
    OriginEncoding,
    /// An `Origin` that is neither `null` nor a scheme and an authority (403).
    InvalidOrigin,
    /// An `Origin` outside the allowed origins (403).
    OriginNotAllowed,
}

/// rmcp's first check of every request, `validate_dns_rebinding_headers` (rmcp 3.11.0,
/// `transport/streamable_http_server/tower.rs`), on a request to `uri` with `headers`: the
/// first `Host` (else the URI's authority, as HTTP/2 gives it) must be an authority that
/// `hosts` allows, and an `Origin`, when there is one, must be one that `origins` allows (an
/// empty list allows none, as this server configures rmcp: `enforce_origin_validation`).
/// The operational endpoints apply it as it is, over a host list that also takes IP
/// addresses ([`AllowedHosts::with_ip_literals`]).
pub(crate) fn host_and_origin(
    uri: &Uri,
    headers: &HeaderMap,
    hosts: &AllowedHosts,
    origins: &[String],
) -> Result<(), HostOrOrigin> {
    let host = match headers.get(header::HOST) {
        Some(value) => {
            let text = value.to_str().map_err(|_| HostOrOrigin::HostEncoding)?;
            http::uri::Authority::try_from(text).map_err(|_| HostOrOrigin::InvalidHost)?
        }
        None => uri.authority().ok_or(HostOrOrigin::MissingHost)?.clone(),
    };
    if !hosts.allows_authority(&host) {
        return Err(HostOrOrigin::HostNotAllowed);
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let origin = origin.to_str().map_err(|_| HostOrOrigin::OriginEncoding)?;
    let origin = Origin::parse(origin).ok_or(HostOrOrigin::InvalidOrigin)?;
    if !origin.allowed_by(origins) {
        return Err(HostOrOrigin::OriginNotAllowed);
    }
    Ok(())
}

/// Whether rmcp's first check ([`host_and_origin`]) passes `headers` for certain. A `Host`
/// missing or given twice fails here, where rmcp may take HTTP/2's `:authority` or the
/// first one: a doubt leaves the request to rmcp, never the other way round.
pub(crate) fn passes_host_and_origin(
    headers: &HeaderMap,
    hosts: &AllowedHosts,
    origins: &[String],
) -> bool {
    sole(headers, header::HOST).is_some()
        && host_and_origin(&Uri::default(), headers, hosts, origins).is_ok()
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

/// rmcp's Host check on an `allowed_hosts` list (`host_is_allowed`), parsed once at start-up
/// so a check on every request parses only the `Host` it is given: the name (brackets and
/// case aside) must be on the list, and the port too when the list entry names one.
#[derive(Clone)]
pub(crate) struct AllowedHosts {
    /// An empty list accepts any well-formed host.
    any: bool,
    /// Each entry's name, without brackets and in lower case, and its port if it names one;
    /// blank entries match nothing and are left out.
    entries: Vec<(String, Option<u16>)>,
    /// IP addresses pass too, whatever the list ([`Self::with_ip_literals`]).
    ip_literals: bool,
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
            ip_literals: false,
        }
    }

    /// The same list, taking any IP address besides: not rmcp's rule but the operational
    /// endpoints' widening of it. Health probes address a server by IP (a pod's address),
    /// and DNS rebinding, what the Host check guards against, needs a name.
    pub(crate) fn with_ip_literals(mut self) -> Self {
        self.ip_literals = true;
        self
    }

    /// Whether `host` (a Host header) passes.
    pub(crate) fn allows(&self, host: &str) -> bool {
        http::uri::Authority::try_from(host).is_ok_and(|host| self.allows_authority(&host))
    }

    /// Whether `host`, parsed, passes.
    fn allows_authority(&self, host: &http::uri::Authority) -> bool {
        if self.any {
            return true;
        }
        let name = host.host().trim_matches('[').trim_matches(']');
        if self.ip_literals && name.parse::<std::net::IpAddr>().is_ok() {
            return true;
        }
        self.entries.iter().any(|(entry, port)| {
            entry.eq_ignore_ascii_case(name) && port.is_none_or(|p| host.port_u16() == Some(p))
        })
    }
}

/// An Origin header's value as rmcp reads it (`parse_origin_value`): `null`, or a scheme and
/// an authority, scheme and host in lower case, brackets off.
#[derive(PartialEq, Eq)]
enum Origin {
    Null,
    Tuple {
        scheme: String,
        host: String,
        port: Option<u16>,
    },
}

impl Origin {
    fn parse(value: &str) -> Option<Self> {
        let value = value.trim();
        if value.eq_ignore_ascii_case("null") {
            return Some(Self::Null);
        }
        let uri = Uri::try_from(value).ok()?;
        let scheme = uri.scheme_str()?.to_ascii_lowercase();
        let authority = uri.authority()?;
        Some(Self::Tuple {
            scheme,
            host: normalize(authority.host()),
            port: authority.port_u16(),
        })
    }

    /// Whether an entry of `allowed` matches, as rmcp matches them (`parse_allowed_origin`,
    /// `origin_is_allowed`): `null` only `null`; else scheme and host, and the port when the
    /// entry names one (the scheme's default port when the origin names none), `:*` after
    /// an entry without a port for any port. Entries that do not parse match nothing.
    fn allowed_by(&self, allowed: &[String]) -> bool {
        allowed.iter().any(|entry| {
            let entry = entry.trim();
            let (entry, any_port) = match entry.strip_suffix(":*") {
                Some(base) => (base, true),
                None => (entry, false),
            };
            let Some(entry) = Self::parse(entry) else {
                return false;
            };
            match (&entry, self) {
                (Self::Null, Self::Null) => !any_port,
                (
                    Self::Tuple {
                        scheme: a_scheme,
                        host: a_host,
                        port: a_port,
                    },
                    Self::Tuple { scheme, host, port },
                ) => {
                    a_scheme == scheme
                        && a_host == host
                        && if any_port {
                            a_port.is_none()
                        } else {
                            a_port.is_none_or(|p| port.or_else(|| default_port(scheme)) == Some(p))
                        }
                }
                _ => false,
            }
        })
    }
}

/// The port a scheme implies when an origin names none (RFC 6454 §4).
fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

/// Whether `origin` (an Origin header) passes `allowed` as rmcp checks it: it parses, and an
/// entry matches. An empty list allows no Origin at all.
#[cfg(test)]
fn origin_allowed(origin: &str, allowed: &[String]) -> bool {
    Origin::parse(origin).is_some_and(|o| o.allowed_by(allowed))
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

    /// rmcp's service and [`host_and_origin`] on the same requests: every combination of
    /// a host list, an origin list, a `Host` (or none, with or without an authority in the
    /// URI) and an `Origin` (or none). Where the copy refuses, rmcp answers exactly
    /// `http_answers::host_or_origin` of its reason; where it passes, rmcp dispatches the
    /// request.
    #[tokio::test]
    async fn host_and_origin_is_rmcps_check() {
        use crate::wire::http_answers::host_or_origin;
        use crate::wire::rmcp_run::{self, HOSTS, parts_of};
        use axum::body::Body;

        /// A handler that answers only what rmcp answers itself (a ping).
        struct Bare;
        impl rmcp::ServerHandler for Bare {}

        let list = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let host_lists = [list(&HOSTS), list(&[]), list(&["a:80", " ", "B"])];
        let origin_lists = [
            list(&[]),
            list(&["http://localhost:*", "null", "https://b:8443"]),
        ];
        let hosts: [Option<&[u8]>; 11] = [
            Some(b"localhost:8080"),
            Some(b"LOCALHOST"),
            Some(b"[::1]:1"),
            Some(b"a:80"),
            Some(b"a:81"),
            Some(b"b"),
            Some(b"evil.example"),
            Some(b"bad host"),
            Some(b"\xfflocalhost"),
            Some(b""),
            None,
        ];
        let origins: [Option<&[u8]>; 9] = [
            None,
            Some(b"http://localhost:3000"),
            Some(b"HTTP://LOCALHOST"),
            Some(b"https://b"),
            Some(b"https://b:8443"),
            Some(b"null"),
            Some(b"garbage"),
            Some(b"http://evil.example"),
            Some(b"\xffhttp://localhost"),
        ];
        let uris = ["/mcp", "http://localhost:9/mcp"];
        let (mut passed, mut refused) = (0, std::collections::BTreeMap::new());
        for host_list in &host_lists {
            for origin_list in &origin_lists {
                let rmcp =
                    rmcp_run::http_service_for(|| Bare, host_list, origin_list, Default::default());
                let allowed = AllowedHosts::new(host_list);
                for (host, origin, uri) in hosts
                    .iter()
                    .flat_map(|h| origins.iter().map(move |o| (h, o)))
                    .flat_map(|(h, o)| uris.iter().map(move |u| (h, o, u)))
                {
                    let mut req = http::Request::builder()
                        .method(Method::POST)
                        .uri(*uri)
                        .header("content-type", JSON)
                        .header("accept", "application/json, text/event-stream")
                        .header("mcp-protocol-version", PROTOCOL_VERSION)
                        .header("mcp-method", "ping");
                    if let Some(h) = host {
                        req = req.header("host", HeaderValue::from_bytes(h).unwrap());
                    }
                    if let Some(o) = origin {
                        req = req.header("origin", HeaderValue::from_bytes(o).unwrap());
                    }
                    let meta = crate::wire::rmcp_run::META_2026;
                    let ping = format!(
                        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"_meta":{meta}}}}}"#
                    );
                    let req = req.body(Body::from(ping)).unwrap();
                    let what = format!(
                        "hosts {host_list:?}, origins {origin_list:?}, Host {:?}, Origin {:?}, URI {uri}",
                        host.map(String::from_utf8_lossy),
                        origin.map(String::from_utf8_lossy),
                    );
                    let ours = host_and_origin(req.uri(), req.headers(), &allowed, origin_list);
                    let theirs = parts_of(rmcp.handle(req).await.map(Body::new)).await;
                    match ours {
                        Ok(()) => {
                            // Past the check, into dispatch: a JSON-RPC answer (2026-07-28
                            // has no ping; -32601), never one of the check's plain texts.
                            passed += 1;
                            assert_eq!(theirs.1.as_deref(), Some(JSON), "{what}: {theirs:?}");
                        }
                        Err(why) => {
                            *refused.entry(format!("{why:?}")).or_insert(0) += 1;
                            let copy = parts_of(host_or_origin(why)).await;
                            assert_eq!(
                                (theirs.0, theirs.1, String::from_utf8_lossy(&theirs.2)),
                                (copy.0, copy.1, String::from_utf8_lossy(&copy.2)),
                                "{what}"
                            );
                        }
                    }
                }
            }
        }
        // Every reason was met, and requests passed too.
        assert_eq!(refused.len(), 7, "{refused:?}");
        assert!(passed > 0);
    }

    /// The operational endpoints' widening: any IP address passes, names only as listed.
    #[test]
    fn ip_literals_pass_only_where_asked() {
        let hosts = AllowedHosts::new(&["localhost".to_owned()]);
        let ops = hosts.clone().with_ip_literals();
        for ip in ["127.0.0.1:8080", "10.1.2.3", "[::1]:80", "[fe80::1]"] {
            assert!(ops.allows(ip), "{ip}");
            assert!(!hosts.allows(ip), "{ip}");
        }
        for name in ["evil.example", "127.0.0.1.nip.io:80", "bad host"] {
            assert!(!ops.allows(name), "{name}");
        }
        assert!(ops.allows("LOCALHOST:1"));
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
