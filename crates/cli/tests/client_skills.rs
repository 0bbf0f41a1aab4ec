//! `skills` and `skills pull` (the Skills extension, SEP-2640): against our own built server
//! with a files mount carrying skills, over stdio and loopback HTTP in both eras, and against
//! a lying server (a small stdio server in Python's standard library) whose manifest does not
//! match its bytes or names paths outside the skill's folder.

mod client_common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use client_common::{absent, bin, client_stdio, our_http_server, run, workspace};
use serde_json::Value;

/// A files mount whose `team-skills` folder holds two skills, `alpha` with a nested text file
/// and a binary one, and `beta`; served as `skill://acme/...`.
struct Skills {
    _dir: tempfile::TempDir,
    base: PathBuf,
    source: PathBuf,
    config: PathBuf,
}

impl Skills {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let root = base.join("docs");
        let source = root.join("team-skills");
        for name in ["alpha", "beta"] {
            let d = source.join(name);
            std::fs::create_dir_all(d.join("ref")).unwrap();
            std::fs::write(
                d.join("SKILL.md"),
                format!("---\nname: {name}\ndescription: Does {name}\n---\nUse it.\n"),
            )
            .unwrap();
            std::fs::write(d.join("ref/notes.txt"), format!("{name} notes\n")).unwrap();
        }
        let binary: Vec<u8> = (0..=255u8).cycle().take(5000).collect();
        std::fs::write(source.join("alpha/ref/data.bin"), binary).unwrap();
        let config = base.join("skills.toml");
        std::fs::write(
            &config,
            format!(
                "[server]\npage_size = 1\n[[mount]]\nkind = \"files\"\nroot = \"{}\"\nskills = \"team-skills\"\nskills_prefix = \"acme\"\n",
                root.display()
            ),
        )
        .unwrap();
        Self {
            _dir: dir,
            base,
            source,
            config,
        }
    }

    fn serve(&self) -> [String; 5] {
        [
            "serve".into(),
            "--log-level".into(),
            "warn".into(),
            "--config".into(),
            self.config.display().to_string(),
        ]
    }

    fn stdio(&self, args: &[&str]) -> Command {
        let serve = self.serve();
        let serve: Vec<&str> = serve.iter().map(String::as_str).collect();
        client_stdio(args, &serve)
    }
}

/// Every file under `dir`, relative, with its bytes.
fn tree(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((
                    p.strip_prefix(dir).unwrap().to_owned(),
                    std::fs::read(&p).unwrap(),
                ));
            }
        }
    }
    out.sort();
    out
}

/// `skills`, `skills --json` and `skills pull` (fresh, refused over an existing folder, then
/// `--force`) through one way of reaching the server; `client` builds the command.
fn list_and_pull(s: &Skills, what: &str, client: &dyn Fn(&[&str]) -> Command) {
    let table = run(client(&["skills"])).ok();
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{what}: {table}");
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("FILES"),
        "{what}: {table}"
    );
    assert!(
        lines[1].starts_with("alpha") && lines[1].contains("skill://acme/alpha/SKILL.md"),
        "{what}: {table}"
    );
    assert!(
        lines[1].contains(" 3 (") && lines[1].ends_with("Does alpha"),
        "{what}: {table}"
    );

    // --json: every page (page_size = 1), each skill as sent, parsed back.
    let json = run(client(&["skills", "--json"])).ok();
    let skills: Vec<Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{what}: {e}: {l}")))
        .collect();
    let uris: Vec<&str> = skills.iter().map(|v| v["uri"].as_str().unwrap()).collect();
    assert_eq!(
        uris,
        ["skill://acme/alpha/SKILL.md", "skill://acme/beta/SKILL.md"],
        "{what}"
    );
    assert_eq!(skills[0]["frontmatter"]["name"], "alpha");
    assert_eq!(
        skills[0]["resources"].as_array().unwrap().len(),
        3,
        "{what}"
    );

    let out_dir = tempfile::tempdir().unwrap();
    let into = out_dir.path().join("agent-skills");
    let into_s = into.to_str().unwrap();
    let uri = "skill://acme/alpha/SKILL.md";
    let out = run(client(&["skills", "pull", uri, into_s])).ok();
    assert!(out.starts_with("alpha (3 files) -> "), "{what}: {out}");
    assert_eq!(
        tree(&into.join("alpha")),
        tree(&s.source.join("alpha")),
        "{what}"
    );
    // Only the skill's folder: no temporary folder left beside it.
    let names: Vec<_> = std::fs::read_dir(&into)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["alpha"], "{what}");

    // An existing folder is never replaced without --force, and is left as it was.
    std::fs::write(into.join("alpha/local-edit.txt"), "mine").unwrap();
    let out = run(client(&["skills", "pull", uri, into_s]));
    assert_eq!(out.code, Some(1), "{what}: {out:?}");
    assert!(
        out.stderr.contains("exists already; --force replaces it"),
        "{what}: {out:?}"
    );
    assert!(into.join("alpha/local-edit.txt").exists(), "{what}");
    run(client(&["skills", "pull", "--force", uri, into_s])).ok();
    assert_eq!(
        tree(&into.join("alpha")),
        tree(&s.source.join("alpha")),
        "{what}"
    );
    let names: Vec<_> = std::fs::read_dir(&into)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["alpha"], "{what}");

    // A URI that is no skill: the server's error, nothing written.
    let out = run(client(&[
        "skills",
        "pull",
        "skill://acme/nope/SKILL.md",
        into_s,
    ]));
    assert_eq!(out.code, Some(4), "{what}: {out:?}");
    assert!(out.stderr.contains("-32602"), "{what}: {out:?}");
    assert!(!into.join("nope").exists(), "{what}");
}

