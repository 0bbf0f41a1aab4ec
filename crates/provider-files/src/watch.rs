//! Change detection for subscribed files and for the set of files under a root.
//!
//! Per-resource: one inotify instance per mount, created on the first subscription, watching
//! only the parent directories of subscribed files (non-recursive), reference-counted and
//! removed with the last subscriber. Set changes: a recursive watch of the root, held only
//! while someone listens for `list_changed`, falling back to polling past the kernel's
//! watch limit. Both go through a debounce task, so a burst of writes is one notification.
//! A queue overflow (`Rescan`) re-checks every subscribed file against its last snapshot.
//!
//! Releasing a subscription is O(1) (targets are keyed by id, never searched), and the
//! kernel watch of a directory is removed on the blocking pool, never on an async worker:
//! a client dropping a thousand subscriptions of one file must not stall the runtime.

use mcpr_core::sync::lock;
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
    uri: String,
    rel: RelPath,
    sink: ChangeSink,
    snapshot: Option<Snapshot>,
}

/// Something to report once its debounce delay has passed, to the watch `id` (a target or
/// a list watch).
enum Fire {
    Updated {
        id: u64,
        uri: String,
        sink: ChangeSink,
    },
    ListChanged {
        id: u64,
        sink: ChangeSink,
    },
}

impl Fire {
    /// Fires coalesce per watch, not per URI: two watches of one URI report to different
    /// sinks (a cluster replica's own watch beside the cluster watcher's, while it rejoins),
    /// and each must hear every burst.
    fn key(&self) -> u64 {
        match self {
            Fire::Updated { id, .. } | Fire::ListChanged { id, .. } => *id,
        }
    }

    fn fire(self) {
        match self {
            Fire::Updated { uri, sink, .. } => sink.updated(uri),
            Fire::ListChanged { sink, .. } => sink.list_changed(),
        }
    }
}

