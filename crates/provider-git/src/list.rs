//! `resources/list`: the branches and tags, then the tree of the default ref recursively,
//! with stateless keyset cursors.
//!
//! A position is `r<full ref name>` in the first part and `t<path>` in the second. The tree
//! walk is a pre-order walk in git's tree order; resuming decodes only the trees on the
//! cursor's path (cached by id), so a page costs O(page + depth) tree lookups and memory
//! never holds the whole tree.

use gix::ObjectId;
use mcpr_core::{Error, ErrorKind, Page, ResourceMeta, Result};

use crate::history::last_changed;
use crate::provider::Inner;
use crate::read::mime_by_extension;
use crate::repo::{Entry, Kind, Repo, Tree, git_order, rfc3339};
use crate::uri::{TreePath, commit_uri, path_uri};

/// Where a listing resumes.
enum Position {
    Start,
    /// After this full ref name.
    Ref(String),
    /// After this path in the default ref's tree.
    Tree(TreePath),
}

fn decode_position(after: Option<&[u8]>) -> Result<Position> {
    let bad = || {
        Error::new(
            ErrorKind::InvalidCursor,
            "invalid cursor: its position is not a git listing position",
        )
    };
    let Some(a) = after else {
        return Ok(Position::Start);
    };
    match a.split_first() {
        Some((b'r', name)) => Ok(Position::Ref(
            std::str::from_utf8(name).map_err(|_| bad())?.to_owned(),
        )),
        Some((b't', path)) => {
            let p = TreePath::from_bytes(path).filter(|p| !p.is_root());
            Ok(Position::Tree(p.ok_or_else(bad)?))
        }
        _ => Err(bad()),
    }
}

/// One page of the listing.
pub(crate) fn list_page(
    inner: &Inner,
    after: Option<&[u8]>,
    limit: usize,
) -> Result<Page<ResourceMeta>> {
    let pos = decode_position(after)?;
    let h = inner.repo.handle();
    let base = inner.bases.canonical();
    // (position bytes, meta) for up to limit + 1 items: the extra one proves a next page.
    let mut items: Vec<(Vec<u8>, ResourceMeta)> = Vec::new();

    let tree_after = match pos {
        Position::Tree(p) => Some(p),
        Position::Start | Position::Ref(_) => {
            let refs = inner.repo.branches_and_tags(&h)?;
            let start = match &pos {
                Position::Ref(r) => refs.partition_point(|(n, _)| n.as_str() <= r.as_str()),
                _ => 0,
            };
            let all = inner.repo.all_ref_names(&h)?;
            let hex_len = Repo::hex_len(&h);
            for (full, target) in &refs[start..] {
                if items.len() > limit {
                    break;
                }
                // A tag of a tree or blob is no commit resource; skip it.
                let Some(commit) = inner.repo.peel_to_commit(&h, *target)? else {
                    continue;
                };
                let info = inner.repo.commit(&h, commit)?;
                let rev = inner.repo.uri_rev(full, &all, hex_len);
                let what = if full.starts_with("refs/tags/") {
                    "tag"
                } else {
                    "branch"
                };
                let meta = ResourceMeta {
                    uri: commit_uri(base, &rev),
                    name: rev.clone(),
                    title: Some(format!("{what} {rev}")),
                    description: Some(format!(
                        "{what} {full} at {}: {}",
                        &commit.to_hex_with_len(12),
                        info.summary()
                    )),
                    mime_type: Some("application/json".into()),
                    size: None,
                    last_modified: Some(rfc3339(info.committer.seconds)),
                };
                let mut p = b"r".to_vec();
                p.extend_from_slice(full.as_bytes());
                items.push((p, meta));
            }
            None
        }
    };

    if items.len() <= limit {
        let want = limit + 1 - items.len();
        let rev = inner
            .repo
            .default_rev(&h, inner.config.default_ref.as_deref());
        if let Some(commit) = inner.repo.resolve_rev(&h, &rev)? {
            let (root, _, _) = inner.repo.commit_links(&h, commit)?;
            let found = walk(inner, &h, root, tree_after.as_ref(), want)?;
            // Only the entries that will be served need sizes and dates.
            let served = found.len().min(limit - items.len());
            let paths: Vec<TreePath> = found[..served].iter().map(|(p, _)| p.clone()).collect();
            let dates = last_changed(inner, &h, commit, &paths)?;
            for (i, (path, entry)) in found.into_iter().enumerate() {
                let meta = if i < served {
                    entry_meta(inner, &h, base, &rev, &path, &entry, dates[i])?
                } else {
                    ResourceMeta::default()
                };
                let mut p = b"t".to_vec();
                p.extend_from_slice(path.as_bytes());
                items.push((p, meta));
            }
        }
    }

    Ok(Page::from_lookahead(items, limit))
}

