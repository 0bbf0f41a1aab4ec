//! `skills/list`, `skills/get` and `skill://` reads through the `Service` over a real files
//! mount carrying skills: signed cursors, -32602 for an unknown skill, bytes read through
//! the mount equal to the manifest, scopes hiding a mount's skills.

use std::collections::BTreeSet;
use std::sync::Arc;

use mcpr_core::{ContentsBody, ErrorKind, Provider};
use mcpr_provider_files::{FilesConfig, FilesProvider};
use mcpr_server::http::Grant;
use mcpr_server::skills::SkillsSetting;
use mcpr_server::{ServerState, Service, Settings, to_mcp_error};
use rmcp::model::SkillResources;

fn setup(scope: Option<&str>) -> (tempfile::TempDir, Service) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    for name in ["alpha", "beta", "gamma"] {
        let d = root.join("team-skills").join(name);
        std::fs::create_dir_all(d.join("ref")).unwrap();
        std::fs::write(
            d.join("SKILL.md"),
            format!("---\nname: {name}\ndescription: Does {name}\n---\nUse it.\n"),
        )
        .unwrap();
        std::fs::write(d.join("ref/notes.txt"), format!("{name} notes\n")).unwrap();
    }
    let settings = Settings {
        page_size: 2,
        skills: vec![SkillsSetting {
            mount: 0,
            path: "team-skills".into(),
            prefix: "acme".into(),
            rev: None,
        }],
        ..Settings::default()
    };
    let files: Arc<dyn Provider> = Arc::new(FilesProvider::new(FilesConfig::new(&root)).unwrap());
    let state = ServerState::with_bus(
        settings,
        vec![(files, scope.map(str::to_owned))],
        Arc::new(mcpr_core::LocalBus::default()),
    );
    (dir, Service::new(state))
}

