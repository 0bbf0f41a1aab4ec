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
/// (measured with `cargo xtask soak`, docs/robustness.md, Soak).
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
    /// Serve MCP over stdio (newline-delimited JSON on stdin/stdout; logs on stderr), or
    /// over HTTP with `--http ADDR` or `[http] listen`.
    ///
    /// Each PATH becomes a `files` mount; `--config` adds the mounts of a TOML file.
    /// Example: `mcp-resources serve ./docs ./notes`.
    Serve {
        /// Directories to serve, each as a `files` mount with default settings.
        paths: Vec<PathBuf>,
        /// A TOML configuration file (see docs/configuration.md).
        #[arg(long, short = 'c', value_name = "FILE")]
        config: Option<PathBuf>,
        /// Serve MCP Streamable HTTP on this address (e.g. 127.0.0.1:8080) instead of stdio;
        /// overrides `[http] listen`.
        #[arg(long, value_name = "ADDR", value_parser = config::parse_listen)]
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
    /// Validate a configuration file offline and print what it declares.
    ///
    /// Checks every key and value and opens the sources on this machine (directories,
    /// git repositories, SQLite files, with their named queries and skills folders);
    /// sources reached over the network (PostgreSQL, MySQL, HTTP, S3, MCP upstreams) are not contacted
    /// unless `--connect` is given, which also lists every mount's skills.
    CheckConfig {
        /// The TOML configuration file.
        file: PathBuf,
        /// Also open every network source and list its first resource: one line per mount,
        /// `ok` or the error; exit status 1 if any failed.
        #[arg(long)]
        connect: bool,
    },
    #[command(flatten)]
    Client(client::commands::ClientCommand),
}

fn main() -> ExitCode {
    // This binary is also the guard of a gateway's stdio upstreams (a hidden command line
    // of its own), run before anything else starts: no runtime, no logging, no threads.
    #[cfg(all(feature = "mcp", target_os = "linux"))]
    if let Some(code) = mcpr_provider_mcp::guard::run_if_asked() {
        return ExitCode::from(code);
    }
    #[cfg(feature = "mcp")]
    mcpr_provider_mcp::guard::enable();
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
        Command::CheckConfig { file, connect } => check_config(&file, connect),
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

/// A client command's failure is one line, `error: …`, cleaned as every server text the
/// client prints (its messages carry the server's own), followed, when a stdio server's exit
/// ended it, by that server's last lines of stderr, each indented under `| `. A closed stdout
/// (`ls | head`) is not a failure: the reader had what it wanted.
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
            eprintln!("error: {}", client::clean(&format!("{e:#}")));
            let stderr = client::server_stderr(&e);
            if !stderr.is_empty() {
                eprintln!("the server's last lines on stderr:");
                for line in stderr {
                    eprintln!("  | {line}");
                }
            }
            ExitCode::from(client::exit_code(&e))
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
            "{},rmcp::service=error,async_nats=warn{sessions}",
            level_directives(level)
        ))
    });
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .with_ansi(false)
        .init();
}

/// `--log-level` as filter directives. At debug and trace only our own crates (the binary and
/// the `mcpr_*` libraries; a target matches a directive by prefix) say more: the
/// dependencies' debug output (hyper, h2, rustls, sqlx, gix…) would bury ours, so they stay
/// at warn. RUST_LOG, when set, replaces all of this.
fn level_directives(level: &str) -> String {
    match level {
        "debug" | "trace" => format!("warn,mcp_resources={level},mcpr_={level}"),
        _ => level.to_owned(),
    }
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
            skills: None,
            origin: format!("serve argument {}", p.display()),
        });
    }
    anyhow::ensure!(
        !cfg.mounts.is_empty(),
        "nothing to serve: give one or more directories (mcp-resources serve ./docs) or --config FILE"
    );
    set_process_budgets(&cfg);
    Ok(cfg)
}

/// `[server] max_conversions`: the budget every web mount of this process converts HTML
/// in, set before any mount is built.
fn set_process_budgets(cfg: &Config) {
    #[cfg(feature = "http")]
    if let Some(n) = cfg.max_conversions {
        mcpr_provider_http::ConversionBudget::process().set_total(n);
    }
    #[cfg(not(feature = "http"))]
    let _ = cfg;
}

