//! Server-rendered pages: the login form, the dashboard home and error pages for links, and
//! [`render`], which every page goes through. The pages are askama templates in
//! `src/http/templates/` (one shared `layout.html`); askama escapes every value for HTML.

use askama::Template;
use axum::extract::State;
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{Html, IntoResponse, Response};

use crate::context::{Context, SharedContext};
use crate::error::ApiError;
use crate::identity::accounts::Principal;
use crate::time::iso;

#[derive(Template)]
#[template(path = "error.html", config = "src/http/templates/askama.toml")]
struct ErrorPage<'a> {
    code: &'a str,
    message: &'a str,
    login: &'a str,
}

#[derive(Template)]
#[template(path = "login.html", config = "src/http/templates/askama.toml")]
struct LoginPage;

#[derive(Template)]
#[template(path = "dashboard.html", config = "src/http/templates/askama.toml")]
struct DashboardPage<'a> {
    email: &'a str,
    csrf: &'a str,
    workspaces: Vec<WorkspaceRow<'a>>,
    /// The selected workspace's keys, when one is selected.
    api_keys: Option<Vec<ApiKeyRow<'a>>>,
}

struct WorkspaceRow<'a> {
    name: &'a str,
    id: &'a str,
    role: &'static str,
    selected: bool,
}

struct ApiKeyRow<'a> {
    mode: &'a str,
    last_four: &'a str,
    name: &'a str,
    created: String,
    last_used: String,
    state: &'static str,
}

/// A page as the answer, never cached (pages show what sessions and secret links allow). A
/// page that fails to render is an internal error.
pub fn render(page: &impl Template) -> Response {
    no_store(match page.render() {
        Ok(html) => Html(html).into_response(),
        Err(err) => ApiError::internal(err).into_response(),
    })
}

/// Marks a response as never to be cached (pages behind secrets and sessions).
pub fn no_store(mut response: Response) -> Response {
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    response
}

/// The login page's path, behind the path prefix if any.
pub fn login_url(ctx: &Context) -> String {
    format!("{}/login", ctx.config.path_prefix.as_deref().unwrap_or(""))
}

/// An error answered as a page (for links followed in a browser), with the error's status.
pub fn error_page(ctx: &Context, err: ApiError) -> Response {
    err.log_cause();
    let login = login_url(ctx);
    let page = ErrorPage {
        code: &err.code,
        message: &err.message,
        login: &login,
    };
    let mut response = render(&page);
    if response.status().is_success() {
        *response.status_mut() = err.status;
    }
    response
}

/// The login form: asks for an email address and posts it to `/auth/start-login`.
#[utoipa::path(get, path = "/login", tag = "dashboard", responses((status = 200, description = "HTML login form")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn login_page() -> Response {
    render(&LoginPage)
}

/// The dashboard home: the user, their workspaces and the selected workspace's API keys.
#[utoipa::path(get, path = "/dashboard", tag = "dashboard",
    responses((status = 200, description = "HTML dashboard"), (status = 303, description = "not logged in: to /login")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn dashboard(State(ctx): State<SharedContext>, headers: HeaderMap) -> Response {
    let login = login_url(&ctx);
    let principal = match super::session::authenticate_user(
        &ctx,
        &Method::GET,
        &headers,
        &Uri::default(),
    )
    .await
    {
        Ok(p) if p.session_hash.is_some() => p,
        _ => return (StatusCode::SEE_OTHER, [(header::LOCATION, login)]).into_response(),
    };
    dashboard_page(&ctx, &principal)
        .await
        .unwrap_or_else(|err| error_page(&ctx, err))
}

/// The user, their workspaces and, when one of them is selected, its API keys.
async fn dashboard_page(ctx: &Context, principal: &Principal) -> Result<Response, ApiError> {
    let memberships = ctx.store.memberships(&principal.user.id).await?;
    let active = principal.workspace_id.as_deref();
    let keys = match active.filter(|ws| memberships.iter().any(|m| m.workspace.id == *ws)) {
        Some(workspace_id) => Some(ctx.store.api_keys(workspace_id).await?),
        None => None,
    };
    Ok(render(&DashboardPage {
        email: &principal.user.email,
        csrf: principal.csrf_token.as_deref().unwrap_or(""),
        workspaces: memberships
            .iter()
            .map(|m| WorkspaceRow {
                name: &m.workspace.name,
                id: &m.workspace.id,
                role: m.role.as_str(),
                selected: active == Some(m.workspace.id.as_str()),
            })
            .collect(),
        api_keys: keys.as_ref().map(|keys| {
            keys.iter()
                .map(|k| ApiKeyRow {
                    mode: &k.mode,
                    last_four: &k.last_four,
                    name: k.name.as_deref().unwrap_or(""),
                    created: iso(k.created_at),
                    last_used: k.last_used_at.map(iso).unwrap_or_else(|| "never".into()),
                    state: if k.revoked_at.is_some() {
                        "revoked"
                    } else {
                        "active"
                    },
                })
                .collect()
        }),
    }))
}

/// True when the client asks for HTML (`Accept` names `text/html`).
pub fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/html"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_escape_what_they_show() {
        let page = ErrorPage {
            code: "x\"><script>",
            message: "<a href=\"x\">'&'</a>",
            login: "/login",
        }
        .render()
        .unwrap();
        assert!(
            page.contains("data-code=\"x&#34;&#62;&#60;script&#62;\""),
            "{page}"
        );
        assert!(
            page.contains("&#60;a href=&#34;x&#34;&#62;&#39;&#38;&#39;&#60;/a&#62;"),
            "{page}"
        );
        assert!(page.starts_with("<!doctype html>") && page.contains("<title>Error · acp</title>"));
    }
}
