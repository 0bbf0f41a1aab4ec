//! The one place where core errors become JSON-RPC errors.
//!
//! Not-found is -32002 with `data.uri`; rmcp rewrites it to -32602 for 2026-07-28 peers, as
//! that era's spec asks, so this mapping does not need to know the era. A timeout is -32001
//! ([`codes::REQUEST_TIMEOUT`], what both official SDKs call a request timeout), whoever ran
//! out of time: the layer's bound, a stuck read in place, or a provider's own timeout.

use mcpr_core::{Error, ErrorKind};
use rmcp::ErrorData;
use rmcp::model::ErrorCode;
use serde_json::Value;

use crate::wire::codes;

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
    ErrorData::new(code_of(err.kind), err.message, data)
}

/// The JSON-RPC code of an error kind (before rmcp rewrites not-found for 2026-07-28 peers).
/// Request metrics label outcomes by it, so they count what the client saw.
pub(crate) fn code_of(kind: ErrorKind) -> ErrorCode {
    match kind {
        ErrorKind::NotFound => ErrorCode::RESOURCE_NOT_FOUND,
        ErrorKind::InvalidParams
        | ErrorKind::InvalidCursor
        | ErrorKind::TooLarge
        | ErrorKind::Unsupported => ErrorCode::INVALID_PARAMS,
        ErrorKind::Timeout => ErrorCode(codes::REQUEST_TIMEOUT),
        ErrorKind::Unavailable | ErrorKind::Internal => ErrorCode::INTERNAL_ERROR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A timeout, whoever's, is -32001 and temporary; an outage stays -32603.
    #[test]
    fn a_timeout_is_the_sdks_request_timeout_and_temporary() {
        let e = to_mcp_error(Error::new(ErrorKind::Timeout, "slow").with_uri("file:///a"));
        assert_eq!(e.code.0, -32001);
        let data = e.data.expect("data");
        assert_eq!(data["temporary"], true);
        assert_eq!(data["uri"], "file:///a");
        let down = to_mcp_error(Error::new(ErrorKind::Unavailable, "down"));
        assert_eq!(down.code.0, -32603);
        assert_eq!(down.data.expect("data")["temporary"], true);
    }
}
