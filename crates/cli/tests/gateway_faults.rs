//! A gateway mount's upstream failing under load: killed while a listing and while a read
//! wait on it (the gateway restarts it), and sending an answer of hundreds of MiB. The
//! upstream is a small Python program speaking JSON-RPC on stdio whose list and read block
//! while a control file says so, and which writes where it got to into a folder of marks.
//! The gateway runs over HTTP (one process throughout) beside a local files mount. And the
//! gateway killed outright, which must take its stdio upstream and all it started along; an
//! upstream whose templates change, after its `list_changed` and after a restart; a
//! 2026-07-28 upstream that refuses listens and ends the streams it accepted; and hung
//! upstreams, which cost the start one wait, not one each.

mod client_common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use client_common::{
    Out, absent, bin, our_http_server, python3, run, running, within_memory_budget,
};

const UPSTREAM: &str = r#"
import json, os, sys, time
marks = sys.argv[1]
out = sys.stdout
def mark(name, text=""):
    with open(os.path.join(marks, name + ".tmp"), "w") as f:
        f.write(text)
    os.rename(os.path.join(marks, name + ".tmp"), os.path.join(marks, name))
def block(what):
    # Hung until killed while the test asks for it; the restarted process is not.
    if os.path.exists(os.path.join(marks, "block-" + what)):
        mark(what + "-blocked", str(os.getpid()))
        while True:
            time.sleep(1)
def send(obj):
    out.write(json.dumps(obj) + "\n"); out.flush()
for line in sys.stdin:
    try:
        msg = json.loads(line)
    except Exception:
        continue
    method, mid = msg.get("method"), msg.get("id")
    if mid is None:
        continue
    p = msg.get("params") or {}
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": p.get("protocolVersion", "2025-11-25"),
              "capabilities": {"resources": {}}, "serverInfo": {"name": "faulty", "version": "1.0"}}})
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
    elif method == "resources/templates/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"resourceTemplates": []}})
    elif method == "resources/list":
        if p.get("cursor") == "p2":
            block("list")
            send({"jsonrpc": "2.0", "id": mid, "result": {"resources": [{"uri": "x://c", "name": "c"}]}})
        else:
            send({"jsonrpc": "2.0", "id": mid, "result": {"resources": [
                {"uri": "x://a", "name": "a"}, {"uri": "x://b", "name": "b"}], "nextCursor": "p2"}})
    elif method == "resources/read":
        uri = p.get("uri")
        if uri == "x://slow":
            block("read")
        if uri == "x://huge":
            # One answer of HUGE_MIB MiB, written as it is made: never held here either.
            out.write('{"jsonrpc":"2.0","id":%s,"result":{"contents":[{"uri":"x://huge","text":"' % json.dumps(mid))
            chunk = "b" * (1 << 20)
            for _ in range(int(os.environ.get("HUGE_MIB", "512"))):
                out.write(chunk)
            out.write('"}]}}\n'); out.flush()
            mark("huge-sent")
            continue
        send({"jsonrpc": "2.0", "id": mid, "result": {"contents": [{"uri": uri, "text": "fine " + uri}]}})
    else:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no " + str(method)}})
"#;

/// The request timeout of the gateway mount (`timeout_ms`).
const TIMEOUT: Duration = Duration::from_secs(15);

/// A gateway over HTTP with a local files mount and the mount `slow` of the Python upstream
/// (`max_message_bytes` as given); returns the gateway, its URL, the marks folder and the
/// local file's URI.
struct Setup {
    _tmp: tempfile::TempDir,
    gateway: client_common::Guard,
    url: String,
    marks: PathBuf,
    local: String,
}

fn setup(python: &str, max_message: &str) -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("faulty.py");
    std::fs::write(&script, UPSTREAM).unwrap();
    let marks = tmp.path().join("marks");
    std::fs::create_dir(&marks).unwrap();
    let local = tmp.path().join("local");
    std::fs::create_dir(&local).unwrap();
    std::fs::write(local.join("a.md"), "local\n").unwrap();
    let gw = tmp.path().join("gateway.toml");
    std::fs::write(
        &gw,
        format!(
            "[server]\npage_size = 2\n\n[[mount]]\nkind = \"files\"\nroot = {:?}\n\n[[mount]]\nkind = \"mcp\"\nname = \"slow\"\ncommand = {python:?}\nargs = [{:?}, {:?}]\nenv = {{ HUGE_MIB = \"1024\" }}\nprotocol = \"legacy\"\ntimeout_ms = {}\nmax_message_bytes = {max_message:?}\n",
            local.display().to_string(),
            script.display().to_string(),
            marks.display().to_string(),
            TIMEOUT.as_millis()
        ),
    )
    .unwrap();
    let gw = gw.display().to_string();
    let (gateway, url) = our_http_server(&["serve", "--config", &gw]);
    Setup {
        local: format!("file://{}", local.join("a.md").display()),
        _tmp: tmp,
        gateway,
        url,
        marks,
    }
}

