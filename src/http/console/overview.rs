//! The console's overview (`/dashboard`): the workspace at a glance, its decisions of the last
//! hour and day charted, pending approvals, scrubbed leaks, agents by status.

use askama::Template;
use axum::extract::State;
use axum::response::Response;

use crate::audit::summary::{self, DecisionCounts};
use crate::context::{Context, SharedContext};
use crate::domain::access::Need;
use crate::enforce::{approvals, credentials};
use crate::error::ApiError;
use crate::identity::accounts::Principal;
use crate::identity::agents;
use crate::time::{iso, now_ms};

use super::extract::{NotLoggedIn, PageResult, Person};
use super::{shell, Section, Shell, RECENT_ROWS};
use crate::http::operator::person_requires;
use crate::http::pages::render;

/// Pending approvals counted on the overview; more are shown as "100+".
const PENDING_COUNTED: i64 = 100;

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
    /// `vault proxy` or `MCP server <name>`.
    through: String,
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
    responses((status = 200, description = "HTML overview"), NotLoggedIn))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn dashboard(State(ctx): State<SharedContext>, Person(principal): Person) -> PageResult {
    Ok(overview_page(&ctx, &principal).await?)
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
    // The vault proxy's and the MCP gateway's, newest first.
    let mut leak_events =
        summary::recent_of_type(ctx, workspace_id, "vault.proxy.leak_scrubbed", RECENT_ROWS)
            .await?;
    leak_events.extend(
        summary::recent_of_type(ctx, workspace_id, "mcp.leak_scrubbed", RECENT_ROWS).await?,
    );
    leak_events.sort_by(|a, b| (&b.created_at, &b.event_id).cmp(&(&a.created_at, &a.event_id)));
    leak_events.truncate(usize::try_from(RECENT_ROWS).unwrap_or(usize::MAX));
    let leaks = leak_events
        .into_iter()
        .map(|e| LeakRow {
            through: match e.details.get("server").and_then(serde_json::Value::as_str) {
                Some(server) => format!("MCP server {server}"),
                None => "vault proxy".to_owned(),
            },
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

#[cfg(test)]
mod tests {
    use super::*;

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
