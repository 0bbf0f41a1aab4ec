//! The PostgreSQL mount against the live server at 127.0.0.1:5432 (user `postgres`): the
//! behaviour suite, timeouts, a 10-million-row table, odd names, LISTEN/NOTIFY changes, and a
//! database that is down at start and comes back. Each test creates and drops a database of
//! its own; without the server it says SKIPPED and passes, except under `CI=true`.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use common::db::{PG_ADMIN, TestDb, WEIRD, WEIRD_COL, WEIRD_ENC, pg_setup};
use common::{next_update, proxy, queries, read, read_raw, rss_kib, sql_malformed_positions, text};
use mcpr_core::{
    ChangeBus, ChangeEvent, ChangeSink, CompletionRequest, ErrorKind, LocalBus, Provider,
    ResourceUri,
};
use mcpr_provider_sql::{NamedQuery, SqlConfig, SqlProvider};
use mcpr_testkit::{Fixture, run_suite};
use serde_json::{Value, json};
use sqlx::Connection as _;

struct PgFx {
    db: Arc<TestDb>,
}

fn pg_expected() -> Vec<(String, Vec<u8>)> {
    let obj = |schema: &str, name: &str, uri: &str, ty: &str, est: Value| {
        let mut m = json!({
            "name": name, "schema": schema, "type": ty,
            "schema_uri": format!("{uri}/schema"),
            "row_estimate": est,
            "row_estimate_source": if est.is_null() { Value::Null } else { json!("pg_class.reltuples") },
        });
        m["uri"] = json!(uri);
        m
    };
    let col = |name: &str, ty: &str, nullable: bool, pk: Value| {
        json!({"name": name, "type": ty, "nullable": nullable, "default": null,
               "primary_key": pk, "generated": false, "identity": null})
    };
    vec![
        (
            "db://pg/tables/users".into(),
            text(
                json!({"table": "users", "columns": ["id", "name", "status"],
                "rows": [[1, "ann", "active"], [2, "bob", "disabled"], [3, "cy", "active"]],
                "row_count": 3, "page_size": 100, "max_bytes": 4194304, "next": null}),
            ),
        ),
        (
            "db://pg".into(),
            text(
                json!({"database": "pg", "engine": "postgres", "next": null, "objects": [
                    obj("public", "active", "db://pg/tables/active", "view", Value::Null),
                    obj("public", "users", "db://pg/tables/users", "table", json!(3)),
                    obj("public", WEIRD, &format!("db://pg/tables/{WEIRD_ENC}"), "table", json!(1)),
                    obj("sales", "orders", "db://pg/schemas/sales/tables/orders", "table", json!(1)),
                ]}),
            ),
        ),
        (
            "db://pg/tables/active".into(),
            text(
                json!({"table": "active", "columns": ["id", "name"], "rows": [[1, "ann"], [3, "cy"]],
                "row_count": 2, "page_size": 100, "max_bytes": 4194304, "next": null}),
            ),
        ),
        (
            "db://pg/tables/active/schema".into(),
            text(json!({"name": "active", "schema": "public", "type": "view",
                "columns": [col("id", "integer", true, Value::Null), col("name", "text", true, Value::Null)]})),
        ),
        (
            "db://pg/tables/users/schema".into(),
            text(json!({"name": "users", "schema": "public", "type": "table",
                "columns": [col("id", "integer", false, json!(1)), col("name", "text", false, Value::Null), col("status", "text", true, Value::Null)],
                "primary_key": ["id"], "foreign_keys": [], "indexes": [
                    {"name": "users_pkey", "unique": true, "primary": true, "partial": false, "columns": ["id"],
                     "definition": "CREATE UNIQUE INDEX users_pkey ON public.users USING btree (id)"}]})),
        ),
        (
            format!("db://pg/tables/{WEIRD_ENC}"),
            text(
                json!({"table": WEIRD, "columns": ["k", WEIRD_COL], "rows": [["x", {"base64": "AP8="}]],
                "row_count": 1, "page_size": 100, "max_bytes": 4194304, "next": null}),
            ),
        ),
        (
            format!("db://pg/tables/{WEIRD_ENC}/schema"),
            text(json!({"name": WEIRD, "schema": "public", "type": "table",
                "columns": [col("k", "text", false, json!(1)), col(WEIRD_COL, "bytea", true, Value::Null)],
                "primary_key": ["k"], "foreign_keys": [], "indexes": [
                    {"name": format!("{WEIRD}_pkey"), "unique": true, "primary": true, "partial": false, "columns": ["k"],
                     "definition": "CREATE UNIQUE INDEX \"we\"\"ird näme_pkey\" ON public.\"we\"\"ird näme\" USING btree (k)"}]})),
        ),
        (
            "db://pg/schemas/sales/tables/orders".into(),
            text(
                json!({"table": "sales.orders", "columns": ["id", "user_id", "total", "at"],
                "rows": [[10, 1, 12.5, "2026-01-02T03:04:05+00:00"]],
                "row_count": 1, "page_size": 100, "max_bytes": 4194304, "next": null}),
            ),
        ),
        (
            "db://pg/schemas/sales/tables/orders/schema".into(),
            text(json!({"name": "orders", "schema": "sales", "type": "table",
                "columns": [col("id", "bigint", false, json!(1)), col("user_id", "integer", true, Value::Null),
                            col("total", "numeric(10,2)", true, Value::Null), col("at", "timestamp with time zone", true, Value::Null)],
                "primary_key": ["id"],
                "foreign_keys": [{"name": "orders_user_id_fkey", "schema": "public", "table": "users", "from": ["user_id"], "to": ["id"],
                                  "on_update": "NO ACTION", "on_delete": "NO ACTION"}],
                "indexes": [{"name": "orders_pkey", "unique": true, "primary": true, "partial": false, "columns": ["id"],
                             "definition": "CREATE UNIQUE INDEX orders_pkey ON sales.orders USING btree (id)"}]})),
        ),
        (
            "db://pgq/active/list".into(),
            text(
                json!({"query": "db://pgq/active/list", "columns": ["id", "name"],
                "rows": [[1, "ann"], [3, "cy"]], "row_count": 2, "max_rows": 1000}),
            ),
        ),
    ]
}

