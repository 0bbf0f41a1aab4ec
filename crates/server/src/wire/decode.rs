//! The tagged decode of the requests a client sends most: the method name is read first and
//! the message is parsed once as the one type that method names, through rmcp's own
//! `Deserialize` for that type, so the result is the value rmcp's untagged `ClientRequest`
//! union would have built (it tries the variants one by one: a `resources/read` fails nine
//! of them before it matches). Anything unusual is left to rmcp. The mirror of rmcp 3.11.0's
//! `JsonRpcMessageCodec` decode of a `ClientJsonRpcMessage` (`transport/async_rw.rs`,
//! `model.rs`). Paired with rmcp's codec in the tests below.

// `SubscribeRequest`/`UnsubscribeRequest` are deprecated in rmcp because they are legacy-era
// only; the legacy era is one we serve.
#[allow(deprecated)]
use rmcp::model::{
    ClientRequest, CompleteRequest, JsonRpcMessage, JsonRpcRequest, JsonRpcVersion2_0,
    ListResourceTemplatesRequest, ListResourcesRequest, PingRequest, ReadResourceRequest,
    ReadResourceRequestParams, RequestId, RequestMetaObject, SubscribeRequest, UnsubscribeRequest,
};
use rmcp::service::{RoleServer, RxJsonRpcMessage};
use serde::Deserialize;

/// Whether a member is present, whatever its value (`null` included): rmcp classifies a
/// message by which members it has, not by their values.
#[derive(Default)]
pub(crate) struct Present(pub(crate) bool);

impl<'de> Deserialize<'de> for Present {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(d)?;
        Ok(Present(true))
    }
}

/// The members that decide what a line is. Unknown members are skipped, as rmcp skips them;
/// a duplicate member fails here and so goes to rmcp.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(default, borrow)]
    jsonrpc: Option<&'a str>,
    /// `null` or a non-id value reads as absent, which sends the line to rmcp.
    #[serde(default)]
    id: Option<RequestId>,
    #[serde(default, borrow)]
    method: Option<&'a str>,
    #[serde(default)]
    result: Present,
    #[serde(default)]
    error: Present,
}

/// The tagged decode of the requests a client sends most, or `None` to leave the line to
/// rmcp. It answers only when the line is unambiguously that request: version "2.0", an id,
/// no `result` or `error`, one of these methods, and a body that parses as that request
/// (through rmcp's own `Deserialize` for it, which also moves `_meta` into extensions). A
/// body that does not parse is left to rmcp, which then decides what it is.
#[allow(deprecated)] // legacy-era subscribe/unsubscribe, see the imports
pub(crate) fn decode_hot(line: &[u8]) -> Option<RxJsonRpcMessage<RoleServer>> {
    if line.starts_with(b"\xEF\xBB\xBF") {
        return None;
    }
    if let Some(read) = decode_plain_read(line) {
        return Some(read);
    }
    let head: Head<'_> = serde_json::from_slice(line).ok()?;
    if head.jsonrpc != Some("2.0") || head.result.0 || head.error.0 {
        return None;
    }
    let id = head.id?;
    let request = match head.method? {
        "resources/read" => parse_as::<ReadResourceRequest>(line)?,
        "resources/list" => parse_as::<ListResourcesRequest>(line)?,
        "resources/templates/list" => parse_as::<ListResourceTemplatesRequest>(line)?,
        "resources/subscribe" => parse_as::<SubscribeRequest>(line)?,
        "resources/unsubscribe" => parse_as::<UnsubscribeRequest>(line)?,
        "completion/complete" => parse_as::<CompleteRequest>(line)?,
        "ping" => parse_as::<PingRequest>(line)?,
        _ => return None,
    };
    Some(JsonRpcMessage::Request(JsonRpcRequest {
        jsonrpc: JsonRpcVersion2_0,
        id,
        request,
    }))
}

