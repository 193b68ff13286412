//! `/v1/token/exchange`: an agent's signed proof exchanged for a credential.

use axum::extract::State;
use axum::Json;

use crate::api::{ErrorBody, TokenExchangeRequest, TokenExchangeResponse};
use crate::context::SharedContext;
use crate::domain::access::Need;
use crate::enforce::credentials;
use crate::error::ApiResult;

use super::extract::{AppJson, Caller};

/// Trades an agent's signed proof (its key over the canonical request string) for a
/// short-lived EdDSA JWT, if the policy allows `token_exchange`.
#[utoipa::path(post, path = "/v1/token/exchange", tag = "credentials", request_body = TokenExchangeRequest,
    security(("api_key" = [])),
    responses((status = 200, body = TokenExchangeResponse),
        (status = 400, description = "`missing_agent_id`, `missing_agent_request`, `invalid_ttl`, `invalid_scopes`", body = ErrorBody),
        (status = 401, description = "`bad_signature` (with `canonical_string`, the string the server checked the signature against, and a `hint` when the signature is not base64 or not 64 bytes), `timestamp_out_of_range`, `replay_detected`, `invalid_nonce`", body = ErrorBody),
        (status = 403, description = "`policy_denied`, `policy_challenge`, `minting_paused`, `agent_not_active`", body = ErrorBody),
        (status = 404, description = "`unknown_agent`, `unknown_policy`", body = ErrorBody),
        (status = 429, description = "`rate_limited`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn exchange(
    State(ctx): State<SharedContext>,
    caller: Caller,
    AppJson(req): AppJson<TokenExchangeRequest>,
) -> ApiResult<Json<TokenExchangeResponse>> {
    caller.require(Need::Mint)?;
    Ok(Json(
        credentials::exchange(&ctx, &caller.access, &caller.actor(), req).await?,
    ))
}
