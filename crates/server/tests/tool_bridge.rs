//! The tool bridge (issue #17): rmcp's own client calling every tool over our stdio
//! transport in both eras, the bounded search walk, per-mount scopes over authenticated
//! HTTP, and "method not found" for tools and prompts when the server does not declare them.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use mcpr_core::Provider;
use mcpr_provider_files::{FilesConfig, FilesProvider, encode_path_uri};
use mcpr_server::http::{AuthSettings, HttpSettings, StaticToken};
use mcpr_server::{McpHandler, SCAN_MAX_PAGES, ServerState, Settings};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientConfig, ContentBlock, ProtocolVersion,
    ResourceContents,
};
use rmcp::service::{ClientLifecycleMode, RoleClient, RunningService, serve_client_with_lifecycle};
use rmcp::{ServiceError, ServiceExt};
use serde_json::{Value, json};

#[derive(Clone)]
struct Client;

impl rmcp::ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::default()
    }
}

/// A 1x1 PNG.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x00, 0x01, 0x00, 0x00,
    0x05, 0x00, 0x01, 0x0d, 0x0a, 0x2d, 0xb4, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae,
    0x42, 0x60, 0x82,
];

struct Tree {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
}

/// `notes.md` (two lines), `pic.png`, `data.bin` (binary), `big.txt` (over a 1 KiB limit),
/// and `many/f00.txt` … `many/f59.txt`, `many/zz-needle.md` last.
fn tree() -> Tree {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("notes.md"), "# Notes\nsecond line\n").unwrap();
    std::fs::write(root.join("pic.png"), PNG).unwrap();
    std::fs::write(root.join("data.bin"), [0u8, 255, 1, 2, 254]).unwrap();
    std::fs::write(root.join("big.txt"), "x".repeat(4096)).unwrap();
    std::fs::create_dir(root.join("many")).unwrap();
    for i in 0..60 {
        std::fs::write(root.join(format!("many/f{i:02}.txt")), "f").unwrap();
    }
    std::fs::write(root.join("many/zz-needle.md"), "found").unwrap();
    Tree { _dir: dir, root }
}

fn state(t: &Tree, page_size: usize, tools: bool) -> Arc<ServerState> {
    let provider: Arc<dyn Provider> =
        Arc::new(FilesProvider::new(FilesConfig::new(&t.root)).unwrap());
    let settings = Settings {
        page_size,
        max_read_bytes: 1024,
        tools,
        ..Settings::default()
    };
    ServerState::new(settings, vec![provider])
}

/// rmcp's client on our stdio transport (direct reads on, as the binary runs it).
async fn connect(state: &Arc<ServerState>, modern: bool) -> RunningService<RoleClient, Client> {
    let (transport, client_r, client_w) = common::stdio_socket();
    let transport = transport.with_direct_reads(McpHandler::new(state.clone()));
    let handler = McpHandler::new(state.clone());
    tokio::spawn(async move {
        if let Ok(running) = handler.serve(transport).await {
            let _ = running.waiting().await;
        }
    });
    let mode = if modern {
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        }
    } else {
        ClientLifecycleMode::Initialize
    };
    serve_client_with_lifecycle(Client, (client_r, client_w), mode)
        .await
        .expect("client connects")
}

async fn call(
    client: &RunningService<RoleClient, Client>,
    tool: &str,
    args: Value,
) -> Result<CallToolResult, ServiceError> {
    let mut params = CallToolRequestParams::new(tool.to_owned());
    if let Value::Object(map) = args {
        params = params.with_arguments(map);
    }
    tokio::time::timeout(Duration::from_secs(10), client.call_tool(params))
        .await
        .expect("the tool answers in time")
}

/// A successful result's JSON (its text content, which must equal its structured content).
fn json_of(r: &CallToolResult) -> Value {
    assert_ne!(r.is_error, Some(true), "{r:?}");
    let ContentBlock::Text(t) = &r.content[0] else {
        panic!("not text: {r:?}")
    };
    let v: Value = serde_json::from_str(&t.text).unwrap();
    assert_eq!(r.structured_content.as_ref(), Some(&v));
    v
}

/// An `isError` result's message.
fn error_of(r: &CallToolResult) -> String {
    assert_eq!(r.is_error, Some(true), "{r:?}");
    let ContentBlock::Text(t) = &r.content[0] else {
        panic!("not text: {r:?}")
    };
    t.text.clone()
}

fn code_of(e: ServiceError) -> i32 {
    match e {
        ServiceError::McpError(e) => e.code.0,
        other => panic!("not a JSON-RPC error: {other:?}"),
    }
}

