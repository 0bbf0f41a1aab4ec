//! Change notifications from ref moves: the git side of core's poll-and-compare watcher
//! ([`mcpr_core::poll`]).
//!
//! The core [`Poller`] runs while anything is watched, on the poll interval (the fallback,
//! and the only source in `poll` mode) and when this module's inotify watch of the ref
//! storage wakes it (`refs/`, `packed-refs`, `HEAD`, and `reftable/`, where every update
//! replaces `tables.list`; debounced). Each round re-reads the refs on the blocking pool and
//! fingerprints each watched URI: the commit for a commit URI, the id of the entry at the path
//! for anything else. So `git://main/x` fires when `main` moves *and* `x` changed, never
//! when `main` moves past commits that leave `x` alone. That fingerprint depends only on the
//! ref and the path, so every URI of one ref and path (directory blocks `?after=`, history
//! pages, other spellings) is one [`PollKey`]: one lookup per round, each URI notified.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use gix::ObjectId;
use mcpr_core::poll::{PollConfig, PollKey, PollSource, Poller, Waker, Watched};
use mcpr_core::{ChangeSink, Error, ErrorKind, ResourceUri, Result, WatchGuard, run_blocking};
use notify::{RecursiveMode, Watcher as _};

use crate::config::RefWatchMode;
use crate::provider::Inner;
use crate::repo::{Kind, RefStore};
use crate::uri::{GitUri, Query, TreePath};

/// What a watched URI looked like at the last check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fingerprint {
    /// The commit the ref resolved to (`None`: it resolved to nothing).
    commit: Option<ObjectId>,
    /// What is compared: the commit for a commit URI, else the entry id at the path.
    what: Option<ObjectId>,
}

impl Fingerprint {
    /// A short string form, for `change_token`.
    pub(crate) fn token(&self) -> String {
        // Only what the URI shows counts: a commit that leaves this path's entry alone must
        // not look like a change of it (the commit is part of `what` where it matters:
        // commit URIs and whole-ref history).
        self.what.map_or_else(|| "-".to_owned(), |i| i.to_string())
    }
}

/// Compute the fingerprint of `target`, reusing `prev` when the ref has not moved.
pub(crate) fn fingerprint(
    inner: &Inner,
    h: &gix::Repository,
    target: &GitUri,
    prev: Option<&Fingerprint>,
    resolved: &mut HashMap<String, Option<ObjectId>>,
) -> Result<Fingerprint> {
    let commit = match resolved.get(&target.rev) {
        Some(c) => *c,
        None => {
            let c = resolve(inner, h, &target.rev)?;
            resolved.insert(target.rev.clone(), c);
            c
        }
    };
    if let Some(p) = prev
        && p.commit == commit
    {
        return Ok(p.clone());
    }
    let what = match (&target.path, commit) {
        (_, None) => None,
        (None, Some(c)) => Some(c),
        (Some(path), Some(c)) => {
            let (root, _, _) = inner.repo.commit_links(h, c)?;
            inner.repo.entry_at(h, root, path)?.map(|e| e.id)
        }
    };
    // A history of the whole ref changes with every commit.
    let what = match (&target.path, &target.query) {
        (None, Query::History { .. }) => commit,
        _ => what,
    };
    Ok(Fingerprint { commit, what })
}

/// Resolve `rev` for a check. An ambiguous abbreviation resolves to nothing here (reads say
/// why), but a ref storage that cannot be read is an error: the check fails and every watch
/// keeps its last state, rather than seeing every ref vanish and come back.
fn resolve(inner: &Inner, h: &gix::Repository, rev: &str) -> Result<Option<ObjectId>> {
    match inner.repo.resolve_rev(h, rev) {
        Ok(c) => Ok(c),
        Err(e) if e.kind == ErrorKind::InvalidParams => Ok(None),
        Err(e) => Err(e),
    }
}

/// What the listing depends on: the branch and tag names, and the default ref's tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListSnapshot {
    refs: BTreeSet<String>,
    tree: Option<ObjectId>,
    /// Counts the changes of what the listing shows (the ref names, the paths in the tree),
    /// which is what is compared: a commit that only edits files moves `tree` but not this.
    shown: u64,
}

