//! The handler's SEP-2640 methods: rmcp parameters in, [`Service`](crate::Service) calls,
//! rmcp results out with the era's cache hints. The logic lives in the service.

use rmcp::ErrorData;
use rmcp::model::{
    GetSkillRequestParams, GetSkillResult, ListResourcesResult, ListSkillsResult,
    PaginatedRequestParams, ReadResourceDirectoryRequestParams,
};
use rmcp::service::{RequestContext, RoleServer};

use super::{Era, McpHandler, grant_of, resource_of, scope};
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
        if Era::of(&ctx) == Era::Modern {
            result = result
                .with_ttl_ms(page.hints.ttl_ms)
                .with_cache_scope(scope(page.hints));
        }
        Ok(result)
    }

    /// `skills/list`: one page of the skills the caller may see.
    pub(super) async fn do_list_skills(
        &self,
        request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListSkillsResult, ErrorData> {
        let cursor = request.and_then(|r| r.cursor);
        let page = self
            .service
            .list_skills(grant_of(&ctx.extensions), cursor.as_deref())
            .await
            .map_err(to_mcp_error)?;
        let mut result = ListSkillsResult::with_all_items(page.skills);
        result.next_cursor = page.next_cursor;
        if Era::of(&ctx) == Era::Modern {
            result = result
                .with_ttl_ms(page.hints.ttl_ms)
                .with_cache_scope(scope(page.hints));
        }
        Ok(result)
    }

    /// `skills/get`: the skill whose `SKILL.md` is the URI, -32602 when there is none.
    pub(super) async fn do_get_skill(
        &self,
        request: GetSkillRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetSkillResult, ErrorData> {
        let (skill, hints) = self
            .service
            .get_skill(grant_of(&ctx.extensions), &request.uri)
            .await
            .map_err(to_mcp_error)?;
        let mut result = GetSkillResult::new(skill);
        if Era::of(&ctx) == Era::Modern {
            result = result
                .with_ttl_ms(hints.ttl_ms)
                .with_cache_scope(scope(hints));
        }
        Ok(result)
    }
}
