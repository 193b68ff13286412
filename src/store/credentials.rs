//! Credentials minted for agents, the workspace's kill switch, and the JWT issuer's signing
//! keys.

use async_trait::async_trait;

use super::{CredentialRecord, KillSwitch, SigningKeyRecord, StoreError, Supersedes};

/// Reads of credentials, the kill switch and signing keys.
#[async_trait]
pub trait CredentialStore: Send + Sync {
    async fn credential_by_hash(
        &self,
        token_hash: &str,
    ) -> Result<Option<CredentialRecord>, StoreError>;
    async fn kill_switch(&self, workspace_id: &str) -> Result<KillSwitch, StoreError>;
    /// The signing keys published at `now`, newest first; the first unretired one signs.
    async fn signing_keys(&self, now: i64) -> Result<Vec<SigningKeyRecord>, StoreError>;
}

/// Changes to credentials, the kill switch and signing keys.
#[derive(Debug, Clone)]
pub enum CredentialOp {
    /// `Conflict` (`minting_paused`) when minting was paused, or the agent suspended or
    /// revoked, since the mint was decided.
    Create(Box<CredentialRecord>),
    /// Revokes matching live credentials of the workspace: by token hash, by id, or every one
    /// of an agent. Answers `Count(revoked)`.
    Revoke {
        workspace_id: String,
        token_hash: Option<String>,
        cred_id: Option<String>,
        agent_id: Option<String>,
        reason: Option<String>,
        at: i64,
    },
    /// Marks a one-time credential used; `Conflict` when it was used already.
    Use { id: String, at: i64 },
    /// Pauses or resumes minting.
    SetMinting {
        workspace_id: String,
        paused: bool,
        reason: Option<String>,
        at: i64,
    },
    /// Sets the workspace cutoff: credentials minted before `at` count as revoked.
    RevokeAll { workspace_id: String, at: i64 },
    /// Adds a JWT signing key. `rotate`: retires the current keys, published until
    /// `publish_until`; otherwise the key is added only if there is no current key. Answers
    /// `Count(keys added)`.
    AddSigningKey {
        key: SigningKeyRecord,
        rotate: bool,
        publish_until: i64,
    },
    /// A signing key's private part sealed again (after a master-key rotation), if it is still
    /// `previous`; `Conflict` otherwise.
    ResealSigningKey {
        kid: String,
        previous: crate::secret::Secret,
        sealed: crate::secret::Secret,
    },
}

impl CredentialOp {
    /// See [`super::Op::supersedes`].
    pub fn supersedes(&self) -> Option<Supersedes<'_>> {
        match self {
            CredentialOp::SetMinting { workspace_id, .. }
            | CredentialOp::RevokeAll { workspace_id, .. } => {
                Some(Supersedes::Workspace(workspace_id))
            }
            CredentialOp::Create(_)
            | CredentialOp::Revoke { .. }
            | CredentialOp::Use { .. }
            | CredentialOp::AddSigningKey { .. }
            | CredentialOp::ResealSigningKey { .. } => None,
        }
    }
}