/// The listing's snapshot now; `prev` is the last one, against which `shown` is counted.
fn list_snapshot(
    inner: &Inner,
    h: &gix::Repository,
    prev: Option<&ListSnapshot>,
) -> Result<ListSnapshot> {
    let refs = inner
        .repo
        .branches_and_tags(h)?
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    let rev = inner
        .repo
        .default_rev(h, inner.config.default_ref.as_deref());
    let tree = match resolve(inner, h, &rev)? {
        Some(c) => Some(inner.repo.commit_links(h, c)?.0),
        None => None,
    };
    let shown = match prev {
        None => 0,
        Some(old) if old.refs == refs && old.tree == tree => old.shown,
        Some(old) => {
            let differs = old.refs != refs
                || match (old.tree, tree) {
                    (Some(a), Some(b)) => names_differ(inner, h, a, b, &TreePath::root())?,
                    (a, b) => a != b,
                };
            old.shown + u64::from(differs)
        }
    };
    Ok(ListSnapshot { refs, tree, shown })
}

/// Whether two trees (at `path`) list different paths (not merely different contents): only
/// subtrees whose ids differ are compared, so the cost follows the size of the change.
/// Entries the listing does not show (denied, or names no URI can hold) are left out: a
/// denied file coming or going changes nothing a client can see.
fn names_differ(
    inner: &Inner,
    h: &gix::Repository,
    a: ObjectId,
    b: ObjectId,
    path: &TreePath,
) -> Result<bool> {
    if a == b {
        return Ok(false);
    }
    let (ta, tb) = (inner.repo.tree(h, a)?, inner.repo.tree(h, b)?);
    let shown = |e: &&crate::repo::Entry| {
        crate::uri::valid_component(&e.name)
            && !inner.entry_denied(&path.join(&e.name), e.kind == Kind::Tree)
    };
    let (sa, sb): (Vec<_>, Vec<_>) = (
        ta.iter().filter(shown).collect(),
        tb.iter().filter(shown).collect(),
    );
    if sa.len() != sb.len() {
        return Ok(true);
    }
    for (ea, eb) in sa.iter().zip(sb.iter()) {
        let (a_tree, b_tree) = (ea.kind == Kind::Tree, eb.kind == Kind::Tree);
        if ea.name != eb.name || a_tree != b_tree {
            return Ok(true);
        }
        if a_tree && names_differ(inner, h, ea.id, eb.id, &path.join(&ea.name))? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// What a check saw of one watched key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seen {
    Uri(Fingerprint),
    List(ListSnapshot),
}

/// The repository as a [`PollSource`].
pub(crate) struct RefSource {
    inner: Arc<Inner>,
}

#[async_trait]
impl PollSource for RefSource {
    type Fingerprint = Seen;

    async fn check(&self, key: &Watched, last: Option<&Seen>) -> Result<Seen> {
        let mut out = self.check_all(&[(key.clone(), last.cloned())]).await;
        out.pop()
            .unwrap_or_else(|| Err(Error::internal("git: a check gave no answer")))
    }

    /// Every key of a round in one hop to the blocking pool, on one repository handle, each
    /// ref resolved once.
    async fn check_all(&self, keys: &[(Watched, Option<Seen>)]) -> Vec<Result<Seen>> {
        let inner = self.inner.clone();
        let keys = keys.to_vec();
        let n = keys.len();
        match run_blocking("git watch check", move || Ok(check_keys(&inner, &keys))).await {
            Ok(out) => out,
            Err(e) => vec![Err(e); n],
        }
    }

    /// The ref as written and the path: the query (directory block, history page) does not
    /// change what is fingerprinted.
    fn poll_key(&self, key: &Watched) -> PollKey {
        if let Watched::Resource(uri) = key
            && let Ok(target) = crate::uri::parse(&self.inner.bases, uri)
        {
            return PollKey::Object(format!("{:?} {:?}", target.rev, target.path));
        }
        PollKey::of(key)
    }

    fn changed(&self, _key: &Watched, old: &Seen, new: &Seen) -> bool {
        match (old, new) {
            // Only what the URI shows counts, not the commit the ref moved to.
            (Seen::Uri(a), Seen::Uri(b)) => a.what != b.what,
            (Seen::List(a), Seen::List(b)) => a.shown != b.shown,
            _ => true,
        }
    }

    fn start(&self, waker: Waker) -> Box<dyn Send> {
        if self.inner.config.watch != RefWatchMode::Auto {
            return Box::new(());
        }
        match start_inotify(&self.inner, waker) {
            Ok(w) => Box::new(w),
            Err(e) => {
                tracing::warn!(repo = %self.inner.repo.git_dir.display(), error = %e, "git: cannot watch the ref storage, polling instead");
                Box::new(())
            }
        }
    }
}

/// Fingerprint each key (blocking). A ref storage that cannot be read fails the keys that
/// need it, which keep their last state.
fn check_keys(inner: &Inner, keys: &[(Watched, Option<Seen>)]) -> Vec<Result<Seen>> {
    let h = inner.repo.handle();
    let mut resolved = HashMap::new();
    keys.iter()
        .map(|(key, last)| match key {
            Watched::Resource(uri) => {
                let target = crate::uri::parse(&inner.bases, uri)?;
                let prev = match last {
                    Some(Seen::Uri(f)) => Some(f),
                    _ => None,
                };
                fingerprint(inner, &h, &target, prev, &mut resolved).map(Seen::Uri)
            }
            Watched::List => {
                let prev = match last {
                    Some(Seen::List(l)) => Some(l),
                    _ => None,
                };
                list_snapshot(inner, &h, prev).map(Seen::List)
            }
        })
        .collect()
}

/// The provider's watch machinery.
#[derive(Clone)]
pub(crate) struct Watcher {
    inner: Arc<Inner>,
    /// The poller holds the source weakly; this keeps it as long as the provider lives.
    _source: Arc<RefSource>,
    poller: Poller<RefSource>,
}

impl Watcher {
    pub(crate) fn new(inner: Arc<Inner>) -> Self {
        let source = Arc::new(RefSource {
            inner: inner.clone(),
        });
        let cfg = &inner.config;
        // Retries at the poll interval, as a failed check always was: an inotify event
        // checks again at once anyway.
        let config = PollConfig::every(cfg.poll_interval)
            .with_debounce(cfg.debounce)
            .with_retry(cfg.poll_interval, cfg.poll_interval);
        let poller = Poller::new(
            format!("git {}", inner.repo.git_dir.display()),
            Arc::downgrade(&source),
            config,
        );
        Self {
            inner,
            _source: source,
            poller,
        }
    }

    /// Watch `target` for `uri` (blocking: computes the starting fingerprint first, so a move
    /// after it is seen by the first check).
    pub(crate) fn watch(
        &self,
        uri: &ResourceUri,
        target: GitUri,
        sink: ChangeSink,
    ) -> Result<WatchGuard> {
        let key = Watched::Resource(uri.clone());
        // The same ref and path polled for another URI: its fingerprint is the start.
        if let Some(guard) = self.poller.join(&key, &sink) {
            return Ok(guard);
        }
        let h = self.inner.repo.handle();
        let last = fingerprint(&self.inner, &h, &target, None, &mut HashMap::new())?;
        drop(h);
        Ok(self.poller.watch(key, sink, Some(Seen::Uri(last))))
    }

    /// Report list changes to `sink` (blocking: takes the starting snapshot).
    pub(crate) fn watch_list(&self, sink: ChangeSink) -> Result<WatchGuard> {
        let h = self.inner.repo.handle();
        let snap = list_snapshot(&self.inner, &h, None)?;
        drop(h);
        Ok(self
            .poller
            .watch(Watched::List, sink, Some(Seen::List(snap))))
    }
}

/// Watch the ref storage with inotify: `refs/` recursively, the git directories themselves
/// (not recursively) for `HEAD` and `packed-refs`, and the reftable directories of a reftable
/// repository (every update writes a table and replaces `tables.list` there). Only events
/// that can be ref updates wake the poller (not `index`, objects or logs).
fn start_inotify(inner: &Inner, waker: Waker) -> notify::Result<notify::RecommendedWatcher> {
    let common = inner.repo.common_dir.clone();
    let git_dir = inner.repo.git_dir.clone();
    let ref_dirs: Vec<PathBuf> = [common.join("refs"), git_dir.join("refs")]
        .into_iter()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let roots: Vec<PathBuf> = [common.clone(), git_dir.clone()]
        .into_iter()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let reftable_dirs: Vec<PathBuf> = match &inner.repo.refs {
        RefStore::Files => Vec::new(),
        RefStore::Reftable(store) => store.dirs().into_iter().map(Path::to_path_buf).collect(),
    };
    let relevant = {
        let ref_dirs = ref_dirs.clone();
        let reftable_dirs = reftable_dirs.clone();
        move |p: &Path| -> bool {
            if ref_dirs
                .iter()
                .chain(&reftable_dirs)
                .any(|d| p.starts_with(d))
            {
                return true;
            }
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("HEAD") || n.starts_with("packed-refs"))
        }
    };
    let mut w = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        let wake = match res {
            Ok(ev) => ev.need_rescan() || ev.paths.iter().any(|p| relevant(p)),
            // An error (such as a queue overflow) may have hidden an update: check.
            Err(_) => true,
        };
        if wake {
            waker.wake();
        }
    })?;
    for d in &ref_dirs {
        if d.is_dir() {
            w.watch(d, RecursiveMode::Recursive)?;
        }
    }
    for d in roots
        .iter()
        .chain(reftable_dirs.iter().filter(|d| d.is_dir()))
    {
        w.watch(d, RecursiveMode::NonRecursive)?;
    }
    Ok(w)
}
