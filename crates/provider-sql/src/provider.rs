//! [`SqlProvider`]: one database (SQLite, PostgreSQL or MySQL/MariaDB) behind the core
//! `Provider` trait. URIs, templates, limits and rendering (JSON or CSV) live here, the same
//! for every engine; what differs per engine is behind [`Engine`].

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use mcpr_core::{
    Capabilities, ChangeSink, Completion, CompletionRequest, Contents, ContentsBody, Error,
    ErrorKind, Page, PageRequest, Provider, ProviderInfo, ReadLimits, ResourceMeta, ResourceUri,
    Result, TemplateMeta, UriTemplate, WatchGuard,
};
use regex_automata::meta::Regex;
use serde_json::{Map, Value, json};

use crate::config::{NamedQuery, ParamSpec, ParamType, SqlConfig, SqlKind};
use crate::engine::{Engine, ObjectKind, PageArgs, Param, RowPage, TableRef};
use crate::guard;
use crate::uri::{Format, Target, encode_segment};
use crate::watch::{Trigger, Watches};

const JSON: &str = "application/json";
const CSV: &str = "text/csv";
/// Objects per overview block.
const OVERVIEW_BLOCK: usize = 1000;
/// Completion values per answer.
const COMPLETE_LIMIT: usize = 100;

/// Typed values for a query's `:name` placeholders.
type Binds = Vec<(String, Param)>;

/// A named query, checked and compiled at load.
struct Compiled {
    query: NamedQuery,
    /// `None` for a fixed URI.
    template: Option<UriTemplate>,
    patterns: BTreeMap<String, Regex>,
}

/// The `db://` provider for one database.
pub struct SqlProvider {
    inner: Arc<Inner>,
}

/// Everything a read needs; shared with the change watcher, which re-reads subscribed URIs.
pub(crate) struct Inner {
    config: SqlConfig,
    engine: Arc<dyn Engine>,
    info: ProviderInfo,
    templates: Vec<TemplateMeta>,
    queries: Vec<Compiled>,
    watches: Watches,
    /// The start-up checks still waiting for a database that was down at start.
    _checks_later: Option<crate::watch::AbortOnDrop>,
}

/// How long start-up waits for one attempt to reach a PostgreSQL or MySQL server: a server
/// that refuses (or says nothing for this long) leaves the mount not ready, and the checks
/// that need it run in the background, so the server starts serving at once.
const START_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// How long the background start-up checks wait between attempts, at first and at most.
const RECHECK_FIRST: std::time::Duration = std::time::Duration::from_secs(1);
const RECHECK_MAX: std::time::Duration = std::time::Duration::from_secs(30);

impl SqlProvider {
    #[cfg(test)]
    pub(crate) fn watching(&self) -> bool {
        self.inner.watches.running()
    }

