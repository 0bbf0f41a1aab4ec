//! The terminal client against a server that sends terminal escapes (an OSC 52 clipboard
//! write, colours, cursor moves, 8-bit C1 controls) and bidirectional overrides in every
//! string it can: error messages, names, titles, descriptions, URIs, MIME types, completion
//! values, notification payloads and text contents. What people read (tables, status lines,
//! errors, anything on a terminal) shows them escaped; what a pipe or `-o` gets as resource
//! contents or `--json` stays byte for byte as sent.
//!
//! The server is a small Streamable HTTP responder of the 2026-07-28 era on loopback, written
//! here: no MCP server of ours or anyone's would send such text.

mod client_common;

use std::ffi::OsStr;
use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::time::Duration;

use base64::Engine as _;
use client_common::{Lines, bin, on_terminal, run};
use serde_json::{Value, json};

/// What the server puts in its error messages: an OSC 52 clipboard write, a colour, a screen
/// clear and cursor home, an 8-bit CSI and a right-to-left override.
const EVIL: &str =
    "\u{1b}]52;c;cm0gLXJmIH4K\u{7}\u{1b}[31mred\u{1b}[2J\u{1b}[H\u{9b}1m\u{202e}gnp.exe";
/// A name that displays as "report-exe.pdf" where the bytes say otherwise.
const NAME: &str = "report-\u{202e}fdp.exe\u{2066}x\u{2069}\u{200f}\u{61c}";
const MIME: &str = "application/x-\u{1b}[2Jevil\u{9b}31m";
/// URIs (each also carries an override, so only a cleaned form can be printed).
const BLOB_URI: &str = "evil://blob/\u{202e}gpj.exe";
const TEXT_URI: &str = "evil://text";
const ERROR_URI: &str = "evil://error";
/// The bytes of the blob and the text of the text resource.
const BLOB: &[u8] = &[0, 1, 2, 0x1b, b'[', b'2', b'J'];
const TEXT: &str = "first line\n\u{1b}]52;c;cm0gLXJmIH4K\u{7}second\u{202e} line\r\nthird\n";

/// Characters a terminal would act on, or that reorder the text around them: none may reach
/// a person's screen. `\n` (and a pty's `\r`) are the lines themselves.
fn unsafe_chars(text: &str) -> Vec<char> {
    text.chars()
        .filter(|&c| {
            (c.is_control() && c != '\n' && c != '\r')
                || matches!(c, '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        })
        .collect()
}

fn assert_safe(what: &str, text: &str) {
    let bad = unsafe_chars(text);
    assert!(
        bad.is_empty(),
        "{what}: {bad:?} reached the reader: {text:?}"
    );
}

/// The answer to one JSON-RPC request; `None` for `subscriptions/listen`, which is a stream.
fn answer(request: &Value) -> Option<Value> {
    let id = request["id"].clone();
    let params = &request["params"];
    let result = match request["method"].as_str().unwrap_or_default() {
        "server/discover" => json!({
            "supportedVersions": ["2026-07-28"],
            "capabilities": {
                "resources": {"subscribe": true, "listChanged": true},
                "completions": {},
                "tools": {},
                "prompts": {}
            },
            "serverInfo": {"name": NAME, "version": "1"},
            "instructions": EVIL
        }),
        "resources/list" => json!({"resources": [
            {"uri": BLOB_URI, "name": NAME, "title": EVIL, "mimeType": MIME, "size": BLOB.len()},
            {"uri": TEXT_URI, "name": "text", "description": EVIL, "mimeType": "text/plain"}
        ]}),
        "resources/templates/list" => json!({"resourceTemplates": [
            {"uriTemplate": "evil://{x}\u{202e}", "name": NAME, "mimeType": MIME, "description": EVIL}
        ]}),
        "completion/complete" => json!({"completion": {"values": [NAME, EVIL], "total": 2}}),
        "resources/read" => {
            let uri = params["uri"].as_str().unwrap_or_default();
            if uri == TEXT_URI {
                json!({"contents": [{"uri": uri, "mimeType": "text/plain", "text": TEXT}]})
            } else if uri == BLOB_URI {
                let blob = base64::engine::general_purpose::STANDARD.encode(BLOB);
                json!({"contents": [{"uri": uri, "mimeType": MIME, "blob": blob}]})
            } else {
                return Some(
                    json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32002, "message": EVIL}}),
                );
            }
        }
        "tools/list" => json!({"tools": [
            {"name": NAME, "description": EVIL, "inputSchema": {"type": "object",
             "properties": {EVIL: {"type": "string"}}, "required": [EVIL]}}
        ]}),
        "tools/call" => json!({"content": [{"type": "text", "text": TEXT}]}),
        "prompts/list" => json!({"prompts": [
            {"name": NAME, "description": EVIL, "arguments": [{"name": EVIL, "required": true}]}
        ]}),
        "prompts/get" => json!({"messages": [
            {"role": EVIL, "content": {"type": "text", "text": TEXT}}
        ]}),
        "subscriptions/listen" => return None,
        _ => {
            return Some(
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": EVIL}}),
            );
        }
    };
    Some(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

/// One HTTP/1.1 exchange: the request's method, path and body.
fn read_request(stream: &mut TcpStream) -> Option<(String, String, Vec<u8>)> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).ok()? == 0 {
            return None;
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let method = head.split(' ').next()?.to_owned();
    let path = head.split(' ').nth(1)?.to_owned();
    let len = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0; len];
    stream.read_exact(&mut body).ok()?;
    Some((method, path, body))
}

