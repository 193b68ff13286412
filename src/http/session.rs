//! Dashboard identity over HTTP: `/auth/*` (magic-link login, me, logout), `/v1/workspaces*`,
//! and the session-only management of API keys, members and personal access tokens.
//!
//! A request is authenticated by the `acp_session` cookie or by `Authorization: Bearer
//! svc_pat_...`. State-changing cookie requests must carry `X-CSRF-Token` (from login or
//! `/auth/me`); tokens are not sent by browsers on their own, so they need none.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::api::{
    AddMemberRequest, ApiKeyListResponse, CreateApiKeyRequest, CreateApiKeyResponse,
    CreateTokenRequest, CreateTokenResponse, CreateWorkspaceRequest, ErrorBody, MeResponse,
    MemberListResponse, MemberResponse, OkResponse, SelectWorkspaceRequest,
    SelectWorkspaceResponse, StartLoginRequest, StartLoginResponse, TokenListResponse,
    VerifyLoginParams, VerifyLoginRequest, VerifyLoginResponse, WorkspaceListResponse,
    WorkspaceResponse,
};
use crate::context::{Context, SharedContext};
use crate::error::{ApiError, ApiResult};
use crate::identity::accounts::{self, NewSession, Principal, PAT_PREFIX, SESSION_COOKIE};
use crate::identity::api_keys;
use crate::secret::ct_eq;

use super::extract::{bearer_token, AppJson, AppPath, AppQuery};

/// The value of cookie `name` in the request, if sent.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
        .filter(|v| !v.is_empty())
}

/// Resolves the principal of a request (cookie or token), enforcing CSRF for cookies.
pub async fn authenticate_user(
    ctx: &Context,
    method: &Method,
    headers: &HeaderMap,
) -> ApiResult<Principal> {
    if let Some(token) = bearer_token(headers) {
        if token.starts_with(PAT_PREFIX) {
            let workspace = headers
                .get("x-service-workspace-id")
                .and_then(|v| v.to_str().ok())
                .filter(|v| !v.is_empty());
            return accounts::token_principal(ctx, token, workspace).await;
        }
        if api_keys::is_well_formed(token) {
            return Err(ApiError::unauthorized(
                "session_required",
                "workspace API keys are not accepted here; log in or use a personal access token (svc_pat_...)",
            ));
        }
    }
    let session_id = cookie(headers, SESSION_COOKIE).ok_or_else(accounts::unauthenticated)?;
    let principal = accounts::session_principal(ctx, session_id).await?;
    let safe = matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
    if !safe {
        let sent = headers
            .get("x-csrf-token")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let expected = principal.csrf_token.as_deref().unwrap_or("");
        if expected.is_empty() || !ct_eq(sent.as_bytes(), expected.as_bytes()) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "csrf_failed",
                "send the session's CSRF token in `X-CSRF-Token` (from login or GET /auth/me)",
            ));
        }
    }
    Ok(principal)
}

impl FromRequestParts<SharedContext> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        ctx: &SharedContext,
    ) -> Result<Self, Self::Rejection> {
        authenticate_user(ctx, &parts.method, &parts.headers).await
    }
}

/// True when cookies must be `Secure`: the public URL is https, or a proxy says so.
fn secure(ctx: &Context, headers: &HeaderMap) -> bool {
    ctx.public_url.starts_with("https://")
        || headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("https"))
}

fn session_cookie(ctx: &Context, headers: &HeaderMap, value: &str, max_age: i64) -> HeaderValue {
    let path = ctx
        .config
        .path_prefix
        .as_deref()
        .filter(|p| !p.is_empty())
        .unwrap_or("/");
    let mut text =
        format!("{SESSION_COOKIE}={value}; Path={path}; HttpOnly; SameSite=Lax; Max-Age={max_age}");
    if secure(ctx, headers) {
        text.push_str("; Secure");
    }
    HeaderValue::from_str(&text)
        .unwrap_or_else(|_| HeaderValue::from_static("acp_session=; Max-Age=0"))
}

