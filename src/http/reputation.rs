//! `/v1/reputation/feedback`: signed provider feedback that moves an agent's reputation.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;

use crate::api::{ErrorBody, FeedbackRequest, FeedbackResponse};
use crate::context::SharedContext;
use crate::domain::access::Need;
use crate::error::{ApiError, ApiResult};
use crate::identity::signing::{check_nonce, check_timestamp, feedback_signature_matches};
use crate::telemetry::feedback;
use crate::time::now_ms;

use super::extract::{parse_json, presented_api_key, Caller, RawBody};

/// Signed provider feedback about an agent (`good` or `bad`); moves its reputation.
#[utoipa::path(post, path = "/v1/reputation/feedback", tag = "telemetry", request_body = FeedbackRequest,
    params(("X-Service-Feedback-Timestamp" = String, Header, description = "Unix epoch milliseconds"),
        ("X-Service-Feedback-Nonce" = String, Header, description = "single use per API key"),
        ("X-Service-Feedback-Signature" = String, Header,
         description = "base64 HMAC-SHA256, key = raw SHA-256 of the API key, over `{timestamp}\\n{nonce}\\n{hex_sha256(body)}`")),
    security(("api_key" = [])),
    responses((status = 200, body = FeedbackResponse),
        (status = 400, description = "`missing_agent_id`, `invalid_verdict`", body = ErrorBody),
        (status = 401, description = "`missing_signature_headers`, `timestamp_out_of_range`, `bad_signature`, `replay_detected`", body = ErrorBody),
        (status = 404, description = "`unknown_agent`", body = ErrorBody),
        (status = 429, description = "`rate_limited`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn feedback(
    State(ctx): State<SharedContext>,
    headers: HeaderMap,
    caller: Caller,
    RawBody(body): RawBody,
) -> ApiResult<Json<FeedbackResponse>> {
    caller.require(Need::Telemetry)?;
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
    };
    let (Some(timestamp), Some(nonce), Some(signature)) = (
        header("x-service-feedback-timestamp"),
        header("x-service-feedback-nonce"),
        header("x-service-feedback-signature"),
    ) else {
        return Err(ApiError::unauthorized(
            "missing_signature_headers",
            "feedback needs X-Service-Feedback-Timestamp, X-Service-Feedback-Nonce and X-Service-Feedback-Signature",
        ));
    };
    check_timestamp(timestamp, now_ms(), ctx.config.signature_window_ms).map_err(|_| {
        ApiError::unauthorized(
            "timestamp_out_of_range",
            "the timestamp must be Unix epoch milliseconds within the accepted window",
        )
    })?;
    check_nonce(nonce).map_err(|_| {
        ApiError::unauthorized(
            "invalid_nonce",
            "the nonce must be 1 to 128 printable ASCII characters",
        )
    })?;
    let api_key = presented_api_key(&headers).unwrap_or("");
    if !feedback_signature_matches(api_key, timestamp, nonce, &body, signature) {
        return Err(ApiError::unauthorized(
            "bad_signature",
            "the feedback signature does not verify",
        ));
    }
    let req: FeedbackRequest = parse_json(&body)?;
    Ok(Json(
        feedback::record(&ctx, &caller.workspace_id, &caller.key_id, nonce, req).await?,
    ))
}
