//! Repositories with reftable ref storage (`git init --ref-format=reftable`), read by the
//! provider's own reftable reader: every ref form resolves, listings and completion show the
//! refs, deletions and compaction are honoured, thousands of refs span many blocks, a linked
//! worktree sees its own `HEAD`, a corrupt table is an error, and ref moves notify exactly
//! as with loose refs.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use common::{
    TestRepo, events, expect, json, kind, read, repo_xy, text, two_commits, updated, watch,
};
use mcpr_core::{
    ChangeBus, ChangeEvent, ChangeSink, CompletionRequest, ErrorKind, LocalBus, PageRequest,
    Provider,
};
use mcpr_provider_git::{GitConfig, GitProvider, RefWatchMode};

fn provider(repo: &TestRepo) -> GitProvider {
    GitProvider::new(GitConfig::new(repo.path())).unwrap()
}

fn watching_provider(repo: &TestRepo, mode: RefWatchMode) -> GitProvider {
    let mut cfg = GitConfig::new(repo.path());
    cfg.debounce = Duration::from_millis(20);
    cfg.watch = mode;
    cfg.poll_interval = if mode == RefWatchMode::Poll {
        Duration::from_millis(200)
    } else {
        // Long enough that only inotify can explain a fast notification.
        Duration::from_secs(30)
    };
    GitProvider::new(cfg).unwrap()
}

async fn list_all(p: &GitProvider) -> Vec<String> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let page = p.list(PageRequest { after, limit: 500 }).await.unwrap();
        out.extend(page.items.into_iter().map(|m| m.uri));
        match page.next {
            Some(n) => after = Some(n),
            None => return out,
        }
    }
}

async fn complete_ref(p: &GitProvider, typed: &str) -> Vec<String> {
    p.complete(CompletionRequest {
        template: "git://{ref}/{+path}".into(),
        argument: "ref".into(),
        value: typed.into(),
        context: Default::default(),
    })
    .await
    .unwrap()
    .values
}

/// The same history as the loose-ref read tests: x = "one" then "two" on main; feature/x,
/// a lightweight tag v0.1 and an annotated tag v1.0 at the first commit.
/// The repository really keeps its refs in a reftable, where gix cannot see them.
fn assert_reftable(r: &TestRepo) {
    let git = r.path().join(".git");
    assert_eq!(
        std::fs::read_to_string(git.join("HEAD")).unwrap(),
        "ref: refs/heads/.invalid\n"
    );
    assert!(git.join("reftable/tables.list").is_file());
    assert!(!git.join("packed-refs").exists());
}

#[tokio::test]
async fn every_ref_form_resolves() {
    let (r, c1, c2) = two_commits(TestRepo::new_reftable());
    assert_reftable(&r);
    let p = provider(&r);
    assert_eq!(text(&p, "git://main/x").await, "two\n");
    assert_eq!(
        text(&p, "git://main/docs/CHANGELOG.md").await,
        "# changes\n"
    );
    assert_eq!(text(&p, "git://feature%2Fx/x").await, "one\n");
    assert_eq!(text(&p, "git://v0.1/x").await, "one\n");
    assert_eq!(text(&p, "git://v1.0/x").await, "one\n");
    assert_eq!(text(&p, "git://HEAD/x").await, "two\n");
    assert_eq!(text(&p, "git://refs%2Fheads%2Fmain/x").await, "two\n");
    assert_eq!(text(&p, "git://refs%2Ftags%2Fv1.0/x").await, "one\n");
    assert_eq!(text(&p, "git://heads%2Ffeature%2Fx/x").await, "one\n");
    assert_eq!(text(&p, &format!("git://{c1}/x")).await, "one\n");
    assert_eq!(text(&p, &format!("git://{}/x", &c1[..7])).await, "one\n");
    // The annotated tag is peeled to its commit.
    assert_eq!(json(&p, "git://v1.0").await["id"], c1.as_str());
    assert_eq!(json(&p, "git://main").await["id"], c2.as_str());
    assert_eq!(json(&p, "git://HEAD").await["id"], c2.as_str());
    assert_eq!(kind(&p, "git://nope/x").await, ErrorKind::NotFound);
    assert_eq!(kind(&p, "git://main/nope").await, ErrorKind::NotFound);
    // A detached HEAD is an object id in the reftable.
    r.git(&["checkout", "-q", "--detach", "v0.1"]);
    assert_eq!(text(&p, "git://HEAD/x").await, "one\n");
    assert!(p.ready().await);
}

