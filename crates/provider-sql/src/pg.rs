//! The PostgreSQL [`Engine`] (sqlx): every read runs in its own `BEGIN READ ONLY` transaction
//! with `SET LOCAL statement_timeout`, and is rolled back; connections also default to
//! read-only transactions. Rows come back as `row_to_json` text, so every PostgreSQL type has
//! a faithful JSON form without a decoder per type.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use futures::TryStreamExt;
use futures::future::BoxFuture;
use mcpr_core::{Error, Result};
use serde_json::{Map, Value, json};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::{Column as _, Executor as _, Row as _, TypeInfo as _};

use crate::engine::{
    Breaker, Engine, ObjectInfo, ObjectKind, PageArgs, PageFill, Param, QueryRows, ReadTx,
    RowBudget, RowPage, TableRef, decode_key_cursor, encode_key_cursor, query_envelope,
    result_too_large, too_many_rows,
};
use crate::error::{pg_connect_error, pg_error, query_check_error};
use crate::guard::{self, Placeholders};

/// Objects a mount shows: tables (plain and partitioned, not partitions), views and
/// materialized views, outside the system schemas, that this role may read.
const VISIBLE: &str = "c.relkind IN ('r', 'p', 'v', 'm') AND NOT c.relispartition \
    AND n.nspname <> 'information_schema' AND n.nspname NOT LIKE 'pg\\_%' \
    AND has_schema_privilege(n.oid, 'USAGE') AND has_table_privilege(c.oid, 'SELECT')";

/// The relation `$1.$2` as a regclass (NULL when it does not exist), names quoted by the
/// server's own `format('%I')`.
const REL: &str = "to_regclass(format('%I.%I', $1::text, $2::text))";

/// One PostgreSQL database.
pub(crate) struct Postgres {
    pool: PgPool,
    breaker: Breaker,
    mount: String,
    timeout: Duration,
    default_schema: String,
}

/// Quote an identifier for SQL text: only names from introspection get here.
fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

impl Postgres {
    /// A lazily connecting pool: a database that is down at start leaves the mount not ready
    /// instead of stopping the server, and the pool reconnects when it returns.
    pub(crate) fn connect_lazy(
        mount: &str,
        url: &str,
        max_connections: usize,
        timeout: Duration,
        default_schema: String,
    ) -> Result<Self> {
        // The parse error is not echoed: it may quote the URL, which may hold a password.
        let opts = PgConnectOptions::from_str(url)
            .map_err(|_| {
                Error::invalid_params(format!(
                    "sql mount {mount:?}: the postgres:// URL does not parse"
                ))
            })?
            .application_name("mcp-resources");
        let pool = PgPoolOptions::new()
            .max_connections(max_connections as u32)
            .min_connections(0)
            // A read waits this long for a connection before it answers "unavailable".
            .acquire_timeout(Duration::from_secs(3))
            .idle_timeout(Some(Duration::from_secs(300)))
            .after_connect(|conn, _meta| {
                Box::pin(async move {
                    // A second layer under the per-read `BEGIN READ ONLY`: anything that
                    // ever ran outside our transactions would be read-only too.
                    // UTC, so timestamps render the same whoever runs the server.
                    conn.execute("SET default_transaction_read_only = on; SET TimeZone = 'UTC'")
                        .await
                        .map(|_| ())
                })
            })
            .connect_lazy_with(opts);
        Ok(Self {
            pool,
            breaker: Breaker::default(),
            mount: mount.to_owned(),
            timeout,
            default_schema,
        })
    }

