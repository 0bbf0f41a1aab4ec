//! Servers from the config files people already have (`--server NAME`, `servers`): Claude
//! Desktop's `claude_desktop_config.json`, VS Code's `.vscode/mcp.json`, user `mcp.json` and
//! user `settings.json` (under `mcp.servers`), Cursor's `~/.cursor/mcp.json` and
//! `.cursor/mcp.json`, and a file given with `--servers`. Each holds a map of servers
//! (`mcpServers`, or `servers` for VS Code) whose entries have a `command`, `args` and `env`
//! (stdio) or a `url` and `headers` (HTTP). The files are JSONC, as the hosts write them
//! (comments, trailing commas); VS Code's and Cursor's `${…}` variables are expanded when an
//! entry is used, as the host would, `${input:ID}` from the environment since nothing here
//! can prompt.
//!
//! The project files (`.vscode/mcp.json`, `.cursor/mcp.json` in the working directory) come
//! with whatever was cloned: an entry there can run any command, and its `${env:…}` can send
//! the user's secrets to an address the project chose. So, as VS Code's workspace trust does,
//! they are used (and expanded) only for a trusted folder (`--trust-workspace`, or the
//! folder listed in the user's trust list, [`trust_list`]), and a user's own entry of the
//! same name always wins over a project's.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use serde_json::Value;

/// One server entry of a host's config file.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub name: String,
    /// Which host's file it came from.
    pub host: &'static str,
    pub file: PathBuf,
    /// Whether the file is a project's (in the working directory), not the user's own.
    pub workspace: bool,
    /// Program and arguments, for a stdio server.
    pub command: Vec<OsString>,
    /// Environment for the child, as the host would set it.
    pub env: Vec<(String, String)>,
    /// The endpoint, for an HTTP server.
    pub url: Option<String>,
    /// Headers for every request, as "Name: value".
    pub headers: Vec<String>,
    /// `"type": "sse"`: the URL is a 2024-11-05 HTTP+SSE event stream (VS Code and Cursor
    /// write it so), reached without trying Streamable HTTP first.
    pub sse: bool,
    /// The `${…}` variables of this file's host, expanded by [`Entry::expand`]; `None` for a
    /// host that takes every string literally.
    vars: Option<Vars>,
}

/// What a host's `${…}` variables can refer to.
#[derive(Debug, Clone, Default)]
struct Vars {
    /// `${input:ID}` is VS Code's: the `inputs` of the same file, as (id, description).
    inputs: Option<Vec<(String, String)>>,
}

/// The environment variable that gives the value of VS Code input `id`: `MCPR_INPUT_` and the
/// id in upper case, every character other than a letter or digit as `_` (`api-key` is
/// `MCPR_INPUT_API_KEY`).
pub(crate) fn input_env_name(id: &str) -> String {
    let id: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("MCPR_INPUT_{id}")
}

impl Vars {
    /// `text` with every `${…}` replaced: `${env:NAME}` (empty when unset, as VS Code does),
    /// `${workspaceFolder}` (the working directory: the folder `.vscode/` or `.cursor/` is
    /// looked for in), `${userHome}`, `${pathSeparator}`, and for VS Code `${input:ID}` from
    /// `MCPR_INPUT_<ID>`. Anything else is refused by name rather than passed on as written.
    fn expand(&self, text: &str, server: &str, file: &Path) -> anyhow::Result<String> {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let end = after.find('}').with_context(|| {
                format!(
                    "{}: server {server}: a `${{` without its closing `}}`",
                    file.display()
                )
            })?;
            let var = &after[..end];
            out.push_str(&self.value(var, server, file)?);
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }

    fn value(&self, var: &str, server: &str, file: &Path) -> anyhow::Result<String> {
        if let Some(name) = var.strip_prefix("env:") {
            return Ok(std::env::var(name).unwrap_or_default());
        }
        match var {
            "workspaceFolder" => {
                let cwd = std::env::current_dir()
                    .context("cannot read the working directory for ${workspaceFolder}")?;
                return Ok(cwd.display().to_string());
            }
            "workspaceFolderBasename" => {
                let cwd = std::env::current_dir()
                    .context("cannot read the working directory for ${workspaceFolderBasename}")?;
                return Ok(cwd
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default());
            }
            "userHome" => {
                return std::env::var("HOME").context("${userHome}: HOME is not set");
            }
            "pathSeparator" | "/" => return Ok(std::path::MAIN_SEPARATOR.to_string()),
            _ => {}
        }
        if let (Some(id), Some(inputs)) = (var.strip_prefix("input:"), &self.inputs) {
            let env = input_env_name(id);
            if let Ok(v) = std::env::var(&env) {
                return Ok(v);
            }
            let what = match inputs.iter().find(|(i, _)| i == id) {
                Some((_, d)) if !d.is_empty() => format!("the input {id:?} ({d})"),
                Some(_) => format!("the input {id:?}"),
                None => format!("the input {id:?}, which its `inputs` do not define,"),
            };
            bail!(
                "server {server} in {} needs {what}; VS Code would prompt for it, this client cannot: set the environment variable {env}",
                file.display()
            );
        }
        bail!(
            "server {server} in {}: ${{{var}}} is a variable this client does not expand (it knows env:NAME, workspaceFolder, workspaceFolderBasename, userHome, pathSeparator{})",
            file.display(),
            if self.inputs.is_some() {
                ", input:ID"
            } else {
                ""
            }
        )
    }
}

