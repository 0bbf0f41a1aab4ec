//! Change detection for subscribed files and for the set of files under a root.
//!
//! Per-resource: one inotify instance per mount, created on the first subscription, watching
//! only the parent directories of subscribed files (non-recursive), reference-counted and
//! removed with the last subscriber. Set changes: a recursive watch of the root, held only
//! while someone listens for `list_changed`, falling back to polling past the kernel's
//! watch limit. Both go through a debounce task, so a burst of writes is one notification.
//! A queue overflow (`Rescan`) re-checks every subscribed file against its last snapshot.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use mcpr_core::{ChangeSink, Error, Result, WatchGuard};
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher as _};
use tokio::sync::mpsc;

use crate::config::ListWatchMode;
use crate::path::RelPath;
use crate::provider::Inner;

/// What a subscribed file looked like, to tell after a rescan whether it changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Snapshot {
    len: u64,
    modified: Option<SystemTime>,
    ino: u64,
}

struct Target {
    id: u64,
    uri: String,
    rel: RelPath,
    sink: ChangeSink,
    snapshot: Option<Snapshot>,
}

/// Something to report once its debounce delay has passed.
enum Fire {
    Updated { uri: String, sink: ChangeSink },
    ListChanged { sink: ChangeSink },
}

impl Fire {
    fn key(&self) -> String {
        match self {
            Fire::Updated { uri, .. } => uri.clone(),
            // A URI never starts with a space, so this key cannot collide with one.
            Fire::ListChanged { sink } => format!(" list {}", sink.mount()),
        }
    }

    fn fire(self) {
        match self {
            Fire::Updated { uri, sink } => sink.updated(uri),
            Fire::ListChanged { sink } => sink.list_changed(),
        }
    }
}

#[derive(Default)]
struct State {
    next_id: u64,
    /// Absolute path of a subscribed file → its subscriptions.
    file_targets: HashMap<PathBuf, Vec<Target>>,
    /// Absolute path of a subscribed directory → its subscriptions.
    dir_targets: HashMap<PathBuf, Vec<Target>>,
    list_sinks: HashMap<u64, ChangeSink>,
    tx: Option<mpsc::UnboundedSender<Fire>>,
}

/// The inotify instance for subscribed files and its reference-counted directory watches.
#[derive(Default)]
struct FileWatches {
    /// Lazily created: a mount nobody subscribes to holds no inotify instance.
    watcher: Option<RecommendedWatcher>,
    /// Watched directory → number of targets that need it.
    dirs: HashMap<PathBuf, usize>,
}

/// Three locks, never nested the wrong way: notify's event threads take only `state`, and
/// nothing calls into a notify watcher (which may wait for its event thread) while holding
/// `state`, so the two cannot deadlock.
#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    files: Mutex<FileWatches>,
    /// The recursive watch for list changes, while anyone listens.
    list: Mutex<Option<Box<dyn Send>>>,
}

/// The watcher of one files mount.
#[derive(Clone)]
pub(crate) struct Watcher {
    inner: Arc<Inner>,
    shared: Arc<Shared>,
}

impl Watcher {
    pub(crate) fn new(inner: Arc<Inner>) -> Self {
        Self {
            inner,
            shared: Arc::new(Shared::default()),
        }
    }

    /// The sender into the debounce task, starting it on first use (inside the runtime).
    fn sender(&self, st: &mut State) -> mpsc::UnboundedSender<Fire> {
        if let Some(tx) = st.tx.as_ref().filter(|t| !t.is_closed()) {
            return tx.clone();
        }
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(debounce(rx, self.inner.config.debounce));
        st.tx = Some(tx.clone());
        tx
    }

