//! `skills` and `skills pull`: the Skills extension (SEP-2640) from the terminal. A pull
//! verifies every file against the manifest before anything reaches its final place, so a
//! server that lies (or a file changed under it) leaves the destination as it was.

use std::io::{IsTerminal as _, Write as _};
use std::path::{Component, Path, PathBuf};

use anyhow::{Context as _, anyhow, bail};
use mcpr_server::skills::catalog::{MAX_SKILL_BYTES, MAX_SKILL_FILES};
use rmcp::model::{SKILLS_EXTENSION_ID, Skill, SkillResources};
use serde_json::{Value, json};

use super::Session;
use super::commands::{decode_contents, paginate, parsed};
use super::output::{clean, field, raw_line, table};

/// Fail unless the server declared the Skills extension: a bare -32601 says less.
fn require_skills(s: &Session) -> anyhow::Result<()> {
    let declared = s
        .capabilities()
        .get("extensions")
        .and_then(|e| e.get(SKILLS_EXTENSION_ID))
        .is_some();
    if declared {
        return Ok(());
    }
    bail!("this server offers no skills (it does not declare the {SKILLS_EXTENSION_ID} extension)")
}

/// `skills`: every page of `skills/list`, as a table or one skill per line as sent.
pub(crate) async fn list(s: &Session, json: bool) -> anyhow::Result<()> {
    require_skills(s)?;
    let stdout = std::io::stdout();
    let terminal = stdout.is_terminal();
    let mut rows = Vec::new();
    paginate(s, "skills/list", "skills", |item| {
        if json {
            raw_line(&mut stdout.lock(), item, terminal)?;
        } else {
            let skill = parsed(item)?;
            let front = skill.get("frontmatter").cloned().unwrap_or_default();
            let files = match skill.get("resources") {
                Some(Value::Array(files)) => {
                    let bytes = files
                        .iter()
                        .filter_map(|f| f.get("size").and_then(Value::as_u64))
                        .fold(0u64, u64::saturating_add);
                    format!("{} ({})", files.len(), super::output::human_size(bytes))
                }
                Some(Value::String(marker)) => clean(marker),
                _ => "-".to_owned(),
            };
            let description = front
                .get("description")
                .and_then(Value::as_str)
                .map_or_else(|| "-".to_owned(), |d| clean(d.lines().next().unwrap_or("")));
            rows.push(vec![
                field(&front, "name"),
                field(&skill, "uri"),
                files,
                description,
            ]);
        }
        Ok(())
    })
    .await?;
    if !json {
        table(
            &mut stdout.lock(),
            &["NAME", "URI", "FILES", "DESCRIPTION"],
            &rows,
        )?;
    }
    Ok(())
}