fn grant(scopes: &[&str]) -> Grant {
    Grant {
        scopes: Some(
            scopes
                .iter()
                .map(|s| s.to_string())
                .collect::<BTreeSet<_>>(),
        ),
        personal: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skills_list_pages_get_answers_and_skill_uris_read_through_the_mount() {
    let (_dir, service) = setup(None);
    assert!(service.has_skills());
    let first = service.list_skills(None, None).await.unwrap();
    assert_eq!(first.skills.len(), 2);
    let cursor = first
        .next_cursor
        .clone()
        .expect("three skills, pages of two");
    let second = service.list_skills(None, Some(&cursor)).await.unwrap();
    assert!(second.next_cursor.is_none());
    let uris: Vec<String> = first
        .skills
        .iter()
        .chain(&second.skills)
        .map(|s| s.uri.clone())
        .collect();
    assert_eq!(
        uris,
        [
            "skill://acme/alpha/SKILL.md",
            "skill://acme/beta/SKILL.md",
            "skill://acme/gamma/SKILL.md",
        ]
    );
    // A listing cursor does not continue skills/list, nor the other way round.
    let e = service.list(None, Some(&cursor)).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidCursor);

    let (skill, _) = service
        .get_skill(None, "skill://acme/beta/SKILL.md")
        .await
        .unwrap();
    assert_eq!(skill.frontmatter.description, "Does beta");
    let SkillResources::Files(files) = &skill.resources else {
        panic!("a manifest of files")
    };
    for f in files {
        let read = service.read(None, &f.uri).await.unwrap();
        assert_eq!(read.contents[0].uri, f.uri, "contents are named as asked");
        let bytes = match &read.contents[0].body {
            ContentsBody::Text(t) => t.as_bytes().to_vec(),
            ContentsBody::Blob(b) => b.clone(),
        };
        f.verify(&bytes).unwrap();
    }
    let e = service
        .get_skill(None, "skill://acme/nope/SKILL.md")
        .await
        .unwrap_err();
    assert_eq!(to_mcp_error(e).code.0, -32602);
    let e = service
        .read(None, "skill://acme/beta/missing.txt")
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);
    // A skill:// URI can be subscribed to: it is watched as the mount file behind it
    // (delivery: tests/skills_notify.rs).
    let (subscriber, _rx) = service.add_subscriber(None);
    service
        .subscribe(None, "skill://acme/beta/SKILL.md", || subscriber.id())
        .await
        .unwrap();
    let stats = service.state().registry().stats();
    assert_eq!((stats.subscriptions, stats.watched_uris), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mount_the_grant_may_not_see_has_no_skills_for_it() {
    let (_dir, service) = setup(Some("team"));
    let team = grant(&["team"]);
    let other = grant(&[]);
    assert_eq!(
        service
            .list_skills(Some(&team), None)
            .await
            .unwrap()
            .skills
            .len(),
        2
    );
    let page = service.list_skills(Some(&other), None).await.unwrap();
    assert!(page.skills.is_empty() && page.next_cursor.is_none());
    let e = service
        .get_skill(Some(&other), "skill://acme/alpha/SKILL.md")
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidParams);
    let e = service
        .read(Some(&other), "skill://acme/alpha/SKILL.md")
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);
    assert!(
        service
            .read(Some(&team), "skill://acme/alpha/SKILL.md")
            .await
            .is_ok()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skill_md_files_are_listed_and_skill_folders_read_as_directories() {
    let (_dir, service) = setup(None);
    // Pages of two: the mount's nine files, then the three SKILL.md entries.
    let (mut all, mut cursor) = (Vec::new(), None::<String>);
    loop {
        let page = service.list(None, cursor.as_deref()).await.unwrap();
        assert!(page.items.len() <= 2);
        all.extend(page.items);
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    let skills: Vec<_> = all
        .iter()
        .filter(|m| m.uri.starts_with("skill://"))
        .collect();
    assert_eq!(all.len(), 9);
    assert_eq!(skills.len(), 3);
    assert_eq!(skills[1].uri, "skill://acme/beta/SKILL.md");
    assert_eq!(skills[1].name, "beta");
    assert_eq!(skills[1].description.as_deref(), Some("Does beta"));
    assert_eq!(skills[1].mime_type.as_deref(), Some("text/markdown"));

    let page = service
        .read_directory(None, "skill://acme/beta", None)
        .await
        .unwrap();
    let children: Vec<(&str, Option<&str>)> = page
        .items
        .iter()
        .map(|m| (m.uri.as_str(), m.mime_type.as_deref()))
        .collect();
    assert_eq!(
        children,
        [
            ("skill://acme/beta/SKILL.md", Some("text/markdown")),
            ("skill://acme/beta/ref", Some("inode/directory")),
        ]
    );
    let sub = service
        .read_directory(None, "skill://acme/beta/ref", None)
        .await
        .unwrap();
    assert_eq!(sub.items[0].uri, "skill://acme/beta/ref/notes.txt");
    let e = service
        .read_directory(None, "skill://acme/beta/SKILL.md", None)
        .await
        .unwrap_err();
    assert_eq!(to_mcp_error(e).code.0, -32602, "a file is not a directory");
    let e = service
        .read_directory(None, "skill://acme/nope", None)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);
}

/// `skills/list`, `skills/get` and the set-up of a `subscriptions/listen` each have their
/// own series in `mcp_requests_total`, with the outcome the client saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skills_methods_and_listens_are_counted() {
    let (_dir, service) = setup(None);
    let first = service.list_skills(None, None).await.unwrap();
    service
        .list_skills(None, first.next_cursor.as_deref())
        .await
        .unwrap();
    service
        .get_skill(None, "skill://acme/alpha/SKILL.md")
        .await
        .unwrap();
    service
        .get_skill(None, "skill://acme/nobody/SKILL.md")
        .await
        .unwrap_err();
    let tokens = mcpr_server::ChangeTokens::default();
    let uris = vec!["skill://acme/alpha/ref/notes.txt".to_owned()];
    let listen = service
        .listen(None, None, &uris, true, &tokens)
        .await
        .unwrap();
    let m = service.state().metrics();
    assert_eq!(m.count("skills/list", "ok"), 2);
    assert_eq!(m.count("skills/get", "ok"), 1);
    assert_eq!(m.count("skills/get", "invalid_params"), 1);
    assert_eq!(m.count("subscriptions/listen", "ok"), 1);
    drop(listen);
}

/// `f`, which must answer within ten seconds, run as a task of its own so that a panic in it
/// shows as a failed task here rather than as this test's panic.
async fn answered<T: Send + 'static>(
    what: &str,
    f: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    match tokio::time::timeout(std::time::Duration::from_secs(10), tokio::spawn(f)).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => panic!("{what}: the request's task failed: {e}"),
        Err(_) => panic!("{what}: no answer in 10 s"),
    }
}