    /// Open the database read-only and check the config and every named query (pre-filter,
    /// parameters, and a prepare on the database, so a query naming a missing table or
    /// refused by the guard fails here, not at the first read).
    ///
    /// A PostgreSQL or MySQL server that cannot be reached at start (one attempt, at most
    /// [`START_WAIT`]) neither fails nor holds this: the mount starts not ready, its reads
    /// answer "unavailable", the pool connects when the server is back, and the checks that
    /// need it run in the background until then (a broken named query is logged as an error
    /// then, and its reads answer the error).
    pub async fn new(config: SqlConfig) -> Result<Self> {
        config.validate()?;
        let dialect = match config.kind {
            SqlKind::Sqlite => guard::Engine::Sqlite,
            SqlKind::Postgres => guard::Engine::Postgres,
            SqlKind::MySql => guard::Engine::MySql,
        };
        let mut queries = Vec::new();
        for q in &config.queries {
            queries.push(compile(&config.name, q, dialect)?);
        }
        let mut pg: Option<Arc<crate::pg::Postgres>> = None;
        let (engine, trigger): (Arc<dyn Engine>, Trigger) = match config.kind {
            SqlKind::Sqlite => {
                let path = config.sqlite_path()?;
                let db = Arc::new(crate::sqlite::Sqlite::open(
                    path.clone(),
                    config.max_connections,
                    config.statement_timeout,
                )?);
                let probe = db.data_version_probe()?;
                (db, Trigger::Sqlite { path, probe })
            }
            SqlKind::Postgres => {
                let db = crate::pg::Postgres::connect_lazy(
                    &config.name,
                    &config.url,
                    config.max_connections,
                    config.statement_timeout,
                    config.default_schema.clone(),
                )?;
                let trigger = match &config.notify_channel {
                    Some(channel) => Trigger::Listen {
                        listener: db.listener(channel.clone()),
                    },
                    None => Trigger::Poll,
                };
                let db = Arc::new(db);
                pg = Some(db.clone());
                (db, trigger)
            }
            SqlKind::MySql => (
                Arc::new(crate::mysql::MySqlDb::connect_lazy(
                    &config.name,
                    &config.url,
                    config.max_connections,
                    config.statement_timeout,
                )?),
                Trigger::Poll,
            ),
        };
        // One attempt to reach a server engine, without the pool's retries: a database that
        // is down must not hold start-up (the pool would keep trying for its whole acquire
        // timeout). A database that answers is checked now, so a broken named query still
        // stops start-up.
        let deferred = match engine.reach(START_WAIT).await {
            Err(e) if e.kind == ErrorKind::Unavailable => Some(e),
            _ => match check_started(engine.as_ref(), pg.as_deref(), &config).await {
                Ok(()) => None,
                Err(e) if e.kind == ErrorKind::Unavailable && config.kind != SqlKind::Sqlite => {
                    Some(e)
                }
                Err(e) => return Err(e),
            },
        };
        let checks_later = deferred.map(|e| {
            tracing::warn!(
                mount = %config.name,
                url = %config.redacted_url(),
                "database unavailable at start; the mount is not ready until it answers, and its named queries are checked then: {}",
                e.message
            );
            crate::watch::AbortOnDrop(tokio::spawn(check_when_back(
                engine.clone(),
                pg.clone(),
                config.clone(),
            )))
        });
        let templates = templates(&config, &queries, engine.default_schema().is_some());
        let name = &config.name;
        let mut uri_prefixes = vec![format!("db://{name}")];
        for c in &queries {
            let p = match &c.template {
                Some(t) => t.literal_prefix().to_owned(),
                None => c.query.uri.clone(),
            };
            if !uri_prefixes.contains(&p) {
                uri_prefixes.push(p);
            }
        }
        let info = ProviderInfo {
            kind: config.kind.as_str(),
            label: format!("{name} ({})", config.redacted_url()),
            uri_prefixes,
            capabilities: Capabilities::ALL,
            cache: config.cache,
        };
        let poll = config.poll_interval;
        Ok(Self {
            inner: Arc::new_cyclic(|weak| Inner {
                watches: Watches::new(&config.name, weak.clone(), trigger, poll),
                config,
                engine,
                info,
                templates,
                queries,
                _checks_later: checks_later,
            }),
        })
    }
}

/// The start-up checks that need the database ([`check_against_db`]), then the warning
/// about a PostgreSQL role with powers beyond reading.
async fn check_started(
    engine: &dyn Engine,
    pg: Option<&crate::pg::Postgres>,
    config: &SqlConfig,
) -> Result<()> {
    check_against_db(engine, config).await?;
    if let Some(db) = pg
        && let Ok(powers) = db.risky_role().await
        && !powers.is_empty()
    {
        tracing::warn!(
            mount = %config.name,
            "the postgres role of this mount is {}: reads are still read-only transactions, but use a role with SELECT only (see the db:// docs)",
            powers.join(", ")
        );
    }
    Ok(())
}

/// The start-up checks of a mount whose database was down at start, made once it answers:
/// tried again with a growing pause while it is unavailable; a broken named query is then
/// logged as an error (start-up is long over; reads of that query answer the same error).
async fn check_when_back(
    engine: Arc<dyn Engine>,
    pg: Option<Arc<crate::pg::Postgres>>,
    config: SqlConfig,
) {
    let mut pause = RECHECK_FIRST;
    loop {
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(RECHECK_MAX);
        if let Err(e) = engine.reach(START_WAIT).await
            && e.kind == ErrorKind::Unavailable
        {
            continue;
        }
        match check_started(engine.as_ref(), pg.as_deref(), &config).await {
            Ok(()) => {
                tracing::info!(mount = %config.name, "the database answers; the mount's named queries are checked");
                return;
            }
            Err(e) if e.kind == ErrorKind::Unavailable => {}
            Err(e) => {
                tracing::error!(mount = %config.name, "the database answers, but a check failed: {}", e.message);
                return;
            }
        }
    }
}

