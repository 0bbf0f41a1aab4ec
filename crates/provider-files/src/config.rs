//! Settings of one `files` mount: the typed [`FilesConfig`], its one validation, and the
//! `kind = "files"` table of the configuration file ([`FilesFactory`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mcpr_core::config::{
    ConfigError, IntOrString, MountCommon, MountSpec, MountTable, ProviderFactory, SettingError,
};
use mcpr_core::{CacheHints, Provider};
use serde::Deserialize;
use toml::Spanned;

/// Allowed `debounce_ms`.
pub const DEBOUNCE_MS: std::ops::RangeInclusive<u64> = 0..=60_000;
/// Allowed `poll_interval_ms`.
pub const POLL_INTERVAL_MS: std::ops::RangeInclusive<u64> = 100..=3_600_000;

/// The deny list every files mount starts with: core's [`mcpr_core::DEFAULT_DENY`], which
/// git and s3 mounts apply too (gitignore syntax, matched against the path relative to the
/// root, ignoring case: `SERVER.PEM` is as secret as `server.pem`, and on a case-insensitive
/// file system both name the same file). A pattern without a `/` before its end matches at
/// any depth; `**/` makes one with a `/` do so too. Denied entries are never listed, read,
/// completed or watched, and answer "not found" exactly like a missing file.
pub const BUILTIN_DENY: &[&str] = mcpr_core::DEFAULT_DENY;

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

impl FilesConfig {
    /// Check the settings that do not need the file system: the one validation of a files
    /// mount, made by the configuration loader and again by [`crate::FilesProvider::new`].
    pub fn validate(&self) -> Result<(), SettingError> {
        SettingError::check_range(
            "debounce_ms",
            self.debounce.as_millis() as u64,
            &DEBOUNCE_MS,
        )?;
        SettingError::check_range(
            "poll_interval_ms",
            self.poll_interval.as_millis() as u64,
            &POLL_INTERVAL_MS,
        )?;
        mcpr_core::DenyList::validate_setting(&self.deny)?;
        for (i, t) in self.templates.iter().enumerate() {
            if let Err(e) = mcpr_core::UriTemplate::parse(&t.uri_template) {
                return Err(SettingError::new(
                    format!("template.{i}.uri_template"),
                    format!("{:?}: {e}", t.uri_template),
                ));
            }
        }
        Ok(())
    }
}

/// A `kind = "files"` table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FilesToml {
    root: Option<Spanned<String>>,
    deny: Option<Vec<Spanned<String>>>,
    respect_gitignore: Option<bool>,
    hidden: Option<bool>,
    debounce_ms: Option<Spanned<IntOrString>>,
    list_changed: Option<Spanned<String>>,
    poll_interval_ms: Option<Spanned<IntOrString>>,
    #[serde(default)]
    template: Vec<TemplateToml>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TemplateToml {
    uri_template: Spanned<String>,
    name: Spanned<String>,
    description: Option<Spanned<String>>,
}

/// Builds `kind = "files"` mounts, and the mounts of `mcp-resources serve DIR`.
pub struct FilesFactory;

impl ProviderFactory for FilesFactory {
    fn kinds(&self) -> &'static [&'static str] {
        &["files"]
    }

    /// A directory is on one machine: replicas share it only when the mount says so (an
    /// NFS export, a shared volume).
    fn sharing(&self) -> mcpr_core::config::Sharing {
        mcpr_core::config::Sharing::OptIn
    }

    fn configure(
        &self,
        table: &MountTable<'_>,
        common: &MountCommon,
    ) -> Result<Box<dyn MountSpec>, ConfigError> {
        let raw: FilesToml = table.parse()?;
        let file = table.file();
        let Some(root) = &raw.root else {
            return Err(table.error_at_mount("a files mount needs `root`, the directory to serve"));
        };
        // Relative roots are relative to the config file, not to wherever the server started.
        let root_path = file.directory(root, "mount.root")?;
        let mut fc = FilesConfig::new(root_path);
        for d in raw.deny.iter().flatten() {
            fc.deny.push(file.expand(d, "mount.deny")?);
        }
        if let Some(v) = raw.respect_gitignore {
            fc.respect_gitignore = v;
        }
        if let Some(v) = raw.hidden {
            fc.hidden = v;
        }
        if let Some(v) = &raw.debounce_ms {
            fc.debounce = Duration::from_millis(file.number(v, "mount.debounce_ms")?);
        }
        if let Some(v) = &raw.poll_interval_ms {
            fc.poll_interval = Duration::from_millis(file.number(v, "mount.poll_interval_ms")?);
        }
        if let Some(v) = &raw.list_changed {
            fc.list_watch = file.choice(
                v,
                "mount.list_changed",
                &[
                    ("auto", ListWatchMode::Auto),
                    ("poll", ListWatchMode::Poll),
                    ("off", ListWatchMode::Off),
                ],
            )?;
        }
        fc.cache = common.cache;
        for t in &raw.template {
            fc.templates.push(TemplateConfig {
                uri_template: file.expand(&t.uri_template, "mount.template.uri_template")?,
                name: file.expand(&t.name, "mount.template.name")?,
                description: t
                    .description
                    .as_ref()
                    .map(|d| file.expand(d, "mount.template.description"))
                    .transpose()?,
            });
        }
        // A deny pattern or template that does not parse is named at its own line.
        fc.validate().map_err(|e| table.setting_error(e))?;
        Ok(Box::new(FilesSpec(fc)))
    }

    fn for_directory(&self, dir: &Path) -> Option<Box<dyn MountSpec>> {
        Some(Box::new(FilesSpec(FilesConfig::new(dir))))
    }
}

/// A validated files mount.
#[derive(Debug)]
struct FilesSpec(FilesConfig);

#[async_trait]
impl MountSpec for FilesSpec {
    fn kind(&self) -> &str {
        "files"
    }

    async fn build(&self) -> mcpr_core::Result<Arc<dyn Provider>> {
        Ok(Arc::new(crate::FilesProvider::new(self.0.clone())?))
    }

    fn is_local(&self) -> bool {
        true
    }
}
