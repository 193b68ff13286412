//! `/v1/identity/kill-switch/*`: the workspace kill switch (pause minting, revoke everything).

use axum::extract::State;
use axum::Json;

use crate::api::{ErrorBody, KillSwitchStatus, MintingSwitchRequest, RevokeAllRequest};
use crate::context::SharedContext;
use crate::enforce::credentials;
use crate::error::ApiResult;

use super::extract::{AppJson, Caller};

/// Pauses or resumes minting for the workspace.
#[utoipa::path(post, path = "/v1/identity/kill-switch/minting", tag = "credentials", request_body = MintingSwitchRequest,
    security(("api_key" = [])), responses((status = 200, body = KillSwitchStatus), (status = 400, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn minting(
    State(ctx): State<SharedContext>,
    caller: Caller,
    AppJson(req): AppJson<MintingSwitchRequest>,
) -> ApiResult<Json<KillSwitchStatus>> {
    Ok(Json(
        credentials::set_minting(&ctx, &caller.workspace_id, &caller.actor(), req).await?,
    ))
}

/// Revokes every credential minted so far in the workspace (sets the cutoff to now).
#[utoipa::path(post, path = "/v1/identity/kill-switch/revoke-all", tag = "credentials", request_body = RevokeAllRequest,
    security(("api_key" = [])), responses((status = 200, body = KillSwitchStatus)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn revoke_all(
    State(ctx): State<SharedContext>,
    caller: Caller,
    AppJson(req): AppJson<RevokeAllRequest>,
) -> ApiResult<Json<KillSwitchStatus>> {
    Ok(Json(
        credentials::revoke_all(&ctx, &caller.workspace_id, &caller.actor(), req).await?,
    ))
}

/// The workspace's kill switch.
#[utoipa::path(get, path = "/v1/identity/kill-switch/status", tag = "credentials", security(("api_key" = [])),
    responses((status = 200, body = KillSwitchStatus)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn status(
    State(ctx): State<SharedContext>,
    caller: Caller,
) -> ApiResult<Json<KillSwitchStatus>> {
    Ok(Json(
        credentials::kill_switch_status(&ctx, &caller.workspace_id).await?,
    ))
}
