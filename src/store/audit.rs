//! The audit trail as stored. Records are written only as part of a [`super::Change`] (with
//! the state change they describe). Sinks (outbound streams of a workspace's events) are
//! configured through [`AuditOp`]; their delivery progress and the retention prunes are
//! housekeeping, written directly (they are not state changes of the workspace, and the
//! prunes are audited by the use case that runs them).

use std::borrow::Cow;

use async_trait::async_trait;
use serde_json::value::RawValue;
use serde_json::Value;

use super::{Cursor, StoreError};

/// A position in a workspace's commit order (see migration 0020): the last event delivered,
/// compared as `(seq, id)`. On SQLite `seq` is unique; on Postgres it is the writing
/// transaction's id and `id` orders the events of one transaction.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SinkCursor {
    pub seq: i64,
    pub id: String,
}

/// An outbound audit sink as stored.
#[derive(Debug, Clone)]
pub struct SinkRecord {
    pub id: String,
    pub workspace_id: String,
    pub name: String,
    pub url: String,
    /// The signing secret sealed with the master key.
    pub secret_sealed: String,
    pub enabled: bool,
    pub created_at: i64,
    pub created_by: String,
    pub cursor: SinkCursor,
    pub delivered_events: i64,
    pub last_delivered_at: Option<i64>,
    pub last_attempt_at: Option<i64>,
    pub last_error: Option<String>,
    pub failures: i64,
    pub next_attempt_at: i64,
}

/// How far a sink is behind: events after its cursor (counted up to a cap) and the time of
/// the oldest of them.
#[derive(Debug, Clone, Copy, Default)]
pub struct SinkLag {
    pub events: i64,
    pub oldest_at: Option<i64>,
}

impl SinkLag {
    /// Age of the oldest pending event at `now`, seconds (0 when caught up).
    pub fn seconds(&self, now: i64) -> f64 {
        self.oldest_at
            .map_or(0.0, |at| (now - at).max(0) as f64 / 1000.0)
    }
}

/// What a delivery attempt came to, recorded by the replica holding the sink's lease.
#[derive(Debug, Clone)]
pub enum DeliveryOutcome {
    /// The batch after `from` up to `cursor` was accepted: `events` more delivered. Recorded
    /// only if the sink's cursor is still `from`.
    Delivered {
        from: SinkCursor,
        cursor: SinkCursor,
        events: i64,
    },
    /// Nothing was accepted; try again at `retry_at`.
    Failed { error: String, retry_at: i64 },
}

/// A workspace's retention settings (days; `None` keeps everything).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    pub audit_days: Option<i64>,
    pub heartbeat_days: Option<i64>,
}

/// What a retention prune removes: audit events or heartbeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pruned {
    AuditEvents,
    Heartbeats,
}

/// Changes to sinks (configured by people, audited).
#[derive(Debug, Clone)]
pub enum AuditOp {
    /// Stores a new sink whose cursor is the current end of the trail: it receives the events
    /// committed after it (its own creation event first). `Conflict` beyond `max` sinks.
    CreateSink { sink: SinkRecord, max: i64 },
    /// Renames, moves, pauses or resumes a sink; resuming clears its backoff. `NotFound` when
    /// the workspace has no such sink.
    UpdateSink {
        workspace_id: String,
        sink_id: String,
        name: Option<String>,
        url: Option<String>,
        enabled: Option<bool>,
    },
    RotateSinkSecret {
        workspace_id: String,
        sink_id: String,
        secret_sealed: String,
    },
    DeleteSink {
        workspace_id: String,
        sink_id: String,
    },
    /// The sink's secret sealed again (a master-key rotation), if it is still `previous`:
    /// `Conflict` when it changed meanwhile.
    ResealSinkSecret {
        sink_id: String,
        previous: String,
        sealed: String,
    },
    /// Sets the workspace's retention.
    SetRetention {
        workspace_id: String,
        retention: Retention,
        at: i64,
    },
}

impl AuditOp {
    /// See [`super::Op::supersedes`]: nothing here is read by decisions.
    pub fn supersedes(&self) -> Option<super::Supersedes<'_>> {
        None
    }
}