/// Percent-decode one URI path segment; `None` for a malformed escape or bytes that are not
/// UTF-8 (no file name on disk could be trusted to mean the same).
fn percent_decode(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = segment.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Where a manifest file goes inside the skill's folder: its URI below the folder of the
/// skill's `SKILL.md`, decoded segment by segment. Anything that could name a place outside
/// that folder (`..`, `.`, an empty segment, an absolute path, a backslash, a drive letter, a
/// NUL, a query or fragment, an encoded `/`) is refused rather than normalised: a manifest
/// that needs it is not one to install.
fn local_path(skill_uri: &str, file_uri: &str) -> anyhow::Result<PathBuf> {
    let refuse = |why: &str| {
        anyhow!(
            "the manifest's file {} would be written outside the skill's folder ({why}); nothing was written",
            clean(file_uri)
        )
    };
    let root = skill_uri
        .strip_suffix("SKILL.md")
        .filter(|r| r.ends_with('/'))
        .ok_or_else(|| anyhow!("{} is not the URI of a SKILL.md", clean(skill_uri)))?;
    let rel = file_uri
        .strip_prefix(root)
        .ok_or_else(|| refuse("its URI is not under the skill's"))?;
    if rel.is_empty() {
        return Err(refuse("it names the folder itself"));
    }
    if rel.contains(['?', '#']) {
        return Err(refuse("a query or fragment"));
    }
    let mut path = PathBuf::new();
    for raw in rel.split('/') {
        let seg = percent_decode(raw).ok_or_else(|| refuse("a malformed percent escape"))?;
        match seg.as_str() {
            "" => return Err(refuse("an empty path segment or an absolute path")),
            "." | ".." => return Err(refuse("a `.` or `..` segment")),
            _ => {}
        }
        if seg.contains(['/', '\\', '\0']) || (cfg!(windows) && seg.contains(':')) {
            return Err(refuse("a slash, backslash or NUL inside a segment"));
        }
        // Whatever the platform makes of the segment, it must stay one plain name.
        let mut parts = Path::new(&seg).components();
        match (parts.next(), parts.next()) {
            (Some(Component::Normal(_)), None) => path.push(&seg),
            _ => return Err(refuse("a segment that is not a plain file name")),
        }
    }
    Ok(path)
}

/// A folder this pull owns: removed, with all it holds, unless [`Staging::keep`] is called.
/// It is made with `create_dir` (never an existing one), so no link can be in it but ours.
struct Staging {
    path: PathBuf,
    kept: bool,
}

impl Staging {
    fn new(dir: &Path, name: &str) -> anyhow::Result<Self> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = dir.join(format!(
            ".{name}.pull-{}-{nanos:x}.partial",
            std::process::id()
        ));
        std::fs::create_dir(&path)
            .with_context(|| format!("cannot create the temporary folder {}", path.display()))?;
        Ok(Self { path, kept: false })
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.kept {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// The entry of the skill whose `SKILL.md` is `uri`: `skills/get`, or, from a server that
/// does not answer it (-32601, or an answer without `skill`), the entry `skills/list` holds.
async fn entry(s: &Session, uri: &str) -> anyhow::Result<Skill> {
    let parse = |v: Value| -> anyhow::Result<Skill> {
        serde_json::from_value(v).context("the server's skill entry is not a skill")
    };
    match s.request("skills/get", json!({ "uri": uri })).await {
        Ok(mut result) => {
            if let Some(skill) = result.get_mut("skill").map(Value::take) {
                return parse(skill);
            }
        }
        Err(e)
            if e.downcast_ref::<super::transport::RpcError>()
                .is_some_and(|r| r.code == -32601) => {}
        Err(e) => return Err(e),
    }
    let mut found = None;
    paginate(s, "skills/list", "skills", |item| {
        if found.is_none() {
            let v = parsed(item)?;
            if v.get("uri").and_then(Value::as_str) == Some(uri) {
                found = Some(v);
            }
        }
        Ok(())
    })
    .await?;
    match found {
        Some(v) => parse(v),
        None => bail!(
            "the server has no skill {} (it does not answer skills/get, and skills/list does not hold it)",
            clean(uri)
        ),
    }
}

/// After its bytes passed the digest: the `SKILL.md`'s own frontmatter must be the entry's,
/// field by field (SEP-2640), or what the agent loads is not what the listing showed.
fn check_frontmatter(skill: &Skill, bytes: &[u8]) -> anyhow::Result<()> {
    let text = std::str::from_utf8(bytes).context("SKILL.md is not UTF-8 text")?;
    let read = mcpr_server::skills::frontmatter::parse(text)
        .map_err(|e| anyhow!("SKILL.md is not a skill: {e}"))?;
    let as_json = |f: &rmcp::model::SkillFrontmatter| serde_json::to_value(f).unwrap_or_default();
    let (want, got) = (as_json(&skill.frontmatter), as_json(&read));
    if want == got {
        return Ok(());
    }
    let keys: std::collections::BTreeSet<&String> = want
        .as_object()
        .into_iter()
        .chain(got.as_object())
        .flat_map(|m| m.keys())
        .collect();
    let differ: Vec<String> = keys
        .into_iter()
        .filter(|k| want.get(k.as_str()) != got.get(k.as_str()))
        .map(|k| clean(k))
        .collect();
    bail!(
        "SKILL.md's frontmatter differs from the server's entry in {}",
        differ.join(", ")
    )
}

/// `skills pull URI DIR`: `skills/get`, every manifest file read and verified into a
/// temporary folder inside DIR, then renamed to `DIR/<name>` (an existing one replaced only
/// with `force`). Prints the folder written.
pub(crate) async fn pull(s: &Session, uri: &str, dir: &Path, force: bool) -> anyhow::Result<()> {
    require_skills(s)?;
    let skill = entry(s, uri).await?;
    if skill.uri != uri {
        bail!(
            "asked for {} but the server answered with {}",
            clean(uri),
            clean(&skill.uri)
        );
    }
    let SkillResources::Files(files) = &skill.resources else {
        bail!(
            "the server marks the files of {} as dynamic: there is no manifest to verify them against, so it is not pulled",
            clean(uri)
        );
    };
    // The spec's bounds on a skill, before anything is read: a manifest past them is not
    // one to download, however long --timeout is.
    let total = files.iter().fold(0u64, |t, f| t.saturating_add(f.size));
    if files.len() > MAX_SKILL_FILES || total > MAX_SKILL_BYTES {
        bail!(
            "the skill {} lists {} files of {} in all, over the spec's limits ({MAX_SKILL_FILES} files, {}); nothing was read",
            clean(uri),
            files.len(),
            super::output::human_size(total),
            super::output::human_size(MAX_SKILL_BYTES)
        );
    }
    // Every path first, with our own message; then the spec's rules (name, SKILL.md in the
    // manifest, no duplicates, well-formed digests) as rmcp checks them.
    let targets = files
        .iter()
        .map(|f| local_path(&skill.uri, &f.uri))
        .collect::<anyhow::Result<Vec<_>>>()?;
    skill
        .validate()
        .map_err(|e| anyhow!("the server's skill is not valid: {}", clean(&e.to_string())))?;
    let name = skill.name();
    // The name passed rmcp's rules (letters, digits, hyphens): still, it must be one plain
    // folder name here.
    let mut comps = Path::new(name).components();
    if !matches!(
        (comps.next(), comps.next()),
        (Some(Component::Normal(_)), None)
    ) {
        bail!(
            "the skill's name {} is not a plain folder name",
            clean(name)
        );
    }
    let created_dir = !dir.exists();
    if created_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    // SKILL.md first: a skill whose entry point fails verification is not read further.
    let mut order: Vec<usize> = (0..files.len()).collect();
    order.sort_by_key(|&i| files[i].uri != skill.uri);
    let outcome = fetch_into(s, dir, &skill, files, &order, &targets, force).await;
    if outcome.is_err() && created_dir {
        let _ = std::fs::remove_dir(dir);
    }
    let dest = outcome?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{} ({} files) -> {}",
        clean(name),
        files.len(),
        dest.display()
    )?;
    Ok(())
}

async fn fetch_into(
    s: &Session,
    dir: &Path,
    skill: &Skill,
    files: &[rmcp::model::SkillResource],
    order: &[usize],
    targets: &[PathBuf],
    force: bool,
) -> anyhow::Result<PathBuf> {
    let name = skill.name();
    let dest = dir.join(name);
    let exists = std::fs::symlink_metadata(&dest).is_ok();
    if exists && !force {
        bail!("{} exists already; --force replaces it", dest.display());
    }
    let staging = Staging::new(dir, name)?;
    let fresh = staging.path.join(name);
    std::fs::create_dir(&fresh).with_context(|| format!("cannot create {}", fresh.display()))?;
    for &i in order {
        let (file, rel) = (&files[i], &targets[i]);
        let shown = rel.display();
        let result = s
            .request("resources/read", json!({ "uri": file.uri }))
            .await
            .with_context(|| format!("cannot read {shown} ({})", clean(&file.uri)))?;
        let parts = decode_contents(&file.uri, &result)?;
        let [part] = parts.as_slice() else {
            bail!(
                "the server answered {} parts for {shown} ({}): a skill file is one",
                parts.len(),
                clean(&file.uri)
            );
        };
        file.verify(&part.bytes).map_err(|e| {
            anyhow!(
                "{shown} does not match the manifest: {}; nothing was written to {}",
                clean(&e.to_string()),
                dir.display()
            )
        })?;
        if file.uri == skill.uri {
            check_frontmatter(skill, &part.bytes)
                .map_err(|e| anyhow!("{e}; nothing was written to {}", dir.display()))?;
        }
        let path = fresh.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        // `create_new`: two manifest entries for one path, or a file where a folder was
        // written, fail here instead of one overwriting the other.
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .with_context(|| format!("cannot write {shown} in {}", staging.path.display()))?;
        f.write_all(&part.bytes)
            .and_then(|()| f.sync_all())
            .with_context(|| format!("cannot write {shown}"))?;
    }
    if exists {
        // The old folder moves into the staging folder (removed with it) only once the new
        // one is complete; a link is moved, never followed.
        let old = staging.path.join(format!("{name}.old"));
        std::fs::rename(&dest, &old)
            .with_context(|| format!("cannot move the old {} aside", dest.display()))?;
        if let Err(e) = std::fs::rename(&fresh, &dest) {
            let _ = std::fs::rename(&old, &dest);
            return Err(e).with_context(|| format!("cannot move the skill to {}", dest.display()));
        }
    } else {
        if std::fs::symlink_metadata(&dest).is_ok() {
            bail!(
                "{} appeared while pulling; --force replaces it",
                dest.display()
            );
        }
        std::fs::rename(&fresh, &dest)
            .with_context(|| format!("cannot move the skill to {}", dest.display()))?;
    }
    drop(staging);
    Ok(dest)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SKILL: &str = "skill://acme/alpha/SKILL.md";

    #[test]
    fn manifest_paths_stay_in_the_skill_folder() {
        assert_eq!(
            local_path(SKILL, "skill://acme/alpha/ref/notes.txt").unwrap(),
            Path::new("ref/notes.txt")
        );
        assert_eq!(
            local_path(SKILL, "skill://acme/alpha/My%20Notes.md").unwrap(),
            Path::new("My Notes.md")
        );
        for bad in [
            "skill://acme/alpha/../beta/SKILL.md",
            "skill://acme/alpha/ref/../../x",
            "skill://acme/alpha/%2e%2e/x",
            "skill://acme/alpha//etc/passwd",
            "skill://acme/alpha/a%2Fb",
            "skill://acme/alpha/a%5Cb",
            "skill://acme/alpha/a\\..\\b",
            "skill://acme/alpha/x%00",
            "skill://acme/alpha/./x",
            "skill://acme/alpha/",
            "skill://acme/alpha/x?y",
            "skill://acme/beta/x",
            "file:///etc/passwd",
            "skill://acme/alpha/%zz",
        ] {
            let e = local_path(SKILL, bad).expect_err(bad);
            assert!(
                format!("{e}").contains("outside the skill's folder"),
                "{bad}: {e}"
            );
        }
    }
}
