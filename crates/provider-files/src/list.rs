//! Recursive listing with stateless keyset cursors.
//!
//! The order is a pre-order walk with each directory's entries sorted by name bytes, which
//! is exactly the component-wise byte order of the paths. A cursor is the last path served;
//! resuming re-reads only the directories on that path and starts after it, so a page costs
//! O(page + depth × directory size) and memory does not grow with the tree.

use std::os::unix::ffi::OsStrExt;

use mcpr_core::{Page, ResourceMeta, Result};

use crate::error::map_io;
use crate::path::{RelPath, valid_component};
use crate::provider::Inner;
use crate::rules::{IgnoreStack, load_ignore_in, stack_for};

/// What a directory entry is, from `d_type` (no extra stat).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Dir,
    Symlink,
    Other,
}

/// One visible entry of a directory.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) name: Vec<u8>,
    pub(crate) kind: Kind,
}

/// Read directory `rel` through the sandbox and return its entries that the mount shows,
/// sorted by name. Denied and hidden entries are dropped here, ignored ones only when
/// `ignores` is given.
pub(crate) fn read_entries(
    inner: &Inner,
    rel: &RelPath,
    ignores: Option<&IgnoreStack>,
) -> std::io::Result<Vec<Entry>> {
    let mut out = Vec::new();
    for entry in inner.root.read_dir(rel.as_path())? {
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
        let child = rel.join(name);
        let is_dir = kind == Kind::Dir;
        if inner.rules.entry_denied(&child, name, is_dir) {
            continue;
        }
        if ignores.is_some_and(|s| s.is_ignored(&child, is_dir)) {
            continue;
        }
        out.push(Entry {
            name: name.to_vec(),
            kind,
        });
    }
    out.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Read an open directory's entries with valid names, sorted by name, rules not yet applied:
/// the walk applies them only to the entries it visits, so resuming after a cursor in a large
/// directory does not test every name before it.
fn read_sorted(dir: &cap_std::fs::Dir) -> std::io::Result<Vec<Entry>> {
    let mut out = Vec::new();
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
        out.push(Entry {
            name: name.to_vec(),
            kind,
        });
    }
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

/// How many directory entries the cache holds at most, over all directories (a few MiB).
const DIR_CACHE_ENTRIES: usize = 100_000;
/// A directory changed more recently than this is not cached: file system timestamps are
/// coarse, and a change within the same tick as our read would leave the stamp unchanged.
const DIR_CACHE_SETTLE: std::time::Duration = std::time::Duration::from_secs(1);

/// Sorted entries of recently walked directories, validated on every use by the directory's
/// stamp (one `fstat` of the handle the walk opens anyway). Resuming a page re-reads the
/// directories on the cursor's path; in a large tree that was most of a page's cost.
#[derive(Default)]
pub(crate) struct DirCache {
    map: std::sync::Mutex<DirCacheMap>,
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
        use cap_std::fs::MetadataExt as _;
        let md = dir.dir_metadata()?;
        let stamp = DirStamp {
            dev: md.dev(),
            ino: md.ino(),
            mtime: (md.mtime(), md.mtime_nsec()),
            ctime: (md.ctime(), md.ctime_nsec()),
        };
        {
            let mut map = self.map.lock().expect("dir cache lock");
            map.tick += 1;
            let tick = map.tick;
            if let Some((s, used, entries)) = map.dirs.get_mut(rel.as_bytes())
                && *s == stamp
            {
                *used = tick;
                return Ok(entries.clone());
            }
        }
        let entries = std::sync::Arc::new(read_sorted(dir)?);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let settled = |(secs, _): (i64, i64)| secs + (DIR_CACHE_SETTLE.as_secs() as i64) < now;
        if settled(stamp.mtime) && settled(stamp.ctime) && entries.len() <= DIR_CACHE_ENTRIES {
            let mut map = self.map.lock().expect("dir cache lock");
            if let Some((_, _, old)) = map.dirs.remove(rel.as_bytes()) {
                map.entries -= old.len();
            }
            // Evict the least recently used directories until the new one fits.
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
        Ok(entries)
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

    /// Child directory `name` of this level.
    fn child(&self, inner: &Inner, name: &[u8]) -> Option<Self> {
        let dir = self.dir.open_dir(std::ffi::OsStr::from_bytes(name)).ok()?;
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
    Ok(Page { items, next })
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
pub(crate) fn dir_listing(
    inner: &Inner,
    rel: &RelPath,
    uri: &str,
    after: Option<&[u8]>,
) -> Result<String> {
    let ignores = stack_for(&inner.root, rel, inner.rules.respect_gitignore);
    let entries = read_entries(inner, rel, Some(&ignores)).map_err(|e| map_io(e, uri))?;
    let start = after.map_or(0, |a| entries.partition_point(|e| e.name.as_slice() <= a));
    let mut out = Vec::new();
    let mut truncated = false;
    let mut last_name = None;
    for e in &entries[start..] {
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
        if let Ok(md) = inner.root.symlink_metadata(child.as_path()) {
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
