//! Refusals of lines and bodies rmcp's codec cannot take, or would take wrongly: what
//! rmcp's codec does not check (or checks without answering) is answered here with the
//! JSON-RPC error it owes, and a request rmcp could not decode is told apart from a parse
//! error the way rmcp's codec classifies it.

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
        // The syntax check above does not count depth: JSON nested past serde_json's limit
        // is a parse error, not an invalid request (serde_json names the error only in text).
        Err(e) if e.to_string().starts_with("recursion limit exceeded") => {
            return refuse(
                ErrorData::parse_error(
                    format!("Parse error: {e} (the limit is 128 levels of nesting)"),
                    None,
                ),
                None,
            );
        }
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