/// The process's budget of HTML conversions as its web mounts share it, read back from the
/// budget itself (so `check-config` shows what [`set_process_budgets`] set, not the file);
/// `None` without web mounts compiled in.
fn conversion_budget() -> Option<usize> {
    #[cfg(feature = "http")]
    return Some(mcpr_provider_http::ConversionBudget::process().total());
    #[cfg(not(feature = "http"))]
    None
}

/// A built provider with the scope its mount requires.
type ScopedProvider = (Arc<dyn Provider>, Option<String>);

/// How many network sources `serve` opens at once: enough that a few hung upstreams (a
/// gateway mount waits up to its connection time-out for the first attempt) do not add up,
/// few enough that a long configuration does not dial every source in the same instant.
const OPEN_AT_ONCE: usize = 8;

/// The HTTP runtime's workers, spares aside.
const HTTP_WORKERS: usize = 2;
/// Its spare workers, each taking one read in place at a time with no thread hand-off. On
/// the 2-vCPU bench machine two read 107 % of the release before the hand-off, one 99 %, and
/// four workers with one slot no more than three (docs/performance.md): the gain is the
/// slots. Two reads that hang then leave the two workers above.
const HTTP_SPARE_WORKERS: usize = 2;

async fn build_providers(cfg: &Config) -> anyhow::Result<Vec<ScopedProvider>> {
    // The sources on this machine first: opening them contacts nothing, and a gateway's
    // pass-through prefixes are checked against their URIs before any upstream starts.
    let mut built: Vec<Option<Arc<dyn Provider>>> = Vec::with_capacity(cfg.mounts.len());
    for m in &cfg.mounts {
        built.push(match m.spec.is_local() {
            true => Some(build_mount(m).await?),
            false => None,
        });
    }
    refuse_gateway_overlap(&cfg.mounts, &built)?;
    // The network sources at once (at most OPEN_AT_ONCE): an upstream that hangs costs the
    // start its own wait, not one after another. Taken in the configuration's order, so the
    // error reported is the first mount's that failed, whichever failed first.
    use futures::StreamExt as _;
    let mut opened = futures::stream::iter(
        cfg.mounts
            .iter()
            .zip(&built)
            .filter(|(_, b)| b.is_none())
            .map(|(m, _)| build_mount(m)),
    )
    .buffered(OPEN_AT_ONCE)
    .collect::<Vec<_>>()
    .await
    .into_iter();
    let mut providers: Vec<ScopedProvider> = Vec::new();
    let mut prefixes = std::collections::HashMap::new();
    for (m, p) in cfg.mounts.iter().zip(built) {
        let p = match p {
            Some(p) => p,
            None => opened
                .next()
                .unwrap_or_else(|| Err(anyhow::anyhow!("{}: not opened", m.origin)))?,
        };
        check_prefixes(&mut prefixes, m, &*p)?;
        providers.push((p, m.scope.clone()));
    }
    refuse_nested_roots(&providers)?;
    Ok(providers)
}

/// Refuse a gateway mount's pass-through prefix (`prefixes`) that overlaps another mount's
/// URIs: which mount answers a URI would depend on the longest prefix, not on who lists it.
/// Its own `{name}+` prefix cannot overlap (another mount would need the same name).
///
/// From the configuration alone, before any network source is opened (so no upstream is
/// started for a configuration that is refused), `serve` and `check-config` alike: a mount
/// in `built` (the sources on this machine, opened) by its URI prefixes, any other by the
/// addresses its settings give.
fn refuse_gateway_overlap(
    mounts: &[Mount],
    built: &[Option<Arc<dyn Provider>>],
) -> anyhow::Result<()> {
    let known = |i: usize| match &built[i] {
        Some(p) => Some(p.info().uri_prefixes.clone()),
        None => mounts[i].spec.addresses(),
    };
    let shown = |i: usize| match &built[i] {
        Some(p) => p.info().label.clone(),
        None => mounts[i]
            .spec
            .describe()
            .unwrap_or_else(|| mounts[i].spec.kind().to_owned()),
    };
    for (i, m) in mounts.iter().enumerate() {
        if m.spec.kind() != "mcp" {
            continue;
        }
        // The first is the gateway's own `{name}+`; the rest pass through.
        for mine in known(i).unwrap_or_default().iter().skip(1) {
            for (j, other) in mounts.iter().enumerate() {
                if i == j {
                    continue;
                }
                if let Some(theirs) = known(j)
                    .unwrap_or_default()
                    .into_iter()
                    .find(|t| t.starts_with(mine.as_str()) || mine.starts_with(t.as_str()))
                {
                    anyhow::bail!(
                        "{}: mount {} passes upstream URIs under {mine} through unchanged, which overlaps mount {} ({theirs}; {}): serve them under the gateway's name instead, or narrow `prefixes`",
                        m.origin,
                        shown(i),
                        shown(j),
                        other.origin
                    );
                }
            }
        }
    }
    Ok(())
}

