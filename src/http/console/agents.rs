//! The console's agents: the list with its filters, an agent's page (its latency chart,
//! timeline, credentials and leases), the status moves with their confirmation, and claiming an
//! agent into the workspace.

use askama::Template;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue};
use axum::response::Response;
use serde::Deserialize;

use crate::api;
use crate::audit::summary;
use crate::context::{Context, SharedContext};
use crate::domain::access::Need;
use crate::domain::{AgentStatus, RiskTier};
use crate::error::ApiError;
use crate::identity::accounts::Principal;
use crate::identity::agents::{self, StatusAction};
use crate::store::AgentQuery;
use crate::telemetry::{heartbeats, inventory};
use crate::time::{iso, now_ms};

use super::extract::{NotLoggedIn, Nothing, PageQuery, PageResult, Paged, Person, Posted};
use super::{
    base, options, see_other, shell, Section, SelectOption, Shell, PAGE_ROWS, RECENT_ROWS,
};
use crate::http::operator::person_requires;
use crate::http::pages::render;

/// Heartbeats drawn in an agent's latency chart (the table lists the newest [`RECENT_ROWS`]).
const CHARTED_HEARTBEATS: i64 = 60;

// ---- agents -----------------------------------------------------------------------------------

/// The filters of the agents page, as typed (empty when not set).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct AgentFilters {
    q: String,
    status: String,
    risk_tier: String,
    label: String,
    group: String,
    seen: String,
}

impl AgentFilters {
    /// The filters with their blanks around them gone.
    fn trimmed(self) -> Self {
        let trim = |s: String| s.trim().to_owned();
        Self {
            q: trim(self.q),
            status: trim(self.status),
            risk_tier: trim(self.risk_tier),
            label: trim(self.label),
            group: trim(self.group),
            seen: trim(self.seen),
        }
    }

    fn is_set(&self) -> bool {
        !(self.q.is_empty()
            && self.status.is_empty()
            && self.risk_tier.is_empty()
            && self.label.is_empty()
            && self.group.is_empty()
            && self.seen.is_empty())
    }

    /// The page's URL with these filters, and a cursor and limit if given.
    fn href(&self, base: &str, cursor: Option<&str>, limit: Option<i64>) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        for (name, value) in [
            ("q", self.q.as_str()),
            ("status", self.status.as_str()),
            ("risk_tier", self.risk_tier.as_str()),
            ("label", self.label.as_str()),
            ("group", self.group.as_str()),
            ("seen", self.seen.as_str()),
        ] {
            if !value.is_empty() {
                query.append_pair(name, value);
            }
        }
        if let Some(limit) = limit {
            query.append_pair("limit", &limit.to_string());
        }
        if let Some(cursor) = cursor {
            query.append_pair("cursor", cursor);
        }
        let query = query.finish();
        if query.is_empty() {
            format!("{base}/dashboard/agents")
        } else {
            format!("{base}/dashboard/agents?{query}")
        }
    }
}

/// An option of a `<select>` whose value and words may differ, and need not be static.
struct NamedOption {
    value: String,
    label: String,
    selected: bool,
}

#[derive(Template)]
#[template(path = "agents.html", config = "src/http/templates/askama.toml")]
struct AgentsPage {
    shell: Shell,
    filters: AgentFilters,
    filtered: bool,
    status_options: Vec<SelectOption>,
    risk_options: Vec<SelectOption>,
    group_options: Vec<NamedOption>,
    seen_options: Vec<NamedOption>,
    agents: Vec<AgentRow>,
    first_href: Option<String>,
    next_href: Option<String>,
    done: Option<&'static str>,
}

struct AgentRow {
    href: String,
    id: String,
    name: String,
    status: &'static str,
    risk_tier: &'static str,
    attested: &'static str,
    last_seen: String,
    created: String,
}

