//! Fault injection against the live databases (issue #19 section 4): the server's side of a
//! connection killed in the middle of a query, and the database going away and coming back.
//! Each test asserts a clear answer while the fault lasts, recovery without help, and that a
//! subscription made before the fault still reports changes after it.
//!
//! Only this test's own connections are killed (those to the database it created), so other
//! tests on the shared servers are not disturbed. "Restarted" is done twice: by a TCP proxy
//! in front of the shared PostgreSQL that drops every connection and refuses new ones for a
//! while, and for real, on a PostgreSQL of the test's own (initdb in a temporary directory, a
//! random port) that is stopped and started again; the shared server is never restarted.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::db::{MY_ADMIN, PG_ADMIN, TestDb, my_setup, pg_setup, unique};
use common::{next_update, read};
use mcpr_core::{ChangeBus, ChangeSink, ErrorKind, LocalBus, Provider, ResourceUri};
use mcpr_provider_sql::{NamedQuery, SqlConfig, SqlProvider};
use serde_json::json;
use sqlx::Connection as _;

fn slow_query(sql: &str) -> Vec<NamedQuery> {
    vec![NamedQuery {
        uri: "db://slow/sleep".into(),
        sql: sql.into(),
        params: BTreeMap::new(),
        description: None,
    }]
}

/// Waits until `count` (a query on the admin connection) reports at least one row.
async fn wait_for(what: &str, mut probe: impl AsyncFnMut() -> i64) {
    let start = Instant::now();
    while probe().await == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{what}: not within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A subscription made before the fault: the first change after it must be reported.
async fn assert_watch_survives(
    db: &TestDb,
    rx: &mut tokio::sync::broadcast::Receiver<mcpr_core::ChangeEvent>,
    uri: &str,
    update: &str,
) {
    while rx.try_recv().is_ok() {}
    db.exec(update).await;
    assert_eq!(
        next_update(rx, Duration::from_secs(5)).await.as_deref(),
        Some(uri),
        "the subscription made before the fault was lost"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_backend_terminated_mid_query() {
    let Some(db) = TestDb::pg(&pg_setup()).await else {
        return;
    };
    let mut c = SqlConfig::new("pg", db.url());
    c.poll_interval = Duration::from_millis(100);
    c.statement_timeout = Duration::from_secs(30);
    c.queries = slow_query("SELECT pg_sleep(20) AS s");
    let p = Arc::new(SqlProvider::new(c).await.unwrap());
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    let watched = "db://pg/tables/users";
    let _g = p
        .watch(
            &ResourceUri::parse(watched).unwrap(),
            ChangeSink::new(bus.clone(), "m0"),
        )
        .await
        .unwrap();

    let slow = {
        let p = p.clone();
        tokio::spawn(async move { read(&p, "db://slow/sleep").await })
    };
    let mut admin = sqlx::PgConnection::connect(PG_ADMIN).await.unwrap();
    wait_for("the slow query running", async || {
        sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND state = 'active' AND query LIKE '%pg_sleep(20)%'",
        )
        .bind(&db.name)
        .fetch_one(&mut admin)
        .await
        .unwrap()
    })
    .await;
    // Every connection of this test's database: the slow read's and the watcher's.
    let killed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()) t",
    )
    .bind(&db.name)
    .fetch_one(&mut admin)
    .await
    .unwrap();
    assert!(killed >= 1, "nothing was terminated");
    let started = Instant::now();
    let e = tokio::time::timeout(Duration::from_secs(5), slow)
        .await
        .expect("the interrupted read must answer, not hang")
        .unwrap()
        .expect_err("a query whose connection was terminated cannot have a result");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    assert!(
        !e.message.contains("pg_sleep"),
        "no SQL text in errors: {e}"
    );

    // The pool replaces the dead connections by itself: the next read works.
    assert_eq!(read(&p, watched).await.unwrap()["row_count"], json!(3));
    assert_watch_survives(
        &db,
        &mut rx,
        watched,
        "UPDATE users SET name = 'anna' WHERE id = 1",
    )
    .await;
}

