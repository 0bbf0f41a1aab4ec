//! `--server NAME` and `servers`: servers taken from the config files of Claude Desktop,
//! Cursor and VS Code (under a temporary HOME and working directory) and from `--servers
//! FILE`, with the environment and headers those entries give, against our own server over
//! stdio and HTTP.

mod client_common;

use std::path::Path;
use std::process::Command;

use client_common::{bin, our_http_server, run};
use serde_json::json;

fn client(home: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(args).env("HOME", home).current_dir(home);
    cmd
}

#[test]
fn servers_from_host_config_files_are_listed_and_used() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().canonicalize().unwrap();
    let docs = home.join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(docs.join("a.txt"), "alpha\n").unwrap();
    let docs = docs.display().to_string();

    // Cursor: a stdio server that starts only with the environment its entry gives.
    std::fs::create_dir_all(home.join(".cursor")).unwrap();
    let cursor = json!({"mcpServers": {"docs": {
        "command": "sh",
        "args": ["-c", "test -n \"$DOCS_TOKEN\" && exec \"$0\" serve --log-level warn \"$1\"",
                 bin().display().to_string(), docs],
        "env": {"DOCS_TOKEN": "s3cr3t"}
    }}});
    std::fs::write(home.join(".cursor/mcp.json"), cursor.to_string()).unwrap();

    // Claude Desktop: an HTTP server that wants the header its entry gives.
    let serve = ["serve", "--log-level", "warn", docs.as_str()];
    let (_server, url) = our_http_server(&serve);
    std::fs::create_dir_all(home.join(".config/Claude")).unwrap();
    let claude = json!({"mcpServers": {"api": {"url": url, "headers": {"X-Test": "1"}}}});
    std::fs::write(
        home.join(".config/Claude/claude_desktop_config.json"),
        claude.to_string(),
    )
    .unwrap();

    let table = run(client(&home, &["servers"])).ok();
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(
        lines[1].starts_with("docs") && lines[1].contains("Cursor"),
        "{table}"
    );
    assert!(lines[1].contains(".cursor/mcp.json"), "{table}");
    assert!(
        lines[2].starts_with("api") && lines[2].contains("Claude Desktop"),
        "{table}"
    );
    assert!(lines[2].ends_with(&url), "{table}");
    assert!(
        !table.contains("s3cr3t"),
        "environment values are not shown: {table}"
    );

    let uri = format!("file://{docs}/a.txt");
    for name in ["docs", "api"] {
        let text = run(client(&home, &["cat", &uri, "--server", name])).ok();
        assert_eq!(text, "alpha\n", "{name}");
    }

    // --servers FILE is looked in first: its `docs` wins over Cursor's.
    let own = home.join("mine.json");
    std::fs::write(&own, json!({"servers": {"docs": {"url": url}}}).to_string()).unwrap();
    let table = run(client(
        &home,
        &["servers", "--servers", own.to_str().unwrap()],
    ))
    .ok();
    assert!(
        table.lines().nth(1).unwrap().contains("--servers"),
        "{table}"
    );
    let text = run(client(
        &home,
        &[
            "cat",
            &uri,
            "--server",
            "docs",
            "--servers",
            own.to_str().unwrap(),
        ],
    ))
    .ok();
    assert_eq!(text, "alpha\n");

    let out = run(client(&home, &["ls", "--server", "nope"]));
    assert_eq!(out.code, Some(1), "{out:?}");
    assert_eq!(
        out.stderr,
        "error: no server named \"nope\" in the config files found; they name docs, api\n"
    );
}
