//! Change detection for `db://` subscriptions: a subscribed table page or query is notified
//! when its result would change, and list watchers when tables or views appear or go.
//!
//! The SQL side of core's poll-and-compare watcher ([`mcpr_core::poll`]): the core
//! [`Poller`] runs while anything is watched and stops with the last watcher; this module
//! says what wakes it (SQLite: an inotify event on the database file or its WAL, then
//! `PRAGMA data_version` decides whether anything was committed; PostgreSQL: a NOTIFY on the
//! configured channel, with no polling), and how to fingerprint a watched URI: a hash of its
//! result, so a write that does not change a subscribed result notifies nobody. Without a
//! change signal (PostgreSQL without a channel, MySQL) and as SQLite's safety net, the poll
//! interval drives the checks. A watched URI's last fingerprint is its change token
//! ([`Watches::token`]): no query of its own.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use mcpr_core::poll::{Cause, PollConfig, PollSource, Poller, Round, Waker, Watched, token_digest};
use mcpr_core::{
    ChangeSink, Contents, ContentsBody, Error, ErrorKind, ResourceUri, Result, WatchGuard,
};
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

/// The watched resources and lists of one mount.
pub(crate) struct Watches {
    /// The poller holds the source weakly; this keeps it as long as the mount lives.
    _source: Arc<SqlSource>,
    poller: Poller<SqlSource>,
}

/// The mount's database as a [`PollSource`].
struct SqlSource {
    /// Weak: the mount owns its watches, not the other way round.
    inner: Weak<Inner>,
    /// Behind a mutex because a SQLite connection may be used from one thread at a time.
    trigger: Mutex<Trigger>,
    /// SQLite's `data_version` at the last round; `None` until the first one.
    version: Mutex<Option<i64>>,
}

/// A hash of a read result. Transient failures (database down, timeout) are errors: they are
/// not a change of the resource, and the check is retried.
pub(crate) fn fingerprint(r: &Result<Contents>) -> Result<u64> {
    let mut h = DefaultHasher::new();
    match r {
        Ok(c) => match &c.body {
            ContentsBody::Text(t) => t.hash(&mut h),
            ContentsBody::Blob(b) => b.hash(&mut h),
        },
        Err(e) if matches!(e.kind, ErrorKind::Unavailable | ErrorKind::Timeout) => {
            return Err(e.clone());
        }
        Err(e) => {
            format!("{:?}", e.kind).hash(&mut h);
            e.message.hash(&mut h);
        }
    }
    Ok(h.finish())
}

/// A hash of the set of tables and views; an error when the database cannot say.
pub(crate) async fn catalog(engine: &dyn Engine) -> Result<u64> {
    let mut h = DefaultHasher::new();
    let mut after: Option<TableRef> = None;
    loop {
        let block = engine.objects(after.clone(), 1000).await?;
        for o in &block {
            o.table.hash(&mut h);
            o.kind.as_str().hash(&mut h);
        }
        if block.len() < 1000 {
            return Ok(h.finish());
        }
        after = block.last().map(|o| o.table.clone());
    }
}

impl Watches {
    /// The watches of the mount `inner` (weak: called while the mount is being built).
    pub(crate) fn new(label: &str, inner: Weak<Inner>, trigger: Trigger, poll: Duration) -> Self {
        // With LISTEN, notifications are the change signal and nothing polls. Otherwise a
        // failed check is retried at the poll interval, as it always was.
        let config = match trigger {
            Trigger::Listen { .. } => PollConfig::on_wake_only(),
            Trigger::Sqlite { .. } | Trigger::Poll => {
                PollConfig::every(poll).with_retry(poll, poll)
            }
        };
        let source = Arc::new(SqlSource {
            inner,
            trigger: Mutex::new(trigger),
            version: Mutex::new(None),
        });
        let poller = Poller::new(format!("db://{label}"), Arc::downgrade(&source), config);
        Self {
            _source: source,
            poller,
        }
    }

