//! One source that is down costs only its own mount: a listing leaves the mount out, goes on
//! with the next one and says so (the page's `_meta`, the tool bridge's `unavailable`, one
//! warning per outage, `mcp_list_skipped_total`, the reason on `/readyz`), while reads of the
//! mount keep their clear error. Real failing mounts: an S3 mount whose endpoint is a closed
//! loopback port, and a PostgreSQL mount behind a loopback proxy that the test cuts and
//! restores; beside a real files mount.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::spawn_http;
use mcpr_core::{ErrorKind, Provider};
use mcpr_provider_files::{FilesConfig, FilesProvider, encode_path_uri};
use mcpr_provider_s3::{S3Config, S3Provider};
use mcpr_provider_sql::{NamedQuery, SqlConfig, SqlProvider};
use mcpr_server::http::HttpSettings;
use mcpr_server::{ListPage, ServerState, Service, Settings, UNAVAILABLE_META_KEY};
use rmcp::model::{CallToolRequestParams, PaginatedRequestParams, ProtocolVersion};
use rmcp::service::{ClientLifecycleMode, serve_client_with_lifecycle};
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::json;

const KEY_ID: &str = "AKIADEADMOUNTKEYID01";
const SECRET: &str = "dead-mount-secret-access-key";

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A files mount of `n` small files, and their URIs in listing order.
fn files(n: usize) -> (tempfile::TempDir, Arc<dyn Provider>, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let root: PathBuf = dir.path().canonicalize().unwrap();
    let mut uris = Vec::new();
    for i in 0..n {
        let p = root.join(format!("f{i}.txt"));
        std::fs::write(&p, format!("file {i}")).unwrap();
        uris.push(encode_path_uri(&p));
    }
    let p: Arc<dyn Provider> = Arc::new(FilesProvider::new(FilesConfig::new(&root)).unwrap());
    (dir, p, uris)
}

/// An S3 mount of `bucket` at an endpoint that refuses every connection.
async fn dead_s3(bucket: &str) -> Arc<dyn Provider> {
    let mut c = S3Config::new(bucket, "us-east-1");
    c.endpoint = Some(format!("http://127.0.0.1:{}", closed_port()));
    c.allow_http = true;
    c.access_key_id = Some(KEY_ID.into());
    c.secret_access_key = Some(SECRET.into());
    Arc::new(S3Provider::new(c).await.unwrap())
}

fn settings(page_size: usize) -> Settings {
    Settings {
        page_size,
        tools: true,
        ..Settings::default()
    }
}

/// Every page of the listing, following cursors as a client does (bounded: a loop fails).
async fn walk(service: &Service) -> Vec<ListPage> {
    let mut pages = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..100 {
        let page = service.list(None, cursor.as_deref()).await.unwrap();
        cursor = page.next_cursor.clone();
        pages.push(page);
        if cursor.is_none() {
            return pages;
        }
    }
    panic!("the listing did not end after 100 pages");
}

