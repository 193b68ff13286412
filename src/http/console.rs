//! The console: the pages people run the control plane from, behind their session cookie.
//!
//! Every page shares one shell (`console.html`): the navigation (only the sections the
//! person's role may read), the workspace switcher and the person's role. Pages call the same
//! use cases as the API, and the server checks the role on every request with
//! [`person_requires`], the rule `Authorized<needs::X>` applies to the API; a refusal is a page
//! with the refusal's status (403 for a role that may not).
//!
//! Changes are plain HTML forms posted with the session cookie. A form carries the session's
//! CSRF token in a hidden `csrf` field; the server reads it as the `X-CSRF-Token` header and
//! applies [`super::session::csrf_refusal`] as for any cookie request (a cross-site request is
//! refused, token or not). Every change is audited by its use case with the person as actor.

use askama::Template;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

use crate::api;
use crate::audit::summary::{self, DecisionCounts};
use crate::context::{Context, SharedContext};
use crate::domain::access::Need;
use crate::domain::FieldError;
use crate::domain::{AgentStatus, RiskTier};
use crate::enforce::{approvals, credentials};
use crate::error::ApiError;
use crate::identity::accounts::{self, Principal};
use crate::identity::agents::{self, StatusAction};
use crate::store::AgentQuery;
use crate::telemetry::{heartbeats, inventory};
use crate::time::{iso, now_ms};

use super::operator::person_requires;
use super::pages::{error_page, login_url, render};
use super::session::authenticate_user;

/// Rows of a list page unless `limit` says otherwise.
pub(super) const PAGE_ROWS: i64 = 25;
/// Heartbeats and audit events on an agent's page, and denials on the overview.
const RECENT_ROWS: i64 = 10;
/// Heartbeats drawn in an agent's latency chart (the table lists the newest [`RECENT_ROWS`]).
const CHARTED_HEARTBEATS: i64 = 60;
/// Pending approvals counted on the overview; more are shown as "100+".
const PENDING_COUNTED: i64 = 100;

/// What every console page shows around its content.
pub struct Shell {
    /// The path prefix the server runs under ("" at the root).
    pub(super) base: String,
    pub(super) email: String,
    pub(super) csrf: String,
    /// The person's role in the selected workspace.
    pub(super) role: &'static str,
    pub(super) has_selection: bool,
    pub(super) workspaces: Vec<WorkspaceRow>,
    pub(super) nav: Vec<NavItem>,
    /// Whether the role may suspend, resume, revoke and approve agents (the server checks
    /// again on every such request).
    pub(super) can_change_agents: bool,
    /// Whether the role may dry-run, apply and roll back policies (the server checks again on
    /// every such request).
    pub(super) can_sync_policies: bool,
}

pub(super) struct WorkspaceRow {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) role: &'static str,
    pub(super) selected: bool,
}

pub(super) struct NavItem {
    pub(super) href: String,
    pub(super) label: &'static str,
    pub(super) current: bool,
}

/// The sections of the navigation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Section {
    Overview,
    Agents,
    Policies,
    Approvals,
    Audit,
    Vault,
    Credentials,
    Workspace,
}

/// A section of the navigation: its label, path, what a role needs to read it (`None`: anyone
/// logged in), and the link back to it from an error page.
struct SectionInfo {
    section: Section,
    label: &'static str,
    path: &'static str,
    need: Option<Need>,
    back: &'static str,
}

const SECTIONS: [SectionInfo; 8] = [
    SectionInfo {
        section: Section::Overview,
        label: "Overview",
        path: "/dashboard",
        need: None,
        back: "Back to the overview",
    },
    SectionInfo {
        section: Section::Agents,
        label: "Agents",
        path: "/dashboard/agents",
        need: Some(Need::AgentsRead),
        back: "Back to agents",
    },
    SectionInfo {
        section: Section::Policies,
        label: "Policies",
        path: "/dashboard/policies",
        need: Some(Need::PoliciesRead),
        back: "Back to policies",
    },
    SectionInfo {
        section: Section::Approvals,
        label: "Approvals",
        path: "/dashboard/approvals",
        need: Some(Need::ChallengesRead),
        back: "Back to approvals",
    },
    SectionInfo {
        section: Section::Audit,
        label: "Audit",
        path: "/dashboard/audit",
        need: Some(Need::AuditRead),
        back: "Back to the audit trail",
    },
    SectionInfo {
        section: Section::Vault,
        label: "Vault",
        path: "/dashboard/vault",
        need: Some(Need::VaultRead),
        back: "Back to the vault",
    },
    SectionInfo {
        section: Section::Credentials,
        label: "Credentials",
        path: "/dashboard/credentials",
        need: Some(Need::KillSwitchRead),
        back: "Back to credentials",
    },
    SectionInfo {
        section: Section::Workspace,
        label: "Workspace",
        path: "/dashboard/settings",
        need: Some(Need::WorkspaceRead),
        back: "Back to the workspace",
    },
];

