//! `/v1/approval-links/{token}` (the human side of a challenge) and `/v1/policy-challenges/{id}`
//! (the backend that waits).

use axum::extract::State;
use axum::http::{header, HeaderMap, Method};
use axum::response::{Html, IntoResponse, Response};
use axum::Json;

use crate::api::{
    ApprovalDecisionRequest, ClaimDecisionRequest, ClaimInfo, ClaimInfoResponse, ErrorBody,
    PolicyChallengeInfo, PolicyChallengeResponse, UpdateWorkspaceSettings, WorkspaceSettings,
};
use crate::context::SharedContext;
use crate::enforce::approvals;
use crate::error::ApiResult;
use crate::time::now_ms;

use super::extract::{AppJson, AppPath, Caller};
use super::pages::{error_page, esc, login_url, no_store};

fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/html"))
}

fn page(c: &PolicyChallengeInfo, csrf: &str) -> String {
    let reasons: String = c
        .reasons
        .iter()
        .map(|r| format!("<li>{}</li>", esc(r)))
        .collect();
    let buttons = if c.status == "pending" {
        format!("<p><button id=\"approve\" data-decision=\"approve\">Approve</button> <button id=\"deny\" data-decision=\"deny\">Deny</button></p>\
         <script>const csrf = '{}'; for (const b of document.querySelectorAll('button[data-decision]')) b.addEventListener('click', async () => {{\
         const headers = {{'Content-Type': 'application/json'}}; if (csrf) headers['X-CSRF-Token'] = csrf;\
         const r = await fetch(location.pathname, {{method: 'POST', headers, body: JSON.stringify({{decision: b.dataset.decision}})}});\
         const j = await r.json(); document.getElementById('status').textContent = r.ok ? j.challenge.status : j.message;\
         for (const x of document.querySelectorAll('button[data-decision]')) x.disabled = true; }});</script>", esc(csrf))
    } else {
        String::new()
    };
    // The values the deciding rules read (amount and currency, environment, recipients, ...).
    let request: String = approvals::summary_lines(&c.summary)
        .iter()
        .map(|(label, value)| {
            format!(
                "<dt>{}</dt><dd data-field=\"{}\">{}</dd>",
                esc(label),
                esc(label),
                esc(value)
            )
        })
        .collect();
    let request = if request.is_empty() {
        "<p class=\"muted\">The deciding rules read no request values.</p>".to_owned()
    } else {
        format!("<dl id=\"request\">{request}</dl>")
    };
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\">\
         <title>Approval · acp</title><style>body{{font-family:system-ui,sans-serif;max-width:40rem;margin:2rem auto;padding:0 1rem}}\
         dt{{font-weight:600}}dl#request{{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem}}dl#request dt{{font-weight:400;color:#555}}\
         dl#request dd{{margin:0}}.muted{{color:#777}}button{{padding:.4rem 1rem;margin-right:.5rem}}</style></head><body>\
         <h1>An agent asks for approval</h1><dl><dt>Agent</dt><dd id=\"agent\">{}</dd><dt>Action</dt><dd id=\"action\">{}</dd>\
         <dt>Why it needs a human</dt><dd><ul>{}</ul></dd><dt>The request</dt><dd>{}</dd>\
         <dt>Expires</dt><dd>{}</dd><dt>Status</dt><dd id=\"status\">{}</dd></dl>{}</body></html>",
        esc(&approvals::agent_label(&c.summary, &c.agent_id)),
        esc(&c.action),
        reasons,
        request,
        esc(&c.expires_at),
        esc(&c.status),
        buttons
    )
}

/// What an approval link asks: an HTML page for browsers, JSON otherwise.
#[utoipa::path(get, path = "/v1/approval-links/{token}", tag = "approvals", params(("token" = String, Path)),
    responses((status = 200, description = "HTML page (Accept: text/html) or JSON", body = PolicyChallengeResponse),
        (status = 404, description = "`unknown_approval_link`", body = ErrorBody)))]
