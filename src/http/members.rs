//! `/v1/workspace/members`: the active workspace's members and their roles.

use axum::extract::State;
use axum::Json;

use crate::api::{AddMemberRequest, ErrorBody, MemberListResponse, MemberResponse, OkResponse};
use crate::context::SharedContext;
use crate::domain::access::Need;
use crate::error::ApiResult;
use crate::identity::accounts::{self, Principal};

use super::extract::{AppJson, AppPath};
use super::operator::person_requires;

/// Members of the active workspace.
#[utoipa::path(get, path = "/v1/workspace/members", tag = "workspaces", security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = MemberListResponse), (status = 403, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn list_members(
    State(ctx): State<SharedContext>,
    principal: Principal,
) -> ApiResult<Json<MemberListResponse>> {
    person_requires(&principal, Need::WorkspaceRead)?;
    Ok(Json(accounts::list_members(&ctx, &principal).await?))
}

/// Adds a member by email (created as a user if new) or changes their role.
#[utoipa::path(post, path = "/v1/workspace/members", tag = "workspaces", request_body = AddMemberRequest,
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = MemberResponse), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn add_member(
    State(ctx): State<SharedContext>,
    principal: Principal,
    AppJson(req): AppJson<AddMemberRequest>,
) -> ApiResult<Json<MemberResponse>> {
    person_requires(&principal, Need::WorkspaceChange)?;
    let member = accounts::add_member(&ctx, &principal, req).await?;
    Ok(Json(MemberResponse { ok: true, member }))
}

/// Removes a member (a workspace keeps at least one owner).
#[utoipa::path(post, path = "/v1/workspace/members/{user_id}/remove", tag = "workspaces", params(("user_id" = String, Path)),
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = OkResponse), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "`last_owner`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn remove_member(
    State(ctx): State<SharedContext>,
    principal: Principal,
    AppPath(user_id): AppPath<String>,
) -> ApiResult<Json<OkResponse>> {
    person_requires(&principal, Need::WorkspaceChange)?;
    accounts::remove_member(&ctx, &principal, &user_id).await?;
    Ok(Json(OkResponse { ok: true }))
}
