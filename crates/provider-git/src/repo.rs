//! Read access to one repository through gix: a pool of thread-local handles, ref
//! resolution, commits, and trees decoded once and cached by id.
//!
//! Refs come from gix (loose refs and packed-refs) or, for a repository with reftable ref
//! storage, from our own reader (`reftable.rs`); every ref lookup and listing goes through
//! the few methods here that choose between them. Objects always come from gix.
//!
//! Everything here is blocking I/O; callers run it on the blocking pool. Nothing here writes:
//! gix is only asked to find refs and objects.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use gix::ObjectId;
use gix::objs::tree::EntryKind;
use mcpr_core::{Error, Result};

use crate::error::internal_plain;
use crate::reftable;
use crate::uri::TreePath;

/// How many decoded tree entries the tree cache holds before it starts over. A 100,000-entry
/// directory fits; memory stays bounded whatever the repository.
const TREE_CACHE_ENTRIES: usize = 400_000;

/// How many idle thread-local handles are kept for reuse.
const POOL_MAX: usize = 8;

/// What a tree entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Tree,
    /// A regular file (`100644`).
    Blob,
    /// An executable file (`100755`).
    Exec,
    /// A symbolic link (`120000`): its blob is the target path. Never followed.
    Link,
    /// A submodule (`160000`, a gitlink): the id is a commit of another repository.
    Submodule,
}

impl Kind {
    fn from_entry(kind: EntryKind) -> Self {
        match kind {
            EntryKind::Tree => Kind::Tree,
            EntryKind::Blob => Kind::Blob,
            EntryKind::BlobExecutable => Kind::Exec,
            EntryKind::Link => Kind::Link,
            EntryKind::Commit => Kind::Submodule,
        }
    }

    /// The word directory reads and metadata use.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::Tree => "directory",
            Kind::Blob | Kind::Exec => "file",
            Kind::Link => "symlink",
            Kind::Submodule => "submodule",
        }
    }

    pub(crate) fn mode(self) -> &'static str {
        match self {
            Kind::Tree => "040000",
            Kind::Blob => "100644",
            Kind::Exec => "100755",
            Kind::Link => "120000",
            Kind::Submodule => "160000",
        }
    }
}

/// One decoded tree entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) name: Vec<u8>,
    pub(crate) kind: Kind,
    pub(crate) id: ObjectId,
}

/// A decoded tree, in git's order (trees compare as if their name ended in `/`).
pub(crate) type Tree = Arc<Vec<Entry>>;

/// Git's tree order for `(name, is_tree)` keys.
pub(crate) fn git_order(a: &[u8], a_tree: bool, b: &[u8], b_tree: bool) -> std::cmp::Ordering {
    gix::objs::tree::name_order(a, a_tree, b, b_tree)
}

/// A person and a time, from a commit.
#[derive(Debug, Clone)]
pub(crate) struct Person {
    pub(crate) name: String,
    pub(crate) email: String,
    /// Seconds since the epoch (UTC).
    pub(crate) seconds: i64,
}

/// The fields of a commit that are served.
#[derive(Debug, Clone)]
pub(crate) struct CommitInfo {
    pub(crate) id: ObjectId,
    pub(crate) tree: ObjectId,
    pub(crate) parents: Vec<ObjectId>,
    pub(crate) author: Person,
    pub(crate) committer: Person,
    pub(crate) message: String,
}

