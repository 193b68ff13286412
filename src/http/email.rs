//! `/v1/email/send`: an agent's email, sent only if the policy allows it.

use axum::extract::State;
use axum::Json;

use crate::api::{EmailSendRequest, EmailSendResponse, ErrorBody};
use crate::context::SharedContext;
use crate::domain::access::Need;
use crate::enforce::email;
use crate::error::ApiResult;

use super::extract::{AppJson, Caller};

/// Sends an agent's email through the configured provider, only if the policy allows
/// `send_email`.
#[utoipa::path(post, path = "/v1/email/send", tag = "email", request_body = EmailSendRequest,
    security(("api_key" = [])),
    responses((status = 200, body = EmailSendResponse),
        (status = 400, description = "`missing_agent_id`, `missing_email.to`, `invalid_email.subject`, `invalid_attachments`, `attachments_too_large`, ...", body = ErrorBody),
        (status = 403, description = "`policy_blocked` with `decision`, `reasons`, `challenge`", body = ErrorBody),
        (status = 404, description = "`unknown_agent`, `unknown_policy`", body = ErrorBody),
        (status = 502, description = "`provider_unavailable`: not sent, not counted", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn send_email(
    State(ctx): State<SharedContext>,
    caller: Caller,
    AppJson(req): AppJson<EmailSendRequest>,
) -> ApiResult<Json<EmailSendResponse>> {
    caller.require(Need::Email)?;
    Ok(Json(
        email::send(&ctx, &caller.access, &caller.actor(), req).await?,
    ))
}
