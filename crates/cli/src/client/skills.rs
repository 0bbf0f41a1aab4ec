//! `skills` and `skills pull`: the Skills extension (SEP-2640) from the terminal. A pull
//! verifies every file against the manifest before anything reaches its final place, so a
//! server that lies (or a file changed under it) leaves the destination as it was.

use std::io::{IsTerminal as _, Write as _};
use std::path::{Component, Path, PathBuf};

use anyhow::{Context as _, anyhow, bail};
use mcpr_server::skills::catalog::{MAX_SKILL_BYTES, MAX_SKILL_FILES};
use rmcp::model::{SKILLS_EXTENSION_ID, Skill, SkillResources};
use serde_json::{Value, json};
use unicode_normalization::UnicodeNormalization as _;
use unicode_script::{Script, ScriptExtension, UnicodeScript as _};

use super::Session;
use super::commands::{decode_contents, paginate, parsed};
use super::output::{clean, field, raw_line, table};
use super::transport::AnswerTooLarge;

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

/// What a pull's temporary folder is called: `.NAME.pull-PID-NANOS.partial`, NAME the
/// skill's folder name, PID the pulling process, NANOS (hex) telling two of its pulls apart.
fn staging_name(name: &str, pid: u32, nanos: u32) -> String {
    format!(".{name}.pull-{pid}-{nanos:x}.partial")
}

/// The process id in a name [`staging_name`] makes, or `None` for any other name.
fn staging_pid(file_name: &str) -> Option<u32> {
    let inner = file_name.strip_prefix('.')?.strip_suffix(".partial")?;
    let (_, tail) = inner.rsplit_once(".pull-")?;
    let (pid, nanos) = tail.split_once('-')?;
    let digits = |t: &str, hex: bool| {
        !t.is_empty()
            && t.chars().all(|c| {
                if hex {
                    c.is_ascii_hexdigit()
                } else {
                    c.is_ascii_digit()
                }
            })
    };
    if !digits(pid, false) || !digits(nanos, true) {
        return None;
    }
    pid.parse().ok()
}

/// The longest a pull can run: `--timeout` bounds the whole command and is at most an hour.
const LONGEST_PULL: std::time::Duration = std::time::Duration::from_secs(3600);

/// Whether process `pid` is running, where the system says (Linux's `/proc`); `None` where
/// it cannot be told.
fn process_alive(pid: u32) -> Option<bool> {
    if pid == std::process::id() {
        return Some(true);
    }
    let proc = Path::new("/proc");
    if !proc.join("self").exists() {
        return None;
    }
    // A zombie (killed, not yet reaped) pulls nothing any more.
    match std::fs::read_to_string(proc.join(pid.to_string()).join("stat")) {
        Ok(stat) => Some(
            stat.rsplit_once(')')
                .is_none_or(|(_, rest)| !rest.trim_start().starts_with('Z')),
        ),
        Err(_) => Some(false),
    }
}

