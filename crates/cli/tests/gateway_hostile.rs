//! A hostile upstream behind a gateway mount: a small Python program speaking JSON-RPC on
//! stdio that lies about ids, sends an answer larger than `max_message_bytes` (refused with
//! the limit named), floods change notices, and names its resources with control characters
//! and endless descriptions. Each costs only its own request; the mount and the other mounts
//! serve on, and the gateway's resident memory stays within [`BUDGET_MIB`].

mod client_common;

use std::process::Command;
use std::time::{Duration, Instant};

use client_common::{Lines, absent, bin, our_http_server, python3, run, within_memory_budget};
use serde_json::Value;

/// The hostile upstream (run after [`client_common::PY_UPSTREAM`]). With `MODE` set in its
/// environment it lists otherwise: `cycle` walks pages of one entry whose cursors go A, B,
/// then A again (a cycle no single page of ours sees whole), the first entry named with a
/// control character and 300 characters more; `wide` answers one page of 10,001 entries.
/// Either offers 1,500 templates, the first named with a control character and 300
/// characters more. A subscribe of `x://flood` is followed by 20,000 `updated` notices at
/// once; one of `x://steady` by [`STEADY_RATE`] a second for [`STEADY_SECS`], sent every 5
/// ms.
const UPSTREAM: &str = r#"
mode = os.environ.get("MODE", "hostile")
out = sys.stdout
def steady(rate, secs):
    start, n = time.monotonic(), 0
    while time.monotonic() - start < secs:
        due = int((time.monotonic() - start) * rate)
        with lock:
            while n < due:
                out.write('{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"x://steady/%d"}}\n' % (n % STEADY_URIS))
                n += 1
            out.flush()
        time.sleep(0.005)
for method, mid, p in requests():
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": p.get("protocolVersion", "2025-11-25"),
              "capabilities": {"resources": {"subscribe": True, "listChanged": True}},
              "serverInfo": {"name": "hostile", "version": "6.6.6"}}})
    elif method == "resources/templates/list" and mode != "hostile":
        send({"jsonrpc": "2.0", "id": mid, "result": {"resourceTemplates": [
            {"uriTemplate": "t://%d/{id}" % i, "name": ("first\u001b" + "n" * 300) if i == 0 else "t%d" % i}
            for i in range(1500)]}})
    elif method == "resources/templates/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"resourceTemplates": []}})
    elif method == "resources/list" and mode == "cycle":
        nxt = {None: "A", "A": "B", "B": "A"}[p.get("cursor")]
        n = {None: 1, "A": 2, "B": 3}[p.get("cursor")]
        name = "e%d" % n if n > 1 else "e1\u0007" + "m" * 300
        send({"jsonrpc": "2.0", "id": mid, "result": {"resources": [{"uri": "x://%d" % n, "name": name}], "nextCursor": nxt}})
    elif method == "resources/list" and mode == "wide":
        rs = [{"uri": "x://%d" % i, "name": "e%d" % i} for i in range(10000)]
        rs.append({"uri": "x://long", "name": "L" * 300})
        send({"jsonrpc": "2.0", "id": mid, "result": {"resources": rs}})
    elif method == "resources/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"resources": [
            {"uri": "x://ok", "name": "ok\u001b[31mred\u0007", "description": "d" * 20000},
            {"uri": "not a uri", "name": "bad"},
            {"uri": "x://big", "name": "big"},
            {"uri": "x://wrong-id", "name": "wrong"},
            {"uri": "x://flood", "name": "flood"}]}})
    elif method == "resources/read":
        uri = p.get("uri")
        if uri == "x://big":
            send({"jsonrpc": "2.0", "id": mid, "result": {"contents": [{"uri": uri, "text": "b" * (3 << 20)}]}})
        elif uri == "x://wrong-id":
            send({"jsonrpc": "2.0", "id": 999999, "result": {"contents": [{"uri": uri, "text": "lie"}]}})
        else:
            send({"jsonrpc": "2.0", "id": mid, "result": {"contents": [{"uri": uri, "text": "fine"}]}})
    elif method == "resources/subscribe":
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
        if p.get("uri") == "x://flood":
            with lock:
                for _ in range(20000):
                    out.write('{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"x://flood"}}\n')
                out.flush()
        if p.get("uri") == "x://steady/0":
            threading.Thread(target=steady, args=(STEADY_RATE, STEADY_SECS), daemon=True).start()
    elif method == "resources/unsubscribe":
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
    else:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no " + str(method)}})
"#;