#[test]
fn skills_list_and_pull_from_our_server_over_stdio_in_both_eras() {
    let s = Skills::new();
    for protocol in ["legacy", "2026-07-28"] {
        let client = |args: &[&str]| {
            let mut a = args.to_vec();
            a.extend(["--protocol", protocol]);
            s.stdio(&a)
        };
        list_and_pull(&s, &format!("stdio {protocol}"), &client);
    }
}

#[test]
fn skills_list_and_pull_from_our_server_over_http_in_both_eras() {
    let s = Skills::new();
    let serve = s.serve();
    let serve: Vec<&str> = serve.iter().map(String::as_str).collect();
    let (_server, url) = our_http_server(&serve);
    for protocol in ["legacy", "2026-07-28"] {
        let client = |args: &[&str]| {
            let mut cmd = Command::new(bin());
            cmd.args(args).args(["--protocol", protocol, "--url", &url]);
            cmd
        };
        list_and_pull(&s, &format!("http {protocol}"), &client);
    }
    // --server NAME from a servers file reaches the same server.
    let servers = s.base.join("servers.json");
    std::fs::write(
        &servers,
        format!(r#"{{"mcpServers": {{"team": {{"url": "{url}"}}}}}}"#),
    )
    .unwrap();
    let out = run({
        let mut cmd = Command::new(bin());
        cmd.args(["skills", "--server", "team", "--servers"])
            .arg(&servers);
        cmd
    })
    .ok();
    assert!(out.contains("skill://acme/beta/SKILL.md"), "{out}");
}

#[test]
fn a_server_without_skills_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    let out = run(client_stdio(
        &["skills"],
        &["serve", "--log-level", "warn", root],
    ));
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr.contains("this server offers no skills"),
        "{out:?}"
    );
}

/// A mount whose skills folder does not exist: the server declares skills and lists none,
/// and `skills` says so on stderr, pointing at `check-config --connect`, instead of an
/// empty table alone.
#[test]
fn a_server_that_lists_no_skills_is_warned_of() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("skills.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[mount]]\nkind = \"files\"\nroot = {:?}\nskills = \"nope\"\n",
            dir.path().to_str().unwrap()
        ),
    )
    .unwrap();
    let out = run(client_stdio(
        &["skills"],
        &[
            "serve",
            "--log-level",
            "error",
            "--config",
            cfg.to_str().unwrap(),
        ],
    ));
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stderr
            .contains("warning: the server declares skills but lists none")
            && out.stderr.contains("check-config --connect"),
        "{out:?}"
    );
}

/// A stdio MCP server in plain Python that serves one skill, `lying`, with two files; argv[1]
/// picks how its manifest lies: `digest` (the second file's digest is not its bytes'), `size`,
/// `escape` (a file URI with `..`), `absolute` (an empty segment: `//etc/x`), `backslash`,
/// `outside` (another skill's folder), `toobig` (a size past the spec's 16 MiB), `huge` (the
/// second file read is 8 MiB, not the 15 bytes announced), `stall` (the second file's read
/// never answers), `fullwidth` (the skill `skill://team/evil/` named `ｅｖｉｌ`), `mixed`
/// (named `еvil`, its `е` Cyrillic), `setuid` (the data file's mode `0o6777`),
/// `strange-mode` (a mode for a file the manifest lacks), or `honest`.
const LYING: &str = r#"
import sys, json, hashlib, base64, time
mode = sys.argv[1]
name = {"fullwidth": "\uff45\uff56\uff49\uff4c", "mixed": "\u0435vil"}.get(mode, "lying")
segment = {"fullwidth": "evil", "mixed": "%D0%B5vil"}.get(mode, "lying")
root = "skill://team/" + segment + "/"
files = {root + "SKILL.md": ("---\nname: " + name + "\ndescription: Lies\n---\nbody\n").encode(),
         root + "ref/data.txt": b"the real bytes\n"}
def entry(uri, data):
    return {"uri": uri, "digest": "sha256:" + hashlib.sha256(data).hexdigest(), "size": len(data)}
manifest = [entry(u, d) for u, d in files.items()]
if mode == "digest":
    manifest[1]["digest"] = "sha256:" + hashlib.sha256(b"other bytes").hexdigest()
elif mode == "size":
    manifest[1]["size"] += 1
elif mode == "escape":
    manifest[1]["uri"] = root + "ref/../../../escaped.txt"
elif mode == "absolute":
    manifest[1]["uri"] = root + "/etc/escaped.txt"
elif mode == "backslash":
    manifest[1]["uri"] = root + "..\\escaped.txt"
elif mode == "toobig":
    manifest[1]["size"] = 17 * 1024 * 1024
elif mode == "outside":
    manifest[1]["uri"] = "skill://team/other/escaped.txt"
skill = {"uri": root + "SKILL.md", "frontmatter": {"name": name, "description": "Lies"},
         "resources": manifest}
