//! Skills checks (SEP-2640) for a server serving skills from a mount: every manifest digest
//! and size equals the bytes `resources/read` returns; hidden and denied files are never in a
//! manifest, never read and never shown; directory reads of every skill folder page without
//! a gap or a duplicate and show exactly the manifest's files.
//!
//! The catalog lives in the server, which this crate must not depend on: a test implements
//! [`SkillsServer`] over the server's methods (or a real client) for a files, git or s3
//! mount and calls [`check_skills`]. A failure panics with a message naming what broke.

use std::collections::BTreeSet;

use async_trait::async_trait;
use sha2::Digest as _;

/// One file of a skill's manifest, as `skills/list` gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestFile {
    /// Its `skill://` URI.
    pub uri: String,
    /// `sha256:` and 64 lowercase hex digits.
    pub digest: String,
    /// Bytes.
    pub size: u64,
}

/// One skill of `skills/list`: its `SKILL.md` URI and its manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillManifest {
    /// The `skill://…/SKILL.md` URI.
    pub uri: String,
    /// Every file of the skill.
    pub files: Vec<ManifestFile>,
}

/// One entry of a directory read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// Its URI.
    pub uri: String,
    /// Whether it is a folder (`inode/directory`).
    pub directory: bool,
}

/// One page of a paged method: the items and the next cursor (`None` after the last).
pub type CursorPage<T> = (Vec<T>, Option<String>);

/// The skills methods of a server, as a test calls them; errors as their messages.
#[async_trait]
pub trait SkillsServer: Send + Sync {
    /// One page of `skills/list` from `cursor`.
    async fn list_skills(&self, cursor: Option<&str>) -> Result<CursorPage<SkillManifest>, String>;
    /// The bytes `resources/read` of `uri` returns.
    async fn read(&self, uri: &str) -> Result<Vec<u8>, String>;
    /// One page of `resources/directory/read` of `uri` from `cursor`.
    async fn read_directory(
        &self,
        uri: &str,
        cursor: Option<&str>,
    ) -> Result<CursorPage<DirEntry>, String>;
}

/// What the server must serve.
#[derive(Debug, Clone, Default)]
pub struct SkillsFixture {
    /// The `SKILL.md` URI of every skill `skills/list` must give, exactly.
    pub skills: Vec<String>,
    /// `skill://` URIs of hidden and denied files inside skill folders: never in a
    /// manifest, never read, never in a directory read.
    pub forbidden: Vec<String>,
}

/// The most pages one paged walk may take before it counts as not ending.
const MAX_PAGES: usize = 10_000;

/// `sha256:` and the lowercase hex digest of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    let hex: String = sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

/// Every page of `skills/list`, checking no skill comes twice.
async fn all_skills(server: &dyn SkillsServer) -> Vec<SkillManifest> {
    let mut out: Vec<SkillManifest> = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let (items, next) = server
            .list_skills(cursor.as_deref())
            .await
            .unwrap_or_else(|e| panic!("skills/list: a page must load: {e}"));
        for s in items {
            assert!(
                out.iter().all(|o| o.uri != s.uri),
                "skills/list: {} is listed twice (pages overlap)",
                s.uri
            );
            out.push(s);
        }
        match next {
            Some(n) => cursor = Some(n),
            None => return out,
        }
    }
    panic!("skills/list: pagination did not end");
}

/// The folder URI of a skill (its `SKILL.md` URI without the file name).
fn folder_of(skill_md: &str) -> &str {
    skill_md
        .strip_suffix("/SKILL.md")
        .unwrap_or_else(|| panic!("skills/list: {skill_md} does not end in /SKILL.md"))
}

