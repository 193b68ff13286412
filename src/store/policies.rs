//! Policies: their versions, the idempotency records of applies, and the challenges (approval
//! requests) that `challenge` decisions open.

use async_trait::async_trait;
use serde_json::Value;

use crate::domain::ChallengeStatus;

use super::{Cursor, StoreError, Supersedes};

/// The conflict of `PolicyOp::ClaimApprovalNotice` when the agent's approval mails of its
/// window are spent.
pub const APPROVAL_MAILS_SPENT: &str = "the agent's approval mails of this window are spent";

/// The conflict of `PolicyOp::ConsumeApproval` when the approval was used meanwhile.
pub const APPROVAL_USED: &str = "the approval was used meanwhile";

/// Reads of policies, their versions, idempotency records and policy challenges.
#[async_trait]
pub trait PolicyStore: Send + Sync {
    async fn policy(
        &self,
        workspace_id: &str,
        policy_id: &str,
    ) -> Result<Option<PolicyRecord>, StoreError>;
    async fn policies(&self, workspace_id: &str) -> Result<Vec<PolicyRecord>, StoreError>;
    /// Every policy of every workspace (to warm a cache).
    async fn all_policies(&self) -> Result<Vec<PolicyRecord>, StoreError>;
    /// Every policy's current version: `(workspace_id, policy_id, version)`.
    async fn policy_heads(&self) -> Result<Vec<(String, String, i64)>, StoreError>;
    async fn policy_version(
        &self,
        workspace_id: &str,
        policy_id: &str,
        version: i64,
    ) -> Result<Option<PolicyVersion>, StoreError>;
    /// Newest first.
    async fn policy_versions(
        &self,
        workspace_id: &str,
        policy_id: &str,
    ) -> Result<Vec<PolicyVersion>, StoreError>;
    /// The record for `key` if stored after `since`.
    async fn idempotency(
        &self,
        workspace_id: &str,
        key: &str,
        since: i64,
    ) -> Result<Option<IdempotencyRecord>, StoreError>;
    async fn policy_challenge(&self, id: &str) -> Result<Option<PolicyChallenge>, StoreError>;
    async fn policy_challenge_by_token(
        &self,
        token_hash: &str,
    ) -> Result<Option<PolicyChallenge>, StoreError>;
    /// The workspace's challenges, newest first, as the query filters and pages them.
    async fn policy_challenges(
        &self,
        query: &ChallengeQuery,
    ) -> Result<Vec<PolicyChallenge>, StoreError>;
    /// The newest challenge of this agent and request fingerprint decided at or after `since`
    /// that still counts: denied, or approved and not yet used; with `approved_by_person`, an
    /// approval counts only when a person took it (not the approval link alone).
    async fn decided_challenge(
        &self,
        workspace_id: &str,
        agent_id: &str,
        fingerprint: &str,
        since: i64,
        approved_by_person: bool,
    ) -> Result<Option<PolicyChallenge>, StoreError>;
}

/// Changes to policies, idempotency records and policy challenges.
#[derive(Debug, Clone)]
pub enum PolicyOp {
    /// Applies a policy version; `Conflict` when the policy moved past `expected_version`.
    Apply(Box<PolicyApply>),
    /// Stores the first response to an `Idempotency-Key` (a later one with the key is ignored).
    StoreIdempotency(Box<IdempotencyRecord>),
    CreateChallenge(Box<PolicyChallenge>),
    /// `approved` or `denied`, by whom, and why if they said; `Conflict` unless the challenge
    /// is pending and unexpired.
    DecideChallenge {
        id: String,
        status: crate::domain::ChallengeStatus,
        by: String,
        reason: Option<String>,
        at: i64,
    },
    /// Uses an approval up; `Conflict` when it was used meanwhile.
    ConsumeApproval {
        id: String,
        at: i64,
    },
    /// Claims the approval mail of a new challenge: `Applied::Count(1)` when it is to go out.
    ClaimApprovalNotice(Box<ApprovalNotice>),
}

/// The approval mail of a challenge goes out once per agent and request fingerprint while a
/// mailed challenge for it is still pending, and at most `max_per_window` times per agent in a
/// window (a window that started at or before `window_start` has ended).
#[derive(Debug, Clone)]
pub struct ApprovalNotice {
    pub workspace_id: String,
    pub agent_id: String,
    pub fingerprint: String,
    pub challenge_id: String,
    pub now: i64,
    /// When the challenge expires: a later challenge of the same request may be mailed then.
    pub expires_at: i64,
    pub window_start: i64,
    pub max_per_window: i64,
}

impl PolicyOp {
    /// See [`super::Op::supersedes`].
    pub fn supersedes(&self) -> Option<Supersedes<'_>> {
        match self {
            PolicyOp::Apply(apply) => Some(Supersedes::Workspace(&apply.version.workspace_id)),
            PolicyOp::StoreIdempotency(_)
            | PolicyOp::CreateChallenge(_)
            | PolicyOp::DecideChallenge { .. }
            | PolicyOp::ConsumeApproval { .. }
            | PolicyOp::ClaimApprovalNotice(_) => None,
        }
    }
}

// Records of this area, as the store keeps them (times in epoch milliseconds).

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
