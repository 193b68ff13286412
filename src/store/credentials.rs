//! Credentials minted for agents, the workspace's kill switch, and the JWT issuer's signing
//! keys.

use async_trait::async_trait;

use super::{Cursor, StoreError, Supersedes};

/// Which active credentials to list, newest first (by `created_at, id`).
#[derive(Debug, Clone, Default)]
pub struct CredentialQuery {
    pub workspace_id: String,
    /// Only this agent's.
    pub agent_id: Option<String>,
    /// Only credentials that expire after this instant (now).
    pub now: i64,
    /// Only credentials minted at or after this instant: the workspace's revoke-all cutoff, or
    /// the longest lifetime before now (nothing older can be unexpired), whichever is later.
    /// It also bounds the index range the listing reads.
    pub minted_from: i64,
    /// Past this row in the order of the listing.
    pub after: Option<Cursor>,
    pub limit: i64,
}

/// A credential as a listing shows it: never its token or the token's hash.
#[derive(Debug, Clone)]
pub struct ActiveCredential {
    pub id: String,
    pub agent_id: String,
    /// The agent's name (empty if the agent row is gone).
    pub agent_name: String,
    /// `opaque` or `jwt`.
    pub token_type: String,
    pub provider: Option<String>,
    pub audience: Option<String>,
    pub scopes: Vec<String>,
    pub one_time: bool,
    pub created_at: i64,
    pub expires_at: i64,
}

/// Reads of credentials, the kill switch and signing keys.
#[async_trait]
pub trait CredentialStore: Send + Sync {
    async fn credential_by_hash(
        &self,
        token_hash: &str,
    ) -> Result<Option<CredentialRecord>, StoreError>;
    /// One credential of the workspace by its id (revoked, expired or used ones too).
    async fn credential_in(
        &self,
        workspace_id: &str,
        id: &str,
    ) -> Result<Option<CredentialRecord>, StoreError>;
    /// The workspace's active credentials: not revoked, not expired at `now`, not a used
    /// one-time credential, minted at or after `minted_from`; newest first, one indexed read.
    async fn active_credentials(
        &self,
        query: &CredentialQuery,
    ) -> Result<Vec<ActiveCredential>, StoreError>;
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

// Records of this area, as the store keeps them (times in epoch milliseconds).

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
