//! The client's two ways to reach a server: a child process over stdio, or Streamable HTTP.
//!
//! Both carry raw JSON-RPC (`serde_json::Value`), so `ls --json` can print resources exactly as
//! the server sent them. Responses are matched to requests by id; notifications from the
//! server go to one channel the session reads; a request from the server is answered (`ping`)
//! or refused (-32601), since this client declares no capabilities.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use futures::StreamExt as _;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader,
};
use tokio::process::{Child, ChildStdin};
use tokio::sync::{mpsc, oneshot};

/// A JSON-RPC error answered by the server. Displays as `message (code)`.
#[derive(Debug, Clone)]
pub(crate) struct RpcError {
    pub code: i64,
    pub message: String,
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for RpcError {}

impl RpcError {
    fn from_value(error: &Value) -> Self {
        Self {
            code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("the server sent an error without a message")
                .to_owned(),
        }
    }
}

/// An HTTP answer that was neither a JSON-RPC message nor a stream of them.
#[derive(Debug)]
pub(crate) struct HttpStatus {
    pub status: reqwest::StatusCode,
    pub detail: String,
    /// Whether the request carried an `Authorization` header (from `--header`): a 401 then
    /// means the token was refused, not that one is missing.
    pub sent_credentials: bool,
}

impl fmt::Display for HttpStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.status == reqwest::StatusCode::UNAUTHORIZED {
            let why = if self.detail.is_empty() {
                String::new()
            } else {
                format!(": {}", self.detail)
            };
            return if self.sent_credentials {
                write!(
                    f,
                    "the server refused the token given with --header (HTTP 401{why})"
                )
            } else {
                write!(
                    f,
                    "the server requires authorization (HTTP 401{why}); pass a token with --header \"Authorization: Bearer TOKEN\""
                )
            };
        }
        write!(f, "the server answered HTTP {}", self.status)?;
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

impl std::error::Error for HttpStatus {}

/// What arrives from the server outside the answers to our requests.
#[derive(Debug)]
pub(crate) enum Inbound {
    /// A JSON-RPC notification, as sent.
    Notification(Value),
    /// The connection (or the notification stream) ended, with why.
    Ended(String),
}

/// The answer to one request: its `result` as the server wrote it, or the error it got.
type Reply = Result<Box<RawValue>, anyhow::Error>;

/// A message from the server, split just enough to route it; `result` stays unparsed so a
/// command can print parts of it exactly as sent.
#[derive(Deserialize)]
struct Incoming {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    result: Option<Box<RawValue>>,
    #[serde(default)]
    error: Option<Value>,
}

/// One outgoing request: its id, method and the whole JSON-RPC message.
pub(crate) struct Outgoing<'a> {
    pub id: u64,
    pub method: &'a str,
    pub message: Value,
    /// The `Mcp-Name` header's value (the 2026-07-28 era over HTTP).
    pub name: Option<&'a str>,
}

/// A connected transport.
pub(crate) enum Transport {
    Stdio(Stdio),
    Http(Http),
}

impl Transport {
    /// Send a request and wait for its answer, up to `timeout` when given.
    pub(crate) async fn request(&self, req: Outgoing<'_>, timeout: Option<Duration>) -> Reply {
        let method = req.method.to_owned();
        let exchange = async {
            match self {
                Transport::Stdio(s) => s.request(req).await,
                Transport::Http(h) => h.request(req).await,
            }
        };
        match timeout {
            Some(t) => tokio::time::timeout(t, exchange).await.map_err(|_| {
                anyhow!(
                    "the server did not answer {method} within {}s (--timeout)",
                    t.as_secs_f32()
                )
            })?,
            None => exchange.await,
        }
    }

    /// Send a notification (no answer expected).
    pub(crate) async fn notify(&self, message: Value) -> anyhow::Result<()> {
        match self {
            Transport::Stdio(s) => s.write(&message).await,
            Transport::Http(h) => h.notify(message).await,
        }
    }

    /// End the connection politely: stdin closed (then the child killed if it lingers), or the
    /// legacy HTTP session deleted.
    pub(crate) async fn close(self) {
        match self {
            Transport::Stdio(s) => s.close().await,
            Transport::Http(h) => h.close().await,
        }
    }
}

