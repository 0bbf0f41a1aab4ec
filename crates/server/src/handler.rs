//! [`McpHandler`]: the rmcp `ServerHandler` serving both protocol eras over any transport,
//! a thin adapter over [`Service`].
//!
//! One handler value is one session in the legacy era (stdio, or one `Mcp-Session-Id` over
//! HTTP): its subscriptions are released when it is dropped. In the 2026-07-28 era every
//! request stands alone and each `subscriptions/listen` stream registers for its own lifetime.
//! What belongs to rmcp or to an era lives here: parameter and result types, cache hints only
//! for 2026-07-28 peers; the `resultType` and not-found rewriting the direct read paths copy
//! from rmcp's dispatch is in [`crate::wire::era`].

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use base64::Engine as _;
use mcpr_core::{CacheHints, Contents, ContentsBody, Error, ResourceMeta};
use rmcp::model::{
    Annotations, CacheScope, CallToolRequestParams, CallToolResponse, CompleteRequestParams,
    CompleteResult, CompletionInfo, CustomRequest, CustomResult, DiscoverResult,
    GetPromptRequestParams, GetPromptResponse, Implementation, InitializeRequestParams,
    InitializeResult, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, MetaObject, PaginatedRequestParams, ProtocolVersion,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Reference, Resource,
    ResourceContents, ResourceTemplate, ServerCapabilities, ServerConfig, ServerResult,
    SubscribeRequestParams, SubscriptionFilter, Tool, ToolsCapability, UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, RoleServer, SubscriptionContext};
use rmcp::transport::streamable_http_server::session::SessionRestoreMarker;
use rmcp::{ErrorData, Peer, ServerHandler};

use crate::errors::to_mcp_error;
use crate::grant::{Grant, Identity};
use crate::layers::metered_rpc;
use crate::registry::Notice;
use crate::router::Router;
use crate::service::{ChangeTokens, CompletionRef, Service, Subscriber};
use crate::wire::era::Era;
use crate::wire::notify::notification;
use crate::wire::params::method_not_found;
use crate::{ServerState, Settings};

mod skills;

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
    // SEP-2640: skills/list, skills/get and resources/directory/read, when a mount
    // carries skills (see `crate::skills`).
    if !settings.skills.is_empty() {
        let mut skills = serde_json::Map::new();
        skills.insert("directoryRead".into(), true.into());
        caps.extensions
            .get_or_insert_with(Default::default)
            .insert(rmcp::model::SKILLS_EXTENSION_ID.to_owned(), skills);
    }
    // The bridge's tools are fixed for the life of the server: no `listChanged`.
    if settings.tools {
        caps.tools = Some(ToolsCapability::default());
    }
    // `initialize` and `server/discover` replace these with the caller's own mounts; the
    // shared value names only mounts that every caller may see.
    let everyone = Grant {
        scopes: Some(Default::default()),
        personal: false,
    };
    ServerConfig::new(caps)
        .with_server_info(Implementation::new(
            settings.name.clone(),
            settings.version.clone(),
        ))
        .with_instructions(instructions(router, Some(&everyone)))
}

/// The instructions for a caller holding `grant`: they name only the mounts it may see.
pub(crate) fn instructions(router: &Router, grant: Option<&Grant>) -> String {
    let mounts: Vec<String> = router
        .mounts()
        .iter()
        .filter(|m| grant.is_none_or(|g| g.allows(m.scope.as_deref())))
        .map(|m| {
            let info = m.provider.info();
            format!(
                "- {} mount {} ({})",
                info.kind,
                info.label,
                crate::router::mount_addresses(&*m.provider).join(", ")
            )
        })
        .collect();
    format!(
        "Read-only access to these sources as MCP resources. List them with resources/list, read by URI, and use the URI templates (resources/templates/list) to address files, including windows of large files.\n{}",
        mounts.join("\n")
    )
}

/// The MCP handler: the rmcp adapter over [`Service`]. Create one per session with
/// [`McpHandler::new`].
///
/// Each method parses rmcp's parameters, calls the service with the caller's grant, and maps
/// the core answer to rmcp's types (cache hints only for 2026-07-28 peers); errors become
/// JSON-RPC errors in [`to_mcp_error`]. What is left here is per-session state: a legacy
/// session's subscriber, created on first need and removed when the handler is dropped, and
/// the change tokens of listens being acknowledged.
pub struct McpHandler {
    service: Service,
    subscriber: OnceLock<Subscriber>,
    tokens: ChangeTokens,
    /// Over HTTP with sessions roaming between replicas: a legacy session's subscriptions
    /// are recorded there, and the replica holding its GET stream watches them.
    hub: Option<Arc<dyn crate::http::SessionHub>>,
    /// Over stdio: cancelled once the client closed its input and everything else it asked
    /// is answered; every listen stream then ends with its final result.
    listens_end: Option<tokio_util::sync::CancellationToken>,
    /// Whether [`Served`] takes listens' change tokens before rmcp dispatches them, so
    /// `accepted_subscription_filter` need not.
    listens_prepared: bool,
}

