//! `/v1/verify`, `/v1/telemetry/*` and `/v1/workspace/agents`.

use axum::extract::State;
use axum::Json;

use crate::api::{
    ErrorBody, HeartbeatRequest, HeartbeatResponse, IngestRequest, IngestResponse,
    InventoryListParams, InventoryListResponse, InventoryUpsertRequest, InventoryUpsertResponse,
    RecentHeartbeatsParams, RecentHeartbeatsResponse, VerifyRequest, VerifyResponse,
};
use crate::context::SharedContext;
use crate::error::ApiResult;
use crate::identity::verify;
use crate::telemetry::{heartbeats, inventory};

use super::extract::{AppJson, AppQuery, Caller, Deciding, SignedRequest};

/// Verifies a request an agent signed. Signature, skew, replay, unknown and inactive-agent
/// failures answer 200 with `valid: false` and a `reason`; a valid request consumes its nonce.
#[utoipa::path(post, path = "/v1/verify", tag = "identity", request_body = VerifyRequest, security(("api_key" = [])),
    responses((status = 200, body = VerifyResponse), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
pub async fn verify(
    State(ctx): State<SharedContext>,
    Deciding(caller): Deciding,
    AppJson(req): AppJson<VerifyRequest>,
) -> ApiResult<Json<VerifyResponse>> {
    Ok(Json(verify::verify(&ctx, &caller.access, req).await?))
}

/// A heartbeat signed by the agent.
#[utoipa::path(post, path = "/v1/telemetry/heartbeat", tag = "telemetry", request_body = HeartbeatRequest,
    security(("agent_signature" = [])),
    responses((status = 200, body = HeartbeatResponse), (status = 400, body = ErrorBody),
        (status = 401, description = "`missing_signature_headers`, `timestamp_out_of_range`, `invalid_nonce`, `bad_signature`, `replay_detected`, `agent_header_mismatch`", body = ErrorBody),
        (status = 403, description = "`agent_not_active`", body = ErrorBody),
        (status = 404, description = "`unknown_agent`", body = ErrorBody)))]
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
pub async fn ingest(
    State(ctx): State<SharedContext>,
    caller: Caller,
    AppJson(req): AppJson<IngestRequest>,
) -> ApiResult<Json<IngestResponse>> {
    Ok(Json(
        heartbeats::ingest(&ctx, &caller.workspace_id, req).await?,
    ))
}

/// The workspace's most recent heartbeats, newest first.
#[utoipa::path(get, path = "/v1/telemetry/heartbeat/recent", tag = "telemetry", params(RecentHeartbeatsParams),
    security(("api_key" = [])),
    responses((status = 200, body = RecentHeartbeatsResponse), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn recent(
    State(ctx): State<SharedContext>,
    caller: Caller,
    AppQuery(params): AppQuery<RecentHeartbeatsParams>,
) -> ApiResult<Json<RecentHeartbeatsResponse>> {
    Ok(Json(
        heartbeats::recent(&ctx, &caller.workspace_id, params).await?,
    ))
}

/// Maps an external system's key for an agent to the agent, idempotently.
#[utoipa::path(post, path = "/v1/workspace/agents/upsert", tag = "inventory", request_body = InventoryUpsertRequest,
    security(("api_key" = [])),
    responses((status = 200, body = InventoryUpsertResponse), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "`conflict`: the key maps to another agent", body = ErrorBody)))]
pub async fn upsert_inventory(
    State(ctx): State<SharedContext>,
    caller: Caller,
    AppJson(req): AppJson<InventoryUpsertRequest>,
) -> ApiResult<Json<InventoryUpsertResponse>> {
    Ok(Json(
        inventory::upsert(&ctx, &caller.workspace_id, &caller.actor(), req).await?,
    ))
}

/// The workspace's agent inventory.
#[utoipa::path(get, path = "/v1/workspace/agents", tag = "inventory", params(InventoryListParams),
    security(("api_key" = [])),
    responses((status = 200, body = InventoryListResponse), (status = 401, body = ErrorBody)))]
pub async fn list_inventory(
    State(ctx): State<SharedContext>,
    caller: Caller,
    AppQuery(params): AppQuery<InventoryListParams>,
) -> ApiResult<Json<InventoryListResponse>> {
    Ok(Json(
        inventory::list(&ctx, &caller.workspace_id, params).await?,
    ))
}

/// Signed provider feedback about an agent (`good` or `bad`); moves its reputation.
#[utoipa::path(post, path = "/v1/reputation/feedback", tag = "telemetry", request_body = crate::api::FeedbackRequest,
    params(("X-Service-Feedback-Timestamp" = String, Header, description = "Unix epoch milliseconds"),
        ("X-Service-Feedback-Nonce" = String, Header, description = "single use per API key"),
        ("X-Service-Feedback-Signature" = String, Header,
         description = "base64 HMAC-SHA256, key = raw SHA-256 of the API key, over `{timestamp}\\n{nonce}\\n{hex_sha256(body)}`")),
    security(("api_key" = [])),
    responses((status = 200, body = crate::api::FeedbackResponse),
        (status = 400, description = "`missing_agent_id`, `invalid_verdict`", body = ErrorBody),
        (status = 401, description = "`missing_signature_headers`, `timestamp_out_of_range`, `bad_signature`, `replay_detected`", body = ErrorBody),
        (status = 404, description = "`unknown_agent`", body = ErrorBody),
        (status = 429, description = "`rate_limited`", body = ErrorBody)))]
pub async fn feedback(
    State(ctx): State<SharedContext>,
    headers: axum::http::HeaderMap,
    caller: Caller,
    super::extract::RawBody(body): super::extract::RawBody,
) -> ApiResult<Json<crate::api::FeedbackResponse>> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
    };
    let sig = match (
        header("x-service-feedback-timestamp"),
        header("x-service-feedback-nonce"),
        header("x-service-feedback-signature"),
    ) {
        (Some(timestamp), Some(nonce), Some(signature)) => {
            Some(crate::telemetry::reputation::FeedbackSignature {
                timestamp,
                nonce,
                signature,
            })
        }
        _ => None,
    };
    let api_key = super::extract::presented_api_key(&headers).unwrap_or("");
    Ok(Json(
        crate::telemetry::reputation::feedback(
            &ctx,
            &caller.workspace_id,
            &caller.key_id,
            api_key,
            sig,
            &body,
        )
        .await?,
    ))
}
