//! The pairing test of `wire/cancel.rs`, the direct path's mirror of what rmcp does with a
//! `notifications/cancelled`: the same reads and cancellations go to a session that rmcp
//! serves alone and to one whose reads the stdio direct path answers, and the answers given
//! are compared. Cancellations name a running read by its id as it is, by the same number as
//! a string, by nothing, and by an id no request has.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::Gated;
use mcpr_provider_files::{FilesConfig, FilesProvider, encode_path_uri};
use mcpr_server::stdio::StdioTransport;
use mcpr_server::{McpHandler, Served, ServerState, Settings};
use rmcp::ServiceExt;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const INIT: &str = r#"{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
const GATES: [&str; 5] = ["gate-a", "gate-b", "gate-c", "gate-d", "gate-e"];

fn cancel(params: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{params}}}"#)
}

/// The ids answered when five reads that wait are cancelled in five ways, with the direct
/// path on or off; and how many reads the direct path took.
async fn answered(direct: bool) -> (BTreeSet<String>, u64) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    for name in GATES {
        std::fs::write(root.join(name), name).unwrap();
    }
    let provider = Arc::new(Gated::new(
        FilesProvider::new(FilesConfig::new(&root)).unwrap(),
    ));
    let state = ServerState::new(Settings::default(), vec![provider.clone()]);
    let (server_r, client_w) = rustix::pipe::pipe().unwrap();
    let (client_r, server_w) = rustix::pipe::pipe().unwrap();
    let mut transport = StdioTransport::on_threads(server_r, server_w);
    if direct {
        transport = transport.with_direct_reads(McpHandler::new(state.clone()));
    }
    let taken = transport.direct_reads();
    let server = tokio::spawn(async move {
        let running = Served::from(McpHandler::new(state))
            .serve(transport)
            .await
            .unwrap();
        let _ = running.waiting().await;
    });
    let mut w = tokio::fs::File::from_std(std::fs::File::from(client_w));
    let mut r = BufReader::new(tokio::fs::File::from_std(std::fs::File::from(client_r)));
    let mut send = async |lines: &[String]| {
        w.write_all((lines.join("\n") + "\n").as_bytes())
            .await
            .unwrap();
        w.flush().await.unwrap();
    };
    let mut answer = async |within: Duration| -> Option<Value> {
        let mut line = String::new();
        let n = tokio::time::timeout(within, r.read_line(&mut line))
            .await
            .ok()?
            .unwrap();
        assert!(n > 0, "the server closed its output");
        Some(serde_json::from_str(&line).unwrap())
    };
    send(&[INIT.into()]).await;
    assert_eq!(answer(Duration::from_secs(10)).await.unwrap()["id"], "init");
    let ids = ["1", r#""s2""#, "3", "4", "5"];
    let mut lines = vec![INITIALIZED.to_owned()];
    for (id, name) in ids.iter().zip(GATES) {
        let uri = serde_json::to_string(&encode_path_uri(&root.join(name))).unwrap();
        lines.push(format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"resources/read","params":{{"uri":{uri}}}}}"#
        ));
    }
    send(&lines).await;
    // Every read is running (waiting for its gate) before it is cancelled.
    let deadline = Instant::now() + Duration::from_secs(10);
    while provider.started.load(Ordering::SeqCst) < GATES.len() {
        assert!(Instant::now() < deadline, "the reads did not all start");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    send(&[
        cancel(r#"{"requestId":1}"#),
        cancel(r#"{"requestId":"s2","reason":"gave up"}"#),
        // The number 3 as a string: another id.
        cancel(r#"{"requestId":"3"}"#),
        cancel(r#"{"reason":"no id"}"#),
        cancel(r#"{"requestId":99}"#),
        r#"{"jsonrpc":"2.0","id":6,"method":"ping"}"#.into(),
    ])
    .await;
    // The ping's answer: every cancellation before it has been taken.
    let pong = answer(Duration::from_secs(10)).await.unwrap();
    assert_eq!(
        pong["id"], 6,
        "nothing answered before the gates open: {pong}"
    );
    for name in GATES {
        provider.release(name);
    }
    let mut got = BTreeSet::new();
    // Answers come as the reads end; a late one would come within this quiet time.
    while let Some(v) = answer(Duration::from_millis(500)).await {
        got.insert(v["id"].to_string());
    }
    drop(w);
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("the session ends with its input")
        .unwrap();
    (got, taken.load(Ordering::Relaxed))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_read_is_answered_as_rmcp_answers_it() {
    let (rmcp, none) = answered(false).await;
    let (ours, taken) = answered(true).await;
    assert_eq!(none, 0);
    assert_eq!(taken, 5, "every read taken by the direct path");
    assert_eq!(ours, rmcp);
    // And what that is: a read cancelled by its own id gets no answer.
    let expected: BTreeSet<String> = ["3", "4", "5"].map(str::to_owned).into();
    assert_eq!(rmcp, expected);
}
