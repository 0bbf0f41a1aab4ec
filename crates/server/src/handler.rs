//! [`McpHandler`]: the rmcp `ServerHandler` serving both protocol eras over any transport.
//!
//! One handler value is one session in the legacy era (stdio, or one `Mcp-Session-Id` over
//! HTTP): its subscriptions are released when it is dropped. In the 2026-07-28 era every
//! request stands alone and each `subscriptions/listen` stream registers for its own lifetime.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine as _;
use mcpr_core::{
    CacheHints, Contents, ContentsBody, Error, PageRequest, ReadLimits, ResourceMeta, ResourceUri,
};
use rmcp::model::{
    Annotations, CacheScope, CompleteRequestParams, CompleteResult, CompletionInfo, ErrorCode,
    Implementation, InitializeRequestParams, InitializeResult, ListResourceTemplatesResult,
    ListResourcesResult, MetaObject, PaginatedRequestParams, ProtocolVersion,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Reference, RequestId,
    RequestMetaObject, Resource, ResourceContents, ResourceTemplate,
    ResourceUpdatedNotificationParam, ServerCapabilities, ServerConfig, ServerJsonRpcMessage,
    ServerResult, SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, RoleServer, SubscriptionContext};
use rmcp::{ErrorData, Peer, ServerHandler};

use crate::errors::{to_mcp_error, uri_data};
use crate::http::Grant;
use crate::registry::Notice;
use crate::router::{Mount, Router};
use crate::{ServerState, Settings};

/// Position tag in a cursor: resume at the start of the mount, or after a provider position.
const AT_START: u8 = 0;
const AFTER: u8 = 1;

/// The capabilities and identity announced by `initialize` and `server/discover`.
pub(crate) fn server_info(settings: &Settings, router: &Router) -> ServerConfig {
    let any = |f: fn(&mcpr_core::Capabilities) -> bool| {
        router
            .mounts()
            .iter()
            .any(|m| f(&m.provider.info().capabilities))
    };
    let mut resources = ServerCapabilities::builder()
        .enable_resources()
        .enable_completions();
    let _ = &mut resources;
    let mut caps = resources.build();
    if let Some(r) = caps.resources.as_mut() {
        r.subscribe = Some(any(|c| c.watch));
        r.list_changed = Some(any(|c| c.list_changed));
    }
    let mounts: Vec<String> = router
        .mounts()
        .iter()
        .map(|m| {
            let info = m.provider.info();
            format!(
                "- {} mount {} ({})",
                info.kind,
                info.label,
                info.uri_prefixes.join(", ")
            )
        })
        .collect();
    let instructions = format!(
        "Read-only access to these sources as MCP resources. List them with resources/list, read by URI, and use the URI templates (resources/templates/list) to address files, including windows of large files.\n{}",
        mounts.join("\n")
    );
    ServerConfig::new(caps)
        .with_server_info(Implementation::new(
            settings.name.clone(),
            settings.version.clone(),
        ))
        .with_instructions(instructions)
}

/// Per-session state of a legacy session: its subscriber id in the registry, created on
/// first need, removed when the session (this handler) is dropped.
struct Session {
    state: Arc<ServerState>,
    subscriber: OnceLock<u64>,
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(id) = self.subscriber.get() {
            self.state.registry.remove(*id);
        }
    }
}

/// Fingerprints taken before a listen is acknowledged, per URI, oldest first; see `listen`.
type PendingTokens = std::sync::Mutex<HashMap<String, VecDeque<(Instant, Option<String>)>>>;

/// How long an unclaimed fingerprint is kept (a listen whose acknowledgment failed).
const TOKEN_TTL: Duration = Duration::from_secs(30);

/// The MCP handler. Create one per session with [`McpHandler::new`].
pub struct McpHandler {
    state: Arc<ServerState>,
    session: Session,
    pending_tokens: PendingTokens,
}

impl McpHandler {
    /// A handler (one session) over the shared server state.
    pub fn new(state: Arc<ServerState>) -> Self {
        Self {
            session: Session {
                state: state.clone(),
                subscriber: OnceLock::new(),
            },
            state,
            pending_tokens: Default::default(),
        }
    }