impl Setup {
    /// The terminal client with `args` against the gateway.
    fn client(&self, args: &[&str]) -> Command {
        let mut c = Command::new(bin());
        c.args(args).args(["--url", &self.url]);
        c
    }

    /// `cat uri`, run to its end.
    fn cat(&self, uri: &str) -> Out {
        run(self.client(&["cat", uri]))
    }

    /// Wait for the mark `name` (within 20 s); its text.
    fn mark(&self, name: &str) -> String {
        let path = self.marks.join(name);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(text) = std::fs::read_to_string(&path) {
                return text;
            }
            assert!(Instant::now() < deadline, "no mark {name}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Until the upstream answers a read again (the gateway restarted it), within 20 s.
    fn serving_again(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let out = self.cat("slow+x://a");
            if out.code == Some(0) {
                assert_eq!(out.text(), "fine x://a");
                return;
            }
            assert!(Instant::now() < deadline, "not back: {out:?}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// A counter of the gateway's `/metrics` for the mcp mount.
    fn counter(&self, name: &str) -> u64 {
        client_common::mount_counter(&self.url, name, "slow")
    }
}

/// Kill the upstream process `pid` (it is the gateway's child; the test only knows it from
/// the mark it wrote).
fn kill(pid: &str) {
    let status = Command::new("kill")
        .args(["-KILL", pid.trim()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {pid}");
}

/// `cmd` run on a thread, timed from now.
fn started(cmd: Command) -> std::thread::JoinHandle<(Out, Duration)> {
    std::thread::spawn(move || {
        let t = Instant::now();
        let out = run(cmd);
        (out, t.elapsed())
    })
}

/// The upstream killed while a read and then a listing wait on it: each answers within the
/// request timeout, the read with an error naming the mount, the listing with the other
/// mounts and the mount named as left out; the local mount serves throughout; the gateway
/// starts the upstream again and reads and listings through it work as before.
#[test]
fn an_upstream_killed_mid_read_and_mid_list_costs_only_its_mount() {
    let Some(python) = python3().or_else(|| absent("python3", "not on PATH")) else {
        return;
    };
    let s = setup(&python, "32MiB");
    assert_eq!(s.cat("slow+x://a").ok(), "fine x://a");
    let connects = s.counter("mcpr_mcp_connects_total");

    // Mid-read.
    std::fs::write(s.marks.join("block-read"), "").unwrap();
    let read = started(s.client(&["cat", "slow+x://slow"]));
    let pid = s.mark("read-blocked");
    // While the upstream hangs, the other mount answers at once.
    let t = Instant::now();
    assert_eq!(s.cat(&s.local).ok(), "local\n");
    assert!(t.elapsed() < TIMEOUT / 2, "{:?}", t.elapsed());
    std::fs::remove_file(s.marks.join("block-read")).unwrap();
    kill(&pid);
    let (out, took) = read.join().unwrap();
    assert_ne!(out.code, Some(0), "{out:?}");
    assert!(
        out.stderr.contains("mcp mount \"slow\"")
            && out.stderr.contains("unavailable")
            && !out.stderr.contains("did not answer"),
        "the connection's end, not the timeout: {}",
        out.stderr
    );
    assert!(
        took < TIMEOUT,
        "answered within the request timeout: {took:?}"
    );
    s.serving_again();
    assert!(s.counter("mcpr_mcp_connects_total") > connects, "restarted");

    // Mid-list: our page size is 2, so the local file and x://a make the first page, and
    // the second needs the upstream's second page, which hangs.
    std::fs::write(s.marks.join("block-list"), "").unwrap();
    let list = started(s.client(&["ls", "--json"]));
    let pid = s.mark("list-blocked");
    assert_eq!(s.cat(&s.local).ok(), "local\n");
    std::fs::remove_file(s.marks.join("block-list")).unwrap();
    kill(&pid);
    let (out, took) = list.join().unwrap();
    assert_eq!(out.code, Some(0), "the listing goes on: {out:?}");
    let text = out.text();
    assert!(
        text.contains(&s.local) && text.contains("slow+x://a"),
        "{text}"
    );
    assert!(
        out.stderr.contains("left out the rest of slow+")
            && out.stderr.contains("mcp mount \"slow\""),
        "{}",
        out.stderr
    );
    assert!(
        took < TIMEOUT,
        "answered within the request timeout: {took:?}"
    );
    s.serving_again();
    let listed = run(s.client(&["ls", "--json"])).ok();
    for uri in ["slow+x://a", "slow+x://b", "slow+x://c"] {
        assert!(listed.contains(uri), "{listed}");
    }
    within_memory_budget(
        s.gateway.0.id(),
        HUNG_BUDGET_MIB,
        "a hung upstream, killed twice",
    );
    drop(s.gateway);
}

/// The gateway's resident memory budget through a hung upstream: its own footprint (about
/// 50 MiB in a debug build) with room to spare, nothing of the hung requests kept past
/// their answers.
const HUNG_BUDGET_MIB: u64 = 96;

/// The budget of the gateway's peak resident memory (VmHWM) while it refuses a 1 GiB
/// answer under `max_message_bytes = "16MiB"`: the gateway's own footprint and at most one
/// message's worth of buffers; holding the answer would take 1 GiB.
const HUGE_BUDGET_MIB: u64 = 128;

/// An answer of 1 GiB (streamed by the upstream, never held by the test) is refused with
/// the limit named, at once rather than after the timeout; the gateway's peak memory stays
/// under [`HUGE_BUDGET_MIB`]; the connection lives on and answers the next read, and the
/// local mount serves throughout.
#[test]
fn a_huge_answer_is_refused_naming_the_limit_within_a_memory_budget() {
    let Some(python) = python3().or_else(|| absent("python3", "not on PATH")) else {
        return;
    };
    let s = setup(&python, "16MiB");
    assert_eq!(s.cat("slow+x://a").ok(), "fine x://a");
    let connects = s.counter("mcpr_mcp_connects_total");
    let t = Instant::now();
    let out = s.cat("slow+x://huge");
    assert_ne!(out.code, Some(0), "{out:?}");
    assert!(
        out.stderr.contains("max_message_bytes")
            && out.stderr.contains("mcp mount \"slow\"")
            && out.stderr.contains("16777216"),
        "{}",
        out.stderr
    );
    assert!(
        t.elapsed() < TIMEOUT,
        "refused, not timed out: {:?}",
        t.elapsed()
    );
    assert_eq!(s.cat(&s.local).ok(), "local\n");
    // The whole answer went through the gateway (the upstream wrote its last byte).
    s.mark("huge-sent");
    within_memory_budget(s.gateway.0.id(), HUGE_BUDGET_MIB, "a 1 GiB answer");
    assert_eq!(s.cat("slow+x://a").ok(), "fine x://a");
    assert_eq!(
        s.counter("mcpr_mcp_connects_total"),
        connects,
        "the same connection"
    );
}

/// A stdio upstream that starts a helper which outlives it on purpose: in a session of its
/// own, deaf to SIGTERM and to its stdin's end (what `npx` leaves when its node goes astray).
const FORKING: &str = r#"
import json, os, signal, sys, time
marks = sys.argv[1]
def mark(name, text):
    with open(os.path.join(marks, name + ".tmp"), "w") as f:
        f.write(text)
    os.rename(os.path.join(marks, name + ".tmp"), os.path.join(marks, name))
if os.fork() == 0:
    os.setsid()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    mark("grandchild", str(os.getpid()))
    while True:
        time.sleep(1)
mark("upstream", str(os.getpid()))
out = sys.stdout
def send(obj):
    out.write(json.dumps(obj) + "\n"); out.flush()
for line in sys.stdin:
    msg = json.loads(line)
    method, mid = msg.get("method"), msg.get("id")
    if mid is None:
        continue
    p = msg.get("params") or {}
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": p.get("protocolVersion", "2025-11-25"),
              "capabilities": {"resources": {}}, "serverInfo": {"name": "forking", "version": "1.0"}}})
    elif method == "resources/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"resources": [{"uri": "x://a", "name": "a"}]}})
    elif method == "resources/read":
        pass  # hung: never answers a read
    elif method in ("ping", "resources/templates/list"):
        send({"jsonrpc": "2.0", "id": mid, "result": {"resourceTemplates": []} if method != "ping" else {}})
    else:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no " + str(method)}})
"#;

/// Kills the processes it names when dropped, so that a failed run leaves none behind.
struct KillAfter(Vec<String>);

impl Drop for KillAfter {
    fn drop(&mut self) {
        for pid in self.0.iter().filter(|p| running(p)) {
            // No assertion: this may run while the test panics.
            let _ = Command::new("kill").args(["-KILL", pid.trim()]).status();
        }
    }
}

/// A gateway over HTTP whose one mount `mount` runs the Python upstream `script` (after
/// [`client_common::PY_UPSTREAM`]; a stdio
/// server given a marks folder as its argument, spoken to in the era `protocol`), with
/// `more` added to the mount's settings; `prepare` fills the marks folder before the gateway starts. The temporary
/// folder, the marks folder, the gateway and its URL; `None` (a skip) without python3.
fn script_gateway(
    script: &str,
    mount: &str,
    protocol: &str,
    more: &str,
    prepare: impl FnOnce(&Path),
) -> Option<(tempfile::TempDir, PathBuf, client_common::Guard, String)> {
    let python = python3().or_else(|| absent("python3", "not on PATH"))?;
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join(format!("{mount}.py"));
    std::fs::write(&path, [client_common::PY_UPSTREAM, script].concat()).unwrap();
    let marks = tmp.path().join("marks");
    std::fs::create_dir(&marks).unwrap();
    prepare(&marks);
    let gw = tmp.path().join("gateway.toml");
    std::fs::write(
        &gw,
        format!(
            "[[mount]]\nkind = \"mcp\"\nname = \"{mount}\"\ncommand = {python:?}\nargs = [{:?}, {:?}]\nprotocol = \"{protocol}\"\n{more}",
            path.display().to_string(),
            marks.display().to_string()
        ),
    )
    .unwrap();
    let gw = gw.display().to_string();
    let (gateway, url) = our_http_server(&["serve", "--config", &gw]);
    Some((tmp, marks, gateway, url))
}

/// A gateway over HTTP whose one mount `f` runs [`FORKING`] (with `more` added to the mount's
/// settings), once it listed: the gateway, its URL, and the pids of the upstream and of the
/// helper it started (killed when this is dropped, should a test fail).
struct Forking {
    gateway: client_common::Guard,
    url: String,
    upstream: String,
    grandchild: String,
    _cleanup: KillAfter,
    _tmp: tempfile::TempDir,
}

impl Forking {
    fn start(more: &str) -> Option<Self> {
        let (tmp, marks, gateway, url) = script_gateway(FORKING, "f", "legacy", more, |_| {})?;
        let ls = |url: &str| {
            let mut c = Command::new(bin());
            c.args(["ls", "--url", url]);
            run(c).ok()
        };
        let listed = ls(&url);
        assert!(listed.contains("f+x://a"), "{listed}");
        let read = |name: &str| std::fs::read_to_string(marks.join(name)).unwrap();
        let (upstream, grandchild) = (read("upstream"), read("grandchild"));
        assert!(running(&upstream) && running(&grandchild));
        Some(Self {
            gateway,
            url,
            _cleanup: KillAfter(vec![upstream.clone(), grandchild.clone()]),
            upstream,
            grandchild,
            _tmp: tmp,
        })
    }

    fn client(&self, args: &[&str]) -> Out {
        let mut c = Command::new(bin());
        c.args(args).args(["--url", &self.url]);
        run(c)
    }

    /// Asserts that the upstream and its helper are both gone within 2 s of `since`,
    /// having outlived `what` otherwise.
    fn gone_within_2s(&self, since: Instant, what: &str) {
        while (running(&self.upstream) || running(&self.grandchild))
            && since.elapsed() < Duration::from_secs(2)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!running(&self.upstream), "the upstream outlived {what}");
        assert!(
            !running(&self.grandchild),
            "the upstream's helper outlived {what}"
        );
    }
}

/// The forking upstream, hung: the gateway ends the connection after three reads without an
/// answer (and connects again); the upstream and the helper it started, which left its
/// process group, are gone within 2 s of that, while the gateway serves on.
#[test]
fn a_connection_ended_by_the_gateway_leaves_no_helper_behind() {
    let Some(f) = Forking::start("timeout_ms = 1000\n") else {
        return;
    };
    for _ in 0..3 {
        let hung = f.client(&["cat", "f+x://a"]);
        assert!(hung.stderr.contains("did not answer"), "{hung:?}");
    }
    f.gone_within_2s(Instant::now(), "its connection");
    // Connected again (after its backoff), to a new upstream.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f.client(&["ls"]).text().contains("f+x://a") {
        assert!(Instant::now() < deadline, "never connected again");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The gateway killed with SIGKILL, which runs no code of ours: within 2 s its stdio
/// upstream is gone, and so is the helper that upstream started, though the helper left the
/// upstream's process group and session and ignores SIGTERM and its stdin's end.
#[test]
fn a_killed_gateway_leaves_no_upstream_process_behind() {
    let Some(mut f) = Forking::start("") else {
        return;
    };
    f.gateway.0.kill().unwrap();
    let _ = f.gateway.0.wait();
    f.gone_within_2s(Instant::now(), "the gateway");
}

/// A stdio upstream whose templates are what the file `templates.json` in its marks folder
/// says when asked; a read of `x://bump` answers and then announces a list change.
const CHANGING: &str = r#"
import json, os, sys
marks = sys.argv[1]
with open(os.path.join(marks, "pid.tmp"), "w") as f:
    f.write(str(os.getpid()))
os.rename(os.path.join(marks, "pid.tmp"), os.path.join(marks, "pid"))
out = sys.stdout
def send(obj):
    out.write(json.dumps(obj) + "\n"); out.flush()
for line in sys.stdin:
    msg = json.loads(line)
    method, mid = msg.get("method"), msg.get("id")
    if mid is None:
        continue
    p = msg.get("params") or {}
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": p.get("protocolVersion", "2025-11-25"),
              "capabilities": {"resources": {"listChanged": True}}, "serverInfo": {"name": "changing", "version": "1.0"}}})
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
    elif method == "resources/templates/list":
        with open(os.path.join(marks, "templates.json")) as f:
            send({"jsonrpc": "2.0", "id": mid, "result": {"resourceTemplates": json.load(f)}})
    elif method == "resources/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"resources": [{"uri": "x://bump", "name": "bump"}]}})
    elif method == "resources/read":
        send({"jsonrpc": "2.0", "id": mid, "result": {"contents": [{"uri": p.get("uri"), "text": "bumped"}]}})
        send({"jsonrpc": "2.0", "method": "notifications/resources/list_changed"})
    else:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no " + str(method)}})