/// The path and tree of the directory `u` (`target` parsed) names: not found when denied or
/// absent, not a directory when it names anything but a tree.
fn dir_tree(
    inner: &Inner,
    h: &gix::Repository,
    u: &str,
    target: &crate::uri::GitUri,
) -> Result<(TreePath, Tree)> {
    let path = target.path.clone().unwrap_or_else(TreePath::root);
    if inner.denied(&path) {
        return Err(Error::not_found(u));
    }
    let commit = inner
        .repo
        .resolve_rev(h, &target.rev)
        .map_err(|e| e.with_uri(u))?
        .ok_or_else(|| Error::not_found(u))?;
    let (root, _, _) = inner
        .repo
        .commit_links(h, commit)
        .map_err(|e| e.with_uri(u))?;
    let tree_id = if path.is_root() {
        root
    } else {
        let entry = inner
            .repo
            .entry_at(h, root, &path)
            .map_err(|e| e.with_uri(u))?
            .ok_or_else(|| Error::not_found(u))?;
        if entry.kind != Kind::Tree {
            return Err(mcpr_core::not_a_directory(u));
        }
        entry.id
    };
    let tree = inner.repo.tree(h, tree_id).map_err(|e| e.with_uri(u))?;
    Ok((path, tree))
}

/// [`mcpr_core::Provider::folder_details`] of the tree `uri` names: the permission bits git
/// records for each file it shows (`100755` as `0o755`, `100644` as `0o644`; links and
/// submodules have none), and each entry the deny list hides, with the rule.
pub(crate) fn folder_details(
    inner: &Inner,
    uri: &mcpr_core::ResourceUri,
    target: &crate::uri::GitUri,
) -> Result<mcpr_core::FolderDetails> {
    let u = uri.as_str();
    let h = inner.repo.handle();
    let (path, tree) = dir_tree(inner, &h, u, target)?;
    let base = inner.bases.canonical();
    let mut out = mcpr_core::FolderDetails::default();
    for e in tree.iter() {
        let child = path.join(&e.name);
        let is_tree = e.kind == Kind::Tree;
        if !crate::uri::valid_component(&e.name) {
            continue;
        }
        if inner.entry_denied(&child, is_tree) {
            if out.left_out.len() < mcpr_core::MAX_LEFT_OUT {
                let shown = child.display() + if is_tree { "/" } else { "" };
                out.left_out
                    .push((shown, "the mount's deny list names it".to_owned()));
            } else {
                out.more_left_out += 1;
            }
            continue;
        }
        let mode = match e.kind {
            Kind::Blob => 0o644,
            Kind::Exec => 0o755,
            Kind::Tree | Kind::Link | Kind::Submodule => continue,
        };
        out.modes.push((path_uri(base, &target.rev, &child), mode));
    }
    Ok(out)
}

/// One page of the direct children of the tree `uri` names (SEP-2640 directory reads), after
/// entry name `after` in git's tree order, at most `limit`: the entries a directory read
/// shows (deny rules applied), trees as [`DIRECTORY_MIME_TYPE`], everything else as
/// `resources/list` describes it (without the last-change date, which costs a history walk
/// per entry). A commit URI (`git://main`) names its root tree.
pub(crate) fn dir_page(
    inner: &Inner,
    uri: &mcpr_core::ResourceUri,
    target: &crate::uri::GitUri,
    after: Option<&[u8]>,
    limit: usize,
) -> Result<Page<ResourceMeta>> {
    let u = uri.as_str();
    if !matches!(target.query, crate::uri::Query::None) {
        return Err(Error::invalid_params(format!(
            "{u} has a query; a directory read takes the directory's URI and a cursor"
        )));
    }
    let h = inner.repo.handle();
    let (path, tree) = dir_tree(inner, &h, u, target)?;
    let base = inner.bases.canonical();
    // A position is an entry name; git orders a tree `a` as `a/`, so the comparison needs
    // the kind, which the name alone does not carry: find the name, or its place.
    let start = after.map_or(0, |a| {
        tree.iter()
            .position(|e| e.name.as_slice() == a)
            .map_or_else(
                || {
                    tree.partition_point(|e| {
                        git_order(&e.name, e.kind == Kind::Tree, a, false).is_le()
                    })
                },
                |i| i + 1,
            )
    });
    let mut items = Vec::new();
    for e in &tree[start.min(tree.len())..] {
        if items.len() > limit {
            break;
        }
        let child = path.join(&e.name);
        if !crate::uri::valid_component(&e.name) || inner.entry_denied(&child, e.kind == Kind::Tree)
        {
            continue;
        }
        let meta = if e.kind == Kind::Tree {
            ResourceMeta {
                uri: path_uri(base, &target.rev, &child),
                name: child.display(),
                mime_type: Some(mcpr_core::DIRECTORY_MIME_TYPE.to_owned()),
                ..ResourceMeta::default()
            }
        } else {
            entry_meta(inner, &h, base, &target.rev, &child, e, None)?
        };
        items.push((e.name.clone(), meta));
    }
    Ok(Page::from_lookahead(items, limit))
}

