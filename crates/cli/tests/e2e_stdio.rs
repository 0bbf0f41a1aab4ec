//! End-to-end tests: the built `mcp-resources` binary driven over real stdio by rmcp's own client.
//!
//! Each test spawns the binary, connects with the legacy `initialize` lifecycle or the
//! 2026-07-28 `server/discover` one, and checks the wire contract: paginated listings, byte-exact
//! reads, templates and completion, change notifications, sandbox escapes, the read limit,
//! FIFOs and cursors, git mounts, and db:// mounts on SQLite, PostgreSQL and MySQL/MariaDB.
//! Only what crosses the process boundary is observed, so these catch wiring bugs that the
//! crates' own tests cannot. Every call runs under a timeout so a hang fails.
//!
//! The PostgreSQL (127.0.0.1:5432, user `postgres`) and MariaDB (127.0.0.1:3306, user `root`)
//! tests create a database of their own and drop it; without the server they say SKIPPED and
//! pass, except under `CI=true`, where a missing server fails them.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rmcp::model::{
    ErrorData, PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams,
    ReadResourceResult, Resource, ResourceContents, ResourceUpdatedNotificationParam,
    ServerNotification, SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RunningService, Subscription, SubscriptionEnd};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, ClientLifecycleMode, RoleClient, ServiceError};
use tokio::sync::mpsc;

/// The longest any single request may take before the test calls it hung.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How soon a change must be reported (the default debounce is 50 ms).
const NOTIFY_WITHIN: Duration = Duration::from_secs(1);
/// How long silence must last to count as "no notification".
const QUIET_FOR: Duration = Duration::from_millis(1500);

/// The 20 MiB file of the read-limit test and the server's default limit (8 MiB).
const BIG_SIZE: usize = 20 * 1024 * 1024;
const DEFAULT_LIMIT: usize = 8 * 1024 * 1024;

/// A secret that must never appear in an answer about a file outside the sandbox.
const SECRET: &str = "TOP SECRET hunter2\n";

/// Which lifecycle the client uses; the not-found code differs between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Era {
    Legacy,
    Modern,
}

impl Era {
    fn lifecycle(self) -> ClientLifecycleMode {
        match self {
            Era::Legacy => ClientLifecycleMode::Initialize,
            Era::Modern => ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        }
    }

    /// Legacy: -32002 (resource not found); 2026-07-28: -32602 (invalid params).
    fn not_found_code(self) -> i32 {
        match self {
            Era::Legacy => -32002,
            Era::Modern => -32602,
        }
    }
}

/// A notification that reached the client handler (not a 2026 subscription stream).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    Updated(String),
    ListChanged,
}

/// Forwards legacy notifications into a channel so a test can wait for them with a deadline.
#[derive(Clone)]
struct Events(mpsc::UnboundedSender<Event>);

impl ClientHandler for Events {
    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.0.send(Event::Updated(params.uri));
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.0.send(Event::ListChanged);
    }
}

/// One running server process and the client connected to it.
struct Server {
    era: Era,
    client: RunningService<RoleClient, Events>,
    events: mpsc::UnboundedReceiver<Event>,
}

impl Server {
    /// Spawn `mcp-resources serve ARGS...` and connect in `era`.
    async fn start(era: Era, args: &[OsString]) -> Self {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_mcp-resources"));
        cmd.arg("serve").args(args).args(["--log-level", "error"]);
        // A test that panics must not leave a server behind.
        cmd.kill_on_drop(true);
        let transport = TokioChildProcess::new(cmd).expect("spawn mcp-resources");
        let (tx, events) = mpsc::unbounded_channel();
        let client = call(
            "connect",
            rmcp::serve_client_with_lifecycle(Events(tx), transport, era.lifecycle()),
        )
        .await
        .unwrap_or_else(|e| panic!("{era:?}: the client could not connect: {e}"));
        Self {
            era,
            client,
            events,
        }
    }

    /// Serve one directory with default settings.
    async fn with_root(era: Era, root: &Path) -> Self {
        Self::start(era, &[root.as_os_str().to_owned()]).await
    }

    /// Serve the mounts of a config file.
    async fn with_config(era: Era, config: &Path) -> Self {
        Self::start(era, &["--config".into(), config.as_os_str().to_owned()]).await
    }

    async fn read(&self, uri: &str) -> Result<ReadResourceResult, ServiceError> {
        call(
            &format!("resources/read {uri}"),
            self.client
                .read_resource(ReadResourceRequestParams::new(uri)),
        )
        .await
    }

    /// Read a URI that must hold exactly one content for that same URI.
    async fn read_one(&self, uri: &str) -> (Option<String>, Body) {
        let result = self
            .read(uri)
            .await
            .unwrap_or_else(|e| panic!("{:?}: read {uri}: {e}", self.era));
        assert_eq!(
            result.contents.len(),
            1,
            "read {uri}: expected one content, got {:?}",
            result.contents
        );
        match result.contents.into_iter().next().expect("one content") {
            ResourceContents::TextResourceContents {
                uri: got,
                mime_type,
                text,
                ..
            } => {
                assert_eq!(got, uri, "the content names the URI that was read");
                (mime_type, Body::Text(text))
            }
            ResourceContents::BlobResourceContents {
                uri: got,
                mime_type,
                blob,
                ..
            } => {
                assert_eq!(got, uri, "the content names the URI that was read");
                (mime_type, Body::Blob(base64_decode(&blob)))
            }
            other => panic!("read {uri}: unexpected content {other:?}"),
        }
    }

    /// The text of a URI that must read as text.
    async fn read_text(&self, uri: &str) -> String {
        match self.read_one(uri).await.1 {
            Body::Text(t) => t,
            Body::Blob(b) => panic!("read {uri}: expected text, got a {}-byte blob", b.len()),
        }
    }

    /// Assert that `uri` answers "not found" the way this era spells it, with `data.uri`.
    async fn assert_not_found(&self, uri: &str) {
        let e = mcp_error(self.read(uri).await, &format!("read {uri}"));
        assert_eq!(
            e.code.0,
            self.era.not_found_code(),
            "{:?}: read {uri}: wrong code in {e:?}",
            self.era
        );
        let data_uri = e
            .data
            .as_ref()
            .and_then(|d| d.get("uri"))
            .and_then(|u| u.as_str());
        assert_eq!(
            data_uri,
            Some(uri),
            "{:?}: read {uri}: data.uri must be the requested URI: {e:?}",
            self.era
        );
        assert!(
            !format!("{e:?}").contains(SECRET.trim()),
            "read {uri}: the error leaks the secret: {e:?}"
        );
    }

    /// One `resources/list` page.
    async fn list_page(
        &self,
        cursor: Option<String>,
    ) -> Result<rmcp::model::ListResourcesResult, ServiceError> {
        call(
            "resources/list",
            self.client
                .list_resources(Some(PaginatedRequestParams::default().with_cursor(cursor))),
        )
        .await
    }

    /// Every page of `resources/list`, failing if there are more than `max_pages` (a cursor loop).
    async fn list_pages(&self, max_pages: usize) -> Vec<Vec<Resource>> {
        let mut pages = Vec::new();
        let mut cursor = None;
        loop {
            let page = self
                .list_page(cursor.clone())
                .await
                .unwrap_or_else(|e| panic!("{:?}: resources/list after {cursor:?}: {e}", self.era));
            pages.push(page.resources);
            assert!(
                pages.len() <= max_pages,
                "{:?}: more than {max_pages} pages: the cursors loop or pages are too small",
                self.era
            );
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => return pages,
            }
        }
    }

    /// All listed resources in order.
    async fn list_all(&self) -> Vec<Resource> {
        self.list_pages(10_000)
            .await
            .into_iter()
            .flatten()
            .collect()
    }

    async fn complete(&self, template: &str, value: &str) -> BTreeSet<String> {
        let info = call(
            &format!("completion/complete {value:?}"),
            self.client
                .complete_resource_argument(template, "path", value, None),
        )
        .await
        .unwrap_or_else(|e| panic!("{:?}: complete {value:?} on {template}: {e}", self.era));
        info.values.into_iter().collect()
    }

    /// Close stdin and wait for the process to go.
    async fn stop(self) {
        call("shutdown", self.client.cancel())
            .await
            .expect("the client service ends cleanly");
    }
}

enum Body {
    Text(String),
    Blob(Vec<u8>),
}

/// Await `fut` for at most [`CALL_TIMEOUT`]; a hang is a failure, not a stuck test run.
async fn call<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(CALL_TIMEOUT, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {CALL_TIMEOUT:?}"))
}

/// The JSON-RPC error of a call that must fail with one.
fn mcp_error<T: std::fmt::Debug>(result: Result<T, ServiceError>, what: &str) -> ErrorData {
    match result {
        Err(ServiceError::McpError(e)) => e,
        Err(other) => panic!("{what}: expected a JSON-RPC error, got {other}"),
        Ok(v) => panic!("{what}: expected an error, got {v:?}"),
    }
}

/// Wait until an event matching `want` arrives; the events seen meanwhile are the error.
async fn wait_for(
    rx: &mut mpsc::UnboundedReceiver<Event>,
    within: Duration,
    want: impl Fn(&Event) -> bool,
) -> Result<(), Vec<Event>> {
    let deadline = tokio::time::Instant::now() + within;
    let mut seen = Vec::new();
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(ev)) if want(&ev) => return Ok(()),
            Ok(Some(ev)) => seen.push(ev),
            Ok(None) | Err(_) => return Err(seen),
        }
    }
}

/// Everything that arrives during `dur`.
async fn collect_for(rx: &mut mpsc::UnboundedReceiver<Event>, dur: Duration) -> Vec<Event> {
    let deadline = tokio::time::Instant::now() + dur;
    let mut seen = Vec::new();
    while let Ok(Some(ev)) = tokio::time::timeout_at(deadline, rx.recv()).await {
        seen.push(ev);
    }
    seen
}

