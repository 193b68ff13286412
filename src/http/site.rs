//! `GET /`, `/v1/status/*` and `/v1/contact/submit`.

use crate::http::wire::Peer;
use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::api::{ContactRequest, ContactResponse, ErrorBody, StatusSummary};
use crate::context::SharedContext;
use crate::error::ApiResult;
use crate::site;

use super::extract::{authenticate, presented_api_key, AppJson};

/// The home page leads to the dashboard (which sends a visitor who is not logged in on to the
/// login page).
#[utoipa::path(get, path = "/", tag = "dashboard", responses((status = 303, description = "to /dashboard")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn home(State(ctx): State<SharedContext>) -> Response {
    let to = format!(
        "{}/dashboard",
        ctx.config.path_prefix.as_deref().unwrap_or("")
    );
    (StatusCode::SEE_OTHER, [(header::LOCATION, to)]).into_response()
}

/// Public status: each component's latest check.
#[utoipa::path(get, path = "/v1/status/summary", tag = "status", responses((status = 200, body = StatusSummary)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn summary(State(ctx): State<SharedContext>) -> ApiResult<Json<StatusSummary>> {
    Ok(Json(site::status_summary(&ctx).await?))
}

/// Runs the component checks now and stores them. A workspace API key, or a session of a
/// workspace owner or admin.
#[utoipa::path(post, path = "/v1/status/checks/run", tag = "status",
    security(("api_key" = []), ("session" = []), ("access_token" = [])),
    responses((status = 200, body = StatusSummary), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn run_checks(
    State(ctx): State<SharedContext>,
    method: axum::http::Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> ApiResult<Json<StatusSummary>> {
    // An `X-Service-Api-Key` header, even a malformed one, asks for the key's authentication
    // (so a bad key is refused rather than ignored); so does a well-formed key as bearer token.
    let uses_api_key = headers.contains_key("x-service-api-key")
        || presented_api_key(&headers).is_some_and(crate::identity::api_keys::is_well_formed);
    let (actor, workspace) = if uses_api_key {
        let caller = authenticate(&ctx, &headers).await?;
        (caller.actor(), caller.workspace_id)
    } else {
        let principal = super::session::authenticate_user(&ctx, &method, &headers, &uri).await?;
        let (workspace, _) = principal.admin_of()?;
        (principal.actor(), workspace)
    };
    Ok(Json(
        site::run_checks(&ctx, &actor, Some(&workspace)).await?,
    ))
}

/// The contact form: stored, and mailed to `ACP_CONTACT_EMAIL` when set. Rate-limited per
/// client IP.
#[utoipa::path(post, path = "/v1/contact/submit", tag = "status", request_body = ContactRequest,
    responses((status = 200, body = ContactResponse), (status = 400, body = ErrorBody),
        (status = 429, description = "`rate_limited`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn contact(
    State(ctx): State<SharedContext>,
    ConnectInfo(Peer(peer)): ConnectInfo<Peer>,
    AppJson(req): AppJson<ContactRequest>,
) -> ApiResult<Json<ContactResponse>> {
    Ok(Json(
        site::contact(&ctx, req, &peer.ip().to_string()).await?,
    ))
}
