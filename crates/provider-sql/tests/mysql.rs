//! The MySQL/MariaDB mount against the live server at 127.0.0.1:3306 (user `root`): the
//! behaviour suite, timeouts, odd names and types, polled changes, and a database that is
//! down at start and comes back. Each test creates and drops a database of its own; without
//! the server it says SKIPPED and passes, except under `CI=true`.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use common::db::{TestDb, WEIRD, WEIRD_COL, WEIRD_ENC, my_setup};
use common::{next_update, proxy, queries, read, sql_malformed_positions, text};
use mcpr_core::{
    ChangeBus, ChangeSink, CompletionRequest, ErrorKind, LocalBus, Provider, ResourceUri,
};
use mcpr_provider_sql::{NamedQuery, SqlConfig, SqlProvider};
use mcpr_testkit::{Fixture, run_suite};
use serde_json::{Value, json};

struct MyFx {
    db: Arc<TestDb>,
}

fn my_expected() -> Vec<(String, Vec<u8>)> {
    let obj = |name: &str, uri: &str, ty: &str, est: Value| {
        let mut m = json!({
            "name": name, "type": ty,
            "schema_uri": format!("{uri}/schema"),
            "row_estimate": est,
            "row_estimate_source": if est.is_null() { Value::Null } else { json!("information_schema.tables.table_rows") },
        });
        m["uri"] = json!(uri);
        m
    };
    let col = |name: &str, ty: &str, nullable: bool, pk: Value| {
        json!({"name": name, "type": ty, "nullable": nullable, "default": null,
               "primary_key": pk, "generated": false, "auto_increment": false})
    };
    vec![
        (
            "db://my/tables/users".into(),
            text(
                json!({"table": "users", "columns": ["id", "name", "status"],
                "rows": [[1, "ann", "active"], [2, "bob", "disabled"], [3, "cy", "active"]],
                "row_count": 3, "page_size": 100, "max_bytes": 4194304, "next": null}),
            ),
        ),
        (
            "db://my".into(),
            text(
                json!({"database": "my", "engine": "mysql", "next": null, "objects": [
                    obj("active", "db://my/tables/active", "view", Value::Null),
                    obj("orders", "db://my/tables/orders", "table", json!(1)),
                    obj("users", "db://my/tables/users", "table", json!(3)),
                    obj(WEIRD, &format!("db://my/tables/{WEIRD_ENC}"), "table", json!(1)),
                ]}),
            ),
        ),
        (
            "db://my/tables/active".into(),
            text(
                json!({"table": "active", "columns": ["id", "name"], "rows": [[1, "ann"], [3, "cy"]],
                "row_count": 2, "page_size": 100, "max_bytes": 4194304, "next": null}),
            ),
        ),
        (
            "db://my/tables/active/schema".into(),
            text(json!({"name": "active", "type": "view",
                "columns": [col("id", "int(11)", false, Value::Null), col("name", "varchar(50)", false, Value::Null)]})),
        ),
        (
            "db://my/tables/users/schema".into(),
            text(json!({"name": "users", "type": "table",
                "columns": [col("id", "int(11)", false, json!(1)), col("name", "varchar(50)", false, Value::Null), col("status", "varchar(20)", true, json!(null))],
                "primary_key": ["id"], "foreign_keys": [], "indexes": [
                    {"name": "PRIMARY", "unique": true, "primary": true, "columns": ["id"]}]})),
        ),
        (
            format!("db://my/tables/{WEIRD_ENC}"),
            text(
                json!({"table": WEIRD, "columns": ["k", WEIRD_COL], "rows": [["x", {"base64": "AP8="}]],
                "row_count": 1, "page_size": 100, "max_bytes": 4194304, "next": null}),
            ),
        ),
        (
            format!("db://my/tables/{WEIRD_ENC}/schema"),
            text(json!({"name": WEIRD, "type": "table",
                "columns": [col("k", "varchar(10)", false, json!(1)), col(WEIRD_COL, "varbinary(10)", true, Value::Null)],
                "primary_key": ["k"], "foreign_keys": [], "indexes": [
                    {"name": "PRIMARY", "unique": true, "primary": true, "columns": ["k"]}]})),
        ),
        (
            "db://my/tables/orders".into(),
            text(
                json!({"table": "orders", "columns": ["id", "user_id", "total", "at", "d", "t", "j"],
                // MariaDB's JSON is LONGTEXT on the wire: a string (MySQL's JSON type is embedded).
                "rows": [[10, 1, 12.5, "2026-01-02 03:04:05.678000", "2026-01-02", "-27:00:01", "{\"a\": [1, 2]}"]],
                "row_count": 1, "page_size": 100, "max_bytes": 4194304, "next": null}),
            ),
        ),
        (
            "db://my/tables/orders/schema".into(),
            text(json!({"name": "orders", "type": "table",
                "columns": [col("id", "bigint(20) unsigned", false, json!(1)), col("user_id", "int(11)", true, Value::Null),
                            col("total", "decimal(10,2)", true, Value::Null), col("at", "datetime(3)", true, Value::Null),
                            col("d", "date", true, Value::Null), col("t", "time", true, Value::Null), col("j", "longtext", true, Value::Null)],
                "primary_key": ["id"],
                "foreign_keys": [{"name": "orders_ibfk_1", "table": "users", "from": ["user_id"], "to": ["id"],
                                  "on_update": "RESTRICT", "on_delete": "RESTRICT"}],
                "indexes": [{"name": "PRIMARY", "unique": true, "primary": true, "columns": ["id"]},
                            {"name": "user_id", "unique": false, "primary": false, "columns": ["user_id"]}]})),
        ),
        (
            "db://myq/active/list".into(),
            text(
                json!({"query": "db://myq/active/list", "columns": ["id", "name"],
                "rows": [[1, "ann"], [3, "cy"]], "row_count": 2, "max_rows": 1000}),
            ),
        ),
    ]
}