/// Let in-flight debounced notifications land, then forget them, so the next wait only sees
/// what the next change causes.
async fn settle(rx: &mut mpsc::UnboundedReceiver<Event>) {
    collect_for(rx, Duration::from_millis(300)).await;
}

/// Wait on a 2026 subscription stream for a notification matching `want`.
async fn next_matching(
    sub: &mut Subscription,
    within: Duration,
    want: impl Fn(&ServerNotification) -> bool,
) -> Result<(), Vec<String>> {
    let deadline = tokio::time::Instant::now() + within;
    let mut seen = Vec::new();
    loop {
        match tokio::time::timeout_at(deadline, sub.next()).await {
            Ok(Ok(Some(n))) if want(&n) => return Ok(()),
            Ok(Ok(Some(n))) => seen.push(format!("{n:?}")),
            Ok(Ok(None)) => {
                seen.push(format!("stream ended: {:?}", sub.end()));
                return Err(seen);
            }
            Ok(Err(e)) => {
                seen.push(format!("stream error: {e}"));
                return Err(seen);
            }
            Err(_) => return Err(seen),
        }
    }
}

/// Write to `watched` until the stream reports it (at most ~3 s), then drain what the probes
/// caused. The server arms the URI watch after the list watch, so both are armed then.
async fn armed(sub: &mut Subscription, watched: &Path, uri: &str) {
    let mut ok = false;
    for probe in 0..10 {
        std::fs::write(watched, format!("probe {probe}\n")).expect("probe write");
        if next_matching(sub, Duration::from_millis(300), is_updated(uri))
            .await
            .is_ok()
        {
            ok = true;
            break;
        }
    }
    assert!(ok, "the listen stream never reported a write to {uri}");
    let _ = next_matching(sub, Duration::from_millis(300), |_| false).await;
}

fn is_updated(uri: &str) -> impl Fn(&ServerNotification) -> bool + '_ {
    move |n| matches!(n, ServerNotification::ResourceUpdatedNotification(u) if u.params.uri == uri)
}

fn is_list_changed(n: &ServerNotification) -> bool {
    matches!(n, ServerNotification::ResourceListChangedNotification(_))
}

/// Percent-encode a path the way the server mints URIs: every byte outside
/// `A-Za-z0-9-._~/` becomes an uppercase `%XX`.
fn pct(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The `file://` URI of an absolute path.
fn uri_of(abs: &Path) -> String {
    format!("file://{}", pct(abs.as_os_str().as_bytes()))
}

/// Standard, padded base64 as the server sends blobs; independent of the server's encoder.
fn base64_decode(s: &str) -> Vec<u8> {
    assert_eq!(s.len() % 4, 0, "blob is not padded base64: {s:?}");
    let body = s.trim_end_matches('=');
    assert!(s.len() - body.len() <= 2, "too much padding in {s:?}");
    let mut out = Vec::with_capacity(body.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in body.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not standard base64: {:?} in blob", c as char),
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}

/// Deterministic pseudo-random bytes (xorshift), so a failure reproduces.
fn noise(len: usize, mut seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        out.extend_from_slice(&seed.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Write `bytes` at `root/rel`, creating the parent directories.
fn put(root: &Path, rel: &str, bytes: impl AsRef<[u8]>) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().expect("has a parent")).expect("create parents");
    std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// A fresh temp dir and its canonical `root` subdirectory (URIs carry canonical paths).
fn temp_root() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let base = tmp.path().canonicalize().expect("canonical temp dir");
    let root = base.join("root");
    std::fs::create_dir(&root).expect("create root");
    (tmp, root)
}

/// A config file next to `root` with one files mount and the given `[server]` lines.
fn write_config(root: &Path, server: &str) -> PathBuf {
    let path = root.with_file_name(format!(
        "{}.toml",
        root.file_name().expect("named").to_string_lossy()
    ));
    // A JSON string is a valid TOML basic string for any path a temp dir has.
    let root_str = serde_json::to_string(root.to_str().expect("UTF-8 temp path")).expect("json");
    let text = format!("[server]\n{server}\n\n[[mount]]\nkind = \"files\"\nroot = {root_str}\n");
    std::fs::write(&path, text).expect("write config");
    path
}

/// Component-wise byte order of `/`-separated paths, the order `resources/list` promises.
fn path_order(a: &str, b: &str) -> std::cmp::Ordering {
    a.split('/').cmp(b.split('/'))
}

// ---------------------------------------------------------------------------------------------
// 1. Pagination
// ---------------------------------------------------------------------------------------------

/// Top-level directories whose names sort differently as whole strings than component-wise
/// (`a b/x` < `a/x` as strings, but `a` < `a b` as components), so a string sort shows up.
const TOP_DIRS: &[&str] = &["a", "a b", "a-b", "a#", "ä", "d%20x", "q?d", "z"];
const SUB_DIRS: &[&str] = &["s", "s 1", "s.1", "日本"];

/// Build a tree of `files` listable files spread over nested directories, plus entries that
/// must never be listed. Returns the listable paths (root-relative) in any order.
fn build_tree(root: &Path, files: usize) -> Vec<String> {
    let mut dirs = vec![String::new()];
    for top in TOP_DIRS {
        dirs.push((*top).to_owned());
        for sub in SUB_DIRS {
            dirs.push(format!("{top}/{sub}"));
        }
    }
    dirs.push("deep/1/2/3/4/5/6/7/8".into());
    let mut listed = Vec::with_capacity(files);
    for i in 0..files {
        let name = match i % 8 {
            0 => format!("f{i:04}.txt"),
            1 => format!("file {i}.md"),
            2 => format!("h#{i}.txt"),
            3 => format!("p%{i}.txt"),
            4 => format!("q?{i}"),
            5 => format!("ü{i}.rs"),
            6 => format!("x{i}"),
            _ => format!("{i}-ünï cödé ✓.txt"),
        };
        let dir = &dirs[i % dirs.len()];
        let rel = if dir.is_empty() {
            name
        } else {
            format!("{dir}/{name}")
        };
        put(root, &rel, format!("{rel}\n"));
        listed.push(rel);
    }
    // Never listed: denied, hidden, gitignored (by the root's and a nested .gitignore).
    put(root, ".gitignore", "*.log\nignored/\n");
    put(root, "a b/.gitignore", "local.txt\n");
    for rel in [
        ".env",
        "a/.env",
        "k.pem",
        "a b/id_rsa",
        "a/s/server.key",
        "credentials.json",
        ".git/config",
        ".git/HEAD",
        ".hidden/x.txt",
        "a/.dotfile",
        "build.log",
        "z/s/trace.log",
        "ignored/x.txt",
        "a b/local.txt",
    ] {
        put(root, rel, SECRET);
    }
    std::fs::create_dir_all(root.join("empty/nested")).expect("empty dirs");
    listed
}

async fn pagination(era: Era, files: usize, page_size: usize) {
    let (_tmp, root) = temp_root();
    let mut expected = build_tree(&root, files);
    expected.sort_by(|a, b| path_order(a, b));
    let config = write_config(&root, &format!("page_size = {page_size}"));
    let server = Server::with_config(era, &config).await;

    let pages = server.list_pages(files / page_size + 2).await;
    let (last, full) = pages.split_last().expect("at least one page");
    for (i, page) in full.iter().enumerate() {
        assert_eq!(
            page.len(),
            page_size,
            "{era:?}: page {i} of {} is not full though more follow",
            pages.len()
        );
    }
    assert!(
        !last.is_empty() && last.len() <= page_size,
        "{era:?}: last page has {} entries",
        last.len()
    );

    let listed: Vec<Resource> = pages.into_iter().flatten().collect();
    let got_uris: Vec<&str> = listed.iter().map(|r| r.uri.as_str()).collect();
    let want_uris: Vec<String> = expected.iter().map(|rel| uri_of(&root.join(rel))).collect();
    if got_uris != want_uris {
        let got: BTreeSet<&str> = got_uris.iter().copied().collect();
        let want: BTreeSet<&str> = want_uris.iter().map(String::as_str).collect();
        let missing: Vec<_> = want.difference(&got).take(10).collect();
        let extra: Vec<_> = got.difference(&want).take(10).collect();
        let first_diff = got_uris.iter().zip(&want_uris).position(|(g, w)| g != w);
        panic!(
            "{era:?}, page size {page_size}: listed {} URIs, expected {}; duplicates: {}; \
             missing (first 10): {missing:?}; unexpected (first 10): {extra:?}; \
             first position out of order: {first_diff:?}",
            got_uris.len(),
            want_uris.len(),
            got_uris.len() - got.len(),
        );
    }
    for (r, rel) in listed.iter().zip(&expected) {
        assert_eq!(&r.name, rel, "name is the root-relative path");
        assert_eq!(r.size, Some(rel.len() as u64 + 1), "size of {rel}");
        let modified = r
            .annotations
            .as_ref()
            .and_then(|a| a.last_modified.as_deref())
            .unwrap_or_else(|| panic!("{rel}: no annotations.lastModified"));
        assert!(
            modified.len() >= 20 && modified.as_bytes()[10] == b'T',
            "{rel}: lastModified {modified:?} is not RFC 3339"
        );
        let want_mime = if rel.ends_with(".md") {
            Some("text/markdown")
        } else if rel.ends_with(".txt") {
            Some("text/plain")
        } else {
            None
        };
        if want_mime.is_some() {
            assert_eq!(r.mime_type.as_deref(), want_mime, "mimeType of {rel}");
        }
    }
    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 2. Byte-exact reads
// ---------------------------------------------------------------------------------------------

async fn reads(era: Era) {
    let (_tmp, root) = temp_root();
    let text = "# Notes\n\nüñíçødé ✓ — 日本語\r\ntabs\tand trailing spaces   \n";
    put(&root, "notes.md", text);
    let plain = "line 1\nline 2\nline 3\nline 4\n";
    put(&root, "plain.txt", plain);
    // Random bytes with a NUL and sequences that are not UTF-8 wherever they fall.
    let mut binary = noise(70_000, 0x9E37_79B9_7F4A_7C15);
    binary.extend_from_slice(b"\0\xff\xfe\xc3\x28\xa0\xa1\xf0\x28\x8c\x28\0");
    put(&root, "data.bin", &binary);
    let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    png.extend(noise(4096, 42));
    put(&root, "img/pic.png", &png);
    put(&root, "empty.txt", "");
    put(&root, "sub dir/ü #1?.txt", "tricky name\n");
    put(&root, ".env", SECRET);

    let server = Server::with_root(era, &root).await;
    let uri = |rel: &str| uri_of(&root.join(rel));

    let (mime, body) = server.read_one(&uri("notes.md")).await;
    assert_eq!(mime.as_deref(), Some("text/markdown"));
    assert!(
        matches!(body, Body::Text(t) if t == text),
        "notes.md is not byte-exact text"
    );

    let (mime, body) = server.read_one(&uri("plain.txt")).await;
    assert_eq!(mime.as_deref(), Some("text/plain"));
    assert!(matches!(body, Body::Text(t) if t == plain));

    let (_, body) = server.read_one(&uri("data.bin")).await;
    match body {
        Body::Blob(b) => assert!(b == binary, "data.bin: blob differs from the file"),
        Body::Text(_) => panic!("data.bin (not UTF-8) must be a blob"),
    }

    let (mime, body) = server.read_one(&uri("img/pic.png")).await;
    assert_eq!(mime.as_deref(), Some("image/png"));
    match body {
        Body::Blob(b) => assert!(b == png, "pic.png: blob differs from the file"),
        Body::Text(_) => panic!("pic.png must be a blob"),
    }

    assert_eq!(server.read_text(&uri("empty.txt")).await, "");
    assert_eq!(
        server.read_text(&uri("sub dir/ü #1?.txt")).await,
        "tricky name\n"
    );

    // Windows of a text file.
    let p = uri("plain.txt");
    assert_eq!(
        server.read_text(&format!("{p}?head=2")).await,
        "line 1\nline 2\n"
    );
    assert_eq!(server.read_text(&format!("{p}?tail=1")).await, "line 4\n");
    assert_eq!(
        server.read_text(&format!("{p}?offset=7&length=6")).await,
        "line 2"
    );
    // A byte window of a binary file is those exact bytes.
    let (_, body) = server
        .read_one(&format!("{}?offset=1000&length=5000", uri("data.bin")))
        .await;
    match body {
        Body::Blob(b) => assert!(b == binary[1000..6000], "binary window differs"),
        Body::Text(_) => panic!("a window of random bytes must be a blob"),
    }

    // A directory reads as one JSON document listing its visible entries.
    let root_uri = uri_of(&root);
    let (mime, body) = server.read_one(&root_uri).await;
    assert_eq!(mime.as_deref(), Some("application/json"));
    let Body::Text(json) = body else {
        panic!("a directory reads as text")
    };
    let doc: serde_json::Value = serde_json::from_str(&json).expect("directory JSON");
    let names: BTreeSet<&str> = doc["entries"]
        .as_array()
        .expect("entries array")
        .iter()
        .map(|e| e["name"].as_str().expect("entry name"))
        .collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "data.bin",
            "empty.txt",
            "img",
            "notes.md",
            "plain.txt",
            "sub dir"
        ]),
        "directory entries (no .env)"
    );

    server.assert_not_found(&uri("missing.txt")).await;
    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 3. Templates and completion
// ---------------------------------------------------------------------------------------------

async fn templates_and_completion(era: Era) {
    let (_tmp, root) = temp_root();
    put(&root, ".gitignore", "*.log\n");
    put(&root, "readme.md", "hi\n");
    put(&root, "ignored.log", "noise\n");
    put(&root, ".env", SECRET);
    put(&root, "sub/file1.txt", "1\n");
    put(&root, "sub/file2.txt", "2\n");
    put(&root, "sub/fi_dir/inner.txt", "in\n");
    put(&root, "sub/other.txt", "o\n");
    put(&root, "sub/fig.log", "ignored\n");
    put(&root, "sub/fi.pem", SECRET);
    put(&root, "sub/.env", SECRET);
    put(&root, "sub/.fi_hidden", SECRET);

    let server = Server::with_root(era, &root).await;
    let prefix = uri_of(&root);
    let plain = format!("{prefix}/{{+path}}");
    let window = format!("{prefix}/{{+path}}{{?offset,length,head,tail}}");

    let listed = call(
        "resources/templates/list",
        server.client.list_resource_templates(None),
    )
    .await
    .expect("templates");
    let got: BTreeSet<&str> = listed
        .resource_templates
        .iter()
        .map(|t| t.uri_template.as_str())
        .collect();
    assert_eq!(got, BTreeSet::from([plain.as_str(), window.as_str()]));

    let set = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<BTreeSet<_>>();
    for template in [&plain, &window] {
        assert_eq!(
            server.complete(template, "sub/fi").await,
            set(&["sub/file1.txt", "sub/file2.txt", "sub/fi_dir/"]),
            "{era:?}: completing sub/fi on {template}"
        );
        assert_eq!(
            server.complete(template, "").await,
            set(&["readme.md", "sub/"]),
            "{era:?}: completing the root on {template}"
        );
        assert!(
            server.complete(template, "sub/.").await.is_empty(),
            "dot-files and .env are never suggested"
        );
        assert!(server.complete(template, ".e").await.is_empty());
        assert!(server.complete(template, "sub/fig").await.is_empty());
    }
    // A completed value expands to a readable URI.
    assert_eq!(
        server.read_text(&format!("{prefix}/sub/file1.txt")).await,
        "1\n"
    );
    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 4. Change notifications
// ---------------------------------------------------------------------------------------------

#[expect(
    deprecated,
    reason = "resources/subscribe is the legacy era's API under test"
)]
async fn legacy_subscribe(server: &Server, uri: &str) -> Result<(), ServiceError> {
    call(
        "resources/subscribe",
        server.client.subscribe(SubscribeRequestParams::new(uri)),
    )
    .await
}

