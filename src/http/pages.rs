//! Server-rendered pages: the login form and error pages for links, and [`render`], which every
//! page goes through (the console's pages are in `console.rs`). The pages are askama templates in
//! `src/http/templates/` (one shared `layout.html`); askama escapes every value for HTML.

use askama::Template;
use axum::http::{header, HeaderMap};
use axum::response::{Html, IntoResponse, Response};

use crate::context::Context;
use crate::error::ApiError;

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
    // For the access log line, as an API error's answer carries it.
    response
        .extensions_mut()
        .insert(crate::error::ErrorCode(err.code.clone()));
    response
}

/// The login form: asks for an email address and posts it to `/auth/start-login`.
#[utoipa::path(get, path = "/login", tag = "dashboard", responses((status = 200, description = "HTML login form")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn login_page() -> Response {
    render(&LoginPage)
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
