//! The HTTP interface: one module per resource of the URL (`/v1/workspace/members` is
//! `members.rs`), the extractors (`extract.rs`), how people are authenticated (`session.rs`),
//! and the router below that lists every path beside its handler, with the OpenAPI document
//! generated from the same route list.

pub mod access;
pub mod agent_approval;
pub mod agents;
pub mod api_keys;
pub mod approval_links;
pub mod audit;
pub mod audit_sinks;
pub mod auth;
pub mod authzen;
pub mod check;
pub mod console;
pub mod credentials;
pub mod email;
pub mod extract;
pub mod headers;
pub mod heartbeats;
pub mod inventory;
pub mod kill_switch;
pub mod mcp;
pub mod mcp_gateway;
pub mod members;
pub mod observe;
pub mod openapi;
pub mod operator;
pub mod page_headers;
pub mod pages;
pub mod policies;
pub mod policy_challenges;
pub mod reputation;
pub mod session;
pub mod settings;
pub mod shape;
pub mod site;
pub mod token_exchange;
pub mod tokens;
pub mod vault;
pub mod vault_agent;
pub mod verify;
pub mod well_known;
pub mod wire;
pub mod workspaces;

use std::time::Duration;

use axum::error_handling::HandleErrorLayer;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderName, StatusCode};
use axum::response::IntoResponse;
use axum::{Json, Router};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
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
        (name = "vault", description = "Secret sets, grants, leases and the injecting proxy"),
        (name = "mcp", description = "The MCP gateway: its registered servers and its agent side"),
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
                        "Personal access token `svc_pat_...`; pick the workspace with `X-Service-Workspace` (or `?workspace_id=`)",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "metrics_token",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "The metrics token (`ACP_METRICS_TOKEN`), when one is configured",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "agent_credential",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A credential minted for the agent (opaque or JWT) whose scopes include `mcp` or `mcp:<server>`",
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
#[tracing::instrument(level = "debug", skip_all)]
async fn healthz() -> Json<HealthResponse> {
    Json(HealthResponse {
        ok: true,
        status: "alive".into(),
    })
}

