//! SQLite introspection and reads on one guarded connection: the overview, table pages
//! (keyset on the rowid or primary key), table schemas and named queries. Identifiers come
//! from introspection and are always quoted; values are always bound.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use mcpr_core::{Error, Result};
use rusqlite::types::{Value as SqlValue, ValueRef};
use rusqlite::{Connection, params};
use serde_json::{Map, Value, json};

use crate::engine::{
    ObjectInfo, ObjectKind, PageFill, Param, QueryRows, RowBudget, RowPage, query_envelope,
    result_too_large, too_many_rows,
};

/// Quote an identifier for SQL text: the only way a name from introspection enters SQL.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A SQLite value as JSON: blobs as `{"base64": …}`, non-finite reals as strings.
pub(crate) fn to_json(v: ValueRef<'_>) -> Value {
    match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => json!(i),
        ValueRef::Real(f) => serde_json::Number::from_f64(f)
            .map_or_else(|| Value::String(f.to_string()), Value::Number),
        ValueRef::Text(t) => Value::String(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => json!({ "base64": STANDARD.encode(b) }),
    }
}

/// Errors from statements the provider built itself.
pub(crate) struct Ctx {
    pub(crate) timeout: std::time::Duration,
}

impl Ctx {
    pub(crate) fn err(&self, e: rusqlite::Error) -> Error {
        crate::error::sql_error(e, self.timeout)
    }
}

/// Internal tables (`sqlite_%`) are neither listed nor served.
const USER_OBJECTS: &str = "type IN ('table', 'view') AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'";

/// Whether `name` is a user table or view of the main database.
pub(crate) fn object_kind(db: &Connection, ctx: &Ctx, name: &str) -> Result<Option<ObjectKind>> {
    let mut st = db
        .prepare_cached(&format!(
            "SELECT type FROM main.sqlite_schema WHERE {USER_OBJECTS} AND name = ?1"
        ))
        .map_err(|e| ctx.err(e))?;
    let mut rows = st.query([name]).map_err(|e| ctx.err(e))?;
    let Some(row) = rows.next().map_err(|e| ctx.err(e))? else {
        return Ok(None);
    };
    let t: String = row.get(0).map_err(|e| ctx.err(e))?;
    Ok(Some(if t == "view" {
        ObjectKind::View
    } else {
        ObjectKind::Table
    }))
}

/// Up to `limit` user table names after `after` (or from `after` itself when `inclusive`), in
/// binary order.
pub(crate) fn table_names(
    db: &Connection,
    ctx: &Ctx,
    after: Option<&str>,
    inclusive: bool,
    limit: usize,
) -> Result<Vec<String>> {
    let op = if inclusive { ">=" } else { ">" };
    let sql = format!(
        "SELECT name FROM main.sqlite_schema WHERE {USER_OBJECTS} AND name {op} ?1 ORDER BY name LIMIT ?2"
    );
    let mut st = db.prepare_cached(&sql).map_err(|e| ctx.err(e))?;
    let rows = st
        .query_map(params![after.unwrap_or(""), limit as i64], |r| r.get(0))
        .map_err(|e| ctx.err(e))?;
    rows.collect::<rusqlite::Result<Vec<String>>>()
        .map_err(|e| ctx.err(e))
}

/// Table names starting with `prefix`: at most `limit`, and how many matched in all.
pub(crate) fn tables_with_prefix(
    db: &Connection,
    ctx: &Ctx,
    prefix: &str,
    limit: usize,
) -> Result<(Vec<String>, u32)> {
    let sql = format!(
        "SELECT name FROM main.sqlite_schema WHERE {USER_OBJECTS} AND substr(name, 1, length(?1)) = ?1 ORDER BY name"
    );
    let mut st = db.prepare_cached(&sql).map_err(|e| ctx.err(e))?;
    let mut rows = st.query([prefix]).map_err(|e| ctx.err(e))?;
    let (mut out, mut total) = (Vec::new(), 0u32);
    while let Some(r) = rows.next().map_err(|e| ctx.err(e))? {
        total += 1;
        if out.len() < limit {
            out.push(r.get(0).map_err(|e| ctx.err(e))?);
        }
    }
    Ok((out, total))
}

/// One column as introspected.
struct Column {
    name: String,
    decl_type: String,
    not_null: bool,
    default: Option<String>,
    pk: i64,
    hidden: i64,
}

