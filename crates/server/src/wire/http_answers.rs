//! rmcp's HTTP answers, word for word, where this server answers in rmcp's place: the HTTP
//! edge (a session bound to someone else or that does not exist, the Host and Origin checks
//! of the operational endpoints) and the direct read path (a body it cannot read, an answer
//! it cannot encode, a read cut off by shutdown) must be indistinguishable from rmcp's
//! service; the one request rmcp accepts for a session it does not hold, a DELETE
//! ([`accepts_unknown_session`]); and the one answer of rmcp's that clients refuse, its 202
//! to a DELETE, rewritten.
//!
//! Copies of rmcp 3.11.0's `transport/streamable_http_server/tower.rs` (`handle`,
//! `validate_dns_rebinding_headers` with `bad_request_response` and `forbidden_response`,
//! `handle_get`, `handle_post`, `handle_delete`) and `transport/common/server_side_http.rs`
//! (`expect_json`). Paired with rmcp by the tests below, which make rmcp's service give each
//! answer and compare it with the copy, and by `tests/http_direct.rs` (both paths, byte for
//! byte), `tests/sessions.rs` and `tests/http_hardening.rs` (the same requests to rmcp's
//! endpoint and to ours).

use axum::body::Body;
use axum::response::Response;
use http::{Method, StatusCode, header};
use rmcp::model::{JsonRpcMessage, ServerJsonRpcMessage};

use super::encode;
use super::http_checks::{HostOrOrigin, JSON};

/// rmcp's answer to an unknown session id: a session bound to someone else must look
/// exactly like one that does not exist.
pub(crate) fn no_such_session() -> Response {
    plain(StatusCode::NOT_FOUND, "Not Found: Session not found".into())
}

/// Whether rmcp's service accepts a request of `method` that names a session it does not
/// hold. rmcp 3.11.0's `handle_get` and `handle_post` answer such a request
/// [`no_such_session`]; its `handle_delete` closes whatever session a DELETE names, held or
/// not (`LocalSessionManager::close_session` of an unknown id is no error), and answers 202.
/// So in front of rmcp, a DELETE has to be checked against the sessions that exist and
/// answered [`no_such_session`] for one that does not (the edge's session-owner step), or
/// a DELETE would tell a stranger nothing and a client that made up an id "success".
pub(crate) fn accepts_unknown_session(method: &Method) -> bool {
    method == Method::DELETE
}