/// Every entry under `folder` by directory reads, recursively, checking each directory's
/// pages for overlaps; the files found, and whether any directory took more than one page.
async fn walk(server: &dyn SkillsServer, folder: &str) -> (BTreeSet<String>, bool) {
    let mut files = BTreeSet::new();
    let mut paged = false;
    let mut pending = vec![folder.to_owned()];
    let mut seen_dirs = BTreeSet::new();
    while let Some(dir) = pending.pop() {
        assert!(
            seen_dirs.insert(dir.clone()),
            "directory read: {dir} is reached twice"
        );
        let mut entries: BTreeSet<String> = BTreeSet::new();
        let mut cursor: Option<String> = None;
        let mut pages = 0;
        loop {
            pages += 1;
            assert!(
                pages <= MAX_PAGES,
                "directory read of {dir}: pagination did not end"
            );
            let (items, next) = server
                .read_directory(&dir, cursor.as_deref())
                .await
                .unwrap_or_else(|e| panic!("directory read of {dir}: a page must load: {e}"));
            for e in items {
                assert!(
                    entries.insert(e.uri.clone()),
                    "directory read of {dir}: {} comes twice, without a gap or a duplicate \
                     is the rule (pages overlap)",
                    e.uri
                );
                let rest = e
                    .uri
                    .strip_prefix(&format!("{}/", dir.trim_end_matches('/')));
                assert!(
                    rest.is_some_and(|r| !r.trim_end_matches('/').is_empty()
                        && !r.trim_end_matches('/').contains('/')),
                    "directory read of {dir}: {} is not a direct child",
                    e.uri
                );
                if e.directory {
                    pending.push(e.uri);
                } else {
                    files.insert(e.uri);
                }
            }
            match next {
                Some(n) => cursor = Some(n),
                None => break,
            }
        }
        paged |= pages > 1;
    }
    (files, paged)
}

/// Run every skills check against `server`, which must serve exactly `fixture`'s skills.
pub async fn check_skills(server: &dyn SkillsServer, fixture: &SkillsFixture) {
    let skills = all_skills(server).await;
    let listed: BTreeSet<&str> = skills.iter().map(|s| s.uri.as_str()).collect();
    let expected: BTreeSet<&str> = fixture.skills.iter().map(String::as_str).collect();
    assert_eq!(
        listed, expected,
        "skills/list: the skills listed must be exactly the fixture's"
    );
    let forbidden: BTreeSet<&str> = fixture.forbidden.iter().map(String::as_str).collect();
    let mut any_paged = false;
    for skill in &skills {
        let folder = folder_of(&skill.uri);
        let mut manifest = BTreeSet::new();
        for f in &skill.files {
            assert!(
                !forbidden.contains(f.uri.as_str()),
                "hidden or denied: {} is in the manifest of {}",
                f.uri,
                skill.uri
            );
            assert!(
                f.uri.starts_with(&format!("{folder}/")),
                "manifest: {} of {} is not inside the skill's folder",
                f.uri,
                skill.uri
            );
            assert!(
                manifest.insert(f.uri.clone()),
                "manifest: {} is in the manifest of {} twice",
                f.uri,
                skill.uri
            );
            let hex = f.digest.strip_prefix("sha256:").unwrap_or_default();
            assert!(
                hex.len() == 64
                    && hex
                        .bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
                "manifest digest: {} has digest {:?}, not sha256: and 64 lowercase hex digits",
                f.uri,
                f.digest
            );
            let bytes = server
                .read(&f.uri)
                .await
                .unwrap_or_else(|e| panic!("manifest: {} cannot be read: {e}", f.uri));
            assert_eq!(
                f.size,
                bytes.len() as u64,
                "manifest size: {} says {} bytes, resources/read returns {}",
                f.uri,
                f.size,
                bytes.len()
            );
            assert_eq!(
                f.digest,
                sha256_digest(&bytes),
                "manifest digest: {} does not equal the bytes resources/read returns",
                f.uri
            );
        }
        assert!(
            manifest.contains(&skill.uri),
            "manifest: {} does not list its own SKILL.md",
            skill.uri
        );
        let (shown, paged) = walk(server, folder).await;
        any_paged |= paged;
        for uri in &shown {
            assert!(
                !forbidden.contains(uri.as_str()),
                "hidden or denied: a directory read shows {uri}"
            );
        }
        let missing: Vec<_> = manifest.difference(&shown).collect();
        let extra: Vec<_> = shown.difference(&manifest).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "directory reads of {folder} must show exactly the manifest's files, without a \
             gap or a duplicate: missing {missing:?}, not in the manifest {extra:?}"
        );
    }
    assert!(
        any_paged,
        "directory read: no skill folder took more than one page, so paging went untested \
         (use a smaller page size or a larger fixture)"
    );
    for uri in &fixture.forbidden {
        let read = server.read(uri).await;
        assert!(
            read.is_err(),
            "hidden or denied: {uri} is readable ({} bytes)",
            read.map(|b| b.len()).unwrap_or_default()
        );
    }
}