/// The checks that need the database: every named query prepares, and every `from` column
/// of a parameter exists.
async fn check_against_db(engine: &dyn Engine, config: &SqlConfig) -> Result<()> {
    engine.ping().await?;
    for q in &config.queries {
        engine.check_query(&q.uri, &q.sql).await?;
        for (name, spec) in &q.params {
            if let Some((table, column)) = &spec.complete_from {
                let t = table_ref(engine, table);
                if !engine.has_column(t, column.clone()).await? {
                    return Err(Error::invalid_params(format!(
                        "query {}: params.{name}.from names {table}.{column}, which is not a column this mount can read",
                        q.uri
                    )));
                }
            }
        }
    }
    Ok(())
}

/// A `table` or `schema.table` from config as a table reference.
fn table_ref(engine: &dyn Engine, spec: &str) -> TableRef {
    match engine.default_schema() {
        Some(default) => match spec.split_once('.') {
            Some((s, t)) => TableRef {
                schema: Some(s.to_owned()),
                name: t.to_owned(),
            },
            None => TableRef {
                schema: Some(default.to_owned()),
                name: spec.to_owned(),
            },
        },
        None => TableRef {
            schema: None,
            name: spec.to_owned(),
        },
    }
}

fn templates(config: &SqlConfig, queries: &[Compiled], schemas: bool) -> Vec<TemplateMeta> {
    let name = &config.name;
    let rows_description = format!(
        "JSON (default) or CSV (`format=csv`): at most {} rows and {} bytes per page, ordered by the primary key; `next` (JSON) or `_meta.next` (CSV) is the URI of the following page.",
        config.page_size, config.max_bytes
    );
    let mut templates = vec![
        TemplateMeta {
            uri_template: format!("db://{name}{{?cursor}}"),
            name: format!("sql-overview:{name}"),
            title: Some(format!("Tables and views of database {name}")),
            description: Some("JSON: each table and view with its URIs and a row estimate; `cursor` continues after `next`.".into()),
            mime_type: Some(JSON.into()),
        },
        TemplateMeta {
            uri_template: format!("db://{name}/tables/{{table}}{{?cursor,format}}"),
            name: format!("sql-table:{name}"),
            title: Some(format!("Rows of a table of {name}")),
            description: Some(rows_description.clone()),
            mime_type: Some(JSON.into()),
        },
        TemplateMeta {
            uri_template: format!("db://{name}/tables/{{table}}/schema"),
            name: format!("sql-schema:{name}"),
            title: Some(format!("Schema of a table or view of {name}")),
            description: Some("JSON: columns (type, nullability, default, primary key position), primary key, foreign keys, indexes.".into()),
            mime_type: Some(JSON.into()),
        },
    ];
    if schemas {
        templates.push(TemplateMeta {
            uri_template: format!(
                "db://{name}/schemas/{{schema}}/tables/{{table}}{{?cursor,format}}"
            ),
            name: format!("sql-schema-table:{name}"),
            title: Some(format!("Rows of a table in any schema of {name}")),
            description: Some(rows_description),
            mime_type: Some(JSON.into()),
        });
        templates.push(TemplateMeta {
            uri_template: format!("db://{name}/schemas/{{schema}}/tables/{{table}}/schema"),
            name: format!("sql-schema-schema:{name}"),
            title: Some(format!("Schema of a table or view in any schema of {name}")),
            description: Some("JSON: columns, primary key, foreign keys, indexes.".into()),
            mime_type: Some(JSON.into()),
        });
    }
    for c in queries {
        if c.template.is_some() {
            templates.push(TemplateMeta {
                uri_template: c.query.uri.clone(),
                name: format!("sql-query:{}", c.query.uri),
                title: Some(format!("Named query {}", c.query.uri)),
                description: c.query.description.clone(),
                mime_type: Some(JSON.into()),
            });
        }
    }
    templates
}

