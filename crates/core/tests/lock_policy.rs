//! The workspace's lock policy (ARCHITECTURE, Invariants): outside test code a `std` mutex is
//! taken through `mcpr_core::sync::lock`, so one panic under a lock does not turn every later
//! caller's `.expect` into a panic of its own. This reads every crate's `src/` and fails on a
//! `.lock().expect(` or `.lock().unwrap()` (on one line or rustfmt's two) before the file's
//! test module.

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

#[test]
fn no_mutex_outside_tests_is_locked_with_expect_or_unwrap() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for krate in std::fs::read_dir(&crates)
        .expect("the crates folder")
        .flatten()
    {
        rust_files(&krate.path().join("src"), &mut files);
    }
    assert!(files.len() > 50, "too few sources found: {}", files.len());
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("a source file");
        let code = text
            .split("#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or_default();
        let lines: Vec<&str> = code.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            // rustfmt breaks a long chain into one call a line: `.lock()` then `.expect(..)`.
            let next = lines.get(i + 1).map_or("", |l| l.trim_start());
            let split = line.trim_end().ends_with(".lock()")
                && (next.starts_with(".expect(") || next.starts_with(".unwrap()"));
            if split || line.contains(".lock().expect(") || line.contains(".lock().unwrap()") {
                found.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "take std mutexes with mcpr_core::sync::lock (ARCHITECTURE, one lock policy):\n{}",
        found.join("\n")
    );
}
