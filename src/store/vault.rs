//! The vault: secret sets and their versions (sealed), and grants of them to agents.

use async_trait::async_trait;

use super::{
    GrantRecord, LeaseFilter, LeaseRecord, SecretSetRecord, SecretVersion, SetRef, StoreError,
    Supersedes,
};

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
    /// The lease whose token has this hash; a lease issued before its workspace's last
    /// revoke-all is answered with `revoked_at` set to that cutoff.
    async fn vault_lease_by_token(
        &self,
        token_hash: &str,
    ) -> Result<Option<LeaseRecord>, StoreError>;
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
