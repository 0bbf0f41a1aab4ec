//! The behaviour suite and the safety checks against real SQLite files: named queries
//! (fixed and templated, typed and checked), odd table names, refused SQL at load, paging a
//! 100k-row table, and every table's checksum unchanged afterwards.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod common;

use async_trait::async_trait;
use common::sql_malformed_positions;
use mcpr_core::{ContentsBody, ErrorKind, Provider, ReadLimits, ResourceUri};
use mcpr_provider_sql::{NamedQuery, ParamSpec, ParamType, SqlConfig, SqlProvider};
use mcpr_testkit::{Fixture, run_suite};
use serde_json::{Value, json};

const WEIRD: &str = "we\"ird näme";
const WEIRD_ENC: &str = "we%22ird%20n%C3%A4me";

fn build(dir: &Path) -> PathBuf {
    let path = dir.join("app.db");
    sqlite_exec(&path, &format!(
        "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT NOT NULL, status TEXT);
         INSERT INTO users (name, status) VALUES ('ann', 'active'), ('bob', 'disabled'), ('cy', 'active');
         CREATE TABLE \"{}\" (k TEXT PRIMARY KEY, v BLOB) WITHOUT ROWID;
         INSERT INTO \"{}\" VALUES ('x', x'00ff');
         CREATE VIEW active AS SELECT id, name FROM users WHERE status = 'active';",
        WEIRD.replace('"', "\"\""),
        WEIRD.replace('"', "\"\"")
    ))
    .unwrap();
    path
}

fn sqlite_exec(path: &Path, sql: &str) -> Result<(), String> {
    let c = rusqlite::Connection::open(path).map_err(|e| e.to_string())?;
    c.execute_batch(sql).map_err(|e| e.to_string())
}

fn checksum(path: &Path) -> BTreeMap<String, String> {
    let c = rusqlite::Connection::open(path).unwrap();
    let tables: Vec<String> = c
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut out = BTreeMap::new();
    for t in tables {
        let q = format!("SELECT * FROM \"{}\"", t.replace('"', "\"\""));
        let mut st = c.prepare(&q).unwrap();
        let n = st.column_count();
        let mut rows = st.query([]).unwrap();
        let mut acc = String::new();
        while let Some(r) = rows.next().unwrap() {
            for i in 0..n {
                acc.push_str(&format!("{:?}|", r.get_ref(i).unwrap()));
            }
            acc.push('\n');
        }
        out.insert(t, format!("{}:{:x}", acc.len(), fnv(acc.as_bytes())));
    }
    out
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf29ce484222325, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100000001b3)
    })
}

