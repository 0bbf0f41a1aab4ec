//! Issue #18 end to end: three replicas of the built binary in one cluster over a NATS server
//! of the test's own (so it can stop and restart it), with a shared files mount, a SQLite
//! and a PostgreSQL mount; clients send each request to a different replica. Checked: each
//! change reaches every listen stream and legacy session once, whichever replica watches (the
//! legacy session roams: created on one replica, subscribed through another, its stream on the
//! third);
//! killing the watcher moves its lease and subscriptions keep working; a NATS restart keeps
//! them working; a replica whose NATS is absent at start serves reads, says why it is not
//! ready and joins when NATS appears; metrics; cursors continue across replicas; no secret
//! of `nats_url` shows anywhere.
//!
//! `nats-server` (and PostgreSQL for its part) missing: the test says SKIPPED and passes,
//! except under `CI=true`, where it fails.

mod stream_common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mcpr_testkit::nats::NatsServer;
use serde_json::{Value, json};
use stream_common::{Heard, Replica, install_crypto, messages, wait_for};

const BIN: &str = env!("CARGO_BIN_EXE_mcp-resources");
const META: &str = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;
const TTL_MS: u64 = 1000;
/// The `[cluster] secret` of these replicas: it must appear in no log, metric or answer.
const CLUSTER_SECRET: &str = "cluster-secret-n0t-for-logs-0123456789";
const PG_ADMIN: &str = "postgres://postgres@127.0.0.1:5432/postgres";

fn absent(what: &str, e: impl std::fmt::Display) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{what} is required under CI=true and could not be used: {e}");
    }
    eprintln!("SKIPPED: {what} is not available here ({e})");
}

impl Replica {
    /// `mcp_cluster_watcher` per mount and `mcp_cluster_connected`.
    async fn cluster_metrics(&self) -> (Vec<(String, u8)>, u8) {
        let (_, text) = self.get("/metrics").await;
        let mut watchers = Vec::new();
        let mut connected = 9;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("mcp_cluster_watcher{mount=\"") {
                let (mount, v) = rest.split_once("\"} ").unwrap();
                watchers.push((mount.to_owned(), v.trim().parse().unwrap()));
            } else if let Some(v) = line.strip_prefix("mcp_cluster_connected ") {
                connected = v.trim().parse().unwrap();
            }
        }
        (watchers, connected)
    }

    fn modern(
        &self,
        http: &reqwest::Client,
        method: &str,
        mut params: Value,
    ) -> reqwest::RequestBuilder {
        params["_meta"] = serde_json::from_str(META).unwrap();
        let mut b = http.post(self.url());
        if let Some(uri) = params["uri"].as_str() {
            b = b.header("mcp-name", uri);
        }
        b.header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method)
            .body(
                json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string(),
            )
    }
}

/// A legacy session on `r` subscribed to `uris`, its GET stream followed.
/// A subscription in `refused` must fail as it would without a cluster (the watcher's
/// provider refuses it).
/// A legacy session that roams: `initialize` (and `initialized`) on `on[0]`, every
/// `resources/subscribe` on `on[1]`, the GET stream on `on[2]` (the session lives in the
/// cluster, so any replica continues it).
async fn legacy_session(
    http: &reqwest::Client,
    on: [&Replica; 3],
    uris: &[&str],
    refused: &[&str],
) -> Heard {
    let sid = on[0].legacy_initialize(http).await;
    for (i, uri) in uris.iter().enumerate() {
        let resp = on[1]
            .legacy_post(
                http,
                Some(&sid),
                json!({"jsonrpc": "2.0", "id": 10 + i, "method": "resources/subscribe", "params": {"uri": uri}}),
            )
            .await;
        let body = resp.text().await.unwrap();
        assert!(body.contains("\"result\""), "{body}");
    }
    for uri in refused {
        let resp = on[1]
            .legacy_post(
                http,
                Some(&sid),
                json!({"jsonrpc": "2.0", "id": 99, "method": "resources/subscribe", "params": {"uri": uri}}),
            )
            .await;
        let body = resp.text().await.unwrap();
        assert!(
            body.contains("\"error\"") && body.contains("not found"),
            "{body}"
        );
    }
    on[2].legacy_stream(http, &sid).await
}

