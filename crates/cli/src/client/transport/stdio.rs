//! A server started as a child process, speaking newline-delimited JSON on its stdin and
//! stdout; its stderr is kept (the last lines) to say why it exited.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::{mpsc, oneshot};

use mcpr_core::sync::lock;

use super::{
    AnswerTooLarge, ConnectionEnded, Inbound, Incoming, Outgoing, Pending, Reply, Waiter, dispatch,
    finish, snippet,
};

/// How many of the child's last stderr lines are kept for error messages.
const STDERR_TAIL: usize = 20;
/// The longest stderr line kept whole; a longer one is kept in pieces of this size.
const STDERR_LINE: usize = 64 * 1024;
/// How many of the child's last non-blank stderr lines an exit shows: a server's own error is
/// often a few lines above its last one (clap ends with `For more information, try '--help'.`).
const SHOWN_LINES: usize = 10;
/// The most bytes of stderr an exit shows, all lines together (each is already cut to 200
/// characters): a server that logs long lines cannot flood the terminal.
const SHOWN_BYTES: usize = 2048;

/// The last non-blank lines of `tail`, cleaned, oldest first: at most [`SHOWN_LINES`] of them
/// and [`SHOWN_BYTES`] together (the newest kept first, since the last lines say most).
fn shown_tail<'a>(tail: impl DoubleEndedIterator<Item = &'a String>) -> Vec<String> {
    let mut shown = Vec::new();
    let mut bytes = 0;
    for line in tail.rev().map(|l| snippet(l)).filter(|l| !l.is_empty()) {
        if shown.len() == SHOWN_LINES || bytes + line.len() > SHOWN_BYTES {
            break;
        }
        bytes += line.len();
        shown.push(line);
    }
    shown.reverse();
    shown
}

/// One line read by [`read_line`].
enum Line {
    /// The line, without its `\n` (or `\r\n`); the last one may lack it.
    Text(Vec<u8>),
    /// The first `max + 1` bytes of a longer line; the rest is still to be read.
    TooLong(Vec<u8>),
    /// The end of the stream.
    End,
}

/// Reads one line of at most `max()` bytes, never holding more than `max() + 1` of it. The
/// bound is asked again for each piece read, so a request sent while the reader waits (whose
/// answer may take less than the connection's bound) is held to its own from its first byte.
async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    max: impl Fn() -> usize,
) -> std::io::Result<Line> {
    let mut buf = Vec::new();
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(if buf.is_empty() {
                Line::End
            } else {
                Line::Text(buf)
            });
        }
        let newline = available.iter().position(|&b| b == b'\n');
        let piece = newline.map_or(available.len(), |i| i + 1);
        let limit = max();
        let content = buf.len() + piece - usize::from(newline.is_some());
        if content > limit {
            // The first `limit + 1` bytes only; the rest stays unread.
            let keep = (limit + 1).saturating_sub(buf.len()).min(piece);
            buf.extend_from_slice(&available[..keep]);
            reader.consume(keep);
            return Ok(Line::TooLong(buf));
        }
        buf.extend_from_slice(&available[..piece]);
        reader.consume(piece);
        if newline.is_some() {
            buf.pop();
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            return Ok(Line::Text(buf));
        }
    }
}

/// The bound on the next line from the server: `max_message`, or, while requests wait, the
/// largest their own bounds allow (a line may answer any of them).
fn line_limit(pending: &Pending, max_message: usize) -> usize {
    let waiting = lock(pending);
    waiting
        .values()
        .map(|w| w.max.map_or(max_message, |m| m.min(max_message)))
        .max()
        .unwrap_or(max_message)
}

/// The child's stdin, shared by requests and by answers to the server's own requests; the
/// mutex keeps each line whole on the pipe.
type SharedStdin = Arc<tokio::sync::Mutex<Option<ChildStdin>>>;

/// A server started as a child process, speaking newline-delimited JSON on its stdin/stdout.
pub(crate) struct Stdio {
    stdin: SharedStdin,
    pending: Pending,
    /// Why the connection ended, once it has.
    ended: Arc<Mutex<Option<ConnectionEnded>>>,
    child: Arc<tokio::sync::Mutex<Child>>,
}

