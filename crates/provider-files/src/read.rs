//! Reading files: whole files as text or blob, windows of large files, and directories.
//!
//! A window is asked for with query parameters on the file URI (see `docs.md`):
//! `offset`/`length` select a byte range, `head`/`tail` the first or last lines of the
//! (optional) range. What they mean, their errors and the line scans are core's
//! [`mcpr_core::window`], shared with every provider that reads ranges; this module adds the
//! sandboxed open and the directory `after` key.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Mutex};

use mcpr_core::sync::lock;
use mcpr_core::window::{READ_IN_WINDOWS, trim_to_utf8, window_meta};
use mcpr_core::{
    Contents, ContentsBody, Error, ErrorKind, Limit, ReadLimits, ResourceUri, Result, Window,
};
use percent_encoding::percent_decode_str;

use crate::error::map_io;
use crate::list::dir_listing;
use crate::path::RelPath;
use crate::provider::Inner;

/// Files up to this size are read on the calling task: cheaper than a hop to the blocking
/// pool, and short enough not to stall the runtime. Only on a local file system: a mount on
/// a network or FUSE one reads everything on the pool (`crate::remote`).
pub(crate) const INLINE_READ_MAX: u64 = 256 * 1024;

/// What the query of a file URI asks for: a window, or for a directory where to continue.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct FileQuery {
    pub(crate) window: Window,
    /// For directories: continue after this entry name.
    pub(crate) after: Option<Vec<u8>>,
}

impl FileQuery {
    /// Parse the query of `uri`: the window keys (see [`Window::parse_with`]) and `after`.
    /// Unknown or repeated keys and non-numbers are refused with a message that lists what is
    /// accepted.
    pub(crate) fn parse(uri: &ResourceUri) -> Result<Self> {
        let mut after = None;
        let window = Window::parse_with(
            uri,
            "file URIs accept offset, length, head and tail (directories: after)",
            |key, value| {
                if key != "after" {
                    return Ok(false);
                }
                after = Some(percent_decode_str(value).collect());
                Ok(true)
            },
        )?;
        Ok(Self { window, after })
    }
}

/// Read `rel` (the real path from `Inner::resolve`, already checked against the rules).
pub(crate) fn read_path(
    inner: &Inner,
    rel: &RelPath,
    uri: &ResourceUri,
    limits: &ReadLimits,
    stat: Option<cap_std::fs::Metadata>,
) -> Result<Vec<Contents>> {
    let uri_s = uri.as_str();
    let FileQuery { window, after } = FileQuery::parse(uri)?;
    // Stat first so a FIFO, socket or device is not opened (`stat` when the caller has just
    // taken it). Only an entry swapped in between this stat and the open in `open_regular` is
    // opened (non-blocking, no controlling terminal), and that open's own `fstat` refuses it
    // as not found before anything is read from it.
    let md = match stat {
        Some(md) => md,
        None => inner
            .root
            .metadata(rel.as_path())
            .map_err(|e| map_io(e, uri_s))?,
    };
    if md.is_dir() {
        if !window.is_whole() {
            return Err(Error::invalid_params(format!(
                "{uri_s} is a directory; offset, length, head and tail apply to files"
            )));
        }
        let text = dir_listing(inner, rel, uri_s, after.as_deref())?;
        return Ok(vec![Contents {
            uri: uri_s.to_owned(),
            mime_type: Some("application/json".into()),
            body: ContentsBody::Text(text),
            meta: None,
        }]);
    }
    if !md.is_file() {
        return Err(Error::not_found(uri_s));
    }
    if after.is_some() {
        return Err(Error::invalid_params("`after` applies to directories only"));
    }
    let ext_mime = mime_by_extension(rel.as_bytes());
    // A file rewritten in place (truncated, then written) changes under the open descriptor,
    // and a read that spans the rewrite would splice two versions. When the descriptor's
    // metadata moved during the read, the bytes are kept only if the same range reads the
    // same again (a file that was appended to: what was read is what the file holds); a
    // rewrite starts the read over from a fresh open.
    for _ in 0..REREAD_ATTEMPTS {
        let (mut file, before) = open_regular(inner, rel, uri_s)?;
        let size = before.len();
        let (from, bytes, meta) = if window.is_whole() {
            if size > limits.max_bytes {
                return Err(Error::too_large(
                    uri_s,
                    "the file",
                    Some(size),
                    Limit::read(limits.max_bytes),
                    Some(READ_IN_WINDOWS),
                ));
            }
            // A kept buffer when the file is large: its pages are in already (mcpr_core::spare).
            let mut buf = mcpr_core::spare::buffer(size as usize);
            // +1 detects a file that grew past the limit between the stat and the read.
            (&mut file)
                .take(limits.max_bytes + 1)
                .read_to_end(&mut buf)
                .map_err(|e| map_io(e, uri_s))?;
            if buf.len() as u64 > limits.max_bytes {
                return Err(Error::too_large(
                    uri_s,
                    "the file",
                    Some(buf.len() as u64),
                    Limit::read(limits.max_bytes),
                    Some(READ_IN_WINDOWS),
                ));
            }
            (0, buf, None)
        } else {
            let (from, bytes) =
                window.read_from(&mut file, size, uri_s, limits.max_bytes, |e| {
                    map_io(e, uri_s)
                })?;
            let (from, bytes) = trim_to_utf8(from, bytes);
            let meta = window_meta(from, bytes.len() as u64, size);
            (from, bytes, Some(meta))
        };
        if unchanged(&file, &before) || reads_the_same(&file, from, &bytes) {
            return Ok(vec![make_contents(uri_s, bytes, ext_mime, meta)]);
        }
    }
    Err(changed_while_read(uri_s))
}

