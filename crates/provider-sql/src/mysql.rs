//! The MySQL/MariaDB [`Engine`] (sqlx): a mount is the one database its URL names. Every read
//! runs in its own `START TRANSACTION READ ONLY` that is rolled back; sessions default to
//! read-only transactions and carry the server's own statement time limit
//! (`max_statement_time` on MariaDB, `max_execution_time` on MySQL).

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use futures::TryStreamExt;
use futures::future::BoxFuture;
use mcpr_core::{Error, ErrorKind, Result};
use serde_json::{Map, Value, json};
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection, MySqlPool, MySqlPoolOptions, MySqlRow};
use sqlx::{Column as _, Executor as _, MySql, Row as _, TypeInfo as _, ValueRef as _};

use crate::engine::{
    Breaker, Engine, ObjectInfo, ObjectKind, PageArgs, PageFill, Param, QueryRows, ReadTx,
    RowBudget, RowPage, TableRef, decode_key_cursor, encode_key_cursor, query_envelope,
    result_too_large, too_many_rows,
};
use crate::error::{my_connect_error, my_error, query_check_error};
use crate::guard::{self, Placeholders};

/// One MySQL or MariaDB database.
pub(crate) struct MySqlDb {
    pool: MySqlPool,
    breaker: Breaker,
    mount: String,
    timeout: Duration,
}

/// Quote an identifier with backticks: only names from introspection get here.
fn quote(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

impl MySqlDb {
    /// A lazily connecting pool (see the PostgreSQL engine for why lazy).
    pub(crate) fn connect_lazy(
        mount: &str,
        url: &str,
        max_connections: usize,
        timeout: Duration,
    ) -> Result<Self> {
        let opts = MySqlConnectOptions::from_str(url).map_err(|_| {
            Error::invalid_params(format!(
                "sql mount {mount:?}: the mysql:// URL does not parse"
            ))
        })?;
        if opts.get_database().is_none_or(str::is_empty) {
            return Err(Error::invalid_params(format!(
                "sql mount {mount:?}: the mysql:// URL must name a database (mysql://user@host/DATABASE)"
            )));
        }
        let ms = timeout.as_millis().max(1);
        let pool = MySqlPoolOptions::new()
            .max_connections(max_connections as u32)
            .min_connections(0)
            .acquire_timeout(Duration::from_secs(3))
            .idle_timeout(Some(Duration::from_secs(300)))
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    // Transactions of this session default to read-only, under the explicit
                    // `START TRANSACTION READ ONLY` of every read.
                    conn.execute("SET SESSION TRANSACTION READ ONLY").await?;
                    let version: String = sqlx::query_scalar("SELECT VERSION()")
                        .fetch_one(&mut *conn)
                        .await?;
                    let limit = if version.to_ascii_lowercase().contains("mariadb") {
                        format!("SET SESSION max_statement_time = {}", ms as f64 / 1000.0)
                    } else {
                        format!("SET SESSION max_execution_time = {ms}")
                    };
                    conn.execute(limit.as_str()).await.map(|_| ())
                })
            })
            .connect_lazy_with(opts);
        Ok(Self {
            pool,
            breaker: Breaker::default(),
            mount: mount.to_owned(),
            timeout,
        })
    }

    /// Run `f` in one read-only transaction that is always rolled back (see
    /// [`ReadTx::run`]). A result cut short (too many rows) or a timeout drops the connection
    /// instead of draining it.
    pub(crate) async fn read<T: Send>(
        &self,
        f: impl for<'c> FnOnce(&'c mut MySqlConnection) -> BoxFuture<'c, Result<T>> + Send,
    ) -> Result<T> {
        ReadTx {
            pool: &self.pool,
            breaker: &self.breaker,
            mount: &self.mount,
            timeout: self.timeout,
            begin: "START TRANSACTION READ ONLY",
            map_err: my_error,
            connect_err: my_connect_error,
            abandon: |e| {
                matches!(
                    e.kind,
                    ErrorKind::TooLarge | ErrorKind::Timeout | ErrorKind::Unavailable
                )
            },
        }
        .run(f)
        .await
    }
}

