//! Server-rendered pages: the login form, the dashboard home and error pages for links.

use axum::extract::State;
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{Html, IntoResponse, Response};

use crate::context::{Context, SharedContext};
use crate::error::ApiError;
use crate::identity::accounts;
use crate::time::iso;

/// Escapes text for HTML element content and attribute values.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn page(title: &str, body: &str) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\">\
         <title>{} · acp</title><style>body{{font-family:system-ui,sans-serif;max-width:52rem;margin:2rem auto;padding:0 1rem;color:#222}}\
         table{{border-collapse:collapse;width:100%}}td,th{{text-align:left;padding:.3rem .5rem;border-bottom:1px solid #ddd}}\
         .muted{{color:#777}}.error{{color:#a00}}button{{padding:.3rem .8rem}}</style></head><body>{}</body></html>",
        esc(title),
        body
    )
}

/// Marks a response as never to be cached (pages behind secrets and sessions).
pub fn no_store(mut response: Response) -> Response {
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    response
}

/// An error answered as a page (for links followed in a browser).
/// The login page's path, behind the path prefix if any.
pub fn login_url(ctx: &Context) -> String {
    format!("{}/login", ctx.config.path_prefix.as_deref().unwrap_or(""))
}

pub fn error_page(ctx: &Context, err: ApiError) -> Response {
    let login = login_url(ctx);
    let body = format!(
        "<h1>That did not work</h1><p class=\"error\" id=\"error\" data-code=\"{}\">{}</p><p><a href=\"{}\">Ask for a new login link</a></p>",
                esc(&err.code),
        esc(&err.message),
        esc(&login)
    );
    no_store((err.status, Html(page("Error", &body))).into_response())
}

/// The login form: asks for an email address and posts it to `/auth/start-login`.
#[utoipa::path(get, path = "/login", tag = "dashboard", responses((status = 200, description = "HTML login form")))]
pub async fn login_page() -> Response {
    let body = r#"<h1>Log in to acp</h1>
<form id="login"><label>Email <input type="email" name="email" id="email" required autofocus></label>
<button type="submit">Send me a login link</button></form>
<p id="result" class="muted"></p>
<script>
document.getElementById('login').addEventListener('submit', async (e) => {
  e.preventDefault();
  const r = await fetch('auth/start-login', {method: 'POST', headers: {'Content-Type': 'application/json'},
    body: JSON.stringify({email: document.getElementById('email').value})});
  const j = await r.json();
  document.getElementById('result').textContent = r.ok ? 'Check your inbox: the link works once, for 15 minutes.' : j.message;
});
</script>
<p class="muted">Running locally with the default outbox mailer? Read the link with <code>acp outbox list</code>.</p>"#;
    no_store(Html(page("Log in", body)).into_response())
}

/// The dashboard home: the user, their workspaces and the selected workspace's API keys.
#[utoipa::path(get, path = "/dashboard", tag = "dashboard",
    responses((status = 200, description = "HTML dashboard"), (status = 303, description = "not logged in: to /login")))]
pub async fn dashboard(State(ctx): State<SharedContext>, headers: HeaderMap) -> Response {
    let login = login_url(&ctx);
    let principal = match super::session::authenticate_user(&ctx, &Method::GET, &headers).await {
        Ok(p) if p.session_hash.is_some() => p,
        _ => return (StatusCode::SEE_OTHER, [(header::LOCATION, login)]).into_response(),
    };
    match render_dashboard(&ctx, &principal).await {
        Ok(html) => no_store(Html(html).into_response()),
        Err(err) => error_page(&ctx, err),
    }
}

async fn render_dashboard(
    ctx: &Context,
    principal: &accounts::Principal,
) -> Result<String, ApiError> {
    let memberships = ctx.store.memberships(&principal.user.id).await?;
    let active = principal.workspace_id.as_deref();
    let mut body = format!(
        "<h1>acp</h1><p>Logged in as <strong id=\"user-email\">{}</strong> \
         <button id=\"logout\" data-csrf=\"{}\">Log out</button></p><h2>Workspaces</h2>",
        esc(&principal.user.email),
        esc(principal.csrf_token.as_deref().unwrap_or(""))
    );
    if memberships.is_empty() {
        body.push_str("<p class=\"muted\">You belong to no workspace yet. Create one with <code>POST /v1/workspaces</code>, or ask an admin to add you.</p>");
    } else {
        body.push_str(
            "<table id=\"workspaces\"><tr><th>Name</th><th>Id</th><th>Role</th><th></th></tr>",
        );
        for m in &memberships {
            let selected = active == Some(m.workspace.id.as_str());
            body.push_str(&format!(
                "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
                esc(&m.workspace.name),
                esc(&m.workspace.id),
                m.role.as_str(),
                if selected { "selected" } else { "" }
            ));
        }
        body.push_str("</table>");
    }
    if let Some(workspace_id) =
        active.filter(|ws| memberships.iter().any(|m| m.workspace.id == *ws))
    {
        let keys = ctx.store.api_keys(workspace_id).await?;
        body.push_str("<h2>API keys of the selected workspace</h2><table id=\"api-keys\"><tr><th>Key</th><th>Name</th><th>Created</th><th>Last used</th><th>State</th></tr>");
        for k in &keys {
            body.push_str(&format!(
                "<tr><td><code>svc_{}_…{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&k.mode),
                esc(&k.last_four),
                esc(k.name.as_deref().unwrap_or("")),
                iso(k.created_at),
                k.last_used_at.map(iso).unwrap_or_else(|| "never".into()),
                if k.revoked_at.is_some() { "revoked" } else { "active" }
            ));
        }
        body.push_str("</table>");
    }
    body.push_str(
        "<script>document.getElementById('logout').addEventListener('click', async (e) => {\
         await fetch('auth/logout', {method: 'POST', headers: {'X-CSRF-Token': e.target.dataset.csrf}});\
         location.href = 'login'; });</script>",
    );
    Ok(page("Dashboard", &body))
}

#[cfg(test)]
mod tests {
    use super::esc;

    #[test]
    fn html_is_escaped() {
        assert_eq!(
            esc("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }
}
