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
use crate::rules::{IgnoreStack, load_ignore, stack_for};

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

/// One level of the walk: a directory's visible entries and the next index to visit.
struct Level {
    rel: RelPath,
    entries: Vec<Entry>,
    next: usize,
    ignores: IgnoreStack,
}

impl Level {
    fn open(inner: &Inner, rel: RelPath, parent: &IgnoreStack) -> Option<Self> {
        let ignores = if inner.rules.respect_gitignore {
            parent.push(load_ignore(&inner.root, &rel))
        } else {
            parent.clone()
        };
        let entries = read_entries(inner, &rel, Some(&ignores)).ok()?;
        Some(Self {
            rel,
            entries,
            next: 0,
            ignores,
        })
    }
}

/// Serve one page of files after `after` (a root-relative path from a previous page).
pub(crate) fn list_page(
    inner: &Inner,
    after: Option<&[u8]>,
    limit: usize,
) -> Result<Page<ResourceMeta>> {
    let root_ignores = IgnoreStack::default();
    let mut stack: Vec<Level> = Vec::new();
    let root_level = Level::open(inner, RelPath::root(), &root_ignores).ok_or_else(|| {
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
            let found = pos > 0
                && level.entries[pos - 1].name.as_slice() == *comp
                && level.entries[pos - 1].kind == Kind::Dir;
            if !found {
                break;
            }
            let child = level.rel.join(comp);
            let ignores = level.ignores.clone();
            match Level::open(inner, child, &ignores) {
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
        match entry.kind {
            Kind::Dir => {
                let ignores = level.ignores.clone();
                if let Some(l) = Level::open(inner, rel, &ignores) {
                    stack.push(l);
                }
            }
            Kind::File | Kind::Symlink => {
                let Some(meta) = file_meta(inner, &rel, entry.kind == Kind::Symlink) else {
                    continue;
                };
                if items.len() == limit {
                    // One more file exists: the page is full and there is a next page.
                    has_more = true;
                    break;
                }
                items.push(meta);
                last = Some(rel);
            }
            Kind::Other => {}
        }
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
