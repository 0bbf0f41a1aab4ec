//! Layers 2 and 3 of read-only in depth: how a SQLite connection is opened and what it may
//! do, plus the per-statement deadline and a small connection pool.
//!
//! Each connection is opened with `SQLITE_OPEN_READ_ONLY` (the file is never created or
//! written), `PRAGMA query_only`, `SQLITE_LIMIT_ATTACHED = 0`, defensive mode, untrusted
//! schema, and an authorizer that allows reads and a short list of introspection pragmas
//! only: every write, DDL, `ATTACH`, `DETACH` and `load_extension()` is denied at prepare
//! time, whatever text reached it. A progress handler interrupts a statement past its
//! deadline, which leaves the connection usable.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mcpr_core::{Error, ErrorKind, Result};
use rusqlite::config::DbConfig;
use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::limits::Limit;
use rusqlite::{Connection, OpenFlags};

use crate::error::sql_error;

/// Pragmas the provider's own introspection uses (as `pragma_*` table-valued functions).
const ALLOWED_PRAGMAS: &[&str] = &[
    // Read-only by definition (it cannot be set); change detection polls it.
    "data_version",
    "table_info",
    "table_xinfo",
    "table_list",
    "index_list",
    "index_info",
    "index_xinfo",
    "foreign_key_list",
];

/// Functions denied even if something got past the pre-filter; `load_extension` is also
/// disabled in the library, this makes the refusal explicit.
const DENIED_FUNCTIONS: &[&str] = &["load_extension", "fts3_tokenizer"];

/// How many virtual-machine steps run between deadline checks (cheap enough to be invisible,
/// frequent enough to stop within milliseconds).
const PROGRESS_STEPS: i32 = 1000;

/// One guarded connection and its deadline.
pub(crate) struct Conn {
    pub(crate) db: Connection,
    deadline: Arc<Mutex<Option<Instant>>>,
}

fn authorize(ctx: AuthContext<'_>) -> Authorization {
    match ctx.action {
        AuthAction::Select | AuthAction::Read { .. } | AuthAction::Recursive => {
            Authorization::Allow
        }
        AuthAction::Function { function_name } => {
            if DENIED_FUNCTIONS.contains(&function_name.to_ascii_lowercase().as_str()) {
                Authorization::Deny
            } else {
                Authorization::Allow
            }
        }
        AuthAction::Pragma { pragma_name, .. } => {
            // Only introspection pragmas, whose argument is a table or index name, never a
            // setting.
            if ALLOWED_PRAGMAS.contains(&pragma_name.to_ascii_lowercase().as_str()) {
                Authorization::Allow
            } else {
                Authorization::Deny
            }
        }
        // BEGIN/ROLLBACK of the provider's own read transactions; they cannot write.
        AuthAction::Transaction { .. } => Authorization::Allow,
        _ => Authorization::Deny,
    }
}

/// Open `path` read-only with every guard in place.
pub(crate) fn open_guarded(path: &Path) -> Result<Conn> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let db = Connection::open_with_flags(path, flags).map_err(|e| {
        Error::new(
            ErrorKind::Unavailable,
            format!("cannot open SQLite database {}: {e}", path.display()),
        )
    })?;
    let setup = || -> rusqlite::Result<()> {
        db.set_limit(Limit::SQLITE_LIMIT_ATTACHED, 0)?;
        db.set_db_config(DbConfig::SQLITE_DBCONFIG_DEFENSIVE, true)?;
        db.set_db_config(DbConfig::SQLITE_DBCONFIG_TRUSTED_SCHEMA, false)?;
        db.execute_batch("PRAGMA query_only = ON")?;
        Ok(())
    };
    setup().map_err(|e| Error::internal(format!("cannot secure SQLite connection: {e}")))?;
    // Installed last: the setup pragmas above are the only ones that may change state.
    db.authorizer(Some(authorize));
    let deadline: Arc<Mutex<Option<Instant>>> = Arc::default();
    let seen = deadline.clone();
    db.progress_handler(
        PROGRESS_STEPS,
        Some(move || {
            // true interrupts the running statement.
            mcpr_core::sync::lock(&seen).is_some_and(|d| Instant::now() >= d)
        }),
    );
    Ok(Conn { db, deadline })
}

impl Conn {
    /// Run `f` inside one read transaction that is always rolled back, with every statement
    /// it runs interrupted once `timeout` has passed.
    pub(crate) fn read<T>(
        &mut self,
        timeout: Duration,
        f: impl FnOnce(&Connection) -> Result<T>,
    ) -> Result<T> {
        self.set_deadline(Some(Instant::now() + timeout));
        let out = (|| {
            self.db
                .execute_batch("BEGIN")
                .map_err(|e| sql_error(e, timeout))?;
            let out = f(&self.db);
            // Rolled back whatever happened: nothing was written, and this ends the snapshot.
            let _ = self.db.execute_batch("ROLLBACK");
            out
        })();
        self.set_deadline(None);
        out
    }

    fn set_deadline(&self, at: Option<Instant>) {
        *mcpr_core::sync::lock(&self.deadline) = at;
    }
}