fn uris_of(pages: &[ListPage]) -> Vec<String> {
    pages
        .iter()
        .flat_map(|p| p.items.iter().map(|r| r.uri.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_s3_mount_is_left_out_and_every_file_is_listed_whichever_comes_first() {
    let (_dir, fs, file_uris) = files(5);
    let s3 = dead_s3("gone-bucket").await;
    for s3_first in [false, true] {
        let mounts = if s3_first {
            vec![s3.clone(), fs.clone()]
        } else {
            vec![fs.clone(), s3.clone()]
        };
        let state = ServerState::new(settings(2), mounts);
        let service = Service::new(state.clone());
        let pages = walk(&service).await;
        assert_eq!(uris_of(&pages), file_uris, "every file, once, in order");
        let with_skips: Vec<usize> = (0..pages.len())
            .filter(|&i| !pages[i].skipped.is_empty())
            .collect();
        // The page that reached the mount says so; the cursor then moved past it.
        let expected_page = if s3_first { 0 } else { pages.len() - 1 };
        assert_eq!(with_skips, [expected_page], "{pages:#?}");
        let skipped = &pages[expected_page].skipped;
        assert_eq!(skipped.len(), 1);
        assert_eq!(skipped[0].mount, "s3://gone-bucket/");
        assert!(!skipped[0].partial);
        assert_eq!(skipped[0].error.kind, ErrorKind::Unavailable);
        let message = &skipped[0].error.message;
        assert!(
            message.contains("gone-bucket") && message.contains("cannot be reached"),
            "{message}"
        );
        assert!(!message.contains(SECRET) && !message.contains(KEY_ID));
        assert_eq!(state.list_skips().count("s3://gone-bucket/"), 1);
        // Reads of the mount keep their own clear error.
        let e = service
            .read(None, "s3://gone-bucket/report.csv")
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unavailable);
        assert!(e.message.contains("cannot be reached"), "{e}");
        // Templates are the mounts' own, known without the source: all of them.
        let templates: Vec<String> = service
            .templates(None)
            .await
            .unwrap()
            .templates
            .into_iter()
            .map(|t| t.uri_template)
            .collect();
        assert!(
            templates.contains(&"s3://gone-bucket/{+key}".to_owned()),
            "{templates:?}"
        );
        assert_eq!(templates.len(), 1 + fs.templates().len());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_page_that_could_list_no_mount_answers_their_errors() {
    let one = ServerState::new(settings(10), vec![dead_s3("only").await]);
    let e = Service::new(one).list(None, None).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable);
    assert!(
        e.message.starts_with("s3 endpoint http://127.0.0.1:")
            && e.message.contains("for bucket `only` cannot be reached"),
        "{e}"
    );
    let two = ServerState::new(
        settings(10),
        vec![dead_s3("one").await, dead_s3("two").await],
    );
    let e = Service::new(two.clone())
        .list(None, None)
        .await
        .unwrap_err();
    assert!(
        e.message
            .starts_with("no mount could be listed: s3://one/: s3 endpoint ")
            && e.message.contains("; s3://two/: s3 endpoint "),
        "{e}"
    );
    // The tool bridge's prefixed listing of the dead mount says the same.
    let scan = Service::new(two)
        .scan(None, None, Some("s3://two/"), &|_| true)
        .await
        .unwrap_err();
    assert!(
        scan.message.contains("bucket `two` cannot be reached"),
        "{scan}"
    );
}

/// An S3 mount of `bucket` whose endpoint accepts connections and never answers; the
/// listener lives as long as the returned handle's task.
async fn hanging_s3(bucket: &str) -> (Arc<dyn Provider>, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((conn, _)) = listener.accept().await {
            open.push(conn);
        }
    });
    let mut c = S3Config::new(bucket, "us-east-1");
    c.endpoint = Some(format!("http://127.0.0.1:{port}"));
    c.allow_http = true;
    c.access_key_id = Some(KEY_ID.into());
    c.secret_access_key = Some(SECRET.into());
    (Arc::new(S3Provider::new(c).await.unwrap()), held)
}

/// Three mounts that hang do not each take the request timeout in turn on one page: a page
/// answers within about one timeout, its cursor stopping at the mount it had no time for, so
/// a client following cursors still gets every file, each page in bounded time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mounts_that_hang_cost_a_page_one_timeout_not_one_each() {
    let (_dir, fs, file_uris) = files(3);
    let (a, _ha) = hanging_s3("hang-a").await;
    let (b, _hb) = hanging_s3("hang-b").await;
    let (c, _hc) = hanging_s3("hang-c").await;
    let timeout = Duration::from_millis(1500);
    let state = ServerState::new(
        Settings {
            request_timeout: timeout,
            ..settings(10)
        },
        vec![a, b, c, fs],
    );
    let service = Service::new(state);
    let mut cursor: Option<String> = None;
    let (mut uris, mut skipped) = (Vec::new(), Vec::new());
    for _ in 0..10 {
        let began = std::time::Instant::now();
        let page = service.list(None, cursor.as_deref()).await.unwrap();
        let took = began.elapsed();
        assert!(
            took < timeout + Duration::from_millis(1000),
            "a page took {took:?} with a request timeout of {timeout:?}"
        );
        uris.extend(page.items.iter().map(|r| r.uri.clone()));
        skipped.extend(page.skipped.iter().map(|s| s.mount.clone()));
        cursor = page.next_cursor;
        if cursor.is_none() {
            break;
        }
    }
    assert!(cursor.is_none(), "the listing did not end");
    assert_eq!(uris, file_uris);
    assert_eq!(skipped, ["s3://hang-a/", "s3://hang-b/", "s3://hang-c/"]);
}