"#;

/// The templates the gateway serves are the upstream's of the moment: fetched again after
/// the upstream's `list_changed` and after a reconnect, never the first connection's for
/// good; completion follows them (a template gone is unknown).
#[test]
fn an_upstreams_changed_templates_are_served() {
    let set_templates = |marks: &Path, name: &str| {
        let t = serde_json::json!([{"uriTemplate": format!("x://{name}/{{id}}"), "name": name}]);
        std::fs::write(marks.join("templates.json.tmp"), t.to_string()).unwrap();
        std::fs::rename(
            marks.join("templates.json.tmp"),
            marks.join("templates.json"),
        )
        .unwrap();
    };
    let Some((_tmp, marks, _gateway, url)) = script_gateway(CHANGING, "c", "legacy", "", |marks| {
        set_templates(marks, "first")
    }) else {
        return;
    };
    let set_templates = |name: &str| set_templates(&marks, name);
    let client = |args: &[&str]| {
        let mut c = Command::new(bin());
        c.args(args).args(["--url", &url]);
        run(c)
    };
    let templates = || client(&["templates"]).ok();
    let serves = |name: &str| {
        let wanted = format!("c+x://{name}/{{id}}");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let now = templates();
            if now.contains(&wanted) {
                return now;
            }
            assert!(Instant::now() < deadline, "never {wanted}: {now}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    serves("first");

    // After the upstream's list_changed.
    set_templates("second");
    assert_eq!(client(&["cat", "c+x://bump"]).ok(), "bumped");
    let now = serves("second");
    assert!(!now.contains("c+x://first/"), "{now}");
    let gone = client(&["complete", "c+x://first/{id}", "id", "a"]);
    assert!(
        gone.code != Some(0) && gone.stderr.contains("no resource template"),
        "a template gone is unknown here, not asked upstream: {gone:?}"
    );

    // After a reconnect, with no notice: the upstream killed, the gateway starts it again.
    set_templates("third");
    kill(&std::fs::read_to_string(marks.join("pid")).unwrap());
    let now = serves("third");
    assert!(!now.contains("c+x://second/"), "{now}");
}

/// A 2026-07-28 upstream whose `subscriptions/listen` refuses `x://refused` (an error),
/// acknowledges `x://left-out` without it, and ends the first stream for `x://a` a second
/// after acknowledging it (an error answer, as a restart of its own would); it counts the
/// listens for `x://a` in the mark `listens-a`. It never sends an `updated`.
const LISTENER: &str = r#"
marks = sys.argv[1]
def end_later(mid):
    time.sleep(1)
    send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32603, "message": "the stream is over"}})
