//! Mapping of the engines' native errors to the core error kinds, in one place: SQLite's
//! (rusqlite) in [`sql_error`], PostgreSQL's and MySQL's (sqlx) in one function,
//! `sqlx_error`, that only asks the engine's own codes what a database error means. Messages
//! never carry the URL (it may hold a password).

use std::time::Duration;

use mcpr_core::{Error, ErrorKind};
use rusqlite::ErrorCode;
use sqlx::error::DatabaseError;
use sqlx::mysql::MySqlDatabaseError;

/// Map a SQLite error to the core kinds: interrupted → timeout, denied → invalid params.
pub(crate) fn sql_error(e: rusqlite::Error, timeout: Duration) -> Error {
    match e.sqlite_error_code() {
        Some(ErrorCode::OperationInterrupted) => Error::new(
            ErrorKind::Timeout,
            format!(
                "SQL statement exceeded its timeout of {} ms and was interrupted",
                timeout.as_millis()
            ),
        )
        .with_detail("statement_timeout_ms", timeout.as_millis() as u64),
        Some(ErrorCode::AuthorizationForStatementDenied) => {
            Error::invalid_params(format!("SQL refused by the read-only guard: {e}"))
        }
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            Error::new(ErrorKind::Unavailable, format!("database busy: {e}"))
        }
        _ => Error::internal(format!("SQL error: {e}")),
    }
}

/// Map a PostgreSQL error: connection trouble is "unavailable", a cancelled statement is a
/// timeout, the read-only transaction's refusal is a clear invalid-params.
pub(crate) fn pg_error(e: sqlx::Error, mount: &str, timeout: Duration) -> Error {
    sqlx_error(Server::Postgres, e, mount, timeout)
}

/// Map a MySQL/MariaDB error, as [`pg_error`] does.
pub(crate) fn my_error(e: sqlx::Error, mount: &str, timeout: Duration) -> Error {
    sqlx_error(Server::MySql, e, mount, timeout)
}

/// Map a failure to open a PostgreSQL connection: see [`connect_error`].
pub(crate) fn pg_connect_error(e: sqlx::Error, mount: &str, timeout: Duration) -> Error {
    connect_error(Server::Postgres, e, mount, timeout)
}

/// Map a failure to open a MySQL/MariaDB connection: see [`connect_error`].
pub(crate) fn my_connect_error(e: sqlx::Error, mount: &str, timeout: Duration) -> Error {
    connect_error(Server::MySql, e, mount, timeout)
}

/// A server that answers but refuses this mount's connection (a wrong password, an unknown
/// role, a database that does not exist) is as unavailable to the mount as one that is down:
/// the mount is not ready, with the server's reason, and is ready again once the login works,
/// without a restart (credentials are rotated, databases restored). The server's message
/// names the user or the database, never the password.
fn connect_error(server: Server, e: sqlx::Error, mount: &str, timeout: Duration) -> Error {
    match &e {
        sqlx::Error::Database(db) => unavailable(
            server.name(),
            mount,
            format!("the server refused the connection: {}", db.message()),
        ),
        _ => sqlx_error(server, e, mount, timeout),
    }
}

/// The server engines, whose errors come through sqlx.
#[derive(Clone, Copy)]
enum Server {
    Postgres,
    MySql,
}

impl Server {
    fn name(self) -> &'static str {
        match self {
            Self::Postgres => "postgres",
            Self::MySql => "mysql",
        }
    }
}

/// The one mapping of sqlx errors; only a database error's code is the engine's own.
fn sqlx_error(server: Server, e: sqlx::Error, mount: &str, timeout: Duration) -> Error {
    let engine = server.name();
    match &e {
        sqlx::Error::Database(db) => match server {
            Server::Postgres => pg_database_error(db.as_ref(), mount, timeout),
            Server::MySql => my_database_error(db.as_ref(), mount, timeout),
        },
        sqlx::Error::PoolTimedOut => unavailable(
            engine,
            mount,
            "no connection could be made within 3 s (is the server up?)",
        ),
        sqlx::Error::Io(io) => unavailable(engine, mount, io),
        sqlx::Error::Tls(_) => unavailable(engine, mount, "TLS handshake failed"),
        sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed => {
            unavailable(engine, mount, "the connection pool is closed")
        }
        sqlx::Error::Protocol(p) => unavailable(engine, mount, p),
        other => Error::internal(format!("SQL error: {other}")),
    }
}

/// A PostgreSQL error by its SQLSTATE.
fn pg_database_error(db: &dyn DatabaseError, mount: &str, timeout: Duration) -> Error {
    match db.code().as_deref() {
        Some("57014") => timed_out(timeout),
        Some("25006") => Error::invalid_params(format!(
            "SQL refused by the read-only transaction: {}",
            db.message()
        )),
        Some("42501") => {
            Error::invalid_params(format!("the database refused access: {}", db.message()))
        }
        // Data exceptions (class 22: a value that does not convert, a NUL byte, ...) come
        // from the values a request supplied.
        Some(code) if code.starts_with("22") => {
            Error::invalid_params(format!("the database refused a value: {}", db.message()))
        }
        Some(code) if code.starts_with("08") || code.starts_with("57P") => {
            unavailable("postgres", mount, db.message())
        }
        _ => Error::internal(format!("SQL error: {}", db.message())),
    }
}

/// A MySQL/MariaDB error by its number.
fn my_database_error(db: &dyn DatabaseError, mount: &str, timeout: Duration) -> Error {
    let number = db
        .try_downcast_ref::<MySqlDatabaseError>()
        .map_or(0, MySqlDatabaseError::number);
    match number {
        // MariaDB max_statement_time, MySQL max_execution_time, interrupted.
        1969 | 3024 | 1317 => timed_out(timeout),
        1792 => Error::invalid_params(format!(
            "SQL refused by the read-only transaction: {}",
            db.message()
        )),
        1044 | 1045 | 1142 | 1143 => {
            Error::invalid_params(format!("the database refused access: {}", db.message()))
        }
        2002 | 2003 | 2006 | 2013 => unavailable("mysql", mount, db.message()),
        _ => Error::internal(format!("SQL error: {}", db.message())),
    }
}

/// Map a connection-level failure (refused, reset, pool timeout) to "unavailable", with a
/// message that never carries the URL (it may hold a password).
pub(crate) fn unavailable(engine: &str, mount: &str, why: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::Unavailable,
        format!("{engine} database of mount {mount:?} is unavailable: {why}"),
    )
}

/// A statement past its deadline.
pub(crate) fn timed_out(timeout: Duration) -> Error {
    Error::new(
        ErrorKind::Timeout,
        format!(
            "SQL statement exceeded its timeout of {} ms and was cancelled",
            timeout.as_millis()
        ),
    )
    .with_detail("statement_timeout_ms", timeout.as_millis() as u64)
}

/// A named query that does not prepare is a config error naming the query; a database that
/// cannot be reached stays "unavailable".
pub(crate) fn query_check_error(uri: &str, e: Error) -> Error {
    if e.kind == ErrorKind::Unavailable {
        e
    } else {
        Error::invalid_params(format!("query {uri}: {}", e.message))
    }
}
