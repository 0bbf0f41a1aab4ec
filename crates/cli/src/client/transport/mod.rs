//! The client's ways to carry JSON-RPC: a child process over stdio ([`stdio`]), Streamable
//! HTTP ([`http`]), the 2024-11-05 HTTP+SSE transport ([`legacy_sse`]), and the
//! `text/event-stream` bodies both HTTP ones read ([`sse`]).
//!
//! All carry raw JSON-RPC (`serde_json::Value`), so `ls --json` can print resources exactly as
//! the server sent them. Responses are matched to requests by id; notifications from the
//! server go to one channel the session reads; a request from the server is answered (`ping`)
//! or refused (-32601), since this client declares no capabilities. This file holds what the
//! transports share: the message types, the routing and the errors.

mod http;
mod legacy_sse;
mod sse;
mod stdio;

pub(crate) use http::{DEFAULT_RETRY, Http, HttpStatus, RECONNECTS, StreamDropped};
pub(crate) use legacy_sse::LegacySse;
pub(crate) use stdio::Stdio;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use anyhow::anyhow;
use mcpr_core::sync::lock;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

/// Whether `--verbose` asked for the JSON-RPC trace on stderr.
static VERBOSE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The most characters of one message the trace shows: a large answer is cut, with its size.
const TRACE_CHARS: usize = 4096;

/// Turn the `--verbose` trace on.
pub(crate) fn set_verbose() {
    VERBOSE.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// A line of the `--verbose` trace that is not a message: what the client decided (a fallback
/// to another transport), for whoever reads the trace to know why the requests change.
pub(crate) fn note(text: &str) {
    if VERBOSE.load(std::sync::atomic::Ordering::Relaxed) {
        eprintln!("-- {}", crate::client::output::clean(text));
    }
}

/// One line of the `--verbose` trace on stderr: `arrow` (`->` sent, `<-` received) and the
/// message, cleaned for the terminal and cut at [`TRACE_CHARS`]. Messages carry no header;
/// what could be secret in HTTP (header values, a URL's query) is masked by the caller.
pub(super) fn trace(arrow: &str, text: &str) {
    if !VERBOSE.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    let shown: String = text.chars().take(TRACE_CHARS).collect();
    let cut = if shown.len() < text.len() {
        format!(" … ({} bytes in all)", text.len())
    } else {
        String::new()
    };
    eprintln!("{arrow} {}{cut}", crate::client::output::clean(&shown));
}

/// A JSON-RPC error answered by the server. Displays as `message (code)`.
#[derive(Debug, Clone)]
pub(crate) struct RpcError {
    pub code: i64,
    pub message: String,
    /// The error's `data`, e.g. the versions a server speaks with -32022.
    pub data: Option<Value>,
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for RpcError {}

/// An answer that grew past the bound its request set ([`Outgoing::max`]), below
/// `--max-message-mib`: reading stopped there, so no more than that was held.
#[derive(Debug, Clone)]
pub(crate) struct AnswerTooLarge {
    pub method: String,
    /// The bound, in bytes.
    pub limit: usize,
}

impl fmt::Display for AnswerTooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the answer to {} is over {} bytes, the most this request takes; stopped reading",
            self.method, self.limit
        )
    }
}

impl std::error::Error for AnswerTooLarge {}

impl RpcError {
    pub(super) fn from_value(error: &Value) -> Self {
        Self {
            code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("the server sent an error without a message")
                .to_owned(),
            data: error.get("data").cloned(),
        }
    }
}

/// What arrives from the server outside the answers to our requests.
#[derive(Debug)]
pub(crate) enum Inbound {
    /// A JSON-RPC notification, as sent.
    Notification(Value),
    /// The notification stream dropped and is being reconnected, with why and how.
    Dropped(String),
    /// The connection (or the notification stream) ended, with why.
    Ended(ConnectionEnded),
}

/// Why there is no connection to the server (any more): it could not be started or reached,
/// or the connection ended; one line, and for a child server that exited, the last lines it
/// wrote to stderr (a server's own error is often several lines above its last one, as with
/// clap's `For more information, try '--help'.`).
#[derive(Debug, Clone)]
pub(crate) struct ConnectionEnded {
    pub reason: String,
    /// The child's last non-blank stderr lines, oldest first, each cleaned by [`snippet`];
    /// empty over HTTP.
    pub stderr: Vec<String>,
}

impl ConnectionEnded {
    /// An end with nothing from stderr to show.
    pub(crate) fn new(reason: String) -> Self {
        Self {
            reason,
            stderr: Vec::new(),
        }
    }
}

impl fmt::Display for ConnectionEnded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for ConnectionEnded {}

