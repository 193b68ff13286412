//! `/v1/workspaces` and `/v1/workspaces/select`: a person's workspaces.

use axum::extract::State;
use axum::Json;

use crate::api::{
    CreateWorkspaceRequest, ErrorBody, SelectWorkspaceRequest, SelectWorkspaceResponse,
    WorkspaceListResponse, WorkspaceResponse,
};
use crate::context::SharedContext;
use crate::error::ApiResult;
use crate::identity::accounts::{self, Principal};

use super::extract::AppJson;

/// The caller's workspaces with their role.
#[utoipa::path(get, path = "/v1/workspaces", tag = "workspaces", security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = WorkspaceListResponse), (status = 401, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn list_workspaces(
    State(ctx): State<SharedContext>,
    principal: Principal,
) -> ApiResult<Json<WorkspaceListResponse>> {
    Ok(Json(accounts::list_workspaces(&ctx, &principal).await?))
}

/// Creates a workspace with the caller as owner (a session switches to it).
#[utoipa::path(post, path = "/v1/workspaces", tag = "workspaces", request_body = CreateWorkspaceRequest,
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = WorkspaceResponse), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, description = "`signup_closed`: the person may not sign up here (the `signup` setting)", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn create_workspace(
    State(ctx): State<SharedContext>,
    principal: Principal,
    AppJson(req): AppJson<CreateWorkspaceRequest>,
) -> ApiResult<Json<WorkspaceResponse>> {
    super::operator::unscoped_required(&principal)?;
    let workspace = accounts::create_workspace(&ctx, &principal, &req.name).await?;
    Ok(Json(WorkspaceResponse {
        ok: true,
        workspace,
    }))
}

/// Sets the session's active workspace.
#[utoipa::path(post, path = "/v1/workspaces/select", tag = "workspaces", request_body = SelectWorkspaceRequest,
    security(("session" = [])),
    responses((status = 200, body = SelectWorkspaceResponse), (status = 400, body = ErrorBody),
        (status = 404, description = "`unknown_workspace`: not one of yours", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn select_workspace(
    State(ctx): State<SharedContext>,
    principal: Principal,
    AppJson(req): AppJson<SelectWorkspaceRequest>,
) -> ApiResult<Json<SelectWorkspaceResponse>> {
    accounts::select_workspace(&ctx, &principal, &req.workspace_id).await?;
    Ok(Json(SelectWorkspaceResponse {
        ok: true,
        active_workspace_id: req.workspace_id,
    }))
}
