//! The HTTP edge end to end: a real loopback HTTP server, a real JWKS endpoint, tokens signed
//! with real RSA and EC keys, and per-mount scopes.

mod common;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use futures::StreamExt as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use mcpr_core::Provider;
use mcpr_provider_files::{FilesConfig, FilesProvider, encode_path_uri};
use mcpr_server::http::{AuthSettings, HttpSettings, JwtSettings, StaticToken};
use mcpr_server::{ServerState, Settings};
use serde_json::{Value, json};

const RSA_N: &str = "osS2TMOznRIYaTDJJBpDvSem6JGZy_cU0YsFCaMRng00G_CNfwRDwepV43ryO2DY__qQJtyEvmAQ2a6b4AUplS-pI4ggJuln-lEKR_vxz1_NuIMq89az1hoAQ6gIq3Y5P9sBn3bi0qjSeP2zd9DCTPPLPehoqF0SvPkR3DAe6PleIBUex_xRu0PbVcy6U6wmtPIfTba6Nk6jGW21gY0qliaooPrqzfQ6ieTDnMvXuhJPq27nR78JpmG9NfXyNwAdRtL2Ovb6F_5ysMgx0zRMGkPCLdipLJY2uKGTckWUl5JYVKpGp-6OWYVJ85VLipw0M4tRWjHH83l2tB5XN-ZmdQ";
const EC_X: &str = "UhQpON9RgK0h1_c9igsWEpDukCSyMOOoFmeYU6k8d-E";
const EC_Y: &str = "EirxryuW8m_PR-AHCknvAgGcZTv093-t-Bts_3G_oZU";
const ISSUER: &str = "https://auth.example.test";
const AUDIENCE: &str = "https://mcp.example.test/mcp";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn token(alg: Algorithm, kid: &str, key_file: &str, claims: Value) -> String {
    let pem = std::fs::read(format!(
        "{}/tests/fixtures/{key_file}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let key = match alg {
        Algorithm::RS256 => EncodingKey::from_rsa_pem(&pem).unwrap(),
        _ => EncodingKey::from_ec_pem(&pem).unwrap(),
    };
    let mut header = Header::new(alg);
    header.kid = Some(kid.into());
    jsonwebtoken::encode(&header, &claims, &key).unwrap()
}

fn claims(scope: &str) -> Value {
    json!({"iss": ISSUER, "aud": AUDIENCE, "exp": now() + 600, "sub": "alice", "scope": scope})
}

/// A JWKS endpoint on loopback serving the RSA and EC test keys.
async fn jwks_server() -> String {
    let jwks = json!({"keys": [
        {"kty": "RSA", "kid": "rsa1", "alg": "RS256", "use": "sig", "n": RSA_N, "e": "AQAB"},
        {"kty": "EC", "kid": "ec1", "alg": "ES256", "use": "sig", "crv": "P-256", "x": EC_X, "y": EC_Y},
    ]});
    let app = axum::Router::new().route(
        "/jwks.json",
        axum::routing::get(move || async move { axum::Json(jwks.clone()) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/jwks.json")
}

struct Fixture {
    _dirs: Vec<tempfile::TempDir>,
    docs: String,
    finance: String,
    url: String,
    base: String,
    http: reqwest::Client,
}

async fn start() -> Fixture {
    start_with_jwks(jwks_server().await).await
}

async fn start_with_jwks(jwks_url: String) -> Fixture {
    let docs_dir = tempfile::tempdir().unwrap();
    let fin_dir = tempfile::tempdir().unwrap();
    std::fs::write(docs_dir.path().join("guide.md"), "# guide").unwrap();
    std::fs::write(fin_dir.path().join("ledger.csv"), "a,b").unwrap();
    let docs: Arc<dyn Provider> =
        Arc::new(FilesProvider::new(FilesConfig::new(docs_dir.path())).unwrap());
    let fin: Arc<dyn Provider> =
        Arc::new(FilesProvider::new(FilesConfig::new(fin_dir.path())).unwrap());
    let state = ServerState::with_bus(
        Settings::default(),
        vec![(docs, Some("docs".into())), (fin, Some("finance".into()))],
        Arc::new(mcpr_core::LocalBus::default()),
    );
    let mut settings = HttpSettings::new("127.0.0.1:0".parse().unwrap());
    settings.auth = Some(AuthSettings {
        tokens: vec![StaticToken {
            token: "static-all".into(),
            scopes: None,
            name: None,
        }],
        identity_key: None,
        resource_metadata_url: Some(
            "http://127.0.0.1/.well-known/oauth-protected-resource/mcp".into(),
        ),
        resource: Some(AUDIENCE.into()),
        jwt: Some(JwtSettings {
            issuer: ISSUER.into(),
            jwks_url,
            audience: AUDIENCE.into(),
            leeway: std::time::Duration::from_secs(5),
            required_scopes: vec!["mcp".into()],
        }),
    });
    let base = common::spawn_http(state, settings).await;
    Fixture {
        docs: encode_path_uri(&docs_dir.path().canonicalize().unwrap().join("guide.md")),
        finance: encode_path_uri(&fin_dir.path().canonicalize().unwrap().join("ledger.csv")),
        _dirs: vec![docs_dir, fin_dir],
        url: format!("{base}/mcp"),
        base,
        http: reqwest::Client::new(),
    }
}

const META: &str = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;

impl Fixture {
    /// POST one 2026-07-28 request; the HTTP status, `WWW-Authenticate`, and the JSON body.
    async fn call(&self, token: Option<&str>, method: &str, params: Value) -> (u16, String, Value) {
        let mut params = params;
        params["_meta"] = serde_json::from_str(META).unwrap();
        let mut req = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method);
        if let Some(uri) = params.get("uri").and_then(Value::as_str) {
            req = req.header("mcp-name", uri);
        }
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
            .send()
            .await
            .unwrap();
        let (status, www, body) = common::answer(resp, "www-authenticate").await;
        let json = serde_json::from_slice(&body).unwrap_or(Value::Null);
        (status, www, json)
    }

    async fn listed(&self, token: &str) -> Vec<String> {
        let (status, _, body) = self.call(Some(token), "resources/list", json!({})).await;
        assert_eq!(status, 200, "{body}");
        body["result"]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["uri"].as_str().unwrap().to_owned())
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_validation_and_scopes() {
    let f = start().await;
    let rs = |c| token(Algorithm::RS256, "rsa1", "test-rsa.pem", c);

    // A valid RS256 token with scope docs sees only the docs mount, privately cacheable.
    let docs_only = rs(claims("mcp docs"));
    assert_eq!(f.listed(&docs_only).await, vec![f.docs.clone()]);
    let (_, _, body) = f.call(Some(&docs_only), "resources/list", json!({})).await;
    assert_eq!(body["result"]["cacheScope"], "private");
    let (status, _, body) = f
        .call(
            Some(&docs_only),
            "resources/read",
            json!({"uri": f.finance}),
        )
        .await;
    assert_eq!(body["error"]["code"], -32602, "{status} {body}");
    assert_eq!(body["error"]["data"]["uri"], f.finance.as_str());
    // A read the token covers answers, privately cacheable (the HTTP direct read path
    // takes these requests: it must apply the grant exactly as rmcp's path does).
    let (status, _, body) = f
        .call(Some(&docs_only), "resources/read", json!({"uri": f.docs}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["contents"][0]["text"], "# guide");
    assert_eq!(body["result"]["cacheScope"], "private");
    let (_, _, body) = f
        .call(Some(&docs_only), "resources/templates/list", json!({}))
        .await;
    let templates = body["result"]["resourceTemplates"].as_array().unwrap();
    assert!(templates.iter().all(|t| {
        !t["uriTemplate"]
            .as_str()
            .unwrap()
            .contains(&f.finance[..f.finance.len() - 11])
    }));

    // A valid ES256 token with both scopes sees both.
    let both = token(
        Algorithm::ES256,
        "ec1",
        "test-ec.pem",
        claims("mcp docs finance"),
    );
    assert_eq!(f.listed(&both).await.len(), 2);
    // A static token without scopes sees everything and stays publicly cacheable.
    assert_eq!(f.listed("static-all").await.len(), 2);

    // Refusals.
    let cases = [
        ("missing", None, 401, ""),
        (
            "unknown static",
            Some("nope".to_owned()),
            401,
            "invalid_token",
        ),
        (
            "expired",
            Some(rs(
                json!({"iss": ISSUER, "aud": AUDIENCE, "exp": now() - 3600, "scope": "mcp docs"}),
            )),
            401,
            "expired",
        ),
        (
            "wrong audience",
            Some(rs(
                json!({"iss": ISSUER, "aud": "https://other.test", "exp": now() + 600, "scope": "mcp"}),
            )),
            401,
            "not meant for",
        ),
        (
            "wrong issuer",
            Some(rs(
                json!({"iss": "https://evil.test", "aud": AUDIENCE, "exp": now() + 600, "scope": "mcp"}),
            )),
            401,
            "not issued by",
        ),
        (
            "bad signature",
            Some(token(
                Algorithm::RS256,
                "rsa1",
                "test-rsa-other.pem",
                claims("mcp docs"),
            )),
            401,
            "signature",
        ),
        (
            "unknown key",
            Some(token(
                Algorithm::RS256,
                "rsa9",
                "test-rsa.pem",
                claims("mcp docs"),
            )),
            401,
            "key id",
        ),
        (
            "no required scope",
            Some(rs(claims("docs"))),
            403,
            "insufficient_scope",
        ),
    ];
    for (what, tok, want, needle) in cases {
        let (status, www, body) = f.call(tok.as_deref(), "resources/list", json!({})).await;
        assert_eq!(status, want, "{what}: {www} {body}");
        assert!(www.starts_with("Bearer "), "{what}: {www}");
        assert!(www.contains("resource_metadata=\""), "{what}: {www}");
        assert!(
            www.contains(needle) || body.to_string().contains(needle),
            "{what}: {www} {body}"
        );
    }
    // A missing token and a wrong one are told apart (RFC 6750 §3.1: no error code when the
    // request carried no credentials, `invalid_token` when it carried bad ones).
    let (_, missing_www, missing) = f.call(None, "resources/list", json!({})).await;
    let (_, wrong_www, wrong) = f.call(Some("nope"), "resources/list", json!({})).await;
    assert!(!missing_www.contains("error="), "{missing_www}");
    assert!(wrong_www.contains("error=\"invalid_token\""), "{wrong_www}");
    let message = |v: &Value| {
        v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    assert!(
        message(&missing).contains("a bearer token is required"),
        "{missing}"
    );
    // With OAuth on, a token that is no static one is read as a JWT, so it is called
    // malformed here; what matters is that it is not told a token is required.
    assert!(
        message(&wrong).starts_with("unauthorized: ")
            && !message(&wrong).contains("required")
            && message(&wrong) != message(&missing),
        "{wrong}"
    );

    // RFC 9728 metadata names the resource and the authorization server.
    let meta: Value = f
        .http
        .get(format!(
            "{}/.well-known/oauth-protected-resource/mcp",
            f.base
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(meta["resource"], AUDIENCE);
    assert_eq!(meta["authorization_servers"], json!([ISSUER]));
}

/// The RFC 9728 document is served without a token: it advertises the scope every token
/// needs (`required_scopes`) and nothing that names a scoped mount, which README promises
/// is invisible to callers without its scope.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn public_metadata_names_no_scoped_mount() {
    let f = start().await;
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let resp = f
            .http
            .get(format!("{}{path}", f.base))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        let text = resp.text().await.unwrap();
        let meta: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(meta["scopes_supported"], json!(["mcp"]), "{path}: {text}");
        for mount_scope in ["docs", "finance"] {
            assert!(
                !text.contains(mount_scope),
                "{path} names the scoped mount {mount_scope}: {text}"
            );
        }
    }
}

/// A JWKS URL whose answer never ends (up to 256 MiB, until the reader goes away), and how
/// many bytes of it were sent.
async fn endless_jwks_server() -> (String, Arc<std::sync::atomic::AtomicU64>) {
    let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = sent.clone();
    let app = axum::Router::new().route(
        "/jwks.json",
        axum::routing::get(move || {
            let counter = counter.clone();
            async move {
                let block = bytes::Bytes::from(vec![b' '; 64 * 1024]);
                let stream = futures::stream::iter(0..4096).map(move |_| {
                    counter.fetch_add(block.len() as u64, std::sync::atomic::Ordering::SeqCst);
                    Ok::<_, std::io::Error>(block.clone())
                });
                axum::body::Body::from_stream(stream)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/jwks.json"), sent)
}

/// A key set that never ends is not taken into memory: the fetch stops at 1 MiB while it
/// streams, and the token is refused as "keys unavailable" (503) at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_key_set_is_cut_off_while_it_streams() {
    let (url, sent) = endless_jwks_server().await;
    let f = start_with_jwks(url).await;
    let token = token(Algorithm::RS256, "rsa1", "test-rsa.pem", claims("mcp docs"));
    let started = std::time::Instant::now();
    let (status, _, body) = f.call(Some(&token), "resources/list", json!({})).await;
    assert_eq!(status, 503, "{body}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let n = sent.load(std::sync::atomic::Ordering::SeqCst);
    assert!(n < 32 << 20, "{n} bytes of the key set were sent");
}

/// With OAuth on beside static tokens, a token that is not a JWT at all (a mistyped or
/// rotated static token) is called what it is, not "malformed token" from the JWT decoder,
/// which sends an operator looking at the authorization server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_static_token_beside_oauth_is_not_called_a_malformed_jwt() {
    let f = start().await;
    let (status, www, body) = f
        .call(Some("static-al1"), "resources/list", json!({}))
        .await;
    assert_eq!(status, 401, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("neither one of the configured static tokens nor a JWT"),
        "{message}"
    );
    assert!(!message.contains("malformed"), "{message}");
    assert!(www.contains("invalid_token"), "{www}");
    // A token of JWT shape still gets the JWT decoder's own reason.
    let (status, _, body) = f.call(Some("a.b.c"), "resources/list", json!({})).await;
    assert_eq!(status, 401, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("malformed token"),
        "{body}"
    );
}

/// RFC 9728 requires `resource` in the protected-resource metadata. With static tokens only
/// and no configured resource there is none (and no authorization server to point at), so
/// the document is absent rather than served with `"resource": null`; with a configured
/// resource it is served and names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_tokens_only_serve_no_metadata_without_a_resource() {
    // The JWT tests install the crypto provider too; alone, this test must do it itself.
    let _ = rustls::crypto::ring::default_provider().install_default();
    for resource in [None, Some("https://mcp.example.com/mcp")] {
        let dir = tempfile::tempdir().unwrap();
        let docs: Arc<dyn Provider> =
            Arc::new(FilesProvider::new(FilesConfig::new(dir.path())).unwrap());
        let state = ServerState::with_bus(
            Settings::default(),
            vec![(docs, None)],
            Arc::new(mcpr_core::LocalBus::default()),
        );
        let mut settings = HttpSettings::new("127.0.0.1:0".parse().unwrap());
        settings.auth = Some(AuthSettings {
            tokens: vec![StaticToken {
                token: "only-static".into(),
                scopes: None,
                name: None,
            }],
            identity_key: None,
            resource_metadata_url: None,
            resource: resource.map(str::to_owned),
            jwt: None,
        });
        let base = common::spawn_http(state, settings).await;
        let resp = reqwest::get(format!("{base}/.well-known/oauth-protected-resource"))
            .await
            .unwrap();
        let status = resp.status();
        let text = resp.text().await.unwrap();
        match resource {
            None => {
                assert_eq!(status, 404, "{text}");
                assert!(text.contains("no protected-resource metadata"), "{text}");
            }
            Some(r) => {
                assert_eq!(status, 200, "{text}");
                let meta: Value = serde_json::from_str(&text).unwrap();
                assert_eq!(meta["resource"], r, "{text}");
                assert!(meta.get("authorization_servers").is_none(), "{text}");
            }
        }
    }
}