/// Refuse a directory (or bucket prefix) mount inside another: the outer one lists every
/// file of the inner one too, under the same URI, so a listing would show each twice and
/// which mount answers a read would depend on the longest prefix, not on what was listed.
/// Only kinds whose one prefix is a root that lists everything under it are compared; git's
/// `git://@name` beside a short-form `git://` mount, say, does not overlap.
fn refuse_nested_roots(providers: &[ScopedProvider]) -> anyhow::Result<()> {
    let roots: Vec<(&str, &str)> = providers
        .iter()
        .filter(|(p, _)| matches!(p.info().kind, "files" | "s3"))
        .flat_map(|(p, _)| {
            let info = p.info();
            info.uri_prefixes
                .iter()
                .map(move |prefix| (prefix.as_str(), info.label.as_str()))
        })
        .collect();
    for (outer, outer_label) in &roots {
        for (inner, inner_label) in &roots {
            let Some(rest) = inner.strip_prefix(outer) else {
                continue;
            };
            if !rest.is_empty() && (outer.ends_with('/') || rest.starts_with('/')) {
                anyhow::bail!(
                    "mount {inner_label} ({inner}) is inside mount {outer_label} ({outer}): each file under it would be listed twice with the same URI; serve only one of the two"
                );
            }
        }
    }
    Ok(())
}

/// Open one mount's source; an error names where the mount is declared.
async fn build_mount(m: &Mount) -> anyhow::Result<Arc<dyn Provider>> {
    m.spec
        .build()
        .await
        .map_err(|e| anyhow::anyhow!("{}: {e}", m.origin))
}

/// Record the URI prefixes of `p` (built from `m`), refusing one that another mount already
/// serves: the message names both mounts' declarations.
fn check_prefixes<'a>(
    seen: &mut std::collections::HashMap<String, &'a str>,
    m: &'a Mount,
    p: &dyn Provider,
) -> anyhow::Result<()> {
    for prefix in &p.info().uri_prefixes {
        if let Some(other) = seen.insert(prefix.clone(), &m.origin) {
            anyhow::bail!(
                "{}: two mounts serve the same URI prefix {prefix}: this one and {other}",
                m.origin
            );
        }
    }
    Ok(())
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
    // `--http` overrides `[http] listen`; either one means HTTP, neither means stdio.
    let listen = http.or_else(|| cfg.http.as_ref().and_then(|h| h.listen));
    let http_settings = match listen {
        Some(addr) => Some(http_settings(&cfg, addr, insecure_no_auth)?),
        None => None,
    };
    anyhow::ensure!(
        cfg.cluster.is_none() || http_settings.is_some(),
        "`[cluster]` is for replicas serving HTTP (--http ADDR or `[http] listen`); a stdio server has one client and nothing to share"
    );
    // stdio has one client on one pipe: a single runtime thread answers it without waking a
    // second worker for every request (a futex round trip each); blocking work
    // still goes to the blocking pool. HTTP serves many connections on two workers, with
    // two spares for reads in place (`HttpSettings::spare_workers`): a read that hangs holds
    // a spare, never one of the two.
    let rt = if let Some(settings) = &http_settings {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(HTTP_WORKERS + settings.spare_workers);
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
        // The mounts first: a cluster's watcher calls their providers through the server's
        // layer, counted with this replica's own calls.
        let router = mcpr_server::Router::new(providers);
        let (bus, watching, nats, leave) = change_seams(&cfg, &router).await?;
        let state = ServerState::with_router(cfg.server.clone(), router, bus, watching);
        warn_about_skills(&state);
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
                let served = server.wait().await;
                // Drained: the watchers of shared mounts may end what only this replica's
                // clients wanted now, rather than after its silence.
                if let Some(leave) = leave {
                    leave.await;
                }
                served.map_err(|e| anyhow::anyhow!(e))?;
            }
            None => {
                // After the mounts are built, so a configuration error is what a user
                // sees first.
                refuse_closed_stdin()?;
                serve_stdio(state, cfg.server.request_timeout).await?;
            }
        }
        anyhow::Ok(())
    })?;
    // Watcher threads and blocking reads must not keep a finished server alive.
    rt.shutdown_timeout(std::time::Duration::from_millis(200));
    Ok(())
}