/// The listing entry of a non-tree entry at `path`.
fn entry_meta(
    inner: &Inner,
    h: &gix::Repository,
    base: &str,
    rev: &str,
    path: &TreePath,
    entry: &Entry,
    date: Option<i64>,
) -> Result<ResourceMeta> {
    let (mime, size, description) = match entry.kind {
        Kind::Blob | Kind::Exec => (
            mime_by_extension(path.as_bytes()).map(str::to_owned),
            Some(inner.repo.size(h, entry.id)?),
            None,
        ),
        Kind::Link => (
            Some("inode/symlink".to_owned()),
            Some(inner.repo.size(h, entry.id)?),
            Some("symbolic link (reads as its target path; never followed)".to_owned()),
        ),
        Kind::Submodule => (
            Some("application/json".to_owned()),
            None,
            Some(format!("submodule at commit {}", entry.id)),
        ),
        Kind::Tree => (None, None, None),
    };
    Ok(ResourceMeta {
        uri: path_uri(base, rev, path),
        name: path.display(),
        title: None,
        description,
        mime_type: mime,
        size,
        last_modified: date.map(rfc3339),
    })
}

/// One level of the walk: a tree and the next index to visit.
struct Level {
    path: TreePath,
    tree: Tree,
    next: usize,
}

/// Up to `want` non-tree entries after `after`, in pre-order git tree order.
pub(crate) fn walk(
    inner: &Inner,
    h: &gix::Repository,
    root: ObjectId,
    after: Option<&TreePath>,
    want: usize,
) -> Result<Vec<(TreePath, Entry)>> {
    let mut stack = vec![Level {
        path: TreePath::root(),
        tree: inner.repo.tree(h, root)?,
        next: 0,
    }];
    if let Some(after) = after {
        // Rebuild the walk position. Every component but the last was a tree when the
        // cursor was made; the last was a non-tree entry. Keys compare in git's order.
        let comps: Vec<&[u8]> = after.components().collect();
        for (depth, comp) in comps.iter().enumerate() {
            let is_last = depth + 1 == comps.len();
            let level = stack.last_mut().expect("never empty here");
            let pos = level.tree.partition_point(|e| {
                git_order(&e.name, e.kind == Kind::Tree, comp, !is_last).is_le()
            });
            level.next = pos;
            if is_last {
                break;
            }
            let descend = pos > 0
                && level.tree[pos - 1].name.as_slice() == *comp
                && level.tree[pos - 1].kind == Kind::Tree;
            if !descend {
                break;
            }
            let child = Level {
                path: level.path.join(comp),
                tree: inner.repo.tree(h, level.tree[pos - 1].id)?,
                next: 0,
            };
            stack.push(child);
        }
    }
    let mut out = Vec::new();
    while let Some(level) = stack.last_mut() {
        if out.len() == want {
            break;
        }
        let Some(entry) = level.tree.get(level.next) else {
            stack.pop();
            continue;
        };
        level.next += 1;
        // A crafted tree may hold names no URI can address (`..`, `.git`): skip them.
        if !crate::uri::valid_component(&entry.name) {
            continue;
        }
        let path = level.path.join(&entry.name);
        // Denied entries are not listed; a denied tree is not entered.
        if inner.entry_denied(&path, entry.kind == Kind::Tree) {
            continue;
        }
        if entry.kind == Kind::Tree {
            let tree = inner.repo.tree(h, entry.id)?;
            stack.push(Level {
                path,
                tree,
                next: 0,
            });
        } else {
            out.push((path, entry.clone()));
        }
    }
    Ok(out)
}
