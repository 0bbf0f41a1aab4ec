//! Change notifications from ref moves: a subscription to `git://main/x` fires when `main`
//! moves and `x` changed, never when `main` moves past commits that leave `x` alone; list
//! changes when branches or tags appear or disappear; packed-refs rewrites are seen; the
//! polling fallback works on its own.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{TestRepo, events, expect, repo_xy, updated, watch};
use mcpr_core::{ChangeBus, ChangeEvent, ChangeSink, LocalBus, Provider, ResourceUri};
use mcpr_provider_git::{GitConfig, GitProvider, RefWatchMode};

fn provider(repo: &TestRepo, mode: RefWatchMode) -> GitProvider {
    let mut cfg = GitConfig::new(repo.path());
    cfg.debounce = Duration::from_millis(20);
    cfg.watch = mode;
    if mode == RefWatchMode::Poll {
        cfg.poll_interval = Duration::from_millis(200);
    } else {
        // Long enough that only inotify can explain a fast notification.
        cfg.poll_interval = Duration::from_secs(30);
    }
    GitProvider::new(cfg).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn main_moving_notifies_x_only_when_x_changed() {
    let r = repo_xy(TestRepo::new());
    let p = provider(&r, RefWatchMode::Auto);
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    let _gx = watch(&p, "git://main/x", &bus).await;
    let _gy = watch(&p, "git://main/y", &bus).await;
    let _gc = watch(&p, "git://main", &bus).await;

    // A commit that changes only y: y and the commit resource notify, x stays silent.
    r.write("y", b"y1\n");
    r.commit("change y");
    let got = events(&mut rx, Duration::from_millis(1500)).await;
    assert!(got.contains(&updated("git://main/y")), "{got:?}");
    assert!(got.contains(&updated("git://main")), "{got:?}");
    assert!(
        !got.contains(&updated("git://main/x")),
        "x did not change: {got:?}"
    );

    // A commit that changes x: notified within a second.
    r.write("x", b"x1\n");
    r.commit("change x");
    let took = expect(&mut rx, &updated("git://main/x"), Duration::from_secs(1)).await;
    assert!(took < Duration::from_secs(1), "{took:?}");
    let got = events(&mut rx, Duration::from_millis(500)).await;
    assert!(
        !got.contains(&updated("git://main/y")),
        "y did not change: {got:?}"
    );

    // Deleting x is a change too.
    r.git(&["rm", "-q", "x"]);
    r.commit("remove x");
    expect(&mut rx, &updated("git://main/x"), Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_branches_and_refs_with_slashes() {
    let r = repo_xy(TestRepo::new());
    r.git(&["branch", "feature/x"]);
    let p = provider(&r, RefWatchMode::Auto);
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    let _g = watch(&p, "git://feature%2Fx/x", &bus).await;
    // Moving main does not touch feature/x.
    r.write("x", b"main\n");
    r.commit("on main");
    let got = events(&mut rx, Duration::from_millis(800)).await;
    assert!(got.is_empty(), "{got:?}");
    r.git(&["checkout", "-q", "feature/x"]);
    r.write("x", b"feature\n");
    r.commit("on feature");
    expect(
        &mut rx,
        &updated("git://feature%2Fx/x"),
        Duration::from_secs(1),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_on_branch_and_tag_create_and_delete() {
    let r = repo_xy(TestRepo::new());
    let p = provider(&r, RefWatchMode::Auto);
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    let _g = p
        .watch_list(ChangeSink::new(bus.clone(), "m3"))
        .await
        .unwrap();
    let lc = ChangeEvent::ListChanged { mount: "m3".into() };
    r.git(&["branch", "new/branch"]);
    expect(&mut rx, &lc, Duration::from_secs(1)).await;
    r.git(&["tag", "v9"]);
    expect(&mut rx, &lc, Duration::from_secs(1)).await;
    r.git(&["branch", "-D", "-q", "new/branch"]);
    expect(&mut rx, &lc, Duration::from_secs(1)).await;
    r.git(&["tag", "-d", "v9"]);
    expect(&mut rx, &lc, Duration::from_secs(1)).await;
    // Content changes on the default ref do not change the set of resources...
    r.write("x", b"changed\n");
    r.commit("content only");
    let got = events(&mut rx, Duration::from_millis(800)).await;
    assert!(!got.contains(&lc), "{got:?}");
    // ...a new file does.
    r.write("dir/new.txt", b"new\n");
    r.commit("new file");
    expect(&mut rx, &lc, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn packed_refs_rewrites_are_detected() {
    let r = repo_xy(TestRepo::new());
    let main0 = r.git_str(&["rev-parse", "main"]);
    r.git(&["checkout", "-q", "-b", "side"]);
    r.write("x", b"from side\n");
    let side = r.commit("side changes x");
    r.git(&["checkout", "-q", "main"]);
    let p = provider(&r, RefWatchMode::Auto);
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    let _g = watch(&p, "git://main/x", &bus).await;
    let _l = p
        .watch_list(ChangeSink::new(bus.clone(), "m0"))
        .await
        .unwrap();

    // Packing moves nothing: no notification, and reads still resolve.
    r.git(&["pack-refs", "--all"]);
    let git_dir = r.path().join(".git");
    assert!(!git_dir.join("refs/heads/main").exists());
    let got = events(&mut rx, Duration::from_millis(800)).await;
    assert!(got.is_empty(), "{got:?}");

    // Move main inside packed-refs only (as a fetch into a packed repository does),
    // replacing the file atomically like git.
    let packed = std::fs::read_to_string(git_dir.join("packed-refs")).unwrap();
    let moved = packed.replace(
        &format!("{main0} refs/heads/main"),
        &format!("{side} refs/heads/main"),
    );
    assert_ne!(packed, moved);
    std::fs::write(git_dir.join("packed-refs.new"), moved).unwrap();
    std::fs::rename(git_dir.join("packed-refs.new"), git_dir.join("packed-refs")).unwrap();
    expect(&mut rx, &updated("git://main/x"), Duration::from_secs(1)).await;
    let c = p
        .read(
            &ResourceUri::parse("git://main/x").unwrap(),
            &mcpr_core::ReadLimits { max_bytes: 1024 },
        )
        .await
        .unwrap()
        .contents;
    assert_eq!(
        c[0].body,
        mcpr_core::ContentsBody::Text("from side\n".into())
    );

    // Deleting a branch that lives only in packed-refs is a list change.
    r.git(&["branch", "-D", "-q", "side"]);
    expect(
        &mut rx,
        &ChangeEvent::ListChanged { mount: "m0".into() },
        Duration::from_secs(1),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_alone_detects_moves() {
    let r = repo_xy(TestRepo::new());
    let p = provider(&r, RefWatchMode::Poll);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_token_follows_the_path_not_the_ref() {
    let r = repo_xy(TestRepo::new());
    let p = provider(&r, RefWatchMode::Auto);
    let x = ResourceUri::parse("git://main/x").unwrap();
    let t0 = p.change_token(&x).await.unwrap();
    r.write("y", b"y2\n");
    r.commit("y");
    let t1 = p.change_token(&x).await.unwrap();
    r.write("x", b"x2\n");
    r.commit("x");
    let t2 = p.change_token(&x).await.unwrap();
    assert_ne!(t0, t2);
    assert_ne!(t1, t2);
    // The token names the commit too, so it differs after any move; what matters for the
    // server is that an unchanged state gives the same token.
    assert_eq!(p.change_token(&x).await.unwrap(), t2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_off_declares_nothing() {
    let r = repo_xy(TestRepo::new());
    let p = provider(&r, RefWatchMode::Off);
    assert!(!p.info().capabilities.watch);
    assert!(!p.info().capabilities.list_changed);
    let bus = Arc::new(LocalBus::default());
    let err = p
        .watch(
            &ResourceUri::parse("git://main/x").unwrap(),
            ChangeSink::new(bus, "m0"),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind, mcpr_core::ErrorKind::Unsupported);
}

/// Every URI of one ref and path (history pages, directory blocks) shares one check per
/// round, and each of them is told when that path changes, and only then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_uri_of_one_path_hears_its_change_once() {
    let r = repo_xy(TestRepo::new());
    r.write("d/a", b"a0\n");
    r.write("d/b", b"b0\n");
    r.commit("dir");
    let p = provider(&r, RefWatchMode::Auto);
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    let x_uris = [
        "git://main/x",
        "git://main/x?history",
        "git://main/x?history&limit=3",
        "git://main/x?history&limit=7",
    ];
    let d_uris = [
        "git://main/d",
        "git://main/d?after=a",
        "git://main/d?history",
    ];
    let mut guards = Vec::new();
    for u in x_uris.iter().chain(&d_uris) {
        guards.push(watch(&p, u, &bus).await);
    }
    let sorted = |mut v: Vec<ChangeEvent>| {
        v.sort_by_key(|e| format!("{e:?}"));
        v
    };
    // y alone: nobody.
    r.write("y", b"y1\n");
    r.commit("y");
    let got = events(&mut rx, Duration::from_millis(800)).await;
    assert!(got.is_empty(), "{got:?}");
    // x: each URI of x once, none of d.
    r.write("x", b"x1\n");
    r.commit("x");
    let got = events(&mut rx, Duration::from_millis(1500)).await;
    assert_eq!(
        sorted(got),
        sorted(x_uris.iter().map(|u| updated(u)).collect())
    );
    // A file inside d: each URI of d once.
    r.write("d/b", b"b1\n");
    r.commit("d/b");
    let got = events(&mut rx, Duration::from_millis(1500)).await;
    assert_eq!(
        sorted(got),
        sorted(d_uris.iter().map(|u| updated(u)).collect())
    );
    drop(guards);
}