/// Remove the temporary folders that pulls into `dir` left behind when they were killed:
/// only folders (never a link or a file) named as [`staging_name`] makes them, and of those
/// only the ones whose process is gone, or, where that cannot be told, that are older than
/// any pull can run. Everything else in `dir` is left alone. Returns how many were removed.
fn remove_stale_staging(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(staging_pid) else {
            continue;
        };
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
            continue;
        };
        if !meta.is_dir() {
            continue;
        }
        let stale = match process_alive(pid) {
            Some(alive) => !alive,
            None => meta
                .modified()
                .ok()
                .and_then(|m| m.elapsed().ok())
                .is_some_and(|age| age > LONGEST_PULL),
        };
        if stale && std::fs::remove_dir_all(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
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
        let path = dir.join(staging_name(name, std::process::id(), nanos));
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

/// Room, beyond a file's own bytes, for the `resources/read` answer that carries it: the
/// JSON-RPC envelope, the URI, the MIME type and any `_meta`.
const ANSWER_FRAMING: usize = 64 * 1024;

/// The most bytes the answer carrying a file of `size` bytes can take: its bytes as a JSON
/// string at the worst (a control character is six, `\u0001`; base64 is 4/3 of them, and
/// a server that escapes every non-ASCII character takes at most three for each byte of
/// UTF-8) and [`ANSWER_FRAMING`]. Past it the server sends more than the manifest announced,
/// and reading stops there instead of at `--max-message-mib`.
fn answer_bound(size: u64) -> usize {
    usize::try_from(size)
        .unwrap_or(usize::MAX)
        .saturating_mul(6)
        .saturating_add(ANSWER_FRAMING)
}

/// The name a skill's folder is written under: the NFKC form of its name, the form the spec
/// compares with the URI's segment (`ｅｖｉｌ` is written `evil`, as `skill://acme/evil/`
/// names it). A name whose letters mix scripts (a Cyrillic `е` among Latin ones) is
/// refused: it would show as another skill's name.
fn folder_name(name: &str) -> anyhow::Result<String> {
    let nfkc: String = name.nfkc().collect();
    if mixes_scripts(&nfkc) {
        bail!(
            "the skill's name {} mixes scripts ({}); it could pass for another skill's name, so it is not pulled",
            clean(name),
            scripts_of(&nfkc).join(", ")
        );
    }
    Ok(nfkc)
}

/// Whether `text` is not single-script in the sense of Unicode's UTS #39: the scripts of its
/// characters (their Script_Extensions, digits and hyphens fitting any) have none in common,
/// Han taken together with Hiragana and Katakana (Japanese), with Hangul (Korean) and with
/// Bopomofo, as one writing system each.
fn mixes_scripts(text: &str) -> bool {
    let mut common = ScriptExtension::for_str("");
    let (mut japanese, mut korean, mut bopomofo) = (true, true, true);
    for c in text.chars() {
        let ext = c.script_extension();
        if ext.is_common() || ext.is_inherited() {
            continue;
        }
        let has = |s: Script| ext.contains_script(s);
        japanese &= has(Script::Han) || has(Script::Hiragana) || has(Script::Katakana);
        korean &= has(Script::Han) || has(Script::Hangul);
        bopomofo &= has(Script::Han) || has(Script::Bopomofo);
        common.intersect_with(ext);
    }
    common.is_empty() && !japanese && !korean && !bopomofo
}

/// The scripts the letters of `text` are written in, each named once, for a message.
fn scripts_of(text: &str) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for c in text.chars() {
        let script = c.script();
        if matches!(script, Script::Common | Script::Inherited) {
            continue;
        }
        if !out.contains(&script.full_name()) {
            out.push(script.full_name());
        }
    }
    out
}

