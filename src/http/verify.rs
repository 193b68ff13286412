//! `/v1/verify`: a request an agent signed, verified for the backend that received it.

use axum::extract::State;
use axum::Json;

use crate::api::{ErrorBody, VerifyRequest, VerifyResponse};
use crate::context::SharedContext;
use crate::domain::access::Need;
use crate::error::ApiResult;
use crate::identity::verify;

use super::extract::{AppJson, Deciding};

/// Verifies a request an agent signed. Signature, skew, replay, unknown and inactive-agent
/// failures answer 200 with `valid: false` and a `reason` (a `bad_signature` also with
/// `canonical_string`, the string the server checked the signature against, and a `hint` when
/// the signature is not base64 or not 64 bytes); a valid request consumes its nonce.
#[utoipa::path(post, path = "/v1/verify", tag = "identity", request_body = VerifyRequest, security(("api_key" = [])),
    responses((status = 200, body = VerifyResponse), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn verify(
    State(ctx): State<SharedContext>,
    Deciding(caller): Deciding,
    AppJson(req): AppJson<VerifyRequest>,
) -> ApiResult<Json<VerifyResponse>> {
    caller.require(Need::Verify)?;
    Ok(Json(verify::verify(&ctx, &caller.access, req).await?))
}
