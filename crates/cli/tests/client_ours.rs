//! The terminal client (`ls`, `cat`, `templates`, `complete`, `watch`) against our own server:
//! the built binary as client, the same binary as server over real stdio and real loopback
//! HTTP, in both protocol eras, on files in a temp dir. Terminal behaviour (the progress line,
//! the refusal to print binary) runs on a pseudo-terminal through util-linux `script`.

mod client_common;

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::Command;

use client_common::{Lines, Out, absent, bin, client_stdio, on_terminal, our_http_server, run};
use serde_json::Value;

/// The eras as `--protocol` spells them, with the not-found code each answers.
const ERAS: [(&str, &str); 2] = [("legacy", "(-32002)"), ("2026-07-28", "(-32602)")];

/// How many numbered files the tree holds: with `page_size = 4`, many pages.
const NUMBERED: usize = 30;

/// A served tree (text, binary, a subdirectory, many files) and a config with small pages.
struct Tree {
    _dir: tempfile::TempDir,
    root: PathBuf,
    config: PathBuf,
    binary: Vec<u8>,
}

impl Tree {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let base = dir.path().canonicalize().expect("canonical temp dir");
        let root = base.join("docs");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("a.txt"), "alpha\n").unwrap();
        std::fs::write(root.join("sub/b.md"), "# b\n").unwrap();
        let binary: Vec<u8> = (0..=255u8).cycle().take(3000).collect();
        std::fs::write(root.join("img.bin"), &binary).unwrap();
        for i in 0..NUMBERED {
            std::fs::write(root.join(format!("n{i:02}.txt")), format!("{i}\n")).unwrap();
        }
        let config = base.join("client.toml");
        std::fs::write(
            &config,
            format!(
                "[server]\npage_size = 4\n[[mount]]\nkind = \"files\"\nroot = \"{}\"\n",
                root.display()
            ),
        )
        .unwrap();
        Self {
            _dir: dir,
            root,
            config,
            binary,
        }
    }

    fn uri(&self, rel: &str) -> String {
        format!("file://{}/{rel}", self.root.display())
    }

    /// `serve --config …` arguments for a server over stdio.
    fn serve(&self) -> Vec<String> {
        vec![
            "serve".into(),
            "--log-level".into(),
            "warn".into(),
            "--config".into(),
            self.config.display().to_string(),
        ]
    }

    fn client(&self, args: &[&str]) -> Command {
        let serve = self.serve();
        let serve: Vec<&str> = serve.iter().map(String::as_str).collect();
        client_stdio(args, &serve)
    }
}

/// The URIs of `ls --json` output, checking each line is one resource object.
fn json_uris(out: &str) -> Vec<String> {
    out.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            assert!(v.get("name").is_some(), "a resource has a name: {l}");
            v["uri"].as_str().expect("uri").to_owned()
        })
        .collect()
}

#[test]
fn ls_follows_every_cursor_in_each_era_over_stdio() {
    let t = Tree::new();
    for protocol in ["legacy", "2026-07-28", "auto"] {
        let out = run(t.client(&["ls", "--json", "--protocol", protocol]));
        let uris = json_uris(&out.ok());
        let unique: BTreeSet<_> = uris.iter().cloned().collect();
        assert_eq!(unique.len(), uris.len(), "{protocol}: no resource twice");
        for i in 0..NUMBERED {
            assert!(
                unique.contains(&t.uri(&format!("n{i:02}.txt"))),
                "{protocol}: n{i:02}"
            );
        }
        assert!(unique.contains(&t.uri("sub/b.md")), "{protocol}: {uris:?}");
        // On a pipe, nothing but the listing: no progress line.
        assert_eq!(out.stderr, "", "{protocol}");

        let table = run(t.client(&["ls", "--protocol", protocol])).ok();
        let mut lines = table.lines();
        let header = lines.next().expect("a header");
        assert!(
            header.starts_with("URI")
                && header.contains("NAME")
                && header.contains("MIME TYPE")
                && header.ends_with("SIZE"),
            "{header}"
        );
        let rows: Vec<&str> = lines.collect();
        assert_eq!(rows.len(), uris.len(), "{protocol}: a row per resource");
        let a = rows
            .iter()
            .find(|r| r.starts_with(&t.uri("a.txt")))
            .expect("a.txt row");
        assert!(
            a.contains("a.txt") && a.contains("text/plain") && a.ends_with("6 B"),
            "{a}"
        );
    }
    // A prefix keeps only what is under it.
    let sub = run(t.client(&["ls", "--json", &t.uri("sub/")])).ok();
    assert_eq!(json_uris(&sub), vec![t.uri("sub/b.md")]);
}