/// Check one named query at load: URI form, pre-filter, and parameters on both sides.
fn compile(mount: &str, q: &NamedQuery, dialect: guard::Engine) -> Result<Compiled> {
    let bad = |why: String| Error::invalid_params(format!("query {}: {why}", q.uri));
    if !q.uri.starts_with("db://") || q.uri.contains('?') || q.uri.contains('#') {
        return Err(bad(
            "the URI must start with db:// and have no query or fragment".into(),
        ));
    }
    let own = format!("db://{mount}");
    if q.uri == own
        || q.uri.starts_with(&format!("{own}/tables"))
        || q.uri.starts_with(&format!("{own}/schemas"))
    {
        return Err(bad(format!(
            "the URI collides with the table URIs of mount {mount:?}"
        )));
    }
    let placeholders = guard::check_read_only(&q.sql, dialect).map_err(|e| bad(e.message))?;
    let template = if q.uri.contains('{') {
        let t = UriTemplate::parse(&q.uri).map_err(|e| bad(format!("bad template: {e}")))?;
        let simple = t.parts().iter().all(|p| match p {
            mcpr_core::template::Part::Literal(_) => true,
            mcpr_core::template::Part::Expr(e) => {
                e.op == mcpr_core::template::Operator::Simple && e.vars.len() == 1
            }
        });
        if !simple {
            return Err(bad(
                "only simple one-variable {name} expressions are allowed".into(),
            ));
        }
        Some(t)
    } else {
        None
    };
    let vars: std::collections::BTreeSet<String> = template
        .as_ref()
        .map(|t| t.variables().into_iter().map(str::to_owned).collect())
        .unwrap_or_default();
    if vars != placeholders {
        return Err(bad(format!(
            "the URI variables {vars:?} and the SQL placeholders {placeholders:?} must be the same"
        )));
    }
    if let Some(extra) = q.params.keys().find(|k| !vars.contains(*k)) {
        return Err(bad(format!("params.{extra} names no URI variable")));
    }
    let mut patterns = BTreeMap::new();
    for (name, spec) in &q.params {
        if let Some(p) = &spec.pattern {
            let re = Regex::new(&format!("^(?:{p})$"))
                .map_err(|e| bad(format!("params.{name}.pattern: {e}")))?;
            patterns.insert(name.clone(), re);
        }
        if spec.kind == ParamType::Integer
            && let Some(v) = spec
                .allowed
                .iter()
                .flatten()
                .find(|v| v.parse::<i64>().is_err())
        {
            return Err(bad(format!(
                "params.{name}: enum value {v:?} is not an integer"
            )));
        }
    }
    Ok(Compiled {
        query: q.clone(),
        template,
        patterns,
    })
}

/// Check and type one parameter value; the message says what was expected.
fn check_param(
    uri: &str,
    name: &str,
    value: &str,
    spec: &ParamSpec,
    re: Option<&Regex>,
) -> Result<Param> {
    let bad = |why: String| {
        Error::invalid_params(format!("query {uri}: parameter {name} = {value:?} {why}"))
    };
    if let Some(allowed) = &spec.allowed
        && !allowed.iter().any(|a| a == value)
    {
        return Err(bad(format!("is not one of {allowed:?}")));
    }
    if let Some(re) = re
        && !re.is_match(value)
    {
        return Err(bad(format!(
            "does not match the pattern {:?}",
            spec.pattern.as_deref().unwrap_or_default()
        )));
    }
    match spec.kind {
        ParamType::Text => Ok(Param::Text(value.to_owned())),
        ParamType::Integer => value
            .parse::<i64>()
            .map(Param::Integer)
            .map_err(|_| bad("is not an integer".into())),
    }
}

/// A list position: section byte, then a table position or a query index.
fn position(section: u8, tail: &[u8]) -> Vec<u8> {
    let mut p = vec![section];
    p.extend_from_slice(tail);
    p
}

const SEC_OVERVIEW: u8 = 0;
const SEC_TABLE: u8 = 1;
const SEC_SCHEMA: u8 = 2;
const SEC_QUERY: u8 = 3;

/// A CSV field (RFC 4180): quoted when it holds a separator, quote or line break. Strings
/// are written as they are, NULL as an empty field, anything else as compact JSON.
fn csv_field(v: &Value, out: &mut String) {
    let text = match v {
        Value::Null => return,
        Value::String(s) => s.clone(),
        Value::Object(o) if o.len() == 1 && o.contains_key("base64") => {
            o["base64"].as_str().unwrap_or_default().to_owned()
        }
        other => other.to_string(),
    };
    if text.contains([',', '"', '\n', '\r']) {
        out.push('"');
        out.push_str(&text.replace('"', "\"\""));
        out.push('"');
    } else {
        out.push_str(&text);
    }
}

fn csv(columns: &[String], rows: &[Value]) -> String {
    let mut out = String::new();
    let line = |fields: &mut dyn Iterator<Item = Value>, out: &mut String| {
        for (i, f) in fields.enumerate() {
            if i > 0 {
                out.push(',');
            }
            csv_field(&f, out);
        }
        out.push_str("\r\n");
    };
    line(
        &mut columns.iter().map(|c| Value::String(c.clone())),
        &mut out,
    );
    for r in rows {
        if let Value::Array(cells) = r {
            line(&mut cells.iter().cloned(), &mut out);
        }
    }
    out
}

