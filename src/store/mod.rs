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
pub use sql::{sqlite_file, OpenOptions, SqlStore, SqliteSynchronous, IDEMPOTENCY_KEY_TAKEN};

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

/// One atomic write: an optional nonce claim, a state change and its audit events.
#[derive(Debug, Clone, Default)]
pub struct Change {
    /// The workspace state the change was decided on: the change commits only if that is still
    /// the workspace's current version, else it is answered [`StoreError::Stale`] unwritten.
    pub basis: Option<Basis>,
    pub nonce: Option<NonceClaim>,
    pub op: Op,
    pub audit: Vec<AuditEvent>,
}

/// A workspace's state version, as a decision saw it (see `workspace_versions`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Basis {
    pub workspace_id: String,
    pub version: i64,
}

/// Whose decision-relevant state an operation changes (its workspace version is bumped in the
/// same transaction).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Supersedes<'a> {
    Workspace(&'a str),
    /// The workspace of this agent, if it has one.
    AgentsWorkspace(&'a str),
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

    /// Commits only if `basis` is still the current state of its workspace.
    pub fn on(mut self, basis: Basis) -> Self {
        self.basis = Some(basis);
        self
    }
}

impl Op {
    /// The workspace whose decisions or authentications this operation can change: API keys
    /// revoked, agents attested, claimed, suspended, resumed or revoked, reputation and
    /// inventory labels (both read by policies), policies applied, the kill switch. `Batch`
    /// answers `None`: its parts speak for themselves.
    pub fn supersedes(&self) -> Option<Supersedes<'_>> {
        use Supersedes::*;
        match self {
            Op::RevokeApiKey { workspace_id, .. }
            | Op::SetAgentStatus { workspace_id, .. }
            | Op::ClaimAgent { workspace_id, .. }
            | Op::RecordFeedback { workspace_id, .. }
            | Op::SetMinting { workspace_id, .. }
            | Op::RevokeAll { workspace_id, .. } => Some(Workspace(workspace_id)),
            Op::UpsertInventory(item) => Some(Workspace(&item.workspace_id)),
            Op::ApplyPolicy(apply) => Some(Workspace(&apply.version.workspace_id)),
            Op::Attest { agent_id, .. } => Some(AgentsWorkspace(agent_id)),
            _ => None,
        }
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
    ClaimAgent {
        code_hash: String,
        agent_id: String,
        workspace_id: String,
        at: i64,
    },
    /// Stores provider feedback and moves the agent's reputation: the score decays with a
    /// half-life, then takes `delta`; `tier` is derived from the new score by the caller's rule.
    /// Answers `Agent`.
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
    CreateCredential(Box<CredentialRecord>),
    /// Revokes matching live credentials of the workspace: by token hash, by id, or every one
    /// of an agent. Answers `Count(revoked)`.
    RevokeCredentials {
        workspace_id: String,
        token_hash: Option<String>,
        cred_id: Option<String>,
        agent_id: Option<String>,
        reason: Option<String>,
        at: i64,
    },
    /// Marks a one-time credential used; `Conflict` when it was used already.
    UseCredential {
        id: String,
        at: i64,
    },
    /// Pauses or resumes minting.
    SetMinting {
        workspace_id: String,
        paused: bool,
        reason: Option<String>,
        at: i64,
    },
    /// Sets the workspace cutoff: credentials minted before `at` count as revoked.
    RevokeAll {
        workspace_id: String,
        at: i64,
    },
    /// Sets the workspace's settings.
    SetWorkspaceSettings {
        workspace_id: String,
        require_member_approval: bool,
        at: i64,
    },
    /// Redeems the claim code without claiming; `Conflict` when it was used or expired.
    RejectClaim {
        code_hash: String,
        at: i64,
    },
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
    /// Several operations applied in order, all or none; answers the last one's outcome.
    Batch(Vec<Op>),
    /// A single-use magic-link token (its hash) for an address.
    CreateLoginToken {
        token_hash: String,
        email: String,
        created_at: i64,
        expires_at: i64,
    },
    /// Consumes the login token, creates the user on first login (with `user_id`) and starts
    /// `session` for that user. Answers `User`; `TokenInvalid` when the token is unknown, used
    /// or expired; `Conflict` when the user was created with another id meanwhile.
    Login {
        token_hash: String,
        email: String,
        user_id: String,
        session: SessionRecord,
        at: i64,
    },
    EndSession {
        id_hash: String,
        at: i64,
    },
    SelectWorkspace {
        id_hash: String,
        workspace_id: String,
    },
    /// Gives the user with this email (created with `user_id` if new) `role` in the workspace.
    /// Answers `User`.
    UpsertMembership {
        workspace_id: String,
        email: String,
        user_id: String,
        role: Role,
        at: i64,
    },
    /// `NotFound` when the user is not a member.
    RemoveMembership {
        workspace_id: String,
        user_id: String,
    },
    /// `NotFound` when there is no such live key in the workspace.
    RevokeApiKey {
        workspace_id: String,
        key_id: String,
        at: i64,
    },
    CreatePat(PatRecord),
    /// `NotFound` when the user has no such live token.
    RevokePat {
        user_id: String,
        pat_id: String,
        at: i64,
    },
    StoreOutboxMessage(OutboxMessage),
    /// Records when an API key was last used (throttled by the caller).
    TouchApiKey {
        key_id: String,
        at: i64,
    },
    /// Records when a personal access token was last used (throttled by the caller).
    TouchPat {
        pat_id: String,
        at: i64,
    },
    RecordStatusChecks(Vec<StatusCheck>),
    StoreContact(ContactSubmission),
    /// Applies a policy version; `Conflict` when the policy moved past `expected_version`.
    ApplyPolicy(Box<PolicyApply>),
    /// Stores the first response to an `Idempotency-Key` (a later one with the key is ignored).
    StoreIdempotency(Box<IdempotencyRecord>),
    CreatePolicyChallenge(Box<PolicyChallenge>),
    /// `approved` or `denied`, by whom; `Conflict` unless the challenge is pending and unexpired.
    DecideChallenge {
        id: String,
        status: String,
        by: String,
        at: i64,
    },
    /// Uses an approval up; `Conflict` when it was used meanwhile.
    ConsumeApproval {
        id: String,
        at: i64,
    },
    /// Reserves one email send of an agent, serialised per agent across replicas: `Conflict`
    /// when more emails were sent in the last minute and day than the decision saw (`seen`,
    /// `None` when the decision does not depend on them: then nothing is counted), which the
    /// caller answers by deciding again with the new counts; `AgentNotActive` when the agent
    /// was suspended or revoked meanwhile.
    ReserveEmail {
        id: String,
        workspace_id: String,
        agent_id: String,
        recipients: i64,
        seen: Option<(i64, i64)>,
        at: i64,
    },
    /// Ends a reservation: sent with the provider's message id, or (`None`) not sent, when the
    /// reservation is removed and the email does not count.
    FinishEmail {
        id: String,
        provider: String,
        provider_message_id: Option<String>,
    },
    /// Adds a JWT signing key. `rotate`: retires the current keys, published until
    /// `publish_until`; otherwise the key is added only if there is no current key. Answers
    /// `Count(keys added)`.
    AddSigningKey {
        key: SigningKeyRecord,
        rotate: bool,
        publish_until: i64,
    },
    /// Counts one hit in a fixed window; answers `Count(hits in the window so far)`.
    HitRateLimit {
        bucket: String,
        window_start: i64,
    },
}

#[derive(Debug, Clone)]
pub enum Outcome {
    Done,
    Bootstrapped(bool),
    Agent(Box<AgentRecord>),
    User(Box<User>),
    Count(i64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

#[async_trait]
pub trait Store: Send + Sync + 'static {
    fn backend(&self) -> Backend;

    /// For Postgres, the URL a LISTEN connection uses to hear about changes.
    fn listen_url(&self) -> Option<String>;

    /// Tells other replicas that something they cache changed (Postgres NOTIFY; no-op on
    /// SQLite, where they poll).
    async fn notify_changes(&self) -> Result<(), StoreError>;

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
    /// The agents of the workspace among `ids` (unknown ids are left out).
    async fn agents_in_workspace(
        &self,
        workspace_id: &str,
        ids: &[String],
    ) -> Result<Vec<AgentRecord>, StoreError>;
    async fn list_agents(&self, query: &AgentQuery) -> Result<Vec<AgentRecord>, StoreError>;
    async fn challenge(&self, id: &str) -> Result<Option<ChallengeRecord>, StoreError>;
    async fn claim_code(&self, code_hash: &str) -> Result<Option<ClaimCodeRecord>, StoreError>;
    async fn credential_by_hash(
        &self,
        token_hash: &str,
    ) -> Result<Option<CredentialRecord>, StoreError>;
    async fn kill_switch(&self, workspace_id: &str) -> Result<KillSwitch, StoreError>;
    /// Emails of the agent sent (or reserved) since `minute_ago` and since `day_ago`.
    async fn email_counts(
        &self,
        workspace_id: &str,
        agent_id: &str,
        minute_ago: i64,
        day_ago: i64,
    ) -> Result<(i64, i64), StoreError>;
    /// The signing keys published at `now`, newest first; the first unretired one signs.
    async fn signing_keys(&self, now: i64) -> Result<Vec<SigningKeyRecord>, StoreError>;
    /// Whether approval links of the workspace need a logged-in member.
    async fn require_member_approval(&self, workspace_id: &str) -> Result<bool, StoreError>;

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

    /// Deletes nonce claims that expired before `now`, and rate-limit windows that ended
    /// before it; answers how many rows went.
    async fn delete_expired_nonces(&self, now: i64) -> Result<u64, StoreError>;

    async fn user(&self, id: &str) -> Result<Option<User>, StoreError>;
    async fn user_by_email(&self, email: &str) -> Result<Option<User>, StoreError>;
    /// The user's workspaces with their role, oldest membership first.
    async fn memberships(&self, user_id: &str) -> Result<Vec<Membership>, StoreError>;
    async fn role_in(&self, workspace_id: &str, user_id: &str) -> Result<Option<Role>, StoreError>;
    async fn members(&self, workspace_id: &str) -> Result<Vec<(User, Role)>, StoreError>;
    async fn session(&self, id_hash: &str) -> Result<Option<SessionRecord>, StoreError>;
    /// `(email, expires_at, used_at)` of a login token.
    async fn login_token(
        &self,
        token_hash: &str,
    ) -> Result<Option<(String, i64, Option<i64>)>, StoreError>;
    async fn pat_by_hash(&self, token_hash: &str) -> Result<Option<PatRecord>, StoreError>;
    async fn pats(&self, user_id: &str) -> Result<Vec<PatRecord>, StoreError>;
    async fn api_keys(&self, workspace_id: &str) -> Result<Vec<ApiKeyRecord>, StoreError>;
    /// Newest first.
    async fn outbox(&self, limit: i64) -> Result<Vec<OutboxMessage>, StoreError>;
    /// The latest check of each component.
    async fn latest_status_checks(&self) -> Result<Vec<StatusCheck>, StoreError>;

    async fn policy(
        &self,
        workspace_id: &str,
        policy_id: &str,
    ) -> Result<Option<PolicyRecord>, StoreError>;
    async fn policies(&self, workspace_id: &str) -> Result<Vec<PolicyRecord>, StoreError>;
    /// Every policy of every workspace (to warm a cache).
    async fn all_policies(&self) -> Result<Vec<PolicyRecord>, StoreError>;
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
    /// The newest challenge of this agent and request fingerprint decided at or after `since`
    /// that still counts: denied, or approved and not yet used.
    async fn decided_challenge(
        &self,
        workspace_id: &str,
        agent_id: &str,
        fingerprint: &str,
        since: i64,
    ) -> Result<Option<PolicyChallenge>, StoreError>;
    /// Merged inventory labels of the agent in the workspace.
    async fn agent_labels(
        &self,
        workspace_id: &str,
        agent_id: &str,
    ) -> Result<serde_json::Value, StoreError>;
    /// Agents, keys and policies changed at or after `since` (cache invalidation).
    async fn changes_since(&self, since: i64) -> Result<Vec<Invalidation>, StoreError>;
    /// Every policy's current version: `(workspace_id, policy_id, version)`.
    async fn policy_heads(&self) -> Result<Vec<(String, String, i64)>, StoreError>;
    /// The current version of the workspace's decision-relevant state (0 before any change).
    async fn workspace_version(&self, workspace_id: &str) -> Result<i64, StoreError>;
    /// `(workspace_id, version)` of the workspaces whose state changed at or after `since`.
    async fn workspace_versions_since(&self, since: i64) -> Result<Vec<(String, i64)>, StoreError>;
}

/// Applies one change outside the group-commit writer (CLI commands, bootstrap).
pub async fn apply_one(store: &dyn Store, change: Change) -> Result<Outcome, StoreError> {
    apply_alone(store, &change).await
}

/// Applies `change` in a transaction of its own.
pub async fn apply_alone(store: &dyn Store, change: &Change) -> Result<Outcome, StoreError> {
    store
        .apply(std::slice::from_ref(change))
        .await?
        .pop()
        .unwrap_or(Err(StoreError::Database("empty batch result".into())))
}