/// A mount asked after another on the same page gets what the page has left of the request
/// timeout, and its timeout error says so: "after 1497 ms (request_timeout)" of a 1500 ms
/// setting would name a limit nobody set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mount_asked_late_on_a_page_names_what_the_page_had_left() {
    let (_dir, fs, file_uris) = files(3);
    let (hang, _held) = hanging_s3("hang-late").await;
    let timeout = Duration::from_millis(1500);
    let state = ServerState::new(
        Settings {
            request_timeout: timeout,
            ..settings(10)
        },
        vec![fs, hang],
    );
    let page = Service::new(state).list(None, None).await.unwrap();
    let listed: Vec<String> = page.items.iter().map(|r| r.uri.clone()).collect();
    assert_eq!(listed, file_uris);
    assert_eq!(page.skipped.len(), 1, "{:?}", page.skipped);
    let message = &page.skipped[0].error.message;
    assert!(
        message.contains("ms (what this page had left of request_timeout)"),
        "{message}"
    );
    assert!(!message.contains("(request_timeout)"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_goes_past_a_dead_mount_and_names_it() {
    let (_dir, fs, file_uris) = files(3);
    let state = ServerState::new(settings(100), vec![dead_s3("scanned").await, fs]);
    let service = Service::new(state.clone());
    let page = service
        .scan(None, None, None, &|r| r.name.starts_with('f'))
        .await
        .unwrap();
    let found: Vec<String> = page.items.iter().map(|r| r.uri.clone()).collect();
    assert_eq!(found, file_uris);
    assert_eq!(page.next_cursor, None);
    assert_eq!(page.skipped.len(), 1);
    assert_eq!(page.skipped[0].mount, "s3://scanned/");
    assert_eq!(state.list_skips().count("s3://scanned/"), 1);
}

/// Over HTTP in both eras: the page that left the mount out names it in `_meta`, every file
/// arrives through rmcp's client following cursors, `search_resources` names it too,
/// `/readyz` says which mount is not ready and why (no secret), and `/metrics` counts the
/// listings that left it out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_the_page_meta_the_tools_readyz_and_metrics_name_the_dead_mount() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (_dir, fs, file_uris) = files(3);
    let state = ServerState::new(settings(2), vec![dead_s3("down").await, fs]);
    let base = spawn_http(
        state.clone(),
        HttpSettings::new("127.0.0.1:0".parse().unwrap()),
    )
    .await;
    for mode in [
        ClientLifecycleMode::Initialize,
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    ] {
        let transport = StreamableHttpClientTransport::from_uri(format!("{base}/mcp"));
        let client = serve_client_with_lifecycle((), transport, mode)
            .await
            .unwrap();
        let (mut uris, mut metas) = (Vec::new(), Vec::new());
        let mut cursor = None;
        for _ in 0..20 {
            let page = client
                .list_resources(Some(PaginatedRequestParams::default().with_cursor(cursor)))
                .await
                .unwrap();
            uris.extend(page.resources.iter().map(|r| r.uri.clone()));
            metas.push(page.meta.map(|m| m.0));
            cursor = page.next_cursor;
            if cursor.is_none() {
                break;
            }
        }
        assert_eq!(uris, file_uris);
        let named = metas[0].as_ref().expect("the first page names the mount");
        let entries = named[UNAVAILABLE_META_KEY].as_array().unwrap();
        assert_eq!(entries.len(), 1, "{named:?}");
        assert_eq!(entries[0]["mount"], "s3://down/");
        assert_eq!(entries[0]["partial"], false);
        let message = entries[0]["message"].as_str().unwrap();
        assert!(
            message.contains("bucket `down` cannot be reached"),
            "{message}"
        );
        assert!(
            metas[1..].iter().all(Option::is_none),
            "only the page that reached it: {metas:?}"
        );
        let found = client
            .call_tool(
                CallToolRequestParams::new("search_resources")
                    .with_arguments(json!({"query": "f"}).as_object().unwrap().clone()),
            )
            .await
            .unwrap();
        let found = found.structured_content.unwrap();
        assert!(!found["matches"].as_array().unwrap().is_empty(), "{found}");
        assert_eq!(found["unavailable"][0]["mount"], "s3://down/", "{found}");
        let listed = client
            .call_tool(CallToolRequestParams::new("list_resources"))
            .await
            .unwrap()
            .structured_content
            .unwrap();
        assert_eq!(listed["unavailable"][0]["mount"], "s3://down/", "{listed}");
        let _ = client.cancel().await;
    }
    let http = reqwest::Client::new();
    let ready = http.get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    let body = ready.text().await.unwrap();
    let dead = body
        .lines()
        .find(|l| l.starts_with("NOT READY s3://down/"))
        .unwrap_or_else(|| panic!("{body}"));
    assert!(
        dead.contains(": s3 endpoint http://127.0.0.1:")
            && dead.contains("for bucket `down` cannot be reached"),
        "{dead}"
    );
    assert!(body.lines().any(|l| l.starts_with("ready /")), "{body}");
    assert!(!body.contains(SECRET) && !body.contains(KEY_ID), "{body}");
    let metrics = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // Per era: one walk, one search, one listing tool call.
    assert!(
        metrics.contains("mcp_list_skipped_total{mount=\"s3://down/\"} 6\n"),
        "{metrics}"
    );
    assert!(metrics.contains(&format!(
        "mcp_list_skipped_total{{mount=\"{}\"}} 0\n",
        state.router().mounts()[1].name
    )));
}

// ---------------------------------------------------------------------------------------
// A PostgreSQL mount that fails inside its own pages, and the log once per outage.

/// A TCP proxy to the local PostgreSQL that can be cut (every connection closed, the port
/// refusing) and restored on the same port.
struct Proxy {
    port: u16,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Proxy {
    async fn start() -> Self {
        let p = Proxy {
            port: closed_port(),
            task: Mutex::new(None),
        };
        p.restore().await;
        p
    }

    async fn restore(&self) {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.port))
            .await
            .unwrap();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((mut inbound, _)) = listener.accept().await {
                conns.spawn(async move {
                    if let Ok(mut out) = tokio::net::TcpStream::connect(("127.0.0.1", 5432)).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                    }
                });
            }
        });
        *self.task.lock().unwrap() = Some(task);
    }

    /// Close the listener and every connection through it (the `JoinSet` aborts them).
    async fn cut(&self) {
        let task = self.task.lock().unwrap().take();
        if let Some(t) = task {
            t.abort();
            let _ = t.await;
        }
    }
}

