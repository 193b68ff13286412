//! `/v1/identity/*`: credentials, introspection and the kill switch (workspace API key); token
//! exchange, the issuer's keys (`/.well-known/*`, public) and policy-gated email sending.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;

use crate::api::{
    EmailSendRequest, EmailSendResponse, ErrorBody, IntrospectRequest, IntrospectResponse,
    KillSwitchStatus, MintRequest, MintResponse, MintingSwitchRequest, RevokeAllRequest,
    RevokeByAgentRequest, RevokeRequest, RevokeResponse, TokenExchangeRequest,
    TokenExchangeResponse,
};
use crate::context::SharedContext;
use crate::enforce::{credentials, jwt};
use crate::error::ApiResult;

use super::extract::{AppJson, Caller};

/// Mints a short-lived credential for an agent, if the policy allows `mint_credential`.
#[utoipa::path(post, path = "/v1/identity/credentials/mint", tag = "credentials", request_body = MintRequest,
    security(("api_key" = [])),
    responses((status = 200, body = MintResponse),
        (status = 400, description = "`missing_agent_id`, `invalid_ttl`, `invalid_scopes`, `invalid_token_type`", body = ErrorBody),
        (status = 403, description = "`minting_paused`, `policy_denied`, `policy_challenge` (with the challenge)", body = ErrorBody),
        (status = 404, description = "`unknown_agent`, `unknown_policy`", body = ErrorBody),
        (status = 429, description = "`rate_limited` with `retry_after` and `Retry-After`", body = ErrorBody)))]
pub async fn mint(
    State(ctx): State<SharedContext>,
    caller: Caller,
    AppJson(req): AppJson<MintRequest>,
) -> ApiResult<Json<MintResponse>> {
    Ok(Json(
        credentials::mint(&ctx, &caller.access, &caller.actor(), req).await?,
    ))
}

/// Revokes one credential, by its token or its `cred_id`.
#[utoipa::path(post, path = "/v1/identity/credentials/revoke", tag = "credentials", request_body = RevokeRequest,
    security(("api_key" = [])), responses((status = 200, body = RevokeResponse), (status = 400, body = ErrorBody)))]
pub async fn revoke(
    State(ctx): State<SharedContext>,
    caller: Caller,
    AppJson(req): AppJson<RevokeRequest>,
) -> ApiResult<Json<RevokeResponse>> {
    Ok(Json(
        credentials::revoke(&ctx, &caller.workspace_id, &caller.actor(), req).await?,
    ))
}

/// Revokes every live credential of one agent of the workspace.
#[utoipa::path(post, path = "/v1/identity/credentials/revoke-by-agent", tag = "credentials", request_body = RevokeByAgentRequest,
    security(("api_key" = [])), responses((status = 200, body = RevokeResponse), (status = 404, body = ErrorBody)))]
pub async fn revoke_by_agent(
    State(ctx): State<SharedContext>,
    caller: Caller,
    AppJson(req): AppJson<RevokeByAgentRequest>,
) -> ApiResult<Json<RevokeResponse>> {
    Ok(Json(
        credentials::revoke_by_agent(&ctx, &caller.access, &caller.actor(), req).await?,
    ))
}

/// Whether a token is active: revocation, expiry, the kill-switch cutoff and one-time use count.
#[utoipa::path(post, path = "/v1/identity/introspect", tag = "credentials", request_body = IntrospectRequest,
    security(("api_key" = [])), responses((status = 200, body = IntrospectResponse), (status = 400, body = ErrorBody)))]
pub async fn introspect(
    State(ctx): State<SharedContext>,
    caller: Caller,
    AppJson(req): AppJson<IntrospectRequest>,
) -> ApiResult<Json<IntrospectResponse>> {
    Ok(Json(
        credentials::introspect(&ctx, &caller.access, req).await?,
    ))
}