fn uris(v: &Value, key: &str) -> Vec<String> {
    v[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["uri"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tool_in_both_eras() {
    let t = tree();
    let state = state(&t, 25, true);
    let uri = |rel: &str| encode_path_uri(&t.root.join(rel));
    for modern in [false, true] {
        let client = connect(&state, modern).await;
        let info = client.peer_info().expect("server info");
        assert!(info.capabilities.tools.is_some(), "tools declared");
        assert!(info.capabilities.prompts.is_none());

        let tools = client.list_all_tools().await.unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(
            names,
            [
                "list_resources",
                "read_resource",
                "list_resource_templates",
                "complete_resource_argument",
                "search_resources"
            ]
        );
        assert!(
            tools
                .iter()
                .all(|t| t.annotations.as_ref().unwrap().read_only_hint == Some(true))
        );

        // list_resources: no arguments lists from the start; the cursor continues; the
        // pages together are exactly resources/list's.
        let mut listed = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..10 {
            let args = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let page = json_of(&call(&client, "list_resources", args).await.unwrap());
            listed.extend(uris(&page, "resources"));
            cursor = page["nextCursor"].as_str().map(str::to_owned);
            if cursor.is_none() {
                break;
            }
        }
        assert!(cursor.is_none(), "the listing ends");
        let all = client.list_all_resources().await.unwrap();
        let direct: Vec<String> = all.into_iter().map(|r| r.uri.clone()).collect();
        assert_eq!(listed, direct);
        assert_eq!(listed.len(), 65);
        // With a prefix: only what is under it.
        let under = json_of(
            &call(&client, "list_resources", json!({"prefix": uri("many/")}))
                .await
                .unwrap(),
        );
        assert!(
            uris(&under, "resources")
                .iter()
                .all(|u| u.starts_with(&uri("many/")))
        );
        assert!(!uris(&under, "resources").is_empty());

        // read_resource: text, image, other binary, a window, and failures as isError.
        let r = call(&client, "read_resource", json!({"uri": uri("notes.md")}))
            .await
            .unwrap();
        assert_ne!(r.is_error, Some(true));
        assert!(
            matches!(&r.content[0], ContentBlock::Text(t) if t.text == "# Notes\nsecond line\n")
        );
        let r = call(&client, "read_resource", json!({"uri": uri("pic.png")}))
            .await
            .unwrap();
        let ContentBlock::Image(img) = &r.content[0] else {
            panic!("an image: {r:?}")
        };
        assert_eq!(img.mime_type, "image/png");
        use base64::Engine as _;
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(&img.data)
                .unwrap(),
            PNG
        );
        let r = call(&client, "read_resource", json!({"uri": uri("data.bin")}))
            .await
            .unwrap();
        let ContentBlock::Resource(res) = &r.content[0] else {
            panic!("an embedded resource: {r:?}")
        };
        assert!(
            matches!(&res.resource, ResourceContents::BlobResourceContents { blob, uri: u, .. } if blob == "AP8BAv4=" && *u == uri("data.bin"))
        );
        let window = format!("{}?head=1", uri("notes.md"));
        let r = call(&client, "read_resource", json!({"uri": window}))
            .await
            .unwrap();
        assert!(
            matches!(&r.content[0], ContentBlock::Text(t) if t.text == "# Notes\n"),
            "{r:?}"
        );
        // The same message resources/read gives.
        let missing = uri("nope.md");
        let msg = error_of(
            &call(&client, "read_resource", json!({"uri": missing}))
                .await
                .unwrap(),
        );
        assert_eq!(msg, format!("Resource not found: {missing}"));
        let direct = client
            .read_resource(rmcp::model::ReadResourceRequestParams::new(missing.clone()))
            .await
            .unwrap_err();
        let ServiceError::McpError(direct) = direct else {
            panic!()
        };
        assert_eq!(direct.message, msg);
        let msg = error_of(
            &call(&client, "read_resource", json!({"uri": uri("big.txt")}))
                .await
                .unwrap(),
        );
        assert!(msg.contains("1024"), "names the limit: {msg}");
        // Outside the root: not found, as for resources/read.
        let outside = error_of(
            &call(
                &client,
                "read_resource",
                json!({"uri": "file:///etc/passwd"}),
            )
            .await
            .unwrap(),
        );
        assert!(outside.contains("not found"), "{outside}");
        // Bad arguments are an isError result naming the argument.
        let msg = error_of(&call(&client, "read_resource", json!({})).await.unwrap());
        assert!(msg.contains("missing field `uri`"), "{msg}");
        let msg = error_of(
            &call(&client, "read_resource", json!({"uri": 5}))
                .await
                .unwrap(),
        );
        assert!(msg.contains("`uri`"), "{msg}");
        let msg = error_of(
            &call(&client, "list_resources", json!({"cursor": "garbage"}))
                .await
                .unwrap(),
        );
        assert!(msg.contains("invalid cursor"), "{msg}");

        // Templates with their arguments; completion as completion/complete gives it.
        let templates = json_of(
            &call(&client, "list_resource_templates", json!({}))
                .await
                .unwrap(),
        );
        let list = templates["resourceTemplates"].as_array().unwrap();
        assert!(!list.is_empty());
        let first = &list[0];
        let template = first["uriTemplate"].as_str().unwrap().to_owned();
        let arguments = first["arguments"].as_array().unwrap();
        assert!(!arguments.is_empty(), "{first}");
        let argument = arguments[0].as_str().unwrap().to_owned();
        let done = json_of(
            &call(
                &client,
                "complete_resource_argument",
                json!({"template": template, "argument": argument, "value": "no"}),
            )
            .await
            .unwrap(),
        );
        let mut req = rmcp::model::CompleteRequestParams::new(
            rmcp::model::Reference::for_resource(template.clone()),
            rmcp::model::ArgumentInfo::new(argument.clone(), "no"),
        );
        req.context = None;
        let direct = client.complete(req).await.unwrap();
        assert_eq!(done["values"], json!(direct.completion.values));
        assert!(
            done["values"]
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v.as_str().unwrap().contains("notes.md")),
            "{done}"
        );
        let msg = error_of(
            &call(
                &client,
                "complete_resource_argument",
                json!({"template": "nope://{x}", "argument": "x"}),
            )
            .await
            .unwrap(),
        );
        assert!(msg.contains("no resource template"), "{msg}");

        // Search: substring and glob, case-insensitive.
        let found = json_of(
            &call(&client, "search_resources", json!({"query": "NEEDLE"}))
                .await
                .unwrap(),
        );
        let mut hits = uris(&found, "matches");
        let mut next = found["nextCursor"].as_str().map(str::to_owned);
        while let Some(c) = next {
            let more = json_of(
                &call(
                    &client,
                    "search_resources",
                    json!({"query": "NEEDLE", "cursor": c}),
                )
                .await
                .unwrap(),
            );
            hits.extend(uris(&more, "matches"));
            next = more["nextCursor"].as_str().map(str::to_owned);
        }
        assert_eq!(hits, [uri("many/zz-needle.md")]);
        let md = json_of(
            &call(&client, "search_resources", json!({"query": "*.md"}))
                .await
                .unwrap(),
        );
        let md = uris(&md, "matches");
        assert!(md.contains(&uri("notes.md")) && md.iter().all(|u| u.ends_with(".md")));
        let msg = error_of(
            &call(&client, "search_resources", json!({"query": ""}))
                .await
                .unwrap(),
        );
        assert!(msg.contains("empty"), "{msg}");

        // An unknown tool is a protocol error, -32602; prompts stay method not found.
        let e = call(&client, "write_file", json!({})).await.unwrap_err();
        assert_eq!(code_of(e), -32602);
        let e = client.list_prompts(None).await.unwrap_err();
        assert_eq!(code_of(e), -32601);
        client.cancel().await.unwrap();
    }
}

/// A tools-only client cannot call resources/templates/list: a completion of an unknown
/// template sends it to the bridge's own list_resource_templates; an argument the template
/// does not have is an error naming the ones it has, not an empty list that reads as "no
/// value matches".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_errors_point_a_tools_only_client_at_tools_it_can_call() {
    let t = tree();
    let state = state(&t, 25, true);
    for modern in [false, true] {
        let client = connect(&state, modern).await;
        let msg = error_of(
            &call(
                &client,
                "complete_resource_argument",
                json!({"template": "nope://{x}", "argument": "x"}),
            )
            .await
            .unwrap(),
        );
        assert!(
            msg.contains("no resource template \"nope://{x}\"")
                && msg.contains("list_resource_templates"),
            "{msg}"
        );
        assert!(!msg.contains("resources/templates/list"), "{msg}");

        let templates = json_of(
            &call(&client, "list_resource_templates", json!({}))
                .await
                .unwrap(),
        );
        let first = &templates["resourceTemplates"][0];
        let template = first["uriTemplate"].as_str().unwrap();
        let arguments: Vec<&str> = first["arguments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert!(
            !arguments.is_empty() && !arguments.contains(&"pth"),
            "{first}"
        );
        let msg = error_of(
            &call(
                &client,
                "complete_resource_argument",
                json!({"template": template, "argument": "pth", "value": ""}),
            )
            .await
            .unwrap(),
        );
        assert_eq!(
            msg,
            format!(
                "template {template:?} has no argument \"pth\"; its arguments are {}",
                arguments.join(", ")
            )
        );
        // A real argument still completes.
        let done = json_of(
            &call(
                &client,
                "complete_resource_argument",
                json!({"template": template, "argument": arguments[0], "value": "no"}),
            )
            .await
            .unwrap(),
        );
        assert!(
            done["values"]
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v.as_str().unwrap().contains("notes.md")),
            "{done}"
        );
        client.cancel().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_does_bounded_work_per_call_and_continues() {
    let t = tree();
    // 65 entries in pages of 2: one call may examine at most SCAN_MAX_PAGES pages.
    let state = state(&t, 2, true);
    let client = connect(&state, true).await;
    let mut calls = 0;
    let mut cursor: Option<String> = None;
    let mut hits = Vec::new();
    let mut examined = 0;
    loop {
        calls += 1;
        assert!(calls <= 10, "the search ends");
        let mut args = json!({"query": "zz-needle"});
        if let Some(c) = &cursor {
            args["cursor"] = json!(c);
        }
        let page = json_of(&call(&client, "search_resources", args).await.unwrap());
        let n = page["examined"].as_u64().unwrap() as usize;
        assert!(n <= SCAN_MAX_PAGES * 2, "examined {n} in one call");
        examined += n;
        hits.extend(uris(&page, "matches"));
        cursor = page["nextCursor"].as_str().map(str::to_owned);
        if cursor.is_none() {
            break;
        }
    }
    assert!(
        calls >= 2,
        "65 entries need more than one call of {} pages",
        SCAN_MAX_PAGES
    );
    assert_eq!(examined, 65, "every entry examined exactly once");
    assert_eq!(hits, [encode_path_uri(&t.root.join("many/zz-needle.md"))]);
    client.cancel().await.unwrap();
}

/// The metrics say what was done: a search walks the listings but is counted as a search,
/// while `list_resources` (with a prefix, the same walk) is a listing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_is_counted_as_a_search_not_as_a_listing() {
    let t = tree();
    let state = state(&t, 100, true);
    let client = connect(&state, true).await;
    let page = json_of(
        &call(&client, "search_resources", json!({"query": "zz-needle"}))
            .await
            .unwrap(),
    );
    assert_eq!(uris(&page, "matches").len(), 1);
    let prefix = encode_path_uri(&t.root.join("many"));
    json_of(
        &call(&client, "list_resources", json!({"prefix": prefix}))
            .await
            .unwrap(),
    );
    let m = state.metrics();
    assert_eq!(m.count("search_resources", "ok"), 1);
    assert_eq!(m.count("resources/list", "ok"), 1, "only the listing");
    let mut rendered = String::new();
    m.render(&mut rendered);
    assert!(
        rendered.contains("mcp_requests_total{method=\"search_resources\",outcome=\"ok\"} 1\n"),
        "{rendered}"
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_bridge_tools_and_prompts_are_method_not_found() {
    let t = tree();
    let state = state(&t, 25, false);
    for modern in [false, true] {
        let client = connect(&state, modern).await;
        let info = client.peer_info().expect("server info");
        assert!(info.capabilities.tools.is_none());
        for e in [
            client.list_tools(None).await.unwrap_err(),
            call(&client, "read_resource", json!({"uri": "file:///x"}))
                .await
                .unwrap_err(),
            client.list_prompts(None).await.unwrap_err(),
            client
                .get_prompt(rmcp::model::GetPromptRequestParams::new("x"))
                .await
                .unwrap_err(),
        ] {
            assert_eq!(code_of(e), -32601, "modern={modern}");
        }
        client.cancel().await.unwrap();
    }
}

/// Raw 2026-07-28 requests over HTTP: status, body.
async fn post(url: &str, token: &str, method: &str, params: Value) -> (u16, Value) {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    let mut req = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .header("authorization", format!("Bearer {token}"));
    if method == "tools/call" {
        req = req.header("mcp-name", params["name"].as_str().unwrap());
    }
    let resp = req
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_see_only_the_mounts_a_token_allows() {
    // reqwest needs a process-wide TLS provider even for plain http URLs.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let docs = tempfile::tempdir().unwrap();
    let fin = tempfile::tempdir().unwrap();
    std::fs::write(docs.path().join("guide.md"), "# guide").unwrap();
    std::fs::write(fin.path().join("ledger.csv"), "a,b").unwrap();
    let ledger = encode_path_uri(&fin.path().canonicalize().unwrap().join("ledger.csv"));
    let mount = |d: &tempfile::TempDir| -> Arc<dyn Provider> {
        Arc::new(FilesProvider::new(FilesConfig::new(d.path())).unwrap())
    };
    let settings = Settings {
        tools: true,
        ..Settings::default()
    };
    let state = ServerState::with_bus(
        settings,
        vec![
            (mount(&docs), Some("docs".into())),
            (mount(&fin), Some("finance".into())),
        ],
        Arc::new(mcpr_core::LocalBus::default()),
    );
    let mut http = HttpSettings::new("127.0.0.1:0".parse().unwrap());
    http.auth = Some(AuthSettings {
        tokens: vec![
            StaticToken {
                token: "docs-only".into(),
                scopes: Some(BTreeSet::from(["docs".to_owned()])),
                name: None,
            },
            StaticToken {
                token: "all".into(),
                scopes: None,
                name: None,
            },
        ],
        resource_metadata_url: None,
        resource: None,
        jwt: None,
        identity_key: None,
    });
    let url = format!("{}/mcp", common::spawn_http(state, http).await);
    let tool = |name: &str, args: Value| json!({"name": name, "arguments": args});

    let (status, body) = post(
        &url,
        "docs-only",
        "tools/call",
        tool("list_resources", json!({})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let listed = body["result"]["structuredContent"]["resources"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(listed.len(), 1, "{body}");
    assert!(listed[0]["uri"].as_str().unwrap().ends_with("guide.md"));
    let (_, body) = post(&url, "all", "tools/call", tool("list_resources", json!({}))).await;
    assert_eq!(
        body["result"]["structuredContent"]["resources"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    let (_, body) = post(
        &url,
        "docs-only",
        "tools/call",
        tool("read_resource", json!({"uri": ledger})),
    )
    .await;
    assert_eq!(body["result"]["isError"], true, "{body}");
    assert_eq!(
        body["result"]["content"][0]["text"],
        format!("Resource not found: {ledger}")
    );
    let (_, body) = post(
        &url,
        "all",
        "tools/call",
        tool("read_resource", json!({"uri": ledger})),
    )
    .await;
    assert_eq!(body["result"]["content"][0]["text"], "a,b", "{body}");

    for (query, token, expected) in [("ledger", "docs-only", 0), ("ledger", "all", 1)] {
        let (_, body) = post(
            &url,
            token,
            "tools/call",
            tool("search_resources", json!({"query": query})),
        )
        .await;
        assert_eq!(
            body["result"]["structuredContent"]["matches"]
                .as_array()
                .unwrap()
                .len(),
            expected,
            "{token}: {body}"
        );
    }
    let (_, body) = post(
        &url,
        "docs-only",
        "tools/call",
        tool("search_resources", json!({"query": "*", "prefix": ledger})),
    )
    .await;
    assert_eq!(
        body["result"]["structuredContent"]["matches"],
        json!([]),
        "{body}"
    );
    let (_, body) = post(
        &url,
        "docs-only",
        "tools/call",
        tool("list_resource_templates", json!({})),
    )
    .await;
    let fin_root = encode_path_uri(&fin.path().canonicalize().unwrap());
    let templates = body["result"]["structuredContent"]["resourceTemplates"].to_string();
    assert!(!templates.contains(&fin_root), "{templates}");
    // A template of a mount the token cannot see is one the server does not have.
    let hidden = format!("{fin_root}/{{+path}}");
    for (token, known) in [("docs-only", false), ("all", true)] {
        let (_, body) = post(
            &url,
            token,
            "tools/call",
            tool(
                "complete_resource_argument",
                json!({"template": hidden, "argument": "path", "value": "led"}),
            ),
        )
        .await;
        let text = body["result"]["content"][0]["text"].as_str().unwrap();
        if known {
            assert!(text.contains("ledger.csv"), "{token}: {body}");
        } else {
            assert_eq!(body["result"]["isError"], true, "{body}");
            assert!(text.starts_with("no resource template"), "{body}");
        }
    }

    // 2026-07-28 over HTTP: the bridge's list is publicly cacheable; prompts are 404.
    let (status, body) = post(&url, "docs-only", "tools/list", json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(body["result"]["tools"].as_array().unwrap().len(), 5);
    assert_eq!(body["result"]["cacheScope"], "public");
    let (status, body) = post(&url, "docs-only", "prompts/list", json!({})).await;
    assert_eq!(
        (status, body["error"]["code"].as_i64()),
        (404, Some(-32601)),
        "{body}"
    );
}

/// Three skills (`alpha`, `beta`, `gamma`) under `team-skills/` of a files mount, each with
/// a `SKILL.md` and `ref/notes.txt`; `beta` also has a binary `data.bin`.
fn skills_tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for name in ["alpha", "beta", "gamma"] {
        let d = dir.path().join("team-skills").join(name);
        std::fs::create_dir_all(d.join("ref")).unwrap();
        std::fs::write(
            d.join("SKILL.md"),
            format!("---\nname: {name}\ndescription: Does {name}\n---\nSee ref/notes.txt.\n"),
        )
        .unwrap();
        std::fs::write(d.join("ref/notes.txt"), format!("{name} notes\n")).unwrap();
    }
    std::fs::write(
        dir.path().join("team-skills/beta/data.bin"),
        [0u8, 255, 1, 2, 254],
    )
    .unwrap();
    dir
}

fn skills_state(dir: &tempfile::TempDir, scope: Option<&str>) -> Arc<ServerState> {
    let provider: Arc<dyn Provider> =
        Arc::new(FilesProvider::new(FilesConfig::new(dir.path())).unwrap());
    let settings = Settings {
        page_size: 2,
        tools: true,
        skills: vec![mcpr_server::skills::SkillsSetting {
            mount: 0,
            path: "team-skills".into(),
            prefix: "acme".into(),
            rev: None,
        }],
        ..Settings::default()
    };
    ServerState::with_bus(
        settings,
        vec![(provider, scope.map(str::to_owned))],
        Arc::new(mcpr_core::LocalBus::default()),
    )
}

/// `list_skills` pages every skill (name, description, URI) with skills/list's cursor, and
/// `read_resource` reads every file of every manifest, bytes equal to its digest and size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_skills_pages_and_read_resource_reads_every_skill_file() {
    let dir = skills_tree();
    let state = skills_state(&dir, None);
    let service = mcpr_server::Service::new(state.clone());
    for modern in [false, true] {
        let client = connect(&state, modern).await;
        let tools = client.list_all_tools().await.unwrap();
        let skills_tool = tools
            .iter()
            .find(|t| t.name == "list_skills")
            .expect("list_skills offered when a mount carries skills");
        assert_eq!(
            skills_tool.annotations.as_ref().unwrap().read_only_hint,
            Some(true)
        );
        assert_eq!(tools.len(), 7);

        let mut listed = Vec::new();
        let mut cursor: Option<String> = None;
        let mut pages = 0;
        loop {
            pages += 1;
            assert!(pages <= 5, "the listing ends");
            let args = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let page = json_of(&call(&client, "list_skills", args).await.unwrap());
            let skills = page["skills"].as_array().unwrap();
            assert!(skills.len() <= 2, "pages of page_size: {page}");
            listed.extend(skills.iter().cloned());
            cursor = page["nextCursor"].as_str().map(str::to_owned);
            if cursor.is_none() {
                break;
            }
        }
        assert_eq!(pages, 2);
        assert_eq!(
            listed,
            ["alpha", "beta", "gamma"]
                .map(|n| json!({
                    "name": n,
                    "description": format!("Does {n}"),
                    "uri": format!("skill://acme/{n}/SKILL.md"),
                }))
                .to_vec()
        );
        let msg = error_of(
            &call(&client, "list_skills", json!({"cursor": "garbage"}))
                .await
                .unwrap(),
        );
        assert!(msg.contains("invalid cursor"), "{msg}");
        // A resources/list cursor does not continue list_skills.
        let page = json_of(&call(&client, "list_resources", json!({})).await.unwrap());
        let other = page["nextCursor"].as_str().unwrap();
        let msg = error_of(
            &call(&client, "list_skills", json!({"cursor": other}))
                .await
                .unwrap(),
        );
        assert!(msg.contains("invalid cursor"), "{msg}");
        let msg = error_of(
            &call(&client, "list_skills", json!({"prefix": "x"}))
                .await
                .unwrap(),
        );
        assert!(msg.contains("prefix"), "{msg}");

        // Every manifest file, read through the bridge, is the bytes its digest names.
        let mut read = 0;
        for s in &listed {
            let uri = s["uri"].as_str().unwrap();
            let (skill, _) = service.get_skill(None, uri).await.unwrap();
            let rmcp::model::SkillResources::Files(files) = &skill.resources else {
                panic!("a manifest of files")
            };
            for f in files {
                let r = call(&client, "read_resource", json!({"uri": f.uri}))
                    .await
                    .unwrap();
                assert_ne!(r.is_error, Some(true), "{r:?}");
                let bytes = match &r.content[0] {
                    ContentBlock::Text(t) => t.text.clone().into_bytes(),
                    ContentBlock::Resource(res) => match &res.resource {
                        ResourceContents::BlobResourceContents { blob, uri, .. } => {
                            assert_eq!(uri, &f.uri, "named as asked");
                            use base64::Engine as _;
                            base64::engine::general_purpose::STANDARD
                                .decode(blob)
                                .unwrap()
                        }
                        other => panic!("{other:?}"),
                    },
                    other => panic!("{other:?}"),
                };
                f.verify(&bytes)
                    .unwrap_or_else(|e| panic!("{}: {e}", f.uri));
                read += 1;
            }
        }
        assert_eq!(read, 7, "three SKILL.md, three notes, one binary");
        let msg = error_of(
            &call(
                &client,
                "read_resource",
                json!({"uri": "skill://acme/beta/nope.txt"}),
            )
            .await
            .unwrap(),
        );
        assert!(msg.contains("not found"), "{msg}");
        client.cancel().await.unwrap();
    }
}

/// Without a mount carrying skills there is no `list_skills`: not listed, and a call is an
/// unknown tool (-32602) whose message names the tools there are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_skills_is_offered_only_when_a_mount_carries_skills() {
    let t = tree();
    let state = state(&t, 25, true);
    let client = connect(&state, true).await;
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().all(|t| t.name != "list_skills"));
    let e = call(&client, "list_skills", json!({})).await.unwrap_err();
    let ServiceError::McpError(e) = e else {
        panic!("a JSON-RPC error")
    };
    assert_eq!(e.code.0, -32602);
    assert!(
        e.message.contains("search_resources") && !e.message.contains("list_skills, "),
        "{}",
        e.message
    );
    client.cancel().await.unwrap();
}

/// A token whose scopes do not cover the mount holding the skills lists none and reads
/// none; one that does sees them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_skills_and_skill_reads_follow_the_token_scopes() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = skills_tree();
    let state = skills_state(&dir, Some("team"));
    let mut http = HttpSettings::new("127.0.0.1:0".parse().unwrap());
    http.auth = Some(AuthSettings {
        tokens: vec![
            StaticToken {
                token: "outsider".into(),
                scopes: Some(BTreeSet::new()),
                name: None,
            },
            StaticToken {
                token: "team".into(),
                scopes: Some(BTreeSet::from(["team".to_owned()])),
                name: None,
            },
        ],
        resource_metadata_url: None,
        resource: None,
        jwt: None,
        identity_key: None,
    });
    let url = format!("{}/mcp", common::spawn_http(state, http).await);
    let tool = |name: &str, args: Value| json!({"name": name, "arguments": args});
    let (_, body) = post(
        &url,
        "outsider",
        "tools/call",
        tool("list_skills", json!({})),
    )
    .await;
    assert_eq!(
        body["result"]["structuredContent"],
        json!({"skills": []}),
        "{body}"
    );
    let (_, body) = post(&url, "team", "tools/call", tool("list_skills", json!({}))).await;
    let skills = &body["result"]["structuredContent"];
    assert_eq!(skills["skills"].as_array().unwrap().len(), 2, "{body}");
    assert!(skills["nextCursor"].is_string(), "{body}");
    let uri = "skill://acme/alpha/ref/notes.txt";
    let (_, body) = post(
        &url,
        "outsider",
        "tools/call",
        tool("read_resource", json!({"uri": uri})),
    )
    .await;
    assert_eq!(body["result"]["isError"], true, "{body}");
    assert_eq!(
        body["result"]["content"][0]["text"],
        format!("Resource not found: {uri}")
    );
    let (_, body) = post(
        &url,
        "team",
        "tools/call",
        tool("read_resource", json!({"uri": uri})),
    )
    .await;
    assert_eq!(
        body["result"]["content"][0]["text"], "alpha notes\n",
        "{body}"
    );
}

/// Every page of tool `tool` with `args` (a `cursor` added for the next pages), the entries
/// under `key` of each answer, in order.
async fn all_pages(
    client: &RunningService<RoleClient, Client>,
    tool: &str,
    args: Value,
    key: &str,
) -> Vec<Value> {
    let (mut out, mut args, mut pages) = (Vec::new(), args, 0);
    loop {
        pages += 1;
        assert!(pages <= 20, "the walk ends");
        let page = json_of(&call(client, tool, args.clone()).await.unwrap());
        out.extend(page[key].as_array().unwrap().iter().cloned());
        match page["nextCursor"].as_str() {
            Some(c) => args["cursor"] = json!(c),
            None => return out,
        }
    }
}

/// A tools-only agent can find and install a skill: `list_resources` under a `skill://`
/// prefix pages the skills' files (each `SKILL.md` named and described by its skill, sizes
/// from the manifest), `search_resources` finds a skill by its description (under
/// `skill://` and, by the mount's own `SKILL.md` entry, across the mounts), and
/// `list_skill_files` gives a skill's files with sizes and digests that the bytes
/// `read_resource` returns match.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tools_only_agent_lists_searches_and_installs_a_skill() {
    let dir = skills_tree();
    let state = skills_state(&dir, None);
    let client = connect(&state, true).await;
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "list_skill_files"));

    let all = all_pages(
        &client,
        "list_resources",
        json!({"prefix": "skill://acme/"}),
        "resources",
    )
    .await;
    let uris: Vec<&str> = all.iter().map(|r| r["uri"].as_str().unwrap()).collect();
    assert_eq!(
        uris,
        [
            "skill://acme/alpha/SKILL.md",
            "skill://acme/alpha/ref/notes.txt",
            "skill://acme/beta/SKILL.md",
            "skill://acme/beta/data.bin",
            "skill://acme/beta/ref/notes.txt",
            "skill://acme/gamma/SKILL.md",
            "skill://acme/gamma/ref/notes.txt",
        ]
    );
    assert_eq!(all[2]["name"], "beta");
    assert_eq!(all[2]["description"], "Does beta");
    assert_eq!(all[2]["mimeType"], "text/markdown");
    assert_eq!(all[3]["name"], "acme/beta/data.bin");
    assert_eq!(all[3]["size"], 5);
    let beta = all_pages(
        &client,
        "list_resources",
        json!({"prefix": "skill://acme/beta/"}),
        "resources",
    )
    .await;
    assert_eq!(beta.len(), 3);
    // A cursor of the skills' walk does not continue the mounts' listing.
    let page = json_of(
        &call(&client, "list_resources", json!({"prefix": "skill://"}))
            .await
            .unwrap(),
    );
    let cursor = page["nextCursor"].as_str().unwrap();
    let msg = error_of(
        &call(&client, "list_resources", json!({"cursor": cursor}))
            .await
            .unwrap(),
    );
    assert!(msg.contains("invalid cursor"), "{msg}");

    let found = all_pages(
        &client,
        "search_resources",
        json!({"query": "does gamma", "prefix": "skill://"}),
        "matches",
    )
    .await;
    assert_eq!(found.len(), 1);
    assert_eq!(found[0]["uri"], "skill://acme/gamma/SKILL.md");
    let found = all_pages(
        &client,
        "search_resources",
        json!({"query": "does gamma"}),
        "matches",
    )
    .await;
    let root = dir.path().canonicalize().unwrap();
    let md = encode_path_uri(&root.join("team-skills/gamma/SKILL.md"));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["uri"], json!(md));
    assert_eq!(found[0]["name"], "gamma");
    // Other resources' descriptions are not searched: a notes file has none, and its
    // contents are never looked at.
    let found = all_pages(
        &client,
        "search_resources",
        json!({"query": "notes", "prefix": "skill://acme/alpha/"}),
        "matches",
    )
    .await;
    assert_eq!(found.len(), 1);

    for asked in ["skill://acme/beta", "skill://acme/beta/SKILL.md"] {
        let skill = json_of(
            &call(&client, "list_skill_files", json!({"uri": asked}))
                .await
                .unwrap(),
        );
        assert_eq!(skill["name"], "beta");
        assert_eq!(skill["description"], "Does beta");
        assert_eq!(skill["uri"], "skill://acme/beta/SKILL.md");
        let files = skill["files"].as_array().unwrap();
        let listed: Vec<&str> = files.iter().map(|f| f["uri"].as_str().unwrap()).collect();
        assert_eq!(
            listed,
            [
                "skill://acme/beta/SKILL.md",
                "skill://acme/beta/data.bin",
                "skill://acme/beta/ref/notes.txt",
            ]
        );
        for f in files {
            let uri = f["uri"].as_str().unwrap();
            let r = call(&client, "read_resource", json!({"uri": uri}))
                .await
                .unwrap();
            let bytes = match &r.content[0] {
                ContentBlock::Text(t) => t.text.clone().into_bytes(),
                ContentBlock::Resource(res) => match &res.resource {
                    ResourceContents::BlobResourceContents { blob, .. } => {
                        use base64::Engine as _;
                        base64::engine::general_purpose::STANDARD
                            .decode(blob)
                            .unwrap()
                    }
                    other => panic!("{other:?}"),
                },
                other => panic!("{other:?}"),
            };
            rmcp::model::SkillResource::new(
                uri,
                f["digest"].as_str().unwrap(),
                f["size"].as_u64().unwrap(),
            )
            .verify(&bytes)
            .unwrap_or_else(|e| panic!("{uri}: {e}"));
        }
    }
    let msg = error_of(
        &call(
            &client,
            "list_skill_files",
            json!({"uri": "skill://acme/nope"}),
        )
        .await
        .unwrap(),
    );
    assert!(
        msg.contains("no skill is served at skill://acme/nope/SKILL.md"),
        "{msg}"
    );
    client.cancel().await.unwrap();
}

