//! The JSON-RPC error codes this server answers with outside rmcp's dispatch (the HTTP
//! edge's refusals, authentication, the transports' own answers) and the one rmcp has no
//! constant for (a request's timeout), named once: rmcp's own constants where it has one
//! (rmcp 3.11.0's `model::ErrorCode`), so an rmcp upgrade that changes a code changes it
//! here too, and the test below says so.
//!
//! -32001 is two names here, told apart by where they are sent. [`REQUEST_TIMEOUT`] is a
//! JSON-RPC answer to a request that ran out of time, always with HTTP 200 (or on stdio).
//! [`UNAUTHORIZED`] is sent only by the HTTP edge, only beside HTTP 401 or 403, before the
//! request reaches any MCP processing: a client tells them apart by the HTTP status, and a
//! request that got as far as a handler can only have timed out.

use rmcp::model::ErrorCode;

/// The request itself is unacceptable: its body is too large, late or unreadable.
pub(crate) const INVALID_REQUEST: i32 = ErrorCode::INVALID_REQUEST.0;

/// The server cannot take the request now (shutting down, rate limited, busy, at its session
/// cap) or failed in a way that is not the request's fault.
pub(crate) const INTERNAL_ERROR: i32 = ErrorCode::INTERNAL_ERROR.0;

/// The request ran out of time (`request_timeout`, or the bound a call names): what both
/// official SDKs call a request timeout (TypeScript's `ErrorCode.RequestTimeout`, Python's
/// `REQUEST_TIMEOUT`, both -32001), so a client built on either reads it as one. rmcp has no
/// constant for it. Every timeout answers it through `errors::code_of`.
pub(crate) const REQUEST_TIMEOUT: i32 = -32001;

/// The request carries no valid credentials (or too few scopes): the code MCP servers use
/// beside HTTP 401 and 403, in the server-defined range (rmcp has no constant for it). The
/// same number as [`REQUEST_TIMEOUT`], never with the same HTTP status (see the module docs).
pub(crate) const UNAUTHORIZED: i32 = -32001;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_codes_are_the_ones_clients_have_always_seen() {
        assert_eq!(INVALID_REQUEST, -32600);
        assert_eq!(INTERNAL_ERROR, -32603);
        assert_eq!(REQUEST_TIMEOUT, -32001);
        assert_eq!(UNAUTHORIZED, -32001);
    }
}
