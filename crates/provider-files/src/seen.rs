//! The identities of small regular files the direct read path has just read, so the next
//! read of the same path can skip the `statx` of the path (issue #32).
//!
//! The direct read checks a file twice: a `statx` of the path before the open (is it a
//! regular file, how big, which inode with which times) and a `statx` of the descriptor after
//! the read (the same file, unchanged). The first one is a whole path lookup, about a tenth
//! of a small read's CPU. For a path read before, the identity kept from then stands in for
//! it: when the descriptor's identity after the read equals the kept one, the file opened is
//! the one seen then and nothing changed it since, the read included, which is what the
//! fresh `statx` proved. When it differs, the read is not used (the general path reads the
//! file again) and the new identity replaces the old.
//!
//! What is given up: a path that was a regular file when it was last read and has since been
//! replaced by something else is opened (read-only, non-blocking, no controlling terminal)
//! before the descriptor shows what it is, and then closed. For a directory that is
//! harmless. For a FIFO nothing is read (`pread` fails on one), but the open itself releases
//! a writer waiting in its own `open`, which may then meet a closed pipe. For a device node
//! the open itself may act on the device (a serial line, a watchdog, a tape). It takes a
//! kept path replaced after its last read: by `mkfifo`, or by renaming a FIFO or a device
//! node into its place. A path that is a FIFO, a socket or a device when it is first read
//! is never opened, and the `statx`-first order had the same exposure in the moment between
//! its two calls.
//!
//! Bounded: at most [`MAX_ENTRIES`] paths of at most [`MAX_KEY`] bytes; when full, the map is
//! emptied and refills from the reads that follow (a bounded size with no per-entry
//! bookkeeping; a working set larger than that only pays the `statx` again).

use std::collections::HashMap;
use std::sync::Mutex;

/// Paths kept at most.
pub(crate) const MAX_ENTRIES: usize = 4096;
/// Longer paths are not kept, so the map holds at most about 1 MiB of keys.
pub(crate) const MAX_KEY: usize = 256;

/// What a `statx` says of a file that `read_direct` compares before and after a read: device,
/// inode, type and mode, size, and modification and status-change times to the nanosecond.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Identity {
    dev: (u32, u32),
    ino: u64,
    mode: u16,
    pub(crate) size: u64,
    mtime: (i64, u32),
    ctime: (i64, u32),
}

impl Identity {
    pub(crate) fn of(st: &rustix::fs::Statx) -> Self {
        Self {
            dev: (st.stx_dev_major, st.stx_dev_minor),
            ino: st.stx_ino,
            mode: st.stx_mode,
            size: st.stx_size,
            mtime: (st.stx_mtime.tv_sec, st.stx_mtime.tv_nsec),
            ctime: (st.stx_ctime.tv_sec, st.stx_ctime.tv_nsec),
        }
    }
}

/// The kept identities, by path relative to the mount root.
#[derive(Default)]
pub(crate) struct Seen(Mutex<HashMap<Box<[u8]>, Identity>>);

impl Seen {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Box<[u8]>, Identity>> {
        // A panic while holding it leaves a map of plain values: still usable.
        mcpr_core::sync::lock(&self.0)
    }

    /// The identity last seen at `path`, if any.
    pub(crate) fn get(&self, path: &[u8]) -> Option<Identity> {
        self.map().get(path).copied()
    }

    /// Keep `id` as what `path` was last seen as.
    pub(crate) fn put(&self, path: &[u8], id: Identity) {
        if path.len() > MAX_KEY {
            return;
        }
        let mut map = self.map();
        if let Some(kept) = map.get_mut(path) {
            *kept = id;
            return;
        }
        if map.len() >= MAX_ENTRIES {
            map.clear();
        }
        map.insert(path.into(), id);
    }

    /// Forget `path` (it is no longer a small regular file).
    pub(crate) fn forget(&self, path: &[u8]) {
        self.map().remove(path);
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(ino: u64) -> Identity {
        Identity {
            dev: (8, 1),
            ino,
            mode: 0o100644,
            size: 10,
            mtime: (1, 2),
            ctime: (3, 4),
        }
    }

    #[test]
    fn keeps_replaces_forgets_and_stays_bounded() {
        let seen = Seen::default();
        seen.put(b"a.txt", id(1));
        assert_eq!(seen.get(b"a.txt"), Some(id(1)));
        seen.put(b"a.txt", id(2));
        assert_eq!(seen.get(b"a.txt"), Some(id(2)));
        seen.forget(b"a.txt");
        assert_eq!(seen.get(b"a.txt"), None);
        seen.put(&[b'x'; MAX_KEY + 1], id(3));
        assert_eq!(seen.len(), 0, "an over-long path is not kept");
        for i in 0..MAX_ENTRIES * 2 + 7 {
            seen.put(format!("f{i}").as_bytes(), id(i as u64));
            assert!(seen.len() <= MAX_ENTRIES);
        }
        assert_eq!(
            seen.get(format!("f{}", MAX_ENTRIES * 2 + 6).as_bytes())
                .map(|i| i.ino),
            Some((MAX_ENTRIES * 2 + 6) as u64)
        );
    }
}