/// How many times a read starts over when the file changed while it was read; past this it
/// answers [`changed_while_read`] rather than loop behind a file rewritten without pause.
const REREAD_ATTEMPTS: usize = 5;

/// The facts about an open file that a write or truncation changes: size, modification and
/// status-change times to the nanosecond, and the inode with its device. Linux 6.13 and
/// later give a fine-grained ctime to a change that follows a stat, so a rewrite during the
/// read shows even when it keeps the length; older kernels stamp times in ticks of a few
/// milliseconds, and there a same-length rewrite within one tick can go unseen.
fn identity(md: &std::fs::Metadata) -> (u64, u64, u64, i64, i64, i64, i64) {
    use std::os::unix::fs::MetadataExt as _;
    (
        md.dev(),
        md.ino(),
        md.size(),
        md.mtime(),
        md.mtime_nsec(),
        md.ctime(),
        md.ctime_nsec(),
    )
}

/// Whether `file` is still as `before` described it (an `fstat` failing counts as changed).
fn unchanged(file: &File, before: &std::fs::Metadata) -> bool {
    file.metadata()
        .is_ok_and(|now| identity(&now) == identity(before))
}

/// Whether the `bytes` read at `from` are still what `file` holds there, compared a chunk at
/// a time so a large read does not need a second buffer of its size.
fn reads_the_same(file: &File, from: u64, bytes: &[u8]) -> bool {
    use std::os::unix::fs::FileExt as _;
    let mut again = vec![0u8; bytes.len().min(64 * 1024)];
    bytes
        .chunks(again.len().max(1))
        .enumerate()
        .all(|(i, chunk)| {
            let at = from + (i * again.len()) as u64;
            let again = &mut again[..chunk.len()];
            file.read_exact_at(again, at).is_ok() && again == chunk
        })
}

/// The answer for a file that kept changing during every attempt to read it.
fn changed_while_read(uri: &str) -> Error {
    Error::new(
        ErrorKind::Unavailable,
        format!(
            "{uri} changed while being read ({REREAD_ATTEMPTS} attempts); it is being \
             rewritten in place, try again when the writer is done"
        ),
    )
    .with_uri(uri)
}

