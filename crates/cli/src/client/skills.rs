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
    let mut listed = 0usize;
    paginate(s, "skills/list", "skills", |item| {
        listed += 1;
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
    if listed == 0 {
        // A server that declares skills and lists none is most often misconfigured (a skills
        // folder that is missing, a ref that does not resolve), and says why only in its own
        // log, which a client does not see.
        eprintln!(
            "warning: the server declares skills but lists none; if it is mcp-resources, `mcp-resources check-config --connect CONFIG` names every skill it leaves out and why"
        );
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

/// Every skill of `skills/list`, every page, as sent (with their manifests).
async fn list_all(s: &Session) -> anyhow::Result<Vec<Skill>> {
    let mut out = Vec::new();
    paginate(s, "skills/list", "skills", |item| {
        let skill: Skill = serde_json::from_value(parsed(item)?)
            .context("the server listed a skill entry that is not a skill")?;
        out.push(skill);
        Ok(())
    })
    .await?;
    out.sort_by(|a, b| a.uri.cmp(&b.uri));
    Ok(out)
}

/// The path a skill's `SKILL.md` URI names, without the scheme and `/SKILL.md`
/// (`skill://acme/review/SKILL.md` is `acme/review`).
fn skill_path(uri: &str) -> &str {
    let path = uri.strip_prefix(SKILL_SCHEME).unwrap_or(uri);
    path.strip_suffix("/SKILL.md").unwrap_or(path)
}

const SKILL_SCHEME: &str = "skill://";

/// Whether `asked` (a name, `PREFIX/NAME`, or with `exact` a `skill://` folder URI's path)
/// names `skill`.
fn names_skill(skill: &Skill, asked: &str, exact: bool) -> bool {
    let path = skill_path(&skill.uri);
    if exact {
        return path == asked;
    }
    path == asked
        || path.ends_with(&format!("/{asked}"))
        || (!asked.contains('/') && skill.name() == asked)
}

/// The `SKILL.md` URI `asked` names: a `SKILL.md` URI as given; else the one skill of
/// `listed` whose name, path or folder URI it is. None, or more than one, is a usage error
/// naming the candidates.
fn pick(asked: &str, listed: &[Skill]) -> anyhow::Result<String> {
    let exact = asked.starts_with(SKILL_SCHEME);
    let want = asked
        .strip_prefix(SKILL_SCHEME)
        .unwrap_or(asked)
        .trim_end_matches('/');
    if want.is_empty() || want.contains("://") {
        return Err(super::usage(anyhow!(
            "{} is not a skill: give its name, PREFIX/NAME, skill://PREFIX/NAME or its SKILL.md URI",
            clean(asked)
        )));
    }
    let found: Vec<&Skill> = listed
        .iter()
        .filter(|s| names_skill(s, want, exact))
        .collect();
    match found.as_slice() {
        [one] => Ok(one.uri.clone()),
        [] => {
            let some: Vec<String> = listed.iter().take(20).map(|s| clean(&s.uri)).collect();
            Err(super::usage(anyhow!(
                "no skill of this server is named {} (it lists {}{}{})",
                clean(asked),
                listed.len(),
                if some.is_empty() { "" } else { ": " },
                some.join(", ")
                    + if listed.len() > some.len() {
                        ", …"
                    } else {
                        ""
                    }
            )))
        }
        many => Err(super::usage(anyhow!(
            "{} names {} skills: {}; pull one by its URI or PREFIX/NAME",
            clean(asked),
            many.len(),
            many.iter()
                .map(|s| clean(&s.uri))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// The `SKILL.md` URI the user's `asked` names: a URI ending in `/SKILL.md` as it is (no
/// listing needed), anything else looked up in `skills/list`.
async fn resolve(s: &Session, asked: &str) -> anyhow::Result<String> {
    if asked.contains("://") && asked.ends_with("/SKILL.md") {
        return Ok(asked.to_owned());
    }
    pick(asked, &list_all(s).await?)
}

/// `skills pull SKILL DIR`: the skill named, installed with [`install`]. Prints the folder
/// written, and a warning for each file its `SKILL.md` names that its manifest lacks.
pub(crate) async fn pull(s: &Session, asked: &str, dir: &Path, force: bool) -> anyhow::Result<()> {
    require_skills(s)?;
    let uri = resolve(s, asked).await?;
    let skill = entry(s, &uri).await?;
    let done = install(s, &uri, &skill, dir, force).await?;
    done.report("")
}

/// `skills pull --all DIR`: every skill the server lists, each installed as `pull` installs
/// one; a skill that fails is named and the others still installed, then the command fails.
/// Each skill installed is recorded in DIR's state file as `skills sync` records it (`server`
/// as for [`sync`]), so a later sync of DIR updates and prunes these folders instead of
/// refusing them as folders no sync wrote.
pub(crate) async fn pull_all(
    s: &Session,
    server: &str,
    dir: &Path,
    force: bool,
) -> anyhow::Result<()> {
    require_skills(s)?;
    let listed = list_all(s).await?;
    // Read (and refused when foreign) before anything is written, as a sync does.
    let state_path = dir.join(SYNC_STATE);
    let mut state = open_state(&state_path, dir, server)?;
    let mut failed = Vec::new();
    let mut folders: std::collections::HashMap<String, String> = Default::default();
    for listed in &listed {
        let uri = &listed.uri;
        if let Ok(name) = folder_name(listed.name())
            && let Some(first) = folders.insert(name.clone(), uri.clone())
        {
            eprintln!(
                "error: {} not pulled: {} already goes to {}",
                clean(uri),
                clean(&first),
                dir.join(&name).display()
            );
            failed.push(uri.clone());
            continue;
        }
        let done = match entry(s, uri).await {
            Ok(skill) => install(s, uri, &skill, dir, force)
                .await
                .map(|done| (done, fingerprint(&skill))),
            Err(e) => Err(e),
        };
        match done {
            Ok((done, manifest)) => {
                // The folder is this skill's now (with --force it may have been another's):
                // no other record may claim it, or a later `sync --prune` of that one would
                // remove this skill.
                state
                    .skills
                    .retain(|u, e| u == uri || e.folder != done.name);
                state.skills.insert(
                    uri.clone(),
                    Synced {
                        folder: done.name.clone(),
                        manifest,
                    },
                );
                save_state(&state_path, &state)?;
                done.report("")?;
            }
            Err(e) => {
                eprintln!("error: {} not pulled: {e:#}", clean(uri));
                failed.push(uri.clone());
            }
        }
    }
    writeln!(
        std::io::stdout().lock(),
        "{}: {} of {} skill(s) pulled",
        dir.display(),
        listed.len() - failed.len(),
        listed.len()
    )?;
    if !failed.is_empty() {
        bail!(
            "{} skill(s) not pulled: {}",
            failed.len(),
            failed.join(", ")
        );
    }
    Ok(())
}

/// What [`install`] did.
struct Installed {
    name: String,
    files: usize,
    dest: PathBuf,
    /// Paths the `SKILL.md` names that the manifest lacks.
    missing: Vec<String>,
}

/// The most warnings about files a `SKILL.md` names that one pull prints.
const MAX_MISSING_SHOWN: usize = 20;

impl Installed {
    /// One line on stdout (after `verb`), and the warnings on stderr.
    fn report(&self, verb: &str) -> anyhow::Result<()> {
        writeln!(
            std::io::stdout().lock(),
            "{verb}{} ({} files) -> {}",
            clean(&self.name),
            self.files,
            self.dest.display()
        )?;
        for p in self.missing.iter().take(MAX_MISSING_SHOWN) {
            eprintln!(
                "warning: {}/SKILL.md names {}, which is not in the skill's manifest (the server does not publish it), so the installed skill lacks it",
                clean(&self.name),
                clean(p)
            );
        }
        if self.missing.len() > MAX_MISSING_SHOWN {
            eprintln!(
                "warning: {}/SKILL.md names {} more files its manifest lacks",
                clean(&self.name),
                self.missing.len() - MAX_MISSING_SHOWN
            );
        }
        Ok(())
    }
}

/// The modes `skill`'s entry carries (`_meta` `io.github.mcp-resources/mode`: each file's
/// URI to its permission bits, an integer), checked: every URI one of the manifest's files,
/// every value a mode. They come with the manifest whose digests the files are checked
/// against, never from another answer.
fn modes_of(
    skill: &Skill,
    files: &[rmcp::model::SkillResource],
) -> anyhow::Result<std::collections::HashMap<String, u32>> {
    let key = mcpr_server::skills::MODE_META;
    let Some(given) = skill.meta.as_ref().and_then(|m| m.0.get(key)) else {
        return Ok(Default::default());
    };
    let bad = |why: String| anyhow!("the skill's file modes (_meta {key}) {why}; nothing was read");
    let Value::Object(given) = given else {
        return Err(bad("are not an object of file URIs to modes".into()));
    };
    let mut out = std::collections::HashMap::with_capacity(given.len());
    for (uri, mode) in given {
        if !files.iter().any(|f| &f.uri == uri) {
            return Err(bad(format!(
                "name {}, which is not a file of its manifest",
                clean(uri)
            )));
        }
        let mode = mode.as_u64().filter(|m| *m <= 0o7777).ok_or_else(|| {
            bad(format!(
                "give {} for {}, not a file mode",
                clean(&mode.to_string()),
                clean(uri)
            ))
        })?;
        out.insert(uri.clone(), mode as u32);
    }
    Ok(out)
}

/// The permission bits a pulled file gets for the `mode` its server gave: the owner may
/// always read and write it, nobody else may write it, and setuid, setgid and sticky are
/// never set (`0o4777` is installed `0o755`, `0o400` `0o600`).
fn safe_mode(mode: u32) -> u32 {
    (mode & 0o755) | 0o600
}

/// The relative paths inside the skill's folder that `SKILL.md`'s text names: the targets
/// of Markdown links and images that are not URLs, anchors or absolute paths, and words
/// like `scripts/run.sh` (a folder path ending in a file name with an extension). A `./`
/// in front is dropped; a path with `..` is not the folder's and is skipped. Bounded: at
/// most 1,000 paths.
fn named_paths(text: &str) -> Vec<String> {
    const MAX: usize = 1000;
    let mut out: Vec<String> = Vec::new();
    let mut add = |p: &str| {
        let p = p.trim_start_matches("./").trim_end_matches('/');
        if p.is_empty()
            || p.starts_with('/')
            || p.split('/')
                .any(|seg| seg.is_empty() || seg == "." || seg == "..")
            || out.len() >= MAX
            || out.iter().any(|o| o == p)
        {
            return;
        }
        out.push(p.to_owned());
    };
    // Markdown links and images: `](target)` or `](<target> "title")`.
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        let end = rest.find([')', '\n']).unwrap_or(rest.len());
        let target = rest[..end].trim();
        let target = match target.strip_prefix('<') {
            Some(t) => t.split('>').next().unwrap_or_default(),
            None => target.split_whitespace().next().unwrap_or_default(),
        };
        let target = target.split(['#', '?']).next().unwrap_or_default();
        let scheme = target.find(':').is_some_and(|c| !target[..c].contains('/'));
        if target.is_empty() || scheme || target.starts_with('~') {
            continue;
        }
        if let Some(decoded) = percent_decode(target) {
            add(&decoded);
        }
    }
    // Words that are paths: `scripts/run.sh`, with or without backticks.
    for word in text.split(|c: char| c.is_whitespace() || c == '`') {
        // A leading `.` is a dot-file's or `./`'s, a trailing one ends a sentence.
        let word = word
            .trim_start_matches(|c: char| "([{<\"'*".contains(c))
            .trim_end_matches(|c: char| ")]}>\"'*,.;:!?".contains(c));
        let word = word.strip_prefix("./").unwrap_or(word);
        let Some((folders, file)) = word.rsplit_once('/') else {
            continue;
        };
        let path_chars = word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c));
        let has_ext = file
            .rsplit_once('.')
            .is_some_and(|(stem, ext)| !stem.is_empty() && !ext.is_empty());
        // `example.com/page.html` is a host, not a folder of the skill.
        if path_chars && has_ext && !folders.contains('.') && !word.starts_with('/') {
            add(word);
        }
    }
    out
}

/// The paths of `named` that the manifest (`have`, the installed relative paths) neither
/// holds nor holds files under.
fn missing_paths(named: Vec<String>, have: &[String]) -> Vec<String> {
    named
        .into_iter()
        .filter(|p| {
            !have.iter().any(|h| {
                h == p
                    || h.strip_prefix(p.as_str())
                        .is_some_and(|r| r.starts_with('/'))
            })
        })
        .collect()
}

/// Install the skill whose `SKILL.md` is `uri` and whose entry is `skill`: every file read
/// and verified into a temporary folder inside `dir`, then renamed to `dir/<name>` (an
/// existing one replaced only with `force`), each file given its mode from the same entry.
async fn install(
    s: &Session,
    uri: &str,
    skill: &Skill,
    dir: &Path,
    force: bool,
) -> anyhow::Result<Installed> {
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
    let modes = modes_of(skill, files)?;
    let name = folder_name(skill.name())?;
    let name = name.as_str();
    // The name passed rmcp's rules (letters, digits, hyphens): still, it must be one plain
    // folder name here.
    if !plain_name(name) {
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
    let job = Job {
        dir,
        name,
        skill,
        files,
        targets: &targets,
        modes: &modes,
    };
    let outcome = fetch_into(s, &job, force).await;
    if outcome.is_err() && created_dir {
        let _ = std::fs::remove_dir(dir);
    }
    let (dest, md) = outcome?;
    let have: Vec<String> = targets
        .iter()
        .map(|t| {
            t.components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/")
        })
        .collect();
    let missing = missing_paths(named_paths(&String::from_utf8_lossy(&md)), &have);
    Ok(Installed {
        name: name.to_owned(),
        files: files.len(),
        dest,
        missing,
    })
}

/// Whether `name` is one plain folder name (no separator, `.` or `..`).
fn plain_name(name: &str) -> bool {
    let mut comps = Path::new(name).components();
    matches!(
        (comps.next(), comps.next()),
        (Some(Component::Normal(_)), None)
    )
}

/// What [`fetch_into`] writes.
struct Job<'a> {
    dir: &'a Path,
    name: &'a str,
    skill: &'a Skill,
    files: &'a [rmcp::model::SkillResource],
    targets: &'a [PathBuf],
    modes: &'a std::collections::HashMap<String, u32>,
}

/// The skill's folder written as [`install`] says; its path and the `SKILL.md` bytes.
async fn fetch_into(s: &Session, job: &Job<'_>, force: bool) -> anyhow::Result<(PathBuf, Vec<u8>)> {
    let Job {
        dir,
        name,
        skill,
        files,
        targets,
        modes,
    } = *job;
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
    let mut skill_md = Vec::new();
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
            skill_md = part.bytes.clone();
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
        // The mode from the entry whose digest these bytes just passed, made safe.
        #[cfg(unix)]
        if let Some(&mode) = modes.get(&file.uri) {
            use std::os::unix::fs::PermissionsExt as _;
            f.set_permissions(std::fs::Permissions::from_mode(safe_mode(mode)))
                .with_context(|| format!("cannot set the mode of {shown}"))?;
        }
        #[cfg(not(unix))]
        let _ = modes;
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
    Ok((dest, skill_md))
}

/// The file in a synced folder that records what `skills sync` wrote there.
pub(crate) const SYNC_STATE: &str = ".mcp-resources-skills.json";

/// The largest state file read: a record of at most a few thousand skills.
const MAX_SYNC_STATE: u64 = 4 * 1024 * 1024;

/// What `skills sync` wrote into a folder: the server it synced from, and for each skill
/// (by its `SKILL.md` URI) the folder and the fingerprint of the manifest installed.
#[derive(serde::Serialize, serde::Deserialize, Debug, Default, PartialEq)]
struct SyncState {
    /// `1`.
    version: u32,
    /// The server synced from (`url:…`, `server:…` or `command:…`, no credentials).
    server: String,
    skills: std::collections::BTreeMap<String, Synced>,
}

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq)]
struct Synced {
    /// The skill's folder in the synced folder.
    folder: String,
    /// [`fingerprint`] of the manifest installed.
    manifest: String,
}

/// One digest of everything a skill's entry says about its files (each file's URI, size,
/// digest and mode): two entries with the same fingerprint install the same folder.
fn fingerprint(skill: &Skill) -> String {
    let mut text = String::new();
    if let SkillResources::Files(files) = &skill.resources {
        let modes = modes_of(skill, files).unwrap_or_default();
        let mut files: Vec<_> = files.iter().collect();
        files.sort_by(|a, b| a.uri.cmp(&b.uri));
        for f in files {
            let mode = modes
                .get(&f.uri)
                .map_or_else(String::new, |m| format!("{m:o}"));
            text.push_str(&format!("{}\t{}\t{}\t{mode}\n", f.uri, f.size, f.digest));
        }
    } else {
        text.push_str("dynamic");
    }
    rmcp::model::sha256_digest(text.as_bytes())
}

/// The state file at `path`, or `None` when there is none; one that is not ours (or names a
/// folder that is not a plain name) is an error, and nothing is touched.
fn load_state(path: &Path) -> anyhow::Result<Option<SyncState>> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut std::io::Read::take(file, MAX_SYNC_STATE + 1),
        &mut text,
    )
    .with_context(|| format!("cannot read {}", path.display()))?;
    if text.len() as u64 > MAX_SYNC_STATE {
        bail!(
            "{} is over {} bytes: not a state file of skills sync; nothing was touched",
            path.display(),
            MAX_SYNC_STATE
        );
    }
    let state: SyncState = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a state file of skills sync; nothing was touched",
            path.display()
        )
    })?;
    if state.version != 1 {
        bail!(
            "{} is of version {}, which this client does not know; nothing was touched",
            path.display(),
            state.version
        );
    }
    if let Some((uri, bad)) = state.skills.iter().find(|(_, s)| !plain_name(&s.folder)) {
        bail!(
            "{} names {} for {}, which is not a folder name; nothing was touched",
            path.display(),
            clean(&bad.folder),
            clean(uri)
        );
    }
    Ok(Some(state))
}