    /// The powers of the connecting role beyond reading tables, for a start-up warning: a
    /// superuser or a member of the server-file and server-program roles can reach outside
    /// the database with functions the pre-filter may not know.
    pub(crate) async fn risky_role(&self) -> Result<Vec<String>> {
        let (mount, timeout) = (self.mount.clone(), self.timeout);
        self.read(move |c| {
            Box::pin(async move {
                let row = sqlx::query(
                    "SELECT r.rolsuper, pg_has_role(current_user, 'pg_execute_server_program', 'MEMBER'),                      pg_has_role(current_user, 'pg_read_server_files', 'MEMBER'),                      pg_has_role(current_user, 'pg_write_server_files', 'MEMBER')                      FROM pg_catalog.pg_roles r WHERE r.rolname = current_user",
                )
                .fetch_one(&mut *c)
                .await
                .map_err(|e| pg_error(e, &mount, timeout))?;
                let names = [
                    "superuser",
                    "pg_execute_server_program",
                    "pg_read_server_files",
                    "pg_write_server_files",
                ];
                Ok(names
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| row.try_get::<bool, _>(*i).unwrap_or(false))
                    .map(|(_, n)| (*n).to_owned())
                    .collect())
            })
        })
        .await
    }

    /// A LISTEN on `channel` for the change watcher.
    pub(crate) fn listener(&self, channel: String) -> Listen {
        Listen {
            pool: self.pool.clone(),
            channel,
        }
    }

    /// Run `f` in one read-only, repeatable-read transaction under the statement and lock
    /// timeouts, always rolled back (see [`ReadTx::run`]).
    pub(crate) async fn read<T: Send>(
        &self,
        f: impl for<'c> FnOnce(&'c mut PgConnection) -> BoxFuture<'c, Result<T>> + Send,
    ) -> Result<T> {
        let ms = self.timeout.as_millis().max(1);
        // Our own text, sent with the simple protocol; user SQL only ever goes through
        // prepared statements, which hold exactly one statement.
        let begin = format!(
            "BEGIN READ ONLY ISOLATION LEVEL REPEATABLE READ; SET LOCAL statement_timeout = {ms}; SET LOCAL lock_timeout = {ms}"
        );
        ReadTx {
            pool: &self.pool,
            breaker: &self.breaker,
            mount: &self.mount,
            timeout: self.timeout,
            begin: &begin,
            map_err: pg_error,
            connect_err: pg_connect_error,
            // The server stops a query at its LIMIT or timeout; ROLLBACK leaves the
            // connection clean.
            abandon: |_| false,
        }
        .run(f)
        .await
    }

    /// Column names, SQL types and type names of `table`, in order.
    async fn columns(conn: &mut PgConnection, t: &TableRef) -> sqlx::Result<Vec<PgColumn>> {
        let rows = sqlx::query(&format!(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), a.attnotnull, \
             pg_get_expr(d.adbin, d.adrelid), a.attidentity::text, a.attgenerated::text, ty.typname::text \
             FROM pg_catalog.pg_attribute a \
             JOIN pg_catalog.pg_type ty ON ty.oid = a.atttypid \
             LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum \
             WHERE a.attrelid = {REL} AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum"
        ))
        .bind(t.schema.as_deref().unwrap_or_default())
        .bind(&t.name)
        .fetch_all(&mut *conn)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(PgColumn {
                    name: r.try_get(0)?,
                    sql_type: r.try_get(1)?,
                    not_null: r.try_get(2)?,
                    default: r.try_get(3)?,
                    identity: r.try_get::<String, _>(4)?,
                    generated: r.try_get::<String, _>(5)?,
                    type_name: r.try_get(6)?,
                })
            })
            .collect()
    }

    async fn primary_key(conn: &mut PgConnection, t: &TableRef) -> sqlx::Result<Vec<String>> {
        let row = sqlx::query(&format!(
            "SELECT array(SELECT a.attname::text FROM unnest(con.conkey) WITH ORDINALITY AS k(num, ord) \
             JOIN pg_catalog.pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.num ORDER BY k.ord) \
             FROM pg_catalog.pg_constraint con WHERE con.conrelid = {REL} AND con.contype = 'p'"
        ))
        .bind(t.schema.as_deref().unwrap_or_default())
        .bind(&t.name)
        .fetch_optional(&mut *conn)
        .await?;
        row.map(|r| r.try_get::<Vec<String>, _>(0))
            .transpose()
            .map(Option::unwrap_or_default)
    }
}

/// LISTEN on a channel of the mount's database: each notification wakes the change watcher.
#[derive(Clone)]
pub(crate) struct Listen {
    pool: PgPool,
    channel: String,
}

