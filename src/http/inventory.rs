//! `/v1/workspace/agents`: the workspace's agent inventory.

use axum::extract::State;
use axum::Json;

use crate::api::{
    ErrorBody, InventoryListParams, InventoryListResponse, InventoryUpsertRequest,
    InventoryUpsertResponse,
};
use crate::context::SharedContext;
use crate::domain::access::Need;
use crate::error::ApiResult;
use crate::telemetry::inventory;

use super::extract::{AppJson, AppQuery, Caller};
use super::operator::{needs, Authorized};

/// Maps an external system's key for an agent to the agent, idempotently.
#[utoipa::path(post, path = "/v1/workspace/agents/upsert", tag = "inventory", request_body = InventoryUpsertRequest,
    security(("api_key" = [])),
    responses((status = 200, body = InventoryUpsertResponse), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "`conflict`: the key maps to another agent", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn upsert_inventory(
    State(ctx): State<SharedContext>,
    caller: Caller,
    AppJson(req): AppJson<InventoryUpsertRequest>,
) -> ApiResult<Json<InventoryUpsertResponse>> {
    caller.require(Need::Telemetry)?;
    Ok(Json(
        inventory::upsert(&ctx, &caller.workspace_id, &caller.actor(), req).await?,
    ))
}

/// The workspace's agent inventory.
#[utoipa::path(get, path = "/v1/workspace/agents", tag = "inventory", params(InventoryListParams),
    security(("api_key" = []), ("session" = []), ("access_token" = [])),
    responses((status = 200, body = InventoryListResponse), (status = 401, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn list_inventory(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::AgentsRead>,
    AppQuery(params): AppQuery<InventoryListParams>,
) -> ApiResult<Json<InventoryListResponse>> {
    Ok(Json(inventory::list(&ctx, &op.workspace_id, params).await?))
}