impl McpHandler {
    /// Take the change tokens of a listen's accepted `uris` before rmcp acknowledges it,
    /// from inside rmcp's synchronous `accepted_subscription_filter` (a handler served
    /// without [`Served`]: the HTTP transport, which takes only a `ServerHandler`).
    ///
    /// On a multi-thread runtime the wait is `block_in_place`: this worker's other tasks
    /// move to another while the tokens are taken (through the layer, so bounded by the
    /// request timeout; a `stat` runs on the blocking pool). A current-thread runtime has no
    /// other worker; there the tokens are awaited in place, which stops that runtime until
    /// the blocking pool answers (serve [`Served`] there: stdio does).
    fn prepare_listen_now(&self, uris: &[String]) {
        let prepare = self.service.prepare_listen(uris, &self.tokens);
        match tokio::runtime::Handle::try_current() {
            Ok(rt) if rt.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| rt.block_on(prepare));
            }
            _ => futures::executor::block_on(prepare),
        }
    }

    /// A handler (one session) over the shared server state.
    pub fn new(state: Arc<ServerState>) -> Self {
        Self {
            service: Service::new(state),
            subscriber: OnceLock::new(),
            tokens: ChangeTokens::default(),
            hub: None,
            listens_end: None,
            listens_prepared: false,
        }
    }

    /// End every `subscriptions/listen` stream, with its final result, once `token` is
    /// cancelled (see [`crate::stdio::StdioEnd::input_over`]): a stream has no reader then,
    /// and the session cannot end while one is open.
    pub fn ending_listens_on(mut self, token: tokio_util::sync::CancellationToken) -> Self {
        self.listens_end = Some(token);
        self
    }

    /// Record legacy sessions' subscriptions in `hub` (HTTP sessions roaming between
    /// replicas) instead of watching them for this handler.
    pub fn with_session_hub(mut self, hub: Option<Arc<dyn crate::http::SessionHub>>) -> Self {
        self.hub = hub;
        self
    }

    /// The hub and this request's session id, when the session roams.
    fn roaming<'a>(
        &'a self,
        ext: &'a rmcp::model::Extensions,
    ) -> Option<(&'a dyn crate::http::SessionHub, &'a str)> {
        let hub = self.hub.as_deref()?;
        let id = ext
            .get::<http::request::Parts>()?
            .headers
            .get("mcp-session-id")?
            .to_str()
            .ok()?;
        Some((hub, id))
    }

    /// The protocol-neutral service this handler adapts.
    pub fn service(&self) -> &Service {
        &self.service
    }

    /// This session's subscriber id, registering it (and its delivery task) on first use.
    fn legacy_subscriber(&self, peer: &Peer<RoleServer>, grant: Option<&Grant>) -> u64 {
        self.subscriber
            .get_or_init(|| {
                let (subscriber, mut rx) = self.service.add_subscriber(grant);
                let peer = peer.clone();
                tokio::spawn(async move {
                    while let Some(notice) = rx.recv().await {
                        if notify(&peer, notice).await.is_err() {
                            break;
                        }
                    }
                });
                subscriber
            })
            .id()
    }
}

/// Send one notice to a legacy session's peer.
async fn notify(
    peer: &Peer<RoleServer>,
    notice: Notice,
) -> Result<(), rmcp::service::ServiceError> {
    peer.send_notification(notification(notice)).await
}

/// The caller's grant, when the request came over authenticated HTTP.
fn grant_of(ext: &rmcp::model::Extensions) -> Option<&Grant> {
    ext.get::<http::request::Parts>()
        .and_then(|p| p.extensions.get::<Grant>())
}

/// Who is calling, when the request came over HTTP (see [`Identity`]).
fn identity_of(ext: &rmcp::model::Extensions) -> Option<&Identity> {
    ext.get::<http::request::Parts>()
        .and_then(|p| p.extensions.get::<Identity>())
}

