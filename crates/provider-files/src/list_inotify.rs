//! The recursive inotify watch behind `list_changed`: names appearing, disappearing or moving
//! anywhere under a root, and nothing else.
//!
//! notify's inotify backend always asks for `IN_OPEN`, so while a list watch is held every
//! read of a file in the tree woke its thread: about 30 % of stdio read throughput in the
//! benchmark. This watch asks only for what changes the set of names (create,
//! delete, both halves of a move, the directory itself going away). Its events are handed
//! over as notify `Event`s, so the list logic does not care which watch produced them.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask, Watches};
use mcpr_core::sync::lock;
use notify::event::{CreateKind, Flag, ModifyKind, RemoveKind, RenameMode};
use notify::{Event, EventKind};

/// What a directory is watched for. `ONLYDIR` refuses a name that became a file in between;
/// `DONT_FOLLOW` never leaves the tree through a symlink; `EXCL_UNLINK` drops events of
/// children already unlinked.
fn mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
        | WatchMask::ONLYDIR
        | WatchMask::DONT_FOLLOW
        | WatchMask::EXCL_UNLINK
}

/// A running watch; dropping it stops the thread.
pub(crate) struct ListInotify {
    stop: Arc<AtomicBool>,
    watches: Watches,
    /// The thread's map of watched directories, shared so `drop` can end the watches.
    by_wd: Arc<Mutex<HashMap<WatchDescriptor, PathBuf>>>,
    /// How often the thread has woken up with events (for tests).
    #[cfg_attr(not(test), allow(dead_code))]
    wakeups: Arc<std::sync::atomic::AtomicU64>,
}

impl Drop for ListInotify {
    fn drop(&mut self) {
        // Removing the watches makes the kernel queue IN_IGNORED for each, which wakes the
        // thread's blocking read; it then sees `stop` and ends.
        self.stop.store(true, Ordering::SeqCst);
        let wds: Vec<WatchDescriptor> = lock(&self.by_wd).drain().map(|(wd, _)| wd).collect();
        for wd in wds {
            let _ = self.watches.remove(wd);
        }
    }
}

/// The directories under watch, by descriptor.
struct Tree {
    watches: Watches,
    by_wd: Arc<Mutex<HashMap<WatchDescriptor, PathBuf>>>,
}

impl Tree {
    /// Watch `dir` and every directory under it (not through symlinks). With `found`, the
    /// names inside are reported there: in a directory that just appeared they may have been
    /// created before its watch existed.
    fn add_recursive(
        &mut self,
        dir: &Path,
        mut found: Option<&mut Vec<PathBuf>>,
    ) -> std::io::Result<()> {
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            let wd = match self.watches.add(&d, mask()) {
                Ok(wd) => wd,
                // Gone or replaced by a file since it was seen: nothing to watch.
                Err(e)
                    if d != dir
                        && matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) =>
                {
                    continue;
                }
                Err(e) => return Err(e),
            };
            lock(&self.by_wd).insert(wd, d.clone());
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in entries.flatten() {
                if let Some(found) = found.as_deref_mut() {
                    found.push(e.path());
                }
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
        }
        Ok(())
    }

    /// Stop watching `dir` and everything under it (it moved away or is gone).
    fn remove_under(&mut self, dir: &Path) {
        let mut by_wd = lock(&self.by_wd);
        let gone: Vec<WatchDescriptor> = by_wd
            .iter()
            .filter(|(_, p)| p.starts_with(dir))
            .map(|(wd, _)| wd.clone())
            .collect();
        for wd in gone {
            by_wd.remove(&wd);
            let _ = self.watches.remove(wd);
        }
    }
}

