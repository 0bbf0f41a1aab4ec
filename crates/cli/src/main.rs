//! The `mcp-resources` command: load configuration, build the mounts, serve MCP over stdio.
//!
//! Only glue lives here; the logic is in the library crates.

mod config;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use config::{Config, MountConfig};
use mcpr_core::Provider;
use mcpr_provider_files::{FilesConfig, FilesProvider};
use mcpr_server::{McpHandler, ServerState};
use rmcp::ServiceExt as _;

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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve {
            paths,
            config,
            log_level,
        } => {
            init_logging(&log_level);
            serve(paths, config)
        }
        Command::CheckConfig { file } => check_config(&file),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcp-resources: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr only: stdout carries nothing but protocol.
fn init_logging(level: &str) {
    // rmcp logs every error response at WARN; a client asking for a missing file is routine,
    // so rmcp's own service chatter is kept to real errors unless RUST_LOG says otherwise.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(format!("{level},rmcp::service=error"))
    });
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .with_ansi(false)
        .init();
}

fn load_config(paths: Vec<PathBuf>, config: Option<PathBuf>) -> anyhow::Result<Config> {
    let mut cfg = match &config {
        Some(file) => config::load(file)?,
        None => Config::default(),
    };
    for p in paths {
        let md = std::fs::metadata(&p).with_context(|| format!("cannot serve {}", p.display()))?;
        anyhow::ensure!(md.is_dir(), "cannot serve {}: not a directory", p.display());
        cfg.mounts.push(MountConfig::Files(FilesConfig::new(p)));
    }
    anyhow::ensure!(
        !cfg.mounts.is_empty(),
        "nothing to serve: give one or more directories (mcp-resources serve ./docs) or --config FILE"
    );
    Ok(cfg)
}

fn build_providers(cfg: &Config) -> anyhow::Result<Vec<Arc<dyn Provider>>> {
    let mut providers: Vec<Arc<dyn Provider>> = Vec::new();
    let mut prefixes = std::collections::HashMap::new();
    for m in &cfg.mounts {
        let p: Arc<dyn Provider> = match m {
            MountConfig::Files(fc) => {
                Arc::new(FilesProvider::new(fc.clone()).map_err(|e| anyhow::anyhow!("{e}"))?)
            }
        };
        for prefix in &p.info().uri_prefixes {
            if let Some(other) = prefixes.insert(prefix.clone(), p.info().label.clone()) {
                anyhow::bail!("two mounts serve the same URI prefix {prefix} ({other})");
            }
        }
        providers.push(p);
    }
    Ok(providers)
}

fn serve(paths: Vec<PathBuf>, config: Option<PathBuf>) -> anyhow::Result<()> {
    let cfg = load_config(paths, config)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async move {
        let providers = build_providers(&cfg)?;
        for p in &providers {
            tracing::info!(kind = p.info().kind, mount = %p.info().label, "mounted");
        }
        let state = ServerState::new(cfg.server.clone(), providers);
        let service = McpHandler::new(state)
            .serve(rmcp::transport::stdio())
            .await
            .context("the client closed the connection before it began")?;
        service
            .waiting()
            .await
            .context("the stdio session failed")?;
        anyhow::Ok(())
    })?;
    // Watcher threads and blocking reads must not keep a finished server alive.
    rt.shutdown_timeout(std::time::Duration::from_millis(200));
    Ok(())
}

fn check_config(file: &std::path::Path) -> anyhow::Result<()> {
    let cfg = config::load(file)?;
    let providers = build_providers(&cfg)?;
    println!("{}: OK", file.display());
    println!(
        "server: name={} page_size={} max_read_bytes={}",
        cfg.server.name, cfg.server.page_size, cfg.server.max_read_bytes
    );
    for (m, p) in cfg.mounts.iter().zip(&providers) {
        println!(
            "mount {}: {} -> {}",
            m.kind(),
            p.info().label,
            p.info().uri_prefixes.join(", ")
        );
    }
    Ok(())
}