fn respond(stream: &mut TcpStream, status: &str, content_type: &str, body: &[u8]) {
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(body);
}

fn serve(mut stream: TcpStream) {
    let Some((method, path, body)) = read_request(&mut stream) else {
        return;
    };
    if method != "POST" {
        respond(&mut stream, "405 Method Not Allowed", "text/plain", b"");
        return;
    }
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        respond(&mut stream, "400 Bad Request", "text/plain", b"");
        return;
    };
    if request.get("id").is_none() {
        respond(&mut stream, "202 Accepted", "text/plain", b"");
        return;
    }
    // `/old` speaks only two `initialize` versions and says so to a 2026-07-28 discover
    // (-32022 with `data.supported`); an `initialize` for another version is refused.
    if path == "/old" {
        let id = request["id"].clone();
        let (status, answer) = match request["method"].as_str().unwrap_or_default() {
            "server/discover" => (
                "400 Bad Request",
                json!({"jsonrpc": "2.0", "id": id, "error": {
                "code": -32022, "message": "unsupported protocol version",
                "data": {"supported": ["2024-11-05", "2025-06-18"]}}}),
            ),
            "initialize" if request["params"]["protocolVersion"] == "2025-06-18" => (
                "200 OK",
                json!({"jsonrpc": "2.0", "id": id, "result": {
                    "protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                    "serverInfo": {"name": "old", "version": "1"}}}),
            ),
            "initialize" => (
                "200 OK",
                json!({"jsonrpc": "2.0", "id": id, "error": {
                "code": -32602, "message": "unsupported protocol version"}}),
            ),
            _ => ("200 OK", answer(&request).unwrap()),
        };
        respond(
            &mut stream,
            status,
            "application/json",
            &serde_json::to_vec(&answer).unwrap(),
        );
        return;
    }
    // `/slow` takes 800 ms for each of four pages of tools.
    if path == "/slow" && request["method"] == "tools/list" {
        std::thread::sleep(Duration::from_millis(800));
        let page = request["params"]["cursor"]
            .as_str()
            .and_then(|c| c.parse::<u32>().ok())
            .unwrap_or(0);
        let mut result = json!({"tools": [{"name": format!("t{page}"),
                                           "inputSchema": {"type": "object"}}]});
        if page < 3 {
            result["nextCursor"] = json!((page + 1).to_string());
        }
        let answer = json!({"jsonrpc": "2.0", "id": request["id"], "result": result});
        respond(
            &mut stream,
            "200 OK",
            "application/json",
            &serde_json::to_vec(&answer).unwrap(),
        );
        return;
    }
    // `/bare` is the same server offering tools and prompts but no resources.
    if path == "/bare" && request["method"] == "server/discover" {
        let answer = json!({"jsonrpc": "2.0", "id": request["id"], "result": {
            "supportedVersions": ["2026-07-28"],
            "capabilities": {"tools": {}, "prompts": {}},
            "serverInfo": {"name": NAME, "version": "1"}
        }});
        respond(
            &mut stream,
            "200 OK",
            "application/json",
            &serde_json::to_vec(&answer).unwrap(),
        );
        return;
    }
    if let Some(answer) = answer(&request) {
        respond(
            &mut stream,
            "200 OK",
            "application/json",
            &serde_json::to_vec(&answer).unwrap(),
        );
        return;
    }
    // A listen: acknowledged with every URI asked for, then one update of the blob, whose URI
    // carries an override; the stream stays open until the client goes.
    let uris = request["params"]["notifications"]["resourceSubscriptions"].clone();
    let events = [
        json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
               "params": {"notifications": {"resourceSubscriptions": uris}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
               "params": {"uri": BLOB_URI}}),
    ];
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    );
    for e in events {
        let _ = write!(stream, "data: {e}\n\n");
    }
    while stream.write_all(b": keep-alive\n\n").is_ok() {
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The hostile server on a free loopback port; its endpoint.
fn hostile() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || serve(stream));
        }
    });
    url
}

