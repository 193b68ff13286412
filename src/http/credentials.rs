//! `/v1/identity/*`: credentials, introspection and the kill switch (workspace API key); token
//! exchange, the issuer's keys (`/.well-known/*`, public) and policy-gated email sending.

use axum::extract::State;
use axum::Json;

use crate::api::{
    ErrorBody, IntrospectRequest, IntrospectResponse, MintRequest, MintResponse,
    RevokeByAgentRequest, RevokeRequest, RevokeResponse,
};
use crate::context::SharedContext;
use crate::domain::access::Need;
use crate::enforce::credentials;
use crate::error::ApiResult;

use super::extract::{AppJson, Caller};
use super::operator::{needs, Authorized};

/// Mints a short-lived credential for an agent, if the policy allows `mint_credential`.
#[utoipa::path(post, path = "/v1/identity/credentials/mint", tag = "credentials", request_body = MintRequest,
    security(("api_key" = [])),
    responses((status = 200, body = MintResponse),
        (status = 400, description = "`missing_agent_id`, `invalid_ttl`, `invalid_scopes`, `invalid_token_type`", body = ErrorBody),
        (status = 403, description = "`minting_paused`, `policy_denied`, `policy_challenge` (with the challenge)", body = ErrorBody),
        (status = 404, description = "`unknown_agent`, `unknown_policy`", body = ErrorBody),
        (status = 429, description = "`rate_limited` with `retry_after` and `Retry-After`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn mint(
    State(ctx): State<SharedContext>,
    caller: Caller,
    AppJson(req): AppJson<MintRequest>,
) -> ApiResult<Json<MintResponse>> {
    caller.require(Need::Mint)?;
    Ok(Json(
        credentials::mint(&ctx, &caller.access, &caller.actor(), req).await?,
    ))
}

/// Revokes one credential, by its token or its `cred_id`.
#[utoipa::path(post, path = "/v1/identity/credentials/revoke", tag = "credentials", request_body = RevokeRequest,
    security(("api_key" = []), ("session" = []), ("access_token" = [])), responses((status = 200, body = RevokeResponse), (status = 400, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn revoke(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::Credentials>,
    AppJson(req): AppJson<RevokeRequest>,
) -> ApiResult<Json<RevokeResponse>> {
    Ok(Json(
        credentials::revoke(&ctx, &op.workspace_id, &op.actor(), req).await?,
    ))
}

/// Revokes every live credential of one agent of the workspace.
#[utoipa::path(post, path = "/v1/identity/credentials/revoke-by-agent", tag = "credentials", request_body = RevokeByAgentRequest,
    security(("api_key" = []), ("session" = []), ("access_token" = [])), responses((status = 200, body = RevokeResponse), (status = 404, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn revoke_by_agent(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::Credentials>,
    AppJson(req): AppJson<RevokeByAgentRequest>,
) -> ApiResult<Json<RevokeResponse>> {
    Ok(Json(
        credentials::revoke_by_agent(&ctx, &op.view(&ctx).await?, &op.actor(), req).await?,
    ))
}

/// Whether a token is active: revocation, expiry, the kill-switch cutoff and one-time use count.
#[utoipa::path(post, path = "/v1/identity/introspect", tag = "credentials", request_body = IntrospectRequest,
    security(("api_key" = []), ("session" = []), ("access_token" = [])), responses((status = 200, body = IntrospectResponse), (status = 400, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn introspect(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::Credentials>,
    AppJson(req): AppJson<IntrospectRequest>,
) -> ApiResult<Json<IntrospectResponse>> {
    Ok(Json(
        credentials::introspect(&ctx, &op.view(&ctx).await?, req).await?,
    ))
}
