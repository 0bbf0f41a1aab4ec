//! Change notifications from ref moves.
//!
//! One thread per provider runs while anything is watched. It wakes on inotify events in the
//! ref storage (`refs/`, `packed-refs`, `HEAD`, and `reftable/`, where every update replaces
//! `tables.list`; debounced) and at every poll interval (the fallback, and the only source in
//! `poll` mode), re-reads the refs, and compares each
//! watched URI's fingerprint: the commit for a commit URI, the id of the entry at the path
//! for anything else. So `git://main/x` fires when `main` moves *and* `x` changed, never
//! when `main` moves past commits that leave `x` alone.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError, channel};
use std::sync::{Arc, Mutex};

use gix::ObjectId;
use mcpr_core::{ChangeSink, ErrorKind, Result, WatchGuard};
use notify::{RecursiveMode, Watcher as _};

use crate::config::RefWatchMode;
use crate::provider::Inner;
use crate::repo::{Kind, RefStore};
use crate::uri::{GitUri, Query};

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
struct ListSnapshot {
    refs: BTreeSet<String>,
    tree: Option<ObjectId>,
}

fn list_snapshot(inner: &Inner, h: &gix::Repository) -> Result<ListSnapshot> {
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
    Ok(ListSnapshot { refs, tree })
}

/// Whether two trees list different paths (not merely different contents): only subtrees
/// whose ids differ are compared, so the cost follows the size of the change.
fn names_differ(inner: &Inner, h: &gix::Repository, a: ObjectId, b: ObjectId) -> Result<bool> {
    if a == b {
        return Ok(false);
    }
    let (ta, tb) = (inner.repo.tree(h, a)?, inner.repo.tree(h, b)?);
    if ta.len() != tb.len() {
        return Ok(true);
    }
    for (ea, eb) in ta.iter().zip(tb.iter()) {
        let (a_tree, b_tree) = (ea.kind == Kind::Tree, eb.kind == Kind::Tree);
        if ea.name != eb.name || a_tree != b_tree {
            return Ok(true);
        }
        if a_tree && names_differ(inner, h, ea.id, eb.id)? {
            return Ok(true);
        }
    }
    Ok(false)
}

struct UriWatch {
    uri: String,
    target: GitUri,
    last: Fingerprint,
    sink: ChangeSink,
}

struct ListWatch {
    sink: ChangeSink,
}

#[derive(Default)]
struct State {
    next_id: u64,
    uris: HashMap<u64, UriWatch>,
    lists: HashMap<u64, ListWatch>,
    /// The listing as last seen, while anyone watches the list.
    list_last: Option<ListSnapshot>,
    thread: Option<Running>,
}

/// The running watch thread: dropping it stops the thread and releases inotify.
struct Running {
    tx: Sender<Msg>,
    _inotify: Option<notify::RecommendedWatcher>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.tx.send(Msg::Stop);
    }
}

enum Msg {
    Event,
    Stop,
}

/// The provider's watch machinery.
#[derive(Clone)]
pub(crate) struct Watcher {
    inner: Arc<Inner>,
    state: Arc<Mutex<State>>,
}

/// Removes one watch when dropped.
struct Release {
    state: Arc<Mutex<State>>,
    id: u64,
}

impl Drop for Release {
    fn drop(&mut self) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.uris.remove(&self.id);
        if st.lists.remove(&self.id).is_some() && st.lists.is_empty() {
            st.list_last = None;
        }
        if st.uris.is_empty() && st.lists.is_empty() {
            // The last watch is gone: stop the thread and release the inotify watches.
            st.thread = None;
        }
    }
}

impl Watcher {
    pub(crate) fn new(inner: Arc<Inner>) -> Self {
        Self {
            inner,
            state: Arc::default(),
        }
    }

    /// Watch `target` for `uri` (blocking: computes the starting fingerprint).
    pub(crate) fn watch(&self, uri: &str, target: GitUri, sink: ChangeSink) -> Result<WatchGuard> {
        let h = self.inner.repo.handle();
        let last = fingerprint(&self.inner, &h, &target, None, &mut HashMap::new())?;
        drop(h);
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let id = st.next_id;
        st.next_id += 1;
        st.uris.insert(
            id,
            UriWatch {
                uri: uri.to_owned(),
                target,
                last,
                sink,
            },
        );
        self.ensure_running(&mut st);
        Ok(WatchGuard::new(Release {
            state: self.state.clone(),
            id,
        }))
    }

