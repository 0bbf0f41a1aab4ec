//! A read in place that hangs costs its own request over stdio, not the session: within a
//! tenth of a second the transport's watchdog has a new thread read stdin in place of the
//! stuck one, so cancellations, pings, reads, lists and the end of input are handled as
//! before, whatever the request timeout; the stuck read is answered when it ends, or with
//! the request timeout's error at the timeout, or not at all once cancelled (as rmcp answers
//! no cancelled request).

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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
/// How soon what stands behind a hung read is answered: the watchdog takes over within
/// about 100 ms; the rest is room for a loaded machine.
const PROMPT: Duration = Duration::from_millis(500);

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
        r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{id},"reason":"gave up"}}}}"#
    )
}

/// A session over pipes, as the binary runs it, on a files mount whose reads of `hang.txt`
/// hang in place until released, with `timeout` as the request timeout.
struct Session {
    provider: Arc<Hanging>,
    _release: Release,
    /// `a.txt` ("fine") and `hang.txt` ("late").
    a: String,
    hang: String,
    w: tokio::fs::File,
    r: BufReader<tokio::fs::File>,
    taken: Arc<AtomicU64>,
    server: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl Session {
    async fn open(timeout: Duration) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(root.join("a.txt"), "fine").unwrap();
        std::fs::write(root.join("hang.txt"), "late").unwrap();
        let provider = Arc::new(Hanging::new(
            FilesProvider::new(FilesConfig::new(&root)).unwrap(),
            |uri| uri.contains("hang"),
        ));
        let settings = Settings {
            request_timeout: timeout,
            ..Settings::default()
        };
        let state = ServerState::new(settings, vec![provider.clone()]);
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
        let mut s = Self {
            // A failing assertion must end the test, not leave reads hung for ever.
            _release: Release(provider.clone()),
            provider,
            a: encode_path_uri(&root.join("a.txt")),
            hang: encode_path_uri(&root.join("hang.txt")),
            w: tokio::fs::File::from_std(std::fs::File::from(client_w)),
            r: BufReader::new(tokio::fs::File::from_std(std::fs::File::from(client_r))),
            taken,
            server,
            _dir: dir,
        };
        s.send(&[INIT.into()]).await;
        assert_eq!(s.answer().await["id"], "init");
        s.send(&[INITIALIZED.into()]).await;
        s
    }

    /// Writes `lines` in one write.
    async fn send(&mut self, lines: &[String]) {
        self.w
            .write_all((lines.join("\n") + "\n").as_bytes())
            .await
            .unwrap();
        self.w.flush().await.unwrap();
    }

    async fn answer(&mut self) -> Value {
        let mut line = String::new();
        let n = tokio::time::timeout(Duration::from_secs(10), self.r.read_line(&mut line))
            .await
            .expect("an answer within 10 s")
            .unwrap();
        assert!(n > 0, "the server closed its output");
        serde_json::from_str(&line).unwrap()
    }

    /// The next `n` answers, by id.
    async fn answers(&mut self, n: usize) -> HashMap<String, Value> {
        let mut got = HashMap::new();
        for _ in 0..n {
            let v = self.answer().await;
            got.insert(v["id"].to_string(), v);
        }
        got
    }