/// rmcp's answer to a request its Host and Origin check refuses
/// (`validate_dns_rebinding_headers`): 400 in plain text (`bad_request_response`) for a
/// `Host` it cannot read, else 403 with no `Content-Type` (`forbidden_response`).
pub(crate) fn host_or_origin(why: HostOrOrigin) -> Response {
    let bad_request = |text: &str| {
        Response::builder()
            .status(StatusCode::BAD_REQUEST)
            .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
            .body(Body::from(text.to_owned()))
            .expect("valid response")
    };
    let forbidden = |text: &str| plain(StatusCode::FORBIDDEN, text.to_owned());
    match why {
        HostOrOrigin::MissingHost => bad_request("Bad Request: missing Host header"),
        HostOrOrigin::HostEncoding => bad_request("Bad Request: Invalid Host header encoding"),
        HostOrOrigin::InvalidHost => bad_request("Bad Request: Invalid Host header"),
        HostOrOrigin::HostNotAllowed => forbidden("Forbidden: Host header is not allowed"),
        HostOrOrigin::OriginEncoding => forbidden("Forbidden: Invalid Origin header encoding"),
        HostOrOrigin::InvalidOrigin => forbidden("Forbidden: Invalid Origin header"),
        HostOrOrigin::OriginNotAllowed => forbidden("Forbidden: Origin header is not allowed"),
    }
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

/// A plain-text answer, as rmcp writes its HTTP errors: no `Content-Type`.
pub(crate) fn plain(status: StatusCode, text: String) -> Response {
    Response::builder()
        .status(status)
        .body(Body::from(text))
        .expect("valid response")
}

#[cfg(test)]
mod tests {
    use rmcp::model::ListResourcesResult;
    use rmcp::service::{RequestContext, RoleServer};
    use rmcp::{ErrorData, ServerHandler};
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::wire::rmcp_run::{self, META_2026, legacy_post, parts_of, post};

    /// A handler whose `resources/list` never answers (a read still running at shutdown).
    struct Stuck;

    impl ServerHandler for Stuck {
        async fn list_resources(
            &self,
            _: Option<rmcp::model::PaginatedRequestParams>,
            _: RequestContext<RoleServer>,
        ) -> Result<ListResourcesResult, ErrorData> {
            std::future::pending().await
        }
    }

    /// rmcp's answer (`theirs`) and the copy (`ours`): the same status, type and words.
    async fn same(theirs: rmcp_run::RmcpResponse, ours: Response, what: &str) {
        let theirs = parts_of(theirs.map(Body::new)).await;
        let ours = parts_of(ours).await;
        assert_eq!(
            (theirs.0, theirs.1, String::from_utf8_lossy(&theirs.2)),
            (ours.0, ours.1, String::from_utf8_lossy(&ours.2)),
            "{what}"
        );
    }

    const PING: &str = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;

    #[tokio::test]
    async fn the_answers_given_in_rmcps_place_are_rmcps_own() {
        let rmcp = rmcp_run::http_service(|| Stuck, &[], CancellationToken::new());
        let ping = || Body::from(PING);
        same(
            rmcp.handle(post("ping", ping(), "evil.example", None))
                .await,
            host_or_origin(HostOrOrigin::HostNotAllowed),
            "a Host outside the list",
        )
        .await;
        same(
            rmcp.handle(post(
                "ping",
                ping(),
                "localhost",
                Some("http://evil.example"),
            ))
            .await,
            host_or_origin(HostOrOrigin::OriginNotAllowed),
            "an Origin outside the list",
        )
        .await;
        same(
            rmcp.handle(legacy_post(PING, Some("no-such-session")))
                .await,
            no_such_session(),
            "an unknown session",
        )
        .await;
        let gone = || std::io::Error::other("the client went away");
        let broken = Body::from_stream(futures::stream::iter([
            Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"{\"jsonrpc\"")),
            Err(gone()),
        ]));
        same(
            rmcp.handle(post("ping", broken, "localhost", None)).await,
            unreadable_body(axum::Error::new(gone())),
            "a body that cannot be read",
        )
        .await;
    }

    #[tokio::test]
    async fn a_session_ended_by_delete_is_rmcps_202_rewritten_alone() {
        let rmcp = rmcp_run::http_service(|| Stuck, &[], CancellationToken::new());
        let [init, initialized] = rmcp_run::legacy_opening();
        let opened = rmcp.handle(legacy_post(&init, None)).await;
        let session = opened.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        rmcp.handle(legacy_post(&initialized, Some(&session))).await;
        let delete = || {
            http::Request::builder()
                .method(http::Method::DELETE)
                .uri("/mcp")
                .header("host", "localhost")
                .header("mcp-session-id", &session)
                .body(Body::empty())
                .unwrap()
        };
        let mut ended = rmcp.handle(delete()).await.map(Body::new);
        assert_eq!(
            ended.status(),
            StatusCode::ACCEPTED,
            "rmcp's answer to a DELETE"
        );
        assert!(deleted(&mut ended));
        assert_eq!(ended.status(), StatusCode::NO_CONTENT);
        // rmcp gives the same 202 to a DELETE of a session it does not hold (which is why
        // the edge answers those itself, with `no_such_session`: `accepts_unknown_session`).
        let again = rmcp.handle(delete()).await;
        assert_eq!(again.status(), StatusCode::ACCEPTED);
        // Any other answer of rmcp's is left as it is.
        let mut other = rmcp
            .handle(legacy_post(PING, Some("no-such-session")))
            .await
            .map(Body::new);
        assert!(!deleted(&mut other));
        assert_eq!(other.status(), StatusCode::NOT_FOUND);
    }

    /// Each method rmcp serves, naming a session it never opened: rmcp accepts exactly the
    /// ones `accepts_unknown_session` names (its 202), and answers every other with the 404
    /// the edge gives those (`no_such_session`), word for word.
    #[tokio::test]
    async fn rmcp_accepts_a_session_it_does_not_hold_only_where_the_copy_says() {
        let rmcp = rmcp_run::http_service(|| Stuck, &[], CancellationToken::new());
        let naming_unknown = |method: Method| {
            let body = if method == Method::POST {
                Body::from(PING)
            } else {
                Body::empty()
            };
            http::Request::builder()
                .method(method)
                .uri("/mcp")
                .header("host", "localhost")
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("mcp-session-id", "no-such-session")
                .body(body)
                .unwrap()
        };
        let mut accepted = Vec::new();
        for method in [Method::GET, Method::POST, Method::DELETE] {
            let answer = rmcp.handle(naming_unknown(method.clone())).await;
            if answer.status().is_success() {
                assert_eq!(answer.status(), StatusCode::ACCEPTED, "{method}");
                accepted.push(method.clone());
            } else {
                same(answer, no_such_session(), method.as_str()).await;
            }
            assert_eq!(
                accepts_unknown_session(&method),
                accepted.contains(&method),
                "{method}"
            );
        }
        assert_eq!(accepted, [Method::DELETE]);
    }

    #[tokio::test]
    async fn a_request_cut_off_by_shutdown_gets_rmcps_words() {
        let shutdown = CancellationToken::new();
        let rmcp = std::sync::Arc::new(rmcp_run::http_service(|| Stuck, &[], shutdown.clone()));
        let list = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"resources/list","params":{{"_meta":{META_2026}}}}}"#
        );
        let req = post("resources/list", Body::from(list), "localhost", None);
        let running = {
            let rmcp = rmcp.clone();
            tokio::spawn(async move { rmcp.handle(req).await })
        };
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        shutdown.cancel();
        same(
            running.await.unwrap(),
            cut_off(),
            "a read cut off by shutdown",
        )
        .await;
    }
}
