//! rmcp's HTTP answers, word for word, where this server answers in rmcp's place: the HTTP
//! edge (a session bound to someone else, the Host and Origin checks of the operational
//! endpoints) and the direct read path (a body it cannot read, an answer it cannot encode,
//! a read cut off by shutdown) must be indistinguishable from rmcp's service; and the one
//! answer of rmcp's that clients refuse, its 202 to a DELETE, rewritten.
//!
//! Paired with rmcp by `tests/http_direct.rs` (both paths, byte for byte), `tests/sessions.rs`
//! and `tests/http_hardening.rs` (the same requests to rmcp's endpoint and to ours).

use axum::body::Body;
use axum::response::{IntoResponse as _, Response};
use http::{StatusCode, header};
use rmcp::model::{JsonRpcMessage, ServerJsonRpcMessage};

use super::encode;
use super::http_checks::JSON;

/// rmcp's answer to an unknown session id: a session bound to someone else must look
/// exactly like one that does not exist.
pub(crate) fn no_such_session() -> Response {
    (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response()
}

/// rmcp's answer to a `Host` outside `allowed_hosts`.
pub(crate) fn host_not_allowed() -> Response {
    (
        StatusCode::FORBIDDEN,
        "Forbidden: Host header is not allowed",
    )
        .into_response()
}

/// rmcp's answer to an `Origin` outside `allowed_origins`.
pub(crate) fn origin_not_allowed() -> Response {
    (
        StatusCode::FORBIDDEN,
        "Forbidden: Origin header is not allowed",
    )
        .into_response()
}

/// rmcp's answer to a stateless request whose handler ended without an answer, as shutdown
/// cutting a read off does.
pub(crate) fn cut_off() -> Response {
    plain(
        StatusCode::INTERNAL_SERVER_ERROR,
        "Encounter an error when empty response: no response message received from handler".into(),
    )
}

/// rmcp's answer to a request body that cannot be read (the client went away, or sent more
/// than it announced).
pub(crate) fn unreadable_body(e: impl std::fmt::Display) -> Response {
    plain(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("Failed to read request body: {e}"),
    )
}

/// rmcp's answer when the JSON of an answer cannot be written.
pub(crate) fn unserializable(e: impl std::fmt::Display) -> Response {
    plain(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("Internal Server Error: serialize json response: {e}"),
    )
}

/// A JSON-RPC error as rmcp sends one in `application/json`: 400 when it has no id (the
/// body was no request), else 200 as a request's error.
pub(crate) fn json_error(message: ServerJsonRpcMessage) -> Response {
    let status = match &message {
        JsonRpcMessage::Error(e) if e.id.is_none() => StatusCode::BAD_REQUEST,
        _ => StatusCode::OK,
    };
    match encode::own_answer_json(message) {
        Ok(body) => Response::builder()
            .status(status)
            .header(header::CONTENT_TYPE, JSON)
            .body(Body::from(body))
            .expect("valid response"),
        Err(e) => unserializable(e),
    }
}

/// rmcp's answer to a DELETE that ended a session is 202; clients (the Python SDK among
/// them) expect 200 or 204 and log a failure for 202, so it goes out as 204. Whether
/// `resp` was that answer (the session is gone).
pub(crate) fn deleted(resp: &mut Response) -> bool {
    if resp.status() != StatusCode::ACCEPTED {
        return false;
    }
    *resp.status_mut() = StatusCode::NO_CONTENT;
    true
}

/// A plain-text answer, as rmcp writes its HTTP errors.
pub(crate) fn plain(status: StatusCode, text: String) -> Response {
    Response::builder()
        .status(status)
        .body(Body::from(text))
        .expect("valid response")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_rmcps_202_to_a_delete_is_rewritten() {
        let mut accepted = StatusCode::ACCEPTED.into_response();
        assert!(deleted(&mut accepted));
        assert_eq!(accepted.status(), StatusCode::NO_CONTENT);
        let mut missing = no_such_session();
        assert!(!deleted(&mut missing));
        assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    }
}