impl Entry {
    /// The entry as its host would run it: every `${…}` of its command, arguments,
    /// environment, URL and headers expanded. An entry of a host without variables is
    /// returned as it is.
    pub(crate) fn expand(mut self) -> anyhow::Result<Self> {
        let Some(vars) = self.vars.take() else {
            return Ok(self);
        };
        let (name, file) = (self.name.clone(), self.file.clone());
        let x = |t: &str| vars.expand(t, &name, &file);
        self.command = self
            .command
            .iter()
            .map(|a| match a.to_str() {
                Some(t) => x(t).map(OsString::from),
                None => Ok(a.clone()),
            })
            .collect::<anyhow::Result<_>>()?;
        self.env = self
            .env
            .iter()
            .map(|(k, v)| Ok((k.clone(), x(v)?)))
            .collect::<anyhow::Result<_>>()?;
        self.url = self.url.as_deref().map(x).transpose()?;
        self.headers = self
            .headers
            .iter()
            .map(|h| x(h))
            .collect::<anyhow::Result<_>>()?;
        Ok(self)
    }
}

/// The host name of VS Code's user `settings.json`, whose servers are under `mcp.servers`.
const VSCODE_SETTINGS: &str = "VS Code (settings)";

/// The files looked in, in order: the one given with `--servers`, then each host's user
/// file, then the project's files in the working directory (`workspace` true). A file that is
/// both (run from the home directory) is the user's.
fn files(explicit: Option<&Path>) -> Vec<(&'static str, PathBuf, bool)> {
    let mut out = Vec::new();
    if let Some(p) = explicit {
        out.push(("--servers", p.to_owned(), false));
    }
    if let Some(home) = std::env::var_os("HOME").map(PathBuf::from) {
        for (host, path) in [
            (
                "Claude Desktop",
                ".config/Claude/claude_desktop_config.json",
            ),
            (
                "Claude Desktop",
                "Library/Application Support/Claude/claude_desktop_config.json",
            ),
            ("VS Code (user)", ".config/Code/User/mcp.json"),
            (
                "VS Code (user)",
                "Library/Application Support/Code/User/mcp.json",
            ),
            (VSCODE_SETTINGS, ".config/Code/User/settings.json"),
            (
                VSCODE_SETTINGS,
                "Library/Application Support/Code/User/settings.json",
            ),
            ("Cursor", ".cursor/mcp.json"),
        ] {
            out.push((host, home.join(path), false));
        }
    }
    let cwd = std::env::current_dir().unwrap_or_default();
    out.push(("VS Code (workspace)", cwd.join(".vscode/mcp.json"), true));
    out.push(("Cursor (project)", cwd.join(".cursor/mcp.json"), true));
    // Run from the home directory, a project file and a user file are one file: read once,
    // as the user's.
    let mut seen = std::collections::HashSet::new();
    out.retain(|(_, p, _)| seen.insert(p.canonicalize().unwrap_or_else(|_| p.clone())));
    out
}

/// The user's list of trusted project folders: `mcp-resources/trusted-workspaces` in the
/// user's config folder (`$XDG_CONFIG_HOME`, else `~/.config`), one absolute folder a line,
/// `#` starting a comment line.
pub(crate) fn trust_list() -> Option<PathBuf> {
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(config.join("mcp-resources").join("trusted-workspaces"))
}

/// Whether the project in the working directory is trusted: `--trust-workspace` was given,
/// or the folder itself (not a parent of it) is a line of [`trust_list`].
pub(crate) fn workspace_trusted(flag: bool) -> bool {
    if flag {
        return true;
    }
    let (Some(list), Ok(cwd)) = (trust_list(), std::env::current_dir()) else {
        return false;
    };
    let Ok(cwd) = cwd.canonicalize() else {
        return false;
    };
    let Ok(text) = std::fs::read_to_string(&list) else {
        return false;
    };
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .any(|l| {
            let p = Path::new(l);
            p.is_absolute() && p.canonicalize().is_ok_and(|p| p == cwd)
        })
}

