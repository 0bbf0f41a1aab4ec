//! The `mcp-resources` command: load configuration, build the mounts, serve MCP over stdio
//! or HTTP; and, in `client/`, a terminal client for any MCP server.
//!
//! Only glue lives here; the logic is in the library crates.

mod client;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use mcp_resources::config::{self, Config, Mount};
use mcp_resources::providers;
use mcpr_core::Provider;
use mcpr_server::{McpHandler, ServerState};
use rmcp::ServiceExt as _;

/// jemalloc rather than glibc malloc: under session churn glibc kept every page it had
/// touched and its RSS kept creeping, where jemalloc levels off and returns freed pages
/// (measured with `cargo xtask soak`, README "Soak").
#[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Serve local data to AI applications as MCP resources: read-only, sandboxed, fast.
#[derive(Parser)]
#[command(name = "mcp-resources", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve MCP over stdio (newline-delimited JSON on stdin/stdout; logs on stderr).
    ///
    /// Each PATH becomes a `files` mount; `--config` adds the mounts of a TOML file.
    /// Example: `mcp-resources serve ./docs ./notes`.
    Serve {
        /// Directories to serve, each as a `files` mount with default settings.
        paths: Vec<PathBuf>,
        /// A TOML configuration file (see the README's configuration reference).
        #[arg(long, short = 'c', value_name = "FILE")]
        config: Option<PathBuf>,
        /// Serve MCP Streamable HTTP on this address (e.g. 127.0.0.1:8080) instead of stdio;
        /// overrides `[http] listen`.
        #[arg(long, value_name = "ADDR")]
        http: Option<std::net::SocketAddr>,
        /// Allow listening on a non-loopback address without `[http.auth]`; only for a
        /// reverse proxy that authenticates in front. Loudly logged.
        #[arg(long)]
        insecure_no_auth: bool,
        /// Also offer the resources as tools (list_resources, read_resource,
        /// search_resources...), for clients that use only tools; same as `[server] tools`.
        #[arg(long)]
        tools: bool,
        /// Log level for stderr: error, warn, info, debug or trace; RUST_LOG overrides it.
        #[arg(long, value_name = "LEVEL", default_value = "info",
              value_parser = ["off", "error", "warn", "info", "debug", "trace"])]
        log_level: String,
    },
    /// Validate a configuration file and print the mounts it declares.
    CheckConfig {
        /// The TOML configuration file.
        file: PathBuf,
    },
    #[command(flatten)]
    Client(client::commands::ClientCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve {
            paths,
            config,
            http,
            insecure_no_auth,
            tools,
            log_level,
        } => {
            init_logging(&log_level);
            serve(paths, config, http, insecure_no_auth, tools)
        }
        Command::CheckConfig { file } => check_config(&file),
        Command::Client(cmd) => return client_exit(client::commands::run(cmd)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcp-resources: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// A client command's failure is one line, `error: …`. A closed stdout (`ls | head`) is not
/// a failure: the reader had what it wanted.
fn client_exit(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr only: stdout carries nothing but protocol.
fn init_logging(level: &str) {
    // rmcp logs every error response at WARN; a client asking for a missing file is routine,
    // so rmcp's own service chatter is kept to real errors unless RUST_LOG says otherwise.
    // rmcp logs each new session's id at INFO, and its session span carries the id; without
    // authentication the id is the credential, so the streamable HTTP server's own logs stay
    // at WARN unless the level asked for is debug or trace (or RUST_LOG says otherwise).
    let sessions = if matches!(level, "debug" | "trace") {
        ""
    } else {
        ",rmcp::transport::streamable_http_server=warn"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(format!(
            "{level},rmcp::service=error,async_nats=warn{sessions}"
        ))
    });
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .with_ansi(false)
        .init();
}

fn load_config(paths: Vec<PathBuf>, config: Option<PathBuf>) -> anyhow::Result<Config> {
    let registry = providers::registry();
    let mut cfg = match &config {
        Some(file) => config::load(file, &registry)?,
        None => Config::default(),
    };
    for p in paths {
        let md = std::fs::metadata(&p).with_context(|| format!("cannot serve {}", p.display()))?;
        anyhow::ensure!(md.is_dir(), "cannot serve {}: not a directory", p.display());
        let spec = registry.for_directory(&p).with_context(|| {
            format!(
                "cannot serve {}: this binary was built without the files provider (cargo feature `files`)",
                p.display()
            )
        })?;
        cfg.mounts.push(Mount {
            spec: spec.into(),
            scope: None,
            shared: false,
        });
    }
    anyhow::ensure!(
        !cfg.mounts.is_empty(),
        "nothing to serve: give one or more directories (mcp-resources serve ./docs) or --config FILE"
    );
    Ok(cfg)
}

/// A built provider with the scope its mount requires.
type ScopedProvider = (Arc<dyn Provider>, Option<String>);

async fn build_providers(cfg: &Config) -> anyhow::Result<Vec<ScopedProvider>> {
    let mut providers: Vec<ScopedProvider> = Vec::new();
    let mut prefixes = std::collections::HashMap::new();
    for m in &cfg.mounts {
        let p = m.spec.build().await.map_err(|e| anyhow::anyhow!("{e}"))?;
        for prefix in &p.info().uri_prefixes {
            if let Some(other) = prefixes.insert(prefix.clone(), p.info().label.clone()) {
                anyhow::bail!("two mounts serve the same URI prefix {prefix} ({other})");
            }
        }
        providers.push((p, m.scope.clone()));
    }
    Ok(providers)
}

fn serve(
    paths: Vec<PathBuf>,
    config: Option<PathBuf>,
    http: Option<std::net::SocketAddr>,
    insecure_no_auth: bool,
    tools: bool,
) -> anyhow::Result<()> {
    let mut cfg = load_config(paths, config)?;
    cfg.server.tools |= tools;
    let http_settings = match http {
        Some(addr) => Some(http_settings(&cfg, addr, insecure_no_auth)?),
        None => None,
    };
    anyhow::ensure!(
        cfg.cluster.is_none() || http_settings.is_some(),
        "`[cluster]` is for replicas serving HTTP (--http ADDR); a stdio server has one client and nothing to share"
    );
    #[cfg(not(feature = "cluster"))]
    anyhow::ensure!(
        cfg.cluster.is_none(),
        "`[cluster]` is not compiled into this binary (cargo feature `cluster`)"
    );
    // stdio has one client on one pipe: a single runtime thread answers it without waking a
    // second worker for every request (a futex round trip each, issue #6); blocking work
    // still goes to the blocking pool. HTTP serves many connections on two workers.
    let rt = if http_settings.is_some() {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(2);
        b
    } else {
        tokio::runtime::Builder::new_current_thread()
    }
    .enable_all()
    .build()
    .context("cannot start the async runtime")?;
    rt.block_on(async move {
        let providers = build_providers(&cfg).await?;
        for (p, scope) in &providers {
            tracing::info!(kind = p.info().kind, mount = %p.info().label, scope = scope.as_deref().unwrap_or("-"), "mounted");
        }
        let (bus, watching, nats) = change_seams(&cfg, &providers).await?;
        let state = ServerState::with_watching(cfg.server.clone(), providers, bus, watching);
        match http_settings {
            #[allow(unused_mut)]
            Some(mut settings) => {
                // Legacy sessions live in the cluster: any replica continues any session.
                #[cfg(feature = "cluster")]
                if let (Some(c), Some((client, seal))) = (&cfg.cluster, nats) {
                    settings.session_hub = Some(
                        mcpr_cluster::NatsSessionStore::connect(
                            client,
                            seal,
                            &c.name,
                            settings.limits.session_idle_timeout,
                            settings.limits.event_store_capacity,
                        )
                        .await
                        .map_err(|e| anyhow::anyhow!(e))?,
                    );
                }
                #[cfg(not(feature = "cluster"))]
                let _ = nats;
                let server = mcpr_server::http::serve(state, settings, shutdown_signal())
                    .await
                    .map_err(|e| anyhow::anyhow!(e))?;
                eprintln!("mcp-resources: serving MCP on http://{}{}", server.local_addr, cfg.http.as_ref().and_then(|h| h.path.clone()).unwrap_or_else(|| "/mcp".into()));
                server.wait().await.map_err(|e| anyhow::anyhow!(e))?;
            }
            None => {
                let direct = McpHandler::new(state.clone());
                let service = McpHandler::new(state)
                    // Pipes on the IO reactor, not tokio's blocking-pool stdin/stdout (a
                    // thread hand-off per message costs more than the request), a tagged
                    // decode of the hot requests and batched writes (issue #6).
                    .serve(mcpr_server::stdio::StdioTransport::stdio().with_direct_reads(direct))
                    .await
                    .context("the client closed the connection before it began")?;
                service.waiting().await.context("the stdio session failed")?;
            }
        }
        anyhow::Ok(())
    })?;
    // Watcher threads and blocking reads must not keep a finished server alive.
    rt.shutdown_timeout(std::time::Duration::from_millis(200));
    Ok(())
}

/// The cluster's NATS connection and keys (a stand-in type when the feature is off).
#[cfg(feature = "cluster")]
type NatsClient = (mcpr_cluster::NatsClient, Arc<mcpr_cluster::Seal>);
#[cfg(not(feature = "cluster"))]
type NatsClient = std::convert::Infallible;

/// The change bus and the watch seam: in-process, or the cluster's with `[cluster]`.
#[allow(clippy::unused_async)]
async fn change_seams(
    cfg: &Config,
    providers: &[ScopedProvider],
) -> anyhow::Result<(
    Arc<dyn mcpr_core::ChangeBus>,
    Arc<dyn mcpr_core::Watching>,
    Option<NatsClient>,
)> {
    #[cfg(feature = "cluster")]
    if let Some(c) = &cfg.cluster {
        let mounts = providers
            .iter()
            .zip(&cfg.mounts)
            .enumerate()
            .map(|(i, ((p, _), m))| mcpr_cluster::ClusterMount {
                name: mcpr_server::mount_name(i, &**p),
                provider: p.clone(),
                shared: m.shared,
            })
            .collect();
        let settings = mcpr_cluster::ClusterConfig {
            nats_url: c.nats_url.clone(),
            name: c.name.clone(),
            replica: c.replica.clone(),
            lease_ttl: c.lease_ttl,
            secret: c.secret.clone(),
            max_watches: cfg.server.max_watches,
        };
        tracing::info!(cluster = %c.name, replica = %c.replica, nats = %mcpr_cluster::redact_url(&c.nats_url), "joining the cluster");
        let joined = mcpr_cluster::join(settings, mounts)
            .await
            .map_err(|e| anyhow::anyhow!(e))?;
        return Ok((
            Arc::new(joined.bus),
            Arc::new(joined.watching),
            Some((joined.client, joined.seal)),
        ));
    }
    let _ = (cfg, providers);
    Ok((
        Arc::new(mcpr_core::LocalBus::default()),
        Arc::new(mcpr_core::LocalWatching),
        None,
    ))
}

/// The HTTP settings: `[http]` from the config, with `--http` overriding the address.
fn http_settings(
    cfg: &Config,
    addr: std::net::SocketAddr,
    insecure_no_auth: bool,
) -> anyhow::Result<mcpr_server::http::HttpSettings> {
    use mcpr_server::http::{AuthSettings, HttpSettings, StaticToken};
    let mut s = HttpSettings::new(addr);
    s.insecure_no_auth = insecure_no_auth;
    if let Some(h) = &cfg.http {
        if let Some(p) = &h.path {
            s.path = p.clone();
        }
        if let Some(hosts) = &h.allowed_hosts {
            s.allowed_hosts = hosts.clone();
        }
        if let Some(origins) = &h.allowed_origins {
            s.allowed_origins = origins.clone();
        }
        s.limits = h.limits.clone();
        if let Some(j) = h.json_response {
            s.json_response = j;
        }
        if !h.tokens.is_empty() || h.jwt.is_some() {
            // The resource's canonical URI: `public_url`, else the OAuth audience.
            let resource = h
                .public_url
                .clone()
                .or_else(|| h.jwt.as_ref().map(|j| j.audience.clone()));
            let metadata_url = resource.as_ref().and_then(|r| {
                let (scheme, rest) = r.split_once("://")?;
                let (host, path) = rest.split_once('/').map_or((rest, ""), |(h, p)| (h, p));
                Some(
                    format!("{scheme}://{host}/.well-known/oauth-protected-resource/{path}")
                        .trim_end_matches('/')
                        .to_owned(),
                )
            });
            s.auth = Some(AuthSettings {
                tokens: h
                    .tokens
                    .iter()
                    .map(|(t, scopes, name)| StaticToken {
                        token: t.clone(),
                        scopes: scopes.as_ref().map(|v| v.iter().cloned().collect()),
                        name: name.clone(),
                    })
                    .collect(),
                // With a cluster, every replica names a token alike (not by its place in
                // the list); without, a key of this process.
                identity_key: cfg
                    .cluster
                    .as_ref()
                    .map(|c| mcpr_server::http::IdentityKey::derive(c.secret.as_bytes())),
                resource_metadata_url: metadata_url,
                resource,
                jwt: h.jwt.clone(),
            });
        }
    }
    s.check().map_err(|e| anyhow::anyhow!(e))?;
    Ok(s)
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C), starting a graceful shutdown.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

fn check_config(file: &std::path::Path) -> anyhow::Result<()> {
    let cfg = config::load(file, &providers::registry())?;
    // Opening some sources (databases) is async; a small runtime does it here too.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let providers = rt.block_on(build_providers(&cfg))?;
    println!("{}: OK", file.display());
    println!(
        "server: name={} page_size={} max_read_bytes={}",
        cfg.server.name, cfg.server.page_size, cfg.server.max_read_bytes
    );
    for (m, (p, _)) in cfg.mounts.iter().zip(&providers) {
        println!(
            "mount {}: {} -> {}",
            m.spec.kind(),
            p.info().label,
            p.info().uri_prefixes.join(", ")
        );
    }
    Ok(())
}
