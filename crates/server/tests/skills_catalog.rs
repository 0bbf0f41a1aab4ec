//! The skills catalog over real files mounts: discovery through directory reads, the
//! frontmatter and name rules, manifests whose digests are the bytes a read returns, the
//! spec's limits, hidden/denied files and links out of the mount left out, digests cached
//! by change token, prefixes and collisions.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mcpr_core::{ContentsBody, Provider, ReadLimits, ResourceUri};
use mcpr_provider_files::{FilesConfig, FilesProvider, encode_path_uri};
use mcpr_server::Mount;
use mcpr_server::skills::{Catalog, SkillSource};
use sha2::Digest as _;

/// The request timeout the catalog's provider calls run under.
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

fn put(root: &Path, rel: &str, bytes: &[u8]) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, bytes).unwrap();
}

fn skill_md(name: &str) -> String {
    format!("---\nname: {name}\ndescription: The {name} skill\nlicense: MIT\n---\n# {name}\n")
}

fn tree() -> (tempfile::TempDir, tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    put(&root, "skills/pdf/SKILL.md", skill_md("pdf").as_bytes());
    put(&root, "skills/pdf/scripts/fill.py", b"print('fill')\n");
    put(&root, "skills/pdf/forms/blank.bin", &[0, 1, 2, 255]);
    put(&root, "skills/pdf/.env", b"SECRET=1");
    put(&root, "skills/pdf/.hidden/x", b"hidden");
    std::fs::write(outside.path().join("secret.txt"), "outside").unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret.txt"),
        root.join("skills/pdf/leak.txt"),
    )
    .unwrap();
    put(
        &root,
        "skills/team/review/SKILL.md",
        skill_md("review").as_bytes(),
    );
    put(
        &root,
        "skills/bad/SKILL.md",
        b"---\ndescription: no name\n---\n",
    );
    put(
        &root,
        "skills/mismatch/SKILL.md",
        skill_md("other").as_bytes(),
    );
    put(&root, "skills/Upper/SKILL.md", skill_md("Upper").as_bytes());
    put(&root, "skills/huge/SKILL.md", skill_md("huge").as_bytes());
    for i in 0..512 {
        put(&root, &format!("skills/huge/f{i}.txt"), b"x");
    }
    put(
        &root,
        "notskills/other/SKILL.md",
        skill_md("other").as_bytes(),
    );
    (dir, outside, root)
}

fn files(root: &Path) -> Arc<dyn Provider> {
    Arc::new(FilesProvider::new(FilesConfig::new(root)).unwrap())
}

fn source(p: &Arc<dyn Provider>, root: &Path, folder: &str, prefix: &str) -> SkillSource {
    SkillSource {
        mount: "files".into(),
        index: 0,
        at: Mount {
            index: 0,
            name: "files".into(),
            provider: p.clone(),
            scope: None,
            calls: Default::default(),
        },
        root: format!("{}/{folder}", encode_path_uri(root)),
        prefix: prefix.into(),
        relay: false,
    }
}

