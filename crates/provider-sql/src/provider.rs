//! [`SqlProvider`]: one SQLite database, implementing the core `Provider` trait.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use mcpr_core::{
    Capabilities, Completion, CompletionRequest, Contents, ContentsBody, Error, ErrorKind, Page,
    PageRequest, Provider, ProviderInfo, ReadLimits, ResourceMeta, ResourceUri, Result,
    TemplateMeta, UriTemplate,
};
use regex_automata::meta::Regex;
use rusqlite::types::Value as SqlValue;

use crate::config::{NamedQuery, ParamSpec, ParamType, SqlConfig};
use crate::conn::Pool;
use crate::db::{self, Ctx, ObjectKind};
use crate::uri::{Target, encode_segment};

const JSON: &str = "application/json";
/// Objects per overview block.
const OVERVIEW_BLOCK: usize = 1000;

/// Typed values for a query's `:name` placeholders.
type Binds = Vec<(String, SqlValue)>;

/// A named query, checked and compiled at load.
struct Compiled {
    query: NamedQuery,
    /// `None` for a fixed URI.
    template: Option<UriTemplate>,
    patterns: BTreeMap<String, Regex>,
}

/// The `db://` provider for one SQLite database.
pub struct SqlProvider {
    config: SqlConfig,
    pool: Arc<Pool>,
    info: ProviderInfo,
    templates: Vec<TemplateMeta>,
    queries: Vec<Compiled>,
}

impl SqlProvider {
    /// Open the database read-only and check the config and every named query (pre-filter,
    /// parameters, and a prepare on the guarded connection, so a query naming a missing
    /// table or refused by the guard fails here, not at the first read).
    pub async fn new(config: SqlConfig) -> Result<Self> {
        config.validate()?;
        let path = config.sqlite_path()?;
        let pool = Arc::new(Pool::new(path.clone(), config.max_connections)?);
        let mut queries = Vec::new();
        for q in &config.queries {
            queries.push(compile(&config.name, q)?);
        }
        let sqls: Vec<(String, String)> = config
            .queries
            .iter()
            .map(|q| (q.uri.clone(), q.sql.clone()))
            .collect();
        let timeout = config.statement_timeout;
        pool.run(move |conn| {
            conn.read(timeout, |db| {
                for (uri, sql) in &sqls {
                    db.prepare(sql).map_err(|e| {
                        Error::invalid_params(format!(
                            "query {uri}: {}",
                            crate::conn::sql_error(e, timeout)
                        ))
                    })?;
                }
                Ok(())
            })
        })
        .await?;
        let name = &config.name;
        let mut templates = vec![
            TemplateMeta {
                uri_template: format!("db://{name}{{?cursor}}"),
                name: format!("sql-overview:{name}"),
                title: Some(format!("Tables and views of database {name}")),
                description: Some("JSON: each table and view with its URIs and a row estimate; `cursor` continues after `next`.".into()),
                mime_type: Some(JSON.into()),
            },
            TemplateMeta {
                uri_template: format!("db://{name}/tables/{{table}}{{?cursor}}"),
                name: format!("sql-table:{name}"),
                title: Some(format!("Rows of a table of {name}")),
                description: Some(format!(
                    "JSON: `columns` and `rows` (arrays), at most {} rows and {} bytes per page, ordered by rowid or primary key; `next` is the URI of the following page (with `cursor`).",
                    config.page_size, config.max_bytes
                )),
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
        for c in &queries {
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
            kind: "sqlite",
            label: format!("{name} ({})", path.display()),
            uri_prefixes,
            // Change notifications are not implemented yet: never declared.
            capabilities: Capabilities {
                watch: false,
                list_changed: false,
                ..Capabilities::ALL
            },
            cache: config.cache,
        };
        Ok(Self {
            config,
            pool,
            info,
            templates,
            queries,
        })
    }

    fn ctx(&self) -> Ctx {
        Ctx {
            timeout: self.config.statement_timeout,
        }
    }

    /// Run `f` in a rolled-back read transaction on a pooled connection.
    async fn read_db<T: Send + 'static>(
        &self,
        f: impl FnOnce(&rusqlite::Connection, &Ctx) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let ctx = self.ctx();
        self.pool
            .run(move |conn| conn.read(ctx.timeout, |db| f(db, &ctx)))
            .await
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
}

/// Check one named query at load: URI form, pre-filter, and parameters on both sides.
fn compile(mount: &str, q: &NamedQuery) -> Result<Compiled> {
    let bad = |why: String| Error::invalid_params(format!("query {}: {why}", q.uri));
    if !q.uri.starts_with("db://") || q.uri.contains('?') || q.uri.contains('#') {
        return Err(bad(
            "the URI must start with db:// and have no query or fragment".into(),
        ));
    }
    let own = format!("db://{mount}");
    if q.uri == own || q.uri.starts_with(&format!("{own}/tables")) {
        return Err(bad(format!(
            "the URI collides with the table URIs of mount {mount:?}"
        )));
    }
    let placeholders = crate::guard::check_read_only(&q.sql).map_err(|e| bad(e.message))?;
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
) -> Result<SqlValue> {
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
        ParamType::Text => Ok(SqlValue::Text(value.to_owned())),
        ParamType::Integer => value
            .parse::<i64>()
            .map(SqlValue::Integer)
            .map_err(|_| bad("is not an integer".into())),
    }
}

/// A list position: section byte, then a table name or a query index.
fn position(section: u8, tail: &[u8]) -> Vec<u8> {
    let mut p = vec![section];
    p.extend_from_slice(tail);
    p
}

const SEC_OVERVIEW: u8 = 0;
const SEC_TABLE: u8 = 1;
const SEC_SCHEMA: u8 = 2;
const SEC_QUERY: u8 = 3;

#[async_trait]
impl Provider for SqlProvider {
    fn info(&self) -> &ProviderInfo {
        &self.info
    }

