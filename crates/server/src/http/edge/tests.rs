//! The edge's layers through the stack [`Edge::around`] builds, in front of a real endpoint
//! that answers with what reached it: each test shows one layer's own logic (its refusal, or
//! what it leaves on the request) and that the request otherwise goes through.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::response::Response;
use bytes::Bytes;
use http::{Method, StatusCode, header};
use http_body_util::BodyExt as _;
use rmcp::transport::streamable_http_server::session::SessionManager as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use tower::{Service as _, ServiceExt as _};

use super::{Edge, HttpLimits, kind_of};
use crate::grant::Identity;
use crate::http::auth::{Auth, AuthSettings, StaticToken};
use crate::wire::codes;

/// The endpoint behind the edge: 200 (202 to a DELETE, as rmcp answers one) with the
/// caller's identity, the request's kind and `Content-Length` in headers and the body it got
/// as its body; `x-create-session` asks it to answer as if it had created that session.
async fn echo(req: Request) -> Result<Response, Infallible> {
    let identity = req
        .extensions()
        .get::<Identity>()
        .map_or_else(String::new, |i| i.as_str().to_owned());
    let kind = format!("{:?}", kind_of(&req));
    let length = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .cloned()
        .unwrap_or(http::HeaderValue::from_static("none"));
    let chunked = req.headers().contains_key(header::TRANSFER_ENCODING);
    let created = req.headers().get("x-create-session").cloned();
    let status = if req.method() == Method::DELETE {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    let body = match req.into_body().collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) => Bytes::from(format!("unreadable: {e}")),
    };
    let mut resp = Response::builder()
        .status(status)
        .header("x-identity", identity)
        .header("x-kind", kind)
        .header("x-length", length)
        .header("x-chunked", chunked.to_string())
        .body(Body::from(body))
        .expect("valid response");
    if let Some(id) = created {
        resp.headers_mut().insert("mcp-session-id", id);
    }
    Ok(resp)
}

const CLIENT: &str = "10.0.0.1:4000";

fn edge_with(limits: HttpLimits, auth: Option<Arc<Auth>>) -> Arc<Edge> {
    let sessions = Arc::new(LocalSessionManager::default());
    Edge::new(limits, sessions, auth, crate::Router::new(Vec::new()), None)
}

fn edge(limits: HttpLimits) -> Arc<Edge> {
    edge_with(limits, None)
}

/// A request from `from`, as axum's connect info leaves it.
fn request_from(from: &str, method: Method, body: Body) -> Request {
    let mut req = Request::builder()
        .method(method)
        .uri("/mcp")
        .body(body)
        .expect("valid request");
    let peer: SocketAddr = from.parse().expect("address");
    req.extensions_mut().insert(ConnectInfo(peer));
    req
}

fn post(json: &str) -> Request {
    let mut req = request_from(CLIENT, Method::POST, Body::from(json.to_owned()));
    req.headers_mut()
        .insert(header::CONTENT_LENGTH, json.len().into());
    req
}

async fn send(edge: &Edge, req: Request) -> Response {
    let Ok(resp) = edge.around(tower::service_fn(echo)).oneshot(req).await;
    resp
}

async fn body_of(resp: Response) -> String {
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    String::from_utf8(bytes.to_vec()).expect("text")
}

fn header_of<'r>(resp: &'r Response, name: &str) -> &'r str {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

/// The message of a refusal, once its status and JSON-RPC code are the ones expected.
async fn refused(resp: Response, status: StatusCode, code: i32) -> String {
    assert_eq!(resp.status(), status);
    let v: serde_json::Value = serde_json::from_str(&body_of(resp).await).expect("JSON body");
    assert_eq!(v["jsonrpc"], "2.0");
    assert!(v["id"].is_null());
    assert_eq!(v["error"]["code"], code);
    v["error"]["message"].as_str().expect("message").to_owned()
}