listens_a = 0
for method, mid, p in requests():
    if method == "server/discover":
        answer(mid, {"supportedVersions": ["2026-07-28"], "ttlMs": 0, "cacheScope": "private",
              "capabilities": {"resources": {"subscribe": True, "listChanged": True}},
              "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "listener", "version": "1"}}})
    elif method == "resources/templates/list":
        answer(mid, {"resourceTemplates": []})
    elif method == "resources/list":
        answer(mid, {"resources": [{"uri": "x://a", "name": "a"}]})
    elif method == "subscriptions/listen":
        wanted = dict(p.get("notifications") or {})
        uris = wanted.get("resourceSubscriptions")
        if uris is not None and "x://refused" in uris:
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32602, "message": "x://refused cannot be watched"}})
            continue
        if uris is not None:
            wanted["resourceSubscriptions"] = [u for u in uris if u != "x://left-out"]
        send({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
              "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": mid}, "notifications": wanted}})
        if uris is not None and "x://a" in uris:
            listens_a += 1
            with open(os.path.join(marks, "listens-a"), "w") as f:
                f.write(str(listens_a))
            if listens_a == 1:
                threading.Thread(target=end_later, args=(mid,), daemon=True).start()
    else:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no " + str(method)}})
"#;

/// A `watch --protocol legacy` of `uri` through the gateway at `url`, once it says it is
/// watching or has ended (within 20 s): the watch and what it wrote to stderr.
fn watch_started(url: &str, uri: &str) -> (client_common::Lines, String) {
    let mut c = Command::new(bin());
    c.args(["watch", "--protocol", "legacy", uri, "--url", url]);
    let mut watch = client_common::Lines::spawn(c);
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if watch.stderr().contains("watching") || watch.child.0.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // What an ended watch wrote last is in by the time its stderr closed.
    std::thread::sleep(Duration::from_millis(100));
    let stderr = watch.stderr();
    (watch, stderr)
}

