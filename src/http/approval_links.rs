//! `/v1/approval-links/{token}` (the human side of a challenge) and `/v1/policy-challenges/{id}`
//! (the backend that waits).

use askama::Template;
use axum::extract::State;
use axum::http::{HeaderMap, Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::api::{
    ApprovalDecisionRequest, ErrorBody, PolicyChallengeInfo, PolicyChallengeResponse,
};
use crate::context::SharedContext;
use crate::enforce::approvals;
use crate::error::{ApiError, ApiResult};
use crate::policy::challenge;
use crate::time::now_ms;

use super::extract::{AppJson, AppPath};
use super::pages::{error_page, no_store, render, wants_html};

#[derive(Template)]
#[template(path = "approval.html", config = "src/http/templates/askama.toml")]
struct ApprovalPage<'a> {
    agent: String,
    action: &'a str,
    reasons: &'a [String],
    /// The values the deciding rules read (amount and currency, environment, recipients, ...).
    request: Vec<(String, String)>,
    expires_at: &'a str,
    status: &'a str,
    /// Pending: the page offers the decision (or says who may take it).
    pending: bool,
    /// The viewer may decide: the link alone decides, or the logged-in viewer may.
    can_decide: bool,
    /// Where to log in, for a viewer who may not decide as they are.
    login_url: String,
    /// The logged-in viewer's CSRF token, sent with the decision; empty without a session.
    csrf: &'a str,
}

impl<'a> ApprovalPage<'a> {
    fn new(c: &'a PolicyChallengeInfo, csrf: &'a str, can_decide: bool, login_url: String) -> Self {
        ApprovalPage {
            agent: challenge::agent_label(&c.summary, &c.agent_id),
            action: &c.action,
            reasons: &c.reasons,
            request: challenge::summary_lines(&c.summary),
            expires_at: &c.expires_at,
            status: &c.status,
            pending: c.status == "pending",
            can_decide,
            login_url,
            csrf,
        }
    }
}

/// What an approval link asks: an HTML page for browsers, JSON otherwise.
#[utoipa::path(get, path = "/v1/approval-links/{token}", tag = "approvals", params(("token" = String, Path)),
    responses((status = 200, description = "HTML page (Accept: text/html) or JSON", body = PolicyChallengeResponse),
        (status = 404, description = "`unknown_approval_link`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
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
                let viewer = super::session::authenticate_user(
                    &ctx,
                    &Method::GET,
                    &headers,
                    &Uri::default(),
                )
                .await
                .ok();
                let can_decide = match approvals::link_alone_decides(&ctx, &c).await {
                    Ok(true) => true,
                    Ok(false) => match &viewer {
                        Some(p) => approvals::may_decide(&ctx, &c, p).await.unwrap_or(false),
                        None => false,
                    },
                    Err(err) => return no_store(error_page(&ctx, err.into())),
                };
                let csrf = viewer.and_then(|p| p.csrf_token).unwrap_or_default();
                let login_url = format!("{}/login", ctx.public_url);
                render(&ApprovalPage::new(&info, &csrf, can_decide, login_url))
            } else {
                Json(PolicyChallengeResponse {
                    ok: true,
                    challenge: info,
                })
                .into_response()
            }
        }
        Err(err) if html => error_page(&ctx, err.into()),
        Err(err) => ApiError::from(err).into_response(),
    };
    no_store(response)
}

/// Approves or denies the challenge behind the link; one decision per challenge.
#[utoipa::path(post, path = "/v1/approval-links/{token}", tag = "approvals", params(("token" = String, Path)),
    request_body = ApprovalDecisionRequest,
    responses((status = 200, body = PolicyChallengeResponse), (status = 400, body = ErrorBody),
        (status = 401, description = "`login_required`", body = ErrorBody),
        (status = 403, description = "`insufficient_role`, `insufficient_scope`, `not_a_member`", body = ErrorBody),
        (status = 404, description = "`unknown_approval_link`", body = ErrorBody),
        (status = 409, description = "`challenge_already_decided`", body = ErrorBody),
        (status = 410, description = "`challenge_expired`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn decide(
    State(ctx): State<SharedContext>,
    headers: HeaderMap,
    AppPath(token): AppPath<String>,
    AppJson(req): AppJson<ApprovalDecisionRequest>,
) -> ApiResult<Json<PolicyChallengeResponse>> {
    // A logged-in user is recorded as the approver and must be one who may decide, unless the
    // link alone decides (a backend's challenge in a workspace that allows it: the token is
    // the secret, so it needs no CSRF token either).
    // A session cookie, or a personal access token (scripts, CI) as `Authorization: Bearer`.
    let presented = super::headers::cookie(&headers, crate::identity::accounts::SESSION_COOKIE)
        .is_some()
        || super::headers::bearer_token(&headers)
            .is_some_and(|t| t.starts_with(crate::identity::accounts::PAT_PREFIX));
    let approver = if presented {
        super::session::authenticate_user(&ctx, &Method::POST, &headers, &Uri::default())
            .await
            .ok()
    } else {
        None
    };
    let challenge = approvals::decide(
        &ctx,
        &token,
        req.decision.trim(),
        req.reason.as_deref(),
        approver.as_ref(),
    )
    .await?;
    Ok(Json(PolicyChallengeResponse {
        ok: true,
        challenge,
    }))
}
