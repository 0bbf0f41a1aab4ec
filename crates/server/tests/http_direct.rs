//! The HTTP direct read path against rmcp's own stateless path: two servers over the same
//! files, one with the direct path and one without, must give every request the same status,
//! content type and body, byte for byte; and `/metrics` shows which requests the direct path
//! took, so a direct path that silently never answers fails too.

mod common;

use std::sync::Arc;

use mcpr_provider_files::encode_path_uri;
use mcpr_server::ServerState;
use mcpr_server::http::HttpSettings;

const META: &str = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"}}"#;

struct Server {
    base: String,
}

async fn serve(state: Arc<ServerState>, direct: bool) -> Server {
    let mut settings = HttpSettings::new("127.0.0.1:0".parse().unwrap());
    settings.direct_reads = direct;
    Server {
        base: common::spawn_http(state, settings).await,
    }
}

/// One request: extra headers on top of a well-formed 2026-07-28 read's, and the raw body.
struct Case {
    what: &'static str,
    headers: Vec<(&'static str, String)>,
    without: Vec<&'static str>,
    body: String,
    direct: bool,
}

fn read_body(id: &str, uri: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"resources/read","params":{{"uri":{},"_meta":{META}}}}}"#,
        serde_json::to_string(uri).unwrap()
    )
}

fn case(what: &'static str, uri: &str, direct: bool) -> Case {
    Case {
        what,
        headers: vec![("mcp-name", uri.to_owned())],
        without: vec![],
        body: read_body("7", uri),
        direct,
    }
}

async fn send(http: &reqwest::Client, base: &str, c: &Case) -> (u16, String, Vec<u8>) {
    let mut h = reqwest::header::HeaderMap::new();
    let defaults = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "resources/read"),
    ];
    for (k, v) in defaults {
        if !c.without.contains(&k) {
            h.insert(k, v.parse().unwrap());
        }
    }
    for (k, v) in &c.headers {
        h.insert(*k, v.parse().unwrap());
    }
    let resp = http
        .post(format!("{base}/mcp"))
        .headers(h)
        .body(c.body.clone())
        .send()
        .await
        .unwrap();
    common::answer(resp, "content-type").await
}