fn scope(h: CacheHints) -> CacheScope {
    match h.scope {
        mcpr_core::CacheScope::Public => CacheScope::Public,
        mcpr_core::CacheScope::Private => CacheScope::Private,
    }
}

pub(crate) fn resource_of(m: ResourceMeta) -> Resource {
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

pub(crate) fn contents_of(c: Contents) -> ResourceContents {
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

/// The mounts a listing left out, as its `_meta` (and the tool bridge's answers) name them:
/// `[{"mount", "message", "partial"}]`, `partial` when entries of the mount went out on
/// earlier pages and only the rest is missing.
pub(crate) fn skipped_json(skipped: &[crate::service::SkippedMount]) -> serde_json::Value {
    skipped
        .iter()
        .map(|s| {
            serde_json::json!({
                "mount": s.mount,
                "message": mcpr_core::redact_urls_in(&s.error.message),
                "partial": s.partial,
            })
        })
        .collect()
}

/// The request implementations: rmcp parameters in, one service call, rmcp types out.
impl McpHandler {
    async fn do_list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let cursor = request.and_then(|r| r.cursor);
        let page = self
            .service
            .list(grant_of(&ctx.extensions), cursor.as_deref())
            .await
            .map_err(to_mcp_error)?;
        let mut result =
            ListResourcesResult::with_all_items(page.items.into_iter().map(resource_of).collect());
        result.next_cursor = page.next_cursor;
        if !page.skipped.is_empty() {
            let mut meta = serde_json::Map::new();
            meta.insert(
                crate::service::UNAVAILABLE_META_KEY.to_owned(),
                skipped_json(&page.skipped),
            );
            result.meta = Some(MetaObject(meta));
        }
        if Era::of(&ctx) == Era::Modern {
            result = result
                .with_ttl_ms(page.hints.ttl_ms)
                .with_cache_scope(scope(page.hints));
        }
        Ok(result)
    }

    async fn do_list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let list = self
            .service
            .templates(grant_of(&ctx.extensions))
            .await
            .map_err(to_mcp_error)?;
        let templates = list
            .templates
            .into_iter()
            .map(|t| {
                let mut rt = ResourceTemplate::new(t.uri_template, t.name);
                rt.title = t.title;
                rt.description = t.description;
                rt.mime_type = t.mime_type;
                rt
            })
            .collect();
        let mut result = ListResourceTemplatesResult::with_all_items(templates);
        if Era::of(&ctx) == Era::Modern {
            result = result
                .with_ttl_ms(list.hints.ttl_ms)
                .with_cache_scope(scope(list.hints));
        }
        Ok(result)
    }

    /// `resources/read` of `request` for a caller holding `grant` (none over stdio or
    /// without authentication), as the answer to request `id` in `era` ([`Era::Modern`]
    /// callers get cache hints), shaped as `S` says: rmcp's typed result for rmcp's
    /// dispatch ([`Typed`]), the whole JSON-RPC answer for the direct paths ([`Wire`]). So
    /// every path answers through the same service call.
    ///
    /// With [`McpHandler::read_now`], the handler's one read entry point: a pair because
    /// the service's and the provider's reads are one (see [`Service::read_now`]).
    pub(crate) async fn read<S: Shape>(
        &self,
        request: &ReadResourceRequestParams,
        grant: Option<&Grant>,
        id: &rmcp::model::RequestId,
        era: Era,
    ) -> S::Answer {
        S::shape(self.service.read(grant, &request.uri).await, id, era)
    }

    /// [`McpHandler::read`] done in place, when the read can finish without waiting
    /// ([`Service::read_now`]): a plain call, no future. `None` leaves it to `read`.
    pub(crate) fn read_now<S: Shape>(
        &self,
        request: &ReadResourceRequestParams,
        grant: Option<&Grant>,
        id: &rmcp::model::RequestId,
        era: Era,
    ) -> Option<S::Answer> {
        let read = self.service.read_now(grant, &request.uri)?;
        Some(S::shape(read, id, era))
    }

    async fn do_complete(
        &self,
        mut request: CompleteRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let context: BTreeMap<String, String> = request
            .context
            .take()
            .and_then(|c| c.arguments)
            .map(|a| a.into_iter().collect())
            .unwrap_or_default();
        let reference = match &request.r#ref {
            Reference::Resource(r) => CompletionRef::Template(&r.uri),
            _ => CompletionRef::Other,
        };
        let done = self
            .service
            .complete(
                grant_of(&ctx.extensions),
                reference,
                &request.argument.name,
                &request.argument.value,
                context,
            )
            .await
            .map_err(to_mcp_error)?;
        // The service keeps to the MCP limit, so this cannot refuse the values.
        let mut info =
            CompletionInfo::new(done.values).map_err(|e| to_mcp_error(Error::internal(e)))?;
        info.total = done.total;
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
        let grant = grant_of(&ctx.extensions);
        if let Some((hub, id)) = self.roaming(&ctx.extensions) {
            return self
                .service
                .subscribe_recorded(grant, &request.uri, hub, id)
                .await
                .map_err(to_mcp_error);
        }
        self.service
            .subscribe(grant, &request.uri, || {
                self.legacy_subscriber(&ctx.peer, grant)
            })
            .await
            .map_err(to_mcp_error)
    }

    async fn do_unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if let Some((hub, id)) = self.roaming(&ctx.extensions) {
            return self
                .service
                .unsubscribe_recorded(&request.uri, hub, id)
                .await
                .map_err(to_mcp_error);
        }
        let id = self.legacy_subscriber(&ctx.peer, grant_of(&ctx.extensions));
        self.service
            .unsubscribe(id, &request.uri)
            .await
            .map_err(to_mcp_error)
    }
}

