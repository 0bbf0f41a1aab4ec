//! Mapping of upstream failures to the core error kinds, in one place. Every message names
//! the mount (`mcp mount "everything"`) and the cause; none holds an `env` or `headers`
//! value (rmcp's errors carry neither), and the upstream's own text is cut and stripped of
//! control characters.

use std::time::Duration;

use mcpr_core::{Error, ErrorKind, Limit};
use rmcp::ServiceError;
use rmcp::model::ErrorCode;

use crate::uri::clean_message;

/// -32001, the request timeout of both official SDKs (TypeScript's `ErrorCode.RequestTimeout`,
/// Python's `REQUEST_TIMEOUT`); rmcp has no constant for it.
const UPSTREAM_TIMEOUT: i32 = -32001;

/// `10 s`, `1500 ms`.
pub(crate) fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{ms} ms")
    }
}

/// The mount is not connected: `why` is the last connection failure.
pub(crate) fn unavailable(mount: &str, why: &str) -> Error {
    Error::new(
        ErrorKind::Unavailable,
        format!("mcp mount \"{mount}\": the upstream is unavailable: {why}"),
    )
}

/// The upstream did not answer `what` within `limit`.
pub(crate) fn timeout(mount: &str, what: &str, limit: Duration) -> Error {
    Error::new(
        ErrorKind::Timeout,
        format!(
            "mcp mount \"{mount}\": the upstream did not answer {what} within {} (timeout_ms)",
            human(limit)
        ),
    )
}

/// The upstream answered `what` with something we refuse (too many entries, a cursor too
/// long): its fault, so the mount's, never the client's.
pub(crate) fn hostile(mount: &str, what: &str, why: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::Unavailable,
        format!("mcp mount \"{mount}\": the upstream's answer to {what} was refused: {why}"),
    )
}

/// The upstream's answer to `what` was over `max_message_bytes` (`max`) and was dropped
/// ([`crate::frame`]): core's one "too large" error, about `uri` when the request names a
/// resource. A request about no one resource (a listing) names the mount instead, and leaves
/// the error's `uri` unset, so the client is not told of a resource that does not exist.
pub(crate) fn too_large(mount: &str, what: &str, uri: Option<&str>, max: u64) -> Error {
    let limit = Limit::bytes(max, format!("max_message_bytes of mcp mount \"{mount}\""));
    match uri {
        Some(u) => Error::too_large(u, "the upstream's answer", None, limit, None),
        None => {
            let mut e = Error::too_large(
                &format!("mcp mount \"{mount}\""),
                &format!("the upstream's answer to {what}"),
                None,
                limit,
                Some("it was dropped"),
            );
            e.uri = None;
            e
        }
    }
}

/// The limit an HTTP upstream's answer went over, when that is why `e` failed: rmcp's
/// client reads a JSON answer only up to `max_message_bytes` and fails the one request.
pub(crate) fn http_too_large(e: &ServiceError) -> Option<u64> {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    let ServiceError::TransportSend(t) = e else {
        return None;
    };
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(t.error.as_ref());
    while let Some(current) = source {
        if let Some(StreamableHttpError::<reqwest::Error>::ResponseBodyTooLarge { max_size }) =
            current.downcast_ref()
        {
            return Some(*max_size as u64);
        }
        source = current.source();
    }
    None
}