#[test]
fn ls_json_is_each_object_as_the_server_sent_it() {
    let t = Tree::new();
    // The server's own bytes, from a raw JSON-RPC exchange over stdio.
    let request = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"resources/list\",\"params\":{\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\",\"io.modelcontextprotocol/clientCapabilities\":{}}}}\n";
    let mut server = Command::new(bin())
        .args(t.serve())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    server
        .stdin
        .take()
        .unwrap()
        .write_all(request.as_bytes())
        .unwrap();
    let answer = server.wait_with_output().unwrap().stdout;
    let answer = String::from_utf8(answer).unwrap();
    // The first page's resources, sliced out of the answer text without re-encoding.
    let start = answer.find("\"resources\":[").expect("resources") + "\"resources\":[".len();
    let first_uri = t.uri(&{
        let v: Value = serde_json::from_str(answer.trim()).unwrap();
        v["result"]["resources"][0]["uri"]
            .as_str()
            .unwrap()
            .rsplit('/')
            .next()
            .unwrap()
            .to_owned()
    });
    let ours = run(t.client(&["ls", "--json", "--protocol", "2026-07-28"])).ok();
    let first_line = ours.lines().next().expect("a line");
    assert!(first_line.contains(&first_uri), "{first_line}");
    assert!(
        answer[start..].starts_with(first_line),
        "the line is the server's own text:\n{first_line}\nvs\n{}",
        &answer[start..start + first_line.len().min(answer.len() - start)]
    );
}

#[test]
fn cat_writes_text_raw_bytes_and_files_and_reports_not_found() {
    let t = Tree::new();
    for (protocol, not_found) in ERAS {
        let text = run(t.client(&["cat", "--protocol", protocol, &t.uri("a.txt")]));
        assert_eq!(text.ok(), "alpha\n");
        // stdout is a pipe here: the blob comes out as raw bytes.
        let blob = run(t.client(&["cat", "--protocol", protocol, &t.uri("img.bin")]));
        assert_eq!(blob.code, Some(0), "{}", blob.stderr);
        assert_eq!(blob.stdout, t.binary, "{protocol}: byte-exact");
        let file = t.root.parent().unwrap().join(format!("out-{protocol}.bin"));
        let to_file = run(t.client(&[
            "cat",
            "--protocol",
            protocol,
            &t.uri("img.bin"),
            "-o",
            file.to_str().unwrap(),
        ]));
        assert_eq!(to_file.ok(), "", "nothing on stdout with -o");
        assert_eq!(std::fs::read(&file).unwrap(), t.binary);

        let missing = run(t.client(&["cat", "--protocol", protocol, &t.uri("nope.txt")]));
        assert_eq!(missing.code, Some(4), "{missing:?}");
        assert_eq!(missing.text(), "");
        assert_eq!(
            missing.stderr.lines().count(),
            1,
            "one line: {}",
            missing.stderr
        );
        assert!(
            missing.stderr.starts_with("error: ")
                && missing.stderr.contains(&t.uri("nope.txt"))
                && missing.stderr.trim_end().ends_with(not_found),
            "{protocol}: {}",
            missing.stderr
        );
    }
}

#[test]
fn http_in_both_eras_lists_reads_and_sends_headers() {
    let t = Tree::new();
    let (_server, url) =
        our_http_server(&t.serve()[..].iter().map(String::as_str).collect::<Vec<_>>());
    let stdio_count = json_uris(&run(t.client(&["ls", "--json"])).ok()).len();
    for (protocol, not_found) in ERAS.iter().chain(&[("auto", "(-32602)")]) {
        let mut cmd = Command::new(bin());
        cmd.args(["ls", "--json", "--protocol", protocol, "--url", &url]);
        assert_eq!(json_uris(&run(cmd).ok()).len(), stdio_count, "{protocol}");
        let mut cmd = Command::new(bin());
        cmd.args([
            "cat",
            "--protocol",
            protocol,
            "--url",
            &url,
            &t.uri("img.bin"),
        ]);
        assert_eq!(run(cmd).stdout, t.binary, "{protocol}");
        let mut cmd = Command::new(bin());
        cmd.args(["cat", "--protocol", protocol, "--url", &url, &t.uri("nope")]);
        let missing = run(cmd);
        assert_eq!(missing.code, Some(4));
        assert!(
            missing.stderr.trim_end().ends_with(not_found),
            "{protocol}: {}",
            missing.stderr
        );
    }
    // A URI outside visible ASCII goes in the Mcp-Name header base64-wrapped; the server
    // compares it with the body and would refuse a mismatch.
    std::fs::write(t.root.join("é-ü.txt"), "accents\n").unwrap();
    let mut cmd = Command::new(bin());
    cmd.args([
        "cat",
        "--protocol",
        "2026-07-28",
        "--url",
        &url,
        &t.uri("é-ü.txt"),
    ]);
    assert_eq!(run(cmd).ok(), "accents\n");
}