#[expect(
    deprecated,
    reason = "resources/unsubscribe is the legacy era's API under test"
)]
async fn legacy_unsubscribe(server: &Server, uri: &str) -> Result<(), ServiceError> {
    call(
        "resources/unsubscribe",
        server
            .client
            .unsubscribe(UnsubscribeRequestParams::new(uri)),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_notifications() {
    let (_tmp, root) = temp_root();
    put(&root, "watched.txt", "v1\n");
    put(&root, "other.txt", "other\n");
    put(&root, ".env", SECRET);
    let watched = root.join("watched.txt");
    let uri = uri_of(&watched);
    let mut server = Server::with_root(Era::Legacy, &root).await;

    legacy_subscribe(&server, &uri).await.expect("subscribe");
    let e = mcp_error(
        legacy_subscribe(&server, &uri_of(&root.join(".env"))).await,
        "subscribe .env",
    );
    assert_eq!(e.code.0, -32002, "a denied file cannot be watched: {e:?}");

    std::fs::write(&watched, "v2\n").expect("modify");
    wait_for(&mut server.events, NOTIFY_WITHIN, |e| {
        *e == Event::Updated(uri.clone())
    })
    .await
    .unwrap_or_else(|seen| panic!("no updated for {uri} after a write; saw {seen:?}"));
    settle(&mut server.events).await;

    // Editors save by writing a temp file and renaming it over the original.
    let tmp = root.join(".watched.txt.swp");
    std::fs::write(&tmp, "v3\n").expect("write temp");
    std::fs::rename(&tmp, &watched).expect("rename over");
    wait_for(&mut server.events, NOTIFY_WITHIN, |e| {
        *e == Event::Updated(uri.clone())
    })
    .await
    .unwrap_or_else(|seen| panic!("no updated for {uri} after an atomic replace; saw {seen:?}"));
    settle(&mut server.events).await;

    // The subscription follows the path, not the replaced inode.
    std::fs::write(&watched, "v4\n").expect("modify the new inode");
    wait_for(&mut server.events, NOTIFY_WITHIN, |e| {
        *e == Event::Updated(uri.clone())
    })
    .await
    .unwrap_or_else(|seen| panic!("no updated after a write to the replaced file; saw {seen:?}"));
    settle(&mut server.events).await;

    legacy_unsubscribe(&server, &uri)
        .await
        .expect("unsubscribe");
    std::fs::write(&watched, "v5\n").expect("modify after unsubscribe");
    let seen = collect_for(&mut server.events, QUIET_FOR).await;
    assert!(
        seen.is_empty(),
        "notifications after unsubscribe and a plain write: {seen:?}"
    );

    // list_changed needs no subscription in the legacy era.
    let created = root.join("new file.txt");
    std::fs::write(&created, "new\n").expect("create");
    wait_for(&mut server.events, NOTIFY_WITHIN, |e| {
        *e == Event::ListChanged
    })
    .await
    .unwrap_or_else(|seen| panic!("no list_changed after a create; saw {seen:?}"));
    settle(&mut server.events).await;
    std::fs::remove_file(&created).expect("delete");
    wait_for(&mut server.events, NOTIFY_WITHIN, |e| {
        *e == Event::ListChanged
    })
    .await
    .unwrap_or_else(|seen| panic!("no list_changed after a delete; saw {seen:?}"));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modern_notifications() {
    let (_tmp, root) = temp_root();
    put(&root, "watched.txt", "v1\n");
    let watched = root.join("watched.txt");
    let uri = uri_of(&watched);
    let mut server = Server::with_root(Era::Modern, &root).await;

    let filter = SubscriptionFilter::builder()
        .resource_subscription(uri.clone())
        .resources_list_changed()
        .build();
    let mut sub = call("subscriptions/listen", server.client.listen(filter))
        .await
        .expect("listen");
    assert_eq!(sub.acknowledged().resources_list_changed, Some(true));
    assert_eq!(
        sub.acknowledged().resource_subscriptions.as_deref(),
        Some(std::slice::from_ref(&uri)),
        "the acknowledgment names the watched URI"
    );

    // The acknowledgment can come before the server's watches are armed (checked on its own in
    // `modern_listen_reports_changes_made_right_after_the_acknowledgment`); wait until a
    // change gets through so the rest of this test checks delivery, not that race.
    armed(&mut sub, &watched, &uri).await;

    std::fs::write(&watched, "v2\n").expect("modify");
    next_matching(&mut sub, NOTIFY_WITHIN, is_updated(&uri))
        .await
        .unwrap_or_else(|seen| panic!("no updated for {uri} after a write; saw {seen:?}"));

    let tmp = root.join(".watched.txt.swp");
    std::fs::write(&tmp, "v3\n").expect("write temp");
    std::fs::rename(&tmp, &watched).expect("rename over");
    next_matching(&mut sub, NOTIFY_WITHIN, is_updated(&uri))
        .await
        .unwrap_or_else(|seen| panic!("no updated after an atomic replace; saw {seen:?}"));

    let created = root.join("new.txt");
    std::fs::write(&created, "new\n").expect("create");
    next_matching(&mut sub, NOTIFY_WITHIN, is_list_changed)
        .await
        .unwrap_or_else(|seen| panic!("no list_changed after a create; saw {seen:?}"));
    std::fs::remove_file(&created).expect("delete");
    next_matching(&mut sub, NOTIFY_WITHIN, is_list_changed)
        .await
        .unwrap_or_else(|seen| panic!("no list_changed after a delete; saw {seen:?}"));

    call("cancel listen", sub.cancel())
        .await
        .expect("cancel the subscription");
    assert!(matches!(sub.end(), Some(SubscriptionEnd::Cancelled)));

    // A second stream that is simply dropped must not disturb the session.
    let dropped = call(
        "subscriptions/listen",
        server.client.listen(
            SubscriptionFilter::builder()
                .resources_list_changed()
                .build(),
        ),
    )
    .await
    .expect("second listen");
    drop(dropped);
    // A stream that has to start the list watch says once that the list may have changed
    // (changes made while the watch was being set up cannot be seen); that and anything else
    // already in flight when the handle was dropped is fair. What must not come is a
    // notification caused by a change made after the cancellation.
    settle(&mut server.events).await;
    std::fs::write(&watched, "v4\n").expect("modify after cancel");
    std::fs::write(root.join("late.txt"), "late\n").expect("create after cancel");
    assert_eq!(
        server.read_text(&uri).await,
        "v4\n",
        "the session still serves reads"
    );

    // In this era nothing arrives unasked: no listen stream is open any more.
    let seen = collect_for(&mut server.events, QUIET_FOR).await;
    assert!(
        seen.is_empty(),
        "unsolicited notifications in the 2026-07-28 era: {seen:?}"
    );
    server.stop().await;
}

/// The legacy era arms `list_changed` when `notifications/initialized` arrives, which a client
/// cannot await. Once the client has listed, though, a file created afterwards must be reported,
/// or the client keeps a stale listing. Several fresh sessions, because a lost race is not
/// certain on any single one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_list_changed_covers_a_create_right_after_the_first_list() {
    let mut lost = Vec::new();
    for attempt in 0..10 {
        let (_tmp, root) = temp_root();
        put(&root, "a.txt", "a\n");
        let mut server = Server::with_root(Era::Legacy, &root).await;
        assert_eq!(server.list_all().await.len(), 1);
        std::fs::write(root.join("new.txt"), "new\n").expect("create");
        if wait_for(&mut server.events, NOTIFY_WITHIN, |e| {
            *e == Event::ListChanged
        })
        .await
        .is_err()
        {
            lost.push(attempt);
        }
        server.stop().await;
    }
    assert!(
        lost.is_empty(),
        "no list_changed for a file created right after the first resources/list \
         in sessions {lost:?} of 10"
    );
}

/// The 2026-07-28 acknowledgment says the subscription is in force, so a change made right
/// after it must be reported. Repeated on fresh streams, because a lost race is not certain
/// on any single one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modern_listen_reports_changes_made_right_after_the_acknowledgment() {
    let (_tmp, root) = temp_root();
    put(&root, "watched.txt", "v0\n");
    let watched = root.join("watched.txt");
    let uri = uri_of(&watched);
    let server = Server::with_root(Era::Modern, &root).await;
    let mut lost = Vec::new();
    for attempt in 0..5 {
        let filter = SubscriptionFilter::builder()
            .resource_subscription(uri.clone())
            .resources_list_changed()
            .build();
        let mut sub = call("subscriptions/listen", server.client.listen(filter))
            .await
            .expect("listen");
        std::fs::write(&watched, format!("v{attempt}\n")).expect("modify");
        std::fs::write(root.join(format!("new{attempt}.txt")), "new\n").expect("create");
        // Both must arrive, in either order, within one deadline.
        let (mut updated, mut listed) = (false, false);
        let deadline = tokio::time::Instant::now() + NOTIFY_WITHIN;
        while !(updated && listed) {
            match tokio::time::timeout_at(deadline, sub.next()).await {
                Ok(Ok(Some(n))) => {
                    updated |= is_updated(&uri)(&n);
                    listed |= is_list_changed(&n);
                }
                Ok(other) => panic!("stream {attempt} ended early: {other:?}"),
                Err(_) => break,
            }
        }
        if !updated {
            lost.push(format!("stream {attempt}: no updated for {uri}"));
        }
        if !listed {
            lost.push(format!("stream {attempt}: no list_changed"));
        }
        call("cancel listen", sub.cancel()).await.expect("cancel");
    }
    assert!(
        lost.is_empty(),
        "changes made right after notifications/subscriptions/acknowledged were not reported: {lost:#?}"
    );
    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 5. Sandbox escapes
// ---------------------------------------------------------------------------------------------

async fn escapes(era: Era) {
    let (_tmp, root) = temp_root();
    let base = root.parent().expect("root has a parent").to_path_buf();
    put(&root, "ok.txt", "fine\n");
    put(&root, "a/b", "a/b via a real slash\n");
    put(&root, "sub/target.txt", "inside target\n");
    put(&root, ".env", SECRET);
    put(&root, "sub/.env", SECRET);
    put(&root, ".git/config", SECRET);
    put(&root, "secret.pem", SECRET);
    put(&root, "id_rsa", SECRET);
    put(&base, "root-evil/secret.txt", SECRET);
    put(&base, "etc/passwd", SECRET);
    put(&base, "outside/secret.txt", SECRET);
    std::os::unix::fs::symlink("/etc/passwd", root.join("passwd_link")).expect("symlink");
    std::os::unix::fs::symlink(base.join("outside/secret.txt"), root.join("out_link"))
        .expect("symlink");
    std::os::unix::fs::symlink("../outside/secret.txt", root.join("rel_out_link"))
        .expect("symlink");
    std::os::unix::fs::symlink(base.join("outside"), root.join("out_dir")).expect("symlink");
    std::os::unix::fs::symlink(".env", root.join("notes.txt")).expect("symlink");
    std::os::unix::fs::symlink("sub/target.txt", root.join("inner_link")).expect("symlink");

    let server = Server::with_root(era, &root).await;
    let r = uri_of(&root);
    let cases = [
        format!("{r}/../etc/passwd"),
        format!("{r}/sub/../../etc/passwd"),
        format!("{r}/%2e%2e/etc/passwd"),
        format!("{r}/%2E%2E/%2E%2E/etc/passwd"),
        format!("{r}/..%2Fetc%2Fpasswd"),
        format!("{r}/a%2Fb"),
        "file:///etc/passwd".to_owned(),
        uri_of(&base.join("outside/secret.txt")),
        format!("{r}/passwd_link"),
        format!("{r}/out_link"),
        format!("{r}/rel_out_link"),
        format!("{r}/out_dir/secret.txt"),
        format!("{r}/out_dir"),
        format!("{r}-evil/secret.txt"),
        format!("{r}-evil"),
        format!("{r}/ok.txt%00"),
        format!("{r}/ok.txt%00.png"),
        format!("{r}/{}", "a".repeat(300)),
        format!("{r}/.env"),
        format!("{r}/.env?tail=1"),
        format!("{r}/sub/.env"),
        format!("{r}/.git/config"),
        format!("{r}/.git"),
        format!("{r}/secret.pem"),
        format!("{r}/id_rsa"),
        format!("{r}/notes.txt"),
    ];
    for uri in &cases {
        server.assert_not_found(uri).await;
    }

    // A symlink that stays inside the root is an ordinary file.
    assert_eq!(
        server.read_text(&format!("{r}/inner_link")).await,
        "inside target\n"
    );
    assert_eq!(
        server.read_text(&format!("{r}/a/b")).await,
        "a/b via a real slash\n"
    );

    let names: BTreeSet<String> = server
        .list_all()
        .await
        .into_iter()
        .map(|r| r.name)
        .collect();
    let allowed =
        BTreeSet::from(["ok.txt", "a/b", "sub/target.txt", "inner_link"].map(String::from));
    assert!(
        names.is_subset(&allowed) && names.contains("ok.txt") && names.contains("sub/target.txt"),
        "{era:?}: the listing shows escapes or denied files: {names:?}"
    );
    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 6. The read limit
// ---------------------------------------------------------------------------------------------

async fn read_limit(era: Era) {
    let (_tmp, root) = temp_root();
    // 327,680 lines of exactly 64 bytes: 20 MiB.
    let mut big = Vec::with_capacity(BIG_SIZE);
    let mut i = 0u64;
    while big.len() < BIG_SIZE {
        big.extend_from_slice(format!("{i:062}x\n").as_bytes());
        i += 1;
    }
    assert_eq!(big.len(), BIG_SIZE);
    put(&root, "big.txt", &big);
    let server = Server::with_root(era, &root).await;
    let uri = uri_of(&root.join("big.txt"));

    let e = mcp_error(server.read(&uri).await, "read a 20 MiB file");
    assert_eq!(e.code.0, -32602, "too large is invalid params: {e:?}");
    assert!(
        e.message.contains(&BIG_SIZE.to_string()) && e.message.contains(&DEFAULT_LIMIT.to_string()),
        "the message names the size and the limit in bytes: {:?}",
        e.message
    );

    let last3 = std::str::from_utf8(&big[BIG_SIZE - 3 * 64..]).expect("ascii");
    assert_eq!(server.read_text(&format!("{uri}?tail=3")).await, last3);
    let first = std::str::from_utf8(&big[..64]).expect("ascii");
    assert_eq!(server.read_text(&format!("{uri}?head=1")).await, first);
    let second = std::str::from_utf8(&big[64..128]).expect("ascii");
    assert_eq!(
        server
            .read_text(&format!("{uri}?offset=64&length=64"))
            .await,
        second
    );
    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 7. FIFOs
// ---------------------------------------------------------------------------------------------

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("run mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
}

async fn fifo(era: Era) {
    let (_tmp, root) = temp_root();
    put(&root, "ok.txt", "ok\n");
    put(&root, "sub/x.txt", "x\n");
    mkfifo(&root.join("pipe"));
    mkfifo(&root.join("sub/pipe.txt"));
    let server = Server::with_root(era, &root).await;

    let names: Vec<String> = server
        .list_all()
        .await
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(names, ["ok.txt", "sub/x.txt"], "FIFOs are not listed");
    for rel in ["pipe", "sub/pipe.txt"] {
        let uri = uri_of(&root.join(rel));
        server.assert_not_found(&uri).await;
        server.assert_not_found(&format!("{uri}?head=1")).await;
    }
    // Still responsive: nothing blocked on opening a FIFO.
    assert_eq!(
        server.read_text(&uri_of(&root.join("ok.txt"))).await,
        "ok\n"
    );
    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 8. Cursors
// ---------------------------------------------------------------------------------------------

async fn cursors(era: Era) {
    let (_tmp, root) = temp_root();
    for i in 0..5 {
        put(&root, &format!("f{i}.txt"), "x\n");
    }
    let (_other_tmp, other_root) = temp_root();
    for i in 0..5 {
        put(&other_root, &format!("f{i}.txt"), "x\n");
    }
    let server = Server::with_config(era, &write_config(&root, "page_size = 2")).await;
    let other = Server::with_config(era, &write_config(&other_root, "page_size = 2")).await;

    let first = server.list_page(None).await.expect("first page");
    let cursor = first.next_cursor.expect("a cursor after a 2-entry page");
    // Stateless: the same cursor gives the same page twice.
    let a = server
        .list_page(Some(cursor.clone()))
        .await
        .expect("page 2");
    let b = server
        .list_page(Some(cursor.clone()))
        .await
        .expect("page 2 again");
    assert_eq!(a.resources, b.resources);
    assert_eq!(
        a.resources
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>(),
        ["f2.txt", "f3.txt"]
    );

    let foreign = other
        .list_page(None)
        .await
        .expect("other server's first page")
        .next_cursor
        .expect("other server's cursor");
    let mid = cursor.len() / 2;
    let flipped: String = cursor
        .char_indices()
        .map(|(i, c)| match (i == mid, c) {
            (false, c) => c,
            (true, 'A') => 'B',
            (true, _) => 'A',
        })
        .collect();
    let tampered = [
        ("one character changed", flipped),
        ("truncated", cursor[..cursor.len() - 3].to_owned()),
        ("extended", format!("{cursor}AAAA")),
        ("garbage", "not a cursor!".to_owned()),
        ("from a server with another root", foreign),
    ];
    for (how, bad) in tampered {
        let e = mcp_error(server.list_page(Some(bad)).await, how);
        assert_eq!(e.code.0, -32602, "{era:?}: {how} cursor: {e:?}");
    }
    // A rejected cursor leaves the session usable.
    assert_eq!(server.list_all().await.len(), 5);
    server.stop().await;
    other.stop().await;
}

// ---------------------------------------------------------------------------------------------
// The matrix: each check in both lifecycles.
// ---------------------------------------------------------------------------------------------

macro_rules! in_both_eras {
    ($($legacy:ident, $modern:ident => $check:ident($($arg:expr),*);)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $legacy() {
            $check(Era::Legacy $(, $arg)*).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $modern() {
            $check(Era::Modern $(, $arg)*).await
        }
    )*};
}

in_both_eras! {
    pagination_page_size_1_legacy, pagination_page_size_1_modern => pagination(500, 1);
    pagination_page_size_7_legacy, pagination_page_size_7_modern => pagination(3000, 7);
    pagination_page_size_100_legacy, pagination_page_size_100_modern => pagination(3000, 100);
    reads_are_byte_exact_legacy, reads_are_byte_exact_modern => reads();
    templates_and_completion_legacy, templates_and_completion_modern => templates_and_completion();
    escapes_are_not_found_legacy, escapes_are_not_found_modern => escapes();
    read_limit_and_windows_legacy, read_limit_and_windows_modern => read_limit();
    fifo_is_skipped_legacy, fifo_is_skipped_modern => fifo();
    tampered_cursors_legacy, tampered_cursors_modern => cursors();
}

// ---------------------------------------------------------------------------------------------
// 9. git:// mounts through the binary
// ---------------------------------------------------------------------------------------------

/// Run git in `repo` with a fixed identity; the test fails loudly if git does.
fn git(repo: &Path, args: &[&str]) {
    let status = std::process::Command::new("git")
        .current_dir(repo)
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.com",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .status()
        .expect("run git");
    assert!(status.success(), "git {args:?} failed");
}

/// A repository with one commit on main; `ref_format` is `files` or `reftable`.
fn git_repo(ref_format: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(repo.join("docs")).expect("mkdir");
    let format = format!("--ref-format={ref_format}");
    git(&repo, &["init", "-q", "-b", "main", &format]);
    std::fs::write(repo.join("docs/CHANGELOG.md"), "# Changelog\n").expect("write");
    std::fs::write(repo.join("x"), "x v1\n").expect("write");
    std::fs::write(repo.join("y"), "y v1\n").expect("write");
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "init"]);
    let config = tmp.path().join("git.toml");
    std::fs::write(
        &config,
        format!(
            "[[mount]]\nkind = \"git\"\nrepo = {:?}\ndebounce_ms = 20\n",
            repo.display().to_string()
        ),
    )
    .expect("write config");
    (tmp, repo, config)
}

async fn git_end_to_end(era: Era, ref_format: &str) {
    let (_tmp, repo, config) = git_repo(ref_format);
    let mut server = Server::with_config(era, &config).await;
    // The form users have already seen works exactly as written.
    let (mime, _) = server.read_one("git://main/docs/CHANGELOG.md").await;
    assert_eq!(mime.as_deref(), Some("text/markdown"));
    assert_eq!(
        server.read_text("git://main/docs/CHANGELOG.md").await,
        "# Changelog\n"
    );
    server.assert_not_found("git://nope/x").await;
    server.assert_not_found("git://main/../x").await;

    // A commit that changes x notifies git://main/x; one that does not change x does not.
    let uri = "git://main/x";
    match era {
        Era::Legacy => {
            legacy_subscribe(&server, uri).await.expect("subscribe");
            std::fs::write(repo.join("y"), "y v2\n").expect("write");
            git(&repo, &["commit", "-q", "-am", "only y"]);
            let seen = collect_for(&mut server.events, QUIET_FOR).await;
            assert!(
                !seen.contains(&Event::Updated(uri.into())),
                "a commit not touching x notified it: {seen:?}"
            );
            std::fs::write(repo.join("x"), "x v2\n").expect("write");
            git(&repo, &["commit", "-q", "-am", "x"]);
            wait_for(&mut server.events, NOTIFY_WITHIN, |e| {
                *e == Event::Updated(uri.into())
            })
            .await
            .unwrap_or_else(|seen| {
                panic!("no update of {uri} within {NOTIFY_WITHIN:?}; saw {seen:?}")
            });
        }
        Era::Modern => {
            let filter = SubscriptionFilter::builder()
                .resource_subscription(uri)
                .build();
            let mut sub = call("listen", server.client.listen(filter))
                .await
                .expect("listen");
            std::fs::write(repo.join("y"), "y v2\n").expect("write");
            git(&repo, &["commit", "-q", "-am", "only y"]);
            let early = next_matching(&mut sub, QUIET_FOR, is_updated(uri)).await;
            assert!(early.is_err(), "a commit not touching x notified it");
            std::fs::write(repo.join("x"), "x v2\n").expect("write");
            git(&repo, &["commit", "-q", "-am", "x"]);
            next_matching(&mut sub, NOTIFY_WITHIN, is_updated(uri))
                .await
                .unwrap_or_else(|seen| {
                    panic!("no update of {uri} within {NOTIFY_WITHIN:?}; saw {seen:?}")
                });
        }
    }
    assert_eq!(server.read_text(uri).await, "x v2\n");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_mount_legacy() {
    git_end_to_end(Era::Legacy, "files").await;
}

/// Refs in a reftable (read by the provider's own reader), moves seen through `reftable/`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_mount_reftable_legacy() {
    git_end_to_end(Era::Legacy, "reftable").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_mount_modern() {
    git_end_to_end(Era::Modern, "files").await;
}

// ---------------------------------------------------------------------------------------------
// 10. db:// (SQLite) mounts through the binary
// ---------------------------------------------------------------------------------------------

/// One `completion/complete` for argument `arg` of `template`, as a set.
async fn complete_arg(server: &Server, template: &str, arg: &str, value: &str) -> BTreeSet<String> {
    let info = call(
        &format!("completion/complete {arg}={value:?}"),
        server
            .client
            .complete_resource_argument(template, arg, value, None),
    )
    .await
    .unwrap_or_else(|e| {
        panic!(
            "{:?}: complete {arg}={value:?} on {template}: {e}",
            server.era
        )
    });
    info.values.into_iter().collect()
}

fn set_of(values: &[&str]) -> BTreeSet<String> {
    values.iter().map(|s| (*s).to_owned()).collect()
}

/// The JSON document a `db://` URI reads as.
async fn read_json(server: &Server, uri: &str) -> serde_json::Value {
    let text = server.read_text(uri).await;
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("read {uri}: not JSON ({e}): {text}"))
}

/// Subscribe to `uri` the way `server.era` does it (plus the list in the 2026 era), then check
/// that `unchanged` (a write that leaves the result of `uri` as it was) is not reported within
/// [`QUIET_FOR`], that `changed` (a write that changes it) is reported within `within`, and
/// that `new_table` (a table created) is reported as a list change.
///
/// The quiet write goes first on purpose: the 2026 acknowledgment may precede the arming of
/// the watch, and the quiet period covers that, so the changing write is always seen by an
/// armed watch.
async fn notifies_only_on_change(
    server: &mut Server,
    uri: &str,
    within: Duration,
    unchanged: impl Future<Output = ()>,
    changed: impl Future<Output = ()>,
    new_table: impl Future<Output = ()>,
) {
    let era = server.era;
    match era {
        Era::Legacy => {
            legacy_subscribe(server, uri).await.expect("subscribe");
            unchanged.await;
            let seen = collect_for(&mut server.events, QUIET_FOR).await;
            assert!(
                !seen.contains(&Event::Updated(uri.into())),
                "{era:?}: a write that leaves {uri} as it was notified it: {seen:?}"
            );
            changed.await;
            wait_for(&mut server.events, within, |e| {
                *e == Event::Updated(uri.into())
            })
            .await
            .unwrap_or_else(|seen| {
                panic!("{era:?}: no update of {uri} within {within:?} after a change; saw {seen:?}")
            });
            settle(&mut server.events).await;
            new_table.await;
            wait_for(&mut server.events, within, |e| *e == Event::ListChanged)
                .await
                .unwrap_or_else(|seen| {
                    panic!("{era:?}: no list_changed after CREATE TABLE; saw {seen:?}")
                });
        }
        Era::Modern => {
            let filter = SubscriptionFilter::builder()
                .resource_subscription(uri)
                .resources_list_changed()
                .build();
            let mut sub = call("subscriptions/listen", server.client.listen(filter))
                .await
                .expect("listen");
            unchanged.await;
            let early = next_matching(&mut sub, QUIET_FOR, is_updated(uri)).await;
            assert!(
                early.is_err(),
                "{era:?}: a write that leaves {uri} as it was notified it"
            );
            changed.await;
            next_matching(&mut sub, within, is_updated(uri))
                .await
                .unwrap_or_else(|seen| {
                    panic!(
                        "{era:?}: no update of {uri} within {within:?} after a change; saw {seen:?}"
                    )
                });
            new_table.await;
            next_matching(&mut sub, within, is_list_changed)
                .await
                .unwrap_or_else(|seen| {
                    panic!("{era:?}: no list_changed after CREATE TABLE; saw {seen:?}")
                });
            call("cancel listen", sub.cancel())
                .await
                .expect("cancel the subscription");
        }
    }
}

async fn sqlite_end_to_end(era: Era) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let db = tmp.path().join("app.db");
    {
        let c = rusqlite::Connection::open(&db).expect("create db");
        c.execute_batch(
            "create table users(id integer primary key, name text not null, status text, active int);
             insert into users(name, status, active) values ('ada', 'active', 1), ('bob', 'disabled', 0);",
        )
        .expect("fill db");
    }
    let config = tmp.path().join("db.toml");
    std::fs::write(
        &config,
        "[[mount]]\nkind = \"sqlite\"\nname = \"app\"\nurl = \"sqlite://app.db\"\n\
         [[mount.query]]\nuri = \"db://users/active/list\"\nsql = \"select id, name from users where active = 1\"\n\
         [[mount.query]]\nuri = \"db://users/{status}/list\"\nsql = \"select id, name from users where status = :status\"\n\
         params.status = { enum = [\"active\", \"disabled\"] }\n",
    )
    .expect("write config");
    let mut server = Server::with_config(era, &config).await;
    // The forms users have already seen, exactly as written.
    let active: serde_json::Value =
        serde_json::from_str(&server.read_text("db://users/active/list").await).expect("json");
    assert_eq!(active["rows"], serde_json::json!([[1, "ada"]]), "{active}");
    let disabled: serde_json::Value =
        serde_json::from_str(&server.read_text("db://users/disabled/list").await).expect("json");
    assert_eq!(
        disabled["rows"],
        serde_json::json!([[2, "bob"]]),
        "{disabled}"
    );
    // Template values are checked and bound, never spliced: an injection is refused.
    let e = mcp_error(
        server.read("db://users/x%27%20or%201=1/list").await,
        "injection",
    );
    assert_eq!(e.code.0, -32602, "{e:?}");
    let rows: serde_json::Value =
        serde_json::from_str(&server.read_text("db://app/tables/users").await).expect("json");
    assert_eq!(rows["rows"].as_array().map(Vec::len), Some(2), "{rows}");
    let schema = server.read_text("db://app/tables/users/schema").await;
    assert!(
        schema.contains("\"status\"") && schema.contains("primary"),
        "{schema}"
    );
    server.assert_not_found("db://app/tables/nope").await;

    // Another process writes (a connection of the test's own): SQLite has no server to tell,
    // so the mount sees commits through file events and PRAGMA data_version, no poll interval.
    let writer = rusqlite::Connection::open(&db).expect("writer connection");
    let write = |sql: &'static str| {
        let w = &writer;
        async move { w.execute_batch(sql).expect(sql) }
    };
    let uri = "db://users/active/list";
    notifies_only_on_change(
        &mut server,
        uri,
        NOTIFY_WITHIN,
        write("update users set name = 'bobby' where id = 2"),
        write("insert into users(name, status, active) values ('cy', 'active', 1)"),
        write("create table audit(id integer primary key)"),
    )
    .await;
    assert_eq!(
        read_json(&server, uri).await["rows"],
        serde_json::json!([[1, "ada"], [3, "cy"]])
    );
    server.stop().await;
    drop(writer);
    // The server wrote nothing: the rows are exactly the fixture's and the test's own.
    let c = rusqlite::Connection::open(&db).expect("reopen");
    let n: i64 = c
        .query_row("select count(*) from users", [], |r| r.get(0))
        .expect("count");
    assert_eq!(n, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_mount_legacy() {
    sqlite_end_to_end(Era::Legacy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_mount_modern() {
    sqlite_end_to_end(Era::Modern).await;
}

// ---------------------------------------------------------------------------------------------
// 11. db:// on PostgreSQL and MySQL/MariaDB through the binary
// ---------------------------------------------------------------------------------------------

/// Where the local servers listen and who may create databases on them.
const PG_ADMIN: &str = "postgres://postgres@127.0.0.1:5432/postgres";
const MY_ADMIN: &str = "mysql://root@127.0.0.1:3306";

/// The server a live test creates its database on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dbms {
    Postgres,
    MySql,
}

impl Dbms {
    fn what(self) -> &'static str {
        match self {
            Dbms::Postgres => "PostgreSQL at 127.0.0.1:5432 (user postgres)",
            Dbms::MySql => "MariaDB/MySQL at 127.0.0.1:3306 (user root)",
        }
    }

    /// The mount `kind` in the config file.
    fn kind(self) -> &'static str {
        match self {
            Dbms::Postgres => "postgres",
            Dbms::MySql => "mysql",
        }
    }
}

/// `None` (and a note on stderr) when the server is absent outside CI; a panic under
/// `CI=true`, where a skipped test would hide that nothing was checked.
fn absent<T>(what: &str, e: impl std::fmt::Display) -> Option<T> {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{what} is required under CI=true and could not be reached: {e}");
    }
    eprintln!("SKIPPED: {what} is not reachable here ({e}); start it to run this end-to-end test");
    None
}

/// A database of the test's own on a local server, dropped when the test ends, also when it
/// panics.
struct LiveDb {
    dbms: Dbms,
    name: String,
}

impl LiveDb {
    /// Create a uniquely named database and run `setup` in it.
    async fn create(dbms: Dbms, setup: &str) -> Option<Self> {
        use sqlx::{Connection as _, Executor as _};
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_nanos();
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("mcpr_e2e_{}_{nanos}_{seq}", std::process::id());
        // Bounded: a firewalled port would otherwise hang the connect instead of failing it.
        let connect_within = Duration::from_secs(5);
        match dbms {
            Dbms::Postgres => {
                let mut admin = match tokio::time::timeout(
                    connect_within,
                    sqlx::PgConnection::connect(PG_ADMIN),
                )
                .await
                {
                    Ok(Ok(c)) => c,
                    Ok(Err(e)) => return absent(dbms.what(), e),
                    Err(_) => return absent(dbms.what(), "no answer within 5 s"),
                };
                admin
                    .execute(format!("CREATE DATABASE {name}").as_str())
                    .await
                    .expect("CREATE DATABASE");
            }
            Dbms::MySql => {
                let mut admin = match tokio::time::timeout(
                    connect_within,
                    sqlx::MySqlConnection::connect(MY_ADMIN),
                )
                .await
                {
                    Ok(Ok(c)) => c,
                    Ok(Err(e)) => return absent(dbms.what(), e),
                    Err(_) => return absent(dbms.what(), "no answer within 5 s"),
                };
                admin
                    .execute(format!("CREATE DATABASE {name} CHARACTER SET utf8mb4").as_str())
                    .await
                    .expect("CREATE DATABASE");
            }
        }
        // From here on the guard exists, so a failing setup still drops the database.
        let db = LiveDb { dbms, name };
        db.exec(setup).await;
        Some(db)
    }

    /// The URL the mount and the test's own writes use (the owner: writes are the test's).
    fn url(&self) -> String {
        match self.dbms {
            Dbms::Postgres => format!("postgres://postgres@127.0.0.1:5432/{}", self.name),
            Dbms::MySql => format!("mysql://root@127.0.0.1:3306/{}", self.name),
        }
    }

    /// Run SQL on a connection of the test's own, never through the server under test.
    async fn exec(&self, sql: &str) {
        use sqlx::Connection as _;
        match self.dbms {
            Dbms::Postgres => {
                let mut c = sqlx::PgConnection::connect(&self.url())
                    .await
                    .expect("connect to the test database");
                sqlx::raw_sql(sql)
                    .execute(&mut c)
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
                let _ = c.close().await;
            }
            Dbms::MySql => {
                let mut c = sqlx::MySqlConnection::connect(&self.url())
                    .await
                    .expect("connect to the test database");
                sqlx::raw_sql(sql)
                    .execute(&mut c)
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
                let _ = c.close().await;
            }
        }
    }
}

impl Drop for LiveDb {
    fn drop(&mut self) {
        use sqlx::{Connection as _, Executor as _};
        let (dbms, name) = (self.dbms, self.name.clone());
        // Drop runs on the test's runtime, which cannot be blocked on from inside; the cleanup
        // gets a thread and a runtime of its own.
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                match dbms {
                    Dbms::Postgres => {
                        if let Ok(mut c) = sqlx::PgConnection::connect(PG_ADMIN).await {
                            // FORCE: the server under test may still hold connections.
                            let _ = c
                                .execute(
                                    format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str(),
                                )
                                .await;
                        }
                    }
                    Dbms::MySql => {
                        if let Ok(mut c) = sqlx::MySqlConnection::connect(MY_ADMIN).await {
                            let _ = c
                                .execute(format!("DROP DATABASE IF EXISTS {name}").as_str())
                                .await;
                        }
                    }
                }
            });
        })
        .join();
    }
}