impl Inner {
    pub(crate) fn engine(&self) -> &dyn Engine {
        self.engine.as_ref()
    }

    /// A table's name as shown: schema-qualified only outside the default schema.
    fn shown(&self, t: &TableRef) -> String {
        match (&t.schema, self.engine.default_schema()) {
            (Some(s), Some(d)) if s != d => t.display(),
            _ => t.name.clone(),
        }
    }

    /// The URI of a table's rows: the short form for the default schema (or no schema).
    fn table_uri(&self, t: &TableRef) -> String {
        let name = &self.config.name;
        match (&t.schema, self.engine.default_schema()) {
            (Some(s), Some(d)) if s != d => format!(
                "db://{name}/schemas/{}/tables/{}",
                encode_segment(s),
                encode_segment(&t.name)
            ),
            _ => format!("db://{name}/tables/{}", encode_segment(&t.name)),
        }
    }

    /// The table a URI's schema and table segments mean; `None` when this engine has no
    /// schemas but the URI names one.
    fn resolve(&self, schema: Option<String>, table: String) -> Option<TableRef> {
        match (schema, self.engine.default_schema()) {
            (Some(s), Some(_)) => Some(TableRef {
                schema: Some(s),
                name: table,
            }),
            (None, Some(d)) => Some(TableRef {
                schema: Some(d.to_owned()),
                name: table,
            }),
            (None, None) => Some(TableRef {
                schema: None,
                name: table,
            }),
            (Some(_), None) => None,
        }
    }

    /// The named query `uri` addresses, with its checked, typed bindings.
    fn match_query(&self, uri: &ResourceUri) -> Result<Option<(usize, Binds)>> {
        let path = uri.without_query();
        // A fixed URI wins over a template that also matches it.
        if let Some(i) = self
            .queries
            .iter()
            .position(|c| c.template.is_none() && c.query.uri == path)
        {
            return Ok(Some((i, Vec::new())));
        }
        for (i, c) in self.queries.iter().enumerate() {
            let Some(t) = &c.template else { continue };
            let Some(vars) = t.matches(path) else {
                continue;
            };
            let mut binds = Vec::new();
            for (name, value) in vars {
                let spec = c.query.params.get(&name).cloned().unwrap_or_default();
                binds.push((
                    name.clone(),
                    check_param(&c.query.uri, &name, &value, &spec, c.patterns.get(&name))?,
                ));
            }
            return Ok(Some((i, binds)));
        }
        Ok(None)
    }

    /// The overview document.
    async fn overview(&self, cursor: Option<String>) -> Result<Value> {
        let name = &self.config.name;
        let after = match cursor {
            Some(raw) => Some(
                URL_SAFE_NO_PAD
                    .decode(&raw)
                    .ok()
                    .and_then(|p| {
                        TableRef::from_position(&p, self.engine.default_schema().is_some())
                    })
                    .ok_or_else(|| {
                        Error::invalid_params(format!("cursor {raw:?} is not an overview cursor"))
                    })?,
            ),
            None => None,
        };
        let mut objects = self.engine.objects(after, OVERVIEW_BLOCK + 1).await?;
        let more = objects.len() > OVERVIEW_BLOCK;
        objects.truncate(OVERVIEW_BLOCK);
        let next = match (more, objects.last()) {
            (true, Some(last)) => json!(format!(
                "db://{name}?cursor={}",
                URL_SAFE_NO_PAD.encode(last.table.position())
            )),
            _ => Value::Null,
        };
        let items: Vec<Value> = objects
            .iter()
            .map(|o| {
                let base = self.table_uri(&o.table);
                let mut m = Map::new();
                m.insert("name".into(), json!(o.table.name));
                if let Some(s) = &o.table.schema {
                    m.insert("schema".into(), json!(s));
                }
                m.insert("type".into(), json!(o.kind.as_str()));
                m.insert("uri".into(), json!(base));
                m.insert("schema_uri".into(), json!(format!("{base}/schema")));
                m.insert("row_estimate".into(), json!(o.row_estimate));
                m.insert("row_estimate_source".into(), json!(o.estimate_source));
                Value::Object(m)
            })
            .collect();
        Ok(json!({
            "database": name,
            "engine": self.config.kind.as_str(),
            "objects": items,
            "next": next,
        }))
    }