/// A `resources/read` with nothing but `jsonrpc`, `id`, `method` and `params`, whose params
/// hold nothing but `uri` and `_meta`: the request a client sends most, parsed in one pass
/// into borrowed fields. rmcp's own `Deserialize` for a request buffers `params`
/// through serde's flatten and the [`Head`] read before it parses the line a second time;
/// together they cost more than the rest of a small read's user time. What this builds is
/// the value rmcp builds (its `_meta` moved into the extensions, the params' own `meta`
/// left empty), held to rmcp's decode by the tests below. Any other member, a duplicate, an
/// escape in `jsonrpc` or `method`, or any other value type fails the parse and leaves the
/// line to the general decode.
fn decode_plain_read(line: &[u8]) -> Option<RxJsonRpcMessage<RoleServer>> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Line<'a> {
        jsonrpc: &'a str,
        id: RequestId,
        method: &'a str,
        #[serde(borrow)]
        params: Params<'a>,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Params<'a> {
        #[serde(borrow)]
        uri: std::borrow::Cow<'a, str>,
        #[serde(default, rename = "_meta")]
        meta: Option<rmcp::model::JsonObject>,
    }
    let parsed: Line<'_> = serde_json::from_slice(line).ok()?;
    if parsed.jsonrpc != "2.0" || parsed.method != "resources/read" {
        return None;
    }
    let mut read = ReadResourceRequest::new(ReadResourceRequestParams::new(
        parsed.params.uri.into_owned(),
    ));
    if let Some(meta) = parsed.params.meta {
        read.extensions.insert(RequestMetaObject::from(meta));
    }
    Some(JsonRpcMessage::Request(JsonRpcRequest {
        jsonrpc: JsonRpcVersion2_0,
        id: parsed.id,
        request: ClientRequest::ReadResourceRequest(read),
    }))
}

/// The whole line as request type `T` (rmcp's own `Deserialize` for it), as a `ClientRequest`.
fn parse_as<T>(line: &[u8]) -> Option<ClientRequest>
where
    T: serde::de::DeserializeOwned + Into<ClientRequest>,
{
    serde_json::from_slice::<T>(line).ok().map(Into::into)
}

