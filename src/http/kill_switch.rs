//! `/v1/identity/kill-switch/*`: the workspace kill switch (pause minting, revoke everything).

use axum::extract::State;
use axum::Json;

use crate::api::{ErrorBody, KillSwitchStatus, MintingSwitchRequest, RevokeAllRequest};
use crate::context::SharedContext;
use crate::enforce::credentials;
use crate::error::ApiResult;

use super::extract::AppJson;
use super::operator::{needs, Authorized};

/// Pauses or resumes minting for the workspace.
#[utoipa::path(post, path = "/v1/identity/kill-switch/minting", tag = "credentials", request_body = MintingSwitchRequest,
    security(("api_key" = []), ("session" = []), ("access_token" = [])), responses((status = 200, body = KillSwitchStatus), (status = 400, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn minting(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::KillSwitch>,
    AppJson(req): AppJson<MintingSwitchRequest>,
) -> ApiResult<Json<KillSwitchStatus>> {
    Ok(Json(
        credentials::set_minting(&ctx, &op.workspace_id, &op.actor(), req).await?,
    ))
}

/// Revokes every credential minted so far in the workspace (sets the cutoff to now).
#[utoipa::path(post, path = "/v1/identity/kill-switch/revoke-all", tag = "credentials", request_body = RevokeAllRequest,
    security(("api_key" = []), ("session" = []), ("access_token" = [])), responses((status = 200, body = KillSwitchStatus)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn revoke_all(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::KillSwitch>,
    AppJson(req): AppJson<RevokeAllRequest>,
) -> ApiResult<Json<KillSwitchStatus>> {
    Ok(Json(
        credentials::revoke_all(&ctx, &op.workspace_id, &op.actor(), req).await?,
    ))
}

/// The workspace's kill switch.
#[utoipa::path(get, path = "/v1/identity/kill-switch/status", tag = "credentials", security(("api_key" = []), ("session" = []), ("access_token" = [])),
    responses((status = 200, body = KillSwitchStatus)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn status(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::KillSwitchRead>,
) -> ApiResult<Json<KillSwitchStatus>> {
    Ok(Json(
        credentials::kill_switch_status(&ctx, &op.workspace_id).await?,
    ))
}
