//! `/.well-known/jwks.json` and `/.well-known/openid-configuration`: the JWT issuer, public.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;

use crate::context::SharedContext;
use crate::enforce::jwt;
use crate::error::ApiResult;
use crate::time::now_ms;

/// The JWT issuer's public keys (the current one and, during a rotation, the previous one).
#[utoipa::path(get, path = "/.well-known/jwks.json", tag = "credentials",
    responses((status = 200, description = "`{keys: [{kty: OKP, crv: Ed25519, x, kid, use: sig, alg: EdDSA}]}`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn jwks(State(ctx): State<SharedContext>) -> ApiResult<impl IntoResponse> {
    let keys = ctx.store.signing_keys(now_ms()).await?;
    Ok((
        [(header::CACHE_CONTROL, jwt::jwks_cache_control())],
        Json(jwt::jwks(&keys)),
    ))
}

/// Discovery: the issuer, where its keys are, and the token and introspection endpoints.
#[utoipa::path(get, path = "/.well-known/openid-configuration", tag = "credentials",
    responses((status = 200, description = "OpenID provider metadata")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn openid_configuration(State(ctx): State<SharedContext>) -> impl IntoResponse {
    (
        [(header::CACHE_CONTROL, "public, max-age=300")],
        Json(jwt::openid_configuration(&ctx.public_url)),
    )
}
