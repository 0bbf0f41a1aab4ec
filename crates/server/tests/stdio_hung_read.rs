//! A read in place that hangs costs its own request over stdio, not the session: the
//! transport's watchdog answers it with the request timeout's error once the timeout is
//! over, and a new reader thread goes on reading stdin, so pings, reads, lists and the end
//! of input are handled as before; the stuck read, when it ends, answers nothing.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{Hanging, Release};
use mcpr_provider_files::{FilesConfig, FilesProvider, encode_path_uri};
use mcpr_server::stdio::StdioTransport;
use mcpr_server::{McpHandler, Served, ServerState, Settings};
use rmcp::ServiceExt;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const INIT: &str = r#"{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
const TIMEOUT: Duration = Duration::from_millis(300);

fn read(id: &str, uri: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"resources/read","params":{{"uri":{}}}}}"#,
        serde_json::to_string(uri).unwrap()
    )
}

async fn answer(r: &mut BufReader<tokio::fs::File>) -> Value {
    let mut line = String::new();
    let n = tokio::time::timeout(Duration::from_secs(10), r.read_line(&mut line))
        .await
        .expect("an answer within 10 s")
        .unwrap();
    assert!(n > 0, "the server closed its output");
    serde_json::from_str(&line).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_read_in_place_costs_its_own_request_only() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("a.txt"), "fine").unwrap();
    std::fs::write(root.join("hang.txt"), "late").unwrap();
    let provider = Arc::new(Hanging::new(
        FilesProvider::new(FilesConfig::new(&root)).unwrap(),
        |uri| uri.contains("hang"),
    ));
    let settings = Settings {
        request_timeout: TIMEOUT,
        ..Settings::default()
    };
    let state = ServerState::new(settings, vec![provider.clone()]);
    // A failing assertion must end the test, not leave reads hung for ever.
    let _release = Release(provider.clone());
    let (a, hang) = (
        encode_path_uri(&root.join("a.txt")),
        encode_path_uri(&root.join("hang.txt")),
    );

    let (server_r, client_w) = rustix::pipe::pipe().unwrap();
    let (client_r, server_w) = rustix::pipe::pipe().unwrap();
    let transport = StdioTransport::on_threads(server_r, server_w)
        .with_direct_reads(McpHandler::new(state.clone()));
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
    send(&[INIT.into()]).await;
    assert_eq!(answer(&mut r).await["id"], "init");

    // The hung read, and behind it in the same write a ping, a read and a list.
    let start = Instant::now();
    send(&[
        INITIALIZED.into(),
        read("1", &hang),
        r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#.into(),
        read("3", &a),
        r#"{"jsonrpc":"2.0","id":4,"method":"resources/list"}"#.into(),
    ])
    .await;
    let mut got = std::collections::HashMap::new();
    for _ in 0..4 {
        let v = answer(&mut r).await;
        if v["id"] == 1 {
            let waited = start.elapsed();
            assert!(
                waited >= TIMEOUT && waited < TIMEOUT + Duration::from_secs(2),
                "answered after {waited:?}"
            );
        }
        got.insert(v["id"].to_string(), v);
    }
    let message = got["1"]["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("did not finish within 300 ms (request_timeout)"),
        "{message}"
    );
    assert!(got["2"]["result"].is_object(), "{}", got["2"]);
    assert_eq!(got["3"]["result"]["contents"][0]["text"], "fine");
    assert!(got["4"]["result"]["resources"].is_array(), "{}", got["4"]);
    assert_eq!(
        taken.load(Ordering::Relaxed),
        2,
        "both reads taken directly"
    );

    // A second hang while the first thread is still stuck: answered the same way.
    send(&[read("5", &hang), read("6", &a)]).await;
    let (x, y) = (answer(&mut r).await, answer(&mut r).await);
    let (five, six) = if x["id"] == 5 { (x, y) } else { (y, x) };
    assert!(
        five["error"]["message"]
            .as_str()
            .unwrap()
            .contains("did not finish")
    );
    assert_eq!(six["result"]["contents"][0]["text"], "fine");

    // The stuck reads end: they answer nothing, and the session ends with its input.
    provider.release();
    let deadline = Instant::now() + Duration::from_secs(5);
    while provider.ended.load(Ordering::SeqCst) < 2 {
        assert!(Instant::now() < deadline, "the hung reads never ended");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    send(&[r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#.into()]).await;
    assert_eq!(answer(&mut r).await["id"], 7, "no late answer to 1 or 5");
    // The closure's borrow of `w` ends with its last use above.
    drop(w);
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("the session ends with its input")
        .unwrap();
    let mut rest = String::new();
    assert_eq!(r.read_line(&mut rest).await.unwrap(), 0, "{rest}");
}
