//! Streamable HTTP: both protocol eras on one endpoint (rmcp's `StreamableHttpService` inside
//! axum), behind tower/axum layers for Host/Origin checks, authentication and limits, plus
//! `/healthz`, `/readyz` and `/metrics`.

mod auth;
mod config;
mod direct;
mod edge;
mod hub;
mod in_place;
mod jwt;
mod roaming;
mod sessions;

pub use crate::grant::{Grant, Identity};
pub use auth::{AuthSettings, IdentityKey, StaticToken};
pub use config::{HttpConfig, parse_listen};
pub use edge::HttpLimits;
pub use hub::{EventId, Replay, SessionHub, SessionSignal};
pub use jwt::JwtSettings;
/// The legacy session store seam (see [`HttpSettings::session_store`]).
pub use rmcp::transport::streamable_http_server::session::{
    SessionState, SessionStore, SessionStoreError,
};

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::StatusCode;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::wire::http_checks::AllowedHosts;
use crate::{McpHandler, ServerState};

/// Browser origins accepted by default: pages on this machine, any port.
pub const LOCAL_ORIGINS: &[&str] = &[
    "http://localhost:*",
    "https://localhost:*",
    "http://127.0.0.1:*",
    "https://127.0.0.1:*",
    "http://[::1]:*",
    "https://[::1]:*",
];

/// Settings of the HTTP transport, from `[http]` and the command line.
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Path of the MCP endpoint.
    pub path: String,
    /// Accepted `Host` values (names or `host:port`); empty accepts any (not recommended).
    pub allowed_hosts: Vec<String>,
    /// Accepted `Origin` values (with scheme; `:*` for any port); a request carrying another
    /// Origin gets 403. Empty refuses every request that carries an Origin.
    pub allowed_origins: Vec<String>,
    /// Authentication; `None` means none.
    pub auth: Option<AuthSettings>,
    /// Allow a non-loopback listen address without authentication.
    pub insecure_no_auth: bool,
    /// Answer 2026-07-28 requests with plain JSON when the reply is one message (SSE only
    /// when notifications come first, and always for `subscriptions/listen`).
    pub json_response: bool,
    /// Limits.
    pub limits: HttpLimits,
    /// Answer well-formed stateless `resources/read` requests without rmcp's per-request
    /// service (see `direct.rs`); off sends every request through rmcp. On by default; off
    /// exists so a test can compare the two paths.
    pub direct_reads: bool,
    /// Workers of the runtime `serve` runs on beyond the ones it needs. As many direct reads
    /// in place as there are spares run on a worker at once, with no hand-off to a reader
    /// thread; one that hangs holds a spare until it returns, and the other reads go to the
    /// reader threads meanwhile (see `in_place.rs`). Zero (the default) sends every read in
    /// place to the reader threads. The binary's HTTP runtime has two workers and two spares.
    pub spare_workers: usize,
    /// Where legacy sessions' handshakes live beyond this process. `None` (the default) keeps
    /// them in rmcp's in-process session manager only; with a store, a session created by
    /// another process sharing it is restored here on its first request (rmcp replays the
    /// stored `initialize`), so a client can continue it on any replica.
    pub session_store: Option<Arc<dyn SessionStore>>,
    /// Sessions that roam between replicas (it is then the session store too, and
    /// `session_store` is ignored): their owners, subscriptions, notification streams and
    /// `Last-Event-ID` resumption are shared, and a `DELETE` through any replica ends them
    /// everywhere. See `roaming.rs`; `mcpr-cluster` has one over NATS.
    pub session_hub: Option<Arc<dyn SessionHub>>,
}