/// Subscribing through a 2026-07-28 upstream waits for its acknowledgment: a listen the
/// upstream refuses, or acknowledges without the URI, fails the client's subscribe naming
/// the mount (the client is never told it is subscribed when it is not); and a listen stream
/// the upstream ends is opened again and announced with one `updated`, since what changed
/// while none was open is unknown.
#[test]
fn a_modern_upstreams_refused_or_ended_listen_is_not_passed_off_as_live() {
    let Some((_tmp, marks, _gateway, url)) =
        script_gateway(LISTENER, "l", "2026-07-28", "", |_| {})
    else {
        return;
    };
    for refused in ["l+x://refused", "l+x://left-out"] {
        let (watch, stderr) = watch_started(&url, refused);
        assert!(
            stderr.contains("will not watch") && !stderr.contains("watching 1"),
            "{refused}: {stderr}"
        );
        assert!(stderr.contains("mcp mount \"l\""), "{refused}: {stderr}");
        drop(watch);
    }
    let (watch, stderr) = watch_started(&url, "l+x://a");
    assert!(stderr.contains("watching 1 resource"), "{stderr}");
    // The upstream ends the stream after a second; the one opened again is announced.
    let mut heard = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while heard == 0 && Instant::now() < deadline {
        if let Some(l) = watch.next_within(Duration::from_millis(200))
            && l.contains("l+x://a")
        {
            heard += 1;
        }
    }
    assert_eq!(heard, 1, "stderr: {}", watch.stderr());
    let listens: u32 = std::fs::read_to_string(marks.join("listens-a"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(listens, 2, "the stream the upstream ended was opened again");
}

/// A 2026-07-28 upstream that acknowledges a listen for list changes only after the
/// seconds in the mark `ack-delay` (read at each such listen; a listen of URIs alone is
/// acknowledged at once), as a slow or hung upstream would; a read of `x://bump` answers,
/// then sends `list_changed` on every list listen acknowledged so far (a listen hears
/// changes from its acknowledgment on) and counts them in the mark `bumps`.
const LIST_ACKS: &str = r#"
marks = sys.argv[1]
lists = []
def ack(mid, wanted, delay):
    time.sleep(delay)
    with lock:
        if wanted.get("resourcesListChanged"):
            lists.append(mid)
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
            "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": mid}, "notifications": wanted}}) + "\n")
        sys.stdout.flush()