/// Walk the skills folders once at start, in the background, so what is wrong with them is
/// logged now rather than at the first `skills/list`: the catalog warns of a folder it
/// cannot read and of each skill it leaves out; a folder that holds no skill is warned here.
fn warn_about_skills(state: &ServerState) {
    let Some(catalog) = state.skills().cloned() else {
        return;
    };
    tokio::spawn(async move {
        let reports = catalog.report().await;
        // A gateway mount whose upstream publishes no skills is no misplaced folder.
        for (r, s) in reports.iter().zip(catalog.sources()) {
            if !s.relay && r.error.is_none() && r.skills.is_empty() && r.left_out.is_empty() {
                tracing::warn!(
                    mount = %r.mount,
                    "the skills folder {} holds no skill (a skill is a folder holding a SKILL.md)",
                    r.root
                );
            }
        }
    });
}

/// A stdio server whose stdin is closed or `/dev/null` (systemd, docker without `-i`,
/// nohup) would read the end of input at once and exit 0 having served nothing: refused
/// with what to do instead. An empty pipe is a client that left, and still a clean end.
fn refuse_closed_stdin() -> anyhow::Result<()> {
    if let Some(what) = stdin_closed() {
        anyhow::bail!(
            "stdin is {what}, so there is no client to serve over stdio: a client starts `serve` with a pipe on stdin and stdout; to serve over HTTP, give --http ADDR or set `[http] listen` in the config file"
        );
    }
    Ok(())
}

/// Whether stdin is closed or the null device. Rust's runtime opens `/dev/null` on a
/// descriptor 0 that was closed when the process started, so the two look alike here and
/// are named together.
#[cfg(unix)]
fn stdin_closed() -> Option<&'static str> {
    use std::os::fd::AsFd as _;
    use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
    const WHAT: &str = "closed or /dev/null";
    let Ok(fd) = std::io::stdin().as_fd().try_clone_to_owned() else {
        return Some(WHAT);
    };
    let md = std::fs::File::from(fd).metadata().ok()?;
    let null = std::fs::metadata("/dev/null").ok()?;
    (md.file_type().is_char_device() && md.rdev() == null.rdev()).then_some(WHAT)
}

#[cfg(not(unix))]
fn stdin_closed() -> Option<&'static str> {
    None
}