/// The workspace's agents, newest first, paged by cursor, with filters: `q` (the id, or part
/// of the name), `status`, `risk_tier` and `label` (as the inventory matches labels).
#[utoipa::path(get, path = "/dashboard/agents", tag = "dashboard",
    params(("q" = Option<String>, Query, description = "an agent id, or part of a name (case-insensitive for ASCII letters)"),
        ("status" = Option<String>, Query, description = "`pending`, `active`, `suspended` or `revoked`"),
        ("risk_tier" = Option<String>, Query, description = "`low`, `medium` or `high`"),
        ("label" = Option<String>, Query, description = "an inventory label, or `key=value`"),
        ("limit" = Option<i64>, Query, description = "1 to 200, default 25"),
        ("cursor" = Option<String>, Query, description = "the next page's cursor")),
    responses((status = 200, description = "HTML list of agents"), NotLoggedIn,
        (status = 400, description = "HTML page: a filter, the limit or the cursor is not valid"),
        (status = 403, description = "HTML page: the role may not read agents")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn agents_page(
    State(ctx): State<SharedContext>,
    PageQuery(query): PageQuery<Paged<AgentFilters>>,
    Person(principal): Person,
) -> PageResult {
    let principal = &principal;
    Ok(agents_list(&ctx, principal, query).await?)
}

async fn agents_list(
    ctx: &Context,
    principal: &Principal,
    query: Paged<AgentFilters>,
) -> Result<Response, ApiError> {
    person_requires(principal, Need::AgentsRead)?;
    let (workspace_id, _) = principal.membership()?;
    let (cursor, limit) = (query.cursor(), query.limit());
    let done = (query.done() == "reject").then_some(CLAIM_REJECTED);
    let filters = query.filters.trimmed();
    let status = match filters.status.as_str() {
        "" => None,
        s => Some(AgentStatus::parse(s).ok_or_else(|| {
            ApiError::invalid(
                "status",
                "must be `pending`, `active`, `suspended` or `revoked`",
            )
        })?),
    };
    let risk_tier =
        match filters.risk_tier.as_str() {
            "" => None,
            t => Some(RiskTier::parse(t).ok_or_else(|| {
                ApiError::invalid("risk_tier", "must be `low`, `medium` or `high`")
            })?),
        };
    if [&filters.q, &filters.label, &filters.group]
        .iter()
        .any(|f| f.chars().count() > 200)
    {
        return Err(ApiError::invalid("q", "filters are at most 200 characters"));
    }
    let last_seen = match filters.seen.as_str() {
        "" => None,
        seen => Some(agents::last_seen(seen, now_ms())?),
    };
    let groups = agents::group_names(ctx, &workspace_id).await?;
    let group = match filters.group.as_str() {
        "" => None,
        name => Some(agents::group_members(ctx, &workspace_id, name).await?),
    };
    let page_rows = crate::http::page_limit(limit, PAGE_ROWS, 200)?;
    let after = crate::http::page_cursor(cursor.as_deref())?;
    let query = AgentQuery {
        workspace_id,
        status,
        risk_tier,
        search: Some(filters.q.clone()).filter(|q| !q.is_empty()),
        // As the inventory matches labels (`GET /v1/workspace/agents?label=`).
        label: Some(filters.label.clone()).filter(|l| !l.is_empty()),
        group,
        last_seen,
        after,
        limit: page_rows + 1,
        ..AgentQuery::default()
    };
    let mut rows = agents::list(ctx, &query).await?;
    let next = crate::http::next_cursor(&mut rows, page_rows, |a| (a.created_at, a.id.clone()));
    let shell = shell(ctx, principal, Section::Agents).await?;
    let base = shell.base.clone();
    let agents = rows
        .into_iter()
        .map(|a| AgentRow {
            href: format!("{base}/dashboard/agents/{}", a.id),
            status: a.status.as_str(),
            risk_tier: a.risk_tier.as_str(),
            attested: if a.attested_at.is_some() { "yes" } else { "no" },
            last_seen: a.last_seen_at.map_or_else(|| "never".into(), iso),
            created: iso(a.created_at),
            id: a.id,
            name: a.name,
        })
        .collect();
    let limit_kept = limit.filter(|l| *l != PAGE_ROWS);
    Ok(render(&AgentsPage {
        first_href: cursor
            .filter(|c| !c.is_empty())
            .map(|_| filters.href(&base, None, limit_kept)),
        next_href: next.map(|c| filters.href(&base, Some(&c), limit_kept)),
        filtered: filters.is_set(),
        status_options: options(
            &["pending", "active", "suspended", "revoked"],
            &filters.status,
        ),
        risk_options: options(&["low", "medium", "high"], &filters.risk_tier),
        group_options: groups
            .into_iter()
            .map(|name| NamedOption {
                selected: name == filters.group,
                label: name.clone(),
                value: name,
            })
            .collect(),
        seen_options: agents::SEEN_WINDOWS
            .iter()
            .map(|(value, label)| NamedOption {
                value: (*value).to_owned(),
                label: (*label).to_owned(),
                selected: *value == filters.seen,
            })
            .collect(),
        done,
        filters,
        agents,
        shell,
    }))
}

#[derive(Template)]
#[template(path = "agent.html", config = "src/http/templates/askama.toml")]
struct AgentPage {
    shell: Shell,
    agent: api::Agent,
    metadata: String,
    labels: Vec<String>,
    heartbeats: Vec<api::Heartbeat>,
    latency: Option<LatencyChart>,
    /// `None` when the role may not read the audit trail.
    events: Option<Vec<api::AuditEvent>>,
    actions: Vec<ActionLink>,
    done: Option<&'static str>,
    /// Its active credentials and live vault leases (`credentials_agent.html`).
    holdings: super::credentials::AgentHoldings,
}

/// An agent's heartbeat latencies over time, oldest on the left, as an SVG polyline in a
/// 240 by 60 `viewBox` (see [`latency_chart`]).
struct LatencyChart {
    points: String,
    /// The last point, marked with a dot.
    last_x: i64,
    last_y: i64,
    summary: String,
}

/// The latency chart of an agent's recent heartbeats, in the order they were observed; `None`
/// without any.
fn latency_chart(heartbeats: &[api::Heartbeat]) -> Option<LatencyChart> {
    let mut observed: Vec<&api::Heartbeat> = heartbeats.iter().collect();
    // The same ISO 8601 form (UTC, milliseconds) for every timestamp: text order is time order.
    observed.sort_by(|a, b| a.observed_at.cmp(&b.observed_at));
    let (first, latest) = (*observed.first()?, *observed.last()?);
    let latencies = observed.iter().map(|h| h.latency_ms);
    let highest = latencies.clone().fold(0.0_f64, f64::max);
    let lowest = latencies.fold(f64::INFINITY, f64::min);
    let n = observed.len();
    // x across the width (one heartbeat alone sits at the right edge), y from the bottom (4
    // units of margin at the top), in whole units: the chart is small.
    let step = if n > 1 { 240.0 / (n - 1) as f64 } else { 0.0 };
    let placed: Vec<(i64, i64)> = observed
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let x = if n > 1 { i as f64 * step } else { 240.0 };
            let y = if highest > 0.0 {
                60.0 - h.latency_ms / highest * 56.0
            } else {
                60.0
            };
            (x.round() as i64, y.round() as i64)
        })
        .collect();
    let (last_x, last_y) = placed.last().copied().unwrap_or((240, 60));
    Some(LatencyChart {
        points: placed
            .iter()
            .map(|(x, y)| format!("{x},{y}"))
            .collect::<Vec<_>>()
            .join(" "),
        last_x,
        last_y,
        summary: format!(
            "{n} heartbeats from {} to {}: latency from {lowest} to {highest} ms, last {} ms",
            first.observed_at, latest.observed_at, latest.latency_ms
        ),
    })
}