if mode == "setuid":
    skill["_meta"] = {"io.github.mcp-resources/mode": {root + "ref/data.txt": 0o6777}}
elif mode == "strange-mode":
    skill["_meta"] = {"io.github.mcp-resources/mode": {root + "ref/other.txt": 0o755}}
caps = {"extensions": {"io.modelcontextprotocol/skills": {}}}
info = {"name": "lying", "version": "1"}
def answer(msg):
    method, params = msg["method"], msg.get("params", {})
    if method == "initialize":
        result = {"protocolVersion": params["protocolVersion"], "capabilities": caps, "serverInfo": info}
    elif method == "server/discover":
        result = {"supportedVersions": ["2026-07-28"], "capabilities": caps, "serverInfo": info}
    elif method == "skills/get":
        result = {"skill": skill}
    elif method == "resources/read":
        data = files.get(params["uri"], b"x")
        if params["uri"].endswith("data.txt") and mode == "huge":
            data = b"x" * (8 << 20)
        if params["uri"].endswith("data.txt") and mode == "stall":
            time.sleep(30)
        result = {"contents": [{"uri": params["uri"], "blob": base64.b64encode(data).decode()}]}
    else:
        return {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "no"}}
    return {"jsonrpc": "2.0", "id": msg["id"], "result": result}
if sys.argv[2:] == ["http"]:
    # The same server over Streamable HTTP: one JSON answer per POST, its address on stdout.
    from http.server import HTTPServer, BaseHTTPRequestHandler
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            msg = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if "id" not in msg:
                self.send_response(202)
                self.end_headers()
                return
            body = json.dumps(answer(msg)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except OSError:
                pass
        def log_message(self, *args):
            pass
    server = HTTPServer(("127.0.0.1", 0), Handler)
    print("http://127.0.0.1:%d/mcp" % server.server_address[1], flush=True)
    server.serve_forever()
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    print(json.dumps(answer(msg)), flush=True)
"#;

/// A Python 3 to run [`LYING`] with (it needs the standard library only): the venv's that
/// `cargo xtask test` sets up, else `python3` on the PATH.
fn python() -> Option<PathBuf> {
    let venv = workspace().join(".cache/venv/bin/python");
    [venv, PathBuf::from("python3")]
        .into_iter()
        .find(|p| Command::new(p).arg("--version").output().is_ok())
        .or_else(|| absent("Python 3", "neither .cache/venv nor python3 on the PATH"))
}

/// [`LYING`] written into `dir`, and the command of `skills pull URI INTO` against it in
/// `mode` over `protocol`.
struct Lying {
    python: PathBuf,
    script: PathBuf,
}

impl Lying {
    fn new(dir: &Path) -> Option<Self> {
        let python = python()?;
        let script = dir.join("lying.py");
        std::fs::write(&script, LYING).unwrap();
        Some(Self { python, script })
    }

    fn pull(&self, uri: &str, into: &Path, mode: &str, protocol: &str, force: bool) -> Command {
        let mut cmd = Command::new(bin());
        cmd.args(["skills", "pull", uri])
            .arg(into)
            .args(["--protocol", protocol]);
        if force {
            cmd.arg("--force");
        }
        cmd.arg("--").arg(&self.python).arg(&self.script).arg(mode);
        cmd
    }
}

#[test]
fn a_manifest_that_lies_or_escapes_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let Some(lying) = Lying::new(dir.path()) else {
        return;
    };
    let into = dir.path().join("agent-skills");
    std::fs::create_dir(&into).unwrap();
    std::fs::write(into.join("kept.txt"), "mine").unwrap();
    let before = tree(&into);
    let pull = |mode: &str, protocol: &str, force: bool| {
        run(lying.pull("skill://team/lying/SKILL.md", &into, mode, protocol, force))
    };
    for protocol in ["legacy", "2026-07-28"] {
        for (mode, says) in [
            ("digest", "ref/data.txt does not match the manifest: "),
            ("size", "ref/data.txt does not match the manifest: "),
            (
                "escape",
                "would be written outside the skill's folder (a `.` or `..` segment)",
            ),
            (
                "absolute",
                "would be written outside the skill's folder (an empty path segment or an absolute path)",
            ),
            (
                "backslash",
                "would be written outside the skill's folder (a slash, backslash",
            ),
            (
                "outside",
                "would be written outside the skill's folder (its URI is not under",
            ),
        ] {
            let out = pull(mode, protocol, false);
            assert_eq!(out.code, Some(1), "{mode} {protocol}: {out:?}");
            assert!(out.stderr.contains(says), "{mode} {protocol}: {out:?}");
            assert_eq!(tree(&into), before, "{mode} {protocol}: DIR untouched");
            let entries: BTreeSet<_> = std::fs::read_dir(&into)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(entries.len(), 1, "{mode} {protocol}: {entries:?}");
            assert!(!dir.path().join("escaped.txt").exists());
        }
        // The digest names the file and both digests.
        let out = pull("digest", protocol, false);
        assert!(out.stderr.contains("the manifest says sha256:"), "{out:?}");
    }
    // The honest manifest installs; a lying one with --force leaves the installed copy alone.
    pull("honest", "2026-07-28", false).ok();
    let installed = tree(&into.join("lying"));
    assert_eq!(installed.len(), 2);
    let out = pull("digest", "2026-07-28", true);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert_eq!(tree(&into.join("lying")), installed);
    let entries = std::fs::read_dir(&into).unwrap().count();
    assert_eq!(entries, 2, "kept.txt and lying/, no temporary folder");
}

