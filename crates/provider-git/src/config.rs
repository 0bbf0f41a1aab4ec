//! Settings of one `git` mount, already validated by the CLI's config loader (and checked
//! again by [`crate::GitProvider::new`]).

use std::path::PathBuf;
use std::time::Duration;

use mcpr_core::CacheHints;

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
            cache: CacheHints::default(),
        }
    }

    /// Check the settings that do not need the repository.
    pub(crate) fn validate(&self) -> mcpr_core::Result<()> {
        use mcpr_core::Error;
        if let Some(name) = &self.name {
            let ok = !name.is_empty()
                && name.len() <= 64
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
            if !ok {
                return Err(Error::invalid_params(format!(
                    "git mount name {name:?} must be 1 to 64 letters, digits, '-', '_' or '.'"
                )));
            }
        } else if !self.default {
            return Err(Error::invalid_params(
                "a git mount without a name must be the default mount (it has no other URI form)",
            ));
        }
        if self.poll_interval < Duration::from_millis(100) {
            return Err(Error::invalid_params(
                "git poll interval must be at least 100 ms",
            ));
        }
        if self.history_scan_limit == 0 {
            return Err(Error::invalid_params(
                "git history_scan_limit must be at least 1",
            ));
        }
        Ok(())
    }
}