fn client(url: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(args).args(["--url", url]);
    cmd
}

#[test]
fn server_text_reaches_people_escaped_and_pipes_unchanged() {
    let url = hostile();

    // An error message: one line, escaped, every escape named.
    let out = run(client(&url, &["cat", ERROR_URI]));
    assert_eq!(out.code, Some(4), "{out:?}");
    assert_safe("the error line", &out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(
        out.stderr
            .contains(r"error: \u{1b}]52;c;cm0gLXJmIH4K\u{7}\u{1b}[31mred\u{1b}[2J\u{1b}[H\u{9b}1m\u{202e}gnp.exe (-32002)"),
        "{}",
        out.stderr
    );

    // Tables: URIs, names, MIME types, descriptions.
    let table = run(client(&url, &["ls"])).ok();
    assert_safe("ls", &table);
    assert!(table.contains(r"evil://blob/\u{202e}gpj.exe"), "{table}");
    assert!(
        table.contains(r"report-\u{202e}fdp.exe\u{2066}x\u{2069}\u{200f}\u{61c}"),
        "{table}"
    );
    assert!(
        table.contains(r"application/x-\u{1b}[2Jevil\u{9b}31m"),
        "{table}"
    );
    let table = run(client(&url, &["templates"])).ok();
    assert_safe("templates", &table);
    assert!(table.contains(r"evil://{x}\u{202e}"), "{table}");
    let values = run(client(&url, &["complete", "evil://{x}", "x", ""])).ok();
    assert_safe("complete", &values);
    assert_eq!(values.lines().count(), 2, "{values}");

    // --json to a pipe is the server's text as it sent it.
    let json = run(client(&url, &["ls", "--json"])).ok();
    assert!(json.contains(NAME), "{json:?}");

    // Resource contents to a pipe or a file: byte for byte.
    let blob = run(client(&url, &["cat", BLOB_URI]));
    assert_eq!((blob.code, blob.stdout.as_slice()), (Some(0), BLOB));
    let text = run(client(&url, &["cat", TEXT_URI]));
    assert_eq!((text.code, text.text().as_str()), (Some(0), TEXT));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("blob");
    let out = run(client(
        &url,
        &["cat", BLOB_URI, "-o", file.to_str().unwrap()],
    ));
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(std::fs::read(&file).unwrap(), BLOB);
}

/// A watch prints the updated URI escaped, and with --read the blob's note with its MIME
/// type escaped; `--json` is JSON with the server's strings as sent.
#[test]
fn watch_prints_notification_payloads_escaped() {
    let url = hostile();
    let watch = Lines::spawn(client(&url, &["watch", "--read", BLOB_URI]));
    let first = watch
        .next_within(Duration::from_secs(15))
        .expect("an update line");
    assert_eq!(first, r"updated evil://blob/\u{202e}gpj.exe");
    let note = watch
        .next_within(Duration::from_secs(15))
        .expect("the blob's note");
    assert_eq!(note, r"(binary, application/x-\u{1b}[2Jevil\u{9b}31m, 7 B)");
    assert_safe("watch stderr", &watch.stderr());
    drop(watch);

    let watch = Lines::spawn(client(&url, &["watch", "--json", BLOB_URI]));
    let line = watch
        .next_within(Duration::from_secs(15))
        .expect("an update line");
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["uri"], BLOB_URI, "{line}");
}

