//! Change detection for `db://` subscriptions: a subscribed table page or query is notified
//! when its result would change, and list watchers when tables or views appear or go.
//!
//! One task per mount runs while anything is watched and stops with the last watcher. It
//! wakes on the engine's change signal (SQLite: an inotify event on the database file or its
//! WAL, then `PRAGMA data_version`; PostgreSQL: a NOTIFY on the configured channel), or on the
//! poll interval (PostgreSQL without a channel, MySQL, and SQLite as a safety net), then
//! re-reads each watched URI and compares a hash of the result, so a write that does not
//! change a subscribed result notifies nobody.

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use mcpr_core::{ChangeSink, Contents, ContentsBody, ErrorKind, ResourceUri, Result, WatchGuard};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::engine::{Engine, TableRef};
use crate::provider::Inner;

/// What wakes the watcher besides the poll interval.
pub(crate) enum Trigger {
    /// Events on the database file and `PRAGMA data_version` on a connection of its own.
    Sqlite {
        path: PathBuf,
        probe: crate::sqlite::DataVersion,
    },
    /// LISTEN on a channel; no polling.
    Listen { listener: crate::pg::Listen },
    /// The poll interval only.
    Poll,
}

struct Resource {
    uri: ResourceUri,
    sink: ChangeSink,
    last: Option<u64>,
}

struct ListWatch {
    sink: ChangeSink,
    last: Option<u64>,
}

#[derive(Default)]
struct State {
    next_id: u64,
    resources: HashMap<u64, Resource>,
    lists: HashMap<u64, ListWatch>,
    task: Option<JoinHandle<()>>,
}

/// The watched resources and lists of one mount.
pub(crate) struct Watches {
    state: Mutex<State>,
    trigger: Arc<Mutex<Trigger>>,
    poll: Duration,
}

/// Removes its entry when the server drops the watch; the last one stops the task.
struct Unwatch {
    watches: Weak<Watches>,
    id: u64,
}

impl Drop for Unwatch {
    fn drop(&mut self) {
        if let Some(w) = self.watches.upgrade()
            && let Ok(mut st) = w.state.lock()
        {
            st.resources.remove(&self.id);
            st.lists.remove(&self.id);
            if st.resources.is_empty()
                && st.lists.is_empty()
                && let Some(task) = st.task.take()
            {
                task.abort();
            }
        }
    }
}

/// A hash of a read result; `None` for transient failures (database down, timeout), which
/// are not a change of the resource.
pub(crate) fn fingerprint(r: &Result<Contents>) -> Option<u64> {
    let mut h = DefaultHasher::new();
    match r {
        Ok(c) => match &c.body {
            ContentsBody::Text(t) => t.hash(&mut h),
            ContentsBody::Blob(b) => b.hash(&mut h),
        },
        Err(e) if matches!(e.kind, ErrorKind::Unavailable | ErrorKind::Timeout) => return None,
        Err(e) => {
            format!("{:?}", e.kind).hash(&mut h);
            e.message.hash(&mut h);
        }
    }
    Some(h.finish())
}

/// A hash of the set of tables and views; `None` when the database cannot say.
pub(crate) async fn catalog(engine: &dyn Engine) -> Option<u64> {
    let mut h = DefaultHasher::new();
    let mut after: Option<TableRef> = None;
    loop {
        let block = engine.objects(after.clone(), 1000).await.ok()?;
        for o in &block {
            o.table.hash(&mut h);
            o.kind.as_str().hash(&mut h);
        }
        if block.len() < 1000 {
            return Some(h.finish());
        }
        after = block.last().map(|o| o.table.clone());
    }
}

impl Watches {
    pub(crate) fn new(trigger: Trigger, poll: Duration) -> Self {
        Self {
            state: Mutex::new(State::default()),
            trigger: Arc::new(Mutex::new(trigger)),
            poll,
        }
    }

    /// Whether the watcher task runs (tests: it must stop with the last watch).
    #[cfg(test)]
    pub(crate) fn running(&self) -> bool {
        self.state
            .lock()
            .map(|st| st.task.as_ref().is_some_and(|t| !t.is_finished()))
            .unwrap_or(false)
    }

    pub(crate) fn add_resource(
        self: &Arc<Self>,
        inner: &Arc<Inner>,
        uri: ResourceUri,
        sink: ChangeSink,
        last: Option<u64>,
    ) -> WatchGuard {
        self.add(inner, |st, id| {
            st.resources.insert(id, Resource { uri, sink, last });
        })
    }

    pub(crate) fn add_list(
        self: &Arc<Self>,
        inner: &Arc<Inner>,
        sink: ChangeSink,
        last: Option<u64>,
    ) -> WatchGuard {
        self.add(inner, |st, id| {
            st.lists.insert(id, ListWatch { sink, last });
        })
    }