/// The log of this test binary, for counting warnings. Global: a thread-local subscriber
/// misses events while other tests run on threads without one.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

fn captured_log() -> Captured {
    static LOG: std::sync::OnceLock<Captured> = std::sync::OnceLock::new();
    LOG.get_or_init(|| {
        let log = Captured::default();
        let writer = log.clone();
        tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .init();
        log
    })
    .clone()
}

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// The lines about mount `mount` that say `needle`.
    fn count(&self, mount: &str, needle: &str) -> usize {
        let mount = format!("mount={mount}");
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .filter(|l| l.contains(needle) && l.split_whitespace().any(|w| w == mount))
            .count()
    }
}

const LEFT_OUT: &str = "listings leave this mount out until it answers";
const BACK: &str = "the mount lists again";

/// A mount that fails on its second page (after its first went out) is left out from there:
/// the walk goes on with the next mount, no entry comes twice, the cursors end, and the page
/// says the rest of the mount is missing (`partial`). Further listings leave it out without
/// another warning; once it has listed again, the next outage warns once more.
#[tokio::test(flavor = "current_thread")]
async fn a_mount_failing_inside_its_pages_is_left_out_from_there_and_warned_once_per_outage() {
    if tokio::net::TcpStream::connect(("127.0.0.1", 5432))
        .await
        .is_err()
    {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("PostgreSQL at 127.0.0.1:5432 is required under CI=true");
        }
        eprintln!("SKIPPED: PostgreSQL is not reachable at 127.0.0.1:5432");
        return;
    }
    let log = captured_log();

    let proxy = Proxy::start().await;
    let mut cfg = SqlConfig::new(
        "pg",
        format!("postgres://postgres@127.0.0.1:{}/postgres", proxy.port),
    );
    // Two fixed queries, so the mount has entries after its overview whatever tables the
    // shared database holds; they need no table.
    cfg.queries = ["db://pg/q1", "db://pg/q2"]
        .into_iter()
        .map(|uri| NamedQuery {
            uri: uri.into(),
            sql: "select 1 as one".into(),
            params: Default::default(),
            description: None,
        })
        .collect();
    let pg: Arc<dyn Provider> = Arc::new(SqlProvider::new(cfg).await.unwrap());
    let (_dir, fs, file_uris) = files(2);
    let state = ServerState::new(settings(1), vec![pg, fs]);
    let service = Service::new(state.clone());

    let first = service.list(None, None).await.unwrap();
    assert_eq!(uris_of(std::slice::from_ref(&first)), ["db://pg"]);
    assert!(first.skipped.is_empty());
    proxy.cut().await;
    let mut pages = vec![first];
    let mut cursor = pages[0].next_cursor.clone();
    for _ in 0..20 {
        let Some(c) = cursor else { break };
        let page = service.list(None, Some(&c)).await.unwrap();
        cursor = page.next_cursor.clone();
        pages.push(page);
    }
    assert_eq!(cursor, None, "the listing ends");
    let mut expected = vec!["db://pg".to_owned()];
    expected.extend(file_uris.iter().cloned());
    assert_eq!(uris_of(&pages), expected);
    let skipped: Vec<_> = pages.iter().flat_map(|p| p.skipped.iter()).collect();
    assert_eq!(skipped.len(), 1, "{pages:#?}");
    assert_eq!(skipped[0].mount, "db://pg");
    assert!(
        skipped[0].partial,
        "the rest of the mount is what is missing"
    );
    assert_eq!(skipped[0].error.kind, ErrorKind::Unavailable);
    assert_eq!(log.count("db://pg", LEFT_OUT), 1);

    // Still down: left out again, counted, not warned again.
    let again = walk(&service).await;
    assert_eq!(uris_of(&again), file_uris);
    assert_eq!(again[0].skipped.len(), 1);
    assert!(!again[0].skipped[0].partial);
    assert_eq!(state.list_skips().count("db://pg"), 2);
    assert_eq!(log.count("db://pg", LEFT_OUT), 1, "one warning per outage");

    // Back: listed again (past the failed attempt's 2 s of fast answers), and said once.
    proxy.restore().await;
    let mut back = Vec::new();
    for _ in 0..50 {
        back = walk(&service).await;
        if back[0].skipped.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let uris: BTreeSet<String> = uris_of(&back).into_iter().collect();
    assert!(
        uris.contains("db://pg") && uris.contains("db://pg/q2"),
        "{uris:?}"
    );
    assert_eq!(log.count("db://pg", BACK), 1);
    assert_eq!(
        log.count("db://pg", LEFT_OUT),
        1,
        "still the one warning of the first outage"
    );

    // A new outage is a new warning.
    proxy.cut().await;
    let down = walk(&service).await;
    assert_eq!(uris_of(&down), file_uris);
    assert_eq!(log.count("db://pg", LEFT_OUT), 2);
}