/// Readiness: the database answers.
#[utoipa::path(get, path = "/readyz", tag = "operations",
    responses((status = 200, body = HealthResponse), (status = 503, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
async fn readyz(State(ctx): State<SharedContext>) -> ApiResult<Json<HealthResponse>> {
    ctx.store.ping().await.map_err(ApiError::unavailable)?;
    Ok(Json(HealthResponse {
        ok: true,
        status: "ready".into(),
    }))
}

/// This document.
#[utoipa::path(get, path = "/openapi.json", tag = "operations", responses((status = 200, description = "OpenAPI 3.1 document")))]
#[tracing::instrument(level = "debug", skip_all)]
async fn openapi_json() -> impl IntoResponse {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        openapi_document(),
    )
}

/// Every route; with the server's context, the console's wrapped in the layer that shows its
/// errors as pages (see `console::router`).
fn routes(ctx: Option<&SharedContext>) -> OpenApiRouter<SharedContext> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        // Each line: the paths and methods (in the handlers' order) of one `routes!`; the test
        // `router_lines_name_their_paths` holds them to the OpenAPI document.
        .routes(routes!(healthz)) // GET /healthz
        .routes(routes!(readyz)) // GET /readyz
        .routes(routes!(openapi_json)) // GET /openapi.json
        .routes(routes!(observe::metrics)) // GET /metrics
        // Agents
        .routes(routes!(agents::register)) // POST /v1/agents/register
        .routes(routes!(agents::attest)) // POST /v1/agents/attest
        .routes(routes!(agents::list)) // GET /v1/agents
        .routes(routes!(agents::get)) // GET /v1/agents/{agent_id}
        .routes(routes!(agents::suspend)) // POST /v1/agents/{agent_id}/suspend
        .routes(routes!(agents::resume)) // POST /v1/agents/{agent_id}/resume
        .routes(routes!(agents::revoke)) // POST /v1/agents/{agent_id}/revoke
        .routes(routes!(agents::approve)) // POST /v1/agents/{agent_id}/approve
        .routes(routes!(agents::claim_code)) // POST /v1/agents/{agent_id}/claim-code
        .routes(routes!(
            agent_approval::show_claim,
            agent_approval::redeem_claim
        )) // GET, POST /v1/agent-approval/{code}
        .routes(routes!(verify::verify)) // POST /v1/verify
        // Decisions and policy as code
        .routes(routes!(check::check)) // POST /v1/check
        .routes(routes!(check::check_batch)) // POST /v1/check/batch
        .routes(routes!(authzen::evaluation)) // POST /access/v1/evaluation
        .routes(routes!(authzen::evaluations)) // POST /access/v1/evaluations
        .routes(routes!(authzen::configuration)) // GET /.well-known/authzen-configuration
        .routes(routes!(access::search_subject)) // POST /access/v1/search/subject
        .routes(routes!(access::search_action)) // POST /access/v1/search/action
        .routes(routes!(access::search_resource)) // POST /access/v1/search/resource
        .routes(routes!(access::agent)) // GET /v1/access/agents/{agent_id}
        .routes(routes!(access::action)) // GET /v1/access/actions/{action}
        .routes(routes!(policies::policies_sync)) // POST /v1/policies/sync
        .routes(routes!(policies::sync_alias)) // POST /v1/sync
        .routes(routes!(policies::list)) // GET /v1/policies
        .routes(routes!(policies::get)) // GET /v1/policies/{policy_id}
        .routes(routes!(policies::versions)) // GET /v1/policies/{policy_id}/versions
        .routes(routes!(policies::version)) // GET /v1/policies/{policy_id}/versions/{version}
        .routes(routes!(policies::rollback)) // POST /v1/policies/{policy_id}/rollback
        .routes(routes!(policy_challenges::list)) // GET /v1/policy-challenges
        .routes(routes!(policy_challenges::status)) // GET /v1/policy-challenges/{challenge_id}
        .routes(routes!(policy_challenges::decide)) // POST /v1/policy-challenges/{challenge_id}/decide
        .routes(routes!(policy_challenges::agent_status)) // GET /v1/policy-challenges/{challenge_id}/status
        .routes(routes!(approval_links::show, approval_links::decide)) // GET, POST /v1/approval-links/{token}
        // Enforcement
        .routes(routes!(credentials::mint)) // POST /v1/identity/credentials/mint
        .routes(routes!(credentials::revoke)) // POST /v1/identity/credentials/revoke
        .routes(routes!(credentials::revoke_by_agent)) // POST /v1/identity/credentials/revoke-by-agent
        .routes(routes!(credentials::introspect)) // POST /v1/identity/introspect
        .routes(routes!(kill_switch::status)) // GET /v1/identity/kill-switch/status
        .routes(routes!(kill_switch::minting)) // POST /v1/identity/kill-switch/minting
        .routes(routes!(kill_switch::revoke_all)) // POST /v1/identity/kill-switch/revoke-all
        .routes(routes!(token_exchange::exchange)) // POST /v1/token/exchange
        .routes(routes!(well_known::jwks)) // GET /.well-known/jwks.json
        .routes(routes!(well_known::openid_configuration)) // GET /.well-known/openid-configuration
        .routes(routes!(email::send_email)) // POST /v1/email/send
        // The vault
        .routes(routes!(vault::list, vault::create)) // GET, POST /v1/vault/secret-sets
        .routes(routes!(vault::import)) // POST /v1/vault/secret-sets/import
        .routes(routes!(vault::get, vault::update)) // GET, POST /v1/vault/secret-sets/{secret_set_id}
        .routes(routes!(vault::versions)) // GET /v1/vault/secret-sets/{secret_set_id}/versions
        .routes(routes!(vault::rollback)) // POST /v1/vault/secret-sets/{secret_set_id}/rollback
        .routes(routes!(vault::delete)) // POST /v1/vault/secret-sets/{secret_set_id}/delete
        .routes(routes!(vault::undelete)) // POST /v1/vault/secret-sets/{secret_set_id}/undelete
        .routes(routes!(vault::destroy)) // POST /v1/vault/secret-sets/{secret_set_id}/destroy
        .routes(routes!(vault::list_grants, vault::create_grant)) // GET, POST /v1/vault/grants
        .routes(routes!(vault::revoke_grant)) // POST /v1/vault/grants/{grant_id}/revoke
        .routes(routes!(vault::issue_workflow_lease)) // POST /v1/vault/leases/workflow
        .routes(routes!(vault::list_leases)) // GET /v1/vault/leases
        .routes(routes!(vault::revoke_leases)) // POST /v1/vault/leases/revoke
        .routes(routes!(vault::revoke_lease)) // POST /v1/vault/leases/{lease_id}/revoke
        .routes(routes!(vault::audit)) // GET /v1/vault/audit
        .routes(routes!(vault_agent::eval)) // POST /v1/vault/policy/eval
        .routes(routes!(vault_agent::mint_request_lease)) // POST /v1/vault/leases/request/mint
        .routes(routes!(vault_agent::read_secrets)) // POST /v1/vault/secrets/read
        .routes(routes!(vault_agent::proxy_request)) // POST /v1/vault/proxy/request
        // The MCP gateway
        .routes(routes!(mcp::list, mcp::create)) // GET, POST /v1/mcp/servers
        .routes(routes!(mcp::get, mcp::update)) // GET, POST /v1/mcp/servers/{server_id}
        .routes(routes!(mcp::delete)) // POST /v1/mcp/servers/{server_id}/delete
        .routes(routes!(
            mcp_gateway::post,
            mcp_gateway::get,
            mcp_gateway::delete
        )) // POST, GET, DELETE /mcp/{name}
        .routes(routes!(mcp_gateway::resource_metadata)) // GET /.well-known/oauth-protected-resource/mcp/{name}
        // Telemetry
        .routes(routes!(heartbeats::heartbeat)) // POST /v1/telemetry/heartbeat
        .routes(routes!(heartbeats::ingest)) // POST /v1/telemetry/heartbeat/ingest
        .routes(routes!(heartbeats::recent)) // GET /v1/telemetry/heartbeat/recent
        .routes(routes!(inventory::list_inventory)) // GET /v1/workspace/agents
        .routes(routes!(inventory::upsert_inventory)) // POST /v1/workspace/agents/upsert
        .routes(routes!(reputation::feedback)) // POST /v1/reputation/feedback
        .routes(routes!(audit::events)) // GET /v1/workspace/audit/events
        .routes(routes!(audit::export)) // POST /v1/workspace/audit/export
        .routes(routes!(audit::stream)) // GET /v1/workspace/audit/stream
        .routes(routes!(audit_sinks::list, audit_sinks::create)) // GET, POST /v1/workspace/audit/sinks
        .routes(routes!(audit_sinks::get, audit_sinks::update)) // GET, POST /v1/workspace/audit/sinks/{sink_id}
        .routes(routes!(audit_sinks::rotate_secret)) // POST /v1/workspace/audit/sinks/{sink_id}/rotate-secret
        .routes(routes!(audit_sinks::delete)) // POST /v1/workspace/audit/sinks/{sink_id}/delete
        // People: login, workspaces and their management
        .routes(routes!(auth::start_login)) // POST /auth/start-login
        .routes(routes!(auth::verify_login_link, auth::verify_login)) // GET, POST /auth/verify-login
        .routes(routes!(auth::me)) // GET /auth/me
        .routes(routes!(auth::logout)) // POST /auth/logout
        .routes(routes!(tokens::list_tokens, tokens::create_token)) // GET, POST /v1/auth/tokens
        .routes(routes!(tokens::revoke_token)) // POST /v1/auth/tokens/{token_id}/revoke
        .routes(routes!(
            workspaces::list_workspaces,
            workspaces::create_workspace
        )) // GET, POST /v1/workspaces
        .routes(routes!(workspaces::select_workspace)) // POST /v1/workspaces/select
        .routes(routes!(api_keys::list_api_keys, api_keys::create_api_key)) // GET, POST /v1/workspace/api-keys
        .routes(routes!(api_keys::revoke_api_key)) // POST /v1/workspace/api-keys/{key_id}/revoke
        .routes(routes!(members::list_members, members::add_member)) // GET, POST /v1/workspace/members
        .routes(routes!(members::remove_member)) // POST /v1/workspace/members/{user_id}/remove
        .routes(routes!(settings::get_settings, settings::update_settings)) // GET, POST /v1/workspace/settings
        // Pages and the site
        .routes(routes!(pages::login_page)) // GET /login
        .merge(console::router(ctx))
        .routes(routes!(site::home)) // GET /
        .routes(routes!(site::summary)) // GET /v1/status/summary
        .routes(routes!(site::run_checks)) // POST /v1/status/checks/run
        .routes(routes!(site::contact)) // POST /v1/contact/submit
}