impl CommitInfo {
    /// The first line(s) of the message, as `git log --oneline` shows it.
    pub(crate) fn summary(&self) -> String {
        self.message
            .split("\n\n")
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// RFC 3339 (UTC, seconds) for a git timestamp.
pub(crate) fn rfc3339(seconds: i64) -> String {
    let t = if seconds >= 0 {
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(seconds as u64)
    } else {
        std::time::UNIX_EPOCH - std::time::Duration::from_secs(seconds.unsigned_abs())
    };
    humantime::format_rfc3339_seconds(t).to_string()
}

/// Where a repository keeps its refs.
pub(crate) enum RefStore {
    /// Loose refs and `packed-refs`, read by gix.
    Files,
    /// Reftable stacks (`reftable/tables.list`), read by `reftable.rs`, because gix cannot.
    Reftable(reftable::Store),
}

fn reftable_error(e: reftable::Error) -> Error {
    internal_plain(e, "reading the reftable ref storage")
}

/// The repository a mount serves.
pub(crate) struct Repo {
    shared: gix::ThreadSafeRepository,
    /// Idle handles: a thread-local `gix::Repository` keeps pack and object caches, so reusing
    /// one is much cheaper than making a new one per request.
    pool: Mutex<Vec<gix::Repository>>,
    trees: Mutex<TreeCache>,
    /// Where `HEAD` (and, for a linked worktree, its own refs) live.
    pub(crate) git_dir: PathBuf,
    /// Where `refs/` and `packed-refs` live.
    pub(crate) common_dir: PathBuf,
    /// How refs are read.
    pub(crate) refs: RefStore,
}

#[derive(Default)]
struct TreeCache {
    map: HashMap<ObjectId, Tree>,
    entries: usize,
}

/// A pooled handle; goes back to the pool when dropped.
pub(crate) struct Handle<'a> {
    repo: Option<gix::Repository>,
    owner: &'a Repo,
}

impl std::ops::Deref for Handle<'_> {
    type Target = gix::Repository;
    fn deref(&self) -> &gix::Repository {
        self.repo.as_ref().expect("present until drop")
    }
}

impl Drop for Handle<'_> {
    fn drop(&mut self) {
        if let Some(r) = self.repo.take() {
            let mut pool = mcpr_core::sync::lock(&self.owner.pool);
            if pool.len() < POOL_MAX {
                pool.push(r);
            }
        }
    }
}

impl Repo {
    /// Open the repository at `path` (a work tree or a bare repository), read-only.
    ///
    /// Only the repository's own config is read (no global, system or environment config),
    /// so what is served does not depend on who runs the server.
    pub(crate) fn open(path: &Path) -> Result<Self> {
        let opts = gix::open::Options::isolated();
        let shared = gix::ThreadSafeRepository::open_opts(path, opts).map_err(|e| {
            Error::invalid_params(format!(
                "git repository {} cannot be opened: {e}",
                path.display()
            ))
        })?;
        let local = shared.to_thread_local();
        let git_dir = local.git_dir().to_path_buf();
        let common_dir = local.common_dir().to_path_buf();
        // gix reads loose refs and packed-refs only (in a reftable repository it finds
        // `HEAD` pointing at `refs/heads/.invalid` and an empty `refs/`), so reftable refs
        // are read by our own reader. git decides by this setting alone, and so do we.
        let storage = local.config_snapshot().string("extensions.refStorage");
        let refs = match storage.as_ref().map(|v| v.as_slice()) {
            None => RefStore::Files,
            Some(v) if v.eq_ignore_ascii_case(b"files") => RefStore::Files,
            Some(v) if v.eq_ignore_ascii_case(b"reftable") => {
                let store =
                    reftable::Store::new(&git_dir, &common_dir, local.object_hash().len_in_bytes());
                // A stack that cannot be read now is refused at start-up, with the reason.
                store.view().map_err(|e| {
                    Error::invalid_params(format!(
                        "git repository {} uses reftable ref storage that cannot be read: {e}",
                        path.display()
                    ))
                })?;
                RefStore::Reftable(store)
            }
            Some(v) => {
                return Err(Error::invalid_params(format!(
                    "git repository {} uses ref storage {:?}, which is not supported (only \"files\" and \"reftable\" are)",
                    path.display(),
                    String::from_utf8_lossy(v)
                )));
            }
        };
        Ok(Self {
            shared,
            pool: Mutex::new(vec![local]),
            trees: Mutex::new(TreeCache::default()),
            git_dir,
            common_dir,
            refs,
        })
    }