pub async fn show(
    State(ctx): State<SharedContext>,
    headers: HeaderMap,
    AppPath(token): AppPath<String>,
) -> Response {
    let html = wants_html(&headers);
    let found = approvals::by_token(&ctx, &token).await;
    let response = match found {
        Ok(c) => {
            let info = approvals::to_wire(&c, now_ms());
            if html {
                // A logged-in viewer's page carries the session's CSRF token for the decision.
                let csrf = super::session::authenticate_user(&ctx, &Method::GET, &headers)
                    .await
                    .ok()
                    .and_then(|p| p.csrf_token)
                    .unwrap_or_default();
                Html(page(&info, &csrf)).into_response()
            } else {
                Json(PolicyChallengeResponse {
                    ok: true,
                    challenge: info,
                })
                .into_response()
            }
        }
        Err(err) if html => error_page(&ctx, err),
        Err(err) => err.into_response(),
    };
    no_store(response)
}

/// Approves or denies the challenge behind the link; one decision per challenge.
#[utoipa::path(post, path = "/v1/approval-links/{token}", tag = "approvals", params(("token" = String, Path)),
    request_body = ApprovalDecisionRequest,
    responses((status = 200, body = PolicyChallengeResponse), (status = 400, body = ErrorBody),
        (status = 404, description = "`unknown_approval_link`", body = ErrorBody),
        (status = 409, description = "`challenge_already_decided`", body = ErrorBody),
        (status = 410, description = "`challenge_expired`", body = ErrorBody)))]
pub async fn decide(
    State(ctx): State<SharedContext>,
    headers: HeaderMap,
    AppPath(token): AppPath<String>,
    AppJson(req): AppJson<ApprovalDecisionRequest>,
) -> ApiResult<Json<PolicyChallengeResponse>> {
    // A logged-in user is recorded as the approver; the link alone is enough otherwise (its
    // token is the secret, so it needs no CSRF token either), unless the workspace requires a
    // logged-in member.
    let approver = match super::session::cookie(&headers, crate::identity::accounts::SESSION_COOKIE)
    {
        Some(_) => super::session::authenticate_user(&ctx, &Method::POST, &headers)
            .await
            .ok(),
        None => None,
    };
    let challenge = approvals::decide(&ctx, &token, req.decision.trim(), approver.as_ref()).await?;
    Ok(Json(PolicyChallengeResponse {
        ok: true,
        challenge,
    }))
}

/// A policy challenge's status, for backends that poll.
#[utoipa::path(get, path = "/v1/policy-challenges/{challenge_id}", tag = "approvals", params(("challenge_id" = String, Path)),
    security(("api_key" = [])),
    responses((status = 200, body = PolicyChallengeResponse), (status = 404, description = "`unknown_challenge`", body = ErrorBody)))]
pub async fn status(
    State(ctx): State<SharedContext>,
    caller: Caller,
    AppPath(challenge_id): AppPath<String>,
) -> ApiResult<Json<PolicyChallengeResponse>> {
    let challenge = approvals::status(&ctx, &caller.workspace_id, &challenge_id).await?;
    Ok(Json(PolicyChallengeResponse {
        ok: true,
        challenge,
    }))
}

fn claim_page(
    info: &ClaimInfo,
    csrf: Option<&str>,
    workspace: Option<&str>,
    login: &str,
) -> String {
    let actions = match (info.status.as_str(), csrf, workspace) {
        ("pending", Some(csrf), Some(ws)) => format!(
            "<p>Claim it into the selected workspace <code>{}</code>?</p>\
             <p><button data-decision=\"claim\" id=\"claim\">Claim</button> <button data-decision=\"reject\" id=\"reject\">Reject</button></p>\
             <script>for (const b of document.querySelectorAll('button[data-decision]')) b.addEventListener('click', async () => {{\
             const r = await fetch(location.pathname, {{method: 'POST', headers: {{'Content-Type': 'application/json', 'X-CSRF-Token': '{}'}}, body: JSON.stringify({{decision: b.dataset.decision}})}});\
             const j = await r.json(); document.getElementById('status').textContent = r.ok ? (b.dataset.decision === 'claim' ? 'claimed' : 'rejected') : j.message;\
             for (const x of document.querySelectorAll('button[data-decision]')) x.disabled = true; }});</script>",
            esc(ws),
            esc(csrf)
        ),
        ("pending", _, _) => format!(
            "<p>Log in as an owner or admin of a workspace to claim this agent: <a href=\"{}\">log in</a>.</p>",
            esc(login)
        ),
        _ => String::new(),
    };
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Claim an agent · acp</title>\
         <style>body{{font-family:system-ui,sans-serif;max-width:40rem;margin:2rem auto;padding:0 1rem}}dt{{font-weight:600}}\
         button{{padding:.4rem 1rem;margin-right:.5rem}}</style></head><body><h1>An agent asks to join a workspace</h1>\
         <dl><dt>Name</dt><dd id=\"agent-name\">{}</dd><dt>Agent</dt><dd><code>{}</code></dd><dt>Public key</dt><dd><code>{}</code></dd>\
         <dt>Metadata</dt><dd><code>{}</code></dd><dt>Expires</dt><dd>{}</dd><dt>Status</dt><dd id=\"status\">{}</dd></dl>{}</body></html>",
        esc(&info.agent.name),
        esc(&info.agent.agent_id),
        esc(&info.agent.public_key),
        esc(&info.agent.metadata.to_string()),
        esc(&info.expires_at),
        esc(&info.status),
        actions
    )
}