    /// Watch the file or directory `rel`, reporting changes as `uri`.
    pub(crate) fn watch(&self, uri: &str, rel: RelPath, sink: ChangeSink) -> Result<WatchGuard> {
        let abs = self.abs(&rel);
        let md = self.inner.root.metadata(rel.as_path()).ok();
        // A subscription to something that is neither a file nor a directory (a FIFO, a
        // socket) would never be readable, so it is as absent as a missing file.
        if md.as_ref().is_some_and(|m| !m.is_file() && !m.is_dir()) {
            return Err(Error::not_found(uri));
        }
        let is_dir = md.as_ref().is_some_and(|m| m.is_dir());
        let watched_dir = if is_dir {
            abs.clone()
        } else {
            match abs.parent() {
                Some(p) => p.to_path_buf(),
                None => return Err(Error::not_found(uri)),
            }
        };
        {
            let mut fw = self.shared.files.lock().expect("file watch lock");
            if fw.watcher.is_none() {
                fw.watcher = Some(
                    self.new_file_watcher()
                        .map_err(|e| Error::internal(format!("cannot start file watcher: {e}")))?,
                );
            }
            if !fw.dirs.contains_key(&watched_dir) {
                let w = fw.watcher.as_mut().expect("created above");
                w.watch(&watched_dir, RecursiveMode::NonRecursive)
                    .map_err(|e| match e.kind {
                        notify::ErrorKind::PathNotFound => Error::not_found(uri),
                        _ => Error::new(
                            mcpr_core::ErrorKind::Unavailable,
                            format!("cannot watch {uri}: {e} (raise fs.inotify.max_user_watches?)"),
                        )
                        .with_uri(uri),
                    })?;
            }
            *fw.dirs.entry(watched_dir.clone()).or_insert(0) += 1;
        }
        let snapshot = self.snapshot(&rel);
        let mut st = self.shared.state.lock().expect("watch state lock");
        self.sender(&mut st);
        st.next_id += 1;
        let id = st.next_id;
        let target = Target {
            id,
            uri: uri.to_owned(),
            snapshot,
            rel,
            sink,
        };
        let map = if is_dir {
            &mut st.dir_targets
        } else {
            &mut st.file_targets
        };
        map.entry(abs.clone()).or_default().push(target);
        Ok(WatchGuard::new(TargetGuard {
            shared: Arc::downgrade(&self.shared),
            id,
            abs,
            watched_dir,
            is_dir,
        }))
    }

    /// Report changes of the set of files to `sink` until the guard drops.
    pub(crate) fn watch_list(&self, sink: ChangeSink) -> Result<WatchGuard> {
        let mut list = self.shared.list.lock().expect("list watch lock");
        if list.is_none() {
            *list = Some(self.new_list_watcher()?);
        }
        let mut st = self.shared.state.lock().expect("watch state lock");
        self.sender(&mut st);
        st.next_id += 1;
        let id = st.next_id;
        st.list_sinks.insert(id, sink);
        Ok(WatchGuard::new(ListGuard {
            shared: Arc::downgrade(&self.shared),
            id,
        }))
    }

    fn abs(&self, rel: &RelPath) -> PathBuf {
        if rel.is_root() {
            self.inner.canonical_root.clone()
        } else {
            self.inner.canonical_root.join(rel.as_path())
        }
    }

    fn snapshot(&self, rel: &RelPath) -> Option<Snapshot> {
        use cap_std::fs::MetadataExt as _;
        let md = self.inner.root.metadata(rel.as_path()).ok()?;
        Some(Snapshot {
            len: md.len(),
            modified: md.modified().ok().map(|t| t.into_std()),
            ino: md.ino(),
        })
    }

    fn new_file_watcher(&self) -> notify::Result<RecommendedWatcher> {
        let this = self.clone_weak();
        RecommendedWatcher::new(
            move |res: notify::Result<Event>| {
                let Some(this) = this.upgrade() else { return };
                match res {
                    Ok(ev) => on_file_event(&this, ev),
                    Err(e) => {
                        tracing::warn!(error = %e, "file watcher error; re-checking subscriptions")
                    }
                }
            },
            notify::Config::default(),
        )
    }