/// The common read in three system calls (five the first time a file is read): the whole
/// of a small regular file whose path has no symlink at all. `None` leaves the request to
/// [`read_path`] (after `Inner::resolve`), which handles links, directories, windows, limits
/// and every error; so anything unusual here is not an answer but a fall-back.
///
/// `rel` must be the decoded URI path with the deny rules already checked on it. The calls,
/// and what each buys:
/// - `statx` of the path, not following a link, on every read: FIFOs, sockets and devices
///   are not opened (opening a device can act on it, opening a FIFO lets a writer waiting in
///   its own `open` go), and it gives the size and the identity (inode, device, size, times)
///   the read is checked against. Only an entry swapped in the moment between this `statx`
///   and the `openat2` is opened before its type is seen.
/// - When the descriptor of the file this identity names is kept from an earlier read
///   ([`Kept`]), nothing is opened: the read uses it. Otherwise `openat2` with
///   `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`: the kernel refuses it if any component is a
///   link or the path leaves the root, so what is opened is at `rel` itself and the rules
///   checked on `rel` are the rules of the real path (no link resolution, no `/proc/self/fd`
///   check needed). The descriptor is then kept for the next read of `rel`.
/// - `pread` into a buffer one byte larger than the size, so a short read is the end.
/// - `statx` of the descriptor: the same identity as before means the file read is the one
///   checked (an entry swapped in between has another inode or times) and nothing rewrote
///   it since before the open, the read included.
/// - `close`, only of a descriptor not kept (or when [`Kept`] lets one go).
///
/// A reader that trusted the tree would make four: `openat`, `fstat`, `read`, `close`.
pub(crate) fn read_direct(
    inner: &Inner,
    rel: &RelPath,
    uri: &ResourceUri,
    limits: &ReadLimits,
) -> Option<Result<Vec<Contents>>> {
    use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags};
    if rel.is_root() {
        return None;
    }
    let cap = INLINE_READ_MAX.min(limits.max_bytes);
    let path = rel.as_path();
    let key = rel.as_bytes();
    let Ok(st) = rustix::fs::statx(
        &inner.root,
        path,
        // Never trigger an automount just to decide whether to try this path.
        AtFlags::SYMLINK_NOFOLLOW | AtFlags::NO_AUTOMOUNT,
        IDENTITY,
    ) else {
        // Gone (or unreadable): a descriptor kept for it would hold a deleted file.
        inner.kept.forget(key);
        return None;
    };
    if !is_small_file(&st, cap) {
        inner.kept.forget(key);
        return None;
    }
    let before = Identity::of(&st);
    let (fd, kept) = match inner.kept.get(key, &before) {
        Some(fd) => (fd, true),
        None => {
            let fd = rustix::fs::openat2(
                &inner.root,
                path,
                OFlags::RDONLY
                    | OFlags::NONBLOCK
                    | OFlags::NOCTTY
                    | OFlags::CLOEXEC
                    | OFlags::NOFOLLOW,
                Mode::empty(),
                ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
            );
            // Gone, or a link now: the general path says which.
            let Ok(fd) = fd else {
                inner.kept.forget(key);
                return None;
            };
            (Arc::new(fd), false)
        }
    };
    let size = before.size as usize;
    // One byte of room past the size: a read that stops short of filling the buffer at the
    // size is the end of a regular file, so no extra read just to see 0. `pread`, not `read`:
    // on a FIFO swapped in since the `statx`, it fails instead of taking bytes that are
    // waiting in it (and a kept descriptor is read by several threads at once).
    // Read into the buffer's spare room: zeroing it first cost a `calloc` and a `memset` of
    // the file's size on every read.
    let mut buf: Vec<u8> = Vec::with_capacity(size + 1);
    loop {
        let (len, want) = (buf.len(), buf.capacity() - buf.len());
        let n = match rustix::io::pread(&*fd, rustix::buffer::spare_capacity(&mut buf), len as u64)
        {
            Ok(n) => n,
            Err(rustix::io::Errno::INTR) => continue,
            // Not a regular file any more (a directory or a FIFO swapped in since it was
            // checked), or a real I/O error: the general path says which, in its words.
            Err(_) => {
                inner.kept.forget(key);
                return None;
            }
        };
        if buf.len() == buf.capacity() {
            // It grew since the stat: the general path reads it under the limits.
            break;
        }
        if n == 0 || (n < want && buf.len() >= size) {
            break;
        }
    }
    let len = buf.len();
    // Another file than the one checked, or rewritten in place since: the general path
    // opens and reads it again.
    let after = rustix::fs::statx(&*fd, "", AtFlags::EMPTY_PATH, IDENTITY).ok();
    if after.is_none_or(|after| Identity::of(&after) != before) || len as u64 != before.size {
        inner.kept.forget(key);
        return None;
    }
    if !kept {
        inner.kept.put(key, before, fd);
    }
    let ext_mime = mime_by_extension(rel.as_bytes());
    Some(Ok(vec![make_contents(uri.as_str(), buf, ext_mime, None)]))
}