/// Every entry of every file that exists, and a note per file that could not be read.
pub(crate) fn load(explicit: Option<&Path>) -> anyhow::Result<(Vec<Entry>, Vec<String>)> {
    let mut entries = Vec::new();
    let mut notes = Vec::new();
    for (host, file, workspace) in files(explicit) {
        let text = match std::fs::read_to_string(&file) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && host != "--servers" => continue,
            Err(e) => {
                if host == "--servers" {
                    bail!("--servers {}: {e}", file.display());
                }
                notes.push(format!("{}: {e}", file.display()));
                continue;
            }
        };
        match parse(&text, host, &file) {
            Ok(found) => entries.extend(found.into_iter().map(|mut e| {
                e.workspace = workspace;
                e
            })),
            Err(e) if host == "--servers" => return Err(e),
            Err(e) => notes.push(format!("{e:#}")),
        }
    }
    Ok((entries, notes))
}

/// Whether an argument starts with what a shell would expand to the home folder (`~`,
/// `$HOME`, `${HOME}`), itself or after `NAME=` (`--root=~/docs`).
fn starts_at_home(arg: &str) -> bool {
    let at_home = |s: &str| {
        s == "~" || s.starts_with("~/") || s.starts_with("$HOME") || s.starts_with("${HOME}")
    };
    at_home(arg) || arg.split_once('=').is_some_and(|(_, v)| at_home(v))
}

/// A hint for a stdio entry whose program or an argument starts with `~` or `$HOME`: hosts
/// start the command without a shell, so the server gets the text as written (a path that
/// does not exist) and fails in a way that does not say why.
pub(crate) fn home_hint(e: &Entry) -> Option<String> {
    let arg = e
        .command
        .iter()
        .map(|a| a.to_string_lossy())
        .find(|a| starts_at_home(a))?;
    Some(format!(
        "server {:?} in {}: {:?} is passed as written, since hosts start the command without a shell that would expand `~` or `$HOME`; write the full path",
        e.name,
        e.file.display(),
        arg
    ))
}

/// Which of the entries named `name` `--server` uses, by index into `entries`: the first of
/// the user's own, else the first of a project's (used only once the project is trusted).
pub(crate) fn winner(entries: &[Entry], name: &str) -> Option<usize> {
    let named = || entries.iter().enumerate().filter(|(_, e)| e.name == name);
    named()
        .find(|(_, e)| !e.workspace)
        .or_else(|| named().next())
        .map(|(i, _)| i)
}

/// The entry named `name`, expanded, with a warning on stderr when its command holds a `~` or
/// `$HOME` no shell will expand (see [`find_entry`]).
pub(crate) fn find(name: &str, explicit: Option<&Path>, trust_flag: bool) -> anyhow::Result<Entry> {
    let entry = find_entry(name, explicit, trust_flag)?;
    if let Some(hint) = home_hint(&entry) {
        eprintln!("warning: {}", crate::client::clean(&hint));
    }
    Ok(entry)
}

/// The entry named `name`, expanded: the first of the user's files that has it (as the order
/// of [`files`] says); only when none does, a project file's, and that only in a trusted
/// folder (`trust_flag` is `--trust-workspace`). A project entry of the same name as a user's
/// is never used, and a warning names both files.
fn find_entry(name: &str, explicit: Option<&Path>, trust_flag: bool) -> anyhow::Result<Entry> {
    let (entries, _) = load(explicit)?;
    let user = entries.iter().find(|e| e.name == name && !e.workspace);
    let project = entries.iter().find(|e| e.name == name && e.workspace);
    match (user, project) {
        (Some(user), Some(project)) => {
            eprintln!(
                "warning: server {name:?} is in your {} and in the project's {}: yours is used",
                user.file.display(),
                project.file.display()
            );
            return user.clone().expand();
        }
        (Some(user), None) => return user.clone().expand(),
        (None, Some(project)) if workspace_trusted(trust_flag) => {
            return project.clone().expand();
        }
        (None, Some(project)) => {
            let folder = std::env::current_dir().unwrap_or_default();
            let list = trust_list().map_or_else(
                || "the trust list (HOME is not set)".to_owned(),
                |l| l.display().to_string(),
            );
            bail!(
                "server {name:?} is only in {}, a config file of the project in {}, which is not trusted: a project's entry can run any command and send your environment's secrets anywhere. Once you have read the entry, pass --trust-workspace, or trust the folder from now on by adding the line {} to {list}",
                project.file.display(),
                folder.display(),
                folder.display()
            );
        }
        (None, None) => {}
    }
    let known: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
    if known.is_empty() {
        bail!(
            "no server named {name:?}: no config file with servers was found (`mcp-resources servers` says where it looks)"
        );
    }
    bail!(
        "no server named {name:?} in the config files found; they name {}",
        known.join(", ")
    )
}

