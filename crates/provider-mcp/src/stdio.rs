//! The stdio upstream's transport under rmcp's client: lines in, lines out, like rmcp's own
//! `AsyncRwTransport`, with two costs of the gateway's read taken out.
//!
//! - **The answer to a read is decoded as a read answer.** rmcp decodes every line as its
//!   untagged `ServerJsonRpcMessage`: the line is buffered into a tree of owned values, tried
//!   as a request, then as a response whose `ServerResult` union tries `DiscoverResult`,
//!   `InitializeResult` and five more result types (each failure a formatted `serde_json`
//!   error) before `ReadResourceResult`. That was 15 % of the gateway's CPU at 32 reads in
//!   flight (`perf record`, 2026-11-29). Here [`UpstreamStdio::send`] notes the id of every
//!   `resources/read` it sends, and a line answering one of those ids, holding nothing but
//!   `jsonrpc`, `id` and `result`, is parsed once, straight into rmcp's own
//!   `ReadResourceResult` (its `Deserialize`, so the value rmcp would have built). Any other
//!   line, or one that does not parse so, goes through rmcp's `JsonRpcMessageCodec` with the
//!   compatibility rules of rmcp's transport (listed at [`UpstreamStdio::receive`]).
//! - **Requests sent together are written together.** rmcp's serve loop spawns one task per
//!   outgoing message, and its transport takes a lock and makes one `write` for each. Here
//!   `send` appends the encoded line to a pending buffer at once (so lines keep the order
//!   rmcp sent them in), and the first of the tasks to run writes everything pending in one
//!   `write`; the others find their line written and finish. A failed write fails every
//!   send after it.
//!
//! Lines reach this transport already bounded by [`crate::frame::Bounded`]; a line over
//! `max` bytes is dropped here, as rmcp's line limit dropped it.

use std::collections::HashSet;
use std::io;
use std::sync::{Arc, Mutex};

