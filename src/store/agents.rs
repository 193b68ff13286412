//! Agents and their identity: registration, attestation challenges, claim codes, status.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde_json::Value;

use crate::domain::RiskTier;

use super::{AgentStatus, Cursor, StoreError, Supersedes};

/// Reads of agents, their challenges and claim codes.
#[async_trait]
pub trait AgentStore: Send + Sync {
    async fn agent(&self, id: &str) -> Result<Option<AgentRecord>, StoreError>;
    /// The agent with this public key in the workspace (or among unclaimed agents for `None`).
    async fn agent_by_public_key(
        &self,
        workspace_id: Option<&str>,
        public_key: &str,
    ) -> Result<Option<AgentRecord>, StoreError>;
    /// The agents of the workspace among `ids` (unknown ids are left out).
    async fn agents_in_workspace(
        &self,
        workspace_id: &str,
        ids: &[String],
    ) -> Result<Vec<AgentRecord>, StoreError>;
    async fn list_agents(&self, query: &AgentQuery) -> Result<Vec<AgentRecord>, StoreError>;
    /// How many agents of the workspace have each status (statuses without agents left out).
    async fn agent_status_counts(
        &self,
        workspace_id: &str,
    ) -> Result<Vec<(AgentStatus, i64)>, StoreError>;
    async fn challenge(&self, id: &str) -> Result<Option<ChallengeRecord>, StoreError>;
    async fn claim_code(&self, code_hash: &str) -> Result<Option<ClaimCodeRecord>, StoreError>;
}

/// Changes to agents, their challenges and claim codes.
#[derive(Debug, Clone)]
pub enum AgentOp {
    /// A new agent and its first attestation challenge.
    Register {
        agent: Box<AgentRecord>,
        challenge: ChallengeRecord,
    },
    /// A new challenge for an agent that already exists.
    IssueChallenge(ChallengeRecord),
    /// Marks the challenge used and the agent attested (pending becomes active). Answers
    /// `Agent`; `ChallengeUsed` when the challenge was used or expired meanwhile.
    Attest {
        challenge_id: String,
        agent_id: String,
        at: i64,
    },
    CreateClaimCode(ClaimCodeRecord),
    /// Redeems the claim code and moves the unclaimed agent into the workspace; `Conflict` when
    /// the code was used or expired, or the agent was claimed meanwhile.
    Claim {
        code_hash: String,
        agent_id: String,
        workspace_id: String,
        at: i64,
    },
    /// Redeems the claim code without claiming; `Conflict` when it was used or expired.
    RejectClaim {
        code_hash: String,
        at: i64,
    },
    /// Moves an agent of the workspace from `from` to `to`. Answers `Agent`; `Conflict` when
    /// its status is no longer `from`.
    SetStatus {
        agent_id: String,
        workspace_id: String,
        from: AgentStatus,
        to: AgentStatus,
        at: i64,
    },
}

impl AgentOp {
    /// See [`super::Op::supersedes`].
    pub fn supersedes(&self) -> Option<Supersedes<'_>> {
        match self {
            AgentOp::Claim { workspace_id, .. } | AgentOp::SetStatus { workspace_id, .. } => {
                Some(Supersedes::Workspace(workspace_id))
            }
            AgentOp::Attest { agent_id, .. } => Some(Supersedes::AgentsWorkspace(agent_id)),
            AgentOp::Register { .. }
            | AgentOp::IssueChallenge(_)
            | AgentOp::CreateClaimCode(_)
            | AgentOp::RejectClaim { .. } => None,
        }
    }
}

// Records of this area, as the store keeps them (times in epoch milliseconds).

#[derive(Debug, Clone)]
pub struct AgentRecord {
    pub id: String,
    /// `None` while the agent is unclaimed.
    pub workspace_id: Option<String>,
    pub name: String,
    /// Standard base64 of the raw 32-byte Ed25519 key.
    pub public_key: String,
    pub key_type: String,
    pub metadata: Value,
    pub status: AgentStatus,
    pub risk_tier: RiskTier,
    pub created_at: i64,
    pub updated_at: i64,
    pub attested_at: Option<i64>,
    pub last_seen_at: Option<i64>,
}

impl AgentRecord {
    /// True when the agent belongs to this workspace. Agents of another workspace and
    /// unclaimed agents are invisible to a workspace's key.
    pub fn in_workspace(&self, workspace_id: &str) -> bool {
        self.workspace_id.as_deref() == Some(workspace_id)
    }
}

#[derive(Debug, Clone)]
pub struct ChallengeRecord {
    pub id: String,
    pub agent_id: String,
    /// Standard base64 of the random bytes the agent signs.
    pub challenge: String,
    pub created_at: i64,
    pub expires_at: i64,
    pub used_at: Option<i64>,
    /// Name proposed by the registration that issued this challenge; applied on attest.
    pub name: Option<String>,
    /// Metadata proposed by the registration; applied on attest.
    pub metadata: Option<Value>,
}