impl HttpSettings {
    /// Defaults for `listen`: the MCP endpoint at `/mcp`, loopback hosts only.
    pub fn new(listen: SocketAddr) -> Self {
        Self {
            listen,
            path: "/mcp".into(),
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into()],
            // Pages served from this machine may talk to a local server; nothing else may.
            allowed_origins: LOCAL_ORIGINS.iter().map(|s| (*s).to_owned()).collect(),
            auth: None,
            insecure_no_auth: false,
            json_response: true,
            limits: HttpLimits::default(),
            direct_reads: true,
            spare_workers: 0,
            session_store: None,
            session_hub: None,
        }
    }

    /// Refuse configurations that would expose data to the network without authentication.
    pub fn check(&self) -> Result<(), String> {
        let open = self.auth.as_ref().is_none_or(|a| !a.is_enabled());
        if open && !self.listen.ip().is_loopback() {
            if self.insecure_no_auth {
                tracing::warn!(listen = %self.listen,
                    "serving WITHOUT AUTHENTICATION on a non-loopback address (--insecure-no-auth): anyone who can reach it can read every mount");
            } else {
                return Err(format!(
                    "refusing to listen on {} without authentication: anyone on the network could read every mount. \
                     Configure [http.auth] bearer_tokens, listen on 127.0.0.1, or pass --insecure-no-auth if a proxy in front authenticates",
                    self.listen
                ));
            }
        }
        if self.session_store.is_some() && self.session_hub.is_none() && !open {
            // A bare store keeps only the handshake: a session restored from it would be
            // usable by any valid token. A hub keeps the owner too.
            return Err(
                "a shared session store without a session hub cannot be combined with authentication: session owners would not be shared between replicas"
                    .into(),
            );
        }
        if !self.path.starts_with('/') {
            return Err(format!(
                "[http] path must start with '/', got {:?}",
                self.path
            ));
        }
        Ok(())
    }
}

/// A running HTTP server.
pub struct HttpServer {
    /// The address actually bound (useful with port 0).
    pub local_addr: SocketAddr,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl HttpServer {
    /// Wait until the server has shut down.
    pub async fn wait(self) -> Result<(), String> {
        match self.task.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!("HTTP server failed: {e}")),
            Err(e) => Err(format!("HTTP server task failed: {e}")),
        }
    }
}

struct Ops {
    state: Arc<ServerState>,
    edge: Arc<edge::Edge>,
    /// With authentication, `/metrics` and the detail of `/readyz` need a valid token.
    auth: Option<Arc<auth::Auth>>,
    metadata: Option<serde_json::Value>,
    direct_reads: Arc<AtomicU64>,
}