/// The entry of the skill whose `SKILL.md` is `uri`: `skills/get`, or, from a server that
/// does not answer it (-32601, or an answer without `skill`), the entry `skills/list` holds.
async fn entry(s: &Session, uri: &str) -> anyhow::Result<Skill> {
    let parse = |v: Value| -> anyhow::Result<Skill> {
        serde_json::from_value(v).context("the server's skill entry is not a skill")
    };
    // A skill's manifest is far smaller than the skill may be (16 MiB, the spec's bound):
    // an answer past that is not a skill entry, and is not held whole to find out.
    let bound = usize::try_from(MAX_SKILL_BYTES).unwrap_or(usize::MAX);
    match s
        .request_within("skills/get", json!({ "uri": uri }), bound)
        .await
    {
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
    let name = folder_name(skill.name())?;
    let name = name.as_str();
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
    // Pulls killed before they finished left their temporary folders here: theirs only.
    remove_stale_staging(dir);
    let outcome = fetch_into(s, dir, name, &skill, files, &targets, force).await;
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
    name: &str,
    skill: &Skill,
    files: &[rmcp::model::SkillResource],
    targets: &[PathBuf],
    force: bool,
) -> anyhow::Result<PathBuf> {
    let dest = dir.join(name);
    let exists = std::fs::symlink_metadata(&dest).is_ok();
    if exists && !force {
        bail!("{} exists already; --force replaces it", dest.display());
    }
    let staging = Staging::new(dir, name)?;
    let fresh = staging.path.join(name);
    std::fs::create_dir(&fresh).with_context(|| format!("cannot create {}", fresh.display()))?;
    // SKILL.md first: a skill whose entry point fails verification is not read further.
    let mut order: Vec<usize> = (0..files.len()).collect();
    order.sort_by_key(|&i| files[i].uri != skill.uri);
    for i in order {
        let (file, rel) = (&files[i], &targets[i]);
        let shown = rel.display();
        // Each answer is held to what its manifest entry announced (with room for its
        // encoding), so a server cannot make the pull hold more than the skill's size allows.
        let result = s
            .request_within(
                "resources/read",
                json!({ "uri": file.uri }),
                answer_bound(file.size),
            )
            .await
            .map_err(|e| match e.downcast_ref::<AnswerTooLarge>() {
                Some(big) => anyhow!(
                    "{shown} ({}) is larger than the manifest says: its answer passed {} bytes, more than {} bytes of file can take even encoded; stopped reading, nothing was written to {}",
                    clean(&file.uri),
                    big.limit,
                    file.size,
                    dir.display()
                ),
                None => e.context(format!("cannot read {shown} ({})", clean(&file.uri))),
            })?;
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
    fn only_names_a_pull_gives_its_temporary_folders_are_taken_for_one() {
        assert_eq!(staging_pid(&staging_name("alpha", 42, 0xbeef)), Some(42));
        assert_eq!(staging_pid(".a.b.pull-7-0.partial"), Some(7));
        for other in [
            "alpha",
            ".alpha.pull-42-beef",
            "alpha.pull-42-beef.partial",
            ".alpha.pull-x-beef.partial",
            ".alpha.pull-42-xyz.partial",
            ".alpha.pull--beef.partial",
            ".alpha.pull-42.partial",
        ] {
            assert_eq!(staging_pid(other), None, "{other}");
        }
        assert_eq!(process_alive(std::process::id()), Some(true));
    }

    #[test]
    fn names_are_written_in_nfkc_and_mixed_scripts_refused() {
        assert_eq!(
            folder_name("\u{ff45}\u{ff56}\u{ff49}\u{ff4c}").unwrap(),
            "evil"
        );
        assert_eq!(folder_name("pdf-2").unwrap(), "pdf-2");
        // One writing system each, Japanese and Korean with their Han.
        for one in [
            "обзор",
            "σύνοψη",
            "レビュー",
            "日本語のレビュー",
            "한국어-검토",
            "审阅-2",
        ] {
            assert!(!mixes_scripts(one), "{one}");
        }
        for mixed in ["\u{435}vil", "pаypal", "αbc", "레ビュー"] {
            assert!(mixes_scripts(mixed), "{mixed}");
            assert!(folder_name(mixed).is_err(), "{mixed}");
        }
        let e = folder_name("\u{435}vil").unwrap_err().to_string();
        assert!(e.contains("mixes scripts (Cyrillic, Latin)"), "{e}");
    }

    #[test]
    fn an_answer_is_bounded_by_its_file_size_with_room_for_encoding() {
        assert_eq!(answer_bound(10), 60 + ANSWER_FRAMING);
        assert_eq!(answer_bound(0), ANSWER_FRAMING);
        // Base64 of any size fits: 4 bytes for every 3.
        for size in [1u64, 3, 1000, 16 << 20] {
            let b64 = usize::try_from(size.div_ceil(3) * 4).unwrap();
            assert!(answer_bound(size) >= b64 + ANSWER_FRAMING, "{size}");
        }
        assert_eq!(answer_bound(u64::MAX), usize::MAX);
    }

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