/// Idle guarded connections of one database; a semaphore bounds how many are in use.
pub(crate) struct Pool {
    path: PathBuf,
    idle: Mutex<Vec<Conn>>,
    permits: Arc<tokio::sync::Semaphore>,
    max_idle: usize,
}

impl Pool {
    pub(crate) fn new(path: PathBuf, max: usize) -> Result<Self> {
        // Open one now so a bad path fails at start-up, and keep it.
        let first = open_guarded(&path)?;
        Ok(Self {
            path,
            idle: Mutex::new(vec![first]),
            permits: Arc::new(tokio::sync::Semaphore::new(max)),
            max_idle: max,
        })
    }

    /// The database file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Run `f` on a pooled connection on the blocking pool.
    pub(crate) async fn run<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&mut Conn) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Error::internal("SQL pool closed"))?;
        let pool = self.clone();
        mcpr_core::run_blocking("SQLite", move || {
            let _permit = permit;
            let popped = mcpr_core::sync::lock(&pool.idle).pop();
            let mut conn = match popped {
                Some(c) => c,
                None => open_guarded(&pool.path)?,
            };
            let out = f(&mut conn);
            {
                let mut idle = mcpr_core::sync::lock(&pool.idle);
                if idle.len() < pool.max_idle {
                    idle.push(conn);
                }
            }
            // A connection not kept closes here, after the lock is let go.
            out
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    //! These run raw SQL on a guarded connection, bypassing the pre-filter on purpose: the
    //! connection alone must refuse every write, ATTACH and extension loading.

    use super::*;

    fn db() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let c = Connection::open(&path).unwrap();
        c.execute_batch("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO users (name) VALUES ('a'), ('b');")
            .unwrap();
        (dir, path)
    }

    fn raw(conn: &Conn, sql: &str) -> rusqlite::Result<()> {
        let mut st = conn.db.prepare(sql)?;
        let mut rows = st.raw_query();
        while rows.next()?.is_some() {}
        Ok(())
    }

    #[test]
    fn reads_work() {
        let (_d, path) = db();
        let conn = open_guarded(&path).unwrap();
        raw(&conn, "SELECT * FROM users").unwrap();
        raw(&conn, "SELECT * FROM pragma_table_xinfo('users')").unwrap();
    }

    #[test]
    fn writes_attach_and_extensions_fail_without_the_prefilter() {
        let (dir, path) = db();
        let conn = open_guarded(&path).unwrap();
        let other = dir.path().join("other.db");
        for sql in [
            "DELETE FROM users".to_owned(),
            "INSERT INTO users (name) VALUES ('x')".into(),
            "UPDATE users SET name = 'x'".into(),
            "CREATE TABLE t (x)".into(),
            "CREATE TEMP TABLE t (x)".into(),
            "DROP TABLE users".into(),
            format!("ATTACH DATABASE '{}' AS other", other.display()),
            "SELECT load_extension('/nonexistent/evil.so')".into(),
            "PRAGMA query_only = 0".into(),
            "PRAGMA writable_schema = 1".into(),
            "VACUUM INTO '/tmp/mcpr-sql-vacuum.db'".into(),
        ] {
            assert!(
                raw(&conn, &sql).is_err(),
                "{sql} must fail on a guarded connection"
            );
        }
        assert!(!other.exists(), "ATTACH must not create a file");
        assert!(!Path::new("/tmp/mcpr-sql-vacuum.db").exists());
        // Without the authorizer, read-only mode and query_only still refuse writes.
        conn.db
            .authorizer(None::<fn(AuthContext<'_>) -> Authorization>);
        assert!(raw(&conn, "DELETE FROM users").is_err());
        assert!(raw(&conn, "CREATE TEMP TABLE t (x)").is_err());
        assert!(
            raw(
                &conn,
                &format!("ATTACH DATABASE '{}' AS o", other.display())
            )
            .is_err()
        );
        assert!(raw(&conn, "SELECT load_extension('/nonexistent/evil.so')").is_err());
        let check = Connection::open(&path).unwrap();
        let n: i64 = check
            .query_row("SELECT count(*) FROM users", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 2);
    }

    #[test]
    fn a_slow_statement_times_out_and_frees_the_connection() {
        let (_d, path) = db();
        let mut conn = open_guarded(&path).unwrap();
        let slow = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c";
        let started = Instant::now();
        let err = conn
            .read(Duration::from_millis(100), |db| {
                db.query_row(slow, [], |r| r.get::<_, i64>(0))
                    .map_err(|e| sql_error(e, Duration::from_millis(100)))
            })
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::Timeout, "{err}");
        assert!(started.elapsed() < Duration::from_secs(2));
        // The same connection serves the next read.
        let n = conn
            .read(Duration::from_secs(5), |db| {
                db.query_row("SELECT count(*) FROM users", [], |r| r.get::<_, i64>(0))
                    .map_err(|e| sql_error(e, Duration::from_secs(5)))
            })
            .unwrap();
        assert_eq!(n, 2);
    }
}
