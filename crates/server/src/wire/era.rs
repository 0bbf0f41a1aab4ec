//! The per-era shaping of answers that rmcp's `ServerHandler` dispatch does and the direct
//! read paths (stdio and HTTP), which answer without it, must do the same way: which
//! requests rmcp takes as 2026-07-28 ones, and what it makes of a read's outcome for each era.
//! The mirror of rmcp 3.11.0's `handler/server.rs` dispatch of `resources/read`
//! (`fill_missing_cache_hints`, `strip_result_type_for_legacy_peer`, not-found remapped);
//! paired with rmcp's serve loop by the test below.

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

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use rmcp::ServerHandler;
    use rmcp::model::{
        CacheScope, JsonRpcMessage, ReadResourceRequestParams, ReadResourceResult,
        ResourceContents, ServerCapabilities, ServerConfig,
    };
    use serde_json::Value;

    use super::*;
    use crate::wire::encode::to_json;
    use crate::wire::rmcp_run::{self, META_2026};

    /// Reads answered from the URI alone, as [`answer`] says; each request's era as
    /// [`Era::of`] sees it is kept, by request id.
    #[derive(Clone, Default)]
    struct Fixed(Arc<Mutex<Vec<(i64, Era)>>>);

    /// The handler's answer to a read of `uri`: a result with and without cache hints of its
    /// own, not found, and another error.
    fn answer(uri: &str) -> Result<ReadResourceResponse, ErrorData> {
        let contents = vec![ResourceContents::text("hi", uri)];
        match uri {
            "x:plain" => Ok(ReadResourceResult::new(contents).into()),
            "x:hinted" => Ok(ReadResourceResult::new(contents)
                .with_ttl_ms(5000)
                .with_cache_scope(CacheScope::Private)
                .into()),
            "x:missing" => Err(ErrorData::resource_not_found(
                "x:missing: no such resource",
                None,
            )),
            _ => Err(ErrorData::invalid_params("bad uri", None)),
        }
    }

    impl ServerHandler for Fixed {
        fn get_info(&self) -> ServerConfig {
            ServerConfig::new(ServerCapabilities::builder().enable_resources().build())
        }

        async fn read_resource(
            &self,
            request: ReadResourceRequestParams,
            ctx: RequestContext<RoleServer>,
        ) -> Result<ReadResourceResponse, ErrorData> {
            let id = ctx.id.to_string().parse().unwrap();
            mcpr_core::sync::lock(&self.0).push((id, Era::of(&ctx)));
            answer(&request.uri)
        }
    }

    #[tokio::test]
    async fn read_outcomes_are_shaped_per_era_as_rmcps_dispatch_shapes_them() {
        let uris = ["x:plain", "x:hinted", "x:missing", "x:bad"];
        let mut input = rmcp_run::legacy_opening().to_vec();
        // Legacy reads (no `_meta`), ids 1..; 2026-07-28 ones (a whole `_meta`), ids 11..
        for (i, uri) in uris.iter().enumerate() {
            input.push(format!(
                r#"{{"jsonrpc":"2.0","id":{},"method":"resources/read","params":{{"uri":"{uri}"}}}}"#,
                i + 1
            ));
            input.push(format!(
                r#"{{"jsonrpc":"2.0","id":{},"method":"resources/read","params":{{"uri":"{uri}","_meta":{META_2026}}}}}"#,
                i + 11
            ));
        }
        let handler = Fixed::default();
        let sent = rmcp_run::serve(handler.clone(), &input, Duration::from_millis(200)).await;
        let eras = std::mem::take(&mut *mcpr_core::sync::lock(&handler.0));
        assert_eq!(eras.len(), 2 * uris.len(), "{eras:?}");
        let mut compared = 0;
        for (_, theirs) in sent {
            let id = match &theirs {
                JsonRpcMessage::Response(r) => r.id.clone(),
                JsonRpcMessage::Error(e) => e.id.clone().unwrap(),
                _ => continue,
            };
            let n: i64 = id.to_string().parse().unwrap();
            if n == 0 {
                continue;
            }
            let (era, uri) = if n > 10 {
                (Era::Modern, uris[n as usize - 11])
            } else {
                (Era::Legacy, uris[n as usize - 1])
            };
            assert!(eras.contains(&(n, era)), "request {n}: {eras:?}");
            let ours = read_message(answer(uri), id, era);
            let json = |m| serde_json::from_slice::<Value>(&to_json(m).unwrap()).unwrap();
            let theirs = json(theirs);
            assert_eq!(json(ours), theirs, "{uri} in {era:?}");
            // What the shaping is: not found is -32602 from 2026-07-28 on, cache hints are
            // filled in then.
            if uri == "x:missing" {
                let code = if era == Era::Modern { -32602 } else { -32002 };
                assert_eq!(theirs["error"]["code"], code, "{theirs}");
            }
            if uri == "x:plain" {
                let hinted = theirs["result"].get("ttlMs").is_some();
                assert_eq!(hinted, era == Era::Modern, "{theirs}");
            }
            compared += 1;
        }
        assert_eq!(compared, 2 * uris.len());
    }
}
