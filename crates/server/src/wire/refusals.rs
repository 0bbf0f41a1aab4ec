//! Refusals of lines and bodies rmcp's codec cannot take, or would take wrongly: what
//! rmcp's codec does not check (or checks without answering) is answered here with the
//! JSON-RPC error it owes, and a request rmcp could not decode is told apart from a parse
//! error the way rmcp's codec classifies it.
//!
//! The mirror of rmcp 3.11.0's line codec (`transport/async_rw.rs`,
//! `JsonRpcMessageCodec` and `AsyncRwTransport::receive`): a line that is not JSON (serde's
//! `Syntax` and `Eof` errors, nesting past 128 levels among them) it drops without an
//! answer; JSON that is no message (`Data`) it answers "Invalid request" with a null id; a
//! notification of no standard method it ignores; a list whose `cursor` is not a string it
//! takes, the params dropped. Here the first is a parse error (-32700) (but for a number
//! serde_json cannot hold, `1e400`, which is JSON: an invalid request), the second an
//! invalid request (-32600) or, for a known method, invalid params (-32602) with the id
//! when it can be read, the third still unanswered, the last invalid params. Paired with
//! rmcp's codec by the test below, line by line.

use rmcp::model::{ClientRequest, ErrorData, JsonRpcMessage, RequestId};
use rmcp::service::{RoleServer, RxJsonRpcMessage, TxJsonRpcMessage};
use serde::Deserialize;

use super::decode::Present;
use super::era::Era;
use super::params;

/// What [`check_line`] makes of a line rmcp is about to decode.
pub(crate) enum Checked {
    /// The line is no message rmcp may take: this answer goes back instead.
    Answer(Box<TxJsonRpcMessage<RoleServer>>),
    /// rmcp's to decode; for a request, its id and (if this server knows it) its method, to
    /// answer with should rmcp's decode still fail.
    Pass(Option<PassedRequest>),
}

/// A request's id, its method if this server knows it, and its params.
pub(crate) type PassedRequest = (RequestId, Option<String>, Option<serde_json::Value>);

/// The members of any JSON-RPC message, read to answer one that rmcp cannot take.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(default, borrow)]
    method: Option<std::borrow::Cow<'a, str>>,
    /// A number beyond `i64` (`1e400`), a fraction or any other type fails the envelope:
    /// such an id cannot be echoed, so the answer has a null one.
    #[serde(default)]
    id: Option<RequestId>,
    #[serde(default)]
    params: Option<serde_json::Value>,
    #[serde(default)]
    result: Present,
    #[serde(default)]
    error: Present,
}

/// The checks rmcp's codec does not make, or makes without answering: bytes that are not
/// UTF-8 or not one JSON value (two messages on a line) are a parse error (-32700); JSON
/// that is no message, or has an id no answer can carry, is an invalid request (-32600),
/// both with a null id as JSON-RPC asks; a request of a known method whose params are not
/// an object, or a list whose cursor is not a string, is invalid params (-32602) with its
/// id. Anything else is left to rmcp. `tools/*` methods are known only with the tool
/// bridge on (`tools`).
pub(crate) fn check_line(line: &[u8], tools: bool) -> Checked {
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    let Ok(text) = std::str::from_utf8(line) else {
        return refuse(
            ErrorData::parse_error("Parse error: the message is not valid UTF-8", None),
            None,
        );
    };
    // `IgnoredAny` checks the syntax without converting numbers, so `1e400` passes here and
    // is refused below as an id, not as a parse error.
    if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(text) {
        return refuse(
            ErrorData::parse_error(
                format!("Parse error: {e} (one JSON-RPC message per line)"),
                None,
            ),
            None,
        );
    }
    if !text.trim_start().starts_with('{') {
        // Not a message, but first a value rmcp's codec cannot parse at all (the syntax
        // check above does not count depth); read whole only on this rare path.
        if let Err(e) = serde_json::from_str::<serde_json::Value>(text)
            && too_deep(&e)
        {
            return refuse(nested_too_deep(&e), None);
        }
        return refuse(
            ErrorData::invalid_request(
                "Invalid request: a message is a JSON object (batches are not part of MCP)",
                None,
            ),
            None,
        );
    }
    let env = match serde_json::from_str::<Envelope<'_>>(text) {
        Ok(env) => env,
        Err(e) if too_deep(&e) => return refuse(nested_too_deep(&e), None),
        Err(e) => {
            return refuse(
                ErrorData::invalid_request(
                    format!(
                        "Invalid request: {e} (a message is an object whose id is a string or \
                         an integer)"
                    ),
                    None,
                ),
                None,
            );
        }
    };
    if env.result.0 || env.error.0 {
        return Checked::Pass(None);
    }
    let (Some(id), Some(method)) = (env.id, env.method) else {
        return Checked::Pass(None);
    };
    let known = params::is_known(&method, tools);
    let params = env.params.as_ref();
    let refused = match params {
        // Params that are not an object carry no `_meta`, so the era is unknown here: the
        // answer speaks of both eras' methods.
        Some(p) if !p.is_object() && !p.is_null() => Some(if known {
            params::invalid_params_or_generic(&method, params)
        } else {
            params::method_not_found(&method, tools, Era::Legacy)
        }),
        Some(_) if known && is_list_method(&method) => params::invalid_params(&method, params),
        _ => None,
    };
    match refused {
        Some(e) => refuse(e, Some(id)),
        None => Checked::Pass(Some((id, known.then(|| method.into_owned()), env.params))),
    }
}