/// How many `updated` notices of `x://steady/…` the upstream sends a second: three times the
/// default limit, so that the limit, not the upstream, sets the pace.
const STEADY_RATE: u32 = 3000;
/// For how many seconds it sends them.
const STEADY_SECS: u32 = 6;
/// Over how many URIs, `x://steady/0` …, in turn. A client's session holds one notice per
/// URI waiting and merges repeats into it, so one URI reaches a client only as fast as its
/// session sends (about 130 a second here, in a debug build): the limit is seen at the
/// client only when notices of many URIs share it.
const STEADY_URIS: usize = 50;

/// The gateway's resident memory budget, at its peak and after each case: its own
/// footprint (about 50 MiB in a debug build) and a few bounded messages (`max_message_bytes`
/// is 1 MiB here), with room for a slower machine's larger buffers; a queue that kept every
/// notice of a flood, or requests that kept their state past their timeout, would grow past it.
const BUDGET_MIB: u64 = 96;

/// A gateway over HTTP (`server` its `[server]` table, or empty) with a local files mount
/// (`a.md`) and, for each `(name, more)` of `mounts`, an mcp mount `name` of [`UPSTREAM`]
/// in the legacy era with `more` added to its settings.
struct Hostile {
    _tmp: tempfile::TempDir,
    gateway: client_common::Guard,
    url: String,
    local_uri: String,
}

/// The [`Hostile`] gateway, or `None` (a skip) without python3.
fn hostile_gateway(server: &str, mounts: &[(&str, &str)]) -> Option<Hostile> {
    let python = python3().or_else(|| absent("python3", "not on PATH"))?;
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("hostile.py");
    let upstream = [client_common::PY_UPSTREAM, UPSTREAM]
        .concat()
        .replace(
            "(STEADY_RATE, STEADY_SECS)",
            &format!("({STEADY_RATE}, {STEADY_SECS})"),
        )
        .replace("STEADY_URIS", &STEADY_URIS.to_string());
    std::fs::write(&script, upstream).unwrap();
    let local = tmp.path().join("local");
    std::fs::create_dir(&local).unwrap();
    std::fs::write(local.join("a.md"), "local\n").unwrap();
    let mut config = format!(
        "{server}[[mount]]\nkind = \"files\"\nroot = {:?}\n",
        local.display().to_string()
    );
    for (name, more) in mounts {
        config.push_str(&format!(
            "\n[[mount]]\nkind = \"mcp\"\nname = \"{name}\"\ncommand = {python:?}\nargs = [{:?}]\nprotocol = \"legacy\"\n{more}",
            script.display().to_string()
        ));
    }
    let gw = tmp.path().join("gateway.toml");
    std::fs::write(&gw, config).unwrap();
    let gw = gw.display().to_string();
    let (gateway, url) = our_http_server(&["serve", "--config", &gw]);
    Some(Hostile {
        local_uri: format!("file://{}", local.join("a.md").display()),
        _tmp: tmp,
        gateway,
        url,
    })
}

#[test]
fn a_hostile_upstream_costs_only_its_own_requests() {
    // One gateway over HTTP, so that every request below meets the connection that lived
    // through the faults before it.
    let Some(Hostile {
        _tmp,
        gateway,
        url,
        local_uri,
    }) = hostile_gateway(
        "",
        &[(
            "h",
            "timeout_ms = 1500\nmax_message_bytes = \"1MiB\"\nmax_notifications_per_second = 20\n",
        )],
    )
    else {
        return;
    };
    let pid = gateway.0.id();
    let via = |args: &[&str]| {
        let mut c = Command::new(bin());
        c.args(args).args(["--url", &url]);
        c
    };
    // Names lose their control characters, descriptions are cut, a URI that does not parse
    // is left out.
    let listed = run(via(&["ls", "--json"])).ok();
    let entries: Vec<Value> = listed
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let uris: Vec<&str> = entries.iter().map(|e| e["uri"].as_str().unwrap()).collect();
    assert_eq!(uris.len(), 5, "{uris:?}");
    assert_eq!(
        &uris[1..],
        ["h+x://ok", "h+x://big", "h+x://wrong-id", "h+x://flood"]
    );
    assert_eq!(entries[1]["name"], "ok[31mred");
    let description = entries[1]["description"].as_str().unwrap();
    assert_eq!(description.chars().count(), 4096);

    // An answer over max_message_bytes is refused at once, naming the limit; one with a
    // wrong id times out alone; the same connection then answers the next.
    let started = Instant::now();
    let big = run(via(&["cat", "h+x://big"]));
    assert_ne!(big.code, Some(0), "{big:?}");
    assert!(
        big.stderr.contains("mcp mount \"h\"")
            && big.stderr.contains("max_message_bytes")
            && big.stderr.contains("1048576"),
        "{}",
        big.stderr
    );
    assert!(
        !big.stderr.contains("did not answer"),
        "not a timeout: {}",
        big.stderr
    );
    let lie = run(via(&["cat", "h+x://wrong-id"]));
    assert_eq!(lie.code, Some(4), "{lie:?}");
    assert!(lie.stderr.contains("did not answer"), "{}", lie.stderr);
    assert!(started.elapsed() < Duration::from_secs(15));
    within_memory_budget(
        pid,
        BUDGET_MIB,
        "an oversized answer and a request never answered",
    );
    assert_eq!(run(via(&["cat", "h+x://ok"])).ok(), "fine");
    assert_eq!(run(via(&["cat", &local_uri])).ok(), "local\n");

    // 20,000 notices for one URI reach the client merged: a handful of lines, not a flood.
    let watch = Lines::spawn(via(&["watch", "h+x://flood"]));
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(6);
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match watch.next_within(left) {
            Some(l) if l.contains("h+x://flood") => got += 1,
            Some(_) => {}
            None => break,
        }
    }
    // At most max_notifications_per_second (20) reach the client a second: over the 6 s
    // watched, far fewer than the 20,000 sent; the rest were merged into ones waiting.
    assert!(
        (1..=6 * 20 + 20).contains(&got),
        "{got} lines; {}",
        watch.stderr()
    );
    let merged = client_common::mount_counter(&url, "mcpr_mcp_notifications_merged_total", "h");
    // The flood may still be arriving: thousands merged is the point, not the exact count.
    assert!(merged > 5_000, "{merged} merged; {got} relayed");
    within_memory_budget(pid, BUDGET_MIB, "a flood of 20,000 notices");
    drop(watch);
    drop(gateway);
}