    fn new_list_watcher(&self) -> Result<Box<dyn Send>> {
        let root = self.inner.canonical_root.clone();
        let handler = {
            let shared = Arc::downgrade(&self.shared);
            let inner = Arc::downgrade(&self.inner);
            move |res: notify::Result<Event>| {
                let (Some(shared), Some(inner)) = (shared.upgrade(), inner.upgrade()) else {
                    return;
                };
                let relevant = match &res {
                    Ok(ev) => ev.need_rescan() || list_relevant(&inner, ev),
                    Err(_) => true,
                };
                if relevant {
                    let st = shared.state.lock().expect("watch state lock");
                    if let Some(tx) = &st.tx {
                        for sink in st.list_sinks.values() {
                            let _ = tx.send(Fire::ListChanged { sink: sink.clone() });
                        }
                    }
                }
            }
        };
        let interval = self.inner.config.poll_interval;
        if self.inner.config.list_watch == ListWatchMode::Poll {
            return start_poll(handler, &root, interval);
        }
        // Our own recursive inotify watch, not notify's: notify also asks for IN_OPEN, and
        // then every read in the tree would wake the watcher (see `list_inotify`).
        match crate::list_inotify::start(&root, handler.clone()) {
            Ok(w) => Ok(Box::new(w)),
            Err(e) => {
                tracing::warn!(root = %root.display(), error = %e,
                    "recursive inotify watch failed (watch limit?); polling for list changes instead");
                start_poll(handler, &root, interval)
            }
        }
    }

    fn clone_weak(&self) -> WeakWatcher {
        WeakWatcher {
            inner: Arc::downgrade(&self.inner),
            shared: Arc::downgrade(&self.shared),
        }
    }
}

/// Poll `root` recursively every `interval`: the fallback when inotify cannot cover a tree.
fn start_poll<F: notify::EventHandler>(
    handler: F,
    root: &std::path::Path,
    interval: Duration,
) -> Result<Box<dyn Send>> {
    let cfg = notify::Config::default().with_poll_interval(interval);
    let mut w = notify::PollWatcher::new(handler, cfg)
        .map_err(|e| Error::internal(format!("cannot start polling watcher: {e}")))?;
    w.watch(root, RecursiveMode::Recursive)
        .map_err(|e| Error::internal(format!("cannot poll {}: {e}", root.display())))?;
    Ok(Box::new(w))
}

struct WeakWatcher {
    inner: Weak<Inner>,
    shared: Weak<Shared>,
}

impl WeakWatcher {
    fn upgrade(&self) -> Option<Watcher> {
        Some(Watcher {
            inner: self.inner.upgrade()?,
            shared: self.shared.upgrade()?,
        })
    }
}

/// Whether a recursive-watch event changes the set of listed files: a name appeared,
/// disappeared or moved, and it is not something the mount hides anyway.
fn list_relevant(inner: &Inner, ev: &Event) -> bool {
    use notify::event::ModifyKind;
    let kind_ok = matches!(
        ev.kind,
        EventKind::Create(_)
            | EventKind::Remove(_)
            | EventKind::Modify(ModifyKind::Name(_))
            | EventKind::Any
    );
    kind_ok
        && ev.paths.iter().any(|p| {
            let Ok(rest) = p.strip_prefix(&inner.canonical_root) else {
                return false;
            };
            use std::os::unix::ffi::OsStrExt as _;
            match RelPath::from_bytes(rest.as_os_str().as_bytes()) {
                Some(rel) => {
                    !rel.is_root()
                        && !inner.rules.is_denied(&rel, false)
                        && !inner.rules.is_denied(&rel, true)
                }
                None => false,
            }
        })
}