    /// Lets the hung reads go and waits until `n` of them have ended.
    async fn release(&self, n: usize) {
        self.provider.release();
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.provider.ended.load(Ordering::SeqCst) < n {
            assert!(Instant::now() < deadline, "the hung reads never ended");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Ends the input; the session ends with it, and nothing more is written.
    async fn end(self) {
        let Self {
            w, mut r, server, ..
        } = self;
        drop(w);
        tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .expect("the session ends with its input")
            .unwrap();
        let mut rest = String::new();
        assert_eq!(r.read_line(&mut rest).await.unwrap(), 0, "{rest}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_read_in_place_costs_its_own_request_only() {
    const TIMEOUT: Duration = Duration::from_millis(300);
    let mut s = Session::open(TIMEOUT).await;

    // The hung read, and behind it in the same write a ping, a read and a list.
    let start = Instant::now();
    let (a, hang) = (s.a.clone(), s.hang.clone());
    s.send(&[
        read("1", &hang),
        ping(2),
        read("3", &a),
        r#"{"jsonrpc":"2.0","id":4,"method":"resources/list"}"#.into(),
    ])
    .await;
    let mut got = HashMap::new();
    for _ in 0..4 {
        let v = s.answer().await;
        let waited = start.elapsed();
        if v["id"] == 1 {
            assert!(
                waited >= TIMEOUT && waited < TIMEOUT + Duration::from_secs(2),
                "answered after {waited:?}"
            );
        } else {
            assert!(
                waited < TIMEOUT,
                "{v} waited {waited:?} behind the hung read"
            );
        }
        got.insert(v["id"].to_string(), v);
    }
    // The timeout's error, as the bounded path gives it.
    assert_eq!(got["1"]["error"]["code"], -32001, "{}", got["1"]);
    assert_eq!(got["1"]["error"]["data"]["temporary"], true, "{}", got["1"]);
    let message = got["1"]["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("timed out after 300 ms (request_timeout)"),
        "{message}"
    );
    assert!(got["2"]["result"].is_object(), "{}", got["2"]);
    assert_eq!(got["3"]["result"]["contents"][0]["text"], "fine");
    assert!(got["4"]["result"]["resources"].is_array(), "{}", got["4"]);
    assert_eq!(
        s.taken.load(Ordering::Relaxed),
        2,
        "both reads taken directly"
    );

    // A second hang while the first thread is still stuck: answered the same way.
    s.send(&[read("5", &hang), read("6", &a)]).await;
    let got = s.answers(2).await;
    assert_eq!(got["5"]["error"]["code"], -32001, "{}", got["5"]);
    assert!(
        got["5"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("timed out after 300 ms")
    );
    assert_eq!(got["6"]["result"]["contents"][0]["text"], "fine");

    // The stuck reads end: they answer nothing more, and the session ends with its input.
    s.release(2).await;
    s.send(&[ping(7)]).await;
    assert_eq!(s.answer().await["id"], 7, "no late answer to 1 or 5");
    s.end().await;
}

/// A cancellation of the hung read and a ping right behind it are read and handled within
/// [`PROMPT`], with a short request timeout as with the default 30 s: the ping is answered
/// and so is a read behind them, and the cancelled read gets no answer, neither at its
/// timeout nor when it ends.
async fn cancelled_while_hung(timeout: Duration) {
    let mut s = Session::open(timeout).await;
    let (a, hang) = (s.a.clone(), s.hang.clone());
    s.send(&[read("1", &hang)]).await;
    // Sent once the hung read is surely running: the cancellation must be read by the
    // thread that takes over, not picked up from the same read of input.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let start = Instant::now();
    s.send(&[cancel(1), ping(2), read("3", &a)]).await;
    let got = s.answers(2).await;
    let waited = start.elapsed();
    assert!(waited < PROMPT, "answered {waited:?} after they were sent");
    assert!(got["2"]["result"].is_object(), "{:?}", got);
    assert_eq!(got["3"]["result"]["contents"][0]["text"], "fine");
    // Past the timeout (when it is short), then with the hung read ended: still no answer.
    if timeout < Duration::from_secs(1) {
        tokio::time::sleep(timeout).await;
    }
    s.release(1).await;
    // Room for a late answer to arrive before the ping's, were there one.
    tokio::time::sleep(Duration::from_millis(50)).await;
    s.send(&[ping(4), read("5", &a)]).await;
    let got = s.answers(2).await;
    assert!(got.contains_key("4") && got.contains_key("5"), "{got:?}");
    assert_eq!(
        got["5"]["result"]["contents"][0]["text"], "fine",
        "reads in place go on"
    );
    s.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancellation_behind_a_hung_read_is_taken_at_once() {
    cancelled_while_hung(Duration::from_millis(300)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancellation_behind_a_hung_read_is_taken_at_once_with_the_default_timeout() {
    cancelled_while_hung(Duration::from_secs(30)).await;
}

/// A read in place that takes longer than the watchdog allows, but ends within its request
/// timeout, gets its own answer, not an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_read_in_place_that_ends_in_time_is_answered() {
    let mut s = Session::open(Duration::from_secs(30)).await;
    let (a, hang) = (s.a.clone(), s.hang.clone());
    let start = Instant::now();
    s.send(&[read("1", &hang), read("2", &a)]).await;
    let got = s.answers(1).await;
    assert!(
        start.elapsed() < PROMPT,
        "{:?} behind the slow read",
        start.elapsed()
    );
    assert_eq!(got["2"]["result"]["contents"][0]["text"], "fine");
    s.release(1).await;
    let got = s.answers(1).await;
    assert_eq!(got["1"]["result"]["contents"][0]["text"], "late", "{got:?}");
    s.end().await;
}

/// Past 32 threads stuck in reads in place, a read is no longer tried in place but goes to a
/// task at once (the bounded path, whose read of the same file does not hang here): a
/// client cannot park threads without bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_cap_of_stuck_threads_reads_take_the_bounded_path() {
    const STUCK: usize = 32;
    let mut s = Session::open(Duration::from_millis(300)).await;
    let hang = s.hang.clone();
    let reads: Vec<String> = (1..=STUCK + 1)
        .map(|id| read(&id.to_string(), &hang))
        .collect();
    s.send(&reads).await;
    let got = s.answers(STUCK + 1).await;
    for id in 1..=STUCK {
        let message = got[&id.to_string()]["error"]["message"].as_str();
        assert!(
            message.is_some_and(|m| m.contains("timed out after 300 ms")),
            "{id}: {}",
            got[&id.to_string()]
        );
    }
    let last = &got[&(STUCK + 1).to_string()];
    assert_eq!(last["result"]["contents"][0]["text"], "late", "{last}");
    assert_eq!(
        s.provider.ended.load(Ordering::SeqCst),
        0,
        "none of the stuck reads has ended"
    );
    s.release(STUCK).await;
    s.end().await;
}