#[tokio::test]
async fn listing_and_completion_show_the_refs() {
    let (r, _, _) = two_commits(TestRepo::new_reftable());
    // A tag named like a branch shadows it, so the branch is listed by its full name.
    r.git(&["branch", "dup"]);
    r.git(&["tag", "dup", "v0.1"]);
    let p = provider(&r);
    let uris = list_all(&p).await;
    let refs: Vec<&str> = uris
        .iter()
        .map(String::as_str)
        .filter(|u| u.matches('/').count() == 2)
        .collect();
    assert_eq!(
        refs,
        [
            "git://refs%2Fheads%2Fdup",
            "git://feature%2Fx",
            "git://main",
            "git://dup",
            "git://v0.1",
            "git://v1.0",
        ]
    );
    // The tree of the default ref (HEAD's branch, read from the reftable) follows.
    assert!(uris.contains(&"git://main/x".to_owned()), "{uris:?}");
    assert!(
        uris.contains(&"git://main/docs/CHANGELOG.md".to_owned()),
        "{uris:?}"
    );
    assert_eq!(complete_ref(&p, "fea").await, ["feature/x"]);
    assert_eq!(complete_ref(&p, "v").await, ["v0.1", "v1.0"]);
    assert!(complete_ref(&p, "").await.contains(&"HEAD".to_owned()));
}

#[tokio::test]
async fn deleted_refs_stay_deleted_across_tables_and_compaction() {
    let (r, _, _) = two_commits(TestRepo::new_reftable());
    // Without auto-compaction every update stays a table of its own, so the deletion is a
    // record in a newer table hiding the branch in an older one.
    let git = |args: &[&str]| r.git_env(&[NO_COMPACTION], args);
    git(&["branch", "gone"]);
    git(&["tag", "gone-tag"]);
    let p = provider(&r);
    assert_eq!(text(&p, "git://gone/x").await, "two\n");
    let before = tables(&r);
    git(&["branch", "-q", "-D", "gone"]);
    git(&["tag", "-d", "gone-tag"]);
    let after = tables(&r);
    assert!(after.len() >= before.len() + 2, "{before:?} {after:?}");
    assert_eq!(kind(&p, "git://gone/x").await, ErrorKind::NotFound);
    assert_eq!(kind(&p, "git://gone-tag/x").await, ErrorKind::NotFound);
    let uris = list_all(&p).await;
    assert!(!uris.iter().any(|u| u.contains("gone")), "{uris:?}");

    // Compacting everything into one table changes nothing that can be seen.
    r.git(&["pack-refs", "--all"]);
    assert_eq!(tables(&r).len(), 1);
    assert_eq!(kind(&p, "git://gone/x").await, ErrorKind::NotFound);
    assert_eq!(text(&p, "git://main/x").await, "two\n");
    assert_eq!(text(&p, "git://v1.0/x").await, "one\n");
    assert_eq!(list_all(&p).await, uris);
}

