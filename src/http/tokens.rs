//! `/v1/auth/tokens`: a person's personal access tokens.

use axum::extract::State;
use axum::Json;

use crate::api::{
    CreateTokenRequest, CreateTokenResponse, ErrorBody, RevokeResponse, TokenListResponse,
};
use crate::context::SharedContext;
use crate::error::ApiResult;
use crate::identity::accounts::{self, Principal};

use super::extract::{AppJson, AppPath};
use super::operator::unscoped_required;

/// The caller's personal access tokens (never the tokens themselves).
#[utoipa::path(get, path = "/v1/auth/tokens", tag = "auth", security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = TokenListResponse), (status = 401, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn list_tokens(
    State(ctx): State<SharedContext>,
    principal: Principal,
) -> ApiResult<Json<TokenListResponse>> {
    let items = ctx
        .store
        .pats(&principal.user.id)
        .await?
        .iter()
        .map(accounts::pat_wire)
        .collect();
    Ok(Json(TokenListResponse { ok: true, items }))
}

/// Creates a named, expiring personal access token (`svc_pat_...`) that acts for the caller,
/// e.g. in CI. A session, or a token without scopes (the new token expires no later than it).
#[utoipa::path(post, path = "/v1/auth/tokens", tag = "auth", request_body = CreateTokenRequest, security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = CreateTokenResponse), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn create_token(
    State(ctx): State<SharedContext>,
    principal: Principal,
    AppJson(req): AppJson<CreateTokenRequest>,
) -> ApiResult<Json<CreateTokenResponse>> {
    unscoped_required(&principal)?;
    Ok(Json(accounts::create_pat(&ctx, &principal, req).await?))
}

/// Revokes one of the caller's tokens and every token made from it (and from those, ...); they
/// stop working at once. `revoked` counts them all.
#[utoipa::path(post, path = "/v1/auth/tokens/{token_id}/revoke", tag = "auth", params(("token_id" = String, Path)),
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = RevokeResponse), (status = 404, description = "`unknown_token`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn revoke_token(
    State(ctx): State<SharedContext>,
    principal: Principal,
    AppPath(token_id): AppPath<String>,
) -> ApiResult<Json<RevokeResponse>> {
    unscoped_required(&principal)?;
    let revoked = accounts::revoke_pat(&ctx, &principal, &token_id).await?;
    Ok(Json(RevokeResponse { ok: true, revoked }))
}