/// A hostile upstream's listing is bounded however it pages: a cursor cycle that spans our
/// pages (A, B, A again) ends the listing with the mount named, rather than the client
/// paging forever; a page over the entry limit (10,000) is refused naming it, the listing
/// of the other mounts going on. Names are cleaned and cut to 256 characters; templates are
/// capped at 1,000, their names cleaned and cut too.
#[test]
fn an_upstreams_cursor_cycle_and_oversized_page_end_the_listing() {
    let Some(Hostile {
        _tmp,
        gateway: _gateway,
        url,
        local_uri,
    }) = hostile_gateway(
        "[server]\npage_size = 1\n\n",
        &[
            ("cycle", "env = { MODE = \"cycle\" }\n"),
            ("wide", "env = { MODE = \"wide\" }\n"),
        ],
    )
    else {
        return;
    };
    let client = |args: &[&str]| {
        let mut c = Command::new(bin());
        c.args(args).args(["--url", &url]);
        run(c)
    };

    // A client that follows every cursor it is given (our terminal client would stop at a
    // cursor repeated, others do not): the listing ends within a bounded number of pages.
    let mut uris = Vec::new();
    let mut names = Vec::new();
    let mut left_out = Vec::new();
    let mut cursor: Option<String> = None;
    for page in 0.. {
        assert!(page < 40, "the listing never ends: {uris:?}");
        let params = match &cursor {
            Some(c) => serde_json::json!({ "cursor": c }),
            None => serde_json::json!({}),
        };
        let answer = client_common::post_modern(&url, "resources/list", params);
        let result = &answer["result"];
        for r in result["resources"].as_array().expect("a page") {
            uris.push(r["uri"].as_str().unwrap().to_owned());
            names.push(r["name"].as_str().unwrap().to_owned());
        }
        if let Some(gone) = result["_meta"]["io.github.mcp-resources/unavailable"].as_array() {
            left_out.extend(
                gone.iter()
                    .map(|g| g["message"].as_str().unwrap().to_owned()),
            );
        }
        match result["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    // The cycle's entries until it was known for one (each entry at most a few times: the
    // cycle may be walked again before it is known; the page that found it is refused
    // whole), none of the oversized page.
    assert_eq!(uris[0], local_uri, "{uris:?}");
    assert!(
        uris[1..].iter().all(|u| u.starts_with("cycle+x://")) && uris.len() <= 1 + 12,
        "{uris:?}"
    );
    // A name loses its control characters and is cut to 256 characters.
    assert!(names[1].starts_with("e1mmm"), "{}", names[1]);
    assert_eq!(names[1].chars().count(), 256, "{}", names[1]);
    for want in ["cycle+x://1", "cycle+x://2"] {
        assert!(uris.iter().any(|u| u == want), "{want}: {uris:?}");
    }
    assert!(
        left_out
            .iter()
            .any(|m| m.contains("mcp mount \"cycle\"") && m.contains("never end")),
        "{left_out:?}"
    );
    assert!(
        left_out.iter().any(|m| m.contains("mcp mount \"wide\"")
            && m.contains("10001 entries, more than the limit of 10000")),
        "{left_out:?}"
    );

    let out = client(&["templates", "--json"]).ok();
    let templates: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for mode in ["cycle", "wide"] {
        let theirs: Vec<&Value> = templates
            .iter()
            .filter(|t| {
                t["uriTemplate"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("{mode}+"))
            })
            .collect();
        assert_eq!(theirs.len(), 1000, "{mode}: at most 1,000 templates");
        let first = theirs
            .iter()
            .find(|t| t["uriTemplate"] == format!("{mode}+t://0/{{id}}"))
            .unwrap_or_else(|| panic!("{mode}: {theirs:?}"));
        let name = first["name"].as_str().unwrap();
        assert!(
            name.starts_with("firstnnn") && !name.contains('\u{1b}'),
            "{name}"
        );
        assert_eq!(name.chars().count(), 256, "{name}");
    }
}

/// The limit the test below holds the gateway to: `max_notifications_per_second`'s default.
const LIMIT: usize = 1000;

/// How much a notice's trip from the gateway's relay to the client's stamp may differ from
/// another's: they go one after another through the same bus, session and HTTP stream, so
/// they keep their order, and their spacing but for the scheduling of the gateway's tasks
/// and of the thread that stamps them, on a machine that runs other tests beside (2 cores
/// here): a quarter of a second. A window of a second less this at the client then holds
/// only notices relayed within one second.
const JITTER: Duration = Duration::from_millis(250);

/// Without `max_notifications_per_second`, the default bound holds where clients see it: an
/// upstream sending 3,000 notices a second over 50 URIs for 6 s, every notice stamped as
/// the client receives it, no window of a second holds more than 1,000 (checked over
/// windows of a second less [`JITTER`]); and the limiter lets a steady rate through rather
/// than starving it: at least 750 in every whole second of the flood (what the client's
/// session merged is the rest).
#[test]
fn a_flood_is_relayed_at_most_1000_a_second_by_default() {
    let Some(Hostile {
        _tmp,
        gateway: _gateway,
        url,
        ..
    }) = hostile_gateway("", &[("h", "")])
    else {
        return;
    };
    // A 2026-07-28 listen over a plain connection (HTTP/1.0: the stream is not chunked),
    // each notice stamped as its line is read, by a thread that does nothing else.
    let (addr, path) = url
        .trim_start_matches("http://")
        .split_once('/')
        .expect("host/path");
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen",
        "params": {"notifications": {"resourceSubscriptions": (0..STEADY_URIS).map(|i| format!("h+x://steady/{i}")).collect::<Vec<_>>()},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}}}})
    .to_string();
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    {
        use std::io::Write as _;
        write!(
            stream,
            "POST /{path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Protocol-Version: 2026-07-28\r\nMcp-Method: subscriptions/listen\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
    }
    let reader = stream.try_clone().unwrap();
    let stamper = std::thread::spawn(move || {
        use std::io::BufRead as _;
        let mut at = Vec::new();
        for line in std::io::BufReader::new(reader).lines() {
            let Ok(line) = line else { break };
            if line.contains("notifications/resources/updated") {
                at.push(Instant::now());
            }
        }
        at
    });
    // The flood and its tail: the watch then ends, and its last lines are in.
    std::thread::sleep(Duration::from_secs(u64::from(STEADY_SECS) + 4));
    let relayed = client_common::mount_counter(&url, "mcpr_mcp_notifications_relayed_total", "h");
    let _ = stream.shutdown(std::net::Shutdown::Both);
    let at = stamper.join().unwrap();
    assert!(!at.is_empty(), "nothing reached the client");

    let window = Duration::from_secs(1) - JITTER;
    let mut busiest = (0, 0);
    let mut end = 0;
    for (start, t) in at.iter().enumerate() {
        while end < at.len() && at[end] - *t < window {
            end += 1;
        }
        if end - start > busiest.0 {
            busiest = (end - start, start);
        }
    }
    let first = at[0];
    let per_second: Vec<usize> = (0..=u64::from(STEADY_SECS) + 3)
        .map(|s| at.iter().filter(|t| (**t - first).as_secs() == s).count())
        .collect();
    eprintln!(
        "busiest window: {}; per second: {per_second:?}; {relayed} relayed",
        busiest.0
    );
    assert!(
        busiest.0 <= LIMIT,
        "{} notices within {window:?} from {:?} after the first; per second: {per_second:?}",
        busiest.0,
        at[busiest.1] - first
    );
    // Not starved: every whole second of the flood after the first (whose notices began
    // within it) brought most of the limit; the gateway relayed at least what arrived.
    let steady = &per_second[1..usize::try_from(STEADY_SECS).unwrap() - 1];
    assert!(
        steady.iter().all(|n| *n >= LIMIT * 3 / 4),
        "per second: {per_second:?}; {relayed} relayed"
    );
    assert!(
        relayed >= at.len() as u64,
        "{relayed} relayed, {} received",
        at.len()
    );
}
