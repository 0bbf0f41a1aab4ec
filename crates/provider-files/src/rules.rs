//! What a mount hides: the deny list, dot-files, and `.gitignore` / `.ignore` rules.
//!
//! Deny and hidden rules apply to everything (list, read, completion, watch). Ignore files
//! shape listings and completion only: a gitignored file is noise, not a secret, and stays
//! readable by its URI. The deny list itself is core's [`DenyList`], which git and s3 mounts
//! apply too; dot-files and ignore files are this provider's own. Matchers work on virtual
//! paths under `/r` so the real root never leaks into pattern matching.

use std::ffi::OsStr;
use std::io::Read as _;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use cap_std::fs::Dir;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use mcpr_core::{DenyList, Result};

use crate::path::RelPath;

/// The biggest ignore file read; larger ones are skipped with a warning rather than loaded.
const MAX_IGNORE_FILE: u64 = 1024 * 1024;

/// Paths whose [`Rules::is_denied_either`] answer is remembered, per mount; past this the
/// memo starts over, so it costs at most a few hundred kilobytes.
const MEMO_PATHS: usize = 4096;

/// The deny and hidden rules of one mount.
#[derive(Debug)]
pub(crate) struct Rules {
    deny: DenyList,
    hidden: bool,
    pub(crate) respect_gitignore: bool,
    /// [`Rules::is_denied_either`]'s answers by path. The rules never change after start, so
    /// an answer stays right; a read of a path seen before then costs a hash lookup instead
    /// of the matcher's two walks (about 5,000 instructions, most of a small read's own work
    /// after the system calls).
    memo: std::sync::Mutex<std::collections::HashMap<Box<[u8]>, bool>>,
}

/// `rel` as the relative path the deny list matches.
fn rel_path(rel: &RelPath) -> &Path {
    Path::new(OsStr::from_bytes(rel.as_bytes()))
}

impl Rules {
    /// Build from the built-in list plus `extra` patterns; a bad pattern is a config error.
    pub(crate) fn new(
        builtin: &[&str],
        extra: &[String],
        hidden: bool,
        respect_gitignore: bool,
    ) -> Result<Self> {
        Ok(Self {
            deny: DenyList::with_builtin(builtin, extra)?,
            hidden,
            respect_gitignore,
            memo: Default::default(),
        })
    }

    /// Whether `rel` (a file when `is_dir` is false) may not be served at all: denied by
    /// pattern, inside a denied directory, or a dot-file while hidden files are off.
    pub(crate) fn is_denied(&self, rel: &RelPath, is_dir: bool) -> bool {
        if rel.is_root() {
            return false;
        }
        if !self.hidden && rel.components().any(|c| c.first() == Some(&b'.')) {
            return true;
        }
        self.deny.is_denied(rel_path(rel), is_dir)
    }

    /// Whether `rel` is denied as a file or as a directory (its type is unknown before a
    /// stat). Without negated (`!`) patterns one walk over the parents answers both, which
    /// is the common case on every read; with them, both full checks run.
    pub(crate) fn is_denied_either(&self, rel: &RelPath) -> bool {
        let mut memo = mcpr_core::sync::lock(&self.memo);
        if let Some(&denied) = memo.get(rel.as_bytes()) {
            return denied;
        }
        // Checked under the lock: another thread asking for the same path waits for this
        // answer instead of computing it too, and the check is short.
        let denied = self.check_either(rel);
        if memo.len() >= MEMO_PATHS {
            memo.clear();
        }
        memo.insert(rel.as_bytes().into(), denied);
        denied
    }

    /// [`Rules::is_denied_either`] without the memo.
    fn check_either(&self, rel: &RelPath) -> bool {
        if rel.is_root() {
            return false;
        }
        if !self.hidden && rel.components().any(|c| c.first() == Some(&b'.')) {
            return true;
        }
        self.deny.is_denied_either(rel_path(rel))
    }

    /// Why [`Rules::entry_denied`] denies the entry, for an operator's warning: the rule
    /// that hides it, or `None` when it is served.
    pub(crate) fn why_entry_denied(
        &self,
        rel: &RelPath,
        name: &[u8],
        is_dir: bool,
    ) -> Option<&'static str> {
        if !self.hidden && name.first() == Some(&b'.') {
            return Some("a hidden (dot) file: the mount serves those only with `hidden = true`");
        }
        self.deny
            .is_entry_denied(rel_path(rel), is_dir)
            .then_some("the mount's deny list names it")
    }

    /// Whether one directory entry named `name` inside an allowed directory is denied. Cheaper
    /// than [`Rules::is_denied`] because the parents were already checked by the walk.
    pub(crate) fn entry_denied(&self, rel: &RelPath, name: &[u8], is_dir: bool) -> bool {
        if !self.hidden && name.first() == Some(&b'.') {
            return true;
        }
        self.deny.is_entry_denied(rel_path(rel), is_dir)
    }
}

/// The ignore rules in force at one directory: one matcher per ancestor that has an ignore
/// file, innermost last, because a deeper `.gitignore` overrides a shallower one.
#[derive(Debug, Default, Clone)]
pub(crate) struct IgnoreStack {
    levels: Vec<std::sync::Arc<Gitignore>>,
}

