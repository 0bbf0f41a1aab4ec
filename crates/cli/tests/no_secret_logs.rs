//! What the built binary writes on stderr, serving HTTP: at the default level, no session id
//! (without authentication it is the credential); at `RUST_LOG=trace`, none of the secrets of
//! its configuration (the NATS password, the cluster secret, a bearer token, PostgreSQL and
//! MySQL passwords, an S3 secret key, an api mount's header), with every path that uses them
//! exercised: NATS unreachable then up, a reachable and an unreachable PostgreSQL and
//! MariaDB (a user of its own with the password), an S3 endpoint and an api upstream on
//! loopback.
//!
//! `nats-server` missing: the trace test says SKIPPED and passes, except under `CI=true`.

use std::io::{Read as _, Write as _};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mcpr_testkit::nats::NatsServer;
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_mcp-resources");

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The binary serving HTTP on a loopback port, its stderr in `log`.
struct Served {
    child: Child,
    base: String,
}

impl Served {
    fn start(config: &Path, log: &Path, rust_log: Option<&str>, env: &[(&str, &str)]) -> Self {
        let port = free_port();
        let mut cmd = Command::new(BIN);
        cmd.args(["serve", "--http"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("--config")
            .arg(config)
            .env_remove("RUST_LOG")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap());
        if let Some(l) = rust_log {
            cmd.env("RUST_LOG", l);
        }
        let child = cmd.spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the server did not start: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
        }
    }

    /// A legacy (2025-11-25) request; the session id of the answer, if any, and its body.
    async fn post(
        &self,
        session: Option<&str>,
        token: Option<&str>,
        message: Value,
    ) -> (u16, Option<String>, String) {
        let mut req = reqwest::Client::new()
            .post(format!("{}/mcp", self.base))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .body(message.to_string());
        if let Some(s) = session {
            req = req.header("mcp-session-id", s);
        }
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let id = resp
            .headers()
            .get("mcp-session-id")
            .map(|v| v.to_str().unwrap().to_owned());
        (status, id, resp.text().await.unwrap())
    }