/// One stdio session, to the end of input. Closing stdin is how a client ends it, in every
/// lifecycle and before any: that is a success once every request read is answered and the
/// answers are flushed. Only a failure to read stdin, or a handshake rmcp refused, is an error.
async fn serve_stdio(
    state: Arc<ServerState>,
    request_timeout: std::time::Duration,
) -> anyhow::Result<()> {
    let direct = McpHandler::new(state.clone());
    // stdin read by a thread of its own blocking in `read`, which answers the small reads
    // itself and writes their answers, not tokio's blocking-pool stdin/stdout (a
    // thread hand-off per message costs more than the request); a tagged decode of the hot
    // requests and batched writes, for throughput. After EOF, requests still running get as long
    // as they may take: a read waits up to the request timeout for read budget, then its
    // source up to that again.
    let transport = mcpr_server::stdio::StdioTransport::stdio()
        .context("cannot take stdin and stdout")?
        .with_direct_reads(direct)
        .with_eof_drain(request_timeout * 2 + std::time::Duration::from_secs(1));
    let end = transport.end();
    // Served: a listen's change tokens are awaited before rmcp acknowledges it, not taken by
    // blocking the one runtime thread.
    let handler =
        mcpr_server::Served::from(McpHandler::new(state).ending_listens_on(end.input_over()));
    let result = match handler.serve(transport).await {
        Ok(service) => service
            .waiting()
            .await
            .map(drop)
            .context("the stdio session failed"),
        // The client left before choosing a lifecycle (empty input, or only `server/discover`,
        // pings and refused lines): rmcp's handshake ends without a session, a normal end.
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => Ok(()),
        Err(e) => Err(anyhow::anyhow!(e)).context("the stdio session could not start"),
    };
    // rmcp drops the transport without closing it when the handshake fails: the answers it
    // queued (to a discover, to refused lines) still go out before the process ends.
    end.flushed().await;
    if let Some(e) = end.read_error() {
        anyhow::bail!("cannot read stdin: {e}");
    }
    result
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
    router: &mcpr_server::Router,
) -> anyhow::Result<(
    Arc<dyn mcpr_core::ChangeBus>,
    Arc<dyn mcpr_core::Watching>,
    Option<NatsClient>,
    Option<Leave>,
)> {
    #[cfg(feature = "cluster")]
    if let Some(c) = &cfg.cluster {
        let mounts = router
            .mounts()
            .iter()
            .zip(&cfg.mounts)
            .map(|(mount, m)| mcpr_cluster::ClusterMount {
                mount: mount.clone(),
                shared: m.shared,
            })
            .collect();
        tracing::info!(cluster = %c.name, replica = %c.replica, nats = %mcpr_core::redact_url(&c.nats_url), "joining the cluster");
        let joined = mcpr_cluster::join(c.clone(), mounts)
            .await
            .map_err(|e| anyhow::anyhow!(e))?;
        let watching = joined.watching.clone();
        return Ok((
            Arc::new(joined.bus),
            Arc::new(joined.watching),
            Some((joined.client, joined.seal)),
            Some(Box::pin(async move { watching.leave().await })),
        ));
    }
    let _ = (cfg, router);
    Ok((
        Arc::new(mcpr_core::LocalBus::default()),
        Arc::new(mcpr_core::LocalWatching),
        None,
        None,
    ))
}

