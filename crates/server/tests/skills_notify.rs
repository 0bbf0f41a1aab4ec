//! Skills and change notifications through the `Service` over real files and git mounts:
//! a subscription to a `skill://` URI (legacy subscribe and a 2026-07-28 listen) is told of
//! its file's changes under that URI; skills appearing, going or turning invalid are list
//! changes; a warm listing walks nothing and a change is seen by the next one; a git mount
//! serves its skills at its default ref.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mcpr_core::Provider;
use mcpr_provider_files::{FilesConfig, FilesProvider};
use mcpr_provider_git::{GitConfig, GitProvider};
use mcpr_server::skills::SkillsSetting;
use mcpr_server::{ChangeTokens, Notice, ServerState, Service, Settings};

/// How long a notice may take (the files watcher debounces 50 ms).
const WAIT: Duration = Duration::from_secs(10);

fn skill_md(name: &str) -> String {
    format!("---\nname: {name}\ndescription: Does {name}\n---\nUse it.\n")
}

fn put(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn service_over(provider: Arc<dyn Provider>, rev: Option<&str>) -> Service {
    let settings = Settings {
        skills: vec![SkillsSetting {
            mount: 0,
            path: "skills".into(),
            prefix: String::new(),
            rev: rev.map(str::to_owned),
        }],
        ..Settings::default()
    };
    Service::new(ServerState::with_bus(
        settings,
        vec![(provider, None)],
        Arc::new(mcpr_core::LocalBus::default()),
    ))
}

/// A files mount with skills `alpha` and `beta` under `skills/`.
fn files_setup() -> (tempfile::TempDir, std::path::PathBuf, Service) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    for name in ["alpha", "beta"] {
        put(&root, &format!("skills/{name}/SKILL.md"), &skill_md(name));
        put(&root, &format!("skills/{name}/ref/notes.txt"), "notes\n");
    }
    let files: Arc<dyn Provider> = Arc::new(FilesProvider::new(FilesConfig::new(&root)).unwrap());
    let service = service_over(files, None);
    (dir, root, service)
}

async fn next(rx: &mut mcpr_server::mailbox::Receiver) -> Notice {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("a notice in time")
        .expect("the registry is alive")
}

async fn skill_uris(service: &Service) -> Vec<String> {
    service
        .list_skills(None, None)
        .await
        .unwrap()
        .skills
        .into_iter()
        .map(|s| s.uri)
        .collect()
}

