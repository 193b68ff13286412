//! `/v1/workspace/audit/sinks`: the workspace's outbound audit sinks (HTTPS webhooks that
//! receive the trail as signed NDJSON batches), configured by owners and admins.

use axum::extract::{Path, State};
use axum::Json;

use crate::api::{
    AuditSinkListResponse, AuditSinkResponse, AuditSinkSecretResponse, CreateAuditSinkRequest,
    ErrorBody, OkResponse, UpdateAuditSinkRequest,
};
use crate::audit::sinks;
use crate::context::SharedContext;
use crate::domain::access::Need;
use crate::error::ApiResult;
use crate::identity::accounts::Principal;

use super::extract::AppJson;
use super::operator::person_requires;

/// The workspace's audit sinks, with their delivery state and lag.
#[utoipa::path(get, path = "/v1/workspace/audit/sinks", tag = "audit", security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = AuditSinkListResponse), (status = 401, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn list(
    State(ctx): State<SharedContext>,
    principal: Principal,
) -> ApiResult<Json<AuditSinkListResponse>> {
    person_requires(&principal, Need::WorkspaceRead)?;
    Ok(Json(sinks::list(&ctx, &principal).await?))
}

/// Creates an audit sink (owners and admins). It receives the events committed from now on;
/// the signing secret is answered this once.
#[utoipa::path(post, path = "/v1/workspace/audit/sinks", tag = "audit", request_body = CreateAuditSinkRequest,
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = AuditSinkSecretResponse),
        (status = 400, description = "`invalid_sink_url`, `destination_not_allowed` (the host is, or resolves to, a loopback, private, link-local or metadata address the operator's allow-list does not open), `invalid_name`, `missing_name`", body = ErrorBody),
        (status = 403, description = "`insufficient_role`", body = ErrorBody),
        (status = 409, description = "`too_many_sinks`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn create(
    State(ctx): State<SharedContext>,
    principal: Principal,
    AppJson(req): AppJson<CreateAuditSinkRequest>,
) -> ApiResult<Json<AuditSinkSecretResponse>> {
    person_requires(&principal, Need::WorkspaceChange)?;
    Ok(Json(sinks::create(&ctx, &principal, req).await?))
}

/// One audit sink, with its delivery state and lag.
#[utoipa::path(get, path = "/v1/workspace/audit/sinks/{sink_id}", tag = "audit", params(("sink_id" = String, Path)),
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = AuditSinkResponse), (status = 404, description = "`unknown_sink`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn get(
    State(ctx): State<SharedContext>,
    principal: Principal,
    Path(sink_id): Path<String>,
) -> ApiResult<Json<AuditSinkResponse>> {
    person_requires(&principal, Need::WorkspaceRead)?;
    Ok(Json(sinks::get(&ctx, &principal, &sink_id).await?))
}

/// Renames, moves, pauses (`enabled: false`) or resumes an audit sink (owners and admins).
#[utoipa::path(post, path = "/v1/workspace/audit/sinks/{sink_id}", tag = "audit", params(("sink_id" = String, Path)),
    request_body = UpdateAuditSinkRequest, security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = AuditSinkResponse), (status = 400, description = "`invalid_sink_url`, `destination_not_allowed` (as at creation), `invalid_name`", body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, description = "`unknown_sink`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn update(
    State(ctx): State<SharedContext>,
    principal: Principal,
    Path(sink_id): Path<String>,
    AppJson(req): AppJson<UpdateAuditSinkRequest>,
) -> ApiResult<Json<AuditSinkResponse>> {
    person_requires(&principal, Need::WorkspaceChange)?;
    Ok(Json(sinks::update(&ctx, &principal, &sink_id, req).await?))
}

/// A new signing secret for an audit sink (owners and admins), answered this once; the old
/// one stops signing at once.
#[utoipa::path(post, path = "/v1/workspace/audit/sinks/{sink_id}/rotate-secret", tag = "audit", params(("sink_id" = String, Path)),
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = AuditSinkSecretResponse), (status = 403, body = ErrorBody), (status = 404, description = "`unknown_sink`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn rotate_secret(
    State(ctx): State<SharedContext>,
    principal: Principal,
    Path(sink_id): Path<String>,
) -> ApiResult<Json<AuditSinkSecretResponse>> {
    person_requires(&principal, Need::WorkspaceChange)?;
    Ok(Json(
        sinks::rotate_secret(&ctx, &principal, &sink_id).await?,
    ))
}

/// Deletes an audit sink (owners and admins).
#[utoipa::path(post, path = "/v1/workspace/audit/sinks/{sink_id}/delete", tag = "audit", params(("sink_id" = String, Path)),
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = OkResponse), (status = 403, body = ErrorBody), (status = 404, description = "`unknown_sink`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn delete(
    State(ctx): State<SharedContext>,
    principal: Principal,
    Path(sink_id): Path<String>,
) -> ApiResult<Json<OkResponse>> {
    person_requires(&principal, Need::WorkspaceChange)?;
    Ok(Json(sinks::delete(&ctx, &principal, &sink_id).await?))
}
