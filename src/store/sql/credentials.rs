//! SQL for credentials and the kill switch.

use sqlx::any::AnyRow;
use sqlx::{Any, AnyPool, Row, Transaction};

use crate::store::*;

fn credential_from_row(row: &AnyRow) -> Result<CredentialRecord, sqlx::Error> {
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

pub(super) async fn apply(
    tx: &mut Transaction<'_, Any>,
    op: &Op,
) -> Option<Result<Outcome, StoreError>> {
    apply_inner(tx, op).await.transpose()
}

async fn apply_inner(
    tx: &mut Transaction<'_, Any>,
    op: &Op,
) -> Result<Option<Outcome>, StoreError> {
    let outcome = match op {
        Op::RecordFeedback {
            id,
            workspace_id,
            agent_id,
            key_id,
            verdict,
            evidence,
            delta,
            half_life_ms,
            at,
        } => {
            sqlx::query(
                "INSERT INTO agent_feedback (id, workspace_id, agent_id, key_id, verdict, evidence, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(id)
            .bind(workspace_id)
            .bind(agent_id)
            .bind(key_id)
            .bind(verdict)
            .bind(evidence)
            .bind(*at)
            .execute(&mut **tx)
            .await?;
            let row = sqlx::query(
                "SELECT risk_score, risk_scored_at FROM agents WHERE id = $1 AND workspace_id = $2",
            )
            .bind(agent_id)
            .bind(workspace_id)
            .fetch_optional(&mut **tx)
            .await?
            .ok_or(StoreError::UnknownAgent)?;
            let old: f64 = row.try_get("risk_score")?;
            let scored_at: Option<i64> = row.try_get("risk_scored_at")?;
            let elapsed = scored_at.map_or(0.0, |t| (*at - t).max(0) as f64);
            let score = (old * 0.5f64.powf(elapsed / half_life_ms) + delta).max(0.0);
            let tier = crate::telemetry::reputation::tier_of(score);
            sqlx::query(
                "UPDATE agents SET risk_score = $1, risk_scored_at = $2, risk_tier = $3, updated_at = $2 WHERE id = $4",
            )
            .bind(score)
            .bind(*at)
            .bind(tier)
            .bind(agent_id)
            .execute(&mut **tx)
            .await?;
            let sql = format!("SELECT {} FROM agents WHERE id = $1", super::AGENT_COLUMNS);
            let agent = sqlx::query(&sql)
                .bind(agent_id)
                .fetch_one(&mut **tx)
                .await?;
            Outcome::Agent(Box::new(super::agent_from_row(&agent)?))
        }
        Op::CreateCredential(c) => {
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
            if done.rows_affected() == 0 {
                // Paused, or the agent revoked or suspended, since the mint was checked.
                return Err(StoreError::Conflict("minting_paused".into()));
            }
            Outcome::Done
        }
        Op::RevokeCredentials {
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
                (None, None, None) => return Ok(Some(Outcome::Count(0))),
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
            Outcome::Count(i64::try_from(done.rows_affected()).unwrap_or(i64::MAX))
        }
        Op::UseCredential { id, at } => {
            let done = sqlx::query(
                "UPDATE credentials SET used_at = $1 WHERE id = $2 AND used_at IS NULL AND revoked_at IS NULL AND expires_at > $1",
            )
            .bind(*at)
            .bind(id)
            .execute(&mut **tx)
            .await?;
            if done.rows_affected() == 0 {
                return Err(StoreError::Conflict(
                    "the one-time credential was used".into(),
                ));
            }
            Outcome::Done
        }
        Op::SetMinting {
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
            Outcome::Done
        }
        Op::RevokeAll { workspace_id, at } => {
            ensure_switch(tx, workspace_id, *at).await?;
            sqlx::query("UPDATE kill_switches SET all_revoked_at = CASE WHEN all_revoked_at IS NULL OR all_revoked_at < $1 \
                 THEN $1 ELSE all_revoked_at END, updated_at = $1 WHERE workspace_id = $2")
                .bind(*at)
                .bind(workspace_id)
                .execute(&mut **tx)
                .await?;
            Outcome::Done
        }
        _ => return Ok(None),
    };
    Ok(Some(outcome))
}

pub(super) async fn credential_by_hash(
    pool: &AnyPool,
    token_hash: &str,
) -> Result<Option<CredentialRecord>, StoreError> {
    let row = sqlx::query(
        "SELECT id, workspace_id, agent_id, token_hash, token_type, provider, audience, scopes, one_time, created_at, \
         expires_at, revoked_at, revoked_reason, used_at FROM credentials WHERE token_hash = $1",
    )
    .bind(token_hash)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|r| credential_from_row(&r)).transpose()?)
}

pub(super) async fn kill_switch(
    pool: &AnyPool,
    workspace_id: &str,
) -> Result<KillSwitch, StoreError> {
    let row = sqlx::query(
        "SELECT minting_paused, minting_paused_reason, all_revoked_at FROM kill_switches WHERE workspace_id = $1",
    )
    .bind(workspace_id)
    .fetch_optional(pool)
    .await?;
    Ok(match row {
        Some(r) => KillSwitch {
            minting_paused: r.try_get::<i64, _>("minting_paused")? != 0,
            minting_paused_reason: r.try_get("minting_paused_reason")?,
            all_revoked_at: r.try_get("all_revoked_at")?,
        },
        None => KillSwitch::default(),
    })
}