fn columns(db: &Connection, ctx: &Ctx, table: &str) -> Result<Vec<Column>> {
    let mut st = db
        .prepare_cached("SELECT name, type, \"notnull\", dflt_value, pk, hidden FROM pragma_table_xinfo(?1, 'main') ORDER BY cid")
        .map_err(|e| ctx.err(e))?;
    let rows = st
        .query_map([table], |r| {
            Ok(Column {
                name: r.get(0)?,
                decl_type: r.get(1)?,
                not_null: r.get::<_, i64>(2)? != 0,
                default: r.get(3)?,
                pk: r.get(4)?,
                hidden: r.get(5)?,
            })
        })
        .map_err(|e| ctx.err(e))?;
    let cols = rows
        .collect::<rusqlite::Result<Vec<Column>>>()
        .map_err(|e| ctx.err(e))?;
    // hidden = 1 are virtual-table hidden columns; generated columns (2, 3) are real data.
    Ok(cols.into_iter().filter(|c| c.hidden != 1).collect())
}

fn without_rowid(db: &Connection, ctx: &Ctx, table: &str) -> Result<bool> {
    let mut st = db
        .prepare_cached("SELECT wr FROM pragma_table_list(?1) WHERE schema = 'main'")
        .map_err(|e| ctx.err(e))?;
    let mut rows = st.query([table]).map_err(|e| ctx.err(e))?;
    match rows.next().map_err(|e| ctx.err(e))? {
        Some(r) => Ok(r.get::<_, i64>(0).map_err(|e| ctx.err(e))? != 0),
        None => Ok(false),
    }
}

/// The columns a table page is ordered and resumed on, as SQL expressions.
fn row_key(db: &Connection, ctx: &Ctx, table: &str, cols: &[Column]) -> Result<Vec<String>> {
    if without_rowid(db, ctx, table)? {
        let mut pk: Vec<&Column> = cols.iter().filter(|c| c.pk > 0).collect();
        pk.sort_by_key(|c| c.pk);
        return Ok(pk.iter().map(|c| quote_ident(&c.name)).collect());
    }
    // A column may shadow a rowid alias; take the first alias no column uses.
    ["rowid", "_rowid_", "oid"]
        .into_iter()
        .find(|alias| !cols.iter().any(|c| c.name.eq_ignore_ascii_case(alias)))
        .map(|a| vec![a.to_owned()])
        .ok_or_else(|| {
            Error::invalid_params(format!(
                "table {table:?} has columns named rowid, _rowid_ and oid, so its rows cannot be paged"
            ))
        })
}

/// Encode the key of the last row served as a `cursor` value.
fn encode_cursor(key: &[SqlValue]) -> String {
    let parts: Vec<Value> = key
        .iter()
        .map(|v| match v {
            SqlValue::Null => Value::Null,
            SqlValue::Integer(i) => json!(i),
            SqlValue::Real(f) => json!({ "r": f }),
            SqlValue::Text(t) => json!(t),
            SqlValue::Blob(b) => json!({ "b": STANDARD.encode(b) }),
        })
        .collect();
    URL_SAFE_NO_PAD.encode(Value::Array(parts).to_string())
}

fn decode_cursor(raw: &str, width: usize) -> Result<Vec<SqlValue>> {
    let bad = || Error::invalid_params(format!("cursor {raw:?} is not a cursor of this table"));
    let bytes = URL_SAFE_NO_PAD.decode(raw).map_err(|_| bad())?;
    let Ok(Value::Array(parts)) = serde_json::from_slice::<Value>(&bytes) else {
        return Err(bad());
    };
    if parts.len() != width {
        return Err(bad());
    }
    parts
        .into_iter()
        .map(|p| match p {
            Value::Null => Ok(SqlValue::Null),
            Value::Number(n) => n.as_i64().map(SqlValue::Integer).ok_or_else(bad),
            Value::String(s) => Ok(SqlValue::Text(s)),
            Value::Object(o) => match (o.get("r"), o.get("b")) {
                (Some(r), None) => r.as_f64().map(SqlValue::Real).ok_or_else(bad),
                (None, Some(Value::String(b))) => {
                    STANDARD.decode(b).map(SqlValue::Blob).map_err(|_| bad())
                }
                _ => Err(bad()),
            },
            _ => Err(bad()),
        })
        .collect()
}

