//! The workspace's agent inventory: an idempotent mapping from the key an external system uses
//! for an agent (`external_agent_key`) to the agent, with display name, labels, environment,
//! source and an inventory status.

use serde_json::{json, Value};

use crate::api;
use crate::audit::{self, Actor};
use crate::context::Context;
use crate::domain::FieldError;
use crate::identity::agents::{agent_id, agent_in_workspace};
use crate::store::{Change, InventoryQuery, InventoryRecord, TelemetryOp};
use crate::time::{iso, now_ms};

use super::{TelemetryError, TelemetryResult};

const MAX_KEY_CHARS: usize = 200;
const MAX_TEXT_CHARS: usize = 200;
const MAX_LABELS: usize = 64;

fn to_wire(r: InventoryRecord) -> api::InventoryItem {
    api::InventoryItem {
        external_agent_key: r.external_agent_key,
        agent_id: r.agent_id,
        display_name: r.display_name,
        labels: r.labels,
        environment: r.environment,
        source: r.source,
        status: r.status,
        created_at: iso(r.created_at),
        updated_at: iso(r.updated_at),
    }
}

fn optional_text(field: &'static str, value: Option<String>) -> Result<Option<String>, FieldError> {
    match value {
        Some(v) if v.chars().count() > MAX_TEXT_CHARS => Err(FieldError::invalid(
            field,
            format!("must be at most {MAX_TEXT_CHARS} characters"),
        )),
        Some(v) if v.is_empty() => Ok(None),
        other => Ok(other),
    }
}

/// Validated labels: a list of distinct strings (the documented form; `[]` when absent), or an
/// object of string values (the form this service accepted first), kept as sent.
fn labels(value: Option<Value>) -> Result<Value, FieldError> {
    let invalid = || {
        FieldError::invalid(
            "labels",
            format!("must be a list of at most {MAX_LABELS} non-empty strings of up to {MAX_TEXT_CHARS} characters (or an object of string values)"),
        )
    };
    match value {
        None | Some(Value::Null) => Ok(Value::Array(Vec::new())),
        Some(Value::Array(items)) => {
            let mut labels: Vec<Value> = Vec::with_capacity(items.len());
            for item in items {
                match item.as_str() {
                    Some(s) if !s.is_empty() && s.chars().count() <= MAX_TEXT_CHARS => {}
                    _ => return Err(invalid()),
                }
                if !labels.contains(&item) {
                    labels.push(item);
                }
            }
            if labels.len() > MAX_LABELS {
                return Err(invalid());
            }
            Ok(Value::Array(labels))
        }
        Some(Value::Object(map)) => {
            if map.len() > MAX_LABELS
                || map.iter().any(|(k, v)| {
                    k.is_empty()
                        || k.len() > 100
                        || v.as_str().is_none_or(|s| s.len() > MAX_TEXT_CHARS)
                })
            {
                return Err(FieldError::invalid(
                    "labels",
                    format!("an object of labels holds at most {MAX_LABELS} string values (keys up to 100, values up to {MAX_TEXT_CHARS} characters)"),
                ));
            }
            Ok(Value::Object(map))
        }
        Some(_) => Err(invalid()),
    }
}

pub async fn upsert(
    ctx: &Context,
    workspace_id: &str,
    actor: &Actor,
    req: api::InventoryUpsertRequest,
) -> TelemetryResult<api::InventoryUpsertResponse> {
    let key = req.external_agent_key.trim().to_owned();
    if key.is_empty() {
        return Err(TelemetryError::missing("external_agent_key"));
    }
    if key.chars().count() > MAX_KEY_CHARS {
        return Err(TelemetryError::invalid(
            "external_agent_key",
            format!("must be at most {MAX_KEY_CHARS} characters"),
        ));
    }
    if req.agent_id.is_empty() {
        return Err(TelemetryError::missing("agent_id"));
    }
    let status = optional_text("status", req.status)?.unwrap_or_else(|| "active".into());
    let labels = labels(req.labels)?;
    let display_name = optional_text("display_name", req.display_name)?;
    let environment = optional_text("environment", req.environment)?;
    let source = optional_text("source", req.source)?;
    let agent = agent_in_workspace(ctx, workspace_id, &agent_id(&req.agent_id)?).await?;

    let now = now_ms();
    let existing = ctx.store.inventory(workspace_id, &key).await?;
    let conflict =
        || TelemetryError::conflict("conflict", format!("`{key}` already maps to another agent"));
    let created_at = match &existing {
        Some(row) if row.agent_id != agent.id => return Err(conflict()),
        Some(row) => row.created_at,
        None => now,
    };
    let mut item = InventoryRecord {
        workspace_id: workspace_id.to_owned(),
        external_agent_key: key.clone(),
        agent_id: agent.id.clone(),
        display_name,
        labels,
        environment,
        source,
        status,
        created_at,
        updated_at: now,
    };
    if let Some(row) = existing.as_ref() {
        item.updated_at = row.updated_at;
        if *row == item {
            return Ok(api::InventoryUpsertResponse {
                ok: true,
                created: false,
                changed: false,
                item: to_wire(item),
            });
        }
        item.updated_at = now;
    }
    let created = existing.is_none();
    let event = audit::state_change(
        "inventory.upserted",
        "upsert",
        Some(workspace_id),
        Some(&agent.id),
        actor,
        json!({ "external_agent_key": key, "created": created, "status": item.status, "environment": item.environment }),
    );
    ctx.writer
        .commit(Change::new(TelemetryOp::UpsertInventory(item.clone())).audited(event))
        .await
        .map_err(|e| match e {
            crate::store::StoreError::Conflict(_) => conflict(),
            other => other.into(),
        })?;
    ctx.agent_changed(&agent.id).await;
    Ok(api::InventoryUpsertResponse {
        ok: true,
        created,
        changed: true,
        item: to_wire(item),
    })
}

pub async fn list(
    ctx: &Context,
    workspace_id: &str,
    params: &api::InventoryListParams,
    after: Option<String>,
    limit: i64,
) -> TelemetryResult<Vec<api::InventoryItem>> {
    let query = InventoryQuery {
        workspace_id: workspace_id.to_owned(),
        environment: params.environment.clone().filter(|e| !e.is_empty()),
        status: params.status.clone().filter(|s| !s.is_empty()),
        label: params.label.clone().filter(|l| !l.is_empty()),
        after,
        limit,
    };
    Ok(ctx
        .store
        .list_inventory(&query)
        .await?
        .into_iter()
        .map(to_wire)
        .collect())
}

/// One agent's labels as policies read them (merged over its inventory entries), each as
/// `label` (a listed label) or `key=value`.
pub async fn agent_labels(
    ctx: &Context,
    workspace_id: &str,
    agent_id: &str,
) -> TelemetryResult<Vec<String>> {
    let merged = ctx.store.agent_labels(workspace_id, agent_id).await?;
    Ok(merged
        .as_object()
        .map(|pairs| {
            pairs
                .iter()
                .map(|(key, value)| match value.as_str() {
                    Some("true") | None => key.clone(),
                    Some(value) => format!("{key}={value}"),
                })
                .collect()
        })
        .unwrap_or_default())
}