/// Requests waiting for their answer, by id.
type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Reply>>>>;

/// How many of the child's last stderr lines are kept for error messages.
const STDERR_TAIL: usize = 20;
/// The longest stderr line kept whole; a longer one is kept in pieces of this size.
const STDERR_LINE: usize = 64 * 1024;

/// One line read by [`read_line`].
enum Line {
    /// The line, without its `\n` (or `\r\n`); the last one may lack it.
    Text(Vec<u8>),
    /// The first `max + 1` bytes of a longer line; the rest is still to be read.
    TooLong(Vec<u8>),
    /// The end of the stream.
    End,
}

/// Reads one line of at most `max` bytes, never holding more than `max + 1` of it.
async fn read_line<R: AsyncBufRead + Unpin>(reader: &mut R, max: usize) -> std::io::Result<Line> {
    let mut buf = Vec::new();
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    let n = (&mut *reader)
        .take(limit)
        .read_until(b'\n', &mut buf)
        .await?;
    if n == 0 {
        return Ok(Line::End);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
        return Ok(Line::Text(buf));
    }
    Ok(if buf.len() > max {
        Line::TooLong(buf)
    } else {
        Line::Text(buf)
    })
}

/// The child's stdin, shared by requests and by answers to the server's own requests; the
/// mutex keeps each line whole on the pipe.
type SharedStdin = Arc<tokio::sync::Mutex<Option<ChildStdin>>>;

/// A server started as a child process, speaking newline-delimited JSON on its stdin/stdout.
pub(crate) struct Stdio {
    stdin: SharedStdin,
    pending: Pending,
    /// Why the connection ended, once it has.
    ended: Arc<Mutex<Option<String>>>,
    child: Arc<tokio::sync::Mutex<Child>>,
}

