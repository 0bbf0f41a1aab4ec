//! The MCP side of mcp-resources: the protocol-neutral [`Service`], the rmcp `ServerHandler`
//! over it for both protocol eras, the router that maps a URI to its mount, and the registry
//! that fans change events out to subscribers.
//!
//! Providers never see anything from here but core types; everything that knows about
//! JSON-RPC, sessions, cursors on the wire or protocol eras lives in this crate.

mod errors;
mod grant;
mod handler;
pub mod http;
mod hung;
mod layers;
pub mod mailbox;
pub mod metrics;
mod registry;
mod router;
mod service;
pub mod skills;
pub mod stdio;
mod tools;
mod wire;

pub use errors::to_mcp_error;
pub use grant::{Grant, Identity};
pub use handler::{McpHandler, Served};
pub use layers::Layered;
pub use registry::{ListenSlot, Notice, Registry, RegistryStats};
pub use router::{Mount, Router, mount_addresses, mount_name};
pub use service::{
    ChangeTokens, CompletionRef, ListPage, Listen, MAX_COMPLETION_VALUES, ReadOutcome, RecordError,
    SCAN_MAX_PAGES, SCAN_MAX_TIME, ScanPage, Service, SkippedMount, Subscriber, SubscriptionRecord,
    TemplateList, UNAVAILABLE_META_KEY,
};
pub use service::{DirectoryPage, SkillsPage};

use std::sync::Arc;

use mcpr_core::{CacheHints, ChangeBus, CursorCodec, LocalBus, Provider};

/// The default `[server] max_inflight_read_bytes`: 64 reads of the default 8 MiB at once.
pub const DEFAULT_MAX_INFLIGHT_READ_BYTES: u64 = 512 << 20;

/// The largest `max_read_bytes` (and `http.max_body_bytes`) accepted. Past this a single
/// stdio message (base64 adds a third) outgrows what common clients buffer; windows are the
/// way to read more.
pub const MAX_READ_LIMIT: u64 = 64 * 1024 * 1024;

/// Server-wide settings, from the `[server]` table.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `serverInfo.name`.
    pub name: String,
    /// `serverInfo.version`.
    pub version: String,
    /// Entries per `resources/list` page.
    pub page_size: usize,
    /// The most bytes one `resources/read` returns.
    pub max_read_bytes: u64,
    /// The longest a provider may take to answer one request.
    pub request_timeout: std::time::Duration,
    /// The most resources one session (or one listen stream) may subscribe to.
    pub max_subscriptions_per_session: usize,
    /// The memory all reads in progress may hold together, so concurrent reads cannot exhaust
    /// memory: each read
    /// reserves `max_read_bytes` of it while its provider runs; when none is left a read
    /// waits, up to the request timeout, then answers "server busy".
    pub max_inflight_read_bytes: u64,
    /// The most `subscriptions/listen` streams one client may hold open at once (a client
    /// is a token's identity over authenticated HTTP, an address without authentication,
    /// the one peer over stdio).
    pub max_listen_streams_per_client: usize,
    /// The most subscriptions held at once over every session and listen stream: each URI
    /// subscribed to or listened for counts one.
    pub max_watches: usize,
    /// Whether the tool bridge is on (`[server] tools`, `serve --tools`): the server then
    /// also declares `tools` and offers the resource operations as tools, for clients that
    /// use only tools.
    pub tools: bool,
    /// The mounts that carry skills (SEP-2640), with their settings.
    pub skills: Vec<skills::SkillsSetting>,
    /// The secret cursors are sealed under: a cluster's `[cluster] secret`, so that every
    /// replica continues the others' listings. `None` takes a random one, and cursors then
    /// do not outlive the process.
    pub cursor_secret: Option<mcpr_core::CursorSecret>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            name: "mcp-resources".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            page_size: 100,
            max_read_bytes: 8 * 1024 * 1024,
            request_timeout: std::time::Duration::from_secs(30),
            max_subscriptions_per_session: 1000,
            max_inflight_read_bytes: DEFAULT_MAX_INFLIGHT_READ_BYTES,
            max_listen_streams_per_client: 64,
            max_watches: 100_000,
            tools: false,
            skills: Vec::new(),
            cursor_secret: None,
        }
    }
}

/// Everything the service needs, shared by every session.
pub struct ServerState {
    pub(crate) settings: Settings,
    pub(crate) router: Router,
    pub(crate) codec: CursorCodec,
    pub(crate) registry: Arc<Registry>,
    /// The cache hints of a list: the shortest TTL and the strictest scope over all mounts,
    /// because one list spans mounts and every page must carry the same scope.
    pub(crate) list_cache: CacheHints,
    pub(crate) info: rmcp::model::ServerConfig,
    pub(crate) metrics: metrics::Metrics,
    /// Per mount, the listings that left it out and whether it is in an outage now.
    pub(crate) list_skips: metrics::ListSkips,
    /// What reads in progress hold of `max_inflight_read_bytes`.
    pub(crate) read_budget: layers::ReadBudget,
    /// The tool bridge's tools; empty when it is off.
    pub(crate) tools: Vec<rmcp::model::Tool>,
    /// Cancelled when an HTTP shutdown's grace period is over: reads still running then
    /// answer a clear error instead of being cut off with their connection.
    pub(crate) reads_cut: tokio_util::sync::CancellationToken,
    /// The skills catalog, when a mount carries skills.
    pub(crate) skills: Option<Arc<skills::Catalog>>,
}