bumps = 0
for method, mid, p in requests():
    if method == "server/discover":
        answer(mid, {"supportedVersions": ["2026-07-28"], "ttlMs": 0, "cacheScope": "private",
              "capabilities": {"resources": {"subscribe": True, "listChanged": True}},
              "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "list-acks", "version": "1"}}})
    elif method == "resources/templates/list":
        answer(mid, {"resourceTemplates": []})
    elif method == "resources/list":
        answer(mid, {"resources": [{"uri": "x://a", "name": "a"}, {"uri": "x://bump", "name": "bump"}]})
    elif method == "resources/read":
        answer(mid, {"contents": [{"uri": p.get("uri"), "text": "bumped"}]})
        if p.get("uri") == "x://bump":
            with lock:
                for sid in lists:
                    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/resources/list_changed",
                        "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": sid}}}) + "\n")
                sys.stdout.flush()
            bumps += 1
            with open(os.path.join(marks, "bumps"), "w") as f:
                f.write("%d %d" % (bumps, len(lists)))
    elif method == "subscriptions/listen":
        wanted = dict(p.get("notifications") or {})
        delay = 0.0
        if wanted.get("resourcesListChanged"):
            with open(os.path.join(marks, "ack-delay")) as f:
                delay = float(f.read())
        threading.Thread(target=ack, args=(mid, wanted, delay), daemon=True).start()
    else:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no " + str(method)}})
