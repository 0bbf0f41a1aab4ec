//! The seam between the `db://` provider and one database engine (SQLite, PostgreSQL,
//! MySQL/MariaDB): the [`Engine`] trait, the values that cross it, and the row budget every
//! engine fills the same way, so limits and document shapes cannot drift between engines.

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use mcpr_core::{Error, ErrorKind, Limit, Result};

use crate::error::{timed_out, unavailable};
use serde_json::{Value, json};

/// A table or view. `schema` is `None` on engines without schemas in URIs (SQLite, and MySQL,
/// where a mount is one database); on PostgreSQL it is always set.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct TableRef {
    pub(crate) schema: Option<String>,
    pub(crate) name: String,
}

impl TableRef {
    /// The keyset position of this object in listings: schema, NUL, name (NUL occurs in no
    /// identifier of the supported engines).
    pub(crate) fn position(&self) -> Vec<u8> {
        let mut p = self.schema.clone().unwrap_or_default().into_bytes();
        p.push(0);
        p.extend_from_slice(self.name.as_bytes());
        p
    }

    pub(crate) fn from_position(p: &[u8], schemas: bool) -> Option<Self> {
        let at = p.iter().position(|b| *b == 0)?;
        let schema = String::from_utf8(p[..at].to_vec()).ok()?;
        let name = String::from_utf8(p[at + 1..].to_vec()).ok()?;
        Some(Self {
            schema: schemas.then_some(schema),
            name,
        })
    }

    /// The name as shown in documents: `schema.name` where there are schemas.
    pub(crate) fn display(&self) -> String {
        match &self.schema {
            Some(s) => format!("{s}.{}", self.name),
            None => self.name.clone(),
        }
    }
}

/// A user table or view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ObjectKind {
    Table,
    View,
}

impl ObjectKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ObjectKind::Table => "table",
            ObjectKind::View => "view",
        }
    }
}

/// One entry of the overview.
#[derive(Debug, Clone)]
pub(crate) struct ObjectInfo {
    pub(crate) table: TableRef,
    pub(crate) kind: ObjectKind,
    /// A cheap row estimate (from statistics or a bound), never a full count.
    pub(crate) row_estimate: Option<i64>,
    /// Where the estimate comes from.
    pub(crate) estimate_source: Option<&'static str>,
}

/// A typed value for a named-query parameter: bound, never spliced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Param {
    Text(String),
    Integer(i64),
}

/// One page of a table's rows.
pub(crate) struct PageArgs {
    /// The URI read, for errors.
    pub(crate) uri: String,
    pub(crate) table: TableRef,
    /// The `cursor` value from the URI, if any (opaque to the provider, engine-specific).
    pub(crate) cursor: Option<String>,
    pub(crate) page_size: usize,
    pub(crate) max_bytes: u64,
}

/// A page of rows as an engine returns it: the provider renders it as JSON or CSV.
#[derive(Debug, Clone)]
pub(crate) struct RowPage {
    pub(crate) columns: Vec<String>,
    pub(crate) rows: Vec<Value>,
    /// The cursor of the next page, when there is one.
    pub(crate) next_cursor: Option<String>,
}

/// The rows of a named query (all of them: a result over the limits is an error).
#[derive(Debug, Clone)]
pub(crate) struct QueryRows {
    pub(crate) columns: Vec<String>,
    pub(crate) rows: Vec<Value>,
}