/// A folder link inside a skill (`skills/alpha/shared -> ../../c`, a link to a shorter path
/// in the same mount) used to make the catalog panic on every walk, so that no skills
/// request and no `resources/list` was answered again. The skill is listed, its manifest
/// holds its own files and not the linked folder's (they are not under the skill's folder),
/// and every request that consults the catalog keeps answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folder_link_to_a_shorter_path_in_a_skill_neither_panics_nor_stalls_later_requests() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    for name in ["alpha", "beta"] {
        let d = root.join("skills").join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join("SKILL.md"),
            format!("---\nname: {name}\ndescription: Does {name}\n---\nUse it.\n"),
        )
        .unwrap();
    }
    // `c/x.txt` is shorter than `skills/alpha`: its URI cannot be cut at the folder's length.
    std::fs::create_dir_all(root.join("c")).unwrap();
    std::fs::write(root.join("c/x.txt"), "shared\n").unwrap();
    std::os::unix::fs::symlink("../../c", root.join("skills/alpha/shared")).unwrap();
    let settings = Settings {
        skills: vec![SkillsSetting {
            mount: 0,
            path: "skills".into(),
            prefix: String::new(),
            rev: None,
        }],
        ..Settings::default()
    };
    let files: Arc<dyn Provider> = Arc::new(FilesProvider::new(FilesConfig::new(&root)).unwrap());
    let service = Service::new(ServerState::new(settings, vec![files]));

    // Twice: a panic used to repeat on every walk.
    for _ in 0..2 {
        let s = service.clone();
        let page = answered(
            "skills/list",
            async move { s.list_skills(None, None).await },
        )
        .await
        .unwrap();
        let uris: Vec<&str> = page.skills.iter().map(|s| s.uri.as_str()).collect();
        assert_eq!(uris, ["skill://alpha/SKILL.md", "skill://beta/SKILL.md"]);
        let SkillResources::Files(files) = &page.skills[0].resources else {
            panic!("a manifest of files")
        };
        let files: Vec<&str> = files.iter().map(|f| f.uri.as_str()).collect();
        assert_eq!(files, ["skill://alpha/SKILL.md"]);

        let s = service.clone();
        answered("skills/get", async move {
            s.get_skill(None, "skill://alpha/SKILL.md").await
        })
        .await
        .unwrap();
        let s = service.clone();
        answered("resources/read", async move {
            s.read(None, "skill://alpha/SKILL.md").await
        })
        .await
        .unwrap();
        let s = service.clone();
        let e = answered("resources/read", async move {
            s.read(None, "skill://alpha/shared/x.txt").await
        })
        .await
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotFound);
        let s = service.clone();
        let page = answered("resources/directory/read", async move {
            s.read_directory(None, "skill://alpha", None).await
        })
        .await
        .unwrap();
        let children: Vec<&str> = page.items.iter().map(|m| m.uri.as_str()).collect();
        assert_eq!(children, ["skill://alpha/SKILL.md", "skill://alpha/shared"]);
        // The linked folder's children are not the skill's.
        let s = service.clone();
        let page = answered("resources/directory/read", async move {
            s.read_directory(None, "skill://alpha/shared", None).await
        })
        .await
        .unwrap();
        assert!(page.items.is_empty(), "{:?}", page.items);
        let s = service.clone();
        let page = answered("resources/list", async move { s.list(None, None).await })
            .await
            .unwrap();
        assert!(
            page.items.iter().any(|m| m.uri == "skill://alpha/SKILL.md"),
            "{:?}",
            page.items
        );
    }
}

