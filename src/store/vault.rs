//! The vault: secret sets and their versions (sealed), and grants of them to agents.

use async_trait::async_trait;

use super::{StoreError, Supersedes};
use crate::domain::ids::SecretSetId;

/// Reads of the vault.
#[async_trait]
pub trait VaultStore: Send + Sync {
    /// The workspace's secret sets (not destroyed), by number; deleted ones only when asked.
    async fn secret_sets(
        &self,
        workspace_id: &str,
        include_deleted: bool,
    ) -> Result<Vec<SecretSetRecord>, StoreError>;
    /// A secret set of the workspace by id or number (deleted and destroyed ones too).
    async fn secret_set(
        &self,
        workspace_id: &str,
        set: &SetRef,
    ) -> Result<Option<SecretSetRecord>, StoreError>;
    /// Every secret set that still has a data key (start-up check, re-wrap).
    async fn all_secret_sets(&self) -> Result<Vec<SecretSetRecord>, StoreError>;
    async fn secret_version(
        &self,
        secret_set_id: &str,
        version: i64,
    ) -> Result<Option<SecretVersion>, StoreError>;
    /// The versions kept, newest first.
    async fn secret_versions(&self, secret_set_id: &str) -> Result<Vec<SecretVersion>, StoreError>;
    /// The workspace's grants, newest first (of one set when given).
    async fn vault_grants(
        &self,
        workspace_id: &str,
        secret_set_id: Option<&str>,
    ) -> Result<Vec<GrantRecord>, StoreError>;
    /// A lease of the workspace by id.
    async fn vault_lease(
        &self,
        workspace_id: &str,
        lease_id: &str,
    ) -> Result<Option<LeaseRecord>, StoreError>;
    /// What a request under a lease reads, in one round trip: the set `set` of the workspace
    /// (deleted and destroyed ones too) with its current version, the set's grants (newest
    /// first) and the lease whose token has the hash `token_hash` (one issued before its
    /// workspace's last revoke-all answered with `revoked_at` set to that cutoff). `None`: no
    /// such set.
    async fn leased_scene(
        &self,
        workspace_id: &str,
        set: &SetRef,
        token_hash: Option<&str>,
    ) -> Result<Option<LeasedScene>, StoreError>;
    /// The workspace's leases, newest first, at most `limit`.
    async fn vault_leases(
        &self,
        workspace_id: &str,
        filter: &LeaseFilter,
        limit: i64,
    ) -> Result<Vec<LeaseRecord>, StoreError>;
}

/// Changes to the vault.
#[derive(Debug, Clone)]
pub enum VaultOp {
    /// A new set and its version 1; the set's number is the workspace's next (answered as
    /// `Applied::Count`). `Conflict` when a live set has the name.
    CreateSet {
        set: Box<SecretSetRecord>,
        version: Box<SecretVersion>,
    },
    /// A new version, if the set is still at `expected_version` and not deleted (else
    /// `Conflict`); versions older than `keep_from` are dropped.
    AddVersion {
        workspace_id: String,
        secret_set_id: String,
        expected_version: i64,
        version: Box<SecretVersion>,
        keep_from: i64,
    },
    /// Soft delete (`deleted_at` set) or undelete (`None`); `NotFound` for a destroyed set.
    SetDeleted {
        workspace_id: String,
        secret_set_id: String,
        deleted_at: Option<i64>,
        at: i64,
    },
    /// Forgets the values for good: every version and the data key; revokes the set's grants.
    Destroy {
        workspace_id: String,
        secret_set_id: String,
        at: i64,
    },
    /// A data key sealed again (after a master-key rotation), if it is still `previous`.
    Rewrap {
        secret_set_id: String,
        previous: String,
        data_key: String,
        key_version: i64,
    },
    CreateGrant(Box<GrantRecord>),
    /// A new lease, unless the workspace's minting is paused (`Conflict("minting_paused")`).
    CreateLease(Box<LeaseRecord>),
    /// Revokes the workspace's live leases that match (a lease's id, with the request leases
    /// minted from it; or by agent and set). Answers `Count`; `NotFound` for an unknown id.
    RevokeLeases {
        workspace_id: String,
        lease_id: Option<String>,
        filter: LeaseFilter,
        at: i64,
    },
    /// A request lease minted from its workflow lease, written only if, in the same
    /// transaction: minting is not paused (`Conflict("minting_paused")`), the workflow lease
    /// is live (`Conflict("lease_revoked" | "lease_expired")`), the grant `grant_id` is live
    /// on a live set (`Conflict("no_grant")`) and the agent active (`AgentNotActive`).
    MintRequestLease {
        lease: Box<LeaseRecord>,
        grant_id: String,
        at: i64,
    },
    /// One use of a request lease, taken only if, in the same transaction: the lease is the
    /// agent's, live and has a use left (`Conflict("lease_revoked" | "lease_expired" |
    /// "lease_used")`), the grant `grant_id` is live on a live set (`Conflict("no_grant")`)
    /// and the agent active (`AgentNotActive`). Two replicas racing for the last use: one
    /// takes it, the other is answered `lease_used`.
    UseLease {
        workspace_id: String,
        lease_id: String,
        agent_id: String,
        grant_id: String,
        at: i64,
    },
    /// `NotFound` unless a live grant of the workspace.
    RevokeGrant {
        workspace_id: String,
        grant_id: String,
        at: i64,
    },
}

impl VaultOp {
    /// See [`super::Op::supersedes`]: the vault's state is read from the database when used.
    pub fn supersedes(&self) -> Option<Supersedes<'_>> {
        None
    }
}

// Records of this area, as the store keeps them (times in epoch milliseconds).

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

/// A set as a request under a lease reads it (see [`VaultStore::leased_scene`]).
#[derive(Debug)]
pub struct LeasedScene {
    pub set: SecretSetRecord,
    /// The set's current version (`None` only if the store lost it).
    pub version: Option<SecretVersion>,
    /// The set's grants, newest first.
    pub grants: Vec<GrantRecord>,
    /// The lease of the token's hash, whichever set it is for.
    pub lease: Option<LeaseRecord>,
}

/// Which secret set a request names: its id (`ss_...`) or its workspace-local number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetRef {
    Id(SecretSetId),
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
