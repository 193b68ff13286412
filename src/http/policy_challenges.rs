//! `/v1/policy-challenges`: the challenges that `challenge` decisions opened: listed for
//! operators, polled by the backend that waits, decided by approvers acting by role.

use axum::extract::State;
use axum::Json;

use crate::api::{
    ApprovalDecisionRequest, ChallengeListParams, ErrorBody, PolicyChallengeList,
    PolicyChallengeResponse,
};
use crate::context::SharedContext;
use crate::enforce::approvals;
use crate::error::ApiResult;

use super::extract::{AppJson, AppPath, AppQuery};
use super::operator::{needs, Authorized};

/// The workspace's policy challenges, newest first; `status` and `agent_id` filter.
#[utoipa::path(get, path = "/v1/policy-challenges", tag = "approvals", params(ChallengeListParams),
    security(("api_key" = []), ("session" = []), ("access_token" = [])),
    responses((status = 200, body = PolicyChallengeList), (status = 400, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn list(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::ChallengesRead>,
    AppQuery(params): AppQuery<ChallengeListParams>,
) -> ApiResult<Json<PolicyChallengeList>> {
    let limit = super::page_limit(params.limit, 50, 200)?;
    let mut items = approvals::list(
        &ctx,
        &op.workspace_id,
        params.status.as_deref(),
        params.agent_id.as_deref(),
        super::page_cursor(params.cursor.as_deref())?,
        limit + 1,
    )
    .await?;
    let next_cursor = super::next_cursor(&mut items, limit, |c| {
        (
            crate::time::parse_iso(&c.created_at).unwrap_or_default(),
            c.challenge_id.clone(),
        )
    });
    Ok(Json(PolicyChallengeList {
        ok: true,
        items,
        next_cursor,
    }))
}

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

/// Approves or denies a pending challenge: a person with the `approver`, `admin` or `owner`
/// role (session, or a token unscoped or with `approve`). Audited with the person as actor.
#[utoipa::path(post, path = "/v1/policy-challenges/{challenge_id}/decide", tag = "approvals",
    params(("challenge_id" = String, Path)), request_body = ApprovalDecisionRequest,
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = PolicyChallengeResponse),
        (status = 404, description = "`unknown_challenge`", body = ErrorBody),
        (status = 409, description = "`challenge_already_decided`", body = ErrorBody),
        (status = 410, description = "`challenge_expired`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn decide(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::ChallengesDecide>,
    AppPath(challenge_id): AppPath<String>,
    AppJson(req): AppJson<ApprovalDecisionRequest>,
) -> ApiResult<Json<PolicyChallengeResponse>> {
    let challenge = approvals::decide_by_id(
        &ctx,
        &op.workspace_id,
        &challenge_id,
        &req.decision,
        None,
        &op.actor(),
    )
    .await?;
    Ok(Json(PolicyChallengeResponse {
        ok: true,
        challenge,
    }))
}