impl Stdio {
    /// Start `command` (program and arguments) with piped stdio. A line on its stdout may be
    /// `max_message` bytes long at most (`--max-message-mib`).
    pub(crate) fn spawn(
        command: &[OsString],
        inbound: mpsc::UnboundedSender<Inbound>,
        max_message: usize,
    ) -> anyhow::Result<Self> {
        let (program, args) = command
            .split_first()
            .context("no server command after `--`")?;
        let shown = program.to_string_lossy().into_owned();
        let mut child = tokio::process::Command::new(program)
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start the server `{shown}`"))?;
        let stdin = child.stdin.take().context("the child has no stdin")?;
        let stdout = child.stdout.take().context("the child has no stdout")?;
        let stderr = child.stderr.take().context("the child has no stderr")?;

        // The child's log lines are kept, not shown: they would mix with our output, but the
        // last of them usually says why a server that exits early did so.
        let tail = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_TAIL)));
        let stderr_task = {
            let tail = tail.clone();
            tokio::spawn(async move {
                let mut stderr = BufReader::new(stderr);
                loop {
                    // A longer line is kept in pieces of this size: the tail stays bounded.
                    let line = match read_line(&mut stderr, STDERR_LINE).await {
                        Ok(Line::Text(bytes) | Line::TooLong(bytes)) => {
                            String::from_utf8_lossy(&bytes).into_owned()
                        }
                        Ok(Line::End) | Err(_) => break,
                    };
                    let mut t = tail.lock().expect("stderr tail lock");
                    if t.len() == STDERR_TAIL {
                        t.pop_front();
                    }
                    t.push_back(line);
                }
            })
        };

        let this = Self {
            stdin: Arc::new(tokio::sync::Mutex::new(Some(stdin))),
            pending: Pending::default(),
            ended: Arc::default(),
            child: Arc::new(tokio::sync::Mutex::new(child)),
        };
        let pending = this.pending.clone();
        let ended = this.ended.clone();
        let child = this.child.clone();
        let stdin = this.stdin.clone();
        tokio::spawn(async move {
            let mut stdout = BufReader::new(stdout);
            loop {
                let line = match read_line(&mut stdout, max_message).await {
                    Ok(Line::Text(bytes)) => String::from_utf8(bytes)
                        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
                    Ok(Line::TooLong(_)) => {
                        // Reading on would hold the whole line: a server gone wrong (or one
                        // that is not speaking JSON-RPC) could take all memory.
                        let reason = format!(
                            "the server `{shown}` wrote a line of over {} MiB to stdout; stopped reading (--max-message-mib raises the limit)",
                            max_message >> 20
                        );
                        finish(&pending, &ended, &inbound, reason);
                        return;
                    }
                    Ok(Line::End) | Err(_) => break,
                };
                if line.trim().is_empty() {
                    continue;
                }
                match serde_json::from_str::<Incoming>(&line) {
                    Ok(msg) => {
                        if let Some(answer) = dispatch(msg, &line, &pending, &inbound) {
                            let stdin = stdin.clone();
                            tokio::spawn(async move {
                                let _ = write_line(&stdin, &answer).await;
                            });
                        }
                    }
                    Err(e) => {
                        // A line that is not JSON means the child is not an MCP server
                        // (or it logs to stdout); say so with the line's start.
                        let reason = format!(
                            "the server `{shown}` wrote something that is not JSON-RPC to stdout ({e}): {}",
                            snippet(&line)
                        );
                        finish(&pending, &ended, &inbound, reason);
                        return;
                    }
                }
            }
            // stdout closed: the child exited or is exiting. Its status and last stderr line
            // make the message; the stderr reader gets a moment to catch the last lines.
            let status = tokio::time::timeout(Duration::from_secs(2), async {
                child.lock().await.wait().await
            })
            .await;
            let _ = tokio::time::timeout(Duration::from_millis(500), stderr_task).await;
            let last = tail
                .lock()
                .expect("stderr tail lock")
                .iter()
                .rev()
                .find(|l| !l.trim().is_empty())
                .cloned();
            let mut reason = match status {
                Ok(Ok(s)) => format!("the server `{shown}` exited ({s})"),
                _ => format!("the server `{shown}` closed its stdout"),
            };
            if let Some(last) = last {
                reason.push_str(": ");
                reason.push_str(&snippet(&last));
            }
            finish(&pending, &ended, &inbound, reason);
        });
        Ok(this)
    }

    async fn request(&self, req: Outgoing<'_>) -> Reply {
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .expect("pending lock")
            .insert(req.id, tx);
        if let Err(e) = self.write(&req.message).await {
            self.pending.lock().expect("pending lock").remove(&req.id);
            return Err(e);
        }
        match rx.await {
            Ok(reply) => reply,
            Err(_) => Err(anyhow!(self.ended_reason())),
        }
    }

    async fn write(&self, message: &Value) -> anyhow::Result<()> {
        if write_line(&self.stdin, message).await.is_err() {
            // A broken pipe means the child is gone; the reader task says why, shortly.
            tokio::time::sleep(Duration::from_millis(300)).await;
            bail!(self.ended_reason());
        }
        Ok(())
    }

    fn ended_reason(&self) -> String {
        self.ended
            .lock()
            .expect("ended lock")
            .clone()
            .unwrap_or_else(|| "the server closed the connection".to_owned())
    }

    async fn close(self) {
        // EOF on stdin is how a stdio MCP server is told to exit.
        self.stdin.lock().await.take();
        let mut child = self.child.lock().await;
        if tokio::time::timeout(Duration::from_secs(2), child.wait())
            .await
            .is_err()
        {
            let _ = child.kill().await;
        }
    }
}

/// Write one message as one line (JSON never contains a raw newline).
async fn write_line(stdin: &SharedStdin, message: &Value) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(message)?;
    line.push(b'\n');
    let mut guard = stdin.lock().await;
    let Some(stdin) = guard.as_mut() else {
        return Err(std::io::ErrorKind::BrokenPipe.into());
    };
    stdin.write_all(&line).await?;
    stdin.flush().await
}

/// Route one message from the server (`line` is its text). Returns the answer to send back
/// when the message was a request of the server's own.
fn dispatch(
    msg: Incoming,
    line: &str,
    pending: &Pending,
    inbound: &mpsc::UnboundedSender<Inbound>,
) -> Option<Value> {
    match (msg.method.as_deref(), msg.id.clone()) {
        (None, Some(id)) => {
            let tx = id
                .as_u64()
                .and_then(|id| pending.lock().expect("pending lock").remove(&id))?;
            let _ = tx.send(reply_of(msg));
            None
        }
        (Some(method), Some(id)) => Some(answer_server_request(method, id)),
        (Some(_), None) => {
            if let Ok(n) = serde_json::from_str::<Value>(line) {
                let _ = inbound.send(Inbound::Notification(n));
            }
            None
        }
        (None, None) => None,
    }
}