/// Bind and start serving; `shutdown` resolving starts a graceful shutdown: new requests are
/// refused, in-flight ones get `shutdown_grace` to finish, then streams are closed.
pub async fn serve(
    state: Arc<ServerState>,
    settings: HttpSettings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<HttpServer, String> {
    settings.check()?;
    let limits = settings.limits.clone();
    // No shared event store: rmcp's session keeps the last `event_store_capacity` events of
    // its notification stream and replays them on `Last-Event-ID`, which is what a client
    // whose stream dropped needs. A shared store would also make every 2026-07-28 stream
    // outlive its connection (rmcp then decouples the handler from the socket for
    // resumption), so closing a `subscriptions/listen` stream would no longer end it.
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = Some(limits.session_idle_timeout);
    manager.session_config.channel_capacity = limits.event_store_capacity.max(1);
    let manager = Arc::new(manager);
    let roaming = settings.session_hub.clone().map(|hub| {
        roaming::Roaming::new(
            hub,
            crate::service::Service::new(state.clone()),
            manager.clone(),
            limits.event_store_capacity,
            limits.session_idle_timeout,
        )
    });
    let sessions = Arc::new(sessions::ResumeAfter::new(manager.clone(), roaming.clone()));
    let streams = CancellationToken::new();
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(settings.allowed_hosts.clone())
        .with_cancellation_token(streams.child_token())
        .with_max_request_body_bytes(limits.max_body_bytes)
        .with_json_response(settings.json_response);
    if settings.allowed_origins.is_empty() {
        // With no browser origin configured, any request that carries an Origin is refused:
        // a local server has no business answering web pages (DNS rebinding, CSRF).
        config = config.enforce_origin_validation();
    } else {
        config = config.with_allowed_origins(settings.allowed_origins.clone());
    }
    if settings.allowed_hosts.is_empty() {
        config = config.disable_allowed_hosts();
    }
    config.session_store = match &settings.session_hub {
        Some(hub) => Some(hub.clone() as Arc<dyn SessionStore>),
        None => settings.session_store.clone(),
    };
    let factory_state = state.clone();
    let factory_hub = settings.session_hub.clone();
    let mcp = StreamableHttpService::new(
        move || Ok(McpHandler::new(factory_state.clone()).with_session_hub(factory_hub.clone())),
        sessions,
        config,
    );
    let direct_reads = Arc::new(AtomicU64::new(0));
    // rmcp's service checks Host with its own copy of the list; the direct path and the
    // operational endpoints check it with this one.
    let hosts = AllowedHosts::new(&settings.allowed_hosts);
    let mcp = direct::DirectRead::new(
        mcp,
        McpHandler::new(state.clone()),
        direct::DirectSettings {
            allowed_hosts: hosts.clone(),
            allowed_origins: settings.allowed_origins.clone(),
            max_body_bytes: limits.max_body_bytes,
            enabled: settings.direct_reads && settings.json_response,
            answered: direct_reads.clone(),
            shutdown: streams.child_token(),
            grace_over: state.reads_cut.child_token(),
            in_place: Some(
                in_place::InPlaceReads::start(
                    in_place::readers(),
                    settings.spare_workers,
                    state.settings.request_timeout,
                    tokio::runtime::Handle::current(),
                )
                .map_err(|e| format!("cannot start the threads for reads in place: {e}"))?,
            ),
        },
    );

    let auth = match settings.auth.clone().filter(|a| a.is_enabled()) {
        Some(a) => Some(auth::Auth::new(a)?),
        None => None,
    };
    let edge = edge::Edge::new(
        limits.clone(),
        manager,
        auth.clone(),
        state.router().clone(),
        settings
            .session_hub
            .clone()
            .zip(roaming.map(|r| r.grants.clone())),
    );
    // RFC 9728 protected-resource metadata: where clients find the authorization server.
    // It is served to anyone, so `scopes_supported` names only the scopes every token needs
    // (`required_scopes`): a mount's own scope would name the mount, which callers without
    // that scope must not learn (RFC 9728 §2 lets a resource leave scopes out). `resource`
    // is required (RFC 9728 §2): with static tokens only and no `[http.auth] resource`
    // there is none to give, and no authorization server either, so there is no document.
    let metadata = settings
        .auth
        .as_ref()
        .filter(|a| a.is_enabled())
        .and_then(|a| {
            let resource = a
                .resource
                .clone()
                .or_else(|| a.jwt.as_ref().map(|j| j.audience.clone()))?;
            let mut m = serde_json::json!({
                "resource": resource,
                "bearer_methods_supported": ["header"],
                "resource_name": state.settings.name,
            });
            if let Some(j) = &a.jwt {
                m["authorization_servers"] = serde_json::json!([j.issuer]);
                let scopes: BTreeSet<&str> = j.required_scopes.iter().map(String::as_str).collect();
                if !scopes.is_empty() {
                    m["scopes_supported"] = serde_json::json!(scopes);
                }
            }
            Some(m)
        });
    let ops = Arc::new(Ops {
        state: state.clone(),
        edge: edge.clone(),
        auth,
        metadata,
        direct_reads,
    });

    // The edge's layers (see `edge/mod.rs`) around the endpoint. Any other path answers 404
    // through the edge as well, as it did when the edge was a layer over this router (a
    // layer wraps the fallback too): draining, the rate limit, authentication and the
    // response counters apply to every request outside the operational endpoints.
    let not_found = tower::service_fn(|_: axum::extract::Request| async {
        Ok::<_, std::convert::Infallible>(http::StatusCode::NOT_FOUND.into_response())
    });
    let mcp_route = Router::new()
        .route_service(&settings.path, edge.around(mcp))
        .fallback_service(edge.around(not_found));
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route(
            "/.well-known/oauth-protected-resource",
            get(resource_metadata),
        )
        .route(
            &format!("/.well-known/oauth-protected-resource{}", settings.path),
            get(resource_metadata),
        )
        .with_state(ops)
        .layer(edge::OpsGate::layer(
            hosts,
            settings.allowed_origins.clone(),
        ))
        .merge(mcp_route)
        .layer(tower::util::MapRequestLayer::new(edge::authority_as_host));

    let listener = listen(settings.listen)
        .map_err(|e| format!("cannot listen on {}: {e}", settings.listen))?;
    let local_addr = listener.local_addr().map_err(|e| e.to_string())?;
    tracing::info!(%local_addr, path = %settings.path, "serving MCP over Streamable HTTP");
    let drained = Arc::new(tokio::sync::Notify::new());
    let graceful = {
        let drained = drained.clone();
        let reads_cut = state.reads_cut.clone();
        async move {
            shutdown.await;
            tracing::info!("shutting down: refusing new requests, finishing in-flight ones");
            edge.shutdown.drain().await;
            // Reads still running answer an error that says why, rather than a stream or
            // connection cut with no answer; a moment for those answers to be written.
            reads_cut.cancel();
            let flush = tokio::time::Instant::now() + std::time::Duration::from_millis(500);
            while edge.shutdown.inflight() > 0 && tokio::time::Instant::now() < flush {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            streams.cancel();
            drained.notify_one();
        }
    };
    // Nagle's algorithm holds back the small writes of an SSE answer (headers, event,
    // end of stream) until the client's delayed ACK, ~40 ms per legacy request.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp: &mut tokio::net::TcpStream| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
    });
    let task = tokio::spawn(async move {
        let serve = axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(graceful);
        // After the grace period, axum would still wait for every open connection; requests
        // that outlived the grace are cut off instead (dropping the server drops them), so a
        // shutdown is bounded as configured. The second allows clean SSE closes to flush.
        tokio::select! {
            r = serve => r,
            () = async {
                drained.notified().await;
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            } => {
                tracing::warn!("requests still open after the shutdown grace period were cut off");
                Ok(())
            }
        }
    });
    Ok(HttpServer { local_addr, task })
}

