//! How a stdio session ends: the built binary fed whole inputs on a pipe that closes right
//! after them, as `printf … | mcp-resources serve DIR` does. Closing stdin is how every
//! client ends a session, so it exits 0, in every lifecycle and before any, and every request
//! read before the end is answered, exactly once, before the process exits. Only a failure to
//! read stdin is an error.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How long a run may take before the test calls it hung.
const RUN_TIMEOUT: Duration = Duration::from_secs(20);
/// How soon after the end of input a session with nothing left to answer must be gone:
/// hosts kill a server that lingers past 2 s after closing its stdin.
const PROMPT: Duration = Duration::from_secs(2);

const NEW_ERA: &str = "2026-07-28";

/// The `_meta` every 2026-07-28 request carries.
fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": NEW_ERA,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}
    })
}

/// A 2026-07-28 request: `params` with that era's `_meta` added.
fn modern(id: u64, method: &str, mut params: Value) -> String {
    params["_meta"] = meta();
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

fn legacy(id: u64, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

fn initialize(id: u64) -> String {
    legacy(
        id,
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {},
               "clientInfo": {"name": "t", "version": "1"}}),
    )
}

const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

/// A served directory with two files.
struct Root {
    _tmp: tempfile::TempDir,
    path: PathBuf,
}

impl Root {
    fn new() -> Self {
        let tmp = tempfile::tempdir().expect("temp dir");
        let path = tmp.path().canonicalize().expect("canonical temp dir");
        std::fs::write(path.join("a.txt"), "alpha\n").unwrap();
        std::fs::write(path.join("b.txt"), "bravo\n").unwrap();
        Self { _tmp: tmp, path }
    }

    /// The URI of a file in the root (test names need no percent-encoding).
    fn uri(&self, name: &str) -> String {
        format!("file://{}", self.path.join(name).display())
    }
}

/// What one run of `mcp-resources serve ROOT` left behind.
struct Run {
    status: ExitStatus,
    /// Every stdout line, parsed (a line that is not JSON fails the run).
    answers: Vec<Value>,
    stderr: String,
    /// From the end of input to the exit.
    after_eof: Duration,
}

impl Run {
    /// `lines` on stdin, which closes right after them; waits for the exit.
    fn of(root: &Path, lines: &[String]) -> Self {
        let mut input = String::new();
        for line in lines {
            input.push_str(line);
            input.push('\n');
        }
        let stdin = Stdio::piped();
        Self::with_stdin(root, stdin, Some(input))
    }

    fn with_stdin(root: &Path, stdin: Stdio, input: Option<String>) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_mcp-resources"))
            .arg("serve")
            .arg(root)
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn mcp-resources");
        // Both outputs are drained while the server runs, so a full pipe cannot stall it.
        let mut out = child.stdout.take().unwrap();
        let mut err = child.stderr.take().unwrap();
        let out = std::thread::spawn(move || {
            let mut s = String::new();
            out.read_to_string(&mut s).unwrap();
            s
        });
        let err = std::thread::spawn(move || {
            let mut s = String::new();
            err.read_to_string(&mut s).unwrap();
            s
        });
        if let Some(input) = input {
            let mut stdin = child.stdin.take().unwrap();
            stdin.write_all(input.as_bytes()).unwrap();
            // Dropped here: the end of input follows the last line at once.
        }
        let eof = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if eof.elapsed() > RUN_TIMEOUT {
                child.kill().unwrap();
                child.wait().unwrap();
                panic!("the server still ran {RUN_TIMEOUT:?} after its input ended");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let after_eof = eof.elapsed();
        let stdout = out.join().unwrap();
        let answers = stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect();
        Self {
            status,
            answers,
            stderr: err.join().unwrap(),
            after_eof,
        }
    }

    /// The run exited 0, promptly, and logged no error.
    fn ended_cleanly(&self) {
        assert!(
            self.status.success(),
            "exit {:?}; stderr:\n{}",
            self.status,
            self.stderr
        );
        assert!(
            !self.stderr.contains("ERROR") && !self.stderr.contains("closed the connection"),
            "{}",
            self.stderr
        );
        assert!(
            self.after_eof < PROMPT,
            "exited {:?} after the end of input",
            self.after_eof
        );
    }

    /// The answer to `id`, which must be the only one.
    fn answer(&self, id: u64) -> &Value {
        let mut found = self.answers.iter().filter(|a| a["id"] == id);
        let first = found
            .next()
            .unwrap_or_else(|| panic!("no answer to {id} in {:#?}", self.answers));
        assert!(found.next().is_none(), "two answers to {id}");
        first
    }

    /// Exactly one answer to each of `ids` and no other answer with an id, in any order
    /// (notifications aside).
    fn answered_exactly(&self, ids: &[u64]) {
        let mut got: Vec<u64> = self
            .answers
            .iter()
            .filter(|a| a.get("method").is_none() && !a["id"].is_null())
            .map(|a| {
                a["id"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("an answer without a request's id: {a}"))
            })
            .collect();
        got.sort_unstable();
        assert_eq!(got, ids, "{:#?}", self.answers);
    }
}

