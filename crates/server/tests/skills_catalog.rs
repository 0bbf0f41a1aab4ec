//! The skills catalog over real files mounts: discovery through directory reads, the
//! frontmatter and name rules, manifests whose digests are the bytes a read returns, the
//! spec's limits, hidden/denied files and links out of the mount left out, digests cached
//! by change token, prefixes and collisions.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

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
