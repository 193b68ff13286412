//! Heartbeats: the signed one an agent sends, batches ingested with an API key, and the most
//! recent ones of a workspace.

use std::collections::HashMap;

use serde_json::Value;

use crate::api;
use crate::context::Context;
use crate::domain::ids;
use crate::domain::{FieldError, Refusal};
use crate::identity::agents::{self, agent_in_workspace};
use crate::store::{AgentRecord, Change, HeartbeatRecord, NonceClaim, TelemetryOp};
use crate::time::{iso, now_ms, parse_iso};

use super::{TelemetryError, TelemetryResult};

pub const MAX_INGEST_ITEMS: usize = 1000;
const MAX_STATUS_CHARS: usize = 64;

fn check_status(status: &str) -> Result<(), FieldError> {
    if status.is_empty() {
        return Err(FieldError::missing("status"));
    }
    if status.chars().count() > MAX_STATUS_CHARS || status.chars().any(char::is_control) {
        return Err(FieldError::invalid(
            "status",
            format!("must be at most {MAX_STATUS_CHARS} printable characters"),
        ));
    }
    Ok(())
}

fn check_latency(latency_ms: f64) -> Result<(), FieldError> {
    if !latency_ms.is_finite() || latency_ms < 0.0 {
        return Err(FieldError::invalid(
            "latency_ms",
            "must be a non-negative number",
        ));
    }
    Ok(())
}

fn record(
    agent: &AgentRecord,
    status: String,
    latency_ms: f64,
    observed_at: i64,
    now: i64,
    source: &str,
) -> HeartbeatRecord {
    HeartbeatRecord {
        id: ids::new_id(ids::HEARTBEAT),
        workspace_id: agent.workspace_id.clone(),
        agent_id: agent.id.clone(),
        status,
        latency_ms,
        observed_at,
        created_at: now,
        source: source.to_owned(),
    }
}

/// A heartbeat signed by the agent itself; the nonce is consumed with the record.
pub async fn record_signed(
    ctx: &Context,
    agent: &AgentRecord,
    nonce: NonceClaim,
    req: api::HeartbeatRequest,
) -> TelemetryResult<api::HeartbeatResponse> {
    check_status(&req.status)?;
    check_latency(req.latency_ms)?;
    let now = now_ms();
    let beat = record(agent, req.status, req.latency_ms, now, now, "signed");
    let response = api::HeartbeatResponse {
        ok: true,
        agent_id: agent.id.clone(),
        status: beat.status.clone(),
        recorded_at: iso(now),
    };
    ctx.writer
        .commit(Change::new(TelemetryOp::RecordHeartbeats(vec![beat])).with_nonce(nonce))
        .await?;
    Ok(response)
}

/// Checks one ingested item on its own, so that one bad item does not sink the batch.
fn ingest_item(
    agents: &HashMap<String, AgentRecord>,
    item: &Value,
    now: i64,
    max_ahead_ms: i64,
) -> Result<HeartbeatRecord, Refusal> {
    let Some(obj) = item.as_object() else {
        return Err(Refusal::invalid(
            "invalid_item",
            "each item must be a JSON object",
        ));
    };
    let agent_id = match obj.get("agent_id") {
        None | Some(Value::Null) => return Err(FieldError::missing("agent_id").into()),
        Some(Value::String(s)) if s.is_empty() => {
            return Err(FieldError::missing("agent_id").into())
        }
        Some(Value::String(s)) => s,
        Some(_) => return Err(FieldError::invalid("agent_id", "must be a string").into()),
    };
    let status = match obj.get("status") {
        None | Some(Value::Null) => return Err(FieldError::missing("status").into()),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(FieldError::invalid("status", "must be a string").into()),
    };
    check_status(&status)?;
    let latency_ms = match obj.get("latency_ms") {
        None | Some(Value::Null) => return Err(FieldError::missing("latency_ms").into()),
        Some(v) => v
            .as_f64()
            .ok_or_else(|| FieldError::invalid("latency_ms", "must be a number"))?,
    };
    check_latency(latency_ms)?;
    let observed_at = match obj.get("observed_at") {
        None | Some(Value::Null) => now,
        Some(Value::String(s)) => parse_iso(s).ok_or_else(|| {
            FieldError::invalid("observed_at", "must be ISO 8601 or epoch milliseconds")
        })?,
        Some(v) => v.as_i64().filter(|ms| *ms > 0).ok_or_else(|| {
            FieldError::invalid("observed_at", "must be ISO 8601 or epoch milliseconds")
        })?,
    };
    if observed_at > now + max_ahead_ms {
        return Err(FieldError::invalid("observed_at", "must not be in the future").into());
    }
    let agent = agents
        .get(agent_id.as_str())
        .ok_or_else(Refusal::unknown_agent)?;
    Ok(record(
        agent,
        status,
        latency_ms,
        observed_at,
        now,
        "ingest",
    ))
}

pub async fn ingest(
    ctx: &Context,
    workspace_id: &str,
    req: api::IngestRequest,
) -> TelemetryResult<api::IngestResponse> {
    if req.items.len() > MAX_INGEST_ITEMS {
        return Err(TelemetryError::TooManyItems {
            max: MAX_INGEST_ITEMS,
        });
    }
    let now = now_ms();
    // One lookup for every agent the batch names.
    let mut ids: Vec<String> = req
        .items
        .iter()
        .filter_map(|item| item.get("agent_id").and_then(Value::as_str))
        .filter(|id| ids::has_shape(id, ids::AGENT))
        .map(str::to_owned)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    let agents: HashMap<String, AgentRecord> = ctx
        .store
        .agents_in_workspace(workspace_id, &ids)
        .await?
        .into_iter()
        .map(|a| (a.id.clone(), a))
        .collect();
    let mut beats = Vec::with_capacity(req.items.len());
    let mut rejected = Vec::new();
    for (index, item) in req.items.iter().enumerate() {
        match ingest_item(&agents, item, now, ctx.config.signature_window_ms) {
            Ok(beat) => beats.push(beat),
            Err(err) => rejected.push(api::IngestRejection {
                index,
                error: err.code.into_owned(),
                message: err.message.into_owned(),
            }),
        }
    }
    let accepted = beats.len();
    if accepted > 0 {
        ctx.writer
            .commit(Change::new(TelemetryOp::RecordHeartbeats(beats)))
            .await?;
    }
    Ok(api::IngestResponse {
        ok: true,
        accepted,
        rejected,
    })
}

/// The newest `limit` heartbeats of the workspace, or of one of its agents.
pub async fn recent(
    ctx: &Context,
    workspace_id: &str,
    agent_id: Option<&str>,
    limit: i64,
) -> TelemetryResult<api::RecentHeartbeatsResponse> {
    let agent_id = agent_id.filter(|a| !a.is_empty());
    if let Some(agent_id) = agent_id {
        agent_in_workspace(ctx, workspace_id, &agents::agent_id(agent_id)?).await?;
    }
    let rows = ctx
        .store
        .recent_heartbeats(workspace_id, agent_id, limit)
        .await?;
    let items: Vec<api::Heartbeat> = rows
        .into_iter()
        .map(|h| api::Heartbeat {
            agent_id: h.agent_id,
            status: h.status,
            latency_ms: h.latency_ms,
            observed_at: iso(h.observed_at),
            created_at: iso(h.created_at),
            source: h.source,
        })
        .collect();
    Ok(api::RecentHeartbeatsResponse {
        ok: true,
        count: items.len(),
        items,
    })
}