    /// Remember the current fingerprint of `uri` for the listen about to be acknowledged.
    fn stash_token(&self, uri: &ResourceUri) {
        let token = self
            .state
            .router
            .route(uri)
            .and_then(|m| m.provider.change_token(uri));
        let now = Instant::now();
        let mut map = self.pending_tokens.lock().expect("token lock");
        map.retain(|_, q| {
            q.retain(|(t, _)| now.duration_since(*t) < TOKEN_TTL);
            !q.is_empty()
        });
        map.entry(uri.as_str().to_owned())
            .or_default()
            .push_back((now, token));
    }

    /// The oldest fingerprint stashed for `uri`: if two listens race, the older one can
    /// only cause an extra notification, never a missed one.
    fn take_token(&self, uri: &ResourceUri) -> Option<Option<String>> {
        let mut map = self.pending_tokens.lock().expect("token lock");
        let q = map.get_mut(uri.as_str())?;
        let (_, token) = q.pop_front()?;
        if q.is_empty() {
            map.remove(uri.as_str());
        }
        Some(token)
    }

    /// This session's subscriber id, registering it (and its delivery task) on first use.
    fn legacy_subscriber(&self, peer: &Peer<RoleServer>, grant: Option<&Grant>) -> u64 {
        *self.session.subscriber.get_or_init(|| {
            let mounts = visible_mounts(&self.state.router, grant);
            let (id, mut rx) = self.state.registry.add_scoped_subscriber(mounts);
            let peer = peer.clone();
            tokio::spawn(async move {
                while let Some(notice) = rx.recv().await {
                    let sent = match notice {
                        Notice::Updated(uri) => {
                            peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                                .await
                        }
                        Notice::ListChanged => peer.notify_resource_list_changed().await,
                    };
                    if sent.is_err() {
                        break;
                    }
                }
            });
            id
        })
    }
}

/// The caller's grant, when the request came over authenticated HTTP.
fn grant_of(ext: &rmcp::model::Extensions) -> Option<Grant> {
    ext.get::<http::request::Parts>()
        .and_then(|p| p.extensions.get::<Grant>())
        .cloned()
}

/// Whether a caller holding `grant` may see `mount`.
fn visible(grant: Option<&Grant>, mount: &Mount) -> bool {
    grant.is_none_or(|g| g.allows(mount.scope.as_deref()))
}

/// Cache hints for a caller: answers that depend on who asks are `private`.
fn hints_for(grant: Option<&Grant>, mut hints: CacheHints) -> CacheHints {
    if grant.is_some_and(|g| g.personal) {
        hints.scope = mcpr_core::CacheScope::Private;
    }
    hints
}

/// The mounts a caller holding `grant` may hear list changes of; `None` for all.
fn visible_mounts(router: &Router, grant: Option<&Grant>) -> Option<Vec<u32>> {
    grant.filter(|g| g.scopes.is_some()).map(|g| {
        router
            .mounts()
            .iter()
            .filter(|m| g.allows(m.scope.as_deref()))
            .map(|m| m.index)
            .collect()
    })
}