/// The `result` of a response, or its `error` as an [`RpcError`].
fn reply_of(msg: Incoming) -> Reply {
    if let Some(error) = &msg.error {
        return Err(RpcError::from_value(error).into());
    }
    msg.result
        .ok_or_else(|| anyhow!("the server sent a response with neither `result` nor `error`"))
}

/// `ping` is answered; anything else the server asks (sampling, roots, elicitation) is refused,
/// as this client declares none of those capabilities.
fn answer_server_request(method: &str, id: Value) -> Value {
    if method == "ping" {
        json!({"jsonrpc": "2.0", "id": id, "result": {}})
    } else {
        json!({"jsonrpc": "2.0", "id": id, "error": {
            "code": -32601,
            "message": "this client (mcp-resources) declares no client capabilities"
        }})
    }
}

/// Fail every waiting request with `reason` and tell the session the connection ended.
fn finish(
    pending: &Pending,
    ended: &Mutex<Option<String>>,
    inbound: &mpsc::UnboundedSender<Inbound>,
    reason: String,
) {
    *ended.lock().expect("ended lock") = Some(reason.clone());
    for (_, tx) in pending.lock().expect("pending lock").drain() {
        let _ = tx.send(Err(anyhow!(reason.clone())));
    }
    let _ = inbound.send(Inbound::Ended(reason));
}

/// The start of a line for an error message, what a terminal would act on made blanks.
fn snippet(line: &str) -> String {
    let clean: String = line
        .chars()
        .map(|c| {
            if super::output::unsafe_on_terminal(c) {
                ' '
            } else {
                c
            }
        })
        .take(200)
        .collect();
    clean.trim().to_owned()
}

/// The largest non-JSON-RPC HTTP body read for an error message.
const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// A Streamable HTTP server. Cloning shares the connection pool and the session.
#[derive(Clone)]
pub(crate) struct Http {
    inner: Arc<HttpInner>,
}

struct HttpInner {
    client: reqwest::Client,
    url: reqwest::Url,
    /// The URL without any user or password, for messages.
    shown: String,
    headers: reqwest::header::HeaderMap,
    state: Mutex<HttpState>,
    inbound: mpsc::UnboundedSender<Inbound>,
    /// The largest JSON body or SSE event taken.
    max_message: usize,
}

#[derive(Default)]
struct HttpState {
    /// `Mcp-Session-Id` of a legacy session.
    session: Option<String>,
    /// `MCP-Protocol-Version` once known.
    version: Option<String>,
    /// The 2026-07-28 era: `Mcp-Method` and `Mcp-Name` on every request.
    modern: bool,
}

impl Http {
    /// A client for `url`, sending `headers` (from `--header`) on every request and taking
    /// answers and events of at most `max_message` bytes (`--max-message-mib`).
    pub(crate) fn new(
        url: &str,
        headers: reqwest::header::HeaderMap,
        inbound: mpsc::UnboundedSender<Inbound>,
        max_message: usize,
    ) -> anyhow::Result<Self> {
        let url = reqwest::Url::parse(url).with_context(|| format!("--url {url}: not a URL"))?;
        anyhow::ensure!(
            matches!(url.scheme(), "http" | "https"),
            "--url {url}: only http:// and https:// URLs are supported"
        );
        let mut shown = url.clone();
        let _ = shown.set_username("");
        let _ = shown.set_password(None);
        // rustls needs a process-wide crypto provider; ring is the one the workspace builds.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            // A redirect would replay the request, headers and all, somewhere else; the user
            // sees the status and the location instead.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("mcp-resources/", env!("CARGO_PKG_VERSION")))
            .build()
            .context("cannot build the HTTP client")?;
        Ok(Self {
            inner: Arc::new(HttpInner {
                client,
                url,
                shown: shown.to_string(),
                headers,
                max_message,
                state: Mutex::default(),
                inbound,
            }),
        })
    }