/// rmcp's own decode of one line, the reference the tagged decode must equal.
#[cfg(test)]
pub(crate) fn rmcp_decode(line: &str) -> Result<Option<RxJsonRpcMessage<RoleServer>>, String> {
    use rmcp::transport::async_rw::JsonRpcMessageCodec;
    use tokio_util::codec::Decoder as _;
    let mut b = bytes::BytesMut::from(format!("{line}\n").as_bytes());
    JsonRpcMessageCodec::<RxJsonRpcMessage<RoleServer>>::default()
        .decode(&mut b)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same(a: &RxJsonRpcMessage<RoleServer>, b: &RxJsonRpcMessage<RoleServer>) -> bool {
        format!("{a:?}") == format!("{b:?}")
            && serde_json::to_value(a).unwrap() == serde_json::to_value(b).unwrap()
    }

    #[test]
    fn hot_requests_decode_exactly_as_rmcp_decodes_them() {
        let lines = [
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///docs/a.md"}}"#,
            r#"{"method":"resources/read","params":{"uri":"db://app/tables/users?cursor=x%20y"},"id":"s-7","jsonrpc":"2.0"}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"file:///a","_meta":{"progressToken":3,"io.modelcontextprotocol/protocolVersion":"2026-07-28","x":{"y":[1,2.5,null]}}}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"file:///\u00e9t\u00e9.txt"},"extra":true}"#,
            r#"{"jsonrpc":"2.0","id":4,"method":"resources/list"}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"resources/list","params":{"cursor":"abc"}}"#,
            r#"{"jsonrpc":"2.0","id":6,"method":"resources/list","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"resources/templates/list","params":{"_meta":{"k":"v"}}}"#,
            r#"{"jsonrpc":"2.0","id":8,"method":"resources/subscribe","params":{"uri":"file:///a"}}"#,
            r#"{"jsonrpc":"2.0","id":9,"method":"resources/unsubscribe","params":{"uri":"file:///a"}}"#,
            r#"{"jsonrpc":"2.0","id":10,"method":"completion/complete","params":{"ref":{"type":"ref/resource","uri":"db://app/tables/{table}"},"argument":{"name":"table","value":"us"},"context":{"arguments":{"a":"b"}}}}"#,
            r#"{"jsonrpc":"2.0","id":11,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":-12,"method":"ping","params":{"_meta":{"a":1}}}"#,
            // Reads the one-pass decode takes, and reads it leaves to the general one.
            r#"{"jsonrpc":"2.0","id":13,"method":"resources/read","params":{"_meta":null,"uri":"file:///a"}}"#,
            r#"{"jsonrpc":"2.0","id":14,"method":"resources/read","params":{"uri":"file:///a","_meta":{}}}"#,
            r#" { "params" : { "uri" : "file:///a\"b\\c\n" } , "id" : "x\"y" , "method" : "resources/read" , "jsonrpc" : "2.0" } "#,
            r#"{"jsonrpc":"2.0","id":9007199254740993,"method":"resources/read","params":{"uri":"file:///a"}}"#,
            r#"{"jsonrpc":"2.0","id":15,"method":"resources/read","params":{"uri":"file:///a","requestState":"s"}}"#,
            r#"{"jsonrpc":"2.0","id":16,"method":"resources/read","params":{"uri":"file:///a","inputResponses":{}}}"#,
            r#"{"jsonrpc":"2.0","id":17,"method":"resources/read","params":{"uri":"file:///a","_meta":{"a":1},"x":2}}"#,
        ];
        for line in lines {
            let fast = decode_hot(line.as_bytes()).unwrap_or_else(|| panic!("not decoded: {line}"));
            let reference = rmcp_decode(line).unwrap().unwrap();
            assert!(
                same(&fast, &reference),
                "{line}\nfast: {fast:?}\nrmcp: {reference:?}"
            );
        }
    }

    #[test]
    fn the_one_pass_read_decode_takes_plain_reads_only() {
        let plain = [
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///docs/a.md"}}"#,
            r#"{"method":"resources/read","params":{"_meta":{"k":[1]},"uri":"x"},"id":"s","jsonrpc":"2.0"}"#,
        ];
        for line in plain {
            let fast = decode_plain_read(line.as_bytes()).expect(line);
            assert!(same(&fast, &rmcp_decode(line).unwrap().unwrap()), "{line}");
        }
        let general = [
            r#"{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"a"},"extra":true}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"a","requestState":"s"}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"a"},"result":null}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"a","uri":"b"}}"#,
            r#"{"jsonrpc":"2\u002e0","id":3,"method":"resources/read","params":{"uri":"a"}}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"resources/read","params":{"uri":"a"}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"resources/list","params":{"uri":"a"}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"a","_meta":5}}"#,
        ];
        for line in general {
            assert!(decode_plain_read(line.as_bytes()).is_none(), "{line}");
        }
    }

    #[test]
    fn anything_unusual_is_left_to_rmcp() {
        let lines = [
            // Members that make it something other than a request, even when null.
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"a"},"result":null}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"a"},"error":{}}"#,
            // Not version 2.0, no id, a null id.
            r#"{"jsonrpc":"1.0","id":1,"method":"resources/read","params":{"uri":"a"}}"#,
            r#"{"id":1,"method":"resources/read","params":{"uri":"a"}}"#,
            r#"{"jsonrpc":"2.0","method":"resources/read","params":{"uri":"a"}}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"resources/read","params":{"uri":"a"}}"#,
            // Params that are not this request's, an escaped method name, a duplicate member.
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":5}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/read"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"resources\/read","params":{"uri":"a"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"resources/read","params":{"uri":"a"}}"#,
            // Methods outside the hot set, notifications, answers, a byte-order mark, garbage.
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}",
            "not json",
            "[1,2]",
        ];
        for line in lines {
            assert!(decode_hot(line.as_bytes()).is_none(), "decoded: {line}");
        }
    }
}