/// The fixture: users with a status, orders with a foreign key to them, a view; on
/// PostgreSQL also a table in a second schema, for the schema-qualified URIs.
fn live_setup(dbms: Dbms) -> String {
    let common = "
        CREATE TABLE users (id INT PRIMARY KEY, name VARCHAR(40) NOT NULL, status VARCHAR(20) NOT NULL);
        INSERT INTO users VALUES (1, 'ada', 'active'), (2, 'bob', 'disabled'), (3, 'cy', 'active'), (4, 'dee', 'pending');
        CREATE TABLE orders (id INT PRIMARY KEY, user_id INT NOT NULL REFERENCES users (id), total INT NOT NULL);
        INSERT INTO orders VALUES (10, 1, 250), (11, 1, 40), (12, 3, 99);
        CREATE VIEW active_users AS SELECT id, name FROM users WHERE status = 'active';
    ";
    match dbms {
        // MySQL ignores an inline REFERENCES; the key must be a table constraint.
        Dbms::MySql => common.replace(
            "user_id INT NOT NULL REFERENCES users (id), total INT NOT NULL",
            "user_id INT NOT NULL, total INT NOT NULL, FOREIGN KEY (user_id) REFERENCES users (id)",
        ),
        Dbms::Postgres => format!(
            "{common}
            CREATE SCHEMA sales;
            CREATE TABLE sales.invoices (id INT PRIMARY KEY, order_id INT NOT NULL REFERENCES public.orders (id), amount INT NOT NULL);
            INSERT INTO sales.invoices VALUES (100, 10, 250);"
        ),
    }
}