/// What a replica does last, once its server has drained: tell the cluster's watchers it is
/// gone (`ClusterWatching::leave`).
type Leave = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// The HTTP settings: `[http]` from the config, with `--http` overriding the address.
fn http_settings(
    cfg: &Config,
    addr: std::net::SocketAddr,
    insecure_no_auth: bool,
) -> anyhow::Result<mcpr_server::http::HttpSettings> {
    use mcpr_server::http::{AuthSettings, HttpSettings, StaticToken};
    let mut s = HttpSettings::new(addr);
    s.spare_workers = HTTP_SPARE_WORKERS;
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
                    .map(|c| mcpr_server::http::IdentityKey::derive(cluster_secret(c))),
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

/// `check-config`: the file validated offline (every key and value; the sources on this
/// machine opened, named queries included), or with `connect` every source opened and asked
/// for its first resource. One line per mount; an empty config is refused as `serve` refuses it.
fn check_config(file: &std::path::Path, connect: bool) -> anyhow::Result<()> {
    let cfg = config::load(file, &providers::registry())?;
    anyhow::ensure!(
        !cfg.mounts.is_empty(),
        "{}: nothing to serve: the file declares no [[mount]], which `serve --config` refuses too",
        file.display()
    );
    set_process_budgets(&cfg);
    // Opening some sources (databases) is async; a small runtime does it here too.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let (lines, failed) = rt.block_on(check_mounts(&cfg, connect));
    rt.shutdown_timeout(std::time::Duration::from_millis(200));
    if failed == 0 {
        if connect {
            println!("{}: OK: every source opened and listed", file.display());
        } else {
            println!(
                "{}: OK, checked offline: every key and value, and the sources on this machine opened; network sources were not contacted (check-config --connect tries them)",
                file.display()
            );
        }
    }
    println!(
        "server: name={} page_size={} max_read_bytes={} tools={}{}",
        cfg.server.name,
        cfg.server.page_size,
        cfg.server.max_read_bytes,
        cfg.server.tools,
        conversion_budget().map_or_else(String::new, |n| format!(" max_conversions={n}"))
    );
    if let Some(h) = &cfg.http {
        println!("{}", describe_http(h));
    }
    if let Some(c) = &cfg.cluster {
        println!("{}", describe_cluster(c));
    }
    for l in &lines {
        println!("{l}");
    }
    anyhow::ensure!(
        failed == 0,
        "{}: {failed} of {} mounts failed (above)",
        file.display(),
        cfg.mounts.len()
    );
    Ok(())
}

/// One line per mount and how many failed. Offline, only mounts whose sources are on this
/// machine are opened; with `connect` every mount is opened and its first page listed,
/// which is where an unreachable server, a missing bucket or a refused login shows.
async fn check_mounts(cfg: &Config, connect: bool) -> (Vec<String>, usize) {
    let mut lines = Vec::new();
    let mut failed = 0;
    let mut prefixes = std::collections::HashMap::new();
    let mut built: Vec<ScopedProvider> = Vec::new();
    // As `serve` does: the sources on this machine opened first, then a gateway's
    // pass-through prefixes checked against every mount before any network source is
    // contacted; a refused configuration contacts none.
    let mut local: Vec<Option<anyhow::Result<Arc<dyn Provider>>>> = Vec::new();
    for m in &cfg.mounts {
        local.push(match m.spec.is_local() {
            true => Some(build_mount(m).await),
            false => None,
        });
    }
    let opened: Vec<Option<Arc<dyn Provider>>> = local
        .iter()
        .map(|r| r.as_ref().and_then(|r| r.as_ref().ok()).cloned())
        .collect();
    let refused = refuse_gateway_overlap(&cfg.mounts, &opened).err();
    let contact = connect && refused.is_none();
    if let Some(e) = refused {
        failed += 1;
        lines.push(format!("{e:#}"));
    }
    for (m, local) in cfg.mounts.iter().zip(local) {
        if local.is_none() && !contact {
            let what = m
                .spec
                .describe()
                .map(|d| format!("{d}: "))
                .unwrap_or_default();
            // What it will serve follows from its settings: shown without contacting it.
            let serves = m
                .spec
                .addresses()
                .map(|a| format!(" -> {}", a.join(", ")))
                .unwrap_or_default();
            let why = match connect {
                true => "the configuration is refused (above)",
                false => "a network source; check-config --connect tries it",
            };
            lines.push(format!("{}: {what}not contacted ({why}){serves}", m.origin));
            continue;
        }
        let outcome = async {
            let p = match local {
                Some(built) => built?,
                None => build_mount(m).await?,
            };
            check_prefixes(&mut prefixes, m, &*p)?;
            let proof = match connect {
                true => Some(
                    probe(&*p)
                        .await
                        .map_err(|e| anyhow::anyhow!("{}: {e}", m.origin))?,
                ),
                false => None,
            };
            anyhow::Ok((p, proof))
        }
        .await;
        match outcome {
            Ok((p, proof)) => {
                // "ok" only for a source that answered a read: a listing alone may come from
                // the settings (an api mount's endpoints), with nothing asked of the source.
                let verdict = match &proof {
                    None => "",
                    Some(Probe::Read(_)) => "ok: ",
                    Some(Probe::NothingListed) => "not fetched: ",
                };
                lines.push(format!(
                    "{}: {verdict}{} -> {}{}{}",
                    m.origin,
                    p.info().label,
                    mcpr_server::mount_addresses(&*p).join(", "),
                    proof.map(|d| format!(" ({d})")).unwrap_or_default(),
                    p.offers().map(|o| format!("; {o}")).unwrap_or_default()
                ));
                if let Some(setting) = &m.skills
                    && !check_skills(cfg, m, setting, &p, connect, &mut lines).await
                {
                    failed += 1;
                }
                built.push((p, m.scope.clone()));
            }
            Err(e) => {
                failed += 1;
                lines.push(format!("{e:#}"));
            }
        }
    }
    // `serve` refuses a root inside another's; so does the check, among the mounts it opened.
    if let Err(e) = refuse_nested_roots(&built) {
        failed += 1;
        lines.push(format!("{e:#}"));
    }
    (lines, failed)
}

/// The skills of mount `m` (built as `p`) as `serve` would list them: one line for its
/// skills folder, then with `list` one per skill, and one per skill left out with the
/// reason. `false` (a failure) when the folder cannot be read (missing, a file, a
/// `skills_ref` that does not resolve) or a skill is left out (a `SKILL.md` without
/// `description`, say), which `serve` would only log.
async fn check_skills(
    cfg: &Config,
    m: &Mount,
    setting: &mcpr_server::skills::SkillsSetting,
    p: &Arc<dyn Provider>,
    list: bool,
    lines: &mut Vec<String>,
) -> bool {
    // The mount alone, as mount 0, under the server's own catalog.
    let mut settings = cfg.server.clone();
    settings.skills = vec![mcpr_server::skills::SkillsSetting {
        mount: 0,
        ..setting.clone()
    }];
    let state = ServerState::new(settings, vec![p.clone()]);
    let Some(catalog) = state.skills() else {
        lines.push(format!(
            "{}: skills: this mount has no URI for the skills folder {}",
            m.origin, setting.path
        ));
        return false;
    };
    let relay = catalog.sources().first().is_some_and(|s| s.relay);
    let mut ok = true;
    for r in catalog.report().await {
        if relay {
            // A gateway mount: its upstream's skills, a line only when it has some to say.
            if let Some(e) = &r.error {
                lines.push(format!("{}: upstream skills: {e}", m.origin));
                ok = false;
                continue;
            }
            if r.skills.is_empty() && r.left_out.is_empty() {
                continue;
            }
        }
        let what = if relay {
            "upstream skills".to_owned()
        } else {
            format!("skills folder {}", r.root)
        };
        if let Some(e) = &r.error {
            // A git mount cannot tell a missing folder from a ref that names nothing.
            let hint = setting.rev.as_ref().map_or_else(String::new, |rev| {
                format!(" (is `skills_ref = {rev:?}` a branch, tag or commit of the repository?)")
            });
            lines.push(format!("{}: skills folder {}: {e}{hint}", m.origin, r.root));
            ok = false;
            continue;
        }
        lines.push(format!(
            "{}: {what}: {} skill(s){}",
            m.origin,
            r.skills.len(),
            if r.left_out.is_empty() {
                String::new()
            } else {
                format!(", {} left out", r.left_out.len())
            }
        ));
        if list {
            for uri in &r.skills {
                lines.push(format!("  skill {uri}"));
            }
        }
        for (file, why) in &r.left_out {
            lines.push(format!("  left out {file}: {why}"));
            ok = false;
        }
        // A warning, not a failure: the skill is served, only without these files, which
        // is often what the rules are for (a key, a local `.env`).
        if list {
            for h in &r.not_published {
                lines.push(format!(
                    "  warning: {} is not published with skill {} ({}): a pull will not have it",
                    h.file, h.skill, h.reason
                ));
            }
        }
    }
    ok
}

/// What [`probe`] did with a mount that answered.
enum Probe {
    /// It read this URI, the first listed.
    Read(String),
    /// It listed nothing, so nothing was fetched (an api mount with only templates has no
    /// URL to fetch without arguments): the mount is not called ok.
    NothingListed,
}

impl std::fmt::Display for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Probe::Read(uri) => write!(f, "read {uri}"),
            Probe::NothingListed => f.write_str("nothing listed, so nothing fetched"),
        }
    }
}

