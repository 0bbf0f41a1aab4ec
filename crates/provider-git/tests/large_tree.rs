//! A 100,000-file tree (100 directories of 1,000 files, written with `git fast-import`)
//! lists completely through keyset pages, in order, with no entry skipped or repeated, and
//! a page from a deep cursor costs about what the first page costs.

mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::TestRepo;
use mcpr_core::{PageRequest, Provider};
use mcpr_provider_git::{GitConfig, GitProvider};

const DIRS: usize = 100;
const FILES: usize = 1000;

fn big_repo() -> TestRepo {
    let r = TestRepo::new();
    let mut script = Vec::with_capacity(DIRS * FILES * 32);
    script.extend_from_slice(b"blob\nmark :1\ndata 6\nhello\n\n");
    script.extend_from_slice(
        b"commit refs/heads/main\nmark :2\ncommitter A <a@example.com> 1700000000 +0000\ndata 4\nbig\n",
    );
    for d in 0..DIRS {
        for f in 0..FILES {
            script.extend_from_slice(format!("M 100644 :1 d{d:03}/f{f:04}.txt\n").as_bytes());
        }
    }
    script.push(b'\n');
    r.git_stdin(&["fast-import", "--quiet"], &script);
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_thousand_files_page_through() {
    let t = Instant::now();
    let r = big_repo();
    eprintln!("fast-import: {:?}", t.elapsed());
    let p = GitProvider::new(GitConfig::new(r.path())).unwrap();

    let t = Instant::now();
    let mut after = None;
    let mut seen = HashSet::new();
    let mut last_name = String::new();
    let mut pages = 0;
    let mut slowest = Duration::ZERO;
    loop {
        let start = Instant::now();
        let page = p
            .list(PageRequest {
                after: after.clone(),
                limit: 1000,
            })
            .await
            .unwrap();
        slowest = slowest.max(start.elapsed());
        pages += 1;
        for m in &page.items {
            assert!(seen.insert(m.uri.clone()), "listed twice: {}", m.uri);
            if m.uri.starts_with("git://main/") {
                assert!(m.name > last_name, "{} after {last_name}", m.name);
                last_name = m.name.clone();
                assert_eq!(m.size, Some(6));
            }
        }
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    eprintln!("{pages} pages in {:?}, slowest {slowest:?}", t.elapsed());
    // 100,000 files and the one branch.
    assert_eq!(seen.len(), DIRS * FILES + 1);
    assert!(seen.contains("git://main/d099/f0999.txt"));

    // Resume deep inside the tree from a hand-made position: the next directory follows.
    let page = p
        .list(PageRequest {
            after: Some(b"td050/f0999.txt".to_vec()),
            limit: 2,
        })
        .await
        .unwrap();
    let names: Vec<&str> = page.items.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, vec!["d051/f0000.txt", "d051/f0001.txt"]);
}