    /// `initialize` and `notifications/initialized`: the new session's id.
    async fn session(&self, token: Option<&str>) -> String {
        let (status, id, body) = self
            .post(
                None,
                token,
                json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                    "protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"}}}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        let id = id.expect("a session id");
        let (status, _, body) = self
            .post(
                Some(&id),
                token,
                json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            )
            .await;
        assert_eq!(status, 202, "{body}");
        id
    }

    /// Whether `/metrics` says NATS is connected (`/readyz` is not: two mounts are down).
    async fn joined(&self, token: &str) -> bool {
        let metrics = reqwest::Client::new()
            .get(format!("{}/metrics", self.base))
            .bearer_auth(token)
            .send()
            .await;
        match metrics {
            Ok(r) => r
                .text()
                .await
                .is_ok_and(|t| t.contains("mcp_cluster_connected 1")),
            Err(_) => false,
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_id_never_reaches_the_default_log() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("docs");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("a.md"), "a").unwrap();
    let config = dir.path().join("c.toml");
    std::fs::write(
        &config,
        format!(
            "[[mount]]\nkind = \"files\"\nroot = \"{}\"\n",
            root.display()
        ),
    )
    .unwrap();
    let log = dir.path().join("stderr.log");
    // No --log-level and no RUST_LOG: the default level.
    let served = Served::start(&config, &log, None, &[]);
    let id = served.session(None).await;
    let (status, _, body) = served
        .post(
            Some(&id),
            None,
            json!({"jsonrpc": "2.0", "id": 1, "method": "resources/list", "params": {}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    drop(served);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("serving MCP"),
        "the log should say the server started: {text}"
    );
    assert!(
        !text.contains(&id),
        "the session id {id} is in the log: {text}"
    );
}

/// A loopback HTTP server answering every request with `status` and `body` (JSON), for the
/// api mount's upstream and the S3 endpoint.
fn upstream(status: u16, body: &'static str) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut buf = [0u8; 8192];
            let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = conn.read(&mut buf);
            let _ = write!(
                conn,
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_reaches_stderr_at_trace() {
    let Some(mut nats) = NatsServer::find() else {
        return;
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let nats_pw = "natsPW-n0t-for-logs";
    let cluster_secret = "clusterSECRET-n0t-for-logs-0123456789";
    let token = "bearerTOKEN-n0t-for-logs";
    let pg_pw = "pgPW-n0t-for-logs";
    let pg_down_pw = "pgDOWN-n0t-for-logs";
    let my_pw = "myPW-n0t-for-logs";
    let s3_secret = "s3SECRET-n0t-for-logs";
    let api_token = "apiTOKEN-n0t-for-logs";
    let secrets = [
        nats_pw,
        cluster_secret,
        token,
        pg_pw,
        pg_down_pw,
        my_pw,
        s3_secret,
        api_token,
    ];

    // A MariaDB user whose password the mount's URL carries, so that password is sent. Its
    // name is this process's own, and it is dropped at the end, so runs leave no users behind.
    let my_user = format!("mcpr_trace_{}", std::process::id());
    let mut admin = {
        use sqlx::{Connection as _, Executor as _};
        let mut admin = sqlx::MySqlConnection::connect("mysql://root@127.0.0.1:3306/test")
            .await
            .expect("MariaDB at 127.0.0.1:3306 (root, no password)");
        admin
            .execute(
                format!(
                    "CREATE USER IF NOT EXISTS '{my_user}'@'%' IDENTIFIED BY '{my_pw}'; \
                     ALTER USER '{my_user}'@'%' IDENTIFIED BY '{my_pw}'; \
                     GRANT SELECT ON test.* TO '{my_user}'@'%'"
                )
                .as_str(),
            )
            .await
            .unwrap();
        admin
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("docs");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("a.md"), "a").unwrap();
    let api = upstream(200, "{\"t\": 1}");
    let s3 = upstream(
        404,
        "<Error><Code>NoSuchKey</Code><Message>none</Message></Error>",
    );
    let config = dir.path().join("c.toml");
    std::fs::write(
        &config,
        format!(
            "[http.auth]\nbearer_tokens = [\"env:T_TOKEN\"]\n\
             [cluster]\nnats_url = \"nats://mcpr:${{T_NATS_PW}}@127.0.0.1:{nats}\"\nname = \"trace{pid}\"\nsecret = \"${{T_CLUSTER_SECRET}}\"\nlease_ttl_ms = 1000\n\
             [[mount]]\nkind = \"files\"\nroot = \"{root}\"\n\
             [[mount]]\nkind = \"postgres\"\nname = \"pg\"\nurl = \"postgres://postgres:${{T_PG_PW}}@127.0.0.1:5432/test\"\n\
             [[mount]]\nkind = \"postgres\"\nname = \"pgdown\"\nurl = \"postgres://app:${{T_PG_DOWN_PW}}@127.0.0.1:{down}/app\"\n\
             [[mount]]\nkind = \"mysql\"\nname = \"my\"\nurl = \"mysql://{my_user}:${{T_MY_PW}}@127.0.0.1:3306/test\"\n\
             [[mount]]\nkind = \"mysql\"\nname = \"mydown\"\nurl = \"mysql://app:${{T_MY_PW}}@127.0.0.1:{down2}/app\"\n\
             [[mount]]\nkind = \"s3\"\nbucket = \"bkt\"\nregion = \"us-east-1\"\nendpoint = \"http://127.0.0.1:{s3}\"\nallow_http = true\n\
             access_key_id = \"AKIATRACETEST\"\nsecret_access_key = \"${{T_S3_SECRET}}\"\n\
             [[mount]]\nkind = \"api\"\nname = \"w\"\nallow_private = true\n\
             [[mount.endpoint]]\nuri = \"api://w/now\"\nurl = \"http://127.0.0.1:{api}/now\"\nheaders = {{ Authorization = \"Bearer ${{T_API_TOKEN}}\" }}\n",
            nats = nats.port(),
            pid = std::process::id(),
            root = root.display(),
            down = free_port(),
            down2 = free_port(),
        ),
    )
    .unwrap();
    let env = [
        ("T_TOKEN", token),
        ("T_NATS_PW", nats_pw),
        ("T_CLUSTER_SECRET", cluster_secret),
        ("T_PG_PW", pg_pw),
        ("T_PG_DOWN_PW", pg_down_pw),
        ("T_MY_PW", my_pw),
        ("T_S3_SECRET", s3_secret),
        ("T_API_TOKEN", api_token),
    ];
    let log = dir.path().join("stderr.log");
    // NATS is down at start: the client's connection attempts are logged, then it joins.
    let served = Served::start(&config, &log, Some("trace"), &env);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    nats.start();
    let deadline = Instant::now() + Duration::from_secs(15);
    while !served.joined(token).await {
        assert!(Instant::now() < deadline, "not connected once NATS is up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let id = served.session(Some(token)).await;
    let call = |n: u64, method: &str, params: Value| json!({"jsonrpc": "2.0", "id": n, "method": method, "params": params});
    let (status, _, listed) = served
        .post(Some(&id), Some(token), call(1, "resources/list", json!({})))
        .await;
    assert_eq!(status, 200, "{listed}");
    let file = format!(
        "file://{}",
        root.canonicalize().unwrap().join("a.md").display()
    );
    let mut answers = vec![listed];
    for (n, uri) in [
        file.as_str(),
        "db://pg",
        "db://pgdown",
        "db://my",
        "db://mydown",
        "s3://bkt/some/key.txt",
        "api://w/now",
    ]
    .into_iter()
    .enumerate()
    {
        let (_, _, body) = served
            .post(
                Some(&id),
                Some(token),
                call(10 + n as u64, "resources/read", json!({"uri": uri})),
            )
            .await;
        answers.push(body);
    }
    // A subscription goes through the cluster (want, the watcher's answer).
    let (_, _, body) = served
        .post(
            Some(&id),
            Some(token),
            call(20, "resources/subscribe", json!({"uri": "api://w/now"})),
        )
        .await;
    answers.push(body);
    assert!(
        answers
            .iter()
            .any(|a| a.contains("\\\"t\\\": 1") || a.contains("\\\"t\\\":1")),
        "the api read should have worked: {answers:?}"
    );
    // A wrong token is refused (its value is no secret, but the right one must not show
    // in the refusal's logs either).
    let (status, _, _) = served
        .post(
            Some(&id),
            Some("wrong-token"),
            call(30, "resources/list", json!({})),
        )
        .await;
    assert_eq!(status, 401);
    drop(served);
    {
        use sqlx::Executor as _;
        admin
            .execute(format!("DROP USER IF EXISTS '{my_user}'@'%'").as_str())
            .await
            .expect("drop the test's MariaDB user");
    }

    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.lines().count() > 100 && text.contains("TRACE"),
        "a trace log was expected: {} lines",
        text.lines().count()
    );
    for s in secrets {
        if let Some(at) = text.find(s) {
            let from = text[..at].rfind('\n').map_or(0, |i| i + 1);
            let to = text[at..].find('\n').map_or(text.len(), |i| at + i);
            panic!("{s} is on stderr: {}", &text[from..to]);
        }
        for a in &answers {
            assert!(!a.contains(s), "{s} in an answer: {a}");
        }
    }
}