    /// Send `MCP-Protocol-Version: version` from now on; `modern` adds the 2026-07-28 routing
    /// headers.
    pub(crate) fn set_version(&self, version: &str, modern: bool) {
        let mut s = self.inner.state.lock().expect("http state lock");
        s.version = Some(version.to_owned());
        s.modern = modern;
    }

    /// Whether a legacy session id was handed out (the server keeps per-session state).
    pub(crate) fn has_session(&self) -> bool {
        self.inner
            .state
            .lock()
            .expect("http state lock")
            .session
            .is_some()
    }

    fn with_state_headers(
        &self,
        mut rb: reqwest::RequestBuilder,
        method: Option<&str>,
        name: Option<&str>,
    ) -> reqwest::RequestBuilder {
        let s = self.inner.state.lock().expect("http state lock");
        if let Some(session) = &s.session {
            rb = rb.header("Mcp-Session-Id", session);
        }
        if let Some(v) = &s.version {
            rb = rb.header("MCP-Protocol-Version", v);
        }
        if s.modern {
            if let Some(m) = method {
                rb = rb.header("Mcp-Method", m);
            }
            if let Some(n) = name {
                rb = rb.header("Mcp-Name", header_safe(n));
            }
        }
        rb
    }

    async fn post(
        &self,
        body: &Value,
        method: Option<&str>,
        name: Option<&str>,
    ) -> anyhow::Result<reqwest::Response> {
        let rb = self
            .inner
            .client
            .post(self.inner.url.clone())
            .headers(self.inner.headers.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(
                reqwest::header::ACCEPT,
                "application/json, text/event-stream",
            );
        let rb = self.with_state_headers(rb, method, name);
        let body = serde_json::to_vec(body).context("cannot encode the request")?;
        let resp = rb
            .body(body)
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        if let Some(id) = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            self.inner.state.lock().expect("http state lock").session = Some(id.to_owned());
        }
        Ok(resp)
    }

    fn unreachable(&self, e: reqwest::Error) -> anyhow::Error {
        let mut msg = format!("cannot reach the server at {}", self.inner.shown);
        // reqwest's own message is generic ("error sending request"); the cause says what
        // happened (connection refused, DNS, TLS).
        let mut source = std::error::Error::source(&e);
        let mut last = None;
        while let Some(s) = source {
            last = Some(s.to_string());
            source = s.source();
        }
        msg.push_str(": ");
        msg.push_str(&last.unwrap_or_else(|| e.to_string()));
        anyhow!(msg)
    }

    async fn request(&self, req: Outgoing<'_>) -> Reply {
        let resp = self.post(&req.message, Some(req.method), req.name).await?;
        let status = resp.status();
        if !status.is_success() {
            return Err(self.failed(resp).await);
        }
        if is_event_stream(&resp) {
            return match self.read_events(resp, Some(req.id)).await {
                Some(reply) => reply,
                None => Err(anyhow!(
                    "the server ended its event stream without answering {}",
                    req.method
                )),
            };
        }
        let mut body = resp.bytes_stream();
        let mut bytes = Vec::new();
        while let Some(chunk) = body.next().await {
            let chunk =
                chunk.map_err(|e| anyhow!("the answer to {} broke off: {e}", req.method))?;
            if bytes.len() + chunk.len() > self.inner.max_message {
                bail!(
                    "the answer to {} is over {} MiB; stopped reading (--max-message-mib raises the limit)",
                    req.method,
                    self.inner.max_message >> 20
                );
            }
            bytes.extend_from_slice(&chunk);
        }
        if bytes.is_empty() {
            bail!(
                "the server answered {} with HTTP {status} and no JSON-RPC response",
                req.method
            );
        }
        let msg: Incoming = serde_json::from_slice(&bytes).map_err(|e| {
            anyhow!(
                "the answer to {} is not JSON ({e}): {}",
                req.method,
                snippet(&String::from_utf8_lossy(&bytes[..bytes.len().min(200)]))
            )
        })?;
        if msg.id.as_ref().and_then(Value::as_u64) != Some(req.id) {
            bail!(
                "the server answered {} with another request's id",
                req.method
            );
        }
        reply_of(msg)
    }