fn with_cookie(mut response: Response, cookie: HeaderValue) -> Response {
    response.headers_mut().append(header::SET_COOKIE, cookie);
    response
}

/// Emails a one-time login link. Always 202 for a well-formed address, whether or not an
/// account exists.
#[utoipa::path(post, path = "/auth/start-login", tag = "auth", request_body = StartLoginRequest,
    responses((status = 202, body = StartLoginResponse), (status = 400, body = ErrorBody),
        (status = 429, description = "`rate_limited` with `retry_after`", body = ErrorBody),
        (status = 502, description = "`provider_unavailable`", body = ErrorBody)))]
pub async fn start_login(
    State(ctx): State<SharedContext>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    AppJson(req): AppJson<StartLoginRequest>,
) -> ApiResult<Response> {
    accounts::start_login(&ctx, &req.email, &peer.ip().to_string()).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(StartLoginResponse {
            ok: true,
            message: "if the address can log in, a link is on its way; it expires in 15 minutes"
                .into(),
        }),
    )
        .into_response())
}

/// Follows a login link: sets the session cookie and redirects to the dashboard.
#[utoipa::path(get, path = "/auth/verify-login", tag = "auth", params(VerifyLoginParams),
    responses((status = 303, description = "session cookie set; redirect to /dashboard"),
        (status = 400, description = "HTML page: the link is not valid"),
        (status = 409, description = "HTML page: the link was used"),
        (status = 410, description = "HTML page: the link expired")))]
pub async fn verify_login_link(
    State(ctx): State<SharedContext>,
    headers: HeaderMap,
    AppQuery(params): AppQuery<VerifyLoginParams>,
) -> Response {
    match accounts::verify_login(&ctx, params.token.as_deref().unwrap_or("")).await {
        Ok(session) => {
            let home = format!(
                "{}/dashboard",
                ctx.config.path_prefix.as_deref().unwrap_or("")
            );
            let cookie = session_cookie(
                &ctx,
                &headers,
                session.session_id.expose(),
                session.max_age_secs,
            );
            let response = (StatusCode::SEE_OTHER, [(header::LOCATION, home)]).into_response();
            with_cookie(response, cookie)
        }
        Err(err) => super::pages::error_page(&ctx, err),
    }
}

fn login_answer(ctx: &Context, headers: &HeaderMap, session: NewSession) -> Response {
    let cookie = session_cookie(
        ctx,
        headers,
        session.session_id.expose(),
        session.max_age_secs,
    );
    let body = VerifyLoginResponse {
        ok: true,
        user: accounts::user_wire(&session.user),
        active_workspace_id: session.workspace_id,
        csrf_token: accounts::csrf_token(session.session_id.expose()),
    };
    with_cookie(Json(body).into_response(), cookie)
}

/// Exchanges a login token for a session (for clients that are not browsers following links).
#[utoipa::path(post, path = "/auth/verify-login", tag = "auth", request_body = VerifyLoginRequest,
    responses((status = 200, description = "session cookie set", body = VerifyLoginResponse),
        (status = 400, description = "`invalid_token`", body = ErrorBody),
        (status = 409, description = "`token_used`", body = ErrorBody),
        (status = 410, description = "`token_expired`", body = ErrorBody)))]
pub async fn verify_login(
    State(ctx): State<SharedContext>,
    headers: HeaderMap,
    AppJson(req): AppJson<VerifyLoginRequest>,
) -> ApiResult<Response> {
    let session = accounts::verify_login(&ctx, &req.token).await?;
    Ok(login_answer(&ctx, &headers, session))
}

/// The logged-in user, their workspaces and the active one.
#[utoipa::path(get, path = "/auth/me", tag = "auth", security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = MeResponse), (status = 401, body = ErrorBody)))]
pub async fn me(
    State(ctx): State<SharedContext>,
    principal: Principal,
) -> ApiResult<Json<MeResponse>> {
    Ok(Json(accounts::me(&ctx, &principal).await?))
}