/// Ask mount `p` for what `serve` would: its first page and, when that lists anything, a
/// read of the first resource, so that "ok" means the source answered. A mount that lists
/// nothing passes only when it says it is ready. What was done is the answer, for the
/// mount's line.
async fn probe(p: &dyn Provider) -> anyhow::Result<Probe> {
    const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);
    let within = |what: &'static str| {
        move |_| anyhow::anyhow!("no answer to {what} within {} s", PROBE_TIMEOUT.as_secs())
    };
    let page = mcpr_core::PageRequest {
        after: None,
        limit: 1,
    };
    let first = match tokio::time::timeout(PROBE_TIMEOUT, p.list(page))
        .await
        .map_err(within("the listing"))?
    {
        Err(e) if e.kind == mcpr_core::ErrorKind::Unsupported => None,
        Err(e) => anyhow::bail!("{e}"),
        Ok(page) => page.items.into_iter().next(),
    };
    let mut proof = Probe::NothingListed;
    if let Some(first) = first
        && let Ok(uri) = mcpr_core::ResourceUri::parse(&first.uri)
    {
        let limits = mcpr_core::ReadLimits { max_bytes: 1 << 20 };
        match tokio::time::timeout(PROBE_TIMEOUT, p.read(&uri, &limits))
            .await
            .map_err(within("a read"))?
        {
            // A first resource over the probe's 1 MiB still proves the source answered.
            Ok(_) => {}
            Err(e) if e.kind == mcpr_core::ErrorKind::TooLarge => {}
            Err(e) => anyhow::bail!("{e}"),
        }
        proof = Probe::Read(first.uri);
    }
    anyhow::ensure!(p.ready().await, "not ready");
    Ok(proof)
}