use bytes::BytesMut;
use mcpr_core::sync::lock;
use rmcp::RoleClient;
use rmcp::model::{
    ClientNotification, ClientRequest, ErrorData, JsonRpcMessage, JsonRpcResponse,
    JsonRpcVersion2_0, ReadResourceResult, RequestId, ServerResult,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::{JsonRpcMessageCodec, JsonRpcMessageCodecError};
use serde::Deserialize;
use serde::de::{DeserializeSeed, Error as _, MapAccess, Visitor};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::codec::Decoder;

/// How much is read from the upstream at a time.
const CHUNK: usize = 64 * 1024;
/// The most read ids kept awaiting their answers. Past it they are all forgotten: their
/// answers then take rmcp's decode, which gives the same value, only slower. Ids leave when
/// their answer or their cancellation passes, so this is reached only by an upstream that
/// leaves thousands of reads unanswered and uncancelled.
const MAX_AWAITED: usize = 4096;

/// The transport of one stdio upstream: its (bounded) stdout and its stdin.
pub(crate) struct UpstreamStdio<R, W> {
    read: R,
    /// Bytes read and not yet taken, from `start`; `scanned` bytes past `start` hold no
    /// newline.
    buf: Vec<u8>,
    start: usize,
    scanned: usize,
    /// The longest line taken, its newline included.
    max: usize,
    /// The ids of the `resources/read` requests sent and not yet answered.
    reads: Arc<Mutex<HashSet<RequestId>>>,
    out: Arc<Output<W>>,
    /// rmcp's decode, for every line the read decode does not take.
    codec: JsonRpcMessageCodec<RxJsonRpcMessage<RoleClient>>,
    /// An answer of ours to the upstream was queued by the decode, to be written.
    answered: bool,
}

/// The write side, shared with the send futures.
struct Output<W> {
    /// Encoded lines not yet written, and the error that ended writing.
    pending: Mutex<Pending>,
    /// The upstream's stdin; `None` once closed. Held while a write is under way.
    writer: tokio::sync::Mutex<Option<W>>,
}

#[derive(Default)]
struct Pending {
    bytes: Vec<u8>,
    failed: Option<(io::ErrorKind, String)>,
}

impl<R, W> UpstreamStdio<R, W> {
    pub(crate) fn new(read: R, write: W, max: usize) -> Self {
        Self {
            read,
            buf: Vec::new(),
            start: 0,
            scanned: 0,
            max: max.max(1),
            reads: Arc::default(),
            out: Arc::new(Output {
                pending: Mutex::default(),
                writer: tokio::sync::Mutex::new(Some(write)),
            }),
            codec: JsonRpcMessageCodec::default(),
            answered: false,
        }
    }

    /// Note what a message rmcp sends means for the answers to come: a read's id is
    /// awaited, a cancelled request's id is not.
    fn note(&self, item: &TxJsonRpcMessage<RoleClient>) {
        match item {
            JsonRpcMessage::Request(r)
                if matches!(r.request, ClientRequest::ReadResourceRequest(_)) =>
            {
                let mut reads = lock(&self.reads);
                if reads.len() >= MAX_AWAITED {
                    reads.clear();
                }
                reads.insert(r.id.clone());
            }
            JsonRpcMessage::Notification(n) => {
                if let ClientNotification::CancelledNotification(c) = &n.notification
                    && let Some(id) = &c.params.request_id
                {
                    lock(&self.reads).remove(id);
                }
            }
            _ => {}
        }
    }

    /// The next whole line in the buffer (without its newline), if there is one.
    fn next_line(&mut self) -> Option<(usize, usize)> {
        let from = self.start + self.scanned;
        match memchr::memchr(b'\n', &self.buf[from..]) {
            Some(i) => {
                let (line, end) = (self.start, from + i);
                self.start = end + 1;
                self.scanned = 0;
                Some((line, end))
            }
            None => {
                self.scanned = self.buf.len() - self.start;
                None
            }
        }
    }

    /// One line to a message, or `None` to skip it.
    fn decode(&mut self, line: &[u8]) -> Option<RxJsonRpcMessage<RoleClient>> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        if line.is_empty() {
            return None;
        }
        if let Some(msg) = decode_read_answer(line, &self.reads) {
            return Some(msg);
        }
        let mut framed = BytesMut::with_capacity(line.len() + 1);
        framed.extend_from_slice(line);
        framed.extend_from_slice(b"\n");
        match self.codec.decode(&mut framed) {
            Ok(Some(msg)) => {
                if let JsonRpcMessage::Response(JsonRpcResponse { id, .. }) = &msg {
                    lock(&self.reads).remove(id);
                } else if let JsonRpcMessage::Error(e) = &msg
                    && let Some(id) = &e.id
                {
                    lock(&self.reads).remove(id);
                }
                Some(msg)
            }
            Ok(None) => None,
            Err(JsonRpcMessageCodecError::Serde(e)) => {
                match e.classify() {
                    // Not JSON: no id to answer, and an answer could start an error storm
                    // with a peer that echoes it (rmcp's rule).
                    serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
                        tracing::debug!("Ignoring unparsable incoming message: {e}");
                    }
                    // JSON that is no message: rmcp answers it as an invalid request.
                    _ => {
                        tracing::debug!("Protocol error on incoming message: {e}");
                        let answer = TxJsonRpcMessage::<RoleClient>::error(
                            ErrorData::invalid_request("Invalid request", None),
                            None,
                        );
                        self.answered |= self.out.queue(&answer).unwrap_or(false);
                    }
                }
                None
            }
            Err(e) => {
                tracing::error!("Error decoding an incoming message: {e}");
                None
            }
        }
    }
}

/// The answer to an awaited read, parsed once as a read answer; `None` leaves the line to
/// rmcp's decode (another message, another shape, a read answer that does not parse).
fn decode_read_answer(
    line: &[u8],
    reads: &Mutex<HashSet<RequestId>>,
) -> Option<RxJsonRpcMessage<RoleClient>> {
    if lock(reads).is_empty() {
        return None;
    }
    let mut de = serde_json::Deserializer::from_slice(line);
    let (id, result) = ReadAnswer(reads).deserialize(&mut de).ok()?;
    de.end().ok()?;
    lock(reads).remove(&id);
    Some(JsonRpcMessage::Response(JsonRpcResponse {
        jsonrpc: JsonRpcVersion2_0,
        id,
        result: ServerResult::ReadResourceResult(result),
    }))
}