fn strings(v: Option<&Value>, what: &str, file: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let Some(v) = v else {
        return Ok(Vec::new());
    };
    let map = v
        .as_object()
        .with_context(|| format!("{}: `{what}` is not an object", file.display()))?;
    map.iter()
        .map(|(k, v)| {
            let v = v
                .as_str()
                .with_context(|| format!("{}: `{what}.{k}` is not a string", file.display()))?;
            Ok((k.clone(), v.to_owned()))
        })
        .collect()
}

/// A host's file as a JSON value. Every host reads its file as JSONC (VS Code's
/// `settings.json` and `mcp.json` are full of comments and trailing commas; Claude Desktop's
/// and Cursor's are plain JSON, which JSONC reads the same), so this does too.
fn parse_jsonc(text: &str, file: &Path) -> anyhow::Result<Value> {
    // What VS Code's own parser refuses stays refused: a file it would not read is not one
    // this client should guess at. Comments and trailing commas are on by default.
    let options = jsonc_parser::ParseOptions {
        allow_loose_object_property_names: false,
        allow_missing_commas: false,
        allow_single_quoted_strings: false,
        allow_hexadecimal_numbers: false,
        allow_unary_plus_numbers: false,
        allow_bare_decimal_point_numbers: false,
        allow_non_finite_numbers: false,
        allow_extended_string_escapes: false,
        ..Default::default()
    };
    jsonc_parser::parse_to_serde_value::<Value>(text, &options)
        .map_err(|e| anyhow::anyhow!("{}: not valid JSON with comments: {e}", file.display()))
}

