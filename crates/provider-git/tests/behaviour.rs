//! The provider behaviour suite against a real repository built with the git CLI: branches
//! (one with a `/`), lightweight and annotated tags, packed and loose refs, unicode and
//! space paths, a binary file, a symlink and a submodule.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use common::{TestRepo, rfc3339};
use mcpr_core::Provider;
use mcpr_provider_git::{GitConfig, GitProvider, RefWatchMode};
use mcpr_testkit::{Fixture, default_malformed_positions, run_suite};
use serde_json::{Map, Value, json};

struct Fx {
    repo: TestRepo,
    added: AtomicUsize,
}

/// Percent-encode like the provider: unreserved bytes stay, `/` too in paths.
fn enc(s: &[u8], keep_slash: bool) -> String {
    let mut out = String::new();
    for &b in s {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) || (keep_slash && b == b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Fx {
    fn build() -> Self {
        let repo = TestRepo::new();
        repo.write("README.md", b"# hello\n");
        repo.write("My Notes.md", "notes with ünïcödé\n".as_bytes());
        repo.commit("initial commit");
        repo.git(&["tag", "v0.1"]);
        repo.git(&["branch", "feature/x"]);
        repo.write("dir with space/ünï file.txt", b"unicode path\n");
        repo.write("a/b/c.txt", b"deep\n");
        repo.write("a/b/d #1?.txt", b"odd name\n");
        repo.write("bin/blob.bin", &[0, 159, 146, 150, 255, 0, 1]);
        for i in 0..25 {
            repo.write(&format!("many/f{i:03}.txt"), format!("{i}\n").as_bytes());
        }
        std::os::unix::fs::symlink("README.md", repo.dir.path().join("link")).unwrap();
        repo.add_submodule(
            "vendor/lib",
            "1234567890abcdef1234567890abcdef12345678",
            "https://example.com/lib.git",
        );
        repo.commit("add the rest\n\nwith a body line");
        repo.git(&["tag", "-a", "v1.0", "-m", "release 1.0"]);
        // Everything so far lives in packed-refs; the next branch is a loose ref.
        repo.git(&["pack-refs", "--all"]);
        repo.git(&["branch", "loose"]);
        Self {
            repo,
            added: AtomicUsize::new(0),
        }
    }

    fn commit_json(&self, rev: &str) -> Vec<u8> {
        let r = &self.repo;
        let id = r.git_str(&["rev-parse", &format!("{rev}^{{commit}}")]);
        let raw = String::from_utf8(r.git(&["cat-file", "commit", &id])).unwrap();
        let (headers, message) = raw.split_once("\n\n").unwrap();
        let mut tree = String::new();
        let mut parents = Vec::new();
        let mut people = Vec::new();
        for line in headers.lines() {
            let (k, v) = line.split_once(' ').unwrap();
            match k {
                "tree" => tree = v.to_owned(),
                "parent" => parents.push(json!({"id": v, "uri": format!("git://{v}")})),
                "author" | "committer" => {
                    let (name, rest) = v.split_once(" <").unwrap();
                    let (email, rest) = rest.split_once("> ").unwrap();
                    let secs: i64 = rest.split(' ').next().unwrap().parse().unwrap();
                    people.push(json!({"name": name, "email": email, "date": rfc3339(secs)}));
                }
                _ => {}
            }
        }
        let summary = message
            .split("\n\n")
            .next()
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let seg = enc(rev.as_bytes(), false);
        json!({
            "uri": format!("git://{seg}"),
            "ref": rev,
            "id": id,
            "tree": tree,
            "files": format!("git://{seg}/"),
            "parents": parents,
            "author": people[0],
            "committer": people[1],
            "summary": summary,
            "message": message,
        })
        .to_string()
        .into_bytes()
    }
}

#[async_trait]
impl Fixture for Fx {
    fn expected(&self) -> Vec<(String, Vec<u8>)> {
        let r = &self.repo;
        let mut out = Vec::new();
        // The files of main, README.md first (the suite modifies the first resource).
        let listing = r.git(&["ls-tree", "-r", "-z", "--full-tree", "main"]);
        let mut files = Vec::new();
        for rec in listing.split(|&b| b == 0).filter(|r| !r.is_empty()) {
            let tab = rec.iter().position(|&b| b == b'\t').unwrap();
            let meta = std::str::from_utf8(&rec[..tab]).unwrap();
            let path = &rec[tab + 1..];
            let mut it = meta.split(' ');
            let (_mode, kind, id) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
            let uri = format!("git://main/{}", enc(path, true));
            let bytes = match kind {
                "blob" => r.git(&["cat-file", "blob", id]),
                "commit" => {
                    let mut m = Map::new();
                    m.insert("uri".into(), uri.clone().into());
                    m.insert("type".into(), "submodule".into());
                    m.insert("path".into(), String::from_utf8_lossy(path).into());
                    m.insert("commit".into(), id.into());
                    m.insert("url".into(), "https://example.com/lib.git".into());
                    Value::Object(m).to_string().into_bytes()
                }
                other => panic!("unexpected {other}"),
            };
            files.push((uri, bytes));
        }
        files.sort_by_key(|(u, _)| u != "git://main/README.md");
        out.extend(files);
        let refs = r.git_str(&[
            "for-each-ref",
            "--format=%(refname)",
            "refs/heads",
            "refs/tags",
        ]);
        for full in refs.lines() {
            let short = full
                .strip_prefix("refs/heads/")
                .or_else(|| full.strip_prefix("refs/tags/"))
                .unwrap();
            out.push((
                format!("git://{}", enc(short.as_bytes(), false)),
                self.commit_json(short),
            ));
        }
        out
    }

    fn missing_uri(&self) -> String {
        "git://main/nope.txt".into()
    }

    fn forbidden_uris(&self) -> Vec<String> {
        [
            "git://main/../etc/passwd",
            "git://main/%2e%2e/%2e%2e/etc/passwd",
            "git://main//etc/passwd",
            "git://main/a%2Fb%2Fc.txt",
            "git://main/a/b/../b/c.txt",
            "git://main/.git/config",
            "git://main/.git",
            "git://main/link/x",
            "git://main/vendor/lib/README.md",
            "git://main/README.md/x",
            "git://nosuchref/README.md",
            "git://nosuchref",
            "git://main~1/README.md",
            "git://refs%2Fheads%2Fnope/README.md",
            "git://@other/main/README.md",
            "git://0000000000000000000000000000000000000000/README.md",
            "git://main/a%00",
        ]
        .into_iter()
        .map(String::from)
        .collect()
    }

    async fn modify(&self, uri: &str) {
        let path = uri.strip_prefix("git://main/").expect("a file on main");
        let now = std::time::SystemTime::now();
        self.repo
            .write(path, format!("changed {now:?}\n").as_bytes());
        self.repo.commit("modify");
    }

    async fn add(&self) -> String {
        let n = self.added.fetch_add(1, Ordering::SeqCst);
        let name = format!("added-{n}");
        self.repo.git(&["branch", &name]);
        format!("git://{name}")
    }

    fn completion_case(&self) -> Option<(String, String, String, String)> {
        Some((
            "git://{ref}/{+path}".into(),
            "path".into(),
            "a/b/".into(),
            "a/b/c.txt".into(),
        ))
    }

    fn malformed_positions(&self) -> Vec<Vec<u8>> {
        // A position is `r<full ref name>` or `t<path in the default ref's tree>`.
        let mut v = default_malformed_positions();
        v.extend([
            b"x-no-such-part".to_vec(),
            b"t".to_vec(),
            b"t../etc/passwd".to_vec(),
            b"ta//b".to_vec(),
            b"r\xff\xfe".to_vec(),
        ]);
        v
    }

    fn directories(&self) -> Vec<String> {
        // The default ref's root tree, and a subfolder by its own URI.
        vec!["git://main".into(), "git://main/many".into()]
    }

    fn unknown_positions(&self) -> Vec<(Vec<u8>, Option<String>)> {
        // Names that exist nowhere resume at the next ref, or the next path in tree order.
        vec![
            (b"rrefs/heads/m".to_vec(), Some("git://main".into())),
            (
                b"rrefs/heads/deleted".to_vec(),
                Some("git://feature%2Fx".into()),
            ),
            (
                b"tmany/f010.txtx".to_vec(),
                Some("git://main/many/f011.txt".into()),
            ),
            (b"tzzz".to_vec(), None),
        ]
    }

    fn change_tokens(&self) -> bool {
        true
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behaviour_suite() {
    let fx = Fx::build();
    // The fixture really holds what the suite is meant to cover.
    let uris: Vec<String> = fx.expected().into_iter().map(|(u, _)| u).collect();
    for want in [
        "git://main/vendor/lib",
        "git://main/link",
        "git://main/bin/blob.bin",
        "git://main/dir%20with%20space/%C3%BCn%C3%AF%20file.txt",
        "git://feature%2Fx",
        "git://v1.0",
        "git://loose",
    ] {
        assert!(
            uris.iter().any(|u| u == want),
            "fixture lacks {want}: {uris:?}"
        );
    }
    assert!(fx.repo.path().join(".git/packed-refs").exists());
    let mut cfg = GitConfig::new(fx.repo.path());
    cfg.debounce = std::time::Duration::from_millis(20);
    let p: Arc<dyn Provider> = Arc::new(GitProvider::new(cfg).unwrap());
    run_suite(p, &fx).await;
}

/// With watching off the mount declares neither `watch` nor `list_changed`: the suite then
/// checks that both answer unsupported, and everything else as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behaviour_suite_without_watching() {
    let fx = Fx::build();
    let mut cfg = GitConfig::new(fx.repo.path());
    cfg.watch = RefWatchMode::Off;
    let p: Arc<dyn Provider> = Arc::new(GitProvider::new(cfg).unwrap());
    let caps = p.info().capabilities;
    assert!(!caps.watch && !caps.list_changed);
    run_suite(p, &fx).await;
}