/// Wait until every stream heard `uri` updated `want` times (more is a failure).
async fn expect_updates(streams: &[&Heard], uri: &str, want: usize, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let got: Vec<usize> = streams.iter().map(|s| s.updates(uri)).collect();
        assert!(
            got.iter().all(|n| *n <= want),
            "more than {want} updates of {uri}: {got:?}"
        );
        if got.iter().all(|n| *n == want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "updates of {uri}: {got:?}, want {want} each"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Around a NATS restart: every stream hears `uri` again, at most once more than that (a
/// duplicate from a handover), counting from `before`.
async fn expect_once_or_twice(streams: &[&Heard; 3], uri: &str, before: &[usize; 3]) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got = streams.map(|s| s.updates(uri));
        if got.iter().zip(before).all(|(g, b)| *g > *b) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{uri} after the NATS restart: {before:?} -> {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    let got = streams.map(|s| s.updates(uri));
    assert!(
        got.iter().zip(before).all(|(g, b)| *g <= *b + 2),
        "{uri}: {before:?} -> {got:?}"
    );
}

/// The replica holding `mount`'s lease, once exactly one does.
async fn watcher_of(replicas: &[&Replica], mount: &str, within: Duration) -> usize {
    let deadline = Instant::now() + within;
    loop {
        let mut holders = Vec::new();
        for (i, r) in replicas.iter().enumerate() {
            let (w, _) = r.cluster_metrics().await;
            if w.iter().any(|(m, v)| m == mount && *v == 1) {
                holders.push(i);
            }
        }
        if holders.len() == 1 {
            return holders[0];
        }
        assert!(
            Instant::now() < deadline,
            "watchers of {mount}: {holders:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn file_uri(p: &Path) -> String {
    format!("file://{}", p.display())
}

struct Pg {
    name: String,
}

impl Pg {
    async fn create() -> Option<Self> {
        use sqlx::{Connection as _, Executor as _};
        let mut admin = match tokio::time::timeout(
            Duration::from_secs(5),
            sqlx::PgConnection::connect(PG_ADMIN),
        )
        .await
        {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                absent("PostgreSQL at 127.0.0.1:5432", e);
                return None;
            }
            Err(_) => {
                absent("PostgreSQL at 127.0.0.1:5432", "no answer in 5 s");
                return None;
            }
        };
        let name = format!("mcpr_cluster_{}_{}", std::process::id(), rand_suffix());
        admin
            .execute(format!("CREATE DATABASE {name}").as_str())
            .await
            .unwrap();
        let mut c = sqlx::PgConnection::connect(&Self::url_of(&name))
            .await
            .unwrap();
        c.execute("CREATE TABLE t (id int primary key, v text)")
            .await
            .unwrap();
        Some(Self { name })
    }

    fn url_of(name: &str) -> String {
        format!("postgres://postgres@127.0.0.1:5432/{name}")
    }

    async fn exec(&self, sql: &str) {
        use sqlx::{Connection as _, Executor as _};
        let mut c = sqlx::PgConnection::connect(&Self::url_of(&self.name))
            .await
            .unwrap();
        c.execute(sql).await.unwrap();
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        let name = self.name.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                use sqlx::{Connection as _, Executor as _};
                if let Ok(mut c) = sqlx::PgConnection::connect(PG_ADMIN).await {
                    let _ = c
                        .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
                        .await;
                }
            });
        })
        .join();
    }
}

fn rand_suffix() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
}