/// The one pass over an answer to an awaited read: `jsonrpc` "2.0", then an `id` that is
/// awaited, then `result`, each once and nothing else. It gives up at the first thing that
/// does not fit, before `result` when the id is not a read's, so another answer costs only
/// the look at its id.
struct ReadAnswer<'r>(&'r Mutex<HashSet<RequestId>>);

impl<'de> DeserializeSeed<'de> for ReadAnswer<'_> {
    type Value = (RequestId, ReadResourceResult);

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ReadAnswer<'_> {
    type Value = (RequestId, ReadResourceResult);

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("the answer to a resources/read")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        #[derive(Deserialize)]
        #[serde(field_identifier, rename_all = "lowercase")]
        enum Key {
            Jsonrpc,
            Id,
            Result,
        }
        let no = || A::Error::custom("not a plain read answer");
        let (mut version, mut id, mut result) = (false, None, None);
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Jsonrpc if !version => {
                    let v: std::borrow::Cow<'de, str> = map.next_value()?;
                    if v != "2.0" {
                        return Err(no());
                    }
                    version = true;
                }
                Key::Id if id.is_none() => {
                    let i: RequestId = map.next_value()?;
                    if !lock(self.0).contains(&i) {
                        return Err(no());
                    }
                    id = Some(i);
                }
                Key::Result if id.is_some() && result.is_none() => {
                    result = Some(map.next_value::<ReadResourceResult>()?);
                }
                _ => return Err(no()),
            }
        }
        match (version, id, result) {
            (true, Some(id), Some(result)) => Ok((id, result)),
            _ => Err(no()),
        }
    }
}

impl<W> Output<W> {
    /// Encode `item` straight into the pending bytes, which keep their room from one batch
    /// to the next; whether it was queued (not once writing has failed).
    fn queue(&self, item: &TxJsonRpcMessage<RoleClient>) -> serde_json::Result<bool> {
        let mut p = lock(&self.pending);
        let before = p.bytes.len();
        let encoded = serde_json::to_writer(&mut p.bytes, item);
        if encoded.is_err() || p.failed.is_some() {
            p.bytes.truncate(before);
            return encoded.map(|()| false);
        }
        p.bytes.push(b'\n');
        Ok(true)
    }
}

impl<W: AsyncWrite + Unpin> Output<W> {
    /// Write everything pending, unless another send is doing it; the error that ended
    /// writing, if any.
    async fn flush(&self) -> io::Result<()> {
        let mut writer = self.writer.lock().await;
        loop {
            let bytes = {
                let mut p = lock(&self.pending);
                if let Some((kind, msg)) = &p.failed {
                    return Err(io::Error::new(*kind, msg.clone()));
                }
                std::mem::take(&mut p.bytes)
            };
            if bytes.is_empty() {
                return Ok(());
            }
            let Some(w) = writer.as_mut() else {
                return Err(closed());
            };
            let written = match w.write_all(&bytes).await {
                Ok(()) => w.flush().await,
                Err(e) => Err(e),
            };
            if let Err(e) = written {
                lock(&self.pending).failed = Some((e.kind(), e.to_string()));
                return Err(e);
            }
            // Give the buffer back for the next lines, when none came meanwhile.
            let mut p = lock(&self.pending);
            if p.bytes.is_empty() {
                let mut bytes = bytes;
                bytes.clear();
                p.bytes = bytes;
            }
        }
    }
}

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "Transport is closed")
}

