//! `/v1/policy-challenges/{id}`: a challenge's status, for the backend that waits on it.

use axum::extract::State;
use axum::Json;

use crate::api::{ErrorBody, PolicyChallengeResponse};
use crate::context::SharedContext;
use crate::enforce::approvals;
use crate::error::ApiResult;

use super::extract::AppPath;
use super::operator::{needs, Authorized};

/// A policy challenge's status, for backends that poll.
#[utoipa::path(get, path = "/v1/policy-challenges/{challenge_id}", tag = "approvals", params(("challenge_id" = String, Path)),
    security(("api_key" = []), ("session" = []), ("access_token" = [])),
    responses((status = 200, body = PolicyChallengeResponse), (status = 404, description = "`unknown_challenge`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn status(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::ChallengesRead>,
    AppPath(challenge_id): AppPath<String>,
) -> ApiResult<Json<PolicyChallengeResponse>> {
    let challenge = approvals::status(&ctx, &op.workspace_id, &challenge_id).await?;
    Ok(Json(PolicyChallengeResponse {
        ok: true,
        challenge,
    }))
}
