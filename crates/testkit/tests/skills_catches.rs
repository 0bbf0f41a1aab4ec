//! The skills checks must fail a server that breaks them: an in-memory server of two skills,
//! correct by default, with one fault switched on per run, and the panic naming the fault.

use std::collections::BTreeMap;

use async_trait::async_trait;
use mcpr_testkit::skills::{
    CursorPage, DirEntry, ManifestFile, SkillManifest, SkillsFixture, SkillsServer, check_skills,
    sha256_digest,
};

#[derive(Clone, Copy, PartialEq, Debug)]
enum Fault {
    None,
    WrongDigest,
    WrongSize,
    DeniedInManifest,
    DeniedReadable,
    DeniedInDirectory,
    DirectoryPagesOverlap,
    DirectoryGap,
    SkillTwice,
    SkillMissing,
    NoPaging,
}

/// Files by URI: two skills, `pdf` with a subfolder, and a denied `.env` in `pdf`.
fn files() -> BTreeMap<String, Vec<u8>> {
    [
        ("skill://pdf/SKILL.md", "---\nname: pdf\n---\n"),
        ("skill://pdf/a.txt", "a"),
        ("skill://pdf/b.txt", "b"),
        ("skill://pdf/c.txt", "c"),
        ("skill://pdf/scripts/fill.py", "print()"),
        ("skill://review/SKILL.md", "---\nname: review\n---\n"),
    ]
    .into_iter()
    .map(|(u, b)| (u.to_owned(), b.as_bytes().to_vec()))
    .collect()
}

const DENIED: &str = "skill://pdf/.env";

struct Mem {
    fault: Fault,
    files: BTreeMap<String, Vec<u8>>,
}

impl Mem {
    fn manifest(&self, skill: &str) -> SkillManifest {
        let folder = skill.strip_suffix("/SKILL.md").unwrap();
        let mut files: Vec<ManifestFile> = self
            .files
            .iter()
            .filter(|(u, _)| u.starts_with(&format!("{folder}/")))
            .map(|(u, b)| ManifestFile {
                uri: u.clone(),
                digest: sha256_digest(b),
                size: b.len() as u64,
            })
            .collect();
        if skill == "skill://pdf/SKILL.md" {
            match self.fault {
                Fault::WrongDigest => files[1].digest = sha256_digest(b"not a"),
                Fault::WrongSize => files[1].size += 1,
                Fault::DeniedInManifest => files.push(ManifestFile {
                    uri: DENIED.into(),
                    digest: sha256_digest(b"SECRET=1"),
                    size: 8,
                }),
                _ => {}
            }
        }
        SkillManifest {
            uri: skill.into(),
            files,
        }
    }
}

#[async_trait]
impl SkillsServer for Mem {
    async fn list_skills(&self, cursor: Option<&str>) -> Result<CursorPage<SkillManifest>, String> {
        let mut skills = vec!["skill://pdf/SKILL.md", "skill://review/SKILL.md"];
        if self.fault == Fault::SkillMissing {
            skills.pop();
        }
        // One skill a page; the cursor is the index of the next.
        let at: usize = cursor.map_or(0, |c| c.parse().unwrap());
        let next = (at + 1 < skills.len()).then(|| (at + 1).to_string());
        let mut page = vec![self.manifest(skills[at])];
        if self.fault == Fault::SkillTwice && at == 1 {
            page.push(self.manifest(skills[0]));
        }
        Ok((page, next))
    }

    async fn read(&self, uri: &str) -> Result<Vec<u8>, String> {
        if uri == DENIED && self.fault == Fault::DeniedReadable {
            return Ok(b"SECRET=1".to_vec());
        }
        self.files
            .get(uri)
            .cloned()
            .ok_or_else(|| format!("Resource not found: {uri}"))
    }

    async fn read_directory(
        &self,
        uri: &str,
        cursor: Option<&str>,
    ) -> Result<CursorPage<DirEntry>, String> {
        let dir = format!("{}/", uri.trim_end_matches('/'));
        let mut children: Vec<DirEntry> = Vec::new();
        for u in self.files.keys() {
            let Some(rest) = u.strip_prefix(&dir) else {
                continue;
            };
            let entry = match rest.split_once('/') {
                Some((sub, _)) => DirEntry {
                    uri: format!("{dir}{sub}"),
                    directory: true,
                },
                None => DirEntry {
                    uri: u.clone(),
                    directory: false,
                },
            };
            if !children.contains(&entry) {
                children.push(entry);
            }
        }
        if self.fault == Fault::DeniedInDirectory && dir == "skill://pdf/" {
            children.insert(
                0,
                DirEntry {
                    uri: DENIED.into(),
                    directory: false,
                },
            );
        }
        // Pages of two; the cursor is the index of the next entry.
        let size = if self.fault == Fault::NoPaging {
            100
        } else {
            2
        };
        let at: usize = cursor.map_or(0, |c| c.parse().unwrap());
        let end = (at + size).min(children.len());
        let page = children[at..end].to_vec();
        let next = match self.fault {
            _ if end >= children.len() => None,
            Fault::DirectoryPagesOverlap => Some((end - 1).to_string()),
            Fault::DirectoryGap => Some((end + 1).to_string()),
            _ => Some(end.to_string()),
        };
        Ok((page, next))
    }
}

fn fixture() -> SkillsFixture {
    SkillsFixture {
        skills: vec![
            "skill://pdf/SKILL.md".into(),
            "skill://review/SKILL.md".into(),
        ],
        forbidden: vec![DENIED.into()],
    }
}

/// Run the checks on a server with `fault`; the panic message, if they failed.
async fn failure(fault: Fault) -> Option<String> {
    let task = tokio::spawn(async move {
        let server = Mem {
            fault,
            files: files(),
        };
        check_skills(&server, &fixture()).await;
    });
    let panic = task.await.err()?.into_panic();
    Some(
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_default(),
    )
}

#[tokio::test]
async fn a_correct_server_passes() {
    assert_eq!(failure(Fault::None).await, None);
}

#[tokio::test]
async fn each_broken_rule_is_named() {
    for (fault, names) in [
        (
            Fault::WrongDigest,
            "manifest digest: skill://pdf/a.txt does not equal the bytes",
        ),
        (Fault::WrongSize, "manifest size: skill://pdf/a.txt"),
        (
            Fault::DeniedInManifest,
            "hidden or denied: skill://pdf/.env is in the manifest",
        ),
        (
            Fault::DeniedReadable,
            "hidden or denied: skill://pdf/.env is readable",
        ),
        (
            Fault::DeniedInDirectory,
            "hidden or denied: a directory read shows skill://pdf/.env",
        ),
        (Fault::DirectoryPagesOverlap, "comes twice"),
        (Fault::DirectoryGap, "missing [\"skill://pdf/"),
        (
            Fault::SkillTwice,
            "skills/list: skill://pdf/SKILL.md is listed twice",
        ),
        (Fault::SkillMissing, "exactly the fixture's"),
        (Fault::NoPaging, "paging went untested"),
    ] {
        let msg = failure(fault)
            .await
            .unwrap_or_else(|| panic!("the checks passed a server with {fault:?}"));
        assert!(
            msg.contains(names),
            "{fault:?}: expected {names:?} in: {msg}"
        );
    }
}
