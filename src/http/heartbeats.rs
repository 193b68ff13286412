//! `/v1/telemetry/heartbeat*`: agents' heartbeats, signed or ingested, and the recent ones.

use axum::extract::State;
use axum::Json;

use crate::api::{
    ErrorBody, HeartbeatRequest, HeartbeatResponse, IngestRequest, IngestResponse,
    RecentHeartbeatsParams, RecentHeartbeatsResponse,
};
use crate::context::SharedContext;
use crate::domain::access::Need;
use crate::error::ApiResult;
use crate::telemetry::heartbeats;

use super::extract::{AppJson, AppQuery, Caller, SignedRequest};
use super::operator::{needs, Authorized};

/// A heartbeat signed by the agent.
#[utoipa::path(post, path = "/v1/telemetry/heartbeat", tag = "telemetry", request_body = HeartbeatRequest,
    security(("agent_signature" = [])),
    responses((status = 200, body = HeartbeatResponse), (status = 400, body = ErrorBody),
        (status = 401, description = "`missing_signature_headers`, `timestamp_out_of_range`, `invalid_nonce`, `bad_signature` (with `canonical_string`, the string the server checked the signature against, and a `hint` when the signature is not base64 or not 64 bytes), `replay_detected`, `agent_header_mismatch`", body = ErrorBody),
        (status = 403, description = "`agent_not_active`", body = ErrorBody),
        (status = 404, description = "`unknown_agent`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn heartbeat(
    State(ctx): State<SharedContext>,
    signed: SignedRequest,
) -> ApiResult<Json<HeartbeatResponse>> {
    let req: HeartbeatRequest = signed.json(|r: &HeartbeatRequest| &r.agent_id)?;
    Ok(Json(
        heartbeats::record_signed(&ctx, &signed.agent, signed.nonce, req).await?,
    ))
}

/// Heartbeats from an ingestion pipeline: up to 1,000 items, each accepted or rejected alone.
#[utoipa::path(post, path = "/v1/telemetry/heartbeat/ingest", tag = "telemetry", request_body = IngestRequest,
    security(("api_key" = [])),
    responses((status = 200, body = IngestResponse), (status = 400, description = "`too_many_items`, `invalid_items`", body = ErrorBody),
        (status = 401, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn ingest(
    State(ctx): State<SharedContext>,
    caller: Caller,
    AppJson(req): AppJson<IngestRequest>,
) -> ApiResult<Json<IngestResponse>> {
    caller.require(Need::Telemetry)?;
    Ok(Json(
        heartbeats::ingest(&ctx, &caller.workspace_id, req).await?,
    ))
}

/// The workspace's most recent heartbeats, newest first.
#[utoipa::path(get, path = "/v1/telemetry/heartbeat/recent", tag = "telemetry", params(RecentHeartbeatsParams),
    security(("api_key" = []), ("session" = []), ("access_token" = [])),
    responses((status = 200, body = RecentHeartbeatsResponse), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn recent(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::AgentsRead>,
    AppQuery(params): AppQuery<RecentHeartbeatsParams>,
) -> ApiResult<Json<RecentHeartbeatsResponse>> {
    let limit = super::page_limit(params.limit, 20, 200)?;
    Ok(Json(
        heartbeats::recent(&ctx, &op.workspace_id, params.agent_id.as_deref(), limit).await?,
    ))
}
