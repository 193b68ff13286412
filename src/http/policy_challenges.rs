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

use super::extract::{AppJson, AppPath, AppQuery, SignedRequest};
use super::operator::{needs, Authorized, Who};
use crate::error::ApiError;
use crate::identity::accounts::Principal;

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
    let challenge = approvals::status(
        &ctx,
        &op.workspace_id,
        &approvals::challenge_id(&challenge_id)?,
    )
    .await?;
    Ok(Json(PolicyChallengeResponse {
        ok: true,
        challenge,
    }))
}

/// A challenge's status for the agent that raised it itself (the vault's agent side answers
/// such a challenge with this status link, never with the deciding link): a signed `GET`, the
/// agent's own challenges only.
#[utoipa::path(get, path = "/v1/policy-challenges/{challenge_id}/status", tag = "approvals", params(("challenge_id" = String, Path)),
    security(("agent_signature" = [])),
    responses((status = 200, body = PolicyChallengeResponse),
        (status = 401, description = "`missing_signature_headers`, `timestamp_out_of_range`, `invalid_nonce`, `bad_signature` (with `canonical_string`, the string the server checked the signature against, and a `hint` when the signature is not base64 or not 64 bytes), `replay_detected`", body = ErrorBody),
        (status = 403, description = "`agent_not_active`", body = ErrorBody),
        (status = 404, description = "`unknown_agent`, `unknown_challenge`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn agent_status(
    State(ctx): State<SharedContext>,
    AppPath(challenge_id): AppPath<String>,
    signed: SignedRequest,
) -> ApiResult<Json<PolicyChallengeResponse>> {
    let challenge = approvals::status_for_agent(
        &ctx,
        &signed.agent,
        signed.nonce,
        &approvals::challenge_id(&challenge_id)?,
    )
    .await?;
    Ok(Json(PolicyChallengeResponse {
        ok: true,
        challenge,
    }))
}

/// Approves or denies a pending challenge: a person with the `approver`, `admin` or `owner`
/// role, or a member the deciding rules name as an approver (session, or a token unscoped or
/// with `approve`). Audited with the person as actor, with the `reason` if given.
#[utoipa::path(post, path = "/v1/policy-challenges/{challenge_id}/decide", tag = "approvals",
    params(("challenge_id" = String, Path)), request_body = ApprovalDecisionRequest,
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = PolicyChallengeResponse),
        (status = 400, description = "`missing_decision`, `invalid_decision`, `invalid_reason`", body = ErrorBody),
        (status = 401, description = "`unauthenticated`, `session_required`", body = ErrorBody),
        (status = 403, description = "`insufficient_role`, `insufficient_scope`, `not_a_member`", body = ErrorBody),
        (status = 404, description = "`unknown_challenge`", body = ErrorBody),
        (status = 409, description = "`challenge_already_decided`", body = ErrorBody),
        (status = 410, description = "`challenge_expired`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn decide(
    State(ctx): State<SharedContext>,
    op: Result<Authorized<needs::ChallengesDecide>, ApiError>,
    person: Result<Principal, ApiError>,
    AppPath(challenge_id): AppPath<String>,
    AppJson(req): AppJson<ApprovalDecisionRequest>,
) -> ApiResult<Json<PolicyChallengeResponse>> {
    // Approvers, admins and owners pass the role check; a member whom the deciding rules name
    // as an approver is refused by it but may decide that challenge (the use case applies the
    // one rule of who decides). Keys never decide.
    let person = match op {
        Ok(Authorized {
            who: Who::Person(person),
            ..
        }) => person,
        Ok(_) => return Err(crate::identity::accounts::unauthenticated().into()),
        Err(refused) if refused.code == "insufficient_role" => person?,
        Err(refused) => return Err(refused),
    };
    let challenge = approvals::decide_by_id(
        &ctx,
        &person,
        &challenge_id,
        &req.decision,
        req.reason.as_deref(),
    )
    .await?;
    Ok(Json(PolicyChallengeResponse {
        ok: true,
        challenge,
    }))
}
