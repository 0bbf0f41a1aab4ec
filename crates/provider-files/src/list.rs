//! Recursive listing with stateless keyset cursors.
//!
//! The order is a pre-order walk with each directory's entries sorted by name bytes, which
//! is exactly the component-wise byte order of the paths. A cursor is the last path served;
//! resuming re-reads only the directories on that path and starts after it, so a page costs
//! O(page + depth × directory size) and memory does not grow with the tree.

use std::os::unix::ffi::OsStrExt;

use cap_fs_ext::DirExt as _;
use cap_std::fs::Dir;
use mcpr_core::{DIRECTORY_MIME_TYPE, Page, ResourceMeta, Result};

use crate::error::map_io;
use crate::path::{RelPath, valid_component};
use crate::provider::Inner;
use crate::rules::{IgnoreStack, load_ignore_in, stack_for};

/// What a directory entry is, from `d_type` (no extra stat).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    File,
    Dir,
    Symlink,
    Other,
}

/// One visible entry of a directory. Ordered by name (names are unique in a directory).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Entry {
    pub(crate) name: Vec<u8>,
    pub(crate) kind: Kind,
}

/// Open directory `rel` (a real path the rules allow) through the sandbox, then check where
/// the handle really is, as file reads do: `rel` may have been swapped for a symlink to a
/// denied directory since it was resolved, and a listing made through the handle would then
/// show that directory's names. A handle somewhere else whose real path the rules deny is
/// refused as not found. Everything listed afterwards goes through this same handle.
pub(crate) fn open_dir_checked(inner: &Inner, rel: &RelPath) -> std::io::Result<Dir> {
    let dir = if rel.is_root() {
        inner.root.try_clone()?
    } else {
        inner.root.open_dir(rel.as_path())?
    };
    match crate::read::real_rel_of_fd(inner, &dir) {
        Some(real) if real == *rel || !inner.rules.is_denied(&real, true) => Ok(dir),
        _ => Err(std::io::ErrorKind::NotFound.into()),
    }
}

/// Call `f` with the name and kind of every entry of the open directory `dir` that has a
/// valid name, in directory order, rules not applied (see [`shows_entry`]): a caller can
/// reject by name first, which is cheaper than the rules. Nothing is collected here.
pub(crate) fn visit_raw(dir: &Dir, mut f: impl FnMut(&[u8], Kind)) -> std::io::Result<()> {
    for entry in dir.entries()? {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name();
        let name = name.as_bytes();
        if !valid_component(name) {
            continue;
        }
        let kind = match entry.file_type() {
            Ok(t) if t.is_dir() => Kind::Dir,
            Ok(t) if t.is_file() => Kind::File,
            Ok(t) if t.is_symlink() => Kind::Symlink,
            Ok(_) => Kind::Other,
            Err(_) => continue,
        };
        f(name, kind);
    }
    Ok(())
}

/// Whether entry `name` of a directory the rules allow, at `child`, is shown: not denied,
/// not hidden, and not ignored when `ignores` is given.
pub(crate) fn shows_entry(
    inner: &Inner,
    ignores: Option<&IgnoreStack>,
    child: &RelPath,
    name: &[u8],
    kind: Kind,
) -> bool {
    let is_dir = kind == Kind::Dir;
    !inner.rules.entry_denied(child, name, is_dir)
        && !ignores.is_some_and(|s| s.is_ignored(child, is_dir))
}

/// The `keep` smallest items pushed, in a max-heap of at most `keep`: a scan of a directory
/// of any size that answers with its first names holds only those (completion, directory
/// reads), not the whole directory.
pub(crate) struct Smallest<T: Ord> {
    heap: std::collections::BinaryHeap<T>,
    keep: usize,
}

impl<T: Ord> Smallest<T> {
    pub(crate) fn new(keep: usize) -> Self {
        Self {
            heap: std::collections::BinaryHeap::with_capacity(keep.min(4096) + 1),
            keep,
        }
    }

    /// Whether an item ordered at or after `probe` would be dropped at once: the heap is
    /// full and its largest item is not after `probe`.
    pub(crate) fn would_drop(&self, probe: impl FnOnce(&T) -> bool) -> bool {
        self.heap.len() >= self.keep && self.heap.peek().is_none_or(probe)
    }

