//! `/v1/check`: the decision for one action of one agent (the path is in `policy/check.rs`).

use axum::extract::State;
use axum::Json;

use crate::api::{CheckRequest, DecisionResponse, ErrorBody};
use crate::context::SharedContext;
use crate::domain::access::Need;
use crate::error::ApiResult;
use crate::policy::check;

use super::extract::{AppJson, Deciding};

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