#[async_trait]
impl Fixture for PgFx {
    fn expected(&self) -> Vec<(String, Vec<u8>)> {
        pg_expected()
    }
    fn missing_uri(&self) -> String {
        "db://pg/tables/nope".into()
    }
    fn forbidden_uris(&self) -> Vec<String> {
        vec![
            "db://pg/tables/pg_class".into(),
            "db://pg/schemas/pg_catalog/tables/pg_class".into(),
            "db://pg/schemas/information_schema/tables/tables".into(),
            "db://pg/elsewhere".into(),
        ]
    }
    async fn modify(&self, _uri: &str) {
        self.db
            .exec("INSERT INTO users VALUES ((SELECT max(id) + 1 FROM users), 'new', 'active')")
            .await;
    }
    async fn add(&self) -> String {
        self.db
            .exec("CREATE TABLE added (id integer PRIMARY KEY)")
            .await;
        "db://pg/tables/added".into()
    }
    fn completion_case(&self) -> Option<(String, String, String, String)> {
        Some((
            "db://pg/tables/{table}{?cursor,format}".into(),
            "table".into(),
            "we".into(),
            WEIRD.into(),
        ))
    }
    fn malformed_positions(&self) -> Vec<Vec<u8>> {
        sql_malformed_positions()
    }
    fn unknown_positions(&self) -> Vec<(Vec<u8>, Option<String>)> {
        // Tables in (schema, name) order: public.active, public.users, public.we"ird,
        // sales.orders; then the named queries.
        vec![
            (
                b"\x01public\0b".to_vec(),
                Some("db://pg/tables/users".into()),
            ),
            (
                b"\x02public\0deleted".to_vec(),
                Some("db://pg/tables/users".into()),
            ),
            (b"\x01zzz\0x".to_vec(), Some("db://pgq/active/list".into())),
            (b"\x0399".to_vec(), None),
        ]
    }
    // No change tokens here: `SqlProvider` has them only for watched URIs (its watches'
    // fingerprints, pg_listen_notifies_only_when_the_result_changes).
}