fn text_of(answer: &Value) -> &str {
    answer["result"]["contents"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text contents: {answer}"))
}

#[test]
fn a_discover_piped_alone_is_answered_and_the_exit_is_clean() {
    let root = Root::new();
    let run = Run::of(&root.path, &[modern(1, "server/discover", json!({}))]);
    run.ended_cleanly();
    run.answered_exactly(&[1]);
    let versions = &run.answer(1)["result"]["supportedVersions"];
    assert!(
        versions
            .as_array()
            .is_some_and(|v| v.iter().any(|v| v == NEW_ERA)),
        "{}",
        run.answer(1)
    );
}

#[test]
fn an_invalid_json_line_before_the_end_is_answered_and_the_exit_is_clean() {
    let root = Root::new();
    let run = Run::of(&root.path, &["{\"jsonrpc\": \"2.0\", \"id\": 1,".into()]);
    run.ended_cleanly();
    assert_eq!(run.answers.len(), 1, "{:#?}", run.answers);
    assert_eq!(
        run.answers[0]["error"]["code"], -32700,
        "{}",
        run.answers[0]
    );
    assert!(run.answers[0]["id"].is_null(), "{}", run.answers[0]);
}

#[test]
fn a_request_without_meta_before_any_lifecycle_is_answered_and_the_exit_is_clean() {
    let root = Root::new();
    let run = Run::of(&root.path, &[legacy(7, "resources/list", json!({}))]);
    run.ended_cleanly();
    run.answered_exactly(&[7]);
    let error = &run.answer(7)["error"];
    assert_eq!(error["code"], -32602, "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("protocolVersion"),
        "{error}"
    );
}

#[test]
fn a_legacy_initialize_then_the_end_is_answered_and_the_exit_is_clean() {
    let root = Root::new();
    let run = Run::of(&root.path, &[initialize(1)]);
    run.ended_cleanly();
    run.answered_exactly(&[1]);
    assert!(
        run.answer(1)["result"]["protocolVersion"].is_string(),
        "{}",
        run.answer(1)
    );
}

#[test]
fn a_read_right_before_the_end_is_answered_in_both_lifecycles() {
    let root = Root::new();
    let read = json!({"uri": root.uri("a.txt")});
    let run = Run::of(&root.path, &[modern(1, "resources/read", read.clone())]);
    run.ended_cleanly();
    run.answered_exactly(&[1]);
    assert_eq!(text_of(run.answer(1)), "alpha\n");

    // A legacy session's reads take the transport's direct path; a large file's finishes
    // on a task of its own, after the end of input.
    std::fs::write(root.path.join("big.txt"), "z".repeat(4 << 20)).unwrap();
    let lines = [
        initialize(1),
        INITIALIZED.into(),
        legacy(2, "resources/read", read),
        legacy(3, "resources/read", json!({"uri": root.uri("big.txt")})),
    ];
    let run = Run::of(&root.path, &lines);
    run.ended_cleanly();
    run.answered_exactly(&[1, 2, 3]);
    assert_eq!(text_of(run.answer(2)), "alpha\n");
    assert_eq!(text_of(run.answer(3)).len(), 4 << 20);
}

#[test]
fn every_request_before_the_end_is_answered_exactly_once() {
    let root = Root::new();
    // A 2026-07-28 conversation: a discover before any lifecycle, requests on the direct path
    // and through rmcp, a refused line, a read of a missing file, a listen stream left open.
    let mut lines = vec![
        modern(1, "server/discover", json!({})),
        modern(2, "resources/list", json!({})),
        "not json".into(),
        modern(3, "resources/read", json!({"uri": root.uri("a.txt")})),
        // Left open: the end of input ends it with its final result.
        modern(4, "resources/templates/list", json!({})),
        modern(5, "resources/read", json!({"uri": root.uri("missing.txt")})),
        modern(6, "ping", json!({})),
        legacy(7, "resources/list", json!({})),
        modern(
            8,
            "subscriptions/listen",
            json!({"notifications": {"resourceSubscriptions": [root.uri("a.txt")]}}),
        ),
    ];
    for id in 9..60 {
        let name = if id % 2 == 0 { "a.txt" } else { "b.txt" };
        lines.push(modern(id, "resources/read", json!({"uri": root.uri(name)})));
    }
    let run = Run::of(&root.path, &lines);
    // Promptly, though a listen stream never ends by itself.
    run.ended_cleanly();
    let parse_errors = run
        .answers
        .iter()
        .filter(|a| a["id"].is_null() && a["error"]["code"] == -32700)
        .count();
    assert_eq!(parse_errors, 1, "{:#?}", run.answers);
    run.answered_exactly(&(1..60).collect::<Vec<_>>());
    assert!(run.answer(2)["result"]["resources"].is_array());
    assert_eq!(run.answer(5)["error"]["code"], -32602);
    assert_eq!(run.answer(7)["error"]["code"], -32602, "no _meta");
    assert_eq!(run.answer(8)["result"]["resultType"], "complete");
    let acknowledged = run.answers.iter().any(|a| {
        a["method"] == "notifications/subscriptions/acknowledged"
            && a["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 8
    });
    assert!(acknowledged, "{:#?}", run.answers);
    assert_eq!(text_of(run.answer(58)), "alpha\n");
    assert_eq!(text_of(run.answer(59)), "bravo\n");
}

#[test]
fn empty_input_exits_cleanly_and_writes_nothing() {
    let root = Root::new();
    let run = Run::of(&root.path, &[]);
    run.ended_cleanly();
    assert!(run.answers.is_empty(), "{:#?}", run.answers);
}

#[test]
fn a_stdin_that_cannot_be_read_is_an_error() {
    let root = Root::new();
    // A directory: reading it fails (EISDIR), which is no end of input. (A write-only
    // descriptor would not do: the standard library reads EBADF on stdin as an end.)
    let dir = std::fs::File::open(&root.path).unwrap();
    let run = Run::with_stdin(&root.path, Stdio::from(dir), None);
    assert_eq!(run.status.code(), Some(1), "stderr:\n{}", run.stderr);
    assert!(run.stderr.contains("cannot read stdin"), "{}", run.stderr);
    assert!(run.answers.is_empty(), "{:#?}", run.answers);
}