    /// A handle for this thread's work.
    pub(crate) fn handle(&self) -> Handle<'_> {
        let pooled = mcpr_core::sync::lock(&self.pool).pop();
        let repo = pooled.unwrap_or_else(|| {
            let mut r = self.shared.to_thread_local();
            // Walking history re-reads the same trees and commits; a small object cache
            // makes lastModified and history pages several times cheaper.
            r.object_cache_size_if_unset(4 * 1024 * 1024);
            r
        });
        Handle {
            repo: Some(repo),
            owner: self,
        }
    }

    /// The length of a full object id in hex for this repository.
    pub(crate) fn hex_len(h: &gix::Repository) -> usize {
        h.object_hash().len_in_hex()
    }

    /// Resolve a ref as written in a URI to a commit: a full commit id, `HEAD`, a full ref
    /// name (`refs/heads/x`), a short name (git's order: `refs/<n>`, tags, branches,
    /// remotes), or an abbreviated commit id (4 or more hex digits, refs win). Annotated
    /// tags are peeled. `Ok(None)` when it names no commit.
    pub(crate) fn resolve_rev(&self, h: &gix::Repository, rev: &str) -> Result<Option<ObjectId>> {
        let hex_len = Self::hex_len(h);
        let is_hex = rev.bytes().all(|b| b.is_ascii_hexdigit());
        if is_hex && rev.len() == hex_len {
            let id = ObjectId::from_hex(rev.to_ascii_lowercase().as_bytes())
                .map_err(|e| internal_plain(e, "parsing an object id"))?;
            return self.peel_to_commit(h, id);
        }
        match &self.refs {
            RefStore::Files => {
                // An invalid ref name (`a..b`, `x:y`) or an unreadable ref names nothing.
                if let Ok(Some(mut r)) = h.try_find_reference(rev) {
                    return match r.peel_to_id() {
                        Ok(id) => self.peel_to_commit(h, id.detach()),
                        Err(_) => Ok(None),
                    };
                }
            }
            RefStore::Reftable(store) => {
                let view = store.view().map_err(reftable_error)?;
                if let Some((_, value)) = view.find(rev) {
                    // A dangling symbolic ref names nothing, as with gix.
                    return match view.peel(value) {
                        Some(id) => self.peel_to_commit(h, id),
                        None => Ok(None),
                    };
                }
            }
        }
        if is_hex && rev.len() >= 4 && rev.len() < hex_len {
            let prefix = gix::hash::Prefix::from_hex(&rev.to_ascii_lowercase())
                .map_err(|e| internal_plain(e, "parsing an abbreviated id"))?;
            return match h.objects.lookup_prefix(prefix, None) {
                Ok(Some(Ok(id))) => self.peel_to_commit(h, id),
                Ok(Some(Err(()))) => Err(Error::invalid_params(format!(
                    "the abbreviated commit id {rev} is ambiguous; use more digits"
                ))),
                Ok(None) => Ok(None),
                Err(e) => Err(internal_plain(e, "looking up an abbreviated id")),
            };
        }
        Ok(None)
    }

    /// Follow annotated tags to a commit; `None` for a missing object or one that is not
    /// (a tag of) a commit.
    pub(crate) fn peel_to_commit(
        &self,
        h: &gix::Repository,
        mut id: ObjectId,
    ) -> Result<Option<ObjectId>> {
        for _ in 0..32 {
            let Some(obj) = h
                .try_find_object(id)
                .map_err(|e| internal_plain(e, "reading an object"))?
            else {
                return Ok(None);
            };
            match obj.kind {
                gix::objs::Kind::Commit => return Ok(Some(id)),
                gix::objs::Kind::Tag => {
                    let tag = gix::objs::TagRef::from_bytes(&obj.data, h.object_hash())
                        .map_err(|e| internal_plain(e, "decoding a tag"))?;
                    id = tag.target();
                }
                _ => return Ok(None),
            }
        }
        Ok(None)
    }

    /// Decode commit `id`.
    pub(crate) fn commit(&self, h: &gix::Repository, id: ObjectId) -> Result<CommitInfo> {
        let obj = h
            .find_object(id)
            .map_err(|e| internal_plain(e, "reading a commit"))?;
        let c = gix::objs::CommitRef::from_bytes(&obj.data, h.object_hash())
            .map_err(|e| internal_plain(e, "decoding a commit"))?;
        let person = |s: std::result::Result<gix::actor::SignatureRef<'_>, _>| -> Person {
            match s {
                Ok(s) => {
                    let s = s.trim();
                    Person {
                        name: s.name.to_string(),
                        email: s.email.to_string(),
                        seconds: s.seconds(),
                    }
                }
                Err(_) => Person {
                    name: String::new(),
                    email: String::new(),
                    seconds: 0,
                },
            }
        };
        Ok(CommitInfo {
            id,
            tree: c.tree(),
            parents: c.parents().collect(),
            author: person(c.author()),
            committer: person(c.committer()),
            message: c.message.to_string(),
        })
    }

    /// The tree and first parent of commit `id`, without decoding the rest.
    pub(crate) fn commit_links(
        &self,
        h: &gix::Repository,
        id: ObjectId,
    ) -> Result<(ObjectId, Option<ObjectId>, i64)> {
        let c = self.commit(h, id)?;
        Ok((c.tree, c.parents.first().copied(), c.committer.seconds))
    }

    /// Decode tree `id` (cached: trees are immutable, so an entry never goes stale).
    pub(crate) fn tree(&self, h: &gix::Repository, id: ObjectId) -> Result<Tree> {
        if let Some(t) = mcpr_core::sync::lock(&self.trees).map.get(&id) {
            return Ok(t.clone());
        }
        let obj = h
            .find_object(id)
            .map_err(|e| internal_plain(e, "reading a tree"))?;
        if obj.kind != gix::objs::Kind::Tree {
            return Err(Error::internal(format!("object {id} is not a tree")));
        }
        let mut entries = Vec::new();
        for e in gix::objs::TreeRefIter::from_bytes(&obj.data, h.object_hash()) {
            let e = e.map_err(|e| internal_plain(e, "decoding a tree"))?;
            entries.push(Entry {
                name: e.filename.to_vec(),
                kind: Kind::from_entry(e.mode.kind()),
                id: e.oid.to_owned(),
            });
        }
        let tree: Tree = Arc::new(entries);
        let mut cache = mcpr_core::sync::lock(&self.trees);
        if cache.entries + tree.len() > TREE_CACHE_ENTRIES {
            cache.map.clear();
            cache.entries = 0;
        }
        if tree.len() <= TREE_CACHE_ENTRIES {
            cache.entries += tree.len();
            cache.map.insert(id, tree.clone());
        }
        Ok(tree)
    }

    /// The entry named `name` in `tree`, found by binary search in git's order.
    pub(crate) fn find_in(tree: &[Entry], name: &[u8]) -> Option<Entry> {
        // The entry may be a tree (sorts as `name/`) or not (sorts as `name`).
        for as_tree in [false, true] {
            let pos = tree.partition_point(|e| {
                git_order(&e.name, e.kind == Kind::Tree, name, as_tree).is_lt()
            });
            if let Some(e) = tree.get(pos)
                && e.name == name
                && (e.kind == Kind::Tree) == as_tree
            {
                return Some(e.clone());
            }
        }
        None
    }

    /// The entry at `path` under root tree `root` (the root itself for an empty path);
    /// `None` when absent or when a component below a non-tree is asked for.
    pub(crate) fn entry_at(
        &self,
        h: &gix::Repository,
        root: ObjectId,
        path: &TreePath,
    ) -> Result<Option<Entry>> {
        let mut cur = Entry {
            name: Vec::new(),
            kind: Kind::Tree,
            id: root,
        };
        for comp in path.components() {
            if cur.kind != Kind::Tree {
                return Ok(None);
            }
            let tree = self.tree(h, cur.id)?;
            match Self::find_in(&tree, comp) {
                Some(e) => cur = e,
                None => return Ok(None),
            }
        }
        Ok(Some(cur))
    }

    /// The size of object `id` from its header, without inflating the whole object.
    pub(crate) fn size(&self, h: &gix::Repository, id: ObjectId) -> Result<u64> {
        h.find_header(id)
            .map(|hd| hd.size())
            .map_err(|e| internal_plain(e, "reading an object header"))
    }

    /// The bytes of blob `id`.
    pub(crate) fn blob(&self, h: &gix::Repository, id: ObjectId) -> Result<Vec<u8>> {
        let mut obj = h
            .find_object(id)
            .map_err(|e| internal_plain(e, "reading a blob"))?;
        Ok(std::mem::take(&mut obj.data))
    }

    /// Every ref under `refs/heads/` and `refs/tags/` with its unpeeled target, sorted by
    /// full name. Names that are not UTF-8 are skipped (they cannot be written in a URI
    /// that round-trips through every client).
    pub(crate) fn branches_and_tags(&self, h: &gix::Repository) -> Result<Vec<(String, ObjectId)>> {
        let mut out = Vec::new();
        if let RefStore::Reftable(store) = &self.refs {
            let view = store.view().map_err(reftable_error)?;
            for prefix in ["refs/heads/", "refs/tags/"] {
                for (name, value) in view.prefixed(prefix.as_bytes()) {
                    // Symbolic refs are skipped, as gix's `try_id` does.
                    let (Ok(name), Some(id)) = (std::str::from_utf8(name), value.id()) else {
                        continue;
                    };
                    out.push((name.to_owned(), id));
                }
            }
            out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            return Ok(out);
        }
        let platform = h
            .references()
            .map_err(|e| internal_plain(e, "listing refs"))?;
        for prefix in ["refs/heads/", "refs/tags/"] {
            let iter = platform
                .prefixed(prefix)
                .map_err(|e| internal_plain(e, "listing refs"))?;
            for r in iter {
                // A broken ref is skipped, as git does in its listings.
                let Ok(r) = r else { continue };
                let Ok(name) = std::str::from_utf8(r.name().as_bstr()) else {
                    continue;
                };
                let Some(id) = r.try_id() else { continue };
                out.push((name.to_owned(), id.detach()));
            }
        }
        out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// The full names of every ref (all namespaces), for ambiguity checks.
    pub(crate) fn all_ref_names(
        &self,
        h: &gix::Repository,
    ) -> Result<std::collections::HashSet<String>> {
        if let RefStore::Reftable(store) = &self.refs {
            let view = store.view().map_err(reftable_error)?;
            return Ok(view
                .prefixed(b"")
                .into_iter()
                .filter_map(|(n, _)| std::str::from_utf8(n).ok().map(str::to_owned))
                .collect());
        }
        let platform = h
            .references()
            .map_err(|e| internal_plain(e, "listing refs"))?;
        let iter = platform
            .all()
            .map_err(|e| internal_plain(e, "listing refs"))?;
        Ok(iter
            .filter_map(|r| r.ok())
            .filter_map(|r| {
                std::str::from_utf8(r.name().as_bstr())
                    .ok()
                    .map(str::to_owned)
            })
            .collect())
    }

    /// How a URI should spell full ref name `full`: its short name when git's lookup of the
    /// short name finds exactly this ref, else the full name (`refs/heads/v1` when a tag
    /// `v1` shadows the branch).
    pub(crate) fn uri_rev(
        &self,
        full: &str,
        all: &std::collections::HashSet<String>,
        hex_len: usize,
    ) -> String {
        let (short, is_branch) = match full
            .strip_prefix("refs/heads/")
            .map(|s| (s, true))
            .or_else(|| full.strip_prefix("refs/tags/").map(|s| (s, false)))
        {
            Some(x) => x,
            None => return full.to_owned(),
        };
        // Root refs are files in the git directory, or records in a reftable.
        let pseudo = short.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')
            && (short == "HEAD" || self.git_dir.join(short).exists() || all.contains(short));
        let shadowed = pseudo
            || (short.len() == hex_len && short.bytes().all(|b| b.is_ascii_hexdigit()))
            || all.contains(&format!("refs/{short}"))
            || (is_branch && all.contains(&format!("refs/tags/{short}")));
        if shadowed {
            full.to_owned()
        } else {
            short.to_owned()
        }
    }

    /// The ref segment listings use for the default ref: the configured one, or the branch
    /// `HEAD` points at, or `HEAD` when detached.
    pub(crate) fn default_rev(&self, h: &gix::Repository, configured: Option<&str>) -> String {
        if let Some(c) = configured {
            return c.to_owned();
        }
        if let RefStore::Reftable(store) = &self.refs {
            let Ok(view) = store.view() else {
                return "HEAD".to_owned();
            };
            return match view.get(b"HEAD") {
                Some(reftable::Value::Symbolic(target)) if view.get(target).is_some() => {
                    match std::str::from_utf8(target) {
                        Ok(full) => {
                            let all = self.all_ref_names(h).unwrap_or_default();
                            self.uri_rev(full, &all, Self::hex_len(h))
                        }
                        Err(_) => "HEAD".to_owned(),
                    }
                }
                _ => "HEAD".to_owned(),
            };
        }
        match h.head_name() {
            Ok(Some(name)) => match std::str::from_utf8(name.as_bstr()) {
                Ok(full) if h.try_find_reference(full).ok().flatten().is_some() => {
                    let all = self.all_ref_names(h).unwrap_or_default();
                    self.uri_rev(full, &all, Self::hex_len(h))
                }
                _ => "HEAD".to_owned(),
            },
            _ => "HEAD".to_owned(),
        }
    }

    /// Whether the ref storage can be read (for readiness checks).
    pub(crate) fn refs_readable(&self, h: &gix::Repository) -> bool {
        match &self.refs {
            RefStore::Files => h.references().is_ok(),
            RefStore::Reftable(store) => store.view().is_ok(),
        }
    }
}
