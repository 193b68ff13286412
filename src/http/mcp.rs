//! `/v1/mcp/servers`: the MCP gateway's registered servers, registered, changed and removed
//! by owners and admins, read by every member (people and their tokens).

use axum::extract::State;
use axum::Json;

use crate::api::{
    CreateMcpServerRequest, ErrorBody, McpServer, McpServerList, McpServerResponse, OkResponse,
    UpdateMcpServerRequest,
};
use crate::context::SharedContext;
use crate::error::ApiResult;
use crate::mcp::servers;

use super::extract::{AppJson, AppPath};
use super::operator::{needs, Authorized};

fn answer(server: McpServer) -> Json<McpServerResponse> {
    Json(McpServerResponse { ok: true, server })
}

/// The workspace's registered MCP servers, by name.
#[utoipa::path(get, path = "/v1/mcp/servers", tag = "mcp", security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = McpServerList), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn list(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::McpRead>,
) -> ApiResult<Json<McpServerList>> {
    let items = servers::list(&ctx, &op.workspace_id).await?;
    Ok(Json(McpServerList { ok: true, items }))
}

/// Registers an MCP server (owners and admins): agents reach it at `/mcp/{name}`.
#[utoipa::path(post, path = "/v1/mcp/servers", tag = "mcp", request_body = CreateMcpServerRequest,
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = McpServerResponse),
        (status = 400, description = "`missing_name`, `invalid_name`, `missing_url`, `invalid_url`, `destination_not_allowed` (the host is, or resolves to, a loopback, private, link-local or metadata address the operator's allow-list does not open), `missing_secret_set_id`, `invalid_secret_set_id`, `invalid_auth` (the profile does not let the gateway call the URL, or injects a key the set does not hold)", body = ErrorBody),
        (status = 403, description = "`insufficient_role`", body = ErrorBody),
        (status = 404, description = "`unknown_secret_set`, `unknown_profile`", body = ErrorBody),
        (status = 409, description = "`mcp_server_exists`, `too_many_mcp_servers`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn create(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::McpChange>,
    AppJson(req): AppJson<CreateMcpServerRequest>,
) -> ApiResult<Json<McpServerResponse>> {
    Ok(answer(
        servers::create(&ctx, &op.workspace_id, &op.actor(), req).await?,
    ))
}

/// One registered MCP server, by id (`mcp_...`) or name.
#[utoipa::path(get, path = "/v1/mcp/servers/{server_id}", tag = "mcp", params(("server_id" = String, Path, description = "`mcp_...` or the server's name")),
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = McpServerResponse), (status = 404, description = "`unknown_mcp_server`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn get(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::McpRead>,
    AppPath(server): AppPath<String>,
) -> ApiResult<Json<McpServerResponse>> {
    Ok(answer(servers::get(&ctx, &op.workspace_id, &server).await?))
}

/// Changes a registered MCP server (owners and admins); absent fields stay, `auth: null`
/// removes the upstream authentication.
#[utoipa::path(post, path = "/v1/mcp/servers/{server_id}", tag = "mcp", params(("server_id" = String, Path, description = "`mcp_...` or the server's name")),
    request_body = UpdateMcpServerRequest, security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = McpServerResponse),
        (status = 400, description = "as when registering", body = ErrorBody),
        (status = 403, description = "`insufficient_role`", body = ErrorBody),
        (status = 404, description = "`unknown_mcp_server`, `unknown_secret_set`, `unknown_profile`", body = ErrorBody),
        (status = 409, description = "`mcp_server_exists`, `mcp_server_changed` (changed by someone else since it was read)", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn update(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::McpChange>,
    AppPath(server): AppPath<String>,
    AppJson(req): AppJson<UpdateMcpServerRequest>,
) -> ApiResult<Json<McpServerResponse>> {
    Ok(answer(
        servers::update(&ctx, &op.workspace_id, &op.actor(), &server, req).await?,
    ))
}

/// Removes a registered MCP server (owners and admins).
#[utoipa::path(post, path = "/v1/mcp/servers/{server_id}/delete", tag = "mcp", params(("server_id" = String, Path, description = "`mcp_...` or the server's name")),
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = OkResponse), (status = 403, description = "`insufficient_role`", body = ErrorBody),
        (status = 404, description = "`unknown_mcp_server`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn delete(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::McpChange>,
    AppPath(server): AppPath<String>,
) -> ApiResult<Json<OkResponse>> {
    servers::delete(&ctx, &op.workspace_id, &op.actor(), &server).await?;
    Ok(Json(OkResponse { ok: true }))
}