/// The descriptors of the small regular files [`read_direct`] read last, kept open so the
/// next read of the same path opens and closes nothing: `openat2` and `close` were two
/// of its five system calls, and the costlier two (a path walk checked beneath the root, a
/// `struct file` made and released).
///
/// What keeps this safe:
/// - A kept descriptor is used only after a fresh `statx` of the path, on every read, shows
///   a regular file with the very identity (device, inode, mode, size, modification and
///   status-change times) the descriptor was kept with. Nothing is opened without that
///   `statx` first, so a FIFO, socket or device node put in a path's place is never opened
///   (an identity kept in place of that `statx` would let one be opened before its type is
///   seen).
/// - While the descriptor is open its inode cannot be freed, so its number names no other
///   file: the same device and inode is the same file, the one `openat2` opened beneath the
///   root with no link in its path. A path that reaches it another way since (a directory
///   of it replaced by a link to where it moved) reads that same unchanged file; no other
///   file can be reached so. A change of its mode, owner or content changes its
///   status-change time, and the path is opened again (and checked again).
/// - The `statx` of the descriptor after the read still shows that nothing rewrote it during
///   the read.
/// - A path found gone, changed or unusable lets its descriptor go. At most [`KEPT`] per
///   mount, files of at most `INLINE_READ_MAX` bytes, and none for longer than two
///   [`KEPT_IDLE`] periods without a read: one thread for the process lets idle ones go
///   ([`Kept::sweep`]), so a mount that is not being read holds no descriptor (a file deleted
///   meanwhile is not held on disk, the tree can be unmounted, and a process's descriptor
///   count comes back where it was once reads stop).
pub(crate) struct Kept {
    map: Mutex<HashMap<Box<[u8]>, KeptFd>>,
}

/// A kept descriptor, the identity its file had when it was read, and whether it was read
/// since the last sweep.
struct KeptFd {
    id: Identity,
    fd: Arc<OwnedFd>,
    used: bool,
}

/// How often idle kept descriptors are let go: one not read for a whole period is closed.
pub(crate) const KEPT_IDLE: std::time::Duration = std::time::Duration::from_secs(5);

/// The kept maps of every files mount of the process, for the sweeping thread.
static SWEPT: Mutex<Vec<std::sync::Weak<Kept>>> = Mutex::new(Vec::new());
/// Starts the sweeping thread once per process, whatever the mounts made and dropped since.
static SWEEPER: std::sync::Once = std::sync::Once::new();

/// Descriptors kept at most per mount.
pub(crate) const KEPT: usize = 64;
/// Longer paths are not kept.
const KEPT_KEY: usize = 256;

