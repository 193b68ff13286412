//! The HTTP interface: one module per resource, the extractors, and the router that ties them
//! together with the OpenAPI document generated from the same route list.

pub mod agents;
pub mod approvals;
pub mod audit;
pub mod credentials;
pub mod extract;
pub mod openapi;
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
                "Dashboard session from magic-link login; state-changing requests send JSON from no or the own `Origin`, or carry `X-CSRF-Token`",
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
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "X-Service-Signature",
                "Ed25519 request signature (standard base64) over METHOD\\nPATH\\nTIMESTAMP\\nNONCE\\nSHA256(body), \
                 sent with the headers X-Service-Agent-Id, X-Service-Timestamp (ms) and X-Service-Nonce",
            ))),
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
        .routes(routes!(site::home))
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
    static DOCUMENT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DOCUMENT
        .get_or_init(|| {
            let (_, doc) = routes().split_for_parts();
            let mut value = serde_json::to_value(&doc).unwrap_or_default();
            openapi::finish(&mut value);
            let mut text = serde_json::to_string_pretty(&value).unwrap_or_default();
            text.push('\n');
            text
        })
        .clone()
}

async fn request_timed_out(err: tower::BoxError) -> ApiError {
    if err.is::<tower::timeout::error::Elapsed>() {
        ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            format!(
                "the request took longer than {} seconds",
                REQUEST_TIMEOUT.as_secs()
            ),
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

/// Longest accepted path and query, in bytes; longer ones are answered 414 `uri_too_long`.
pub const MAX_URI_BYTES: usize = 8 * 1024;

/// The request headers the server reads: a value that is not visible ASCII is answered 400
/// `invalid_header` rather than read as absent.
const READ_HEADERS: &[&str] = &[
    "authorization",
    "content-type",
    "idempotency-key",
    "x-csrf-token",
    "x-service-api-key",
    "x-service-workspace-id",
    "x-service-agent-id",
    "x-service-timestamp",
    "x-service-nonce",
    "x-service-signature",
    "x-service-feedback-timestamp",
    "x-service-feedback-nonce",
    "x-service-feedback-signature",
];

/// Answers, in the error envelope, what is wrong with a request's head before any handler
/// runs: an over-long URI (414) or a header the server reads that it cannot read as text (400).
async fn check_request_head(
    req: Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let uri_len = req.uri().path_and_query().map_or(0, |pq| pq.as_str().len());
    if uri_len > MAX_URI_BYTES {
        return ApiError::new(
            StatusCode::URI_TOO_LONG,
            "uri_too_long",
            format!("the path and query are limited to {MAX_URI_BYTES} bytes"),
        )
        .into_response();
    }
    let headers = req.headers();
    for name in READ_HEADERS {
        if headers.get_all(*name).iter().any(|v| v.to_str().is_err()) {
            return ApiError::bad_request(
                "invalid_header",
                format!("the `{name}` header must be visible ASCII text"),
            )
            .into_response();
        }
    }
    next.run(req).await
}

/// How long a request may take before it is answered 408 `request_timeout`.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Wraps every route of `router` in the server's middleware, in one `layer` call for the whole
/// stack: each `Router::layer` call boxes every route's service once more, and a request then
/// pays one clone and one boxed future per call. Outermost first: a request id (kept when the
/// client sent one) and its copy on the response, the request's span, the panic guard (500
/// `internal_error`), the request head check (414 `uri_too_long`, 400 `invalid_header`), the
/// timeout (408 `request_timeout`), the body limit.
fn with_middleware<S: Clone + Send + Sync + 'static>(
    router: Router<S>,
    timeout: Duration,
) -> Router<S> {
    let request_id = HeaderName::from_static("x-request-id");
    router.layer(
        tower::ServiceBuilder::new()
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
            .layer(axum::middleware::from_fn(check_request_head))
            .layer(HandleErrorLayer::new(request_timed_out))
            .timeout(timeout)
            .layer(DefaultBodyLimit::max(extract::MAX_BODY_BYTES)),
    )
}

/// The application: every route, its error fallbacks, body limit, request ids and tracing.
pub fn router(ctx: SharedContext) -> Router {
    let (api, _) = routes().split_for_parts();
    let app = with_middleware(
        api.fallback(not_found)
            .method_not_allowed_fallback(method_not_allowed),
        REQUEST_TIMEOUT,
    )
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

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::routing::{get, post};
    use tower::ServiceExt;

    async fn panics() -> &'static str {
        panic!("a test handler panics")
    }

    fn app() -> Router {
        with_middleware(
            Router::new()
                .route("/ok", get(|| async { "ok" }))
                .route("/panic", get(panics))
                .route(
                    "/slow",
                    get(|| async {
                        tokio::time::sleep(Duration::from_secs(5)).await;
                        "late"
                    }),
                )
                .route(
                    "/body",
                    post(|body: axum::body::Bytes| async move { body.len().to_string() }),
                ),
            Duration::from_millis(50),
        )
    }

    async fn send(
        req: axum::http::Request<Body>,
    ) -> (StatusCode, axum::http::HeaderMap, serde_json::Value) {
        let res = app().oneshot(req).await.unwrap();
        let (parts, body) = res.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        let json = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
        (parts.status, parts.headers, json)
    }

    fn get_req(path: &str) -> axum::http::Request<Body> {
        axum::http::Request::get(path).body(Body::empty()).unwrap()
    }

    #[tokio::test]
    async fn every_answer_has_a_request_id_and_a_sent_one_is_kept() {
        let (status, headers, _) = send(get_req("/ok")).await;
        assert_eq!(status, StatusCode::OK);
        let id = headers["x-request-id"].to_str().unwrap();
        assert!(uuid::Uuid::parse_str(id).is_ok(), "{id}");

        let req = axum::http::Request::get("/ok")
            .header("x-request-id", "from-the-client-1")
            .body(Body::empty())
            .unwrap();
        let (_, headers, _) = send(req).await;
        assert_eq!(headers["x-request-id"], "from-the-client-1");
    }

    /// `path` answers `status` with the error envelope's `code` and a request id.
    async fn assert_error_answer(path: &str, status: StatusCode, code: &str) {
        let (got, headers, body) = send(get_req(path)).await;
        assert_eq!(got, status);
        assert_eq!(body["error"], code, "{body}");
        assert!(headers.contains_key("x-request-id"));
    }

    #[tokio::test]
    async fn a_panicking_handler_answers_500_with_the_error_envelope() {
        assert_error_answer(
            "/panic",
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
        )
        .await;
    }

    #[tokio::test]
    async fn a_request_past_the_timeout_answers_408() {
        assert_error_answer("/slow", StatusCode::REQUEST_TIMEOUT, "request_timeout").await;
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_refused() {
        let req = axum::http::Request::post("/body")
            .body(Body::from(vec![b'x'; extract::MAX_BODY_BYTES + 1]))
            .unwrap();
        let (status, _, _) = send(req).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        let req = axum::http::Request::post("/body")
            .body(Body::from(vec![b'x'; 10]))
            .unwrap();
        let (status, _, _) = send(req).await;
        assert_eq!(status, StatusCode::OK);
    }
}