/// Each request's future is boxed: rmcp spawns one task per request holding the future of
/// `handle_request`, which is as large as the largest of these, and moving it into the task
/// cost a few kilobytes of copying on every request, the smallest read included.
impl ServerHandler for McpHandler {
    fn get_info(&self) -> ServerConfig {
        self.service.state().info.clone()
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Box::pin(self.do_list_resources(request, ctx)).await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Box::pin(self.do_list_resource_templates(request, ctx)).await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        Box::pin(async {
            self.read::<Typed>(&request, grant_of(&ctx.extensions), &ctx.id, Era::of(&ctx))
                .await
        })
        .await
    }

    async fn list_skills(
        &self,
        request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListSkillsResult, ErrorData> {
        Box::pin(self.do_list_skills(request, ctx)).await
    }

    async fn get_skill(
        &self,
        request: rmcp::model::GetSkillRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetSkillResult, ErrorData> {
        Box::pin(self.do_get_skill(request, ctx)).await
    }

    async fn read_resource_directory(
        &self,
        request: rmcp::model::ReadResourceDirectoryRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Box::pin(self.do_read_resource_directory(request, ctx)).await
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        Box::pin(self.do_complete(request, ctx)).await
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Box::pin(self.do_subscribe(request, ctx)).await
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Box::pin(self.do_unsubscribe(request, ctx)).await
    }

    /// Without the bridge this server has no tools, and a method of a capability it does not
    /// declare does not exist for it: "method not found" (404 over 2026-07-28 HTTP), never
    /// an empty list that looks like a real answer.
    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let state = self.service.state();
        if !state.settings.tools {
            return Err(method_not_found("tools/list", false, Era::of(&ctx)));
        }
        let mut result = ListToolsResult::with_all_items(state.tools.clone());
        if Era::of(&ctx) == Era::Modern {
            // The same tools for every caller, for the life of the server.
            result = result
                .with_ttl_ms(state.list_cache.ttl_ms)
                .with_cache_scope(CacheScope::Public);
        }
        Ok(result)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if !self.service.state().settings.tools {
            return Err(method_not_found("tools/call", false, Era::of(&ctx)));
        }
        Box::pin(crate::tools::call(
            &self.service,
            grant_of(&ctx.extensions),
            request,
        ))
        .await
        .map(CallToolResponse::from)
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        let state = self.service.state();
        state.tools.iter().find(|t| t.name == name).cloned()
    }

    /// This server offers no prompts, with or without the bridge.
    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Err(method_not_found("prompts/list", false, Era::of(&ctx)))
    }

    async fn get_prompt(
        &self,
        _request: GetPromptRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        Err(method_not_found("prompts/get", false, Era::of(&ctx)))
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        let answer = async {
            ctx.peer.set_peer_info(request.clone());
            // Legacy clients cannot opt in or out of list_changed: the capability promises
            // it. Registering here, before the answer, means no change after the client's
            // first listing can be missed; the watches start in the background and
            // `list_resources` waits for them.
            let grant = grant_of(&ctx.extensions);
            // A roaming session hears of list changes from the replica holding its stream.
            if self.service.reports_list_changes() && self.hub.is_none() {
                let id = self.legacy_subscriber(&ctx.peer, grant);
                self.service.listen_for_list_changes(id);
            }
            let mut result = self.negotiate_initialize(&request)?;
            result.instructions = Some(instructions(self.service.state().router(), grant));
            Ok(result)
        };
        // A session restored on this replica replays its stored `initialize`: no client
        // asked anything, so nothing is counted.
        if ctx.extensions.get::<SessionRestoreMarker>().is_some() {
            answer.await
        } else {
            metered_rpc(self.service.state().metrics(), "initialize", answer).await
        }
    }

