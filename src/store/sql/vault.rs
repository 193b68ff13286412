//! SQL of the vault: secret sets, their sealed versions, grants.

use std::sync::LazyLock;

use async_trait::async_trait;
use sqlx::any::AnyRow;
use sqlx::{Any, Row, Transaction};

use super::{aliased, and_also, changed_rows, joined, AnyQuery, SqlStore};
use crate::domain::VaultAction;
use crate::store::*;

const SET_COLUMNS: &str =
    "id, workspace_id, number, name, provider, environment, current_version, data_key, \
     key_version, created_at, updated_at, deleted_at, destroyed_at";
const VERSION_COLUMNS: &str = "secret_set_id, version, sealed, keys, profiles, author, created_at";
const LEASE_COLUMNS: &str =
    "id, workspace_id, kind, workflow_id, agent_id, secret_set_id, purpose, actions, keys, \
     token_hash, uses_left, expires_at, revoked_at, created_at, created_by";
/// A lease the workspace's last revoke-all did not revoke (issued at or after its cutoff).
const AFTER_CUTOFF: &str = "created_at >= COALESCE((SELECT k.all_revoked_at FROM kill_switches k \
     WHERE k.workspace_id = vault_leases.workspace_id), 0)";
/// A request lease's workflow lease is still live: not revoked, and issued after the last
/// revoke-all (so a request lease minted on one replica while another revoked its workflow
/// lease, or threw revoke-all by a clock behind the minting one, dies with it).
const LIVE_PARENT: &str = "(vault_leases.workflow_id IS NULL OR EXISTS (SELECT 1 FROM vault_leases w \
     WHERE w.id = vault_leases.workflow_id AND w.revoked_at IS NULL AND w.created_at >= \
     COALESCE((SELECT k.all_revoked_at FROM kill_switches k WHERE k.workspace_id = w.workspace_id), 0)))";
/// The workspace's last revoke-all (a lease issued before it is revoked).
const CUTOFF: &str = "(SELECT k.all_revoked_at FROM kill_switches k \
     WHERE k.workspace_id = vault_leases.workspace_id)";
const GRANT_COLUMNS: &str =
    "id, workspace_id, secret_set_id, agent_id, group_name, allowed_keys, allowed_actions, \
     expires_at, created_at, created_by, revoked_at";

fn set_from_row(row: &AnyRow) -> Result<SecretSetRecord, sqlx::Error> {
    Ok(SecretSetRecord {
        id: row.try_get("id")?,
        workspace_id: row.try_get("workspace_id")?,
        number: row.try_get("number")?,
        name: row.try_get("name")?,
        provider: row.try_get("provider")?,
        environment: row.try_get("environment")?,
        current_version: row.try_get("current_version")?,
        data_key: row.try_get("data_key")?,
        key_version: row.try_get("key_version")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        deleted_at: row.try_get("deleted_at")?,
        destroyed_at: row.try_get("destroyed_at")?,
    })
}

fn version_from_row(row: &AnyRow) -> Result<SecretVersion, sqlx::Error> {
    version_from_columns(row, |name| name)
}

