//! `serve` as a user starts it: mounts that would serve the same URIs are refused before
//! anything is served, `[http] listen` serves HTTP as `--http` does (which overrides it), a
//! stdio server with no stdin to read says so and fails, and `--log-level` decides whose
//! logs reach stderr.

mod client_common;

use std::io::{BufRead as _, Read as _, Write as _};
use std::process::{Command, Stdio};
use std::time::Duration;

use client_common::{Guard, bin, client_stdio, run};

/// `serve` with `args`, stdin at `/dev/null` as under systemd or docker; the process and
/// the address it announces serving HTTP on, or its exit code and stderr when it announces
/// none and ends.
fn serve_detached(args: &[&str]) -> Result<(Guard, String), (Option<i32>, String)> {
    let mut child = Command::new(bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut all = String::new();
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if let Some(url) = line.split("serving MCP on http://").nth(1) {
                let _ = tx.send(Ok(url.split('/').next().unwrap_or_default().to_owned()));
            }
            all.push_str(&line);
            all.push('\n');
        }
        let _ = tx.send(Err(all));
    });
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(Ok(addr)) => Ok((Guard(child), addr)),
        Ok(Err(stderr)) => Err((child.wait().unwrap().code(), stderr)),
        Err(_) => {
            let _ = child.kill();
            panic!("serve {args:?} neither served HTTP nor ended within 20 s")
        }
    }
}

/// `GET /healthz` on `addr`: the status line.
fn healthz(addr: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    answer.lines().next().unwrap_or_default().to_owned()
}

/// A free loopback address.
fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// `check-config` prints `http: listen=ADDR`, and `serve --config` listens there, with no
/// `--http` and stdin at `/dev/null`; `--http` given as well wins, and the config's address
/// is then left free.
#[test]
fn http_listen_in_the_config_serves_http_and_the_flag_overrides_it() {
    let dir = tempfile::tempdir().unwrap();
    let listen = free_addr();
    let cfg = dir.path().join("h.toml");
    std::fs::write(
        &cfg,
        format!("[http]\nlisten = \"{listen}\"\n[[mount]]\nkind = \"files\"\nroot = \".\"\n"),
    )
    .unwrap();
    let cfg_s = cfg.display().to_string();
    let mut check = Command::new(bin());
    check.args(["check-config", &cfg_s]);
    assert!(
        run(check).ok().contains(&format!("http: listen={listen} ")),
        "check-config shows the address"
    );

    let (_server, addr) = serve_detached(&["serve", "--config", &cfg_s])
        .unwrap_or_else(|(code, err)| panic!("no HTTP from [http] listen: {code:?}\n{err}"));
    assert_eq!(addr, listen);
    assert!(healthz(&addr).contains(" 200 "), "{}", healthz(&addr));
    drop(_server);

    let flag = free_addr();
    let (_server, addr) = serve_detached(&["serve", "--config", &cfg_s, "--http", &flag])
        .unwrap_or_else(|(code, err)| panic!("no HTTP from --http: {code:?}\n{err}"));
    assert_eq!(addr, flag);
    assert!(healthz(&flag).contains(" 200 "));
    assert!(
        std::net::TcpStream::connect(&listen).is_err(),
        "--http overrides [http] listen: nothing listens on {listen}"
    );
}

/// A stdio server started with stdin at `/dev/null` (systemd, docker without `-i`, nohup) or
/// closed
/// and no HTTP address has no client and never will: it says so, naming both ways to serve
/// HTTP, and exits 1 instead of 0 with nothing served. An `[http]` table without `listen`
/// does not make it HTTP.
#[test]
fn a_stdio_server_with_stdin_at_dev_null_says_so_and_exits_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let cfg = dir.path().join("no-listen.toml");
    std::fs::write(
        &cfg,
        format!("[http]\nmax_sessions = 5\n[[mount]]\nkind = \"files\"\nroot = \"{d}\"\n"),
    )
    .unwrap();
    let cfg_s = cfg.display().to_string();
    for args in [vec!["serve", &d], vec!["serve", "--config", &cfg_s]] {
        let (code, stderr) = serve_detached(&args).map(|_| ()).unwrap_err();
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("stdin is closed or /dev/null")
                && stderr.contains("--http ADDR")
                && stderr.contains("`[http] listen`"),
            "{args:?}: {stderr}"
        );
    }
    // Started with stdin closed (`<&-`), as some supervisors do: the same refusal.
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "exec {:?} serve {d:?} <&-",
            env!("CARGO_BIN_EXE_mcp-resources")
        ))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stdin closed: {stderr}");
    assert!(stderr.contains("stdin is closed or /dev/null"), "{stderr}");
}

