//! The terminal client against `@modelcontextprotocol/server-filesystem@2026.8.31`, a server
//! with tools and no resources (the one a new user tried first, issue #31): the resource
//! commands say what it offers instead, `tools`, `info` and `call` work, and a tool's error
//! is exit code 1.
//!
//! `cargo xtask test` installs it (with Node 22) into `.cache/node22`; without it this test
//! says SKIPPED and passes, except under `CI=true`, where it fails.

mod client_common;

use std::path::PathBuf;
use std::process::Command;

use client_common::{bin, run};

const PACKAGE: &str = "@modelcontextprotocol/server-filesystem";

fn filesystem() -> Option<(PathBuf, PathBuf)> {
    client_common::npm_server(PACKAGE)
}

#[test]
fn a_server_with_tools_and_no_resources() {
    let Some((node, entry)) = filesystem() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("a.txt"), "alpha\n").unwrap();
    let client = |args: &[&str]| {
        let mut cmd = Command::new(bin());
        cmd.args(args).arg("--").arg(&node).arg(&entry).arg(&root);
        cmd
    };
    for args in [&["ls"][..], &["cat", "file:///x"], &["templates"]] {
        let out = run(client(args));
        assert_eq!(out.code, Some(1), "{out:?}");
        let tools = run(client(&["tools", "--json"])).ok().lines().count();
        assert_eq!(
            out.stderr,
            format!("error: this server offers no resources; it offers tools ({tools})\n"),
            "{args:?}"
        );
    }
    let info = run(client(&["info"])).ok();
    assert!(info.contains("offers:   tools"), "{info}");
    let table = run(client(&["tools"])).ok();
    assert!(table.contains("\nread_text_file "), "{table}");

    let file = root.join("a.txt").display().to_string();
    let arg = format!("path={file}");
    let text = run(client(&["call", "read_text_file", "--arg", &arg])).ok();
    assert_eq!(text, "alpha\n");
    // A path outside the allowed directory is the tool's error: exit 5.
    let out = run(client(&[
        "call",
        "read_text_file",
        "--arg",
        "path=/etc/hostname",
    ]));
    assert_eq!(out.code, Some(5), "{out:?}");
    assert_eq!(
        out.stderr,
        "error: the tool read_text_file reported an error (isError)\n"
    );
}
