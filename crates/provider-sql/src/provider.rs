//! [`SqlProvider`]: one database (SQLite, PostgreSQL or MySQL/MariaDB) behind the core
//! `Provider` trait: the mount's construction and start-up checks, its templates, and the
//! trait's methods, each a call into the file that does it — `list.rs`, `read.rs`,
//! `complete.rs`, with named queries in `query.rs` and JSON/CSV in `render.rs`. Those are the
//! same for every engine; what differs per engine is behind [`Engine`].

use std::sync::Arc;

use async_trait::async_trait;
use mcpr_core::{
    Capabilities, ChangeSink, Completion, CompletionRequest, ErrorKind, Page, PageRequest,
    Provider, ProviderInfo, ReadLimits, ResourceMeta, ResourceUri, Result, TemplateMeta,
    WatchGuard,
};

use crate::config::{SqlConfig, SqlKind};
use crate::engine::{Engine, TableRef};
use crate::guard;
use crate::query::{Compiled, check_against_db, compile};
use crate::render::JSON;
use crate::uri::encode_segment;
use crate::watch::{Trigger, Watches};

/// The `db://` provider for one database.
pub struct SqlProvider {
    inner: Arc<Inner>,
}

/// Everything a read needs; shared with the change watcher, which re-reads subscribed URIs.
pub(crate) struct Inner {
    pub(crate) config: SqlConfig,
    pub(crate) engine: Arc<dyn Engine>,
    info: ProviderInfo,
    pub(crate) templates: Arc<[TemplateMeta]>,
    pub(crate) queries: Vec<Compiled>,
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
        let queries = compile_all(&config)?;
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
        let (uri_prefixes, templates) =
            layout(&config, &queries, engine.default_schema().is_some());
        let name = &config.name;
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
                templates: templates.into(),
                queries,
                _checks_later: checks_later,
            }),
        })
    }
}

/// The mount's named queries, compiled for its engine (no database needed).
fn compile_all(config: &SqlConfig) -> Result<Vec<Compiled>> {
    let dialect = match config.kind {
        SqlKind::Sqlite => guard::Engine::Sqlite,
        SqlKind::Postgres => guard::Engine::Postgres,
        SqlKind::MySql => guard::Engine::MySql,
    };
    config
        .queries
        .iter()
        .map(|q| compile(&config.name, q, dialect))
        .collect()
}

/// The mount's URI prefixes and templates, from its settings and queries alone: `db://NAME`,
/// then each named query's fixed start (or its URI); `schemas` when the engine puts schemas
/// in URIs.
fn layout(
    config: &SqlConfig,
    queries: &[Compiled],
    schemas: bool,
) -> (Vec<String>, Vec<TemplateMeta>) {
    let mut uri_prefixes = vec![format!("db://{}", config.name)];
    for c in queries {
        let p = match &c.template {
            Some(t) => t.literal_prefix().to_owned(),
            None => c.query.uri.clone(),
        };
        if !uri_prefixes.contains(&p) {
            uri_prefixes.push(p);
        }
    }
    (uri_prefixes, templates(config, queries, schemas))
}

/// What a mount of `config` will serve ([`mcpr_core::addresses`]), without opening its
/// database: PostgreSQL is the engine whose URIs name schemas (its `default_schema`). `None`
/// when a named query does not compile, which opening the mount reports.
pub(crate) fn addresses(config: &SqlConfig) -> Option<Vec<String>> {
    let queries = compile_all(config).ok()?;
    let (prefixes, templates) = layout(config, &queries, config.kind == SqlKind::Postgres);
    Some(mcpr_core::addresses(&prefixes, &templates))
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

impl Inner {
    pub(crate) fn engine(&self) -> &dyn Engine {
        self.engine.as_ref()
    }

    /// A table's name as shown: schema-qualified only outside the default schema.
    pub(crate) fn shown(&self, t: &TableRef) -> String {
        match (&t.schema, self.engine.default_schema()) {
            (Some(s), Some(d)) if s != d => t.display(),
            _ => t.name.clone(),
        }
    }

    /// The URI of a table's rows: the short form for the default schema (or no schema).
    pub(crate) fn table_uri(&self, t: &TableRef) -> String {
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
    pub(crate) fn resolve(&self, schema: Option<String>, table: String) -> Option<TableRef> {
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
        self.inner.list(page).await
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

    fn templates(&self) -> Arc<[TemplateMeta]> {
        self.inner.templates.clone()
    }

    async fn complete(&self, req: CompletionRequest) -> Result<Completion> {
        self.inner.complete(req).await
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

    /// What the watch of `uri` last read (see `Watches::token`).
    async fn change_token(&self, uri: &ResourceUri) -> Option<String> {
        self.inner.watches.token(uri)
    }

    async fn watch_list(&self, sink: ChangeSink) -> Result<WatchGuard> {
        let first = crate::watch::catalog(self.inner.engine.as_ref()).await.ok();
        Ok(self.inner.watches.add_list(sink, first))
    }
}