    async fn discover(&self, ctx: RequestContext<RoleServer>) -> Result<DiscoverResult, ErrorData> {
        metered_rpc(self.service.state().metrics(), "server/discover", async {
            let mut info = self.get_info();
            info.instructions = Some(instructions(
                self.service.state().router(),
                grant_of(&ctx.extensions),
            ));
            Ok(DiscoverResult::from_server_info(
                self.supported_protocol_versions().into_owned(),
                info,
            ))
        })
        .await
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let mut accepted = requested.clone();
        accepted.tools_list_changed = None;
        accepted.prompts_list_changed = None;
        if let Some(uris) = accepted.resource_subscriptions.as_mut() {
            // Prepared first: preparing looks up skill URIs the catalog has not seen yet,
            // which the acceptance (it consults only the last listing) would drop.
            if !self.listens_prepared {
                self.prepare_listen_now(uris);
            }
            self.service.accept_listen(uris);
        }
        Some(accepted)
    }

    async fn listen(&self, ctx: SubscriptionContext) -> Result<(), ErrorData> {
        Box::pin(self.do_listen(ctx)).await
    }

    /// rmcp lands here a request of a known method whose params its decode refused (it tries
    /// every typed request, then this catch-all): that is invalid params naming the member,
    /// not "method not found". An unknown method is still method not found.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let CustomRequest { method, params, .. } = request;
        let tools = self.service.state().settings.tools;
        let era = Era::of(&ctx);
        // A method the 2026-07-28 era removed does not exist for its requests, whatever
        // their params: "method not found" (404 over HTTP), as that era requires.
        if era == Era::Modern
            && crate::wire::params::REMOVED_IN_2026_07_28.contains(&method.as_str())
        {
            return Err(method_not_found(&method, tools, era));
        }
        if crate::wire::params::is_known(&method, tools) {
            return Err(crate::wire::params::invalid_params_or_generic(
                &method,
                params.as_ref(),
            ));
        }
        Err(method_not_found(&method, tools, era))
    }
}

