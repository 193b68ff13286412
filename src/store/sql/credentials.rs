//! SQL of credentials, the kill switch and the JWT issuer's signing keys.

use async_trait::async_trait;
use sqlx::any::AnyRow;
use sqlx::{Any, Row, Transaction};

use super::{affected_or_conflict, changed_rows, Arg, Filters, SqlStore};
use crate::store::*;

pub(super) fn credential_from_row(row: &AnyRow) -> Result<CredentialRecord, sqlx::Error> {
    Ok(CredentialRecord {
        id: row.try_get("id")?,
        workspace_id: row.try_get("workspace_id")?,
        agent_id: row.try_get("agent_id")?,
        token_hash: row.try_get("token_hash")?,
        token_type: row.try_get("token_type")?,
        provider: row.try_get("provider")?,
        audience: row.try_get("audience")?,
        scopes: serde_json::from_str(&row.try_get::<String, _>("scopes")?).unwrap_or_default(),
        one_time: row.try_get::<i64, _>("one_time")? != 0,
        created_at: row.try_get("created_at")?,
        expires_at: row.try_get("expires_at")?,
        revoked_at: row.try_get("revoked_at")?,
        revoked_reason: row.try_get("revoked_reason")?,
        used_at: row.try_get("used_at")?,
    })
}

/// The kill switch's columns of `row` (`minting_paused`, `minting_paused_reason`,
/// `all_revoked_at`), each possibly NULL: a workspace without a row has never used it.
pub(super) fn kill_switch_from_row(row: &AnyRow) -> Result<KillSwitch, sqlx::Error> {
    Ok(KillSwitch {
        minting_paused: row
            .try_get::<Option<i64>, _>("minting_paused")?
            .is_some_and(|paused| paused != 0),
        minting_paused_reason: row.try_get("minting_paused_reason")?,
        all_revoked_at: row.try_get("all_revoked_at")?,
    })
}

