//! `/v1/workspace/settings`: the active workspace's settings.

use axum::extract::State;
use axum::Json;

use crate::api::{ErrorBody, UpdateWorkspaceSettings, WorkspaceSettings};
use crate::context::SharedContext;
use crate::domain::access::Need;
use crate::enforce::approvals;
use crate::error::ApiResult;
use crate::identity::accounts::Principal;

use super::extract::AppJson;
use super::operator::person_requires;

/// The active workspace's settings.
#[utoipa::path(get, path = "/v1/workspace/settings", tag = "workspaces", security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = WorkspaceSettings), (status = 401, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn get_settings(
    State(ctx): State<SharedContext>,
    principal: Principal,
) -> ApiResult<Json<WorkspaceSettings>> {
    person_requires(&principal, Need::WorkspaceRead)?;
    Ok(Json(approvals::settings(&ctx, &principal).await?))
}

/// Changes the active workspace's settings (owners and admins).
#[utoipa::path(post, path = "/v1/workspace/settings", tag = "workspaces", request_body = UpdateWorkspaceSettings,
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = WorkspaceSettings), (status = 403, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn update_settings(
    State(ctx): State<SharedContext>,
    principal: Principal,
    AppJson(req): AppJson<UpdateWorkspaceSettings>,
) -> ApiResult<Json<WorkspaceSettings>> {
    person_requires(&principal, Need::WorkspaceChange)?;
    Ok(Json(
        approvals::update_settings(&ctx, &principal, req).await?,
    ))
}