/// The section's entry (the overview's for a section not in the navigation).
fn section_info(section: Section) -> &'static SectionInfo {
    SECTIONS
        .iter()
        .find(|s| s.section == section)
        .unwrap_or(&SECTIONS[0])
}

pub(super) fn base(ctx: &Context) -> String {
    ctx.config.path_prefix.clone().unwrap_or_default()
}

pub(super) async fn shell(
    ctx: &Context,
    principal: &Principal,
    current: Section,
) -> Result<Shell, ApiError> {
    let memberships = ctx.store.memberships(&principal.user.id).await?;
    let active = principal.workspace_id.as_deref();
    let role = principal.membership().ok().map(|(_, role)| role);
    let base = base(ctx);
    let nav = SECTIONS
        .iter()
        .filter(|s| match s.need {
            None => true,
            Some(need) => person_requires(principal, need).is_ok(),
        })
        .map(|s| NavItem {
            href: format!("{base}{}", s.path),
            label: s.label,
            current: s.section == current,
        })
        .collect();
    Ok(Shell {
        email: principal.user.email.clone(),
        csrf: principal.csrf_token.clone().unwrap_or_default(),
        role: role.map_or("no workspace selected", |r| r.as_str()),
        has_selection: role.is_some(),
        workspaces: memberships
            .iter()
            .map(|m| WorkspaceRow {
                id: m.workspace.id.clone(),
                name: m.workspace.name.clone(),
                role: m.role.as_str(),
                selected: role.is_some() && active == Some(m.workspace.id.as_str()),
            })
            .collect(),
        nav,
        can_change_agents: person_requires(principal, Need::AgentsChange).is_ok(),
        can_sync_policies: person_requires(principal, Need::PolicySync).is_ok()
            && principal.admin_of().is_ok(),
        base,
    })
}