/// The `[http]` settings as read, token values never shown.
fn describe_http(h: &config::HttpConfig) -> String {
    let l = &h.limits;
    let mut s = format!(
        "http: listen={} path={} allowed_hosts={} allowed_origins={} public_url={} json_response={} max_body_bytes={} max_concurrent_requests={} rate_limit_per_second={} rate_limit_burst={} max_sessions={} session_idle_timeout_ms={} shutdown_grace_ms={} event_store_capacity={} body_timeout_ms={}",
        h.listen
            .map_or_else(|| "(--http)".to_owned(), |a| a.to_string()),
        h.path.as_deref().unwrap_or("/mcp"),
        h.allowed_hosts
            .as_ref()
            .map_or_else(|| "(default)".to_owned(), |v| v.join(",")),
        h.allowed_origins
            .as_ref()
            .map_or_else(|| "(default)".to_owned(), |v| v.join(",")),
        h.public_url.as_deref().unwrap_or("-"),
        h.json_response
            .map_or_else(|| "(default)".to_owned(), |j| j.to_string()),
        l.max_body_bytes,
        l.max_concurrent_requests,
        l.rate_limit_per_second,
        l.rate_limit_burst,
        l.max_sessions,
        l.session_idle_timeout.as_millis(),
        l.shutdown_grace.as_millis(),
        l.event_store_capacity,
        l.body_timeout.as_millis(),
    );
    let unscoped = h.tokens.iter().filter(|(_, s, _)| s.is_none()).count();
    let scoped: Vec<String> = h
        .tokens
        .iter()
        .filter_map(|(_, s, _)| s.as_ref().map(|s| s.join("+")))
        .collect();
    if h.tokens.is_empty() && h.jwt.is_none() {
        s.push_str(" auth=none");
    } else {
        s.push_str(&format!(
            " auth: {unscoped} unscoped token(s), {} scoped token(s){}",
            scoped.len(),
            if scoped.is_empty() {
                String::new()
            } else {
                format!(" [{}]", scoped.join(", "))
            }
        ));
        if let Some(j) = &h.jwt {
            s.push_str(&format!(
                ", OAuth issuer={} jwks_url={} audience={} leeway_s={} required_scopes={}",
                j.issuer,
                j.jwks_url,
                j.audience,
                j.leeway.as_secs(),
                j.required_scopes.join(",")
            ));
        }
    }
    s
}

/// The `[cluster]` settings as read, the NATS URL's credentials never shown.
#[cfg(feature = "cluster")]
fn describe_cluster(c: &config::ClusterConfig) -> String {
    // A replica id left to the default is this process's; `serve` is another process.
    let replica = if c.replica_is_default {
        format!(
            "{} (the default: host name and the process id of serve)",
            mcpr_cluster::default_replica("<pid>")
        )
    } else {
        c.replica.clone()
    };
    format!(
        "cluster: nats_url={} name={} replica={replica} lease_ttl_ms={} (NATS not contacted)",
        mcpr_core::redact_url(&c.nats_url),
        c.name,
        c.lease_ttl.as_millis()
    )
}

/// Without the feature there is never a `[cluster]` (the config refuses it).
#[cfg(not(feature = "cluster"))]
fn describe_cluster(c: &config::ClusterConfig) -> String {
    match *c {}
}

/// The cluster's shared secret, from which every replica derives the same identity key.
#[cfg(feature = "cluster")]
fn cluster_secret(c: &config::ClusterConfig) -> &[u8] {
    c.secret.as_bytes()
}

/// Without the feature there is never a `[cluster]` (the config refuses it).
#[cfg(not(feature = "cluster"))]
fn cluster_secret(c: &config::ClusterConfig) -> &[u8] {
    match *c {}
}
