//! The handler's SEP-2640 methods: rmcp parameters in, [`Service`](crate::Service) calls,
//! rmcp results out with the era's cache hints. The logic lives in the service.

use rmcp::ErrorData;
use rmcp::model::{ListResourcesResult, ReadResourceDirectoryRequestParams};
use rmcp::service::{RequestContext, RoleServer};

use super::{McpHandler, grant_of, is_modern, resource_of, scope};
use crate::errors::to_mcp_error;

impl McpHandler {
    /// `resources/directory/read`: a `resources/list`-shaped page of the directory's
    /// children, `ttlMs`/`cacheScope` for 2026-07-28 peers.
    pub(super) async fn do_read_resource_directory(
        &self,
        request: ReadResourceDirectoryRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let page = self
            .service
            .read_directory(
                grant_of(&ctx.extensions),
                &request.uri,
                request.cursor.as_deref(),
            )
            .await
            .map_err(to_mcp_error)?;
        let mut result =
            ListResourcesResult::with_all_items(page.items.into_iter().map(resource_of).collect());
        result.next_cursor = page.next_cursor;
        if is_modern(&ctx) {
            result = result
                .with_ttl_ms(page.hints.ttl_ms)
                .with_cache_scope(scope(page.hints));
        }
        Ok(result)
    }
}