fn config(path: &Path) -> SqlConfig {
    let mut c = SqlConfig::new("app", format!("sqlite://{}", path.display()));
    c.queries = vec![
        NamedQuery {
            uri: "db://users/active/list".into(),
            sql: "select id, name from users where status = 'active' order by id".into(),
            params: BTreeMap::new(),
            description: None,
        },
        NamedQuery {
            uri: "db://users/{status}/list".into(),
            sql: "select id, name from users where status = :status order by id".into(),
            params: BTreeMap::from([(
                "status".into(),
                ParamSpec {
                    kind: ParamType::Text,
                    allowed: Some(vec!["active".into(), "disabled".into()]),
                    pattern: Some("[a-z]+".into()),
                    complete_from: Some(("users".into(), "status".into())),
                },
            )]),
            description: Some("users by status".into()),
        },
        NamedQuery {
            uri: "db://users/by-id/{id}".into(),
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
    ];
    c
}

/// The fixture: the database file, changed through a writer connection of its own.
struct Fx {
    path: PathBuf,
}

fn s(v: Value) -> Vec<u8> {
    v.to_string().into_bytes()
}

#[async_trait]
impl Fixture for Fx {
    fn expected(&self) -> Vec<(String, Vec<u8>)> {
        let obj = |name: &str, enc: &str, ty: &str, est: Value| {
            let mut m = json!({
                "name": name, "type": ty,
                "schema_uri": format!("db://app/tables/{enc}/schema"),
                "row_estimate": est,
                "row_estimate_source": if est.is_null() { Value::Null } else { json!("max_rowid") },
            });
            m["uri"] = json!(format!("db://app/tables/{enc}"));
            m
        };
        let users_cols = json!([
            {"name": "id", "type": "INTEGER", "nullable": false, "default": null, "primary_key": 1, "generated": false},
            {"name": "name", "type": "TEXT", "nullable": false, "default": null, "primary_key": null, "generated": false},
            {"name": "status", "type": "TEXT", "nullable": true, "default": null, "primary_key": null, "generated": false},
        ]);
        vec![
            (
                "db://app".into(),
                s(
                    json!({"database": "app", "engine": "sqlite", "next": null, "objects": [
                        obj("active", "active", "view", Value::Null),
                        obj("users", "users", "table", json!(3)),
                        obj(WEIRD, WEIRD_ENC, "table", Value::Null),
                    ]}),
                ),
            ),
            (
                "db://app/tables/users".into(),
                s(
                    json!({"table": "users", "columns": ["id", "name", "status"],
                    "rows": [[1, "ann", "active"], [2, "bob", "disabled"], [3, "cy", "active"]],
                    "row_count": 3, "page_size": 100, "max_bytes": 4194304, "next": null}),
                ),
            ),
            (
                "db://app/tables/active".into(),
                s(
                    json!({"table": "active", "columns": ["id", "name"], "rows": [[1, "ann"], [3, "cy"]],
                    "row_count": 2, "page_size": 100, "max_bytes": 4194304, "next": null}),
                ),
            ),
            (
                "db://app/tables/active/schema".into(),
                s(json!({"name": "active", "type": "view", "columns": [
                    {"name": "id", "type": "INTEGER", "nullable": true, "default": null, "primary_key": null, "generated": false},
                    {"name": "name", "type": "TEXT", "nullable": true, "default": null, "primary_key": null, "generated": false},
                ]})),
            ),
            (
                "db://app/tables/users/schema".into(),
                s(
                    json!({"name": "users", "type": "table", "columns": users_cols,
                    "primary_key": ["id"], "without_rowid": false, "foreign_keys": [], "indexes": []}),
                ),
            ),
            (
                format!("db://app/tables/{WEIRD_ENC}"),
                s(
                    json!({"table": WEIRD, "columns": ["k", "v"], "rows": [["x", {"base64": "AP8="}]],
                    "row_count": 1, "page_size": 100, "max_bytes": 4194304, "next": null}),
                ),
            ),
            (
                format!("db://app/tables/{WEIRD_ENC}/schema"),
                s(json!({"name": WEIRD, "type": "table", "columns": [
                    {"name": "k", "type": "TEXT", "nullable": false, "default": null, "primary_key": 1, "generated": false},
                    {"name": "v", "type": "BLOB", "nullable": true, "default": null, "primary_key": null, "generated": false},
                ], "primary_key": ["k"], "without_rowid": true, "foreign_keys": [], "indexes": [
                    {"name": format!("sqlite_autoindex_{WEIRD}_1"), "unique": true, "origin": "pk", "partial": false, "columns": ["k"]}
                ]})),
            ),
            (
                "db://users/active/list".into(),
                s(
                    json!({"query": "db://users/active/list", "columns": ["id", "name"],
                    "rows": [[1, "ann"], [3, "cy"]], "row_count": 2, "max_rows": 1000}),
                ),
            ),
        ]
    }
    fn missing_uri(&self) -> String {
        "db://app/tables/nope".into()
    }
    fn forbidden_uris(&self) -> Vec<String> {
        vec![
            "db://app/tables/sqlite_schema".into(),
            "db://app/elsewhere".into(),
            "db://app/tables/a%2".into(),
        ]
    }
    async fn modify(&self, _uri: &str) {
        // A new user changes the overview's row estimate (max rowid) and the users page.
        sqlite_exec(
            &self.path,
            "INSERT INTO users (name, status) VALUES ('new', 'active')",
        )
        .unwrap();
    }
    async fn add(&self) -> String {
        sqlite_exec(&self.path, "CREATE TABLE added (id INTEGER PRIMARY KEY)").unwrap();
        "db://app/tables/added".into()
    }
    fn completion_case(&self) -> Option<(String, String, String, String)> {
        Some((
            "db://app/tables/{table}{?cursor,format}".into(),
            "table".into(),
            "we".into(),
            WEIRD.into(),
        ))
    }
    fn malformed_positions(&self) -> Vec<Vec<u8>> {
        sql_malformed_positions()
    }
    fn unknown_positions(&self) -> Vec<(Vec<u8>, Option<String>)> {
        // Tables are in name order (active, users, we"ird näme), then the named queries.
        vec![
            (b"\x01\0b".to_vec(), Some("db://app/tables/users".into())),
            (
                b"\x02\0deleted".to_vec(),
                Some("db://app/tables/users".into()),
            ),
            (
                [&b"\x01\0"[..], &b"x".repeat(100_000)].concat(),
                Some("db://users/active/list".into()),
            ),
            (b"\x0399".to_vec(), None),
        ]
    }
    // No change tokens here: `SqlProvider` has them only for watched URIs (its watches'
    // fingerprints, a_watched_uri_has_the_token_of_its_last_read).
}

async fn read(p: &SqlProvider, uri: &str) -> mcpr_core::Result<Value> {
    let c = p
        .read(
            &ResourceUri::parse(uri).unwrap(),
            &ReadLimits {
                max_bytes: 64 << 20,
            },
        )
        .await?
        .contents;
    let ContentsBody::Text(t) = &c[0].body else {
        panic!("json is text")
    };
    Ok(serde_json::from_str(t).unwrap())
}

/// The change token of a watched URI is the hash of its watch's last read: the same while
/// commits leave its result alone, another once the watch reported a change; none for a
/// URI nobody watches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_uri_has_the_token_of_its_last_read() {
    use mcpr_core::{ChangeBus as _, ChangeEvent, ChangeSink, LocalBus};
    use std::time::Duration;

    let dir = tempfile::tempdir().unwrap();
    let path = build(dir.path());
    let mut c = config(&path);
    c.poll_interval = Duration::from_millis(100);
    let p = SqlProvider::new(c).await.unwrap();
    let uri = ResourceUri::parse("db://users/active/list").unwrap();
    let other = ResourceUri::parse("db://app/tables/users").unwrap();
    assert_eq!(p.change_token(&uri).await, None, "not watched yet");
    let bus = std::sync::Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    let g = p
        .watch(&uri, ChangeSink::new(bus.clone(), "m0"))
        .await
        .unwrap();
    let t1 = p.change_token(&uri).await.expect("watched");
    assert_eq!(p.change_token(&uri).await.as_ref(), Some(&t1));
    assert_eq!(p.change_token(&other).await, None, "only what is watched");
    // Commits that leave the query's result alone: re-read, the same token.
    sqlite_exec(
        &path,
        "INSERT INTO users (name, status) VALUES ('dan', 'disabled')",
    )
    .unwrap();
    let quiet = tokio::time::timeout(Duration::from_millis(800), rx.recv()).await;
    assert!(quiet.is_err(), "{quiet:?}");
    assert_eq!(p.change_token(&uri).await.as_ref(), Some(&t1));
    sqlite_exec(&path, "UPDATE users SET name = 'anne' WHERE id = 1").unwrap();
    match tokio::time::timeout(Duration::from_secs(3), rx.recv()).await {
        Ok(Ok(ChangeEvent::Updated { uri: got })) => assert_eq!(got, uri.as_str()),
        other => panic!("expected an update, got {other:?}"),
    }
    let t2 = p.change_token(&uri).await.expect("watched");
    assert_ne!(t2, t1);
    drop(g);
    assert_eq!(p.change_token(&uri).await, None, "no watch, no token");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behaviour_suite_and_safety() {
    let dir = tempfile::tempdir().unwrap();
    let path = build(dir.path());
    let p = Arc::new(SqlProvider::new(config(&path)).await.unwrap());
    run_suite(p.clone(), &Fx { path: path.clone() }).await;
    // From here on nothing writes but the provider, which must not.
    let before = checksum(&path);

    // Templated query: bound, typed, checked.
    let v = read(&p, "db://users/disabled/list").await.unwrap();
    assert_eq!(v["rows"], json!([[2, "bob"]]));
    let e = read(&p, "db://users/gone/list").await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidParams);
    assert!(e.message.contains("is not one of"), "{e}");
    let e = read(&p, "db://users/active'%20OR%201=1--/list")
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidParams, "{e}");
    assert_eq!(
        read(&p, "db://users/by-id/2").await.unwrap()["rows"],
        json!([["bob"]])
    );
    let e = read(&p, "db://users/by-id/2%20or%201").await.unwrap_err();
    assert!(e.message.contains("not an integer"), "{e}");
    // Enum completion.
    let c = p
        .complete(mcpr_core::CompletionRequest {
            template: "db://users/{status}/list".into(),
            argument: "status".into(),
            value: "dis".into(),
            context: Default::default(),
        })
        .await
        .unwrap();
    assert_eq!(c.values, ["disabled"]);
    drop(p);
    assert_eq!(checksum(&path), before, "no table may change");
}