/// One page of a table's rows.
pub(crate) fn table_page(
    db: &Connection,
    ctx: &Ctx,
    a: &crate::engine::PageArgs,
) -> Result<RowPage> {
    let table = a.table.name.as_str();
    let cols = columns(db, ctx, table)?;
    let key = row_key(db, ctx, table, &cols)?;
    let after = a
        .cursor
        .as_deref()
        .map(|c| decode_cursor(c, key.len()))
        .transpose()?;
    let keys = key.join(", ");
    let select: Vec<String> = key
        .iter()
        .cloned()
        .chain(cols.iter().map(|c| quote_ident(&c.name)))
        .collect();
    let mut sql = format!(
        "SELECT {} FROM main.{}",
        select.join(", "),
        quote_ident(table)
    );
    let mut binds: Vec<SqlValue> = Vec::new();
    if let Some(after) = after {
        let marks: Vec<String> = (1..=key.len()).map(|i| format!("?{i}")).collect();
        sql.push_str(&format!(" WHERE ({keys}) > ({})", marks.join(", ")));
        binds.extend(after);
    }
    sql.push_str(&format!(" ORDER BY {keys} LIMIT {}", a.page_size + 1));
    let mut st = db.prepare(&sql).map_err(|e| ctx.err(e))?;
    let mut rows = st
        .query(rusqlite::params_from_iter(binds))
        .map_err(|e| ctx.err(e))?;
    let names: Vec<String> = cols.iter().map(|c| c.name.clone()).collect();
    let mut fill = PageFill::new(a, table, names, encode_cursor);
    while let Some(row) = rows.next().map_err(|e| ctx.err(e))? {
        if fill.full() {
            break;
        }
        let k: Vec<SqlValue> = (0..key.len())
            .map(|i| row.get::<_, SqlValue>(i))
            .collect::<rusqlite::Result<_>>()
            .map_err(|e| ctx.err(e))?;
        let values: Vec<Value> = (key.len()..key.len() + cols.len())
            .map(|i| row.get_ref(i).map(to_json))
            .collect::<rusqlite::Result<_>>()
            .map_err(|e| ctx.err(e))?;
        if !fill.offer(k, values)? {
            break;
        }
    }
    Ok(fill.finish())
}

/// Columns, types, nullability, keys and indexes of a table or view.
pub(crate) fn schema(db: &Connection, ctx: &Ctx, name: &str, kind: ObjectKind) -> Result<Value> {
    let cols = columns(db, ctx, name)?;
    let columns: Vec<Value> = cols
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "type": c.decl_type,
                "nullable": !c.not_null && c.pk == 0,
                "default": c.default,
                "primary_key": (c.pk > 0).then_some(c.pk),
                "generated": c.hidden >= 2,
            })
        })
        .collect();
    let mut doc = Map::new();
    doc.insert("name".into(), json!(name));
    doc.insert(
        "type".into(),
        json!(if kind == ObjectKind::View {
            "view"
        } else {
            "table"
        }),
    );
    doc.insert("columns".into(), Value::Array(columns));
    if kind == ObjectKind::Table {
        let mut pk: Vec<&Column> = cols.iter().filter(|c| c.pk > 0).collect();
        pk.sort_by_key(|c| c.pk);
        doc.insert(
            "primary_key".into(),
            json!(pk.iter().map(|c| &c.name).collect::<Vec<_>>()),
        );
        doc.insert("without_rowid".into(), json!(without_rowid(db, ctx, name)?));
        doc.insert("foreign_keys".into(), foreign_keys(db, ctx, name)?);
        doc.insert("indexes".into(), indexes(db, ctx, name)?);
    }
    Ok(Value::Object(doc))
}

fn foreign_keys(db: &Connection, ctx: &Ctx, table: &str) -> Result<Value> {
    let mut st = db
        .prepare_cached("SELECT id, \"table\", \"from\", \"to\", on_update, on_delete FROM pragma_foreign_key_list(?1, 'main') ORDER BY id, seq")
        .map_err(|e| ctx.err(e))?;
    let mut rows = st.query([table]).map_err(|e| ctx.err(e))?;
    let mut out: Vec<(i64, Map<String, Value>)> = Vec::new();
    while let Some(r) = rows.next().map_err(|e| ctx.err(e))? {
        let id: i64 = r.get(0).map_err(|e| ctx.err(e))?;
        let from: String = r.get(2).map_err(|e| ctx.err(e))?;
        // `to` is NULL when the key references the parent's primary key implicitly.
        let to: Option<String> = r.get(3).map_err(|e| ctx.err(e))?;
        if out.last().is_none_or(|(last, _)| *last != id) {
            let mut fk = Map::new();
            fk.insert(
                "table".into(),
                json!(r.get::<_, String>(1).map_err(|e| ctx.err(e))?),
            );
            fk.insert("from".into(), json!([]));
            fk.insert("to".into(), json!([]));
            fk.insert(
                "on_update".into(),
                json!(r.get::<_, String>(4).map_err(|e| ctx.err(e))?),
            );
            fk.insert(
                "on_delete".into(),
                json!(r.get::<_, String>(5).map_err(|e| ctx.err(e))?),
            );
            out.push((id, fk));
        }
        if let Some((_, fk)) = out.last_mut() {
            if let Some(Value::Array(a)) = fk.get_mut("from") {
                a.push(json!(from));
            }
            if let Some(Value::Array(a)) = fk.get_mut("to") {
                a.push(json!(to));
            }
        }
    }
    Ok(Value::Array(
        out.into_iter().map(|(_, m)| Value::Object(m)).collect(),
    ))
}