    /// Whether the watcher task runs (tests: it must stop with the last watch).
    #[cfg(test)]
    pub(crate) fn running(&self) -> bool {
        self.poller.is_running()
    }

    /// Watch `uri`; `first` is the read made when the watch was asked for.
    pub(crate) fn add_resource(
        &self,
        uri: ResourceUri,
        sink: ChangeSink,
        first: &Result<Contents>,
    ) -> WatchGuard {
        self.poller
            .watch(Watched::Resource(uri), sink, fingerprint(first).ok())
    }

    /// The change token of `uri` from its poll: a digest of the hash of the result its last
    /// check read (bounded as every read is, by the mount's `max_rows`, `max_bytes` and
    /// statement timeout). No query of its own: `None` while nobody subscribes to `uri`
    /// (a token per caller would cost a query each) or while its checks fail. The hash is
    /// std's SipHash with fixed keys, the same in every process of one build; replicas built
    /// by different Rust releases may disagree, which costs a repeated notice, never a lost
    /// one.
    pub(crate) fn token(&self, uri: &ResourceUri) -> Option<String> {
        let hash = self.poller.last_seen(&Watched::Resource(uri.clone()))?;
        Some(token_digest(&[b"sql result", &hash.to_be_bytes()]))
    }

    /// Watch the list of tables and views; `first` is the catalog when the watch was asked
    /// for (unknown when the database was down: then its first answer is a change, as a list
    /// taken meanwhile had no tables).
    pub(crate) fn add_list(&self, sink: ChangeSink, first: Option<u64>) -> WatchGuard {
        self.poller.watch(Watched::List, sink, first)
    }
}

#[async_trait]
impl PollSource for SqlSource {
    type Fingerprint = u64;

    async fn check(&self, key: &Watched, _last: Option<&u64>) -> Result<u64> {
        let inner = self
            .inner
            .upgrade()
            .ok_or_else(|| Error::internal("the SQL mount is gone"))?;
        match key {
            Watched::Resource(uri) => fingerprint(&inner.read(uri, u64::MAX).await),
            Watched::List => catalog(inner.engine()).await,
        }
    }

    /// SQLite: nothing committed since the last round means nothing to re-read, and anything
    /// committed means every watched URI is re-read.
    async fn round(&self, _cause: Cause) -> Round {
        let t = mcpr_core::sync::lock(&self.trigger);
        let Trigger::Sqlite { probe, .. } = &*t else {
            return Round::Scheduled;
        };
        let now = probe.get().ok();
        let mut version = mcpr_core::sync::lock(&self.version);
        if now.is_some() && now == *version {
            return Round::Skip;
        }
        *version = now;
        Round::All
    }

    fn start(&self, waker: Waker) -> Box<dyn Send> {
        let t = mcpr_core::sync::lock(&self.trigger);
        match &*t {
            Trigger::Sqlite { path, .. } => {
                // The version is unknown again, so the first round re-checks everything: a
                // commit between the subscriber's first read and this point is not lost.
                *mcpr_core::sync::lock(&self.version) = None;
                Box::new(file_events(path, waker))
            }
            Trigger::Listen { listener } => {
                // `Listen` signals on a channel of capacity 1 (a burst is one round); a
                // second task passes each signal on as a wake-up.
                let (tx, mut rx) = mpsc::channel::<()>(1);
                let listen = tokio::spawn(listener.clone().run(tx));
                let forward = tokio::spawn(async move {
                    while rx.recv().await.is_some() {
                        waker.wake();
                    }
                });
                Box::new((AbortOnDrop(listen), AbortOnDrop(forward)))
            }
            Trigger::Poll => Box::new(()),
        }
    }
}

/// Stops a task when its holder (a watcher, a provider) is dropped.
pub(crate) struct AbortOnDrop(pub(crate) JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// inotify on the directory of the database, filtered to the database file and its WAL and
/// journal (SQLite replaces and truncates those, so the directory is watched, not the files).
fn file_events(path: &std::path::Path, waker: Waker) -> Option<notify::RecommendedWatcher> {
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
            waker.wake();
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