    pub(crate) fn push(&mut self, item: T) {
        if self.keep == 0 {
            return;
        }
        if self.heap.len() < self.keep {
            self.heap.push(item);
        } else if self.heap.peek().is_some_and(|max| item < *max) {
            self.heap.pop();
            self.heap.push(item);
        }
    }

    /// The kept items, smallest first.
    pub(crate) fn into_sorted(self) -> Vec<T> {
        self.heap.into_sorted_vec()
    }
}

/// Read an open directory's entries with valid names, sorted by name, rules not yet applied:
/// the walk applies them only to the entries it visits, so resuming after a cursor in a large
/// directory does not test every name before it.
fn read_sorted(dir: &cap_std::fs::Dir) -> std::io::Result<Vec<Entry>> {
    let mut out = Vec::new();
    visit_raw(dir, |name, kind| {
        out.push(Entry {
            name: name.to_vec(),
            kind,
        });
    })?;
    out.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Identity and change stamp of a directory: an entry created, removed or renamed in it
/// changes its mtime and ctime.
#[derive(Clone, Copy, PartialEq, Eq)]
struct DirStamp {
    dev: u64,
    ino: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl DirStamp {
    /// The stamp of the open directory `dir` (one `fstat`).
    fn of(dir: &cap_std::fs::Dir) -> std::io::Result<Self> {
        use cap_std::fs::MetadataExt as _;
        let md = dir.dir_metadata()?;
        Ok(Self {
            dev: md.dev(),
            ino: md.ino(),
            mtime: (md.mtime(), md.mtime_nsec()),
            ctime: (md.ctime(), md.ctime_nsec()),
        })
    }

    /// Whether the directory last changed long enough ago for a listing of it to be kept
    /// (see [`DIR_CACHE_SETTLE`]).
    fn settled(&self) -> bool {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let settled = |(secs, _): (i64, i64)| secs + (DIR_CACHE_SETTLE.as_secs() as i64) < now;
        settled(self.mtime) && settled(self.ctime)
    }
}

/// How many directory entries the cache holds at most, over all directories (a few MiB).
const DIR_CACHE_ENTRIES: usize = 100_000;
/// A directory changed more recently than this is not cached: file system timestamps are
/// coarse, and a change within the same tick as our read would leave the stamp unchanged.
const DIR_CACHE_SETTLE: std::time::Duration = std::time::Duration::from_secs(1);

/// Sorted entries of recently walked or paged directories, validated on every use by the
/// directory's stamp (one `fstat` of the handle the walk opens anyway). Resuming a page
/// re-reads the directories on the cursor's path; in a large tree that was most of a page's
/// cost. A directory read's pages use the same entries, so a cursor through a large
/// directory reads it once, not once a page.
#[derive(Default)]
pub(crate) struct DirCache {
    map: std::sync::Mutex<DirCacheMap>,
    /// Whole reads of a directory's entries, for the tests that show pages do not repeat
    /// them.
    #[cfg(test)]
    scans: std::sync::atomic::AtomicUsize,
}

/// A cached directory: its stamp when read, the tick of its last use, its sorted entries.
type CachedDir = (DirStamp, u64, std::sync::Arc<Vec<Entry>>);

#[derive(Default)]
struct DirCacheMap {
    /// Root-relative path bytes → the cached directory.
    dirs: std::collections::HashMap<Vec<u8>, CachedDir>,
    entries: usize,
    tick: u64,
}

impl DirCache {
    /// The entries of `dir` (at `rel`), from the cache when its stamp still matches.
    fn entries(
        &self,
        dir: &cap_std::fs::Dir,
        rel: &RelPath,
    ) -> std::io::Result<std::sync::Arc<Vec<Entry>>> {
        let stamp = DirStamp::of(dir)?;
        if let Some(entries) = self.get(rel, &stamp) {
            return Ok(entries);
        }
        self.note_scan();
        let entries = std::sync::Arc::new(read_sorted(dir)?);
        self.put(rel, stamp, &entries);
        Ok(entries)
    }

    /// The kept entries of the directory at `rel`, when it still has `stamp`.
    fn get(&self, rel: &RelPath, stamp: &DirStamp) -> Option<std::sync::Arc<Vec<Entry>>> {
        let mut map = mcpr_core::sync::lock(&self.map);
        map.tick += 1;
        let tick = map.tick;
        match map.dirs.get_mut(rel.as_bytes()) {
            Some((s, used, entries)) if s == stamp => {
                *used = tick;
                Some(entries.clone())
            }
            _ => None,
        }
    }

    /// Keep `entries` (sorted) of the directory at `rel` read at `stamp`, when it has settled
    /// and they fit, evicting the least recently used directories to make room.
    fn put(&self, rel: &RelPath, stamp: DirStamp, entries: &std::sync::Arc<Vec<Entry>>) {
        if !stamp.settled() || entries.len() > DIR_CACHE_ENTRIES {
            return;
        }
        let mut map = mcpr_core::sync::lock(&self.map);
        if let Some((_, _, old)) = map.dirs.remove(rel.as_bytes()) {
            map.entries -= old.len();
        }
        while map.entries + entries.len() > DIR_CACHE_ENTRIES {
            let Some(victim) = map
                .dirs
                .iter()
                .min_by_key(|(_, (_, used, _))| *used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some((_, _, old)) = map.dirs.remove(&victim) {
                map.entries -= old.len();
            }
        }
        map.entries += entries.len();
        let tick = map.tick;
        map.dirs
            .insert(rel.as_bytes().to_vec(), (stamp, tick, entries.clone()));
    }

    /// Count one whole read of a directory (tests only).
    fn note_scan(&self) {
        #[cfg(test)]
        self.scans
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// One level of the walk: a directory, open, its entries and the next index to visit.
struct Level {
    rel: RelPath,
    /// The directory itself: children are opened and stat-ed by name relative to it, one
    /// syscall each instead of a sandboxed walk from the root per file.
    dir: cap_std::fs::Dir,
    entries: std::sync::Arc<Vec<Entry>>,
    next: usize,
    ignores: IgnoreStack,
}

impl Level {
    /// The root level.
    fn root(inner: &Inner) -> Option<Self> {
        let dir = inner.root.try_clone().ok()?;
        Self::with_dir(inner, dir, RelPath::root(), &IgnoreStack::default())
    }

    /// Child directory `name` of this level. Not through a symlink: the entry was a
    /// directory when read, and one swapped for a link to a denied directory since must not
    /// be walked into.
    fn child(&self, inner: &Inner, name: &[u8]) -> Option<Self> {
        let dir = self
            .dir
            .open_dir_nofollow(std::ffi::OsStr::from_bytes(name))
            .ok()?;
        Self::with_dir(inner, dir, self.rel.join(name), &self.ignores)
    }

    fn with_dir(
        inner: &Inner,
        dir: cap_std::fs::Dir,
        rel: RelPath,
        parent: &IgnoreStack,
    ) -> Option<Self> {
        let ignores = if inner.rules.respect_gitignore {
            parent.push(load_ignore_in(&dir, &rel))
        } else {
            parent.clone()
        };
        let entries = inner.dir_cache.entries(&dir, &rel).ok()?;
        Some(Self {
            rel,
            dir,
            entries,
            next: 0,
            ignores,
        })
    }

    /// Whether entry `e` (at `child`) is shown: not denied, hidden or ignored.
    fn shows(&self, inner: &Inner, e: &Entry, child: &RelPath) -> bool {
        let is_dir = e.kind == Kind::Dir;
        !inner.rules.entry_denied(child, &e.name, is_dir) && !self.ignores.is_ignored(child, is_dir)
    }
}

/// Serve one page of files after `after` (a root-relative path from a previous page).
pub(crate) fn list_page(
    inner: &Inner,
    after: Option<&[u8]>,
    limit: usize,
) -> Result<Page<ResourceMeta>> {
    let mut stack: Vec<Level> = Vec::new();
    let root_level = Level::root(inner).ok_or_else(|| {
        map_io(
            std::io::Error::other("root unreadable"),
            inner.root_uri.prefix(),
        )
    })?;
    stack.push(root_level);

    if let Some(after) = after {
        // Rebuild the walk position: at each level, continue after the cursor's component;
        // descend only while the component is still a directory we would have walked into.
        // Only a forged cursor can carry a position that is not a valid path.
        let after = RelPath::from_bytes(after)
            .filter(|p| !p.is_root())
            .ok_or_else(|| {
                mcpr_core::Error::new(
                    mcpr_core::ErrorKind::InvalidCursor,
                    "invalid cursor: its position is not a path under the root",
                )
            })?;
        let comps: Vec<&[u8]> = after.components().collect();
        for (depth, comp) in comps.iter().enumerate() {
            let level = stack.last_mut().expect("stack is never empty here");
            let pos = level
                .entries
                .partition_point(|e| e.name.as_slice() <= *comp);
            level.next = pos;
            let is_last = depth + 1 == comps.len();
            if is_last {
                break;
            }
            let found = pos > 0 && {
                let e = &level.entries[pos - 1];
                e.name.as_slice() == *comp
                    && e.kind == Kind::Dir
                    && level.shows(inner, e, &level.rel.join(comp))
            };
            if !found {
                break;
            }
            match level.child(inner, comp) {
                Some(l) => stack.push(l),
                None => break,
            }
        }
    }

    let mut items = Vec::with_capacity(limit.min(1024));
    let mut last: Option<RelPath> = None;
    let mut has_more = false;
    while let Some(level) = stack.last_mut() {
        let Some(entry) = level.entries.get(level.next) else {
            stack.pop();
            continue;
        };
        level.next += 1;
        let rel = level.rel.join(&entry.name);
        if !level.shows(inner, entry, &rel) {
            continue;
        }
        let meta = match entry.kind {
            Kind::Dir => {
                if let Some(l) = level.child(inner, &entry.name) {
                    stack.push(l);
                }
                continue;
            }
            Kind::File => {
                // d_type said regular file; stat by name in the open directory, without
                // following links (a file swapped for a link since is skipped, not followed).
                let md = level
                    .dir
                    .symlink_metadata(std::ffi::OsStr::from_bytes(&entry.name));
                match md {
                    Ok(md) if md.is_file() => Some(inner.resource_meta(&rel, &rel, &md)),
                    _ => None,
                }
            }
            Kind::Symlink => file_meta(inner, &rel, true),
            Kind::Other => None,
        };
        let Some(meta) = meta else { continue };
        if items.len() == limit {
            // One more file exists: the page is full and there is a next page.
            has_more = true;
            break;
        }
        items.push(meta);
        last = Some(rel);
    }
    let next = if has_more {
        last.map(|l| l.as_bytes().to_vec())
    } else {
        None
    };
    Ok(Page {
        items,
        next,
        hints: None,
    })
}

/// Metadata of a listed file, or `None` when it should not be listed: a symlink is listed
/// only when it resolves, inside the root, to a regular file the rules allow.
fn file_meta(inner: &Inner, rel: &RelPath, symlink: bool) -> Option<ResourceMeta> {
    let real = if symlink {
        let target = inner.resolve_links(rel)?;
        if inner.rules.is_denied(&target, false) {
            return None;
        }
        target
    } else {
        rel.clone()
    };
    let md = inner.root.metadata(real.as_path()).ok()?;
    if !md.is_file() {
        return None;
    }
    Some(inner.resource_meta(rel, &real, &md))
}

/// The number of entries a directory read returns at most; beyond, it says `truncated`.
pub(crate) const DIR_READ_MAX: usize = 1000;

/// Read directory `rel` as JSON entries, starting after entry name `after`.
///
/// The directory is opened once and checked ([`open_dir_checked`]); names and metadata come
/// through that handle. Only the first [`DIR_READ_MAX`] + 1 visible names after `after` are
/// kept while scanning, so a directory of a million entries costs a page, not a million.
pub(crate) fn dir_listing(
    inner: &Inner,
    rel: &RelPath,
    uri: &str,
    after: Option<&[u8]>,
) -> Result<String> {
    let dir = open_dir_checked(inner, rel).map_err(|e| map_io(e, uri))?;
    let ignores = stack_for(&inner.root, rel, inner.rules.respect_gitignore);
    let mut first = Smallest::new(DIR_READ_MAX + 1);
    visit_raw(&dir, |name, kind| {
        if after.is_some_and(|a| name <= a)
            || first.would_drop(|max: &Entry| max.name.as_slice() <= name)
        {
            return;
        }
        if shows_entry(inner, Some(&ignores), &rel.join(name), name, kind) {
            first.push(Entry {
                name: name.to_vec(),
                kind,
            });
        }
    })
    .map_err(|e| map_io(e, uri))?;
    let entries = first.into_sorted();
    let mut out = Vec::new();
    let mut truncated = false;
    let mut last_name = None;
    for e in &entries {
        if out.len() == DIR_READ_MAX {
            truncated = true;
            break;
        }
        let child = rel.join(&e.name);
        let mut obj = serde_json::Map::new();
        obj.insert(
            "name".into(),
            String::from_utf8_lossy(&e.name).into_owned().into(),
        );
        obj.insert("uri".into(), inner.root_uri.uri_of(&child).into());
        let ty = match e.kind {
            Kind::File => "file",
            Kind::Dir => "directory",
            Kind::Symlink => "symlink",
            Kind::Other => "other",
        };
        obj.insert("type".into(), ty.into());
        if let Ok(md) = dir.symlink_metadata(std::ffi::OsStr::from_bytes(&e.name)) {
            if e.kind == Kind::File {
                obj.insert("size".into(), md.len().into());
            }
            if let Some(t) = crate::provider::rfc3339(&md) {
                obj.insert("lastModified".into(), t.into());
            }
        }
        out.push(serde_json::Value::Object(obj));
        last_name = Some(e.name.clone());
    }
    let mut doc = serde_json::Map::new();
    doc.insert("uri".into(), uri.into());
    doc.insert("entries".into(), out.into());
    doc.insert("truncated".into(), truncated.into());
    if truncated && let Some(name) = last_name {
        let next = format!(
            "{}?after={}",
            inner.root_uri.uri_of(rel),
            crate::path::encode_component(&name)
        );
        doc.insert("next".into(), next.into());
    }
    Ok(serde_json::Value::Object(doc).to_string())
}

/// One page of directory `rel`'s direct children as resources (SEP-2640 directory reads),
/// after entry name `after`, at most `limit`: the entries a directory read shows (deny,
/// hidden and ignore rules applied), files with their listing metadata, subfolders as
/// [`DIRECTORY_MIME_TYPE`]. A symlink is shown as what it resolves to inside the root when
/// the rules allow that; a link out of the root, a dangling one and special files are left
/// out, since none of them can be read. The position is the last entry's name; like
/// [`dir_listing`], only `limit + 1` names are kept while scanning.
pub(crate) fn dir_page(
    inner: &Inner,
    rel: &RelPath,
    uri: &str,
    after: Option<&[u8]>,
    limit: usize,
) -> Result<Page<ResourceMeta>> {
    let dir = open_dir_checked(inner, rel).map_err(|e| map_io(e, uri))?;
    let ignores = stack_for(&inner.root, rel, inner.rules.respect_gitignore);
    let stamp = DirStamp::of(&dir).map_err(|e| map_io(e, uri))?;
    // The entries kept since an earlier page (or a walk) while the directory has not
    // changed: the cursor's next page costs the page, not a scan of the directory.
    if let Some(entries) = inner.dir_cache.get(rel, &stamp) {
        return Ok(page_of_sorted(inner, rel, &ignores, &entries, after, limit));
    }
    // One scan: it finds the page's entries in a bounded heap, and, for a settled directory
    // small enough to keep, collects all of them for the pages after this one.
    let mut all = stamp.settled().then(Vec::new);
    let mut pending = Vec::new();
    let mut resume = after.map(<[u8]>::to_vec);
    loop {
        // The lookahead entry says whether there is a next page.
        let want = limit + 1 - pending.len();
        let mut first = Smallest::new(want);
        inner.dir_cache.note_scan();
        visit_raw(&dir, |name, kind| {
            if all.as_ref().is_some_and(|a| a.len() >= DIR_CACHE_ENTRIES) {
                all = None;
            }
            if let Some(all) = &mut all {
                all.push(Entry {
                    name: name.to_vec(),
                    kind,
                });
            }
            if resume.as_deref().is_some_and(|a| name <= a)
                || kind == Kind::Other
                || first.would_drop(|max: &Entry| max.name.as_slice() <= name)
            {
                return;
            }
            if shows_entry(inner, Some(&ignores), &rel.join(name), name, kind) {
                first.push(Entry {
                    name: name.to_vec(),
                    kind,
                });
            }
        })
        .map_err(|e| map_io(e, uri))?;
        if let Some(mut all) = all.take() {
            all.sort_unstable_by(|a, b| a.name.cmp(&b.name));
            let all = std::sync::Arc::new(all);
            inner.dir_cache.put(rel, stamp, &all);
            return Ok(page_of_sorted(inner, rel, &ignores, &all, after, limit));
        }
        let scanned = first.into_sorted();
        let full = scanned.len() == want;
        for e in &scanned {
            if let Some(meta) = child_resource(inner, rel, e) {
                pending.push((e.name.clone(), meta));
            }
        }
        // Rare: links that do not resolve left the page short while the directory holds
        // more; scan again after the last name looked at.
        match scanned.last() {
            Some(last) if full && pending.len() <= limit => resume = Some(last.name.clone()),
            _ => break,
        }
    }
    Ok(Page::from_lookahead(pending, limit))
}

/// The most file modes one [`folder_details`] reports: a skill holds at most 512 files, and
/// a folder larger than this is no folder to publish whole.
const MAX_MODES: usize = 4096;

/// [`mcpr_core::Provider::folder_details`] of directory `rel` (its URI `uri`): one scan of
/// it, each entry the directory read would hide named with its rule, each file it shows with
/// its permission bits (a link's, its target's). Nothing below the folder is looked at.
pub(crate) fn folder_details(
    inner: &Inner,
    rel: &RelPath,
    uri: &str,
) -> Result<mcpr_core::FolderDetails> {
    use cap_std::fs::MetadataExt as _;
    let dir = open_dir_checked(inner, rel).map_err(|e| map_io(e, uri))?;
    let ignores = stack_for(&inner.root, rel, inner.rules.respect_gitignore);
    let mut out = mcpr_core::FolderDetails::default();
    let mut files = Vec::new();
    visit_raw(&dir, |name, kind| {
        if kind == Kind::Other {
            return;
        }
        let child = rel.join(name);
        let is_dir = kind == Kind::Dir;
        let why = inner
            .rules
            .why_entry_denied(&child, name, is_dir)
            .or_else(|| {
                ignores
                    .is_ignored(&child, is_dir)
                    .then_some("an ignore file (.gitignore or .ignore) leaves it out")
            });
        match why {
            Some(why) if out.left_out.len() < mcpr_core::MAX_LEFT_OUT => {
                let shown = if is_dir {
                    format!("{}/", child.display())
                } else {
                    child.display()
                };
                out.left_out.push((shown, why.to_owned()));
            }
            Some(_) => out.more_left_out += 1,
            None if !is_dir && files.len() < MAX_MODES => files.push((child, kind)),
            None => {}
        }
    })
    .map_err(|e| map_io(e, uri))?;
    for (child, kind) in files {
        let md = match kind {
            Kind::Symlink => inner
                .resolve_links(&child)
                .filter(|target| !inner.rules.is_denied(target, false))
                .and_then(|target| inner.root.metadata(target.as_path()).ok()),
            _ => inner.root.symlink_metadata(child.as_path()).ok(),
        };
        if let Some(md) = md.filter(|md| md.is_file()) {
            out.modes
                .push((inner.root_uri.uri_of(&child), md.mode() & 0o777));
        }
    }
    out.left_out.sort();
    Ok(out)
}

/// The page after `after` of a directory's sorted `entries`, rules applied.
fn page_of_sorted(
    inner: &Inner,
    rel: &RelPath,
    ignores: &IgnoreStack,
    entries: &[Entry],
    after: Option<&[u8]>,
    limit: usize,
) -> Page<ResourceMeta> {
    let start = after.map_or(0, |a| entries.partition_point(|e| e.name.as_slice() <= a));
    let mut pending = Vec::new();
    for e in &entries[start..] {
        if e.kind == Kind::Other
            || !shows_entry(inner, Some(ignores), &rel.join(&e.name), &e.name, e.kind)
        {
            continue;
        }
        if let Some(meta) = child_resource(inner, rel, e) {
            pending.push((e.name.clone(), meta));
            // The lookahead entry says whether there is a next page.
            if pending.len() > limit {
                break;
            }
        }
    }
    Page::from_lookahead(pending, limit)
}

/// The resource entry of child `e` of directory `rel`, or `None` when it cannot be read.
fn child_resource(inner: &Inner, rel: &RelPath, e: &Entry) -> Option<ResourceMeta> {
    let child = rel.join(&e.name);
    let is_dir = match e.kind {
        Kind::File => false,
        Kind::Dir => true,
        Kind::Symlink => {
            let target = inner.resolve_links(&child)?;
            let md = inner.root.metadata(target.as_path()).ok()?;
            if inner.rules.is_denied(&target, md.is_dir()) {
                return None;
            }
            if md.is_file() {
                return Some(inner.resource_meta(&child, &target, &md));
            }
            if !md.is_dir() {
                return None;
            }
            true
        }
        Kind::Other => return None,
    };
    if is_dir {
        let md = inner.root.symlink_metadata(child.as_path()).ok();
        return Some(ResourceMeta {
            uri: inner.root_uri.uri_of(&child),
            name: child.display(),
            mime_type: Some(DIRECTORY_MIME_TYPE.to_owned()),
            last_modified: md.as_ref().and_then(crate::provider::rfc3339),
            ..ResourceMeta::default()
        });
    }
    let md = inner.root.symlink_metadata(child.as_path()).ok()?;
    md.is_file()
        .then(|| inner.resource_meta(&child, &child, &md))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FilesConfig;
    use crate::provider::FilesProvider;

    /// A directory resolved while it was real, then swapped for a link
    /// to a denied directory before it is listed (the race, made deterministic by swapping
    /// between the two steps). The listing used to follow the link and show the denied
    /// directory's names; now the opened handle's real path is checked and it is not found.
    #[test]
    fn directory_read_refuses_a_directory_swapped_for_a_link_to_a_denied_one() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("pub")).unwrap();
        std::fs::write(root.join("pub/a.txt"), "a").unwrap();
        std::fs::create_dir(root.join(".ssh")).unwrap();
        std::fs::write(root.join(".ssh/known_hosts"), "h").unwrap();
        std::fs::create_dir(root.join("vault")).unwrap();
        std::fs::write(root.join("vault/plans.txt"), "p").unwrap();
        std::fs::create_dir(root.join("other")).unwrap();
        std::fs::write(root.join("other/b.txt"), "b").unwrap();
        let mut cfg = FilesConfig::new(&root);
        cfg.deny = vec!["vault/".into()];
        let provider = FilesProvider::new(cfg).unwrap();
        let inner = provider.inner_for_tests();
        let rel = RelPath::from_bytes(b"pub").unwrap();
        let listing = dir_listing(inner, &rel, "file:///pub", None).unwrap();
        assert!(listing.contains("a.txt"), "{listing}");

        std::fs::rename(root.join("pub"), root.join("pub.old")).unwrap();
        for target in [".ssh", "vault"] {
            std::os::unix::fs::symlink(target, root.join("pub")).unwrap();
            let err = dir_listing(inner, &rel, "file:///pub", None).unwrap_err();
            assert_eq!(err.kind, mcpr_core::ErrorKind::NotFound, "{target}: {err}");
            assert!(
                !err.message.contains("known_hosts") && !err.message.contains("plans"),
                "{err}"
            );
            std::fs::remove_file(root.join("pub")).unwrap();
        }
        // A link to an allowed directory lists that directory, as reading the link would.
        std::os::unix::fs::symlink("other", root.join("pub")).unwrap();
        let listing = dir_listing(inner, &rel, "file:///pub", None).unwrap();
        assert!(listing.contains("b.txt"), "{listing}");
    }

    /// A directory of `n` files `f00000.txt`..., a denied `.env` and a subdirectory, under
    /// `big/` of a new root, left to settle so that a listing of it may be kept.
    fn settled_big_dir(n: usize) -> (tempfile::TempDir, FilesProvider) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("big")).unwrap();
        for i in 0..n {
            std::fs::write(root.join(format!("big/f{i:05}.txt")), "x").unwrap();
        }
        std::fs::write(root.join("big/.env"), "secret").unwrap();
        std::fs::create_dir(root.join("big/sub")).unwrap();
        // File system time stamps are coarse: a listing is kept only once they are older
        // than DIR_CACHE_SETTLE, in whole seconds.
        std::thread::sleep(DIR_CACHE_SETTLE * 2 + std::time::Duration::from_millis(100));
        let provider = FilesProvider::new(FilesConfig::new(&root)).unwrap();
        (dir, provider)
    }

    fn scans(inner: &Inner) -> usize {
        inner
            .dir_cache
            .scans
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// One page of `big/` after `after`, 100 a page: its names and the next cursor.
    fn big_page(inner: &Inner, after: Option<&[u8]>) -> (Vec<String>, Option<Vec<u8>>) {
        let rel = RelPath::from_bytes(b"big").unwrap();
        let page = dir_page(inner, &rel, "file:///big", after, 100).unwrap();
        (page.items.into_iter().map(|m| m.name).collect(), page.next)
    }

    /// Paging a large directory reads it once for all its pages, not once a page: the first
    /// page keeps the sorted listing, and the next ones find it while the directory's stamp
    /// is unchanged. Every entry comes exactly once, the denied one never.
    #[test]
    fn paging_a_large_directory_does_not_rescan_it_per_page() {
        let (_dir, provider) = settled_big_dir(2000);
        let inner = provider.inner_for_tests();
        let before = scans(inner);
        let (mut seen, mut after, mut pages) = (Vec::new(), None, 0);
        loop {
            let (names, next) = big_page(inner, after.as_deref());
            seen.extend(names);
            pages += 1;
            match next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        assert_eq!(pages, 21);
        assert_eq!(
            scans(inner) - before,
            1,
            "one read of the directory for 21 pages"
        );
        let mut want: Vec<String> = (0..2000).map(|i| format!("big/f{i:05}.txt")).collect();
        want.push("big/sub".into());
        assert_eq!(seen, want, "each entry once, in order, .env left out");
    }

    /// A directory that changes between pages: the change is seen (the kept listing no
    /// longer matches the stamp), and every entry there throughout still comes exactly once,
    /// one added after the cursor too, one removed before its page not at all.
    #[test]
    fn paging_a_changing_directory_gives_every_lasting_entry_once() {
        let (dir, provider) = settled_big_dir(1000);
        let inner = provider.inner_for_tests();
        let root = dir.path().canonicalize().unwrap();
        let before = scans(inner);
        let (mut seen, next) = big_page(inner, None);
        let (names, mut after) = big_page(inner, next.as_deref());
        seen.extend(names);
        assert_eq!(
            scans(inner) - before,
            1,
            "the second page used the kept listing"
        );
        std::fs::write(root.join("big/f00050b.txt"), "before the cursor").unwrap();
        std::fs::write(root.join("big/g-new.txt"), "after the cursor").unwrap();
        std::fs::remove_file(root.join("big/f00500.txt")).unwrap();
        while let Some(a) = after {
            let (names, next) = big_page(inner, Some(&a));
            seen.extend(names);
            after = next;
        }
        assert!(scans(inner) - before > 1, "the change was noticed");
        let mut unique = seen.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), seen.len(), "no entry twice");
        for i in (0..1000).filter(|&i| i != 500) {
            let name = format!("big/f{i:05}.txt");
            assert!(seen.contains(&name), "{name} missing");
        }
        assert!(seen.contains(&"big/g-new.txt".to_owned()));
        assert!(!seen.contains(&"big/f00500.txt".to_owned()));
    }

    /// The bounded heap keeps exactly what sorting everything and taking the first `keep`
    /// would.
    #[test]
    fn smallest_keeps_the_first_in_order() {
        let mut seed = 7u64;
        for keep in [0, 1, 3, 100] {
            let mut all = Vec::new();
            let mut s = Smallest::new(keep);
            for _ in 0..500 {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let v = (seed >> 33) % 1000;
                all.push(v);
                s.push(v);
            }
            all.sort_unstable();
            all.truncate(keep);
            assert_eq!(s.into_sorted(), all, "keep {keep}");
        }
    }
}
