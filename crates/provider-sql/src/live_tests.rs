//! Tests against the real PostgreSQL (127.0.0.1:5432, user `postgres`) and MariaDB/MySQL
//! (127.0.0.1:3306, user `root`) servers: the behaviour suite, each read-only layer on its
//! own, timeouts, a 10-million-row table, odd names, change notifications, and a database
//! that is down at start and comes back. Each test creates its own database (and role) with a
//! unique name and drops it. Without a server a test says so and passes, except under
//! `CI=true`, where a missing server is a failure.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use mcpr_core::{
    ChangeBus, ChangeEvent, ChangeSink, CompletionRequest, ContentsBody, ErrorKind, LocalBus,
    Provider, ReadLimits, ResourceUri,
};
use mcpr_testkit::{Fixture, run_suite};
use serde_json::{Value, json};
use sqlx::{Connection as _, Executor as _};

use crate::config::{NamedQuery, ParamSpec, ParamType, SqlConfig};
use crate::provider::SqlProvider;

const PG_ADMIN: &str = "postgres://postgres@127.0.0.1:5432/postgres";
const MY_ADMIN: &str = "mysql://root@127.0.0.1:3306/test";
const WEIRD: &str = "we\"ird näme";
const WEIRD_ENC: &str = "we%22ird%20n%C3%A4me";
const WEIRD_COL: &str = "col \"q\" ü";

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    format!("{prefix}_{}_{nanos}", std::process::id())
}

/// `None` (and a note) when the server is absent outside CI; a panic under CI=true.
fn absent<T>(what: &str, e: impl std::fmt::Display) -> Option<T> {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{what} is required under CI=true and could not be reached: {e}");
    }
    eprintln!("SKIPPED: {what} is not reachable here ({e}); set it up to run this test");
    None
}

/// A database of its own on one of the servers, dropped (with its role) at the end.
struct TestDb {
    kind: &'static str,
    name: String,
    role: Option<String>,
}

impl TestDb {
    async fn pg(setup: &str) -> Option<Self> {
        let mut admin = match sqlx::PgConnection::connect(PG_ADMIN).await {
            Ok(c) => c,
            Err(e) => return absent("PostgreSQL at 127.0.0.1:5432", e),
        };
        let name = unique("mcpr_t");
        admin
            .execute(format!("CREATE DATABASE {name}").as_str())
            .await
            .unwrap();
        let db = TestDb {
            kind: "pg",
            name,
            role: None,
        };
        let mut c = sqlx::PgConnection::connect(&db.url_as("postgres"))
            .await
            .unwrap();
        sqlx::raw_sql(setup).execute(&mut c).await.unwrap();
        Some(db)
    }

    async fn my(setup: &str) -> Option<Self> {
        let mut admin = match sqlx::MySqlConnection::connect(MY_ADMIN).await {
            Ok(c) => c,
            Err(e) => return absent("MariaDB/MySQL at 127.0.0.1:3306", e),
        };
        let name = unique("mcpr_t");
        admin
            .execute(format!("CREATE DATABASE {name} CHARACTER SET utf8mb4").as_str())
            .await
            .unwrap();
        let db = TestDb {
            kind: "my",
            name,
            role: None,
        };
        let mut c = sqlx::MySqlConnection::connect(&db.url_as("root"))
            .await
            .unwrap();
        sqlx::raw_sql(setup).execute(&mut c).await.unwrap();
        Some(db)
    }

    fn url_as(&self, user: &str) -> String {
        match self.kind {
            "pg" => format!("postgres://{user}@127.0.0.1:5432/{}", self.name),
            _ => format!("mysql://{user}@127.0.0.1:3306/{}", self.name),
        }
    }

    fn url(&self) -> String {
        self.url_as(if self.kind == "pg" {
            "postgres"
        } else {
            "root"
        })
    }

    /// Run SQL as the owner (the fixture's writes; never through the provider).
    async fn exec(&self, sql: &str) {
        // Through a one-connection pool: `&Pool` is an executor for any lifetime, which the
        // Send bound of the fixture's async trait methods needs.
        if self.kind == "pg" {
            let pool = sqlx::PgPool::connect(&self.url()).await.unwrap();
            sqlx::raw_sql(sql).execute(&pool).await.unwrap();
            pool.close().await;
        } else {
            let pool = sqlx::MySqlPool::connect(&self.url()).await.unwrap();
            sqlx::raw_sql(sql).execute(&pool).await.unwrap();
            pool.close().await;
        }
    }