impl McpHandler {
    /// `subscriptions/listen`: feeds the stream until the client closes it. The listen (and
    /// with it every watch only it needed) ends however this future ends, cancellation
    /// included.
    async fn do_listen(&self, ctx: SubscriptionContext) -> Result<(), ErrorData> {
        let accepted = ctx.accepted();
        let extensions = &ctx.request_context().extensions;
        // A listen refused by a limit ends with the error naming it, right after the
        // acknowledgment (rmcp sends that before the handler runs).
        let mut listen = self
            .service
            .listen(
                grant_of(extensions),
                identity_of(extensions),
                accepted
                    .resource_subscriptions
                    .as_deref()
                    .unwrap_or_default(),
                accepted.resources_list_changed == Some(true),
                &self.tokens,
            )
            .await
            .map_err(to_mcp_error)?;
        let sink = ctx.sink();
        let ended = async {
            match &self.listens_end {
                Some(token) => token.cancelled().await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(ended);
        loop {
            tokio::select! {
                () = ctx.cancelled() => break,
                () = &mut ended => break,
                notice = listen.next() => {
                    let Some(notice) = notice else { break };
                    if sink.send(notification(notice)).await.is_err() {
                        break;
                    }
                }
            }
        }
        Ok(())
    }
}

/// [`McpHandler`] as rmcp serves it: rmcp's own dispatch, with one step of ours before it.
///
/// rmcp acknowledges a `subscriptions/listen` right after the synchronous
/// `accepted_subscription_filter`, which leaves no place to await the change tokens the
/// listen compares against once its watches are in place (see
/// [`Service::prepare_listen`]). This takes them before rmcp dispatches the request, so a
/// change the client makes the moment it sees the acknowledgment is still reported. Serve
/// this, not the bare handler, wherever the transport takes any rmcp service (stdio in the
/// binary); rmcp's HTTP service takes only a `ServerHandler`, so HTTP serves the bare
/// handler, whose `accepted_subscription_filter` takes the tokens instead
/// (`McpHandler::prepare_listen_now`).
pub struct Served(McpHandler);

impl From<McpHandler> for Served {
    fn from(mut handler: McpHandler) -> Self {
        handler.listens_prepared = true;
        Self(handler)
    }
}

impl rmcp::Service<RoleServer> for Served {
    async fn handle_request(
        &self,
        request: rmcp::model::ClientRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<ServerResult, ErrorData> {
        use futures::FutureExt as _;
        let method = request.method().to_owned();
        // A panic anywhere in the request (the service catches the providers' own, see
        // `layers::metered`) fails this request alone: rmcp runs it on a task of its own, and
        // a task that unwinds sends no answer, so the client would wait for ever and the
        // stdio transport would count the request as in progress for good.
        std::panic::AssertUnwindSafe(async {
            if let rmcp::model::ClientRequest::SubscriptionsListenRequest(listen) = &request
                && let Some(uris) = &listen.params.notifications.resource_subscriptions
            {
                self.0.service.prepare_listen(uris, &self.0.tokens).await;
            }
            rmcp::Service::handle_request(&self.0, request, context).await
        })
        .catch_unwind()
        .await
        .unwrap_or_else(|_| Err(to_mcp_error(crate::layers::panicked(&method))))
    }

    async fn handle_notification(
        &self,
        notification: rmcp::model::ClientNotification,
        context: rmcp::service::NotificationContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        rmcp::Service::handle_notification(&self.0, notification, context).await
    }

    fn get_info(&self) -> ServerConfig {
        rmcp::Service::<RoleServer>::get_info(&self.0)
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        rmcp::Service::<RoleServer>::supported_protocol_versions(&self.0)
    }
}

/// How the answer to a `resources/read` is shaped: the one thing the paths that read through
/// [`McpHandler::read`] differ in. A type, not a value, so that each path's shaping is a
/// plain call chosen at compile time, with nothing to match on the hot path.
pub(crate) trait Shape {
    /// What the caller gets.
    type Answer;
    /// The answer to request `id` for `read`, in `era`.
    fn shape(
        read: mcpr_core::Result<crate::service::ReadOutcome>,
        id: &rmcp::model::RequestId,
        era: Era,
    ) -> Self::Answer;
}

/// rmcp's typed result, which rmcp's dispatch post-processes per era and encodes: the shape
/// of `read_resource`.
pub(crate) enum Typed {}

impl Shape for Typed {
    type Answer = Result<ReadResourceResponse, ErrorData>;

    fn shape(
        read: mcpr_core::Result<crate::service::ReadOutcome>,
        _id: &rmcp::model::RequestId,
        era: Era,
    ) -> Self::Answer {
        let read = read.map_err(to_mcp_error)?;
        let mut result =
            ReadResourceResult::new(read.contents.into_iter().map(contents_of).collect());
        if era == Era::Modern {
            result = result
                .with_ttl_ms(read.hints.ttl_ms)
                .with_cache_scope(scope(read.hints));
        }
        Ok(result.into())
    }
}

/// The whole JSON-RPC answer, as the direct read paths write it: a successful read as JSON
/// written straight from the provider's contents ([`crate::wire::encode::read_answer_json`]),
/// without building rmcp's result, its contents' buffers given back to [`mcpr_core::spare`]
/// once copied into the answer; a refused one as the error message rmcp's dispatch would
/// send for the era ([`crate::wire::era::read_message`]), for the transport to encode (HTTP
/// takes its status from it).
pub(crate) enum Wire {}

/// What [`Wire`] gives: the answer's JSON, or the error message to send instead.
pub(crate) type WireAnswer = Result<std::io::Result<Vec<u8>>, rmcp::model::ServerJsonRpcMessage>;

impl Shape for Wire {
    type Answer = WireAnswer;

    fn shape(
        read: mcpr_core::Result<crate::service::ReadOutcome>,
        id: &rmcp::model::RequestId,
        era: Era,
    ) -> Self::Answer {
        match read {
            Ok(read) => {
                let answer = crate::wire::encode::read_answer_json(
                    id,
                    &read.contents,
                    (era == Era::Modern).then(|| (read.hints.ttl_ms, scope(read.hints))),
                );
                for c in read.contents {
                    mcpr_core::spare::give_back(match c.body {
                        ContentsBody::Text(text) => text.into_bytes(),
                        ContentsBody::Blob(bytes) => bytes,
                    });
                }
                Ok(answer)
            }
            Err(e) => Err(crate::wire::era::read_message(
                Err(to_mcp_error(e)),
                id.clone(),
                era,
            )),
        }
    }
}
