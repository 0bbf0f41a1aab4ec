//! `tools`, `call`, `prompts`, `prompt` and `cat --json` against real servers: a server
//! written with the Python SDK's `MCPServer` (the FastMCP of `mcp` 2.x, from `.cache/venv`)
//! over stdio and over Streamable HTTP in both eras, with a text tool, an image tool and a
//! failing tool and one prompt; and our own server for `cat --json`. Every `--json` output is
//! parsed back.

mod client_common;

use std::path::PathBuf;
use std::process::Command;

use client_common::{bin, client_stdio, run};
use serde_json::{Value, json};

/// The Python SDK server: `add(a, b)`, `pixel()` (a text and a 256-byte PNG-typed image),
/// `fail(why)` (raises), the prompt `greet(name)` with completion of `name`, and
/// `logging/setLevel`.
const SERVER: &str = r#"
import base64
from mcp.server.mcpserver import MCPServer
from mcp.types import ImageContent, TextContent

app = MCPServer("tools-and-prompts")

@app.tool()
def add(a: int, b: int) -> str:
    """Add two numbers.

    A second line, not shown in the table."""
    return f"{a + b}"

@app.tool()
def pixel() -> list:
    """A tiny image."""
    data = base64.b64encode(bytes(range(256))).decode()
    return [TextContent(type="text", text="here it is"),
            ImageContent(type="image", data=data, mimeType="image/png")]

@app.tool()
def fail(why: str) -> str:
    """Always fails."""
    raise ValueError(f"failed because {why}")

@app.prompt()
def greet(name: str) -> str:
    """Greets someone."""
    return f"Hello, {name}!"

from mcp.types import Completion, EmptyResult, PromptReference, SetLevelRequestParams

@app.completion()
async def complete(ref, argument, context):
    if isinstance(ref, PromptReference) and ref.name == "greet" and argument.name == "name":
        return Completion(values=[n for n in ["Ada", "Alan", "Grace"] if n.startswith(argument.value)])
    return None

# The SDK's low-level handler for `logging/setLevel` (MCPServer has no decorator for it):
# it answers after two log messages, one with an object as its data.
async def set_level(ctx, params):
    await ctx.session.send_log_message(level="info", data=f"level set to {params.level}", logger="app")
    await ctx.session.send_log_message(level="error", data={"disk": "full"})
    return EmptyResult()

app._lowlevel_server.add_request_handler("logging/setLevel", SetLevelRequestParams, set_level)

import sys
if len(sys.argv) > 1:
    app.run("streamable-http", port=int(sys.argv[1]))
else:
    app.run()
"#;

/// The venv's Python and the server script in a temp dir, or `None` (skip) without the SDK.
fn python_server(dir: &tempfile::TempDir) -> Option<(PathBuf, PathBuf)> {
    let python = client_common::python_sdk()?;
    let script = dir.path().join("server.py");
    std::fs::write(&script, SERVER).unwrap();
    Some((python, script))
}

fn client(args: &[&str], python: &PathBuf, script: &PathBuf) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(args).arg("--").arg(python).arg(script);
    cmd
}