/// DIR's state file at `path` (an empty one for `server` when there is none), refused when an
/// earlier sync or `pull --all` wrote it from another server: one folder follows one server.
fn open_state(path: &Path, dir: &Path, server: &str) -> anyhow::Result<SyncState> {
    match load_state(path)? {
        Some(st) if st.server != server => bail!(
            "{} was synced from {}, not from {}: sync it from that server, or sync into another folder; nothing was touched",
            dir.display(),
            clean(&st.server),
            clean(server)
        ),
        Some(st) => Ok(st),
        None => Ok(SyncState {
            version: 1,
            server: server.to_owned(),
            skills: Default::default(),
        }),
    }
}

/// Write `state` to `path` whole or not at all (a temporary file renamed over it).
fn save_state(path: &Path, state: &SyncState) -> anyhow::Result<()> {
    let tmp = path.with_extension(format!("json.{}.tmp", std::process::id()));
    let text = serde_json::to_string_pretty(state)?;
    std::fs::write(&tmp, text + "\n")
        .and_then(|()| std::fs::rename(&tmp, path))
        .with_context(|| format!("cannot write {}", path.display()))
}

/// `skills sync DIR [--prune]`: see [`super::commands::SkillsCommand::Sync`]. Prints one line
/// per skill (installed, updated, unchanged, removed, kept) and a summary; fails (exit 1)
/// when a skill could not be synced, after syncing the others.
pub(crate) async fn sync(s: &Session, server: &str, dir: &Path, prune: bool) -> anyhow::Result<()> {
    require_skills(s)?;
    let listed = list_all(s).await?;
    let state_path = dir.join(SYNC_STATE);
    let mut state = open_state(&state_path, dir, server)?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    remove_stale_staging(dir);
    let uris: std::collections::HashSet<&str> = listed.iter().map(|s| s.uri.as_str()).collect();
    let (mut installed, mut updated, mut unchanged, mut removed, mut kept) = (0, 0, 0, 0, 0);
    let mut failed: Vec<String> = Vec::new();
    let mut folders: std::collections::HashMap<String, String> = Default::default();
    for listed in &listed {
        let uri = listed.uri.clone();
        let name = match folder_name(listed.name()) {
            Ok(n) if plain_name(&n) => n,
            Ok(n) => {
                eprintln!(
                    "error: {} not synced: its name {} is not a folder name",
                    clean(&uri),
                    clean(&n)
                );
                failed.push(uri);
                continue;
            }
            Err(e) => {
                eprintln!("error: {} not synced: {e:#}", clean(&uri));
                failed.push(uri);
                continue;
            }
        };
        if let Some(first) = folders.insert(name.clone(), uri.clone()) {
            eprintln!(
                "error: {} not synced: {} already goes to {}",
                clean(&uri),
                clean(&first),
                dir.join(&name).display()
            );
            failed.push(uri);
            continue;
        }
        let dest = dir.join(&name);
        let present = std::fs::symlink_metadata(&dest).is_ok_and(|m| m.is_dir());
        let prior = state.skills.get(&uri).cloned();
        // The folder is ours to replace when a sync wrote it: for this skill, or for one the
        // server no longer lists (the same skill under a new prefix, say).
        let owner = state
            .skills
            .iter()
            .find(|(u, e)| e.folder == name && (*u == &uri || !uris.contains(u.as_str())))
            .map(|(u, _)| u.clone());
        if prior
            .as_ref()
            .is_some_and(|p| p.folder == name && present && p.manifest == fingerprint(listed))
        {
            unchanged += 1;
            writeln!(std::io::stdout().lock(), "unchanged {}", clean(&name))?;
            continue;
        }
        let exists = std::fs::symlink_metadata(&dest).is_ok();
        if exists && owner.is_none() {
            eprintln!(
                "error: {} not synced: {} exists and no earlier sync wrote it (it is not in {SYNC_STATE}); it is left alone",
                clean(&uri),
                dest.display()
            );
            failed.push(uri);
            continue;
        }
        let done = match entry(s, &uri).await {
            Ok(skill) => install(s, &uri, &skill, dir, true)
                .await
                .map(|done| (done, fingerprint(&skill))),
            Err(e) => Err(e),
        };
        match done {
            Ok((done, manifest)) => {
                if let Some(owner) = owner.filter(|o| o != &uri) {
                    state.skills.remove(&owner);
                }
                let verb = if prior.is_some() {
                    "updated "
                } else {
                    "installed "
                };
                if prior.is_some() {
                    updated += 1;
                } else {
                    installed += 1;
                }
                state.skills.insert(
                    uri.clone(),
                    Synced {
                        folder: name.clone(),
                        manifest,
                    },
                );
                save_state(&state_path, &state)?;
                done.report(verb)?;
            }
            Err(e) => {
                eprintln!("error: {} not synced: {e:#}", clean(&uri));
                failed.push(uri);
            }
        }
    }
    let gone: Vec<(String, Synced)> = state
        .skills
        .iter()
        .filter(|(u, _)| !uris.contains(u.as_str()))
        .map(|(u, e)| (u.clone(), e.clone()))
        .collect();
    for (uri, synced) in gone {
        let folder = dir.join(&synced.folder);
        if !prune {
            kept += 1;
            writeln!(
                std::io::stdout().lock(),
                "kept {} ({} is gone from the server; --prune removes it)",
                clean(&synced.folder),
                clean(&uri)
            )?;
            continue;
        }
        // A link is removed as a link, never followed; a folder with all it holds.
        let gone_now = match std::fs::symlink_metadata(&folder) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(&folder),
            Ok(_) => std::fs::remove_file(&folder),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        };
        match gone_now {
            Ok(()) => {
                removed += 1;
                state.skills.remove(&uri);
                save_state(&state_path, &state)?;
                writeln!(
                    std::io::stdout().lock(),
                    "removed {} ({} is gone from the server)",
                    clean(&synced.folder),
                    clean(&uri)
                )?;
            }
            Err(e) => {
                eprintln!("error: cannot remove {}: {e}", folder.display());
                failed.push(uri);
            }
        }
    }
    save_state(&state_path, &state)?;
    writeln!(
        std::io::stdout().lock(),
        "{}: {installed} installed, {updated} updated, {unchanged} unchanged, {removed} removed, {kept} kept, {} failed",
        dir.display(),
        failed.len()
    )?;
    if !failed.is_empty() {
        bail!(
            "{} skill(s) not synced: {}",
            failed.len(),
            failed
                .iter()
                .map(|u| clean(u))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(())
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

    fn listed(uri: &str, name: &str) -> Skill {
        Skill::new(
            uri,
            rmcp::model::SkillFrontmatter::new(name, "d"),
            SkillResources::Files(vec![rmcp::model::SkillResource::from_bytes(uri, b"x")]),
        )
    }

    #[test]
    fn a_skill_is_picked_by_name_path_or_folder_uri_and_an_ambiguous_name_lists_its_candidates() {
        let all = [
            listed("skill://acme/review/SKILL.md", "review"),
            listed("skill://ops/review/SKILL.md", "review"),
            listed("skill://acme/pdf/SKILL.md", "pdf"),
            listed("skill://tools/deep/lint/SKILL.md", "lint"),
        ];
        for (asked, want) in [
            ("pdf", "skill://acme/pdf/SKILL.md"),
            ("acme/pdf", "skill://acme/pdf/SKILL.md"),
            ("skill://acme/pdf", "skill://acme/pdf/SKILL.md"),
            ("skill://acme/pdf/", "skill://acme/pdf/SKILL.md"),
            ("acme/review", "skill://acme/review/SKILL.md"),
            ("skill://ops/review", "skill://ops/review/SKILL.md"),
            ("lint", "skill://tools/deep/lint/SKILL.md"),
            ("deep/lint", "skill://tools/deep/lint/SKILL.md"),
        ] {
            assert_eq!(pick(asked, &all).unwrap(), want, "{asked}");
        }
        let e = pick("review", &all).unwrap_err();
        let text = format!("{e:#}");
        assert!(
            text.contains(
                "review names 2 skills: skill://acme/review/SKILL.md, skill://ops/review/SKILL.md"
            ),
            "{text}"
        );
        assert_eq!(super::super::exit_code(&e), 2);
        // `skill://` names a path from the top: `skill://review` is no skill's.
        for none in ["nope", "skill://review", "cme/pdf", "skill://deep/lint", ""] {
            let e = pick(none, &all).unwrap_err();
            assert_eq!(super::super::exit_code(&e), 2, "{none}");
        }
        let e = format!("{:#}", pick("nope", &all).unwrap_err());
        assert!(
            e.contains("no skill of this server is named nope (it lists 4: "),
            "{e}"
        );
    }

    #[test]
    fn modes_come_only_from_the_entry_for_its_files_and_are_installed_safely() {
        let uri = "skill://a/x/SKILL.md";
        let files = vec![
            rmcp::model::SkillResource::from_bytes(uri, b"m"),
            rmcp::model::SkillResource::from_bytes("skill://a/x/run.sh", b"s"),
        ];
        let with = |meta: Value| {
            let mut m = rmcp::model::MetaObject::new();
            m.0.insert(mcpr_server::skills::MODE_META.into(), meta);
            Skill::new(
                uri,
                rmcp::model::SkillFrontmatter::new("x", "d"),
                SkillResources::Files(files.clone()),
            )
            .with_meta(m)
        };
        let ok = with(json!({"skill://a/x/run.sh": 0o4755, uri: 0o644}));
        let modes = modes_of(&ok, &files).unwrap();
        assert_eq!(modes["skill://a/x/run.sh"], 0o4755);
        for bad in [
            json!({"skill://a/x/other.sh": 0o755}),
            json!({"skill://a/x/run.sh": "755"}),
            json!({"skill://a/x/run.sh": 0o17777}),
            json!({"skill://a/x/run.sh": -1}),
            json!([0o755]),
        ] {
            let e = modes_of(&with(bad.clone()), &files)
                .unwrap_err()
                .to_string();
            assert!(e.contains("file modes"), "{bad}: {e}");
        }
        assert_eq!(safe_mode(0o4755), 0o755);
        assert_eq!(safe_mode(0o7777), 0o755);
        assert_eq!(safe_mode(0o644), 0o644);
        assert_eq!(safe_mode(0o400), 0o600);
        assert_eq!(safe_mode(0o666), 0o644);
        // The fingerprint changes with a mode, not only with bytes.
        let other = with(json!({"skill://a/x/run.sh": 0o644}));
        assert_ne!(fingerprint(&ok), fingerprint(&other));
        assert_eq!(fingerprint(&ok), fingerprint(&ok.clone()));
    }

    #[test]
    fn the_files_a_skill_md_names_are_found_and_checked_against_the_manifest() {
        let text = "---\nname: x\ndescription: d\n---\n\
            Run `scripts/setup.sh` first, then ./scripts/check.py.\n\
            See [the guide](reference/guide.md#top), ![logo](<img/logo one.png> \"Logo\").\n\
            Read [the spec](https://example.com/spec.md), [mail](mailto:a@b.c), [up](../other/x.md),\n\
            [top](#usage), [abs](/etc/passwd), and example.com/page.html.\n\
            The [templates](templates/) folder, `config/.env.example`, and [enc](ref/My%20Notes.md).\n";
        let named = named_paths(text);
        assert_eq!(
            named,
            [
                "reference/guide.md",
                "img/logo one.png",
                "templates",
                "ref/My Notes.md",
                "scripts/setup.sh",
                "scripts/check.py",
                "config/.env.example",
            ],
            "{named:?}"
        );
        let have: Vec<String> = [
            "SKILL.md",
            "scripts/setup.sh",
            "reference/guide.md",
            "templates/a.txt",
            "ref/My Notes.md",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            missing_paths(named, &have),
            [
                "img/logo one.png",
                "scripts/check.py",
                "config/.env.example"
            ]
        );
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
