//! The skills catalog over a relaying mount (a gateway's upstream skills): the upstream's
//! manifests are published under the mount's prefix only after every file read through the
//! mount matches the upstream's digest and size; a skill whose bytes differ, whose manifest
//! is dynamic, names a file outside its folder or lacks its `SKILL.md` is left out with the
//! reason; checked bytes are not read again while the upstream names the same digest; an
//! upstream that cannot list its skills leaves the source without skills, not the listing
//! failed. The mount's bytes are real files (a files provider); the "upstream's manifests"
//! are what the test says, honest or not.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use mcpr_core::{
    ChangeSink, Error, ErrorKind, Page, PageRequest, Provider, ProviderInfo, ReadLimits,
    ReadOutput, RelayedSkill, RelayedSkillFile, ResourceMeta, ResourceUri, Result, WatchGuard,
};
use mcpr_provider_files::{FilesConfig, FilesProvider, encode_path_uri};
use mcpr_server::Mount;
use mcpr_server::skills::{Catalog, SkillSource};

const TIMEOUT: Duration = Duration::from_secs(10);

/// A files mount that also says it publishes the skills `skills` holds.
struct Relaying {
    files: FilesProvider,
    skills: Mutex<Result<Option<Vec<RelayedSkill>>>>,
}

#[async_trait]
impl Provider for Relaying {
    fn info(&self) -> &ProviderInfo {
        self.files.info()
    }
    async fn list(&self, page: PageRequest) -> Result<Page<ResourceMeta>> {
        self.files.list(page).await
    }
    async fn read(&self, uri: &ResourceUri, limits: &ReadLimits) -> Result<ReadOutput> {
        self.files.read(uri, limits).await
    }
    async fn watch(&self, uri: &ResourceUri, sink: ChangeSink) -> Result<WatchGuard> {
        self.files.watch(uri, sink).await
    }
    async fn watch_list(&self, sink: ChangeSink) -> Result<WatchGuard> {
        self.files.watch_list(sink).await
    }
    async fn relayed_skills(&self) -> Result<Option<Vec<RelayedSkill>>> {
        self.skills.lock().unwrap().clone()
    }
}

fn put(root: &Path, rel: &str, bytes: &[u8]) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, bytes).unwrap();
}

fn skill_md(name: &str) -> String {
    format!("---\nname: {name}\ndescription: The {name} skill\n---\n# {name}\n")
}

/// The honest manifest entry of file `rel` (under `root`) at `path` inside its skill.
fn file(root: &Path, rel: &str, path: &str) -> RelayedSkillFile {
    let bytes = std::fs::read(root.join(rel)).unwrap();
    RelayedSkillFile {
        path: path.into(),
        uri: format!("{}/{rel}", encode_path_uri(root)),
        digest: rmcp::model::sha256_digest(&bytes),
        size: bytes.len() as u64,
    }
}

