//! Fault injection on the git provider: a repository whose objects go missing, are
//! corrupted or are repacked, and whose ref is corrupted, while it is being served. Each
//! asserts a clear answer for what is broken (never a panic, a hang or another file's
//! bytes), that what is intact still reads, that another mount is untouched, and recovery
//! once the repository is repaired, with a subscription made before the fault reporting the
//! next change.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use common::{BIG, TestRepo, expect, updated, watch};
use mcpr_core::{ChangeBus, ContentsBody, ErrorKind, LocalBus, Provider, ResourceUri};
use mcpr_provider_git::{GitConfig, GitProvider, RefWatchMode};

fn provider(repo: &TestRepo) -> GitProvider {
    let mut cfg = GitConfig::new(repo.path());
    cfg.debounce = Duration::from_millis(20);
    cfg.watch = RefWatchMode::Auto;
    cfg.poll_interval = Duration::from_millis(200);
    GitProvider::new(cfg).unwrap()
}

/// A read that must answer within 5 s: the text, or the error.
async fn read(p: &GitProvider, uri: &str) -> mcpr_core::Result<String> {
    let uri = ResourceUri::parse(uri).unwrap();
    let r = tokio::time::timeout(Duration::from_secs(5), p.read(&uri, &BIG))
        .await
        .unwrap_or_else(|_| panic!("read {uri} hung"))?;
    match &r.contents[0].body {
        ContentsBody::Text(t) => Ok(t.clone()),
        ContentsBody::Blob(b) => panic!("{uri}: expected text, got {} bytes", b.len()),
    }
}

/// The loose object file of `id`.
fn loose(repo: &TestRepo, id: &str) -> PathBuf {
    repo.path()
        .join(".git/objects")
        .join(&id[..2])
        .join(&id[2..])
}

/// A repository with `x` and `y` on `main`, its provider, and a second repository with its
/// own provider (another mount, which no fault here may touch).
fn setup() -> (TestRepo, GitProvider, TestRepo, GitProvider) {
    let r = TestRepo::new();
    r.write("x", b"x0\n");
    r.write("y", b"y0\n");
    r.commit("start");
    let other = TestRepo::new();
    other.write("z", b"z0\n");
    other.commit("other");
    let (p, q) = (provider(&r), provider(&other));
    (r, p, other, q)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blob_that_goes_missing_or_is_corrupted_answers_an_error_naming_it_then_recovers() {
    let (r, p, _other, q) = setup();
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    let _sub = watch(&p, "git://main/x", &bus).await;
    assert_eq!(read(&p, "git://main/x").await.unwrap(), "x0\n");

    let blob = r.git_str(&["rev-parse", "main:x"]);
    let path = loose(&r, &blob);
    let saved = std::fs::read(&path).unwrap();
    let broken = [
        ("deleted", None),
        ("not zlib", Some(&b"garbage that is not zlib"[..])),
        ("truncated", Some(&saved[..saved.len() / 2])),
    ];
    for (how, bytes) in broken {
        match bytes {
            None => std::fs::remove_file(&path).unwrap(),
            Some(b) => std::fs::write(&path, b).unwrap(),
        }
        let e = read(&p, "git://main/x").await.expect_err(how);
        assert_eq!(e.kind, ErrorKind::Internal, "{how}: {e}");
        assert!(e.message.starts_with("git error while"), "{how}: {e}");
        assert_eq!(e.uri.as_deref(), Some("git://main/x"), "{how}");
        // The rest of the repository and the other mount are untouched.
        assert_eq!(read(&p, "git://main/y").await.unwrap(), "y0\n", "{how}");
        assert_eq!(read(&q, "git://main/z").await.unwrap(), "z0\n", "{how}");
    }

    // Repaired: the same blob reads again, and the subscription made before the fault
    // reports the next change.
    std::fs::write(&path, &saved).unwrap();
    assert_eq!(read(&p, "git://main/x").await.unwrap(), "x0\n");
    r.write("x", b"x1\n");
    r.commit("after the repair");
    expect(&mut rx, &updated("git://main/x"), Duration::from_secs(3)).await;
    assert_eq!(read(&p, "git://main/x").await.unwrap(), "x1\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_ref_names_nothing_until_repaired_and_the_subscription_survives() {
    let (r, p, _other, q) = setup();
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    let _sub = watch(&p, "git://main/x", &bus).await;
    let head = r.path().join(".git/refs/heads/main");
    let saved = std::fs::read(&head).unwrap();
    // Garbage, and a well-formed id of no object: an unreadable ref names nothing
    // (repo.rs `resolve_rev`), so `main` answers "not found" rather than another commit.
    for bytes in [
        &b"not a commit id\n"[..],
        b"0123456789012345678901234567890123456789\n",
    ] {
        std::fs::write(&head, bytes).unwrap();
        for uri in ["git://main/x", "git://main", "git://main/"] {
            let e = read(&p, uri).await.expect_err(uri);
            assert_eq!(e.kind, ErrorKind::NotFound, "{uri}: {e}");
        }
        assert_eq!(read(&q, "git://main/z").await.unwrap(), "z0\n");
        // The commit itself is still there by its id.
        let id = String::from_utf8(saved.clone()).unwrap();
        let at = format!("git://{}/x", id.trim());
        assert_eq!(read(&p, &at).await.unwrap(), "x0\n");
    }
    // The watcher saw `x` vanish with its ref: that is a change, and it was reported.
    expect(&mut rx, &updated("git://main/x"), Duration::from_secs(3)).await;

    // Repaired: `x` is back, which is a change again, and so is the next commit.
    std::fs::write(&head, &saved).unwrap();
    assert_eq!(read(&p, "git://main/x").await.unwrap(), "x0\n");
    expect(&mut rx, &updated("git://main/x"), Duration::from_secs(3)).await;
    r.write("x", b"x1\n");
    r.commit("after the repair");
    expect(&mut rx, &updated("git://main/x"), Duration::from_secs(3)).await;
    assert_eq!(read(&p, "git://main/x").await.unwrap(), "x1\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repack_under_the_server_changes_nothing_it_answers() {
    let (r, p, _other, _q) = setup();
    for i in 0..20 {
        r.write(&format!("f{i}"), format!("{i}\n").as_bytes());
        r.commit(&format!("commit {i}"));
    }
    assert_eq!(read(&p, "git://main/f7").await.unwrap(), "7\n");
    // Every loose object moves into a pack and the loose files are deleted, while the
    // provider has the repository open: it finds the pack.
    r.git(&["gc", "-q", "--prune=now"]);
    assert!(!loose(&r, &r.git_str(&["rev-parse", "main:f7"])).exists());
    for i in 0..20 {
        let uri = format!("git://main/f{i}");
        assert_eq!(read(&p, &uri).await.unwrap(), format!("{i}\n"), "{uri}");
    }
    assert_eq!(read(&p, "git://main/x").await.unwrap(), "x0\n");
    // Refs packed by gc still resolve; a new commit after it is seen.
    r.write("x", b"x1\n");
    r.commit("after gc");
    assert_eq!(read(&p, "git://main/x").await.unwrap(), "x1\n");
}