    /// Report list changes to `sink` (blocking: takes the starting snapshot).
    pub(crate) fn watch_list(&self, sink: ChangeSink) -> Result<WatchGuard> {
        let h = self.inner.repo.handle();
        let snap = list_snapshot(&self.inner, &h)?;
        drop(h);
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let id = st.next_id;
        st.next_id += 1;
        st.lists.insert(id, ListWatch { sink });
        if st.list_last.is_none() {
            st.list_last = Some(snap);
        }
        self.ensure_running(&mut st);
        Ok(WatchGuard::new(Release {
            state: self.state.clone(),
            id,
        }))
    }

    fn ensure_running(&self, st: &mut State) {
        if st.thread.is_some() {
            return;
        }
        let (tx, rx) = channel();
        let inotify = match self.inner.config.watch {
            RefWatchMode::Auto => match start_inotify(&self.inner, tx.clone()) {
                Ok(w) => Some(w),
                Err(e) => {
                    tracing::warn!(repo = %self.inner.repo.git_dir.display(), error = %e, "git: cannot watch the ref storage, polling instead");
                    None
                }
            },
            RefWatchMode::Poll | RefWatchMode::Off => None,
        };
        let watcher = self.clone();
        let spawned = std::thread::Builder::new()
            .name("mcpr-git-watch".into())
            .spawn(move || watcher.run(rx));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "git: cannot start the watch thread");
            return;
        }
        st.thread = Some(Running {
            tx,
            _inotify: inotify,
        });
    }

    /// The thread: wake on events (after the debounce) or at each poll interval, then check.
    fn run(self, rx: Receiver<Msg>) {
        let cfg = &self.inner.config;
        loop {
            match rx.recv_timeout(cfg.poll_interval) {
                Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => return,
                Ok(Msg::Event) => {
                    // The first event of a burst starts the quiet period; the rest of the
                    // burst is folded into one check.
                    std::thread::sleep(cfg.debounce);
                    loop {
                        match rx.try_recv() {
                            Ok(Msg::Event) => continue,
                            Ok(Msg::Stop) | Err(TryRecvError::Disconnected) => return,
                            Err(TryRecvError::Empty) => break,
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
            if let Err(e) = self.check() {
                tracing::warn!(error = %e, "git: checking for ref moves failed");
            }
        }
    }

    /// Re-resolve every watched URI and the listing; notify what changed.
    pub(crate) fn check(&self) -> Result<()> {
        let (targets, list_last) = {
            let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let t: Vec<(u64, GitUri, Fingerprint)> = st
                .uris
                .iter()
                .map(|(id, w)| (*id, w.target.clone(), w.last.clone()))
                .collect();
            let l = (!st.lists.is_empty())
                .then(|| st.list_last.clone())
                .flatten();
            (t, l)
        };
        let h = self.inner.repo.handle();
        let mut resolved = HashMap::new();
        let mut changed = Vec::new();
        for (id, target, last) in targets {
            let now = fingerprint(&self.inner, &h, &target, Some(&last), &mut resolved)?;
            if now != last {
                changed.push((id, now));
            }
        }
        let mut list_changed = None;
        if let Some(old) = list_last {
            let new = list_snapshot(&self.inner, &h)?;
            if new != old {
                let differs = old.refs != new.refs
                    || match (old.tree, new.tree) {
                        (Some(a), Some(b)) => names_differ(&self.inner, &h, a, b)?,
                        (a, b) => a != b,
                    };
                list_changed = Some((differs, new));
            }
        }
        drop(h);
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        for (id, now) in changed {
            // A watch dropped meanwhile stays silent.
            if let Some(w) = st.uris.get_mut(&id)
                && w.last.what != now.what
            {
                w.sink.updated(w.uri.clone());
                w.last = now;
            } else if let Some(w) = st.uris.get_mut(&id) {
                w.last = now;
            }
        }
        if let Some((differs, new)) = list_changed
            && !st.lists.is_empty()
        {
            if differs {
                for l in st.lists.values() {
                    l.sink.list_changed();
                }
            }
            st.list_last = Some(new);
        }
        Ok(())
    }
}

/// Watch the ref storage with inotify: `refs/` recursively, the git directories themselves
/// (not recursively) for `HEAD` and `packed-refs`, and the reftable directories of a reftable
/// repository (every update writes a table and replaces `tables.list` there). Only events
/// that can be ref updates wake the thread (not `index`, objects or logs).
fn start_inotify(inner: &Inner, tx: Sender<Msg>) -> notify::Result<notify::RecommendedWatcher> {
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
            let _ = tx.send(Msg::Event);
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