async fn healthz() -> &'static str {
    "ok\n"
}

/// The status code says whether every mount is ready. Which mount is not, and why (their
/// labels and errors hold paths and database hosts), is told only to a caller that may see
/// it: with authentication,
/// a valid token and only the mounts its scopes cover; an unauthenticated probe gets a bare
/// `ready` / `not ready`.
async fn readyz(State(ops): State<Arc<Ops>>, headers: http::HeaderMap) -> Response {
    let grant = match &ops.auth {
        None => Some(None),
        Some(auth) => auth.authenticate(&headers).await.ok().map(|(g, _)| Some(g)),
    };
    let mut all = true;
    let mut body = String::new();
    let mounts = ops.state.router().mounts();
    // Every mount asked at once: one after the other, each mount that hangs would add the
    // request timeout, and a probe would give up before hearing which mounts are ready.
    let timeout = ops.state.settings().request_timeout;
    let readiness = futures::future::join_all(
        mounts
            .iter()
            .map(|m| async move { crate::layers::Layered::new(m, timeout).readiness().await }),
    )
    .await;
    for (m, readiness) in mounts.iter().zip(readiness) {
        all &= readiness.is_ok();
        if let Some(grant) = &grant
            && grant.as_ref().is_none_or(|g| g.allows(m.scope.as_deref()))
        {
            let label = &m.provider.info().label;
            let _ = match readiness {
                Ok(()) => writeln!(body, "ready {label}"),
                // The reason is the error the mount's requests answer now (no secret in
                // it, and redacted again), on the same line.
                Err(e) => writeln!(
                    body,
                    "NOT READY {label}: {}",
                    mcpr_core::redact_urls_in(&e.message)
                ),
            };
        }
    }
    // The cluster's problem holds no secret (the NATS URL is redacted) and no mount label,
    // so every caller allowed the detail sees it.
    if let Some(problem) = ops.state.cluster().and_then(|c| c.problem) {
        all = false;
        if grant.is_some() {
            let _ = writeln!(body, "NOT READY {problem}");
        }
    }
    if grant.is_none() {
        body = if all { "ready\n" } else { "not ready\n" }.into();
    }
    let status = if all {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, body).into_response()
}