/// Whether the request is from a 2026-07-28 (or later) peer, which wants cache hints.
fn is_modern(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.protocol_version()
        .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

/// Whether `meta` names exactly 2026-07-28 and has every member that version requires: rmcp
/// then treats the request as a 2026-07-28 one whatever the session. The direct read paths
/// (stdio and HTTP) take such a read themselves.
pub(crate) fn complete_2026_07_28(meta: &RequestMetaObject) -> bool {
    meta.protocol_version() == Some(ProtocolVersion::V_2026_07_28)
        && meta
            .missing_required_keys(&ProtocolVersion::V_2026_07_28)
            .is_empty()
}

/// What rmcp's `ServerHandler` dispatch makes of a `resources/read` outcome for request `id`,
/// for the direct read paths that answer without it: for a 2026-07-28 (`modern`) request,
/// cache hints filled in where missing and not-found as the standard -32602; for a legacy
/// one, `resultType` stripped.
pub(crate) fn read_message(
    answer: Result<ReadResourceResponse, ErrorData>,
    id: RequestId,
    modern: bool,
) -> ServerJsonRpcMessage {
    match answer {
        Ok(result) => {
            let mut result: ServerResult = result.into();
            if modern {
                result.fill_missing_cache_hints();
            } else {
                result.strip_result_type_for_legacy_peer();
            }
            ServerJsonRpcMessage::response(result, id)
        }
        Err(mut error) => {
            if modern && error.code == ErrorCode::RESOURCE_NOT_FOUND {
                error.code = ErrorCode::INVALID_PARAMS;
            }
            ServerJsonRpcMessage::error(error, Some(id))
        }
    }
}

fn scope(h: CacheHints) -> CacheScope {
    match h.scope {
        mcpr_core::CacheScope::Public => CacheScope::Public,
        mcpr_core::CacheScope::Private => CacheScope::Private,
    }
}

fn parse_uri(raw: &str) -> Result<ResourceUri, ErrorData> {
    ResourceUri::parse(raw).map_err(|e| ErrorData::invalid_params(e.message, uri_data(raw)))
}

fn resource_of(m: ResourceMeta) -> Resource {
    let mut r = Resource::new(m.uri, m.name);
    r.title = m.title;
    r.description = m.description;
    r.mime_type = m.mime_type;
    r.size = m.size;
    if let Some(t) = m.last_modified {
        let mut a = Annotations::default();
        a.last_modified = Some(t);
        r.annotations = Some(a);
    }
    r
}

fn contents_of(c: Contents) -> ResourceContents {
    let meta = c.meta.map(MetaObject);
    match c.body {
        ContentsBody::Text(text) => ResourceContents::TextResourceContents {
            uri: c.uri,
            mime_type: c.mime_type,
            text,
            meta,
        },
        ContentsBody::Blob(bytes) => ResourceContents::BlobResourceContents {
            uri: c.uri,
            mime_type: c.mime_type,
            blob: base64::engine::general_purpose::STANDARD.encode(bytes),
            meta,
        },
    }
}

/// The request implementations; the `ServerHandler` methods wrap them with metrics.
impl McpHandler {
    /// Run `fut` and record its method, outcome and latency.
    pub(crate) async fn timed<T>(
        &self,
        method: &'static str,
        fut: impl Future<Output = Result<T, ErrorData>>,
    ) -> Result<T, ErrorData> {
        let start = Instant::now();
        let result = fut.await;
        let outcome = match &result {
            Ok(_) => "ok",
            Err(e) => crate::metrics::outcome_of(e.code.0),
        };
        self.state.metrics.record(method, outcome, start.elapsed());
        result
    }

    /// Bound a provider call by `request_timeout`, so a stuck source answers a clear error
    /// instead of holding the request (and its client) forever.
    async fn within_timeout<T>(
        &self,
        uri: Option<&str>,
        fut: impl Future<Output = mcpr_core::Result<T>>,
    ) -> mcpr_core::Result<T> {
        let limit = self.state.settings.request_timeout;
        match tokio::time::timeout(limit, fut).await {
            Ok(r) => r,
            Err(_) => {
                let what = uri.map_or_else(|| "the request".to_owned(), |u| u.to_owned());
                let e = Error::new(
                    mcpr_core::ErrorKind::Timeout,
                    format!(
                        "{what} did not finish within {} ms (request_timeout)",
                        limit.as_millis()
                    ),
                );
                Err(match uri {
                    Some(u) => e.with_uri(u),
                    None => e,
                })
            }
        }
    }

    async fn do_list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let state = &self.state;
        // A listing must not be answered before the list watches a session asked for are
        // in place, or a change right after it would go unreported.
        state.registry.wait_list_ready().await;
        let mounts = state.router.mounts();
        let (mut idx, mut after) = match request.and_then(|r| r.cursor) {
            None => (0usize, None),
            Some(c) => {
                let bad =
                    |why: String| ErrorData::invalid_params(format!("invalid cursor: {why}"), None);
                let pc = state.codec.decode(&c).map_err(|e| bad(e.to_string()))?;
                if pc.mount as usize >= mounts.len() {
                    return Err(bad("it names a mount this server does not have".into()));
                }
                let after = match pc.position.split_first() {
                    Some((&AT_START, [])) => None,
                    Some((&AFTER, rest)) => Some(rest.to_vec()),
                    _ => return Err(bad("unknown position".into())),
                };
                (pc.mount as usize, after)
            }
        };
        let grant = grant_of(&ctx.extensions);
        let page_size = state.settings.page_size;
        let mut items = Vec::with_capacity(page_size);
        let mut next = None;
        while idx < mounts.len() {
            let provider = &mounts[idx].provider;
            if !provider.info().capabilities.list || !visible(grant.as_ref(), &mounts[idx]) {
                idx += 1;
                after = None;
                continue;
            }
            let page = self
                .within_timeout(
                    None,
                    provider.list(PageRequest {
                        after: after.take(),
                        limit: page_size - items.len(),
                    }),
                )
                .await
                .map_err(to_mcp_error)?;
            items.extend(page.items.into_iter().map(resource_of));
            if let Some(pos) = page.next {
                let mut p = vec![AFTER];
                p.extend_from_slice(&pos);
                next = Some((idx, p));
                break;
            }
            idx += 1;
            if items.len() >= page_size {
                if idx < mounts.len() {
                    next = Some((idx, vec![AT_START]));
                }
                break;
            }
        }
        let mut result = ListResourcesResult::with_all_items(items);
        result.next_cursor = next.map(|(m, position)| {
            state.codec.encode(&mcpr_core::PageCursor {
                mount: m as u32,
                position,
            })
        });
        if is_modern(&ctx) {
            let hints = hints_for(grant.as_ref(), state.list_cache);
            result = result
                .with_ttl_ms(hints.ttl_ms)
                .with_cache_scope(scope(hints));
        }
        Ok(result)
    }

    async fn do_list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let grant = grant_of(&ctx.extensions);
        let templates = self
            .state
            .router
            .mounts()
            .iter()
            .filter(|m| visible(grant.as_ref(), m))
            .flat_map(|m| m.provider.templates().iter())
            .map(|t| {
                let mut rt = ResourceTemplate::new(t.uri_template.clone(), t.name.clone());
                rt.title = t.title.clone();
                rt.description = t.description.clone();
                rt.mime_type = t.mime_type.clone();
                rt
            })
            .collect();
        let mut result = ListResourceTemplatesResult::with_all_items(templates);
        if is_modern(&ctx) {
            let c = hints_for(grant.as_ref(), self.state.list_cache);
            result = result.with_ttl_ms(c.ttl_ms).with_cache_scope(scope(c));
        }
        Ok(result)
    }

    async fn do_read_resource(
        &self,
        request: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.read_as(request, grant_of(&ctx.extensions), is_modern(&ctx))
            .await
    }

    /// `resources/read` for a caller holding `grant` (none over stdio or without
    /// authentication); `modern` callers (2026-07-28) get cache hints. The HTTP direct path
    /// calls this without an rmcp request context.
    pub(crate) async fn read_as(
        &self,
        request: ReadResourceRequestParams,
        grant: Option<Grant>,
        modern: bool,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = parse_uri(&request.uri)?;
        // A mount the caller's token does not cover answers exactly like a missing resource.
        let mount = self
            .state
            .router
            .route(&uri)
            .filter(|m| visible(grant.as_ref(), m))
            .ok_or_else(|| to_mcp_error(Error::not_found(uri.as_str())))?;
        let info = mount.provider.info();
        if !info.capabilities.read {
            return Err(to_mcp_error(Error::unsupported(format!(
                "{} mounts cannot be read",
                info.kind
            ))));
        }
        let limits = ReadLimits {
            max_bytes: self.state.settings.max_read_bytes,
        };
        let contents = self
            .within_timeout(Some(uri.as_str()), mount.provider.read(&uri, &limits))
            .await
            .map_err(to_mcp_error)?;
        let mut result = ReadResourceResult::new(contents.into_iter().map(contents_of).collect());
        if modern {
            let hints = hints_for(grant.as_ref(), info.cache);
            result = result
                .with_ttl_ms(hints.ttl_ms)
                .with_cache_scope(scope(hints));
        }
        Ok(result.into())
    }

    async fn do_complete(
        &self,
        request: CompleteRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let grant = grant_of(&ctx.extensions);
        let Reference::Resource(r) = &request.r#ref else {
            return Err(ErrorData::invalid_params(
                "this server has no prompts; complete ref/resource templates",
                None,
            ));
        };
        let mount = self
            .state
            .router
            .route_template(&r.uri)
            .filter(|m| visible(grant.as_ref(), m))
            .ok_or_else(|| {
                ErrorData::invalid_params(
                    format!(
                        "no resource template {:?}; see resources/templates/list",
                        r.uri
                    ),
                    None,
                )
            })?;
        if !mount.provider.info().capabilities.complete {
            return Ok(CompleteResult::default());
        }
        let context: BTreeMap<String, String> = request
            .context
            .and_then(|c| c.arguments)
            .map(|a| a.into_iter().collect())
            .unwrap_or_default();
        let done = self
            .within_timeout(
                None,
                mount.provider.complete(mcpr_core::CompletionRequest {
                    template: r.uri.clone(),
                    argument: request.argument.name.clone(),
                    value: request.argument.value.clone(),
                    context,
                }),
            )
            .await
            .map_err(to_mcp_error)?;
        let mut info = CompletionInfo::new(
            done.values
                .into_iter()
                .take(CompletionInfo::MAX_VALUES)
                .collect(),
        )
        .map_err(|e| ErrorData::internal_error(e, None))?;
        // `total` is always given, so a client can tell "nothing matched" from "unknown".
        info.total = Some(done.total.unwrap_or(info.values.len() as u32));
        info.has_more = Some(done.has_more);
        let mut result = CompleteResult::default();
        result.completion = info;
        Ok(result)
    }

    async fn do_subscribe(
        &self,
        request: SubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let uri = parse_uri(&request.uri)?;
        let grant = grant_of(&ctx.extensions);
        if self
            .state
            .router
            .route(&uri)
            .is_some_and(|m| !visible(grant.as_ref(), m))
        {
            return Err(to_mcp_error(Error::not_found(uri.as_str())));
        }
        let id = self.legacy_subscriber(&ctx.peer, grant.as_ref());
        let max = self.state.settings.max_subscriptions_per_session;
        if !self.state.registry.is_subscribed(id, uri.as_str())
            && self.state.registry.subscription_count(id) >= max
        {
            return Err(ErrorData::invalid_params(
                format!(
                    "this session already has {max} subscriptions, the limit (max_subscriptions_per_session); unsubscribe from some first"
                ),
                uri_data(uri.as_str()),
            ));
        }
        self.state
            .registry
            .subscribe(id, &uri)
            .await
            .map_err(to_mcp_error)
    }

    async fn do_unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let id = self.legacy_subscriber(&ctx.peer, grant_of(&ctx.extensions).as_ref());
        self.state.registry.unsubscribe(id, &request.uri);
        Ok(())
    }
}