fn indexes(db: &Connection, ctx: &Ctx, table: &str) -> Result<Value> {
    let list: Vec<(String, bool, String, bool)> = {
        let mut st = db
            .prepare_cached("SELECT name, \"unique\", origin, partial FROM pragma_index_list(?1, 'main') ORDER BY name")
            .map_err(|e| ctx.err(e))?;
        let rows = st
            .query_map([table], |r| {
                Ok((
                    r.get(0)?,
                    r.get::<_, i64>(1)? != 0,
                    r.get(2)?,
                    r.get::<_, i64>(3)? != 0,
                ))
            })
            .map_err(|e| ctx.err(e))?;
        rows.collect::<rusqlite::Result<_>>()
            .map_err(|e| ctx.err(e))?
    };
    let mut out = Vec::new();
    for (name, unique, origin, partial) in list {
        let mut st = db
            .prepare_cached("SELECT name FROM pragma_index_info(?1, 'main') ORDER BY seqno")
            .map_err(|e| ctx.err(e))?;
        // Expression columns have no name (NULL).
        let cols = st
            .query_map([&name], |r| r.get::<_, Option<String>>(0))
            .map_err(|e| ctx.err(e))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| ctx.err(e))?;
        out.push(json!({
            "name": name, "unique": unique, "origin": origin, "partial": partial, "columns": cols,
        }));
    }
    Ok(Value::Array(out))
}

