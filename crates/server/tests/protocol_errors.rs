//! Protocol answers to malformed requests (issue #20 item 13, issue #19): every request gets
//! an answer with its own id and the right code, and a line no id can be read from gets one
//! with a null id, so no client waits forever. Over the real stdio transport and rmcp's serve
//! loop (both eras), and over HTTP for the parameter-type errors.

mod common;

use std::sync::Arc;
use std::time::Duration;

use mcpr_provider_files::encode_path_uri;
use mcpr_server::{McpHandler, ServerState};
use rmcp::ServiceExt;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const INIT: &str = r#"{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
const META_2026: &str = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"}}"#;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Era {
    Legacy,
    Modern,
}

/// A stdio session: `lines` (raw bytes, one message each) after the era's opening, then EOF;
/// every answer line, parsed, in order, the opening's left out.
async fn session(
    state: Arc<ServerState>,
    era: Era,
    lines: &[Vec<u8>],
    max_line: Option<usize>,
) -> Vec<Value> {
    let (transport, client_r, client_w) = common::stdio_socket();
    let mut transport = transport.with_direct_reads(McpHandler::new(state.clone()));
    if let Some(max) = max_line {
        transport = transport.with_max_line_length(max);
    }
    let server = tokio::spawn(async move {
        if let Ok(running) = McpHandler::new(state).serve(transport).await {
            let _ = running.waiting().await;
        }
    });
    let mut input = Vec::new();
    let mut expected = 0;
    match era {
        Era::Legacy => {
            input.extend_from_slice(format!("{INIT}\n{INITIALIZED}\n").as_bytes());
            expected += 1;
        }
        Era::Modern => {
            // A well-formed 2026-07-28 request opens the inline session first.
            input.extend_from_slice(
                format!(
                    r#"{{"jsonrpc":"2.0","id":"open","method":"resources/templates/list","params":{{"_meta":{META_2026}}}}}"#
                )
                .as_bytes(),
            );
            input.push(b'\n');
            expected += 1;
        }
    }
    for l in lines {
        input.extend_from_slice(l);
        input.push(b'\n');
    }
    let mut w = client_w;
    let writer = tokio::spawn(async move {
        w.write_all(&input).await.unwrap();
        // Closing stdin ends the session once everything is answered.
        w.shutdown().await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(w);
    });
    let mut r = BufReader::new(client_r);
    let mut got = Vec::new();
    loop {
        let mut line = String::new();
        let n = tokio::time::timeout(Duration::from_secs(10), r.read_line(&mut line))
            .await
            .expect("the server stopped answering")
            .unwrap();
        if n == 0 {
            break;
        }
        got.push(serde_json::from_str::<Value>(&line).unwrap());
    }
    writer.await.unwrap();
    server.await.unwrap();
    // The opening's answer, wherever it came (the transport's own answers can precede it).
    let before = got.len();
    got.retain(|a| a["id"] != "init" && a["id"] != "open");
    assert_eq!(before - got.len(), expected, "no opening answer: {got:?}");
    got
}