/// Prometheus text; with authentication, only for a valid token, and the series of one
/// mount only for a token that may see the mount, as on `/readyz`: a mount's series name it
/// (its label holds a path or a database host), which a token scoped to other mounts must
/// not learn.
async fn metrics(State(ops): State<Arc<Ops>>, headers: http::HeaderMap) -> Response {
    let grant = match &ops.auth {
        None => None,
        Some(auth) => match auth.authenticate(&headers).await {
            Ok((grant, _)) => Some(grant),
            Err(refusal) => return refusal,
        },
    };
    let all = ops.state.router().mounts();
    let shown: Vec<bool> = all
        .iter()
        .map(|m| grant.as_ref().is_none_or(|g| g.allows(m.scope.as_deref())))
        .collect();
    let visible = || all.iter().zip(&shown).filter(|(_, s)| **s).map(|(m, _)| m);
    let mut out = String::new();
    ops.state.metrics().render(&mut out);
    ops.state
        .list_skips()
        .render(&mut out, |i| shown.get(i).copied().unwrap_or(false));
    crate::metrics::render_provider_calls(visible().map(|m| (&*m.name, &*m.calls)), &mut out);
    if let Some(skills) = &ops.state.skills {
        skills.stats.render(&mut out);
    }
    let mounts: Vec<_> = visible()
        .map(|m| {
            let info = m.provider.info();
            (info.kind, info.label.as_str(), m.provider.counters())
        })
        .collect();
    crate::metrics::render_provider_counters(&mounts, &mut out);
    let stats = ops.state.registry().stats();
    let sessions = ops.edge.sessions.sessions.read().await.len();
    let gauges = [
        (
            "mcp_sessions",
            "Open legacy (2025-11-25 and earlier) HTTP sessions.",
            sessions,
        ),
        (
            "mcp_subscribers",
            "Live subscribers: legacy sessions and listen streams.",
            stats.subscribers,
        ),
        (
            "mcp_watched_resources",
            "Resources with a change watch.",
            stats.watched_uris,
        ),
        (
            "mcp_subscriptions",
            "Subscriptions held over every session and listen stream (bounded by max_watches).",
            stats.subscriptions,
        ),
        (
            "mcp_listen_streams",
            "Open subscriptions/listen streams.",
            stats.listen_streams,
        ),
        (
            "mcp_list_listeners",
            "Subscribers listening for list changes.",
            stats.list_listeners,
        ),
        (
            "mcp_list_watch_active",
            "Whether the mounts' list watches are running (0 or 1).",
            usize::from(stats.list_watch_active),
        ),
        (
            "mcp_runtime_tasks",
            "Live tasks of the server's async runtime: sessions, streams, watches and requests.",
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks(),
        ),
        (
            "mcp_http_inflight_requests",
            "HTTP requests being answered (streams excluded).",
            ops.edge.shutdown.inflight(),
        ),
    ];
    for (name, help, v) in gauges {
        let _ = write!(
            out,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}\n"
        );
    }
    if let Some(cluster) = ops.state.cluster() {
        let _ = write!(
            out,
            "# HELP mcp_cluster_connected Whether NATS is reachable (0 or 1).\n# TYPE mcp_cluster_connected gauge\nmcp_cluster_connected {}\n",
            u8::from(cluster.connected)
        );
        out.push_str("# HELP mcp_cluster_watcher Whether this replica holds the mount's watcher lease and runs its watches (0 or 1).\n# TYPE mcp_cluster_watcher gauge\n");
        for (mount, held) in cluster
            .watchers
            .iter()
            .filter(|(mount, _)| visible().any(|m| &*m.name == mount.as_str()))
        {
            let _ = writeln!(
                out,
                "mcp_cluster_watcher{{mount=\"{}\"}} {}",
                crate::metrics::escape_label(mount),
                u8::from(*held)
            );
        }
        out.push_str("# HELP mcp_cluster_standalone_watches Subscriptions of the mount this replica watches by itself because it is cut off from NATS, its clock is off, or it stands aside for a replica of an older release (0: the cluster's watcher serves them).\n# TYPE mcp_cluster_standalone_watches gauge\n");
        for (mount, n) in cluster
            .standalone
            .iter()
            .filter(|(mount, _)| visible().any(|m| &*m.name == mount.as_str()))
        {
            let _ = writeln!(
                out,
                "mcp_cluster_standalone_watches{{mount=\"{}\"}} {n}",
                crate::metrics::escape_label(mount),
            );
        }
        if let Some(offset) = cluster.clock_offset_ms {
            let _ = write!(
                out,
                "# HELP mcp_cluster_clock_offset_ms How far this replica's clock is from the NATS server's, as last measured (positive: ahead).\n# TYPE mcp_cluster_clock_offset_ms gauge\nmcp_cluster_clock_offset_ms {offset}\n"
            );
        }
        out.push_str("# HELP mcp_cluster_rejected_total Messages and records from NATS dropped because they do not verify with the cluster's secret, by kind.\n# TYPE mcp_cluster_rejected_total counter\n");
        for (kind, n) in &cluster.rejected {
            let _ = writeln!(
                out,
                "mcp_cluster_rejected_total{{kind=\"{}\"}} {n}",
                crate::metrics::escape_label(kind)
            );
        }
        out.push_str("# HELP mcp_cluster_streams_recreated_total JetStream streams this replica found missing (deleted, or lost by NATS) and created again, by role.\n# TYPE mcp_cluster_streams_recreated_total counter\n");
        for (stream, n) in &cluster.streams_recreated {
            let _ = writeln!(
                out,
                "mcp_cluster_streams_recreated_total{{stream=\"{}\"}} {n}",
                crate::metrics::escape_label(stream)
            );
        }
        let _ = write!(
            out,
            "# HELP mcp_cluster_session_records_restored_total Legacy session records this replica held and wrote back after NATS lost them (a deleted or purged sessions stream).\n# TYPE mcp_cluster_session_records_restored_total counter\nmcp_cluster_session_records_restored_total {}\n",
            cluster.session_records_restored
        );
    }
    out.push_str("# HELP mcp_http_responses_total HTTP responses of the MCP endpoint by status class.\n# TYPE mcp_http_responses_total counter\n");
    let counts = ops.edge.responses.classes();
    for (class, n) in ["2xx", "3xx", "4xx", "5xx"].iter().zip(counts) {
        let _ = writeln!(out, "mcp_http_responses_total{{class=\"{class}\"}} {n}");
    }
    let _ = write!(
        out,
        "# HELP mcp_http_direct_reads_total Stateless resources/read requests answered by the direct path.\n# TYPE mcp_http_direct_reads_total counter\nmcp_http_direct_reads_total {}\n",
        ops.direct_reads.load(Ordering::Relaxed)
    );
    (
        [(http::header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        out,
    )
        .into_response()
}

async fn resource_metadata(State(ops): State<Arc<Ops>>) -> Response {
    match &ops.metadata {
        Some(m) => axum::Json(m.clone()).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            "no protected-resource metadata: this server has no authorization server, and \
             without [http.auth] resource no resource identifier to publish\n",
        )
            .into_response(),
    }
}

/// How many connections may wait to be accepted. tokio's `bind` asks for std's 128: a burst
/// of more new connections (thousands of agents opening listen streams at once, a load
/// balancer refilling its pool) loses the rest to a SYN retry a second later. The kernel caps
/// it at `net.core.somaxconn`.
const ACCEPT_BACKLOG: u32 = 4096;

/// A listening socket on `addr` with [`ACCEPT_BACKLOG`].
fn listen(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    // As std and tokio do: a restarted server may bind while old connections linger.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(ACCEPT_BACKLOG)
}