#[async_trait]
impl Fixture for MyFx {
    fn expected(&self) -> Vec<(String, Vec<u8>)> {
        my_expected()
    }
    fn missing_uri(&self) -> String {
        "db://my/tables/nope".into()
    }
    fn forbidden_uris(&self) -> Vec<String> {
        vec![
            "db://my/schemas/mysql/tables/user".into(),
            "db://my/elsewhere".into(),
        ]
    }
    async fn modify(&self, _uri: &str) {
        self.db
            .exec("INSERT INTO users SELECT max(id) + 1, 'new', 'active' FROM users")
            .await;
    }
    async fn add(&self) -> String {
        self.db
            .exec("CREATE TABLE added (id int PRIMARY KEY)")
            .await;
        "db://my/tables/added".into()
    }
    fn completion_case(&self) -> Option<(String, String, String, String)> {
        Some((
            "db://my/tables/{table}{?cursor,format}".into(),
            "table".into(),
            "we".into(),
            WEIRD.into(),
        ))
    }
    fn malformed_positions(&self) -> Vec<Vec<u8>> {
        sql_malformed_positions()
    }
    fn unknown_positions(&self) -> Vec<(Vec<u8>, Option<String>)> {
        // Tables in name order (active, orders, users, we"ird näme; no schemas), then the
        // named queries.
        vec![
            (b"\x01\0p".to_vec(), Some("db://my/tables/users".into())),
            (
                b"\x02\0deleted".to_vec(),
                Some("db://my/tables/orders".into()),
            ),
            (b"\x01\0zzz".to_vec(), Some("db://myq/active/list".into())),
            (b"\x0399".to_vec(), None),
        ]
    }
    // No change tokens here: `SqlProvider` has them only for watched URIs (its watches'
    // fingerprints; tests/sqlite.rs and tests/postgres.rs check them).
}

