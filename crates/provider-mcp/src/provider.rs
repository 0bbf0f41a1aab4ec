//! [`McpProvider`]: one `mcp` mount, implementing the core `Provider` trait by forwarding
//! to the upstream with our limits and rewriting URIs both ways.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use mcpr_core::{
    CacheHints, CacheScope, Capabilities, ChangeSink, Completion, CompletionRequest, Contents,
    ContentsBody, Counter, Error, Page, PageRequest, Provider, ProviderInfo, ReadLimits,
    ReadOutput, ResourceMeta, ResourceUri, Result, TemplateMeta, WatchGuard,
};
use rmcp::model::{
    ArgumentInfo, CompleteRequestParams, CompletionContext, PaginatedRequestParams,
    ReadResourceDirectoryRequestParams, ReadResourceRequestParams, Reference, ResourceContents,
};

use crate::config::McpConfig;
use crate::conn::{self, Shared};
use crate::error;
use crate::uri::clean_name;

/// The `mcp` provider of one mount: another MCP server's resources as ours.
pub struct McpProvider {
    pub(crate) shared: Arc<Shared>,
    info: ProviderInfo,
    tasks: Vec<tokio::task::AbortHandle>,
}

impl Drop for McpProvider {
    fn drop(&mut self) {
        // The connection task owns the client and the upstream process: ending it closes
        // the one and kills the other.
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl McpProvider {
    /// Start the mount: its connection is made in the background (an upstream that is down
    /// leaves the mount unavailable, not the server stopped); this waits for the first
    /// attempt, up to the timeout, so that a healthy upstream's templates are known at once.
    pub async fn start(config: McpConfig) -> Result<Self> {
        config.validate()?;
        let label = format!("mcp {}: {}", config.name, config.upstream.describe());
        let shared = Shared::new(config);
        let info = ProviderInfo {
            kind: "mcp",
            label,
            uri_prefixes: shared.map.router_prefixes(),
            capabilities: Capabilities {
                list: true,
                read: true,
                templates: true,
                complete: true,
                watch: true,
                list_changed: true,
            },
            cache: shared.config.cache,
        };
        let tasks = vec![
            tokio::spawn(conn::run(Arc::downgrade(&shared))).abort_handle(),
            tokio::spawn(conn::relay(Arc::downgrade(&shared))).abort_handle(),
            tokio::spawn(conn::refresh_templates(Arc::downgrade(&shared))).abort_handle(),
        ];
        let within = shared.config.timeout.max(Duration::from_secs(15)) + Duration::from_secs(1);
        shared.first_attempt(within).await;
        Ok(Self {
            shared,
            info,
            tasks,
        })
    }
}

/// The mount's hints `mine` capped by an upstream answer's: its `ttlMs` no longer than ours,
/// `private` when either says so. An upstream that says nothing gets the mount's own.
pub(crate) fn capped(
    mine: CacheHints,
    ttl_ms: Option<u64>,
    scope: Option<rmcp::model::CacheScope>,
) -> CacheHints {
    let theirs = CacheHints {
        ttl_ms: ttl_ms.unwrap_or(mine.ttl_ms),
        scope: if matches!(scope, Some(rmcp::model::CacheScope::Private)) {
            CacheScope::Private
        } else {
            CacheScope::Public
        },
    };
    mine.min(theirs)
}

/// The answer of a read served from the cache: its contents, fresh for what is left of
/// their time.
fn cached(ours: &str, hit: crate::cache::Hit, limits: &ReadLimits) -> Result<ReadOutput> {
    within_read_limit(ours, hit.bytes, limits)?;
    Ok(ReadOutput {
        contents: hit.contents,
        hints: Some(CacheHints {
            ttl_ms: hit.remaining.as_millis().max(1) as u64,
            scope: CacheScope::Public,
        }),
    })
}

/// Refuse an answer of `size` bytes over the read limit, with core's "too large" error.
fn within_read_limit(ours: &str, size: u64, limits: &ReadLimits) -> Result<()> {
    if size > limits.max_bytes {
        return Err(Error::too_large(
            ours,
            "the upstream's answer",
            Some(size),
            mcpr_core::error::Limit::read(limits.max_bytes),
            None,
        ));
    }
    Ok(())
}

/// The decoded size of base64 text of `len` bytes, at least.
fn decoded_len(len: usize) -> u64 {
    (len as u64 / 4) * 3
}

#[async_trait]
impl Provider for McpProvider {
    fn info(&self) -> &ProviderInfo {
        &self.info
    }

    async fn ready(&self) -> bool {
        self.shared.readiness().is_ok()
    }

    async fn readiness(&self) -> Result<()> {
        self.shared.readiness()
    }

    async fn list(&self, page: PageRequest) -> Result<Page<ResourceMeta>> {
        let conn = self.shared.conn()?;
        let shared = &self.shared;
        crate::list::page(shared, "resources/list", page, |cursor| {
            let peer = conn.peer.clone();
            async move {
                let params = PaginatedRequestParams::default().with_cursor(cursor);
                shared
                    .call("resources/list", None, peer.list_resources(Some(params)))
                    .await
            }
        })
        .await
    }

    /// A fresh answer in the read cache is memory only, so it is answered in place, as a
    /// small local file is: a cached read then costs what our own file read costs, not a
    /// future through the runtime. Anything else waits on the upstream and goes to `read`.
    fn read_now(&self, uri: &ResourceUri, limits: &ReadLimits) -> Option<Result<ReadOutput>> {
        let cache = self.shared.cache.as_ref()?;
        let ours = uri.as_str();
        let hit = cache.get(self.shared.map.upstream(ours).ok()?)?;
        Some(cached(ours, hit, limits))
    }

    async fn read(&self, uri: &ResourceUri, limits: &ReadLimits) -> Result<ReadOutput> {
        let ours = uri.as_str();
        let up = self.shared.map.upstream(ours)?;
        let cache = self.shared.cache.as_ref();
        if let Some(hit) = cache.and_then(|c| c.get(up)) {
            return cached(ours, hit, limits);
        }
        let ticket = cache.map(|c| c.begin());
        let conn = self.shared.conn().map_err(|e| e.with_uri(ours))?;
        // rmcp's request future is large; boxed, the timeout around it and this read's own
        // (boxed) future move a pointer instead of copying it at each step.
        let res = self
            .shared
            .call(
                "resources/read",
                Some(ours),
                Box::pin(conn.peer.read_resource(ReadResourceRequestParams::new(up))),
            )
            .await
            .map_err(|e| match e.uri {
                // A not-found names our URI, never the upstream's.
                Some(_) if e.kind == mcpr_core::ErrorKind::NotFound => Error::not_found(ours),
                _ => e,
            })?;
        let size: u64 = res
            .contents
            .iter()
            .map(|c| match c {
                ResourceContents::TextResourceContents { text, .. } => text.len() as u64,
                ResourceContents::BlobResourceContents { blob, .. } => decoded_len(blob.len()),
                _ => 0,
            })
            .sum();
        within_read_limit(ours, size, limits)?;
        let mut contents = Vec::with_capacity(res.contents.len());
        for c in res.contents {
            let (uri, mime_type, body, meta) = match c {
                ResourceContents::TextResourceContents {
                    uri,
                    mime_type,
                    text,
                    meta,
                } => (uri, mime_type, ContentsBody::Text(text), meta),
                ResourceContents::BlobResourceContents {
                    uri,
                    mime_type,
                    blob,
                    meta,
                } => {
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(blob.as_bytes())
                        .map_err(|e| {
                            error::hostile(
                                self.shared.name(),
                                "resources/read",
                                format!("a blob that is not base64: {e}"),
                            )
                            .with_uri(ours)
                        })?;
                    (uri, mime_type, ContentsBody::Blob(bytes), meta)
                }
                // A kind of content this rmcp does not know yet: nothing we can relay.
                _ => continue,
            };
            // A URI that cannot be one (a control character, a space, no scheme) is not
            // relayed: a listing leaves such an entry out, and a read cannot leave out what
            // it was asked for.
            let Some(uri) = self.shared.map.ours_checked(&uri) else {
                return Err(error::hostile(
                    self.shared.name(),
                    "resources/read",
                    "a content URI that is not a URI (a space, a control character or no scheme)",
                )
                .with_uri(ours));
            };
            contents.push(Contents {
                uri,
                mime_type: mime_type.as_deref().map(clean_name),
                body,
                meta: meta
                    .and_then(|m| serde_json::to_value(m).ok())
                    .and_then(|v| match v {
                        serde_json::Value::Object(o) if !o.is_empty() => Some(o),
                        _ => None,
                    }),
            });
        }
        let hints = capped(self.shared.config.cache, res.ttl_ms, res.cache_scope);
        // A private answer is never kept: the cache serves every client of the mount.
        if let (Some(cache), Some(ticket)) = (cache, ticket)
            && hints.scope == CacheScope::Public
        {
            cache.put(up, ticket, &contents, Duration::from_millis(hints.ttl_ms));
        }
        Ok(ReadOutput {
            contents,
            hints: Some(hints),
        })
    }

    async fn read_directory(
        &self,
        uri: &ResourceUri,
        page: PageRequest,
    ) -> Result<Page<ResourceMeta>> {
        let ours = uri.as_str();
        let up = self.shared.map.upstream(ours)?.to_owned();
        let conn = self.shared.conn()?;
        if !conn.directory {
            return Err(Error::unsupported(format!(
                "mcp mount \"{}\": the upstream does not offer directory reads ({ours})",
                self.shared.name()
            )));
        }
        let shared = &self.shared;
        crate::list::page(shared, "resources/directory/read", page, |cursor| {
            let peer = conn.peer.clone();
            let mut params = ReadResourceDirectoryRequestParams::new(up.clone());
            params.cursor = cursor;
            async move {
                shared
                    .call(
                        "resources/directory/read",
                        Some(ours),
                        peer.read_resource_directory(params),
                    )
                    .await
            }
        })
        .await
    }

    fn templates(&self) -> Arc<[TemplateMeta]> {
        self.shared.templates()
    }

    async fn complete(&self, req: CompletionRequest) -> Result<Completion> {
        let templates = self.templates();
        if !templates.is_empty() {
            mcpr_core::template_index(&templates, &req.template)?;
        }
        let up =
            self.shared.map.upstream(&req.template).map_err(|_| {
                Error::invalid_params(format!("unknown template {:?}", req.template))
            })?;
        let conn = self.shared.conn()?;
        let mut params = CompleteRequestParams::new(
            Reference::for_resource(up),
            ArgumentInfo::new(req.argument.clone(), req.value.clone()),
        );
        if !req.context.is_empty() {
            let mut ctx = CompletionContext::new();
            ctx.arguments = Some(req.context.into_iter().collect());
            params = params.with_context(ctx);
        }
        let res = self
            .shared
            .call("completion/complete", None, conn.peer.complete(params))
            .await?;
        let c = res.completion;
        let values: Vec<String> = c.values.iter().take(100).map(|v| clean_name(v)).collect();
        Ok(Completion {
            has_more: c.has_more.unwrap_or(false) || c.values.len() > values.len(),
            total: c.total,
            values,
        })
    }

    async fn watch(&self, uri: &ResourceUri, sink: ChangeSink) -> Result<WatchGuard> {
        let ours = uri.as_str();
        let up = self.shared.map.upstream(ours)?.to_owned();
        let id = self.shared.watch(ours, &up, sink).await?;
        Ok(WatchGuard::new(Release {
            shared: Arc::downgrade(&self.shared),
            up: Some(up),
            id,
        }))
    }

    async fn watch_list(&self, sink: ChangeSink) -> Result<WatchGuard> {
        let id = self.shared.watch_list(sink);
        // The guard first: a caller that stops waiting releases the watch with it.
        let guard = WatchGuard::new(Release {
            shared: Arc::downgrade(&self.shared),
            up: None,
            id,
        });
        self.shared.list_live().await;
        Ok(guard)
    }

    async fn relayed_skills(&self) -> Result<Option<Vec<mcpr_core::RelayedSkill>>> {
        crate::skills::relayed(&self.shared).await
    }

    fn offers(&self) -> Option<String> {
        let c = self.shared.conn().ok()?;
        let mut what = vec![c.era.as_str().to_owned()];
        if c.era == crate::conn::Era::Modern || c.subscribe {
            what.push("subscriptions".to_owned());
        }
        if c.directory {
            what.push("directory reads".to_owned());
        }
        what.push(format!("{} template(s)", self.templates().len()));
        Some(format!(
            "upstream {} ({}), connection {}",
            c.server,
            what.join(", "),
            c.generation
        ))
    }

    fn counters(&self) -> Vec<Counter> {
        let c = &self.shared.counts;
        let cache = self.shared.cache.as_ref();
        vec![
            Counter {
                name: "mcpr_mcp_connects_total",
                help: "Connections made to the upstream of an mcp mount (1 + reconnects).",
                value: c.connects.load(Ordering::Relaxed),
            },
            Counter {
                name: "mcpr_mcp_notifications_relayed_total",
                help: "Change notices of an mcp mount's upstream relayed to subscribers.",
                value: c.relayed.load(Ordering::Relaxed),
            },
            Counter {
                name: "mcpr_mcp_notifications_merged_total",
                help: "Upstream change notices merged into one already waiting (floods, the rate limit).",
                value: c.merged.load(Ordering::Relaxed),
            },
            Counter {
                name: "mcpr_mcp_cache_hits_total",
                help: "Reads of an mcp mount served from its read cache without asking the upstream.",
                value: cache.map_or(0, |c| c.hits.load(Ordering::Relaxed)),
            },
            Counter {
                name: "mcpr_mcp_cache_misses_total",
                help: "Reads of an mcp mount with a read cache that asked the upstream.",
                value: cache.map_or(0, |c| c.misses.load(Ordering::Relaxed)),
            },
        ]
    }
}

/// Releases one watch (of a URI, or of the list) when the registry drops it.
struct Release {
    shared: std::sync::Weak<Shared>,
    up: Option<String>,
    id: u64,
}

impl Drop for Release {
    fn drop(&mut self) {
        let Some(s) = self.shared.upgrade() else {
            return;
        };
        match &self.up {
            Some(up) => s.unwatch(up, self.id),
            None => s.unwatch_list(self.id),
        }
    }
}