    /// Read `uri` as the provider serves it: one text item, JSON or CSV.
    pub(crate) async fn read(&self, uri: &ResourceUri, max_bytes: u64) -> Result<Contents> {
        let max_bytes = max_bytes.min(self.config.max_bytes);
        let (text, mime, meta) = if let Some((i, binds)) = self.match_query(uri)? {
            if uri.query().is_some() {
                return Err(Error::invalid_params(
                    "named queries take no query parameters",
                ));
            }
            let q = &self.queries[i].query;
            let rows = self
                .engine
                .run_query(
                    q.uri.clone(),
                    q.sql.clone(),
                    binds,
                    self.config.max_rows,
                    max_bytes,
                )
                .await?;
            let doc = json!({
                "query": q.uri,
                "columns": rows.columns,
                "row_count": rows.rows.len(),
                "max_rows": self.config.max_rows,
                "rows": rows.rows,
            });
            (doc.to_string(), JSON, None)
        } else {
            match crate::uri::parse(&self.config.name, uri)? {
                Target::Overview { cursor } => {
                    (self.overview(cursor).await?.to_string(), JSON, None)
                }
                Target::Schema { schema, table } => {
                    let t = self
                        .resolve(schema, table)
                        .ok_or_else(|| Error::not_found(uri.as_str()))?;
                    let kind = self
                        .engine
                        .object_kind(t.clone())
                        .await?
                        .ok_or_else(|| Error::not_found(uri.as_str()))?;
                    (self.engine.schema(t, kind).await?.to_string(), JSON, None)
                }
                Target::Table {
                    schema,
                    table,
                    cursor,
                    format,
                } => {
                    let t = self
                        .resolve(schema, table)
                        .ok_or_else(|| Error::not_found(uri.as_str()))?;
                    let page = match self.engine.object_kind(t.clone()).await? {
                        Some(ObjectKind::Table) => {
                            self.engine
                                .table_page(PageArgs {
                                    table: t.clone(),
                                    cursor,
                                    page_size: self.config.page_size,
                                    max_bytes,
                                })
                                .await?
                        }
                        Some(ObjectKind::View) => {
                            self.view_page(uri, &t, cursor, max_bytes).await?
                        }
                        None => return Err(Error::not_found(uri.as_str())),
                    };
                    self.render_page(uri, &t, page, format)
                }
            }
        };
        if text.len() as u64 > max_bytes {
            return Err(Error::new(
                ErrorKind::TooLarge,
                format!("the result is larger than the read limit of {max_bytes} bytes"),
            )
            .with_detail("max_bytes", max_bytes));
        }
        Ok(Contents {
            uri: uri.as_str().to_owned(),
            mime_type: Some(mime.into()),
            body: ContentsBody::Text(text),
            meta,
        })
    }

    /// One page of a view: ordered by every column, resumed by position (the cursor is the
    /// offset). Deep pages cost the rows before them, which is why tables use keys instead.
    async fn view_page(
        &self,
        uri: &ResourceUri,
        t: &TableRef,
        cursor: Option<String>,
        max_bytes: u64,
    ) -> Result<RowPage> {
        let offset = match cursor.as_deref() {
            None => 0,
            Some(raw) => crate::engine::decode_key_cursor(raw, 1)?[0]
                .as_u64()
                .ok_or_else(|| {
                    Error::invalid_params(format!("cursor {raw:?} is not a cursor of this view"))
                })?,
        };
        let size = self.config.page_size;
        let sql = self.engine.view_sql(t.clone(), size + 1, offset).await?;
        let mut rows = self
            .engine
            .run_query(uri.without_query().to_owned(), sql, Vec::new(), size + 1, max_bytes)
            .await
            .map_err(|e| {
                if e.kind == ErrorKind::TooLarge {
                    Error::new(
                        ErrorKind::TooLarge,
                        format!(
                            "a page of {size} rows of view {} is larger than the read limit of {max_bytes} bytes; lower page_size",
                            self.shown(t)
                        ),
                    )
                    .with_detail("max_bytes", max_bytes)
                } else {
                    e
                }
            })?;
        let more = rows.rows.len() > size;
        rows.rows.truncate(size);
        Ok(RowPage {
            columns: rows.columns,
            next_cursor: more
                .then(|| crate::engine::encode_key_cursor(&[Value::from(offset + size as u64)])),
            rows: rows.rows,
        })
    }

