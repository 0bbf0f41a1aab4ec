//! The testkit's skills checks (`mcpr_testkit::skills`) over real mounts, one fixture each:
//! a files folder, a git repository and an s3 bucket (moto), each holding two skills with
//! hidden and denied files among them, served through the `Service` with small pages so
//! directory reads page. The checks themselves are shown to fail in testkit's
//! `skills_catches`.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use async_trait::async_trait;
use mcpr_core::{ContentsBody, DIRECTORY_MIME_TYPE, Provider};
use mcpr_provider_files::{FilesConfig, FilesProvider};
use mcpr_provider_git::{GitConfig, GitProvider};
use mcpr_provider_s3::{S3Config, S3Provider};
use mcpr_server::skills::SkillsSetting;
use mcpr_server::{ServerState, Service, Settings};
use mcpr_testkit::skills::{
    CursorPage, DirEntry, ManifestFile, SkillManifest, SkillsFixture, SkillsServer, check_skills,
};
use rmcp::model::SkillResources;

/// The files every fixture holds under its `skills/` folder: two skills (one nested in a
/// group folder), `pdf` with enough files for pages of two to page, a binary file, a
/// builtin-denied `.env` and a `notes.secret` the mount's `*.secret` rule denies.
const FILES: &[(&str, &[u8])] = &[
    (
        "skills/pdf/SKILL.md",
        b"---\nname: pdf\ndescription: Fill PDF forms\n---\nRun scripts/fill.py.\n",
    ),
    ("skills/pdf/scripts/fill.py", b"print('fill')\n"),
    ("skills/pdf/forms/a.txt", b"a\n"),
    ("skills/pdf/forms/b.txt", b"b\n"),
    ("skills/pdf/forms/c.txt", b"c\n"),
    ("skills/pdf/forms/blank.bin", &[0, 1, 2, 255, 254]),
    ("skills/pdf/.env", b"SECRET=1\n"),
    ("skills/pdf/notes.secret", b"denied\n"),
    (
        "skills/team/review/SKILL.md",
        b"---\nname: review\ndescription: Review a change\n---\nSee checklist.md.\n",
    ),
    ("skills/team/review/checklist.md", b"- tests\n"),
];

const DENY: &str = "*.secret";

fn fixture(extra_forbidden: &[&str]) -> SkillsFixture {
    let mut forbidden = vec![
        "skill://pdf/.env".to_owned(),
        "skill://pdf/notes.secret".to_owned(),
    ];
    forbidden.extend(extra_forbidden.iter().map(|s| (*s).to_owned()));
    SkillsFixture {
        skills: vec![
            "skill://pdf/SKILL.md".into(),
            "skill://team/review/SKILL.md".into(),
        ],
        forbidden,
    }
}

/// A server over `provider` whose `skills/` folder carries skills, with pages of two.
fn service(provider: Arc<dyn Provider>) -> Service {
    let settings = Settings {
        page_size: 2,
        skills: vec![SkillsSetting {
            mount: 0,
            path: "skills".into(),
            prefix: String::new(),
            rev: None,
        }],
        ..Settings::default()
    };
    Service::new(ServerState::new(settings, vec![provider]))
}

/// The `Service` as the checks call it, with no grant (every mount visible).
struct Over(Service);

#[async_trait]
impl SkillsServer for Over {
    async fn list_skills(&self, cursor: Option<&str>) -> Result<CursorPage<SkillManifest>, String> {
        let page = self
            .0
            .list_skills(None, cursor)
            .await
            .map_err(|e| e.message)?;
        let skills = page
            .skills
            .into_iter()
            .map(|s| {
                let SkillResources::Files(files) = s.resources else {
                    return Err(format!("{}: a dynamic manifest", s.uri));
                };
                Ok(SkillManifest {
                    uri: s.uri,
                    files: files
                        .into_iter()
                        .map(|f| ManifestFile {
                            uri: f.uri,
                            digest: f.digest,
                            size: f.size,
                        })
                        .collect(),
                })
            })
            .collect::<Result<_, String>>()?;
        Ok((skills, page.next_cursor))
    }

    async fn read(&self, uri: &str) -> Result<Vec<u8>, String> {
        let read = self.0.read(None, uri).await.map_err(|e| e.message)?;
        let [c] = <[_; 1]>::try_from(read.contents)
            .map_err(|c| format!("{uri}: {} contents, not one", c.len()))?;
        if c.uri != uri {
            return Err(format!("{uri}: contents named {}", c.uri));
        }
        Ok(match c.body {
            ContentsBody::Text(t) => t.into_bytes(),
            ContentsBody::Blob(b) => b,
        })
    }