/// What one database engine does for the provider. Every method runs in its own read-only
/// transaction (or snapshot) that is rolled back, under the mount's statement timeout.
#[async_trait]
pub(crate) trait Engine: Send + Sync + 'static {
    /// The schema a short `db://{name}/tables/{table}` URI means (PostgreSQL only).
    fn default_schema(&self) -> Option<&str> {
        None
    }

    /// Schema names starting with `prefix` that hold something this mount shows (engines
    /// with schemas in URIs only): at most `limit`, and how many matched in all.
    async fn schemas_with_prefix(
        &self,
        prefix: String,
        limit: usize,
    ) -> Result<(Vec<String>, u32)> {
        let _ = (prefix, limit);
        Ok((Vec::new(), 0))
    }

    /// Whether the database answers.
    async fn ping(&self) -> Result<()>;

    /// One attempt to connect to a database server, outside the pool (so without its
    /// retries) and for at most `within`: what start-up waits for before the checks that need
    /// the server. A server that refuses or says nothing is unavailable, and the reads just
    /// after fail fast too (the breaker). An embedded database is always there.
    async fn reach(&self, within: std::time::Duration) -> Result<()> {
        let _ = within;
        Ok(())
    }

    /// Check a named query (already through the pre-filter) against the database: it must
    /// prepare, which finds missing tables and columns at load instead of at the first read.
    async fn check_query(&self, uri: &str, sql: &str) -> Result<()>;

    /// Up to `limit` tables and views after `after` (or from it when `inclusive`), in
    /// binary (schema, name) order.
    async fn tables(
        &self,
        after: Option<TableRef>,
        inclusive: bool,
        limit: usize,
    ) -> Result<Vec<TableRef>>;

    /// Names of tables and views in `schema` starting with `prefix`: at most `limit`, and how many
    /// matched in all.
    async fn tables_with_prefix(
        &self,
        schema: Option<String>,
        prefix: String,
        limit: usize,
    ) -> Result<(Vec<String>, u32)>;

    /// Whether `table` is a user table or view this connection may read.
    async fn object_kind(&self, table: TableRef) -> Result<Option<ObjectKind>>;

    /// Up to `limit` tables and views after `after`, in (schema, name) order.
    async fn objects(&self, after: Option<TableRef>, limit: usize) -> Result<Vec<ObjectInfo>>;

    /// One page of a table's rows, keyset-paged on its primary key (or another stable key).
    async fn table_page(&self, args: PageArgs) -> Result<RowPage>;

    /// Columns, types, nullability, keys and indexes.
    async fn schema(&self, table: TableRef, kind: ObjectKind) -> Result<Value>;

    /// Run a named query with its parameters bound by name.
    async fn run_query(
        &self,
        uri: String,
        sql: String,
        binds: Vec<(String, Param)>,
        max_rows: usize,
        max_bytes: u64,
    ) -> Result<QueryRows>;

    /// Distinct values of `column` of `table` starting with `prefix`, for completion: at most
    /// `limit`, and whether there were more.
    async fn distinct_values(
        &self,
        table: TableRef,
        column: String,
        prefix: String,
        limit: usize,
    ) -> Result<(Vec<String>, bool)>;

    /// Whether `column` is a column of `table` (config checks at load).
    async fn has_column(&self, table: TableRef, column: String) -> Result<bool>;

    /// A query for one block of a view's rows: every column, ordered by the text of every
    /// column in turn (a total, stable order for any column type), `limit` rows from
    /// `offset`. A view has no key, so its pages resume by position.
    async fn view_sql(&self, view: TableRef, limit: usize, offset: u64) -> Result<String>;
}

/// Build a row list one row at a time, stopping at a row count or when the next row would
/// take the document past `max_bytes`.
pub(crate) struct RowBudget {
    max_bytes: u64,
    pub(crate) used: u64,
    pub(crate) rows: Vec<Value>,
}

impl RowBudget {
    pub(crate) fn new(max_bytes: u64, envelope: u64) -> Self {
        Self {
            max_bytes,
            used: envelope,
            rows: Vec::new(),
        }
    }

    /// Whether the row fit.
    pub(crate) fn push(&mut self, row: Value) -> bool {
        let len = row.to_string().len() as u64 + 1;
        if self.used + len > self.max_bytes {
            return false;
        }
        self.used += len;
        self.rows.push(row);
        true
    }
}

/// Fills one table page the same way on every engine: at most `page_size` rows, and never a
/// row that would take the document (with room for the next cursor) past `max_bytes`; a
/// single row that alone is too large is an error. `T` is the engine's key value type.
pub(crate) struct PageFill<T> {
    budget: RowBudget,
    uri: String,
    table: String,
    columns: Vec<String>,
    page_size: usize,
    max_bytes: u64,
    encode: fn(&[T]) -> String,
    last_key: Option<Vec<T>>,
    more: bool,
}

impl<T> PageFill<T> {
    pub(crate) fn new(
        a: &PageArgs,
        table: &str,
        columns: Vec<String>,
        encode: fn(&[T]) -> String,
    ) -> Self {
        let (page_size, max_bytes) = (a.page_size, a.max_bytes);
        Self {
            budget: RowBudget::new(max_bytes, page_envelope(table, &columns, page_size)),
            uri: a.uri.clone(),
            table: table.to_owned(),
            columns,
            page_size,
            max_bytes,
            encode,
            last_key: None,
            more: false,
        }
    }