fn my_config(db: &TestDb) -> SqlConfig {
    let mut c = SqlConfig::new("my", db.url());
    c.queries = queries("myq");
    c.poll_interval = Duration::from_millis(100);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_behaviour_suite_reads_templates_and_completion() {
    let Some(db) = TestDb::my(&my_setup()).await else {
        return;
    };
    let db = Arc::new(db);
    let p = Arc::new(SqlProvider::new(my_config(&db)).await.unwrap());
    run_suite(p.clone(), &MyFx { db: db.clone() }).await;
    let before = db.checksum().await;
    let v = read(&p, "db://myq/disabled/list").await.unwrap();
    assert_eq!(v["rows"], json!([[2, "bob"]]));
    assert_eq!(
        read(&p, "db://myq/by-id/2").await.unwrap()["rows"],
        json!([["bob"]])
    );
    let v = read(&p, "db://myq/nobody/list").await.unwrap();
    assert_eq!(
        v["columns"],
        json!(["id", "name"]),
        "columns even without rows"
    );
    let c = p
        .complete(CompletionRequest {
            template: "db://myq/{status}/list".into(),
            argument: "status".into(),
            value: "d".into(),
            context: Default::default(),
        })
        .await
        .unwrap();
    assert_eq!(c.values, ["disabled"]);
    let mut small = my_config(&db);
    small.name = "mysmall".into();
    small.queries.clear();
    small.page_size = 2;
    let ps = SqlProvider::new(small).await.unwrap();
    let page1 = read(&ps, "db://mysmall/tables/users?format=json")
        .await
        .unwrap();
    assert_eq!(page1["rows"].as_array().unwrap().len(), 2);
    let page2 = read(&ps, page1["next"].as_str().unwrap()).await.unwrap();
    assert_eq!(page2["rows"][0][0], json!(3));
    assert_eq!(db.checksum().await, before, "reads must change nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_timeout_cancels_and_frees_the_connection() {
    let Some(db) = TestDb::my(&my_setup()).await else {
        return;
    };
    let mut c = SqlConfig::new("my", db.url());
    c.max_connections = 1;
    c.statement_timeout = Duration::from_millis(500);
    c.queries = vec![NamedQuery {
        uri: "db://slow/sleep".into(),
        sql: "SELECT SLEEP(100) AS s, id FROM users".into(),
        params: BTreeMap::new(),
        description: None,
    }];
    let p = SqlProvider::new(c).await.unwrap();
    let started = Instant::now();
    let r = read(&p, "db://slow/sleep").await;
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    match r {
        Err(e) => assert_eq!(e.kind, ErrorKind::Timeout, "{e}"),
        // MySQL's SLEEP returns 1 when its statement is interrupted instead of failing.
        Ok(v) => assert_eq!(v["rows"][0][0], json!(1), "{v}"),
    }
    assert_eq!(
        read(&p, "db://my/tables/users").await.unwrap()["row_count"],
        json!(3)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_polling_notifies_on_result_changes() {
    let Some(db) = TestDb::my(&my_setup()).await else {
        return;
    };
    let p = SqlProvider::new(my_config(&db)).await.unwrap();
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    let uri = "db://myq/active/list";
    let _g = p
        .watch(
            &ResourceUri::parse(uri).unwrap(),
            ChangeSink::new(bus.clone(), "m0"),
        )
        .await
        .unwrap();
    db.exec("UPDATE users SET name = 'bobby' WHERE id = 2")
        .await;
    assert_eq!(
        next_update(&mut rx, Duration::from_millis(1000)).await,
        None,
        "bob is not active"
    );
    db.exec("UPDATE users SET name = 'anna' WHERE id = 1").await;
    assert_eq!(
        next_update(&mut rx, Duration::from_secs(1))
            .await
            .as_deref(),
        Some(uri)
    );
    // That polling stops with the last watch needs the provider's private state:
    // `src/live_tests.rs` (mysql_polling_stops_with_the_last_watch).
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_down_at_start_is_not_ready_then_reconnects() {
    let Some(db) = TestDb::my(&my_setup()).await else {
        return;
    };
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("mysql://root:s3cret-pw@127.0.0.1:{port}/{}", db.name);
    let p = SqlProvider::new(SqlConfig::new("my", url)).await.unwrap();
    assert!(!p.ready().await);
    let e = read(&p, "db://my/tables/users").await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    assert!(!e.to_string().contains("s3cret") && !p.info().label.contains("s3cret"));
    // root has no password here, so the reconnect is checked with a URL without one.
    let url = format!("mysql://root@127.0.0.1:{port}/{}", db.name);
    let p = SqlProvider::new(SqlConfig::new("my", url)).await.unwrap();
    assert!(!p.ready().await);
    let proxy = proxy(port, 3306).await;
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
        read(&p, "db://my/tables/users").await.unwrap()["row_count"],
        json!(3)
    );
    proxy.abort();
}

/// Issue #20 item 13, for MySQL: a NUL in a text parameter is an ordinary value there (its
/// strings hold any byte), so it is bound and simply matches nothing: no internal error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_nul_in_a_parameter_is_a_plain_value() {
    let Some(db) = TestDb::my(&my_setup()).await else {
        return;
    };
    let mut c = SqlConfig::new("my", db.url());
    c.queries = vec![NamedQuery {
        uri: "db://nul/{name}".into(),
        sql: "select id from users where name = :name".into(),
        params: BTreeMap::from([("name".into(), mcpr_provider_sql::ParamSpec::default())]),
        description: None,
    }];
    let p = SqlProvider::new(c).await.unwrap();
    let v = read(&p, "db://nul/a%00b").await.unwrap();
    assert_eq!(v["rows"], json!([]), "{v}");
    assert_eq!(
        read(&p, "db://nul/ann").await.unwrap()["rows"],
        json!([[1]])
    );
}