#[tokio::test]
async fn an_empty_repository_opens() {
    // `git init` alone: HEAD is a symbolic ref to a branch that does not exist yet.
    let r = TestRepo::new_reftable();
    let p = provider(&r);
    assert!(p.ready().await);
    assert_eq!(kind(&p, "git://HEAD").await, ErrorKind::NotFound);
    assert_eq!(kind(&p, "git://main/x").await, ErrorKind::NotFound);
    assert!(list_all(&p).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_written_to_the_repository() {
    let (r, _, _) = two_commits(TestRepo::new_reftable());
    let snapshot = || {
        let out = std::process::Command::new("find")
            .arg(r.path().join(".git"))
            .args(["-printf", "%p %s %T@\n"])
            .output()
            .unwrap();
        let mut lines: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        lines.sort();
        lines
    };
    let before = snapshot();
    let p = watching_provider(&r, RefWatchMode::Poll);
    let bus = Arc::new(LocalBus::default());
    let _w = watch(&p, "git://main/x", &bus).await;
    let _l = p
        .watch_list(ChangeSink::new(bus.clone(), "m0"))
        .await
        .unwrap();
    list_all(&p).await;
    complete_ref(&p, "").await;
    for u in [
        "git://main/x",
        "git://main",
        "git://v1.0",
        "git://main/x?history",
        "git://main/",
    ] {
        read(&p, u).await.unwrap();
    }
    // Let the poller run a few checks.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(before, snapshot());
}

/// git's switch for its automatic compaction after each update (a test hook, the only one).
const NO_COMPACTION: (&str, &str) = ("GIT_TEST_REFTABLE_AUTOCOMPACTION", "false");

fn tables(r: &TestRepo) -> Vec<String> {
    std::fs::read_to_string(r.path().join(".git/reftable/tables.list"))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// 2,000 branches and 120 tags: many blocks, padding and restart points, in one table
/// from one transaction, in many tables, and compacted; for several block layouts.
#[tokio::test]
async fn thousands_of_refs_span_many_blocks() {
    for settings in [
        &[][..],
        // Small blocks and restart points on every record or every third.
        &[
            "-c",
            "reftable.blockSize=512",
            "-c",
            "reftable.restartInterval=1",
        ][..],
        &[
            "-c",
            "reftable.blockSize=1024",
            "-c",
            "reftable.restartInterval=3",
        ][..],
        // No object index: the log blocks follow the refs directly.
        &["-c", "reftable.indexObjects=false"][..],
    ] {
        many_refs(settings).await;
    }
}

async fn many_refs(settings: &[&str]) {
    let r = TestRepo::new_reftable();
    r.write("x", b"x\n");
    let c = r.commit("one");
    let mut input = String::new();
    for i in 0..2000 {
        input.push_str(&format!("create refs/heads/team/b{i:04} {c}\n"));
    }
    let mut args = settings.to_vec();
    args.extend(["update-ref", "--stdin"]);
    r.git_stdin(&args, input.as_bytes());
    // Tags one transaction each, without compaction: 120 small tables on top.
    for i in 0..120 {
        let name = format!("t{i:03}");
        let mut a = settings.to_vec();
        a.extend(["tag", name.as_str()]);
        r.git_env(&[NO_COMPACTION], &a);
    }
    assert!(tables(&r).len() > 120);
    let p = provider(&r);
    check_many(&r, &p, settings).await;
    // Compacted into one table, the same refs.
    let mut args = settings.to_vec();
    args.extend(["pack-refs", "--all"]);
    r.git(&args);
    assert_eq!(tables(&r).len(), 1);
    check_many(&r, &p, settings).await;
}

async fn check_many(r: &TestRepo, p: &GitProvider, settings: &[&str]) {
    // What git itself lists.
    let git_refs: BTreeSet<String> = r
        .git_str(&[
            "for-each-ref",
            "--format=%(refname)",
            "refs/heads",
            "refs/tags",
        ])
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(git_refs.len(), 2121, "{settings:?}");
    let listed: BTreeSet<String> = list_all(p)
        .await
        .into_iter()
        .filter(|u| u.matches('/').count() == 2)
        .map(|u| {
            let short = u.trim_start_matches("git://").replace("%2F", "/");
            if short.starts_with('t') && !short.starts_with("team/") {
                format!("refs/tags/{short}")
            } else {
                format!("refs/heads/{short}")
            }
        })
        .collect();
    assert_eq!(listed, git_refs, "{settings:?}");
    for b in [
        "team%2Fb0000",
        "team%2Fb0999",
        "team%2Fb1999",
        "t000",
        "t119",
    ] {
        assert_eq!(
            text(p, &format!("git://{b}/x")).await,
            "x\n",
            "{settings:?}"
        );
    }
    assert_eq!(kind(p, "git://team%2Fb2000/x").await, ErrorKind::NotFound);
    let completed = complete_ref(p, "team/b19").await;
    assert_eq!(completed.len(), 100, "{settings:?}");
    assert_eq!(completed[0], "team/b1900");
}

#[tokio::test]
async fn a_linked_worktree_has_its_own_head() {
    let (r, c1, _) = two_commits(TestRepo::new_reftable());
    let wt = r.path().join("wt");
    r.git(&[
        "worktree",
        "add",
        "-q",
        "-b",
        "wt-branch",
        wt.to_str().unwrap(),
        &c1,
    ]);
    let p = GitProvider::new(GitConfig::new(&wt)).unwrap();
    // HEAD is the worktree's (from its own reftable), branches are shared.
    assert_eq!(text(&p, "git://HEAD/x").await, "one\n");
    assert_eq!(text(&p, "git://main/x").await, "two\n");
    assert_eq!(text(&p, "git://wt-branch/x").await, "one\n");
    let uris = list_all(&p).await;
    assert!(uris.contains(&"git://wt-branch/x".to_owned()), "{uris:?}");
    // The main worktree's HEAD is unchanged.
    assert_eq!(text(&provider(&r), "git://HEAD/x").await, "two\n");
}

#[tokio::test]
async fn a_corrupt_table_is_an_error_not_a_panic() {
    let (r, _, _) = two_commits(TestRepo::new_reftable());
    let p = provider(&r);
    let dir = r.path().join(".git/reftable");
    let list = std::fs::read_to_string(dir.join("tables.list")).unwrap();
    let good = std::fs::read(dir.join(tables(&r).last().unwrap())).unwrap();
    assert_eq!(good[4], 1, "git writes version 1 tables for SHA-1");
    // Each corruption arrives as git's updates do: a new table and a new tables.list naming
    // it (tables are never rewritten in place, so the list identifies the state).
    let mut n = 0;
    let mut install = |bytes: &[u8]| {
        n += 1;
        let name = format!("0x0000000000{n:02}-0x0000000000{n:02}-corrupt.ref");
        std::fs::write(dir.join(&name), bytes).unwrap();
        std::fs::write(dir.join("tables.list"), format!("{list}{name}\n")).unwrap();
        name
    };
    // Truncated: reads fail with an internal error naming the table; start-up is refused.
    let name = install(&good[..good.len() / 2]);
    let err = read(&p, "git://main/x").await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Internal);
    assert!(err.message.contains(&name), "{}", err.message);
    assert!(!p.ready().await);
    let err = GitProvider::new(GitConfig::new(r.path())).err().unwrap();
    assert_eq!(err.kind, ErrorKind::InvalidParams);
    assert!(err.message.contains("reftable"), "{}", err.message);
    // Bad magic.
    let mut bad = good.clone();
    bad[..4].copy_from_slice(b"JUNK");
    install(&bad);
    let err = read(&p, "git://main/x").await.unwrap_err();
    assert!(err.message.contains("magic"), "{}", err.message);
    // The first block's length past the end of the file, with the footer intact.
    let mut bad = good.clone();
    bad[25..28].copy_from_slice(&[0xff, 0xff, 0xff]);
    install(&bad);
    let err = read(&p, "git://main/x").await.unwrap_err();
    assert!(err.message.contains("does not fit"), "{}", err.message);
    // A listed table that does not exist.
    std::fs::write(
        dir.join("tables.list"),
        format!("{list}0x0-0x0-missing.ref\n"),
    )
    .unwrap();
    let err = read(&p, "git://main/x").await.unwrap_err();
    assert!(err.message.contains("missing.ref"), "{}", err.message);
    assert!(err.message.contains("does not exist"), "{}", err.message);
    // Back to the real list: everything reads again.
    std::fs::write(dir.join("tables.list"), &list).unwrap();
    assert_eq!(text(&p, "git://main/x").await, "two\n");
    assert!(p.ready().await);
}

// ------------------------------------------------------------------------------------------
// Notifications
// ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn main_moving_notifies_x_only_when_x_changed() {
    let r = repo_xy(TestRepo::new_reftable());
    let p = watching_provider(&r, RefWatchMode::Auto);
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    let _gx = watch(&p, "git://main/x", &bus).await;
    let _gy = watch(&p, "git://main/y", &bus).await;
    let _gf = watch(&p, "git://feature%2Fx/x", &bus).await;

    // A commit that changes only y: y notifies, x stays silent.
    r.write("y", b"y1\n");
    r.commit("change y");
    let got = events(&mut rx, Duration::from_millis(1500)).await;
    assert!(got.contains(&updated("git://main/y")), "{got:?}");
    assert!(
        !got.contains(&updated("git://main/x")),
        "x did not change: {got:?}"
    );

    // A commit that changes x: notified within a second (inotify on reftable/ only: the
    // poll interval is 30 s).
    r.write("x", b"x1\n");
    r.commit("change x");
    expect(&mut rx, &updated("git://main/x"), Duration::from_secs(1)).await;
    let got = events(&mut rx, Duration::from_millis(500)).await;
    assert!(
        !got.contains(&updated("git://main/y")),
        "y did not change: {got:?}"
    );

    // A branch that does not exist yet notifies when it appears with the path.
    r.git(&["branch", "feature/x"]);
    expect(
        &mut rx,
        &updated("git://feature%2Fx/x"),
        Duration::from_secs(1),
    )
    .await;

    // Compaction rewrites every table but moves nothing.
    r.git(&["pack-refs", "--all"]);
    let got = events(&mut rx, Duration::from_millis(800)).await;
    assert!(got.is_empty(), "{got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_on_branch_and_tag_create_and_delete() {
    let r = repo_xy(TestRepo::new_reftable());
    let p = watching_provider(&r, RefWatchMode::Auto);
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    let _g = p
        .watch_list(ChangeSink::new(bus.clone(), "m3"))
        .await
        .unwrap();
    let lc = ChangeEvent::ListChanged { mount: "m3".into() };
    r.git(&["branch", "new/branch"]);
    expect(&mut rx, &lc, Duration::from_secs(1)).await;
    r.git(&["tag", "-a", "v9", "-m", "nine"]);
    expect(&mut rx, &lc, Duration::from_secs(1)).await;
    r.git(&["branch", "-D", "-q", "new/branch"]);
    expect(&mut rx, &lc, Duration::from_secs(1)).await;
    r.git(&["tag", "-d", "v9"]);
    expect(&mut rx, &lc, Duration::from_secs(1)).await;
    // A content-only commit on the default ref is no list change.
    r.write("x", b"changed\n");
    r.commit("content only");
    let got = events(&mut rx, Duration::from_millis(800)).await;
    assert!(!got.contains(&lc), "{got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_alone_detects_moves() {
    let r = repo_xy(TestRepo::new_reftable());
    let p = watching_provider(&r, RefWatchMode::Poll);
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    let _g = watch(&p, "git://main/x", &bus).await;
    r.write("y", b"other\n");
    r.commit("y only");
    let got = events(&mut rx, Duration::from_millis(700)).await;
    assert!(got.is_empty(), "{got:?}");
    r.write("x", b"polled\n");
    r.commit("x");
    expect(&mut rx, &updated("git://main/x"), Duration::from_secs(1)).await;
}

/// Replace `path` the way git replaces `tables.list`: a lock file renamed over it. Writing it
/// in place would let the watcher read it empty between the truncate and the write, which
/// is a valid stack with no refs (every ref deleted), a state git never shows.
fn replace_like_git(path: &std::path::Path, contents: &str) {
    let mut lock = path.as_os_str().to_owned();
    lock.push(".lock");
    std::fs::write(&lock, contents).unwrap();
    std::fs::rename(&lock, path).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_stack_moves_nothing() {
    let r = repo_xy(TestRepo::new_reftable());
    let p = watching_provider(&r, RefWatchMode::Auto);
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    // Only a URI watch: a list watch would fail the check on its own.
    let _g = watch(&p, "git://main/x", &bus).await;
    // A tables.list naming a table that is not there: the checks fail (and log), but no ref
    // looks deleted, so nothing is notified, neither now nor when the stack is readable again.
    let list_path = r.path().join(".git/reftable/tables.list");
    let list = std::fs::read_to_string(&list_path).unwrap();
    replace_like_git(&list_path, &format!("{list}0x0-0x0-missing.ref\n"));
    let got = events(&mut rx, Duration::from_millis(600)).await;
    assert!(got.is_empty(), "{got:?}");
    replace_like_git(&list_path, &list);
    let got = events(&mut rx, Duration::from_millis(600)).await;
    assert!(got.is_empty(), "{got:?}");
    r.write("x", b"x1\n");
    r.commit("change x");
    expect(&mut rx, &updated("git://main/x"), Duration::from_secs(1)).await;
}