/// `serve DIR DIR/reports` would list every report twice under one URI: refused, both named,
/// in either order, from the command line and from a config file; a sibling that only shares
/// the start of the name (`DIR-old`) is not inside and is served.
#[test]
fn nested_roots_are_refused_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let docs = base.join("docs");
    let reports = docs.join("reports");
    let sibling = base.join("docs-old");
    std::fs::create_dir_all(&reports).unwrap();
    std::fs::create_dir_all(&sibling).unwrap();
    std::fs::write(reports.join("q1.md"), "q1").unwrap();
    std::fs::write(sibling.join("old.md"), "old").unwrap();
    let (docs_s, reports_s) = (docs.display().to_string(), reports.display().to_string());

    for order in [[&docs_s, &reports_s], [&reports_s, &docs_s]] {
        let mut cmd = Command::new(bin());
        cmd.args(["serve", order[0], order[1]]);
        let out = run(cmd);
        assert_eq!(out.code, Some(1), "{out:?}");
        assert!(
            out.stderr
                .contains(&format!("mount {reports_s} (file://{reports_s})"))
                && out
                    .stderr
                    .contains(&format!("inside mount {docs_s} (file://{docs_s})"))
                && out.stderr.contains("listed twice"),
            "{}",
            out.stderr
        );
    }

    let config = base.join("nested.toml");
    std::fs::write(
        &config,
        format!(
            "[[mount]]\nkind = \"files\"\nroot = \"{reports_s}\"\n[[mount]]\nkind = \"files\"\nroot = \"{docs_s}\"\n"
        ),
    )
    .unwrap();
    let mut cmd = Command::new(bin());
    cmd.arg("check-config").arg(&config);
    let out = run(cmd);
    assert_eq!(out.code, Some(1), "{out:?}");
    // check-config prints one line per finding on stdout and the count on stderr.
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("is inside mount"), "{report}");
    assert!(
        out.stderr.contains("1 of 2 mounts failed"),
        "{}",
        out.stderr
    );

    let listed = run(client_stdio(
        &["ls"],
        &[
            "serve",
            "--log-level",
            "warn",
            &docs_s,
            &sibling.display().to_string(),
        ],
    ))
    .ok();
    assert!(
        listed.contains("reports/q1.md") && listed.contains("docs-old/old.md"),
        "{listed}"
    );
}

/// The level and target of each log line (`TIMESTAMP LEVEL target: message`).
fn log_lines(stderr: &str) -> Vec<(String, String)> {
    stderr
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let _time = words.next()?;
            let level = words.next()?;
            if !matches!(level, "TRACE" | "DEBUG" | "INFO" | "WARN" | "ERROR") {
                return None;
            }
            // Spans come before the target; the target is the first word ending in ':' that
            // is not a span (`name{…}:`).
            let target = words.find(|w| w.ends_with(':') && !w.contains('{'))?;
            Some((level.to_owned(), target.trim_end_matches(':').to_owned()))
        })
        .collect()
}

fn ours(target: &str) -> bool {
    target.starts_with("mcp_resources") || target.starts_with("mcpr_")
}

/// A stdio server at `--log-level debug` (and `RUST_LOG` as given) that answers a
/// handshake, a listing and a read; its stderr.
fn debug_session(rust_log: Option<&str>) -> String {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.md"), "# a\n").unwrap();
    let uri = format!(
        "file://{}/a.md",
        dir.path().canonicalize().unwrap().display()
    );
    let mut cmd = Command::new(bin());
    cmd.args(["serve", "--log-level", "debug"])
        .arg(dir.path())
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(f) = rust_log {
        cmd.env("RUST_LOG", f);
    }
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for line in [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":2,"method":"resources/list","params":{}}"#.to_owned(),
        format!(r#"{{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{{"uri":"{uri}"}}}}"#),
    ] {
        writeln!(stdin, "{line}").unwrap();
    }
    // The answers first: closing stdin before them could end the session unanswered.
    let stdout = child.stdout.take().unwrap();
    let answers = std::io::BufRead::lines(std::io::BufReader::new(stdout))
        .map_while(Result::ok)
        .take(3)
        .count();
    assert_eq!(answers, 3);
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `--log-level debug` is our crates' debug lines, not every dependency's; `RUST_LOG` still
/// decides when set.
#[test]
fn debug_logs_are_ours_and_dependencies_stay_at_warn() {
    let stderr = debug_session(None);
    let lines = log_lines(&stderr);
    assert!(
        lines.iter().any(|(l, t)| l == "DEBUG" && ours(t)),
        "no debug line of ours: {stderr}"
    );
    let theirs: Vec<_> = lines
        .iter()
        .filter(|(l, t)| !ours(t) && matches!(l.as_str(), "DEBUG" | "TRACE" | "INFO"))
        .collect();
    assert!(theirs.is_empty(), "{theirs:?}\n{stderr}");

    let stderr = debug_session(Some("debug"));
    assert!(
        log_lines(&stderr)
            .iter()
            .any(|(l, t)| l == "DEBUG" && !ours(t)),
        "RUST_LOG=debug shows the dependencies' debug lines too: {stderr}"
    );
}
