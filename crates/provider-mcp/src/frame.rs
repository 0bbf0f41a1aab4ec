//! A stdio upstream's output bounded message by message, before rmcp reads it: a line (one
//! JSON-RPC message) longer than `max_message_bytes` is cut off and the rest of it dropped as
//! it streams in, never held, and when its start names the id of an answer, an error answer
//! for that id takes its place, so the request it answered fails at once naming the limit
//! instead of waiting out the timeout.
//!
//! The transport's own line limit (`crate::stdio`, set to the same size) drops the cut-off
//! line: what is passed on of it is exactly the limit long, and the newline added after it
//! takes it over.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

/// The `data` key of the error answer put in place of an oversized one; its value is the
/// limit in bytes. [`crate::error::service`] turns such an error into a too-large error.
pub(crate) const TOO_LARGE_KEY: &str = "io.github.mcp-resources/messageTooLarge";

/// How much of a line's start is kept to find its id: JSON-RPC answers (rmcp's, the
/// TypeScript and Python SDKs') put `jsonrpc` and `id` before `result`.
const HEAD: usize = 4096;

/// How much is read from the upstream at a time.
const CHUNK: usize = 64 * 1024;

/// The upstream's stdout with every message bounded to `max` bytes (its newline included).
pub(crate) struct Bounded<R> {
    inner: R,
    mount: String,
    max: u64,
    /// Bytes of the current line passed on so far.
    line: u64,
    /// The first [`HEAD`] bytes of the current line.
    head: Vec<u8>,
    /// The rest of an oversized line is being dropped, up to its newline.
    swallowing: bool,
    /// Bytes ready for the reader, from `pos`.
    out: Vec<u8>,
    pos: usize,
    chunk: Box<[u8]>,
}

impl<R> Bounded<R> {
    pub(crate) fn new(inner: R, mount: &str, max: u64) -> Self {
        Self {
            inner,
            mount: mount.to_owned(),
            max: max.max(1),
            line: 0,
            head: Vec::new(),
            swallowing: false,
            out: Vec::new(),
            pos: 0,
            chunk: vec![0; CHUNK].into_boxed_slice(),
        }
    }

    fn end_line(&mut self) {
        self.line = 0;
        self.head.clear();
    }

    /// Pass `input` on into `out`, bounding each line.
    fn process(&mut self, mut input: &[u8]) {
        while !input.is_empty() {
            let newline = memchr::memchr(b'\n', input);
            let (seg, rest) = input.split_at(newline.map_or(input.len(), |i| i + 1));
            input = rest;
            if self.swallowing {
                if newline.is_some() {
                    self.swallowing = false;
                    self.end_line();
                }
                continue;
            }
            let room = self.max - self.line;
            if seg.len() as u64 <= room {
                self.keep_head(seg);
                self.out.extend_from_slice(seg);
                self.line += seg.len() as u64;
                if newline.is_some() {
                    self.end_line();
                }
                continue;
            }
            // Over the limit: rmcp gets it filled to exactly `max`, then a newline, which it
            // drops as oversized; our error answer follows.
            let room = room as usize;
            self.keep_head(&seg[..room]);
            self.out.extend_from_slice(&seg[..room]);
            self.out.push(b'\n');
            let id = id_of(&self.head);
            tracing::warn!(
                mount = %self.mount,
                "the upstream sent a message of more than {} bytes (max_message_bytes); it was dropped{}",
                self.max,
                if id.is_some() { " and its request answered with an error" } else { "" }
            );
            if let Some(id) = id {
                let answer = serde_json::json!({
                    "jsonrpc": "2.0",
                    "id": id,
                    "error": {
                        "code": -32603,
                        "message": format!("the upstream's answer is more than {} bytes (max_message_bytes)", self.max),
                        "data": { TOO_LARGE_KEY: self.max },
                    },
                });
                self.out.extend_from_slice(answer.to_string().as_bytes());
                self.out.push(b'\n');
            }
            self.end_line();
            self.swallowing = newline.is_none();
        }
    }

    fn keep_head(&mut self, seg: &[u8]) {
        let want = HEAD.saturating_sub(self.head.len()).min(seg.len());
        self.head.extend_from_slice(&seg[..want]);
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Bounded<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        dst: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.pos < this.out.len() {
                let n = (this.out.len() - this.pos).min(dst.remaining());
                dst.put_slice(&this.out[this.pos..this.pos + n]);
                this.pos += n;
                if this.pos == this.out.len() {
                    this.out.clear();
                    this.pos = 0;
                }
                return Poll::Ready(Ok(()));
            }
            let mut buf = ReadBuf::new(&mut this.chunk);
            match Pin::new(&mut this.inner).poll_read(cx, &mut buf) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {
                    let n = buf.filled().len();
                    if n == 0 {
                        // The end of the stream.
                        return Poll::Ready(Ok(()));
                    }
                    let input = std::mem::take(&mut this.chunk);
                    this.process(&input[..n]);
                    this.chunk = input;
                    // A chunk that was all swallowed leaves nothing to hand out: read on.
                }
            }
        }
    }
}