/// The claim link of an unclaimed agent: a page for a logged-in admin, or JSON.
#[utoipa::path(get, path = "/v1/agent-approval/{code}", tag = "approvals", params(("code" = String, Path)),
    responses((status = 200, description = "HTML page (Accept: text/html) or JSON", body = ClaimInfoResponse),
        (status = 404, description = "`unknown_claim_code`", body = ErrorBody)))]
pub async fn show_claim(
    State(ctx): State<SharedContext>,
    headers: HeaderMap,
    AppPath(code): AppPath<String>,
) -> Response {
    let html = wants_html(&headers);
    match crate::identity::agents::claim_info(&ctx, &code).await {
        Ok(info) if html => {
            let principal = super::session::authenticate_user(&ctx, &Method::GET, &headers)
                .await
                .ok();
            let admin_ws = match &principal {
                Some(p) => p.admin_of().ok().map(|(ws, _)| ws),
                None => None,
            };
            let csrf = principal.as_ref().and_then(|p| p.csrf_token.clone());
            let response = Html(claim_page(
                &info,
                csrf.as_deref(),
                admin_ws.as_deref(),
                &login_url(&ctx),
            ))
            .into_response();
            no_store(response)
        }
        Ok(info) => Json(ClaimInfoResponse {
            ok: true,
            claim: info,
        })
        .into_response(),
        Err(err) if html => error_page(&ctx, err),
        Err(err) => err.into_response(),
    }
}

/// Claims the agent into the caller's active workspace, or rejects the claim (owners and admins;
/// session with CSRF token, or a personal access token).
#[utoipa::path(post, path = "/v1/agent-approval/{code}", tag = "approvals", params(("code" = String, Path)),
    request_body = ClaimDecisionRequest, security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = crate::api::AgentResponse), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, description = "`claim_code_used`, `agent_already_claimed`, `claim_conflict`", body = ErrorBody),
        (status = 410, description = "`claim_code_expired`", body = ErrorBody)))]
pub async fn redeem_claim(
    State(ctx): State<SharedContext>,
    principal: crate::identity::accounts::Principal,
    AppPath(code): AppPath<String>,
    AppJson(req): AppJson<ClaimDecisionRequest>,
) -> ApiResult<Json<crate::api::AgentResponse>> {
    let agent =
        crate::identity::agents::redeem_claim(&ctx, &principal, &code, req.decision.trim()).await?;
    Ok(Json(crate::api::AgentResponse { ok: true, agent }))
}

/// The active workspace's settings.
#[utoipa::path(get, path = "/v1/workspace/settings", tag = "workspaces", security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = WorkspaceSettings), (status = 401, body = ErrorBody)))]
pub async fn get_settings(
    State(ctx): State<SharedContext>,
    principal: crate::identity::accounts::Principal,
) -> ApiResult<Json<WorkspaceSettings>> {
    Ok(Json(approvals::settings(&ctx, &principal).await?))
}

/// Changes the active workspace's settings (owners and admins).
#[utoipa::path(post, path = "/v1/workspace/settings", tag = "workspaces", request_body = UpdateWorkspaceSettings,
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = WorkspaceSettings), (status = 403, body = ErrorBody)))]
pub async fn update_settings(
    State(ctx): State<SharedContext>,
    principal: crate::identity::accounts::Principal,
    AppJson(req): AppJson<UpdateWorkspaceSettings>,
) -> ApiResult<Json<WorkspaceSettings>> {
    Ok(Json(
        approvals::update_settings(&ctx, &principal, req).await?,
    ))
}