/// A TCP proxy that can drop every connection and refuse new ones ("down"), then accept
/// again ("up"), on the same port.
struct Flaky {
    port: u16,
    target: u16,
    accept: Option<tokio::task::JoinHandle<()>>,
    conns: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Flaky {
    async fn start(target: u16) -> Self {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let mut f = Self {
            port,
            target,
            accept: None,
            conns: Arc::default(),
        };
        f.serve(l);
        f
    }

    fn serve(&mut self, l: tokio::net::TcpListener) {
        let (conns, target) = (self.conns.clone(), self.target);
        self.accept = Some(tokio::spawn(async move {
            while let Ok((mut inbound, _)) = l.accept().await {
                let t = tokio::spawn(async move {
                    if let Ok(mut out) = tokio::net::TcpStream::connect(("127.0.0.1", target)).await
                    {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                    }
                });
                conns.lock().unwrap().push(t);
            }
        }));
    }

    /// Closes the listening socket and every connection through it.
    async fn down(&mut self) {
        if let Some(a) = self.accept.take() {
            a.abort();
            let _ = a.await;
        }
        for c in self.conns.lock().unwrap().drain(..) {
            c.abort();
        }
    }

    async fn up(&mut self) {
        let l = tokio::net::TcpListener::bind(("127.0.0.1", self.port))
            .await
            .unwrap();
        self.serve(l);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_restarted_under_a_subscription() {
    let Some(db) = TestDb::pg(&pg_setup()).await else {
        return;
    };
    let mut proxy = Flaky::start(5432).await;
    let url = format!("postgres://postgres@127.0.0.1:{}/{}", proxy.port, db.name);
    let mut c = SqlConfig::new("pg", url);
    c.poll_interval = Duration::from_millis(100);
    let p = SqlProvider::new(c).await.unwrap();
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    let watched = "db://pg/tables/users";
    let _g = p
        .watch(
            &ResourceUri::parse(watched).unwrap(),
            ChangeSink::new(bus.clone(), "m0"),
        )
        .await
        .unwrap();
    assert_eq!(read(&p, watched).await.unwrap()["row_count"], json!(3));

    proxy.down().await;
    let started = Instant::now();
    let e = read(&p, watched).await.expect_err("no database, no result");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "a read while the database is down took {:?}",
        started.elapsed()
    );
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    // A change while the database is away: reported once it is back, as the next poll
    // compares against the last result it saw.
    db.exec("UPDATE users SET name = 'anna' WHERE id = 1").await;
    while rx.try_recv().is_ok() {}
    tokio::time::sleep(Duration::from_millis(500)).await;

    proxy.up().await;
    assert_eq!(
        next_update(&mut rx, Duration::from_secs(5))
            .await
            .as_deref(),
        Some(watched),
        "the change made while the database was down was never reported"
    );
    assert_eq!(
        read(&p, watched).await.unwrap()["rows"][0][1],
        json!("anna")
    );
    assert!(p.ready().await);
    assert_watch_survives(
        &db,
        &mut rx,
        watched,
        "UPDATE users SET name = 'ann' WHERE id = 1",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_connections_killed_mid_query() {
    let Some(db) = TestDb::my(&my_setup()).await else {
        return;
    };
    let mut c = SqlConfig::new("my", db.url());
    c.poll_interval = Duration::from_millis(100);
    c.statement_timeout = Duration::from_secs(30);
    c.queries = slow_query("SELECT SLEEP(20) AS s, id FROM users");
    let p = Arc::new(SqlProvider::new(c).await.unwrap());
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    let watched = "db://my/tables/users";
    let _g = p
        .watch(
            &ResourceUri::parse(watched).unwrap(),
            ChangeSink::new(bus.clone(), "m0"),
        )
        .await
        .unwrap();
    let slow = {
        let p = p.clone();
        tokio::spawn(async move { read(&p, "db://slow/sleep").await })
    };
    let mut admin = sqlx::MySqlConnection::connect(MY_ADMIN).await.unwrap();
    wait_for("the slow query running", async || {
        sqlx::query_scalar(
            "SELECT count(*) FROM information_schema.PROCESSLIST WHERE DB = ? AND INFO LIKE '%SLEEP(20)%'",
        )
        .bind(&db.name)
        .fetch_one(&mut admin)
        .await
        .unwrap()
    })
    .await;
    let ids: Vec<i64> = sqlx::query_scalar(
        "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = ? AND ID <> CONNECTION_ID()",
    )
    .bind(&db.name)
    .fetch_all(&mut admin)
    .await
    .unwrap();
    assert!(!ids.is_empty());
    for id in &ids {
        // A connection may end by itself between the listing and its KILL.
        let _ = sqlx::query(&format!("KILL {id}")).execute(&mut admin).await;
    }
    let e = tokio::time::timeout(Duration::from_secs(5), slow)
        .await
        .expect("the interrupted read must answer, not hang")
        .unwrap()
        .expect_err("a query whose connection was killed cannot have a result");
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    assert!(!e.message.contains("SLEEP"), "no SQL text in errors: {e}");

    assert_eq!(read(&p, watched).await.unwrap()["row_count"], json!(3));
    assert_watch_survives(
        &db,
        &mut rx,
        watched,
        "UPDATE users SET name = 'anna' WHERE id = 1",
    )
    .await;
}

/// A PostgreSQL server of the test's own: a cluster made by `initdb` in a temporary
/// directory, listening on a random loopback port, so it can be stopped and started without
/// touching the shared server. Without durability (`fsync=off`): the data is thrown away.
/// Stopped when dropped, even when the test fails.
struct OwnPg {
    dir: tempfile::TempDir,
    bin: std::path::PathBuf,
    port: u16,
}

impl OwnPg {
    /// `None` (with a note, or a failure under CI=true) when PostgreSQL's server programs
    /// are not installed.
    fn start() -> Option<Self> {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join("bin"))
            .filter(|b| b.join("initdb").exists() && b.join("pg_ctl").exists())
            .max();
        let Some(bin) = bin else {
            return common::db::absent(
                "PostgreSQL's server programs (/usr/lib/postgresql/*/bin/initdb)",
                "not installed",
            );
        };
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let pg = Self { dir, bin, port };
        // initdb and the server refuse to run as root; the system's postgres user does.
        if pg.as_root() {
            let ok = std::process::Command::new("chown")
                .args(["postgres:"])
                .arg(pg.dir.path())
                .status()
                .unwrap()
                .success();
            assert!(ok, "chown of the cluster's directory to postgres failed");
        }
        let data = pg.dir.path().join("data");
        pg.run(
            "initdb",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-U".as_ref(),
                "postgres".as_ref(),
                "-A".as_ref(),
                "trust".as_ref(),
                "--no-sync".as_ref(),
            ],
        );
        pg.up();
        Some(pg)
    }

    fn as_root(&self) -> bool {
        use std::os::unix::fs::MetadataExt as _;
        std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
    }

    fn run(&self, program: &str, args: &[&std::ffi::OsStr]) {
        let exe = self.bin.join(program);
        let mut cmd = if self.as_root() {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            std::process::Command::new(&exe)
        };
        let out = cmd.args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{program} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn pg_ctl(&self, what: &[&str]) {
        let data = self.dir.path().join("data");
        let mut args: Vec<&std::ffi::OsStr> = vec![
            "-D".as_ref(),
            data.as_os_str(),
            "-w".as_ref(),
            "-t".as_ref(),
            "20".as_ref(),
        ];
        args.extend(what.iter().map(|a| std::ffi::OsStr::new(*a)));
        self.run("pg_ctl", &args);
    }

    fn up(&self) {
        let log = self.dir.path().join("log");
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off",
            self.port,
            self.dir.path().display()
        );
        self.pg_ctl(&["-l", log.to_str().unwrap(), "-o", &opts, "start"]);
    }

    /// A fast shutdown: every session is ended, then the server stops.
    fn down(&self) {
        self.pg_ctl(&["-m", "fast", "stop"]);
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    async fn exec(&self, sql: &str) {
        let mut c = sqlx::PgConnection::connect(&self.url()).await.unwrap();
        sqlx::raw_sql(sql).execute(&mut c).await.unwrap();
    }
}

impl Drop for OwnPg {
    fn drop(&mut self) {
        // Immediate: nothing to keep, and a failed test should not wait on a shutdown.
        let data = self.dir.path().join("data");
        let mut cmd = if self.as_root() {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"])
                .arg(self.bin.join("pg_ctl"));
            c
        } else {
            std::process::Command::new(self.bin.join("pg_ctl"))
        };
        let _ = cmd
            .arg("-D")
            .arg(&data)
            .args(["-m", "immediate", "-w", "stop"])
            .output();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_pg_stopped_and_started_under_subscriptions() {
    let Some(pg) = OwnPg::start() else {
        return;
    };
    pg.exec(&common::db::pg_setup()).await;
    // Two mounts on it: one polls, one is woken by LISTEN/NOTIFY (whose listening
    // connection the restart ends too).
    let mut c = SqlConfig::new("pg", pg.url());
    c.poll_interval = Duration::from_millis(100);
    let polled = SqlProvider::new(c).await.unwrap();
    let mut c = SqlConfig::new("pgl", pg.url());
    c.notify_channel = Some("mcpr_changes".into());
    let listening = SqlProvider::new(c).await.unwrap();
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    let (u_polled, u_listening) = ("db://pg/tables/users", "db://pgl/tables/users");
    let _g1 = polled
        .watch(
            &ResourceUri::parse(u_polled).unwrap(),
            ChangeSink::new(bus.clone(), "m0"),
        )
        .await
        .unwrap();
    let _g2 = listening
        .watch(
            &ResourceUri::parse(u_listening).unwrap(),
            ChangeSink::new(bus.clone(), "m1"),
        )
        .await
        .unwrap();
    assert_eq!(
        read(&polled, u_polled).await.unwrap()["row_count"],
        json!(3)
    );
    assert_eq!(
        read(&listening, u_listening).await.unwrap()["row_count"],
        json!(3)
    );

    pg.down();
    for (p, uri) in [(&polled, u_polled), (&listening, u_listening)] {
        let started = Instant::now();
        let e = tokio::time::timeout(Duration::from_secs(10), read(p, uri))
            .await
            .expect("a read while the server is stopped must answer, not hang")
            .expect_err("no server, no result");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "a read while the server was stopped took {:?}",
            started.elapsed()
        );
        assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
        assert!(
            !e.message.contains("postgres://"),
            "no connection URL in errors: {e}"
        );
    }
    assert!(!polled.ready().await, "a stopped server is not ready");

    pg.up();
    // Both recover by themselves: the pools reconnect on the next read.
    let start = Instant::now();
    for (p, uri) in [(&polled, u_polled), (&listening, u_listening)] {
        loop {
            match read(p, uri).await {
                Ok(v) => {
                    assert_eq!(v["row_count"], json!(3));
                    break;
                }
                Err(e) => assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "{uri} not readable 10 s after the restart: {e}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert!(polled.ready().await);

    // The subscriptions made before the restart report a change made after it (the
    // listening mount's as soon as its listener is back, which wakes it).
    tokio::time::sleep(Duration::from_millis(300)).await;
    while rx.try_recv().is_ok() {}
    pg.exec("UPDATE users SET name = 'anna' WHERE id = 1; NOTIFY mcpr_changes")
        .await;
    let mut heard = std::collections::BTreeSet::new();
    while heard.len() < 2 {
        match next_update(&mut rx, Duration::from_secs(5)).await {
            Some(u) => {
                heard.insert(u);
            }
            None => panic!("after the restart only {heard:?} reported the change"),
        }
    }
    assert!(
        heard.contains(u_polled) && heard.contains(u_listening),
        "{heard:?}"
    );
}

/// Waits until the mount is ready, or fails naming its last reason.
async fn wait_ready(p: &SqlProvider, within: Duration) {
    let start = Instant::now();
    loop {
        match p.readiness().await {
            Ok(()) => return,
            Err(e) => assert!(start.elapsed() < within, "not ready within {within:?}: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A server that answers but refuses the mount's login (an unknown role, a wrong password:
/// credentials rotated under a running server) does not stop the start: the mount starts not
/// ready, its readiness and reads say why without the password, and it is ready again on its
/// own once the login works. PostgreSQL here trusts connections from 127.0.0.1, so a wrong
/// password would pass: its refusal is a role that does not exist yet. MariaDB checks
/// passwords: its refusal is a wrong one, then made right with `ALTER USER`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_login_starts_the_mount_not_ready_and_it_recovers_without_a_restart() {
    const SECRET: &str = "rotated-pw-7Qx";
    if let Some(mut db) = TestDb::pg(&pg_setup()).await {
        let role = unique("mcpr_late");
        db.role = Some(role.clone());
        let url = format!("postgres://{role}:{SECRET}@127.0.0.1:5432/{}", db.name);
        let p = SqlProvider::new(SqlConfig::new("late", url))
            .await
            .expect("a refused login does not fail the start");
        let e = p.readiness().await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
        assert!(
            e.message.contains("refused the connection")
                && e.message.contains(&role)
                && !e.message.contains(SECRET),
            "{e}"
        );
        let uri = ResourceUri::parse("db://late/tables/users").unwrap();
        let e = p
            .read(&uri, &mcpr_core::ReadLimits { max_bytes: 1 << 20 })
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
        db.exec(&format!(
            "CREATE ROLE {role} LOGIN; GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role};"
        ))
        .await;
        wait_ready(&p, Duration::from_secs(15)).await;
        let rows = read(&p, "db://late/tables/users").await.unwrap();
        assert!(rows.to_string().contains("ann"), "{rows}");
    }
    if let Some(mut db) = TestDb::my(&my_setup()).await {
        let user = unique("mcpr_rot");
        db.exec(&format!(
            "CREATE USER '{user}'@'%' IDENTIFIED BY 'the-old-one'; GRANT SELECT ON {}.* TO '{user}'@'%';",
            db.name
        ))
        .await;
        db.role = Some(user.clone());
        let url = format!("mysql://{user}:{SECRET}@127.0.0.1:3306/{}", db.name);
        let p = SqlProvider::new(SqlConfig::new("rotated", url))
            .await
            .expect("a refused login does not fail the start");
        let e = p.readiness().await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
        assert!(
            e.message.contains("refused the connection")
                && e.message.contains("Access denied")
                && e.message.contains(&user)
                && !e.message.contains(SECRET),
            "{e}"
        );
        db.exec(&format!(
            "ALTER USER '{user}'@'%' IDENTIFIED BY '{SECRET}';"
        ))
        .await;
        wait_ready(&p, Duration::from_secs(15)).await;
        let rows = read(&p, "db://rotated/tables/users").await.unwrap();
        assert!(rows.to_string().contains("ann"), "{rows}");
    }
}
