//! Telemetry about agents: heartbeats, the inventory that maps external keys (with labels) to
//! agents, and provider feedback that moves an agent's reputation.

use async_trait::async_trait;

use super::{InventoryQuery, InventoryRecord, StoreError, Supersedes};

/// Reads of heartbeats and the inventory.
#[async_trait]
pub trait TelemetryStore: Send + Sync {
    async fn recent_heartbeats(
        &self,
        workspace_id: &str,
        agent_id: Option<&str>,
        limit: i64,
    ) -> Result<Vec<HeartbeatRecord>, StoreError>;
    async fn inventory(
        &self,
        workspace_id: &str,
        external_agent_key: &str,
    ) -> Result<Option<InventoryRecord>, StoreError>;
    async fn list_inventory(
        &self,
        query: &InventoryQuery,
    ) -> Result<Vec<InventoryRecord>, StoreError>;
    /// Merged inventory labels of each of these agents of the workspace (an agent without
    /// inventory items is absent), in one read.
    async fn agents_labels(
        &self,
        workspace_id: &str,
        agent_ids: &[String],
    ) -> Result<std::collections::HashMap<String, serde_json::Value>, StoreError>;
    /// Merged inventory labels of the agent in the workspace.
    async fn agent_labels(
        &self,
        workspace_id: &str,
        agent_id: &str,
    ) -> Result<serde_json::Value, StoreError>;
}

/// Changes to heartbeats, the inventory and reputation.
#[derive(Debug, Clone)]
pub enum TelemetryOp {
    /// Heartbeats, each also moving its agent's `last_seen_at`.
    RecordHeartbeats(Vec<HeartbeatRecord>),
    /// Inserts or updates the mapping; `Conflict` when the key maps to another agent.
    UpsertInventory(InventoryRecord),
    /// Stores provider feedback and moves the agent's reputation: the score decays with a
    /// half-life, then takes `delta`; the tier follows from the new score. Answers `Agent`.
    RecordFeedback {
        id: String,
        workspace_id: String,
        agent_id: String,
        key_id: String,
        verdict: String,
        evidence: String,
        delta: f64,
        half_life_ms: f64,
        at: i64,
    },
}

impl TelemetryOp {
    /// See [`super::Op::supersedes`].
    pub fn supersedes(&self) -> Option<Supersedes<'_>> {
        match self {
            TelemetryOp::UpsertInventory(item) => Some(Supersedes::Workspace(&item.workspace_id)),
            TelemetryOp::RecordFeedback { workspace_id, .. } => {
                Some(Supersedes::Workspace(workspace_id))
            }
            TelemetryOp::RecordHeartbeats(_) => None,
        }
    }
}

// Records of this area, as the store keeps them (times in epoch milliseconds).

#[derive(Debug, Clone)]
pub struct HeartbeatRecord {
    pub id: String,
    pub workspace_id: Option<String>,
    pub agent_id: String,
    pub status: String,
    pub latency_ms: f64,
    pub observed_at: i64,
    pub created_at: i64,
    /// `signed` (from the agent) or `ingest` (from a pipeline with an API key).
    pub source: String,
}
