//! The providers compiled into this binary: one line per factory, each behind the cargo
//! feature of its crate. Adding a provider is one line here (and its feature in Cargo.toml).

use mcpr_core::config::ProviderRegistry;

/// Every mount kind this project knows, with the cargo feature that brings it, so a kind that
/// was compiled out is told apart from a misspelt one.
const FEATURES: &[(&str, &[&str])] = &[
    ("files", &["files"]),
    ("git", &["git"]),
    ("sql", &["sqlite", "postgres", "mysql"]),
    ("http", &["api", "web"]),
    ("s3", &["s3"]),
    ("mcp", &["mcp"]),
    ("conformance", &["conformance"]),
];

/// The registry of every provider compiled in.
pub fn registry() -> ProviderRegistry {
    #[allow(unused_mut)]
    let mut r = ProviderRegistry::new();
    #[cfg(feature = "files")]
    r.register(Box::new(mcpr_provider_files::FilesFactory));
    #[cfg(feature = "git")]
    r.register(Box::new(mcpr_provider_git::GitFactory));
    #[cfg(feature = "sql")]
    r.register(Box::new(mcpr_provider_sql::SqlFactory));
    #[cfg(feature = "http")]
    r.register(Box::new(mcpr_provider_http::HttpFactory));
    #[cfg(feature = "s3")]
    r.register(Box::new(mcpr_provider_s3::S3Factory));
    #[cfg(feature = "mcp")]
    r.register(Box::new(mcpr_provider_mcp::McpFactory));
    // The official conformance suite's fixtures: test data, never in a shipped binary.
    #[cfg(feature = "conformance")]
    r.register(Box::new(mcpr_provider_conformance::ConformanceFactory));
    r
}

/// Why `kind` has no factory in `registry`: compiled out, or unknown.
pub fn unavailable(kind: &str, registry: &ProviderRegistry) -> String {
    let available = registry.kinds().join(", ");
    if let Some((feature, _)) = FEATURES.iter().find(|(_, kinds)| kinds.contains(&kind)) {
        format!(
            "mount kind `{kind}` is not compiled into this binary (cargo feature `{feature}`); available: {available}"
        )
    } else {
        format!("unknown mount kind `{kind}`; available: {available}")
    }
}
