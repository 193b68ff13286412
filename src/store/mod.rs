//! Storage: one object-safe [`Store`] trait, one SQL implementation that speaks to SQLite or
//! Postgres (chosen by URL scheme), and the [`GroupCommit`] writer through which every state
//! change goes.
//!
//! Every write is a [`Change`]: the state change itself ([`Op`]), the nonce it consumes and
//! the audit events that record it. A change is applied atomically (one transaction, or one
//! savepoint inside a group-commit batch), so a state change is never committed without its
//! audit event, and a nonce is never burnt by a request that changed nothing.

mod group_commit;
pub mod model;
mod sql;

pub use group_commit::{GroupCommit, Writer};
pub use model::*;
pub use sql::{OpenOptions, SqlStore};

use async_trait::async_trait;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The nonce of a signed request was already used.
    #[error("nonce already used")]
    Replay,
    /// The agent does not exist or was claimed or changed by someone else meanwhile.
    #[error("unknown agent")]
    UnknownAgent,
    /// The attestation challenge was used (or expired) between the check and the write.
    #[error("challenge already used")]
    ChallengeUsed,
    /// A uniqueness or state precondition does not hold; the text says which.
    #[error("{0}")]
    Conflict(String),
    /// The group-commit writer has stopped (the server is shutting down).
    #[error("the commit writer has stopped")]
    Closed,
    #[error("database error: {0}")]
    Database(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(err: sqlx::Error) -> Self {
        StoreError::Database(err.to_string())
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(err: sqlx::migrate::MigrateError) -> Self {
        StoreError::Database(err.to_string())
    }
}

/// One atomic write: an optional nonce claim, a state change and its audit events.
#[derive(Debug, Clone, Default)]
pub struct Change {
    pub nonce: Option<NonceClaim>,
    pub op: Op,
    pub audit: Vec<AuditEvent>,
}

impl Change {
    pub fn new(op: Op) -> Self {
        Self {
            op,
            ..Self::default()
        }
    }

    pub fn audited(mut self, event: AuditEvent) -> Self {
        self.audit.push(event);
        self
    }

    pub fn with_nonce(mut self, nonce: NonceClaim) -> Self {
        self.nonce = Some(nonce);
        self
    }
}

#[derive(Debug, Clone, Default)]
pub enum Op {
    /// Nothing but the nonce and audit events of the change.
    #[default]
    Nothing,
    /// Creates the default workspace and its key, once per database (guarded by a marker row so
    /// that replicas starting together create it only once). Answers `Bootstrapped(created)`.
    Bootstrap {
        workspace: Workspace,
        key: ApiKeyRecord,
    },
    CreateWorkspace(Workspace),
    CreateApiKey(ApiKeyRecord),
    /// A new agent and its first attestation challenge.
    RegisterAgent {
        agent: AgentRecord,
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
    /// Moves an agent of the workspace from `from` to `to`. Answers `Agent`; `Conflict` when
    /// its status is no longer `from`.
    SetAgentStatus {
        agent_id: String,
        workspace_id: String,
        from: AgentStatus,
        to: AgentStatus,
        at: i64,
    },
    /// Heartbeats, each also moving its agent's `last_seen_at`.
    RecordHeartbeats(Vec<HeartbeatRecord>),
    /// Inserts or updates the mapping; `Conflict` when the key maps to another agent.
    UpsertInventory(InventoryRecord),
}

#[derive(Debug, Clone)]
pub enum Outcome {
    Done,
    Bootstrapped(bool),
    Agent(Box<AgentRecord>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

#[async_trait]
pub trait Store: Send + Sync + 'static {
    fn backend(&self) -> Backend;

    /// One round trip to the database (readiness).
    async fn ping(&self) -> Result<(), StoreError>;

    /// Applies changes in one transaction, each inside its own savepoint: a change whose
    /// preconditions fail is rolled back alone and answered with its error, the others commit.
    /// `Err` means the whole batch was not committed.
    async fn apply(
        &self,
        changes: &[Change],
    ) -> Result<Vec<Result<Outcome, StoreError>>, StoreError>;

    async fn workspace(&self, id: &str) -> Result<Option<Workspace>, StoreError>;
    async fn api_key_by_hash(&self, key_hash: &str) -> Result<Option<ApiKeyRecord>, StoreError>;

    async fn agent(&self, id: &str) -> Result<Option<AgentRecord>, StoreError>;
    /// The agent with this public key in the workspace (or among unclaimed agents for `None`).
    async fn agent_by_public_key(
        &self,
        workspace_id: Option<&str>,
        public_key: &str,
    ) -> Result<Option<AgentRecord>, StoreError>;
    async fn list_agents(&self, query: &AgentQuery) -> Result<Vec<AgentRecord>, StoreError>;
    async fn challenge(&self, id: &str) -> Result<Option<ChallengeRecord>, StoreError>;

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

    async fn audit_events(&self, query: &AuditQuery) -> Result<Vec<AuditEvent>, StoreError>;

    /// Deletes nonce claims that expired before `now`; answers how many.
    async fn delete_expired_nonces(&self, now: i64) -> Result<u64, StoreError>;
}

/// Applies one change outside the group-commit writer (CLI commands, bootstrap).
pub async fn apply_one(store: &dyn Store, change: Change) -> Result<Outcome, StoreError> {
    store
        .apply(std::slice::from_ref(&change))
        .await?
        .pop()
        .unwrap_or(Err(StoreError::Database("empty batch result".into())))
}