/// The mount: three rows per table page, the fixed and templated user queries (the status
/// completes from the data), and a query with an integer parameter.
fn live_config(db: &LiveDb, change_signal: &str) -> String {
    format!(
        "[[mount]]
kind = \"{kind}\"
name = \"shop\"
url = \"{url}\"
page_size = 3
{change_signal}

[[mount.query]]
uri = \"db://users/active/list\"
sql = \"select id, name from users where status = 'active' order by id\"
description = \"Active users\"

[[mount.query]]
uri = \"db://users/{{status}}/list\"
sql = \"select id, name from users where status = :status order by id\"
description = \"Users by status\"
params.status = {{ pattern = \"[a-z]+\", from = \"users.status\" }}

[[mount.query]]
uri = \"db://orders/of/{{user_id}}\"
sql = \"select id, total from orders where user_id = :user_id order by id\"
params.user_id = {{ type = \"integer\" }}
",
        kind = db.dbms.kind(),
        url = db.url(),
    )
}

/// The whole `db://` contract of a server-based engine through the binary: listing,
/// templates, the overview, table pages (JSON and CSV), schemas, named queries and their
/// parameter checks, completion from the catalog and from the data, and notifications that
/// follow the result of a subscribed query. `listen` configures PostgreSQL's NOTIFY channel
/// instead of polling.
async fn live_end_to_end(era: Era, dbms: Dbms, listen: bool) {
    let Some(db) = LiveDb::create(dbms, &live_setup(dbms)).await else {
        return;
    };
    let channel = "mcpr_e2e_changes";
    let signal = if listen {
        format!("notify_channel = \"{channel}\"")
    } else {
        "poll_interval_ms = 100".to_owned()
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let config = tmp.path().join("db.toml");
    std::fs::write(&config, live_config(&db, &signal)).expect("write config");
    let mut server = Server::with_config(era, &config).await;
    let pg = dbms == Dbms::Postgres;

    // resources/list: the overview, each table's rows and schema, the fixed query (not the
    // templates, which are not resources).
    let listed: BTreeSet<String> = server
        .list_all()
        .await
        .into_iter()
        .map(|r| r.uri.clone())
        .collect();
    let mut want = vec![
        "db://shop",
        "db://shop/tables/users",
        "db://shop/tables/users/schema",
        "db://shop/tables/orders",
        "db://shop/tables/orders/schema",
        "db://shop/tables/active_users",
        "db://shop/tables/active_users/schema",
        "db://users/active/list",
    ];
    if pg {
        want.push("db://shop/schemas/sales/tables/invoices");
        want.push("db://shop/schemas/sales/tables/invoices/schema");
    }
    for uri in want {
        assert!(
            listed.contains(uri),
            "{era:?} {dbms:?}: {uri} is not listed: {listed:?}"
        );
    }
    assert!(
        !listed.iter().any(|u| u.contains('{')),
        "templates are not resources: {listed:?}"
    );

    // resources/templates/list.
    let templates: BTreeSet<String> = call(
        "resources/templates/list",
        server.client.list_resource_templates(None),
    )
    .await
    .expect("templates")
    .resource_templates
    .into_iter()
    .map(|t| t.uri_template.clone())
    .collect();
    let table_template = "db://shop/tables/{table}{?cursor,format}";
    for t in [
        "db://shop{?cursor}",
        table_template,
        "db://shop/tables/{table}/schema",
        "db://users/{status}/list",
        "db://orders/of/{user_id}",
    ] {
        assert!(
            templates.contains(t),
            "{era:?} {dbms:?}: no template {t}: {templates:?}"
        );
    }
    assert_eq!(
        templates.contains("db://shop/schemas/{schema}/tables/{table}{?cursor,format}"),
        pg,
        "schema-qualified templates exactly where the engine has schemas: {templates:?}"
    );
    assert!(
        !templates.contains("db://users/active/list"),
        "a fixed query is not a template"
    );

    // The overview.
    let overview = read_json(&server, "db://shop").await;
    assert_eq!(overview["database"], "shop", "{overview}");
    assert_eq!(overview["engine"], dbms.kind(), "{overview}");
    let objects = overview["objects"].as_array().expect("objects");
    let find = |name: &str| {
        objects
            .iter()
            .find(|o| o["name"] == name)
            .unwrap_or_else(|| panic!("{name} is not in the overview: {overview}"))
    };
    assert_eq!(find("users")["type"], "table");
    assert_eq!(find("users")["uri"], "db://shop/tables/users");
    assert_eq!(find("active_users")["type"], "view");
    assert_eq!(find("active_users")["uri"], "db://shop/tables/active_users");
    assert_eq!(
        find("active_users")["schema_uri"],
        "db://shop/tables/active_users/schema"
    );

    // A table page, the next one through `next`, and the same rows as CSV.
    let (mime, _) = server.read_one("db://shop/tables/users").await;
    assert_eq!(mime.as_deref(), Some("application/json"));
    let page = read_json(&server, "db://shop/tables/users").await;
    assert_eq!(
        page["columns"],
        serde_json::json!(["id", "name", "status"]),
        "{page}"
    );
    assert_eq!(
        page["rows"],
        serde_json::json!([
            [1, "ada", "active"],
            [2, "bob", "disabled"],
            [3, "cy", "active"]
        ]),
        "{page}"
    );
    let next = page["next"]
        .as_str()
        .unwrap_or_else(|| panic!("no next page: {page}"));
    let last = read_json(&server, next).await;
    assert_eq!(
        last["rows"],
        serde_json::json!([[4, "dee", "pending"]]),
        "{last}"
    );
    assert!(last["next"].is_null(), "{last}");
    let (mime, body) = server.read_one("db://shop/tables/users?format=csv").await;
    assert_eq!(mime.as_deref(), Some("text/csv"));
    let Body::Text(csv) = body else {
        panic!("CSV is text")
    };
    assert_eq!(
        csv,
        "id,name,status\r\n1,ada,active\r\n2,bob,disabled\r\n3,cy,active\r\n"
    );
    server.assert_not_found("db://shop/tables/nope").await;
    // A view has rows too (ordered by every column).
    let view = read_json(&server, "db://shop/tables/active_users").await;
    assert_eq!(
        view["rows"],
        serde_json::json!([[1, "ada"], [3, "cy"]]),
        "{view}"
    );

    // A schema: columns, the primary key and the foreign key to users.
    let schema = read_json(&server, "db://shop/tables/orders/schema").await;
    assert_eq!(schema["primary_key"], serde_json::json!(["id"]), "{schema}");
    let fk = &schema["foreign_keys"][0];
    assert_eq!(fk["table"], "users", "{schema}");
    assert_eq!(fk["from"], serde_json::json!(["user_id"]), "{schema}");
    assert_eq!(fk["to"], serde_json::json!(["id"]), "{schema}");
    let columns: Vec<&str> = schema["columns"]
        .as_array()
        .expect("columns")
        .iter()
        .map(|c| c["name"].as_str().expect("column name"))
        .collect();
    assert_eq!(columns, ["id", "user_id", "total"], "{schema}");

    if pg {
        // Another schema through the long form; the default schema also answers to it.
        let invoices = read_json(&server, "db://shop/schemas/sales/tables/invoices").await;
        assert_eq!(
            invoices["rows"],
            serde_json::json!([[100, 10, 250]]),
            "{invoices}"
        );
        let long = read_json(&server, "db://shop/schemas/public/tables/users").await;
        assert_eq!(long["rows"], page["rows"], "{long}");
        let s = read_json(&server, "db://shop/schemas/sales/tables/invoices/schema").await;
        assert_eq!(s["foreign_keys"][0]["table"], "orders", "{s}");
        server
            .assert_not_found("db://shop/schemas/nope/tables/users")
            .await;
    }

    // Named queries: fixed, templated with a bound text value and with an integer.
    let active = read_json(&server, "db://users/active/list").await;
    assert_eq!(
        active["rows"],
        serde_json::json!([[1, "ada"], [3, "cy"]]),
        "{active}"
    );
    let pending = read_json(&server, "db://users/pending/list").await;
    assert_eq!(
        pending["rows"],
        serde_json::json!([[4, "dee"]]),
        "{pending}"
    );
    let none = read_json(&server, "db://users/nobody/list").await;
    assert_eq!(none["rows"], serde_json::json!([]), "{none}");
    let orders = read_json(&server, "db://orders/of/1").await;
    assert_eq!(
        orders["rows"],
        serde_json::json!([[10, 250], [11, 40]]),
        "{orders}"
    );
    // Values that fail the parameter's checks are invalid params, never spliced into SQL.
    for bad in [
        "db://users/x%27%20or%201=1/list",
        "db://users/ACTIVE/list",
        "db://orders/of/1%20or%201=1",
        "db://orders/of/abc",
    ] {
        let e = mcp_error(server.read(bad).await, bad);
        assert_eq!(e.code.0, -32602, "{era:?} {dbms:?}: read {bad}: {e:?}");
    }

    // Completion: table names from the catalog, a parameter from the data.
    assert_eq!(
        complete_arg(&server, table_template, "table", "us").await,
        set_of(&["users"])
    );
    assert!(
        complete_arg(&server, table_template, "table", "")
            .await
            .is_superset(&set_of(&["users", "orders"])),
        "every table completes from an empty prefix"
    );
    assert_eq!(
        complete_arg(&server, "db://users/{status}/list", "status", "").await,
        set_of(&["active", "disabled", "pending"])
    );
    assert_eq!(
        complete_arg(&server, "db://users/{status}/list", "status", "d").await,
        set_of(&["disabled"])
    );

    // Notifications follow the result of the subscribed query, not every write.
    let announce = if listen {
        format!("; NOTIFY {channel}")
    } else {
        String::new()
    };
    let uri = "db://users/active/list";
    notifies_only_on_change(
        &mut server,
        uri,
        NOTIFY_WITHIN,
        db.exec(&format!(
            "UPDATE users SET name = 'dee2' WHERE id = 4; INSERT INTO orders VALUES (13, 2, 5){announce}"
        )),
        db.exec(&format!("UPDATE users SET status = 'active' WHERE id = 4{announce}")),
        db.exec(&format!("CREATE TABLE audit (id INT PRIMARY KEY){announce}")),
    )
    .await;
    assert_eq!(
        read_json(&server, uri).await["rows"],
        serde_json::json!([[1, "ada"], [3, "cy"], [4, "dee2"]])
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_mount_legacy() {
    // Changes announced on a NOTIFY channel (no polling).
    live_end_to_end(Era::Legacy, Dbms::Postgres, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_mount_modern() {
    // Changes found by polling every 100 ms.
    live_end_to_end(Era::Modern, Dbms::Postgres, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_mount_legacy() {
    live_end_to_end(Era::Legacy, Dbms::MySql, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_mount_modern() {
    live_end_to_end(Era::Modern, Dbms::MySql, false).await;
}

// ---------------------------------------------------------------------------------------------
// 12. The quick-start example: examples/mcp-resources.toml with its SQLite database
// ---------------------------------------------------------------------------------------------

/// The example config as a user runs it: the docs directory and `db://app` from the committed
/// `examples/app.db` (its rows are checked against `app.sql` by `tests/example_db.rs`).
async fn example_config(era: Era) {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let server = Server::with_config(era, &examples.join("mcp-resources.toml")).await;
    let listed: BTreeSet<String> = server
        .list_all()
        .await
        .into_iter()
        .map(|r| r.uri.clone())
        .collect();
    for uri in [
        "db://app",
        "db://app/tables/users",
        "db://app/tables/orders",
        "db://app/tables/order_totals",
        "db://users/active/list",
    ] {
        assert!(listed.contains(uri), "{era:?}: {uri} is not listed");
    }
    assert!(
        listed.iter().any(|u| u.starts_with("file://")),
        "the docs mount is served too"
    );

    let users = read_json(&server, "db://app/tables/users").await;
    assert_eq!(
        users["columns"],
        serde_json::json!(["id", "name", "email", "status", "created_at"]),
        "{users}"
    );
    assert_eq!(users["rows"].as_array().map(Vec::len), Some(8), "{users}");
    assert_eq!(
        users["rows"][0],
        serde_json::json!([
            1,
            "Ada Lovelace",
            "ada@example.com",
            "active",
            "2024-01-15T09:00:00Z"
        ]),
        "{users}"
    );
    let active = read_json(&server, "db://users/active/list").await;
    let ids: Vec<i64> = active["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r[0].as_i64().expect("id"))
        .collect();
    assert_eq!(ids, [1, 2, 4, 6], "{active}");
    let invited = read_json(&server, "db://users/invited/list").await;
    assert_eq!(invited["row_count"], 2, "{invited}");
    let e = mcp_error(
        server.read("db://users/admin/list").await,
        "not in the enum",
    );
    assert_eq!(e.code.0, -32602, "{e:?}");
    assert_eq!(
        complete_arg(&server, "db://users/{status}/list", "status", "").await,
        set_of(&["active", "invited", "suspended"])
    );
    let (mime, _) = server.read_one("db://app/tables/orders?format=csv").await;
    assert_eq!(mime.as_deref(), Some("text/csv"));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_config_legacy() {
    example_config(Era::Legacy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_config_modern() {
    example_config(Era::Modern).await;
}

/// A PostgreSQL mount whose server is down at start: the binary starts, the files mount serves
/// reads and the list (which leaves the database out rather than failing or listing it as
/// empty), the database's reads answer -32603 with `temporary`, and the password in its URL
/// appears nowhere.
async fn sql_down_at_start(era: Era) {
    let (_tmp, root) = temp_root();
    put(&root, "a.txt", "hello");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let config = write_config(&root, "");
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str(&format!(
        "\n[[mount]]\nkind = \"postgres\"\nname = \"down\"\nurl = \"postgres://app:s3cret-pw@127.0.0.1:{port}/app\"\n"
    ));
    std::fs::write(&config, text).expect("write config");
    let server = Server::with_config(era, &config).await;
    assert_eq!(
        server.read_text(&uri_of(&root.join("a.txt"))).await,
        "hello"
    );
    let listed: Vec<String> = server
        .list_all()
        .await
        .into_iter()
        .map(|r| r.uri.clone())
        .collect();
    assert!(listed.contains(&uri_of(&root.join("a.txt"))), "{listed:?}");
    assert!(!listed.iter().any(|u| u.starts_with("db://")), "{listed:?}");
    let e = mcp_error(
        server.read("db://down/tables/users").await,
        "read a down database",
    );
    assert_eq!(e.code.0, -32603, "{e:?}");
    assert!(e.message.contains("unavailable"), "{e:?}");
    assert!(!format!("{e:?}").contains("s3cret"), "{e:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_down_at_start_legacy() {
    sql_down_at_start(Era::Legacy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_down_at_start_modern() {
    sql_down_at_start(Era::Modern).await;
}