/// Two files mounts carrying skills: the first, scoped `admin`, in a folder named
/// `admin-only-mount`, holds `alpha` and `secret`; the second, for everyone, holds its own
/// `alpha`. Both without a prefix, so both serve `skill://alpha/SKILL.md`.
fn two_mounts() -> (tempfile::TempDir, std::path::PathBuf, Service) {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let admin = base.join("admin-only-mount");
    let public = base.join("public-mount");
    for (root, name, says) in [
        (&admin, "alpha", "admin alpha"),
        (&admin, "secret", "admin secret"),
        (&public, "alpha", "public alpha"),
    ] {
        let d = root.join("skills").join(name);
        std::fs::create_dir_all(d.join("ref")).unwrap();
        std::fs::write(
            d.join("SKILL.md"),
            format!("---\nname: {name}\ndescription: {says}\n---\n"),
        )
        .unwrap();
        std::fs::write(d.join("ref/notes.txt"), says).unwrap();
    }
    let setting = |mount| SkillsSetting {
        mount,
        path: "skills".into(),
        prefix: String::new(),
        rev: None,
    };
    let settings = Settings {
        skills: vec![setting(0), setting(1)],
        ..Settings::default()
    };
    let mount = |root: &std::path::Path| -> Arc<dyn Provider> {
        Arc::new(FilesProvider::new(FilesConfig::new(root)).unwrap())
    };
    let state = ServerState::with_bus(
        settings,
        vec![
            (mount(&admin), Some("admin".to_owned())),
            (mount(&public), None),
        ],
        Arc::new(mcpr_core::LocalBus::default()),
    );
    (dir, admin, Service::new(state))
}

/// A caller whose token does not cover a mount neither reaches its skills nor learns where
/// the mount is from an error: a hidden mount's skill is not found, the error naming only
/// the URI asked, through skills/get, reads and directory reads alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hidden_mounts_skill_is_not_found_and_no_error_names_its_path() {
    let (_dir, admin, service) = two_mounts();
    let other = grant(&[]);
    let admin_path = admin.display().to_string();
    let hidden = |e: &mcpr_core::Error, asked: &str| {
        assert!(
            !e.message.contains(&admin_path) && !e.message.contains("admin-only-mount"),
            "{}",
            e.message
        );
        assert!(e.message.contains(asked), "{}", e.message);
        if let Some(uri) = &e.uri {
            assert_eq!(uri, asked);
        }
    };
    for asked in ["skill://secret", "skill://secret/ref", "skill://secret/"] {
        let e = service
            .read_directory(Some(&other), asked, None)
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotFound, "{asked}");
        hidden(&e, asked);
    }
    for asked in ["skill://secret/SKILL.md", "skill://secret/ref/notes.txt"] {
        let e = service.read(Some(&other), asked).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotFound, "{asked}");
        hidden(&e, asked);
    }
    let e = service
        .get_skill(Some(&other), "skill://secret/SKILL.md")
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidParams);
    hidden(&e, "skill://secret/SKILL.md");
    // The admin sees them.
    let admin_grant = grant(&["admin"]);
    assert!(
        service
            .read_directory(Some(&admin_grant), "skill://secret", None)
            .await
            .is_ok()
    );
    // The hidden mount's template cannot be completed either, and the refusal is the one an
    // unknown template gets.
    let template = service.state().router().mounts()[0]
        .provider
        .templates()
        .first()
        .map(|t| t.uri_template.clone())
        .expect("a files mount has templates");
    let hidden_template = service
        .complete(
            Some(&other),
            mcpr_server::CompletionRef::Template(&template),
            "path",
            "",
            Default::default(),
        )
        .await
        .unwrap_err();
    let unknown = service
        .complete(
            Some(&other),
            mcpr_server::CompletionRef::Template("nope://{x}"),
            "x",
            "",
            Default::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(hidden_template.kind, unknown.kind);
    assert_eq!(
        hidden_template.message,
        unknown.message.replace("nope://{x}", &template)
    );
}