fn on_file_event(this: &Watcher, ev: Event) {
    use notify::event::{MetadataKind, ModifyKind};
    let mut st = this.shared.state.lock().expect("watch state lock");
    let Some(tx) = st.tx.clone() else { return };
    if ev.need_rescan() {
        // The kernel dropped events: compare every subscription with its snapshot.
        let mut changed = Vec::new();
        let State {
            file_targets,
            dir_targets,
            ..
        } = &mut *st;
        for t in file_targets
            .values_mut()
            .chain(dir_targets.values_mut())
            .flatten()
        {
            let now = this.snapshot(&t.rel);
            if now != t.snapshot {
                t.snapshot = now;
                changed.push(Fire::Updated {
                    uri: t.uri.clone(),
                    sink: t.sink.clone(),
                });
            }
        }
        for f in changed {
            let _ = tx.send(f);
        }
        return;
    }
    // Opening and reading a file (our own reads included) is not a change.
    if matches!(
        ev.kind,
        EventKind::Access(_) | EventKind::Modify(ModifyKind::Metadata(MetadataKind::AccessTime))
    ) {
        return;
    }
    for path in &ev.paths {
        if let Some(targets) = st.file_targets.get(path) {
            for t in targets {
                let _ = tx.send(Fire::Updated {
                    uri: t.uri.clone(),
                    sink: t.sink.clone(),
                });
            }
        }
        if let Some(targets) = path.parent().and_then(|p| st.dir_targets.get(p)) {
            for t in targets {
                let _ = tx.send(Fire::Updated {
                    uri: t.uri.clone(),
                    sink: t.sink.clone(),
                });
            }
        }
    }
    // Keep snapshots current so a later rescan compares against the latest state.
    let paths: Vec<PathBuf> = ev.paths.clone();
    for path in paths {
        let snap_rel: Vec<RelPath> = st
            .file_targets
            .get(&path)
            .map(|ts| ts.iter().map(|t| t.rel.clone()).collect())
            .unwrap_or_default();
        if let Some(rel) = snap_rel.first() {
            let snap = this.snapshot(rel);
            if let Some(ts) = st.file_targets.get_mut(&path) {
                for t in ts {
                    t.snapshot = snap;
                }
            }
        }
    }
}

/// Releases one subscription; the directory watch goes with the last one that needs it.
struct TargetGuard {
    shared: Weak<Shared>,
    id: u64,
    abs: PathBuf,
    watched_dir: PathBuf,
    is_dir: bool,
}

impl Drop for TargetGuard {
    fn drop(&mut self) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        {
            let mut st = shared.state.lock().expect("watch state lock");
            let map = if self.is_dir {
                &mut st.dir_targets
            } else {
                &mut st.file_targets
            };
            if let Some(v) = map.get_mut(&self.abs) {
                v.retain(|t| t.id != self.id);
                if v.is_empty() {
                    map.remove(&self.abs);
                }
            }
        }
        let mut fw = shared.files.lock().expect("file watch lock");
        let last = match fw.dirs.get_mut(&self.watched_dir) {
            Some(n) => {
                *n -= 1;
                *n == 0
            }
            None => false,
        };
        if last {
            fw.dirs.remove(&self.watched_dir);
            if let Some(w) = fw.watcher.as_mut() {
                // The directory may already be gone, which removed the kernel watch too.
                let _ = w.unwatch(&self.watched_dir);
            }
        }
    }
}

/// Releases one list listener; the recursive watch goes with the last.
struct ListGuard {
    shared: Weak<Shared>,
    id: u64,
}

impl Drop for ListGuard {
    fn drop(&mut self) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        let dropped = {
            let mut list = shared.list.lock().expect("list watch lock");
            let mut st = shared.state.lock().expect("watch state lock");
            st.list_sinks.remove(&self.id);
            if st.list_sinks.is_empty() {
                list.take()
            } else {
                None
            }
        };
        // Dropped outside the locks: stopping a watcher may wait for its event thread,
        // which may be waiting for `state` in its handler.
        drop(dropped);
    }
}

