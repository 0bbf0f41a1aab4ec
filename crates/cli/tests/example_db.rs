//! The quick-start example: `examples/app.db` is committed so a clean clone needs no sqlite3,
//! and it is generated from `examples/app.sql`; these tests keep the two from drifting and
//! check that `examples/mcp-resources.toml` is a valid config with its database mount.
//!
//! `MCPR_REGENERATE_EXAMPLE_DB=1 cargo test -p mcp-resources --test example_db` rewrites
//! `app.db` from `app.sql` (the same as `sqlite3 examples/app.db < examples/app.sql` on a
//! removed file), for machines without the sqlite3 command.

use std::path::{Path, PathBuf};

use rusqlite::types::Value;

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// Everything a reader can see in a database: the schema entries, then every row of every
/// table in a fixed order. Bytes on disk are not compared, because they differ between SQLite
/// versions and between the sqlite3 command and this crate's bundled library.
fn contents(db: &Path) -> Vec<(String, Vec<Vec<Value>>)> {
    let c = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .unwrap_or_else(|e| panic!("open {}: {e}", db.display()));
    let mut out = Vec::new();
    let mut schema = c
        .prepare("select type, name, tbl_name, sql from sqlite_schema order by type, name")
        .expect("schema query");
    let entries: Vec<Vec<Value>> = schema
        .query_map([], |r| (0..4).map(|i| r.get::<_, Value>(i)).collect())
        .expect("schema rows")
        .collect::<Result<_, _>>()
        .expect("schema row");
    let tables: Vec<String> = entries
        .iter()
        .filter(|e| e[0] == Value::Text("table".into()))
        .map(|e| match &e[1] {
            Value::Text(t) => t.clone(),
            other => panic!("table name {other:?}"),
        })
        .collect();
    out.push(("sqlite_schema".to_owned(), entries));
    for t in tables {
        let n = c
            .prepare(&format!("select * from \"{}\"", t.replace('"', "\"\"")))
            .expect("select")
            .column_count();
        let order: Vec<String> = (1..=n).map(|i| i.to_string()).collect();
        let mut q = c
            .prepare(&format!(
                "select * from \"{}\" order by {}",
                t.replace('"', "\"\""),
                order.join(", ")
            ))
            .expect("select ordered");
        let rows: Vec<Vec<Value>> = q
            .query_map([], |r| (0..n).map(|i| r.get::<_, Value>(i)).collect())
            .expect("rows")
            .collect::<Result<_, _>>()
            .expect("row");
        out.push((t, rows));
    }
    out
}

/// A database built from `app.sql` at `path` (which must not exist yet).
fn build(path: &Path) {
    let sql = std::fs::read_to_string(examples().join("app.sql")).expect("read examples/app.sql");
    let c = rusqlite::Connection::open(path).expect("create the database");
    c.execute_batch(&sql).expect("examples/app.sql runs");
    // Compact, and in the default rollback-journal mode: a read-only mount then never needs
    // to create -wal/-shm files next to the committed database.
    c.execute_batch("VACUUM").expect("vacuum");
}

#[test]
fn committed_app_db_matches_app_sql() {
    let committed = examples().join("app.db");
    if std::env::var_os("MCPR_REGENERATE_EXAMPLE_DB").is_some() {
        // Built aside and renamed over: the other test may be reading app.db meanwhile.
        let tmp = examples().join(".app.db.new");
        let _ = std::fs::remove_file(&tmp);
        build(&tmp);
        std::fs::rename(&tmp, &committed).expect("replace examples/app.db");
        eprintln!("regenerated {}", committed.display());
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let fresh = tmp.path().join("app.db");
    build(&fresh);
    let want = contents(&fresh);
    assert!(
        want.iter()
            .any(|(t, rows)| t == "users" && !rows.is_empty()),
        "app.sql must create and fill users: {want:?}"
    );
    assert!(
        committed.is_file(),
        "{} is missing: generate it from app.sql (see the top of that file)",
        committed.display()
    );
    let got = contents(&committed);
    assert!(
        got == want,
        "examples/app.db does not match examples/app.sql; regenerate it with \
         `rm -f examples/app.db && sqlite3 examples/app.db < examples/app.sql` or \
         `MCPR_REGENERATE_EXAMPLE_DB=1 cargo test -p mcp-resources --test example_db`, \
         and commit both.\ncommitted: {got:?}\nfrom app.sql: {want:?}"
    );
}

#[test]
fn example_config_checks() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-resources"))
        .arg("check-config")
        .arg(examples().join("mcp-resources.toml"))
        .output()
        .expect("run mcp-resources check-config");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "check-config examples/mcp-resources.toml failed: {}{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The templated named query is named by its template, not by its fixed start
    // `db://users/`, which is no resource.
    assert!(
        stdout.contains("mount 2 (sqlite): app (sqlite://")
            && stdout.contains(
                "examples/app.db) -> db://app, db://users/active/list, db://users/{status}/list\n"
            ),
        "the example's db:// mount: {stdout}"
    );
    assert!(stdout.contains("mount 1 (files): "), "{stdout}");
}

/// The instructions of `initialize` name the mounts' URIs, a templated named query by its
/// template (a client that read `db://users/` from them found nothing there).
#[test]
fn instructions_name_a_templated_query_by_its_template() {
    use std::io::{BufRead as _, Write as _};
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-resources"))
        .args(["serve", "--log-level", "error", "--config"])
        .arg(examples().join("mcp-resources.toml"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start the server");
    let mut stdin = child.stdin.take().unwrap();
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"2025-11-25","capabilities":{{}},"clientInfo":{{"name":"t","version":"1"}}}}}}"#
    )
    .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    drop(stdin);
    let _ = child.wait();
    let answer: serde_json::Value = serde_json::from_str(&line).expect("a JSON answer");
    let instructions = answer["result"]["instructions"]
        .as_str()
        .unwrap_or_default();
    assert!(
        instructions.contains("db://app, db://users/active/list, db://users/{status}/list)"),
        "{instructions}"
    );
}