impl Kept {
    /// An empty map, swept by the process's sweeping thread (started with the first).
    pub(crate) fn new() -> Arc<Self> {
        let kept = Arc::new(Self {
            map: Mutex::new(HashMap::new()),
        });
        lock(&SWEPT).push(Arc::downgrade(&kept));
        SWEEPER.call_once(|| {
            // Without this thread an idle mount would keep its descriptors for good; if it
            // cannot start, reads still work and descriptors stay bounded by `KEPT`.
            let _ = std::thread::Builder::new()
                .name("mcpr-kept-sweep".into())
                .spawn(|| {
                    loop {
                        std::thread::sleep(KEPT_IDLE);
                        let live: Vec<Arc<Kept>> = {
                            let mut swept = lock(&SWEPT);
                            swept.retain(|w| w.strong_count() > 0);
                            swept.iter().filter_map(|w| w.upgrade()).collect()
                        };
                        for k in live {
                            k.sweep();
                        }
                    }
                });
        });
        kept
    }

    /// Lets go every descriptor not read since the last sweep (closed outside the lock).
    fn sweep(&self) {
        let mut map = lock(&self.map);
        let idle: Vec<_> = map
            .extract_if(|_, k| !std::mem::take(&mut k.used))
            .collect();
        drop(map);
        drop(idle);
    }

    /// The descriptor kept for `path`, if it was kept with the identity `now`.
    fn get(&self, path: &[u8], now: &Identity) -> Option<Arc<OwnedFd>> {
        let mut map = lock(&self.map);
        let k = map.get_mut(path)?;
        (k.id == *now).then(|| {
            k.used = true;
            k.fd.clone()
        })
    }

    /// Keeps `fd`, read as `id`, for the next read of `path`.
    fn put(&self, path: &[u8], id: Identity, fd: Arc<OwnedFd>) {
        if path.len() > KEPT_KEY {
            return;
        }
        let mut map = lock(&self.map);
        // Emptied when full: a bounded size with no per-entry bookkeeping; a working set
        // larger than that opens its files again. Closed outside the lock.
        let full = (map.len() >= KEPT).then(|| std::mem::take(&mut *map));
        let old = map.insert(path.into(), KeptFd { id, fd, used: true });
        drop(map);
        drop((full, old));
    }

    /// The descriptor kept for `path`, whatever its identity (tests).
    #[cfg(test)]
    fn fd(&self, path: &[u8]) -> Option<Arc<OwnedFd>> {
        lock(&self.map).get(path).map(|k| k.fd.clone())
    }

    /// Lets the descriptor kept for `path` go (closed outside the lock).
    fn forget(&self, path: &[u8]) {
        let mut map = lock(&self.map);
        if map.is_empty() {
            return;
        }
        let gone = map.remove(path);
        drop(map);
        drop(gone);
    }
}

/// Whether `st` is a regular file of at most `cap` bytes with every field of the identity
/// given (a file system that leaves one out is read by the general path).
fn is_small_file(st: &rustix::fs::Statx, cap: u64) -> bool {
    use rustix::fs::FileType;
    FileType::from_raw_mode(st.stx_mode.into()) == FileType::RegularFile
        && st.stx_size <= cap
        && st.stx_mask & IDENTITY.bits() == IDENTITY.bits()
}

/// What a `statx` says of a file that [`read_direct`] compares before and after a read:
/// device, inode, type and mode, size, and modification and status-change times to the
/// nanosecond.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    dev: (u32, u32),
    ino: u64,
    mode: u16,
    size: u64,
    mtime: (i64, u32),
    ctime: (i64, u32),
}

