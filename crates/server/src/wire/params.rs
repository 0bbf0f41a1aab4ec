//! The invalid-params answer to a request of a known method whose `params` do not fit it:
//! which parameter is wrong and how, instead of rmcp's "method not found".
//!
//! rmcp decodes a request through an untagged union whose last variant takes any method; a
//! `resources/read` with `"uri": 12` fails the read variant and lands there, and its default
//! answer is -32601 naming the method. Both transports reach [`invalid_params`]: the handler's
//! `on_custom_request` (every transport, both eras) and the stdio transport, for the messages
//! rmcp cannot decode at all (`"params": []`) and for a list whose `cursor` rmcp's decode
//! silently drops (a flattened `Option` swallows the error and the list restarts). The
//! mirror of rmcp 3.11.0's request types' `Deserialize` (`model.rs`): paired with rmcp's
//! codec by `refusals.rs`'s test, which runs it on the same lines.

use rmcp::ErrorData;

use super::era::Era;
#[allow(deprecated)] // legacy-era subscribe/unsubscribe, an era this server serves
use rmcp::model::{
    CallToolRequestParams, CompleteRequestParams, DiscoverRequestParams, InitializeRequestParams,
    PaginatedRequestParams, ReadResourceRequestParams, SetLevelRequestParams,
    SubscribeRequestParams, SubscriptionsListenRequestParams, UnsubscribeRequestParams,
};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// How a method takes its params: whether they may be left out, and their check.
struct Shape {
    required: bool,
    check: Check,
}

/// A check of a method's params (without `_meta`): `Err` says which member is wrong.
type Check = fn(&Value) -> Result<(), String>;

/// The methods this server answers, with the shape of their params; `None` for a method it
/// does not know (which is "method not found"). It has no prompts, and its tools only with
/// the tool bridge on (see [`is_known`]).
#[allow(deprecated)] // see the imports
fn shape(method: &str) -> Option<Shape> {
    let (required, check): (bool, Check) = match method {
        "ping" => (false, |_| Ok(())),
        "initialize" => (true, fits::<InitializeRequestParams>),
        "server/discover" => (false, fits::<DiscoverRequestParams>),
        "completion/complete" => (true, fits::<CompleteRequestParams>),
        "logging/setLevel" => (true, fits::<SetLevelRequestParams>),
        "tools/call" => (true, fits::<CallToolRequestParams>),
        "resources/list" | "resources/templates/list" | "tools/list" => {
            (false, fits::<PaginatedRequestParams>)
        }
        "resources/read" => (true, fits::<ReadResourceRequestParams>),
        "resources/subscribe" => (true, fits::<SubscribeRequestParams>),
        "resources/unsubscribe" => (true, fits::<UnsubscribeRequestParams>),
        "subscriptions/listen" => (true, fits::<SubscriptionsListenRequestParams>),
        _ => return None,
    };
    Some(Shape { required, check })
}

/// Methods of the legacy era that the 2026-07-28 era removed: for a request of that era they
/// are "method not found", never a params error.
pub(crate) const REMOVED_IN_2026_07_28: &[&str] = &[
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
];

/// Whether this server answers `method` (anything else is "method not found"); `tools/*`
/// only when the tool bridge is on (`tools`), as only then does it declare `tools`.
pub(crate) fn is_known(method: &str, tools: bool) -> bool {
    shape(method).is_some() && (tools || !method.starts_with("tools/"))
}

/// The "method not found" answer to a request of `method`, saying what is missing rather than
/// only naming the method: a client that asks this server for tools or prompts learns that it
/// offers resources (and how to get tools that read them), one that sends a method its era
/// removed learns what replaced it. `tools`: the tool bridge is on; `era`: the request's. The message starts with the method's name, as rmcp's does.
pub(crate) fn method_not_found(method: &str, tools: bool, era: Era) -> ErrorData {
    let why = if era == Era::Modern && REMOVED_IN_2026_07_28.contains(&method) {
        let instead = match method {
            "initialize" => {
                "; it has no handshake: send server/discover, and _meta on every request"
            }
            "ping" => "; send server/discover to check the server answers",
            "resources/subscribe" | "resources/unsubscribe" => {
                "; subscribe with subscriptions/listen and end it by closing the stream"
            }
            _ => "",
        };
        format!("not a method of protocol version 2026-07-28{instead}")
    } else if method.starts_with("tools/") && !tools {
        "this server does not offer tools; it offers resources (its tool bridge, `serve --tools` \
         or `[server] tools = true`, adds tools that list and read them)"
            .to_owned()
    } else if method.starts_with("prompts/") {
        "this server does not offer prompts; it offers resources".to_owned()
    } else {
        format!(
            "no such method; this server offers resources (resources/list, resources/read, \
             resources/templates/list, completion/complete, {}){}",
            if era == Era::Modern {
                "subscriptions/listen"
            } else {
                "resources/subscribe"
            },
            if tools {
                " and tools (tools/list, tools/call)"
            } else {
                ""
            }
        )
    };
    ErrorData::new(
        rmcp::model::ErrorCode::METHOD_NOT_FOUND,
        format!("{method}: {why}"),
        None,
    )
}

