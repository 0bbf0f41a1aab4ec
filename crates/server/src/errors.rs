//! The one place where core errors become JSON-RPC errors.
//!
//! Not-found is -32002 with `data.uri`; rmcp rewrites it to -32602 for 2026-07-28 peers, as
//! that era's spec asks, so this mapping does not need to know the era.

use mcpr_core::{Error, ErrorKind};
use rmcp::ErrorData;
use serde_json::{Map, Value};

/// Map a core error to the JSON-RPC error sent to the client.
pub fn to_mcp_error(err: Error) -> ErrorData {
    let mut data = err.details.unwrap_or_default();
    if let Some(uri) = err.uri {
        data.insert("uri".into(), Value::String(uri));
    }
    if err.kind.is_temporary() {
        data.insert("temporary".into(), Value::Bool(true));
    }
    let data = (!data.is_empty()).then_some(Value::Object(data));
    match err.kind {
        ErrorKind::NotFound => ErrorData::resource_not_found(err.message, data),
        ErrorKind::InvalidParams
        | ErrorKind::InvalidCursor
        | ErrorKind::TooLarge
        | ErrorKind::Unsupported => ErrorData::invalid_params(err.message, data),
        ErrorKind::Unavailable | ErrorKind::Timeout | ErrorKind::Internal => {
            ErrorData::internal_error(err.message, data)
        }
    }
}

/// Data object with just a URI, for errors raised in the server itself.
pub(crate) fn uri_data(uri: &str) -> Option<Value> {
    let mut m = Map::new();
    m.insert("uri".into(), Value::String(uri.to_owned()));
    Some(Value::Object(m))
}