    /// The error for a non-2xx answer: its JSON-RPC error when the body has one, else the
    /// status and the start of the body.
    async fn failed(&self, resp: reqwest::Response) -> anyhow::Error {
        let status = resp.status();
        let location = resp
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let mut body = Vec::new();
        let mut stream = resp.bytes_stream();
        while let Some(Ok(chunk)) = stream.next().await {
            body.extend_from_slice(&chunk);
            if body.len() >= ERROR_BODY_LIMIT {
                break;
            }
        }
        // Refused credentials are about the connection, not the request: they must not pass
        // for a legacy server's "unknown method" when `auto` decides on an era.
        let auth = matches!(status.as_u16(), 401 | 403);
        let sent_credentials = self
            .inner
            .headers
            .contains_key(reqwest::header::AUTHORIZATION);
        if let Ok(msg) = serde_json::from_slice::<Value>(&body)
            && let Some(error) = msg.get("error")
        {
            let error = RpcError::from_value(error);
            if auth {
                return HttpStatus {
                    status,
                    detail: error.message,
                    sent_credentials,
                }
                .into();
            }
            return error.into();
        }
        let detail = match location {
            Some(l) if status.is_redirection() => format!("redirected to {l}"),
            _ => snippet(&String::from_utf8_lossy(&body)),
        };
        HttpStatus {
            status,
            detail,
            sent_credentials,
        }
        .into()
    }

    /// Read a `text/event-stream` body: notifications to the inbound channel, requests from
    /// the server answered, until the response with id `want` (returned) or the stream's end
    /// (`None`).
    async fn read_events(&self, resp: reqwest::Response, want: Option<u64>) -> Option<Reply> {
        let mut stream = resp.bytes_stream();
        let mut parser = SseParser::default();
        loop {
            let chunk = match stream.next().await {
                Some(Ok(chunk)) => chunk,
                Some(Err(e)) => {
                    return want.map(|_| Err(anyhow!("the event stream broke off: {e}")));
                }
                None => return None,
            };
            if parser.pending() > self.inner.max_message {
                let e = anyhow!(
                    "the server sent an event over {} MiB without ending it; stopped reading (--max-message-mib raises the limit)",
                    self.inner.max_message >> 20
                );
                return Some(Err(e));
            }
            for data in parser.push(&chunk) {
                // An event without data primes a resumable stream; nothing to do.
                if data.trim().is_empty() {
                    continue;
                }
                let Ok(msg) = serde_json::from_str::<Incoming>(&data) else {
                    continue;
                };
                match (msg.method.as_deref(), msg.id.clone()) {
                    (None, id) => {
                        if want.is_some() && id.as_ref().and_then(Value::as_u64) == want {
                            return Some(reply_of(msg));
                        }
                    }
                    (Some(method), Some(id)) => {
                        let answer = answer_server_request(method, id);
                        if let Ok(resp) = self.post(&answer, None, None).await {
                            drop(resp);
                        }
                    }
                    (Some(_), None) => {
                        if let Ok(n) = serde_json::from_str::<Value>(&data) {
                            let _ = self.inner.inbound.send(Inbound::Notification(n));
                        }
                    }
                }
            }
        }
    }

    async fn notify(&self, message: Value) -> anyhow::Result<()> {
        let method = message
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let resp = self.post(&message, method.as_deref(), None).await?;
        if !resp.status().is_success() {
            return Err(self.failed(resp).await);
        }
        Ok(())
    }

    /// Open the legacy era's standalone `GET` stream, on which a session's notifications
    /// arrive, and forward them until it ends.
    pub(crate) async fn open_notification_stream(&self) -> anyhow::Result<()> {
        let rb = self
            .inner
            .client
            .get(self.inner.url.clone())
            .headers(self.inner.headers.clone())
            .header(reqwest::header::ACCEPT, "text/event-stream");
        let rb = self.with_state_headers(rb, None, None);
        let resp = rb.send().await.map_err(|e| self.unreachable(e))?;
        if resp.status() == reqwest::StatusCode::METHOD_NOT_ALLOWED {
            bail!("the server offers no stream for notifications (GET answered HTTP 405)");
        }
        if !resp.status().is_success() {
            return Err(self.failed(resp).await);
        }
        if !is_event_stream(&resp) {
            bail!("the server's notification stream is not text/event-stream");
        }
        let this = self.clone();
        tokio::spawn(async move {
            this.read_events(resp, None).await;
            let _ = this.inner.inbound.send(Inbound::Ended(
                "the server closed the notification stream".to_owned(),
            ));
        });
        Ok(())
    }

