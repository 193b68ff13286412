//! `/auth/*`: magic-link login, who is logged in, log out. The session cookie is set and
//! cleared here; how a request is authenticated is in [`super::session`].

use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};

use crate::api::{
    ErrorBody, MeResponse, OkResponse, StartLoginRequest, StartLoginResponse, VerifyLoginParams,
    VerifyLoginRequest, VerifyLoginResponse,
};
use crate::context::{Context, SharedContext};
use crate::error::ApiResult;
use crate::identity::accounts::{self, NewSession, Principal, SESSION_COOKIE};

use super::extract::{AppJson, AppQuery};
use super::wire::Peer;

/// True when cookies must be `Secure`: the public URL is https, or a proxy says so.
fn secure(ctx: &Context, headers: &HeaderMap) -> bool {
    ctx.public_url.starts_with("https://")
        || headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("https"))
}

/// `acp_session`: HttpOnly, SameSite=Lax, Path the path prefix (or `/`), Secure by [`secure`].
fn session_cookie(
    ctx: &Context,
    headers: &HeaderMap,
    value: &str,
    max_age: i64,
) -> Cookie<'static> {
    let path = ctx
        .config
        .path_prefix
        .as_deref()
        .filter(|p| !p.is_empty())
        .unwrap_or("/");
    Cookie::build((SESSION_COOKIE, value.to_owned()))
        .path(path.to_owned())
        .http_only(true)
        .same_site(SameSite::Lax)
        .max_age(cookie::time::Duration::seconds(max_age))
        .secure(secure(ctx, headers))
        .build()
}

fn with_cookie(response: Response, cookie: Cookie<'static>) -> Response {
    (CookieJar::new().add(cookie), response).into_response()
}

/// Emails a one-time login link. Always 202 for a well-formed address, whether or not an
/// account exists.
#[utoipa::path(post, path = "/auth/start-login", tag = "auth", request_body = StartLoginRequest,
    responses((status = 202, body = StartLoginResponse), (status = 400, body = ErrorBody),
        (status = 429, description = "`rate_limited` with `retry_after`", body = ErrorBody),
        (status = 502, description = "`provider_unavailable`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn start_login(
    State(ctx): State<SharedContext>,
    ConnectInfo(Peer(peer)): ConnectInfo<Peer>,
    AppJson(req): AppJson<StartLoginRequest>,
) -> ApiResult<Response> {
    accounts::start_login(&ctx, &req.email, &peer.ip().to_string()).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(StartLoginResponse {
            ok: true,
            message: if ctx.mailer.provider() == "outbox" {
                // A laptop without mail: say where the link is.
                "if the address can log in, a link is on its way; it expires in 15 minutes. \
                 This server keeps mail in its outbox: read it on the server's machine with \
                 `acp admin outbox list`"
            } else {
                "if the address can log in, a link is on its way; it expires in 15 minutes"
            }
            .into(),
        }),
    )
        .into_response())
}

/// Follows a login link: sets the session cookie and redirects to the dashboard.
#[utoipa::path(get, path = "/auth/verify-login", tag = "auth", params(VerifyLoginParams),
    responses((status = 303, description = "session cookie set; redirect to /dashboard"),
        (status = 400, description = "HTML page: the link is not valid"),
        (status = 403, description = "HTML page: `signup_closed`, the address may no longer sign up here"),
        (status = 409, description = "HTML page: the link was used"),
        (status = 410, description = "HTML page: the link expired")))]
#[tracing::instrument(level = "debug", skip_all)]
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
        Err(err) => super::pages::error_page(&ctx, err.into()),
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
        (status = 403, description = "`signup_closed`: the address may no longer sign up here", body = ErrorBody),
        (status = 409, description = "`token_used`", body = ErrorBody),
        (status = 410, description = "`token_expired`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
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
#[tracing::instrument(level = "debug", skip_all)]
pub async fn me(
    State(ctx): State<SharedContext>,
    principal: Principal,
) -> ApiResult<Json<MeResponse>> {
    Ok(Json(accounts::me(&ctx, &principal).await?))
}

/// Ends the session and clears the cookie.
#[utoipa::path(post, path = "/auth/logout", tag = "auth", security(("session" = [])),
    responses((status = 200, body = OkResponse), (status = 401, body = ErrorBody), (status = 403, description = "`csrf_failed`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
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
