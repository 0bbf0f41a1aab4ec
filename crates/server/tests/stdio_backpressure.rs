//! Issue #20 item 6: a client that sends requests and never reads stdout must not grow the
//! server without bound. The stdio transport stops reading requests while its unwritten
//! answers are over the bound, and picks up again when the client reads.

mod common;

use std::sync::Arc;
use std::time::Duration;

use mcpr_core::Provider;
use mcpr_provider_files::{FilesConfig, FilesProvider, encode_path_uri};
use mcpr_server::stdio::StdioTransport;
use mcpr_server::{McpHandler, ServerState, Settings};
use rmcp::ServiceExt;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const INIT: &str = r#"{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

const REQUESTS: usize = 3000;
const ANSWER_BYTES: usize = 20_000;
const LIMIT: usize = 1 << 20;

/// A server over a directory holding one file of `ANSWER_BYTES`, and that file's URI.
fn one_file() -> (tempfile::TempDir, Arc<ServerState>, String) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("a.txt"), "x".repeat(ANSWER_BYTES)).unwrap();
    let provider: Arc<dyn Provider> =
        Arc::new(FilesProvider::new(FilesConfig::new(&root)).unwrap());
    let state = ServerState::new(Settings::default(), vec![provider]);
    let uri = encode_path_uri(&root.join("a.txt"));
    (dir, state, uri)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_backlog_is_bounded_when_the_client_does_not_read() {
    let (_dir, state, uri) = one_file();

    for direct in [true, false] {
        let (transport, client_r, client_w) = common::stdio_socket();
        let mut transport = transport.with_backlog_limit(LIMIT, 64);
        if direct {
            transport = transport.with_direct_reads(McpHandler::new(state.clone()));
        }
        let backlog = transport.backlog_bytes();
        let s = state.clone();
        let server = tokio::spawn(async move {
            let running = McpHandler::new(s).serve(transport).await.unwrap();
            let _ = running.waiting().await;
        });
        let mut input = format!("{INIT}\n{INITIALIZED}\n");
        for i in 0..REQUESTS {
            input.push_str(&format!(
                r#"{{"jsonrpc":"2.0","id":{i},"method":"resources/read","params":{{"uri":"{uri}"}}}}"#
            ));
            input.push('\n');
        }
        let mut w = client_w;
        let writer = tokio::spawn(async move {
            w.write_all(input.as_bytes()).await.unwrap();
            w
        });

        // Nobody reads stdout. Unbounded, the queue would reach REQUESTS × ANSWER_BYTES
        // (60 MB); bounded, the server stops reading stdin, so the client's write stalls.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let held = backlog();
        // The reader stops once the queue is over the bound; by then the answer that crossed
        // it is queued and each of the 64 requests in flight may still add one. An answer is
        // the file's bytes in a JSON-RPC envelope (id, URI, MIME type: well under 512 bytes).
        assert!(
            held <= LIMIT + 65 * (ANSWER_BYTES + 512),
            "direct={direct}: {held} bytes of answers queued with a {LIMIT}-byte bound"
        );
        assert!(
            held > 0,
            "direct={direct}: the answers were queued somewhere else"
        );
        assert!(
            !writer.is_finished(),
            "direct={direct}: the server read every request without anyone reading answers"
        );

        // Reading again drains the queue, and every request is answered.
        let mut r = BufReader::new(client_r);
        every_answer(&mut r, REQUESTS + 1, &format!("direct={direct}")).await;
        drop(writer.await.unwrap());
        nothing_more(&mut r).await;
        server.await.unwrap();
        assert_eq!(backlog(), 0);
    }
}