/// Pauses or resumes minting for the workspace.
#[utoipa::path(post, path = "/v1/identity/kill-switch/minting", tag = "credentials", request_body = MintingSwitchRequest,
    security(("api_key" = [])), responses((status = 200, body = KillSwitchStatus), (status = 400, body = ErrorBody)))]
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
pub async fn status(
    State(ctx): State<SharedContext>,
    caller: Caller,
) -> ApiResult<Json<KillSwitchStatus>> {
    Ok(Json(
        credentials::kill_switch_status(&ctx, &caller.workspace_id).await?,
    ))
}

/// Trades an agent's signed proof (its key over the canonical request string) for a
/// short-lived EdDSA JWT, if the policy allows `token_exchange`.
#[utoipa::path(post, path = "/v1/token/exchange", tag = "credentials", request_body = TokenExchangeRequest,
    security(("api_key" = [])),
    responses((status = 200, body = TokenExchangeResponse),
        (status = 400, description = "`missing_agent_id`, `missing_agent_request`, `invalid_ttl`, `invalid_scopes`", body = ErrorBody),
        (status = 401, description = "`bad_signature`, `timestamp_out_of_range`, `replay_detected`, `invalid_nonce`", body = ErrorBody),
        (status = 403, description = "`policy_denied`, `policy_challenge`, `minting_paused`, `agent_not_active`", body = ErrorBody),
        (status = 404, description = "`unknown_agent`, `unknown_policy`", body = ErrorBody),
        (status = 429, description = "`rate_limited`", body = ErrorBody)))]
pub async fn exchange(
    State(ctx): State<SharedContext>,
    caller: Caller,
    AppJson(req): AppJson<TokenExchangeRequest>,
) -> ApiResult<Json<TokenExchangeResponse>> {
    Ok(Json(
        credentials::exchange(&ctx, &caller.access, &caller.actor(), req).await?,
    ))
}

/// The JWT issuer's public keys (the current one and, during a rotation, the previous one).
#[utoipa::path(get, path = "/.well-known/jwks.json", tag = "credentials",
    responses((status = 200, description = "`{keys: [{kty: OKP, crv: Ed25519, x, kid, use: sig, alg: EdDSA}]}`")))]
pub async fn jwks(State(ctx): State<SharedContext>) -> ApiResult<impl IntoResponse> {
    let keys = ctx.store.signing_keys(crate::time::now_ms()).await?;
    Ok((
        [(header::CACHE_CONTROL, jwt::jwks_cache_control())],
        Json(jwt::jwks(&keys)),
    ))
}

/// Discovery: the issuer, where its keys are, and the token and introspection endpoints.
#[utoipa::path(get, path = "/.well-known/openid-configuration", tag = "credentials",
    responses((status = 200, description = "OpenID provider metadata")))]
pub async fn openid_configuration(State(ctx): State<SharedContext>) -> impl IntoResponse {
    (
        [(header::CACHE_CONTROL, "public, max-age=300")],
        Json(jwt::openid_configuration(&ctx.public_url)),
    )
}

/// Sends an agent's email through the configured provider, only if the policy allows
/// `send_email`.
#[utoipa::path(post, path = "/v1/email/send", tag = "email", request_body = EmailSendRequest,
    security(("api_key" = [])),
    responses((status = 200, body = EmailSendResponse),
        (status = 400, description = "`missing_agent_id`, `missing_email.to`, `invalid_email.subject`, `invalid_attachments`, `attachments_too_large`, ...", body = ErrorBody),
        (status = 403, description = "`policy_blocked` with `decision`, `reasons`, `challenge`", body = ErrorBody),
        (status = 404, description = "`unknown_agent`, `unknown_policy`", body = ErrorBody),
        (status = 502, description = "`provider_unavailable`: not sent, not counted", body = ErrorBody)))]
pub async fn send_email(
    State(ctx): State<SharedContext>,
    caller: Caller,
    AppJson(req): AppJson<EmailSendRequest>,
) -> ApiResult<Json<EmailSendResponse>> {
    Ok(Json(
        crate::enforce::email::send(&ctx, &caller.access, &caller.actor(), req).await?,
    ))
}
