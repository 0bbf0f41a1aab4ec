//! First-parent history: the paged history of a path, and `lastModified` (the committer
//! date of the commit that last changed a path), both bounded in the commits they examine.
//!
//! Following first parents only (like `git log --first-parent -- path`) keeps a page
//! resumable from a single commit id, so history cursors are stateless: `after` names the
//! last commit served and the next page starts at its first parent.

use gix::ObjectId;
use mcpr_core::Result;

use crate::provider::Inner;
use crate::repo::CommitInfo;
use crate::uri::TreePath;

/// How many (commit, path) → date results are kept before the cache starts over.
const LAST_MODIFIED_CACHE: usize = 100_000;

/// The id of the entry at `path` in commit tree `tree`, or `None` when absent.
fn entry_id(
    inner: &Inner,
    h: &gix::Repository,
    tree: ObjectId,
    path: &TreePath,
) -> Result<Option<ObjectId>> {
    Ok(inner.repo.entry_at(h, tree, path)?.map(|e| e.id))
}

/// One page of history.
pub(crate) struct HistoryPage {
    /// The commits that changed the path (all commits for a whole-ref history), newest first.
    pub(crate) commits: Vec<CommitInfo>,
    /// How many commits were examined.
    pub(crate) scanned: usize,
    /// The last commit examined, when the first-parent chain goes on after it.
    pub(crate) resume_after: Option<ObjectId>,
}

/// The history of `path` (`None`: every commit) on the first-parent chain of `start`, or of
/// the first parent of `after` when continuing. At most `limit` commits, at most
/// `history_scan_limit` examined.
pub(crate) fn history(
    inner: &Inner,
    h: &gix::Repository,
    start: ObjectId,
    path: Option<&TreePath>,
    after: Option<ObjectId>,
    limit: usize,
) -> Result<Option<HistoryPage>> {
    let mut cur = match after {
        None => Some(start),
        Some(a) => {
            // A cursor is client input: it must name a commit of this repository.
            if inner.repo.peel_to_commit(h, a)? != Some(a) {
                return Ok(None);
            }
            inner.repo.commit_links(h, a)?.1
        }
    };
    let scan_limit = inner.config.history_scan_limit;
    let mut commits = Vec::new();
    let mut scanned = 0;
    let mut last = None;
    while let Some(id) = cur {
        if commits.len() == limit || scanned == scan_limit {
            break;
        }
        let info = inner.repo.commit(h, id)?;
        scanned += 1;
        let parent = info.parents.first().copied();
        let changed = match path {
            None => true,
            Some(p) => {
                let now = entry_id(inner, h, info.tree, p)?;
                match parent {
                    None => now.is_some(),
                    Some(pid) => {
                        let (ptree, _, _) = inner.repo.commit_links(h, pid)?;
                        ptree != info.tree && entry_id(inner, h, ptree, p)? != now
                    }
                }
            }
        };
        last = Some(id);
        cur = parent;
        if changed {
            commits.push(info);
        }
    }
    Ok(Some(HistoryPage {
        commits,
        scanned,
        resume_after: if cur.is_some() { last } else { None },
    }))
}

/// For each of `paths` at commit `commit`: the committer date (seconds) of the commit that
/// last changed it on the first-parent chain, `None` when that lies beyond
/// `last_modified_depth` commits. With a depth of 0, the commit's own date for every path.
/// Results are cached per (commit, path): a commit's history never changes.
pub(crate) fn last_changed(
    inner: &Inner,
    h: &gix::Repository,
    commit: ObjectId,
    paths: &[TreePath],
) -> Result<Vec<Option<i64>>> {
    let depth = inner.config.last_modified_depth;
    let (tree, first_parent, date) = inner.repo.commit_links(h, commit)?;
    if depth == 0 {
        return Ok(vec![Some(date); paths.len()]);
    }
    let mut out: Vec<Option<i64>> = vec![None; paths.len()];
    // (index into paths, entry id at the commit being looked at)
    let mut open: Vec<(usize, ObjectId)> = Vec::new();
    {
        let cache = mcpr_core::sync::lock(&inner.last_modified);
        for (i, p) in paths.iter().enumerate() {
            if let Some(hit) = cache.get(&(commit, p.clone())) {
                out[i] = *hit;
            } else if let Some(id) = entry_id(inner, h, tree, p)? {
                open.push((i, id));
            }
        }
    }
    let mut computed: Vec<usize> = open.iter().map(|(i, _)| *i).collect();
    let (mut cur_tree, mut cur_date, mut parent) = (tree, date, first_parent);
    let mut steps = 0;
    while !open.is_empty() {
        let Some(pid) = parent else {
            // The root commit introduced everything still open.
            for (i, _) in open.drain(..) {
                out[i] = Some(cur_date);
            }
            break;
        };
        if steps == depth {
            break;
        }
        steps += 1;
        let (ptree, pparent, pdate) = inner.repo.commit_links(h, pid)?;
        if ptree != cur_tree {
            let mut still = Vec::with_capacity(open.len());
            for (i, id) in open.drain(..) {
                if entry_id(inner, h, ptree, &paths[i])? == Some(id) {
                    still.push((i, id));
                } else {
                    out[i] = Some(cur_date);
                }
            }
            open = still;
        }
        (cur_tree, cur_date, parent) = (ptree, pdate, pparent);
    }
    let mut cache = mcpr_core::sync::lock(&inner.last_modified);
    if cache.len() + computed.len() > LAST_MODIFIED_CACHE {
        cache.clear();
    }
    for i in computed.drain(..) {
        cache.insert((commit, paths[i].clone()), out[i]);
    }
    Ok(out)
}
