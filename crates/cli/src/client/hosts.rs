//! Servers from the config files people already have (`--server NAME`, `servers`): Claude
//! Desktop's `claude_desktop_config.json`, VS Code's `.vscode/mcp.json` and user `mcp.json`,
//! Cursor's `~/.cursor/mcp.json` and `.cursor/mcp.json`, and a file given with `--servers`.
//! Each holds a map of servers (`mcpServers`, or `servers` for VS Code) whose entries have a
//! `command`, `args` and `env` (stdio) or a `url` and `headers` (HTTP).

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
    /// Program and arguments, for a stdio server.
    pub command: Vec<OsString>,
    /// Environment for the child, as the host would set it.
    pub env: Vec<(String, String)>,
    /// The endpoint, for an HTTP server.
    pub url: Option<String>,
    /// Headers for every request, as "Name: value".
    pub headers: Vec<String>,
}

/// The files looked in, in order: the one given with `--servers`, then each host's.
fn files(explicit: Option<&Path>) -> Vec<(&'static str, PathBuf)> {
    let mut out = Vec::new();
    if let Some(p) = explicit {
        out.push(("--servers", p.to_owned()));
    }
    let cwd = std::env::current_dir().unwrap_or_default();
    out.push(("VS Code (workspace)", cwd.join(".vscode/mcp.json")));
    out.push(("Cursor (project)", cwd.join(".cursor/mcp.json")));
    if let Some(home) = std::env::var_os("HOME").map(PathBuf::from) {
        out.push((
            "Claude Desktop",
            home.join(".config/Claude/claude_desktop_config.json"),
        ));
        out.push((
            "Claude Desktop",
            home.join("Library/Application Support/Claude/claude_desktop_config.json"),
        ));
        out.push(("VS Code (user)", home.join(".config/Code/User/mcp.json")));
        out.push((
            "VS Code (user)",
            home.join("Library/Application Support/Code/User/mcp.json"),
        ));
        out.push(("Cursor", home.join(".cursor/mcp.json")));
    }
    // Run from the home directory, a project file and a user file are one file: read once.
    let mut seen = std::collections::HashSet::new();
    out.retain(|(_, p)| seen.insert(p.canonicalize().unwrap_or_else(|_| p.clone())));
    out
}

/// Every entry of every file that exists, and a note per file that could not be read.
pub(crate) fn load(explicit: Option<&Path>) -> anyhow::Result<(Vec<Entry>, Vec<String>)> {
    let mut entries = Vec::new();
    let mut notes = Vec::new();
    for (host, file) in files(explicit) {
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
            Ok(found) => entries.extend(found),
            Err(e) if host == "--servers" => return Err(e),
            Err(e) => notes.push(format!("{e:#}")),
        }
    }
    Ok((entries, notes))
}

/// The entry named `name`: the first file that has it wins, as the order of [`files`] says.
pub(crate) fn find(name: &str, explicit: Option<&Path>) -> anyhow::Result<Entry> {
    let (entries, _) = load(explicit)?;
    if let Some(e) = entries.iter().find(|e| e.name == name) {
        return Ok(e.clone());
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

fn parse(text: &str, host: &'static str, file: &Path) -> anyhow::Result<Vec<Entry>> {
    let doc: Value = serde_json::from_str(text)
        .with_context(|| format!("{}: not valid JSON", file.display()))?;
    let Some(servers) = doc
        .get("mcpServers")
        .or_else(|| doc.get("servers"))
        .and_then(Value::as_object)
    else {
        return Ok(Vec::new());
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
            command,
            env: strings(s.get("env"), "env", file)?,
            url,
            headers,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(e.headers, ["Authorization: Bearer t"]);
        assert!(parse(r#"{"mcpServers": {"bad": {}}}"#, "Cursor", f).is_err());
        assert!(parse("{}", "Cursor", f).unwrap().is_empty());
    }
}