/// Watch `root` recursively and call `handler` with each change of names. Fails when the
/// tree cannot be covered (for example the inotify watch limit), so the caller can poll.
pub(crate) fn start<F>(root: &Path, mut handler: F) -> std::io::Result<ListInotify>
where
    F: FnMut(notify::Result<Event>) + Send + 'static,
{
    let mut inotify = Inotify::init()?;
    let mut tree = Tree {
        watches: inotify.watches(),
        by_wd: Arc::new(Mutex::new(HashMap::new())),
    };
    // Nothing to report for what is already there: listing reads it.
    tree.add_recursive(root, None)?;
    let stop = Arc::new(AtomicBool::new(false));
    let wakeups = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let woken = wakeups.clone();
    let handle = ListInotify {
        stop: stop.clone(),
        watches: inotify.watches(),
        by_wd: tree.by_wd.clone(),
        wakeups,
    };
    std::thread::Builder::new()
        .name("mcpr-list-inotify".into())
        .spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            while !stop.load(Ordering::SeqCst) && !lock(&tree.by_wd).is_empty() {
                let events = match inotify.read_events_blocking(&mut buf) {
                    Ok(events) => events,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        handler(Err(notify::Error::io(e)));
                        return;
                    }
                };
                woken.fetch_add(1, Ordering::Relaxed);
                let mut out = Vec::new();
                for ev in events {
                    translate(&mut tree, ev.wd, ev.mask, ev.name, &mut out);
                }
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                for ev in out {
                    handler(Ok(ev));
                }
            }
        })?;
    Ok(handle)
}

