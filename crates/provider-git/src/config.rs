//! Settings of one `git` mount: the typed [`GitConfig`], its one validation, and the
//! `kind = "git"` table of the configuration file ([`GitFactory`]).

use std::path::PathBuf;
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
/// Allowed `last_modified_depth`.
pub const LAST_MODIFIED_DEPTH: std::ops::RangeInclusive<u64> = 0..=1_000_000;
/// Allowed `history_scan_limit`.
pub const HISTORY_SCAN_LIMIT: std::ops::RangeInclusive<u64> = 1..=10_000_000;

/// How ref moves are detected for change notifications.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefWatchMode {
    /// inotify on the ref storage (`refs/`, `packed-refs`, `HEAD`), with polling at
    /// `poll_interval` as a safety net (and alone when inotify cannot be set up).
    Auto,
    /// Only poll at `poll_interval`.
    Poll,
    /// No change notifications at all: neither `watch` nor `list_changed` is declared.
    Off,
}

/// One git mount.
#[derive(Debug, Clone)]
pub struct GitConfig {
    /// The repository: a work tree (its `.git` is found) or a bare repository.
    pub repo: PathBuf,
    /// The repository's name in the multi-repository URI form `git://@{name}/{ref}/{path}`.
    /// Letters, digits, `-`, `_` and `.`; `None` serves only the short form.
    pub name: Option<String>,
    /// Serve the short form `git://{ref}/{path}` too. At most one mount may; a mount without
    /// a `name` must.
    pub default: bool,
    /// The ref whose tree `resources/list` enumerates; `None` is `HEAD`.
    pub default_ref: Option<String>,
    /// Quiet period after a ref storage event before refs are re-read.
    pub debounce: Duration,
    /// How ref moves are detected.
    pub watch: RefWatchMode,
    /// How often refs are re-read when polling (always, as a fallback to inotify).
    pub poll_interval: Duration,
    /// How many first-parent commits `lastModified` may examine per listed path; 0 uses the
    /// committer date of the ref's commit instead.
    pub last_modified_depth: usize,
    /// How many first-parent commits one history page may examine at most.
    pub history_scan_limit: usize,
    /// Deny patterns (gitignore syntax) added to [`mcpr_core::DEFAULT_DENY`]: matching paths
    /// are never listed, read, completed or watched, and answer not found.
    pub deny: Vec<String>,
    /// Cache hints on results from this mount.
    pub cache: CacheHints,
}

impl GitConfig {
    /// A default, unnamed mount of `repo` (short URI form, list `HEAD`'s tree).
    pub fn new(repo: impl Into<PathBuf>) -> Self {
        Self {
            repo: repo.into(),
            name: None,
            default: true,
            default_ref: None,
            debounce: Duration::from_millis(50),
            watch: RefWatchMode::Auto,
            poll_interval: Duration::from_secs(2),
            last_modified_depth: 1000,
            history_scan_limit: 10_000,
            deny: Vec::new(),
            cache: CacheHints::default(),
        }
    }

    /// Check the settings that do not need the repository: the one validation of a git
    /// mount, made by the configuration loader and again by [`crate::GitProvider::new`].
    pub fn validate(&self) -> Result<(), SettingError> {
        if let Some(name) = &self.name {
            SettingError::check_mount_name("name", "git", name)?;
        } else if !self.default {
            return Err(SettingError::new(
                "default",
                "a git mount without a name must be the default mount (it has no other URI form)",
            ));
        }
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
        SettingError::check_range(
            "last_modified_depth",
            self.last_modified_depth as u64,
            &LAST_MODIFIED_DEPTH,
        )?;
        SettingError::check_range(
            "history_scan_limit",
            self.history_scan_limit as u64,
            &HISTORY_SCAN_LIMIT,
        )?;
        mcpr_core::DenyList::validate_setting(&self.deny)?;
        Ok(())
    }
}

/// A `kind = "git"` table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GitToml {
    repo: Option<Spanned<String>>,
    name: Option<Spanned<String>>,
    default: Option<bool>,
    default_ref: Option<Spanned<String>>,
    debounce_ms: Option<Spanned<IntOrString>>,
    poll_interval_ms: Option<Spanned<IntOrString>>,
    watch: Option<Spanned<String>>,
    last_modified_depth: Option<Spanned<IntOrString>>,
    history_scan_limit: Option<Spanned<IntOrString>>,
    deny: Option<Vec<Spanned<String>>>,
}

/// Builds `kind = "git"` mounts.
pub struct GitFactory;

impl ProviderFactory for GitFactory {
    fn kinds(&self) -> &'static [&'static str] {
        &["git"]
    }

    fn configure(
        &self,
        table: &MountTable<'_>,
        common: &MountCommon,
    ) -> Result<Box<dyn MountSpec>, ConfigError> {
        let raw: GitToml = table.parse()?;
        let file = table.file();
        let Some(repo) = &raw.repo else {
            return Err(table.error_at_mount("a git mount needs `repo`, the repository to serve"));
        };
        let path = file.directory(repo, "mount.repo")?;
        let mut g = GitConfig::new(path);
        if let Some(v) = &raw.name {
            g.name = Some(file.expand(v, "mount.name")?);
            // A named mount is reached through git://@{name}/… unless it is marked default.
            g.default = false;
        }
        if let Some(d) = raw.default {
            g.default = d;
        }
        if let Some(v) = &raw.default_ref {
            g.default_ref = Some(file.expand(v, "mount.default_ref")?);
        }
        if let Some(v) = &raw.debounce_ms {
            g.debounce = Duration::from_millis(file.number(v, "mount.debounce_ms")?);
        }
        if let Some(v) = &raw.poll_interval_ms {
            g.poll_interval = Duration::from_millis(file.number(v, "mount.poll_interval_ms")?);
        }
        if let Some(v) = &raw.watch {
            g.watch = file.choice(
                v,
                "mount.watch",
                &[
                    ("auto", RefWatchMode::Auto),
                    ("poll", RefWatchMode::Poll),
                    ("off", RefWatchMode::Off),
                ],
            )?;
        }
        if let Some(v) = &raw.last_modified_depth {
            g.last_modified_depth = file.number(v, "mount.last_modified_depth")? as usize;
        }
        if let Some(v) = &raw.history_scan_limit {
            g.history_scan_limit = file.number(v, "mount.history_scan_limit")? as usize;
        }
        for d in raw.deny.iter().flatten() {
            g.deny.push(file.expand(d, "mount.deny")?);
        }
        g.cache = common.cache;
        g.validate().map_err(|e| table.setting_error(e))?;
        Ok(Box::new(GitSpec(g)))
    }
}

/// A validated git mount.
#[derive(Debug)]
struct GitSpec(GitConfig);

#[async_trait]
impl MountSpec for GitSpec {
    fn kind(&self) -> &str {
        "git"
    }

    async fn build(&self) -> mcpr_core::Result<Arc<dyn Provider>> {
        Ok(Arc::new(crate::GitProvider::new(self.0.clone())?))
    }

    fn is_local(&self) -> bool {
        true
    }
}
