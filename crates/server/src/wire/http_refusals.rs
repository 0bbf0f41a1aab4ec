//! The mirror of what rmcp 3.11.0's streamable HTTP service (`StreamableHttpService::handle`
//! and `handle_post`, `transport/streamable_http_server/tower.rs`) does with a JSON body it
//! cannot take as a JSON-RPC message, and the two cases where this server answers in its
//! place, so that both transports answer such a message alike:
//!
//! - rmcp decodes the body as a `ClientJsonRpcMessage` (`expect_json`) and answers a failure
//!   with a bare `415 Unsupported Media Type`: `"params": []`, a known method whose params
//!   are not an object, a batch, broken JSON. A client waiting for a JSON-RPC answer gets
//!   nothing it can match to its request; here it gets the JSON-RPC error the stdio
//!   transport gives the same line ([`refusals::refusal`]). An object with neither a method
//!   nor an id (`{"a":1}`), from which no request can be read, keeps rmcp's 415.
//! - rmcp's decode of a list request drops a `cursor` that is not a string, and the params
//!   with it, so the list silently starts again from the beginning: such a body is refused
//!   with -32602 before rmcp sees it. Only once rmcp's first check, the `Host` and `Origin`
//!   headers (`validate_dns_rebinding_headers`, [`passes_host_and_origin`]), would pass the
//!   request: otherwise rmcp's 403 stands.
//!
//! Every other answer is rmcp's, unchanged. Paired with rmcp by the tests below, which send
//! the same requests to rmcp's service alone and through [`answered`] and compare.

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{Request, StatusCode};

use super::http_answers::json_error;
use super::http_checks::{AllowedHosts, passes_host_and_origin};
use super::refusals;