    /// Whether the page is full; the row just read (the query asks for one extra) then only
    /// says that there is a next page.
    pub(crate) fn full(&mut self) -> bool {
        if self.budget.rows.len() == self.page_size {
            self.more = true;
        }
        self.more
    }

    /// Add a row with its key; `false` when it did not fit and the page ends before it.
    pub(crate) fn offer(&mut self, key: Vec<T>, row: Vec<Value>) -> Result<bool> {
        let cursor_len = (self.encode)(&key).len() as u64 + 16;
        self.budget.used += cursor_len;
        let fit = self.budget.push(Value::Array(row));
        self.budget.used -= cursor_len;
        if !fit {
            if self.budget.rows.is_empty() {
                return Err(Error::too_large(
                    &self.uri,
                    &format!("one row of table {:?}", self.table),
                    None,
                    byte_limit(self.max_bytes),
                    Some("the row alone is more than a page may hold"),
                ));
            }
            self.more = true;
            return Ok(false);
        }
        self.last_key = Some(key);
        Ok(true)
    }

    pub(crate) fn finish(self) -> RowPage {
        let next_cursor = match (self.more, &self.last_key) {
            (true, Some(k)) => Some((self.encode)(k)),
            _ => None,
        };
        RowPage {
            columns: self.columns,
            rows: self.budget.rows,
            next_cursor,
        }
    }
}

/// The room a page document takes besides its rows.
pub(crate) fn page_envelope(table: &str, columns: &[String], page_size: usize) -> u64 {
    // The URI of `next` is at most a few hundred bytes plus the cursor; 512 covers it.
    json!({
        "table": table, "columns": columns, "rows": [], "row_count": page_size,
        "page_size": page_size, "max_bytes": u64::MAX,
    })
    .to_string()
    .len() as u64
        + 512
}

/// The room a query document takes besides its rows.
pub(crate) fn query_envelope(uri: &str, columns: &[String], max_rows: usize) -> u64 {
    json!({
        "query": uri, "columns": columns, "rows": [], "row_count": max_rows, "max_rows": max_rows,
    })
    .to_string()
    .len() as u64
}

/// The byte limit of a read of this provider, as a "too large" error names it: the read's
/// `max_bytes` is already the smaller of the two settings.
pub(crate) fn byte_limit(max_bytes: u64) -> Limit {
    Limit::bytes(
        max_bytes,
        "max_read_bytes, or the mount's max_bytes when smaller",
    )
}

/// The "too large" error of a named query `uri` that returned more than `max_rows` rows.
pub(crate) fn too_many_rows(uri: &str, max_rows: usize) -> Error {
    Error::too_large(
        uri,
        "the query's result",
        None,
        Limit::of(max_rows as u64, "rows", "max_rows"),
        Some("narrow the query"),
    )
}

/// The "too large" error of a named query `uri` whose rows are more than `max_bytes`.
pub(crate) fn result_too_large(uri: &str, max_bytes: u64) -> Error {
    Error::too_large(
        uri,
        "the query's result",
        None,
        byte_limit(max_bytes),
        Some("narrow the query"),
    )
}

/// Encode a table cursor: the key of the last row served, as base64url JSON.
pub(crate) fn encode_key_cursor(key: &[Value]) -> String {
    URL_SAFE_NO_PAD.encode(Value::Array(key.to_vec()).to_string())
}

/// Decode a table cursor of `width` key columns.
pub(crate) fn decode_key_cursor(raw: &str, width: usize) -> Result<Vec<Value>> {
    let bad = || Error::invalid_params(format!("cursor {raw:?} is not a cursor of this table"));
    let bytes = URL_SAFE_NO_PAD.decode(raw).map_err(|_| bad())?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Array(parts)) if parts.len() == width => Ok(parts),
        _ => Err(bad()),
    }
}

/// Remembers that a server could not be reached, so the reads of the next moments answer
/// "unavailable" at once instead of each waiting out the pool's connect timeout (a list
/// across mounts must not stall on one database that is down). After `RETRY_AFTER` the next
/// read tries again.
#[derive(Default)]
pub(crate) struct Breaker {
    last_failure: std::sync::Mutex<Option<(std::time::Instant, String)>>,
}

/// How long a failed connection attempt answers for the reads after it.
const RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(2);