/// Bytes as text when they are UTF-8, else `{"base64": …}`.
fn bytes_json(b: &[u8]) -> Value {
    match std::str::from_utf8(b) {
        Ok(s) => Value::String(s.to_owned()),
        Err(_) => json!({ "base64": STANDARD.encode(b) }),
    }
}

/// A DATE/DATETIME/TIMESTAMP value: text as the server sent it, or the binary protocol's
/// length-prefixed fields.
fn temporal_json(b: &[u8], with_time: bool) -> Value {
    match b.first() {
        Some(c) if c.is_ascii_digit() => bytes_json(b),
        Some(&len) => {
            let f = |i: usize| b.get(i).copied().unwrap_or(0);
            let year = u16::from_le_bytes([f(1), f(2)]);
            let mut s = format!("{year:04}-{:02}-{:02}", f(3), f(4));
            if with_time {
                s.push_str(&format!(" {:02}:{:02}:{:02}", f(5), f(6), f(7)));
                if len >= 11 {
                    let micros = u32::from_le_bytes([f(8), f(9), f(10), f(11)]);
                    s.push_str(&format!(".{micros:06}"));
                }
            }
            if len == 0 {
                s = if with_time {
                    "0000-00-00 00:00:00".into()
                } else {
                    "0000-00-00".into()
                };
            }
            Value::String(s)
        }
        None => Value::Null,
    }
}

/// Column `i` of a row as JSON, by its MySQL type.
fn value_json(row: &MySqlRow, i: usize) -> sqlx::Result<Value> {
    let raw = row.try_get_raw(i)?;
    if raw.is_null() {
        return Ok(Value::Null);
    }
    let ty = raw.type_info().name().to_owned();
    Ok(match ty.as_str() {
        "BOOLEAN" | "TINYINT" | "SMALLINT" | "INT" | "MEDIUMINT" | "BIGINT" | "YEAR" => {
            json!(row.try_get_unchecked::<i64, _>(i)?)
        }
        t if t.ends_with("UNSIGNED") => json!(row.try_get_unchecked::<u64, _>(i)?),
        "FLOAT" => json!(row.try_get_unchecked::<f32, _>(i)?),
        "DOUBLE" => {
            let f = row.try_get_unchecked::<f64, _>(i)?;
            serde_json::Number::from_f64(f).map_or_else(|| json!(f.to_string()), Value::Number)
        }
        "DECIMAL" => {
            let s: String = row.try_get_unchecked(i)?;
            serde_json::from_str::<serde_json::Number>(&s).map_or(Value::String(s), Value::Number)
        }
        "DATE" => temporal_json(row.try_get_unchecked::<&[u8], _>(i)?, false),
        "DATETIME" | "TIMESTAMP" => temporal_json(row.try_get_unchecked::<&[u8], _>(i)?, true),
        "TIME" => json!(
            row.try_get_unchecked::<sqlx::mysql::types::MySqlTime, _>(i)?
                .to_string()
        ),
        "JSON" => {
            let b: &[u8] = row.try_get_unchecked(i)?;
            serde_json::from_slice(b).unwrap_or_else(|_| bytes_json(b))
        }
        "BIT" => {
            let b: &[u8] = row.try_get_unchecked(i)?;
            json!(b.iter().fold(0u64, |acc, x| (acc << 8) | u64::from(*x)))
        }
        "BINARY" | "VARBINARY" | "TINYBLOB" | "BLOB" | "MEDIUMBLOB" | "LONGBLOB" | "GEOMETRY" => {
            let b: &[u8] = row.try_get_unchecked(i)?;
            if ty == "GEOMETRY" {
                json!({ "base64": STANDARD.encode(b) })
            } else {
                bytes_json(b)
            }
        }
        _ => bytes_json(row.try_get_unchecked::<&[u8], _>(i)?),
    })
}

