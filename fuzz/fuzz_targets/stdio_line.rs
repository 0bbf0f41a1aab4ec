//! The stdio transport's line decoder on any bytes: every line becomes a message for rmcp or
//! a JSON-RPC error answer, never a panic or a hang, and everything the transport writes
//! itself is one JSON-RPC error object per line. Lines are capped at 512 bytes here, so the
//! over-long-line path (a line split across reads, discarded to its newline) runs too.

#![no_main]

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use libfuzzer_sys::fuzz_target;
use mcpr_server::stdio::StdioTransport;
use rmcp::transport::Transport as _;

/// Collects what the transport writes.
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl tokio::io::AsyncWrite for Sink {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.0.lock().expect("sink").extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Hands the input over in reads of at most 7 bytes, so lines arrive split.
struct Trickle<'a>(&'a [u8]);

impl tokio::io::AsyncRead for Trickle<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let n = self.0.len().min(7).min(buf.remaining());
        buf.put_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Poll::Ready(Ok(()))
    }
}

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
    let sink = Sink::default();
    let handed = runtime().block_on(async {
        let mut handed = 0usize;
        if trickle {
            let mut t = StdioTransport::new(Trickle(input), sink.clone())
                .with_max_line_length(512)
                .with_eof_drain(NO_DRAIN);
            while t.receive().await.is_some() {
                handed += 1;
            }
            t.close().await.expect("close");
        } else {
            let mut t = StdioTransport::new(input, sink.clone())
                .with_max_line_length(512)
                .with_eof_drain(NO_DRAIN);
            while t.receive().await.is_some() {
                handed += 1;
            }
            t.close().await.expect("close");
        }
        handed
    });
    let lines = input.iter().filter(|&&b| b == b'\n').count();
    assert!(handed <= lines, "{handed} messages from {lines} lines");
    let out = sink.0.lock().expect("sink").clone();
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