impl IgnoreStack {
    /// The stack for a child directory whose ignore files (if any) were loaded as `own`.
    pub(crate) fn push(&self, own: Option<Gitignore>) -> Self {
        let mut levels = self.levels.clone();
        if let Some(g) = own {
            levels.push(std::sync::Arc::new(g));
        }
        Self { levels }
    }

    /// Whether `rel` is ignored by the innermost matcher that has an opinion.
    pub(crate) fn is_ignored(&self, rel: &RelPath, is_dir: bool) -> bool {
        let path = rel.virtual_path();
        for g in self.levels.iter().rev() {
            let m = g.matched(&path, is_dir);
            if m.is_ignore() {
                return true;
            }
            if m.is_whitelist() {
                return false;
            }
        }
        false
    }
}

/// Load `.gitignore` and `.ignore` of directory `rel` (if present and small) through the
/// sandbox. Errors reading them are not fatal: the listing goes on without those rules.
pub(crate) fn load_ignore(root: &Dir, rel: &RelPath) -> Option<Gitignore> {
    load_ignore_with(rel, |name| root.open(rel.join(name.as_bytes()).as_path()))
}

/// [`load_ignore`] with directory `rel` already open as `dir`: each file is one
/// single-component open instead of a walk from the root (the listing does this per level).
pub(crate) fn load_ignore_in(dir: &Dir, rel: &RelPath) -> Option<Gitignore> {
    load_ignore_with(rel, |name| dir.open(name))
}

fn load_ignore_with(
    rel: &RelPath,
    open: impl Fn(&str) -> std::io::Result<cap_std::fs::File>,
) -> Option<Gitignore> {
    let mut builder = GitignoreBuilder::new(rel.virtual_path());
    let mut any = false;
    for name in [".gitignore", ".ignore"] {
        let file_rel = rel.join(name.as_bytes());
        let Ok(mut f) = open(name) else {
            continue;
        };
        let Ok(meta) = f.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        if meta.len() > MAX_IGNORE_FILE {
            tracing::warn!(path = %file_rel.display(), "ignore file larger than 1 MiB skipped");
            continue;
        }
        let mut text = String::new();
        if (&mut f)
            .take(MAX_IGNORE_FILE)
            .read_to_string(&mut text)
            .is_err()
        {
            continue;
        }
        for line in text.lines() {
            // A malformed line is skipped, like git does, instead of dropping the whole file.
            let _ = builder.add_line(Some(Path::new(name).to_path_buf()), line);
            any = true;
        }
    }
    if !any {
        return None;
    }
    builder.build().ok()
}

/// The ignore stack for directory `rel`, loading each ancestor's ignore files.
pub(crate) fn stack_for(root: &Dir, rel: &RelPath, respect: bool) -> IgnoreStack {
    let mut stack = IgnoreStack::default();
    if !respect {
        return stack;
    }
    stack = stack.push(load_ignore(root, &RelPath::root()));
    let mut cur = RelPath::root();
    for comp in rel.components() {
        cur = cur.join(comp);
        stack = stack.push(load_ignore(root, &cur));
    }
    stack
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The memo answers what the matcher answers, on first sight, on a repeat, and after it
    /// has started over; with and without negated patterns.
    #[test]
    fn remembered_answers_are_the_matchers_answers() {
        let paths: Vec<RelPath> = [
            "a.txt",
            ".env",
            "docs/.env",
            "docs/readme.md",
            "keep/secret.pem",
            "secret.pem",
            "x/.ssh",
            "x/.ssh/id_rsa",
            "node_modules/pkg/index.js",
            "deep/a/b/c/d/e.key",
            "deep/a/b/c/d/e.txt",
        ]
        .iter()
        .map(|p| RelPath::from_bytes(p.as_bytes()).unwrap())
        .collect();
        let extra = vec!["*.pem".to_owned(), "node_modules/".to_owned()];
        let negated = vec!["*.pem".to_owned(), "!keep/*.pem".to_owned()];
        for (extra, hidden) in [(&extra, false), (&extra, true), (&negated, true)] {
            let rules = Rules::new(crate::BUILTIN_DENY, extra, hidden, false).unwrap();
            for round in 0..3 {
                for p in &paths {
                    assert_eq!(
                        rules.is_denied_either(p),
                        rules.check_either(p),
                        "{p:?}, {extra:?}, hidden {hidden}, round {round}"
                    );
                }
            }
            // Fill the memo past its size: it starts over and still answers right.
            for i in 0..MEMO_PATHS + 10 {
                let p = RelPath::from_bytes(format!("many/f{i}.pem").as_bytes()).unwrap();
                assert_eq!(rules.is_denied_either(&p), rules.check_either(&p));
            }
            assert!(rules.memo.lock().unwrap().len() <= MEMO_PATHS);
            for p in &paths {
                assert_eq!(rules.is_denied_either(p), rules.check_either(p), "{p:?}");
            }
        }
        // The answers themselves, so a matcher that denies nothing cannot pass.
        let rules = Rules::new(crate::BUILTIN_DENY, &extra, false, false).unwrap();
        let denied = |p: &str| rules.is_denied_either(&RelPath::from_bytes(p.as_bytes()).unwrap());
        assert!(denied("secret.pem") && denied(".env") && denied("node_modules/pkg/index.js"));
        assert!(!denied("a.txt") && !denied("docs/readme.md"));
    }
}