impl Breaker {
    /// Fail fast while the last attempt failed recently: that attempt's error (which already
    /// names the engine and the mount), and when the next attempt may be made.
    pub(crate) fn check(&self) -> Result<()> {
        let last = mcpr_core::sync::lock(&self.last_failure).clone();
        match last {
            Some((at, message)) if at.elapsed() < RETRY_AFTER => Err(Error::new(
                ErrorKind::Unavailable,
                format!(
                    "{message} (the next attempt is within {} s)",
                    RETRY_AFTER.as_secs()
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Record the outcome of getting a connection (an unavailable error as its caller got
    /// it: `unavailable`'s message).
    pub(crate) fn record(&self, outcome: std::result::Result<(), &Error>) {
        *mcpr_core::sync::lock(&self.last_failure) = match outcome {
            Err(e) if e.kind == ErrorKind::Unavailable => {
                Some((std::time::Instant::now(), e.message.clone()))
            }
            _ => None,
        };
    }
}

/// [`Engine::reach`] for a server engine: one connection with `opts`, closed at once, or
/// the error `map_err` makes of the failure (unavailable past `within`), recorded in
/// `breaker`.
pub(crate) async fn reach_once<C: sqlx::ConnectOptions>(
    opts: &C,
    within: std::time::Duration,
    breaker: &Breaker,
    (engine, mount, timeout): (&str, &str, std::time::Duration),
    map_err: fn(sqlx::Error, &str, std::time::Duration) -> Error,
) -> Result<()>
where
    C::Connection: Sized,
{
    use sqlx::Connection as _;
    let outcome = match tokio::time::timeout(within, opts.connect()).await {
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
            Ok(())
        }
        Ok(Err(e)) => Err(map_err(e, mount, timeout)),
        Err(_) => Err(unavailable(
            engine,
            mount,
            format!("the server did not answer within {} ms", within.as_millis()),
        )),
    };
    breaker.record(outcome.as_ref().map(|_| ()));
    outcome
}

/// How a server engine (PostgreSQL, MySQL) runs one read: the statement that opens its
/// read-only transaction, how its errors map, and which failures leave a connection unfit
/// to reuse (a result not read to its end).
pub(crate) struct ReadTx<'a, DB: sqlx::Database> {
    pub(crate) pool: &'a sqlx::Pool<DB>,
    pub(crate) breaker: &'a Breaker,
    pub(crate) mount: &'a str,
    pub(crate) timeout: std::time::Duration,
    pub(crate) begin: &'a str,
    pub(crate) map_err: fn(sqlx::Error, &str, std::time::Duration) -> Error,
    /// How a failure to get a connection maps (a refused login is "unavailable").
    pub(crate) connect_err: fn(sqlx::Error, &str, std::time::Duration) -> Error,
    pub(crate) abandon: fn(&Error) -> bool,
}

impl<DB: sqlx::Database> ReadTx<'_, DB>
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
{
    /// Run `f` inside the transaction, which is always rolled back. A statement past the
    /// timeout is cancelled by the server; should the server not answer at all, the
    /// connection is dropped (never returned to the pool) two seconds later. A connection the
    /// transaction cannot be opened or closed on, or that `abandon` names, is dropped too.
    pub(crate) async fn run<T: Send>(
        self,
        f: impl for<'c> FnOnce(&'c mut DB::Connection) -> futures::future::BoxFuture<'c, Result<T>>
        + Send,
    ) -> Result<T> {
        use sqlx::Executor as _;
        self.breaker.check()?;
        let acquired = self
            .pool
            .acquire()
            .await
            .map_err(|e| (self.connect_err)(e, self.mount, self.timeout));
        self.breaker.record(acquired.as_ref().map(|_| ()));
        let mut conn = acquired?;
        if let Err(e) = (&mut *conn).execute(self.begin).await {
            let _ = conn.detach();
            return Err((self.map_err)(e, self.mount, self.timeout));
        }
        let grace = self.timeout + std::time::Duration::from_secs(2);
        let out = match tokio::time::timeout(grace, f(&mut conn)).await {
            Ok(out) => out,
            Err(_) => {
                let _ = conn.detach();
                return Err(timed_out(self.timeout));
            }
        };
        let abandon = matches!(&out, Err(e) if (self.abandon)(e));
        if abandon || (&mut *conn).execute("ROLLBACK").await.is_err() {
            let _ = conn.detach();
        }
        out
    }
}