/// Text of column `i` whatever the server called its type (information_schema columns are
/// sometimes binary strings).
fn text(row: &MySqlRow, i: usize) -> sqlx::Result<Option<String>> {
    Ok(row
        .try_get_unchecked::<Option<&[u8]>, _>(i)?
        .map(|b| String::from_utf8_lossy(b).into_owned()))
}

fn text_req(row: &MySqlRow, i: usize) -> sqlx::Result<String> {
    Ok(text(row, i)?.unwrap_or_default())
}

/// One column as introspected.
struct MyColumn {
    name: String,
    column_type: String,
    nullable: bool,
    default: Option<String>,
    extra: String,
}

async fn columns(c: &mut MySqlConnection, table: &str) -> sqlx::Result<Vec<MyColumn>> {
    let rows = sqlx::query(
        "SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT, EXTRA \
         FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? \
         ORDER BY ORDINAL_POSITION",
    )
    .bind(table)
    .fetch_all(&mut *c)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(MyColumn {
                name: text_req(r, 0)?,
                column_type: text_req(r, 1)?,
                nullable: text_req(r, 2)? == "YES",
                // MariaDB writes "no default" of a nullable column as the expression NULL;
                // string defaults come quoted ('x'), so a bare NULL is never a string.
                default: text(r, 3)?.filter(|d| d != "NULL"),
                extra: text_req(r, 4)?,
            })
        })
        .collect()
}

/// The index columns of every index of `table`: (name, unique, columns in order).
async fn indexes(
    c: &mut MySqlConnection,
    table: &str,
) -> sqlx::Result<Vec<(String, bool, Vec<String>)>> {
    let rows = sqlx::query(
        "SELECT INDEX_NAME, NON_UNIQUE, COLUMN_NAME FROM information_schema.STATISTICS \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? ORDER BY INDEX_NAME, SEQ_IN_INDEX",
    )
    .bind(table)
    .fetch_all(&mut *c)
    .await?;
    let mut out: Vec<(String, bool, Vec<String>)> = Vec::new();
    for r in &rows {
        let name = text_req(r, 0)?;
        let non_unique = r.try_get_unchecked::<i64, _>(1)? != 0;
        let col = text(r, 2)?.unwrap_or_default();
        match out.last_mut() {
            Some((n, _, cols)) if *n == name => cols.push(col),
            _ => out.push((name, !non_unique, vec![col])),
        }
    }
    Ok(out)
}

/// The columns rows are paged on: the primary key, else a unique index over NOT NULL
/// columns. InnoDB's hidden row id is not reachable from SQL, so a table with neither
/// cannot be paged stably.
async fn row_key(c: &mut MySqlConnection, table: &str, cols: &[MyColumn]) -> Result<Vec<String>> {
    let idx = indexes(c, table)
        .await
        .map_err(|e| Error::internal(format!("SQL error: {e}")))?;
    if let Some((_, _, k)) = idx.iter().find(|(n, _, _)| n == "PRIMARY") {
        return Ok(k.clone());
    }
    let not_null = |k: &String| cols.iter().any(|c| &c.name == k && !c.nullable);
    idx.into_iter()
        .find(|(_, unique, k)| *unique && k.iter().all(not_null))
        .map(|(_, _, k)| k)
        .ok_or_else(|| {
            Error::invalid_params(format!(
                "table {table:?} has no primary key and no unique index over NOT NULL columns, so its rows cannot be paged"
            ))
        })
}

fn bind_json<'q>(
    q: sqlx::query::Query<'q, MySql, sqlx::mysql::MySqlArguments>,
    v: &Value,
) -> Option<sqlx::query::Query<'q, MySql, sqlx::mysql::MySqlArguments>> {
    Some(match v {
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                q.bind(i)
            } else if let Some(u) = n.as_u64() {
                q.bind(u)
            } else {
                q.bind(n.as_f64()?)
            }
        }
        Value::String(s) => q.bind(s.clone()),
        Value::Object(o) => q.bind(STANDARD.decode(o.get("base64")?.as_str()?).ok()?),
        _ => return None,
    })
}