    async fn close(self) {
        let session = self
            .inner
            .state
            .lock()
            .expect("http state lock")
            .session
            .clone();
        if session.is_some() {
            let rb = self
                .inner
                .client
                .delete(self.inner.url.clone())
                .headers(self.inner.headers.clone());
            let rb = self.with_state_headers(rb, None, None);
            let _ = tokio::time::timeout(Duration::from_secs(2), rb.send()).await;
        }
    }
}

fn is_event_stream(resp: &reqwest::Response) -> bool {
    resp.headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.trim_start().starts_with("text/event-stream"))
}

/// A header value that survives HTTP: as is when plain visible ASCII, else wrapped as
/// `=?base64?…?=` (SEP-2243), which a 2026-07-28 server decodes before comparing with the body.
fn header_safe(value: &str) -> String {
    use base64::Engine as _;
    let needs_wrapping = value.starts_with([' ', '\t'])
        || value.ends_with([' ', '\t'])
        || value.chars().any(|c| !(' '..='~').contains(&c))
        || (value.starts_with("=?base64?") && value.ends_with("?="));
    if !needs_wrapping {
        value.to_owned()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(value)
        )
    }
}

/// An incremental `text/event-stream` parser: bytes in, the `data` of each complete event
/// out. Comments (`:` keep-alives), `event`, `id` and `retry` fields are skipped.
#[derive(Default)]
struct SseParser {
    buf: Vec<u8>,
    data: Option<String>,
}

impl SseParser {
    /// Bytes held for the event in progress.
    fn pending(&self) -> usize {
        self.buf.len() + self.data.as_ref().map_or(0, String::len)
    }

    fn push(&mut self, chunk: &[u8]) -> Vec<String> {
        self.buf.extend_from_slice(chunk);
        let mut events = Vec::new();
        while let Some(nl) = self.buf.iter().position(|&b| b == b'\n' || b == b'\r') {
            // A CR LF pair is one line end; a CR at the very end of the buffer may be
            // followed by an LF in the next chunk, so wait for it.
            let crlf = self.buf[nl] == b'\r' && self.buf.get(nl + 1) == Some(&b'\n');
            if self.buf[nl] == b'\r' && nl + 1 == self.buf.len() {
                break;
            }
            let line: Vec<u8> = self.buf.drain(..nl).collect();
            self.buf.drain(..if crlf { 2 } else { 1 });
            let line = String::from_utf8_lossy(&line);
            if line.is_empty() {
                if let Some(data) = self.data.take() {
                    events.push(data);
                }
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((&line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            if field == "data" {
                match &mut self.data {
                    Some(d) => {
                        d.push('\n');
                        d.push_str(value);
                    }
                    None => self.data = Some(value.to_owned()),
                }
            }
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_events_split_across_chunks_and_line_ends() {
        let mut p = SseParser::default();
        assert!(p.push(b": keep-alive\n\nid: 1\ndata: {\"a\"").is_empty());
        assert_eq!(p.push(b":1}\r"), Vec::<String>::new());
        assert_eq!(p.push(b"\n\r\n"), vec!["{\"a\":1}".to_owned()]);
        assert_eq!(
            p.push(b"event: message\ndata: x\ndata: y\n\n"),
            vec!["x\ny".to_owned()]
        );
        // A priming event: an id and empty data.
        assert_eq!(p.push(b"id: 7\ndata:\n\n"), vec![String::new()]);
    }

    #[test]
    fn header_values_outside_visible_ascii_are_base64_wrapped() {
        assert_eq!(header_safe("file:///a b.txt"), "file:///a b.txt");
        assert_eq!(header_safe("file:///é"), "=?base64?ZmlsZTovLy/DqQ==?=");
        assert_eq!(header_safe(" x"), "=?base64?IHg=?=");
    }
}