/// The OpenAPI document of every route the server has, pretty-printed (the committed copy in
/// `schemas/openapi.json` must equal it).
pub fn openapi_document() -> String {
    static DOCUMENT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DOCUMENT
        .get_or_init(|| {
            let (_, doc) = routes(None).split_for_parts();
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
    "x-service-workspace",
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
/// client sent one) and its copy on the response, the browser headers of every answer and the
/// content security policy of pages (`page_headers.rs`), the request's trace context, span, metrics
/// and access log line (`observe.rs`), the panic guard (500
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
            .layer(page_headers::PageHeadersLayer)
            .layer(axum::middleware::from_fn(observe::observe))
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
    let (api, _) = routes(Some(&ctx)).split_for_parts();
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

    /// Every line of `routes()` (here and the console's) names its methods and path in a comment, and the comment is
    /// true: the OpenAPI document (built from the same handlers) has exactly those operations,
    /// each handled by the function the line names.
    #[test]
    fn router_lines_name_their_paths() {
        let flat = [include_str!("mod.rs"), include_str!("console/mod.rs")]
            .iter()
            .map(|source| {
                let start = source.find("fn routes(").unwrap();
                let body = &source[start..start + source[start..].find("\n}\n").unwrap()];
                body.split_whitespace().collect::<Vec<_>>().join(" ")
            })
            .collect::<Vec<_>>()
            .join(" // ");
        let doc: serde_json::Value = serde_json::from_str(&openapi_document()).unwrap();
        let mut named = 0;
        for line in flat.split(".routes(routes!(").skip(1) {
            let (handlers, rest) = line.split_once("))").unwrap();
            let comment = rest
                .trim_start()
                .trim_start_matches(';')
                .trim_start()
                .strip_prefix("// ")
                .unwrap_or_else(|| {
                    panic!("`routes!({handlers})` has no `// METHOD /path` comment")
                });
            // A comment ends at the next comment or the next call of the chain (`.merge(..)`).
            let comment = comment.split(" //").next().unwrap();
            let comment = comment.split(" .").next().unwrap().trim();
            let (methods, path) = comment.rsplit_once(' ').unwrap();
            let methods: Vec<&str> = methods.split(", ").collect();
            let handlers: Vec<&str> = handlers
                .split(',')
                .map(str::trim)
                .filter(|h| !h.is_empty())
                .collect();
            assert_eq!(
                methods.len(),
                handlers.len(),
                "{comment}: one method per handler"
            );
            for (method, handler) in methods.iter().zip(&handlers) {
                let op = &doc["paths"][path][method.to_ascii_lowercase()];
                let name = handler.rsplit("::").next().unwrap();
                assert_eq!(
                    op["operationId"], name,
                    "{method} {path} is not handled by {handler}"
                );
                named += 1;
            }
        }
        let operations: usize = doc["paths"]
            .as_object()
            .unwrap()
            .values()
            .map(|ops| ops.as_object().unwrap().len())
            .sum();
        assert_eq!(
            named, operations,
            "every operation is named by one router line"
        );
    }

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
