//! The console's approvals: the selected workspace's pending policy challenges, shown as the
//! approval page shows them (the agent, the action, the values the deciding rules read, the
//! reasons, the time left), each with approve and deny and an optional reason for the roles
//! that decide (approver, admin, owner); members read the queue only. Below it the history of
//! decided challenges, paged by cursor. Each challenge has a page of its own (linked from
//! the audit events that name it), with the same buttons while it is pending.
//!
//! A decision is a form posted with the session's CSRF token and goes through the same use
//! case as `POST /v1/policy-challenges/{id}/decide`, audited with the person as actor.

use askama::Template;
use axum::extract::{Path, State};
use axum::response::Response;
use serde::Deserialize;

use crate::api::PolicyChallengeInfo;
use crate::context::{Context, SharedContext};
use crate::domain::access::Need;
use crate::enforce::approvals;
use crate::error::ApiError;
use crate::identity::accounts::Principal;
use crate::policy::challenge;
use crate::time::{now_ms, parse_iso};

use super::extract::{NotLoggedIn, PageQuery, PageResult, Paged, Person, Posted};
use super::{base, see_other, shell, Section, Shell, PAGE_ROWS};
use crate::http::operator::person_requires;
use crate::http::pages::render;

/// Pending challenges shown at once; more are announced, not listed.
const QUEUE_ROWS: i64 = 100;

#[derive(Template)]
#[template(path = "approvals.html", config = "src/http/templates/askama.toml")]
struct ApprovalsPage {
    shell: Shell,
    /// Whether the role may approve and deny (the server checks again on every POST).
    can_decide: bool,
    pending: Vec<PendingRow>,
    more_pending: bool,
    history: Vec<DecidedRow>,
    first_href: Option<String>,
    next_href: Option<String>,
    done: Option<&'static str>,
}

struct PendingRow {
    id: String,
    agent: String,
    agent_href: String,
    action: String,
    /// The values the deciding rules read, as `label: value` lines.
    request: Vec<(String, String)>,
    reasons: Vec<String>,
    time_left: String,
    expires_at: String,
    created_at: String,
    decide_href: String,
}

struct DecidedRow {
    href: String,
    agent: String,
    agent_href: String,
    action: String,
    request: String,
    status: String,
    decided_at: String,
    decided_by: String,
    created_at: String,
}

/// What is left of a challenge's lifetime, in words.
fn time_left(expires_at_ms: i64, now: i64) -> String {
    let minutes = (expires_at_ms - now) / 60_000;
    match minutes {
        m if m <= 0 => "less than a minute".into(),
        m if m < 60 => format!("{m} min"),
        m if m < 48 * 60 => format!("{} h {} min", m / 60, m % 60),
        m => format!("{} days", m / (24 * 60)),
    }
}

/// The decisions the page's form may post, and the notice after each.
fn decision_notice(decision: &str) -> Option<&'static str> {
    match decision {
        "approve" => Some("Approved: the agent's next check of this request is allowed once."),
        "deny" => Some("Denied: the agent's next check of this request is denied."),
        _ => None,
    }
}

/// The page's URL with a history cursor and limit, if given.
fn href(base: &str, cursor: Option<&str>, limit: Option<i64>) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    if let Some(limit) = limit {
        query.append_pair("limit", &limit.to_string());
    }
    if let Some(cursor) = cursor {
        query.append_pair("cursor", cursor);
    }
    let query = query.finish();
    if query.is_empty() {
        format!("{base}/dashboard/approvals")
    } else {
        format!("{base}/dashboard/approvals?{query}#history")
    }
}

