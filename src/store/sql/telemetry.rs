//! SQL of telemetry: heartbeats, the inventory and its labels, provider feedback and the
//! reputation it moves.

use async_trait::async_trait;
use serde_json::Value;
use sqlx::any::AnyRow;
use sqlx::{Any, Row, Transaction};

use super::agents::{agent_from_row, AGENT_COLUMNS};
use super::{changed_rows, json_text, json_value, Arg, Filters, SqlStore};
use crate::domain::RiskTier;
use crate::store::*;

fn heartbeat_from_row(row: &AnyRow) -> Result<HeartbeatRecord, sqlx::Error> {
    Ok(HeartbeatRecord {
        id: row.try_get("id")?,
        workspace_id: row.try_get("workspace_id")?,
        agent_id: row.try_get("agent_id")?,
        status: row.try_get("status")?,
        latency_ms: row.try_get("latency_ms")?,
        observed_at: row.try_get("observed_at")?,
        created_at: row.try_get("created_at")?,
        source: row.try_get("source")?,
    })
}

fn inventory_from_row(row: &AnyRow) -> Result<InventoryRecord, sqlx::Error> {
    Ok(InventoryRecord {
        workspace_id: row.try_get("workspace_id")?,
        external_agent_key: row.try_get("external_agent_key")?,
        agent_id: row.try_get("agent_id")?,
        display_name: row.try_get("display_name")?,
        labels: json_value(&row.try_get::<String, _>("labels")?),
        environment: row.try_get("environment")?,
        source: row.try_get("source")?,
        status: row.try_get("status")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

const INVENTORY_COLUMNS: &str =
    "workspace_id, external_agent_key, agent_id, display_name, labels, environment, source, status, created_at, updated_at";

/// Applies a telemetry operation inside `tx`.
pub(super) async fn apply(
    tx: &mut Transaction<'_, Any>,
    op: &TelemetryOp,
) -> Result<Applied, StoreError> {
    match op {
        TelemetryOp::RecordHeartbeats(beats) => {
            for hb in beats {
                sqlx::query(
                    "INSERT INTO heartbeats (id, workspace_id, agent_id, status, latency_ms, observed_at, created_at, source) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                )
                .bind(&hb.id)
                .bind(hb.workspace_id.clone())
                .bind(&hb.agent_id)
                .bind(&hb.status)
                .bind(hb.latency_ms)
                .bind(hb.observed_at)
                .bind(hb.created_at)
                .bind(&hb.source)
                .execute(&mut **tx)
                .await?;
                sqlx::query(
                    "UPDATE agents SET last_seen_at = $1 WHERE id = $2 AND (last_seen_at IS NULL OR last_seen_at < $1)",
                )
                .bind(hb.observed_at)
                .bind(&hb.agent_id)
                .execute(&mut **tx)
                .await?;
            }
            Ok(Applied::Done)
        }
        TelemetryOp::UpsertInventory(item) => {
            let written = sqlx::query(
                "INSERT INTO agent_inventory (workspace_id, external_agent_key, agent_id, display_name, labels, \
                 environment, source, status, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
                 ON CONFLICT (workspace_id, external_agent_key) DO UPDATE SET \
                 display_name = excluded.display_name, labels = excluded.labels, environment = excluded.environment, \
                 source = excluded.source, status = excluded.status, updated_at = excluded.updated_at \
                 WHERE agent_inventory.agent_id = excluded.agent_id",
            )
            .bind(&item.workspace_id)
            .bind(&item.external_agent_key)
            .bind(&item.agent_id)
            .bind(item.display_name.clone())
            .bind(json_text(&item.labels))
            .bind(item.environment.clone())
            .bind(item.source.clone())
            .bind(&item.status)
            .bind(item.created_at)
            .bind(item.updated_at)
            .execute(&mut **tx)
            .await?
            .rows_affected();
            changed_rows(written, || {
                StoreError::Conflict(format!(
                    "`{}` already maps to another agent",
                    item.external_agent_key
                ))
            })?;
            // The item's label terms, replaced with it (migration 0018).
            sqlx::query(
                "DELETE FROM agent_inventory_labels WHERE workspace_id = $1 AND external_agent_key = $2",
            )
            .bind(&item.workspace_id)
            .bind(&item.external_agent_key)
            .execute(&mut **tx)
            .await?;
            for (term, source) in label_terms(&item.labels) {
                sqlx::query(
                    "INSERT INTO agent_inventory_labels (workspace_id, term, external_agent_key, agent_id, source) \
                     VALUES ($1, $2, $3, $4, $5)",
                )
                .bind(&item.workspace_id)
                .bind(term)
                .bind(&item.external_agent_key)
                .bind(&item.agent_id)
                .bind(source)
                .execute(&mut **tx)
                .await?;
            }
            Ok(Applied::Done)
        }
        TelemetryOp::RecordFeedback {
            id,
            workspace_id,
            agent_id,
            key_id,
            verdict,
            evidence,
            delta,
            half_life_ms,
            at,
        } => {
            sqlx::query(
                "INSERT INTO agent_feedback (id, workspace_id, agent_id, key_id, verdict, evidence, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(id)
            .bind(workspace_id)
            .bind(agent_id)
            .bind(key_id)
            .bind(verdict)
            .bind(evidence)
            .bind(*at)
            .execute(&mut **tx)
            .await?;
            // Lock the agent's row before reading its score (a row lock on Postgres, the write
            // lock on SQLite), so concurrent feedback on two replicas cannot lose an update.
            sqlx::query("UPDATE agents SET risk_scored_at = risk_scored_at WHERE id = $1")
                .bind(agent_id)
                .execute(&mut **tx)
                .await?;
            let row = sqlx::query(
                "SELECT risk_score, risk_scored_at FROM agents WHERE id = $1 AND workspace_id = $2",
            )
            .bind(agent_id)
            .bind(workspace_id)
            .fetch_optional(&mut **tx)
            .await?
            .ok_or(StoreError::UnknownAgent)?;
            let old: f64 = row.try_get("risk_score")?;
            let scored_at: Option<i64> = row.try_get("risk_scored_at")?;
            let elapsed = scored_at.map_or(0.0, |t| (*at - t).max(0) as f64);
            let score = (old * 0.5f64.powf(elapsed / half_life_ms) + delta).max(0.0);
            let tier = RiskTier::of_score(score).as_str();
            sqlx::query(
                "UPDATE agents SET risk_score = $1, risk_scored_at = $2, risk_tier = $3, updated_at = $2 WHERE id = $4",
            )
            .bind(score)
            .bind(*at)
            .bind(tier)
            .bind(agent_id)
            .execute(&mut **tx)
            .await?;
            let sql = format!("SELECT {} FROM agents WHERE id = $1", AGENT_COLUMNS);
            let agent = sqlx::query(&sql)
                .bind(agent_id)
                .fetch_one(&mut **tx)
                .await?;
            Ok(Applied::Agent(Box::new(agent_from_row(&agent)?)))
        }
    }
}

#[async_trait]
impl TelemetryStore for SqlStore {
    #[tracing::instrument(level = "debug", skip_all)]
    async fn recent_heartbeats(
        &self,
        workspace_id: &str,
        agent_id: Option<&str>,
        limit: i64,
    ) -> Result<Vec<HeartbeatRecord>, StoreError> {
        let mut f = Filters::new();
        f.text("workspace_id = ?", Some(workspace_id));
        f.text("agent_id = ?", agent_id);
        let sql = f.sql(
            "SELECT id, workspace_id, agent_id, status, latency_ms, observed_at, created_at, source FROM heartbeats",
            &format!("ORDER BY created_at DESC, id DESC LIMIT {limit}"),
        );
        let rows = f.fetch(&self.read, &sql).await?;
        Ok(rows
            .iter()
            .map(heartbeat_from_row)
            .collect::<Result<_, _>>()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn inventory(
        &self,
        workspace_id: &str,
        external_agent_key: &str,
    ) -> Result<Option<InventoryRecord>, StoreError> {
        let sql = format!("SELECT {INVENTORY_COLUMNS} FROM agent_inventory WHERE workspace_id = $1 AND external_agent_key = $2");
        let row = sqlx::query(&sql)
            .bind(workspace_id)
            .bind(external_agent_key)
            .fetch_optional(&self.read)
            .await?;
        Ok(row.map(|row| inventory_from_row(&row)).transpose()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn list_inventory(
        &self,
        query: &InventoryQuery,
    ) -> Result<Vec<InventoryRecord>, StoreError> {
        let mut f = Filters::new();
        f.text("workspace_id = ?", Some(&query.workspace_id));
        f.text("environment = ?", query.environment.as_deref());
        f.text("status = ?", query.status.as_deref());
        f.text("external_agent_key > ?", query.after.as_deref());
        if let Some(label) = &query.label {
            f.push(
                "external_agent_key IN (SELECT external_agent_key FROM agent_inventory_labels \
                 WHERE workspace_id = ? AND term = ?)",
                [
                    Arg::Text(query.workspace_id.clone()),
                    Arg::Text(label.clone()),
                ],
            );
        }
        let sql = f.sql(
            &format!("SELECT {INVENTORY_COLUMNS} FROM agent_inventory"),
            &format!("ORDER BY external_agent_key LIMIT {}", query.limit),
        );
        let rows = f.fetch(&self.read, &sql).await?;
        Ok(rows
            .iter()
            .map(inventory_from_row)
            .collect::<Result<Vec<_>, _>>()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn agents_labels(
        &self,
        workspace_id: &str,
        agent_ids: &[String],
    ) -> Result<std::collections::HashMap<String, Value>, StoreError> {
        let mut merged: std::collections::HashMap<String, serde_json::Map<String, Value>> =
            std::collections::HashMap::new();
        if agent_ids.is_empty() {
            return Ok(std::collections::HashMap::new());
        }
        let mut f = Filters::new();
        f.text("workspace_id = ?", Some(workspace_id));
        f.push(
            &format!("agent_id IN ({})", vec!["?"; agent_ids.len()].join(", ")),
            agent_ids.iter().map(|id| Arg::Text(id.clone())),
        );
        let sql = f.sql(
            "SELECT agent_id, labels FROM agent_inventory",
            "ORDER BY agent_id, external_agent_key",
        );
        for row in f.fetch(&self.read, &sql).await? {
            let id: String = row.try_get("agent_id")?;
            if let Ok(labels) = serde_json::from_str::<Value>(&row.try_get::<String, _>("labels")?)
            {
                merged
                    .entry(id)
                    .or_default()
                    .extend(labels_as_pairs(labels));
            }
        }
        Ok(merged
            .into_iter()
            .map(|(id, m)| (id, Value::Object(m)))
            .collect())
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn agent_labels(&self, workspace_id: &str, agent_id: &str) -> Result<Value, StoreError> {
        let rows = sqlx::query(
            "SELECT labels FROM agent_inventory WHERE workspace_id = $1 AND agent_id = $2 ORDER BY external_agent_key",
        )
        .bind(workspace_id)
        .bind(agent_id)
        .fetch_all(&self.read)
        .await?;
        let mut merged = serde_json::Map::new();
        for row in rows {
            if let Ok(labels) = serde_json::from_str::<Value>(&row.try_get::<String, _>("labels")?)
            {
                merged.extend(labels_as_pairs(labels));
            }
        }
        Ok(Value::Object(merged))
    }
}
