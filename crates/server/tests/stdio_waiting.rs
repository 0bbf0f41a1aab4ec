//! The stdio direct path's reads that wait, with a client that reuses request ids: two
//! reads in flight under one id each get their answer, a cancellation of that id stops
//! both, and the id used again afterwards is answered. And once stdout is gone, the direct
//! path does no read any more (nobody could get the answer).

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::Gated;
use mcpr_provider_files::{FilesConfig, FilesProvider, encode_path_uri};
use mcpr_server::stdio::StdioTransport;
use mcpr_server::{McpHandler, ServerState, Settings};
use rmcp::ServiceExt;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const INIT: &str = r#"{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

fn read(id: &str, uri: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"resources/read","params":{{"uri":{}}}}}"#,
        serde_json::to_string(uri).unwrap()
    )
}

fn ping(id: u32) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#)
}

fn cancel(id: u32) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{id}}}}}"#
    )
}

/// A server with the direct path over real pipes, as the binary runs it.
struct Session {
    provider: Arc<Gated>,
    root: std::path::PathBuf,
    _dir: tempfile::TempDir,
    w: tokio::fs::File,
    r: Option<BufReader<tokio::fs::File>>,
    taken: Arc<std::sync::atomic::AtomicU64>,
    end: mcpr_server::stdio::StdioEnd,
    server: tokio::task::JoinHandle<()>,
}

impl Session {
    async fn open() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for name in ["a.txt", "gate-a", "gate-b", "gate-c", "gate-d", "gate-e"] {
            std::fs::write(root.join(name), name).unwrap();
        }
        let provider = Arc::new(Gated::new(
            FilesProvider::new(FilesConfig::new(&root)).unwrap(),
        ));
        let state = ServerState::new(Settings::default(), vec![provider.clone()]);
        let (server_r, client_w) = rustix::pipe::pipe().unwrap();
        let (client_r, server_w) = rustix::pipe::pipe().unwrap();
        let transport = StdioTransport::on_threads(server_r, server_w)
            .with_direct_reads(McpHandler::new(state.clone()));
        let (taken, end) = (transport.direct_reads(), transport.end());
        let server = tokio::spawn(async move {
            let running = McpHandler::new(state).serve(transport).await.unwrap();
            let _ = running.waiting().await;
        });
        let mut s = Self {
            provider,
            root,
            _dir: dir,
            w: tokio::fs::File::from_std(std::fs::File::from(client_w)),
            r: Some(BufReader::new(tokio::fs::File::from_std(
                std::fs::File::from(client_r),
            ))),
            taken,
            end,
            server,
        };
        s.send(&[INIT.into()]).await;
        assert_eq!(s.answer().await["id"], "init");
        s.send(&[INITIALIZED.into()]).await;
        s
    }

    fn uri(&self, name: &str) -> String {
        encode_path_uri(&self.root.join(name))
    }

    async fn send(&mut self, lines: &[String]) {
        self.w
            .write_all((lines.join("\n") + "\n").as_bytes())
            .await
            .unwrap();
        self.w.flush().await.unwrap();
    }

    async fn answer(&mut self) -> Value {
        let mut line = String::new();
        let r = self.r.as_mut().expect("the output is open");
        let n = tokio::time::timeout(Duration::from_secs(10), r.read_line(&mut line))
            .await
            .expect("an answer within 10 s")
            .unwrap();
        assert!(n > 0, "the server closed its output");
        serde_json::from_str(&line).unwrap()
    }

    /// Waits until `n` gated reads have begun.
    async fn started(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.provider.started.load(Ordering::SeqCst) < n {
            assert!(Instant::now() < deadline, "{n} gated reads never began");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Closes the input and waits for the session to end.
    async fn close(self) {
        drop(self.w);
        tokio::time::timeout(Duration::from_secs(20), self.server)
            .await
            .expect("the session ends with its input")
            .unwrap();
    }
}

fn text(answer: &Value) -> &str {
    answer["result"]["contents"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("not a read's answer: {answer}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_in_flight_under_one_id_each_get_their_answer_and_cancel_together() {
    let mut s = Session::open().await;

    // Two reads in flight under id 7; the second ends first, and the first still answers.
    let (a, b) = (s.uri("gate-a"), s.uri("gate-b"));
    s.send(&[read("7", &a), read("7", &b)]).await;
    s.started(2).await;
    s.provider.release("gate-b");
    let first = s.answer().await;
    assert_eq!((first["id"].as_i64(), text(&first)), (Some(7), "gate-b"));
    s.provider.release("gate-a");
    let second = s.answer().await;
    assert_eq!((second["id"].as_i64(), text(&second)), (Some(7), "gate-a"));

    // Two more under id 8, cancelled by one notification: neither answers, even once let go.
    let (c, d) = (s.uri("gate-c"), s.uri("gate-d"));
    s.send(&[read("8", &c), read("8", &d)]).await;
    s.started(4).await;
    s.send(&[cancel(8), ping(9)]).await;
    assert_eq!(s.answer().await["id"], 9);
    s.provider.release("gate-c");
    s.provider.release("gate-d");
    // Time for a wrongly kept read to answer before the ping behind it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    s.send(&[ping(10)]).await;
    assert_eq!(s.answer().await["id"], 10, "a cancelled read answered");

    // Id 7 again, after its answers: a read of its own, answered.
    let e = s.uri("gate-e");
    s.send(&[read("7", &e)]).await;
    s.started(5).await;
    s.provider.release("gate-e");
    let again = s.answer().await;
    assert_eq!((again["id"].as_i64(), text(&again)), (Some(7), "gate-e"));
    assert_eq!(s.taken.load(Ordering::Relaxed), 5, "all five reads direct");

    let mut r = s.r.take().unwrap();
    s.close().await;
    let mut rest = String::new();
    let n = r.read_line(&mut rest).await.unwrap();
    assert_eq!(n, 0, "nothing after the last answer: {rest}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_stdout_is_gone_no_direct_read_is_done() {
    let mut s = Session::open().await;
    let a = s.uri("a.txt");
    s.send(&[read("1", &a)]).await;
    assert_eq!(text(&s.answer().await), "a.txt");
    assert_eq!(s.provider.reads.load(Ordering::SeqCst), 1);
    assert_eq!(s.taken.load(Ordering::Relaxed), 1);

    // The client closes its end of stdout; the next answer's write finds it gone (EPIPE).
    drop(s.r.take());
    s.send(&[ping(2)]).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !s.end.output_gone() {
        assert!(
            Instant::now() < deadline,
            "the write to a closed stdout never failed"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // Reads sent now are not done: nobody could get their answers.
    let reads: Vec<String> = (3..20).map(|i| read(&i.to_string(), &a)).collect();
    s.send(&reads).await;
    let (provider, taken) = (s.provider.clone(), s.taken.clone());
    s.close().await;
    assert_eq!(
        provider.reads.load(Ordering::SeqCst),
        1,
        "reads done for nobody"
    );
    assert_eq!(taken.load(Ordering::Relaxed), 1);
}