struct ActionLink {
    href: String,
    verb: &'static str,
    label: &'static str,
    danger: bool,
}

/// What an action on an agent's page is, says and does.
struct AgentAction {
    action: StatusAction,
    verb: &'static str,
    label: &'static str,
    consequence: &'static str,
    done: &'static str,
    danger: bool,
}

const ACTIONS: [AgentAction; 4] = [
    AgentAction {
        action: StatusAction::Approve,
        verb: "approve",
        label: "Approve",
        consequence: "You vouch for this pending agent without its attestation: it becomes active and its signed requests are accepted.",
        done: "Agent approved: it is active.",
        danger: false,
    },
    AgentAction {
        action: StatusAction::Suspend,
        verb: "suspend",
        label: "Suspend",
        consequence: "Its signed requests fail with `agent_not_active` until it is resumed.",
        done: "Agent suspended.",
        danger: false,
    },
    AgentAction {
        action: StatusAction::Resume,
        verb: "resume",
        label: "Resume",
        consequence: "It goes back to active (or pending, if it never attested) and its signed requests are accepted again.",
        done: "Agent resumed.",
        danger: false,
    },
    AgentAction {
        action: StatusAction::Revoke,
        verb: "revoke",
        label: "Revoke",
        consequence: "Revoking is for good: its signed requests fail from now on and it cannot be resumed.",
        done: "Agent revoked.",
        danger: true,
    },
];

fn action_named(verb: &str) -> Result<&'static AgentAction, ApiError> {
    ACTIONS
        .iter()
        .find(|a| a.verb == verb)
        .ok_or_else(|| ApiError::not_found("not_found", "no such action on agents"))
}