async fn read_bytes(p: &dyn Provider, uri: &str) -> Vec<u8> {
    let c = p
        .read(
            &ResourceUri::parse(uri).unwrap(),
            &ReadLimits { max_bytes: 1 << 24 },
        )
        .await
        .unwrap();
    match c.contents.into_iter().next().unwrap().body {
        ContentsBody::Text(t) => t.into_bytes(),
        ContentsBody::Blob(b) => b,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skills_are_found_validated_and_their_manifests_match_the_bytes() {
    let (_d, _o, root) = tree();
    let p = files(&root);
    let catalog = Catalog::new(vec![source(&p, &root, "skills", "")], 1 << 24, TIMEOUT);
    let skills = catalog.skills().await.unwrap();
    let uris: Vec<&str> = skills.iter().map(|s| s.uri.as_str()).collect();
    assert_eq!(
        uris,
        ["skill://pdf/SKILL.md", "skill://team/review/SKILL.md"],
        "valid skills only, sorted"
    );
    // bad (no name), mismatch (name differs from folder), Upper (name rules), huge (513
    // files): each left out and counted.
    assert_eq!(catalog.stats.invalid.load(Ordering::Relaxed), 4);
    let pdf = &skills[0];
    assert_eq!(pdf.frontmatter.name, "pdf");
    assert_eq!(pdf.frontmatter.extra["license"], "MIT");
    let manifest: Vec<&str> = pdf.files.iter().map(|f| f.uri.as_str()).collect();
    assert_eq!(
        manifest,
        [
            "skill://pdf/SKILL.md",
            "skill://pdf/forms/blank.bin",
            "skill://pdf/scripts/fill.py",
        ],
        "hidden, denied and links out of the mount are never in a manifest"
    );
    for f in &pdf.files {
        let bytes = read_bytes(p.as_ref(), &f.target).await;
        let hex: String = sha2::Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let want = format!("sha256:{hex}");
        assert_eq!(f.digest, want, "{}", f.uri);
        assert_eq!(f.size, bytes.len() as u64);
    }
    pdf.to_skill().validate().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_listing_hashes_nothing_and_a_change_rehashes_one_file() {
    let (_d, _o, root) = tree();
    let p = files(&root);
    let catalog = Catalog::new(vec![source(&p, &root, "skills", "")], 1 << 24, TIMEOUT);
    let first = catalog.skills().await.unwrap();
    let hashed = catalog.stats.hashed.load(Ordering::Relaxed);
    assert!(
        hashed >= 4,
        "the first listing hashes every file ({hashed})"
    );
    let second = catalog.skills().await.unwrap();
    assert_eq!(first, second);
    assert_eq!(
        catalog.stats.hashed.load(Ordering::Relaxed),
        hashed,
        "a warm listing reads and hashes nothing"
    );
    std::fs::write(
        root.join("skills/pdf/scripts/fill.py"),
        "print('changed!')\n",
    )
    .unwrap();
    let digest = |s: &[mcpr_server::skills::SkillEntry]| {
        s[0].files
            .iter()
            .find(|f| f.uri.ends_with("fill.py"))
            .unwrap()
            .digest
            .clone()
    };
    // The walk is reused until the folder's watch reports the change (debounced), then
    // the next listing walks again and hashes only the changed file.
    let start = std::time::Instant::now();
    let third = loop {
        let now = catalog.skills().await.unwrap();
        if digest(&now) != digest(&first) {
            break now;
        }
        assert!(start.elapsed() < TIMEOUT, "the change is seen");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(catalog.stats.hashed.load(Ordering::Relaxed), hashed + 1);
    assert_ne!(digest(&first), digest(&third));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefixes_keep_mounts_apart_and_a_collision_keeps_the_first() {
    let (_d, _o, root) = tree();
    let p = files(&root);
    let prefixed = Catalog::new(
        vec![
            source(&p, &root, "skills", "acme"),
            source(&p, &root, "notskills", "other-team"),
        ],
        1 << 24,
        TIMEOUT,
    );
    let uris: Vec<String> = prefixed
        .skills()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.uri)
        .collect();
    assert_eq!(
        uris,
        [
            "skill://acme/pdf/SKILL.md",
            "skill://acme/team/review/SKILL.md",
            "skill://other-team/other/SKILL.md",
        ]
    );
    let colliding = Catalog::new(
        vec![
            source(&p, &root, "skills", ""),
            source(&p, &root, "skills", ""),
        ],
        1 << 24,
        TIMEOUT,
    );
    let skills = colliding.skills().await.unwrap();
    assert_eq!(skills.len(), 2);
    assert!(
        skills.iter().all(|s| s.source == 0),
        "the first mount's skills are kept"
    );
    assert_eq!(colliding.stats.collisions.load(Ordering::Relaxed), 2);
    // A skills folder that is not there leaves its source out, and the rest listed.
    let missing = Catalog::new(
        vec![
            source(&p, &root, "nope", ""),
            source(&p, &root, "notskills", ""),
        ],
        1 << 24,
        TIMEOUT,
    );
    assert_eq!(missing.skills().await.unwrap().len(), 1);
    // Resolution of a manifest URI to the mount's resource.
    let (src, target) = prefixed
        .resolve("skill://acme/pdf/scripts/fill.py", &|_| true)
        .await
        .unwrap();
    assert_eq!(src, 0);
    assert!(target.ends_with("/skills/pdf/scripts/fill.py"), "{target}");
    assert!(
        prefixed
            .resolve("skill://acme/pdf/leak.txt", &|_| true)
            .await
            .is_err()
    );
}

/// A source whose walk needs more provider requests than a walk may make fails as a whole
/// (never a part of the folder presented as all of it); once a walk has succeeded, a later
/// one over the budget answers with that last whole walk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_walk_over_its_request_budget_fails_whole_or_keeps_the_last_whole_answer() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    put(&root, "skills/a/SKILL.md", skill_md("a").as_bytes());
    let p = files(&root);
    // The root's page, a's page, a's folder details (modes, files left out) and a's
    // SKILL.md: four requests, within five.
    let catalog = Catalog::new(vec![source(&p, &root, "skills", "")], 1 << 24, TIMEOUT)
        .with_walk_limits(5, TIMEOUT);
    assert_eq!(catalog.skills().await.unwrap().len(), 1);
    for name in ["b", "c", "d", "e"] {
        put(
            &root,
            &format!("skills/{name}/SKILL.md"),
            skill_md(name).as_bytes(),
        );
    }
    // The next walk (once the watch reports) needs sixteen requests: it fails, and the
    // listing is the last whole one.
    let start = std::time::Instant::now();
    while catalog.stats.walks.load(Ordering::Relaxed) < 2 {
        assert_eq!(catalog.skills().await.unwrap().len(), 1);
        assert!(start.elapsed() < TIMEOUT, "the change is seen");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let uris: Vec<String> = catalog
        .skills()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.uri)
        .collect();
    assert_eq!(uris, ["skill://a/SKILL.md"]);
    // With no earlier walk, the error itself.
    let fresh = Catalog::new(vec![source(&p, &root, "skills", "")], 1 << 24, TIMEOUT)
        .with_walk_limits(5, TIMEOUT);
    let e = fresh.skills().await.unwrap_err();
    assert_eq!(e.kind, mcpr_core::ErrorKind::TooLarge);
    assert!(
        e.message.ends_with(
            ": walking the skills folder is more than the limit of 5 provider requests (the most one walk of a skills folder makes); keep fewer files under the skills folder"
        ),
        "{}",
        e.message
    );
    // Within the budget, all five.
    let roomy = Catalog::new(vec![source(&p, &root, "skills", "")], 1 << 24, TIMEOUT)
        .with_walk_limits(16, TIMEOUT);
    assert_eq!(roomy.skills().await.unwrap().len(), 5);
}

/// A walk past its time answers with a timeout error, and the source is walked again by the
/// next caller (nothing of the cut walk is kept).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_walk_past_its_time_is_a_timeout_error() {
    let (_d, _o, root) = tree();
    let p = files(&root);
    // A files directory read runs on the blocking pool, so it cannot end within no time.
    let catalog = Catalog::new(vec![source(&p, &root, "skills", "")], 1 << 24, TIMEOUT)
        .with_walk_limits(
            mcpr_server::skills::catalog::MAX_WALK_REQUESTS,
            Duration::ZERO,
        );
    for walks in 1..=2 {
        let e = catalog.skills().await.unwrap_err();
        assert_eq!(e.kind, mcpr_core::ErrorKind::Timeout);
        assert!(e.message.contains("took more than 0 ms"), "{}", e.message);
        assert_eq!(catalog.stats.walks.load(Ordering::Relaxed), walks);
    }
}

/// A files mount whose directory reads panic while `panics` is set: a fault in a provider,
/// met in the middle of a walk.
struct Panicky {
    inner: Arc<dyn Provider>,
    panics: AtomicBool,
}

#[async_trait::async_trait]
impl Provider for Panicky {
    fn info(&self) -> &mcpr_core::ProviderInfo {
        self.inner.info()
    }

    async fn read(
        &self,
        uri: &ResourceUri,
        limits: &ReadLimits,
    ) -> mcpr_core::Result<mcpr_core::ReadOutput> {
        self.inner.read(uri, limits).await
    }

    async fn read_directory(
        &self,
        uri: &ResourceUri,
        page: mcpr_core::PageRequest,
    ) -> mcpr_core::Result<mcpr_core::Page<mcpr_core::ResourceMeta>> {
        if self.panics.load(Ordering::SeqCst) && uri.as_str().ends_with("/team") {
            panic!("directory read fault");
        }
        self.inner.read_directory(uri, page).await
    }

    async fn watch(
        &self,
        uri: &ResourceUri,
        sink: mcpr_core::ChangeSink,
    ) -> mcpr_core::Result<mcpr_core::WatchGuard> {
        self.inner.watch(uri, sink).await
    }

    async fn change_token(&self, uri: &ResourceUri) -> Option<String> {
        self.inner.change_token(uri).await
    }
}

/// A panic in the middle of a walk answers the caller with an error that says so, leaves
/// nothing that holds later callers (they walk again), and once the fault is gone the
/// listing is whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_inside_a_walk_is_an_error_and_later_callers_walk_again() {
    let (_d, _o, root) = tree();
    let panicky = Arc::new(Panicky {
        inner: files(&root),
        panics: AtomicBool::new(true),
    });
    let p: Arc<dyn Provider> = panicky.clone();
    let catalog = Arc::new(Catalog::new(
        vec![source(&p, &root, "skills", "")],
        1 << 24,
        TIMEOUT,
    ));
    for _ in 0..2 {
        let c = catalog.clone();
        let e = tokio::time::timeout(TIMEOUT, tokio::spawn(async move { c.skills().await }))
            .await
            .expect("answered")
            .expect("the caller's task does not panic")
            .unwrap_err();
        assert_eq!(e.kind, mcpr_core::ErrorKind::Internal);
        assert!(e.message.contains("directory read fault"), "{}", e.message);
    }
    panicky.panics.store(false, Ordering::SeqCst);
    let uris: Vec<String> = tokio::time::timeout(TIMEOUT, catalog.skills())
        .await
        .expect("answered")
        .unwrap()
        .into_iter()
        .map(|s| s.uri)
        .collect();
    assert_eq!(
        uris,
        ["skill://pdf/SKILL.md", "skill://team/review/SKILL.md"]
    );
}

/// Issue #42 §2: the files of a skill's folder that the mount does not serve (a dot-file, a
/// dot-folder, a key the deny list names) are reported with their rule, once per walk, and
/// each manifest file carries the mode the mount knows, on the skill entry's `_meta`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unserved_files_of_a_skill_folder_are_reported_and_modes_are_carried() {
    use std::os::unix::fs::PermissionsExt as _;
    let (_d, _o, root) = tree();
    put(&root, "skills/pdf/certs/ca.pem", b"-----BEGIN");
    let script = root.join("skills/pdf/scripts/fill.py");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o4755)).unwrap();
    std::fs::set_permissions(
        root.join("skills/pdf/SKILL.md"),
        std::fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    let p = files(&root);
    let catalog = Catalog::new(vec![source(&p, &root, "skills", "")], 1 << 24, TIMEOUT);
    let skills = catalog.skills().await.unwrap();
    let pdf = skills
        .iter()
        .find(|s| s.uri == "skill://pdf/SKILL.md")
        .expect("the pdf skill");
    let mode_of = |end: &str| {
        pdf.files
            .iter()
            .find(|f| f.uri.ends_with(end))
            .unwrap()
            .mode
    };
    // Permission bits only: setuid is never published.
    assert_eq!(mode_of("scripts/fill.py"), Some(0o755));
    assert_eq!(mode_of("/SKILL.md"), Some(0o640));
    let entry = serde_json::to_value(pdf.to_skill()).unwrap();
    assert_eq!(
        entry["_meta"]["io.github.mcp-resources/mode"]["skill://pdf/scripts/fill.py"], 0o755,
        "{entry}"
    );
    let report = catalog.report().await;
    let mut hidden: Vec<(String, String)> = report[0]
        .not_published
        .iter()
        .filter(|h| h.skill == "skill://pdf/SKILL.md")
        .map(|h| (h.file.clone(), h.reason.clone()))
        .collect();
    hidden.sort();
    let files: Vec<&str> = hidden.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(files, [".env", ".hidden/", "certs/ca.pem"], "{hidden:?}");
    assert!(hidden[0].1.contains("hidden (dot) file"), "{hidden:?}");
    assert!(hidden[2].1.contains("deny list"), "{hidden:?}");
    // Nothing of the review skill is left out.
    assert!(
        report[0]
            .not_published
            .iter()
            .all(|h| h.skill == "skill://pdf/SKILL.md"),
        "{:?}",
        report[0].not_published
    );
}
