//! The SQLite [`Engine`]: the guarded read-only connections of `conn.rs` on the blocking
//! pool, running the introspection and reads of `db.rs`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mcpr_core::{Error, Result};
use serde_json::Value;

use crate::conn::Pool;
use crate::db::{self, Ctx};
use crate::engine::{
    Engine, ObjectInfo, ObjectKind, PageArgs, Param, QueryRows, RowPage, TableRef,
};

/// One SQLite database file, opened read-only.
pub(crate) struct Sqlite {
    pool: Arc<Pool>,
    timeout: Duration,
}

impl Sqlite {
    /// Open `path` (it must exist) with up to `max_connections` guarded connections.
    pub(crate) fn open(path: PathBuf, max_connections: usize, timeout: Duration) -> Result<Self> {
        Ok(Self {
            pool: Arc::new(Pool::new(path, max_connections)?),
            timeout,
        })
    }

    /// Run `f` in a rolled-back read transaction on a pooled connection.
    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&rusqlite::Connection, &Ctx) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let ctx = Ctx {
            timeout: self.timeout,
        };
        self.pool
            .run(move |conn| conn.read(ctx.timeout, |db| f(db, &ctx)))
            .await
    }

    /// `PRAGMA data_version` on a connection of its own: it changes when another connection
    /// commits, which is the cheap "did anything change" check of change detection.
    pub(crate) fn data_version_probe(&self) -> Result<DataVersion> {
        Ok(DataVersion {
            conn: crate::conn::open_guarded(self.pool.path())?,
        })
    }
}

/// A connection kept for `PRAGMA data_version` (the value is per connection).
pub(crate) struct DataVersion {
    conn: crate::conn::Conn,
}

impl DataVersion {
    pub(crate) fn get(&self) -> Result<i64> {
        self.conn
            .db
            .query_row("PRAGMA data_version", [], |r| r.get(0))
            .map_err(|e| Error::internal(format!("PRAGMA data_version: {e}")))
    }
}

/// The single-schema position of a table: SQLite has no schemas in URIs.
fn name_of(t: Option<TableRef>) -> Option<String> {
    t.map(|t| t.name)
}

#[async_trait]
impl Engine for Sqlite {
    async fn ping(&self) -> Result<()> {
        self.read(|db, ctx| db::table_names(db, ctx, None, false, 1).map(|_| ()))
            .await
    }

    async fn check_query(&self, uri: &str, sql: &str) -> Result<()> {
        let (uri, sql) = (uri.to_owned(), sql.to_owned());
        let timeout = self.timeout;
        self.read(move |db, _| {
            db.prepare(&sql).map(|_| ()).map_err(|e| {
                Error::invalid_params(format!(
                    "query {uri}: {}",
                    crate::error::sql_error(e, timeout)
                ))
            })
        })
        .await
    }

    async fn tables(
        &self,
        after: Option<TableRef>,
        inclusive: bool,
        limit: usize,
    ) -> Result<Vec<TableRef>> {
        let after = name_of(after);
        let names = self
            .read(move |db, ctx| db::table_names(db, ctx, after.as_deref(), inclusive, limit))
            .await?;
        Ok(names
            .into_iter()
            .map(|name| TableRef { schema: None, name })
            .collect())
    }

    async fn tables_with_prefix(
        &self,
        _schema: Option<String>,
        prefix: String,
        limit: usize,
    ) -> Result<(Vec<String>, u32)> {
        self.read(move |db, ctx| db::tables_with_prefix(db, ctx, &prefix, limit))
            .await
    }

    async fn object_kind(&self, table: TableRef) -> Result<Option<ObjectKind>> {
        if table.schema.is_some() {
            return Ok(None);
        }
        self.read(move |db, ctx| db::object_kind(db, ctx, &table.name))
            .await
    }

    async fn objects(&self, after: Option<TableRef>, limit: usize) -> Result<Vec<ObjectInfo>> {
        let after = name_of(after);
        self.read(move |db, ctx| db::objects(db, ctx, after.as_deref(), limit))
            .await
    }

    async fn table_page(&self, args: PageArgs) -> Result<RowPage> {
        self.read(move |db, ctx| db::table_page(db, ctx, &args))
            .await
    }

    async fn schema(&self, table: TableRef, kind: ObjectKind) -> Result<Value> {
        self.read(move |db, ctx| db::schema(db, ctx, &table.name, kind))
            .await
    }

    async fn run_query(
        &self,
        uri: String,
        sql: String,
        binds: Vec<(String, Param)>,
        max_rows: usize,
        max_bytes: u64,
    ) -> Result<QueryRows> {
        self.read(move |db, ctx| db::run_query(db, ctx, &uri, &sql, &binds, max_rows, max_bytes))
            .await
    }

    async fn distinct_values(
        &self,
        table: TableRef,
        column: String,
        prefix: String,
        limit: usize,
    ) -> Result<(Vec<String>, bool)> {
        self.read(move |db, ctx| db::distinct_values(db, ctx, &table.name, &column, &prefix, limit))
            .await
    }

    async fn view_sql(&self, view: TableRef, limit: usize, offset: u64) -> Result<String> {
        let names = self
            .read(move |db, ctx| db::column_names(db, ctx, &view.name).map(|c| (view.name, c)))
            .await?;
        let (name, cols) = names;
        let order: Vec<String> = cols
            .iter()
            .map(|c| format!("CAST({} AS TEXT)", db::quote_ident(c)))
            .collect();
        Ok(format!(
            "SELECT * FROM main.{} ORDER BY {} LIMIT {limit} OFFSET {offset}",
            db::quote_ident(&name),
            order.join(", ")
        ))
    }

    async fn has_column(&self, table: TableRef, column: String) -> Result<bool> {
        self.read(move |db, ctx| db::has_column(db, ctx, &table.name, &column))
            .await
    }
}