    /// A PostgreSQL role that may only connect and read: how the docs say to run a mount.
    async fn pg_reader(&mut self) -> String {
        let role = unique("mcpr_ro");
        self.exec(&format!(
            "CREATE ROLE {role} LOGIN; GRANT CONNECT ON DATABASE {db} TO {role}; \
             GRANT USAGE ON SCHEMA public, sales TO {role}; \
             GRANT SELECT ON ALL TABLES IN SCHEMA public, sales TO {role};",
            db = self.name
        ))
        .await;
        self.role = Some(role.clone());
        role
    }

    /// md5 of every row of every user table, to prove nothing changed.
    async fn checksum(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        if self.kind == "pg" {
            let mut c = sqlx::PgConnection::connect(&self.url()).await.unwrap();
            let tables: Vec<(String, String)> = sqlx::query_as(
                "SELECT table_schema::text, table_name::text FROM information_schema.tables \
                 WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ('pg_catalog', 'information_schema')",
            )
            .fetch_all(&mut c)
            .await
            .unwrap();
            for (s, t) in tables {
                let q = format!(
                    "SELECT count(*)::text || ':' || coalesce(md5(string_agg(x::text, ',' ORDER BY x::text)), '') FROM \"{}\".\"{}\" x",
                    s.replace('"', "\"\""),
                    t.replace('"', "\"\"")
                );
                let v: String = sqlx::query_scalar(&q).fetch_one(&mut c).await.unwrap();
                out.insert(format!("{s}.{t}"), v);
            }
        } else {
            let mut c = sqlx::MySqlConnection::connect(&self.url()).await.unwrap();
            let tables: Vec<String> = sqlx::query_scalar(
                "SELECT CAST(TABLE_NAME AS CHAR) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_TYPE = 'BASE TABLE'",
            )
            .fetch_all(&mut c)
            .await
            .unwrap();
            for t in tables {
                let q = format!("CHECKSUM TABLE `{}`", t.replace('`', "``"));
                let row: (String, Option<i64>) =
                    sqlx::query_as(&q).fetch_one(&mut c).await.unwrap();
                out.insert(t, format!("{:?}", row.1));
            }
        }
        out
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let (kind, name, role) = (self.kind, self.name.clone(), self.role.clone());
        // Drop runs inside the test's runtime; the cleanup gets a thread and runtime of its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                if kind == "pg" {
                    if let Ok(mut c) = sqlx::PgConnection::connect(PG_ADMIN).await {
                        let _ = c
                            .execute(
                                format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str(),
                            )
                            .await;
                        if let Some(r) = role {
                            let _ = c.execute(format!("DROP ROLE IF EXISTS {r}").as_str()).await;
                        }
                    }
                } else if let Ok(mut c) = sqlx::MySqlConnection::connect(MY_ADMIN).await {
                    let _ = c
                        .execute(format!("DROP DATABASE IF EXISTS {name}").as_str())
                        .await;
                }
            });
        })
        .join();
    }
}

fn text(v: Value) -> Vec<u8> {
    v.to_string().into_bytes()
}

async fn read(p: &SqlProvider, uri: &str) -> mcpr_core::Result<Value> {
    let c = read_raw(p, uri).await?;
    Ok(serde_json::from_str(&c).unwrap())
}

async fn read_raw(p: &SqlProvider, uri: &str) -> mcpr_core::Result<String> {
    let c = p
        .read(
            &ResourceUri::parse(uri).unwrap(),
            &ReadLimits {
                max_bytes: 64 << 20,
            },
        )
        .await?;
    let ContentsBody::Text(t) = &c[0].body else {
        panic!("db:// results are text")
    };
    Ok(t.clone())
}

fn queries(prefix: &str) -> Vec<NamedQuery> {
    vec![
        NamedQuery {
            uri: format!("db://{prefix}/active/list"),
            sql: "select id, name from users where status = 'active' order by id".into(),
            params: BTreeMap::new(),
            description: None,
        },
        NamedQuery {
            uri: format!("db://{prefix}/{{status}}/list"),
            sql: "select id, name from users where status = :status order by id".into(),
            params: BTreeMap::from([(
                "status".into(),
                ParamSpec {
                    kind: ParamType::Text,
                    allowed: None,
                    pattern: Some("[a-z]+".into()),
                    complete_from: Some(("users".into(), "status".into())),
                },
            )]),
            description: Some("users by status".into()),
        },
        NamedQuery {
            uri: format!("db://{prefix}/by-id/{{id}}"),
            sql: "select name from users where id = :id".into(),
            params: BTreeMap::from([(
                "id".into(),
                ParamSpec {
                    kind: ParamType::Integer,
                    ..Default::default()
                },
            )]),
            description: None,
        },
    ]
}

// ---------------------------------------------------------------------------------------
// PostgreSQL

