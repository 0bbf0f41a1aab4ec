//! A database of its own per test on the live PostgreSQL (127.0.0.1:5432, user `postgres`)
//! and MariaDB/MySQL (127.0.0.1:3306, user `root`) servers, created with a unique name and
//! dropped at the end, and the tables every live test starts from. Without a server a test
//! says so and passes, except under `CI=true`, where a missing server is a failure.
//!
//! Shared by the integration tests (`tests/common/mod.rs`) and by the crate's own
//! `src/live_tests.rs` (through `#[path]`), which tests the engines' read-only layers below
//! the public API; so it uses only sqlx and std, nothing of this crate.

#![allow(dead_code)]

use std::collections::BTreeMap;

use sqlx::{Connection as _, Executor as _};

pub const PG_ADMIN: &str = "postgres://postgres@127.0.0.1:5432/postgres";
pub const MY_ADMIN: &str = "mysql://root@127.0.0.1:3306/test";
pub const WEIRD: &str = "we\"ird näme";
pub const WEIRD_ENC: &str = "we%22ird%20n%C3%A4me";
pub const WEIRD_COL: &str = "col \"q\" ü";

pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    format!("{prefix}_{}_{nanos}", std::process::id())
}

/// `None` (and a note) when the server is absent outside CI; a panic under CI=true.
pub fn absent<T>(what: &str, e: impl std::fmt::Display) -> Option<T> {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{what} is required under CI=true and could not be reached: {e}");
    }
    eprintln!("SKIPPED: {what} is not reachable here ({e}); set it up to run this test");
    None
}

/// A database of its own on one of the servers, dropped (with its role: a PostgreSQL role,
/// or a MariaDB/MySQL user at host `%`) at the end.
pub struct TestDb {
    pub kind: &'static str,
    pub name: String,
    pub role: Option<String>,
}

impl TestDb {
    pub async fn pg(setup: &str) -> Option<Self> {
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

    pub async fn my(setup: &str) -> Option<Self> {
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

    pub fn url_as(&self, user: &str) -> String {
        match self.kind {
            "pg" => format!("postgres://{user}@127.0.0.1:5432/{}", self.name),
            _ => format!("mysql://{user}@127.0.0.1:3306/{}", self.name),
        }
    }

    pub fn url(&self) -> String {
        self.url_as(if self.kind == "pg" {
            "postgres"
        } else {
            "root"
        })
    }

    /// Run SQL as the owner (the fixture's writes; never through the provider).
    pub async fn exec(&self, sql: &str) {
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
    pub async fn pg_reader(&mut self) -> String {
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
    pub async fn checksum(&self) -> BTreeMap<String, String> {
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
                    if let Some(r) = role {
                        let _ = c
                            .execute(format!("DROP USER IF EXISTS '{r}'@'%'").as_str())
                            .await;
                    }
                }
            });
        })
        .join();
    }
}

pub fn pg_setup() -> String {
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

pub fn my_setup() -> String {
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