/// Poll `f` until it holds (a change is seen once its watch reports it).
async fn eventually<F: AsyncFn() -> bool>(what: &str, f: F) {
    let start = std::time::Instant::now();
    while !f().await {
        assert!(start.elapsed() < WAIT, "{what}: not seen in time");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skill_uri_subscription_is_told_of_its_file_under_that_uri() {
    let (_d, root, service) = files_setup();
    let uri = "skill://alpha/ref/notes.txt";
    let (subscriber, mut rx) = service.add_subscriber(None);
    service
        .subscribe(None, uri, || subscriber.id())
        .await
        .unwrap();
    let stats = service.state().registry().stats();
    assert_eq!((stats.subscriptions, stats.watched_uris), (1, 1));
    // The same file subscribed under its mount URI too shares the one watch.
    let target = format!(
        "{}/skills/alpha/ref/notes.txt",
        mcpr_provider_files::encode_path_uri(&root)
    );
    service
        .subscribe(None, &target, || subscriber.id())
        .await
        .unwrap();
    assert_eq!(service.state().registry().stats().watched_uris, 1);

    put(&root, "skills/alpha/ref/notes.txt", "changed notes\n");
    let mut got = vec![next(&mut rx).await, next(&mut rx).await];
    got.sort_by_key(|n| format!("{n:?}"));
    assert_eq!(
        got,
        [Notice::Updated(target.clone()), Notice::Updated(uri.into())],
        "each name it was subscribed under, once"
    );
    // skills/get right after the notice shows the new digest.
    let (skill, _) = service
        .get_skill(None, "skill://alpha/SKILL.md")
        .await
        .unwrap();
    let rmcp::model::SkillResources::Files(files) = &skill.resources else {
        panic!("a manifest")
    };
    let notes = files.iter().find(|f| f.uri == uri).unwrap();
    notes.verify(b"changed notes\n").unwrap();

    service.unsubscribe(subscriber.id(), uri).await.unwrap();
    let stats = service.state().registry().stats();
    assert_eq!((stats.subscriptions, stats.watched_uris), (1, 1));
    service.unsubscribe(subscriber.id(), &target).await.unwrap();
    assert_eq!(service.state().registry().stats().watched_uris, 0);

    // A skill:// URI no skill has is not found, and registers nothing.
    let e = service
        .subscribe(None, "skill://alpha/missing.txt", || subscriber.id())
        .await
        .unwrap_err();
    assert_eq!(e.kind, mcpr_core::ErrorKind::NotFound);
    assert_eq!(service.state().registry().stats().subscriptions, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_on_a_skill_uri_is_acknowledged_and_told_under_that_uri() {
    let (_d, root, service) = files_setup();
    let uri = "skill://beta/SKILL.md".to_owned();
    let tokens = ChangeTokens::default();
    // Nobody listed skills yet: the listen looks them up before it is acknowledged.
    let mut uris = vec![uri.clone(), "skill://beta/nope.md".to_owned()];
    service.prepare_listen(&uris, &tokens).await;
    service.accept_listen(&mut uris);
    assert_eq!(
        uris,
        std::slice::from_ref(&uri),
        "the acknowledgment keeps the skill file"
    );
    let mut listen = service
        .listen(None, None, &uris, false, &tokens)
        .await
        .unwrap();
    put(
        &root,
        "skills/beta/SKILL.md",
        &format!("{}More.\n", skill_md("beta")),
    );
    let got = tokio::time::timeout(WAIT, listen.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, Notice::Updated(uri));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skills_appearing_going_or_turning_invalid_are_list_changes() {
    let (_d, root, service) = files_setup();
    let (subscriber, mut rx) = service.add_subscriber(None);
    service.listen_for_list_changes(subscriber.id());
    assert_eq!(skill_uris(&service).await.len(), 2);
    let list = Notice::ListChanged;

    // A SKILL.md edited in place is no change to the mount's set of files: only the
    // catalog, finding the skill invalid, tells of it.
    put(&root, "skills/beta/SKILL.md", "---\nname: wrong\n---\n");
    assert_eq!(next(&mut rx).await, list);
    assert_eq!(skill_uris(&service).await, ["skill://alpha/SKILL.md"]);
    put(&root, "skills/beta/SKILL.md", &skill_md("beta"));
    assert_eq!(next(&mut rx).await, list);
    assert_eq!(skill_uris(&service).await.len(), 2);

    // A new folder with a SKILL.md, then one removed.
    put(&root, "skills/gamma/SKILL.md", &skill_md("gamma"));
    assert_eq!(next(&mut rx).await, list);
    eventually("gamma listed", async || {
        skill_uris(&service).await.len() == 3
    })
    .await;
    std::fs::remove_dir_all(root.join("skills/alpha")).unwrap();
    assert_eq!(next(&mut rx).await, list);
    eventually("alpha gone", async || {
        skill_uris(&service).await == ["skill://beta/SKILL.md", "skill://gamma/SKILL.md"]
    })
    .await;
    // A file that is no SKILL.md changing is an update of that file, not a list change.
    while tokio::time::timeout(Duration::from_millis(300), rx.recv())
        .await
        .is_ok()
    {}
    put(&root, "skills/beta/ref/notes.txt", "other\n");
    let quiet = tokio::time::timeout(Duration::from_millis(500), rx.recv()).await;
    assert!(quiet.is_err(), "no list change: {quiet:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_listing_walks_nothing_and_the_next_after_a_change_sees_it() {
    let (_d, root, service) = files_setup();
    let stats = || {
        let c = service.state().skills().expect("a catalog");
        (
            c.stats.walks.load(Ordering::Relaxed),
            c.stats.hashed.load(Ordering::Relaxed),
        )
    };
    assert_eq!(skill_uris(&service).await.len(), 2);
    let first = stats();
    assert_eq!(first.0, 1);
    for _ in 0..3 {
        assert_eq!(skill_uris(&service).await.len(), 2);
    }
    assert_eq!(stats(), first, "warm listings walk and hash nothing");

    put(&root, "skills/delta/SKILL.md", &skill_md("delta"));
    eventually("delta listed", async || {
        skill_uris(&service).await.len() == 3
    })
    .await;
    let after = stats();
    assert!(after.0 > first.0, "the change made a walk");
    assert_eq!(after.1, first.1 + 1, "only the new file hashed");
    // A change deep inside a skill is seen too (its folder is watched).
    put(&root, "skills/alpha/ref/notes.txt", "deep change\n");
    eventually("the new digest", async || {
        let page = service.list_skills(None, None).await.unwrap();
        let alpha = page
            .skills
            .iter()
            .find(|s| s.uri.contains("alpha"))
            .unwrap();
        let rmcp::model::SkillResources::Files(files) = &alpha.resources else {
            return false;
        };
        files
            .iter()
            .any(|f| f.uri.ends_with("notes.txt") && f.verify(b"deep change\n").is_ok())
    })
    .await;
}

fn git(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_git_mount_serves_skills_at_its_default_ref_not_head() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path();
    git(repo, &["init", "-q", "-b", "main"]);
    put(repo, "skills/release/SKILL.md", &skill_md("release"));
    git(repo, &["add", "."]);
    git(repo, &["commit", "-q", "-m", "skills"]);
    // HEAD moves to a branch without them: the mount's default ref is still main.
    git(repo, &["checkout", "-q", "-b", "scratch"]);
    put(repo, "skills/draft/SKILL.md", &skill_md("draft"));
    git(repo, &["add", "."]);
    git(repo, &["commit", "-q", "-m", "draft"]);

    let mut config = GitConfig::new(repo);
    config.default_ref = Some("main".into());
    let provider: Arc<dyn Provider> = Arc::new(GitProvider::new(config.clone()).unwrap());
    let service = service_over(provider, None);
    let page = service.list_skills(None, None).await.unwrap();
    assert_eq!(
        page.skills
            .iter()
            .map(|s| s.uri.as_str())
            .collect::<Vec<_>>(),
        ["skill://release/SKILL.md"]
    );
    let read = service
        .read(None, "skill://release/SKILL.md")
        .await
        .unwrap();
    assert_eq!(read.contents[0].uri, "skill://release/SKILL.md");
    let catalog = service.state().skills().unwrap();
    assert_eq!(catalog.sources()[0].root, "git://main/skills");

    // `skills_ref` still pins another ref.
    let provider: Arc<dyn Provider> = Arc::new(GitProvider::new(config).unwrap());
    let pinned = service_over(provider, Some("scratch"));
    assert_eq!(skill_uris(&pinned).await.len(), 2);
    // Without a default ref, HEAD (scratch here).
    let provider: Arc<dyn Provider> = Arc::new(GitProvider::new(GitConfig::new(repo)).unwrap());
    let head = service_over(provider, None);
    assert_eq!(skill_uris(&head).await.len(), 2);
}