#[test]
fn tools_calls_and_prompts_against_a_python_sdk_server() {
    let dir = tempfile::tempdir().unwrap();
    let Some((py, script)) = python_server(&dir) else {
        return;
    };
    // `info`: who it is, the version agreed, what it offers; `--json` parsed back.
    let info = run(client(&["info"], &py, &script)).ok();
    assert!(info.starts_with("server:   tools-and-prompts"), "{info}");
    assert!(info.contains("\nprotocol: 20"), "{info}");
    assert!(info.contains("tools") && info.contains("prompts"), "{info}");
    let json = run(client(&["info", "--json"], &py, &script)).ok();
    let v: Value = serde_json::from_str(json.trim_end()).unwrap();
    assert_eq!(v["serverInfo"]["name"], "tools-and-prompts");
    assert!(v["capabilities"]["tools"].is_object(), "{json}");

    // The table: one line per tool, required arguments starred, a description's first line.
    let table = run(client(&["tools"], &py, &script)).ok();
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "{table}");
    assert!(lines[0].starts_with("NAME"), "{table}");
    assert!(
        lines[1].starts_with("add") && lines[1].contains("a* b*"),
        "{table}"
    );
    assert!(lines[1].ends_with("Add two numbers."), "{table}");
    assert!(!table.contains("second line"), "{table}");

    // --json: each tool object as sent, one per line.
    let json = run(client(&["tools", "--json"], &py, &script)).ok();
    let names: Vec<String> = json
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            assert!(v["inputSchema"].is_object(), "{l}");
            v["name"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(names, ["add", "pixel", "fail"]);

    // Arguments: NAME:=JSON for numbers, --args-json for all at once.
    let out = run(client(
        &["call", "add", "--arg", "a:=2", "--arg", "b:=40"],
        &py,
        &script,
    ));
    assert_eq!(out.text(), "42\n", "{out:?}");
    let out = run(client(
        &[
            "call",
            "add",
            "--json",
            "--args-json",
            r#"{"a": 1, "b": 2}"#,
        ],
        &py,
        &script,
    ))
    .ok();
    let result: Value = serde_json::from_str(out.trim_end()).expect("one JSON line");
    assert_eq!(result["content"][0]["text"], "3");
    assert_eq!(result["isError"], false);
    // A string where the tool wants a number is the tool's error: exit 5.
    let out = run(client(
        &["call", "add", "--arg", "a=x", "--arg", "b:=1"],
        &py,
        &script,
    ));
    assert_eq!(out.code, Some(5), "{out:?}");

    // Text to stdout, the image to -o byte for byte, a note on stderr saying where it went.
    let png = dir.path().join("out.png");
    let out = run(client(
        &["call", "pixel", "-o", png.to_str().unwrap()],
        &py,
        &script,
    ));
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.text(), "here it is\n");
    assert_eq!(
        std::fs::read(&png).unwrap(),
        (0..=255u8).collect::<Vec<_>>()
    );
    assert!(
        out.stderr.contains("image/png, 256 B: written to"),
        "{out:?}"
    );
    // Without -o the image is named, not printed.
    let out = run(client(&["call", "pixel"], &py, &script)).ok();
    assert!(
        out.contains("(image, image/png, 256 B: not printed"),
        "{out}"
    );

    // isError: the tool's text printed, then one error line and exit 5.
    let out = run(client(
        &["call", "fail", "--arg", "why=testing"],
        &py,
        &script,
    ));
    assert_eq!(out.code, Some(5), "{out:?}");
    assert!(!out.stdout.is_empty(), "{out:?}");
    assert_eq!(
        out.stderr,
        "error: the tool fail reported an error (isError)\n"
    );

    // Prompts: the table, then one prompt's messages.
    let table = run(client(&["prompts"], &py, &script)).ok();
    assert!(
        table.lines().nth(1).unwrap().starts_with("greet"),
        "{table}"
    );
    assert!(table.contains("name*"), "{table}");
    let json = run(client(&["prompts", "--json"], &py, &script)).ok();
    let p: Value = serde_json::from_str(json.trim_end()).unwrap();
    assert_eq!(p["name"], "greet");
    let out = run(client(
        &["prompt", "greet", "--arg", "name=Ann"],
        &py,
        &script,
    ))
    .ok();
    assert_eq!(out, "[user]\nHello, Ann!\n");
    let out = run(client(
        &["prompt", "greet", "--arg", "name=Ann", "--json"],
        &py,
        &script,
    ))
    .ok();
    let got: Value = serde_json::from_str(out.trim_end()).unwrap();
    assert_eq!(got["messages"][0]["content"]["text"], "Hello, Ann!");

    // Bad arguments are refused before any server is started, as a usage error.
    let out = run(client(&["call", "add", "--arg", "novalue"], &py, &script));
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("expected NAME=VALUE"), "{out:?}");
}

/// The same Python SDK server over Streamable HTTP on a free loopback port: `tools`, `call`
/// (numbers, an image to `-o`, `isError`), `prompts` and `prompt`, in each era.
#[test]
fn tools_and_prompts_over_http_against_a_python_sdk_server() {
    let dir = tempfile::tempdir().unwrap();
    let Some((py, script)) = python_server(&dir) else {
        return;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _server = client_common::Guard(
        Command::new(&py)
            .arg(&script)
            .arg(port.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start the Python server"),
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the Python server does not listen"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let url = format!("http://127.0.0.1:{port}/mcp");
    for protocol in ["legacy", "2026-07-28"] {
        let http = |args: &[&str]| {
            let mut cmd = Command::new(bin());
            cmd.args(args).args(["--protocol", protocol, "--url", &url]);
            cmd
        };
        let info = run(http(&["info", "--json"])).ok();
        let v: Value = serde_json::from_str(info.trim_end()).unwrap();
        assert_eq!(v["serverInfo"]["name"], "tools-and-prompts", "{protocol}");
        let want = if protocol == "legacy" {
            "2025-11-25"
        } else {
            protocol
        };
        assert_eq!(v["protocolVersion"], want, "{protocol}: {info}");

        let json = run(http(&["tools", "--json"])).ok();
        let names: Vec<String> = json
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
                v["name"].as_str().unwrap().to_owned()
            })
            .collect();
        assert_eq!(names, ["add", "pixel", "fail"], "{protocol}");
        let out = run(http(&["call", "add", "--arg", "a:=2", "--arg", "b:=40"]));
        assert_eq!(out.text(), "42\n", "{protocol}: {out:?}");
        let png = dir.path().join(format!("out-{protocol}.png"));
        run(http(&["call", "pixel", "-o", png.to_str().unwrap()])).ok();
        assert_eq!(
            std::fs::read(&png).unwrap(),
            (0..=255u8).collect::<Vec<_>>(),
            "{protocol}"
        );
        let out = run(http(&["call", "fail", "--arg", "why=testing"]));
        assert_eq!(out.code, Some(5), "{protocol}: {out:?}");
        assert!(
            out.stderr.ends_with("reported an error (isError)\n"),
            "{out:?}"
        );

        let table = run(http(&["prompts"])).ok();
        assert!(
            table.contains("greet") && table.contains("name*"),
            "{protocol}: {table}"
        );
        let out = run(http(&["prompt", "greet", "--arg", "name=Ann"])).ok();
        assert_eq!(out, "[user]\nHello, Ann!\n", "{protocol}");
    }
}

/// `cat --json` prints the `resources/read` result as the server sent it, in each era.
#[test]
fn cat_json_is_the_read_result_as_sent() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("a.txt"), "alpha\n").unwrap();
    let uri = format!("file://{}/a.txt", root.display());
    let root = root.display().to_string();
    for protocol in ["legacy", "2026-07-28"] {
        let out = run(client_stdio(
            &["cat", "--json", "--protocol", protocol, &uri],
            &["serve", "--log-level", "warn", &root],
        ))
        .ok();
        assert_eq!(out.lines().count(), 1, "{out}");
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["contents"][0]["uri"], uri.as_str(), "{protocol}");
        assert_eq!(v["contents"][0]["text"], "alpha\n", "{protocol}");
    }
}

