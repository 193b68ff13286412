//! Agents and their identity: registration, attestation challenges, claim codes, status.

use async_trait::async_trait;

use super::{
    AgentQuery, AgentRecord, AgentStatus, ChallengeRecord, ClaimCodeRecord, StoreError, Supersedes,
};

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