/// Each request's future is boxed: rmcp spawns one task per request holding the future of
/// `handle_request`, which is as large as the largest of these, and moving it into the task
/// cost a few kilobytes of copying on every request, the smallest read included.
impl ServerHandler for McpHandler {
    fn get_info(&self) -> ServerConfig {
        self.state.info.clone()
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Box::pin(self.timed("resources/list", self.do_list_resources(request, ctx))).await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Box::pin(self.timed(
            "resources/templates/list",
            self.do_list_resource_templates(request, ctx),
        ))
        .await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        Box::pin(self.timed("resources/read", self.do_read_resource(request, ctx))).await
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        Box::pin(self.timed("completion/complete", self.do_complete(request, ctx))).await
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Box::pin(self.timed("resources/subscribe", self.do_subscribe(request, ctx))).await
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Box::pin(self.timed("resources/unsubscribe", self.do_unsubscribe(request, ctx))).await
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        ctx.peer.set_peer_info(request.clone());
        // Legacy clients cannot opt in or out of list_changed: the capability promises it.
        // Registering here, before the answer, means no change after the client's first
        // listing can be missed; the watches start in the background and `list_resources`
        // waits for them.
        if self
            .state
            .info
            .capabilities
            .resources
            .as_ref()
            .and_then(|r| r.list_changed)
            == Some(true)
        {
            let id = self.legacy_subscriber(&ctx.peer, grant_of(&ctx.extensions).as_ref());
            if self.state.registry.register_list_listener(id) {
                let registry = self.state.registry.clone();
                tokio::spawn(async move { registry.acquire_list_watches().await });
            }
        }
        self.negotiate_initialize(&request)
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let mut accepted = requested.clone();
        accepted.tools_list_changed = None;
        accepted.prompts_list_changed = None;
        if let Some(uris) = accepted.resource_subscriptions.as_mut() {
            // One stream may hold at most `max_subscriptions_per_session` URIs; the rest are
            // left out of the acknowledgment, which tells the client what is honoured.
            uris.truncate(self.state.settings.max_subscriptions_per_session);
            // Only URIs a watch-capable mount owns; the rest are left out of the acknowledgment.
            uris.retain(|u| {
                let Ok(parsed) = ResourceUri::parse(u) else {
                    return false;
                };
                let watchable = self
                    .state
                    .router
                    .route(&parsed)
                    .is_some_and(|m| m.provider.info().capabilities.watch);
                if watchable {
                    // This runs before the acknowledgment is sent; a client may change the
                    // resource the moment it sees it, before `listen` has set up a watch.
                    self.stash_token(&parsed);
                }
                watchable
            });
        }
        Some(accepted)
    }