#[tokio::test]
async fn a_request_reaches_the_endpoint_with_its_identity_kind_and_whole_body() {
    let edge = edge(HttpLimits::default());
    let json = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;
    let resp = send(&edge, post(json)).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(header_of(&resp, "x-identity"), "address 10.0.0.1");
    assert_eq!(header_of(&resp, "x-kind"), "Initialize");
    assert_eq!(header_of(&resp, "x-length"), json.len().to_string());
    assert_eq!(body_of(resp).await, json);

    // In a session, an `initialize` opens none; a listen is a stream; a GET is one too.
    let mut in_session = post(json);
    in_session
        .headers_mut()
        .insert("mcp-session-id", "s-1".parse().expect("value"));
    let resp = send(&edge, in_session).await;
    assert_eq!(header_of(&resp, "x-kind"), "Request");
    let listen = r#"{"jsonrpc":"2.0","id":2,"method":"subscriptions/listen","params":{}}"#;
    let resp = send(&edge, post(listen)).await;
    assert_eq!(header_of(&resp, "x-kind"), "Stream");
    let resp = send(&edge, request_from(CLIENT, Method::GET, Body::empty())).await;
    assert_eq!(header_of(&resp, "x-kind"), "Stream");
    assert_eq!(header_of(&resp, "x-length"), "none");
    assert_eq!(edge.responses.classes(), [4, 0, 0, 0]);
}

