//! The per-era shaping of answers that rmcp's `ServerHandler` dispatch does and the direct
//! read paths (stdio and HTTP), which answer without it, must do the same way: which
//! requests rmcp takes as 2026-07-28 ones, and what it makes of a read's outcome for each era.

use rmcp::ErrorData;
use rmcp::model::{
    ErrorCode, ProtocolVersion, ReadResourceResponse, RequestId, RequestMetaObject,
    ServerJsonRpcMessage, ServerResult,
};
use rmcp::service::{RequestContext, RoleServer};

/// The protocol era a request is answered in, which decides what rmcp's dispatch does to
/// its answer.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Era {
    /// Before 2026-07-28 (a session opened by `initialize`): no cache hints, `resultType`
    /// stripped, not-found as -32002.
    Legacy,
    /// 2026-07-28 or later: cache hints filled in, not-found as the standard -32602, the
    /// methods that version removed refused as removed.
    Modern,
}

impl Era {
    /// The era of the request `ctx` belongs to.
    pub(crate) fn of(ctx: &RequestContext<RoleServer>) -> Self {
        let modern = ctx
            .protocol_version()
            .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
        if modern { Era::Modern } else { Era::Legacy }
    }
}

/// Whether `meta` names exactly 2026-07-28 and has every member that version requires: rmcp
/// then treats the request as a 2026-07-28 one whatever the session. The direct read paths
/// (stdio and HTTP) take such a read themselves.
pub(crate) fn complete_2026_07_28(meta: &RequestMetaObject) -> bool {
    meta.protocol_version() == Some(ProtocolVersion::V_2026_07_28)
        && meta
            .missing_required_keys(&ProtocolVersion::V_2026_07_28)
            .is_empty()
}

/// What rmcp's `ServerHandler` dispatch makes of a `resources/read` outcome for request `id`,
/// for the direct read paths that answer without it: for a 2026-07-28 request ([`Era::Modern`]),
/// cache hints filled in where missing and not-found as the standard -32602; for a legacy
/// one, `resultType` stripped.
pub(crate) fn read_message(
    answer: Result<ReadResourceResponse, ErrorData>,
    id: RequestId,
    era: Era,
) -> ServerJsonRpcMessage {
    match answer {
        Ok(result) => {
            let mut result: ServerResult = result.into();
            if era == Era::Modern {
                result.fill_missing_cache_hints();
            } else {
                result.strip_result_type_for_legacy_peer();
            }
            ServerJsonRpcMessage::response(result, id)
        }
        Err(mut error) => {
            if era == Era::Modern && error.code == ErrorCode::RESOURCE_NOT_FOUND {
                error.code = ErrorCode::INVALID_PARAMS;
            }
            ServerJsonRpcMessage::error(error, Some(id))
        }
    }
}