"#;

/// A gateway over HTTP on [`LIST_ACKS`] (mount `s`, its list listen acknowledged after
/// `ack_delay`), and a 2026-07-28 `watch` of `s+x://a` through it (list changes included)
/// once it says it is watching: the temporary folder, the marks folder, the gateway, its
/// URL, the watch, and how long the watch took to be acknowledged from its start.
#[allow(clippy::type_complexity)]
fn list_ack_gateway(
    ack_delay: &str,
) -> Option<(
    tempfile::TempDir,
    PathBuf,
    client_common::Guard,
    String,
    client_common::Lines,
    Duration,
)> {
    let (tmp, marks, gateway, url) = script_gateway(LIST_ACKS, "s", "2026-07-28", "", |m| {
        std::fs::write(m.join("ack-delay"), ack_delay).unwrap()
    })?;
    // The mount is connected (its listing answers) before the watch is timed.
    let mut ls = Command::new(bin());
    ls.args(["ls", "--url", &url]);
    assert!(run(ls).ok().contains("s+x://bump"));
    let mut c = Command::new(bin());
    c.args([
        "watch",
        "--protocol",
        "2026-07-28",
        "s+x://a",
        "--url",
        &url,
    ]);
    let started = Instant::now();
    let watch = client_common::Lines::spawn(c);
    while !watch.stderr().contains("watching") {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "never watching: {}",
            watch.stderr()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let took = started.elapsed();
    Some((tmp, marks, gateway, url, watch, took))
}

/// The `list_changed` lines of `watch` within `within` (no more counted after it).
fn list_changes_within(watch: &client_common::Lines, within: Duration) -> usize {
    let deadline = Instant::now() + within;
    let mut n = 0;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match watch.next_within(left) {
            Some(l) if l == "list_changed" => n += 1,
            Some(_) => {}
            None => break,
        }
    }
    n
}

/// A read of `x://bump` through the gateway at `url`: the upstream's list changes.
fn bump(url: &str) {
    let mut c = Command::new(bin());
    c.args(["cat", "s+x://bump", "--url", url]);
    assert_eq!(run(c).ok(), "bumped");
}