/// The JSON-RPC error for a message body no request can be read from, or whose params do
/// not fit its method, as [`check_line`] finds it; with `undecodable` (rmcp could not decode
/// the body), also for a known method whose params rmcp refused. For the HTTP transport.
pub(crate) fn refusal(
    body: &[u8],
    undecodable: bool,
    tools: bool,
) -> Option<TxJsonRpcMessage<RoleServer>> {
    match check_line(body, tools) {
        Checked::Answer(answer) => Some(*answer),
        Checked::Pass(Some((id, Some(method), params))) if undecodable => Some(error_answer(
            params::invalid_params_or_generic(&method, params.as_ref()),
            Some(id),
        )),
        Checked::Pass(_) => None,
    }
}

/// Whether `e` is serde_json's error for JSON nested past its limit: a parse error, as
/// rmcp's codec classifies it, not an invalid request (serde_json names it only in text).
fn too_deep(e: &serde_json::Error) -> bool {
    e.to_string().starts_with("recursion limit exceeded")
}

fn nested_too_deep(e: &serde_json::Error) -> ErrorData {
    ErrorData::parse_error(
        format!("Parse error: {e} (the limit is 128 levels of nesting)"),
        None,
    )
}

/// [`Checked::Answer`] with this error.
fn refuse(error: ErrorData, id: Option<RequestId>) -> Checked {
    Checked::Answer(Box::new(error_answer(error, id)))
}

fn is_list_method(method: &str) -> bool {
    matches!(
        method,
        "resources/list" | "resources/templates/list" | "tools/list"
    )
}

/// A list request whose params rmcp's decode gave as absent (they may have been dropped).
pub(crate) fn is_list_without_params(msg: &RxJsonRpcMessage<RoleServer>) -> bool {
    match msg {
        JsonRpcMessage::Request(r) => match &r.request {
            ClientRequest::ListResourcesRequest(l) => l.params.is_none(),
            ClientRequest::ListResourceTemplatesRequest(l) => l.params.is_none(),
            _ => false,
        },
        _ => false,
    }
}

pub(crate) fn error_answer(
    error: ErrorData,
    id: Option<RequestId>,
) -> TxJsonRpcMessage<RoleServer> {
    TxJsonRpcMessage::<RoleServer>::error(error, id)
}

