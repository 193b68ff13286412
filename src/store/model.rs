//! Records as the store keeps them. Times are epoch milliseconds.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::value::RawValue;
use serde_json::Value;

use crate::domain::{AgentStatus, ChallengeStatus, RiskTier, Role};

#[derive(Debug, Clone)]
pub struct Workspace {
    pub id: String,
    pub name: String,
    pub created_at: i64,
}

/// What people read for an actor of the audit trail (see `AccountStore::actor_names`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActorName {
    /// `user`, `api_key` or `agent`: the part of the actor before `:`.
    pub kind: String,
    pub id: String,
    /// The user's email address, the key's or the agent's name (`None` for an unnamed key).
    pub name: Option<String>,
    /// An API key's last four characters.
    pub last_four: Option<String>,
}

/// A workspace API key as stored: its SHA-256 hash, never the key.
#[derive(Debug, Clone)]
pub struct ApiKeyRecord {
    pub id: String,
    pub workspace_id: String,
    pub key_hash: String,
    /// `live` or `test`.
    pub mode: String,
    pub last_four: String,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
    pub name: Option<String>,
    /// `usr_...` of the user who made it, `None` for the CLI and bootstrap.
    pub created_by: Option<String>,
    pub last_used_at: Option<i64>,
    /// Space-separated scopes that narrow the key; `None` for none (see `domain::access`).
    pub scopes: Option<String>,
    /// Requests and decisions per second per replica; `None` for the server's default.
    pub rate_limit: Option<i64>,
}

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

/// A single-use nonce: the claim fails with [`super::StoreError::Replay`] while an unexpired
/// claim of the same `(scope, nonce)` exists, on any replica sharing the database.
#[derive(Debug, Clone)]
pub struct NonceClaim {
    /// `key:<public key>` for agent-signed requests: a signature is over the request, not the
    /// agent, so its nonce is spent for every agent that shares the key.
    pub scope: String,
    pub nonce: String,
    pub expires_at: i64,
    /// The claim holds only while this agent is active (checked in the same transaction).
    pub agent_id: Option<String>,
}

/// Position in a newest-first listing: the `(created_at, id)` of the last item seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub created_at: i64,
    pub id: String,
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

/// Which policy challenges to list (newest first).
#[derive(Debug, Clone, Default)]
pub struct ChallengeQuery {
    pub workspace_id: String,
    /// Effective status: `pending` and `expired` both read stored pending rows, split at `now`.
    pub status: Option<crate::domain::ChallengeStatus>,
    /// Only decided challenges (approved or denied): the console's history.
    pub decided: bool,
    pub agent_id: Option<String>,
    pub now: i64,
    pub after: Option<Cursor>,
    pub limit: i64,
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
    pub limit: i64,
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

/// A dashboard user, known by email.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub id: String,
    pub email: String,
    pub created_at: i64,
    pub last_login_at: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct Membership {
    pub workspace: Workspace,
    pub user_id: String,
    pub role: Role,
    pub created_at: i64,
}

/// A login session, stored by the SHA-256 of its id.
#[derive(Debug, Clone)]
pub struct SessionRecord {
    pub id_hash: String,
    pub user_id: String,
    pub workspace_id: Option<String>,
    pub created_at: i64,
    pub expires_at: i64,
    pub revoked_at: Option<i64>,
}

/// A personal access token (`svc_pat_...`), stored by its hash.
#[derive(Debug, Clone)]
pub struct PatRecord {
    pub id: String,
    pub user_id: String,
    pub name: String,
    pub token_hash: String,
    pub last_four: String,
    pub created_at: i64,
    pub expires_at: i64,
    pub revoked_at: Option<i64>,
    pub last_used_at: Option<i64>,
    /// Space-separated scopes that narrow the token; `None` for none (see `domain::access`).
    pub scopes: Option<String>,
    /// The token that made this one (`POST /v1/auth/tokens` with a token); `None` when a
    /// session made it. Revoking the parent revokes this one; it never outlives the parent.
    pub parent_id: Option<String>,
}

#[derive(Debug, Clone)]
pub struct OutboxMessage {
    pub id: String,
    pub recipients: Vec<String>,
    pub subject: String,
    pub text_body: Option<String>,
    pub html_body: Option<String>,
    /// Files delivered with the message, in order.
    pub attachments: Vec<OutboxAttachment>,
    pub created_at: i64,
}

/// A file of an outbox message (stored as JSON with the content in base64).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxAttachment {
    pub filename: String,
    pub content_type: String,
    pub content: Vec<u8>,
}

