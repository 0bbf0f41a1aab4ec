//! Settings of one `files` mount, already validated by the CLI's config loader.

use std::path::PathBuf;
use std::time::Duration;

use mcpr_core::CacheHints;

/// The deny list every files mount starts with (gitignore syntax, matched against the path
/// relative to the root). Denied entries are never listed, read, completed or watched, and
/// answer "not found" exactly like a missing file.
pub const BUILTIN_DENY: &[&str] = &[
    ".env",
    ".env.*",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.jks",
    "*.keystore",
    "*.kdbx",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    ".ssh/",
    ".gnupg/",
    ".aws/",
    ".azure/",
    ".kube/",
    ".docker/config.json",
    ".git/",
    ".hg/",
    ".svn/",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".pgpass",
    ".htpasswd",
    ".git-credentials",
    "credentials.json",
];

/// How the set of files under a root is watched for `list_changed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListWatchMode {
    /// inotify on every directory; falls back to polling when the kernel's watch limit is hit.
    Auto,
    /// Always poll at `poll_interval`.
    Poll,
    /// Never report list changes for this mount.
    Off,
}

/// A template from config, addressing files under the root.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateConfig {
    /// The RFC 6570 template; its expansions must be file URIs under the root.
    pub uri_template: String,
    /// Programmatic name.
    pub name: String,
    /// What it addresses.
    pub description: Option<String>,
}

/// One files mount.
#[derive(Debug, Clone)]
pub struct FilesConfig {
    /// The directory served. Canonicalised when the provider is built.
    pub root: PathBuf,
    /// Extra deny patterns (gitignore syntax), added to [`BUILTIN_DENY`].
    pub deny: Vec<String>,
    /// Honour `.gitignore` and `.ignore` files in listings and completion.
    pub respect_gitignore: bool,
    /// Serve dot-files (names starting with `.`). Off by default.
    pub hidden: bool,
    /// Quiet period before a change is reported; 0 reports at once.
    pub debounce: Duration,
    /// How list changes are detected.
    pub list_watch: ListWatchMode,
    /// Poll interval when polling.
    pub poll_interval: Duration,
    /// Templates from config.
    pub templates: Vec<TemplateConfig>,
    /// Cache hints on results from this mount.
    pub cache: CacheHints,
}

impl FilesConfig {
    /// A mount of `root` with every setting at its default.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            deny: Vec::new(),
            respect_gitignore: true,
            hidden: false,
            debounce: Duration::from_millis(50),
            list_watch: ListWatchMode::Auto,
            poll_interval: Duration::from_secs(2),
            templates: Vec::new(),
            cache: CacheHints::default(),
        }
    }
}