fn sqlite_exec(path: &Path, sql: &str) {
    let c = rusqlite::Connection::open(path).unwrap();
    c.execute_batch(sql).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_watch_each_source_once_and_survive_failures() {
    let Some(mut nats) = NatsServer::find() else {
        return;
    };
    install_crypto();
    nats.start();
    let pg = Pg::create().await;

    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("shared");
    std::fs::create_dir(&files).unwrap();
    for i in 0..5 {
        std::fs::write(files.join(format!("f{i}.txt")), format!("v0 {i}")).unwrap();
    }
    // A skill in the shared mount: its file's changes travel like the mount file's.
    std::fs::create_dir_all(files.join("skills/s1")).unwrap();
    std::fs::write(
        files.join("skills/s1/SKILL.md"),
        "---\nname: s1\ndescription: A shared skill\n---\nRead notes.md.\n",
    )
    .unwrap();
    std::fs::write(files.join("skills/s1/notes.md"), "v0\n").unwrap();
    let files = files.canonicalize().unwrap();
    let db = dir.path().join("app.db");
    sqlite_exec(
        &db,
        "CREATE TABLE t (id integer primary key, v text); INSERT INTO t VALUES (1, 'a');",
    );
    let cluster = format!("t{}_{}", std::process::id(), rand_suffix());
    let secret = "pw-n0t-for-logs";
    let mut config = format!(
        "[server]\npage_size = 2\n[cluster]\nnats_url = \"nats://u:{secret}@127.0.0.1:{}\"\nname = \"{cluster}\"\nlease_ttl_ms = {TTL_MS}\nsecret = \"{CLUSTER_SECRET}\"\n\
         [[mount]]\nkind = \"files\"\nroot = \"{}\"\nshared = true\ndeny = [\"*.secret\"]\nskills = \"skills\"\n\
         [[mount]]\nkind = \"sqlite\"\nname = \"lite\"\nurl = \"sqlite://{}\"\npoll_interval_ms = 100\n",
        nats.port(),
        files.display(),
        db.display()
    );
    if let Some(pg) = &pg {
        config.push_str(&format!(
            "[[mount]]\nkind = \"postgres\"\nname = \"pg\"\nurl = \"{}\"\npoll_interval_ms = 100\n",
            Pg::url_of(&pg.name)
        ));
    }
    let cfg_path = dir.path().join("cluster.toml");
    std::fs::write(&cfg_path, &config).unwrap();

    // stdio with [cluster] is a clear configuration error.
    let out = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&cfg_path)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("`[cluster]`") && err.contains("--http"),
        "{err}"
    );

    let mut replicas: Vec<Replica> = (0..3)
        .map(|i| Replica::start(&cfg_path, dir.path().join(format!("r{i}.log"))))
        .collect();
    // The mount's name is its first URI prefix, as /metrics shows it.
    let (names, _) = replicas[0].cluster_metrics().await;
    let mount_of = |prefix: &str| {
        names
            .iter()
            .map(|(m, _)| m.clone())
            .find(|m| m.starts_with(prefix))
            .unwrap_or_else(|| panic!("no mount {prefix} in {names:?}"))
    };
    let fm = mount_of(&file_uri(&files));
    let lm = mount_of("db://lite");
    let pm = pg.as_ref().map(|_| mount_of("db://pg"));
    for r in &replicas {
        wait_for("every replica ready", Duration::from_secs(10), async || {
            r.get("/readyz").await.0 == 200 && r.cluster_metrics().await.1 == 1
        })
        .await;
    }
    let refs: Vec<&Replica> = replicas.iter().collect();
    let fw = watcher_of(&refs, &fm, Duration::from_secs(10)).await;
    watcher_of(&refs, &lm, Duration::from_secs(10)).await;
    if let Some(pm) = &pm {
        watcher_of(&refs, pm, Duration::from_secs(10)).await;
    }
    // Clients on the two replicas that do not watch the files mount, so killing its watcher
    // leaves them in place.
    let (a, b) = match fw {
        0 => (1, 2),
        1 => (0, 2),
        _ => (0, 1),
    };
    let http = reqwest::Client::new();
    let f0 = file_uri(&files.join("f0.txt"));
    // Changed only while the files mount has no watcher (below).
    let f1 = file_uri(&files.join("f1.txt"));
    let lite = "db://lite/tables/t".to_owned();
    let pgt = "db://pg/tables/t".to_owned();
    let skill = "skill://s1/notes.md".to_owned();
    let mut uris = vec![f0.as_str(), f1.as_str(), lite.as_str(), skill.as_str()];
    if pg.is_some() {
        uris.push(pgt.as_str());
    }
    let on_a = replicas[a].listen(&http, &uris).await;
    let on_b = replicas[b].listen(&http, &uris).await;
    // A denied file: the watcher's provider refuses the watch, as it would locally.
    std::fs::write(files.join("x.secret"), "s").unwrap();
    let missing = file_uri(&files.join("x.secret"));
    // A legacy session roaming over all three replicas: created on the watcher (killed
    // below: the session outlives the replica that created it), subscribed through b, its
    // stream on a.
    let legacy = legacy_session(
        &http,
        [&replicas[fw], &replicas[b], &replicas[a]],
        &uris,
        &[&missing],
    )
    .await;
    let streams = [&on_a, &on_b, &legacy];
    // The watches start on the watcher before the subscriptions are answered; a breath for
    // the GET stream to be attached.
    tokio::time::sleep(Duration::from_millis(300)).await;

    // A write seen by the watcher reaches every stream on the other replicas once.
    std::fs::write(files.join("f0.txt"), "v1").unwrap();
    expect_updates(&streams, &f0, 1, Duration::from_secs(5)).await;
    // A skill file's change, named by its skill:// URI, once per stream too.
    std::fs::write(files.join("skills/s1/notes.md"), "v1\n").unwrap();
    expect_updates(&streams, &skill, 1, Duration::from_secs(5)).await;
    sqlite_exec(&db, "INSERT INTO t VALUES (2, 'b');");
    expect_updates(&streams, &lite, 1, Duration::from_secs(5)).await;
    if let Some(pg) = &pg {
        pg.exec("INSERT INTO t VALUES (1, 'a')").await;
        expect_updates(&streams, &pgt, 1, Duration::from_secs(5)).await;
    }
    // No duplicate arrives late.
    tokio::time::sleep(Duration::from_millis(700)).await;
    expect_updates(&streams, &f0, 1, Duration::ZERO).await;
    expect_updates(&streams, &skill, 1, Duration::ZERO).await;
    expect_updates(&streams, &lite, 1, Duration::ZERO).await;
    for (i, r) in replicas.iter().enumerate() {
        let (w, c) = r.cluster_metrics().await;
        assert_eq!(c, 1, "replica {i}");
        assert_eq!(
            w.iter().find(|(m, _)| *m == fm).unwrap().1,
            u8::from(i == fw),
            "replica {i}: {w:?}"
        );
    }

    // Cursors minted by one replica continue on another.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    for page in 0.. {
        let r = &replicas[[a, b][page % 2]];
        let mut params = json!({});
        if let Some(c) = &cursor {
            params["cursor"] = json!(c);
        }
        let body = r
            .modern(&http, "resources/list", params)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let msg = messages(&body).pop().unwrap_or_else(|| panic!("{body}"));
        for res in msg["result"]["resources"]
            .as_array()
            .unwrap_or_else(|| panic!("{body}"))
        {
            seen.push(res["uri"].as_str().unwrap().to_owned());
        }
        match msg["result"]["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
        assert!(page < 50, "endless listing");
    }
    for i in 0..5 {
        assert!(
            seen.contains(&file_uri(&files.join(format!("f{i}.txt")))),
            "{seen:?}"
        );
    }

    // Killing the files mount's watcher moves its lease within the TTL and a poll. f1 is
    // written while nobody watches.
    let killed = Instant::now();
    replicas[fw].kill();
    std::fs::write(files.join("f1.txt"), "v1").unwrap();
    let alive: Vec<&Replica> = [a, b].iter().map(|i| &replicas[*i]).collect();
    let nw = watcher_of(&alive, &fm, Duration::from_secs(6)).await;
    let took = killed.elapsed();
    assert!(
        took < Duration::from_millis(TTL_MS * 2 + 500),
        "the lease moved after {took:?}"
    );
    // The new watcher starts its watches from the interests replayed on its sync, and says
    // that each may have changed (nobody watched between the old watcher's death and the new
    // watch), with the file's change token: f1, changed meanwhile, is heard once; f0, whose
    // state every replica announced already, is not heard again.
    expect_updates(&streams, &f1, 1, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    expect_updates(&streams, &f1, 1, Duration::ZERO).await;
    expect_updates(&streams, &f0, 1, Duration::ZERO).await;
    std::fs::write(files.join("f0.txt"), "v2").unwrap();
    expect_updates(&streams, &f0, 2, Duration::from_secs(5)).await;
    eprintln!(
        "lease of the files mount moved to replica {} in {took:?}",
        [a, b][nw]
    );

    // NATS restarted: subscriptions keep working (at most a duplicate).
    nats.stop();
    tokio::time::sleep(Duration::from_millis(500)).await;
    nats.start();
    for r in &alive {
        let r = *r;
        wait_for("reconnected", Duration::from_secs(10), async || {
            r.cluster_metrics().await.1 == 1
        })
        .await;
    }
    watcher_of(&alive, &fm, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let files_before = streams.map(|s| s.updates(&f0));
    std::fs::write(files.join("f0.txt"), "v3").unwrap();
    let lite_before = streams.map(|s| s.updates(&lite));
    sqlite_exec(&db, "INSERT INTO t VALUES (3, 'c');");
    expect_once_or_twice(&streams, &f0, &files_before).await;
    expect_once_or_twice(&streams, &lite, &lite_before).await;

    // The password of nats_url is nowhere: logs, metrics, /readyz.
    for r in &alive {
        let (_, m) = r.get("/metrics").await;
        let (_, ready) = r.get("/readyz").await;
        assert!(!m.contains(secret) && !ready.contains(secret));
        assert!(!m.contains(CLUSTER_SECRET) && !ready.contains(CLUSTER_SECRET));
        // Nothing was forged here: every kind is listed, at 0.
        assert!(
            m.contains("mcp_cluster_rejected_total{kind=\"event\"} 0"),
            "{m}"
        );
    }
    drop(alive);
    for r in &mut replicas {
        r.kill();
        let log = std::fs::read_to_string(&r.log).unwrap();
        assert!(
            !log.contains(secret) && !log.contains(CLUSTER_SECRET),
            "{log}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_without_nats_serves_reads_and_joins_later() {
    let Some(mut nats) = NatsServer::find() else {
        return;
    };
    install_crypto();
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("d");
    std::fs::create_dir(&files).unwrap();
    std::fs::write(files.join("a.txt"), "hello").unwrap();
    let files = files.canonicalize().unwrap();
    let secret = "hunter2-cluster";
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        format!(
            "[cluster]\nnats_url = \"nats://admin:{secret}@127.0.0.1:{}\"\nname = \"late{}\"\nlease_ttl_ms = {TTL_MS}\nsecret = \"{CLUSTER_SECRET}\"\n[[mount]]\nkind = \"files\"\nroot = \"{}\"\nshared = true\n",
            nats.port(),
            std::process::id(),
            files.display()
        ),
    )
    .unwrap();
    let mut r = Replica::start(&cfg, dir.path().join("r.log"));
    let (status, body) = r.get("/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains(&format!(
            "cluster: NATS unreachable at nats://***@127.0.0.1:{}",
            nats.port()
        )),
        "{body}"
    );
    assert!(!body.contains(secret));
    let (w, c) = r.cluster_metrics().await;
    assert_eq!(c, 0);
    assert_eq!(w.iter().map(|(_, v)| *v).sum::<u8>(), 0, "{w:?}");
    // Reads work meanwhile.
    let http = reqwest::Client::new();
    let uri = file_uri(&files.join("a.txt"));
    let body = r
        .modern(&http, "resources/read", json!({"uri": uri}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(body.contains("hello"), "{body}");

    nats.start();
    let rr = &r;
    wait_for(
        "ready once NATS is up",
        Duration::from_secs(10),
        async || rr.get("/readyz").await.0 == 200,
    )
    .await;
    let mount = w[0].0.clone();
    assert!(mount.starts_with(&file_uri(&files)), "{mount}");
    let _ = watcher_of(&[&r], &mount, Duration::from_secs(5)).await;
    let (_, m) = r.get("/metrics").await;
    assert!(
        m.contains("mcp_cluster_connected 1") && !m.contains(secret),
        "{m}"
    );
    // Subscriptions now go through the cluster.
    let heard = r.listen(&http, &[&uri]).await;
    std::fs::write(files.join("a.txt"), "changed").unwrap();
    expect_updates(&[&heard], &uri, 1, Duration::from_secs(5)).await;
    r.kill();
    let log = std::fs::read_to_string(&r.log).unwrap();
    assert!(
        !log.contains(secret) && !log.contains(CLUSTER_SECRET),
        "{log}"
    );
}

/// A lease move says "may have changed" only of what changed, for mounts whose tokens come
/// from their polls: three replicas with a SQLite mount (two tables) and, with moto, an S3
/// mount (two objects), a listen stream on each replica. One change of each resource is
/// heard once everywhere (each carrying its token); then the watcher of each mount is
/// killed and one resource of it changed while nobody watches. On the streams left, the
/// changed one is heard once more, the unchanged one never again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_move_announces_only_what_changed_of_sql_and_s3() {
    let Some(mut nats) = NatsServer::find() else {
        return;
    };
    install_crypto();
    nats.start();
    let moto = mcpr_testkit::moto::moto();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    sqlite_exec(
        &db,
        "CREATE TABLE t (id integer primary key, v text); CREATE TABLE u (id integer primary key, v text);",
    );
    let bucket = format!("mcpr-tokens-{}-{}", std::process::id(), rand_suffix());
    let mut config = format!(
        "[cluster]\nnats_url = \"nats://127.0.0.1:{}\"\nname = \"tok{}_{}\"\nlease_ttl_ms = {TTL_MS}\nsecret = \"{CLUSTER_SECRET}\"\n\
         [[mount]]\nkind = \"sqlite\"\nname = \"lite\"\nurl = \"sqlite://{}\"\npoll_interval_ms = 100\n",
        nats.port(),
        std::process::id(),
        rand_suffix(),
        db.display()
    );
    // Each mount: its listed URIs (the first one changed during the move) and how to change
    // one of them.
    let (t, u) = ("db://lite/tables/t", "db://lite/tables/u");
    let s3 = moto.map(|m| {
        m.create_bucket(&bucket);
        m.put(&bucket, "a.txt", b"a0");
        m.put(&bucket, "b.txt", b"b0");
        config.push_str(&format!(
            "[[mount]]\nkind = \"s3\"\nbucket = \"{bucket}\"\nregion = \"us-east-1\"\nendpoint = \"{}\"\nallow_http = true\naccess_key_id = \"test\"\nsecret_access_key = \"test\"\npoll_interval_ms = 200\n",
            m.endpoint()
        ));
        (
            m,
            format!("s3://{bucket}/a.txt"),
            format!("s3://{bucket}/b.txt"),
        )
    });
    let cfg_path = dir.path().join("tokens.toml");
    std::fs::write(&cfg_path, &config).unwrap();
    let mut replicas: Vec<Replica> = (0..3)
        .map(|i| Replica::start(&cfg_path, dir.path().join(format!("r{i}.log"))))
        .collect();
    for r in &replicas {
        wait_for("every replica ready", Duration::from_secs(10), async || {
            r.get("/readyz").await.0 == 200 && r.cluster_metrics().await.1 == 1
        })
        .await;
    }
    let (names, _) = replicas[0].cluster_metrics().await;
    let mount_of = |prefix: &str| {
        names
            .iter()
            .map(|(m, _)| m.clone())
            .find(|m| m.starts_with(prefix))
            .unwrap_or_else(|| panic!("no mount {prefix} in {names:?}"))
    };
    let lm = mount_of("db://lite");
    let sm = s3.as_ref().map(|_| mount_of(&format!("s3://{bucket}")));
    let http = reqwest::Client::new();
    let mut uris = vec![t, u];
    if let Some((_, a, b)) = &s3 {
        uris.extend([a.as_str(), b.as_str()]);
    }
    let streams: Vec<Heard> =
        futures::future::join_all(replicas.iter().map(|r| r.listen(&http, &uris))).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    // One change of each resource, heard once on every stream: each replica now holds the
    // token of the state it announced.
    sqlite_exec(
        &db,
        "INSERT INTO t VALUES (1, 'a'); INSERT INTO u VALUES (1, 'a');",
    );
    if let Some((m, _, _)) = &s3 {
        m.put(&bucket, "a.txt", b"a1");
        m.put(&bucket, "b.txt", b"b1");
    }
    let all: Vec<&Heard> = streams.iter().collect();
    for uri in &uris {
        expect_updates(&all, uri, 1, Duration::from_secs(5)).await;
    }

    // Each mount's lease moved in turn, one of its resources changed while nobody watches.
    // (When one replica watched both, the first kill moves both: the S3 mount's first move
    // then comes with no change at all.)
    let mut want: std::collections::HashMap<&str, usize> = uris.iter().map(|u| (*u, 1)).collect();
    let mut alive = [true; 3];
    let mut moves: Vec<(&str, &str)> = vec![(lm.as_str(), t)];
    if let (Some((_, a, _)), Some(sm)) = (&s3, &sm) {
        moves.push((sm.as_str(), a.as_str()));
    }
    for (mount, moved) in moves {
        let up: Vec<usize> = (0..3).filter(|i| alive[*i]).collect();
        let refs: Vec<&Replica> = up.iter().map(|i| &replicas[*i]).collect();
        let w = up[watcher_of(&refs, mount, Duration::from_secs(10)).await];
        replicas[w].kill();
        alive[w] = false;
        let killed = Instant::now();
        match &s3 {
            Some((m, a, _)) if moved == a.as_str() => m.put(&bucket, "a.txt", b"a2"),
            _ => sqlite_exec(&db, "INSERT INTO t VALUES (2, 'b');"),
        }
        *want.get_mut(moved).unwrap() += 1;
        let up: Vec<usize> = (0..3).filter(|i| alive[*i]).collect();
        let refs: Vec<&Replica> = up.iter().map(|i| &replicas[*i]).collect();
        watcher_of(&refs, mount, Duration::from_secs(6)).await;
        let left: Vec<&Heard> = up.iter().map(|i| &streams[*i]).collect();
        expect_updates(&left, moved, want[moved], Duration::from_secs(5)).await;
        eprintln!(
            "{mount}: the lease moved; the change made meanwhile reached {} stream(s) {:?} after the kill",
            left.len(),
            killed.elapsed()
        );
        // Nothing late: what did not change is never said to have, what changed once.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        for uri in &uris {
            expect_updates(&left, uri, want[uri], Duration::ZERO).await;
        }
    }
    for r in &mut replicas {
        r.kill();
    }
}