/// User tables and views (up to `limit` after `after`), each with a row estimate.
pub(crate) fn objects(
    db: &Connection,
    ctx: &Ctx,
    after: Option<&str>,
    limit: usize,
) -> Result<Vec<ObjectInfo>> {
    let has_stat1: bool = db
        .query_row(
            "SELECT count(*) FROM main.sqlite_schema WHERE type = 'table' AND name = 'sqlite_stat1'",
            [],
            |r| r.get::<_, i64>(0),
        )
        .map_err(|e| ctx.err(e))?
        > 0;
    let mut st = db
        .prepare_cached(&format!(
            "SELECT name, type FROM main.sqlite_schema WHERE {USER_OBJECTS} AND name > ?1 ORDER BY name LIMIT ?2"
        ))
        .map_err(|e| ctx.err(e))?;
    let objects: Vec<(String, String)> = st
        .query_map(params![after.unwrap_or(""), limit as i64], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .map_err(|e| ctx.err(e))?
        .collect::<rusqlite::Result<_>>()
        .map_err(|e| ctx.err(e))?;
    let mut out = Vec::new();
    for (name, kind) in objects {
        let (row_estimate, estimate_source) = if kind == "table" {
            row_estimate(db, ctx, &name, has_stat1)?
        } else {
            (None, None)
        };
        out.push(ObjectInfo {
            table: crate::engine::TableRef { schema: None, name },
            kind: if kind == "view" {
                ObjectKind::View
            } else {
                ObjectKind::Table
            },
            row_estimate,
            estimate_source,
        });
    }
    Ok(out)
}

/// The column names of a table or view, in order.
pub(crate) fn column_names(db: &Connection, ctx: &Ctx, table: &str) -> Result<Vec<String>> {
    Ok(columns(db, ctx, table)?
        .into_iter()
        .map(|c| c.name)
        .collect())
}

/// Whether `table` has a column `column`.
pub(crate) fn has_column(db: &Connection, ctx: &Ctx, table: &str, column: &str) -> Result<bool> {
    Ok(columns(db, ctx, table)?.iter().any(|c| c.name == column))
}

/// Distinct values of a column starting with `prefix` (binary comparison, bounded).
pub(crate) fn distinct_values(
    db: &Connection,
    ctx: &Ctx,
    table: &str,
    column: &str,
    prefix: &str,
    limit: usize,
) -> Result<(Vec<String>, bool)> {
    let col = quote_ident(column);
    let sql = format!(
        "SELECT DISTINCT CAST({col} AS TEXT) AS v FROM main.{} WHERE {col} IS NOT NULL AND substr(CAST({col} AS TEXT), 1, length(?1)) = ?1 ORDER BY v LIMIT ?2",
        quote_ident(table)
    );
    let mut st = db.prepare(&sql).map_err(|e| ctx.err(e))?;
    let mut values: Vec<String> = st
        .query_map(params![prefix, limit as i64 + 1], |r| r.get(0))
        .map_err(|e| ctx.err(e))?
        .collect::<rusqlite::Result<_>>()
        .map_err(|e| ctx.err(e))?;
    let more = values.len() > limit;
    values.truncate(limit);
    Ok((values, more))
}

/// A cheap row estimate: `sqlite_stat1` when ANALYZE ran, else the largest rowid (an upper
/// bound, O(log n)); never a full count, which would scan the table.
fn row_estimate(
    db: &Connection,
    ctx: &Ctx,
    table: &str,
    has_stat1: bool,
) -> Result<(Option<i64>, Option<&'static str>)> {
    if has_stat1 {
        let mut st = db
            .prepare_cached("SELECT stat FROM main.sqlite_stat1 WHERE tbl = ?1 ORDER BY idx IS NOT NULL LIMIT 1")
            .map_err(|e| ctx.err(e))?;
        let mut rows = st.query([table]).map_err(|e| ctx.err(e))?;
        if let Some(r) = rows.next().map_err(|e| ctx.err(e))? {
            let stat: String = r.get(0).map_err(|e| ctx.err(e))?;
            if let Some(n) = stat.split(' ').next().and_then(|n| n.parse().ok()) {
                return Ok((Some(n), Some("sqlite_stat1")));
            }
        }
    }
    let cols = columns(db, ctx, table)?;
    if without_rowid(db, ctx, table)? {
        return Ok((None, None));
    }
    let Ok(key) = row_key(db, ctx, table, &cols) else {
        return Ok((None, None));
    };
    let n: Option<i64> = db
        .query_row(
            &format!("SELECT max({}) FROM main.{}", key[0], quote_ident(table)),
            [],
            |r| r.get(0),
        )
        .map_err(|e| ctx.err(e))?;
    Ok((Some(n.unwrap_or(0)), Some("max_rowid")))
}

/// Run a named query with its parameters bound by name; more than `max_rows` rows or more
/// than `max_bytes` of JSON is an error, never a cut result.
pub(crate) fn run_query(
    db: &Connection,
    ctx: &Ctx,
    uri: &str,
    sql: &str,
    binds: &[(String, Param)],
    max_rows: usize,
    max_bytes: u64,
) -> Result<QueryRows> {
    let mut st = db.prepare_cached(sql).map_err(|e| ctx.err(e))?;
    for (name, value) in binds {
        let idx = st
            .parameter_index(&format!(":{name}"))
            .map_err(|e| ctx.err(e))?
            .ok_or_else(|| Error::internal(format!("query {uri}: no parameter :{name}")))?;
        let value = match value {
            Param::Text(t) => SqlValue::Text(t.clone()),
            Param::Integer(i) => SqlValue::Integer(*i),
        };
        st.raw_bind_parameter(idx, value).map_err(|e| ctx.err(e))?;
    }
    let names: Vec<String> = st.column_names().into_iter().map(str::to_owned).collect();
    let width = names.len();
    let mut budget = RowBudget::new(max_bytes, query_envelope(uri, &names, max_rows));
    let mut rows = st.raw_query();
    while let Some(row) = rows.next().map_err(|e| ctx.err(e))? {
        if budget.rows.len() == max_rows {
            return Err(too_many_rows(uri, max_rows));
        }
        let values: Vec<Value> = (0..width)
            .map(|i| row.get_ref(i).map(to_json))
            .collect::<rusqlite::Result<_>>()
            .map_err(|e| ctx.err(e))?;
        if !budget.push(Value::Array(values)) {
            return Err(result_too_large(uri, max_bytes));
        }
    }
    Ok(QueryRows {
        columns: names,
        rows: budget.rows,
    })
}