/// An answer larger than its manifest entry announced is cut off while it is read: past the
/// entry's size with room for its encoding (here 15 bytes: 15 × 6 + 64 KiB), not at
/// `--max-message-mib` (512 MiB), so a 10-byte entry cannot make the pull hold hundreds of
/// MiB. Nothing is written.
#[test]
fn an_answer_past_its_manifest_size_is_cut_off_while_read() {
    let dir = tempfile::tempdir().unwrap();
    let Some(lying) = Lying::new(dir.path()) else {
        return;
    };
    let into = dir.path().join("agent-skills");
    std::fs::create_dir(&into).unwrap();
    for protocol in ["legacy", "2026-07-28"] {
        let out = run(lying.pull(
            "skill://team/lying/SKILL.md",
            &into,
            "huge",
            protocol,
            false,
        ));
        assert_eq!(out.code, Some(1), "{protocol}: {out:?}");
        let bound = 15 * 6 + 64 * 1024;
        assert!(
            out.stderr.contains(&format!(
                "ref/data.txt (skill://team/lying/ref/data.txt) is larger than the manifest says: its answer passed {bound} bytes, more than 15 bytes of file can take even encoded; stopped reading"
            )),
            "{protocol}: {out:?}"
        );
        assert_eq!(std::fs::read_dir(&into).unwrap().count(), 0, "{protocol}");
    }
    // Over HTTP the same bound holds on the answer's body.
    let mut server = std::process::Command::new(&lying.python)
        .arg(&lying.script)
        .args(["huge", "http"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut url = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(server.stdout.take().unwrap()),
        &mut url,
    )
    .unwrap();
    let server = client_common::Guard(server);
    for protocol in ["legacy", "2026-07-28"] {
        let mut cmd = Command::new(bin());
        cmd.args(["skills", "pull", "skill://team/lying/SKILL.md"])
            .arg(&into)
            .args(["--protocol", protocol, "--url", url.trim()]);
        let out = run(cmd);
        assert_eq!(out.code, Some(1), "http {protocol}: {out:?}");
        assert!(
            out.stderr
                .contains("is larger than the manifest says: its answer passed 65626 bytes"),
            "http {protocol}: {out:?}"
        );
        assert_eq!(std::fs::read_dir(&into).unwrap().count(), 0, "{protocol}");
    }
    drop(server);
}

/// The folder a skill is written to is the NFKC form of its name, the one its URI names
/// (`ｅｖｉｌ` for `skill://team/evil/` is written `evil/`); a name mixing scripts (a
/// Cyrillic `е` in `еvil`) is refused, naming the scripts, and nothing is written.
#[test]
fn a_skill_is_written_under_its_nfkc_name_and_mixed_scripts_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let Some(lying) = Lying::new(dir.path()) else {
        return;
    };
    let into = dir.path().join("agent-skills");
    std::fs::create_dir(&into).unwrap();
    let out = run(lying.pull(
        "skill://team/evil/SKILL.md",
        &into,
        "fullwidth",
        "2026-07-28",
        false,
    ));
    assert_eq!(out.code, Some(0), "{out:?}");
    let names: Vec<String> = std::fs::read_dir(&into)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["evil"], "{out:?}");
    assert!(
        std::fs::read_to_string(into.join("evil/SKILL.md"))
            .unwrap()
            .contains("name: \u{ff45}\u{ff56}\u{ff49}\u{ff4c}")
    );
    let out = run(lying.pull(
        "skill://team/%D0%B5vil/SKILL.md",
        &into,
        "mixed",
        "2026-07-28",
        false,
    ));
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr
            .contains("mixes scripts (Cyrillic, Latin); it could pass for another skill's name"),
        "{out:?}"
    );
    assert_eq!(std::fs::read_dir(&into).unwrap().count(), 1, "{out:?}");
}