/// Two mounts serving one skill URI are settled among the mounts the caller may see: a
/// scoped mount's `alpha`, first in order, no longer hides the public mount's `alpha` from a
/// caller who may not see the scoped one; a caller who sees both gets the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skill_uri_collisions_are_settled_among_the_mounts_the_caller_sees() {
    let (_dir, _admin, service) = two_mounts();
    let other = grant(&[]);
    let admin = grant(&["admin"]);
    let described = |page: &mcpr_server::SkillsPage| -> Vec<(String, String)> {
        page.skills
            .iter()
            .map(|s| (s.uri.clone(), s.frontmatter.description.clone()))
            .collect()
    };
    let page = service.list_skills(Some(&other), None).await.unwrap();
    assert_eq!(
        described(&page),
        [("skill://alpha/SKILL.md".into(), "public alpha".into())]
    );
    let (skill, _) = service
        .get_skill(Some(&other), "skill://alpha/SKILL.md")
        .await
        .unwrap();
    assert_eq!(skill.frontmatter.description, "public alpha");
    let read = service
        .read(Some(&other), "skill://alpha/ref/notes.txt")
        .await
        .unwrap();
    assert!(
        matches!(&read.contents[0].body, ContentsBody::Text(t) if t == "public alpha"),
        "{:?}",
        read.contents[0].body
    );
    let dir = service
        .read_directory(Some(&other), "skill://alpha/ref", None)
        .await
        .unwrap();
    assert_eq!(dir.items.len(), 1);
    assert_eq!(dir.items[0].uri, "skill://alpha/ref/notes.txt");
    let listed = service.list(Some(&other), None).await.unwrap();
    let skill_entries: Vec<_> = listed
        .items
        .iter()
        .filter(|m| m.uri.starts_with("skill://"))
        .map(|m| (m.uri.as_str(), m.description.as_deref()))
        .collect();
    assert_eq!(
        skill_entries,
        [("skill://alpha/SKILL.md", Some("public alpha"))]
    );

    let page = service.list_skills(Some(&admin), None).await.unwrap();
    assert_eq!(
        described(&page),
        [
            ("skill://alpha/SKILL.md".into(), "admin alpha".into()),
            ("skill://secret/SKILL.md".into(), "admin secret".into()),
        ]
    );
    let (skill, _) = service
        .get_skill(Some(&admin), "skill://alpha/SKILL.md")
        .await
        .unwrap();
    assert_eq!(skill.frontmatter.description, "admin alpha");
}

/// Every page of `resources/list` for a caller holding `grant`, in order.
async fn list_all(service: &Service, grant: Option<&Grant>) -> Vec<mcpr_core::ResourceMeta> {
    let (mut all, mut cursor) = (Vec::new(), None::<String>);
    loop {
        let page = service.list(grant, cursor.as_deref()).await.unwrap();
        all.extend(page.items);
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => return all,
        }
    }
}

/// The name, description and MIME type of `m`, for comparing listing entries.
fn described(m: &mcpr_core::ResourceMeta) -> (&str, Option<&str>, Option<&str>) {
    (
        m.name.as_str(),
        m.description.as_deref(),
        m.mime_type.as_deref(),
    )
}

/// A client that meets a skill's `SKILL.md` by its mount URI (the files mount's own
/// `file://` entry) learns the skill from it: in `resources/list`, in a directory read of
/// the mount's folder or of the skill's folder, and in the tool bridge's listing under a
/// prefix, the entry carries the skill's name and description; the skill's other files do
/// not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_files_mounts_own_skill_md_entry_carries_the_skills_name_and_description() {
    let (dir, service) = setup(None);
    let root = dir.path().canonicalize().unwrap();
    let folder = format!("file://{}/team-skills/beta", root.display());
    let md = format!("{folder}/SKILL.md");
    let skill = ("beta", Some("Does beta"), Some("text/markdown"));

    let all = list_all(&service, None).await;
    let entry = all.iter().find(|m| m.uri == md).expect("the mount's entry");
    assert_eq!(described(entry), skill);
    let notes = all
        .iter()
        .find(|m| m.uri == format!("{folder}/ref/notes.txt"))
        .unwrap();
    assert_eq!(notes.description, None);
    assert_ne!(notes.name, "beta");

    let page = service.read_directory(None, &folder, None).await.unwrap();
    let entry = page.items.iter().find(|m| m.uri == md).unwrap();
    assert_eq!(described(entry), skill);
    let page = service
        .read_directory(None, "skill://acme/beta", None)
        .await
        .unwrap();
    assert_eq!(page.items[0].uri, "skill://acme/beta/SKILL.md");
    assert_eq!(described(&page.items[0]), skill);

    let page = service
        .scan(None, None, Some(&format!("{folder}/")), &|_| true)
        .await
        .unwrap();
    let entry = page.items.iter().find(|m| m.uri == md).unwrap();
    assert_eq!(described(entry), skill);
}