/// Why `params` do not fit `method`, as the -32602 answer to send, or `None` when they fit
/// or the method is unknown. The message names the parameter and what it should be.
pub(crate) fn invalid_params(method: &str, params: Option<&Value>) -> Option<ErrorData> {
    let shape = shape(method)?;
    let why = match params {
        None | Some(Value::Null) if shape.required => {
            Some("params are required (an object)".to_owned())
        }
        None | Some(Value::Null) => None,
        Some(Value::Object(map)) => match map.get("_meta") {
            Some(meta) if !meta.is_object() && !meta.is_null() => {
                Some(format!("`_meta` must be an object, not {}", kind(meta)))
            }
            _ => {
                // `_meta` is taken out before the rest is decoded, as rmcp does.
                let mut rest = map.clone();
                rest.remove("_meta");
                (shape.check)(&Value::Object(rest)).err()
            }
        },
        Some(other) => Some(format!("params must be an object, not {}", kind(other))),
    }?;
    Some(ErrorData::invalid_params(
        format!("invalid params for {method}: {why}"),
        None,
    ))
}

/// The answer for a known method whose params rmcp would not take, when no more precise
/// reason is found: still invalid params, never "method not found".
pub(crate) fn invalid_params_or_generic(method: &str, params: Option<&Value>) -> ErrorData {
    invalid_params(method, params).unwrap_or_else(|| {
        ErrorData::invalid_params(
            format!("invalid params for {method}: they do not match the method's parameters"),
            None,
        )
    })
}

/// `v` decoded as `T`, or which member failed and why.
fn fits<T: DeserializeOwned>(v: &Value) -> Result<(), String> {
    match serde_path_to_error::deserialize::<_, T>(v) {
        Ok(_) => Ok(()),
        Err(e) => {
            let path = e.path().to_string();
            if path == "." {
                Err(e.inner().to_string())
            } else {
                Err(format!("`{path}`: {}", e.inner()))
            }
        }
    }
}

/// The JSON type of `v`, for messages.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn message(method: &str, params: Value) -> Option<String> {
        invalid_params(method, Some(&params)).map(|e| {
            assert_eq!(e.code.0, -32602);
            e.message.into_owned()
        })
    }

    #[test]
    fn the_wrong_parameter_is_named() {
        let m = message("resources/read", json!({"uri": 12})).unwrap();
        assert!(
            m.contains("`uri`") && m.contains("expected a string"),
            "{m}"
        );
        let m = message("resources/list", json!({"cursor": 1})).unwrap();
        assert!(m.contains("`cursor`"), "{m}");
        let m = message("resources/subscribe", json!({"uri": ["a"]})).unwrap();
        assert!(m.contains("`uri`"), "{m}");
        let m = message("resources/read", json!({})).unwrap();
        assert!(m.contains("missing field `uri`"), "{m}");
        let m = message("ping", json!("x")).unwrap();
        assert!(m.contains("params must be an object, not a string"), "{m}");
        let m = message("resources/list", json!([])).unwrap();
        assert!(m.contains("not an array"), "{m}");
        let m = message("resources/read", json!({"uri": "a", "_meta": 3})).unwrap();
        assert!(m.contains("`_meta`"), "{m}");
        assert!(invalid_params("resources/read", None).is_some());
    }

    #[test]
    fn fitting_params_and_unknown_methods_are_not_refused() {
        assert!(
            message(
                "resources/read",
                json!({"uri": "file:///a", "_meta": {"x": 1}})
            )
            .is_none()
        );
        assert!(message("resources/list", json!({"cursor": "abc"})).is_none());
        assert!(message("resources/list", json!({})).is_none());
        assert!(invalid_params("resources/list", None).is_none());
        assert!(invalid_params("ping", None).is_none());
        assert!(message("server/discover", json!({"_meta": {}})).is_none());
        assert!(message("no/such", json!(5)).is_none());
        assert!(!is_known("no/such", true));
        assert!(is_known("tools/call", true) && !is_known("tools/call", false));
        assert!(!is_known("prompts/list", true) && !is_known("prompts/get", true));
    }
}
