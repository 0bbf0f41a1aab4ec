//! The stdio transport's line decoder on any bytes: every line becomes a message for rmcp or
//! a JSON-RPC error answer, never a panic or a hang, and everything the transport writes
//! itself is one JSON-RPC error object per line. Lines are capped at 512 bytes here, so the
//! over-long-line path (a line split across reads, discarded to its newline) runs too. The
//! transport reads a real pipe, as it reads stdin; the input is written to it whole or in
//! writes of at most 7 bytes, so lines arrive split.

#![no_main]

use std::io::{Read, Write};
use std::os::fd::OwnedFd;

use libfuzzer_sys::fuzz_target;
use mcpr_server::stdio::StdioTransport;
use rmcp::transport::Transport as _;

/// No rmcp answers the requests handed over here, so the end of input does not wait for them.
const NO_DRAIN: std::time::Duration = std::time::Duration::ZERO;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime")
    })
}

fuzz_target!(|data: &[u8]| {
    // The first byte picks whole reads or a trickle.
    let (trickle, input) = match data.split_first() {
        Some((b, rest)) => (b & 1 == 1, rest),
        None => (false, data),
    };
    let (server_r, mut client_w) = std::io::pipe().expect("a pipe");
    let (mut client_r, server_w) = std::io::pipe().expect("a pipe");
    let input_copy = input.to_vec();
    let writer = std::thread::spawn(move || {
        let step = if trickle { 7 } else { input_copy.len().max(1) };
        for chunk in input_copy.chunks(step) {
            // The transport stops reading only when it is closed: a failed write ends this.
            if client_w.write_all(chunk).is_err() {
                return;
            }
        }
    });
    let collector = std::thread::spawn(move || {
        let mut out = Vec::new();
        client_r.read_to_end(&mut out).expect("read the output");
        out
    });
    let handed = runtime().block_on(async {
        let mut handed = 0usize;
        let mut t = StdioTransport::on_threads(OwnedFd::from(server_r), OwnedFd::from(server_w))
            .with_max_line_length(512)
            .with_eof_drain(NO_DRAIN);
        while t.receive().await.is_some() {
            handed += 1;
        }
        t.close().await.expect("close");
        handed
    });
    writer.join().expect("the writer");
    let out = collector.join().expect("the collector");
    let lines = input.iter().filter(|&&b| b == b'\n').count();
    assert!(handed <= lines, "{handed} messages from {lines} lines");
    for line in out.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let v: serde_json::Value = serde_json::from_slice(line).unwrap_or_else(|e| {
            panic!(
                "the transport wrote something that is not JSON ({e}): {}",
                String::from_utf8_lossy(line)
            )
        });
        assert_eq!(v["jsonrpc"], "2.0", "{v}");
        let code = v["error"]["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("not an error answer: {v}"));
        assert!(
            [-32700, -32600, -32601, -32602].contains(&code),
            "unexpected code {code}: {v}"
        );
        assert!(
            v.get("id").is_some(),
            "an error answer without an id member: {v}"
        );
        assert!(
            !v["error"]["message"].as_str().unwrap_or("").is_empty(),
            "{v}"
        );
    }
});