/// Descriptions follow the caller's scopes: a caller who may not see the admin mount sees
/// the public mount's `SKILL.md` described by the public skill, and no entry of the admin
/// mount; a caller who may see both sees each mount's entries described by its own skills,
/// except the public `alpha`, which the admin mount's `alpha` (first in mount order) hides
/// from that caller's skills.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skill_md_entries_are_described_only_by_skills_the_caller_may_see() {
    let (dir, _admin, service) = two_mounts();
    let base = dir.path().canonicalize().unwrap();
    let public = format!(
        "file://{}/public-mount/skills/alpha/SKILL.md",
        base.display()
    );
    let admin = |n: &str| {
        format!(
            "file://{}/admin-only-mount/skills/{n}/SKILL.md",
            base.display()
        )
    };

    let other = grant(&[]);
    let all = list_all(&service, Some(&other)).await;
    assert!(all.iter().all(|m| !m.uri.contains("admin-only-mount")));
    let entry = all.iter().find(|m| m.uri == public).unwrap();
    assert_eq!(
        described(entry),
        ("alpha", Some("public alpha"), Some("text/markdown"))
    );

    let all = list_all(&service, Some(&grant(&["admin"]))).await;
    for (uri, says) in [
        (admin("alpha"), "admin alpha"),
        (admin("secret"), "admin secret"),
    ] {
        let entry = all.iter().find(|m| m.uri == uri).unwrap();
        assert_eq!(entry.description.as_deref(), Some(says), "{uri}");
    }
    let entry = all.iter().find(|m| m.uri == public).unwrap();
    assert_eq!(
        entry.description, None,
        "not the skill this caller is served"
    );
}

fn git(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(["-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

/// A git mount with no default ref whose skills folder sits inside the mount: its listing
/// names files at HEAD's branch (`git://main/…`), and that entry of the skill's `SKILL.md`
/// carries the skill's name, title and description, as does the entry of a directory read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_git_mounts_own_skill_md_entry_carries_the_skills_name_title_and_description() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path();
    git(repo, &["init", "-q", "-b", "main"]);
    let d = repo.join("skills/release");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join("SKILL.md"),
        "---\nname: release\ntitle: Release train\ndescription: Ships a release\n---\nGo.\n",
    )
    .unwrap();
    std::fs::write(d.join("steps.md"), "1. tag\n").unwrap();
    std::fs::write(repo.join("README.md"), "repo\n").unwrap();
    git(repo, &["add", "."]);
    git(repo, &["commit", "-q", "-m", "skills"]);
    let provider: Arc<dyn Provider> = Arc::new(
        mcpr_provider_git::GitProvider::new(mcpr_provider_git::GitConfig::new(repo)).unwrap(),
    );
    let settings = Settings {
        skills: vec![SkillsSetting {
            mount: 0,
            path: "skills".into(),
            prefix: String::new(),
            rev: None,
        }],
        ..Settings::default()
    };
    let service = Service::new(ServerState::with_bus(
        settings,
        vec![(provider, None)],
        Arc::new(mcpr_core::LocalBus::default()),
    ));
    let md = "git://main/skills/release/SKILL.md";
    let all = list_all(&service, None).await;
    let first = all
        .iter()
        .position(|m| m.uri.ends_with("SKILL.md"))
        .unwrap();
    assert_eq!(all[first].uri, md, "the mount's entry comes first");
    let entry = &all[first];
    assert_eq!(
        described(entry),
        ("release", Some("Ships a release"), Some("text/markdown"))
    );
    assert_eq!(entry.title.as_deref(), Some("Release train"));
    let steps = all
        .iter()
        .find(|m| m.uri == "git://main/skills/release/steps.md")
        .unwrap();
    assert_eq!(steps.description, None);

    let page = service
        .read_directory(None, "git://main/skills/release", None)
        .await
        .unwrap();
    let entry = page.items.iter().find(|m| m.uri == md).unwrap();
    assert_eq!(entry.name, "release");
    assert_eq!(entry.title.as_deref(), Some("Release train"));
    assert_eq!(entry.description.as_deref(), Some("Ships a release"));
}