/// A version from `row`, each column read under the name `column` gives it (see
/// [`lease_from_columns`]).
fn version_from_columns(
    row: &AnyRow,
    column: impl Fn(&'static str) -> &'static str,
) -> Result<SecretVersion, sqlx::Error> {
    Ok(SecretVersion {
        secret_set_id: row.try_get(column("secret_set_id"))?,
        version: row.try_get(column("version"))?,
        sealed: row.try_get(column("sealed"))?,
        keys: serde_json::from_str(&row.try_get::<String, _>(column("keys"))?).unwrap_or_default(),
        profiles: serde_json::from_str(&row.try_get::<String, _>(column("profiles"))?)
            .unwrap_or(serde_json::Value::Null),
        author: row.try_get(column("author"))?,
        created_at: row.try_get(column("created_at"))?,
    })
}

fn grant_from_row(row: &AnyRow) -> Result<GrantRecord, sqlx::Error> {
    let keys: String = row.try_get("allowed_keys")?;
    Ok(GrantRecord {
        id: row.try_get("id")?,
        workspace_id: row.try_get("workspace_id")?,
        secret_set_id: row.try_get("secret_set_id")?,
        agent_id: row.try_get("agent_id")?,
        group_name: row.try_get("group_name")?,
        allowed_keys: if keys == "*" {
            None
        } else {
            Some(serde_json::from_str(&keys).unwrap_or_default())
        },
        allowed_actions: VaultAction::from_stored(&row.try_get::<String, _>("allowed_actions")?),
        expires_at: row.try_get("expires_at")?,
        created_at: row.try_get("created_at")?,
        created_by: row.try_get("created_by")?,
        revoked_at: row.try_get("revoked_at")?,
    })
}

fn lease_from_row(row: &AnyRow) -> Result<LeaseRecord, sqlx::Error> {
    lease_from_columns(row, |name| name)
}

/// A lease from `row`, each of its columns read under the name `column` gives it (a joined
/// read names them apart from the other tables' columns).
fn lease_from_columns(
    row: &AnyRow,
    column: impl Fn(&'static str) -> &'static str,
) -> Result<LeaseRecord, sqlx::Error> {
    let keys: Option<String> = row.try_get(column("keys"))?;
    Ok(LeaseRecord {
        id: row.try_get(column("id"))?,
        workspace_id: row.try_get(column("workspace_id"))?,
        kind: row.try_get(column("kind"))?,
        workflow_id: row.try_get(column("workflow_id"))?,
        agent_id: row.try_get(column("agent_id"))?,
        secret_set_id: row.try_get(column("secret_set_id"))?,
        purpose: row.try_get(column("purpose"))?,
        actions: VaultAction::from_stored(&row.try_get::<String, _>(column("actions"))?),
        keys: keys.map(|k| serde_json::from_str(&k).unwrap_or_default()),
        token_hash: row.try_get(column("token_hash"))?,
        uses_left: row.try_get(column("uses_left"))?,
        expires_at: row.try_get(column("expires_at"))?,
        revoked_at: row.try_get(column("revoked_at"))?,
        created_at: row.try_get(column("created_at"))?,
        created_by: row.try_get(column("created_by"))?,
    })
}

/// A lease issued before its workspace's last revoke-all (`cutoff`) is read as revoked then.
fn revoked_by_cutoff(mut lease: LeaseRecord, cutoff: Option<i64>) -> LeaseRecord {
    if lease.revoked_at.is_none() && cutoff.is_some_and(|c| lease.created_at < c) {
        lease.revoked_at = cutoff;
    }
    lease
}

/// The version's columns as [`SCENE`] names them.
const SCENE_VERSION: [(&str, &str); 7] = [
    ("secret_set_id", "version_secret_set_id"),
    ("version", "version_version"),
    ("sealed", "version_sealed"),
    ("keys", "version_keys"),
    ("profiles", "version_profiles"),
    ("author", "version_author"),
    ("created_at", "version_created_at"),
];

/// The lease's columns as [`SCENE`] names them.
const SCENE_LEASE: [(&str, &str); 15] = [
    ("id", "lease_id"),
    ("workspace_id", "lease_workspace_id"),
    ("kind", "lease_kind"),
    ("workflow_id", "lease_workflow_id"),
    ("agent_id", "lease_agent_id"),
    ("secret_set_id", "lease_secret_set_id"),
    ("purpose", "lease_purpose"),
    ("actions", "lease_actions"),
    ("keys", "lease_keys"),
    ("token_hash", "lease_token_hash"),
    ("uses_left", "lease_uses_left"),
    ("expires_at", "lease_expires_at"),
    ("revoked_at", "lease_revoked_at"),
    ("created_at", "lease_created_at"),
    ("created_by", "lease_created_by"),
];

/// [`VaultStore::leased_scene`]'s statements, by the set's id and by its number: the set's
/// columns under their own names, its current version's and the lease's as [`SCENE_VERSION`]
/// and [`SCENE_LEASE`] name them, and the lease's workspace's revoke-all cutoff.
static SCENE: LazyLock<[String; 2]> = LazyLock::new(|| {
    let set_columns = SET_COLUMNS
        .split(',')
        .map(|column| format!("s.{}", column.trim()))
        .collect::<Vec<_>>()
        .join(", ");
    ["id", "number"].map(|key| {
        format!(
            "SELECT {set_columns}, {}, {}, k.all_revoked_at AS lease_cutoff \
             FROM vault_secret_sets s \
             LEFT JOIN vault_secret_versions v ON v.secret_set_id = s.id AND v.version = s.current_version \
             LEFT JOIN vault_leases l ON l.token_hash = $3 \
             LEFT JOIN kill_switches k ON k.workspace_id = l.workspace_id \
             WHERE s.workspace_id = $1 AND s.{key} = $2",
            aliased("v", &SCENE_VERSION),
            aliased("l", &SCENE_LEASE),
        )
    })
});

/// `query` with the set's id or number bound next (the statements of [`SCENE`] and
/// [`SCENE_GRANTS`] by the same key).
fn bind_set<'q>(query: AnyQuery<'q>, set: &'q SetRef) -> AnyQuery<'q> {
    match set {
        SetRef::Id(id) => query.bind(id.as_str()),
        SetRef::Number(n) => query.bind(*n),
    }
}

/// The grants of a set named by its id, and by its number, newest first.
static SCENE_GRANTS: LazyLock<[String; 2]> = LazyLock::new(|| {
    [
        "$2",
        "(SELECT id FROM vault_secret_sets WHERE workspace_id = $1 AND number = $2)",
    ]
    .map(|set| {
        format!(
            "SELECT {GRANT_COLUMNS} FROM vault_grants WHERE workspace_id = $1 \
             AND secret_set_id = {set} ORDER BY created_at DESC, id DESC"
        )
    })
});

async fn insert_version(
    tx: &mut Transaction<'_, Any>,
    v: &SecretVersion,
) -> Result<(), StoreError> {
    sqlx::query(&format!(
        "INSERT INTO vault_secret_versions ({VERSION_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7)"
    ))
    .bind(&v.secret_set_id)
    .bind(v.version)
    .bind(&v.sealed)
    .bind(serde_json::to_string(&v.keys).unwrap_or_else(|_| "[]".into()))
    .bind(v.profiles.to_string())
    .bind(&v.author)
    .bind(v.created_at)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Applies a vault operation inside `tx`.
pub(super) async fn apply(
    tx: &mut Transaction<'_, Any>,
    op: &VaultOp,
) -> Result<Applied, StoreError> {
    match op {
        VaultOp::CreateSet { set, version } => {
            let taken = sqlx::query(
                "SELECT 1 FROM vault_secret_sets WHERE workspace_id = $1 AND name = $2 AND destroyed_at IS NULL",
            )
            .bind(&set.workspace_id)
            .bind(&set.name)
            .fetch_optional(&mut **tx)
            .await?;
            if taken.is_some() {
                return Err(StoreError::Conflict("secret_set_exists".into()));
            }
            // The workspace's next number. Writes of one replica are serialised by its writer;
            // two replicas racing for a number meet the unique index, and one is refused.
            let number: i64 = sqlx::query(
                "SELECT COALESCE(MAX(number), 0) + 1 AS n FROM vault_secret_sets WHERE workspace_id = $1",
            )
            .bind(&set.workspace_id)
            .fetch_one(&mut **tx)
            .await?
            .try_get("n")?;
            sqlx::query(&format!(
                "INSERT INTO vault_secret_sets ({SET_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, NULL, NULL)"
            ))
            .bind(&set.id)
            .bind(&set.workspace_id)
            .bind(number)
            .bind(&set.name)
            .bind(&set.provider)
            .bind(&set.environment)
            .bind(set.current_version)
            .bind(&set.data_key)
            .bind(set.key_version)
            .bind(set.created_at)
            .bind(set.updated_at)
            .execute(&mut **tx)
            .await
            .map_err(unique_is_conflict)?;
            insert_version(tx, version).await?;
            Ok(Applied::Count(number))
        }
        VaultOp::AddVersion {
            workspace_id,
            secret_set_id,
            expected_version,
            version,
            keep_from,
        } => {
            let rows = sqlx::query(
                "UPDATE vault_secret_sets SET current_version = $1, updated_at = $2 \
                 WHERE id = $3 AND workspace_id = $4 AND current_version = $5 \
                 AND deleted_at IS NULL AND destroyed_at IS NULL",
            )
            .bind(version.version)
            .bind(version.created_at)
            .bind(secret_set_id)
            .bind(workspace_id)
            .bind(expected_version)
            .execute(&mut **tx)
            .await?
            .rows_affected();
            changed_rows(rows, || StoreError::Conflict("version_conflict".into()))?;
            insert_version(tx, version).await?;
            sqlx::query(
                "DELETE FROM vault_secret_versions WHERE secret_set_id = $1 AND version < $2",
            )
            .bind(secret_set_id)
            .bind(keep_from)
            .execute(&mut **tx)
            .await?;
            Ok(Applied::Done)
        }
        VaultOp::SetDeleted {
            workspace_id,
            secret_set_id,
            deleted_at,
            at,
        } => {
            let rows = sqlx::query(
                "UPDATE vault_secret_sets SET deleted_at = $1, updated_at = $2 \
                 WHERE id = $3 AND workspace_id = $4 AND destroyed_at IS NULL",
            )
            .bind(deleted_at)
            .bind(at)
            .bind(secret_set_id)
            .bind(workspace_id)
            .execute(&mut **tx)
            .await?
            .rows_affected();
            changed_rows(rows, || StoreError::NotFound)?;
            Ok(Applied::Done)
        }
        VaultOp::Destroy {
            workspace_id,
            secret_set_id,
            at,
        } => {
            let rows = sqlx::query(
                "UPDATE vault_secret_sets SET destroyed_at = $1, updated_at = $1, data_key = '', \
                 deleted_at = COALESCE(deleted_at, $1) \
                 WHERE id = $2 AND workspace_id = $3 AND destroyed_at IS NULL",
            )
            .bind(at)
            .bind(secret_set_id)
            .bind(workspace_id)
            .execute(&mut **tx)
            .await?
            .rows_affected();
            changed_rows(rows, || StoreError::NotFound)?;
            sqlx::query("DELETE FROM vault_secret_versions WHERE secret_set_id = $1")
                .bind(secret_set_id)
                .execute(&mut **tx)
                .await?;
            for table in ["vault_grants", "vault_leases"] {
                sqlx::query(&format!(
                    "UPDATE {table} SET revoked_at = $1 WHERE secret_set_id = $2 AND revoked_at IS NULL"
                ))
                .bind(at)
                .bind(secret_set_id)
                .execute(&mut **tx)
                .await?;
            }
            Ok(Applied::Done)
        }
        VaultOp::Rewrap {
            secret_set_id,
            previous,
            data_key,
            key_version,
        } => {
            let rows = sqlx::query(
                "UPDATE vault_secret_sets SET data_key = $1, key_version = $2 WHERE id = $3 AND data_key = $4",
            )
            .bind(data_key)
            .bind(key_version)
            .bind(secret_set_id)
            .bind(previous)
            .execute(&mut **tx)
            .await?
            .rows_affected();
            changed_rows(rows, || {
                StoreError::Conflict("the data key changed meanwhile".into())
            })?;
            Ok(Applied::Done)
        }
        VaultOp::CreateGrant(g) => {
            sqlx::query(&format!(
                "INSERT INTO vault_grants ({GRANT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, NULL)"
            ))
            .bind(&g.id)
            .bind(&g.workspace_id)
            .bind(&g.secret_set_id)
            .bind(&g.agent_id)
            .bind(&g.group_name)
            .bind(match &g.allowed_keys {
                None => "*".to_owned(),
                Some(keys) => serde_json::to_string(keys).unwrap_or_else(|_| "[]".into()),
            })
            .bind(serde_json::to_string(&g.allowed_actions).unwrap_or_else(|_| "[]".into()))
            .bind(g.expires_at)
            .bind(g.created_at)
            .bind(&g.created_by)
            .execute(&mut **tx)
            .await?;
            Ok(Applied::Done)
        }
        VaultOp::CreateLease(l) => {
            // Minting and the pause commit in some order: a lease is never written after the
            // pause it should have seen.
            let sql = format!(
                "INSERT INTO vault_leases ({LEASE_COLUMNS}) {LEASE_VALUES} \
                 WHERE NOT EXISTS (SELECT 1 FROM kill_switches WHERE workspace_id = $2 AND minting_paused = 1)"
            );
            let rows = bind_lease(sqlx::query(&sql), l)
                .execute(&mut **tx)
                .await?
                .rows_affected();
            changed_rows(rows, || StoreError::Conflict("minting_paused".into()))?;
            Ok(Applied::Done)
        }
        VaultOp::MintRequestLease {
            lease,
            grant_id,
            at,
        } => {
            let l = lease;
            let sql = format!(
                "INSERT INTO vault_leases ({LEASE_COLUMNS}) {LEASE_VALUES} \
                 WHERE NOT EXISTS (SELECT 1 FROM kill_switches WHERE workspace_id = $2 AND minting_paused = 1) \
                 AND EXISTS (SELECT 1 FROM vault_leases w WHERE w.id = $4 AND w.workspace_id = $2 AND w.agent_id = $5 \
                     AND w.kind = 'workflow' AND w.revoked_at IS NULL AND w.expires_at > $15 AND w.created_at >= \
                     COALESCE((SELECT k.all_revoked_at FROM kill_switches k WHERE k.workspace_id = $2), 0)) \
                 AND {} AND {}",
                live_grant("$16", "$6", "$2", "$15"),
                active_agent("$5", "$2"),
            );
            let rows = bind_lease(sqlx::query(&sql), l)
                .bind(at)
                .bind(grant_id)
                .execute(&mut **tx)
                .await?
                .rows_affected();
            if rows == 0 {
                let paused = sqlx::query(
                    "SELECT 1 FROM kill_switches WHERE workspace_id = $1 AND minting_paused = 1",
                )
                .bind(&l.workspace_id)
                .fetch_optional(&mut **tx)
                .await?;
                if paused.is_some() {
                    return Err(StoreError::Conflict("minting_paused".into()));
                }
                let workflow_id = l.workflow_id.as_deref().unwrap_or_default();
                let lease = Usable {
                    workspace_id: &l.workspace_id,
                    lease_id: workflow_id,
                    agent_id: &l.agent_id,
                    at: *at,
                    counted: false,
                };
                return Err(lease.why_not(tx).await);
            }
            Ok(Applied::Done)
        }
        VaultOp::UseLease {
            workspace_id,
            lease_id,
            agent_id,
            grant_id: _,
            at,
        } => {
            static SQL: std::sync::LazyLock<String> =
                std::sync::LazyLock::new(|| use_lease_sql(["$1", "$2", "$3", "$4", "$5"], ""));
            let rows = bind_lease_use(sqlx::query(&SQL), op)
                .execute(&mut **tx)
                .await?
                .rows_affected();
            if rows == 0 {
                let lease = Usable {
                    workspace_id,
                    lease_id,
                    agent_id,
                    at: *at,
                    counted: true,
                };
                return Err(lease.why_not(tx).await);
            }
            Ok(Applied::Done)
        }
        VaultOp::RevokeLeases {
            workspace_id,
            lease_id,
            filter,
            at,
        } => {
            let rows = match lease_id {
                Some(id) => {
                    let rows = sqlx::query(
                        &format!("UPDATE vault_leases SET revoked_at = $1 WHERE workspace_id = $2 AND revoked_at IS NULL \
                         AND {AFTER_CUTOFF} AND (id = $3 OR workflow_id = $3)"),
                    )
                    .bind(at)
                    .bind(workspace_id)
                    .bind(id)
                    .execute(&mut **tx)
                    .await?
                    .rows_affected();
                    changed_rows(rows, || StoreError::NotFound)?;
                    rows
                }
                None => sqlx::query(&format!(
                    "UPDATE vault_leases SET revoked_at = $1 WHERE workspace_id = $2 AND revoked_at IS NULL \
                     AND {AFTER_CUTOFF} AND ($3 = '' OR agent_id = $3) AND ($4 = '' OR secret_set_id = $4)"
                ))
                .bind(at)
                .bind(workspace_id)
                .bind(filter.agent_id.clone().unwrap_or_default())
                .bind(filter.secret_set_id.clone().unwrap_or_default())
                .execute(&mut **tx)
                .await?
                .rows_affected(),
            };
            Ok(Applied::Count(i64::try_from(rows).unwrap_or(i64::MAX)))
        }
        VaultOp::RevokeGrant {
            workspace_id,
            grant_id,
            at,
        } => {
            let rows = sqlx::query(
                "UPDATE vault_grants SET revoked_at = $1 WHERE id = $2 AND workspace_id = $3 AND revoked_at IS NULL",
            )
            .bind(at)
            .bind(grant_id)
            .bind(workspace_id)
            .execute(&mut **tx)
            .await?
            .rows_affected();
            changed_rows(rows, || StoreError::NotFound)?;
            Ok(Applied::Done)
        }
    }
}

/// A lease row's values as `$1` to `$14` (`revoked_at` NULL), for `INSERT ... SELECT ... WHERE`.
const LEASE_VALUES: &str =
    "SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, NULL, $13, $14";

fn bind_lease<'q>(
    query: sqlx::query::Query<'q, Any, sqlx::any::AnyArguments<'q>>,
    l: &'q LeaseRecord,
) -> sqlx::query::Query<'q, Any, sqlx::any::AnyArguments<'q>> {
    query
        .bind(&l.id)
        .bind(&l.workspace_id)
        .bind(&l.kind)
        .bind(&l.workflow_id)
        .bind(&l.agent_id)
        .bind(&l.secret_set_id)
        .bind(&l.purpose)
        .bind(serde_json::to_string(&l.actions).unwrap_or_else(|_| "[]".into()))
        .bind(
            l.keys
                .as_ref()
                .map(|k| serde_json::to_string(k).unwrap_or_else(|_| "[]".into())),
        )
        .bind(&l.token_hash)
        .bind(l.uses_left)
        .bind(l.expires_at)
        .bind(l.created_at)
        .bind(&l.created_by)
}

/// The grant (SQL parameter `grant`) is live, of the workspace and the set, on a live set.
fn live_grant(grant: &str, set: &str, workspace: &str, at: &str) -> String {
    format!(
        "EXISTS (SELECT 1 FROM vault_grants g JOIN vault_secret_sets s ON s.id = g.secret_set_id \
         WHERE g.id = {grant} AND g.workspace_id = {workspace} AND g.secret_set_id = {set} \
         AND g.revoked_at IS NULL AND (g.expires_at IS NULL OR g.expires_at > {at}) \
         AND s.deleted_at IS NULL AND s.destroyed_at IS NULL)"
    )
}

/// [`VaultOp::UseLease`]'s UPDATE, one row changed when the use is taken, with its values at
/// the placeholders `p` (lease, workspace, agent, time, grant; bound by [`bind_lease_use`]).
/// With `also`, a condition the use needs besides (none when empty).
pub(super) fn use_lease_sql(p: [&str; 5], also: &str) -> String {
    let [lease, workspace, agent, at, grant] = p;
    let also = and_also(also);
    format!(
        "UPDATE vault_leases SET uses_left = uses_left - 1 \
         WHERE id = {lease} AND workspace_id = {workspace} AND agent_id = {agent} \
         AND kind = 'request' AND revoked_at IS NULL AND expires_at > {at} AND uses_left > 0 \
         AND {AFTER_CUTOFF} AND {LIVE_PARENT} AND {} AND {}{also}",
        live_grant(grant, "vault_leases.secret_set_id", workspace, at),
        active_agent(agent, workspace),
    )
}

/// Binds a [`VaultOp::UseLease`]'s values in [`use_lease_sql`]'s order; any other operation
/// binds nothing.
pub(super) fn bind_lease_use<'q>(query: AnyQuery<'q>, op: &'q VaultOp) -> AnyQuery<'q> {
    match op {
        VaultOp::UseLease {
            workspace_id,
            lease_id,
            agent_id,
            grant_id,
            at,
        } => query
            .bind(lease_id)
            .bind(workspace_id)
            .bind(agent_id)
            .bind(*at)
            .bind(grant_id),
        _ => query,
    }
}

/// The agent is an active agent of the workspace.
fn active_agent(agent: &str, workspace: &str) -> String {
    format!(
        "EXISTS (SELECT 1 FROM agents a WHERE a.id = {agent} AND a.workspace_id = {workspace} \
         AND a.status = 'active')"
    )
}

/// A lease a mint or a use found unusable, to say why (read in the transaction that refused
/// it, so the reason is the one that held).
struct Usable<'a> {
    workspace_id: &'a str,
    lease_id: &'a str,
    agent_id: &'a str,
    at: i64,
    /// A request lease, whose uses are counted.
    counted: bool,
}

impl Usable<'_> {
    async fn why_not(&self, tx: &mut Transaction<'_, Any>) -> StoreError {
        match self.read(tx).await {
            Ok(err) | Err(err) => err,
        }
    }

    async fn read(&self, tx: &mut Transaction<'_, Any>) -> Result<StoreError, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT revoked_at, expires_at, uses_left, created_at, {CUTOFF} AS cutoff, \
             CASE WHEN {LIVE_PARENT} THEN 1 ELSE 0 END AS parent_live FROM vault_leases \
             WHERE id = $1 AND workspace_id = $2 AND agent_id = $3"
        ))
        .bind(self.lease_id)
        .bind(self.workspace_id)
        .bind(self.agent_id)
        .fetch_optional(&mut **tx)
        .await?;
        let Some(row) = row else {
            return Ok(StoreError::Conflict("lease_invalid".into()));
        };
        let revoked: Option<i64> = row.try_get("revoked_at")?;
        let cutoff: Option<i64> = row.try_get("cutoff")?;
        let created_at: i64 = row.try_get("created_at")?;
        let parent_live: i64 = row
            .try_get::<i32, _>("parent_live")
            .map(i64::from)
            .or_else(|_| row.try_get("parent_live"))?;
        if revoked.is_some() || cutoff.is_some_and(|c| created_at < c) || parent_live == 0 {
            return Ok(StoreError::Conflict("lease_revoked".into()));
        }
        if row.try_get::<i64, _>("expires_at")? <= self.at {
            return Ok(StoreError::Conflict("lease_expired".into()));
        }
        if self.counted && row.try_get::<Option<i64>, _>("uses_left")?.unwrap_or(0) <= 0 {
            return Ok(StoreError::Conflict("lease_used".into()));
        }
        let active = sqlx::query(&format!("SELECT 1 WHERE {}", active_agent("$1", "$2")))
            .bind(self.agent_id)
            .bind(self.workspace_id)
            .fetch_optional(&mut **tx)
            .await?;
        if active.is_none() {
            return Ok(StoreError::AgentNotActive);
        }
        Ok(StoreError::Conflict("no_grant".into()))
    }
}