#[derive(Default)]
struct State {
    next_id: u64,
    /// Absolute path of a subscribed file → its subscriptions by id. Keyed by id so that
    /// releasing one of many subscriptions of a file (`?head=1`, `?head=2`, ...) is a hash
    /// removal, not a scan: 100k releases of one file were quadratic with a list.
    file_targets: HashMap<PathBuf, HashMap<u64, Target>>,
    /// Absolute path of a subscribed directory → its subscriptions by id.
    dir_targets: HashMap<PathBuf, HashMap<u64, Target>>,
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
            let mut fw = lock(&self.shared.files);
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
        let mut st = lock(&self.shared.state);
        self.sender(&mut st);
        st.next_id += 1;
        let id = st.next_id;
        let target = Target {
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
        map.entry(abs.clone()).or_default().insert(id, target);
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
        let mut list = lock(&self.shared.list);
        if list.is_none() {
            *list = Some(self.new_list_watcher()?);
        }
        let mut st = lock(&self.shared.state);
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
                    let st = lock(&shared.state);
                    if let Some(tx) = &st.tx {
                        for (id, sink) in &st.list_sinks {
                            let _ = tx.send(Fire::ListChanged {
                                id: *id,
                                sink: sink.clone(),
                            });
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
    let mut st = lock(&this.shared.state);
    let Some(tx) = st.tx.clone() else { return };
    if ev.need_rescan() {
        // The kernel dropped events: compare every subscription with its snapshot.
        let mut changed = Vec::new();
        let State {
            file_targets,
            dir_targets,
            ..
        } = &mut *st;
        for (id, t) in file_targets
            .values_mut()
            .chain(dir_targets.values_mut())
            .flat_map(HashMap::iter_mut)
        {
            let now = this.snapshot(&t.rel);
            if now != t.snapshot {
                t.snapshot = now;
                changed.push(Fire::Updated {
                    id: *id,
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
            for (id, t) in targets {
                let _ = tx.send(Fire::Updated {
                    id: *id,
                    uri: t.uri.clone(),
                    sink: t.sink.clone(),
                });
            }
        }
        // A directory's subscribers hear only of entries its read shows: a denied or hidden
        // file changing must not be observable through its directory.
        if let Some(targets) = path.parent().and_then(|p| st.dir_targets.get(p))
            && visible_entry(&this.inner, path)
        {
            for (id, t) in targets {
                let _ = tx.send(Fire::Updated {
                    id: *id,
                    uri: t.uri.clone(),
                    sink: t.sink.clone(),
                });
            }
        }
    }
    // Keep snapshots current so a later rescan compares against the latest state. All the
    // targets of a path share one real path, so one stat serves them all.
    for path in &ev.paths {
        let Some(ts) = st.file_targets.get_mut(path) else {
            continue;
        };
        let Some(rel) = ts.values().next().map(|t| t.rel.clone()) else {
            continue;
        };
        let snap = this.snapshot(&rel);
        for t in ts.values_mut() {
            t.snapshot = snap;
        }
    }
}

/// Whether the entry at absolute `path` (a child of a subscribed directory) is one the
/// directory's read shows: not denied, not hidden. Its type decides rules such as `.ssh/`
/// (directories only); an entry already gone is taken as visible unless it would be denied
/// either as a file or as a directory.
fn visible_entry(inner: &Inner, path: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt as _;
    let Ok(rest) = path.strip_prefix(&inner.canonical_root) else {
        return false;
    };
    let Some(rel) = RelPath::from_bytes(rest.as_os_str().as_bytes()) else {
        return false;
    };
    if rel.is_root() {
        return true;
    }
    match inner.root.symlink_metadata(rel.as_path()) {
        Ok(md) => !inner.rules.is_denied(&rel, md.is_dir()),
        Err(_) => !(inner.rules.is_denied(&rel, false) && inner.rules.is_denied(&rel, true)),
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
            let mut st = lock(&shared.state);
            let map = if self.is_dir {
                &mut st.dir_targets
            } else {
                &mut st.file_targets
            };
            if let Some(targets) = map.get_mut(&self.abs) {
                targets.remove(&self.id);
                if targets.is_empty() {
                    map.remove(&self.abs);
                }
            }
        }
        let last = {
            let mut fw = lock(&shared.files);
            match fw.dirs.get_mut(&self.watched_dir) {
                Some(n) if *n > 1 => {
                    *n -= 1;
                    false
                }
                Some(_) => {
                    fw.dirs.remove(&self.watched_dir);
                    true
                }
                None => false,
            }
        };
        if !last {
            return;
        }
        // Removing the kernel watch is a round trip to notify's event thread, which may be
        // busy delivering events: on the blocking pool when there is a runtime (a guard is
        // usually dropped on an async worker), inline otherwise.
        let dir = std::mem::take(&mut self.watched_dir);
        let unwatch = move || unwatch_if_unused(&shared, &dir);
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(unwatch)),
            Err(_) => unwatch(),
        }
    }
}

/// Remove the kernel watch of `dir` unless a subscription needs it again: one may have
/// arrived between the release that scheduled this and now, and re-added the watch (the
/// same kernel watch), which must then stay. Both run under the `files` lock, so they cannot
/// interleave.
fn unwatch_if_unused(shared: &Shared, dir: &std::path::Path) {
    let mut fw = lock(&shared.files);
    if fw.dirs.contains_key(dir) {
        return;
    }
    if let Some(w) = fw.watcher.as_mut() {
        // The directory may already be gone, which removed the kernel watch too.
        let _ = w.unwatch(dir);
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
            let mut list = lock(&shared.list);
            let mut st = lock(&shared.state);
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
    let mut pending: HashMap<u64, (Instant, Fire)> = HashMap::new();
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
                let due: Vec<u64> = pending.iter().filter(|(_, (d, _))| *d <= now).map(|(k, _)| *k).collect();
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
            .watch("uri:a", a, ChangeSink::new(bus.clone(), "m0"))
            .unwrap();
        let _gb = watcher
            .watch("uri:b", b, ChangeSink::new(bus.clone(), "m0"))
            .unwrap();
        // Drop whatever the real watcher reports, then change a.txt behind its back.
        tokio::time::sleep(Duration::from_millis(100)).await;
        std::fs::write(root.join("a.txt"), "a changed, longer").unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        while rx.try_recv().is_ok() {}
        // Pretend the snapshot of a.txt is stale, as after lost events.
        {
            let mut st = watcher.shared.state.lock().unwrap();
            for t in st.file_targets.values_mut().flat_map(HashMap::values_mut) {
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

    /// Two watches of one file reporting to different buses (a cluster replica's own watch
    /// beside the cluster watcher's while it rejoins) each hear a debounced change, and so
    /// do two list watches: coalescing per URI gave the burst to only one of them, and the
    /// other replicas never heard of the change.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_watches_of_one_uri_on_two_buses_both_hear_a_change() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(root.join("a.txt"), "a").unwrap();
        let mut cfg = FilesConfig::new(&root);
        cfg.debounce = Duration::from_millis(50);
        let provider = FilesProvider::new(cfg).unwrap();
        let watcher = provider.watcher_for_tests();
        let buses = [Arc::new(LocalBus::default()), Arc::new(LocalBus::default())];
        let mut rxs = buses.each_ref().map(|b| b.subscribe());
        let a = RelPath::from_bytes(b"a.txt").unwrap();
        let _guards: Vec<_> = buses
            .iter()
            .flat_map(|b| {
                [
                    watcher
                        .watch("uri:a", a.clone(), ChangeSink::new(b.clone(), "m0"))
                        .unwrap(),
                    watcher
                        .watch_list(ChangeSink::new(b.clone(), "m0"))
                        .unwrap(),
                ]
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(100)).await;
        std::fs::write(root.join("b.txt"), "new").unwrap();
        std::fs::write(root.join("a.txt"), "a changed").unwrap();
        for rx in &mut rxs {
            let mut heard = Vec::new();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
            while heard.len() < 2 {
                match tokio::time::timeout_at(deadline, rx.recv()).await {
                    Ok(Ok(ev)) if !heard.contains(&ev) => heard.push(ev),
                    Ok(Ok(_)) => {}
                    _ => break,
                }
            }
            assert!(
                heard.contains(&ChangeEvent::Updated {
                    uri: "uri:a".into()
                }) && heard.contains(&ChangeEvent::ListChanged { mount: "m0".into() }),
                "each bus hears the update and the list change: {heard:?}"
            );
        }
    }

    /// Kernel inotify watches this process holds on the directory with inode `ino`, read
    /// from `/proc/self/fdinfo` of every inotify descriptor.
    fn kernel_watches_on(ino: u64) -> usize {
        let want = format!(" ino:{ino:x} ");
        let mut n = 0;
        for fd in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
            let is_inotify =
                std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == "anon_inode:inotify");
            if !is_inotify {
                continue;
            }
            let info = std::fs::read_to_string(format!(
                "/proc/self/fdinfo/{}",
                fd.file_name().to_string_lossy()
            ))
            .unwrap_or_default();
            n += info
                .lines()
                .filter(|l| l.starts_with("inotify wd:") && l.contains(&want))
                .count();
        }
        n
    }

    /// Releasing many subscriptions of one file was quadratic (a
    /// `Vec::retain` per release under the state lock): 100k releases of one file took
    /// minutes and froze the runtime. Each release is now a hash removal, so all of them
    /// take well under a second; the bound is generous (quadratic costs minutes).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn releasing_many_subscriptions_of_one_file_is_linear() {
        const N: usize = 100_000;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(root.join("a.log"), "a\n").unwrap();
        let provider = FilesProvider::new(FilesConfig::new(&root)).unwrap();
        let watcher = provider.watcher_for_tests();
        let bus = Arc::new(LocalBus::default());
        let rel = RelPath::from_bytes(b"a.log").unwrap();
        let guards: Vec<_> = (0..N)
            .map(|i| {
                watcher
                    .watch(
                        &format!("file:///a.log?head={i}"),
                        rel.clone(),
                        ChangeSink::new(bus.clone(), "m0"),
                    )
                    .unwrap()
            })
            .collect();
        {
            let st = watcher.shared.state.lock().unwrap();
            assert_eq!(st.file_targets.values().map(HashMap::len).sum::<usize>(), N);
        }
        let started = std::time::Instant::now();
        // Released in the order taken: with a list, each release scanned and shifted all
        // the later ones.
        drop(guards);
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(5),
            "releasing {N} subscriptions of one file took {took:?}"
        );
        let st = watcher.shared.state.lock().unwrap();
        assert!(st.file_targets.is_empty());
        assert!(watcher.shared.files.lock().unwrap().dirs.is_empty());
    }

    /// The last release removes the kernel watch on the blocking pool;
    /// a subscription arriving meanwhile keeps it (and keeps getting events), and the watch
    /// is gone once nobody needs it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn kernel_watch_released_off_the_runtime_survives_a_quick_resubscribe() {
        use std::os::unix::fs::MetadataExt as _;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("d")).unwrap();
        std::fs::write(root.join("d/a.txt"), "a").unwrap();
        let ino = std::fs::metadata(root.join("d")).unwrap().ino();
        let mut cfg = FilesConfig::new(&root);
        cfg.debounce = Duration::ZERO;
        let provider = FilesProvider::new(cfg).unwrap();
        let watcher = provider.watcher_for_tests();
        let bus = Arc::new(LocalBus::default());
        let mut rx = bus.subscribe();
        let rel = RelPath::from_bytes(b"d/a.txt").unwrap();
        let sink = || ChangeSink::new(bus.clone(), "m0");
        let wait_for = |want: usize| async move {
            for _ in 0..200 {
                if kernel_watches_on(ino) == want {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!(
                "kernel watches on d: {} (want {want})",
                kernel_watches_on(ino)
            );
        };
        for round in 0..20 {
            let g = watcher.watch("uri:a", rel.clone(), sink()).unwrap();
            assert_eq!(kernel_watches_on(ino), 1, "round {round}");
            drop(g);
            // Subscribe again at once, racing the scheduled unwatch.
            let g = watcher.watch("uri:a", rel.clone(), sink()).unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert_eq!(kernel_watches_on(ino), 1, "round {round}: watch lost");
            while rx.try_recv().is_ok() {}
            std::fs::write(root.join("d/a.txt"), format!("round {round}")).unwrap();
            let ev = tokio::time::timeout(Duration::from_secs(3), rx.recv())
                .await
                .unwrap_or_else(|_| panic!("round {round}: no event after resubscribing"))
                .unwrap();
            assert_eq!(
                ev,
                ChangeEvent::Updated {
                    uri: "uri:a".into()
                }
            );
            drop(g);
            wait_for(0).await;
        }
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
            .watch_list(ChangeSink::new(bus.clone(), "m3"))
            .unwrap();
        tokio::time::sleep(Duration::from_millis(250)).await;
        std::fs::write(root.join("sub/new.txt"), "n").unwrap();
        let ev = tokio::time::timeout(Duration::from_secs(3), rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(ev, ChangeEvent::ListChanged { mount: "m3".into() });
    }
}