fn pg_config(db: &TestDb) -> SqlConfig {
    let mut c = SqlConfig::new("pg", db.url());
    c.queries = queries("pgq");
    c.poll_interval = Duration::from_millis(100);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_behaviour_suite_reads_templates_and_completion() {
    let Some(db) = TestDb::pg(&pg_setup()).await else {
        return;
    };
    let db = Arc::new(db);
    let p = Arc::new(SqlProvider::new(pg_config(&db)).await.unwrap());
    run_suite(p.clone(), &PgFx { db: db.clone() }).await;
    let before = db.checksum().await;

    // Templated query: bound, typed, checked; injection attempts are values, not SQL.
    let v = read(&p, "db://pgq/disabled/list").await.unwrap();
    assert_eq!(v["rows"], json!([[2, "bob"]]));
    let e = read(&p, "db://pgq/active'%20OR%201=1--/list")
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidParams, "{e}");
    assert_eq!(
        read(&p, "db://pgq/by-id/2").await.unwrap()["rows"],
        json!([["bob"]])
    );
    let e = read(&p, "db://pgq/by-id/2%20or%201").await.unwrap_err();
    assert!(e.message.contains("not an integer"), "{e}");
    // Completion from the data of a declared parameter, and of table names.
    let c = p
        .complete(CompletionRequest {
            template: "db://pgq/{status}/list".into(),
            argument: "status".into(),
            value: "d".into(),
            context: Default::default(),
        })
        .await
        .unwrap();
    assert_eq!(c.values, ["disabled"]);
    let c = p
        .complete(CompletionRequest {
            template: "db://pg/schemas/{schema}/tables/{table}{?cursor,format}".into(),
            argument: "table".into(),
            value: "or".into(),
            context: BTreeMap::from([("schema".into(), "sales".into())]),
        })
        .await
        .unwrap();
    assert_eq!(c.values, ["orders"]);
    let c = p
        .complete(CompletionRequest {
            template: "db://pg/schemas/{schema}/tables/{table}{?cursor,format}".into(),
            argument: "schema".into(),
            value: "sa".into(),
            context: BTreeMap::new(),
        })
        .await
        .unwrap();
    assert_eq!(c.values, ["sales"]);
    // CSV on request, paging by cursor in the URI, the page size stated.
    let csv = read_raw(&p, &format!("db://pg/tables/{WEIRD_ENC}?format=csv"))
        .await
        .unwrap();
    assert_eq!(
        csv,
        format!("k,\"{}\"\r\nx,AP8=\r\n", WEIRD_COL.replace('"', "\"\""))
    );
    let mut small = pg_config(&db);
    small.name = "pgsmall".into();
    small.queries.clear();
    small.page_size = 2;
    let ps = SqlProvider::new(small).await.unwrap();
    let page1 = read(&ps, "db://pgsmall/tables/users").await.unwrap();
    assert_eq!(
        page1["rows"],
        json!([[1, "ann", "active"], [2, "bob", "disabled"]])
    );
    let next = page1["next"].as_str().unwrap().to_owned();
    let page2 = read(&ps, &next).await.unwrap();
    assert_eq!(page2["rows"][0][0], json!(3));
    // A view pages by position, ordered by every column (the suite added users 4 and 5).
    let v1 = read(&ps, "db://pgsmall/tables/active").await.unwrap();
    assert_eq!(v1["rows"], json!([[1, "ann"], [3, "cy"]]));
    let v2 = read(&ps, v1["next"].as_str().unwrap()).await.unwrap();
    assert_eq!(v2["rows"], json!([[4, "new"], [5, "new"]]));
    assert_eq!(v2["next"], Value::Null);
    let e = read(&ps, "db://pgsmall/tables/users?cursor=bm9wZQ")
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidParams, "{e}");
    assert_eq!(db.checksum().await, before, "reads must change nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_timeout_cancels_and_frees_the_connection() {
    let Some(db) = TestDb::pg(&pg_setup()).await else {
        return;
    };
    let mut c = SqlConfig::new("pg", db.url());
    c.max_connections = 1;
    c.statement_timeout = Duration::from_millis(500);
    c.queries = vec![NamedQuery {
        uri: "db://slow/sleep".into(),
        sql: "SELECT pg_sleep(100)".into(),
        params: BTreeMap::new(),
        description: None,
    }];
    let p = SqlProvider::new(c).await.unwrap();
    let started = Instant::now();
    let e = read(&p, "db://slow/sleep").await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
    assert!(e.message.contains("500 ms"), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    // The one connection serves the next read at once, and the server runs no sleep.
    let v = read(&p, "db://pg/tables/users").await.unwrap();
    assert_eq!(v["row_count"], json!(3));
    let mut admin = sqlx::PgConnection::connect(PG_ADMIN).await.unwrap();
    let running: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND query LIKE '%pg_sleep(100)%' AND state = 'active'",
    )
    .bind(&db.name)
    .fetch_one(&mut admin)
    .await
    .unwrap();
    assert_eq!(running, 0, "the timed-out statement must not keep running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_ten_million_rows_keep_to_the_limits() {
    let Some(db) = TestDb::pg(
        "CREATE TABLE big (id bigint PRIMARY KEY, v text);
         INSERT INTO big SELECT g, md5(g::text) FROM generate_series(1, 10000000) g;
         ANALYZE big;",
    )
    .await
    else {
        return;
    };
    let rss_before = rss_kib();
    let mut c = SqlConfig::new("pg", db.url());
    c.page_size = 1000;
    c.queries = vec![NamedQuery {
        uri: "db://big/all".into(),
        sql: "SELECT * FROM big".into(),
        params: BTreeMap::new(),
        description: None,
    }];
    let p = SqlProvider::new(c).await.unwrap();
    let started = Instant::now();
    let v = read(&p, "db://pg/tables/big").await.unwrap();
    assert_eq!(v["row_count"], json!(1000));
    // Deep in the table by cursor: keyset, not OFFSET.
    let mut uri = v["next"].as_str().unwrap().to_owned();
    for _ in 0..20 {
        let v = read(&p, &uri).await.unwrap();
        uri = v["next"].as_str().unwrap().to_owned();
    }
    let o = read(&p, "db://pg").await.unwrap();
    let est = o["objects"][0]["row_estimate"].as_i64().unwrap();
    assert!((9_000_000..=11_000_000).contains(&est), "estimate {est}");
    let e = read(&p, "db://big/all").await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::TooLarge, "{e}");
    assert_eq!(
        e.message,
        "db://big/all: the query's result is more than the limit of 1000 rows (max_rows); narrow the query"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let grown = rss_kib().saturating_sub(rss_before);
    assert!(
        grown < 100 * 1024,
        "RSS grew by {grown} KiB reading a 10M-row table"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_listen_notifies_only_when_the_result_changes() {
    let Some(db) = TestDb::pg(&pg_setup()).await else {
        return;
    };
    let mut c = SqlConfig::new("pg", db.url());
    c.notify_channel = Some("mcpr_changes".into());
    c.queries = queries("pgq");
    let p = SqlProvider::new(c).await.unwrap();
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    let uri = "db://pgq/active/list";
    let parsed = ResourceUri::parse(uri).unwrap();
    assert_eq!(p.change_token(&parsed).await, None, "not watched yet");
    let _g = p
        .watch(&parsed, ChangeSink::new(bus.clone(), "m0"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    while rx.try_recv().is_ok() {}
    // The change token is the watch's: what its last read of the result saw.
    let t1 = p.change_token(&parsed).await.expect("watched");
    // A change to another table, announced: the query's result is the same, no update.
    db.exec("INSERT INTO sales.orders VALUES (11, 2, 1, now()); NOTIFY mcpr_changes")
        .await;
    assert_eq!(
        next_update(&mut rx, Duration::from_millis(1500)).await,
        None
    );
    assert_eq!(p.change_token(&parsed).await.as_ref(), Some(&t1));
    // A change of the result without NOTIFY: no polling when a channel is set.
    db.exec("UPDATE users SET name = 'anna' WHERE id = 1").await;
    assert_eq!(
        next_update(&mut rx, Duration::from_millis(1500)).await,
        None
    );
    // Nor a token of a state the watch did not see: it names what it will report from.
    assert_eq!(p.change_token(&parsed).await.as_ref(), Some(&t1));
    // Announced: notified (and the earlier unannounced change is in the new result too).
    let t = Instant::now();
    db.exec("NOTIFY mcpr_changes, 'users'").await;
    assert_eq!(
        next_update(&mut rx, Duration::from_secs(1))
            .await
            .as_deref(),
        Some(uri)
    );
    assert!(t.elapsed() < Duration::from_secs(1));
    let t2 = p.change_token(&parsed).await.expect("watched");
    assert_ne!(t2, t1);
    // Another URI nobody watches has none: a token costs no query.
    assert_eq!(
        p.change_token(&ResourceUri::parse("db://pg/tables/users").unwrap())
            .await,
        None
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_down_at_start_is_not_ready_then_reconnects() {
    let Some(db) = TestDb::pg(&pg_setup()).await else {
        return;
    };
    // A port with nothing behind it yet; later a proxy to the real server appears there.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("postgres://postgres:s3cret-pw@127.0.0.1:{port}/{}", db.name);
    let p = SqlProvider::new(SqlConfig::new("pg", url)).await.unwrap();
    assert!(!p.ready().await);
    assert!(!p.info().label.contains("s3cret"), "{}", p.info().label);
    let e = read(&p, "db://pg/tables/users").await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    assert!(!e.to_string().contains("s3cret"), "{e}");
    assert!(e.message.contains("unavailable"), "{e}");
    // The listing fails as clearly (the server leaves the mount out and says so), rather
    // than listing the database as if it had no tables.
    let e = p
        .list(mcpr_core::PageRequest {
            after: None,
            limit: 100,
        })
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    assert!(!e.to_string().contains("s3cret"), "{e}");
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    let _list = p
        .watch_list(ChangeSink::new(bus.clone(), "m3"))
        .await
        .unwrap();
    let proxy = proxy(port, 5432).await;
    let mut ok = false;
    for _ in 0..100 {
        if p.ready().await {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ok, "the mount must become ready when the database is back");
    assert_eq!(
        read(&p, "db://pg/tables/users").await.unwrap()["row_count"],
        json!(3)
    );
    // The tables appearing is a list change.
    let changed = tokio::time::timeout(Duration::from_secs(3), async {
        loop {
            if let Ok(ChangeEvent::ListChanged { mount }) = rx.recv().await {
                return mount;
            }
        }
    })
    .await;
    assert_eq!(
        changed.ok().as_deref(),
        Some("m3"),
        "list_changed when the database is back"
    );
    proxy.abort();
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A PostgreSQL server that is down at start costs start-up one refused connection, not
/// the pool's 3 s of retries, and the errors of its reads say what is wrong once: the
/// breaker's fast answer adds when the next attempt comes, it does not repeat the prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_down_at_start_builds_at_once_and_its_errors_name_the_mount_once() {
    let url = format!(
        "postgres://postgres:s3cret-pw@127.0.0.1:{}/x",
        closed_port()
    );
    let started = Instant::now();
    let p = SqlProvider::new(SqlConfig::new("a", url)).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "start-up waited {:?} for a database that refuses",
        started.elapsed()
    );
    // Within 2 s of the refused attempt, a read answers at once with that attempt's error.
    let started = Instant::now();
    let e = read(&p, "db://a/tables/users").await.unwrap_err();
    assert!(started.elapsed() < Duration::from_millis(500));
    assert_eq!(e.kind, ErrorKind::Unavailable);
    assert_eq!(
        e.message,
        "postgres database of mount \"a\" is unavailable: Connection refused (os error 111) (the next attempt is within 2 s)"
    );
    assert_eq!(
        p.readiness().await.unwrap_err().message,
        e.message,
        "/readyz gives the same reason"
    );
    // Later a read waits for the pool (or meets a background attempt's failure), and the
    // one after a failed wait answers at once with that failure: every message names the
    // mount once, in one of these exact forms.
    let no_conn = "postgres database of mount \"a\" is unavailable: no connection could be made within 3 s (is the server up?)";
    let refused =
        "postgres database of mount \"a\" is unavailable: Connection refused (os error 111)";
    let fast = |m: &str| format!("{m} (the next attempt is within 2 s)");
    let forms = [no_conn.to_owned(), fast(no_conn), fast(refused)];
    let mut seen = Vec::new();
    for _ in 0..40 {
        let e = read(&p, "db://a/tables/users").await.unwrap_err();
        assert!(forms.contains(&e.message), "{}", e.message);
        let done = seen.last() == Some(&no_conn.to_owned()) && e.message == fast(no_conn);
        seen.push(e.message);
        if done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(seen.last(), Some(&fast(no_conn)), "{seen:#?}");
}

/// Checking at start only what answers at once does not let a broken named query through
/// when the database is up: start-up still refuses it, naming the query.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_up_at_start_still_refuses_a_named_query_that_does_not_prepare() {
    let Some(db) = TestDb::pg(&pg_setup()).await else {
        return;
    };
    let mut c = SqlConfig::new("pg", db.url());
    c.queries = vec![NamedQuery {
        uri: "db://pg/broken".into(),
        sql: "select * from no_such_table".into(),
        params: BTreeMap::new(),
        description: None,
    }];
    let e = SqlProvider::new(c).await.err().expect("refused at start");
    assert_eq!(e.kind, ErrorKind::InvalidParams, "{e}");
    assert!(e.message.contains("db://pg/broken"), "{e}");
}

/// Issue #20 item 13: a NUL in a text parameter (which PostgreSQL text cannot hold) is the
/// caller's mistake, answered as invalid params naming the parameter; no SQL text, no -32603.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_nul_in_a_parameter_is_invalid_params() {
    let Some(db) = TestDb::pg(&pg_setup()).await else {
        return;
    };
    let mut c = SqlConfig::new("pg", db.url());
    c.queries = vec![NamedQuery {
        uri: "db://nul/{name}".into(),
        sql: "select id from users where name = :name".into(),
        params: BTreeMap::from([("name".into(), mcpr_provider_sql::ParamSpec::default())]),
        description: None,
    }];
    let p = SqlProvider::new(c).await.unwrap();
    let e = read(&p, "db://nul/a%00b").await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidParams, "{e}");
    assert!(
        e.message.contains("name") && e.message.contains("NUL"),
        "{e}"
    );
    assert!(
        !e.message.to_lowercase().contains("select"),
        "SQL text leaked: {e}"
    );
    // The same query with a plain value still runs.
    assert_eq!(
        read(&p, "db://nul/ann").await.unwrap()["rows"],
        json!([[1]])
    );
}