/// On a terminal (a pty through `script`) even `--json` and a resource's text are cleaned:
/// the JSON keeps its meaning with `\uXXXX` escapes, the text keeps its lines.
#[test]
fn on_a_terminal_json_and_text_contents_are_escaped_too() {
    let url = hostile();
    let b = bin();
    let words = |args: &[&'static str]| -> Vec<std::ffi::OsString> {
        let mut w = vec![b.clone().into_os_string()];
        w.extend(args.iter().map(|a| (*a).into()));
        w.extend(["--url".into(), url.clone().into()]);
        w
    };
    let run_on_terminal = |args: &[&'static str]| {
        let w = words(args);
        let w: Vec<&OsStr> = w.iter().map(|s| s.as_os_str()).collect();
        on_terminal(&w)
    };
    let Some(out) = run_on_terminal(&["ls", "--json"]) else {
        return;
    };
    let text = out.text();
    assert_eq!(out.code, Some(0), "{text}");
    assert_safe("ls --json on a terminal", &text);
    let first: Value = serde_json::from_str(text.lines().next().unwrap().trim_end()).unwrap();
    assert_eq!(first["name"], NAME, "the same JSON: {text}");
    assert!(text.contains(r"report-\u202efdp.exe"), "{text}");

    let out = run_on_terminal(&["cat", TEXT_URI]).expect("script was found above");
    let text = out.text();
    assert_eq!(out.code, Some(0), "{text}");
    assert_safe("cat on a terminal", &text);
    assert!(
        text.contains("first line\r\n") && text.contains(r"\u{1b}]52;c;") && text.contains("third"),
        "{text:?}"
    );

    let out = run_on_terminal(&["cat", BLOB_URI]).expect("script was found above");
    let text = out.text();
    assert_eq!(out.code, Some(1), "{text}");
    assert_safe("a binary's note on a terminal", &text);
    assert!(
        text.contains(r"is binary (application/x-\u{1b}[2Jevil\u{9b}31m, 7 B)"),
        "{text}"
    );
}

/// Tool and prompt names, descriptions, argument names and roles reach a person cleaned; a
/// tool's text to a pipe, and `--json`, stay as sent. Against the same server offering no
/// resources, `ls`, `cat` and `templates` say so and name what it offers, its text cleaned.
#[test]
fn tools_and_prompts_print_server_text_harmlessly() {
    let url = hostile();
    for args in [&["tools"][..], &["prompts"]] {
        let table = run(client(&url, args)).ok();
        assert_safe(args[0], &table);
        assert!(table.contains("report-\\u{202e}fdp.exe"), "{table}");
    }
    let out = run(client(&url, &["tools", "--json"])).ok();
    let tool: Value = serde_json::from_str(out.trim_end()).expect("one JSON line");
    assert_eq!(tool["name"], NAME);
    assert_eq!(tool["description"], EVIL);

    let out = run(client(&url, &["call", NAME]));
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(
        out.stdout,
        TEXT.as_bytes(),
        "a pipe gets the tool's text byte for byte"
    );

    let out = run(client(&url, &["prompt", NAME])).ok();
    let role = out.lines().next().expect("a role line");
    assert_safe("role", role);
    assert!(out.ends_with(TEXT), "{out:?}");

    let bare = url.replace("/mcp", "/bare");
    for args in [&["ls"][..], &["cat", TEXT_URI], &["templates"]] {
        let out = run(client(&bare, args));
        assert_eq!(out.code, Some(1), "{out:?}");
        assert_eq!(
            out.stderr,
            "error: this server offers no resources; it offers tools (1) and prompts (1)\n",
            "{args:?}"
        );
    }
}

