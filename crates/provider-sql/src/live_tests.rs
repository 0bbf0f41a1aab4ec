//! The engines' read-only layers, each on its own, against the live PostgreSQL and
//! MariaDB/MySQL servers. These two tests stay inside the crate because layer 2 runs raw
//! statements through the engine's per-read `READ ONLY` transaction without the SQL
//! pre-filter, which only the private engine types (`pg::Postgres`, `mysql::MySqlDb`) can
//! do; the public API always passes the pre-filter first. The third checks that polling
//! stops with the last watch, which only the provider's private `watching()` can see
//! (the notifications themselves are tested in `tests/mysql.rs`). Everything else about the live
//! servers is in `tests/postgres.rs` and `tests/mysql.rs`, on the shared behaviour suite.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use mcpr_core::{ChangeSink, LocalBus, Provider, ResourceUri};

use crate::config::{NamedQuery, SqlConfig};
use crate::provider::SqlProvider;

// The database set-up and clean-up the integration tests use, so both create and drop
// their databases, and skip or fail without a server, the same way.
#[path = "../tests/common/db.rs"]
mod db;

use db::{TestDb, my_setup, pg_setup};

/// Every SQL the attacks below use, refused at load by the pre-filter (layer 1).
const PG_ATTACKS: &[&str] = &[
    "COMMIT; DELETE FROM users",
    "WITH d AS (DELETE FROM users RETURNING *) SELECT * FROM d",
    "WITH x AS (SELECT 1) DELETE FROM users",
    "SELECT * INTO stolen FROM users",
    "SET default_transaction_read_only = off",
    "SELECT pg_read_file('/etc/passwd')",
    "SELECT lo_import('/etc/hostname')",
    "COPY (SELECT 1) TO PROGRAM 'touch /tmp/mcpr-pwned'",
    "SELECT * FROM users FOR UPDATE",
    "SELECT set_config('default_transaction_read_only', 'off', false)",
    "SELECT * FROM query_to_xml('DELETE FROM users', true, true, '')",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_each_read_only_layer_holds_alone() {
    let Some(mut db) = TestDb::pg(&pg_setup()).await else {
        return;
    };
    let before = db.checksum().await;
    // Layer 1: the pre-filter refuses every attack at load, before the server sees it.
    for sql in PG_ATTACKS {
        let mut c = SqlConfig::new("pg", db.url());
        c.queries = vec![NamedQuery {
            uri: "db://attack/x".into(),
            sql: (*sql).into(),
            params: BTreeMap::new(),
            description: None,
        }];
        let e = SqlProvider::new(c)
            .await
            .err()
            .unwrap_or_else(|| panic!("{sql} was accepted"));
        assert!(e.message.contains("SQL refused"), "{sql}: {e}");
    }
    // Layer 2: raw statements (no pre-filter) inside the per-read READ ONLY transaction.
    let engine = crate::pg::Postgres::connect_lazy(
        "pg",
        &db.url(),
        1,
        Duration::from_secs(5),
        "public".into(),
    )
    .unwrap();
    let raw = |sql: &'static str| {
        let engine = &engine;
        async move {
            engine
                .read(move |c| {
                    Box::pin(async move {
                        sqlx::query(sql)
                            .execute(&mut *c)
                            .await
                            .map(|_| ())
                            .map_err(|e| mcpr_core::Error::internal(e.to_string()))
                    })
                })
                .await
        }
    };
    for sql in [
        "DELETE FROM users",
        "INSERT INTO users VALUES (9, 'x', 'x')",
        "UPDATE users SET name = 'x'",
        "CREATE TABLE stolen (x int)",
        "DROP TABLE users",
        "WITH d AS (DELETE FROM users RETURNING *) SELECT * FROM d",
        "WITH x AS (SELECT 1) DELETE FROM users",
        "SELECT * INTO stolen FROM users",
        "SELECT * FROM users FOR UPDATE",
        "COMMIT; DELETE FROM users",
    ] {
        let e = raw(sql)
            .await
            .err()
            .unwrap_or_else(|| panic!("{sql} ran in a read"));
        assert!(
            e.message.contains("read-only transaction") || e.message.contains("multiple commands"),
            "{sql}: {e}"
        );
    }
    // A SET in one read cannot make the next read writable: every read says READ ONLY itself.
    raw("SET default_transaction_read_only = off")
        .await
        .unwrap();
    raw("SELECT set_config('default_transaction_read_only', 'off', false)")
        .await
        .unwrap();
    let e = raw("DELETE FROM users").await.unwrap_err();
    assert!(e.message.contains("read-only transaction"), "{e}");
    // The role (layer 0, the docs' advice): a SELECT-only role cannot reach server files or
    // programs even through statements the read-only transaction allows.
    let role = db.pg_reader().await;
    let reader = crate::pg::Postgres::connect_lazy(
        "pg",
        &db.url_as(&role),
        1,
        Duration::from_secs(5),
        "public".into(),
    )
    .unwrap();
    assert!(reader.risky_role().await.unwrap().is_empty());
    assert_eq!(
        engine.risky_role().await.unwrap(),
        [
            "superuser",
            "pg_execute_server_program",
            "pg_read_server_files",
            "pg_write_server_files"
        ]
    );
    for sql in [
        "COPY (SELECT 1) TO PROGRAM 'touch /tmp/mcpr-pwned'",
        "SELECT pg_read_file('/etc/passwd')",
        "SELECT lo_import('/etc/hostname')",
    ] {
        let r = reader
            .read(move |c| {
                Box::pin(async move {
                    sqlx::query(sql)
                        .execute(&mut *c)
                        .await
                        .map(|_| ())
                        .map_err(|e| mcpr_core::Error::internal(e.to_string()))
                })
            })
            .await;
        let e = r
            .err()
            .unwrap_or_else(|| panic!("{sql} ran as a SELECT-only role"));
        assert!(
            e.message.contains("permission denied")
                || e.message.contains("must be superuser")
                || e.message.contains("privileges"),
            "{sql}: {e}"
        );
    }
    assert!(!std::path::Path::new("/tmp/mcpr-pwned").exists());
    // Even as superuser, a large object made inside a read does not outlive its rollback.
    raw("SELECT lo_import('/etc/hostname')").await.unwrap();
    let pool = sqlx::PgPool::connect(&db.url()).await.unwrap();
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_largeobject_metadata")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(n, 0, "no large object may persist");
    assert_eq!(db.checksum().await, before, "no table may change");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_each_read_only_layer_holds_alone() {
    let Some(db) = TestDb::my(&my_setup()).await else {
        return;
    };
    let before = db.checksum().await;
    for sql in [
        "SELECT 1 /*! ; DELETE FROM users */",
        "SELECT 1 /*M!100000 ; DROP TABLE users */",
        "COMMIT; DELETE FROM users",
        "SELECT * FROM users INTO OUTFILE '/tmp/mcpr-out'",
        "SELECT load_file('/etc/passwd')",
        "SELECT get_lock('x', 10)",
        "WITH x AS (SELECT 1) DELETE FROM users",
        "SELECT * FROM users FOR UPDATE",
    ] {
        let mut c = SqlConfig::new("my", db.url());
        c.queries = vec![NamedQuery {
            uri: "db://attack/x".into(),
            sql: sql.into(),
            params: BTreeMap::new(),
            description: None,
        }];
        let e = SqlProvider::new(c)
            .await
            .err()
            .unwrap_or_else(|| panic!("{sql} was accepted"));
        assert!(e.message.contains("SQL refused"), "{sql}: {e}");
    }
    let engine =
        crate::mysql::MySqlDb::connect_lazy("my", &db.url(), 1, Duration::from_secs(5)).unwrap();
    let raw = |sql: &'static str| {
        let engine = &engine;
        async move {
            engine
                .read(move |c| {
                    Box::pin(async move {
                        sqlx::query(sql)
                            .execute(&mut *c)
                            .await
                            .map(|_| ())
                            .map_err(|e| mcpr_core::Error::internal(e.to_string()))
                    })
                })
                .await
        }
    };
    for sql in [
        "DELETE FROM users",
        "INSERT INTO users VALUES (9, 'x', 'x')",
        "UPDATE users SET name = 'x'",
        "SELECT 1 /*! ; DELETE FROM users */",
        "COMMIT; DELETE FROM users",
    ] {
        let e = raw(sql)
            .await
            .err()
            .unwrap_or_else(|| panic!("{sql} ran in a read"));
        assert!(
            e.message.contains("READ ONLY") || e.message.contains("syntax"),
            "{sql}: {e}"
        );
    }
    raw("SET SESSION TRANSACTION READ WRITE").await.ok();
    let e = raw("DELETE FROM users").await.unwrap_err();
    assert!(e.message.contains("READ ONLY"), "{e}");
    assert_eq!(db.checksum().await, before, "no table may change");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_polling_stops_with_the_last_watch() {
    let Some(db) = TestDb::my(&my_setup()).await else {
        return;
    };
    let mut c = SqlConfig::new("my", db.url());
    c.queries = vec![NamedQuery {
        uri: "db://myq/active/list".into(),
        sql: "select id, name from users where status = 'active' order by id".into(),
        params: BTreeMap::new(),
        description: None,
    }];
    c.poll_interval = Duration::from_millis(100);
    let p = SqlProvider::new(c).await.unwrap();
    let bus = Arc::new(LocalBus::default());
    let watch = p
        .watch(
            &ResourceUri::parse("db://myq/active/list").unwrap(),
            ChangeSink::new(bus.clone(), "m0"),
        )
        .await
        .unwrap();
    // The list watch shares the task; polling stops with the last watch.
    let list = p.watch_list(ChangeSink::new(bus, "m0")).await.unwrap();
    assert!(p.watching());
    drop(watch);
    assert!(p.watching(), "the list watch still needs polling");
    drop(list);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !p.watching(),
        "polling must stop when the last subscriber leaves"
    );
}