#[async_trait]
impl Engine for MySqlDb {
    async fn reach(&self, within: Duration) -> Result<()> {
        crate::engine::reach_once(
            &*self.pool.connect_options(),
            within,
            &self.breaker,
            ("mysql", &self.mount, self.timeout),
            my_connect_error,
        )
        .await
    }

    async fn ping(&self) -> Result<()> {
        let (mount, timeout) = (self.mount.clone(), self.timeout);
        self.read(move |c| {
            Box::pin(async move {
                sqlx::query("SELECT 1")
                    .execute(&mut *c)
                    .await
                    .map(|_| ())
                    .map_err(|e| my_error(e, &mount, timeout))
            })
        })
        .await
    }

    async fn check_query(&self, uri: &str, sql: &str) -> Result<()> {
        let (sql, _) =
            guard::rewrite_placeholders(sql, guard::Engine::MySql, Placeholders::Positional)?;
        let (mount, timeout) = (self.mount.clone(), self.timeout);
        let uri = uri.to_owned();
        self.read(move |c| {
            Box::pin(async move {
                c.describe(sql.as_str())
                    .await
                    .map(|_| ())
                    .map_err(|e| query_check_error(&uri, my_error(e, &mount, timeout)))
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
        let after = after.map(|t| t.name).unwrap_or_default();
        let op = if inclusive { ">=" } else { ">" };
        let (mount, timeout) = (self.mount.clone(), self.timeout);
        self.read(move |c| {
            Box::pin(async move {
                let rows = sqlx::query(&format!(
                    "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() \
                     AND TABLE_TYPE IN ('BASE TABLE', 'SYSTEM VERSIONED', 'VIEW') \
                     AND CAST(TABLE_NAME AS BINARY) {op} CAST(? AS BINARY) \
                     ORDER BY CAST(TABLE_NAME AS BINARY) LIMIT ?"
                ))
                .bind(after)
                .bind(limit as u64)
                .fetch_all(&mut *c)
                .await
                .map_err(|e| my_error(e, &mount, timeout))?;
                rows.iter()
                    .map(|r| {
                        Ok(TableRef {
                            schema: None,
                            name: text_req(r, 0)?,
                        })
                    })
                    .collect::<sqlx::Result<_>>()
                    .map_err(|e| my_error(e, &mount, timeout))
            })
        })
        .await
    }

    async fn tables_with_prefix(
        &self,
        _schema: Option<String>,
        prefix: String,
        limit: usize,
    ) -> Result<(Vec<String>, u32)> {
        let (mount, timeout) = (self.mount.clone(), self.timeout);
        self.read(move |c| {
            Box::pin(async move {
                let rows = sqlx::query(
                    "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() \
                     AND TABLE_TYPE IN ('BASE TABLE', 'SYSTEM VERSIONED', 'VIEW') \
                     AND LEFT(CAST(TABLE_NAME AS BINARY), LENGTH(CAST(? AS BINARY))) = CAST(? AS BINARY) \
                     ORDER BY CAST(TABLE_NAME AS BINARY)",
                )
                .bind(&prefix)
                .bind(&prefix)
                .fetch_all(&mut *c)
                .await
                .map_err(|e| my_error(e, &mount, timeout))?;
                let total = rows.len() as u32;
                let names = rows
                    .iter()
                    .take(limit)
                    .map(|r| text_req(r, 0))
                    .collect::<sqlx::Result<_>>()
                    .map_err(|e| my_error(e, &mount, timeout))?;
                Ok((names, total))
            })
        })
        .await
    }

    async fn object_kind(&self, table: TableRef) -> Result<Option<ObjectKind>> {
        if table.schema.is_some() {
            return Ok(None);
        }
        let (mount, timeout) = (self.mount.clone(), self.timeout);
        self.read(move |c| {
            Box::pin(async move {
                let row = sqlx::query(
                    "SELECT TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() \
                     AND CAST(TABLE_NAME AS BINARY) = CAST(? AS BINARY)",
                )
                .bind(&table.name)
                .fetch_optional(&mut *c)
                .await
                .map_err(|e| my_error(e, &mount, timeout))?;
                let Some(row) = row else { return Ok(None) };
                let t = text_req(&row, 0).map_err(|e| my_error(e, &mount, timeout))?;
                Ok(match t.as_str() {
                    "BASE TABLE" | "SYSTEM VERSIONED" => Some(ObjectKind::Table),
                    "VIEW" => Some(ObjectKind::View),
                    _ => None,
                })
            })
        })
        .await
    }

    async fn objects(&self, after: Option<TableRef>, limit: usize) -> Result<Vec<ObjectInfo>> {
        let after = after.map(|t| t.name).unwrap_or_default();
        let (mount, timeout) = (self.mount.clone(), self.timeout);
        self.read(move |c| {
            Box::pin(async move {
                let rows = sqlx::query(
                    "SELECT TABLE_NAME, TABLE_TYPE, TABLE_ROWS FROM information_schema.TABLES \
                     WHERE TABLE_SCHEMA = DATABASE() AND TABLE_TYPE IN ('BASE TABLE', 'SYSTEM VERSIONED', 'VIEW') \
                     AND CAST(TABLE_NAME AS BINARY) > CAST(? AS BINARY) \
                     ORDER BY CAST(TABLE_NAME AS BINARY) LIMIT ?",
                )
                .bind(after)
                .bind(limit as u64)
                .fetch_all(&mut *c)
                .await
                .map_err(|e| my_error(e, &mount, timeout))?;
                rows.iter()
                    .map(|r| {
                        let view = text_req(r, 1)? == "VIEW";
                        let estimate: Option<u64> = r.try_get_unchecked(2)?;
                        let estimate = if view { None } else { estimate.map(|n| n as i64) };
                        Ok(ObjectInfo {
                            table: TableRef {
                                schema: None,
                                name: text_req(r, 0)?,
                            },
                            kind: if view { ObjectKind::View } else { ObjectKind::Table },
                            row_estimate: estimate,
                            estimate_source: estimate.map(|_| "information_schema.tables.table_rows"),
                        })
                    })
                    .collect::<sqlx::Result<_>>()
                    .map_err(|e| my_error(e, &mount, timeout))
            })
        })
        .await
    }

    async fn table_page(&self, a: PageArgs) -> Result<RowPage> {
        let (mount, timeout) = (self.mount.clone(), self.timeout);
        self.read(move |c| {
            Box::pin(async move {
                let err = |e| my_error(e, &mount, timeout);
                let cols = columns(c, &a.table.name).await.map_err(err)?;
                let key = row_key(c, &a.table.name, &cols).await?;
                let after = a
                    .cursor
                    .as_deref()
                    .map(|raw| decode_key_cursor(raw, key.len()))
                    .transpose()?;
                let keys: Vec<String> = key.iter().map(|k| quote(k)).collect();
                let select: Vec<String> = keys
                    .iter()
                    .cloned()
                    .chain(cols.iter().map(|c| quote(&c.name)))
                    .collect();
                let mut sql = format!("SELECT {} FROM {}", select.join(", "), quote(&a.table.name));
                if after.is_some() {
                    let marks = vec!["?"; key.len()].join(", ");
                    sql.push_str(&format!(" WHERE ({}) > ({marks})", keys.join(", ")));
                }
                sql.push_str(&format!(
                    " ORDER BY {} LIMIT {}",
                    keys.join(", "),
                    a.page_size + 1
                ));
                let mut q = sqlx::query(&sql);
                for v in after.iter().flatten() {
                    q = bind_json(q, v).ok_or_else(|| {
                        Error::invalid_params(format!(
                            "cursor {:?} is not a cursor of this table",
                            a.cursor.as_deref().unwrap_or_default()
                        ))
                    })?;
                }
                let names: Vec<String> = cols.iter().map(|c| c.name.clone()).collect();
                let mut fill = PageFill::new(&a, &a.table.name, names, encode_key_cursor);
                let mut rows = q.fetch(&mut *c);
                while let Some(row) = rows.try_next().await.map_err(err)? {
                    if fill.full() {
                        break;
                    }
                    let k: Vec<Value> = (0..key.len())
                        .map(|i| value_json(&row, i))
                        .collect::<sqlx::Result<_>>()
                        .map_err(err)?;
                    let values: Vec<Value> = (key.len()..key.len() + cols.len())
                        .map(|i| value_json(&row, i))
                        .collect::<sqlx::Result<_>>()
                        .map_err(err)?;
                    if !fill.offer(k, values)? {
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
                let err = |e| my_error(e, &mount, timeout);
                let cols = columns(c, &table.name).await.map_err(err)?;
                let idx = indexes(c, &table.name).await.map_err(err)?;
                let pk: Vec<String> = idx
                    .iter()
                    .find(|(n, _, _)| n == "PRIMARY")
                    .map(|(_, _, k)| k.clone())
                    .unwrap_or_default();
                let columns: Vec<Value> = cols
                    .iter()
                    .map(|col| {
                        json!({
                            "name": col.name,
                            "type": col.column_type,
                            "nullable": col.nullable,
                            "default": col.default,
                            "primary_key": pk.iter().position(|k| *k == col.name).map(|p| p + 1),
                            "generated": col.extra.contains("GENERATED"),
                            "auto_increment": col.extra.contains("auto_increment"),
                        })
                    })
                    .collect();
                let mut doc = Map::new();
                doc.insert("name".into(), json!(table.name));
                doc.insert("type".into(), json!(kind.as_str()));
                doc.insert("columns".into(), Value::Array(columns));
                if kind == ObjectKind::Table {
                    doc.insert("primary_key".into(), json!(pk));
                    let rows = sqlx::query(
                        "SELECT k.CONSTRAINT_NAME, k.COLUMN_NAME, k.REFERENCED_TABLE_NAME, k.REFERENCED_COLUMN_NAME, \
                         r.UPDATE_RULE, r.DELETE_RULE FROM information_schema.KEY_COLUMN_USAGE k \
                         JOIN information_schema.REFERENTIAL_CONSTRAINTS r ON r.CONSTRAINT_SCHEMA = k.CONSTRAINT_SCHEMA \
                         AND r.CONSTRAINT_NAME = k.CONSTRAINT_NAME AND r.TABLE_NAME = k.TABLE_NAME \
                         WHERE k.TABLE_SCHEMA = DATABASE() AND k.TABLE_NAME = ? AND k.REFERENCED_TABLE_NAME IS NOT NULL \
                         ORDER BY k.CONSTRAINT_NAME, k.ORDINAL_POSITION",
                    )
                    .bind(&table.name)
                    .fetch_all(&mut *c)
                    .await
                    .map_err(err)?;
                    let mut fks: Vec<(String, Map<String, Value>)> = Vec::new();
                    for r in &rows {
                        let name = text_req(r, 0).map_err(err)?;
                        if fks.last().is_none_or(|(n, _)| *n != name) {
                            let mut m = Map::new();
                            m.insert("name".into(), json!(name));
                            m.insert("table".into(), json!(text_req(r, 2).map_err(err)?));
                            m.insert("from".into(), json!([]));
                            m.insert("to".into(), json!([]));
                            m.insert("on_update".into(), json!(text_req(r, 4).map_err(err)?));
                            m.insert("on_delete".into(), json!(text_req(r, 5).map_err(err)?));
                            fks.push((name.clone(), m));
                        }
                        if let Some((_, m)) = fks.last_mut() {
                            if let Some(Value::Array(a)) = m.get_mut("from") {
                                a.push(json!(text_req(r, 1).map_err(err)?));
                            }
                            if let Some(Value::Array(a)) = m.get_mut("to") {
                                a.push(json!(text_req(r, 3).map_err(err)?));
                            }
                        }
                    }
                    doc.insert(
                        "foreign_keys".into(),
                        Value::Array(fks.into_iter().map(|(_, m)| Value::Object(m)).collect()),
                    );
                    doc.insert(
                        "indexes".into(),
                        Value::Array(
                            idx.iter()
                                .map(|(n, unique, cols)| {
                                    json!({ "name": n, "unique": unique, "primary": n == "PRIMARY", "columns": cols })
                                })
                                .collect(),
                        ),
                    );
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
            guard::rewrite_placeholders(&sql, guard::Engine::MySql, Placeholders::Positional)?;
        let (mount, timeout) = (self.mount.clone(), self.timeout);
        self.read(move |c| {
            Box::pin(async move {
                let err = |e| my_error(e, &mount, timeout);
                let mut q = sqlx::query(&sql);
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
                let mut names: Option<Vec<String>> = None;
                let mut budget = RowBudget::new(max_bytes, 0);
                let mut rows = q.fetch(&mut *c);
                while let Some(row) = rows.try_next().await.map_err(err)? {
                    let cols = names.get_or_insert_with(|| {
                        row.columns().iter().map(|c| c.name().to_owned()).collect()
                    });
                    if budget.rows.is_empty() {
                        budget.used = query_envelope(&uri, cols, max_rows);
                    }
                    if budget.rows.len() == max_rows {
                        return Err(too_many_rows(&uri, max_rows));
                    }
                    let values: Vec<Value> = (0..row.len())
                        .map(|i| value_json(&row, i))
                        .collect::<sqlx::Result<_>>()
                        .map_err(err)?;
                    if !budget.push(Value::Array(values)) {
                        return Err(result_too_large(&uri, max_bytes));
                    }
                }
                drop(rows);
                let columns = match names {
                    Some(n) => n,
                    // No rows: the column names come from the statement itself.
                    None => c
                        .describe(sql.as_str())
                        .await
                        .map_err(err)?
                        .columns()
                        .iter()
                        .map(|col| col.name().to_owned())
                        .collect(),
                };
                Ok(QueryRows {
                    columns,
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
                    "SELECT DISTINCT CAST({col} AS CHAR) AS v FROM {} WHERE {col} IS NOT NULL \
                     AND LEFT(CAST({col} AS CHAR), CHAR_LENGTH(?)) = ? ORDER BY v LIMIT ?",
                    quote(&table.name)
                ))
                .bind(&prefix)
                .bind(&prefix)
                .bind(limit as u64 + 1)
                .fetch_all(&mut *c)
                .await
                .map_err(|e| my_error(e, &mount, timeout))?;
                let mut values: Vec<String> = rows
                    .iter()
                    .map(|r| text_req(r, 0))
                    .collect::<sqlx::Result<_>>()
                    .map_err(|e| my_error(e, &mount, timeout))?;
                let more = values.len() > limit;
                values.truncate(limit);
                Ok((values, more))
            })
        })
        .await
    }

    async fn view_sql(&self, view: TableRef, limit: usize, offset: u64) -> Result<String> {
        let (mount, timeout) = (self.mount.clone(), self.timeout);
        let name = view.name.clone();
        let cols = self
            .read(move |c| {
                Box::pin(async move {
                    columns(c, &name)
                        .await
                        .map_err(|e| my_error(e, &mount, timeout))
                })
            })
            .await?;
        let order: Vec<String> = cols
            .iter()
            .map(|c| format!("CAST({} AS BINARY)", quote(&c.name)))
            .collect();
        Ok(format!(
            "SELECT * FROM {} ORDER BY {} LIMIT {limit} OFFSET {offset}",
            quote(&view.name),
            order.join(", ")
        ))
    }

    async fn has_column(&self, table: TableRef, column: String) -> Result<bool> {
        let (mount, timeout) = (self.mount.clone(), self.timeout);
        self.read(move |c| {
            Box::pin(async move {
                let cols = columns(c, &table.name)
                    .await
                    .map_err(|e| my_error(e, &mount, timeout))?;
                Ok(cols.iter().any(|c| c.name == column))
            })
        })
        .await
    }
}