/// A server that answers a 2026-07-28 discover with -32022 and the versions it speaks gets an
/// `initialize` for the newest of them both sides speak, under `--protocol auto`; under
/// `--protocol 2026-07-28` the error says what it speaks.
#[test]
fn an_unsupported_version_refusal_picks_the_newest_version_both_speak() {
    let old = hostile().replace("/mcp", "/old");
    let table = run(client(&old, &["tools"])).ok();
    assert!(table.contains("report-"), "{table}");
    let out = run(client(&old, &["tools", "--protocol", "2026-07-28"]));
    assert_eq!(out.code, Some(1), "{out:?}");
    assert_eq!(
        out.stderr,
        "error: the server does not speak 2026-07-28 (it speaks [\"2024-11-05\",\"2025-06-18\"]); try --protocol legacy\n"
    );
}

/// `--timeout` bounds the whole command, not each request: four pages of 800 ms each pass
/// with `--timeout 5` and end with `--timeout 2`, naming the step it waited for; a stdio
/// server that never answers, and an HTTP server that takes the connection and never
/// answers, end the command at its `--timeout`: each within N s and half a second.
#[test]
fn the_timeout_bounds_the_whole_command_and_names_the_step() {
    let slow = hostile().replace("/mcp", "/slow");
    let table = run(client(&slow, &["tools", "--timeout", "5"])).ok();
    assert_eq!(table.lines().count(), 5, "{table}");
    let started = std::time::Instant::now();
    let out = run(client(&slow, &["tools", "--timeout", "2"]));
    assert_eq!(out.code, Some(6), "{out:?}");
    assert_eq!(
        out.stderr,
        "error: the command did not finish within 2s (--timeout): no answer to tools/list yet\n"
    );
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "--timeout 2 ends within 2.5 s: {:?}",
        started.elapsed()
    );

    let started = std::time::Instant::now();
    let out = run({
        let mut cmd = Command::new(bin());
        cmd.args(["ls", "--timeout", "1", "--", "sleep", "30"]);
        cmd
    });
    assert_eq!(out.code, Some(6), "{out:?}");
    assert_eq!(
        out.stderr,
        "error: the command did not finish within 1s (--timeout): no answer to server/discover yet\n"
    );
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "--timeout 1 ends within 1.5 s: {:?}",
        started.elapsed()
    );

    // An HTTP server that takes the connection and never answers.
    let mute = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", mute.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in mute.incoming() {
            held.push(c);
        }
    });
    for n in ["2", "3"] {
        let started = std::time::Instant::now();
        let out = run(client(&url, &["ls", "--timeout", n]));
        assert_eq!(out.code, Some(6), "{out:?}");
        let limit = Duration::from_millis(n.parse::<u64>().unwrap() * 1000 + 500);
        assert!(
            started.elapsed() < limit,
            "--timeout {n} over mute HTTP ends within {limit:?}: {:?}",
            started.elapsed()
        );
    }
}

/// `--timeout N` ends the command within N seconds and half a second, also when the stdio server
/// neither answers nor leaves at the end of its input: closing gives it no grace past the
/// timeout (it used to add two seconds). Both the start (`server/discover` unanswered) and a
/// request after it (`resources/list` unanswered) are bounded so.
#[test]
fn a_mute_stdio_server_is_left_at_the_timeout_not_after_it() {
    // Reads every request, answers none (or only the first), and lingers after its input ends.
    let never = "while read -r line; do :; done; sleep 30";
    let first_only = r#"read -r line; printf '%s\n' '{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"],"capabilities":{"resources":{}},"serverInfo":{"name":"mute","version":"1"}}}'; while read -r line; do :; done; sleep 30"#;
    for (script, step) in [(never, "server/discover"), (first_only, "resources/list")] {
        let started = std::time::Instant::now();
        let out = run({
            let mut cmd = Command::new(bin());
            cmd.args(["ls", "--timeout", "2", "--", "sh", "-c", script]);
            cmd
        });
        let took = started.elapsed();
        assert_eq!(
            out.stderr,
            format!(
                "error: the command did not finish within 2s (--timeout): no answer to {step} yet\n"
            )
        );
        assert!(
            took >= Duration::from_secs(2) && took < Duration::from_millis(2500),
            "{step}: {took:?}"
        );
    }
}
