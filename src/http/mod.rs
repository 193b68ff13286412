//! The HTTP interface: one module per resource, the extractors, and the router that ties them
//! together with the OpenAPI document generated from the same route list.

pub mod agents;
pub mod approvals;
pub mod audit;
pub mod credentials;
pub mod extract;
pub mod pages;
pub mod policies;
pub mod session;
pub mod site;
pub mod telemetry;

use std::time::Duration;

use axum::error_handling::HandleErrorLayer;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{HeaderName, StatusCode};
use axum::response::IntoResponse;
use axum::{Json, Router};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::{ErrorBody, HealthResponse};
use crate::context::SharedContext;
use crate::error::{ApiError, ApiResult};
use crate::store::Cursor;

#[derive(OpenApi)]
#[openapi(
    info(title = "acp: agent control plane", description = "Agent identity, signed requests, decisions and audit."),
    modifiers(&SecuritySchemes),
    tags(
        (name = "agents", description = "Agent registration, attestation and administration"),
        (name = "identity", description = "Verification of agent-signed requests"),
        (name = "telemetry", description = "Agent heartbeats"),
        (name = "inventory", description = "The workspace's agent inventory"),
        (name = "audit", description = "The audit trail"),
        (name = "auth", description = "Magic-link login, sessions and personal access tokens"),
        (name = "workspaces", description = "Workspaces, members and API keys, managed by their users"),
        (name = "dashboard", description = "Server-rendered pages"),
        (name = "status", description = "Status summary and contact"),
        (name = "decisions", description = "Decisions (`/v1/check`) and policy as code"),
        (name = "approvals", description = "Approval links and policy challenges"),
        (name = "credentials", description = "Short-lived credentials and the kill switch"),
        (name = "operations", description = "Health and discovery")
    )
)]
struct ApiDoc;

struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api_key",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "X-Service-Api-Key",
                "Workspace API key (`svc_live_...` / `svc_test_...`); `Authorization: Bearer` also works",
            ))),
        );
        components.add_security_scheme(
            "session",
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                "acp_session",
                "Dashboard session from magic-link login; state-changing requests also send `X-CSRF-Token`",
            ))),
        );
        components.add_security_scheme(
            "access_token",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "Personal access token `svc_pat_...`; pick the workspace with `X-Service-Workspace-Id`",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "agent_signature",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "Ed25519 request signature: headers X-Service-Agent-Id, X-Service-Timestamp (ms), \
                         X-Service-Nonce, X-Service-Signature over METHOD\\nPATH\\nTIMESTAMP\\nNONCE\\nSHA256(body)",
                    ))
                    .build(),
            ),
        );
    }
}

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", tag = "operations", responses((status = 200, body = HealthResponse)))]
async fn healthz() -> Json<HealthResponse> {
    Json(HealthResponse {
        ok: true,
        status: "alive".into(),
    })
}

/// Readiness: the database answers.
#[utoipa::path(get, path = "/readyz", tag = "operations",
    responses((status = 200, body = HealthResponse), (status = 503, body = ErrorBody)))]
async fn readyz(State(ctx): State<SharedContext>) -> ApiResult<Json<HealthResponse>> {
    ctx.store.ping().await.map_err(ApiError::unavailable)?;
    Ok(Json(HealthResponse {
        ok: true,
        status: "ready".into(),
    }))
}

/// This document.
#[utoipa::path(get, path = "/openapi.json", tag = "operations", responses((status = 200, description = "OpenAPI 3.1 document")))]
async fn openapi_json() -> impl IntoResponse {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        openapi_document(),
    )
}

fn routes() -> OpenApiRouter<SharedContext> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(openapi_json))
        .routes(routes!(agents::register))
        .routes(routes!(agents::attest))
        .routes(routes!(agents::claim_code))
        .routes(routes!(agents::list))
        .routes(routes!(agents::get))
        .routes(routes!(agents::suspend))
        .routes(routes!(agents::resume))
        .routes(routes!(agents::revoke))
        .routes(routes!(telemetry::verify))
        .routes(routes!(telemetry::heartbeat))
        .routes(routes!(telemetry::ingest))
        .routes(routes!(telemetry::recent))
        .routes(routes!(telemetry::upsert_inventory))
        .routes(routes!(telemetry::list_inventory))
        .routes(routes!(audit::events))
        .routes(routes!(audit::export))
        .routes(routes!(session::start_login))
        .routes(routes!(session::verify_login_link, session::verify_login))
        .routes(routes!(session::me))
        .routes(routes!(session::logout))
        .routes(routes!(session::list_workspaces, session::create_workspace))
        .routes(routes!(session::select_workspace))
        .routes(routes!(session::list_api_keys, session::create_api_key))
        .routes(routes!(session::revoke_api_key))
        .routes(routes!(session::list_members, session::add_member))
        .routes(routes!(session::remove_member))
        .routes(routes!(session::list_tokens, session::create_token))
        .routes(routes!(session::revoke_token))
        .routes(routes!(pages::login_page))
        .routes(routes!(pages::dashboard))
        .routes(routes!(site::summary))
        .routes(routes!(site::run_checks))
        .routes(routes!(site::contact))
        .routes(routes!(policies::check))
        .routes(routes!(policies::policies_sync))
        .routes(routes!(policies::sync_alias))
        .routes(routes!(policies::list))
        .routes(routes!(policies::get))
        .routes(routes!(policies::versions))
        .routes(routes!(policies::version))
        .routes(routes!(approvals::show, approvals::decide))
        .routes(routes!(approvals::status))
        .routes(routes!(approvals::show_claim, approvals::redeem_claim))
        .routes(routes!(agents::approve))
        .routes(routes!(approvals::get_settings, approvals::update_settings))
        .routes(routes!(credentials::mint))
        .routes(routes!(credentials::revoke))
        .routes(routes!(credentials::revoke_by_agent))
        .routes(routes!(credentials::introspect))
        .routes(routes!(credentials::minting))
        .routes(routes!(credentials::revoke_all))
        .routes(routes!(credentials::status))
        .routes(routes!(credentials::exchange))
        .routes(routes!(credentials::jwks))
        .routes(routes!(credentials::openid_configuration))
        .routes(routes!(credentials::send_email))
        .routes(routes!(telemetry::feedback))
}