/// The skills' files through the bridge follow the token's scopes: a token that does not
/// cover the mount holding the skills lists, finds and installs none of them (its answers
/// are those of a server without them); one that does gets them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skill_files_through_the_bridge_follow_the_token_scopes() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = skills_tree();
    let state = skills_state(&dir, Some("team"));
    let mut http = HttpSettings::new("127.0.0.1:0".parse().unwrap());
    http.auth = Some(AuthSettings {
        tokens: vec![
            StaticToken {
                token: "outsider".into(),
                scopes: Some(BTreeSet::new()),
                name: None,
            },
            StaticToken {
                token: "team".into(),
                scopes: Some(BTreeSet::from(["team".to_owned()])),
                name: None,
            },
        ],
        resource_metadata_url: None,
        resource: None,
        jwt: None,
        identity_key: None,
    });
    let url = format!("{}/mcp", common::spawn_http(state, http).await);
    let tool = |name: &str, args: Value| json!({"name": name, "arguments": args});
    let list = tool("list_resources", json!({"prefix": "skill://acme/beta/"}));
    let search = tool(
        "search_resources",
        json!({"query": "*", "prefix": "skill://"}),
    );
    let files = tool("list_skill_files", json!({"uri": "skill://acme/beta"}));

    let (_, body) = post(&url, "outsider", "tools/call", list.clone()).await;
    assert_eq!(
        body["result"]["structuredContent"],
        json!({"resources": []}),
        "{body}"
    );
    let (_, body) = post(&url, "outsider", "tools/call", search.clone()).await;
    assert_eq!(
        body["result"]["structuredContent"],
        json!({"matches": [], "examined": 0}),
        "{body}"
    );
    let (_, body) = post(&url, "outsider", "tools/call", files.clone()).await;
    assert_eq!(body["result"]["isError"], true, "{body}");
    assert_eq!(
        body["result"]["content"][0]["text"], "no skill is served at skill://acme/beta/SKILL.md",
        "{body}"
    );

    let (_, body) = post(&url, "team", "tools/call", list).await;
    let listed = body["result"]["structuredContent"]["resources"]
        .as_array()
        .unwrap();
    assert_eq!(listed.len(), 2, "pages of two: {body}");
    assert_eq!(listed[0]["name"], "beta");
    let (_, body) = post(&url, "team", "tools/call", search).await;
    assert_eq!(
        body["result"]["structuredContent"]["matches"]
            .as_array()
            .unwrap()
            .len(),
        2,
        "{body}"
    );
    let (_, body) = post(&url, "team", "tools/call", files).await;
    assert_eq!(
        body["result"]["structuredContent"]["files"]
            .as_array()
            .unwrap()
            .len(),
        3,
        "{body}"
    );
}
