//! What a write is: a [`Change`] holds an optional nonce claim, one operation ([`Op`]) and the
//! audit records that describe it, and is answered with what it [`Applied`].
//!
//! [`Op`] is an enum of the areas' own operation enums ([`AgentOp`], [`AccountOp`], ...). Each
//! area's SQL file applies its enum with an exhaustive `match`, so an operation without SQL
//! does not compile.

use super::{
    AccountOp, AgentOp, AgentRecord, AuditOp, AuditRecord, CredentialOp, EmailOp, McpOp, PolicyOp,
    SiteOp, Supersedes, TelemetryOp, User, VaultOp,
};

/// One atomic write: an optional nonce claim, a state change and its audit records.
#[derive(Debug, Clone, Default)]
pub struct Change {
    /// The workspace state the change was decided on: the change commits only if that is still
    /// the workspace's current version, else it is answered [`super::StoreError::Stale`]
    /// unwritten.
    pub basis: Option<Basis>,
    pub nonce: Option<NonceClaim>,
    pub op: Op,
    pub audit: Vec<AuditRecord>,
}

/// A workspace's state version, as a decision saw it (see `workspace_versions`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Basis {
    pub workspace_id: String,
    pub version: i64,
}

impl Change {
    pub fn new(op: impl Into<Op>) -> Self {
        Self {
            op: op.into(),
            ..Self::default()
        }
    }

    pub fn audited(mut self, event: AuditRecord) -> Self {
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

/// The state change of a [`Change`], by area.
#[derive(Debug, Clone, Default)]
pub enum Op {
    /// Nothing but the nonce and audit records of the change.
    #[default]
    Nothing,
    Agent(AgentOp),
    Account(AccountOp),
    Policy(PolicyOp),
    Credential(CredentialOp),
    Email(EmailOp),
    Telemetry(TelemetryOp),
    Site(SiteOp),
    Vault(VaultOp),
    Audit(AuditOp),
    Mcp(McpOp),
    /// Several operations applied in order, all or none; answers the last one's result.
    Batch(Vec<Op>),
}

impl Op {
    /// The workspace whose decisions or authentications this operation can change: API keys
    /// revoked, agents attested, claimed, suspended, resumed or revoked, reputation and
    /// inventory labels (both read by policies), policies applied, the kill switch. `Batch`
    /// answers `None`: its parts speak for themselves.
    pub fn supersedes(&self) -> Option<Supersedes<'_>> {
        match self {
            Op::Nothing | Op::Batch(_) => None,
            Op::Agent(op) => op.supersedes(),
            Op::Account(op) => op.supersedes(),
            Op::Policy(op) => op.supersedes(),
            Op::Credential(op) => op.supersedes(),
            Op::Email(op) => op.supersedes(),
            Op::Telemetry(op) => op.supersedes(),
            Op::Site(op) => op.supersedes(),
            Op::Vault(op) => op.supersedes(),
            Op::Audit(op) => op.supersedes(),
            Op::Mcp(op) => op.supersedes(),
        }
    }
}

macro_rules! area_into_op {
    ($($area:ident => $variant:ident),* $(,)?) => {
        $(impl From<$area> for Op {
            fn from(op: $area) -> Self {
                Op::$variant(op)
            }
        })*
    };
}

area_into_op! {
    AgentOp => Agent,
    AccountOp => Account,
    PolicyOp => Policy,
    CredentialOp => Credential,
    EmailOp => Email,
    TelemetryOp => Telemetry,
    SiteOp => Site,
    VaultOp => Vault,
    AuditOp => Audit,
    McpOp => Mcp,
}

/// What applying a change answers, besides success: the row it produced when the caller
/// needs it.
#[derive(Debug, Clone)]
pub enum Applied {
    Done,
    /// Whether the bootstrap created the default workspace (`false`: it existed already).
    Bootstrapped(bool),
    Agent(Box<AgentRecord>),
    User(Box<User>),
    Count(i64),
}

// Records of this area, as the store keeps them (times in epoch milliseconds).

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