/// One inotify event as notify events (none, one, or more for a directory that appeared).
fn translate(
    tree: &mut Tree,
    wd: WatchDescriptor,
    mask: EventMask,
    name: Option<&OsStr>,
    out: &mut Vec<Event>,
) {
    if mask.contains(EventMask::Q_OVERFLOW) {
        // Events were lost: whoever listens must look again.
        out.push(Event::new(EventKind::Other).set_flag(Flag::Rescan));
        return;
    }
    if mask.contains(EventMask::IGNORED) {
        lock(&tree.by_wd).remove(&wd);
        return;
    }
    let Some(dir) = lock(&tree.by_wd).get(&wd).cloned() else {
        return;
    };
    if mask.intersects(EventMask::DELETE_SELF | EventMask::MOVE_SELF) {
        tree.remove_under(&dir);
        return;
    }
    let Some(name) = name else { return };
    let path = dir.join(name);
    let is_dir = mask.contains(EventMask::ISDIR);
    let kind = if mask.contains(EventMask::CREATE) {
        EventKind::Create(if is_dir {
            CreateKind::Folder
        } else {
            CreateKind::File
        })
    } else if mask.contains(EventMask::DELETE) {
        EventKind::Remove(if is_dir {
            RemoveKind::Folder
        } else {
            RemoveKind::File
        })
    } else if mask.contains(EventMask::MOVED_FROM) {
        if is_dir {
            tree.remove_under(&path);
        }
        EventKind::Modify(ModifyKind::Name(RenameMode::From))
    } else if mask.contains(EventMask::MOVED_TO) {
        EventKind::Modify(ModifyKind::Name(RenameMode::To))
    } else {
        return;
    };
    out.push(Event::new(kind).add_path(path.clone()));
    if is_dir && mask.intersects(EventMask::CREATE | EventMask::MOVED_TO) {
        let mut found = Vec::new();
        if let Err(e) = tree.add_recursive(&path, Some(&mut found)) {
            tracing::warn!(dir = %path.display(), error = %e,
                "cannot watch a new directory (watch limit?); its changes may be missed");
            out.push(Event::new(EventKind::Other).set_flag(Flag::Rescan));
        }
        for p in found {
            out.push(Event::new(EventKind::Create(CreateKind::Any)).add_path(p));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    fn watch(root: &Path) -> (ListInotify, mpsc::Receiver<Event>) {
        let (tx, rx) = mpsc::channel();
        let w = start(root, move |e: notify::Result<Event>| {
            let _ = tx.send(e.expect("watch error"));
        })
        .expect("start");
        (w, rx)
    }

    /// The next event naming `path`, skipping others, within a second.
    fn expect_path(rx: &mpsc::Receiver<Event>, path: &Path) -> Event {
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let ev = rx
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no event for {}", path.display()));
            if ev.paths.iter().any(|p| p == path) {
                return ev;
            }
        }
    }

    #[test]
    fn names_coming_and_going_are_reported_and_reads_are_not() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/old.txt"), "x").unwrap();
        let (w, rx) = watch(&root);

        // Reading, writing and touching existing files changes no name: the thread must not
        // even wake up (notify's watch woke on every open).
        for _ in 0..50 {
            std::fs::read(root.join("a/b/old.txt")).unwrap();
            std::fs::read_dir(root.join("a/b")).unwrap().for_each(drop);
        }
        std::fs::write(root.join("a/b/old.txt"), "changed").unwrap();
        assert!(rx.recv_timeout(Duration::from_millis(300)).is_err());
        assert_eq!(
            w.wakeups.load(Ordering::Relaxed),
            0,
            "reads and writes must not wake the list watch"
        );

        std::fs::write(root.join("a/b/new.txt"), "x").unwrap();
        let ev = expect_path(&rx, &root.join("a/b/new.txt"));
        assert!(matches!(ev.kind, EventKind::Create(_)), "{ev:?}");

        std::fs::rename(root.join("a/b/new.txt"), root.join("a/renamed.txt")).unwrap();
        expect_path(&rx, &root.join("a/b/new.txt"));
        expect_path(&rx, &root.join("a/renamed.txt"));

        std::fs::remove_file(root.join("a/renamed.txt")).unwrap();
        let ev = expect_path(&rx, &root.join("a/renamed.txt"));
        assert!(matches!(ev.kind, EventKind::Remove(_)), "{ev:?}");

        // A new directory is watched too, and so is one moved in from outside with files.
        std::fs::create_dir(root.join("c")).unwrap();
        expect_path(&rx, &root.join("c"));
        std::fs::write(root.join("c/in-new-dir.txt"), "x").unwrap();
        expect_path(&rx, &root.join("c/in-new-dir.txt"));
    }

    #[test]
    fn moved_in_trees_are_watched_and_moved_out_trees_are_dropped() {
        let base = tempfile::tempdir().unwrap();
        let base_path = base.path().canonicalize().unwrap();
        let root = base_path.join("root");
        let outside = base_path.join("outside");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(outside.join("d/e")).unwrap();
        std::fs::write(outside.join("d/e/carried.txt"), "x").unwrap();
        let (_w, rx) = watch(&root);

        std::fs::rename(outside.join("d"), root.join("d")).unwrap();
        expect_path(&rx, &root.join("d"));
        // Already inside when it moved in: reported as found.
        expect_path(&rx, &root.join("d/e/carried.txt"));
        std::fs::write(root.join("d/e/later.txt"), "x").unwrap();
        expect_path(&rx, &root.join("d/e/later.txt"));

        // Moved out again: its changes are no longer ours.
        std::fs::rename(root.join("d"), outside.join("d2")).unwrap();
        expect_path(&rx, &root.join("d"));
        std::fs::write(outside.join("d2/e/after.txt"), "x").unwrap();
        assert!(
            rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "a tree moved out of the root must not report under its old name"
        );
    }

    #[test]
    fn dropping_the_watch_ends_its_thread() {
        let t = tempfile::tempdir().unwrap();
        let (tx, rx) = mpsc::channel::<()>();
        let w = start(t.path(), move |_| {
            let _ = tx.send(());
        })
        .unwrap();
        drop(w);
        // The handler (and so its sender) is dropped when the thread ends.
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        loop {
            match rx.recv_timeout(Duration::from_millis(50)) {
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                _ if std::time::Instant::now() > deadline => panic!("watch thread still running"),
                _ => {}
            }
        }
    }
}