#[derive(Debug, Clone)]
pub struct ClaimCodeRecord {
    pub code_hash: String,
    pub agent_id: String,
    pub created_at: i64,
    pub expires_at: i64,
    /// Set once the code was redeemed (claimed or rejected).
    pub used_at: Option<i64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct InventoryRecord {
    pub workspace_id: String,
    pub external_agent_key: String,
    pub agent_id: String,
    pub display_name: Option<String>,
    pub labels: Value,
    pub environment: Option<String>,
    pub source: Option<String>,
    pub status: String,
    pub created_at: i64,
    pub updated_at: i64,
}

#[derive(Debug, Clone, Default)]
pub struct AgentQuery {
    pub workspace_id: String,
    pub status: Option<AgentStatus>,
    pub name: Option<String>,
    pub risk_tier: Option<RiskTier>,
    /// Agents whose id is this, or whose name holds it (case-insensitive for ASCII).
    pub search: Option<String>,
    /// Only agents with an inventory item whose labels hold this (see [`label_terms`]).
    pub label: Option<String>,
    /// Only the members of a policy group.
    pub group: Option<GroupMembers>,
    /// Only agents whose last heartbeat (`last_seen_at`) is in this window.
    pub last_seen: Option<LastSeen>,
    pub after: Option<Cursor>,
    /// Listed in order of their ids, within this range, instead of newest first (`after` is
    /// then not used).
    pub by_id: Option<IdRange>,
    pub limit: i64,
}

/// Agent ids past `after` (exclusive) and up to `through` (inclusive), either end open.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdRange {
    pub after: Option<String>,
    pub through: Option<String>,
}

/// The agents of a policy spec's group, as the store can match them: its explicit members, and
/// any agent one of its selectors matches (every listed metadata key and inventory label with
/// that value, compared as text; see `docs/policy-spec.md`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupMembers {
    pub ids: Vec<String>,
    pub selectors: Vec<SelectorTerms>,
}

/// One selector of a group: metadata and label keys with their values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SelectorTerms {
    pub metadata: Vec<(String, String)>,
    pub labels: Vec<(String, String)>,
}

/// A window of an agent's last heartbeat, in epoch milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LastSeen {
    /// Seen at or after this time.
    Since(i64),
    /// Seen, but last before this time.
    Before(i64),
    /// Never seen.
    Never,
}

#[derive(Debug, Clone, Default)]
pub struct InventoryQuery {
    pub workspace_id: String,
    pub environment: Option<String>,
    pub status: Option<String>,
    /// Items whose labels hold this (one of their [`label_terms`]).
    pub label: Option<String>,
    /// Past this `external_agent_key` (items are listed in its order).
    pub after: Option<String>,
    pub limit: i64,
}

/// Where a label term comes from: an entry of a list, a key of an object, or `key=value` of an
/// object's string value. A selector `labels: {k: v}` matches a `pair` `k=v`, or (for `v` =
/// `"true"`) an `entry` `k`, as policies read labels.
pub const TERM_ENTRY: &str = "entry";
pub const TERM_KEY: &str = "key";
pub const TERM_PAIR: &str = "pair";

/// What `label=X` matches in inventory `labels`, as the terms stored beside each item
/// (`agent_inventory_labels`) with where each comes from: labels are a list of strings (the
/// documented form), each entry a term; or an object of string values, each key a term (the
/// key with any value) and `key=value` for each string value. A key holding `=` gives no term:
/// `label=a=b` means the key `a` with the value `b`.
pub fn label_terms(labels: &Value) -> BTreeMap<String, &'static str> {
    match labels {
        Value::Array(items) => items
            .iter()
            .filter_map(Value::as_str)
            .map(|entry| (entry.to_owned(), TERM_ENTRY))
            .collect(),
        Value::Object(map) => map
            .iter()
            .filter(|(key, _)| !key.contains('='))
            .flat_map(|(key, value)| {
                let pair = value.as_str().map(|v| (format!("{key}={v}"), TERM_PAIR));
                std::iter::once((key.clone(), TERM_KEY)).chain(pair)
            })
            .collect(),
        _ => BTreeMap::new(),
    }
}

/// Inventory `labels` as the key/value pairs policies read: an object as is; each entry of a
/// list as that key with the value `"true"`.
pub fn labels_as_pairs(labels: Value) -> serde_json::Map<String, Value> {
    match labels {
        Value::Object(map) => map,
        Value::Array(items) => items
            .into_iter()
            .filter_map(|item| match item {
                Value::String(key) => Some((key, Value::String("true".into()))),
                _ => None,
            })
            .collect(),
        _ => serde_json::Map::new(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// What `label=` meant when items were matched one by one: the terms must agree with it.
    fn labels_hold(labels: &Value, wanted: &str) -> bool {
        match labels {
            Value::Array(items) => items.iter().any(|item| item.as_str() == Some(wanted)),
            Value::Object(map) => match wanted.split_once('=') {
                Some((key, value)) => map.get(key).and_then(Value::as_str) == Some(value),
                None => map.contains_key(wanted),
            },
            _ => false,
        }
    }

    #[test]
    fn label_terms_match_what_a_label_filter_means() {
        let cases = [
            json!(["payments", "env=prod", "", 3]),
            json!({"env": "prod", "tier": 2, "team": "a=b", "x=y": "z", "": "e"}),
            json!("payments"),
            json!(null),
        ];
        let wanted = [
            "payments", "env=prod", "env", "env=dev", "", "tier", "tier=2", "team", "team=a=b",
            "x=y", "x=y=z", "x", "=e", "3",
        ];
        for labels in &cases {
            let terms = label_terms(labels);
            for w in wanted {
                assert_eq!(
                    terms.contains_key(w),
                    labels_hold(labels, w),
                    "{labels} / {w}"
                );
            }
        }
        assert_eq!(
            label_terms(&cases[1])
                .iter()
                .map(|(t, s)| (t.as_str(), *s))
                .collect::<Vec<_>>(),
            [
                ("", TERM_KEY),
                ("=e", TERM_PAIR),
                ("env", TERM_KEY),
                ("env=prod", TERM_PAIR),
                ("team", TERM_KEY),
                ("team=a=b", TERM_PAIR),
                ("tier", TERM_KEY)
            ]
        );
        assert_eq!(label_terms(&cases[0]).get("payments"), Some(&TERM_ENTRY));
    }
}