/// The answer to one request: its `result` as the server wrote it, or the error it got.
pub(super) type Reply = Result<Box<RawValue>, anyhow::Error>;

/// A message from the server, split just enough to route it; `result` stays unparsed so a
/// command can print parts of it exactly as sent.
#[derive(Deserialize)]
pub(super) struct Incoming {
    #[serde(default)]
    pub(super) id: Option<Value>,
    #[serde(default)]
    pub(super) method: Option<String>,
    #[serde(default)]
    pub(super) result: Option<Box<RawValue>>,
    #[serde(default)]
    pub(super) error: Option<Value>,
}

/// One outgoing request: its id, method and the whole JSON-RPC message.
pub(crate) struct Outgoing<'a> {
    pub id: u64,
    pub method: &'a str,
    pub message: Value,
    /// The `Mcp-Name` header's value (over HTTP, in either era).
    pub name: Option<&'a str>,
    /// The most bytes the answer may take, when the caller knows it to be less than
    /// `--max-message-mib` (a skill file whose size the manifest gives): the transport stops
    /// reading there, rather than holding a large answer and refusing it afterwards.
    pub max: Option<usize>,
}

/// A connected transport.
pub(crate) enum Transport {
    Stdio(Stdio),
    Http(Http),
    /// The 2024-11-05 HTTP+SSE transport.
    Sse(LegacySse),
}

impl Transport {
    /// Send a request and wait for its answer (the session bounds the wait).
    pub(crate) async fn request(&self, req: Outgoing<'_>) -> Reply {
        trace("->", &req.message.to_string());
        match self {
            Transport::Stdio(s) => s.request(req).await,
            Transport::Http(h) => h.request(req).await,
            Transport::Sse(s) => s.request(req).await,
        }
    }

    /// Send a notification (no answer expected).
    pub(crate) async fn notify(&self, message: Value) -> anyhow::Result<()> {
        trace("->", &message.to_string());
        match self {
            Transport::Stdio(s) => s.write(&message).await,
            Transport::Http(h) => h.notify(message).await,
            Transport::Sse(s) => s.notify(message).await,
        }
    }

    /// End the connection politely, waiting at most `grace`: stdin closed (then the child
    /// killed if it lingers), the legacy HTTP session deleted, or the HTTP+SSE stream closed.
    pub(crate) async fn close(self, grace: std::time::Duration) {
        match self {
            Transport::Stdio(s) => s.close(grace).await,
            Transport::Http(h) => h.close(grace).await,
            Transport::Sse(s) => s.close(),
        }
    }
}

/// A request waiting for its answer.
pub(super) struct Waiter {
    pub(super) tx: oneshot::Sender<Reply>,
    pub(super) method: String,
    /// [`Outgoing::max`].
    pub(super) max: Option<usize>,
}

/// Requests waiting for their answer, by id.
pub(super) type Pending = Arc<Mutex<HashMap<u64, Waiter>>>;

/// Route one message from the server (`line` is its text). Returns the answer to send back
/// when the message was a request of the server's own.
pub(super) fn dispatch(
    msg: Incoming,
    line: &str,
    pending: &Pending,
    inbound: &mpsc::UnboundedSender<Inbound>,
) -> Option<Value> {
    trace("<-", line);
    match (msg.method.as_deref(), msg.id.clone()) {
        (None, Some(id)) => {
            let waiter = id.as_u64().and_then(|id| lock(pending).remove(&id))?;
            let _ = waiter.tx.send(reply_of(msg));
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
pub(super) fn reply_of(msg: Incoming) -> Reply {
    if let Some(error) = &msg.error {
        return Err(RpcError::from_value(error).into());
    }
    msg.result
        .ok_or_else(|| anyhow!("the server sent a response with neither `result` nor `error`"))
}

/// `ping` is answered; anything else the server asks (sampling, roots, elicitation) is refused,
/// as this client declares none of those capabilities.
pub(super) fn answer_server_request(method: &str, id: Value) -> Value {
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
pub(super) fn finish(
    pending: &Pending,
    ended: &Mutex<Option<ConnectionEnded>>,
    inbound: &mpsc::UnboundedSender<Inbound>,
    reason: ConnectionEnded,
) {
    *lock(ended) = Some(reason.clone());
    for (_, waiter) in lock(pending).drain() {
        let _ = waiter.tx.send(Err(reason.clone().into()));
    }
    let _ = inbound.send(Inbound::Ended(reason));
}

/// The start of a line for an error message, what a terminal would act on made blanks.
pub(super) fn snippet(line: &str) -> String {
    let clean: String = line
        .chars()
        .map(|c| {
            if crate::client::output::unsafe_on_terminal(c) {
                ' '
            } else {
                c
            }
        })
        .take(200)
        .collect();
    clean.trim().to_owned()
}