/// A pull killed mid-way leaves its `.NAME.pull-PID-….partial` folder; the next pull into
/// the same folder removes it, and nothing else: not a live pull's (this test's own process
/// id), not a file or a folder named otherwise.
#[test]
fn a_killed_pulls_partial_folder_is_removed_by_the_next_pull() {
    let dir = tempfile::tempdir().unwrap();
    let Some(lying) = Lying::new(dir.path()) else {
        return;
    };
    let into = dir.path().join("agent-skills");
    std::fs::create_dir(&into).unwrap();
    let live = format!(".other.pull-{}-1f.partial", std::process::id());
    let kept = [
        live.as_str(),
        ".other.pull-x.partial",
        "lying.pull-1-1.partial",
    ];
    for name in kept {
        std::fs::create_dir(into.join(name)).unwrap();
        std::fs::write(into.join(name).join("f"), "keep").unwrap();
    }
    std::fs::write(into.join(".file.pull-1-1.partial"), "keep").unwrap();

    let mut cmd = lying.pull(
        "skill://team/lying/SKILL.md",
        &into,
        "stall",
        "2026-07-28",
        false,
    );
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = cmd.spawn().unwrap();
    // SKILL.md is read first; the pull then waits on ref/data.txt, which never comes.
    let partial = |into: &Path| {
        std::fs::read_dir(into)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                let n = p.file_name().unwrap().to_string_lossy();
                n.starts_with(".lying.pull-") && p.join("lying/SKILL.md").exists()
            })
    };
    let started = std::time::Instant::now();
    let left = loop {
        if let Some(p) = partial(&into) {
            break p;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(15),
            "the pull never wrote SKILL.md"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(left.exists(), "a killed pull leaves its folder");

    run(lying.pull(
        "skill://team/lying/SKILL.md",
        &into,
        "honest",
        "2026-07-28",
        false,
    ))
    .ok();
    assert!(!left.exists(), "the killed pull's folder is still there");
    assert_eq!(tree(&into.join("lying")).len(), 2);
    for name in kept {
        assert_eq!(
            std::fs::read_to_string(into.join(name).join("f")).unwrap(),
            "keep",
            "{name}"
        );
    }
    assert!(into.join(".file.pull-1-1.partial").is_file());
}

/// `dir` lists a directory's direct children with `resources/directory/read`, following every
/// cursor (the server's pages hold one item each here): a skill's folder by its skill URI and
/// the same folder by its file URI, as a table or as the objects the server sent; a URI that
/// is no directory gets the server's error (exit 4, a JSON-RPC error).
#[test]
fn dir_lists_every_page_of_a_directory() {
    let s = Skills::new();
    let table = run(s.stdio(&["dir", "skill://acme/alpha/"])).ok();
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(
        lines[0].starts_with("URI") && lines[0].contains("MIME TYPE"),
        "{table}"
    );
    assert!(
        lines[1..]
            .iter()
            .any(|l| l.starts_with("skill://acme/alpha/SKILL.md ")),
        "{table}"
    );
    assert!(
        lines[1..]
            .iter()
            .any(|l| l.starts_with("skill://acme/alpha/ref ") && l.contains("inode/directory")),
        "{table}"
    );

    let folder = format!("file://{}/alpha/ref", s.source.display());
    let out = run(s.stdio(&["dir", "--json", &folder])).ok();
    let uris: BTreeSet<String> = out
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["uri"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(
        uris,
        BTreeSet::from([format!("{folder}/data.bin"), format!("{folder}/notes.txt")])
    );

    let out = run(s.stdio(&["dir", &format!("{folder}/notes.txt")]));
    assert_eq!(out.code, Some(4), "{out:?}");
    assert!(out.stderr.starts_with("error: "), "{out:?}");
}

/// `git` in `dir`, with a fixed identity; panics when it fails.
fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@e",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run git");
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

/// The permission bits of `path`.
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// A skill whose folder holds what a files mount does not serve (a key the deny list names,
/// dot-files), an executable script, and a `SKILL.md` naming files its manifest lacks.
const TOOL_MD: &str = "---\nname: tool\ndescription: Runs the tool\n---\n\
Run `scripts/run.sh` with [the CA](certs/ca.pem), [the env](.env.example) and\n\
[settings](.config); the notes are in ref/notes.txt and ref/missing.txt.\n";

fn tool_skill(folder: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir_all(folder.join("scripts")).unwrap();
    std::fs::create_dir_all(folder.join("certs")).unwrap();
    std::fs::create_dir_all(folder.join("ref")).unwrap();
    std::fs::write(folder.join("SKILL.md"), TOOL_MD).unwrap();
    std::fs::write(folder.join("scripts/run.sh"), "#!/bin/sh\necho run\n").unwrap();
    std::fs::set_permissions(
        folder.join("scripts/run.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::write(folder.join("ref/notes.txt"), "notes\n").unwrap();
    std::fs::set_permissions(
        folder.join("ref/notes.txt"),
        std::fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    std::fs::write(folder.join("certs/ca.pem"), "-----BEGIN CERTIFICATE-----\n").unwrap();
    std::fs::write(folder.join(".env.example"), "TOKEN=\n").unwrap();
    std::fs::write(folder.join(".config"), "x = 1\n").unwrap();
}

/// The three files the files mount leaves out of `tool`, as a warning names them.
const LEFT_OUT: [&str; 3] = [".config", ".env.example", "certs/ca.pem"];

/// Issue #42 §2: the publishing side names each file of a skill's folder that the mount does
/// not serve (at `check-config --connect` and once at `serve`'s start); the manifest carries
/// file modes, which `skills pull` applies; and a pull warns of the files `SKILL.md` names
/// that the manifest lacks, still exiting 0.
#[test]
fn left_out_files_are_named_modes_travel_and_a_pull_says_what_skill_md_names_but_lacks() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    tool_skill(&base.join("team-skills/tool"));
    let config = base.join("skills.toml");
    std::fs::write(
        &config,
        format!(
            "[[mount]]\nkind = \"files\"\nroot = \"{}\"\nskills = \".\"\nskills_prefix = \"acme\"\n",
            base.join("team-skills").display()
        ),
    )
    .unwrap();
    let config_s = config.to_str().unwrap();

    // check-config --connect: one warning per left-out file, still a success.
    let mut cmd = Command::new(bin());
    cmd.args(["check-config", "--connect", config_s])
        .current_dir(&base);
    let checked = run(cmd).ok();
    for file in LEFT_OUT {
        let line =
            format!("warning: {file} is not published with skill skill://acme/tool/SKILL.md (");
        assert_eq!(checked.matches(&line).count(), 1, "{file}: {checked}");
    }
    assert!(
        checked.contains("the mount's deny list names it"),
        "{checked}"
    );
    assert!(checked.contains("a hidden (dot) file"), "{checked}");
    assert!(!checked.contains("ref/notes.txt is not"), "{checked}");

    // serve: the start-up walk warns once per file.
    let server = client_common::Lines::spawn({
        let mut cmd = Command::new(bin());
        cmd.args([
            "serve",
            "--log-level",
            "warn",
            "--config",
            config_s,
            "--http",
            "127.0.0.1:0",
        ])
        .current_dir(&base);
        cmd
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let log = loop {
        let log = server.stderr();
        if LEFT_OUT
            .iter()
            .all(|f| log.contains(&format!("{f} is in the skill's folder")))
        {
            break log;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no warnings at start: {log}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    for file in LEFT_OUT {
        assert_eq!(
            log.matches(&format!(
                "{file} is in the skill's folder but not in its manifest"
            ))
            .count(),
            1,
            "{file}: {log}"
        );
    }
    drop(server);

    // The manifest carries the modes; a pull by name applies them and warns of the files
    // SKILL.md names that the manifest lacks.
    let serve = ["serve", "--log-level", "error", "--config", config_s];
    let listed = run(client_stdio(&["skills", "--json"], &serve)).ok();
    let skill: Value = serde_json::from_str(listed.trim()).unwrap();
    let modes = &skill["_meta"]["io.github.mcp-resources/mode"];
    assert_eq!(modes["skill://acme/tool/scripts/run.sh"], 0o755, "{listed}");
    assert_eq!(modes["skill://acme/tool/ref/notes.txt"], 0o640, "{listed}");
    let into = base.join("agent");
    let out = run(client_stdio(
        &["skills", "pull", "tool", into.to_str().unwrap()],
        &serve,
    ));
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.text().starts_with("tool (3 files) -> "), "{out:?}");
    let installed = into.join("tool");
    assert_eq!(mode(&installed.join("scripts/run.sh")), 0o755);
    // 0o640 is installed as given (nobody else may write it, the owner may read and write).
    assert_eq!(mode(&installed.join("ref/notes.txt")), 0o640);
    assert!(!installed.join("certs").exists() && !installed.join(".config").exists());
    for missing in ["certs/ca.pem", ".env.example", ".config", "ref/missing.txt"] {
        let line =
            format!("warning: tool/SKILL.md names {missing}, which is not in the skill's manifest");
        assert_eq!(out.stderr.matches(&line).count(), 1, "{missing}: {out:?}");
    }
    for there in ["scripts/run.sh", "ref/notes.txt"] {
        assert!(
            !out.stderr.contains(&format!("names {there},")),
            "{there}: {out:?}"
        );
    }
    let ran = Command::new(installed.join("scripts/run.sh"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&ran.stdout), "run\n");
}

/// A git mount's manifest carries the mode git records: `100755` is installed executable.
#[test]
fn a_git_mounts_executable_file_is_pulled_executable() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let repo = base.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    tool_skill(&repo.join("skills/tool"));
    git(&repo, &["add", "-A", "-f"]);
    git(&repo, &["commit", "-q", "-m", "tool"]);
    let config = base.join("git.toml");
    std::fs::write(
        &config,
        format!(
            "[[mount]]\nkind = \"git\"\nrepo = \"{}\"\nskills = \"skills\"\n",
            repo.display()
        ),
    )
    .unwrap();
    let serve = [
        "serve",
        "--log-level",
        "error",
        "--config",
        config.to_str().unwrap(),
    ];
    let into = base.join("agent");
    let out = run(client_stdio(
        &["skills", "pull", "skill://tool", into.to_str().unwrap()],
        &serve,
    ));
    assert_eq!(out.code, Some(0), "{out:?}");
    let installed = into.join("tool");
    assert_eq!(mode(&installed.join("scripts/run.sh")), 0o755, "{out:?}");
    assert_eq!(mode(&installed.join("ref/notes.txt")), 0o644, "{out:?}");
    // git serves dot-files; its deny list still keeps the key and `.env.*` out, and the
    // pull says so.
    assert!(installed.join(".config").exists(), "{out:?}");
    for denied in ["certs/ca.pem", ".env.example"] {
        assert!(!installed.join(denied).exists(), "{denied}");
        assert!(
            out.stderr.contains(&format!(
                "warning: tool/SKILL.md names {denied}, which is not in"
            )),
            "{denied}: {out:?}"
        );
    }
    assert!(!out.stderr.contains("names .config,"), "{out:?}");
}

/// Two mounts each with a `review` skill: `pull review` is ambiguous (exit 2, both URIs
/// named); `PREFIX/NAME` and `skill://PREFIX/NAME` pick one; an unknown name is exit 2.
#[test]
fn pull_takes_a_name_a_path_or_a_folder_uri_and_an_ambiguous_name_lists_the_candidates() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let mut config = String::new();
    for team in ["acme", "ops"] {
        let skill = base.join(team).join("review");
        std::fs::create_dir_all(&skill).unwrap();
        std::fs::write(
            skill.join("SKILL.md"),
            format!("---\nname: review\ndescription: Review for {team}\n---\n"),
        )
        .unwrap();
        config.push_str(&format!(
            "[[mount]]\nkind = \"files\"\nroot = \"{}\"\nskills = \".\"\nskills_prefix = \"{team}\"\n",
            base.join(team).display()
        ));
    }
    let config_path = base.join("two.toml");
    std::fs::write(&config_path, config).unwrap();
    let serve = [
        "serve",
        "--log-level",
        "error",
        "--config",
        config_path.to_str().unwrap(),
    ];
    let into = base.join("agent");
    let into_s = into.to_str().unwrap();
    let out = run(client_stdio(&["skills", "pull", "review", into_s], &serve));
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(
        out.stderr.contains(
            "review names 2 skills: skill://acme/review/SKILL.md, skill://ops/review/SKILL.md"
        ),
        "{out:?}"
    );
    assert!(!into.join("review").exists());
    let out = run(client_stdio(&["skills", "pull", "nope", into_s], &serve));
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(
        out.stderr.contains("no skill of this server is named nope"),
        "{out:?}"
    );
    for (asked, team) in [
        ("ops/review", "ops"),
        ("skill://acme/review", "acme"),
        ("skill://ops/review/", "ops"),
        ("skill://acme/review/SKILL.md", "acme"),
    ] {
        run(client_stdio(
            &["skills", "pull", "--force", asked, into_s],
            &serve,
        ))
        .ok();
        let md = std::fs::read_to_string(into.join("review/SKILL.md")).unwrap();
        assert!(md.contains(&format!("Review for {team}")), "{asked}: {md}");
    }
}

/// Every top-level name in `dir`.
fn names(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// `skills pull --all` installs every skill and records them as a sync does, so a later sync
/// of its folder manages them; `skills sync` installs new ones, updates changed ones, leaves
/// unchanged ones untouched, keeps or (with `--prune`) removes gone ones, and never touches a
/// folder it did not write.
#[test]
fn pull_all_and_sync_roll_skills_out_and_touch_only_what_a_sync_wrote() {
    let s = Skills::new();
    let out_dir = tempfile::tempdir().unwrap();
    let all = out_dir.path().join("all");
    let all_s = all.to_str().unwrap();
    let out = run(s.stdio(&["skills", "pull", "--all", all_s])).ok();
    assert!(out.contains("2 of 2 skill(s) pulled"), "{out}");
    assert_eq!(tree(&all.join("alpha")), tree(&s.source.join("alpha")));
    assert_eq!(tree(&all.join("beta")), tree(&s.source.join("beta")));
    // The same state file a sync writes: the server, and each skill's folder and manifest.
    let pulled: Value = serde_json::from_str(
        &std::fs::read_to_string(all.join(".mcp-resources-skills.json")).unwrap(),
    )
    .unwrap();
    assert!(
        pulled["server"]
            .as_str()
            .unwrap()
            .starts_with("command:mcp-resources sha256:"),
        "{pulled}"
    );
    for name in ["alpha", "beta"] {
        let record = &pulled["skills"][format!("skill://acme/{name}/SKILL.md")];
        assert_eq!(record["folder"], name, "{pulled}");
        assert!(
            record["manifest"]
                .as_str()
                .is_some_and(|m| m.starts_with("sha256:")),
            "{pulled}"
        );
    }
    // So a sync of that folder takes the pulled skills as its own: unchanged, not refused.
    std::fs::create_dir(all.join("mine")).unwrap();
    let out = run(s.stdio(&["skills", "sync", all_s])).ok();
    assert!(
        out.contains("unchanged alpha")
            && out.contains("unchanged beta")
            && out.contains(": 0 installed, 0 updated, 2 unchanged, 0 removed, 0 kept, 0 failed"),
        "{out}"
    );

    let into = out_dir.path().join("synced");
    let into_s = into.to_str().unwrap();
    let sync = |extra: &[&str]| {
        let mut args = vec!["skills", "sync", into_s];
        args.extend(extra);
        run(s.stdio(&args))
    };
    let out = sync(&[]).ok();
    assert!(out.contains("installed alpha (3 files) -> "), "{out}");
    assert!(out.contains("installed beta (2 files) -> "), "{out}");
    assert!(
        out.contains(": 2 installed, 0 updated, 0 unchanged, 0 removed, 0 kept, 0 failed"),
        "{out}"
    );
    assert_eq!(
        names(&into),
        BTreeSet::from([
            "alpha".into(),
            "beta".into(),
            ".mcp-resources-skills.json".into()
        ])
    );
    let state: Value = serde_json::from_str(
        &std::fs::read_to_string(into.join(".mcp-resources-skills.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        state["skills"]["skill://acme/beta/SKILL.md"]["folder"], "beta",
        "{state}"
    );
    // The command line that started the server is kept as a digest (it may hold a secret).
    let server = state["server"].as_str().unwrap();
    assert!(
        server.starts_with("command:mcp-resources sha256:") && !server.contains("--config"),
        "{state}"
    );

    // Unchanged: not touched (a file of ours inside stays); changed: replaced whole.
    std::fs::write(into.join("beta/local.txt"), "mine").unwrap();
    std::fs::write(s.source.join("alpha/ref/notes.txt"), "alpha notes, v2\n").unwrap();
    let out = sync(&[]).ok();
    assert!(out.contains("updated alpha (3 files) -> "), "{out}");
    assert!(out.contains("unchanged beta"), "{out}");
    assert!(
        out.contains(": 0 installed, 1 updated, 1 unchanged,"),
        "{out}"
    );
    assert_eq!(tree(&into.join("alpha")), tree(&s.source.join("alpha")));
    assert!(into.join("beta/local.txt").exists());

    // A folder no sync wrote is never replaced: the new skill of that name fails, exit 1,
    // the others still synced.
    let gamma = s.source.join("gamma");
    std::fs::create_dir_all(&gamma).unwrap();
    std::fs::write(
        gamma.join("SKILL.md"),
        "---\nname: gamma\ndescription: G\n---\n",
    )
    .unwrap();
    std::fs::create_dir(into.join("gamma")).unwrap();
    std::fs::write(into.join("gamma/own.txt"), "not the server's").unwrap();
    std::fs::create_dir(into.join("mine")).unwrap();
    let out = sync(&[]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr
            .contains("gamma exists and no earlier sync wrote it"),
        "{out:?}"
    );
    assert!(
        out.text()
            .contains(": 0 installed, 0 updated, 2 unchanged, 0 removed, 0 kept, 1 failed"),
        "{out:?}"
    );
    assert_eq!(
        names(&into.join("gamma")),
        BTreeSet::from(["own.txt".into()])
    );
    std::fs::remove_dir_all(into.join("gamma")).unwrap();
    let out = sync(&[]).ok();
    assert!(out.contains("installed gamma (1 files) -> "), "{out}");

    // Gone from the server: kept without --prune, removed with it; `mine` never touched.
    std::fs::remove_dir_all(s.source.join("beta")).unwrap();
    let out = sync(&[]).ok();
    assert!(
        out.contains(
            "kept beta (skill://acme/beta/SKILL.md is gone from the server; --prune removes it)"
        ),
        "{out}"
    );
    assert!(into.join("beta").exists());
    let out = sync(&["--prune"]).ok();
    assert!(
        out.contains("removed beta (skill://acme/beta/SKILL.md is gone from the server)"),
        "{out}"
    );
    assert!(
        out.contains(": 0 installed, 0 updated, 2 unchanged, 1 removed, 0 kept, 0 failed"),
        "{out}"
    );
    assert_eq!(
        names(&into),
        BTreeSet::from([
            "alpha".into(),
            "gamma".into(),
            "mine".into(),
            ".mcp-resources-skills.json".into()
        ])
    );
    let state = std::fs::read_to_string(into.join(".mcp-resources-skills.json")).unwrap();
    assert!(!state.contains("beta"), "{state}");

    // Another server's sync into this folder is refused before anything is touched.
    let other = Skills::new();
    let out = run(other.stdio(&["skills", "sync", into_s, "--prune"]));
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("was synced from command:"), "{out:?}");
    assert!(into.join("alpha").exists() && into.join("mine").exists());
    // And its `pull --all` too, which would mix two servers' skills in one record.
    let out = run(other.stdio(&["skills", "pull", "--all", into_s, "--force"]));
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("was synced from command:"), "{out:?}");
    assert_eq!(tree(&into.join("alpha")), tree(&s.source.join("alpha")));

    // The folder `pull --all` filled, synced now that alpha changed, gamma came and beta
    // went: each pulled folder updated or pruned like a synced one; `mine` never touched.
    let out = run(s.stdio(&["skills", "sync", all_s, "--prune"])).ok();
    assert!(
        out.contains("updated alpha (3 files) -> ")
            && out.contains("installed gamma (1 files) -> ")
            && out.contains("removed beta (skill://acme/beta/SKILL.md is gone from the server)")
            && out.contains(": 1 installed, 1 updated, 0 unchanged, 1 removed, 0 kept, 0 failed"),
        "{out}"
    );
    assert_eq!(tree(&all.join("alpha")), tree(&s.source.join("alpha")));
    assert_eq!(
        names(&all),
        BTreeSet::from([
            "alpha".into(),
            "gamma".into(),
            "mine".into(),
            ".mcp-resources-skills.json".into()
        ])
    );
}

/// A mode is installed only as safe bits (never setuid, setgid or sticky, nobody else may
/// write), and a mode for a file the manifest does not have is refused with nothing written.
#[test]
fn modes_from_a_server_are_made_safe_and_one_for_a_file_not_in_the_manifest_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let Some(lying) = Lying::new(dir.path()) else {
        return;
    };
    let into = dir.path().join("agent-skills");
    let out = run(lying.pull(
        "skill://team/lying/SKILL.md",
        &into,
        "strange-mode",
        "legacy",
        false,
    ));
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr
            .contains("name skill://team/lying/ref/other.txt, which is not a file of its manifest"),
        "{out:?}"
    );
    assert!(!into.join("lying").exists());
    run(lying.pull(
        "skill://team/lying/SKILL.md",
        &into,
        "setuid",
        "legacy",
        false,
    ))
    .ok();
    assert_eq!(mode(&into.join("lying/ref/data.txt")), 0o755);
}