/// The binary's transport, on threads over real pipes: its reader thread writes the direct
/// answers itself only as far as the pipe takes them without waiting, so when nobody reads
/// them the rest are queued for the writer thread, bounded as above, and reading stops;
/// reading again gets every answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_on_threads_stops_reading_when_the_client_does_not_read() {
    let (_dir, state, uri) = one_file();

    let (server_r, client_w) = rustix::pipe::pipe().unwrap();
    let (client_r, server_w) = rustix::pipe::pipe().unwrap();
    let transport = StdioTransport::on_threads(server_r, server_w)
        .with_backlog_limit(LIMIT, 64)
        .with_direct_reads(McpHandler::new(state.clone()));
    let backlog = transport.backlog_bytes();
    let taken = transport.direct_reads();
    let server = tokio::spawn(async move {
        let running = McpHandler::new(state).serve(transport).await.unwrap();
        let _ = running.waiting().await;
    });
    let mut w = tokio::fs::File::from_std(std::fs::File::from(client_w));
    let mut r = BufReader::new(tokio::fs::File::from_std(std::fs::File::from(client_r)));
    // As a client does: the reads after the answer to `initialize`.
    w.write_all(format!("{INIT}\n").as_bytes()).await.unwrap();
    w.flush().await.unwrap();
    let mut line = Vec::new();
    r.read_until(b'\n', &mut line).await.unwrap();
    assert!(line.starts_with(br#"{"jsonrpc":"2.0","id":"init""#));
    let mut input = format!("{INITIALIZED}\n");
    for i in 0..REQUESTS {
        input.push_str(&format!(
            r#"{{"jsonrpc":"2.0","id":{i},"method":"resources/read","params":{{"uri":"{uri}"}}}}"#
        ));
        input.push('\n');
    }
    let writer = tokio::spawn(async move {
        w.write_all(input.as_bytes()).await.unwrap();
        w.flush().await.unwrap();
        w
    });

    tokio::time::sleep(Duration::from_secs(3)).await;
    let held = backlog();
    assert!(
        held <= LIMIT + 64 * ANSWER_BYTES,
        "{held} bytes of answers queued with a {LIMIT}-byte bound"
    );
    assert!(held > 0, "the answers were held somewhere else");
    assert!(
        !writer.is_finished(),
        "the server read every request without anyone reading answers"
    );

    every_answer(&mut r, REQUESTS, "on threads").await;
    drop(writer.await.unwrap());
    nothing_more(&mut r).await;
    server.await.unwrap();
    assert_eq!(backlog(), 0);
    assert_eq!(
        taken.load(std::sync::atomic::Ordering::Relaxed),
        REQUESTS as u64,
        "the reads were the reader thread's"
    );
}

/// Reads `lines` answer lines, each checked, and every read answered once among them.
async fn every_answer<R: tokio::io::AsyncBufRead + Unpin>(r: &mut R, lines: usize, what: &str) {
    let mut line = Vec::new();
    let mut ids = std::collections::HashSet::new();
    for answered in 0..lines {
        line.clear();
        let n = tokio::time::timeout(Duration::from_secs(20), r.read_until(b'\n', &mut line))
            .await
            .unwrap_or_else(|_| panic!("{what}: stalled after {answered} answers"))
            .unwrap();
        assert!(n > 0, "{what}: closed after {answered} answers");
        check_answer(&line, &mut ids, what);
    }
    assert_eq!(ids.len(), REQUESTS, "{what}: every read answered once");
}

/// Once the input is closed, the output ends with nothing more.
async fn nothing_more<R: tokio::io::AsyncBufRead + Unpin>(r: &mut R) {
    let mut rest = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(10), r.read_until(b'\n', &mut rest))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(n, 0, "an answer no request asked for");
}

/// One answer line: whole JSON, a result with the file's text, to a read (or the
/// `initialize`) not answered before; read ids go into `ids`.
fn check_answer(line: &[u8], ids: &mut std::collections::HashSet<u64>, what: &str) {
    let v: serde_json::Value = serde_json::from_slice(line).unwrap_or_else(|e| {
        panic!(
            "{what}: not one JSON answer ({e}): {}",
            String::from_utf8_lossy(&line[..line.len().min(300)])
        )
    });
    assert!(v["result"].is_object(), "{what}: {v}");
    if v["id"] == "init" {
        return;
    }
    let id = v["id"]
        .as_u64()
        .unwrap_or_else(|| panic!("{what}: id {}", v["id"]));
    assert!(id < REQUESTS as u64, "{what}: id {id}");
    assert!(ids.insert(id), "{what}: two answers to {id}");
    assert_eq!(
        v["result"]["contents"][0]["text"].as_str().map(str::len),
        Some(ANSWER_BYTES),
        "{what}: answer {id}"
    );
}