/// The OpenAPI document of every route the server has, pretty-printed (the committed copy in
/// `schemas/openapi.json` must equal it).
pub fn openapi_document() -> String {
    let (_, doc) = routes().split_for_parts();
    let mut text = doc.to_pretty_json().unwrap_or_default();
    text.push('\n');
    text
}

async fn request_timed_out(err: tower::BoxError) -> ApiError {
    if err.is::<tower::timeout::error::Elapsed>() {
        ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            "the request took longer than 30 seconds",
        )
    } else {
        ApiError::internal(err)
    }
}

async fn not_found() -> ApiError {
    ApiError::not_found("not_found", "no such endpoint")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this endpoint does not take that method",
    )
}

/// The application: every route, its error fallbacks, body limit, request ids and tracing.
pub fn router(ctx: SharedContext) -> Router {
    let (api, _) = routes().split_for_parts();
    let request_id = HeaderName::from_static("x-request-id");
    // One `layer` call for the whole stack: each `Router::layer` call boxes every route's
    // service once more, and a request then pays one clone and one boxed future per call.
    // Outermost first: request id, its copy on the response, the request's span, the panic
    // guard, the 30 s timeout, the body limit.
    let layers = tower::ServiceBuilder::new()
        .layer(SetRequestIdLayer::new(request_id.clone(), MakeRequestUuid))
        .layer(PropagateRequestIdLayer::new(request_id))
        .layer(TraceLayer::new_for_http().make_span_with(|req: &Request| {
            let path = req
                .extensions()
                .get::<MatchedPath>()
                .map(MatchedPath::as_str)
                .unwrap_or("unmatched");
            let id = req
                .headers()
                .get("x-request-id")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            tracing::info_span!("request", method = %req.method(), path, request_id = id)
        }))
        .layer(CatchPanicLayer::custom(
            |_: Box<dyn std::any::Any + Send>| {
                ApiError::internal("a handler panicked").into_response()
            },
        ))
        .layer(HandleErrorLayer::new(request_timed_out))
        .timeout(Duration::from_secs(30))
        .layer(DefaultBodyLimit::max(extract::MAX_BODY_BYTES));
    let app = api
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(layers)
        .with_state(ctx.clone());
    match ctx.config.path_prefix.as_deref() {
        Some(prefix) => Router::new().nest(prefix, app).fallback(not_found),
        None => app,
    }
}

/// A page size: `default` when absent, else 1 to `max`.
pub fn page_limit(limit: Option<i64>, default: i64, max: i64) -> ApiResult<i64> {
    match limit {
        None => Ok(default),
        Some(n) if (1..=max).contains(&n) => Ok(n),
        Some(_) => Err(ApiError::invalid(
            "limit",
            format!("must be between 1 and {max}"),
        )),
    }
}

pub fn page_cursor(cursor: Option<&str>) -> ApiResult<Option<Cursor>> {
    match cursor.filter(|c| !c.is_empty()) {
        None => Ok(None),
        Some(c) => crate::audit::decode_cursor(c)
            .map(Some)
            .ok_or_else(|| ApiError::invalid("cursor", "is not a cursor this server issued")),
    }
}

/// Trims a page fetched with `limit + 1` rows to `limit` and answers the next cursor, if any.
pub fn next_cursor<T>(
    rows: &mut Vec<T>,
    limit: i64,
    key: impl Fn(&T) -> (i64, String),
) -> Option<String> {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    if rows.len() <= limit {
        return None;
    }
    rows.truncate(limit);
    rows.last().map(|row| {
        let (at, id) = key(row);
        crate::audit::encode_cursor(at, &id)
    })
}