#[derive(Debug, Clone)]
pub struct StatusCheck {
    pub id: String,
    pub component: String,
    /// `ok`, `degraded` or `down`.
    pub status: String,
    pub detail: String,
    pub latency_ms: f64,
    pub checked_at: i64,
}

#[derive(Debug, Clone)]
pub struct ContactSubmission {
    pub id: String,
    pub name: String,
    pub email: String,
    pub message: String,
    pub created_at: i64,
}

/// The current state of a policy of a workspace.
#[derive(Debug, Clone)]
pub struct PolicyRecord {
    pub workspace_id: String,
    pub id: String,
    pub name: String,
    pub current_version: i64,
    pub current_hash: String,
    pub created_at: i64,
    pub updated_at: i64,
}

/// One applied version of a policy.
#[derive(Debug, Clone)]
pub struct PolicyVersion {
    pub workspace_id: String,
    pub policy_id: String,
    pub version: i64,
    pub hash: String,
    /// The spec as applied (JSON).
    pub spec: Value,
    pub cedar: String,
    /// Who applied it: `user:<id>`.
    pub author: String,
    pub created_at: i64,
}

/// An apply: the new version and what it materialises.
#[derive(Debug, Clone)]
pub struct PolicyApply {
    pub name: String,
    /// The version the apply was computed against; 0 for a policy that does not exist yet.
    pub expected_version: i64,
    pub version: PolicyVersion,
    /// `(group, agent_id)` explicit memberships.
    pub members: Vec<(String, String)>,
    /// `(binding, group, block, actions JSON)`.
    pub bindings: Vec<(String, String, String, String)>,
}

/// A stored response for an `Idempotency-Key`.
#[derive(Debug, Clone)]
pub struct IdempotencyRecord {
    pub workspace_id: String,
    pub key: String,
    pub request_hash: String,
    pub status: i64,
    pub response: String,
    pub created_at: i64,
}

/// A `challenge` decision waiting for a human.
#[derive(Debug, Clone)]
pub struct PolicyChallenge {
    pub id: String,
    pub workspace_id: String,
    pub agent_id: String,
    pub policy_id: String,
    pub action: String,
    /// SHA-256 of the action, context and email facts of the challenged request.
    pub fingerprint: String,
    pub token_hash: String,
    /// Stored as `pending`, `approved` or `denied`.
    pub status: ChallengeStatus,
    pub reasons: Vec<String>,
    pub reason_codes: Vec<String>,
    /// A redacted summary of what was asked.
    pub summary: Value,
    pub trace_id: String,
    pub created_at: i64,
    pub expires_at: i64,
    pub decided_at: Option<i64>,
    pub decided_by: Option<String>,
    /// The reason the person who decided gave, if any.
    pub decision_reason: Option<String>,
    pub consumed_at: Option<i64>,
    pub raised_by: crate::domain::Raiser,
    /// The emails the deciding rules name as approvers (lower case).
    pub approvers: Vec<String>,
}

/// Something that changed since a moment, for cache invalidation across replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invalidation {
    Agent(String),
    ApiKey(String),
    /// `(workspace_id, policy_id)`.
    Policy(String, String),
}

/// A minted credential; only the token's hash is kept.
#[derive(Debug, Clone)]
pub struct CredentialRecord {
    pub id: String,
    pub workspace_id: String,
    pub agent_id: String,
    pub token_hash: String,
    /// `opaque` or `jwt`.
    pub token_type: String,
    pub provider: Option<String>,
    pub audience: Option<String>,
    pub scopes: Vec<String>,
    pub one_time: bool,
    pub created_at: i64,
    pub expires_at: i64,
    pub revoked_at: Option<i64>,
    pub revoked_reason: Option<String>,
    pub used_at: Option<i64>,
}

/// The workspace's kill switch.
#[derive(Debug, Clone, Default)]
pub struct KillSwitch {
    pub minting_paused: bool,
    pub minting_paused_reason: Option<String>,
    /// Credentials minted before this instant count as revoked.
    pub all_revoked_at: Option<i64>,
}