#[tokio::test]
async fn a_chunked_body_goes_on_whole_with_its_length() {
    let edge = edge(HttpLimits::default());
    let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
        Ok(Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"#)),
        Ok(Bytes::from_static(br#""method":"ping"}"#)),
    ];
    let mut req = request_from(
        CLIENT,
        Method::POST,
        Body::from_stream(futures::stream::iter(chunks)),
    );
    req.headers_mut()
        .insert(header::TRANSFER_ENCODING, "chunked".parse().expect("value"));
    let resp = send(&edge, req).await;
    let whole = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    assert_eq!(header_of(&resp, "x-chunked"), "false");
    assert_eq!(header_of(&resp, "x-length"), whole.len().to_string());
    assert_eq!(header_of(&resp, "x-kind"), "Request");
    assert_eq!(body_of(resp).await, whole);
}

#[tokio::test]
async fn a_content_length_that_does_not_say_the_body_length_is_replaced() {
    let edge = edge(HttpLimits::default());
    let json = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let len = json.len().to_string();
    for wrong in [format!("0{len}"), format!("+{len}"), "4".into()] {
        let mut req = post(json);
        req.headers_mut()
            .insert(header::CONTENT_LENGTH, wrong.parse().expect("value"));
        let resp = send(&edge, req).await;
        assert_eq!(header_of(&resp, "x-length"), len, "{wrong}");
    }
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused_with_413() {
    let edge = edge(HttpLimits {
        max_body_bytes: 16,
        ..HttpLimits::default()
    });
    let resp = send(&edge, post(r#"{"method":"ping"}"#)).await;
    let message = refused(resp, StatusCode::PAYLOAD_TOO_LARGE, codes::INVALID_REQUEST).await;
    assert_eq!(
        message,
        "request body is larger than the limit of 16 bytes (max_body_bytes)"
    );
    // Exactly the limit passes.
    let resp = send(&edge, post(r#"{"method":"pin"}"#)).await;
    assert_eq!(resp.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_body_that_does_not_arrive_in_time_is_refused_with_408_and_the_connection_closed() {
    let edge = edge(HttpLimits {
        body_timeout: Duration::from_millis(50),
        ..HttpLimits::default()
    });
    let never = futures::stream::pending::<Result<Bytes, std::io::Error>>();
    let req = request_from(CLIENT, Method::POST, Body::from_stream(never));
    let resp = tokio::time::timeout(Duration::from_secs(5), send(&edge, req))
        .await
        .expect("the edge answers within the body timeout");
    assert_eq!(header_of(&resp, "connection"), "close");
    let message = refused(resp, StatusCode::REQUEST_TIMEOUT, codes::INVALID_REQUEST).await;
    assert_eq!(
        message,
        "the request body did not arrive within 50 ms (body_timeout_ms)"
    );
}

#[tokio::test]
async fn a_body_that_fails_is_refused_with_400() {
    let edge = edge(HttpLimits::default());
    let failing: Vec<Result<Bytes, std::io::Error>> = vec![
        Ok(Bytes::from_static(b"{")),
        Err(std::io::Error::other("connection reset")),
    ];
    let req = request_from(
        CLIENT,
        Method::POST,
        Body::from_stream(futures::stream::iter(failing)),
    );
    let resp = send(&edge, req).await;
    let message = refused(resp, StatusCode::BAD_REQUEST, codes::INVALID_REQUEST).await;
    assert_eq!(message, "cannot read the request body: connection reset");
}

#[tokio::test]
async fn a_client_past_its_burst_waits_and_other_clients_do_not() {
    let edge = edge(HttpLimits {
        rate_limit_per_second: 20.0,
        rate_limit_burst: 2,
        ..HttpLimits::default()
    });
    let get = |from| request_from(from, Method::GET, Body::empty());
    for _ in 0..2 {
        assert_eq!(send(&edge, get(CLIENT)).await.status(), StatusCode::OK);
    }
    let refusal = send(&edge, get(CLIENT)).await;
    // At 20 a second, the next token is at most 50 ms away: `Retry-After` is whole seconds.
    assert_eq!(header_of(&refusal, "retry-after"), "1");
    let message = refused(
        refusal,
        StatusCode::TOO_MANY_REQUESTS,
        codes::INTERNAL_ERROR,
    )
    .await;
    assert!(
        message.starts_with(
            "rate limit exceeded: at most 20 requests per second per client (burst 2); retry in "
        ),
        "{message}"
    );
    assert_eq!(
        send(&edge, get("10.0.0.2:4000")).await.status(),
        StatusCode::OK
    );
    // The bucket refills at the rate.
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert_eq!(send(&edge, get(CLIENT)).await.status(), StatusCode::OK);
    assert_eq!(edge.responses.classes(), [4, 0, 1, 0]);
}

#[tokio::test]
async fn a_request_past_the_concurrency_limit_is_refused_at_once() {
    let edge = edge(HttpLimits {
        max_concurrent_requests: 1,
        ..HttpLimits::default()
    });
    let mut svc = edge.around(tower::service_fn(echo));
    let get = || request_from(CLIENT, Method::GET, Body::empty());
    // A request holds its permit from the moment it is taken in until it is answered.
    let Ok(ready) = svc.ready().await;
    let first = ready.call(get());
    let busy = send(&edge, get()).await;
    let message = refused(busy, StatusCode::SERVICE_UNAVAILABLE, codes::INTERNAL_ERROR).await;
    assert_eq!(
        message,
        "server busy: 1 requests are already being handled (max_concurrent_requests)"
    );
    let Ok(first) = first.await;
    assert_eq!(first.status(), StatusCode::OK);
    // Answered (its body still unread): the permit is back.
    assert_eq!(send(&edge, get()).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn shutdown_refuses_new_requests_and_waits_for_answers_being_written() {
    let edge = edge(HttpLimits {
        shutdown_grace: Duration::from_secs(10),
        ..HttpLimits::default()
    });
    let writing = send(&edge, post(r#"{"method":"resources/read"}"#)).await;
    // A stream does not count: shutdown would wait the whole grace for it.
    let stream = send(&edge, request_from(CLIENT, Method::GET, Body::empty())).await;
    assert_eq!(edge.shutdown.inflight(), 1);
    let drain = tokio::spawn({
        let edge = edge.clone();
        async move { edge.shutdown.drain().await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !drain.is_finished(),
        "shutdown waits for the answer in flight"
    );
    let refusal = send(&edge, post(r#"{"method":"ping"}"#)).await;
    let message = refused(
        refusal,
        StatusCode::SERVICE_UNAVAILABLE,
        codes::INTERNAL_ERROR,
    )
    .await;
    assert_eq!(message, "the server is shutting down");
    // The answer's body done: the request is no longer in flight, and shutdown goes on.
    assert_eq!(body_of(writing).await, r#"{"method":"resources/read"}"#);
    tokio::time::timeout(Duration::from_secs(5), drain)
        .await
        .expect("shutdown ends once nothing is in flight")
        .expect("drain");
    assert_eq!(edge.shutdown.inflight(), 0);
    drop(stream);
}

#[tokio::test]
async fn an_initialize_past_the_session_cap_is_refused() {
    let edge = edge(HttpLimits {
        max_sessions: 1,
        ..HttpLimits::default()
    });
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;
    assert_eq!(send(&edge, post(initialize)).await.status(), StatusCode::OK);
    let (_id, _transport) = edge.sessions.create_session().await.expect("session");
    let refusal = send(&edge, post(initialize)).await;
    let message = refused(
        refusal,
        StatusCode::SERVICE_UNAVAILABLE,
        codes::INTERNAL_ERROR,
    )
    .await;
    assert_eq!(
        message,
        "too many sessions: 1 are open, the limit is 1 (max_sessions)"
    );
    // Requests that open no session go on.
    let ping = r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#;
    assert_eq!(send(&edge, post(ping)).await.status(), StatusCode::OK);
}

fn two_tokens() -> Arc<Auth> {
    let token = |secret: &str, name: &str| StaticToken {
        token: secret.into(),
        scopes: None,
        name: Some(name.into()),
    };
    Auth::new(AuthSettings {
        tokens: vec![token("alice-secret", "alice"), token("bob-secret", "bob")],
        ..AuthSettings::default()
    })
    .expect("auth")
}

fn with_token(mut req: Request, token: &str, session: Option<&str>) -> Request {
    let bearer = format!("Bearer {token}");
    req.headers_mut()
        .insert(header::AUTHORIZATION, bearer.parse().expect("value"));
    if let Some(id) = session {
        req.headers_mut()
            .insert("mcp-session-id", id.parse().expect("value"));
    }
    req
}

#[tokio::test]
async fn a_request_without_a_valid_token_is_refused_before_its_body_is_read() {
    let edge = edge_with(HttpLimits::default(), Some(two_tokens()));
    // A body that never comes: a refusal on the headers does not wait for it.
    let never = futures::stream::pending::<Result<Bytes, std::io::Error>>();
    let req = request_from(CLIENT, Method::POST, Body::from_stream(never));
    let resp = tokio::time::timeout(Duration::from_secs(5), send(&edge, req))
        .await
        .expect("refused on the headers");
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert!(header_of(&resp, "www-authenticate").starts_with("Bearer"));
    let expected = format!(
        r#"{{"error":{{"code":{},"message":"unauthorized: a bearer token is required (Authorization: Bearer …)"}},"id":null,"jsonrpc":"2.0"}}"#,
        codes::UNAUTHORIZED
    );
    assert_eq!(body_of(resp).await, expected);
    let resp = send(&edge, with_token(post("{}"), "bob-secret", None)).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(header_of(&resp, "x-identity"), "static token bob");
}

#[tokio::test]
async fn a_session_is_used_only_by_its_creator_until_it_is_deleted() {
    let edge = edge_with(HttpLimits::default(), Some(two_tokens()));
    let (id, _transport) = edge.sessions.create_session().await.expect("session");
    let id = id.to_string();
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;
    let mut create = with_token(post(initialize), "alice-secret", None);
    create
        .headers_mut()
        .insert("x-create-session", id.parse().expect("value"));
    assert_eq!(send(&edge, create).await.status(), StatusCode::OK);

    let ping = r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#;
    let by = |token, method: Method| {
        let body = if method == Method::POST {
            Body::from(ping)
        } else {
            Body::empty()
        };
        with_token(request_from(CLIENT, method, body), token, Some(&id))
    };
    let stranger = send(&edge, by("bob-secret", Method::POST)).await;
    assert_eq!(stranger.status(), StatusCode::NOT_FOUND);
    assert_eq!(body_of(stranger).await, "Not Found: Session not found");
    let stranger = send(&edge, by("bob-secret", Method::DELETE)).await;
    assert_eq!(stranger.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        send(&edge, by("alice-secret", Method::POST)).await.status(),
        StatusCode::OK
    );

    // Its creator ends it: rmcp's 202 goes out as 204, and the record goes with the session.
    let deleted = send(&edge, by("alice-secret", Method::DELETE)).await;
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    // A session the edge knows nothing of is rmcp's to answer (here, the endpoint's).
    assert_eq!(
        send(&edge, by("bob-secret", Method::POST)).await.status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn the_delete_of_a_session_that_does_not_exist_is_refused_as_rmcp_refuses_one() {
    let edge = edge(HttpLimits::default());
    let mut req = request_from(CLIENT, Method::DELETE, Body::empty());
    req.headers_mut()
        .insert("mcp-session-id", "no-such-session".parse().expect("value"));
    let resp = send(&edge, req).await;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    assert_eq!(body_of(resp).await, "Not Found: Session not found");
    // A DELETE that names no session reaches the endpoint; its 202 goes out as 204.
    let resp = send(&edge, request_from(CLIENT, Method::DELETE, Body::empty())).await;
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
}