fn parse(text: &str, host: &'static str, file: &Path) -> anyhow::Result<Vec<Entry>> {
    let doc = parse_jsonc(text, file)?;
    // VS Code's `settings.json` nests them under `mcp` (`"mcp": {"servers": …}`), or holds
    // the dotted key `"mcp.servers"`; its inputs are under `mcp.inputs` likewise.
    let (servers, inputs) = if host == VSCODE_SETTINGS {
        let mcp = doc.get("mcp");
        (
            mcp.and_then(|m| m.get("servers"))
                .or_else(|| doc.get("mcp.servers")),
            mcp.and_then(|m| m.get("inputs"))
                .or_else(|| doc.get("mcp.inputs")),
        )
    } else {
        (
            doc.get("mcpServers").or_else(|| doc.get("servers")),
            doc.get("inputs"),
        )
    };
    let Some(servers) = servers.and_then(Value::as_object) else {
        return Ok(Vec::new());
    };
    let vars = if host.starts_with("VS Code") {
        let inputs = inputs
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|i| {
                let id = i.get("id")?.as_str()?.to_owned();
                let d = i.get("description").and_then(Value::as_str).unwrap_or("");
                Some((id, d.to_owned()))
            })
            .collect();
        Some(Vars {
            inputs: Some(inputs),
        })
    } else if host.starts_with("Cursor") {
        Some(Vars { inputs: None })
    } else {
        None
    };
    let mut out = Vec::new();
    for (name, s) in servers {
        let url = s.get("url").and_then(Value::as_str).map(str::to_owned);
        let mut command = Vec::new();
        if let Some(c) = s.get("command").and_then(Value::as_str) {
            command.push(OsString::from(c));
            for a in s
                .get("args")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let a = a.as_str().with_context(|| {
                    format!(
                        "{}: server {name}: an argument is not a string",
                        file.display()
                    )
                })?;
                command.push(OsString::from(a));
            }
        }
        if url.is_none() && command.is_empty() {
            bail!(
                "{}: server {name} has neither `command` nor `url`",
                file.display()
            );
        }
        let headers = strings(s.get("headers"), "headers", file)?
            .into_iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        out.push(Entry {
            name: name.clone(),
            host,
            file: file.to_owned(),
            workspace: false,
            command,
            env: strings(s.get("env"), "env", file)?,
            sse: url.is_some() && s.get("type").and_then(Value::as_str) == Some("sse"),
            url,
            headers,
            vars: vars.clone(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_users_files_come_before_the_projects() {
        let found = files(Some(Path::new("mine.json")));
        // Unit tests run in the crate's folder, not in HOME: both project files are there.
        let i = found
            .iter()
            .position(|(_, _, w)| *w)
            .expect("the project's files are looked in");
        assert_eq!(found[0].0, "--servers");
        assert_eq!(found.len() - i, 2, "{found:?}");
        assert!(found[i..].iter().all(|(_, _, w)| *w), "{found:?}");
    }

    #[test]
    fn entries_of_each_shape_are_read() {
        let f = Path::new("x.json");
        let claude = r#"{"mcpServers": {"docs": {"command": "mcp-resources",
            "args": ["serve", "/srv"], "env": {"A": "1"}}}}"#;
        let e = &parse(claude, "Claude Desktop", f).unwrap()[0];
        assert_eq!(e.name, "docs");
        assert_eq!(e.command, ["mcp-resources", "serve", "/srv"]);
        assert_eq!(e.env, [("A".to_owned(), "1".to_owned())]);
        let vscode = r#"{"servers": {"api": {"type": "http", "url": "http://h/mcp",
            "headers": {"Authorization": "Bearer t"}}}}"#;
        let e = &parse(vscode, "VS Code", f).unwrap()[0];
        assert_eq!(e.url.as_deref(), Some("http://h/mcp"));
        assert!(!e.sse);
        let sse = r#"{"servers": {"old": {"type": "sse", "url": "http://h/sse"}}}"#;
        assert!(parse(sse, "VS Code", f).unwrap()[0].sse);
        assert_eq!(e.headers, ["Authorization: Bearer t"]);
        assert!(parse(r#"{"mcpServers": {"bad": {}}}"#, "Cursor", f).is_err());
        assert!(parse("{}", "Cursor", f).unwrap().is_empty());
    }

    #[test]
    fn vscode_settings_are_jsonc_with_servers_under_mcp() {
        let f = Path::new("settings.json");
        let settings = r#"{
            // the editor's own settings come first
            "editor.fontSize": 14,
            "mcp": {
                "inputs": [{"type": "promptString", "id": "api-key", "description": "The API key", "password": true},],
                "servers": {
                    /* a stdio server */
                    "docs": {"command": "mcp-resources", "args": ["serve", "${workspaceFolder}/docs",],},
                },
            },
        }"#;
        let e = parse(settings, VSCODE_SETTINGS, f).unwrap().remove(0);
        assert_eq!(e.name, "docs");
        let cwd = std::env::current_dir().unwrap().display().to_string();
        let e = e.expand().unwrap();
        assert_eq!(e.command[2], OsString::from(format!("{cwd}/docs")));
        let dotted = r#"{"mcp.servers": {"a": {"url": "http://h/mcp"}}}"#;
        assert_eq!(parse(dotted, VSCODE_SETTINGS, f).unwrap()[0].name, "a");
        let e = parse("{\"servers\": {}", VSCODE_SETTINGS, f).unwrap_err();
        assert!(
            format!("{e}").starts_with("settings.json: not valid JSON"),
            "{e}"
        );
    }

    #[test]
    fn inputs_come_from_the_environment_or_are_refused_by_name() {
        let f = Path::new(".vscode/mcp.json");
        let file = r#"{"inputs": [{"type": "promptString", "id": "never-set-9f1c", "description": "The token"}],
            "servers": {"api": {"url": "http://h/mcp", "headers": {"Authorization": "Bearer ${input:never-set-9f1c}"}},
                        "odd": {"url": "http://h/${config:x}"}}}"#;
        let mut entries = parse(file, "VS Code (workspace)", f).unwrap();
        let odd = entries.pop().unwrap();
        let e = entries.pop().unwrap().expand().unwrap_err();
        let e = format!("{e}");
        assert!(
            e.contains("needs the input \"never-set-9f1c\" (The token)"),
            "{e}"
        );
        assert!(
            e.contains("set the environment variable MCPR_INPUT_NEVER_SET_9F1C"),
            "{e}"
        );
        let e = format!("{}", odd.expand().unwrap_err());
        assert!(
            e.contains("${config:x} is a variable this client does not expand"),
            "{e}"
        );
        // Claude Desktop takes strings as written.
        let claude = r#"{"mcpServers": {"x": {"url": "http://h/${input:a}"}}}"#;
        let e = parse(claude, "Claude Desktop", f)
            .unwrap()
            .remove(0)
            .expand()
            .unwrap();
        assert_eq!(e.url.as_deref(), Some("http://h/${input:a}"));
        assert_eq!(input_env_name("api-key"), "MCPR_INPUT_API_KEY");
    }
}