/// The answer to a POST whose `Content-Type` is JSON, with head `parts` and body `body`:
/// what `rmcp` (rmcp's service) answers, but for the two answers above. `gate` is the
/// `Host` and `Origin` allow-lists rmcp's service is configured with; `tools` says whether
/// `tools/*` are methods this server has.
pub(crate) async fn answered(
    parts: http::request::Parts,
    body: Bytes,
    gate: (&AllowedHosts, &[String]),
    tools: bool,
    rmcp: impl AsyncFnOnce(Request<Body>) -> Response,
) -> Response {
    if passes_host_and_origin(&parts.headers, gate.0, gate.1)
        && memchr::memmem::find(&body, b"\"cursor\"").is_some()
        && let Some(answer) = refusals::refusal(&body, false, tools)
    {
        return json_error(answer);
    }
    let response = rmcp(Request::from_parts(parts, Body::from(body.clone()))).await;
    if response.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE
        && let Some(answer) = refusals::refusal(&body, true, tools)
    {
        return json_error(answer);
    }
    response
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use mcpr_provider_files::{FilesConfig, FilesProvider};
    use serde_json::Value;

    use super::*;
    use crate::wire::rmcp_run::{self, HOSTS, META_2026 as META, parts_of, post};
    use crate::{McpHandler, ServerState, Settings};

    #[tokio::test]
    async fn only_rmcps_415_and_its_misread_cursor_are_answered_in_its_place() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(root.join("a.txt"), "a").unwrap();
        let body = |id: u32, method: &str, params: &str| {
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#)
        };
        let with_meta = |fields: &str| format!(r#"{{{fields}"_meta":{META}}}"#);
        // (the `Mcp-Method` header, the body)
        let cases: Vec<(&str, String)> = vec![
            ("resources/list", body(1, "resources/list", "[]")),
            ("ping", body(2, "ping", r#""x""#)),
            ("nothing/known", body(3, "nothing/known", "[1]")),
            ("ping", r#"{"jsonrpc":"2.0","id":4,"#.to_owned()),
            ("ping", r#"{"a":1}"#.to_owned()),
            ("ping", "[]".to_owned()),
            (
                "resources/list",
                body(5, "resources/list", &with_meta(r#""cursor":1,"#)),
            ),
            (
                "resources/list",
                body(6, "resources/list", &with_meta(r#""cursor":{},"#)),
            ),
            (
                "resources/list",
                body(7, "resources/list", &with_meta(r#""cursor":null,"#)),
            ),
            ("resources/list", body(8, "resources/list", &with_meta(""))),
            ("ping", body(9, "ping", &with_meta(""))),
        ];
        let allowed = vec!["http://localhost:3000".to_owned()];
        // (allowed origins, Host, Origin): passing rmcp's first check or not.
        let heads: Vec<(Vec<String>, &str, Option<&str>)> = vec![
            (vec![], "localhost:8080", None),
            (vec![], "[::1]:8080", None),
            (vec![], "evil.example", None),
            (vec![], "localhost:8080", Some("http://localhost:3000")),
            (
                allowed.clone(),
                "localhost:8080",
                Some("http://localhost:3000"),
            ),
            (
                allowed.clone(),
                "localhost:8080",
                Some("HTTP://LOCALHOST:3000"),
            ),
            (
                allowed.clone(),
                "localhost:8080",
                Some("http://localhost:3001"),
            ),
            (allowed.clone(), "localhost:8080", Some("null")),
            (allowed.clone(), "localhost:8080", Some("not an origin")),
        ];
        let (mut replaced_415, mut cursors, mut forbidden) = (0, 0, 0);
        let provider = Arc::new(FilesProvider::new(FilesConfig::new(&root)).unwrap());
        let state = ServerState::new(Settings::default(), vec![provider]);
        for (origins, host, origin) in &heads {
            let state = state.clone();
            let rmcp = rmcp_run::http_service(
                move || McpHandler::new(state.clone()),
                origins,
                Default::default(),
            );
            let hosts = AllowedHosts::new(&HOSTS.map(str::to_owned));
            for (method, text) in &cases {
                let what = format!("{text} with Host {host}, Origin {origin:?}");
                let request = || post(method, Body::from(text.clone()), host, *origin);
                let (theirs, _, theirs_body) =
                    parts_of(rmcp.handle(request()).await.map(Body::new)).await;
                let (parts, _) = request().into_parts();
                let ours = answered(
                    parts,
                    Bytes::from(text.clone()),
                    (&hosts, origins),
                    false,
                    async |req| rmcp.handle(req).await.map(Body::new),
                )
                .await;
                let (ours, _, ours_body) = parts_of(ours).await;
                let json = serde_json::from_slice::<Value>(&ours_body);
                let replacement = refusals::refusal(text.as_bytes(), true, false);
                if theirs == StatusCode::UNSUPPORTED_MEDIA_TYPE
                    && let Some(replacement) = replacement
                {
                    // rmcp could not decode it: the JSON-RPC error the stdio transport gives
                    // the line instead, with the request's id when one can be read.
                    replaced_415 += 1;
                    let json = json.unwrap_or_else(|e| panic!("{what}: {e}"));
                    let expected = crate::wire::encode::own_answer_json(replacement);
                    let expected: Value = serde_json::from_slice(&expected.unwrap()).unwrap();
                    assert_eq!(json, expected, "{what}");
                    let status = if json["id"].is_null() { 400 } else { 200 };
                    assert_eq!(ours.as_u16(), status, "{what}: {json}");
                } else if ours != theirs || ours_body != theirs_body {
                    // The one other difference: a cursor rmcp misreads, once its Host and
                    // Origin checks pass (rmcp then answers 200 with the list from its start).
                    cursors += 1;
                    assert_eq!(theirs, StatusCode::OK, "{what}");
                    let listed: Value = serde_json::from_slice(&theirs_body).unwrap();
                    assert!(listed["result"]["resources"].is_array(), "{what}: {listed}");
                    let json = json.unwrap();
                    assert_eq!(json["error"]["code"], -32602, "{what}: {json}");
                    assert!(
                        json["error"]["message"]
                            .as_str()
                            .is_some_and(|m| m.contains("`cursor`")),
                        "{what}: {json}"
                    );
                } else if theirs == StatusCode::FORBIDDEN {
                    forbidden += 1;
                }
            }
        }
        // Each kind was met: 5 bodies rmcp refuses with a 415 answered in its place (JSON
        // that is no message, `{"a":1}`, keeps rmcp's 415: no request can be read from it)
        // and 2 cursors it misreads, under each of the 4 heads that pass its first check; the
        // 11 bodies under each of the other 5 heads get its 403, unchanged.
        assert_eq!((replaced_415, cursors, forbidden), (20, 8, 55));
    }
}
