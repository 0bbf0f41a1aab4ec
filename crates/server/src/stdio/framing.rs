//! The framing of the stdio transport: bytes read from stdin cut into lines (an over-long
//! line refused and dropped), each line decoded into a message, and the answers the
//! transport gives itself to lines no message comes from.

use bytes::{Buf, BytesMut};
use rmcp::model::ErrorData;
use rmcp::service::{RoleServer, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::async_rw::{
    DEFAULT_MAX_LINE_LENGTH, JsonRpcMessageCodec, JsonRpcMessageCodecError,
};
use tokio_util::codec::Decoder;

use super::READ_CHUNK;
use super::writer::Queue;
use crate::wire::decode::decode_hot;
use crate::wire::encode::own_answer_json;
use crate::wire::refusals::{self, Checked, check_line, error_answer, is_list_without_params};

/// The bytes read and not yet framed, and the decode. Owned by one reader thread at a time.
pub(super) struct Lines {
    pub(super) buf: BytesMut,
    /// Where the search for the next newline resumes (bytes before it hold none).
    scanned: usize,
    /// Inside an over-long line: drop bytes up to the next newline.
    discarding: bool,
    pub(super) max_line: usize,
    codec: JsonRpcMessageCodec<RxJsonRpcMessage<RoleServer>>,
    /// Whether the tool bridge is on, so `tools/*` are methods this server has; taken from
    /// the direct path's handler (the server's own state).
    pub(super) tools: bool,
}

impl Lines {
    pub(super) fn new() -> Self {
        Self {
            buf: BytesMut::with_capacity(READ_CHUNK),
            scanned: 0,
            discarding: false,
            max_line: DEFAULT_MAX_LINE_LENGTH,
            codec: JsonRpcMessageCodec::default(),
            tools: false,
        }
    }

    /// The next whole line, with its `\n`, or `None` until more bytes arrive. An over-long
    /// line is answered through `out` and dropped.
    pub(super) fn next_line(&mut self, out: &Queue) -> Option<BytesMut> {
        loop {
            match memchr::memchr(b'\n', &self.buf[self.scanned..]) {
                Some(at) => {
                    let end = self.scanned + at;
                    self.scanned = 0;
                    if self.discarding {
                        self.buf.advance(end + 1);
                        self.discarding = false;
                        continue;
                    }
                    if end > self.max_line {
                        // A whole over-long line that arrived in one read: refused the same.
                        self.buf.advance(end + 1);
                        self.refuse_long_line(out);
                        continue;
                    }
                    return Some(self.buf.split_to(end + 1));
                }
                None if self.discarding => {
                    self.buf.clear();
                    self.scanned = 0;
                    return None;
                }
                None if self.buf.len() > self.max_line => {
                    self.refuse_long_line(out);
                    self.buf.clear();
                    self.scanned = 0;
                    self.discarding = true;
                    return None;
                }
                None => {
                    self.scanned = self.buf.len();
                    return None;
                }
            }
        }
    }

    /// One line (with its `\n`) to a message: the tagged decode when it applies, else rmcp's
    /// codec, which takes the framed line as it is. A line no message can come from gets its
    /// JSON-RPC error through `out`: the client is waiting for an answer, and dropping the line silently would hang it.
    pub(super) fn decode(
        &mut self,
        mut framed: BytesMut,
        out: &Queue,
    ) -> Option<RxJsonRpcMessage<RoleServer>> {
        let line = framed.strip_suffix(b"\n").unwrap_or(&framed);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            return None;
        }
        if let Some(msg) = decode_hot(line) {
            // rmcp's decode of a list drops a `cursor` of the wrong type (and with it the
            // params) instead of refusing it; a list without params is checked again.
            if !is_list_without_params(&msg) {
                return Some(msg);
            }
            return match check_line(line, self.tools) {
                Checked::Answer(answer) => {
                    answer_with(out, *answer);
                    None
                }
                Checked::Pass(_) => Some(msg),
            };
        }
        let request = match check_line(line, self.tools) {
            Checked::Answer(answer) => {
                answer_with(out, *answer);
                return None;
            }
            Checked::Pass(request) => request,
        };
        match self.codec.decode(&mut framed) {
            Ok(msg) => msg,
            Err(JsonRpcMessageCodecError::Serde(e)) => {
                tracing::debug!("Protocol error on incoming message: {e}");
                answer_with(out, refusals::undecodable(&e, request));
                None
            }
            Err(e) => {
                tracing::error!("Error decoding an incoming message: {e}");
                None
            }
        }
    }

    /// Answer a line over the limit, which is dropped unread: its id cannot be known
    /// without reading it all, so the answer has none.
    fn refuse_long_line(&self, out: &Queue) {
        tracing::error!(
            max_line_length = self.max_line,
            "Incoming message exceeded the maximum line length, discarding it"
        );
        answer_with(
            out,
            error_answer(
                ErrorData::invalid_request(
                    format!(
                        "Invalid request: the message is longer than {} bytes, the limit for \
                         one line; it was discarded",
                        self.max_line
                    ),
                    None,
                ),
                None,
            ),
        );
    }
}

/// Queue an answer the transport gives itself (to a line rmcp never sees).
fn answer_with(out: &Queue, answer: TxJsonRpcMessage<RoleServer>) {
    let encoded = own_answer_json(answer).map(as_line);
    let queued = encoded.and_then(|b| out.send(b));
    if let Err(e) = queued {
        tracing::debug!("cannot answer an invalid message: {e}");
    }
}

/// A JSON message as a line of the stream: with its newline.
pub(super) fn as_line(mut json: Vec<u8>) -> Vec<u8> {
    json.push(b'\n');
    json
}