impl Listen {
    /// Listen until aborted, reconnecting after a second when the connection is lost; every
    /// (re)connection also wakes the watcher, as notifications may have been missed.
    pub(crate) async fn run(self, tx: tokio::sync::mpsc::Sender<()>) {
        loop {
            if let Ok(mut l) = sqlx::postgres::PgListener::connect_with(&self.pool).await
                && l.listen(&self.channel).await.is_ok()
            {
                let _ = tx.try_send(());
                while let Ok(Some(_)) = l.try_recv().await {
                    let _ = tx.try_send(());
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// One column as introspected.
struct PgColumn {
    name: String,
    sql_type: String,
    not_null: bool,
    default: Option<String>,
    identity: String,
    generated: String,
    type_name: String,
}

/// `(schema, name)` binds for the keyset, with "before everything" for `None`.
fn after_binds(after: Option<&TableRef>) -> (String, String) {
    after.map_or_else(
        || (String::new(), String::new()),
        |t| (t.schema.clone().unwrap_or_default(), t.name.clone()),
    )
}

/// Pick a row alias no column of the table uses (a column would win the name lookup).
fn row_alias(cols: &[PgColumn]) -> String {
    let mut alias = "mcpr_row".to_owned();
    while cols.iter().any(|c| c.name == alias) {
        alias.push('_');
    }
    alias
}

/// `row_to_json` renders bytea as `"\x…"` hex; the provider's form is `{"base64": …}`.
fn bytea_to_base64(v: Value) -> Value {
    match v {
        Value::String(s) if s.starts_with("\\x") => {
            let hex = &s[2..];
            let bytes: Option<Vec<u8>> = (0..hex.len())
                .step_by(2)
                .map(|i| {
                    hex.get(i..i + 2)
                        .and_then(|h| u8::from_str_radix(h, 16).ok())
                })
                .collect();
            match bytes {
                Some(b) => json!({ "base64": STANDARD.encode(b) }),
                None => Value::String(s),
            }
        }
        other => other,
    }
}

/// One `row_to_json` text as a row array in `names` order.
fn json_row(text: &str, names: &[String], bytea: &[bool]) -> Result<Vec<Value>> {
    let mut obj: Map<String, Value> = serde_json::from_str(text)
        .map_err(|e| Error::internal(format!("row_to_json gave invalid JSON: {e}")))?;
    Ok(names
        .iter()
        .zip(bytea)
        .map(|(n, is_bytea)| {
            let v = obj.remove(n).unwrap_or(Value::Null);
            if *is_bytea { bytea_to_base64(v) } else { v }
        })
        .collect())
}

const FK_ACTIONS: &[(&str, &str)] = &[
    ("a", "NO ACTION"),
    ("r", "RESTRICT"),
    ("c", "CASCADE"),
    ("n", "SET NULL"),
    ("d", "SET DEFAULT"),
];

fn fk_action(code: &str) -> &'static str {
    FK_ACTIONS
        .iter()
        .find(|(c, _)| *c == code)
        .map_or("NO ACTION", |(_, a)| a)
}

#[async_trait]
impl Engine for Postgres {
    fn default_schema(&self) -> Option<&str> {
        Some(&self.default_schema)
    }

    async fn schemas_with_prefix(
        &self,
        prefix: String,
        limit: usize,
    ) -> Result<(Vec<String>, u32)> {
        let (mount, timeout) = (self.mount.clone(), self.timeout);
        self.read(move |c| {
            Box::pin(async move {
                let rows = sqlx::query(&format!(
                    "SELECT DISTINCT (n.nspname::text COLLATE \"C\") AS s FROM pg_catalog.pg_class c \
                     JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                     WHERE {VISIBLE} AND starts_with(n.nspname::text, $1) ORDER BY s"
                ))
                .bind(prefix)
                .fetch_all(&mut *c)
                .await
                .map_err(|e| pg_error(e, &mount, timeout))?;
                let total = rows.len() as u32;
                let names = rows
                    .iter()
                    .take(limit)
                    .map(|r| r.try_get(0))
                    .collect::<sqlx::Result<_>>()
                    .map_err(|e| pg_error(e, &mount, timeout))?;
                Ok((names, total))
            })
        })
        .await
    }

    async fn reach(&self, within: Duration) -> Result<()> {
        crate::engine::reach_once(
            &*self.pool.connect_options(),
            within,
            &self.breaker,
            ("postgres", &self.mount, self.timeout),
            pg_connect_error,
        )
        .await
    }

    async fn ping(&self) -> Result<()> {
        self.read(|c| {
            Box::pin(async move {
                sqlx::query("SELECT 1")
                    .execute(&mut *c)
                    .await
                    .map(|_| ())
                    .map_err(|e| Error::internal(e.to_string()))
            })
        })
        .await
    }

    async fn check_query(&self, uri: &str, sql: &str) -> Result<()> {
        let (sql, _) =
            guard::rewrite_placeholders(sql, guard::Engine::Postgres, Placeholders::Numbered)?;
        let (mount, timeout) = (self.mount.clone(), self.timeout);
        let uri = uri.to_owned();
        self.read(move |c| {
            Box::pin(async move {
                c.describe(sql.as_str())
                    .await
                    .map(|_| ())
                    .map_err(|e| query_check_error(&uri, pg_error(e, &mount, timeout)))
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
        let (s, n) = after_binds(after.as_ref());
        let op = if inclusive { ">=" } else { ">" };
        let (mount, timeout) = (self.mount.clone(), self.timeout);
        self.read(move |c| {
            Box::pin(async move {
                let rows = sqlx::query(&format!(
                    "SELECT n.nspname::text, c.relname::text FROM pg_catalog.pg_class c \
                     JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                     WHERE {VISIBLE} \
                     AND (n.nspname::text COLLATE \"C\", c.relname::text COLLATE \"C\") {op} ($1::text COLLATE \"C\", $2::text COLLATE \"C\") \
                     ORDER BY n.nspname::text COLLATE \"C\", c.relname::text COLLATE \"C\" LIMIT $3"
                ))
                .bind(s)
                .bind(n)
                .bind(limit as i64)
                .fetch_all(&mut *c)
                .await
                .map_err(|e| pg_error(e, &mount, timeout))?;
                rows.iter()
                    .map(|r| {
                        Ok(TableRef {
                            schema: Some(r.try_get(0)?),
                            name: r.try_get(1)?,
                        })
                    })
                    .collect::<sqlx::Result<_>>()
                    .map_err(|e| pg_error(e, &mount, timeout))
            })
        })
        .await
    }

    async fn tables_with_prefix(
        &self,
        schema: Option<String>,
        prefix: String,
        limit: usize,
    ) -> Result<(Vec<String>, u32)> {
        let schema = schema.unwrap_or_else(|| self.default_schema.clone());
        let (mount, timeout) = (self.mount.clone(), self.timeout);
        self.read(move |c| {
            Box::pin(async move {
                let rows = sqlx::query(&format!(
                    "SELECT c.relname::text, count(*) OVER () FROM pg_catalog.pg_class c \
                     JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                     WHERE {VISIBLE} AND n.nspname = $1 \
                     AND starts_with(c.relname::text, $2) ORDER BY c.relname::text COLLATE \"C\" LIMIT $3"
                ))
                .bind(schema)
                .bind(prefix)
                .bind(limit as i64)
                .fetch_all(&mut *c)
                .await
                .map_err(|e| pg_error(e, &mount, timeout))?;
                let total = rows
                    .first()
                    .map(|r| r.try_get::<i64, _>(1))
                    .transpose()
                    .map_err(|e| pg_error(e, &mount, timeout))?
                    .unwrap_or(0);
                let names = rows
                    .iter()
                    .map(|r| r.try_get(0))
                    .collect::<sqlx::Result<_>>()
                    .map_err(|e| pg_error(e, &mount, timeout))?;
                Ok((names, total as u32))
            })
        })
        .await
    }

    async fn object_kind(&self, table: TableRef) -> Result<Option<ObjectKind>> {
        let (mount, timeout) = (self.mount.clone(), self.timeout);
        self.read(move |c| {
            Box::pin(async move {
                let row = sqlx::query(&format!(
                    "SELECT c.relkind::text FROM pg_catalog.pg_class c \
                     JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                     WHERE {VISIBLE} AND n.nspname = $1 AND c.relname = $2"
                ))
                .bind(table.schema.as_deref().unwrap_or_default())
                .bind(&table.name)
                .fetch_optional(&mut *c)
                .await
                .map_err(|e| pg_error(e, &mount, timeout))?;
                let kind: Option<String> = row
                    .map(|r| r.try_get(0))
                    .transpose()
                    .map_err(|e| pg_error(e, &mount, timeout))?;
                Ok(kind.map(|k| match k.as_str() {
                    "r" | "p" => ObjectKind::Table,
                    _ => ObjectKind::View,
                }))
            })
        })
        .await
    }

    async fn objects(&self, after: Option<TableRef>, limit: usize) -> Result<Vec<ObjectInfo>> {
        let (s, n) = after_binds(after.as_ref());
        let (mount, timeout) = (self.mount.clone(), self.timeout);
        self.read(move |c| {
            Box::pin(async move {
                let rows = sqlx::query(&format!(
                    "SELECT n.nspname::text, c.relname::text, c.relkind::text, c.reltuples::float8 \
                     FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                     WHERE {VISIBLE} \
                     AND (n.nspname::text COLLATE \"C\", c.relname::text COLLATE \"C\") > ($1::text COLLATE \"C\", $2::text COLLATE \"C\") \
                     ORDER BY n.nspname::text COLLATE \"C\", c.relname::text COLLATE \"C\" LIMIT $3"
                ))
                .bind(s)
                .bind(n)
                .bind(limit as i64)
                .fetch_all(&mut *c)
                .await
                .map_err(|e| pg_error(e, &mount, timeout))?;
                rows.iter()
                    .map(|r| {
                        let kind: String = r.try_get(2)?;
                        let tuples: f64 = r.try_get(3)?;
                        let table = matches!(kind.as_str(), "r" | "p");
                        // -1 means never analyzed or vacuumed: no estimate rather than a wrong one.
                        let estimate = (table && tuples >= 0.0).then_some(tuples as i64);
                        Ok(ObjectInfo {
                            table: TableRef {
                                schema: Some(r.try_get(0)?),
                                name: r.try_get(1)?,
                            },
                            kind: if table { ObjectKind::Table } else { ObjectKind::View },
                            row_estimate: estimate,
                            estimate_source: estimate.map(|_| "pg_class.reltuples"),
                        })
                    })
                    .collect::<sqlx::Result<_>>()
                    .map_err(|e| pg_error(e, &mount, timeout))
            })
        })
        .await
    }

    async fn table_page(&self, a: PageArgs) -> Result<RowPage> {
        let (mount, timeout) = (self.mount.clone(), self.timeout);
        self.read(move |c| {
            Box::pin(async move {
                let err = |e| pg_error(e, &mount, timeout);
                let cols = Self::columns(c, &a.table).await.map_err(err)?;
                let pk = Self::primary_key(c, &a.table).await.map_err(err)?;
                let alias = row_alias(&cols);
                // (expression, SQL type) of each key column; ctid when there is no primary
                // key: stable while the table is unchanged, which is what paging needs.
                let key: Vec<(String, String)> = if pk.is_empty() {
                    vec![(format!("{}.ctid", quote(&alias)), "tid".to_owned())]
                } else {
                    pk.iter()
                        .map(|k| {
                            let ty = cols
                                .iter()
                                .find(|c| &c.name == k)
                                .map_or("text".to_owned(), |c| c.sql_type.clone());
                            (format!("{}.{}", quote(&alias), quote(k)), ty)
                        })
                        .collect()
                };
                let after = a
                    .cursor
                    .as_deref()
                    .map(|raw| decode_key_cursor(raw, key.len()))
                    .transpose()?;
                let exprs: Vec<&str> = key.iter().map(|(e, _)| e.as_str()).collect();
                let mut sql = format!(
                    "SELECT {}, row_to_json({})::text FROM {}.{} AS {}",
                    exprs
                        .iter()
                        .map(|e| format!("{e}::text"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    quote(&alias),
                    quote(a.table.schema.as_deref().unwrap_or_default()),
                    quote(&a.table.name),
                    quote(&alias),
                );
                let mut binds: Vec<String> = Vec::new();
                if let Some(after) = after {
                    let marks: Vec<String> = key
                        .iter()
                        .enumerate()
                        .map(|(i, (_, ty))| format!("${}::text::{ty}", i + 1))
                        .collect();
                    for v in after {
                        match v {
                            Value::String(s) => binds.push(s),
                            _ => {
                                return Err(Error::invalid_params(format!(
                                    "cursor {:?} is not a cursor of this table",
                                    a.cursor.as_deref().unwrap_or_default()
                                )));
                            }
                        }
                    }
                    sql.push_str(&format!(
                        " WHERE ({}) > ({})",
                        exprs.join(", "),
                        marks.join(", ")
                    ));
                }
                sql.push_str(&format!(
                    " ORDER BY {} LIMIT {}",
                    exprs.join(", "),
                    a.page_size + 1
                ));
                let names: Vec<String> = cols.iter().map(|c| c.name.clone()).collect();
                let bytea: Vec<bool> = cols.iter().map(|c| c.type_name == "bytea").collect();
                let mut q = sqlx::query(&sql);
                for b in &binds {
                    q = q.bind(b);
                }
                let mut rows = q.fetch(&mut *c);
                let mut fill =
                    PageFill::new(&a, &a.table.display(), names.clone(), encode_key_cursor);
                while let Some(row) = rows.try_next().await.map_err(err)? {
                    if fill.full() {
                        break;
                    }
                    let k: Vec<Value> = (0..key.len())
                        .map(|i| row.try_get::<String, _>(i).map(Value::String))
                        .collect::<sqlx::Result<_>>()
                        .map_err(err)?;
                    let text: String = row.try_get(key.len()).map_err(err)?;
                    if !fill.offer(k, json_row(&text, &names, &bytea)?)? {
                        break;
                    }
                }
                Ok(fill.finish())
            })
        })
        .await
    }

    async fn schema(&self, table: TableRef, kind: ObjectKind) -> Result<Value> {
        let (mount, timeout) = (self.mount.clone(), self.timeout);
        self.read(move |c| {
            Box::pin(async move {
                let err = |e| pg_error(e, &mount, timeout);
                let cols = Self::columns(c, &table).await.map_err(err)?;
                let pk = Self::primary_key(c, &table).await.map_err(err)?;
                let columns: Vec<Value> = cols
                    .iter()
                    .map(|col| {
                        json!({
                            "name": col.name,
                            "type": col.sql_type,
                            "nullable": !col.not_null,
                            "default": col.default,
                            "primary_key": pk.iter().position(|k| *k == col.name).map(|p| p + 1),
                            "generated": !col.generated.is_empty(),
                            "identity": match col.identity.as_str() {
                                "a" => Value::from("ALWAYS"),
                                "d" => Value::from("BY DEFAULT"),
                                _ => Value::Null,
                            },
                        })
                    })
                    .collect();
                let mut doc = Map::new();
                doc.insert("name".into(), json!(table.name));
                doc.insert("schema".into(), json!(table.schema));
                doc.insert("type".into(), json!(kind.as_str()));
                doc.insert("columns".into(), Value::Array(columns));
                if kind == ObjectKind::Table {
                    doc.insert("primary_key".into(), json!(pk));
                    let fks = sqlx::query(&format!(
                        "SELECT con.conname::text, fn.nspname::text, fc.relname::text, \
                         array(SELECT a.attname::text FROM unnest(con.conkey) WITH ORDINALITY AS k(num, ord) JOIN pg_catalog.pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.num ORDER BY k.ord), \
                         array(SELECT a.attname::text FROM unnest(con.confkey) WITH ORDINALITY AS k(num, ord) JOIN pg_catalog.pg_attribute a ON a.attrelid = con.confrelid AND a.attnum = k.num ORDER BY k.ord), \
                         con.confupdtype::text, con.confdeltype::text \
                         FROM pg_catalog.pg_constraint con \
                         JOIN pg_catalog.pg_class fc ON fc.oid = con.confrelid \
                         JOIN pg_catalog.pg_namespace fn ON fn.oid = fc.relnamespace \
                         WHERE con.conrelid = {REL} AND con.contype = 'f' ORDER BY 1"
                    ))
                    .bind(table.schema.as_deref().unwrap_or_default())
                    .bind(&table.name)
                    .fetch_all(&mut *c)
                    .await
                    .map_err(err)?;
                    let fks: Vec<Value> = fks
                        .iter()
                        .map(|r| {
                            Ok(json!({
                                "name": r.try_get::<String, _>(0)?,
                                "table": r.try_get::<String, _>(2)?,
                                "schema": r.try_get::<String, _>(1)?,
                                "from": r.try_get::<Vec<String>, _>(3)?,
                                "to": r.try_get::<Vec<String>, _>(4)?,
                                "on_update": fk_action(&r.try_get::<String, _>(5)?),
                                "on_delete": fk_action(&r.try_get::<String, _>(6)?),
                            }))
                        })
                        .collect::<sqlx::Result<_>>()
                        .map_err(err)?;
                    doc.insert("foreign_keys".into(), Value::Array(fks));
                    let idx = sqlx::query(&format!(
                        "SELECT ic.relname::text, ix.indisunique, ix.indisprimary, ix.indpred IS NOT NULL, \
                         array(SELECT pg_get_indexdef(ix.indexrelid, k, true) FROM generate_series(1, ix.indnkeyatts::int) AS k ORDER BY k), \
                         pg_get_indexdef(ix.indexrelid) \
                         FROM pg_catalog.pg_index ix JOIN pg_catalog.pg_class ic ON ic.oid = ix.indexrelid \
                         WHERE ix.indrelid = {REL} ORDER BY 1"
                    ))
                    .bind(table.schema.as_deref().unwrap_or_default())
                    .bind(&table.name)
                    .fetch_all(&mut *c)
                    .await
                    .map_err(err)?;
                    let idx: Vec<Value> = idx
                        .iter()
                        .map(|r| {
                            Ok(json!({
                                "name": r.try_get::<String, _>(0)?,
                                "unique": r.try_get::<bool, _>(1)?,
                                "primary": r.try_get::<bool, _>(2)?,
                                "partial": r.try_get::<bool, _>(3)?,
                                "columns": r.try_get::<Vec<String>, _>(4)?,
                                "definition": r.try_get::<String, _>(5)?,
                            }))
                        })
                        .collect::<sqlx::Result<_>>()
                        .map_err(err)?;
                    doc.insert("indexes".into(), Value::Array(idx));
                }
                Ok(Value::Object(doc))
            })
        })
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
        let (sql, slots) =
            guard::rewrite_placeholders(&sql, guard::Engine::Postgres, Placeholders::Numbered)?;
        // PostgreSQL text cannot hold NUL; the server's refusal would read as an internal
        // error, so the caller hears which of its values is wrong.
        if let Some((name, _)) = binds
            .iter()
            .find(|(_, v)| matches!(v, Param::Text(t) if t.contains('\0')))
        {
            return Err(Error::invalid_params(format!(
                "query {uri}: parameter {name} contains a NUL character, which PostgreSQL text \
                 cannot hold"
            ))
            .with_uri(uri.as_str()));
        }
        let (mount, timeout) = (self.mount.clone(), self.timeout);
        self.read(move |c| {
            Box::pin(async move {
                let err = |e| pg_error(e, &mount, timeout);
                let described = c.describe(sql.as_str()).await.map_err(err)?;
                let names: Vec<String> = described
                    .columns()
                    .iter()
                    .map(|col| col.name().to_owned())
                    .collect();
                let bytea: Vec<bool> = described
                    .columns()
                    .iter()
                    .map(|col| col.type_info().name().eq_ignore_ascii_case("bytea"))
                    .collect();
                // Positional aliases: the query's own names may repeat, row_to_json's may not.
                let keys: Vec<String> = (1..=names.len()).map(|i| i.to_string()).collect();
                let body = sql.trim_end().trim_end_matches(';');
                let wrapped = format!(
                    "SELECT row_to_json(q)::text FROM (\n{body}\n) AS q({}) LIMIT {}",
                    keys.iter().map(|k| quote(k)).collect::<Vec<_>>().join(", "),
                    max_rows + 1
                );
                let mut q = sqlx::query(&wrapped);
                for slot in &slots {
                    match binds.iter().find(|(n, _)| n == slot).map(|(_, v)| v) {
                        Some(Param::Text(t)) => q = q.bind(t.clone()),
                        Some(Param::Integer(i)) => q = q.bind(*i),
                        None => {
                            return Err(Error::internal(format!(
                                "query {uri}: no value for :{slot}"
                            )));
                        }
                    }
                }
                let mut budget = RowBudget::new(max_bytes, query_envelope(&uri, &names, max_rows));
                let mut rows = q.fetch(&mut *c);
                while let Some(row) = rows.try_next().await.map_err(err)? {
                    if budget.rows.len() == max_rows {
                        return Err(too_many_rows(&uri, max_rows));
                    }
                    let text: String = row.try_get(0).map_err(err)?;
                    if !budget.push(Value::Array(json_row(&text, &keys, &bytea)?)) {
                        return Err(result_too_large(&uri, max_bytes));
                    }
                }
                Ok(QueryRows {
                    columns: names,
                    rows: budget.rows,
                })
            })
        })
        .await
    }

    async fn distinct_values(
        &self,
        table: TableRef,
        column: String,
        prefix: String,
        limit: usize,
    ) -> Result<(Vec<String>, bool)> {
        let (mount, timeout) = (self.mount.clone(), self.timeout);
        self.read(move |c| {
            Box::pin(async move {
                let col = quote(&column);
                let rows = sqlx::query(&format!(
                    "SELECT DISTINCT ({col}::text COLLATE \"C\") AS v FROM {}.{} \
                     WHERE {col} IS NOT NULL AND starts_with({col}::text, $1) ORDER BY v LIMIT $2",
                    quote(table.schema.as_deref().unwrap_or_default()),
                    quote(&table.name)
                ))
                .bind(prefix)
                .bind(limit as i64 + 1)
                .fetch_all(&mut *c)
                .await
                .map_err(|e| pg_error(e, &mount, timeout))?;
                let mut values: Vec<String> = rows
                    .iter()
                    .map(|r| r.try_get(0))
                    .collect::<sqlx::Result<_>>()
                    .map_err(|e| pg_error(e, &mount, timeout))?;
                let more = values.len() > limit;
                values.truncate(limit);
                Ok((values, more))
            })
        })
        .await
    }

    async fn view_sql(&self, view: TableRef, limit: usize, offset: u64) -> Result<String> {
        let (mount, timeout) = (self.mount.clone(), self.timeout);
        let t = view.clone();
        let cols = self
            .read(move |c| {
                Box::pin(async move {
                    Self::columns(c, &t)
                        .await
                        .map_err(|e| pg_error(e, &mount, timeout))
                })
            })
            .await?;
        let order: Vec<String> = cols
            .iter()
            .map(|c| format!("{}::text COLLATE \"C\"", quote(&c.name)))
            .collect();
        Ok(format!(
            "SELECT * FROM {}.{} ORDER BY {} LIMIT {limit} OFFSET {offset}",
            quote(view.schema.as_deref().unwrap_or_default()),
            quote(&view.name),
            order.join(", ")
        ))
    }

    async fn has_column(&self, table: TableRef, column: String) -> Result<bool> {
        let (mount, timeout) = (self.mount.clone(), self.timeout);
        self.read(move |c| {
            Box::pin(async move {
                let cols = Self::columns(c, &table)
                    .await
                    .map_err(|e| pg_error(e, &mount, timeout))?;
                Ok(cols.iter().any(|c| c.name == column))
            })
        })
        .await
    }
}
