//! Dashboard identity over HTTP: `/auth/*` (magic-link login, me, logout), `/v1/workspaces*`,
//! and the session-only management of API keys, members and personal access tokens.
//!
//! A request is authenticated by the `acp_session` cookie or by `Authorization: Bearer
//! svc_pat_...`. State-changing cookie requests pass the CSRF defence of [`csrf_refusal`]: a JSON
//! body from this service's own origin (or from a client that sends no `Origin`, such as a CI
//! script) needs nothing else; cross-site requests are refused; any other body must carry the
//! session's `X-CSRF-Token` (from login or `/auth/me`), as the service's own pages do. Tokens
//! are not sent by browsers on their own, so they need none.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
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

use super::extract::{bearer_token, is_json_content_type, AppJson, AppPath, AppQuery};

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
        if let Some(why) = csrf_refusal(&ctx.public_url, headers, principal.csrf_token.as_deref()) {
            return Err(ApiError::new(StatusCode::FORBIDDEN, "csrf_failed", why));
        }
    }
    Ok(principal)
}

/// Why a state-changing request authenticated by the session cookie is refused as a possible
/// cross-site request forgery, or `None` when it may go on.
///
/// - `Sec-Fetch-Site: cross-site`, or an `Origin` other than this service's own (the origin of
///   `public_url`, or the request's `Host`), is refused, token or not.
/// - An `X-CSRF-Token` header, when sent, must be the session's token; with it, any body is
///   accepted (the service's own pages send it).
/// - Without one, the body must be declared JSON (`Content-Type: application/json` or
///   `application/...+json`), which a browser never sends cross-origin without CORS consent; a
///   request with no body and no `Content-Type` is accepted too. Forms and `text/plain` are
///   refused.
pub fn csrf_refusal(
    public_url: &str,
    headers: &HeaderMap,
    session_token: Option<&str>,
) -> Option<&'static str> {
    let fetch_site = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if fetch_site.trim().eq_ignore_ascii_case("cross-site") {
        return Some("cross-site requests cannot use the session cookie");
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        if !is_own_origin(public_url, headers, origin.as_bytes()) {
            return Some("the request's Origin is not this service; cross-origin requests cannot use the session cookie");
        }
    }
    let sent = headers
        .get("x-csrf-token")
        .map(|v| v.as_bytes())
        .filter(|v| !v.is_empty());
    if let Some(sent) = sent {
        let expected = session_token.unwrap_or("");
        return if !expected.is_empty() && ct_eq(sent, expected.as_bytes()) {
            None
        } else {
            Some("the `X-CSRF-Token` header is not this session's token (from login or GET /auth/me)")
        };
    }
    let declared_json = match headers.get(header::CONTENT_TYPE) {
        Some(value) => is_json_content_type(value.as_bytes()),
        None => !has_body(headers),
    };
    if declared_json {
        None
    } else {
        Some("a request made with the session cookie must send its body as `application/json`, or carry the session's `X-CSRF-Token`")
    }
}

/// True when the request announces a body (`Content-Length` above zero, or a chunked one).
fn has_body(headers: &HeaderMap) -> bool {
    if headers.contains_key(header::TRANSFER_ENCODING) {
        return true;
    }
    headers
        .get(header::CONTENT_LENGTH)
        .is_some_and(|v| v.to_str().map_or(true, |v| v.trim() != "0"))
}

/// Scheme, lower-case host and port (the scheme's default when not written) of an origin or
/// URL; `None` when it has no scheme or host.
fn origin_of(text: &str) -> Option<(String, String, u16)> {
    let uri: Uri = text.trim().parse().ok()?;
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let host = uri.host()?.to_ascii_lowercase();
    let port = uri.port_u16().or(match scheme.as_str() {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    })?;
    Some((scheme, host, port))
}

/// True when `origin` (an `Origin` header value) is the origin of `public_url`, or names the
/// host and port the request was sent to (its `Host` header).
fn is_own_origin(public_url: &str, headers: &HeaderMap, origin: &[u8]) -> bool {
    let Some((scheme, host, port)) = std::str::from_utf8(origin).ok().and_then(origin_of) else {
        // `Origin: null` (sandboxed frames, opaque origins) and anything unreadable.
        return false;
    };
    if origin_of(public_url).is_some_and(|own| own == (scheme.clone(), host.clone(), port)) {
        return true;
    }
    headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| origin_of(&format!("{scheme}://{v}")))
        .is_some_and(|(_, h, p)| h == host && p == port)
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

#[cfg(test)]
mod tests {
    use super::*;

    const OWN: &str = "https://acp.example.com";

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn refused(pairs: &[(&'static str, &str)]) -> bool {
        csrf_refusal(OWN, &headers(pairs), Some("tok")).is_some()
    }

    #[test]
    fn json_without_origin_or_from_the_own_origin_needs_no_token() {
        let json = ("content-type", "application/json; charset=utf-8");
        assert!(!refused(&[json, ("content-length", "2")]));
        assert!(!refused(&[json, ("origin", "https://ACP.example.com:443")]));
        assert!(!refused(&[(
            "content-type",
            "application/merge-patch+json"
        )]));
        // The Host the request was sent to counts as the own origin too.
        assert!(!refused(&[
            json,
            ("origin", "http://127.0.0.1:8080"),
            ("host", "127.0.0.1:8080")
        ]));
        assert!(!refused(&[json, ("sec-fetch-site", "same-origin")]));
    }

    #[test]
    fn cross_site_requests_are_refused_even_with_the_token() {
        let json = ("content-type", "application/json");
        let token = ("x-csrf-token", "tok");
        assert!(refused(&[json, ("origin", "https://evil.example")]));
        assert!(refused(&[json, token, ("origin", "https://evil.example")]));
        assert!(
            refused(&[json, ("origin", "http://acp.example.com")]),
            "another scheme is another origin"
        );
        assert!(refused(&[json, ("origin", "https://acp.example.com:8443")]));
        assert!(refused(&[json, ("origin", "null")]));
        assert!(refused(&[json, token, ("sec-fetch-site", "cross-site")]));
        assert!(refused(&[
            json,
            ("origin", "http://127.0.0.1:9999"),
            ("host", "127.0.0.1:8080")
        ]));
    }

    #[test]
    fn bodies_that_are_not_json_need_the_token() {
        for ct in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
        ] {
            assert!(refused(&[("content-type", ct)]), "{ct}");
            assert!(
                !refused(&[("content-type", ct), ("x-csrf-token", "tok")]),
                "{ct}"
            );
            assert!(
                refused(&[("content-type", ct), ("x-csrf-token", "forged")]),
                "{ct}"
            );
        }
        assert!(refused(&[("content-length", "5")]), "an undeclared body");
        assert!(refused(&[("transfer-encoding", "chunked")]));
        assert!(!refused(&[]), "no body at all");
        assert!(!refused(&[("content-length", "0")]));
        assert!(
            refused(&[
                ("content-type", "application/json"),
                ("x-csrf-token", "forged")
            ]),
            "a wrong token is refused"
        );
        assert!(csrf_refusal(
            OWN,
            &headers(&[("content-type", "text/plain"), ("x-csrf-token", "")]),
            None
        )
        .is_some());
    }
}