/// A mount that comes back after an outage is announced: a stream that hears list changes
/// gets `list_changed` without anybody listing, because the server asks the mount on its
/// own while it is out (a PostgreSQL mount behind a loopback proxy the test cuts and
/// restores).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mount_back_from_an_outage_sends_list_changed_unasked() {
    if tokio::net::TcpStream::connect(("127.0.0.1", 5432))
        .await
        .is_err()
    {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("PostgreSQL at 127.0.0.1:5432 is required under CI=true");
        }
        eprintln!("SKIPPED: PostgreSQL is not reachable at 127.0.0.1:5432");
        return;
    }
    let proxy = Proxy::start().await;
    let mut cfg = SqlConfig::new(
        // Named apart from the other tests' mount: they count log lines by mount name.
        "pg-back",
        format!("postgres://postgres@127.0.0.1:{}/postgres", proxy.port),
    );
    cfg.queries = vec![NamedQuery {
        uri: "db://pg-back/q1".into(),
        sql: "select 1 as one".into(),
        params: Default::default(),
        description: None,
    }];
    let pg: Arc<dyn Provider> = Arc::new(SqlProvider::new(cfg).await.unwrap());
    let (_dir, fs, file_uris) = files(1);
    let state = ServerState::new(settings(10), vec![pg, fs]);
    let service = Service::new(state.clone());
    let tokens = mcpr_server::ChangeTokens::default();
    let mut listen = service
        .listen(None, None, &[], true, &tokens)
        .await
        .unwrap();
    // The listen starts with one list-changed notice of its own (it started the watches).
    let drain = async {
        while tokio::time::timeout(Duration::from_millis(300), listen.next())
            .await
            .is_ok()
        {}
    };
    drain.await;

    proxy.cut().await;
    let down = walk(&service).await;
    assert_eq!(uris_of(&down), file_uris, "the mount is left out while cut");
    proxy.restore().await;
    // Nobody lists from here on: the notice comes from the server's own probe.
    let notice = tokio::time::timeout(Duration::from_secs(20), listen.next())
        .await
        .expect("no list_changed within 20 s of the mount coming back");
    assert!(
        matches!(notice, Some(mcpr_server::Notice::ListChanged)),
        "{notice:?}"
    );
    assert_ne!(state.list_skips().count("db://pg-back"), 0);
    let back = walk(&service).await;
    assert!(
        uris_of(&back).contains(&"db://pg-back/q1".to_owned()),
        "{:?}",
        uris_of(&back)
    );
}