    async fn ready(&self) -> bool {
        self.read_db(|db, ctx| db::table_names(db, ctx, None, false, 1).map(|_| ()))
            .await
            .is_ok()
    }

    async fn list(&self, page: PageRequest) -> Result<Page<ResourceMeta>> {
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
        let name = self.config.name.clone();
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
                    Some(String::from_utf8(tail.to_vec()).map_err(|_| bad())?)
                }
                _ => None,
            };
            // After a table's rows entry, its schema entry comes next.
            let inclusive = section == Some(SEC_TABLE);
            let want = limit + 1;
            let names = self
                .read_db(move |db, ctx| db::table_names(db, ctx, after.as_deref(), inclusive, want))
                .await?;
            for t in names {
                let base = format!("db://{name}/tables/{}", encode_segment(&t));
                let skip_rows = inclusive
                    && page.after.as_deref() == Some(&position(SEC_TABLE, t.as_bytes())[..]);
                if !skip_rows {
                    items.push((
                        position(SEC_TABLE, t.as_bytes()),
                        ResourceMeta {
                            uri: base.clone(),
                            name: t.clone(),
                            title: Some(format!("Table {t}")),
                            description: Some(format!(
                                "Rows of table {t}, {} per page",
                                self.config.page_size
                            )),
                            mime_type: Some(JSON.into()),
                            ..Default::default()
                        },
                    ));
                }
                items.push((
                    position(SEC_SCHEMA, t.as_bytes()),
                    ResourceMeta {
                        uri: format!("{base}/schema"),
                        name: format!("{t} schema"),
                        title: Some(format!("Schema of table {t}")),
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
            for (i, c) in self.queries.iter().enumerate().skip(first) {
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

    async fn read(&self, uri: &ResourceUri, limits: &ReadLimits) -> Result<Vec<Contents>> {
        let max_bytes = limits.max_bytes.min(self.config.max_bytes);
        let with_uri = |e: Error| {
            if e.uri.is_none() {
                e.with_uri(uri.as_str())
            } else {
                e
            }
        };
        let doc = if let Some((i, binds)) = self.match_query(uri).map_err(with_uri)? {
            if uri.query().is_some() {
                return Err(with_uri(Error::invalid_params(
                    "named queries take no query parameters",
                )));
            }
            let q = self.queries[i].query.clone();
            let max_rows = self.config.max_rows;
            self.read_db(move |db, ctx| {
                db::run_query(db, ctx, &q.uri, &q.sql, &binds, max_rows, max_bytes)
            })
            .await
        } else {
            let name = self.config.name.clone();
            let target = crate::uri::parse(&name, uri)?;
            let raw = uri.as_str().to_owned();
            let base = uri.without_query().to_owned();
            let page_size = self.config.page_size;
            self.read_db(move |db, ctx| match target {
                Target::Overview { cursor } => {
                    let after = cursor
                        .as_deref()
                        .map(db::decode_overview_cursor)
                        .transpose()?;
                    db::overview(db, ctx, &name, after.as_deref(), OVERVIEW_BLOCK)
                }
                Target::Table { table, cursor } => match db::object_kind(db, ctx, &table)? {
                    Some(ObjectKind::Table) => db::table_page(
                        db,
                        ctx,
                        &db::PageArgs {
                            table: &table,
                            base_uri: &base,
                            cursor: cursor.as_deref(),
                            page_size,
                            max_bytes,
                        },
                    ),
                    // Only tables have rows here; a view's rows have no stable key to page on.
                    _ => Err(Error::not_found(raw)),
                },
                Target::Schema { table } => match db::object_kind(db, ctx, &table)? {
                    Some(kind) => db::schema(db, ctx, &table, kind),
                    None => Err(Error::not_found(raw)),
                },
            })
            .await
        }
        .map_err(with_uri)?;
        let text = doc.to_string();
        if text.len() as u64 > max_bytes {
            return Err(with_uri(
                Error::new(
                    ErrorKind::TooLarge,
                    format!("the result is larger than the read limit of {max_bytes} bytes"),
                )
                .with_detail("max_bytes", max_bytes),
            ));
        }
        Ok(vec![Contents {
            uri: uri.as_str().to_owned(),
            mime_type: Some(JSON.into()),
            body: ContentsBody::Text(text),
            meta: None,
        }])
    }

    fn templates(&self) -> &[TemplateMeta] {
        &self.templates
    }

    async fn complete(&self, req: CompletionRequest) -> Result<Completion> {
        let t = &self.templates[mcpr_core::template_index(&self.templates, &req.template)?];
        // Only the built-in table templates complete table names; a query variable called
        // `table` completes from its enum like any other.
        if req.argument == "table"
            && (t.name.starts_with("sql-table:") || t.name.starts_with("sql-schema:"))
        {
            let prefix = req.value.clone();
            let (values, total) = self
                .read_db(move |db, ctx| db::tables_with_prefix(db, ctx, &prefix, 100))
                .await?;
            return Ok(Completion {
                has_more: total as usize > values.len(),
                values,
                total: Some(total),
            });
        }
        let q = self.queries.iter().find(|c| c.query.uri == req.template);
        let allowed = q
            .and_then(|c| c.query.params.get(&req.argument))
            .and_then(|s| s.allowed.clone())
            .unwrap_or_default();
        let values: Vec<String> = allowed
            .into_iter()
            .filter(|v| v.starts_with(&req.value))
            .collect();
        let total = values.len() as u32;
        Ok(Completion {
            has_more: values.len() > 100,
            values: values.into_iter().take(100).collect(),
            total: Some(total),
        })
    }
}