async fn ensure_switch(
    tx: &mut Transaction<'_, Any>,
    workspace_id: &str,
    at: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO kill_switches (workspace_id, updated_at) VALUES ($1, $2) ON CONFLICT (workspace_id) DO NOTHING")
        .bind(workspace_id)
        .bind(at)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Applies a credential operation inside `tx`.
pub(super) async fn apply(
    tx: &mut Transaction<'_, Any>,
    op: &CredentialOp,
) -> Result<Applied, StoreError> {
    let applied = match op {
        CredentialOp::Create(c) => {
            let done = sqlx::query(
                "INSERT INTO credentials (id, workspace_id, agent_id, token_hash, token_type, provider, audience, scopes, \
                 one_time, created_at, expires_at) SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11 \
                 WHERE NOT EXISTS (SELECT 1 FROM kill_switches k WHERE k.workspace_id = $2 AND k.minting_paused <> 0) \
                 AND EXISTS (SELECT 1 FROM agents a WHERE a.id = $3 AND a.workspace_id = $2 \
                             AND a.status NOT IN ('revoked', 'suspended'))",
            )
            .bind(&c.id)
            .bind(&c.workspace_id)
            .bind(&c.agent_id)
            .bind(&c.token_hash)
            .bind(&c.token_type)
            .bind(c.provider.clone())
            .bind(c.audience.clone())
            .bind(serde_json::to_string(&c.scopes).unwrap_or_else(|_| "[]".into()))
            .bind(i64::from(c.one_time))
            .bind(c.created_at)
            .bind(c.expires_at)
            .execute(&mut **tx)
            .await?;
            // Paused, or the agent revoked or suspended, since the mint was checked.
            affected_or_conflict(done.rows_affected(), "minting_paused")?
        }
        CredentialOp::Revoke {
            workspace_id,
            token_hash,
            cred_id,
            agent_id,
            reason,
            at,
        } => {
            let (column, value) = match (token_hash, cred_id, agent_id) {
                (Some(h), _, _) => ("token_hash", h),
                (None, Some(id), _) => ("id", id),
                (None, None, Some(agent)) => ("agent_id", agent),
                (None, None, None) => return Ok(Applied::Count(0)),
            };
            let sql = format!(
                "UPDATE credentials SET revoked_at = $1, revoked_reason = $2 \
                 WHERE workspace_id = $3 AND {column} = $4 AND revoked_at IS NULL AND expires_at > $1"
            );
            let done = sqlx::query(&sql)
                .bind(*at)
                .bind(reason.clone())
                .bind(workspace_id)
                .bind(value)
                .execute(&mut **tx)
                .await?;
            Applied::Count(i64::try_from(done.rows_affected()).unwrap_or(i64::MAX))
        }
        CredentialOp::Use { id, at } => {
            let done = sqlx::query(
                "UPDATE credentials SET used_at = $1 WHERE id = $2 AND used_at IS NULL AND revoked_at IS NULL AND expires_at > $1",
            )
            .bind(*at)
            .bind(id)
            .execute(&mut **tx)
            .await?;
            affected_or_conflict(done.rows_affected(), "the one-time credential was used")?
        }
        CredentialOp::SetMinting {
            workspace_id,
            paused,
            reason,
            at,
        } => {
            ensure_switch(tx, workspace_id, *at).await?;
            sqlx::query(
                "UPDATE kill_switches SET minting_paused = $1, minting_paused_reason = $2, updated_at = $3 WHERE workspace_id = $4",
            )
            .bind(i64::from(*paused))
            .bind(reason.clone())
            .bind(*at)
            .bind(workspace_id)
            .execute(&mut **tx)
            .await?;
            Applied::Done
        }
        CredentialOp::RevokeAll { workspace_id, at } => {
            ensure_switch(tx, workspace_id, *at).await?;
            // Every credential committed so far is revoked outright, whatever the clock of the
            // replica that minted it said; the cutoff below also covers the rest.
            sqlx::query(
                "UPDATE credentials SET revoked_at = $1, revoked_reason = 'kill switch: revoke-all' \
                 WHERE workspace_id = $2 AND revoked_at IS NULL AND expires_at > $1",
            )
            .bind(*at)
            .bind(workspace_id)
            .execute(&mut **tx)
            .await?;
            sqlx::query("UPDATE kill_switches SET all_revoked_at = CASE WHEN all_revoked_at IS NULL OR all_revoked_at < $1 \
                 THEN $1 ELSE all_revoked_at END, updated_at = $1 WHERE workspace_id = $2")
                .bind(*at)
                .bind(workspace_id)
                .execute(&mut **tx)
                .await?;
            let of = super::mcp::Sessions::Workspace(workspace_id);
            super::mcp::end_sessions(tx, of, *at, "revoked_by_kill_switch").await?;
            Applied::Done
        }
        CredentialOp::AddSigningKey {
            key,
            rotate,
            publish_until,
        } => {
            if *rotate {
                sqlx::query(
                    "UPDATE signing_keys SET retired_at = $1, publish_until = $2 WHERE retired_at IS NULL",
                )
                .bind(key.created_at)
                .bind(*publish_until)
                .execute(&mut **tx)
                .await?;
            }
            let added = sqlx::query(
                "INSERT INTO signing_keys (kid, private_key, public_key, created_at) SELECT $1, $2, $3, $4 \
                 WHERE $5 = 1 OR NOT EXISTS (SELECT 1 FROM signing_keys WHERE retired_at IS NULL)",
            )
            .bind(&key.kid)
            .bind(key.private_key.expose())
            .bind(&key.public_key)
            .bind(key.created_at)
            .bind(i64::from(*rotate))
            .execute(&mut **tx)
            .await?
            .rows_affected();
            Applied::Count(i64::try_from(added).unwrap_or(0))
        }
        CredentialOp::ResealSigningKey {
            kid,
            previous,
            sealed,
        } => {
            let rows = sqlx::query(
                "UPDATE signing_keys SET private_key = $1 WHERE kid = $2 AND private_key = $3",
            )
            .bind(sealed.expose())
            .bind(kid)
            .bind(previous.expose())
            .execute(&mut **tx)
            .await?
            .rows_affected();
            changed_rows(rows, || {
                StoreError::Conflict("the signing key changed meanwhile".into())
            })?;
            Applied::Done
        }
    };
    Ok(applied)
}

#[async_trait]
impl CredentialStore for SqlStore {
    #[tracing::instrument(level = "debug", skip_all)]
    async fn credential_by_hash(
        &self,
        token_hash: &str,
    ) -> Result<Option<CredentialRecord>, StoreError> {
        let row = sqlx::query(
            "SELECT id, workspace_id, agent_id, token_hash, token_type, provider, audience, scopes, one_time, created_at, \
             expires_at, revoked_at, revoked_reason, used_at FROM credentials WHERE token_hash = $1",
        )
        .bind(token_hash)
        .fetch_optional(&self.read)
        .await?;
        Ok(row.map(|r| credential_from_row(&r)).transpose()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn credential_in(
        &self,
        workspace_id: &str,
        id: &str,
    ) -> Result<Option<CredentialRecord>, StoreError> {
        let row = sqlx::query(
            "SELECT id, workspace_id, agent_id, token_hash, token_type, provider, audience, scopes, one_time, created_at, \
             expires_at, revoked_at, revoked_reason, used_at FROM credentials WHERE id = $1 AND workspace_id = $2",
        )
        .bind(id)
        .bind(workspace_id)
        .fetch_optional(&self.read)
        .await?;
        Ok(row.map(|r| credential_from_row(&r)).transpose()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn active_credentials(
        &self,
        query: &CredentialQuery,
    ) -> Result<Vec<ActiveCredential>, StoreError> {
        // Reads (workspace_id, created_at, id) or (workspace_id, agent_id, created_at, id)
        // (migration 0017) from the newest down to `minted_from`, at most an hour of mints.
        let mut f = Filters::new();
        f.text("workspace_id = ?", Some(&query.workspace_id));
        f.text("agent_id = ?", query.agent_id.as_deref());
        f.push("created_at >= ?", [Arg::Int(query.minted_from)]);
        f.push("expires_at > ?", [Arg::Int(query.now)]);
        f.push("revoked_at IS NULL", []);
        f.push("(one_time = 0 OR used_at IS NULL)", []);
        f.cursor(query.after.as_ref());
        let sql = f.sql(
            "SELECT id, agent_id, token_type, provider, audience, scopes, one_time, created_at, expires_at, \
             (SELECT a.name FROM agents a WHERE a.id = credentials.agent_id) AS agent_name FROM credentials",
            &format!("ORDER BY created_at DESC, id DESC LIMIT {}", query.limit.max(0)),
        );
        let rows = f.fetch(&self.read, &sql).await?;
        let mut listed = Vec::with_capacity(rows.len());
        for r in rows {
            listed.push(ActiveCredential {
                id: r.try_get("id")?,
                agent_id: r.try_get("agent_id")?,
                agent_name: r
                    .try_get::<Option<String>, _>("agent_name")?
                    .unwrap_or_default(),
                token_type: r.try_get("token_type")?,
                provider: r.try_get("provider")?,
                audience: r.try_get("audience")?,
                scopes: serde_json::from_str(&r.try_get::<String, _>("scopes")?)
                    .unwrap_or_default(),
                one_time: r.try_get::<i64, _>("one_time")? != 0,
                created_at: r.try_get("created_at")?,
                expires_at: r.try_get("expires_at")?,
            });
        }
        Ok(listed)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn kill_switch(&self, workspace_id: &str) -> Result<KillSwitch, StoreError> {
        let row = sqlx::query(
            "SELECT minting_paused, minting_paused_reason, all_revoked_at FROM kill_switches WHERE workspace_id = $1",
        )
        .bind(workspace_id)
        .fetch_optional(&self.read)
        .await?;
        Ok(match row {
            Some(r) => kill_switch_from_row(&r)?,
            None => KillSwitch::default(),
        })
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn signing_keys(&self, now: i64) -> Result<Vec<SigningKeyRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT kid, private_key, public_key, created_at, retired_at, publish_until FROM signing_keys \
             WHERE retired_at IS NULL OR publish_until > $1 ORDER BY created_at DESC, kid DESC",
        )
        .bind(now)
        .fetch_all(&self.read)
        .await?;
        let mut keys = Vec::with_capacity(rows.len());
        for r in rows {
            keys.push(SigningKeyRecord {
                kid: r.try_get("kid")?,
                private_key: crate::secret::Secret::new(r.try_get("private_key")?),
                public_key: r.try_get("public_key")?,
                created_at: r.try_get("created_at")?,
                retired_at: r.try_get("retired_at")?,
                publish_until: r.try_get("publish_until")?,
            });
        }
        Ok(keys)
    }
}