/// The queue of pending challenges with approve and deny (for the roles that decide), and the
/// history of decided ones, paged by cursor.
#[utoipa::path(get, path = "/dashboard/approvals", tag = "dashboard",
    params(("limit" = Option<i64>, Query, description = "rows of the history, 1 to 200, default 25"),
        ("cursor" = Option<String>, Query, description = "the history's next page"),
        ("done" = Option<String>, Query, description = "the decision just taken (`approve` or `deny`), for its notice")),
    responses((status = 200, description = "HTML queue and history"), NotLoggedIn,
        (status = 400, description = "HTML page: the limit or the cursor is not valid"),
        (status = 403, description = "HTML page: the role may not read challenges")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn approvals_page(
    State(ctx): State<SharedContext>,
    PageQuery(query): PageQuery<Paged>,
    Person(principal): Person,
) -> PageResult {
    let principal = &principal;
    Ok(queue(&ctx, principal, query).await?)
}

async fn queue(ctx: &Context, principal: &Principal, query: Paged) -> Result<Response, ApiError> {
    person_requires(principal, Need::ChallengesRead)?;
    let (workspace_id, _) = principal.membership()?;
    let (cursor, limit) = (query.cursor(), query.limit());
    let done = decision_notice(query.done());
    let page_rows = crate::http::page_limit(limit, PAGE_ROWS, 200)?;
    let after = crate::http::page_cursor(cursor.as_deref())?;
    let mut pending = approvals::list(
        ctx,
        &workspace_id,
        Some("pending"),
        None,
        None,
        QUEUE_ROWS + 1,
    )
    .await?;
    let more_pending = crate::http::next_cursor(&mut pending, QUEUE_ROWS, created_key).is_some();
    let mut decided = approvals::history(ctx, &workspace_id, after, page_rows + 1).await?;
    let next = crate::http::next_cursor(&mut decided, page_rows, created_key);
    let shell = shell(ctx, principal, Section::Approvals).await?;
    let base = shell.base.clone();
    let agent_href = |c: &PolicyChallengeInfo| format!("{base}/dashboard/agents/{}", c.agent_id);
    let now = now_ms();
    let pending = pending
        .into_iter()
        .map(|c| PendingRow {
            agent: challenge::agent_label(&c.summary, &c.agent_id),
            agent_href: agent_href(&c),
            request: challenge::summary_lines(&c.summary),
            time_left: time_left(parse_iso(&c.expires_at).unwrap_or(now), now),
            decide_href: format!("{base}/dashboard/approvals/{}", c.challenge_id),
            id: c.challenge_id,
            action: c.action,
            reasons: c.reasons,
            expires_at: c.expires_at,
            created_at: c.created_at,
        })
        .collect();
    let history = decided
        .into_iter()
        .map(|c| DecidedRow {
            href: format!("{base}/dashboard/approvals/{}", c.challenge_id),
            agent: challenge::agent_label(&c.summary, &c.agent_id),
            agent_href: agent_href(&c),
            request: challenge::summary_lines(&c.summary)
                .into_iter()
                .map(|(label, value)| format!("{label}: {value}"))
                .collect::<Vec<_>>()
                .join("; "),
            action: c.action,
            status: c.status,
            decided_at: c.decided_at.unwrap_or_default(),
            decided_by: c.decided_by_name.or(c.decided_by).unwrap_or_default(),
            created_at: c.created_at,
        })
        .collect();
    let limit_kept = limit.filter(|l| *l != PAGE_ROWS);
    Ok(render(&ApprovalsPage {
        can_decide: person_requires(principal, Need::ChallengesDecide).is_ok(),
        pending,
        more_pending,
        history,
        first_href: cursor.map(|_| href(&base, None, limit_kept)),
        next_href: next.map(|c| href(&base, Some(&c), limit_kept)),
        done,
        shell,
    }))
}

#[derive(Template)]
#[template(path = "challenge.html", config = "src/http/templates/askama.toml")]
struct ChallengePage {
    shell: Shell,
    /// Whether the role may approve and deny, shown only while the challenge is pending.
    can_decide: bool,
    c: PolicyChallengeInfo,
    agent: String,
    agent_href: String,
    policy_href: String,
    /// The audit trail's events of the challenge's trace (its decision, its approval).
    trace_href: String,
    request: Vec<(String, String)>,
    time_left: String,
    decide_href: String,
}

/// One policy challenge: what was asked (the agent, the action, the policy, the values the
/// deciding rules read, the reasons), its status and who decided it when, with approve and deny
/// while it is pending (for the roles that decide), and a link to the audit events of its
/// trace.
#[utoipa::path(get, path = "/dashboard/approvals/{challenge_id}", tag = "dashboard",
    params(("challenge_id" = String, Path)),
    responses((status = 200, description = "HTML page of the challenge"), NotLoggedIn,
        (status = 403, description = "HTML page: the role may not read challenges"),
        (status = 404, description = "HTML page: `unknown_challenge`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn challenge_page(
    State(ctx): State<SharedContext>,
    Path(challenge_id): Path<String>,
    Person(principal): Person,
) -> PageResult {
    Ok(one_challenge(&ctx, &principal, &challenge_id).await?)
}

async fn one_challenge(
    ctx: &Context,
    principal: &Principal,
    challenge_id: &str,
) -> Result<Response, ApiError> {
    person_requires(principal, Need::ChallengesRead)?;
    let (workspace_id, _) = principal.membership()?;
    let c = approvals::status(ctx, &workspace_id, &approvals::challenge_id(challenge_id)?).await?;
    let shell = shell(ctx, principal, Section::Approvals).await?;
    let base = shell.base.clone();
    let now = now_ms();
    let mut trace = form_urlencoded::Serializer::new(String::new());
    trace.append_pair("trace_id", &c.trace_id);
    Ok(render(&ChallengePage {
        can_decide: c.status == "pending"
            && person_requires(principal, Need::ChallengesDecide).is_ok(),
        agent: challenge::agent_label(&c.summary, &c.agent_id),
        agent_href: format!("{base}/dashboard/agents/{}", c.agent_id),
        policy_href: format!("{base}/dashboard/policies/{}", c.policy_id),
        trace_href: format!("{base}/dashboard/audit?{}", trace.finish()),
        request: challenge::summary_lines(&c.summary),
        time_left: time_left(parse_iso(&c.expires_at).unwrap_or(now), now),
        decide_href: format!("{base}/dashboard/approvals/{}", c.challenge_id),
        c,
        shell,
    }))
}

/// The listing's order: creation time, then id.
fn created_key(c: &PolicyChallengeInfo) -> (i64, String) {
    (
        parse_iso(&c.created_at).unwrap_or_default(),
        c.challenge_id.clone(),
    )
}

/// Approves or denies a pending challenge (a form: `csrf`, `decision` — `approve` or `deny` —
/// and an optional `reason`), audited with the person as actor, then back to the queue.
#[utoipa::path(post, path = "/dashboard/approvals/{challenge_id}", tag = "dashboard",
    params(("challenge_id" = String, Path)),
    request_body(content = String, content_type = "application/x-www-form-urlencoded", description = "`csrf` (the session's token), `decision` (`approve` or `deny`) and an optional `reason`"),
    responses((status = 303, description = "decided: to /dashboard/approvals (or not logged in: to /login)"),
        (status = 400, description = "HTML page: `missing_decision`, `invalid_decision`, `invalid_reason`"),
        (status = 403, description = "HTML page: `csrf_failed`, or the role may not decide"),
        (status = 404, description = "HTML page: `unknown_challenge`"),
        (status = 409, description = "HTML page: `challenge_already_decided`"),
        (status = 410, description = "HTML page: `challenge_expired`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn decide(
    State(ctx): State<SharedContext>,
    Path(challenge_id): Path<String>,
    posted: Posted<DecisionForm>,
) -> PageResult {
    let principal = &posted.person;
    let form = &posted.form;
    let decision = form.decision.as_deref().unwrap_or("");
    Ok(decide_challenge(
        &ctx,
        principal,
        &challenge_id,
        decision,
        form.reason.as_deref(),
    )
    .await?)
}

/// The decision form: `approve` or `deny`, and the reason.
#[derive(Deserialize)]
pub struct DecisionForm {
    decision: Option<String>,
    reason: Option<String>,
}

async fn decide_challenge(
    ctx: &Context,
    principal: &Principal,
    challenge_id: &str,
    decision: &str,
    reason: Option<&str>,
) -> Result<Response, ApiError> {
    approvals::decide_by_id(ctx, principal, challenge_id, decision, reason).await?;
    Ok(see_other(format!(
        "{}/dashboard/approvals?done={decision}",
        base(ctx)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_left_reads_as_words() {
        let now = 1_000_000_000;
        assert_eq!(time_left(now + 30_000, now), "less than a minute");
        assert_eq!(time_left(now - 1, now), "less than a minute");
        assert_eq!(time_left(now + 14 * 60_000, now), "14 min");
        assert_eq!(time_left(now + 125 * 60_000, now), "2 h 5 min");
        assert_eq!(time_left(now + 3 * 24 * 3_600_000, now), "3 days");
    }

    #[test]
    fn history_links_keep_the_limit() {
        assert_eq!(href("", None, None), "/dashboard/approvals");
        assert_eq!(
            href("/acp", Some("c1"), Some(5)),
            "/acp/dashboard/approvals?limit=5&cursor=c1#history"
        );
        assert!(decision_notice("approve").is_some() && decision_notice("maybe").is_none());
    }
}