    fn render_page(
        &self,
        uri: &ResourceUri,
        t: &TableRef,
        page: RowPage,
        format: Format,
    ) -> (String, &'static str, Option<Map<String, Value>>) {
        let base = uri.without_query();
        let next = page.next_cursor.as_ref().map(|c| {
            let mut n = format!("{base}?cursor={c}");
            if format == Format::Csv {
                n.push_str("&format=csv");
            }
            n
        });
        match format {
            Format::Json => (
                json!({
                    "table": self.shown(t),
                    "columns": page.columns,
                    "row_count": page.rows.len(),
                    "page_size": self.config.page_size,
                    "max_bytes": self.config.max_bytes,
                    "next": next,
                    "rows": page.rows,
                })
                .to_string(),
                JSON,
                None,
            ),
            Format::Csv => {
                let mut meta = Map::new();
                meta.insert("table".into(), json!(self.shown(t)));
                meta.insert("row_count".into(), json!(page.rows.len()));
                meta.insert("page_size".into(), json!(self.config.page_size));
                meta.insert("next".into(), json!(next));
                (csv(&page.columns, &page.rows), CSV, Some(meta))
            }
        }
    }
}

#[async_trait]
impl Provider for SqlProvider {
    fn info(&self) -> &ProviderInfo {
        &self.inner.info
    }

    async fn ready(&self) -> bool {
        self.readiness().await.is_ok()
    }

    async fn readiness(&self) -> Result<()> {
        self.inner.engine.ping().await
    }

    async fn list(&self, page: PageRequest) -> Result<Page<ResourceMeta>> {
        let inner = &self.inner;
        let schemas = inner.engine.default_schema().is_some();
        let limit = page.limit.max(1);
        let bad = || {
            Error::new(
                ErrorKind::InvalidCursor,
                "list cursor does not name a position",
            )
        };
        let (section, tail) = match page.after.as_deref() {
            None => (None, &[][..]),
            Some([s, tail @ ..]) if *s <= SEC_QUERY => (Some(*s), tail),
            Some(_) => return Err(bad()),
        };
        let name = inner.config.name.clone();
        let mut items: Vec<(Vec<u8>, ResourceMeta)> = Vec::new();
        if section.is_none() {
            items.push((
                position(SEC_OVERVIEW, b""),
                ResourceMeta {
                    uri: format!("db://{name}"),
                    name: name.clone(),
                    title: Some(format!("Database {name}")),
                    description: Some("Tables and views with row estimates".into()),
                    mime_type: Some(JSON.into()),
                    ..Default::default()
                },
            ));
        }
        if items.len() <= limit && section.is_none_or(|s| s < SEC_QUERY) {
            let after = match section {
                Some(SEC_TABLE | SEC_SCHEMA) => {
                    Some(TableRef::from_position(tail, schemas).ok_or_else(bad)?)
                }
                _ => None,
            };
            // After a table's rows entry, its schema entry comes next.
            let inclusive = section == Some(SEC_TABLE);
            // A database that is down fails the page rather than listing it without its
            // tables as if it had none: the server then leaves this mount out of the listing
            // and says so (`_meta`, log, metric), and goes on with the other mounts.
            let tables = inner.engine.tables(after, inclusive, limit + 1).await?;
            for t in tables {
                let base = inner.table_uri(&t);
                let pos = t.position();
                let shown = inner.shown(&t);
                let skip_rows =
                    inclusive && page.after.as_deref() == Some(&position(SEC_TABLE, &pos)[..]);
                if !skip_rows {
                    items.push((
                        position(SEC_TABLE, &pos),
                        ResourceMeta {
                            uri: base.clone(),
                            name: shown.clone(),
                            title: Some(format!("Rows of {shown}")),
                            description: Some(format!(
                                "Rows of {shown}, {} per page",
                                inner.config.page_size
                            )),
                            mime_type: Some(JSON.into()),
                            ..Default::default()
                        },
                    ));
                }
                items.push((
                    position(SEC_SCHEMA, &pos),
                    ResourceMeta {
                        uri: format!("{base}/schema"),
                        name: format!("{shown} schema"),
                        title: Some(format!("Schema of {shown}")),
                        description: Some("Columns, keys and indexes".into()),
                        mime_type: Some(JSON.into()),
                        ..Default::default()
                    },
                ));
                if items.len() > limit {
                    break;
                }
            }
        }
        if items.len() <= limit {
            let first = match section {
                Some(SEC_QUERY) => {
                    let s = std::str::from_utf8(tail).map_err(|_| bad())?;
                    s.parse::<usize>().map_err(|_| bad())? + 1
                }
                _ => 0,
            };
            for (i, c) in inner.queries.iter().enumerate().skip(first) {
                if c.template.is_some() {
                    continue;
                }
                items.push((
                    position(SEC_QUERY, i.to_string().as_bytes()),
                    ResourceMeta {
                        uri: c.query.uri.clone(),
                        name: c.query.uri.clone(),
                        title: Some(format!("Named query {}", c.query.uri)),
                        description: c.query.description.clone(),
                        mime_type: Some(JSON.into()),
                        ..Default::default()
                    },
                ));
                if items.len() > limit {
                    break;
                }
            }
        }
        Ok(Page::from_lookahead(items, limit))
    }