fn pg_setup() -> String {
    let w = WEIRD.replace('"', "\"\"");
    let wc = WEIRD_COL.replace('"', "\"\"");
    format!(
        "CREATE TABLE users (id integer PRIMARY KEY, name text NOT NULL, status text);
         INSERT INTO users VALUES (1, 'ann', 'active'), (2, 'bob', 'disabled'), (3, 'cy', 'active');
         CREATE TABLE \"{w}\" (k text PRIMARY KEY, \"{wc}\" bytea);
         INSERT INTO \"{w}\" VALUES ('x', '\\x00ff');
         CREATE VIEW active AS SELECT id, name FROM users WHERE status = 'active';
         CREATE SCHEMA sales;
         CREATE TABLE sales.orders (id bigint PRIMARY KEY, user_id integer REFERENCES users (id), total numeric(10, 2), at timestamptz);
         INSERT INTO sales.orders VALUES (10, 1, 12.50, '2026-01-02 03:04:05+00');
         ANALYZE;"
    )
}

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
    assert!(e.message.contains("max_rows = 1000"), "{e}");
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

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

async fn next_update(
    rx: &mut tokio::sync::broadcast::Receiver<ChangeEvent>,
    within: Duration,
) -> Option<String> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match tokio::time::timeout(left, rx.recv()).await {
            Ok(Ok(ChangeEvent::Updated { uri })) => return Some(uri),
            Ok(Ok(_)) => continue,
            _ => return None,
        }
    }
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
    let _g = p
        .watch(
            &ResourceUri::parse(uri).unwrap(),
            ChangeSink::new(bus.clone(), 0),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    while rx.try_recv().is_ok() {}
    // A change to another table, announced: the query's result is the same, no update.
    db.exec("INSERT INTO sales.orders VALUES (11, 2, 1, now()); NOTIFY mcpr_changes")
        .await;
    assert_eq!(
        next_update(&mut rx, Duration::from_millis(1500)).await,
        None
    );
    // A change of the result without NOTIFY: no polling when a channel is set.
    db.exec("UPDATE users SET name = 'anna' WHERE id = 1").await;
    assert_eq!(
        next_update(&mut rx, Duration::from_millis(1500)).await,
        None
    );
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
    // Listing still works: the overview is there (its tables are not knowable yet).
    let page = p
        .list(mcpr_core::PageRequest {
            after: None,
            limit: 100,
        })
        .await
        .unwrap();
    let uris: Vec<&str> = page.items.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(uris, ["db://pg"]);
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    let _list = p.watch_list(ChangeSink::new(bus.clone(), 3)).await.unwrap();
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
        changed.ok(),
        Some(3),
        "list_changed when the database is back"
    );
    proxy.abort();
}

/// Forward `from` on loopback to `to`, so a test can make a database appear.
async fn proxy(from: u16, to: u16) -> tokio::task::JoinHandle<()> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", from))
        .await
        .unwrap();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(("127.0.0.1", to)).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    })
}

// ---------------------------------------------------------------------------------------
// MariaDB / MySQL

fn my_setup() -> String {
    let w = WEIRD.replace('`', "``");
    let wc = WEIRD_COL.replace('`', "``");
    format!(
        "CREATE TABLE users (id int PRIMARY KEY, name varchar(50) NOT NULL, status varchar(20)) ENGINE=InnoDB;
         INSERT INTO users VALUES (1, 'ann', 'active'), (2, 'bob', 'disabled'), (3, 'cy', 'active');
         CREATE TABLE `{w}` (k varchar(10) PRIMARY KEY, `{wc}` varbinary(10)) ENGINE=InnoDB;
         INSERT INTO `{w}` VALUES ('x', x'00ff');
         CREATE VIEW active AS SELECT id, name FROM users WHERE status = 'active';
         CREATE TABLE orders (id bigint unsigned PRIMARY KEY, user_id int, total decimal(10, 2), at datetime(3), d date, t time, j json,
             FOREIGN KEY (user_id) REFERENCES users (id)) ENGINE=InnoDB;
         INSERT INTO orders VALUES (10, 1, 12.50, '2026-01-02 03:04:05.678', '2026-01-02', '-27:00:01', '{{\"a\": [1, 2]}}');
         ANALYZE TABLE users, `{w}`, orders;"
    )
}

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
async fn mysql_polling_notifies_on_result_changes_and_stops_with_the_last_watch() {
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
            ChangeSink::new(bus.clone(), 0),
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
    // The list watch shares the task; polling stops with the last watch.
    let list = p.watch_list(ChangeSink::new(bus.clone(), 0)).await.unwrap();
    assert!(p.watching());
    drop(_g);
    assert!(p.watching(), "the list watch still needs polling");
    drop(list);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !p.watching(),
        "polling must stop when the last subscriber leaves"
    );
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