#[tokio::test]
async fn unsafe_config_queries_are_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = build(dir.path());
    let before = checksum(&path);
    let other = dir.path().join("x.db");
    for sql in [
        "COMMIT; DELETE FROM users".to_owned(),
        "WITH d AS (DELETE FROM users RETURNING *) SELECT * FROM d".into(),
        "WITH x AS (SELECT 1) DELETE FROM users".into(),
        "SELECT * INTO copy FROM users".into(),
        format!("ATTACH DATABASE '{}' AS x", other.display()),
        "SELECT load_extension('/nonexistent/evil.so')".into(),
        "SELECT * FROM no_such_table".into(),
    ] {
        let mut c = config(&path);
        c.queries = vec![NamedQuery {
            uri: "db://q/x".into(),
            sql: sql.clone(),
            params: BTreeMap::new(),
            description: None,
        }];
        let err = SqlProvider::new(c)
            .await
            .err()
            .unwrap_or_else(|| panic!("{sql} must be refused"));
        assert_eq!(err.kind, ErrorKind::InvalidParams, "{sql}: {err}");
    }
    assert!(!other.exists());
    assert_eq!(checksum(&path), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_table_pages_with_bounded_memory_and_timeout_frees_connection() {
    let dir = tempfile::tempdir().unwrap();
    let path = build(dir.path());
    sqlite_exec(
        &path,
        "CREATE TABLE big (id INTEGER PRIMARY KEY, v TEXT);
         WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000)
         INSERT INTO big SELECT x, printf('row %d', x) FROM c;",
    )
    .unwrap();
    let before = checksum(&path);
    let mut cfg = config(&path);
    cfg.page_size = 1000;
    cfg.max_connections = 1;
    cfg.statement_timeout = std::time::Duration::from_millis(200);
    cfg.queries.push(NamedQuery {
        uri: "db://slow/count".into(),
        sql:
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
                .into(),
        params: BTreeMap::new(),
        description: None,
    });
    let p = SqlProvider::new(cfg).await.unwrap();
    let mut uri = "db://app/tables/big".to_owned();
    let (mut seen, mut pages, mut expect) = (0u64, 0, 1i64);
    loop {
        let v = read(&p, &uri).await.unwrap();
        let rows = v["rows"].as_array().unwrap();
        assert!(rows.len() <= 1000, "a page holds at most page_size rows");
        for r in rows {
            assert_eq!(r[0], json!(expect), "no row skipped or repeated");
            expect += 1;
        }
        seen += rows.len() as u64;
        pages += 1;
        match v["next"].as_str() {
            Some(n) => uri = n.to_owned(),
            None => break,
        }
    }
    assert_eq!((seen, pages), (100_000, 100));
    // A byte limit smaller than a page cuts the page and says where to go on.
    let small = p
        .read(
            &ResourceUri::parse("db://app/tables/big").unwrap(),
            &ReadLimits { max_bytes: 4096 },
        )
        .await
        .unwrap()
        .contents;
    let ContentsBody::Text(t) = &small[0].body else {
        panic!()
    };
    assert!(t.len() <= 4096);
    let v: Value = serde_json::from_str(t).unwrap();
    assert!(v["next"].is_string() && !v["rows"].as_array().unwrap().is_empty());
    // The slow query times out and the single connection serves the next read.
    let e = read(&p, "db://slow/count").await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
    read(&p, "db://app/tables/users").await.unwrap();
    // A forged cursor is refused cleanly.
    let e = read(&p, "db://app/tables/big?cursor=bm9wZQ")
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidParams);
    drop(p);
    assert_eq!(checksum(&path), before);
}