impl ServerState {
    /// Build the state for `providers` (in mount order) with the in-process change bus.
    /// Must be called inside a tokio runtime: the registry starts its fan-out task.
    pub fn new(settings: Settings, providers: Vec<Arc<dyn Provider>>) -> Arc<Self> {
        let mounts = providers.into_iter().map(|p| (p, None)).collect();
        Self::with_bus(settings, mounts, Arc::new(LocalBus::default()))
    }

    /// Like [`ServerState::new`] with per-mount scopes and an explicit change bus.
    pub fn with_bus(
        settings: Settings,
        providers: Vec<(Arc<dyn Provider>, Option<String>)>,
        bus: Arc<dyn ChangeBus>,
    ) -> Arc<Self> {
        Self::with_watching(settings, providers, bus, Arc::new(mcpr_core::LocalWatching))
    }

    /// Like [`ServerState::with_bus`], with provider watches run by `watching` (a cluster's
    /// watcher for shared mounts, see `mcpr_core::Watching`).
    pub fn with_watching(
        settings: Settings,
        providers: Vec<(Arc<dyn Provider>, Option<String>)>,
        bus: Arc<dyn ChangeBus>,
        watching: Arc<dyn mcpr_core::Watching>,
    ) -> Arc<Self> {
        Self::with_router(settings, Router::new(providers), bus, watching)
    }

    /// Like [`ServerState::with_watching`] over mounts already built: the binary builds them
    /// first, so that a cluster's watcher calls their providers through the same layer and
    /// counters ([`Layered`]).
    pub fn with_router(
        settings: Settings,
        router: Router,
        bus: Arc<dyn ChangeBus>,
        watching: Arc<dyn mcpr_core::Watching>,
    ) -> Arc<Self> {
        // Cursors from another build, another mount layout or another secret must not verify.
        let mut fingerprint = Vec::new();
        for m in router.mounts() {
            fingerprint.extend_from_slice(m.provider.info().kind.as_bytes());
            fingerprint.push(0);
            for p in &m.provider.info().uri_prefixes {
                fingerprint.extend_from_slice(p.as_bytes());
                fingerprint.push(0);
            }
            fingerprint.push(1);
        }
        let codec = CursorCodec::new(
            concat!(env!("CARGO_PKG_NAME"), "@", env!("CARGO_PKG_VERSION")),
            &fingerprint,
            &settings
                .cursor_secret
                .clone()
                .unwrap_or_else(mcpr_core::CursorSecret::random),
        );
        let list_cache = router
            .mounts()
            .iter()
            .map(|m| m.provider.info().cache)
            .reduce(CacheHints::min);
        let registry = Registry::new(router.clone(), bus, watching, settings.request_timeout);
        registry.set_max_watches(settings.max_watches);
        let info = handler::server_info(&settings, &router);
        let read_budget = layers::ReadBudget::new(settings.max_inflight_read_bytes);
        let list_skips = metrics::ListSkips::new(router.mounts().iter().map(|m| m.name.clone()));
        let skills = skills::catalog_for(&settings, &router);
        let tools = if settings.tools {
            tools::definitions(&settings, skills.is_some())
        } else {
            Vec::new()
        };
        if let Some(catalog) = &skills {
            // Skills appearing or going are a list change of their mount, found by each
            // replica's own catalog and told to this replica's listeners only.
            let tell = Arc::downgrade(&registry);
            let asks = Arc::downgrade(&registry);
            catalog.start(
                move |mount| {
                    if let Some(r) = tell.upgrade() {
                        r.list_changed_here(mount);
                    }
                },
                move || asks.upgrade().is_some_and(|r| r.has_list_listeners()),
            );
        }
        Arc::new(Self {
            skills,
            tools,
            read_budget,
            settings,
            router,
            codec,
            registry,
            list_cache: list_cache.unwrap_or_default(),
            info,
            metrics: metrics::Metrics::default(),
            list_skips,
            reads_cut: tokio_util::sync::CancellationToken::new(),
        })
    }

    /// The cluster's state (`None` without `[cluster]`), for `/readyz` and `/metrics`.
    pub fn cluster(&self) -> Option<mcpr_core::ClusterStatus> {
        self.registry.watching().cluster()
    }

    /// The skills catalog, when a mount carries skills (for metrics and tests).
    pub fn skills(&self) -> Option<&Arc<skills::Catalog>> {
        self.skills.as_ref()
    }

    /// The subscription registry (for metrics and tests).
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Request metrics.
    pub fn metrics(&self) -> &metrics::Metrics {
        &self.metrics
    }

    /// Per mount, the listings that left it out because its source failed.
    pub fn list_skips(&self) -> &metrics::ListSkips {
        &self.list_skips
    }

    /// The settings in force.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Whether every mount can serve requests right now.
    pub async fn ready(&self) -> Vec<(String, bool)> {
        let mut out = Vec::new();
        for m in self.router.mounts() {
            let ready = layers::Layered::new(m, self.settings.request_timeout)
                .readiness()
                .await
                .is_ok();
            out.push((m.provider.info().label.clone(), ready));
        }
        out
    }

    /// The router of mounts.
    pub fn router(&self) -> &Router {
        &self.router
    }
}