impl<R, W> Transport<RoleClient> for UpstreamStdio<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = io::Error;

    fn name() -> std::borrow::Cow<'static, str> {
        "stdio".into()
    }

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.note(&item);
        // Not queued after a failed write: `flush` then answers that failure.
        let queued = self.out.queue(&item);
        let out = self.out.clone();
        async move {
            queued.map_err(io::Error::from)?;
            out.flush().await
        }
    }

    /// The next message. As rmcp's line transport: a leading byte-order mark and a `\r`
    /// before the newline are ignored, so are empty lines, lines over the limit, lines that
    /// are not JSON, and notices of methods outside MCP; JSON that is no message is answered
    /// with an invalid-request error; the end of the stream, or a read error, ends it (a
    /// last line without a newline is dropped). Cancel-safe: what was read stays in the
    /// buffer for the next call.
    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            while let Some((start, end)) = self.next_line() {
                if end + 1 - start > self.max {
                    tracing::debug!(max = self.max, "an upstream line over the limit dropped");
                    continue;
                }
                let line = std::mem::take(&mut self.buf);
                let msg = self.decode(&line[start..end]);
                self.buf = line;
                if self.answered {
                    // An invalid-request answer of ours is pending: written by a task of
                    // its own, since `receive` is dropped mid-way whenever rmcp's loop has
                    // something else to do, and a write dropped mid-way would cut a line.
                    self.answered = false;
                    let out = self.out.clone();
                    tokio::spawn(async move { out.flush().await });
                }
                if let Some(msg) = msg {
                    return Some(msg);
                }
            }
            // Keep the unread tail at the front, then read more after it.
            if self.start > 0 {
                self.buf.drain(..self.start);
                self.start = 0;
            }
            self.buf.reserve(CHUNK);
            match self.read.read_buf(&mut self.buf).await {
                Ok(0) => return None,
                Ok(_) => {}
                Err(e) => {
                    tracing::error!("Error reading from stream: {e}");
                    return None;
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // What is pending goes out first (an answer of ours the decode queued), unless the
        // upstream has stopped reading: closing never waits on it for long.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), self.out.flush()).await;
        let mut writer = self.out.writer.lock().await;
        if let Some(mut w) = writer.take() {
            let _ = w.shutdown().await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{
        CancelledNotification, CancelledNotificationParam, ClientJsonRpcMessage,
        ListResourcesRequest, ReadResourceRequest, ReadResourceRequestParams,
    };
    use tokio::io::{AsyncBufReadExt as _, BufReader};

    /// rmcp's own decode of one line, the reference the read decode must equal.
    fn rmcp_decode(line: &str) -> Option<RxJsonRpcMessage<RoleClient>> {
        let mut b = BytesMut::from(format!("{line}\n").as_bytes());
        JsonRpcMessageCodec::<RxJsonRpcMessage<RoleClient>>::default()
            .decode(&mut b)
            .unwrap()
    }

    fn same(a: &RxJsonRpcMessage<RoleClient>, b: &RxJsonRpcMessage<RoleClient>) -> bool {
        format!("{a:?}") == format!("{b:?}")
            && serde_json::to_value(a).unwrap() == serde_json::to_value(b).unwrap()
    }

    fn awaiting(ids: &[RequestId]) -> Mutex<HashSet<RequestId>> {
        Mutex::new(ids.iter().cloned().collect())
    }

    fn read(id: i64, uri: &str) -> ClientJsonRpcMessage {
        JsonRpcMessage::request(
            ClientRequest::ReadResourceRequest(ReadResourceRequest::new(
                ReadResourceRequestParams::new(uri),
            )),
            RequestId::Number(id),
        )
    }

    #[test]
    fn read_answers_decode_exactly_as_rmcp_decodes_them() {
        let lines = [
            r#"{"jsonrpc":"2.0","id":1,"result":{"contents":[{"uri":"file:///a","mimeType":"text/plain","text":"one\ntwo \u00e9 \"q\""}]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"contents":[{"uri":"file:///b","blob":"AAEC"}],"ttlMs":60000,"cacheScope":"public","resultType":"complete"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"contents":[{"uri":"a","text":"x","_meta":{"k":[1,2.5,null]}},{"uri":"b","text":""}],"_meta":{"io.github.mcp-resources/x":true}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"contents":[],"unknown":{"deep":[{}]}}}"#,
            r#" { "jsonrpc" : "2.0" , "id" : 1 , "result" : { "contents" : [ ] } } "#,
            r#"{"id":"s-1","jsonrpc":"2.0","result":{"contents":[{"uri":"x","text":"y"}]}}"#,
        ];
        for line in lines {
            let id = match line.contains("s-1") {
                true => RequestId::String("s-1".into()),
                false => RequestId::Number(1),
            };
            let reads = awaiting(std::slice::from_ref(&id));
            let ours = decode_read_answer(line.as_bytes(), &reads)
                .unwrap_or_else(|| panic!("not decoded: {line}"));
            let theirs = rmcp_decode(line).unwrap();
            assert!(
                same(&ours, &theirs),
                "{line}\nours: {ours:?}\nrmcp: {theirs:?}"
            );
            assert!(
                lock(&reads).is_empty(),
                "the id is no longer awaited: {line}"
            );
        }
    }

    #[test]
    fn every_other_line_is_left_to_rmcp() {
        let reads = awaiting(&[RequestId::Number(1)]);
        for line in [
            // Not an awaited id.
            r#"{"jsonrpc":"2.0","id":2,"result":{"contents":[]}}"#,
            r#"{"jsonrpc":"2.0","id":"1","result":{"contents":[]}}"#,
            // Another shape, another member, a duplicate, the wrong version.
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32002,"message":"not found"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"contents":[]},"extra":1}"#,
            r#"{"jsonrpc":"2.0","id":1,"id":1,"result":{"contents":[]}}"#,
            r#"{"jsonrpc":"1.0","id":1,"result":{"contents":[]}}"#,
            r#"{"result":{"contents":[]},"id":1}"#,
            // The result before the id (read answers put the id first).
            r#"{"jsonrpc":"2.0","result":{"contents":[]},"id":1}"#,
            // A result that is no read answer (input required, an empty one).
            r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","inputRequests":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            // Requests and notices from the upstream.
            r#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"a"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"contents":[]}} trailing"#,
        ] {
            assert!(
                decode_read_answer(line.as_bytes(), &reads).is_none(),
                "{line}"
            );
            assert!(lock(&reads).contains(&RequestId::Number(1)), "{line}");
        }
    }

    #[test]
    fn reads_sent_are_awaited_until_cancelled_and_others_are_not() {
        let (r, w) = (tokio::io::empty(), tokio::io::sink());
        let t = UpstreamStdio::new(r, w, 1 << 20);
        t.note(&read(7, "file:///a"));
        t.note(&JsonRpcMessage::request(
            ClientRequest::ListResourcesRequest(ListResourcesRequest::default()),
            RequestId::Number(8),
        ));
        assert_eq!(
            *lock(&t.reads),
            [RequestId::Number(7)].into_iter().collect()
        );
        let p = CancelledNotificationParam::new(Some(RequestId::Number(7)), None);
        t.note(&JsonRpcMessage::notification(
            ClientNotification::CancelledNotification(CancelledNotification::new(p)),
        ));
        assert!(lock(&t.reads).is_empty());
    }

    /// Messages sent together are written together, in the order they were sent, by the
    /// first of their futures to run; the others find their line written.
    #[tokio::test]
    async fn sends_are_written_together_in_order() {
        let (ours_out, theirs_in) = tokio::io::duplex(1 << 16);
        let mut t = UpstreamStdio::new(tokio::io::empty(), ours_out, 200);
        let mut sends = Vec::new();
        for i in 1..=5 {
            sends.push(t.send(read(i, &format!("file:///{i}"))));
        }
        sends.pop().unwrap().await.unwrap();
        let mut lines = BufReader::new(theirs_in).lines();
        for i in 1..=5 {
            let line = tokio::time::timeout(std::time::Duration::from_secs(5), lines.next_line())
                .await
                .expect("written by the one send that ran")
                .unwrap()
                .unwrap();
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(
                (v["id"].as_i64(), v["method"].as_str()),
                (Some(i), Some("resources/read"))
            );
            assert_eq!(v["params"]["uri"], format!("file:///{i}"));
        }
        for s in sends {
            s.await.unwrap();
        }
    }

    /// What the upstream writes, taken by our transport as rmcp's line transport takes it:
    /// the same messages, and the same answer written back to a line that is no message.
    #[tokio::test]
    async fn upstream_lines_are_taken_as_rmcp_s_line_transport_takes_them() {
        let long = format!(
            r#"{{"jsonrpc":"2.0","id":3,"result":{{"contents":[{{"uri":"x","text":"{}"}}]}}}}"#,
            "y".repeat(200)
        );
        let input = [
            "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"contents\":[]}}\r",
            "",
            "not json at all",
            &long,
            r#"{"jsonrpc":"2.0","method":"notifications/other/thing","params":{}}"#,
            r#"{"what":"no message"}"#,
            r#"{"jsonrpc":"2.0","id":2,"result":{"contents":[{"uri":"file:///2","text":"t"}]}}"#,
            r#"{"jsonrpc":"2.0","id":5,"result":{"contents":[{"uri":"file:///5","blob":"AA=="}],"ttlMs":5}}"#,
            r#"{"jsonrpc":"2.0","id":9,"error":{"code":-32002,"message":"gone"}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"file:///2"}}"#,
            r#"{"jsonrpc":"2.0","id":4"#,
        ]
        .join("\n");
        let ours = taken(|r, w| UpstreamStdio::new(r, w, 200), &input).await;
        let theirs = taken(
            |r, w| {
                rmcp::transport::async_rw::AsyncRwTransport::<RoleClient, _, _>::new(r, w)
                    .with_max_line_length(200)
            },
            &input,
        )
        .await;
        assert_eq!(ours, theirs);
        assert_eq!(ours.0.len(), 6, "{:?}", ours.0);
        let v: serde_json::Value = serde_json::from_str(ours.1.trim()).unwrap();
        assert_eq!(
            (v["error"]["code"].as_i64(), &v["id"]),
            (Some(-32600), &serde_json::Value::Null),
            "{}",
            ours.1
        );
    }

    /// The messages a transport (made by `make` on a pair of pipes, after sending reads 1, 2
    /// and 5) takes from `input`, as Debug text, and what it writes besides the reads.
    async fn taken<T: Transport<RoleClient>>(
        make: impl FnOnce(tokio::io::DuplexStream, tokio::io::DuplexStream) -> T,
        input: &str,
    ) -> (Vec<String>, String) {
        let (ours_out, mut theirs_in) = tokio::io::duplex(1 << 16);
        let (mut theirs_out, ours_in) = tokio::io::duplex(1 << 16);
        let mut t = make(ours_in, ours_out);
        for id in [1, 2, 5] {
            t.send(read(id, "file:///x")).await.unwrap();
        }
        theirs_out.write_all(input.as_bytes()).await.unwrap();
        drop(theirs_out);
        let mut got = Vec::new();
        while let Some(m) = t.receive().await {
            got.push(format!("{m:?}"));
        }
        t.close().await.unwrap();
        drop(t);
        let mut written = String::new();
        theirs_in.read_to_string(&mut written).await.unwrap();
        let back = written
            .lines()
            .filter(|l| !l.contains("resources/read"))
            .collect::<Vec<_>>()
            .join("\n");
        (got, back)
    }

    #[tokio::test]
    async fn a_failed_write_fails_every_send_after_it() {
        let (ours_out, theirs_in) = tokio::io::duplex(64);
        drop(theirs_in);
        let mut t = UpstreamStdio::new(tokio::io::empty(), ours_out, 1 << 20);
        assert!(t.send(read(1, "a")).await.is_err());
        assert!(t.send(read(2, "b")).await.is_err());
        t.close().await.unwrap();
    }
}
