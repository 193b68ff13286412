//! Storage: one object-safe [`Store`] trait, one SQL implementation that speaks to SQLite or
//! Postgres (chosen by URL scheme), and the [`GroupCommit`] writer through which every state
//! change goes.
//!
//! The store is split by area, each with a trait of its reads and an enum of its operations
//! (lldap's backend handler traits are the model): agents ([`AgentStore`], [`AgentOp`]),
//! accounts ([`AccountStore`], [`AccountOp`]), policies, credentials, email, audit, telemetry
//! the site, the vault and the MCP gateway's servers. [`Store`] is all of them plus what crosses areas: applying changes, the
//! workspace versions replicas compare, housekeeping. Each area's records (the rows as the
//! store keeps them, times in epoch milliseconds) are in the area's file beside its trait, and
//! its SQL is one file under `sql/`.
//!
//! Every write is a [`Change`]: the state change itself ([`Op`]), the nonce it consumes and
//! the audit records that describe it. A change is applied atomically (one transaction, or one
//! savepoint inside a group-commit batch), so a state change is never committed without its
//! audit record, and a nonce is never burnt by a request that changed nothing.

mod accounts;
mod agents;
mod audit;
mod change;
mod credentials;
mod email;
mod group_commit;
mod mcp;
mod policies;
mod site;
mod sql;
mod telemetry;
mod vault;

pub use accounts::{AccountOp, AccountStore, FirstOwner, ALREADY_BOOTSTRAPPED};
pub use accounts::{
    ActorName, ApiKeyRecord, Membership, PatRecord, SessionRecord, User, Workspace,
};
pub use agents::{
    label_terms, labels_as_pairs, AgentQuery, AgentRecord, ChallengeRecord, ClaimCodeRecord,
    GroupMembers, IdRange, InventoryQuery, InventoryRecord, LastSeen, SelectorTerms, TERM_ENTRY,
    TERM_KEY, TERM_PAIR,
};
pub use agents::{AgentOp, AgentStore};
pub use audit::{
    AuditOp, AuditStore, DeliveryOutcome, Pruned, Retention, SinkCursor, SinkLag, SinkRecord,
};
pub use audit::{AuditQuery, AuditRecord, Details};
pub use change::NonceClaim;
pub use change::{Applied, Basis, Change, Op};
pub use credentials::{ActiveCredential, CredentialOp, CredentialQuery, CredentialStore};
pub use credentials::{CredentialRecord, KillSwitch, SigningKeyRecord};
pub use email::{EmailOp, EmailStore};
pub use email::{OutboxAttachment, OutboxMessage};
pub use group_commit::{GroupCommit, Writer};
pub use mcp::{
    McpGate, McpOp, McpServerAuth, McpServerRecord, McpSessionRecord, McpStore, ServerRef,
};
pub use policies::{ApprovalNotice, PolicyOp, PolicyStore, APPROVAL_MAILS_SPENT, APPROVAL_USED};
pub use policies::{
    ChallengeQuery, IdempotencyRecord, PolicyApply, PolicyChallenge, PolicyRecord, PolicyVersion,
};
pub use site::{ContactSubmission, StatusCheck};
pub use site::{SiteOp, SiteStore};
pub use sql::backup;
pub use sql::{sqlite_file, OpenOptions, SqlStore, SqliteSynchronous, IDEMPOTENCY_KEY_TAKEN};
pub use telemetry::HeartbeatRecord;
pub use telemetry::{TelemetryOp, TelemetryStore};
pub use vault::{
    GrantRecord, LeaseFilter, LeaseRecord, LeasedScene, SecretSetRecord, SecretVersion, SetRef,
};
pub use vault::{VaultOp, VaultStore};

use async_trait::async_trait;

use crate::domain::{AgentStatus, Role};

/// Position in a newest-first listing: the `(created_at, id)` of the last item seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub created_at: i64,
    pub id: String,
}