    async fn listen(&self, ctx: SubscriptionContext) -> Result<(), ErrorData> {
        Box::pin(self.do_listen(ctx)).await
    }
}

impl McpHandler {
    /// `subscriptions/listen`: feeds the stream until the client closes it.
    async fn do_listen(&self, ctx: SubscriptionContext) -> Result<(), ErrorData> {
        let registry = self.state.registry.clone();
        let grant = grant_of(&ctx.request_context().extensions);
        let (id, mut rx) =
            registry.add_scoped_subscriber(visible_mounts(&self.state.router, grant.as_ref()));
        // Removes the subscriber however this future ends, cancellation included.
        struct Release(Arc<crate::Registry>, u64);
        impl Drop for Release {
            fn drop(&mut self) {
                self.0.remove(self.1);
            }
        }
        let _release = Release(registry.clone(), id);
        let accepted = ctx.accepted().clone();
        let sink = ctx.sink().clone();
        // The acknowledgment went out before this ran, and setting up watches takes a moment:
        // compare each resource with the fingerprint taken before the acknowledgment once its
        // watch is in place, so a change made in between is still reported.
        let mut before = Vec::new();
        for uri in accepted.resource_subscriptions.iter().flatten() {
            let Ok(parsed) = ResourceUri::parse(uri) else {
                continue;
            };
            // The acknowledgment is sent before the caller's token can be consulted; a URI of a
            // mount it may not see is simply never watched for it.
            if self
                .state
                .router
                .route(&parsed)
                .is_some_and(|m| !visible(grant.as_ref(), m))
            {
                let _ = self.take_token(&parsed);
                continue;
            }
            let token = match self.take_token(&parsed) {
                Some(t) => t,
                None => self
                    .state
                    .router
                    .route(&parsed)
                    .and_then(|m| m.provider.change_token(&parsed)),
            };
            before.push((parsed, token));
        }
        let fresh_list =
            accepted.resources_list_changed == Some(true) && registry.add_list_listener(id).await;
        for (parsed, token) in &before {
            if let Err(e) = registry.subscribe(id, parsed).await {
                tracing::debug!(uri = %parsed, error = %e, "listen: cannot watch");
                continue;
            }
            let now = self
                .state
                .router
                .route(parsed)
                .and_then(|m| m.provider.change_token(parsed));
            if token.is_some() && now != *token {
                let _ = sink.notify_resource_updated(parsed.as_str()).await;
            }
        }
        if fresh_list {
            // This stream had to start the list watches; anything created meanwhile was not
            // seen, so say once that the list may have changed.
            let _ = sink.notify_resource_list_changed().await;
        }
        loop {
            tokio::select! {
                () = ctx.cancelled() => break,
                notice = rx.recv() => {
                    let Some(notice) = notice else { break };
                    let sent = match notice {
                        Notice::Updated(uri) => sink.notify_resource_updated(uri).await,
                        Notice::ListChanged => sink.notify_resource_list_changed().await,
                    };
                    if sent.is_err() {
                        break;
                    }
                }
            }
        }
        Ok(())
    }
}
