//! The JSON-RPC error codes this server answers with outside rmcp's dispatch (the HTTP
//! edge's refusals, authentication, the transports' own answers), named once: rmcp's own
//! constants where it has one (rmcp 3.11.0's `model::ErrorCode`), so an rmcp upgrade that
//! changes a code changes it here too, and the test below says so.

use rmcp::model::ErrorCode;

/// The request itself is unacceptable: its body is too large, late or unreadable.
pub(crate) const INVALID_REQUEST: i32 = ErrorCode::INVALID_REQUEST.0;

/// The server cannot take the request now (shutting down, rate limited, busy, at its session
/// cap) or failed in a way that is not the request's fault.
pub(crate) const INTERNAL_ERROR: i32 = ErrorCode::INTERNAL_ERROR.0;

/// The request carries no valid credentials (or too few scopes): the code MCP servers use
/// beside HTTP 401 and 403, in the server-defined range (rmcp has no constant for it).
pub(crate) const UNAUTHORIZED: i32 = -32001;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_codes_are_the_ones_clients_have_always_seen() {
        assert_eq!(INVALID_REQUEST, -32600);
        assert_eq!(INTERNAL_ERROR, -32603);
        assert_eq!(UNAUTHORIZED, -32001);
    }
}