/// Coalesce fires per key: the first event of a burst starts the delay, later ones within
/// it ride along, so a reader sees one notification per burst at most `delay` late.
async fn debounce(mut rx: mpsc::UnboundedReceiver<Fire>, delay: Duration) {
    use tokio::time::{Instant, sleep_until};
    let mut pending: HashMap<String, (Instant, Fire)> = HashMap::new();
    loop {
        let next = pending.values().map(|(d, _)| *d).min();
        tokio::select! {
            msg = rx.recv() => {
                let Some(fire) = msg else { break };
                if delay.is_zero() {
                    fire.fire();
                } else {
                    pending.entry(fire.key()).or_insert_with(|| (Instant::now() + delay, fire));
                }
            }
            () = async { sleep_until(next.expect("guarded")).await }, if next.is_some() => {
                let now = Instant::now();
                let due: Vec<String> = pending.iter().filter(|(_, (d, _))| *d <= now).map(|(k, _)| k.clone()).collect();
                for k in due {
                    if let Some((_, f)) = pending.remove(&k) {
                        f.fire();
                    }
                }
            }
        }
    }
    for (_, (_, f)) in pending {
        f.fire();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use mcpr_core::{ChangeBus, ChangeEvent, ChangeSink, LocalBus};
    use notify::event::Flag;

    use super::*;
    use crate::config::FilesConfig;
    use crate::provider::FilesProvider;

    /// A kernel queue overflow arrives as one `Rescan` event with no paths; only the files
    /// that really changed since their snapshot may be reported, and nothing may panic.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rescan_rechecks_snapshots() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(root.join("a.txt"), "a").unwrap();
        std::fs::write(root.join("b.txt"), "b").unwrap();
        let mut cfg = FilesConfig::new(&root);
        cfg.debounce = Duration::ZERO;
        let provider = FilesProvider::new(cfg).unwrap();
        let watcher = provider.watcher_for_tests();
        let bus = Arc::new(LocalBus::default());
        let mut rx = bus.subscribe();
        let a = RelPath::from_bytes(b"a.txt").unwrap();
        let b = RelPath::from_bytes(b"b.txt").unwrap();
        let _ga = watcher
            .watch("uri:a", a, ChangeSink::new(bus.clone(), 0))
            .unwrap();
        let _gb = watcher
            .watch("uri:b", b, ChangeSink::new(bus.clone(), 0))
            .unwrap();
        // Drop whatever the real watcher reports, then change a.txt behind its back.
        tokio::time::sleep(Duration::from_millis(100)).await;
        std::fs::write(root.join("a.txt"), "a changed, longer").unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        while rx.try_recv().is_ok() {}
        // Pretend the snapshot of a.txt is stale, as after lost events.
        {
            let mut st = watcher.shared.state.lock().unwrap();
            for t in st.file_targets.values_mut().flatten() {
                if t.uri == "uri:a" {
                    t.snapshot = None;
                }
            }
        }
        on_file_event(
            &watcher,
            Event::new(EventKind::Other).set_flag(Flag::Rescan),
        );
        let ev = tokio::time::timeout(Duration::from_secs(2), rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            ev,
            ChangeEvent::Updated {
                uri: "uri:a".into()
            }
        );
        let more = tokio::time::timeout(Duration::from_millis(300), rx.recv()).await;
        assert!(
            more.is_err(),
            "b.txt did not change and must not be reported: {more:?}"
        );
    }

    /// With `list_changed = "poll"` (or past the inotify limit) creations are still reported.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn polling_reports_list_changes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        let mut cfg = FilesConfig::new(&root);
        cfg.list_watch = ListWatchMode::Poll;
        cfg.poll_interval = Duration::from_millis(100);
        cfg.debounce = Duration::ZERO;
        let provider = FilesProvider::new(cfg).unwrap();
        let bus = Arc::new(LocalBus::default());
        let mut rx = bus.subscribe();
        let _g = provider
            .watcher_for_tests()
            .watch_list(ChangeSink::new(bus.clone(), 3))
            .unwrap();
        tokio::time::sleep(Duration::from_millis(250)).await;
        std::fs::write(root.join("sub/new.txt"), "n").unwrap();
        let ev = tokio::time::timeout(Duration::from_secs(3), rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(ev, ChangeEvent::ListChanged { mount: 3 });
    }
}
