//! What the console reads of the audit trail: decisions by outcome over the last hour and day,
//! the recent denials, an agent's recent events, and one event by id.

use crate::api;
use crate::context::Context;
use crate::domain::ids;
use crate::store::{AuditQuery, StoreError};

use super::to_wire;

/// At most this many decisions are read to count a day; past it the counts say "at least".
pub const DECISIONS_COUNTED: i64 = 5_000;

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;

/// Decisions by outcome in one window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecisionCounts {
    pub allow: i64,
    pub deny: i64,
    pub challenge: i64,
    /// True when the window held more decisions than were read: the counts are lower bounds.
    pub at_least: bool,
}

impl DecisionCounts {
    fn add(&mut self, outcome: Option<&str>) {
        match outcome {
            Some("allow") => self.allow += 1,
            Some("deny") => self.deny += 1,
            Some("challenge") => self.challenge += 1,
            _ => {}
        }
    }
}

/// Hours in a day: the columns of the decisions chart.
pub const HOURS: usize = 24;

/// Decisions by outcome over the last hour and the last day, and the day hour by hour.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecisionSummary {
    pub hour: DecisionCounts,
    pub day: DecisionCounts,
    /// The last day's decisions in hours, oldest first: `hourly[HOURS - 1]` is the last hour.
    /// Counted from the same rows as `day` (the newest [`DECISIONS_COUNTED`]).
    pub hourly: [DecisionCounts; HOURS],
}

/// Counts the workspace's decisions (`decision.*` events) of the last day and hour before
/// `now`, reading at most [`DECISIONS_COUNTED`] of them (newest first).
pub async fn decision_summary(
    ctx: &Context,
    workspace_id: &str,
    now: i64,
) -> Result<DecisionSummary, StoreError> {
    let rows = ctx
        .store
        .audit_events(&AuditQuery {
            workspace_id: workspace_id.to_owned(),
            event_type_prefix: Some("decision.".into()),
            start_ms: Some(now - DAY_MS),
            limit: DECISIONS_COUNTED + 1,
            ..AuditQuery::default()
        })
        .await?;
    let counted = usize::try_from(DECISIONS_COUNTED).unwrap_or(usize::MAX);
    let more = rows.len() > counted;
    let mut summary = DecisionSummary::default();
    let mut oldest_in_hour = true;
    for row in rows.iter().take(counted) {
        summary.day.add(row.decision.as_deref());
        let hours_ago = usize::try_from((now - row.created_at).max(0) / HOUR_MS).unwrap_or(HOURS);
        if let Some(bucket) = HOURS
            .checked_sub(hours_ago + 1)
            .and_then(|i| summary.hourly.get_mut(i))
        {
            bucket.add(row.decision.as_deref());
        }
        if row.created_at >= now - HOUR_MS {
            summary.hour.add(row.decision.as_deref());
        } else {
            oldest_in_hour = false;
        }
    }
    summary.day.at_least = more;
    // Newest first: only when every row read is within the hour can the hour hold more.
    summary.hour.at_least = more && oldest_in_hour;
    Ok(summary)
}

/// The workspace's newest `limit` events of `event_type` (the overview's vault leak events).
pub async fn recent_of_type(
    ctx: &Context,
    workspace_id: &str,
    event_type: &str,
    limit: i64,
) -> Result<Vec<api::AuditEvent>, StoreError> {
    recent(
        ctx,
        AuditQuery {
            workspace_id: workspace_id.to_owned(),
            event_type: Some(event_type.to_owned()),
            limit,
            ..AuditQuery::default()
        },
    )
    .await
}

/// The workspace's newest `limit` denied decisions.
pub async fn recent_denials(
    ctx: &Context,
    workspace_id: &str,
    limit: i64,
) -> Result<Vec<api::AuditEvent>, StoreError> {
    recent(
        ctx,
        AuditQuery {
            workspace_id: workspace_id.to_owned(),
            decision: Some("deny".into()),
            limit,
            ..AuditQuery::default()
        },
    )
    .await
}

/// The newest `limit` events about one agent of the workspace.
pub async fn recent_for_agent(
    ctx: &Context,
    workspace_id: &str,
    agent_id: &str,
    limit: i64,
) -> Result<Vec<api::AuditEvent>, StoreError> {
    recent(
        ctx,
        AuditQuery {
            workspace_id: workspace_id.to_owned(),
            agent_id: Some(agent_id.to_owned()),
            limit,
            ..AuditQuery::default()
        },
    )
    .await
}

/// How far from the time in its id an event's `created_at` is looked for: ids are UUIDv7 made
/// as the event is, so the two are milliseconds apart; the bound lets the read use the
/// (workspace, time) index rather than scan the workspace's trail.
const EVENT_TIME_SLACK_MS: i64 = HOUR_MS;

/// One event of the workspace by its id (`evt_` and a UUIDv7), if there is one.
pub async fn event(
    ctx: &Context,
    workspace_id: &str,
    event_id: &str,
) -> Result<Option<api::AuditEvent>, StoreError> {
    if !ids::has_shape(event_id, ids::EVENT) {
        return Ok(None);
    }
    // The UUIDv7's first 48 bits: milliseconds since the epoch.
    let made_at = event_id
        .get(ids::EVENT.len() + 1..ids::EVENT.len() + 13)
        .and_then(|hex| i64::from_str_radix(hex, 16).ok());
    let rows = recent(
        ctx,
        AuditQuery {
            workspace_id: workspace_id.to_owned(),
            event_id: Some(event_id.to_owned()),
            start_ms: made_at.map(|t| t - EVENT_TIME_SLACK_MS),
            end_ms: made_at.map(|t| t + EVENT_TIME_SLACK_MS),
            limit: 1,
            ..AuditQuery::default()
        },
    )
    .await?;
    Ok(rows.into_iter().next())
}

/// The events of `query`, with their actors' names.
async fn recent(ctx: &Context, query: AuditQuery) -> Result<Vec<api::AuditEvent>, StoreError> {
    let events = ctx
        .store
        .audit_events(&query)
        .await?
        .into_iter()
        .map(to_wire)
        .collect();
    super::with_actor_names(ctx.store.as_ref(), &query.workspace_id, events).await
}