pub(super) fn see_other(location: String) -> Response {
    (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response()
}

/// The integer parameters of the pages that take a page size, and of the versions diff.
pub(super) const LIMIT: &[(&str, i64, i64)] = &[("limit", 1, 200)];
pub(super) const VERSIONS: &[(&str, i64, i64)] = &[("from", 1, i64::MAX), ("to", 1, i64::MAX)];

/// A page's query, checked as the API checks its parameters, before anything else (a bad
/// query is a 400 page whether or not the person is logged in): no NUL in a name or value, and
/// each of `ints` (name, least, most) a whole number within its bounds.
fn checked_query(
    ctx: &Context,
    query: Option<&str>,
    ints: &[(&'static str, i64, i64)],
) -> Option<Response> {
    for (name, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        if value.contains('\0') || name.contains('\0') {
            return Some(error_page(
                ctx,
                ApiError::bad_request(
                    "invalid_query",
                    "a query parameter must not contain NUL characters",
                ),
            ));
        }
        if let Some((field, low, high)) = ints.iter().find(|(n, _, _)| *n == name) {
            if !value
                .parse::<i64>()
                .is_ok_and(|n| (*low..=*high).contains(&n))
            {
                return Some(error_page(
                    ctx,
                    FieldError::invalid(
                        *field,
                        format!("must be a whole number from {low} to {high}"),
                    )
                    .into(),
                ));
            }
        }
    }
    None
}

/// The person behind a page's GET, after its query was checked (see [`checked_query`]).
pub(super) async fn page_person(
    ctx: &Context,
    headers: &HeaderMap,
    query: Option<&str>,
    ints: &[(&'static str, i64, i64)],
) -> Result<Principal, Response> {
    if let Some(refused) = checked_query(ctx, query, ints) {
        return Err(refused);
    }
    person(ctx, &Method::GET, headers).await
}

/// The person behind a console request, by session cookie (tokens and API keys open no
/// pages), or the answer to send instead: the login page without a session, an error page
/// for a refused request (a failed CSRF check).
pub(super) async fn person(
    ctx: &Context,
    method: &Method,
    headers: &HeaderMap,
) -> Result<Principal, Response> {
    match authenticate_user(ctx, method, headers, &Uri::default()).await {
        Ok(principal) if principal.session_hash.is_some() => Ok(principal),
        Ok(_) => Err(see_other(login_url(ctx))),
        Err(err) if err.status == StatusCode::UNAUTHORIZED => Err(see_other(login_url(ctx))),
        Err(err) => Err(error_page(ctx, err)),
    }
}

/// The person behind a form posted to the console and the form's fields. The form's `csrf`
/// field counts as the `X-CSRF-Token` header, so the cookie request passes the same CSRF
/// check as any other.
pub(super) async fn form_person(
    ctx: &Context,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(Principal, Vec<(String, String)>), Response> {
    let fields: Vec<(String, String)> = form_urlencoded::parse(body).into_owned().collect();
    let mut headers = headers.clone();
    if !headers.contains_key("x-csrf-token") {
        if let Some(token) = field(&fields, "csrf").and_then(|t| HeaderValue::from_str(t).ok()) {
            headers.insert("x-csrf-token", token);
        }
    }
    let principal = person(ctx, &Method::POST, &headers).await?;
    Ok((principal, fields))
}

/// A console form's answer: the person behind the POST (see [`form_person`]), then `act` with
/// the form's fields, its error shown as a page of `section` (see [`answer`]).
pub(super) async fn form_answer(
    ctx: &Context,
    headers: &HeaderMap,
    body: &[u8],
    section: Section,
    act: impl AsyncFnOnce(&Principal, Vec<(String, String)>) -> Result<Response, ApiError>,
) -> Response {
    let (principal, fields) = match form_person(ctx, headers, body).await {
        Ok(found) => found,
        Err(response) => return response,
    };
    let result = act(&principal, fields).await;
    answer(ctx, &principal, section, result).await
}

/// A console page's answer: the person behind the GET (see [`page_person`]), then `show`, its
/// error shown as a page of `section` (see [`answer`]).
pub(super) async fn page_answer(
    ctx: &Context,
    headers: &HeaderMap,
    query: Option<&str>,
    ints: &[(&'static str, i64, i64)],
    section: Section,
    show: impl AsyncFnOnce(&Principal) -> Result<Response, ApiError>,
) -> Response {
    let principal = match page_person(ctx, headers, query, ints).await {
        Ok(p) => p,
        Err(response) => return response,
    };
    let result = show(&principal).await;
    answer(ctx, &principal, section, result).await
}

pub(super) fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

#[derive(Template)]
#[template(path = "console_error.html", config = "src/http/templates/askama.toml")]
struct ConsoleError<'a> {
    shell: Shell,
    title: &'a str,
    code: &'a str,
    message: &'a str,
    back_href: String,
    back_label: &'a str,
}

/// The page's answer, or its error as a page inside the shell, with the error's status.
pub(super) async fn answer(
    ctx: &Context,
    principal: &Principal,
    section: Section,
    result: Result<Response, ApiError>,
) -> Response {
    let err = match result {
        Ok(response) => return response,
        Err(err) => err,
    };
    err.log_cause();
    let shell = match shell(ctx, principal, section).await {
        Ok(shell) => shell,
        Err(other) => return error_page(ctx, other),
    };
    let title = match err.status {
        StatusCode::FORBIDDEN => "Not allowed",
        StatusCode::NOT_FOUND => "Not found",
        _ => "That did not work",
    };
    let info = section_info(section);
    let (back_href, back_label) = (format!("{}{}", shell.base, info.path), info.back);
    let mut response = render(&ConsoleError {
        shell,
        title,
        code: &err.code,
        message: &err.message,
        back_href,
        back_label,
    });
    if response.status().is_success() {
        *response.status_mut() = err.status;
    }
    // For the access log line, as an API error's answer carries it.
    response
        .extensions_mut()
        .insert(crate::error::ErrorCode(err.code.clone()));
    response
}

// ---- the overview ---------------------------------------------------------------------------

#[derive(Template)]
#[template(path = "overview.html", config = "src/http/templates/askama.toml")]
struct OverviewPage {
    shell: Shell,
    /// The selected workspace's state, when one is selected.
    overview: Option<Overview>,
}

struct Overview {
    agents: Vec<StatusCount>,
    decisions: Vec<DecisionRow>,
    chart: Vec<ChartColumn>,
    /// True when the chart shows only the newest decisions read (the day held more).
    chart_partial: bool,
    pending_approvals: String,
    minting_paused: bool,
    minting_paused_reason: Option<String>,
    all_revoked_at: Option<String>,
    denials: Vec<DenialRow>,
    leaks: Vec<LeakRow>,
    api_keys: Vec<ApiKeyRow>,
}

/// One hour's column of the overview's decisions chart: its bars stacked from the bottom.
struct ChartColumn {
    title: String,
    bars: Vec<ChartBar>,
}

/// A bar in SVG user units (see [`CHART_HEIGHT`]).
struct ChartBar {
    x: i64,
    y: i64,
    width: i64,
    height: i64,
    outcome: &'static str,
}

struct LeakRow {
    created_at: String,
    event_href: String,
    agent_id: String,
    profile: String,
    host: String,
    /// What was scrubbed: `key in place (form)`, never the value.
    leaks: String,
}

struct StatusCount {
    status: &'static str,
    count: i64,
    href: String,
}

struct DecisionRow {
    outcome: &'static str,
    hour: String,
    day: String,
}

struct DenialRow {
    created_at: String,
    agent_id: String,
    agent_href: Option<String>,
    action: String,
    reasons: String,
}

struct ApiKeyRow {
    mode: String,
    last_four: String,
    name: String,
    created: String,
    last_used: String,
    state: &'static str,
}

/// The decisions chart's height and column width in SVG user units: 24 columns of 10, so the
/// template's `viewBox` is 240 by 60.
const CHART_HEIGHT: i64 = 60;
const COLUMN_WIDTH: i64 = 10;

/// The day's decisions hour by hour as stacked columns (allow at the bottom, then challenge,
/// then deny), scaled to the busiest hour. Drawn by the template as SVG: no script, no library.
fn decision_chart(hourly: &[DecisionCounts]) -> Vec<ChartColumn> {
    let total = |c: &DecisionCounts| c.allow + c.challenge + c.deny;
    let most = hourly.iter().map(total).max().unwrap_or(0).max(1);
    let hours = i64::try_from(hourly.len()).unwrap_or(0);
    (0_i64..)
        .zip(hourly)
        .map(|(i, counts)| {
            let ago = hours - 1 - i;
            let mut bottom = CHART_HEIGHT;
            let mut bars = Vec::new();
            for (outcome, n) in [
                ("allow", counts.allow),
                ("challenge", counts.challenge),
                ("deny", counts.deny),
            ] {
                // At least one unit, so that a single decision in a busy day still shows.
                let height = if n == 0 {
                    0
                } else {
                    (n * CHART_HEIGHT / most).max(1)
                };
                if height > 0 {
                    bottom -= height;
                    bars.push(ChartBar {
                        x: i * COLUMN_WIDTH + 1,
                        y: bottom,
                        width: COLUMN_WIDTH - 2,
                        height,
                        outcome,
                    });
                }
            }
            let when = match ago {
                0 => "the last hour".to_owned(),
                1 => "1 hour before".to_owned(),
                n => format!("{n} hours before"),
            };
            ChartColumn {
                title: format!(
                    "{when}: {} allow, {} challenge, {} deny",
                    counts.allow, counts.challenge, counts.deny
                ),
                bars,
            }
        })
        .collect()
}

/// `n`, or `n+` when the count is a lower bound.
fn count_text(n: i64, at_least: bool) -> String {
    if at_least {
        format!("{n}+")
    } else {
        n.to_string()
    }
}

/// A string field of an event's details, or "" when it has none.
fn detail_text(details: &serde_json::Value, name: &str) -> String {
    details
        .get(name)
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// A leak event's scrubbed places as `key in place (form)`, separated by `; `.
fn leaks_text(details: &serde_json::Value) -> String {
    details
        .get("leaks")
        .and_then(serde_json::Value::as_array)
        .map(|leaks| {
            leaks
                .iter()
                .map(|l| {
                    format!(
                        "{} in {} ({})",
                        detail_text(l, "key"),
                        detail_text(l, "place"),
                        detail_text(l, "form")
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        })
        .unwrap_or_default()
}

fn decision_rows(hour: DecisionCounts, day: DecisionCounts) -> Vec<DecisionRow> {
    let pick = |c: DecisionCounts, outcome: &str| match outcome {
        "allow" => c.allow,
        "deny" => c.deny,
        _ => c.challenge,
    };
    ["allow", "deny", "challenge"]
        .into_iter()
        .map(|outcome| DecisionRow {
            outcome,
            hour: count_text(pick(hour, outcome), hour.at_least),
            day: count_text(pick(day, outcome), day.at_least),
        })
        .collect()
}

/// The overview: the selected workspace's agents by status, its decisions by outcome over the
/// last hour and day, pending approvals, the kill switch, recent denials and API keys; and the
/// person's workspaces.
#[utoipa::path(get, path = "/dashboard", tag = "dashboard",
    responses((status = 200, description = "HTML overview"), (status = 303, description = "not logged in: to /login")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn dashboard(State(ctx): State<SharedContext>, headers: HeaderMap) -> Response {
    let principal = match person(&ctx, &Method::GET, &headers).await {
        Ok(p) => p,
        Err(response) => return response,
    };
    let result = overview_page(&ctx, &principal).await;
    answer(&ctx, &principal, Section::Overview, result).await
}

async fn overview_page(ctx: &Context, principal: &Principal) -> Result<Response, ApiError> {
    let shell = shell(ctx, principal, Section::Overview).await?;
    let overview = match principal.membership() {
        Ok((workspace_id, _)) => {
            Some(overview_of(ctx, principal, &workspace_id, &shell.base).await?)
        }
        Err(_) => None,
    };
    Ok(render(&OverviewPage { shell, overview }))
}

async fn overview_of(
    ctx: &Context,
    principal: &Principal,
    workspace_id: &str,
    base: &str,
) -> Result<Overview, ApiError> {
    for need in [
        Need::AgentsRead,
        Need::AuditRead,
        Need::ChallengesRead,
        Need::KillSwitchRead,
        Need::WorkspaceRead,
    ] {
        person_requires(principal, need)?;
    }
    let agents = agents::status_counts(ctx, workspace_id)
        .await?
        .into_iter()
        .map(|(status, count)| StatusCount {
            status: status.as_str(),
            count,
            href: format!("{base}/dashboard/agents?status={}", status.as_str()),
        })
        .collect();
    let decisions = summary::decision_summary(ctx, workspace_id, now_ms()).await?;
    let pending = approvals::list(
        ctx,
        workspace_id,
        Some("pending"),
        None,
        None,
        PENDING_COUNTED + 1,
    )
    .await?
    .len();
    let pending = i64::try_from(pending).unwrap_or(i64::MAX);
    let kill = credentials::kill_switch_status(ctx, workspace_id).await?;
    let leaks =
        summary::recent_of_type(ctx, workspace_id, "vault.proxy.leak_scrubbed", RECENT_ROWS)
            .await?
            .into_iter()
            .map(|e| LeakRow {
                created_at: e.created_at,
                event_href: format!("{base}/dashboard/audit/{}", e.event_id),
                agent_id: e.agent_id.unwrap_or_default(),
                profile: detail_text(&e.details, "profile"),
                host: detail_text(&e.details, "host"),
                leaks: leaks_text(&e.details),
            })
            .collect();
    let denials = summary::recent_denials(ctx, workspace_id, RECENT_ROWS)
        .await?
        .into_iter()
        .map(|e| DenialRow {
            created_at: e.created_at,
            agent_href: e
                .agent_id
                .as_ref()
                .map(|id| format!("{base}/dashboard/agents/{id}")),
            agent_id: e.agent_id.unwrap_or_default(),
            action: e.action.unwrap_or_default(),
            reasons: e.reasons.join("; "),
        })
        .collect();
    let api_keys = ctx
        .store
        .api_keys(workspace_id)
        .await?
        .into_iter()
        .map(|k| ApiKeyRow {
            state: if k.revoked_at.is_some() {
                "revoked"
            } else {
                "active"
            },
            mode: k.mode,
            last_four: k.last_four,
            name: k.name.unwrap_or_default(),
            created: iso(k.created_at),
            last_used: k.last_used_at.map_or_else(|| "never".into(), iso),
        })
        .collect();
    Ok(Overview {
        agents,
        decisions: decision_rows(decisions.hour, decisions.day),
        chart: decision_chart(&decisions.hourly),
        chart_partial: decisions.day.at_least,
        leaks,
        pending_approvals: count_text(pending.min(PENDING_COUNTED), pending > PENDING_COUNTED),
        minting_paused: kill.minting_paused,
        minting_paused_reason: kill.minting_paused_reason,
        all_revoked_at: kill.all_credentials_revoked_at,
        denials,
        api_keys,
    })
}

/// Selects the workspace the console shows (a form: `csrf`, `workspace_id`), then back to the
/// overview.
#[utoipa::path(post, path = "/dashboard/workspace", tag = "dashboard",
    request_body(content = String, content_type = "application/x-www-form-urlencoded", description = "`csrf` (the session's token) and `workspace_id`"),
    responses((status = 303, description = "selected: to /dashboard (or not logged in: to /login)"),
        (status = 403, description = "HTML page: `csrf_failed`"), (status = 404, description = "HTML page: `unknown_workspace`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn switch_workspace(
    State(ctx): State<SharedContext>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (principal, fields) = match form_person(&ctx, &headers, &body).await {
        Ok(found) => found,
        Err(response) => return response,
    };
    let workspace_id = field(&fields, "workspace_id").unwrap_or("");
    let result = accounts::select_workspace(&ctx, &principal, workspace_id)
        .await
        .map(|()| see_other(format!("{}/dashboard", base(&ctx))))
        .map_err(ApiError::from);
    answer(&ctx, &principal, Section::Overview, result).await
}

// ---- agents -----------------------------------------------------------------------------------

/// The filters of the agents page, as typed (empty when not set).
#[derive(Debug, Default)]
struct AgentFilters {
    q: String,
    status: String,
    risk_tier: String,
    label: String,
    group: String,
    seen: String,
}

impl AgentFilters {
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

pub(super) struct SelectOption {
    pub(super) value: &'static str,
    pub(super) selected: bool,
}

/// An option of a `<select>` whose value and words may differ, and need not be static.
struct NamedOption {
    value: String,
    label: String,
    selected: bool,
}

pub(super) fn options(values: &[&'static str], chosen: &str) -> Vec<SelectOption> {
    values
        .iter()
        .map(|value| SelectOption {
            value,
            selected: *value == chosen,
        })
        .collect()
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
    responses((status = 200, description = "HTML list of agents"), (status = 303, description = "not logged in: to /login"),
        (status = 400, description = "HTML page: a filter, the limit or the cursor is not valid"),
        (status = 403, description = "HTML page: the role may not read agents")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn agents_page(
    State(ctx): State<SharedContext>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    page_answer(
        &ctx,
        &headers,
        query.as_deref(),
        LIMIT,
        Section::Agents,
        async |principal| agents_list(&ctx, principal, query.as_deref().unwrap_or("")).await,
    )
    .await
}

async fn agents_list(
    ctx: &Context,
    principal: &Principal,
    raw_query: &str,
) -> Result<Response, ApiError> {
    person_requires(principal, Need::AgentsRead)?;
    let (workspace_id, _) = principal.membership()?;
    let mut filters = AgentFilters::default();
    let (mut cursor, mut limit, mut done) = (None, None, None);
    for (name, value) in form_urlencoded::parse(raw_query.as_bytes()) {
        let value = value.trim().to_owned();
        match name.as_ref() {
            "q" => filters.q = value,
            "status" => filters.status = value,
            "risk_tier" => filters.risk_tier = value,
            "label" => filters.label = value,
            "group" => filters.group = value,
            "seen" => filters.seen = value,
            "cursor" => cursor = Some(value),
            "done" if value == "reject" => done = Some(CLAIM_REJECTED),
            "limit" if !value.is_empty() => {
                limit = Some(
                    value
                        .parse::<i64>()
                        .map_err(|_| ApiError::invalid("limit", "must be a whole number"))?,
                );
            }
            _ => {}
        }
    }
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
    let page_rows = super::page_limit(limit, PAGE_ROWS, 200)?;
    let after = super::page_cursor(cursor.as_deref())?;
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
    let next = super::next_cursor(&mut rows, page_rows, |a| (a.created_at, a.id.clone()));
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
    holdings: super::console_credentials::AgentHoldings,
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
    responses((status = 200, description = "HTML page of the agent"), (status = 303, description = "not logged in: to /login"),
        (status = 403, description = "HTML page: the role may not read agents"), (status = 404, description = "HTML page: `unknown_agent`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn agent_page(
    State(ctx): State<SharedContext>,
    headers: HeaderMap,
    Path(agent_id): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let principal = match page_person(&ctx, &headers, query.as_deref(), &[]).await {
        Ok(p) => p,
        Err(response) => return response,
    };
    let done = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .find(|(k, _)| k == "done")
        .and_then(|(_, verb)| match verb.as_ref() {
            "claim" => Some(CLAIMED),
            verb => action_named(verb).ok().map(|a| a.done),
        });
    let result = agent_detail(&ctx, &principal, &agent_id, done).await;
    answer(&ctx, &principal, Section::Agents, result).await
}

async fn agent_detail(
    ctx: &Context,
    principal: &Principal,
    agent_id: &str,
    done: Option<&'static str>,
) -> Result<Response, ApiError> {
    person_requires(principal, Need::AgentsRead)?;
    let (workspace_id, _) = principal.membership()?;
    let agent = agents::to_wire(agents::agent_in_workspace(ctx, &workspace_id, agent_id).await?);
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
    let holdings = super::console_credentials::agent_holdings(
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
    responses((status = 200, description = "HTML confirmation form"), (status = 303, description = "not logged in: to /login"),
        (status = 403, description = "HTML page: the role may not change agents"),
        (status = 404, description = "HTML page: `unknown_agent`, or no such action")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn confirm_agent_action(
    State(ctx): State<SharedContext>,
    headers: HeaderMap,
    Path((agent_id, verb)): Path<(String, String)>,
) -> Response {
    let principal = match person(&ctx, &Method::GET, &headers).await {
        Ok(p) => p,
        Err(response) => return response,
    };
    let result = confirm_page(&ctx, &principal, &agent_id, &verb).await;
    answer(&ctx, &principal, Section::Agents, result).await
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
    let agent = agents::agent_in_workspace(ctx, &workspace_id, agent_id).await?;
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
    headers: HeaderMap,
    Path((agent_id, verb)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    form_answer(
        &ctx,
        &headers,
        &body,
        Section::Agents,
        async |principal, fields| {
            act(&ctx, principal, &agent_id, &verb, field(&fields, "reason")).await
        },
    )
    .await
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
    let reason = reason
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(str::to_owned);
    let agent = agents::set_status(
        ctx,
        &workspace_id,
        agent_id,
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
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (principal, fields) = match form_person(&ctx, &headers, &body).await {
        Ok(found) => found,
        Err(response) => return response,
    };
    let code = claim_code_of(field(&fields, "code").unwrap_or_default());
    let result = match field(&fields, "decision") {
        None | Some("") => claim_page(&ctx, &principal, code).await,
        Some(decision) => claim(&ctx, &principal, code, decision).await,
    };
    answer(&ctx, &principal, Section::Agents, result).await
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

    #[test]
    fn the_chart_stacks_each_hour_scaled_to_the_busiest() {
        let mut hourly = [DecisionCounts::default(); summary::HOURS];
        hourly[0] = DecisionCounts {
            allow: 1,
            ..DecisionCounts::default()
        };
        hourly[23] = DecisionCounts {
            allow: 60,
            deny: 30,
            challenge: 30,
            at_least: false,
        };
        let chart = decision_chart(&hourly);
        assert_eq!(chart.len(), 24);
        assert_eq!(
            chart[0].title,
            "23 hours before: 1 allow, 0 challenge, 0 deny"
        );
        let one = &chart[0].bars;
        assert_eq!(
            (one.len(), one[0].height, one[0].y),
            (1, 1, 59),
            "one decision still shows"
        );
        let busy: Vec<_> = chart[23]
            .bars
            .iter()
            .map(|b| (b.outcome, b.y, b.height, b.x))
            .collect();
        assert_eq!(
            busy,
            [
                ("allow", 30, 30, 231),
                ("challenge", 15, 15, 231),
                ("deny", 0, 15, 231)
            ]
        );
        assert!(chart[5].bars.is_empty() && chart[23].title.starts_with("the last hour"));
    }

    #[test]
    fn counts_say_when_they_are_lower_bounds() {
        let hour = DecisionCounts {
            allow: 3,
            deny: 1,
            challenge: 0,
            at_least: false,
        };
        let day = DecisionCounts {
            allow: 4000,
            deny: 999,
            challenge: 1,
            at_least: true,
        };
        let rows = decision_rows(hour, day);
        let shown: Vec<_> = rows
            .iter()
            .map(|r| (r.outcome, r.hour.as_str(), r.day.as_str()))
            .collect();
        assert_eq!(
            shown,
            [
                ("allow", "3", "4000+"),
                ("deny", "1", "999+"),
                ("challenge", "0", "1+")
            ]
        );
    }
}