fn catalog(p: &Arc<Relaying>, prefix: &str) -> Catalog {
    let provider: Arc<dyn Provider> = p.clone();
    Catalog::new(
        vec![SkillSource {
            mount: "gw".into(),
            index: 0,
            at: Mount {
                index: 0,
                name: "gw".into(),
                provider,
                scope: None,
                calls: Default::default(),
            },
            root: "gw+".into(),
            prefix: prefix.into(),
            relay: true,
        }],
        1 << 24,
        TIMEOUT,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relayed_skills_are_published_only_when_the_bytes_match_the_upstream_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    put(&root, "up/pdf/SKILL.md", skill_md("pdf").as_bytes());
    put(&root, "up/pdf/scripts/fill.py", b"print('fill')\n");
    put(
        &root,
        "up/team/review/SKILL.md",
        skill_md("review").as_bytes(),
    );
    put(&root, "up/liar/SKILL.md", skill_md("liar").as_bytes());
    put(&root, "up/liar/notes.md", b"what the upstream serves\n");
    put(&root, "up/nomd/notes.md", b"no SKILL.md\n");
    put(&root, "up/escape/SKILL.md", skill_md("escape").as_bytes());

    let mut liar_notes = file(&root, "up/liar/notes.md", "notes.md");
    liar_notes.digest = rmcp::model::sha256_digest(b"what the manifest promised\n");
    let mut outside = file(&root, "up/pdf/scripts/fill.py", "");
    outside.path = String::new();
    let skills = vec![
        RelayedSkill {
            path: "pdf".into(),
            files: Some(vec![
                file(&root, "up/pdf/SKILL.md", "SKILL.md"),
                file(&root, "up/pdf/scripts/fill.py", "scripts/fill.py"),
            ]),
        },
        RelayedSkill {
            path: "team/review".into(),
            files: Some(vec![file(&root, "up/team/review/SKILL.md", "SKILL.md")]),
        },
        RelayedSkill {
            path: "liar".into(),
            files: Some(vec![
                file(&root, "up/liar/SKILL.md", "SKILL.md"),
                liar_notes,
            ]),
        },
        RelayedSkill {
            path: "dynamic".into(),
            files: None,
        },
        RelayedSkill {
            path: "nomd".into(),
            files: Some(vec![file(&root, "up/nomd/notes.md", "notes.md")]),
        },
        RelayedSkill {
            path: "escape".into(),
            files: Some(vec![file(&root, "up/escape/SKILL.md", "SKILL.md"), outside]),
        },
    ];
    let p = Arc::new(Relaying {
        files: FilesProvider::new(FilesConfig::new(&root)).unwrap(),
        skills: Mutex::new(Ok(Some(skills))),
    });
    let c = catalog(&p, "acme");
    let got = c.skills().await.unwrap();
    let uris: Vec<&str> = got.iter().map(|s| s.uri.as_str()).collect();
    assert_eq!(
        uris,
        [
            "skill://acme/pdf/SKILL.md",
            "skill://acme/team/review/SKILL.md"
        ]
    );
    let pdf = &got[0];
    assert_eq!(pdf.frontmatter.name, "pdf");
    let files: Vec<(&str, &str)> = pdf
        .files
        .iter()
        .map(|f| (f.uri.as_str(), f.target.as_str()))
        .collect();
    let base = encode_path_uri(&root);
    assert_eq!(
        files,
        [
            (
                "skill://acme/pdf/SKILL.md",
                format!("{base}/up/pdf/SKILL.md").as_str()
            ),
            (
                "skill://acme/pdf/scripts/fill.py",
                format!("{base}/up/pdf/scripts/fill.py").as_str()
            ),
        ]
    );
    assert_eq!(
        pdf.files[1].digest,
        rmcp::model::sha256_digest(b"print('fill')\n")
    );

    let report = c.report().await;
    let left: Vec<(String, String)> = report[0].left_out.clone();
    let why = |needle: &str| {
        left.iter()
            .find(|(f, _)| f.contains(needle))
            .unwrap_or_else(|| panic!("{needle} not left out: {left:?}"))
            .1
            .clone()
    };
    assert!(why("liar/notes.md").contains("differ from the upstream's manifest"));
    assert!(why("dynamic").contains("dynamic"));
    assert!(why("nomd").contains("no SKILL.md"));
    assert!(why("escape").contains("outside the skill's folder"));
    assert_eq!(left.len(), 4, "{left:?}");
    assert_eq!(c.stats.invalid.load(Ordering::Relaxed), 4);

    // Checked bytes are not read again while the upstream names the same digest: a walk
    // forced now hashes only the liar's file (never cached, since it did not match).
    let hashed = c.stats.hashed.load(Ordering::Relaxed);
    put(
        &root,
        "up/team/review/other.md",
        b"a change the watches see\n",
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let again = c.skills().await.unwrap();
    assert_eq!(again.len(), 2);
    assert!(c.stats.walks.load(Ordering::Relaxed) >= 2);
    assert_eq!(c.stats.hashed.load(Ordering::Relaxed), hashed + 1);

    // The upstream down: no skills from it, and the listing still answers.
    *p.skills.lock().unwrap() = Err(Error::new(
        ErrorKind::Unavailable,
        "mcp mount \"gw\" is unavailable: the connection closed",
    ));
    put(&root, "up/pdf/scripts/fill.py", b"print('changed')\n");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(c.skills().await.unwrap().is_empty());
    let r = c.report().await;
    assert!(
        r[0].error
            .as_deref()
            .is_some_and(|e| e.contains("cannot be listed") && e.contains("connection closed")),
        "{r:?}"
    );

    // Back, with the changed file's new digest: its skill is published again, the new bytes
    // read and checked.
    *p.skills.lock().unwrap() = Ok(Some(vec![RelayedSkill {
        path: "pdf".into(),
        files: Some(vec![
            file(&root, "up/pdf/SKILL.md", "SKILL.md"),
            file(&root, "up/pdf/scripts/fill.py", "scripts/fill.py"),
        ]),
    }]));
    let back = c.skills().await.unwrap();
    assert_eq!(back.len(), 1);
    assert_eq!(
        back[0].files[1].digest,
        rmcp::model::sha256_digest(b"print('changed')\n")
    );
}
