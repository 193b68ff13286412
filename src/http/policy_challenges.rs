//! `/v1/policy-challenges/{id}`: a challenge's status, for the backend that waits on it.

use axum::extract::State;
use axum::Json;

use crate::api::{ErrorBody, PolicyChallengeResponse};
use crate::context::SharedContext;
use crate::enforce::approvals;
use crate::error::ApiResult;

use super::extract::{AppPath, Caller};

/// A policy challenge's status, for backends that poll.
#[utoipa::path(get, path = "/v1/policy-challenges/{challenge_id}", tag = "approvals", params(("challenge_id" = String, Path)),
    security(("api_key" = [])),
    responses((status = 200, body = PolicyChallengeResponse), (status = 404, description = "`unknown_challenge`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn status(
    State(ctx): State<SharedContext>,
    caller: Caller,
    AppPath(challenge_id): AppPath<String>,
) -> ApiResult<Json<PolicyChallengeResponse>> {
    let challenge = approvals::status(&ctx, &caller.workspace_id, &challenge_id).await?;
    Ok(Json(PolicyChallengeResponse {
        ok: true,
        challenge,
    }))
}
