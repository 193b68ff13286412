//! `/v1/agent-approval/{code}`: an unclaimed agent's claim link, seen and decided by an admin.

use askama::Template;
use axum::extract::State;
use axum::http::{HeaderMap, Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::api::{AgentResponse, ClaimDecisionRequest, ClaimInfoResponse, ErrorBody};
use crate::context::SharedContext;
use crate::domain::access::Need;
use crate::error::{ApiError, ApiResult};
use crate::identity::accounts::Principal;
use crate::identity::agents;

use super::extract::{AppJson, AppPath};
use super::operator::person_requires;
use super::pages::{error_page, login_url, render, wants_html};
use super::session::authenticate_user;

#[derive(Template)]
#[template(path = "claim.html", config = "src/http/templates/askama.toml")]
struct ClaimPage<'a> {
    name: &'a str,
    agent_id: &'a str,
    public_key: &'a str,
    metadata: String,
    expires_at: &'a str,
    status: &'a str,
    pending: bool,
    /// A pending claim seen by an owner or admin with a session: the page offers the decision.
    admin: Option<ClaimingAdmin<'a>>,
    login: &'a str,
}

struct ClaimingAdmin<'a> {
    workspace_id: &'a str,
    csrf: &'a str,
}

/// The claim link of an unclaimed agent: a page for a logged-in admin, or JSON.
#[utoipa::path(get, path = "/v1/agent-approval/{code}", tag = "approvals", params(("code" = String, Path)),
    responses((status = 200, description = "HTML page (Accept: text/html) or JSON", body = ClaimInfoResponse),
        (status = 404, description = "`unknown_claim_code`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn show_claim(
    State(ctx): State<SharedContext>,
    headers: HeaderMap,
    AppPath(code): AppPath<String>,
) -> Response {
    let html = wants_html(&headers);
    match agents::claim_info(&ctx, &code).await {
        Ok(info) if html => {
            let principal = authenticate_user(&ctx, &Method::GET, &headers, &Uri::default())
                .await
                .ok();
            let admin_ws = match &principal {
                Some(p) => p.admin_of().ok().map(|(ws, _)| ws),
                None => None,
            };
            let csrf = principal.as_ref().and_then(|p| p.csrf_token.clone());
            let pending = info.status == "pending";
            let login = login_url(&ctx);
            render(&ClaimPage {
                name: &info.agent.name,
                agent_id: &info.agent.agent_id,
                public_key: &info.agent.public_key,
                metadata: info.agent.metadata.to_string(),
                expires_at: &info.expires_at,
                status: &info.status,
                pending,
                admin: match (pending, &admin_ws, &csrf) {
                    (true, Some(workspace_id), Some(csrf)) => {
                        Some(ClaimingAdmin { workspace_id, csrf })
                    }
                    _ => None,
                },
                login: &login,
            })
        }
        Ok(info) => Json(ClaimInfoResponse {
            ok: true,
            claim: info,
        })
        .into_response(),
        Err(err) if html => error_page(&ctx, err.into()),
        Err(err) => ApiError::from(err).into_response(),
    }
}

/// Claims the agent into the caller's active workspace, or rejects the claim (owners and admins;
/// session with CSRF token, or a personal access token).
#[utoipa::path(post, path = "/v1/agent-approval/{code}", tag = "approvals", params(("code" = String, Path)),
    request_body = ClaimDecisionRequest, security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = AgentResponse), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, description = "`claim_code_used`, `agent_already_claimed`, `claim_conflict`", body = ErrorBody),
        (status = 410, description = "`claim_code_expired`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn redeem_claim(
    State(ctx): State<SharedContext>,
    principal: Principal,
    AppPath(code): AppPath<String>,
    AppJson(req): AppJson<ClaimDecisionRequest>,
) -> ApiResult<Json<AgentResponse>> {
    person_requires(&principal, Need::AgentsChange)?;
    let agent = agents::redeem_claim(&ctx, &principal, &code, req.decision.trim()).await?;
    Ok(Json(AgentResponse { ok: true, agent }))
}
