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

/// Headers from an entry reach an HTTP server that refuses requests without them (our server
/// with a bearer token): from `--servers`, and from VS Code's `.vscode/mcp.json` with the
/// token as an `${input:…}` taken from `MCPR_INPUT_<ID>`. Without it, the command stops
/// naming the input, and the token never shows in any output.
#[test]
fn headers_reach_an_http_server_that_needs_them() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().canonicalize().unwrap();
    let docs = home.join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(docs.join("a.txt"), "alpha\n").unwrap();
    std::fs::write(home.join("tokens"), "tok-5ecr3t-123\n").unwrap();
    let config = home.join("auth.toml");
    std::fs::write(
        &config,
        format!(
            "[http.auth]\nbearer_tokens = [\"file:tokens\"]\n[[mount]]\nkind = \"files\"\nroot = \"{}\"\n",
            docs.display()
        ),
    )
    .unwrap();
    let (_server, url) = our_http_server(&[
        "serve",
        "--log-level",
        "warn",
        "--config",
        config.to_str().unwrap(),
    ]);
    let uri = format!("file://{}/a.txt", docs.display());
    let own = home.join("servers.json");
    let servers = json!({"mcpServers": {
        "locked": {"url": url, "headers": {"Authorization": "Bearer tok-5ecr3t-123"}},
        "bare": {"url": url},
    }});
    std::fs::write(&own, servers.to_string()).unwrap();
    let own = own.to_str().unwrap();
    for protocol in ["legacy", "2026-07-28"] {
        let text = run(client(
            &home,
            &[
                "cat",
                &uri,
                "--server",
                "locked",
                "--servers",
                own,
                "--protocol",
                protocol,
            ],
        ))
        .ok();
        assert_eq!(text, "alpha\n", "{protocol}");
        let out = run(client(
            &home,
            &[
                "cat",
                &uri,
                "--server",
                "bare",
                "--servers",
                own,
                "--protocol",
                protocol,
            ],
        ));
        assert_eq!(out.code, Some(1), "{protocol}: {out:?}");
        assert!(out.stderr.contains("401"), "{protocol}: {out:?}");
    }

    // VS Code: JSONC, the token an input the user would be prompted for.
    std::fs::create_dir_all(home.join(".vscode")).unwrap();
    std::fs::write(
        home.join(".vscode/mcp.json"),
        format!(
            r#"{{
  // the team's docs, behind a token
  "inputs": [{{"type": "promptString", "id": "docs-token", "description": "Docs token", "password": true}}],
  "servers": {{
    "vs-docs": {{"type": "http", "url": "{url}", "headers": {{"Authorization": "Bearer ${{input:docs-token}}"}}}},
  }},
}}"#
        ),
    )
    .unwrap();
    let mut cmd = client(&home, &["cat", &uri, "--server", "vs-docs"]);
    cmd.env("MCPR_INPUT_DOCS_TOKEN", "tok-5ecr3t-123");
    assert_eq!(run(cmd).ok(), "alpha\n");
    let mut cmd = client(&home, &["cat", &uri, "--server", "vs-docs"]);
    cmd.env_remove("MCPR_INPUT_DOCS_TOKEN");
    let out = run(cmd);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr
            .contains("needs the input \"docs-token\" (Docs token)")
            && out
                .stderr
                .contains("set the environment variable MCPR_INPUT_DOCS_TOKEN"),
        "{out:?}"
    );
    let listed = run(client(&home, &["servers"])).ok();
    assert!(listed.contains("vs-docs"), "{listed}");
    assert!(!listed.contains("tok-5ecr3t"), "{listed}");
}

/// VS Code's user `settings.json` (JSONC, servers under `mcp.servers`): a stdio server whose
/// `env` holds `${env:…}` and whose arguments hold `${workspaceFolder}`, expanded as VS Code
/// does; the server starts only with the environment the entry gives it.
#[test]
fn vscode_user_settings_servers_start_with_their_expanded_env() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().canonicalize().unwrap();
    let docs = home.join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(docs.join("a.txt"), "alpha\n").unwrap();
    let user = home.join(".config/Code/User");
    std::fs::create_dir_all(&user).unwrap();
    let settings = format!(
        r#"{{
    // the editor's own settings stay as they are
    "editor.tabSize": 4,
    "mcp": {{
        "servers": {{
            "vs-user-docs": {{
                "command": "sh",
                "args": ["-c", "test \"$DOCS_TOKEN\" = from-outer && exec \"$0\" serve --log-level warn \"$1\"",
                         "{}", "${{workspaceFolder}}/docs",],
                "env": {{"DOCS_TOKEN": "${{env:OUTER_TOKEN}}"}},
            }},
        }},
    }},
}}"#,
        bin().display()
    );
    std::fs::write(user.join("settings.json"), settings).unwrap();
    let uri = format!("file://{}/a.txt", docs.display());
    let mut cmd = client(&home, &["cat", &uri, "--server", "vs-user-docs"]);
    cmd.env("OUTER_TOKEN", "from-outer");
    assert_eq!(run(cmd).ok(), "alpha\n");
    // Without the outer variable `${env:…}` is empty, as in VS Code: the server refuses.
    let mut cmd = client(&home, &["cat", &uri, "--server", "vs-user-docs"]);
    cmd.env_remove("OUTER_TOKEN");
    let out = run(cmd);
    assert_eq!(out.code, Some(1), "{out:?}");
    let listed = run(client(&home, &["servers"])).ok();
    assert!(
        listed.contains("vs-user-docs") && listed.contains("VS Code (settings)"),
        "{listed}"
    );
}