/// The answer to a line rmcp's codec failed to decode with `e`, as its codec classifies it:
/// broken JSON is a parse error; a request of a known method whose params rmcp refused is
/// invalid params naming them (`request` is what [`check_line`] passed); anything else is an
/// invalid request.
pub(crate) fn undecodable(
    e: &serde_json::Error,
    request: Option<PassedRequest>,
) -> TxJsonRpcMessage<RoleServer> {
    match (e.classify(), request) {
        (serde_json::error::Category::Syntax | serde_json::error::Category::Eof, _) => {
            error_answer(
                ErrorData::parse_error(format!("Parse error: {e}"), None),
                None,
            )
        }
        // A request of a known method rmcp cannot decode: its params are wrong.
        (_, Some((id, Some(method), params))) => error_answer(
            params::invalid_params_or_generic(&method, params.as_ref()),
            Some(id),
        ),
        (_, Some((id, None, _))) => error_answer(
            ErrorData::invalid_request(format!("Invalid request: {e}"), None),
            Some(id),
        ),
        (_, None) => error_answer(
            ErrorData::invalid_request(format!("Invalid request: {e}"), None),
            None,
        ),
    }
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use rmcp::transport::async_rw::{JsonRpcMessageCodec, JsonRpcMessageCodecError};
    use serde_json::Value;
    use tokio_util::codec::Decoder;

    use super::*;
    use crate::wire::encode::own_answer_json;

    /// What rmcp 3.11.0's line codec (`transport/async_rw.rs`) makes of a line.
    #[derive(Debug, PartialEq)]
    enum Theirs {
        /// A message, handed to the serve loop.
        Taken,
        /// A notification of no standard method, ignored.
        Ignored,
        /// Not JSON (`Syntax`, `Eof`): dropped without an answer.
        Unparsable,
        /// JSON that is no message (`Data`): answered "Invalid request", -32600, null id.
        Invalid,
    }

    fn theirs(line: &[u8]) -> Theirs {
        let mut framed = BytesMut::from(line);
        framed.extend_from_slice(b"\n");
        let mut codec = JsonRpcMessageCodec::<RxJsonRpcMessage<RoleServer>>::default();
        match codec.decode(&mut framed) {
            Ok(Some(_)) => Theirs::Taken,
            Ok(None) => Theirs::Ignored,
            Err(JsonRpcMessageCodecError::Serde(e)) => match e.classify() {
                serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
                    Theirs::Unparsable
                }
                _ => Theirs::Invalid,
            },
            Err(e) => panic!("{e}"),
        }
    }

    /// What the stdio transport answers a line with (as `stdio/framing.rs` decodes one:
    /// [`check_line`], then rmcp's codec and [`undecodable`]): `None` for no answer.
    fn ours(line: &[u8]) -> Option<Value> {
        let answer = match check_line(line, false) {
            Checked::Answer(answer) => *answer,
            Checked::Pass(request) => {
                let mut framed = BytesMut::from(line);
                framed.extend_from_slice(b"\n");
                let mut codec = JsonRpcMessageCodec::<RxJsonRpcMessage<RoleServer>>::default();
                match codec.decode(&mut framed) {
                    Ok(_) => return None,
                    Err(JsonRpcMessageCodecError::Serde(e)) => undecodable(&e, request),
                    Err(e) => panic!("{e}"),
                }
            }
        };
        Some(serde_json::from_slice(&own_answer_json(answer).unwrap()).unwrap())
    }

    #[test]
    fn lines_are_refused_where_rmcps_codec_drops_refuses_or_misreads_them() {
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let deep_member = format!(r#"{{"jsonrpc":"2.0","id":11,"method":"ping","x":{deep}}}"#);
        let lines: Vec<&[u8]> = vec![
            br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}",
            br#"{"jsonrpc":"2.0","id":3,"method":"something/custom","params":{}}"#,
            br#"{"jsonrpc":"2.0","id":4,"result":{}}"#,
            br#"{"jsonrpc":"2.0","method":"notifications/custom"}"#,
            br#"{"jsonrpc":"2.0","method":"notifications/custom","params":"x"}"#,
            br#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":[1]}"#,
            br#"{"jsonrpc":"2.0","id":5,"method":"resources/list","params":{"cursor":1}}"#,
            br#"{"jsonrpc":"2.0","id":6,"method":"resources/list","params":[]}"#,
            br#"{"jsonrpc":"2.0","id":7,"method":"ping","params":"x"}"#,
            br#"{"jsonrpc":"2.0","id":8,"#,
            b"not json",
            b"{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"\xff\"}",
            deep.as_bytes(),
            deep_member.as_bytes(),
            br#"{"a":1}"#,
            br#"[{"jsonrpc":"2.0","id":10,"method":"ping"}]"#,
            br#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
            br#"{"jsonrpc":"2.0","id":1e400,"method":"ping"}"#,
        ];
        let mut seen = Vec::new();
        for line in lines {
            let text = String::from_utf8_lossy(line);
            let (theirs, ours) = (theirs(line), ours(line));
            let code = ours.as_ref().map(|a| a["error"]["code"].as_i64().unwrap());
            match theirs {
                // Taken by rmcp: taken here too, but for a list whose cursor rmcp's decode
                // drops (with the params), which is refused as invalid params.
                Theirs::Taken if text.contains(r#""cursor":1"#) => {
                    assert_eq!(code, Some(-32602), "{text}: {ours:?}")
                }
                Theirs::Taken | Theirs::Ignored => assert_eq!(ours, None, "{text}"),
                // A number serde_json cannot hold is an error of syntax to rmcp's codec, but
                // JSON all the same: the message is refused as one whose id cannot be read.
                Theirs::Unparsable if text.contains("1e400") => {
                    assert_eq!(code, Some(-32600), "{text}: {ours:?}")
                }
                // Dropped by rmcp as unparsable: a parse error, with no id to give.
                Theirs::Unparsable => {
                    assert_eq!(code, Some(-32700), "{text}: {ours:?}");
                    assert!(ours.unwrap()["id"].is_null(), "{text}");
                }
                // Refused by rmcp as no message: refused here too, never as a parse error,
                // as invalid params when it is a known method's request.
                Theirs::Invalid => {
                    assert!(matches!(code, Some(-32600 | -32602)), "{text}: {ours:?}")
                }
            }
            seen.push(theirs);
        }
        // Every kind of line rmcp's codec tells apart was met.
        for kind in [
            Theirs::Taken,
            Theirs::Ignored,
            Theirs::Unparsable,
            Theirs::Invalid,
        ] {
            assert!(seen.contains(&kind), "no line was {kind:?}: {seen:?}");
        }
    }
}