/// A unique index refusing a row (two replicas numbering a set at once) is a conflict.
fn unique_is_conflict(err: sqlx::Error) -> StoreError {
    let unique = err
        .as_database_error()
        .is_some_and(|e| e.kind() == sqlx::error::ErrorKind::UniqueViolation);
    if unique {
        StoreError::Conflict("secret_set_exists".into())
    } else {
        err.into()
    }
}

#[async_trait]
impl VaultStore for SqlStore {
    #[tracing::instrument(level = "debug", skip_all)]
    async fn secret_sets(
        &self,
        workspace_id: &str,
        include_deleted: bool,
    ) -> Result<Vec<SecretSetRecord>, StoreError> {
        let deleted = if include_deleted {
            ""
        } else {
            " AND deleted_at IS NULL"
        };
        let rows = sqlx::query(&format!(
            "SELECT {SET_COLUMNS} FROM vault_secret_sets WHERE workspace_id = $1 AND destroyed_at IS NULL{deleted} ORDER BY number"
        ))
        .bind(workspace_id)
        .fetch_all(&self.read)
        .await?;
        Ok(rows.iter().map(set_from_row).collect::<Result<_, _>>()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn secret_set(
        &self,
        workspace_id: &str,
        set: &SetRef,
    ) -> Result<Option<SecretSetRecord>, StoreError> {
        let by_id = format!(
            "SELECT {SET_COLUMNS} FROM vault_secret_sets WHERE workspace_id = $1 AND id = $2"
        );
        let by_number = format!(
            "SELECT {SET_COLUMNS} FROM vault_secret_sets WHERE workspace_id = $1 AND number = $2"
        );
        let query = match set {
            SetRef::Id(id) => sqlx::query(&by_id)
                .bind(workspace_id)
                .bind(id.as_str().to_owned()),
            SetRef::Number(n) => sqlx::query(&by_number).bind(workspace_id).bind(*n),
        };
        let row = query.fetch_optional(&self.read).await?;
        Ok(row.as_ref().map(set_from_row).transpose()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn all_secret_sets(&self) -> Result<Vec<SecretSetRecord>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {SET_COLUMNS} FROM vault_secret_sets WHERE destroyed_at IS NULL ORDER BY created_at"
        ))
        .fetch_all(&self.read)
        .await?;
        Ok(rows.iter().map(set_from_row).collect::<Result<_, _>>()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn secret_version(
        &self,
        secret_set_id: &str,
        version: i64,
    ) -> Result<Option<SecretVersion>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {VERSION_COLUMNS} FROM vault_secret_versions WHERE secret_set_id = $1 AND version = $2"
        ))
        .bind(secret_set_id)
        .bind(version)
        .fetch_optional(&self.read)
        .await?;
        Ok(row.as_ref().map(version_from_row).transpose()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn secret_versions(&self, secret_set_id: &str) -> Result<Vec<SecretVersion>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {VERSION_COLUMNS} FROM vault_secret_versions WHERE secret_set_id = $1 ORDER BY version DESC"
        ))
        .bind(secret_set_id)
        .fetch_all(&self.read)
        .await?;
        Ok(rows
            .iter()
            .map(version_from_row)
            .collect::<Result<_, _>>()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn vault_grants(
        &self,
        workspace_id: &str,
        secret_set_id: Option<&str>,
    ) -> Result<Vec<GrantRecord>, StoreError> {
        let all = format!(
            "SELECT {GRANT_COLUMNS} FROM vault_grants WHERE workspace_id = $1 ORDER BY created_at DESC, id DESC"
        );
        let rows = match secret_set_id {
            Some(set) => sqlx::query(&SCENE_GRANTS[0]).bind(workspace_id).bind(set),
            None => sqlx::query(&all).bind(workspace_id),
        }
        .fetch_all(&self.read)
        .await?;
        Ok(rows.iter().map(grant_from_row).collect::<Result<_, _>>()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn vault_lease(
        &self,
        workspace_id: &str,
        lease_id: &str,
    ) -> Result<Option<LeaseRecord>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {LEASE_COLUMNS} FROM vault_leases WHERE workspace_id = $1 AND id = $2"
        ))
        .bind(workspace_id)
        .bind(lease_id)
        .fetch_optional(&self.read)
        .await?;
        Ok(row.as_ref().map(lease_from_row).transpose()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn leased_scene(
        &self,
        workspace_id: &str,
        set: &SetRef,
        token_hash: Option<&str>,
    ) -> Result<Option<LeasedScene>, StoreError> {
        // Two statements at once on two connections: the answer waits for one round trip (the
        // grants are many rows, which a join would each give the set's sealed version).
        let key = usize::from(matches!(set, SetRef::Number(_)));
        let scene = bind_set(sqlx::query(&SCENE[key]).bind(workspace_id), set).bind(token_hash);
        let grants = bind_set(sqlx::query(&SCENE_GRANTS[key]).bind(workspace_id), set);
        let (scene, grants) = tokio::join!(
            scene.fetch_optional(&self.read),
            grants.fetch_all(&self.read)
        );
        let (Some(row), grants) = (scene?, grants?) else {
            return Ok(None);
        };
        let version = joined(&row, &SCENE_VERSION, "secret_set_id", |column| {
            version_from_columns(&row, column)
        })?;
        let lease = match joined(&row, &SCENE_LEASE, "id", |column| {
            lease_from_columns(&row, column)
        })? {
            Some(lease) => Some(revoked_by_cutoff(lease, row.try_get("lease_cutoff")?)),
            None => None,
        };
        Ok(Some(LeasedScene {
            set: set_from_row(&row)?,
            version,
            grants: grants
                .iter()
                .map(grant_from_row)
                .collect::<Result<_, _>>()?,
            lease,
        }))
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn vault_leases(
        &self,
        workspace_id: &str,
        filter: &LeaseFilter,
        limit: i64,
    ) -> Result<Vec<LeaseRecord>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {LEASE_COLUMNS} FROM vault_leases WHERE workspace_id = $1 AND ($2 = '' OR agent_id = $2) \
             AND ($3 = '' OR secret_set_id = $3) AND ($4 = '' OR kind = $4) ORDER BY created_at DESC, id DESC LIMIT $5"
        ))
        .bind(workspace_id)
        .bind(filter.agent_id.clone().unwrap_or_default())
        .bind(filter.secret_set_id.clone().unwrap_or_default())
        .bind(filter.kind.clone().unwrap_or_default())
        .bind(limit)
        .fetch_all(&self.read)
        .await?;
        Ok(rows.iter().map(lease_from_row).collect::<Result<_, _>>()?)
    }
}