/// The actions that change an agent in `status`.
fn actions_for(status: &str) -> impl Iterator<Item = &'static AgentAction> {
    let verbs: &[&str] = match status {
        "pending" => &["approve", "suspend", "revoke"],
        "active" => &["suspend", "revoke"],
        "suspended" => &["resume", "revoke"],
        _ => &[],
    };
    ACTIONS.iter().filter(move |a| verbs.contains(&a.verb))
}

/// One agent: its identity, labels, recent heartbeats and audit events, and (for roles that may
/// change agents) its actions.
#[utoipa::path(get, path = "/dashboard/agents/{agent_id}", tag = "dashboard",
    params(("agent_id" = String, Path), ("done" = Option<String>, Query, description = "the action just done, for its notice")),
    responses((status = 200, description = "HTML page of the agent"), NotLoggedIn,
        (status = 403, description = "HTML page: the role may not read agents"), (status = 404, description = "HTML page: `unknown_agent`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn agent_page(
    State(ctx): State<SharedContext>,
    Path(agent_id): Path<String>,
    PageQuery(query): PageQuery<DoneQuery>,
    Person(principal): Person,
) -> PageResult {
    let done = query.done.as_deref().and_then(|verb| match verb {
        "claim" => Some(CLAIMED),
        verb => action_named(verb).ok().map(|a| a.done),
    });
    Ok(agent_detail(&ctx, &principal, &agent_id, done).await?)
}

/// A page's query after a change: `done`, the change just made, for its notice.
#[derive(Deserialize)]
pub struct DoneQuery {
    done: Option<String>,
}

async fn agent_detail(
    ctx: &Context,
    principal: &Principal,
    agent_id: &str,
    done: Option<&'static str>,
) -> Result<Response, ApiError> {
    person_requires(principal, Need::AgentsRead)?;
    let (workspace_id, _) = principal.membership()?;
    let agent_id = agents::agent_id(agent_id)?;
    let agent = agents::to_wire(agents::agent_in_workspace(ctx, &workspace_id, &agent_id).await?);
    let labels = inventory::agent_labels(ctx, &workspace_id, &agent.agent_id).await?;
    let mut heartbeats = heartbeats::recent(
        ctx,
        &workspace_id,
        Some(&agent.agent_id),
        CHARTED_HEARTBEATS,
    )
    .await?
    .items;
    let latency = latency_chart(&heartbeats);
    heartbeats.truncate(usize::try_from(RECENT_ROWS).unwrap_or(0));
    let events = match person_requires(principal, Need::AuditRead) {
        Ok(()) => {
            Some(summary::recent_for_agent(ctx, &workspace_id, &agent.agent_id, RECENT_ROWS).await?)
        }
        Err(_) => None,
    };
    let shell = shell(ctx, principal, Section::Agents).await?;
    let holdings = super::credentials::agent_holdings(
        ctx,
        principal,
        &workspace_id,
        &agent.agent_id,
        &shell.base,
    )
    .await?;
    let actions = if shell.can_change_agents {
        actions_for(&agent.status)
            .map(|a| ActionLink {
                href: format!(
                    "{}/dashboard/agents/{}/{}",
                    shell.base, agent.agent_id, a.verb
                ),
                verb: a.verb,
                label: a.label,
                danger: a.danger,
            })
            .collect()
    } else {
        Vec::new()
    };
    Ok(render(&AgentPage {
        metadata: serde_json::to_string_pretty(&agent.metadata).unwrap_or_default(),
        agent,
        labels,
        heartbeats,
        latency,
        events,
        actions,
        done,
        holdings,
        shell,
    }))
}

#[derive(Template)]
#[template(path = "confirm.html", config = "src/http/templates/askama.toml")]
struct ConfirmPage {
    shell: Shell,
    label: &'static str,
    consequence: &'static str,
    danger: bool,
    agent_name: String,
    agent_href: String,
    action_href: String,
}

/// The confirmation step of an action on an agent: what it does, a reason, and the form that
/// does it. Only roles that may change agents get it.
#[utoipa::path(get, path = "/dashboard/agents/{agent_id}/{action}", tag = "dashboard",
    params(("agent_id" = String, Path), ("action" = String, Path, description = "`suspend`, `resume`, `revoke` or `approve`")),
    responses((status = 200, description = "HTML confirmation form"), NotLoggedIn,
        (status = 403, description = "HTML page: the role may not change agents"),
        (status = 404, description = "HTML page: `unknown_agent`, or no such action")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn confirm_agent_action(
    State(ctx): State<SharedContext>,
    Path((agent_id, verb)): Path<(String, String)>,
    _query: PageQuery<Nothing>,
    Person(principal): Person,
) -> PageResult {
    Ok(confirm_page(&ctx, &principal, &agent_id, &verb).await?)
}

async fn confirm_page(
    ctx: &Context,
    principal: &Principal,
    agent_id: &str,
    verb: &str,
) -> Result<Response, ApiError> {
    person_requires(principal, Need::AgentsChange)?;
    let action = action_named(verb)?;
    let (workspace_id, _) = principal.membership()?;
    let agent =
        agents::agent_in_workspace(ctx, &workspace_id, &agents::agent_id(agent_id)?).await?;
    let shell = shell(ctx, principal, Section::Agents).await?;
    let agent_href = format!("{}/dashboard/agents/{}", shell.base, agent.id);
    Ok(render(&ConfirmPage {
        label: action.label,
        consequence: action.consequence,
        danger: action.danger,
        agent_name: agent.name,
        action_href: format!("{agent_href}/{}", action.verb),
        agent_href,
        shell,
    }))
}

/// Does an action on an agent (a form: `csrf`, optional `reason`), audited with the person as
/// actor, then back to the agent's page.
#[utoipa::path(post, path = "/dashboard/agents/{agent_id}/{action}", tag = "dashboard",
    params(("agent_id" = String, Path), ("action" = String, Path, description = "`suspend`, `resume`, `revoke` or `approve`")),
    request_body(content = String, content_type = "application/x-www-form-urlencoded", description = "`csrf` (the session's token) and an optional `reason`"),
    responses((status = 303, description = "done: to the agent's page (or not logged in: to /login)"),
        (status = 400, description = "HTML page: `invalid_reason`"),
        (status = 403, description = "HTML page: `csrf_failed`, or the role may not change agents"),
        (status = 404, description = "HTML page: `unknown_agent`, or no such action"),
        (status = 409, description = "HTML page: `invalid_status_transition`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn agent_action(
    State(ctx): State<SharedContext>,
    Path((agent_id, verb)): Path<(String, String)>,
    posted: Posted<ActionForm>,
) -> PageResult {
    let principal = &posted.person;
    Ok(act(
        &ctx,
        principal,
        &agent_id,
        &verb,
        posted.form.reason.as_deref(),
    )
    .await?)
}

/// The form of a status move: the reason, recorded with it.
#[derive(Deserialize)]
pub struct ActionForm {
    reason: Option<String>,
}

async fn act(
    ctx: &Context,
    principal: &Principal,
    agent_id: &str,
    verb: &str,
    reason: Option<&str>,
) -> Result<Response, ApiError> {
    person_requires(principal, Need::AgentsChange)?;
    let action = action_named(verb)?;
    let (workspace_id, _) = principal.membership()?;
    let reason = agents::StatusReason::parse(
        reason
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(str::to_owned),
    )?;
    let agent = agents::set_status(
        ctx,
        &workspace_id,
        &agents::agent_id(agent_id)?,
        action.action,
        reason,
        &principal.actor(),
    )
    .await?;
    Ok(see_other(format!(
        "{}/dashboard/agents/{}?done={}",
        base(ctx),
        agent.agent_id,
        action.verb
    )))
}

// ---- claiming an agent ------------------------------------------------------------------------

const CLAIMED: &str = "Agent claimed into this workspace.";
const CLAIM_REJECTED: &str = "Claim rejected: the link is used up and the agent stays out.";

/// The claim code in what was pasted: the code itself, or a claim link ending in it.
fn claim_code_of(pasted: &str) -> &str {
    let pasted = pasted.trim();
    let path = pasted.split(['?', '#']).next().unwrap_or(pasted);
    path.trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or(path)
}

#[derive(Template)]
#[template(path = "agent_claim.html", config = "src/http/templates/askama.toml")]
struct ClaimPage {
    shell: Shell,
    code: String,
    agent: api::Agent,
    metadata: String,
    expires_at: String,
    status: String,
    pending: bool,
}

/// Claiming an agent that registered without a workspace, from its claim link (a form: `csrf`,
/// `code` — the link or its code — and `decision`). Without a decision the page shows the agent
/// and asks; `claim` brings it into the selected workspace and opens its page, `reject` uses
/// the link up. The code travels in the form's body, never in a URL. Owners and admins only.
#[utoipa::path(post, path = "/dashboard/agents/claim", tag = "dashboard",
    request_body(content = String, content_type = "application/x-www-form-urlencoded", description = "`csrf`, `code` (the claim link or its code) and an optional `decision` (`claim` or `reject`)"),
    responses((status = 200, description = "HTML page: the agent asking to join, with Claim and Reject"),
        (status = 303, description = "claimed: to the agent's page; rejected: to the agents list (or not logged in: to /login)"),
        (status = 400, description = "HTML page: `invalid_decision`"),
        (status = 403, description = "HTML page: `csrf_failed`, or the role may not change agents"),
        (status = 404, description = "HTML page: `unknown_claim_code`"),
        (status = 409, description = "HTML page: `claim_code_used`"), (status = 410, description = "HTML page: `claim_code_expired`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn claim_agent(
    State(ctx): State<SharedContext>,
    posted: Posted<ClaimForm>,
) -> PageResult {
    let (principal, form) = (&posted.person, &posted.form);
    let code = claim_code_of(form.code.as_deref().unwrap_or_default());
    Ok(match form.decision.as_deref() {
        None | Some("") => claim_page(&ctx, principal, code).await?,
        Some(decision) => claim(&ctx, principal, code, decision).await?,
    })
}

/// The claim form: the claim link or its code, and the decision once the agent was shown.
#[derive(Deserialize)]
pub struct ClaimForm {
    code: Option<String>,
    decision: Option<String>,
}

async fn claim_page(
    ctx: &Context,
    principal: &Principal,
    code: &str,
) -> Result<Response, ApiError> {
    person_requires(principal, Need::AgentsChange)?;
    principal.admin_of()?;
    let info = agents::claim_info(ctx, code).await?;
    let shell = shell(ctx, principal, Section::Agents).await?;
    let mut response = render(&ClaimPage {
        shell,
        code: code.to_owned(),
        metadata: serde_json::to_string_pretty(&info.agent.metadata).unwrap_or_default(),
        agent: info.agent,
        expires_at: info.expires_at,
        pending: info.status == "pending",
        status: info.status,
    });
    // The page carries the code in its form: not for caches.
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

async fn claim(
    ctx: &Context,
    principal: &Principal,
    code: &str,
    decision: &str,
) -> Result<Response, ApiError> {
    person_requires(principal, Need::AgentsChange)?;
    let agent = agents::redeem_claim(ctx, principal, code, decision).await?;
    Ok(see_other(if decision == "claim" {
        format!(
            "{}/dashboard/agents/{}?done=claim",
            base(ctx),
            agent.agent_id
        )
    } else {
        format!("{}/dashboard/agents?done=reject", base(ctx))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_make_links_that_keep_them() {
        let filters = AgentFilters {
            q: "a&b c".into(),
            status: "active".into(),
            risk_tier: String::new(),
            label: "env=prod".into(),
            group: "finance".into(),
            seen: "stale".into(),
        };
        assert_eq!(
            filters.href("/acp", Some("abc"), Some(10)),
            "/acp/dashboard/agents?q=a%26b+c&status=active&label=env%3Dprod&group=finance&seen=stale&limit=10&cursor=abc"
        );
        assert_eq!(
            AgentFilters::default().href("", None, None),
            "/dashboard/agents"
        );
        assert!(!AgentFilters::default().is_set() && filters.is_set());
    }

    #[test]
    fn a_claim_link_or_its_code_gives_the_code() {
        for pasted in [
            "clm_abc",
            "  clm_abc\n",
            "https://acp.example/v1/agent-approval/clm_abc",
            "https://acp.example/v1/agent-approval/clm_abc/",
            "http://127.0.0.1:8080/base/v1/agent-approval/clm_abc?x=1#y",
        ] {
            assert_eq!(claim_code_of(pasted), "clm_abc", "{pasted}");
        }
        assert_eq!(claim_code_of(""), "");
    }

    #[test]
    fn each_status_offers_the_moves_it_allows() {
        let verbs = |s: &str| actions_for(s).map(|a| a.verb).collect::<Vec<_>>();
        assert_eq!(verbs("pending"), ["approve", "suspend", "revoke"]);
        assert_eq!(verbs("active"), ["suspend", "revoke"]);
        assert_eq!(verbs("suspended"), ["resume", "revoke"]);
        assert!(verbs("revoked").is_empty());
        assert!(action_named("delete").is_err());
    }
}