#[test]
fn a_bearer_token_goes_in_a_header_and_its_absence_is_explained() {
    let t = Tree::new();
    let token = "client-test-token-6f1c";
    let config = t.root.parent().unwrap().join("auth.toml");
    std::fs::write(
        &config,
        format!(
            "[http.auth]\nbearer_tokens = [\"env:MCPR_CLIENT_TEST_TOKEN\"]\n[[mount]]\nkind = \"files\"\nroot = \"{}\"\n",
            t.root.display()
        ),
    )
    .unwrap();
    let mut server = Command::new(bin());
    server
        .env("MCPR_CLIENT_TEST_TOKEN", token)
        .args([
            "serve",
            "--log-level",
            "warn",
            "--http",
            "127.0.0.1:0",
            "--config",
        ])
        .arg(&config)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = server.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let _guard = client_common::Guard(child);
    let url = {
        use std::io::BufRead as _;
        std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .find_map(|l| l.split("serving MCP on ").nth(1).map(str::to_owned))
            .expect("the server's address")
    };
    let mut cmd = Command::new(bin());
    cmd.args(["cat", "--url", &url, &t.uri("a.txt")]);
    let refused = run(cmd);
    assert_eq!(refused.code, Some(3));
    assert!(
        refused.stderr.contains("HTTP 401")
            && refused.stderr.contains("requires authorization")
            && refused.stderr.contains("a bearer token is required")
            && refused.stderr.contains("--header"),
        "{}",
        refused.stderr
    );

    let mut cmd = Command::new(bin());
    cmd.args([
        "cat",
        "--url",
        &url,
        "--header",
        &format!("Authorization: Bearer {token}"),
        &t.uri("a.txt"),
    ]);
    assert_eq!(run(cmd).ok(), "alpha\n");
    let mut cmd = Command::new(bin());
    cmd.args([
        "cat",
        "--url",
        &url,
        "--header",
        "Authorization: Bearer wrong-token-xyz",
        &t.uri("a.txt"),
    ]);
    let wrong = run(cmd);
    assert_eq!(wrong.code, Some(3));
    assert!(
        !wrong.stderr.contains("wrong-token-xyz"),
        "a header value is never printed: {}",
        wrong.stderr
    );
    // A wrong token is told apart from a missing one.
    assert!(
        wrong.stderr.contains("refused the token") && wrong.stderr.contains("not valid"),
        "{}",
        wrong.stderr
    );

    // --verbose traces every message and HTTP request on stderr, never the token (a header
    // value) nor a URL's query, in both eras (legacy adds a session id, masked too).
    for protocol in ["legacy", "2026-07-28"] {
        let mut cmd = Command::new(bin());
        let with_query = format!("{url}?key=query-secret-91");
        cmd.args([
            "cat",
            "--verbose",
            "--protocol",
            protocol,
            "--url",
            &with_query,
            "--header",
            &format!("Authorization: Bearer {token}"),
            &t.uri("a.txt"),
        ]);
        let out = run(cmd);
        assert_eq!(out.text(), "alpha\n", "{protocol}: {out:?}");
        let err = &out.stderr;
        assert!(
            err.lines()
                .any(|l| l.starts_with("-> POST http://127.0.0.1:")
                    && l.contains("authorization: ***")),
            "{protocol}: {err}"
        );
        assert!(
            err.lines()
                .any(|l| l.starts_with("-> {") && l.contains(r#""method":"resources/read""#)),
            "{protocol}: {err}"
        );
        assert!(
            err.lines()
                .any(|l| l.starts_with("<- {") && l.contains("alpha")),
            "{protocol}: {err}"
        );
        assert!(
            !err.contains(token) && !err.contains("query-secret-91"),
            "{protocol}: {err}"
        );
        if protocol == "legacy" {
            assert!(err.contains("mcp-session-id: ***"), "{err}");
        }
    }
}

/// `--verbose` over stdio: each message sent and received on stderr in both eras, and the
/// answer on stdout unchanged; a `--server` entry's environment (a key, say) never in the
/// trace.
#[test]
fn verbose_traces_stdio_messages_without_the_entrys_environment() {
    let t = Tree::new();
    let servers = t.root.parent().unwrap().join("servers.json");
    std::fs::write(
        &servers,
        serde_json::json!({"mcpServers": {"docs": {
            "command": bin(),
            "args": t.serve(),
            "env": {"DOCS_API_KEY": "env-secret-77"},
        }}})
        .to_string(),
    )
    .unwrap();
    for protocol in ["legacy", "2026-07-28"] {
        let mut cmd = Command::new(bin());
        cmd.args(["cat", "--verbose", "--protocol", protocol, "--servers"])
            .arg(&servers)
            .args(["--server", "docs", &t.uri("a.txt")]);
        let out = run(cmd);
        assert_eq!(out.text(), "alpha\n", "{protocol}: {out:?}");
        let err = &out.stderr;
        assert!(
            err.lines()
                .any(|l| l.starts_with("-> {") && l.contains(r#""method":"resources/read""#)),
            "{protocol}: {err}"
        );
        assert!(
            err.lines()
                .any(|l| l.starts_with("<- {") && l.contains("alpha")),
            "{protocol}: {err}"
        );
        assert!(!err.contains("env-secret-77"), "{protocol}: {err}");
    }
}

#[test]
fn templates_and_complete() {
    let t = Tree::new();
    let template = format!("file://{}/{{+path}}", t.root.display());
    for (protocol, _) in ERAS {
        let out = run(t.client(&["templates", "--json", "--protocol", protocol])).ok();
        let templates: Vec<String> = out
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["uriTemplate"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert!(templates.contains(&template), "{protocol}: {templates:?}");
        let table = run(t.client(&["templates", "--protocol", protocol])).ok();
        assert!(
            table.starts_with("URI TEMPLATE") && table.contains(&template),
            "{table}"
        );

        let values =
            run(t.client(&["complete", "--protocol", protocol, &template, "path", "su"])).ok();
        assert_eq!(
            values.lines().collect::<Vec<_>>(),
            vec!["sub/"],
            "{protocol}"
        );
        let many =
            run(t.client(&["complete", "--protocol", protocol, &template, "path", "n0"])).ok();
        assert_eq!(many.lines().count(), 10, "{protocol}: n00..n09: {many}");
    }
}

/// The four ways to watch: stdio and HTTP, each era. Each sees an update to the file it
/// watches (with --read, its new contents) and a change of the listing.
#[test]
fn watch_prints_updates_and_list_changes_in_each_era_and_transport() {
    let t = Tree::new();
    let serve = t.serve();
    let serve: Vec<&str> = serve.iter().map(String::as_str).collect();
    let (_server, url) = our_http_server(&serve);
    let watched = t.root.join("a.txt");
    let uri = t.uri("a.txt");
    let mut n = 0;
    for (protocol, _) in ERAS {
        for http in [false, true] {
            let mut args = vec!["watch", "--json", "--read", "--protocol", protocol, &uri];
            if http {
                args.extend(["--url", &url]);
            }
            let cmd = if http {
                let mut c = Command::new(bin());
                c.args(&args);
                c
            } else {
                t.client(&args)
            };
            let watch = Lines::spawn(cmd);
            // It says when it is watching, before any change is made.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
            while !watch.stderr().contains('\n') && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            assert_eq!(
                watch.stderr(),
                "watching 1 resource (Ctrl-C stops)\n",
                "{protocol} http={http}"
            );
            let line = watch.poke_until(
                || {
                    n += 1;
                    std::fs::write(&watched, format!("version {n}\n")).unwrap();
                },
                // A read may catch the file between its truncation and its write (empty): a
                // later update carries the text.
                |l| l.contains("notifications/resources/updated") && l.contains("version "),
            );
            let v: Value = serde_json::from_str(&line).unwrap();
            assert_eq!(v["uri"], uri.as_str(), "{protocol} http={http}: {line}");
            let text = v["contents"][0]["text"]
                .as_str()
                .expect("--read adds the contents");
            assert!(text.starts_with("version "), "{text}");

            let mut k = 0;
            let line = watch.poke_until(
                || {
                    k += 1;
                    std::fs::write(t.root.join(format!("new-{protocol}-{http}-{k}.txt")), "x")
                        .unwrap();
                },
                |l| l.contains("list_changed"),
            );
            assert_eq!(line, r#"{"method":"notifications/resources/list_changed"}"#);
            assert_eq!(
                watch.stderr(),
                "watching 1 resource (Ctrl-C stops)\n",
                "{protocol} http={http}"
            );
        }
    }

    // Text mode: one line per update, then the contents with --read.
    let watch = Lines::spawn(t.client(&["watch", "--read", &uri]));
    watch.poke_until(
        || std::fs::write(&watched, "plain text\n").unwrap(),
        |l| l == format!("updated {uri}"),
    );
    assert_eq!(
        watch
            .next_within(std::time::Duration::from_secs(5))
            .as_deref(),
        Some("plain text")
    );
}

#[test]
fn failures_are_one_line_and_a_nonzero_exit() {
    // The status says the class of failure (see failures_exit_with_a_status_per_class).
    let line_of = |out: Out, code: i32| {
        assert_eq!(out.code, Some(code), "{out:?}");
        assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
        assert!(out.stderr.starts_with("error: "), "{}", out.stderr);
        out.stderr
    };

    let mut cmd = Command::new(bin());
    cmd.args(["ls", "--", "/nonexistent/mcp-server"]);
    let e = line_of(run(cmd), 3);
    assert!(
        e.contains("cannot start the server `/nonexistent/mcp-server`"),
        "{e}"
    );

    // A server that exits at once: one error line, then its own last words under it.
    let out = run(client_stdio(&["ls"], &["serve", "/nonexistent/dir"]));
    assert_eq!(out.code, Some(3), "{out:?}");
    let (first, rest) = out.stderr.split_once('\n').expect("more than one line");
    assert!(
        first.starts_with("error: ") && first.contains("exited"),
        "{}",
        out.stderr
    );
    assert!(
        rest.starts_with("the server's last lines on stderr:\n  | ")
            && rest.contains("/nonexistent/dir"),
        "{}",
        out.stderr
    );

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cmd = Command::new(bin());
    cmd.args(["ls", "--url", &format!("http://127.0.0.1:{port}/mcp")]);
    let e = line_of(run(cmd), 3);
    assert!(
        e.contains("cannot reach the server at http://127.0.0.1:") && e.contains("refused"),
        "{e}"
    );

    let mut cmd = Command::new(bin());
    cmd.arg("ls");
    let e = line_of(run(cmd), 2);
    assert!(e.contains("--url") && e.contains("-- COMMAND"), "{e}");

    // Not an MCP server at all: something that prints text and exits.
    let mut cmd = Command::new(bin());
    cmd.args(["ls", "--", "echo", "hello"]);
    let e = line_of(run(cmd), 3);
    assert!(e.contains("not JSON-RPC") || e.contains("exited"), "{e}");

    // A server whose stdout line never ends: the client stops at --max-message-mib
    // instead of holding the line whole.
    let mut cmd = Command::new(bin());
    cmd.args([
        "ls",
        "--max-message-mib",
        "1",
        "--",
        "sh",
        "-c",
        "head -c 3000000 /dev/zero; exec sleep 30",
    ]);
    let e = line_of(run(cmd), 3);
    assert!(
        e.contains("a line of over 1 MiB to stdout") && e.contains("--max-message-mib"),
        "{e}"
    );

    // A bad --header is refused before anything starts, and its value is not echoed.
    let mut cmd = Command::new(bin());
    cmd.args([
        "ls",
        "--url",
        "http://127.0.0.1:9/mcp",
        "--header",
        "Authorization Bearer s3cr3t",
    ]);
    let e = line_of(run(cmd), 2);
    assert!(e.contains("--header") && !e.contains("s3cr3t"), "{e}");
}

/// A stdio server that exits during startup shows its last ten non-blank stderr lines under
/// the error line, not only its last (clap's last is `For more information, try '--help'.`,
/// the real error two lines above it), and no more than 2 KiB of them: a server that logs long
/// lines has each cut to 200 characters and the oldest dropped.
#[test]
fn a_server_that_exits_at_start_shows_its_last_stderr_lines() {
    let mut cmd = Command::new(bin());
    cmd.args(["ls", "--", "sh", "-c"]).arg(
        "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo \"log line $i\" >&2; done; \
         echo \"error: unexpected argument '--bogus' found\" >&2; echo >&2; \
         echo \"Usage: srv [OPTIONS]\" >&2; echo >&2; \
         echo \"For more information, try '--help'.\" >&2; exit 2",
    );
    let out = run(cmd);
    assert_eq!(out.code, Some(3), "{out:?}");
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(
        lines,
        [
            "error: the server `sh` exited (exit status: 2)",
            "the server's last lines on stderr:",
            "  | log line 6",
            "  | log line 7",
            "  | log line 8",
            "  | log line 9",
            "  | log line 10",
            "  | log line 11",
            "  | log line 12",
            "  | error: unexpected argument '--bogus' found",
            "  | Usage: srv [OPTIONS]",
            "  | For more information, try '--help'.",
        ],
        "{}",
        out.stderr
    );

    // Lines of 1,000 two-byte characters: each is cut to 200 characters (400 bytes), and
    // five of them fill the 2 KiB.
    let mut cmd = Command::new(bin());
    cmd.args(["ls", "--", "sh", "-c"]).arg(format!(
        "for i in 1 2 3 4 5 6 7 8; do echo \"$i{}\" >&2; done; exit 3",
        "é".repeat(1000)
    ));
    let out = run(cmd);
    assert_eq!(out.code, Some(3), "{out:?}");
    let shown: Vec<&str> = out
        .stderr
        .lines()
        .filter_map(|l| l.strip_prefix("  | "))
        .collect();
    assert_eq!(shown.len(), 5, "{}", out.stderr);
    for (line, n) in shown.iter().zip(4..) {
        assert!(line.starts_with(&n.to_string()), "{line}");
        assert_eq!(line.chars().count(), 200, "{line}");
    }
    assert!(shown.iter().map(|l| l.len()).sum::<usize>() <= 2048);
}

/// The exit status says what kind of failure it was, one test per class: 2 a command line
/// the client cannot act on (clap's or its own), 3 no connection (the server cannot be
/// started or reached, or it exited), 4 a JSON-RPC error from the server, 5 a tool that
/// reported `isError`, 6 `--timeout`, 1 anything else.
#[test]
fn failures_exit_with_a_status_per_class() {
    let t = Tree::new();
    let code = |cmd: Command| {
        let out = run(cmd);
        assert!(out.stderr.contains("error: "), "{out:?}");
        out.code
    };
    let ours = |args: &[&str]| {
        let mut cmd = Command::new(bin());
        cmd.args(args);
        cmd
    };

    // Usage: clap's own (out of range), no server, a malformed --arg.
    assert_eq!(code(ours(&["ls", "--timeout", "0", "--", "x"])), Some(2));
    assert_eq!(code(ours(&["ls"])), Some(2));
    assert_eq!(code(t.client(&["call", "t", "--arg", "novalue"])), Some(2));

    // Connection: nothing to start, nobody listening, a server that exits.
    assert_eq!(
        code(ours(&["ls", "--", "/nonexistent/mcp-server"])),
        Some(3)
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    assert_eq!(code(ours(&["ls", "--url", &url])), Some(3));
    assert_eq!(
        code(client_stdio(&["ls"], &["serve", "/nonexistent/dir"])),
        Some(3)
    );

    // Protocol: the server answers with a JSON-RPC error (-32002, not found).
    assert_eq!(code(t.client(&["cat", &t.uri("nope.txt")])), Some(4));

    // Tool: the call is answered, with isError.
    let root = t.root.display().to_string();
    let missing = format!("uri={}", t.uri("nope.txt"));
    let mut call = ours(&["call", "read_resource", "--arg", &missing, "--"]);
    call.arg(bin()).args(["serve", "--tools", &root]);
    assert_eq!(code(call), Some(5));

    // Timeout: a server that never answers.
    assert_eq!(
        code(ours(&[
            "ls",
            "--timeout",
            "1",
            "--",
            "sh",
            "-c",
            "while read -r line; do :; done"
        ])),
        Some(6)
    );

    // Anything else: every URI of a watch refused.
    assert_eq!(
        code(t.client(&["watch", "file:///no-such-mount/x.txt"])),
        Some(1)
    );
}

/// `info` shows the server's instructions (ours names its mounts in them) under the rest, in
/// both eras, and in `--json`; `ping` is answered.
#[test]
fn info_shows_instructions_and_ping_is_answered() {
    let t = Tree::new();
    for (protocol, _) in ERAS {
        let text = run(t.client(&["info", "--protocol", protocol])).ok();
        let (head, instructions) = text
            .split_once("instructions:\n")
            .unwrap_or_else(|| panic!("{protocol}: no instructions: {text}"));
        assert!(head.starts_with("server:   mcp-resources "), "{text}");
        assert!(
            instructions.lines().all(|l| l.starts_with("  ")),
            "{protocol}: {text}"
        );
        assert!(
            instructions.contains(&format!("files mount {}", t.root.display())),
            "{protocol}: {text}"
        );
        let json: Value =
            serde_json::from_str(&run(t.client(&["info", "--json", "--protocol", protocol])).ok())
                .unwrap();
        assert!(
            json["instructions"]
                .as_str()
                .is_some_and(|i| i.contains("files mount")),
            "{protocol}: {json}"
        );

        let pong = run(t.client(&["ping", "--protocol", protocol])).ok();
        assert!(
            pong.starts_with("the server answered ping in ") && pong.ends_with(" ms\n"),
            "{protocol}: {pong}"
        );
    }
}

/// `script` gives the command a terminal: a binary is refused there, with the way out named,
/// and a long listing shows a progress line that a pipe never sees.
#[test]
fn on_a_terminal_binary_is_refused_and_ls_shows_progress() {
    let t = Tree::new();
    let b = bin();
    let serve = t.serve();
    let mut words: Vec<&OsStr> = vec![b.as_os_str(), OsStr::new("cat")];
    let img = t.uri("img.bin");
    words.push(OsStr::new(&img));
    words.push(OsStr::new("--"));
    words.push(b.as_os_str());
    words.extend(serve.iter().map(OsStr::new));
    let Some(out) = on_terminal(&words) else {
        return;
    };
    let text = out.text();
    assert_eq!(out.code, Some(1), "{text}");
    assert!(
        text.contains("is binary") && text.contains("-o FILE"),
        "{text}"
    );
    assert!(!text.contains('\u{0}'), "no raw bytes reached the terminal");

    let mut words: Vec<&OsStr> = vec![
        b.as_os_str(),
        OsStr::new("ls"),
        OsStr::new("--"),
        b.as_os_str(),
    ];
    words.extend(serve.iter().map(OsStr::new));
    let out = on_terminal(&words).expect("script was found above");
    let text = out.text();
    assert_eq!(out.code, Some(0), "{text}");
    assert!(
        text.contains("listing resources: 4 so far (1 page)…"),
        "{text}"
    );
    assert!(
        text.contains("\r\u{1b}[K"),
        "the progress line is cleared: {text:?}"
    );
    assert!(text.contains(&t.uri("n29.txt")), "{text}");
}

/// A watch whose server goes away ends with one line and a non-zero exit, in both eras,
/// instead of waiting forever for a notification that cannot come.
#[test]
fn a_watch_whose_server_goes_away_says_so() {
    let t = Tree::new();
    let serve = t.serve();
    let serve: Vec<&str> = serve.iter().map(String::as_str).collect();
    let uri = t.uri("a.txt");
    for (protocol, _) in ERAS {
        let (mut server, url) = our_http_server(&serve);
        let mut cmd = Command::new(bin());
        cmd.args(["watch", "--protocol", protocol, &uri, "--url", &url]);
        let mut watch = Lines::spawn(cmd);
        // Subscribed for sure once an update has come through.
        let mut n = 0;
        watch.poke_until(
            || {
                n += 1;
                std::fs::write(t.root.join("a.txt"), format!("{n}\n")).unwrap();
            },
            |l| l.starts_with("updated "),
        );
        let _ = server.0.kill();
        let _ = server.0.wait();
        // It first tries to reconnect (a few times, the server's `retry:` apart).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(25);
        let status = loop {
            if let Some(s) = watch.child.0.try_wait().unwrap() {
                break s;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{protocol}: the watch outlived its server by 25 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        assert_eq!(status.code(), Some(3), "{protocol}");
        // The stderr reader may lag the exit by a moment.
        std::thread::sleep(std::time::Duration::from_millis(200));
        let err = watch.stderr();
        let (last, before) = err
            .trim_end()
            .lines()
            .collect::<Vec<_>>()
            .split_last()
            .map(|(l, b)| (*l, b.to_vec()))
            .expect("stderr");
        assert!(last.starts_with("error: "), "{protocol}: {err}");
        assert_eq!(
            before.first(),
            Some(&"watching 1 resource (Ctrl-C stops)"),
            "{protocol}: {err}"
        );
        assert!(
            before[1..].iter().all(|l| l.starts_with("warning: ")),
            "{protocol}: {err}"
        );
    }
}

/// A URI the server will not watch is warned about and the others are watched, the same in
/// both eras (a refused `resources/subscribe`, or a URI the listen's acknowledgment leaves
/// out); when every URI is refused the watch ends at once, exit 1, instead of waiting for
/// notifications that cannot come.
#[test]
fn watch_warns_about_refused_uris_and_fails_when_nothing_is_watched() {
    let t = Tree::new();
    let refused = "file:///no-such-mount/x.txt";
    let uri = t.uri("a.txt");
    let warning = format!("warning: the server will not watch {refused}: ");
    for (protocol, _) in ERAS {
        let out = run(t.client(&["watch", "--protocol", protocol, refused]));
        assert_eq!(out.code, Some(1), "{protocol}: {out:?}");
        let lines: Vec<&str> = out.stderr.lines().collect();
        assert_eq!(lines.len(), 2, "{protocol}: {}", out.stderr);
        assert!(lines[0].starts_with(&warning), "{protocol}: {}", out.stderr);
        assert_eq!(
            lines[1], "error: nothing to watch: the server refused every URI given",
            "{protocol}"
        );

        let watch = Lines::spawn(t.client(&["watch", "--protocol", protocol, refused, &uri]));
        let mut n = 0;
        watch.poke_until(
            || {
                n += 1;
                std::fs::write(t.root.join("a.txt"), format!("{protocol} {n}\n")).unwrap();
            },
            |l| l == format!("updated {uri}"),
        );
        let err = watch.stderr();
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 2, "{protocol}: {err}");
        assert!(lines[0].starts_with(&warning), "{protocol}: {err}");
        assert_eq!(
            lines[1], "watching 1 resource (Ctrl-C stops)",
            "{protocol}: {err}"
        );
    }
}

/// A server whose first mount is down (an S3 endpoint on a closed port): `ls` still lists
/// every file, following the cursors past it, and says on stderr, once, which mount the
/// listing left out and why; stdout stays the listing alone.
#[test]
fn ls_over_a_dead_mount_lists_the_rest_and_says_what_it_left_out() {
    let t = Tree::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = t.root.parent().unwrap().join("dead.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\npage_size = 4\n[[mount]]\nkind = \"s3\"\nbucket = \"gone\"\nregion = \"us-east-1\"\nendpoint = \"http://127.0.0.1:{port}\"\nallow_http = true\naccess_key_id = \"AKIADEAD\"\nsecret_access_key = \"dead-secret\"\n[[mount]]\nkind = \"files\"\nroot = \"{}\"\n",
            t.root.display()
        ),
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let out = run(client_stdio(
        &["ls", "--json"],
        &["serve", "--log-level", "error", "--config", config],
    ));
    let uris = json_uris(&out.ok());
    assert_eq!(uris.len(), NUMBERED + 3, "{uris:?}");
    let warnings: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.starts_with("warning: "))
        .collect();
    assert_eq!(warnings.len(), 1, "{}", out.stderr);
    let expected = format!(
        "warning: resources/list left out all of s3://gone/: s3 endpoint http://127.0.0.1:{port} for bucket `gone` cannot be reached while listing (after retries)"
    );
    assert_eq!(warnings[0], expected);
    assert!(!out.stderr.contains("dead-secret"));
}

/// A `watch` over HTTP whose connection is cut (by a proxy in between) carries on. In the
/// legacy era it reconnects after the server's `retry:` with `Last-Event-ID`, and the change
/// made while it was cut off is replayed without another poke; in 2026-07-28, which has no
/// resumption, it listens again and says on stderr that changes may have been missed.
#[test]
fn a_watch_survives_a_cut_connection_in_each_era() {
    let t = Tree::new();
    let serve = t.serve();
    let serve: Vec<&str> = serve.iter().map(String::as_str).collect();
    let (_server, url) = our_http_server(&serve);
    let upstream = url
        .strip_prefix("http://")
        .and_then(|u| u.split('/').next())
        .expect("host:port")
        .to_owned();
    let uri = t.uri("a.txt");
    for (protocol, _) in ERAS {
        let proxy = client_common::CuttingProxy::new(&upstream);
        let via = format!("http://{}/mcp", proxy.addr);
        let mut cmd = Command::new(bin());
        cmd.args(["watch", "--protocol", protocol, &uri, "--url", &via]);
        let watch = Lines::spawn(cmd);
        let mut n = 0;
        watch.poke_until(
            || {
                n += 1;
                std::fs::write(t.root.join("a.txt"), format!("{protocol} {n}\n")).unwrap();
            },
            |l| l == format!("updated {uri}"),
        );
        // Whatever else the first poke loop queued is read before the cut.
        while watch
            .next_within(std::time::Duration::from_millis(500))
            .is_some()
        {}
        proxy.cut();
        if protocol == "legacy" {
            // One change while cut off, and no more: it must come from the replay.
            std::thread::sleep(std::time::Duration::from_millis(300));
            std::fs::write(t.root.join("a.txt"), "while cut off\n").unwrap();
            let line = watch.next_within(std::time::Duration::from_secs(15));
            assert_eq!(
                line.as_deref(),
                Some(format!("updated {uri}").as_str()),
                "stderr: {}",
                watch.stderr()
            );
            let err = watch.stderr();
            assert!(err.contains("reconnecting in "), "{err}");
            assert!(err.contains("resuming after event "), "{err}");
        } else {
            let mut k = 0;
            watch.poke_until(
                || {
                    k += 1;
                    std::fs::write(t.root.join("a.txt"), format!("after the cut {k}\n")).unwrap();
                },
                |l| l == format!("updated {uri}"),
            );
            let err = watch.stderr();
            assert!(err.contains("listening again in "), "{err}");
            assert!(err.contains("may have been missed"), "{err}");
        }
        assert!(
            watch
                .stderr()
                .lines()
                .all(|l| l.starts_with("warning: ") || l == "watching 1 resource (Ctrl-C stops)"),
            "{protocol}: {}",
            watch.stderr()
        );
    }
}

/// A legacy stdio server in Python's standard library that offers logging: `logging/setLevel`
/// is answered, then it sends a log message naming the level asked for and one whose data is
/// an object with a terminal escape, and waits for the end of its input.
const LOGGING_SERVER: &str = r#"
import json, sys
def send(m):
    sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m:
        continue
    method = m.get("method")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": m["id"], "result": {"protocolVersion": "2025-11-25",
              "capabilities": {"logging": {}}, "serverInfo": {"name": "logs", "version": "1"}}})
    elif method == "logging/setLevel":
        send({"jsonrpc": "2.0", "id": m["id"], "result": {}})
        level = m["params"]["level"]
        send({"jsonrpc": "2.0", "method": "notifications/message",
              "params": {"level": "info", "logger": "app", "data": "level set to " + level}})
        send({"jsonrpc": "2.0", "method": "notifications/message",
              "params": {"level": "error", "data": {"disk": "full\u001b[2J"}}})
    else:
        send({"jsonrpc": "2.0", "id": m["id"], "error": {"code": -32601, "message": "no " + method}})
"#;

/// `log-level LEVEL` sends `logging/setLevel` with that level, says on stderr that it is
/// logging, and prints each log message as `[LEVEL] LOGGER: DATA` (an object's data as one
/// line of JSON) until interrupted; `--json` prints each message's params as sent.
#[test]
fn log_level_sets_the_level_and_prints_log_messages() {
    if Command::new("python3").arg("--version").output().is_err() {
        absent::<()>("python3", "not on PATH");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("logs.py");
    std::fs::write(&script, LOGGING_SERVER).unwrap();
    let mut cmd = Command::new(bin());
    cmd.args(["log-level", "warning", "--", "python3"])
        .arg(&script);
    let logs = Lines::spawn(cmd);
    let within = std::time::Duration::from_secs(15);
    assert_eq!(
        logs.next_within(within).as_deref(),
        Some("[info] app: level set to warning"),
        "{}",
        logs.stderr()
    );
    assert_eq!(
        logs.next_within(within).as_deref(),
        Some(r#"[error] {"disk":"full\u001b[2J"}"#)
    );
    // The stderr reader may lag stdout's by a moment.
    let deadline = std::time::Instant::now() + within;
    while logs.stderr().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(logs.stderr(), "logging at warning (Ctrl-C stops)\n");
    drop(logs);

    let mut cmd = Command::new(bin());
    cmd.args(["log-level", "debug", "--json", "--", "python3"])
        .arg(&script);
    let logs = Lines::spawn(cmd);
    let line = logs.next_within(within).expect("a log line");
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"level": "info", "logger": "app", "data": "level set to debug"})
    );
}