fn meta_for(era: Era) -> String {
    match era {
        Era::Legacy => String::new(),
        Era::Modern => format!(r#","_meta":{META_2026}"#),
    }
}

fn request(id: u32, method: &str, params: &str) -> Vec<u8> {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#).into_bytes()
}

/// The answer with `id`.
fn by_id(answers: &[Value], id: u32) -> &Value {
    answers
        .iter()
        .find(|a| a["id"] == id)
        .unwrap_or_else(|| panic!("no answer to {id}: {answers:?}"))
}

fn assert_error(a: &Value, code: i64, words: &[&str]) {
    assert_eq!(a["error"]["code"], code, "{a}");
    let msg = a["error"]["message"].as_str().unwrap();
    for w in words {
        assert!(msg.contains(w), "{w:?} not in {a}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn params_of_the_wrong_type_answer_invalid_params_with_the_request_id() {
    let (_dir, _root, state) = common::comparison_tree();
    for era in [Era::Legacy, Era::Modern] {
        let lines = vec![
            request(1, "resources/list", "[]"),
            request(2, "ping", r#""x""#),
            request(3, "resources/templates/list", "7"),
            request(4, "no/such", "[]"),
        ];
        let answers = session(state.clone(), era, &lines, None).await;
        assert_eq!(answers.len(), 4, "{era:?}: {answers:?}");
        assert_error(
            by_id(&answers, 1),
            -32602,
            &["resources/list", "must be an object", "array"],
        );
        assert_error(by_id(&answers, 2), -32602, &["ping", "string"]);
        assert_error(by_id(&answers, 3), -32602, &["number"]);
        assert_error(by_id(&answers, 4), -32601, &["no/such"]);
    }
}

/// A -32601 says what is missing, not only the method's name: a client asking a server
/// without the tool bridge for tools learns that it offers resources and how to get tools,
/// one asking for prompts that there are none, one sending a method its era removed what
/// replaced it, and one sending an unknown method what there is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn method_not_found_says_what_is_missing_and_what_is_offered() {
    let (_dir, _root, state) = common::comparison_tree();
    for era in [Era::Legacy, Era::Modern] {
        let meta = match era {
            Era::Legacy => "{}".to_owned(),
            Era::Modern => format!(r#"{{"_meta":{META_2026}}}"#),
        };
        let lines = vec![
            request(1, "tools/list", &meta),
            request(2, "prompts/list", &meta),
            request(3, "no/such", &meta),
            request(4, "tools/call", "[]"),
        ];
        let answers = session(state.clone(), era, &lines, None).await;
        assert_error(
            by_id(&answers, 1),
            -32601,
            &[
                "tools/list",
                "does not offer tools",
                "offers resources",
                "--tools",
            ],
        );
        assert_error(
            by_id(&answers, 2),
            -32601,
            &["prompts/list", "does not offer prompts", "offers resources"],
        );
        assert_error(
            by_id(&answers, 3),
            -32601,
            &["no/such", "no such method", "resources/read"],
        );
        // Refused before rmcp (params that are not an object) with the same wording.
        assert_error(
            by_id(&answers, 4),
            -32601,
            &["tools/call", "does not offer tools"],
        );
    }
    // rmcp itself refuses a well-formed request of a method the era removed; one it cannot
    // decode reaches the handler, which says what replaced the method.
    let lines = vec![request(
        5,
        "resources/subscribe",
        &format!(r#"{{"uri":5,"_meta":{META_2026}}}"#),
    )];
    let answers = session(state, Era::Modern, &lines, None).await;
    assert_error(
        by_id(&answers, 5),
        -32601,
        &["resources/subscribe", "2026-07-28", "subscriptions/listen"],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_lines_answer_with_a_null_id() {
    let (_dir, _root, state) = common::comparison_tree();
    let ping = |id: u32| format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
    for era in [Era::Legacy, Era::Modern] {
        let mut invalid_utf8 = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"pi".to_vec();
        invalid_utf8.extend_from_slice(b"\xff\xfeng\"}");
        let lines = vec![
            invalid_utf8,
            br#"{"jsonrpc":"2.0","id":1e400,"method":"ping"}"#.to_vec(),
            format!("{}{}", ping(2), ping(3)).into_bytes(),
            // Over the (test-sized) line limit of 4 KiB.
            format!(
                r#"{{"jsonrpc":"2.0","id":4,"method":"ping","params":{{"_meta":{{"pad":"{}"}}}}}}"#,
                "p".repeat(5000)
            )
            .into_bytes(),
            b"[1,2]".to_vec(),
            // The session still works after all of them.
            ping(5).into_bytes(),
        ];
        let answers = session(state.clone(), era, &lines, Some(4096)).await;
        assert_eq!(answers.len(), 6, "{era:?}: {answers:?}");
        let nulls: Vec<&Value> = answers.iter().filter(|a| a["id"].is_null()).collect();
        for a in &nulls {
            assert!(
                a.get("id").is_some(),
                "JSON-RPC 2.0 asks for \"id\": null: {a}"
            );
        }
        assert_eq!(nulls.len(), 5, "{era:?}: {answers:?}");
        assert_error(nulls[0], -32700, &["UTF-8"]);
        assert_error(nulls[1], -32600, &["number out of range"]);
        assert_error(nulls[2], -32700, &["trailing characters"]);
        assert_error(nulls[3], -32600, &["longer than 4096 bytes"]);
        assert_error(nulls[4], -32600, &["a JSON object"]);
        // Answered as usual (a 2026-07-28 ping without its `_meta` is refused by rmcp).
        let last = by_id(&answers, 5);
        assert!(
            last["result"].is_object() || last["error"]["code"] == -32602,
            "{answers:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_cursor_of_the_wrong_type_is_invalid_params() {
    let (_dir, _root, state) = common::comparison_tree();
    for era in [Era::Legacy, Era::Modern] {
        let meta = meta_for(era);
        let lines = vec![
            request(1, "resources/list", &format!(r#"{{"cursor":1{meta}}}"#)),
            request(
                2,
                "resources/templates/list",
                &format!(r#"{{"cursor":{{}}{meta}}}"#),
            ),
            // A list without a cursor still starts at the beginning.
            request(3, "resources/list", &format!(r#"{{"cursor":null{meta}}}"#)),
        ];
        let answers = session(state.clone(), era, &lines, None).await;
        assert_error(
            by_id(&answers, 1),
            -32602,
            &["`cursor`", "expected a string"],
        );
        assert_error(by_id(&answers, 2), -32602, &["`cursor`"]);
        assert!(
            by_id(&answers, 3)["result"]["resources"].is_array(),
            "{era:?}: {answers:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_localhost_reads_the_same_file() {
    let (_dir, root, state) = common::comparison_tree();
    let plain = encode_path_uri(&root.join("small.txt"));
    let localhost = plain.replacen("file:///", "file://localhost/", 1);
    for era in [Era::Legacy, Era::Modern] {
        let meta = meta_for(era);
        let lines = vec![
            request(
                1,
                "resources/read",
                &format!(r#"{{"uri":"{localhost}"{meta}}}"#),
            ),
            request(
                2,
                "resources/read",
                &format!(r#"{{"uri":"{plain}"{meta}}}"#),
            ),
        ];
        let answers = session(state.clone(), era, &lines, None).await;
        let a = &by_id(&answers, 1)["result"]["contents"][0];
        let b = &by_id(&answers, 2)["result"]["contents"][0];
        assert_eq!(a["text"], "x".repeat(1024), "{era:?}: {answers:?}");
        assert_eq!(a["text"], b["text"]);
    }
}

/// Requests of known methods with parameters of the wrong type, and the member each names.
fn wrong_types(meta: &str) -> Vec<(u32, Vec<u8>, &'static str)> {
    vec![
        (
            1,
            request(1, "resources/read", &format!(r#"{{"uri":12{meta}}}"#)),
            "`uri`",
        ),
        (
            2,
            request(2, "resources/read", &format!(r#"{{"nouri":"x"{meta}}}"#)),
            "missing field `uri`",
        ),
        (
            3,
            request(3, "completion/complete", &format!(r#"{{"ref":5{meta}}}"#)),
            "`ref`",
        ),
        (
            4,
            request(
                4,
                "resources/unsubscribe",
                &format!(r#"{{"uri":false{meta}}}"#),
            ),
            "`uri`",
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_parameter_types_are_invalid_params_over_stdio() {
    let (_dir, _root, state) = common::comparison_tree();
    for era in [Era::Legacy, Era::Modern] {
        let meta = meta_for(era);
        let mut cases = wrong_types(&meta);
        // Era-specific subscription methods, malformed.
        match era {
            Era::Legacy => cases.push((
                5,
                request(5, "resources/subscribe", r#"{"uri":{"a":1}}"#),
                "`uri`",
            )),
            Era::Modern => cases.push((
                5,
                request(
                    5,
                    "subscriptions/listen",
                    &format!(r#"{{"notifications":7{meta}}}"#),
                ),
                "`notifications`",
            )),
        }
        let lines: Vec<Vec<u8>> = cases.iter().map(|c| c.1.clone()).collect();
        let answers = session(state.clone(), era, &lines, None).await;
        for (id, _, words) in &cases {
            if era == Era::Modern && *id == 4 {
                // resources/unsubscribe does not exist in the 2026-07-28 era.
                assert_eq!(by_id(&answers, *id)["error"]["code"], -32601);
                continue;
            }
            assert_error(by_id(&answers, *id), -32602, &["invalid params", words]);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_parameter_types_are_invalid_params_over_http() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (_dir, _root, state) = common::comparison_tree();
    let settings = mcpr_server::http::HttpSettings::new("127.0.0.1:0".parse().unwrap());
    let base = common::spawn_http(state, settings).await;
    let http = reqwest::Client::new();
    let post = |body: Vec<u8>, method: &'static str, session: Option<String>, modern: bool| {
        let mut req = http
            .post(format!("{base}/mcp"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body);
        if modern {
            req = req
                .header("mcp-protocol-version", "2026-07-28")
                .header("mcp-method", method);
        }
        if let Some(s) = session {
            req = req
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", "2025-11-25");
        }
        req.send()
    };
    // The JSON-RPC message in a body that is JSON or an event stream.
    async fn message(resp: reqwest::Response) -> Value {
        let text = resp.text().await.unwrap();
        let json = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or(&text);
        serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {text}"))
    }
    let methods = [
        "resources/read",
        "resources/read",
        "completion/complete",
        "resources/unsubscribe",
    ];

    // 2026-07-28, stateless: each request stands alone.
    let meta = format!(r#","_meta":{META_2026}"#);
    for ((id, body, words), method) in wrong_types(&meta).into_iter().zip(methods) {
        if method == "resources/unsubscribe" {
            continue; // a legacy-era method
        }
        let a = message(post(body, method, None, true).await.unwrap()).await;
        assert_eq!(a["id"], id, "{a}");
        assert_error(&a, -32602, &["invalid params", words]);
    }

    // A legacy session.
    let resp = post(INIT.as_bytes().to_vec(), "initialize", None, false)
        .await
        .unwrap();
    let session = resp
        .headers()
        .get("mcp-session-id")
        .expect("a legacy session id")
        .to_str()
        .unwrap()
        .to_owned();
    let _ = message(resp).await;
    let _ = post(
        INITIALIZED.as_bytes().to_vec(),
        "",
        Some(session.clone()),
        false,
    )
    .await
    .unwrap();
    for (id, body, words) in wrong_types("") {
        let a = message(post(body, "", Some(session.clone()), false).await.unwrap()).await;
        assert_eq!(a["id"], id, "{a}");
        assert_error(&a, -32602, &["invalid params", words]);
    }
}

/// The methods the 2026-07-28 era removed are "method not found" (404 over HTTP) for a
/// request of that era even when their params are malformed: the wrong-type check of issue
/// #19 applies only to methods the request's era has (the official conformance suite's
/// `sep-2575-http-server-method-not-found-404-*` checks).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_methods_stay_method_not_found_in_the_2026_era() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (_dir, _root, state) = common::comparison_tree();
    let settings = mcpr_server::http::HttpSettings::new("127.0.0.1:0".parse().unwrap());
    let base = common::spawn_http(state, settings).await;
    let http = reqwest::Client::new();
    for (i, method) in [
        "initialize",
        "logging/setLevel",
        "resources/subscribe",
        "resources/unsubscribe",
    ]
    .into_iter()
    .enumerate()
    {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{i},"method":"{method}","params":{{"_meta":{META_2026}}}}}"#
        );
        let resp = http
            .post(format!("{base}/mcp"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method)
            .body(body)
            .send()
            .await
            .unwrap();
        let status = resp.status();
        let text = resp.text().await.unwrap();
        let json = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or(&text);
        let a: Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(status, 404, "{method}: {text}");
        assert_eq!(a["id"], i, "{a}");
        assert_eq!(a["error"]["code"], -32601, "{method}: {a}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bodies_over_http_answer_json_rpc_errors() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (_dir, _root, state) = common::comparison_tree();
    let settings = mcpr_server::http::HttpSettings::new("127.0.0.1:0".parse().unwrap());
    let base = common::spawn_http(state, settings).await;
    let http = reqwest::Client::new();
    let post = |body: String, method: &'static str, session: Option<&str>| {
        let mut req = http
            .post(format!("{base}/mcp"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body);
        req = match session {
            None => req
                .header("mcp-protocol-version", "2026-07-28")
                .header("mcp-method", method),
            Some(s) => req
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", "2025-11-25"),
        };
        req.send()
    };
    async fn answer(resp: reqwest::Response) -> (u16, Value) {
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        let json = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or(&text);
        (
            status,
            serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {status} {text}")),
        )
    }
    let body = |id: u32, method: &str, params: &str| {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#)
    };

    // 2026-07-28, stateless.
    let meta = format!(r#","_meta":{META_2026}"#);
    let (status, a) = answer(
        post(body(1, "resources/list", "[]"), "resources/list", None)
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, &a["id"]), (200, &Value::from(1)), "{a}");
    assert_error(&a, -32602, &["must be an object"]);
    let (_, a) = answer(post(body(2, "ping", r#""x""#), "ping", None).await.unwrap()).await;
    assert_eq!(a["id"], 2, "{a}");
    assert_error(&a, -32602, &["ping"]);
    let list = body(3, "resources/list", &format!(r#"{{"cursor":1{meta}}}"#));
    let (_, a) = answer(post(list, "resources/list", None).await.unwrap()).await;
    assert_eq!(a["id"], 3, "{a}");
    assert_error(&a, -32602, &["`cursor`"]);
    let (status, a) = answer(
        post("{\"jsonrpc\":\"2.0\",\"id\":4,".into(), "ping", None)
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400, "{a}");
    assert!(a.get("id").is_some_and(Value::is_null), "{a}");
    assert_error(&a, -32700, &["Parse error"]);
    // A well-formed list is untouched.
    let list = body(5, "resources/list", &format!(r#"{{"cursor":null{meta}}}"#));
    let (_, a) = answer(post(list, "resources/list", None).await.unwrap()).await;
    assert!(a["result"]["resources"].is_array(), "{a}");

    // The same malformed body sent chunked (no Content-Length) gets the same JSON-RPC error,
    // not a bare 415: written by hand, as reqwest sends a known-length body with a length.
    let payload = body(6, "resources/list", "[]");
    let host = base.trim_start_matches("http://");
    let raw = format!(
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
         Mcp-Method: resources/list\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
         {:x}\r\n{payload}\r\n0\r\n\r\n",
        payload.len()
    );
    let mut tcp = tokio::net::TcpStream::connect(host).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut tcp, raw.as_bytes())
        .await
        .unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        tokio::io::AsyncReadExt::read_to_end(&mut tcp, &mut out),
    )
    .await
    .expect("the server answers and closes")
    .unwrap();
    let out = String::from_utf8_lossy(&out);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(
        out.contains(r#""id":6"#) && out.contains("-32602") && out.contains("must be an object"),
        "{out}"
    );

    // A legacy session.
    let resp = http
        .post(format!("{base}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(INIT)
        .send()
        .await
        .unwrap();
    let session = resp.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let _ = answer(resp).await;
    let _ = post(INITIALIZED.into(), "", Some(&session)).await.unwrap();
    let (_, a) = answer(
        post(
            body(6, "resources/list", r#"{"cursor":1}"#),
            "",
            Some(&session),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(a["id"], 6, "{a}");
    assert_error(&a, -32602, &["`cursor`"]);
    let (_, a) = answer(
        post(body(7, "resources/list", "[]"), "", Some(&session))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(a["id"], 7, "{a}");
    assert_error(&a, -32602, &["must be an object"]);
}