impl Stdio {
    /// Start `command` (program and arguments) with piped stdio. A line on its stdout may be
    /// `max_message` bytes long at most (`--max-message-mib`).
    pub(crate) fn spawn(
        command: &[OsString],
        env: &[(String, String)],
        inbound: mpsc::UnboundedSender<Inbound>,
        max_message: usize,
    ) -> anyhow::Result<Self> {
        let (program, args) = command
            .split_first()
            .context("no server command after `--`")?;
        let shown = program.to_string_lossy().into_owned();
        let mut child = tokio::process::Command::new(program)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| ConnectionEnded::new(format!("cannot start the server `{shown}`: {e}")))?;
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
                    let line = match read_line(&mut stderr, || STDERR_LINE).await {
                        Ok(Line::Text(bytes) | Line::TooLong(bytes)) => {
                            String::from_utf8_lossy(&bytes).into_owned()
                        }
                        Ok(Line::End) | Err(_) => break,
                    };
                    let mut t = lock(&tail);
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
                let line = match read_line(&mut stdout, || line_limit(&pending, max_message)).await
                {
                    Ok(Line::Text(bytes)) => String::from_utf8(bytes)
                        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
                    Ok(Line::TooLong(_)) => {
                        // Reading on would hold the whole line: a server gone wrong (or one
                        // that is not speaking JSON-RPC) could take all memory. A request
                        // whose own bound is the one passed is told so by a typed error.
                        let limit = line_limit(&pending, max_message);
                        let capped = {
                            let mut waiting = lock(&pending);
                            let id = waiting
                                .iter()
                                .find(|(_, w)| w.max == Some(limit) && limit < max_message)
                                .map(|(id, _)| *id);
                            id.and_then(|id| waiting.remove(&id))
                        };
                        let reason = match capped {
                            Some(w) => {
                                let e = AnswerTooLarge {
                                    method: w.method,
                                    limit,
                                };
                                let reason = format!("the server `{shown}`: {e}");
                                let _ = w.tx.send(Err(e.into()));
                                reason
                            }
                            None => format!(
                                "the server `{shown}` wrote a line of over {} MiB to stdout; stopped reading (--max-message-mib raises the limit)",
                                max_message >> 20
                            ),
                        };
                        finish(&pending, &ended, &inbound, ConnectionEnded::new(reason));
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
                        finish(&pending, &ended, &inbound, ConnectionEnded::new(reason));
                        return;
                    }
                }
            }
            // stdout closed: the child exited or is exiting. Its status and last stderr lines
            // make the message; the stderr reader gets a moment to catch the last lines.
            let status = tokio::time::timeout(Duration::from_secs(2), async {
                child.lock().await.wait().await
            })
            .await;
            let _ = tokio::time::timeout(Duration::from_millis(500), stderr_task).await;
            let reason = match status {
                Ok(Ok(s)) => format!("the server `{shown}` exited ({s})"),
                _ => format!("the server `{shown}` closed its stdout"),
            };
            let stderr = shown_tail(lock(&tail).iter());
            finish(
                &pending,
                &ended,
                &inbound,
                ConnectionEnded { reason, stderr },
            );
        });
        Ok(this)
    }

    pub(super) async fn request(&self, req: Outgoing<'_>) -> Reply {
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(
            req.id,
            Waiter {
                tx,
                method: req.method.to_owned(),
                max: req.max,
            },
        );
        if let Err(e) = self.write(&req.message).await {
            lock(&self.pending).remove(&req.id);
            return Err(e);
        }
        match rx.await {
            Ok(reply) => reply,
            Err(_) => Err(self.ended_reason().into()),
        }
    }

    pub(super) async fn write(&self, message: &Value) -> anyhow::Result<()> {
        if write_line(&self.stdin, message).await.is_err() {
            // A broken pipe means the child is gone; the reader task says why, shortly.
            tokio::time::sleep(Duration::from_millis(300)).await;
            return Err(self.ended_reason().into());
        }
        Ok(())
    }

    fn ended_reason(&self) -> ConnectionEnded {
        lock(&self.ended)
            .clone()
            .unwrap_or_else(|| ConnectionEnded::new("the server closed the connection".to_owned()))
    }

    pub(super) async fn close(self, grace: Duration) {
        // EOF on stdin is how a stdio MCP server is told to exit.
        self.stdin.lock().await.take();
        let mut child = self.child.lock().await;
        if tokio::time::timeout(grace, child.wait()).await.is_err() {
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