/// One of the JWT issuer's Ed25519 keys.
#[derive(Clone)]
pub struct SigningKeyRecord {
    pub kid: String,
    /// The 32-byte seed, base64.
    pub private_key: crate::secret::Secret,
    /// The 32-byte public key, base64url without padding (the JWK `x`).
    pub public_key: String,
    pub created_at: i64,
    pub retired_at: Option<i64>,
    /// A retired key is published until then (its last tokens' expiry).
    pub publish_until: Option<i64>,
}

impl std::fmt::Debug for SigningKeyRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKeyRecord")
            .field("kid", &self.kid)
            .field("public_key", &self.public_key)
            .field("created_at", &self.created_at)
            .field("retired_at", &self.retired_at)
            .field("publish_until", &self.publish_until)
            .finish_non_exhaustive()
    }
}

/// A vault secret set (its values are in [`SecretVersion`]s).
#[derive(Debug, Clone)]
pub struct SecretSetRecord {
    pub id: String,
    pub workspace_id: String,
    /// Workspace-local, from 1 (the public client sends it as `secret_set_id`).
    pub number: i64,
    pub name: String,
    pub provider: String,
    pub environment: String,
    pub current_version: i64,
    /// The set's data key, sealed with the master key.
    pub data_key: String,
    /// Bumped by each re-wrap of the data key (`acp admin vault rewrap`).
    pub key_version: i64,
    pub created_at: i64,
    pub updated_at: i64,
    pub deleted_at: Option<i64>,
    pub destroyed_at: Option<i64>,
}

/// Which secret set a request names: its id (`ss_...`) or its workspace-local number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetRef {
    Id(String),
    Number(i64),
}

/// One version of a secret set: its entries sealed with the set's data key, the key names and
/// proxy profiles in the clear.
#[derive(Clone)]
pub struct SecretVersion {
    pub secret_set_id: String,
    pub version: i64,
    pub sealed: String,
    /// The entries' key names, sorted.
    pub keys: Vec<String>,
    /// The proxy profiles (JSON object), templates but no values.
    pub profiles: serde_json::Value,
    pub author: String,
    pub created_at: i64,
}

impl std::fmt::Debug for SecretVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretVersion")
            .field("secret_set_id", &self.secret_set_id)
            .field("version", &self.version)
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

/// A grant of a secret set to an agent or an agent group.
#[derive(Debug, Clone)]
pub struct GrantRecord {
    pub id: String,
    pub workspace_id: String,
    pub secret_set_id: String,
    pub agent_id: Option<String>,
    pub group_name: Option<String>,
    /// `None` is every key (`"*"`).
    pub allowed_keys: Option<Vec<String>>,
    pub allowed_actions: Vec<crate::domain::VaultAction>,
    pub expires_at: Option<i64>,
    pub created_at: i64,
    pub created_by: String,
    pub revoked_at: Option<i64>,
}

/// A vault lease: a workflow lease (issued for an agent by a person, token or API key) or a
/// request lease (minted by the agent from a workflow lease, short and counted).
#[derive(Debug, Clone)]
pub struct LeaseRecord {
    pub id: String,
    pub workspace_id: String,
    /// `workflow` or `request`.
    pub kind: String,
    /// For a request lease: the workflow lease it was minted from.
    pub workflow_id: Option<String>,
    pub agent_id: String,
    pub secret_set_id: String,
    pub purpose: String,
    /// What the lease is for: `read`, `proxy` (never `mint_lease`).
    pub actions: Vec<crate::domain::VaultAction>,
    /// `None` is every key the grant allows.
    pub keys: Option<Vec<String>>,
    pub token_hash: String,
    /// Uses left (request leases); `None` for workflow leases.
    pub uses_left: Option<i64>,
    pub expires_at: i64,
    pub revoked_at: Option<i64>,
    pub created_at: i64,
    pub created_by: String,
}

/// Which leases to list or revoke.
#[derive(Debug, Clone, Default)]
pub struct LeaseFilter {
    pub agent_id: Option<String>,
    pub secret_set_id: Option<String>,
    pub kind: Option<String>,
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