async fn direct_count(http: &reqwest::Client, base: &str) -> u64 {
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("mcp_http_direct_reads_total "))
        .expect("metrics name the direct reads")
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_reads_answer_exactly_as_rmcp_does() {
    // reqwest needs a process-wide TLS provider even for plain http URLs.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (_dir, root, state) = common::comparison_tree();
    let direct = serve(state.clone(), true).await;
    let plain = serve(state, false).await;
    let uri = |name: &str| encode_path_uri(&root.join(name));
    let small = uri("small.txt");

    let mut cases = vec![
        case("1 KiB text", &small, true),
        case(
            "escapes over the splice threshold",
            &uri("tricky.txt"),
            true,
        ),
        case("escapes under it", &uri("tiny.txt"), true),
        case("binary", &uri("bin.dat"), true),
        case("binary over one frame", &uri("big.dat"), true),
        case("a space in the name", &uri("with space.md"), true),
        case("a directory", &uri("sub"), true),
        case("not found", &uri("missing.txt"), true),
        case("outside every mount", "file:///etc/passwd", true),
        case("not a URI", "no scheme here", true),
        case("another scheme", "http://example.com/x", true),
    ];
    let mut c = case("string id", &small, true);
    c.body = read_body("\"abc\"", &small);
    cases.push(c);
    let mut c = case("pretty-printed body with extra members", &small, true);
    c.body = format!(
        "{{\n  \"jsonrpc\": \"2.0\",\n  \"method\": \"resources/read\",\n  \"x\": [1, {{}}],\n  \"params\": {{ \"uri\": {}, \"extra\": true, \"_meta\": {META} }},\n  \"id\": 9\n}}\n",
        serde_json::to_string(&small).unwrap()
    );
    cases.push(c);
    // From here on rmcp answers: each differs from a well-formed read in one way.
    let mut c = case("Mcp-Name differs from the body", &small, false);
    c.headers = vec![("mcp-name", uri("tiny.txt"))];
    cases.push(c);
    let mut c = case("Mcp-Name missing", &small, false);
    c.headers.clear();
    cases.push(c);
    let mut c = case("Mcp-Name in base64", &uri("ünï.md"), false);
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(uri("ünï.md"));
    c.headers = vec![("mcp-name", format!("=?base64?{b64}?="))];
    cases.push(c);
    // Each one header away from a well-formed read.
    for (what, name, value) in [
        ("Mcp-Method differs", "mcp-method", "resources/list"),
        (
            "legacy protocol version header",
            "mcp-protocol-version",
            "2025-11-25",
        ),
        ("Accept without SSE", "accept", "application/json"),
        ("text/plain body", "content-type", "text/plain"),
        ("a foreign Origin", "origin", "http://evil.example"),
        ("a local Origin", "origin", "http://localhost:3000"),
        ("a foreign Host", "host", "evil.example"),
    ] {
        let mut c = case(what, &small, false);
        c.headers.push((name, value.into()));
        cases.push(c);
    }
    let mut c = case("no clientCapabilities", &small, false);
    c.body = c
        .body
        .replace(r#""io.modelcontextprotocol/clientCapabilities":{},"#, "");
    cases.push(c);
    let mut c = case("_meta version differs from the header", &small, false);
    c.body = c.body.replace(
        r#"protocolVersion":"2026-07-28""#,
        r#"protocolVersion":"2025-11-25""#,
    );
    cases.push(c);
    let mut c = case("no _meta", &small, false);
    c.body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{{"uri":{}}}}}"#,
        serde_json::to_string(&small).unwrap()
    );
    cases.push(c);
    let mut c = case("uri not a string", &small, false);
    c.body = c
        .body
        .replace(&serde_json::to_string(&small).unwrap(), "42");
    cases.push(c);
    let mut c = case("not JSON", &small, false);
    c.body = "{\"jsonrpc\":".into();
    cases.push(c);
    let mut c = case("a notification", &small, false);
    c.body = c.body.replace("\"id\":7,", "");
    cases.push(c);
    let mut c = case("no protocol version header", &small, false);
    c.without.push("mcp-protocol-version");
    cases.push(c);

    let http = reqwest::Client::new();
    let mut expected_direct = 0;
    for c in &cases {
        let before = direct_count(&http, &direct.base).await;
        let a = send(&http, &direct.base, c).await;
        let b = send(&http, &plain.base, c).await;
        let taken = direct_count(&http, &direct.base).await - before;
        assert_eq!(
            (a.0, &a.1, String::from_utf8_lossy(&a.2)),
            (b.0, &b.1, String::from_utf8_lossy(&b.2)),
            "{}: direct path and rmcp differ",
            c.what
        );
        assert_eq!(a.2, b.2, "{}: bodies differ in bytes", c.what);
        assert_eq!(taken, u64::from(c.direct), "{}: direct path taken?", c.what);
        expected_direct += u64::from(c.direct);
    }
    assert_eq!(direct_count(&http, &plain.base).await, 0);
    assert_eq!(direct_count(&http, &direct.base).await, expected_direct);

    // The answers the direct path gave are the real ones, not just equal to rmcp's.
    let (status, ctype, body) = send(&http, &direct.base, &cases[0]).await;
    assert_eq!((status, ctype.as_str()), (200, "application/json"));
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["id"], 7);
    assert_eq!(v["result"]["contents"][0]["text"], "x".repeat(1024));
    assert_eq!(v["result"]["contents"][0]["uri"], small.as_str());
    assert!(v["result"]["ttlMs"].is_u64(), "{v}");
    assert_eq!(v["result"]["cacheScope"], "public");
    let (_, _, body) = send(&http, &direct.base, &cases[7]).await;
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["code"], -32602, "{v}");
    assert_eq!(v["error"]["data"]["uri"], uri("missing.txt").as_str());
}