/// Reads of the audit trail, and the sinks' and retention's housekeeping.
#[async_trait]
pub trait AuditStore: Send + Sync {
    /// Newest first, as the query filters and pages them.
    async fn audit_events(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>, StoreError>;

    /// Every workspace's sinks (a master-key rotation seals their secrets again).
    async fn all_sinks(&self) -> Result<Vec<SinkRecord>, StoreError>;
    /// The workspace's sinks, oldest first.
    async fn sinks(&self, workspace_id: &str) -> Result<Vec<SinkRecord>, StoreError>;
    async fn sink(&self, workspace_id: &str, sink_id: &str) -> Result<SinkRecord, StoreError>;
    /// Events after `cursor`, counted up to `cap`, and the oldest one's time.
    async fn sink_lag(
        &self,
        workspace_id: &str,
        cursor: &SinkCursor,
        cap: i64,
    ) -> Result<SinkLag, StoreError>;
    /// Enabled sinks whose next attempt is due at `now` and whose lease is free or `owner`'s.
    async fn due_sinks(&self, now: i64, owner: &str) -> Result<Vec<SinkRecord>, StoreError>;
    /// Takes (or extends) the sink's lease for `owner` until `until`, answering the sink as it
    /// is now (its cursor, URL and secret may have moved since it was listed); `None` when
    /// another replica holds it, or the sink is gone or paused.
    async fn lease_sink(
        &self,
        sink_id: &str,
        owner: &str,
        now: i64,
        until: i64,
    ) -> Result<Option<SinkRecord>, StoreError>;
    /// Gives the lease up.
    async fn release_sink(&self, sink_id: &str, owner: &str) -> Result<(), StoreError>;
    /// Up to `limit` events after `cursor`, in commit order, each with its `seq`; only events
    /// that no running transaction can precede (see migration 0020).
    async fn events_after(
        &self,
        workspace_id: &str,
        cursor: &SinkCursor,
        limit: i64,
    ) -> Result<Vec<(i64, AuditRecord)>, StoreError>;
    /// Records an attempt, if `owner` still holds the lease (and, for a delivery, the cursor is
    /// still where the batch began); `false` otherwise, and nothing was recorded.
    async fn record_delivery(
        &self,
        sink_id: &str,
        owner: &str,
        at: i64,
        outcome: &DeliveryOutcome,
    ) -> Result<bool, StoreError>;

    /// Retention of every workspace that has some.
    async fn retention_settings(&self) -> Result<Vec<(String, Retention)>, StoreError>;
    async fn retention(&self, workspace_id: &str) -> Result<Retention, StoreError>;
    /// Deletes up to `limit` of the workspace's rows of `what` created before `before`; audit
    /// events only when every sink of the workspace has delivered them. Answers how many went.
    async fn prune(
        &self,
        what: Pruned,
        workspace_id: &str,
        before: i64,
        limit: i64,
    ) -> Result<u64, StoreError>;
}

// Records of this area, as the store keeps them (times in epoch milliseconds).

/// One event of the audit trail as stored: written with the change it describes, read back by
/// audit queries.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuditRecord {
    pub id: String,
    pub workspace_id: Option<String>,
    pub created_at: i64,
    pub event_type: String,
    pub agent_id: Option<String>,
    pub action: Option<String>,
    pub decision: Option<String>,
    pub policy_id: Option<String>,
    pub policy_hash: Option<String>,
    pub trace_id: Option<String>,
    pub reasons: Vec<String>,
    pub reason_codes: Vec<String>,
    pub actor: String,
    pub details: Details,
}

/// An audit event's details, a JSON object: a tree as most writers make it and every reader
/// gets it back from the store, or the compact text a decision's event is written as once on
/// the request path (no tree is built per check), which the store writes as it is.
#[derive(Debug, Clone)]
pub enum Details {
    Tree(Value),
    Text(Box<RawValue>),
}

impl Default for Details {
    fn default() -> Self {
        Self::Tree(Value::Null)
    }
}

impl From<Value> for Details {
    fn from(value: Value) -> Self {
        Self::Tree(value)
    }
}

impl PartialEq for Details {
    fn eq(&self, other: &Self) -> bool {
        self.value() == other.value()
    }
}

impl Details {
    /// The details as a tree (text is read into one).
    pub fn value(&self) -> Cow<'_, Value> {
        match self {
            Self::Tree(value) => Cow::Borrowed(value),
            Self::Text(text) => Cow::Owned(read_text(text)),
        }
    }

    /// The tree, when the details are one (as every record read back from the store is).
    pub fn as_tree(&self) -> Option<&Value> {
        match self {
            Self::Tree(value) => Some(value),
            Self::Text(_) => None,
        }
    }

    pub fn into_value(self) -> Value {
        match self {
            Self::Tree(value) => value,
            Self::Text(text) => read_text(&text),
        }
    }

    /// Sets one field (details that are not an object yet, none, become one).
    pub fn insert(&mut self, key: &str, field: Value) {
        let mut fields = match std::mem::take(self).into_value() {
            Value::Object(fields) => fields,
            _ => serde_json::Map::new(),
        };
        fields.insert(key.to_owned(), field);
        *self = Self::Tree(Value::Object(fields));
    }
}

/// A `RawValue` holds valid JSON, so reading it back cannot fail.
fn read_text(text: &RawValue) -> Value {
    serde_json::from_str(text.get()).unwrap_or(Value::Null)
}

#[derive(Debug, Clone, Default)]
pub struct AuditQuery {
    pub workspace_id: String,
    pub agent_id: Option<String>,
    pub action: Option<String>,
    pub decision: Option<String>,
    pub trace_id: Option<String>,
    pub event_type: Option<String>,
    pub start_ms: Option<i64>,
    pub end_ms: Option<i64>,
    /// Past this row in the order of the listing.
    pub after: Option<Cursor>,
    pub limit: i64,
    /// Oldest first (the audit stream) instead of newest first.
    pub oldest_first: bool,
    /// Only event types starting with this (e.g. `vault.`).
    pub event_type_prefix: Option<String>,
    /// Only events whose details name this secret set (`GET /v1/vault/audit`).
    pub secret_set_id: Option<String>,
    /// Only the event with this id (the console's page of one event).
    pub event_id: Option<String>,
    /// Only events of this policy (filtered along the index read: a dry run's replay).
    pub policy_id: Option<String>,
}

#[cfg(test)]
mod tests {
    use serde_json::value::RawValue;

    use super::*;

    #[test]
    fn details_as_text_read_and_change_as_the_tree_they_hold() {
        let text = Details::Text(
            RawValue::from_string(r#"{"input":{"n":1},"challenge_id":null}"#.into()).unwrap(),
        );
        let tree = Details::from(serde_json::json!({"challenge_id": null, "input": {"n": 1}}));
        assert_eq!(text, tree);
        assert_eq!(text.value()["input"]["n"], 1);
        assert!(text.as_tree().is_none());
        let mut changed = text.clone();
        changed.insert("effect_refused", Value::Bool(true));
        assert_eq!(
            changed.into_value(),
            serde_json::json!({"input": {"n": 1}, "challenge_id": null, "effect_refused": true})
        );
        let mut none = Details::default();
        none.insert("k", Value::from(1));
        assert_eq!(none.as_tree(), Some(&serde_json::json!({"k": 1})));
    }
}