    async fn read_directory(
        &self,
        uri: &str,
        cursor: Option<&str>,
    ) -> Result<CursorPage<DirEntry>, String> {
        let page = self
            .0
            .read_directory(None, uri, cursor)
            .await
            .map_err(|e| e.message)?;
        let entries = page
            .items
            .into_iter()
            .map(|m| DirEntry {
                directory: m.mime_type.as_deref() == Some(DIRECTORY_MIME_TYPE),
                uri: m.uri,
            })
            .collect();
        Ok((entries, page.next_cursor))
    }
}

fn write_tree(root: &Path) {
    for (rel, bytes) in FILES {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skills_checks_on_a_files_mount() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    write_tree(&root);
    // Files-only: a dotfile (hidden unless `hidden = true`) and a link out of the mount.
    std::fs::write(root.join("skills/pdf/.hidden.txt"), "hidden\n").unwrap();
    std::fs::write(outside.path().join("secret.txt"), "outside\n").unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret.txt"),
        root.join("skills/pdf/leak.txt"),
    )
    .unwrap();
    let mut config = FilesConfig::new(&root);
    config.deny = vec![DENY.into()];
    let provider: Arc<dyn Provider> = Arc::new(FilesProvider::new(config).unwrap());
    check_skills(
        &Over(service(provider)),
        &fixture(&["skill://pdf/.hidden.txt", "skill://pdf/leak.txt"]),
    )
    .await;
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Ada Lovelace")
        .env("GIT_AUTHOR_EMAIL", "ada@example.com")
        .env("GIT_COMMITTER_NAME", "Ada Lovelace")
        .env("GIT_COMMITTER_EMAIL", "ada@example.com")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skills_checks_on_a_git_mount() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    git(&root, &["init", "-q", "-b", "main"]);
    write_tree(&root);
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-q", "-m", "skills"]);
    // Work-tree changes after the commit are not what HEAD serves.
    std::fs::write(root.join("skills/pdf/forms/a.txt"), "uncommitted\n").unwrap();
    let mut config = GitConfig::new(&root);
    config.deny = vec![DENY.into()];
    let provider: Arc<dyn Provider> = Arc::new(GitProvider::new(config).unwrap());
    check_skills(&Over(service(provider)), &fixture(&[])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skills_checks_on_an_s3_mount() {
    let Some(moto) = mcpr_testkit::moto::moto() else {
        return;
    };
    let bucket = format!("skills-{}", std::process::id());
    moto.create_bucket(&bucket);
    for (key, bytes) in FILES {
        moto.put(&bucket, key, bytes);
    }
    moto.put(&bucket, "other/SKILL.md", b"---\nname: other\n---\n");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut config = S3Config::new(&bucket, "us-east-1");
    config.endpoint = Some(moto.endpoint());
    config.allow_http = true;
    config.access_key_id = Some("AKIAMOTOTESTKEY12345".into());
    config.secret_access_key = Some("motoSecretKeyThatMustNeverBeShown0000".into());
    config.deny = vec![DENY.into()];
    let provider: Arc<dyn Provider> = Arc::new(S3Provider::new(config).await.unwrap());
    check_skills(&Over(service(provider)), &fixture(&[])).await;
}

/// A symbolic link committed inside a skill folder is no skill file: a git mount reads it
/// as the path it names (`inode/symlink`), which installed as a file would be a file holding
/// a path, here one outside the repository.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_committed_in_a_skill_folder_is_not_in_its_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    git(&root, &["init", "-q", "-b", "main"]);
    write_tree(&root);
    std::os::unix::fs::symlink("/etc/passwd", root.join("skills/pdf/leak.txt")).unwrap();
    std::os::unix::fs::symlink("forms/a.txt", root.join("skills/pdf/inside.txt")).unwrap();
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-q", "-m", "skills with links"]);
    let provider: Arc<dyn Provider> = Arc::new(GitProvider::new(GitConfig::new(&root)).unwrap());
    let over = Over(service(provider));
    let (skills, _) = over.list_skills(None).await.unwrap();
    let pdf = skills
        .iter()
        .find(|s| s.uri == "skill://pdf/SKILL.md")
        .expect("the pdf skill is listed");
    let uris: Vec<&str> = pdf.files.iter().map(|f| f.uri.as_str()).collect();
    assert!(uris.contains(&"skill://pdf/forms/a.txt"), "{uris:?}");
    for link in ["skill://pdf/leak.txt", "skill://pdf/inside.txt"] {
        assert!(!uris.contains(&link), "{link} in the manifest: {uris:?}");
    }
}

/// An s3 mount's skills folder cannot be watched, so its walk used to be repeated by every
/// skills request, and callers that came together queued and then each walked. Now callers
/// that come together share one walk, which is kept for the mount's `poll_interval_ms`: a
/// read of an unknown `skill://` URI and a directory read within it are answered from that
/// walk, and the first request after it walks again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_skills_requests_on_an_s3_mount_share_one_walk_kept_for_the_poll_interval() {
    let Some(moto) = mcpr_testkit::moto::moto() else {
        return;
    };
    let bucket = format!("skills-shared-{}", std::process::id());
    moto.create_bucket(&bucket);
    for i in 0..10 {
        moto.put(
            &bucket,
            &format!("skills/s{i}/SKILL.md"),
            format!("---\nname: s{i}\ndescription: Skill {i}\n---\n").as_bytes(),
        );
        moto.put(&bucket, &format!("skills/s{i}/ref/notes.txt"), b"notes\n");
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut config = S3Config::new(&bucket, "us-east-1");
    config.endpoint = Some(moto.endpoint());
    config.allow_http = true;
    config.access_key_id = Some("AKIAMOTOTESTKEY12345".into());
    config.secret_access_key = Some("motoSecretKeyThatMustNeverBeShown0000".into());
    let poll = std::time::Duration::from_secs(3);
    config.poll_interval = poll;
    let provider: Arc<dyn Provider> = Arc::new(S3Provider::new(config).await.unwrap());
    // Directory reads (one LIST request each) a server made of its mount.
    let lists = |s: &Service| {
        s.state().router().mounts()[0]
            .calls
            .count("read_directory", "ok")
    };
    let walks = |s: &Service| {
        s.state()
            .skills()
            .expect("a catalog")
            .stats
            .walks
            .load(std::sync::atomic::Ordering::Relaxed)
    };

    // What one walk costs, on a server of its own.
    let solo = service(provider.clone());
    assert_eq!(solo.list_skills(None, None).await.unwrap().skills.len(), 2);
    let one_walk = lists(&solo);
    assert!(one_walk >= 21, "{one_walk} directory reads");

    let shared = service(provider);
    let callers: Vec<_> = (0..12)
        .map(|i| {
            let s = shared.clone();
            tokio::spawn(async move {
                let r = match i % 4 {
                    0 => s.list_skills(None, None).await.map(drop),
                    1 => s.get_skill(None, "skill://s3/SKILL.md").await.map(drop),
                    2 => match s.read(None, "skill://nope/SKILL.md").await {
                        Err(e) if e.kind == mcpr_core::ErrorKind::NotFound => Ok(()),
                        other => other.map(drop),
                    },
                    _ => s.list(None, None).await.map(drop),
                };
                r.unwrap_or_else(|e| panic!("caller {i}: {}", e.message));
            })
        })
        .collect();
    let started = std::time::Instant::now();
    for c in callers {
        c.await.unwrap();
    }
    assert!(
        started.elapsed() < poll,
        "the test needs the callers to finish within one poll interval"
    );
    assert_eq!(walks(&shared), 1, "twelve callers, one walk");
    assert_eq!(lists(&shared), one_walk);

    // Within the poll interval: an unknown URI is answered from the walk, and a directory
    // read costs its own read only.
    let e = shared
        .read(None, "skill://other/SKILL.md")
        .await
        .unwrap_err();
    assert_eq!(e.kind, mcpr_core::ErrorKind::NotFound);
    let dir = shared
        .read_directory(None, "skill://s1", None)
        .await
        .unwrap();
    assert!(!dir.items.is_empty());
    assert_eq!(walks(&shared), 1);
    assert_eq!(lists(&shared), one_walk + 1);

    // After it, the next request walks again.
    tokio::time::sleep(poll + std::time::Duration::from_millis(200)).await;
    shared.list_skills(None, None).await.unwrap();
    assert_eq!(walks(&shared), 2);
    assert_eq!(lists(&shared), 2 * one_walk + 1);
}