/// A client's listen for list changes through a 2026-07-28 upstream is acknowledged once
/// the upstream's list listen is (here half a second after it was asked): a list change
/// made upstream right after the client's acknowledgment reaches the client. Were the
/// client acknowledged first, the change would be made before the upstream listened.
#[test]
fn a_list_change_right_after_the_listen_is_acknowledged_is_relayed() {
    let Some((_tmp, marks, _gateway, url, watch, took)) = list_ack_gateway("0.5") else {
        return;
    };
    bump(&url);
    // The upstream sent its change on the one list listen it had acknowledged by then.
    assert_eq!(
        std::fs::read_to_string(marks.join("bumps")).unwrap(),
        "1 1",
        "the upstream was not listening yet when the client was acknowledged (after {took:?})"
    );
    // The first tells a fresh listener the list may have changed while its watch started;
    // the second is the change made after the acknowledgment.
    let heard = list_changes_within(&watch, Duration::from_secs(3));
    assert_eq!(heard, 2, "stderr: {}", watch.stderr());
}

/// An upstream that takes 6 s to acknowledge a list listen holds a client's listen about a
/// second (the gateway's wait for it), not 6 s (nor the 30 s request timeout); the listen
/// becoming live later is announced with one `list_changed`, since a change meanwhile went
/// unheard; and changes after it are relayed.
#[test]
fn a_late_list_listen_holds_a_client_a_second_and_is_announced_once_live() {
    let Some((_tmp, marks, _gateway, url, watch, took)) = list_ack_gateway("6") else {
        return;
    };
    // A second of waiting, and the process start and connection of the watch.
    assert!(
        took < Duration::from_secs(3),
        "the client waited {took:?} for its listen"
    );
    // Made before the upstream listens: unheard, and covered by the announcement.
    bump(&url);
    assert_eq!(std::fs::read_to_string(marks.join("bumps")).unwrap(), "1 0");
    // The fresh listener's own, at once.
    assert_eq!(list_changes_within(&watch, Duration::from_secs(3)), 1);
    // The upstream's acknowledgment 6 s after the listen was asked: announced once.
    assert_eq!(
        list_changes_within(&watch, Duration::from_secs(6)),
        1,
        "stderr: {}",
        watch.stderr()
    );
    bump(&url);
    assert_eq!(std::fs::read_to_string(marks.join("bumps")).unwrap(), "2 1");
    assert_eq!(
        list_changes_within(&watch, Duration::from_secs(3)),
        1,
        "stderr: {}",
        watch.stderr()
    );
}

/// Three upstreams that never answer (each gateway mount waits up to 15 s for its first
/// connection attempt at start): they are waited for at once, so the server serves after
/// about one wait, not three; the mounts are still mounted in the configuration's order.
#[test]
fn hung_upstreams_delay_the_start_once_not_once_each() {
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("local");
    std::fs::create_dir(&local).unwrap();
    let mut config = format!(
        "[[mount]]\nkind = \"files\"\nroot = {:?}\n",
        local.display().to_string()
    );
    for name in ["h1", "h2", "h3"] {
        config.push_str(&format!(
            "\n[[mount]]\nkind = \"mcp\"\nname = \"{name}\"\ncommand = \"sh\"\nargs = [\"-c\", \"sleep 120\"]\ntimeout_ms = 100\n"
        ));
    }
    let gw = tmp.path().join("gateway.toml");
    std::fs::write(&gw, config).unwrap();
    let started = Instant::now();
    let mut serve = Command::new(bin());
    serve
        .args(["serve", "--log-level", "info", "--config"])
        .arg(&gw)
        .args(["--http", "127.0.0.1:0"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = client_common::Guard(serve.spawn().unwrap());
    let stderr = child.0.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut mounted = Vec::new();
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the server serves");
        if line.contains("mounted") && line.contains("mcp h") {
            mounted.push(line.split("mcp ").nth(1).unwrap_or_default()[..2].to_owned());
        }
        if line.contains("serving MCP on") {
            break;
        }
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(35),
        "three hung upstreams took {took:?} to start (one after another would be 45 s)"
    );
    assert_eq!(
        mounted,
        ["h1", "h2", "h3"],
        "mounted in the configuration's order"
    );
}
