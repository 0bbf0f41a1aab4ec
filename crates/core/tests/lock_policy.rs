//! The workspace's lock policy (ARCHITECTURE, Invariants): outside test code a `std` mutex is
//! taken through `mcpr_core::sync::lock`, so one panic under a lock does not turn every later
//! caller's `.expect` into a panic of its own, and no caller quietly skips its work (`.ok()`,
//! `if let Ok(..)`) because some other thread once panicked. This reads every crate's `src/`
//! and fails on any site that handles a `.lock()`'s result itself, before the file's test
//! module.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// What a `LockResult` offers: called straight on `.lock()`, each one is a caller deciding
/// for itself what a poisoned lock means.
const RESULT_METHODS: &[&str] = &[
    "unwrap",
    "expect",
    "ok",
    "err",
    "unwrap_or",
    "unwrap_or_else",
    "unwrap_or_default",
    "map",
    "map_err",
    "and_then",
    "is_ok",
    "is_err",
    "inspect_err",
];

/// The one inline recovery allowed, and only in a crate that cannot reach `sync::lock` (it
/// does not depend on mcpr-core): the very call `sync::lock` makes.
const INLINE_RECOVERY: &[&str] = &[
    ".unwrap_or_else(PoisonError::into_inner)",
    ".unwrap_or_else(std::sync::PoisonError::into_inner)",
];

/// The lines of `code` that handle a `.lock()`'s result themselves, as `(line, text)` with
/// lines counted from 1. A chain rustfmt broke over lines (`.lock()` then `.expect(..)` on the
/// next) is read as one line. `.lock().await` (tokio, which does not poison) and `.lock()`
/// followed by anything but a `LockResult` method (a wrapper returning the guard) pass.
fn bypasses(code: &str, may_recover_inline: bool) -> Vec<(usize, String)> {
    // Each logical line: its first line's number and its text, continuation lines (those
    // starting with `.` or `?`) appended.
    let mut logical: Vec<(usize, String)> = Vec::new();
    for (i, line) in code.lines().enumerate() {
        let t = line.trim();
        match logical.last_mut() {
            Some((_, text)) if t.starts_with('.') || t.starts_with('?') => text.push_str(t),
            _ => logical.push((i + 1, t.to_owned())),
        }
    }
    let mut found = Vec::new();
    for (n, text) in logical {
        let mut from = 0;
        while let Some(at) = text[from..].find(".lock()") {
            let before = &text[..from + at];
            let rest = &text[from + at + ".lock()".len()..];
            from += at + 1;
            if rest.starts_with(".await") {
                continue;
            }
            if may_recover_inline && INLINE_RECOVERY.iter().any(|r| rest.starts_with(r)) {
                continue;
            }
            // A method called on the result (`.ok()`), not a field of a guard (`.map.get(..)`).
            let calls_result = rest.strip_prefix('.').is_some_and(|r| {
                let name_len = r
                    .find(|c: char| !c.is_alphanumeric() && c != '_')
                    .unwrap_or(r.len());
                RESULT_METHODS.contains(&&r[..name_len]) && r[name_len..].starts_with('(')
            });
            let question = rest.starts_with('?');
            // The result matched whole: `if let Ok(g) = m.lock()`, `let Ok(g) = m.lock() else`,
            // `match m.lock() {`.
            let tail = rest.trim();
            let ends_scrutinee = tail.is_empty()
                || ["{", "else", "&&", "||"]
                    .iter()
                    .any(|e| tail.starts_with(e));
            let matched = ends_scrutinee
                && (before.contains("let Ok(")
                    || before.contains("let Err(")
                    || before.contains("match "));
            if calls_result || question || matched {
                found.push((n, text.clone()));
                break;
            }
        }
    }
    found
}

#[test]
fn every_shape_of_handling_a_lock_result_is_caught() {
    let bad = [
        "m.lock().expect(\"the map\").insert(1);",
        "m.lock().unwrap().insert(1);",
        "let g = m\n    .lock()\n    .expect(\"the map\");",
        "let g = m.lock().unwrap_or_else(|e| e.into_inner());",
        "let g = inner\n    .last\n    .lock()\n    .unwrap_or_else(|e| e.into_inner());",
        "let v = m.lock().ok().and_then(|g| g.clone());",
        "seen.lock()\n    .ok()\n    .and_then(|d| *d)",
        "if let Ok(mut d) = self.deadline.lock() {",
        "if let Ok(mut idle) = pool.idle.lock()\n    && idle.len() < max",
        "let Ok(g) = m.lock() else { return };",
        "match m.lock() {",
        "let g = m.lock()?;",
        "let g = m.lock().unwrap_or_else(PoisonError::into_inner);",
    ];
    for code in bad {
        assert_eq!(bypasses(code, false).len(), 1, "not caught: {code}");
    }
    let good = [
        "let g = mcpr_core::sync::lock(&m);",
        "let g = lock(&self.0);",
        "self.lock().queue.len()",
        "if let Some(t) = self.trees.lock().map.get(&id) {",
        "let mut s = self.budget.lock();",
        "let g = state.lock().await;",
        "let mut out = std::io::stdout().lock();",
        "if let Ok(n) = count(self.lock().total) {",
        "if let Ok(n) = count(&self.lock()) {",
    ];
    for code in good {
        assert_eq!(bypasses(code, false), [], "flagged: {code}");
    }
    // The inline recovery is allowed only where sync::lock is out of reach, and only in the
    // exact words sync::lock uses.
    let inline = "let g = m\n    .lock()\n    .unwrap_or_else(std::sync::PoisonError::into_inner);";
    assert_eq!(bypasses(inline, true), []);
    assert_eq!(bypasses(inline, false).len(), 1);
    assert_eq!(
        bypasses("m.lock().unwrap_or_else(|e| e.into_inner())", true).len(),
        1
    );
}

#[test]
fn no_mutex_outside_tests_handles_its_lock_result_itself() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    let mut checked_crates = 0;
    for krate in std::fs::read_dir(&crates)
        .expect("the crates folder")
        .flatten()
    {
        let manifest = std::fs::read_to_string(krate.path().join("Cargo.toml")).unwrap_or_default();
        // mcpr-core itself and every crate depending on it can call sync::lock.
        let has_sync = manifest.contains("mcpr-core");
        let before = files.len();
        let mut mine = Vec::new();
        rust_files(&krate.path().join("src"), &mut mine);
        files.extend(mine.into_iter().map(|f| (f, has_sync)));
        if files.len() > before {
            checked_crates += 1;
        }
    }
    assert!(files.len() > 50, "too few sources found: {}", files.len());
    assert!(checked_crates > 8, "too few crates found: {checked_crates}");
    let mut found = Vec::new();
    for (f, has_sync) in &files {
        // The one place that recovers a poisoned guard.
        if f.ends_with("core/src/sync.rs") {
            continue;
        }
        let text = std::fs::read_to_string(f).expect("a source file");
        let code = text
            .split("#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or_default();
        for (n, line) in bypasses(code, !has_sync) {
            found.push(format!("{}:{n}: {line}", f.display()));
        }
    }
    assert!(
        found.is_empty(),
        "take std mutexes with mcpr_core::sync::lock (ARCHITECTURE, one lock policy):\n{}",
        found.join("\n")
    );
}