/// Something that changed since a moment, for cache invalidation across replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invalidation {
    Agent(String),
    ApiKey(String),
    /// `(workspace_id, policy_id)`.
    Policy(String, String),
}

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
    /// The agent is no longer active (checked when its nonce was claimed).
    #[error("the agent is not active")]
    AgentNotActive,
    /// A transient conflict between concurrent transactions (deadlock, serialization): the
    /// batch was rolled back and may be retried.
    #[error("transient conflict: {0}")]
    Retryable(String),
    /// The database refused a value (for example a NUL character in text).
    #[error("the database refused a value: {0}")]
    InvalidInput(String),
    /// The login token is unknown, used or expired.
    #[error("the login link is invalid, used or expired")]
    TokenInvalid,
    /// The thing to change does not exist (in this scope).
    #[error("not found")]
    NotFound,
    /// A uniqueness or state precondition does not hold; the text says which.
    #[error("{0}")]
    Conflict(String),
    /// The change was decided on cached state of a workspace whose version has moved since
    /// (another request, on this replica or another, changed a key, agent, policy or the kill
    /// switch): nothing was written; decide again on fresh state. Carries the current version.
    #[error("the workspace changed since the decision was made")]
    Stale(i64),
    /// The group-commit writer has stopped (the server is shutting down).
    #[error("the commit writer has stopped")]
    Closed,
    #[error("database error: {0}")]
    Database(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(err: sqlx::Error) -> Self {
        let code = err
            .as_database_error()
            .and_then(|e| e.code())
            .map(|c| c.into_owned());
        match code.as_deref() {
            // Postgres: deadlock detected, serialization failure.
            Some("40P01" | "40001") => StoreError::Retryable(err.to_string()),
            // Postgres: character not in repertoire (NUL in text), invalid byte sequence.
            Some("22021" | "22P05") => StoreError::InvalidInput(err.to_string()),
            _ => StoreError::Database(err.to_string()),
        }
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(err: sqlx::migrate::MigrateError) -> Self {
        StoreError::Database(err.to_string())
    }
}

/// Whose decision-relevant state an operation changes (its workspace version is bumped in the
/// same transaction).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Supersedes<'a> {
    Workspace(&'a str),
    /// The workspace of this agent, if it has one.
    AgentsWorkspace(&'a str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// The whole store: every area's reads, and what crosses areas. Object-safe: the server holds
/// it as `Arc<dyn Store>`, and callers reach any area's method through it.
#[async_trait]
pub trait Store:
    AgentStore
    + AccountStore
    + PolicyStore
    + CredentialStore
    + EmailStore
    + AuditStore
    + TelemetryStore
    + SiteStore
    + VaultStore
    + McpStore
    + Send
    + Sync
    + 'static
{
    fn backend(&self) -> Backend;

    /// For Postgres, the URL a LISTEN connection uses to hear about changes.
    fn listen_url(&self) -> Option<String>;

    /// Tells other replicas that something they cache changed (Postgres NOTIFY; no-op on
    /// SQLite, where they poll).
    async fn notify_changes(&self) -> Result<(), StoreError>;

    /// One round trip to the database (readiness).
    async fn ping(&self) -> Result<(), StoreError>;

    /// Records the connection pools' gauges (`observe::pool`), when scraped.
    fn report_pools(&self) {}

    /// Applies changes in one transaction, each inside its own savepoint: a change whose
    /// preconditions fail is rolled back alone and answered with its error, the others commit.
    /// `Err` means the whole batch was not committed.
    async fn apply(
        &self,
        changes: &[Change],
    ) -> Result<Vec<Result<Applied, StoreError>>, StoreError>;

    /// The current version of the workspace's decision-relevant state (0 before any change).
    async fn workspace_version(&self, workspace_id: &str) -> Result<i64, StoreError>;
    /// `(workspace_id, version, changed_at)` of the workspaces whose state changed at or after
    /// `since`.
    async fn workspace_versions_since(
        &self,
        since: i64,
    ) -> Result<Vec<(String, i64, i64)>, StoreError>;
    /// Agents, keys and policies changed at or after `since` (cache invalidation).
    async fn changes_since(&self, since: i64) -> Result<Vec<Invalidation>, StoreError>;

    /// Deletes nonce claims that expired before `now`, and rate-limit windows, login tokens,
    /// email sends and retired signing keys past their use; answers how many rows went.
    async fn delete_expired_nonces(&self, now: i64) -> Result<u64, StoreError>;
}

/// Applies one change outside the group-commit writer (CLI commands, bootstrap).
pub async fn apply_one(store: &dyn Store, change: Change) -> Result<Applied, StoreError> {
    apply_alone(store, &change).await
}

/// Applies `change` in a transaction of its own.
pub async fn apply_alone(store: &dyn Store, change: &Change) -> Result<Applied, StoreError> {
    store
        .apply(std::slice::from_ref(change))
        .await?
        .pop()
        .unwrap_or(Err(StoreError::Database("empty batch result".into())))
}