/// A failed request `what` (about `uri`, when there is one).
pub(crate) fn service(mount: &str, what: &str, uri: Option<&str>, e: ServiceError) -> Error {
    let err = match e {
        ServiceError::McpError(data) => {
            if let Some(max) = data
                .data
                .as_ref()
                .and_then(|d| d.get(crate::frame::TOO_LARGE_KEY))
                .and_then(serde_json::Value::as_u64)
            {
                return too_large(mount, what, uri, max);
            }
            let msg = clean_message(&data.message);
            let kind = match data.code {
                ErrorCode::RESOURCE_NOT_FOUND => {
                    if let Some(uri) = uri {
                        return Error::not_found(uri);
                    }
                    ErrorKind::NotFound
                }
                // A 2026-07-28 upstream answers a read of a resource it does not have with
                // -32602 naming the URI in `data` (SEP-2164): not found, which each of our
                // clients is then told in its own era's words, as for any other mount.
                ErrorCode::INVALID_PARAMS
                    if what == "resources/read"
                        && data.data.as_ref().is_some_and(|d| d.get("uri").is_some()) =>
                {
                    if let Some(uri) = uri {
                        return Error::not_found(uri);
                    }
                    ErrorKind::NotFound
                }
                ErrorCode::INVALID_PARAMS => ErrorKind::InvalidParams,
                ErrorCode::METHOD_NOT_FOUND => ErrorKind::Unsupported,
                // The SDKs' request timeout (what this server answers when a read runs out
                // of time): the upstream timed out, and our client is told so (-32001,
                // temporary), not that the upstream is down. The other -32001, an HTTP
                // upstream's "unauthorized", comes with a 401 or 403 and its
                // `WWW-Authenticate` (RFC 9110 requires it of a 401; this server sends it
                // with both), which rmcp's client fails as an authorization error before
                // any JSON-RPC error is read, so it does not arrive here.
                ErrorCode(UPSTREAM_TIMEOUT) => ErrorKind::Timeout,
                _ => ErrorKind::Unavailable,
            };
            Error::new(
                kind,
                format!(
                    "mcp mount \"{mount}\": the upstream answered {what} with error {}: {msg}",
                    data.code.0
                ),
            )
            .with_detail("upstreamCode", data.code.0)
        }
        ServiceError::Timeout { timeout: t } => return timeout(mount, what, t),
        ServiceError::TransportClosed => unavailable(mount, "the connection closed"),
        ServiceError::TransportSend(e) => unavailable(
            mount,
            &format!("cannot send {what}: {}", clean_message(&e.to_string())),
        ),
        ServiceError::UnexpectedResponse => hostile(mount, what, "an answer of the wrong type"),
        other => Error::new(
            ErrorKind::Unavailable,
            format!(
                "mcp mount \"{mount}\": {what} failed: {}",
                clean_message(&other.to_string())
            ),
        ),
    };
    match uri {
        Some(u) => err.with_uri(u),
        None => err,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An upstream that timed out is a timeout here too, its words kept; any other error
    /// code it answers is its outage.
    #[test]
    fn an_upstream_timeout_stays_a_timeout() {
        let answered = |code: i32| {
            let data = rmcp::ErrorData::new(
                ErrorCode(code),
                "up+file:///a timed out after 300 ms (request_timeout)",
                None,
            );
            service(
                "up",
                "resources/read",
                Some("up+file:///a"),
                ServiceError::McpError(data),
            )
        };
        let e = answered(-32001);
        assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
        assert_eq!(
            e.message,
            "mcp mount \"up\": the upstream answered resources/read with error -32001: \
             up+file:///a timed out after 300 ms (request_timeout)"
        );
        assert_eq!(e.uri.as_deref(), Some("up+file:///a"));
        assert_eq!(answered(-32603).kind, ErrorKind::Unavailable);
    }

    #[test]
    fn an_answer_too_large_has_core_s_shape_with_or_without_a_uri() {
        let listing = too_large("up", "resources/list", None, 1024);
        assert_eq!(listing.kind, ErrorKind::TooLarge);
        assert_eq!(
            listing.message,
            "mcp mount \"up\": the upstream's answer to resources/list is more than the limit of \
             1024 bytes (max_message_bytes of mcp mount \"up\"); it was dropped"
        );
        // No resource to name: a mount is not a URI.
        assert_eq!(listing.uri, None);
        let details = listing.details.expect("details");
        assert_eq!(details["limit"], 1024);
        assert_eq!(details["setting"], "max_message_bytes of mcp mount \"up\"");

        let read = too_large("up", "resources/read", Some("up+x://big"), 1024);
        assert_eq!(read.kind, ErrorKind::TooLarge);
        assert_eq!(read.uri.as_deref(), Some("up+x://big"));
        assert_eq!(
            read.message,
            "up+x://big: the upstream's answer is more than the limit of 1024 bytes \
             (max_message_bytes of mcp mount \"up\")"
        );
    }
}