    fn add(self: &Arc<Self>, inner: &Arc<Inner>, put: impl FnOnce(&mut State, u64)) -> WatchGuard {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let id = st.next_id;
        st.next_id += 1;
        put(&mut st, id);
        if st.task.as_ref().is_none_or(JoinHandle::is_finished) {
            st.task = Some(tokio::spawn(run(
                Arc::downgrade(self),
                Arc::downgrade(inner),
                self.trigger.clone(),
                self.poll,
            )));
        }
        WatchGuard::new(Unwatch {
            watches: Arc::downgrade(self),
            id,
        })
    }
}

/// The watcher task: wait for a signal, then re-check everything watched.
async fn run(
    watches: Weak<Watches>,
    inner: Weak<Inner>,
    trigger: Arc<Mutex<Trigger>>,
    poll: Duration,
) {
    // Capacity 1: a burst of events is one re-check.
    let (tx, mut rx) = mpsc::channel::<()>(1);
    let mut polling = true;
    let mut _fs_watcher = None;
    let mut listen_task: Option<JoinHandle<()>> = None;
    let mut version: Option<i64> = None; // SQLite's data_version at the last check
    {
        let t = trigger.lock().unwrap_or_else(|p| p.into_inner());
        match &*t {
            Trigger::Sqlite { path, .. } => {
                // `version` stays unknown, so the first wake-up re-checks everything: a commit
                // between the subscriber's first read and this point is not lost.
                _fs_watcher = file_events(path, tx.clone());
            }
            Trigger::Listen { listener } => {
                polling = false;
                listen_task = Some(tokio::spawn(listener.clone().run(tx.clone())));
            }
            Trigger::Poll => {}
        }
    }
    struct AbortOnDrop(Option<JoinHandle<()>>);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            if let Some(t) = self.0.take() {
                t.abort();
            }
        }
    }
    let _listen = AbortOnDrop(listen_task);
    loop {
        tokio::select! {
            _ = rx.recv() => {}
            _ = tokio::time::sleep(poll), if polling => {}
        }
        // SQLite: nothing committed since the last check means nothing to re-read.
        {
            let t = trigger.lock().unwrap_or_else(|p| p.into_inner());
            if let Trigger::Sqlite { probe, .. } = &*t {
                let now = probe.get().ok();
                if now.is_some() && now == version {
                    continue;
                }
                version = now;
            }
        }
        let (Some(w), Some(inner)) = (watches.upgrade(), inner.upgrade()) else {
            return;
        };
        check(&w, &inner).await;
    }
}

/// Re-read every watched URI and the catalog; notify what changed.
async fn check(w: &Arc<Watches>, inner: &Arc<Inner>) {
    let (resources, lists) = {
        let st = w.state.lock().unwrap_or_else(|p| p.into_inner());
        (
            st.resources
                .iter()
                .map(|(id, r)| (*id, r.uri.clone(), r.last))
                .collect::<Vec<_>>(),
            !st.lists.is_empty(),
        )
    };
    // The same URI watched twice (by two mounts of the registry) is read once.
    let mut seen: HashMap<String, Option<u64>> = HashMap::new();
    for (id, uri, last) in resources {
        let fp = match seen.get(uri.as_str()) {
            Some(fp) => *fp,
            None => {
                let fp = fingerprint(&inner.read(&uri, u64::MAX).await);
                seen.insert(uri.as_str().to_owned(), fp);
                fp
            }
        };
        let Some(fp) = fp else { continue };
        if Some(fp) != last {
            let mut st = w.state.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(r) = st.resources.get_mut(&id) {
                r.last = Some(fp);
                // A first successful read after a failure at subscribe is a change too.
                r.sink.updated(uri.as_str());
            }
        }
    }
    if lists && let Some(fp) = catalog(inner.engine()).await {
        let st = &mut *w.state.lock().unwrap_or_else(|p| p.into_inner());
        for l in st.lists.values_mut() {
            // From unknown (the database was down when the watch began) to known is a change
            // too: a list taken meanwhile had no tables.
            if l.last != Some(fp) {
                l.sink.list_changed();
                l.last = Some(fp);
            }
        }
    }
}

/// inotify on the directory of the database, filtered to the database file and its WAL and
/// journal (SQLite replaces and truncates those, so the directory is watched, not the files).
fn file_events(path: &std::path::Path, tx: mpsc::Sender<()>) -> Option<notify::RecommendedWatcher> {
    use notify::Watcher as _;
    let dir = path.parent()?.to_path_buf();
    let dir = if dir.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        dir
    };
    let name = path.file_name()?.to_string_lossy().into_owned();
    let wanted = [
        name.clone(),
        format!("{name}-wal"),
        format!("{name}-journal"),
    ];
    let mut watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
        let Ok(ev) = ev else { return };
        if ev.kind.is_access() {
            return;
        }
        let hit = ev.paths.iter().any(|p| {
            p.file_name()
                .is_some_and(|f| wanted.iter().any(|w| f.to_string_lossy() == *w))
        });
        if hit {
            let _ = tx.try_send(());
        }
    })
    .ok()?;
    match watcher.watch(&dir, notify::RecursiveMode::NonRecursive) {
        Ok(()) => Some(watcher),
        Err(e) => {
            tracing::warn!(
                "cannot watch {} for changes ({e}); polling only",
                dir.display()
            );
            None
        }
    }
}