    async fn read(&self, uri: &ResourceUri, limits: &ReadLimits) -> Result<mcpr_core::ReadOutput> {
        self.inner
            .read(uri, limits.max_bytes)
            .await
            .map(|c| vec![c].into())
            .map_err(|e| {
                if e.uri.is_none() {
                    e.with_uri(uri.as_str())
                } else {
                    e
                }
            })
    }

    fn templates(&self) -> &[TemplateMeta] {
        &self.inner.templates
    }

    async fn complete(&self, req: CompletionRequest) -> Result<Completion> {
        let inner = &self.inner;
        let t = &inner.templates[mcpr_core::template_index(&inner.templates, &req.template)?];
        // Only the built-in table templates complete table names; a query variable called
        // `table` completes from its enum like any other.
        let builtin = [
            "sql-table:",
            "sql-schema:",
            "sql-schema-table:",
            "sql-schema-schema:",
        ]
        .iter()
        .any(|p| t.name.starts_with(p));
        if builtin && req.argument == "schema" {
            let (values, total) = inner
                .engine
                .schemas_with_prefix(req.value.clone(), COMPLETE_LIMIT)
                .await?;
            return Ok(Completion {
                has_more: total as usize > values.len(),
                values,
                total: Some(total),
            });
        }
        if builtin && req.argument == "table" {
            let schema = req.context.get("schema").cloned();
            let (values, total) = inner
                .engine
                .tables_with_prefix(schema, req.value.clone(), COMPLETE_LIMIT)
                .await?;
            return Ok(Completion {
                has_more: total as usize > values.len(),
                values,
                total: Some(total),
            });
        }
        let q = inner.queries.iter().find(|c| c.query.uri == req.template);
        let spec = q.and_then(|c| c.query.params.get(&req.argument));
        if let Some((table, column)) = spec.and_then(|s| s.complete_from.clone()) {
            let t = table_ref(inner.engine.as_ref(), &table);
            let (mut values, more) = inner
                .engine
                .distinct_values(t, column, req.value.clone(), COMPLETE_LIMIT)
                .await?;
            // Offer only what the parameter's own checks would accept.
            if let Some(allowed) = spec.and_then(|s| s.allowed.as_ref()) {
                values.retain(|v| allowed.contains(v));
            }
            if let Some(re) = q.and_then(|c| c.patterns.get(&req.argument)) {
                values.retain(|v| re.is_match(v));
            }
            return Ok(Completion {
                total: (!more).then_some(values.len() as u32),
                values,
                has_more: more,
            });
        }
        let allowed = spec.and_then(|s| s.allowed.clone()).unwrap_or_default();
        let values: Vec<String> = allowed
            .into_iter()
            .filter(|v| v.starts_with(&req.value))
            .collect();
        let total = values.len() as u32;
        Ok(Completion {
            has_more: values.len() > COMPLETE_LIMIT,
            values: values.into_iter().take(COMPLETE_LIMIT).collect(),
            total: Some(total),
        })
    }

    async fn watch(&self, uri: &ResourceUri, sink: ChangeSink) -> Result<WatchGuard> {
        // The URI must be one this mount serves (a read error other than "not found" is
        // fine: the resource may appear later, and then it changed).
        let first = self.inner.read(uri, self.inner.config.max_bytes).await;
        if let Err(e) = &first
            && matches!(e.kind, ErrorKind::InvalidParams)
        {
            return Err(e.clone().with_uri(uri.as_str()));
        }
        Ok(self.inner.watches.add_resource(uri.clone(), sink, &first))
    }

    async fn watch_list(&self, sink: ChangeSink) -> Result<WatchGuard> {
        let first = crate::watch::catalog(self.inner.engine.as_ref()).await.ok();
        Ok(self.inner.watches.add_list(sink, first))
    }
}