impl Identity {
    fn of(st: &rustix::fs::Statx) -> Self {
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

/// What [`read_direct`] asks `statx` for: the type and what [`Identity`] holds.
const IDENTITY: rustix::fs::StatxFlags = rustix::fs::StatxFlags::TYPE
    .union(rustix::fs::StatxFlags::SIZE)
    .union(rustix::fs::StatxFlags::INO)
    .union(rustix::fs::StatxFlags::MTIME)
    .union(rustix::fs::StatxFlags::CTIME);

/// Open a regular file through the sandbox without blocking on FIFOs, then re-check that
/// what was opened is still a regular file whose real path the rules allow (a symlink named
/// `notes.txt` pointing at `.env` is refused here).
///
/// `rel` must be a path the rules were already checked on (a resolved URI, a listed entry):
/// when the descriptor is where `rel` says, the rules are not consulted again. Returns the
/// file and its metadata, taken from the descriptor.
fn open_regular(inner: &Inner, rel: &RelPath, uri: &str) -> Result<(File, std::fs::Metadata)> {
    use cap_std::fs::OpenOptionsExt as _;
    let mut opts = cap_std::fs::OpenOptions::new();
    opts.read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    let file = inner
        .root
        .open_with(rel.as_path(), &opts)
        .map_err(|e| map_io(e, uri))?;
    let file = file.into_std();
    let md = file.metadata().map_err(|e| map_io(e, uri))?;
    if !md.is_file() {
        return Err(Error::not_found(uri));
    }
    match real_rel_of_fd(inner, &file) {
        Some(real) if real == *rel || !inner.rules.is_denied(&real, false) => Ok((file, md)),
        _ => Err(Error::not_found(uri)),
    }
}

/// Where an open file or directory really is, relative to the root, from `/proc/self/fd`.
pub(crate) fn real_rel_of_fd(inner: &Inner, fd: &impl std::os::fd::AsRawFd) -> Option<RelPath> {
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
    let rest = link.strip_prefix(&inner.canonical_root).ok()?;
    RelPath::from_bytes(rest.as_os_str().as_bytes())
}

fn make_contents(
    uri: &str,
    bytes: Vec<u8>,
    ext_mime: Option<&'static str>,
    meta: Option<serde_json::Map<String, serde_json::Value>>,
) -> Contents {
    match String::from_utf8(bytes) {
        Ok(text) => Contents {
            uri: uri.to_owned(),
            mime_type: Some(ext_mime.unwrap_or("text/plain").to_owned()),
            body: ContentsBody::Text(text),
            meta,
        },
        Err(e) => {
            let bytes = e.into_bytes();
            let mime = mcpr_core::mime::of_binary(&bytes, ext_mime);
            Contents {
                uri: uri.to_owned(),
                mime_type: Some(mime.to_owned()),
                body: ContentsBody::Blob(bytes),
                meta,
            }
        }
    }
}

/// How many leading bytes a listing looks at to type a file without a known extension.
const SNIFF_LEN: u64 = 1024;

/// The MIME type a read of `rel` would report, judged from its first bytes; for listing
/// entries without a telling extension. `None` when the file cannot be opened.
pub(crate) fn sniff_file(inner: &Inner, rel: &RelPath) -> Option<&'static str> {
    let (file, _) = open_regular(inner, rel, "").ok()?;
    let mut head = Vec::with_capacity(SNIFF_LEN as usize);
    file.take(SNIFF_LEN).read_to_end(&mut head).ok()?;
    let text = match std::str::from_utf8(&head) {
        Ok(_) => true,
        // A character cut by the 1 KiB boundary is still text.
        Err(e) => e.error_len().is_none() && head.len() as u64 == SNIFF_LEN,
    };
    Some(if text {
        "text/plain"
    } else {
        mcpr_core::mime::of_binary(&head, None)
    })
}

/// MIME type from the file name's extension, when it has a known one.
pub(crate) fn mime_by_extension(path: &[u8]) -> Option<&'static str> {
    mcpr_core::mime::by_extension(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FilesConfig, FilesProvider};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    /// A files mount over a new temporary root holding `a.txt` ("first"): the directory (kept
    /// alive), the file's path and the provider.
    fn one_file() -> (tempfile::TempDir, std::path::PathBuf, FilesProvider) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let f = root.join("a.txt");
        std::fs::write(&f, "first").unwrap();
        let provider = FilesProvider::new(FilesConfig::new(&root)).unwrap();
        (dir, f, provider)
    }

    /// The direct read of `a.txt` at `f`: its text, `None` when the direct read leaves it to
    /// the general path (or it is not text).
    fn read_a(provider: &FilesProvider, f: &std::path::Path) -> Option<String> {
        let rel = RelPath::from_bytes(b"a.txt").unwrap();
        let uri = ResourceUri::parse(&crate::encode_path_uri(f)).unwrap();
        let limits = ReadLimits { max_bytes: 1 << 20 };
        match read_direct(provider.inner_for_tests(), &rel, &uri, &limits) {
            Some(Ok(c)) => match &c[0].body {
                ContentsBody::Text(t) => Some(t.clone()),
                ContentsBody::Blob(_) => None,
            },
            _ => None,
        }
    }

    /// A kept descriptor is let go by the sweep after a whole period without a read, and only
    /// then.
    #[test]
    fn an_idle_kept_descriptor_is_let_go() {
        let (_dir, f, provider) = one_file();
        let inner = provider.inner_for_tests();
        let read = || assert_eq!(read_a(&provider, &f).as_deref(), Some("first"));
        read();
        inner.kept.sweep();
        assert!(
            inner.kept.fd(b"a.txt").is_some(),
            "read since the last sweep"
        );
        read();
        inner.kept.sweep();
        assert!(inner.kept.fd(b"a.txt").is_some(), "read again since");
        inner.kept.sweep();
        assert!(
            inner.kept.fd(b"a.txt").is_none(),
            "a descriptor not read for a whole period was kept"
        );
        read();
        assert!(inner.kept.fd(b"a.txt").is_some(), "kept again once read");
    }

    /// A kept descriptor serves the next read of its path only while a fresh `statx` shows
    /// the very file it was kept with: a file renamed into the path is opened (and kept in
    /// its stead), and a FIFO put there is never opened (a writer waiting in its `open`
    /// stays waiting) and lets the descriptor go, as does a path gone.
    #[test]
    fn a_kept_descriptor_serves_only_the_file_it_was_kept_for() {
        let (_dir, f, provider) = one_file();
        let root = f.parent().unwrap();
        let inner = provider.inner_for_tests();
        let read = || read_a(&provider, &f);
        assert_eq!(read().as_deref(), Some("first"));
        let kept = inner.kept.fd(b"a.txt").expect("kept after a read");
        assert_eq!(read().as_deref(), Some("first"));
        let again = inner.kept.fd(b"a.txt").unwrap();
        assert!(
            Arc::ptr_eq(&kept, &again),
            "the second read opened the file again"
        );
        drop(again);

        std::fs::write(root.join("b.txt"), "second").unwrap();
        std::fs::rename(root.join("b.txt"), &f).unwrap();
        assert_eq!(read().as_deref(), Some("second"));
        let now = inner.kept.fd(b"a.txt").unwrap();
        assert!(
            !Arc::ptr_eq(&kept, &now),
            "a file renamed in was read through the old one"
        );
        drop((kept, now));

        std::fs::remove_file(&f).unwrap();
        let made = std::process::Command::new("mkfifo").arg(&f).status();
        assert!(made.unwrap().success());
        let released = Arc::new(AtomicBool::new(false));
        let writer = {
            let (f, released) = (f.clone(), released.clone());
            std::thread::spawn(move || {
                let w = std::fs::OpenOptions::new().write(true).open(&f);
                released.store(true, Ordering::SeqCst);
                w
            })
        };
        // The writer is in its `open` (or about to be): give it time to get there.
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(read(), None);
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            !released.load(Ordering::SeqCst),
            "the FIFO was opened: the writer waiting in its open was let go"
        );
        assert!(
            inner.kept.fd(b"a.txt").is_none(),
            "a FIFO's path kept a descriptor"
        );
        // Let the writer go.
        let reader = std::fs::File::open(&f).unwrap();
        writer.join().unwrap().unwrap();
        drop(reader);

        std::fs::remove_file(&f).unwrap();
        std::fs::write(&f, "third").unwrap();
        assert_eq!(read().as_deref(), Some("third"));
        std::fs::remove_file(&f).unwrap();
        assert_eq!(read(), None);
        assert!(
            inner.kept.fd(b"a.txt").is_none(),
            "a deleted file's descriptor was kept"
        );
    }
}