/// Ends the session and clears the cookie.
#[utoipa::path(post, path = "/auth/logout", tag = "auth", security(("session" = [])),
    responses((status = 200, body = OkResponse), (status = 401, body = ErrorBody), (status = 403, description = "`csrf_failed`", body = ErrorBody)))]
pub async fn logout(
    State(ctx): State<SharedContext>,
    headers: HeaderMap,
    principal: Principal,
) -> ApiResult<Response> {
    accounts::logout(&ctx, &principal).await?;
    let cookie = session_cookie(&ctx, &headers, "", 0);
    Ok(with_cookie(
        Json(OkResponse { ok: true }).into_response(),
        cookie,
    ))
}

/// The caller's workspaces with their role.
#[utoipa::path(get, path = "/v1/workspaces", tag = "workspaces", security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = WorkspaceListResponse), (status = 401, body = ErrorBody)))]
pub async fn list_workspaces(
    State(ctx): State<SharedContext>,
    principal: Principal,
) -> ApiResult<Json<WorkspaceListResponse>> {
    Ok(Json(accounts::list_workspaces(&ctx, &principal).await?))
}

/// Creates a workspace with the caller as owner (a session switches to it).
#[utoipa::path(post, path = "/v1/workspaces", tag = "workspaces", request_body = CreateWorkspaceRequest,
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = WorkspaceResponse), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
pub async fn create_workspace(
    State(ctx): State<SharedContext>,
    principal: Principal,
    AppJson(req): AppJson<CreateWorkspaceRequest>,
) -> ApiResult<Json<WorkspaceResponse>> {
    let workspace = accounts::create_workspace(&ctx, &principal, &req.name).await?;
    Ok(Json(WorkspaceResponse {
        ok: true,
        workspace,
    }))
}

/// Sets the session's active workspace.
#[utoipa::path(post, path = "/v1/workspaces/select", tag = "workspaces", request_body = SelectWorkspaceRequest,
    security(("session" = [])),
    responses((status = 200, body = SelectWorkspaceResponse), (status = 400, body = ErrorBody),
        (status = 404, description = "`unknown_workspace`: not one of yours", body = ErrorBody)))]
pub async fn select_workspace(
    State(ctx): State<SharedContext>,
    principal: Principal,
    AppJson(req): AppJson<SelectWorkspaceRequest>,
) -> ApiResult<Json<SelectWorkspaceResponse>> {
    accounts::select_workspace(&ctx, &principal, &req.workspace_id).await?;
    Ok(Json(SelectWorkspaceResponse {
        ok: true,
        active_workspace_id: req.workspace_id,
    }))
}

/// The active workspace's API keys (never the keys themselves).
#[utoipa::path(get, path = "/v1/workspace/api-keys", tag = "workspaces", security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = ApiKeyListResponse), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
pub async fn list_api_keys(
    State(ctx): State<SharedContext>,
    principal: Principal,
) -> ApiResult<Json<ApiKeyListResponse>> {
    let (workspace_id, _) = principal.membership()?;
    let items = ctx
        .store
        .api_keys(&workspace_id)
        .await?
        .iter()
        .map(accounts::api_key_wire)
        .collect();
    Ok(Json(ApiKeyListResponse { ok: true, items }))
}

/// Creates an API key for the active workspace (owners and admins); the key is shown once.
#[utoipa::path(post, path = "/v1/workspace/api-keys", tag = "workspaces", request_body = CreateApiKeyRequest,
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = CreateApiKeyResponse), (status = 403, description = "`insufficient_role`", body = ErrorBody)))]
pub async fn create_api_key(
    State(ctx): State<SharedContext>,
    principal: Principal,
    AppJson(req): AppJson<CreateApiKeyRequest>,
) -> ApiResult<Json<CreateApiKeyResponse>> {
    Ok(Json(accounts::create_api_key(&ctx, &principal, req).await?))
}

