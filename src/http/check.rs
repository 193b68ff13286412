//! `/v1/check`: the decision for one action of one agent, and `/v1/check/batch` for up to 100
//! (the path is in `policy/check.rs`).

use axum::extract::State;
use axum::Json;

use crate::api::{
    CheckBatchError, CheckBatchRequest, CheckBatchResponse, CheckBatchResult, CheckRequest,
    DecisionResponse, ErrorBody,
};
use crate::context::SharedContext;
use crate::domain::access::Need;
use crate::error::{ApiError, ApiResult};
use crate::policy::check;

use super::extract::{AppJson, Deciding, DecidingBatch};

/// Decides `allow`, `challenge` or `deny` for an action of an agent under a policy. All three
/// are 200; the audit event is durable before the answer.
#[utoipa::path(post, path = "/v1/check", tag = "decisions", request_body = CheckRequest, security(("api_key" = [])),
    responses((status = 200, body = DecisionResponse), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, description = "`unknown_agent`, `unknown_policy`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn check(
    State(ctx): State<SharedContext>,
    Deciding(caller): Deciding,
    AppJson(req): AppJson<CheckRequest>,
) -> ApiResult<Json<DecisionResponse>> {
    caller.require(Need::Check)?;
    let decision = check::check(&ctx, &caller.access, &caller.actor(), req).await?;
    super::observe::note_decision(&decision.trace_id);
    Ok(Json(decision))
}

/// Decides up to 100 checks at once: each answered exactly as `POST /v1/check` would answer it
/// (its own trace id, audit event and challenge; an error as that request's error, with its
/// status), in order, all recorded in one commit.
#[utoipa::path(post, path = "/v1/check/batch", tag = "decisions", request_body = CheckBatchRequest, security(("api_key" = [])),
    responses((status = 200, body = CheckBatchResponse), (status = 400, description = "`missing_field` (no checks), `invalid_field` (more than 100)", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 429, description = "`rate_limited`: the key's rate cannot take this many decisions now (each check counts); `retry_after` and `Retry-After`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn check_batch(
    State(ctx): State<SharedContext>,
    DecidingBatch(caller): DecidingBatch,
    AppJson(req): AppJson<CheckBatchRequest>,
) -> ApiResult<Json<CheckBatchResponse>> {
    // One token of the key's rate per check (a refused batch spends one).
    let checks = req.checks.len();
    caller.spend(if checks > check::MAX_BATCH_CHECKS {
        1
    } else {
        checks
    })?;
    caller.require(Need::Check)?;
    let answers = check::check_batch(
        &ctx,
        &caller.access,
        &caller.actor(),
        req.checks,
        None,
        check::StopAt::Never,
    )
    .await?;
    let results = answers
        .into_iter()
        .map(|answer| match answer {
            Ok(decision) => CheckBatchResult::Decision(Box::new(decision)),
            Err(err) => {
                let err = ApiError::from(err);
                err.log_cause();
                CheckBatchResult::Error(CheckBatchError {
                    ok: false,
                    status: err.status.as_u16(),
                    error: err.code.into_owned(),
                    message: err.message,
                })
            }
        })
        .collect();
    Ok(Json(CheckBatchResponse { ok: true, results }))
}