/// A Python SDK server whose one tool takes each JSON type strictly (no string is taken for a
/// number, a boolean, a list or a dict) and says which types it got.
const KINDS: &str = r#"
import json
from pydantic import StrictBool, StrictFloat, StrictInt
from mcp.server.mcpserver import MCPServer

app = MCPServer("kinds")

@app.tool()
def kinds(n: StrictFloat, i: StrictInt, flag: StrictBool, items: list[StrictInt], obj: dict, s: str) -> str:
    """Names the type of each argument."""
    return json.dumps([n, i, flag, items, obj, s])

app.run()
"#;

/// `--arg NAME=VALUE` is read by the tool's input schema, as the MCP Inspector does: `1.5` for
/// a number, `7` for an integer, `true`, `[1,2]` and `{…}` arrive as JSON, and a string
/// property keeps the text (`007`) as given; `NAME:=JSON` still forces JSON.
#[test]
fn text_arguments_are_typed_by_the_tools_schema() {
    let dir = tempfile::tempdir().unwrap();
    let Some((py, _)) = python_server(&dir) else {
        return;
    };
    let script = dir.path().join("kinds.py");
    std::fs::write(&script, KINDS).unwrap();
    let out = run(client(
        &[
            "call",
            "kinds",
            "--arg",
            "n=1.5",
            "--arg",
            "i=7",
            "--arg",
            "flag=true",
            "--arg",
            "items=[1,2]",
            "--arg",
            r#"obj={"k":"v"}"#,
            "--arg",
            "s=007",
        ],
        &py,
        &script,
    ))
    .ok();
    let got: Value = serde_json::from_str(out.trim_end()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(got, json!([1.5, 7, true, [1, 2], {"k": "v"}, "007"]));

    // `:=` forces JSON: a string where the schema wants an integer is the tool's error.
    let out = run(client(
        &[
            "call",
            "kinds",
            "--arg",
            "n=1.5",
            "--arg",
            "i:=\"7\"",
            "--arg",
            "flag=false",
            "--arg",
            "items=[]",
            "--arg",
            "obj={}",
            "--arg",
            "s=x",
        ],
        &py,
        &script,
    ));
    assert_eq!(out.code, Some(5), "{out:?}");
}

/// `complete --prompt` completes a prompt's argument (`ref/prompt`) in both eras, and
/// `log-level` sets the level of the SDK server and prints its log messages: under `auto` in a
/// legacy session (2026-07-28 has no `logging/setLevel`), and with `--protocol 2026-07-28` it
/// is refused as a usage error saying why.
#[test]
fn prompt_arguments_complete_and_log_level_prints_the_sdk_servers_messages() {
    let dir = tempfile::tempdir().unwrap();
    let Some((python, script)) = python_server(&dir) else {
        return;
    };
    for protocol in ["auto", "legacy"] {
        let out = run(client(
            &[
                "complete",
                "--prompt",
                "greet",
                "name",
                "A",
                "--protocol",
                protocol,
            ],
            &python,
            &script,
        ))
        .ok();
        assert_eq!(out, "Ada\nAlan\n", "{protocol}");
    }
    let logs = client_common::Lines::spawn(client(&["log-level", "warning"], &python, &script));
    let within = std::time::Duration::from_secs(20);
    assert_eq!(
        logs.next_within(within).as_deref(),
        Some("[info] app: level set to warning"),
        "{}",
        logs.stderr()
    );
    assert_eq!(
        logs.next_within(within).as_deref(),
        Some(r#"[error] {"disk":"full"}"#)
    );
    drop(logs);
    let refused = run(client(
        &["log-level", "warning", "--protocol", "2026-07-28"],
        &python,
        &script,
    ));
    assert_eq!(refused.code, Some(2), "{}", refused.stderr);
    assert!(
        refused
            .stderr
            .contains("2026-07-28 has no logging/setLevel"),
        "{}",
        refused.stderr
    );
}