/// Revokes an API key of the active workspace (owners and admins); it stops working at once.
#[utoipa::path(post, path = "/v1/workspace/api-keys/{key_id}/revoke", tag = "workspaces", params(("key_id" = String, Path)),
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = OkResponse), (status = 403, body = ErrorBody), (status = 404, description = "`unknown_api_key`", body = ErrorBody)))]
pub async fn revoke_api_key(
    State(ctx): State<SharedContext>,
    principal: Principal,
    AppPath(key_id): AppPath<String>,
) -> ApiResult<Json<OkResponse>> {
    accounts::revoke_api_key(&ctx, &principal, &key_id).await?;
    Ok(Json(OkResponse { ok: true }))
}

/// Members of the active workspace.
#[utoipa::path(get, path = "/v1/workspace/members", tag = "workspaces", security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = MemberListResponse), (status = 403, body = ErrorBody)))]
pub async fn list_members(
    State(ctx): State<SharedContext>,
    principal: Principal,
) -> ApiResult<Json<MemberListResponse>> {
    Ok(Json(accounts::list_members(&ctx, &principal).await?))
}

/// Adds a member by email (created as a user if new) or changes their role.
#[utoipa::path(post, path = "/v1/workspace/members", tag = "workspaces", request_body = AddMemberRequest,
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = MemberResponse), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody)))]
pub async fn add_member(
    State(ctx): State<SharedContext>,
    principal: Principal,
    AppJson(req): AppJson<AddMemberRequest>,
) -> ApiResult<Json<MemberResponse>> {
    let member = accounts::add_member(&ctx, &principal, req).await?;
    Ok(Json(MemberResponse { ok: true, member }))
}

/// Removes a member (a workspace keeps at least one owner).
#[utoipa::path(post, path = "/v1/workspace/members/{user_id}/remove", tag = "workspaces", params(("user_id" = String, Path)),
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = OkResponse), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "`last_owner`", body = ErrorBody)))]
pub async fn remove_member(
    State(ctx): State<SharedContext>,
    principal: Principal,
    AppPath(user_id): AppPath<String>,
) -> ApiResult<Json<OkResponse>> {
    accounts::remove_member(&ctx, &principal, &user_id).await?;
    Ok(Json(OkResponse { ok: true }))
}

/// The caller's personal access tokens (never the tokens themselves).
#[utoipa::path(get, path = "/v1/auth/tokens", tag = "auth", security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = TokenListResponse), (status = 401, body = ErrorBody)))]
pub async fn list_tokens(
    State(ctx): State<SharedContext>,
    principal: Principal,
) -> ApiResult<Json<TokenListResponse>> {
    let items = ctx
        .store
        .pats(&principal.user.id)
        .await?
        .iter()
        .map(accounts::pat_wire)
        .collect();
    Ok(Json(TokenListResponse { ok: true, items }))
}

/// Creates a named, expiring personal access token (`svc_pat_...`) that stands for the caller's
/// session on session-only endpoints, e.g. in CI. Needs a browser session.
#[utoipa::path(post, path = "/v1/auth/tokens", tag = "auth", request_body = CreateTokenRequest, security(("session" = [])),
    responses((status = 200, body = CreateTokenResponse), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
pub async fn create_token(
    State(ctx): State<SharedContext>,
    principal: Principal,
    AppJson(req): AppJson<CreateTokenRequest>,
) -> ApiResult<Json<CreateTokenResponse>> {
    Ok(Json(accounts::create_pat(&ctx, &principal, req).await?))
}

/// Revokes one of the caller's tokens; it stops working at once.
#[utoipa::path(post, path = "/v1/auth/tokens/{token_id}/revoke", tag = "auth", params(("token_id" = String, Path)),
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = OkResponse), (status = 404, description = "`unknown_token`", body = ErrorBody)))]
pub async fn revoke_token(
    State(ctx): State<SharedContext>,
    principal: Principal,
    AppPath(token_id): AppPath<String>,
) -> ApiResult<Json<OkResponse>> {
    accounts::revoke_pat(&ctx, &principal, &token_id).await?;
    Ok(Json(OkResponse { ok: true }))
}