/// The top-level `id` of the JSON-RPC answer whose start is `head`: a number or a string,
/// and only when the start shows no `method` (a request or notice from the upstream is not
/// answered by us). `None` when it is not there or cut off.
fn id_of(head: &[u8]) -> Option<serde_json::Value> {
    let ws = |b: u8| matches!(b, b' ' | b'\t' | b'\r' | b'\n');
    let mut i = 0;
    while i < head.len() && ws(head[i]) {
        i += 1;
    }
    if head.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    let mut depth = 1usize;
    let mut id = None;
    while i < head.len() {
        match head[i] {
            b'"' => {
                let start = i + 1;
                let mut j = start;
                while j < head.len() && head[j] != b'"' {
                    j += if head[j] == b'\\' { 2 } else { 1 };
                }
                if j >= head.len() {
                    return id;
                }
                let key = &head[start..j];
                i = j + 1;
                if depth != 1 {
                    continue;
                }
                let mut k = i;
                while k < head.len() && ws(head[k]) {
                    k += 1;
                }
                if head.get(k) != Some(&b':') {
                    continue;
                }
                if key == b"method" {
                    return None;
                }
                if key == b"id" {
                    let mut values =
                        serde_json::Deserializer::from_slice(&head[k + 1..]).into_iter();
                    let v: serde_json::Value = values.next()?.ok()?;
                    // A number that reaches the end of the head may be cut short.
                    if k + 1 + values.byte_offset() >= head.len() {
                        return None;
                    }
                    if !(v.is_number() || v.is_string()) {
                        return None;
                    }
                    id = Some(v);
                    i = k + 1 + values.byte_offset();
                }
            }
            b'{' | b'[' => {
                depth += 1;
                i += 1;
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            _ => i += 1,
        }
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt as _;

    #[test]
    fn the_id_is_found_at_the_top_level_only() {
        let id = |s: &str| id_of(s.as_bytes());
        assert_eq!(id(r#"{"jsonrpc":"2.0","id":7,"result":{"#), Some(7.into()));
        assert_eq!(id(r#" { "id" : "a\"b", "result":"#), Some("a\"b".into()));
        assert_eq!(
            id(r#"{"result":{"id":1,"contents":[{"id":2}]},"id":3,"x""#),
            Some(3.into())
        );
        assert_eq!(id(r#"{"result":{"id":1,"text":"bbbb"#), None);
        assert_eq!(id(r#"{"jsonrpc":"2.0","id":12"#), None, "maybe cut short");
        assert_eq!(id(r#"{"method":"x","id":1,"params":"#), None);
        assert_eq!(id(r#"{"id":null,"error":"#), None);
        assert_eq!(id("[1,2"), None);
    }

    async fn through(input: Vec<u8>, max: u64) -> String {
        let mut out = String::new();
        Bounded::new(&input[..], "m", max)
            .read_to_string(&mut out)
            .await
            .unwrap();
        out
    }

    #[tokio::test]
    async fn a_long_line_is_cut_and_answered() {
        let small = "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n";
        let mut big = br#"{"jsonrpc":"2.0","id":2,"result":{"text":""#.to_vec();
        big.extend(std::iter::repeat_n(b'b', 300_000));
        big.extend_from_slice(b"\"}}\n");
        let input = [small.as_bytes(), &big, small.as_bytes()].concat();
        let out = through(input, 1000).await;
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 4, "{}", &out[..200]);
        assert_eq!(lines[0], small.trim_end());
        assert_eq!(lines[1].len(), 1000, "filled to the limit, then a newline");
        let err: serde_json::Value = serde_json::from_str(lines[2]).unwrap();
        assert_eq!(err["id"], 2);
        assert_eq!(err["error"]["data"][TOO_LARGE_KEY], 1000);
        assert_eq!(lines[3], small.trim_end());
        // A line of exactly the limit (its newline included) passes whole.
        let exact = format!("{}\n", "x".repeat(999));
        assert_eq!(through(exact.clone().into_bytes(), 1000).await, exact);
    }

    #[tokio::test]
    async fn a_line_without_an_end_is_answered_at_once() {
        let mut big = br#"{"jsonrpc":"2.0","id":"r1","result":{"text":""#.to_vec();
        big.extend(std::iter::repeat_n(b'b', 200_000));
        let out = through(big, 500).await;
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2);
        let err: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(err["id"], "r1");
    }
}
