//! SQL of policies, their versions, idempotency records and policy challenges.

use async_trait::async_trait;
use serde_json::Value;
use sqlx::any::AnyRow;
use sqlx::{Any, AnyPool, Row, Transaction};

use super::{affected_or_conflict, changed_rows, Arg, Filters, SqlStore};
use crate::domain::{ChallengeStatus, Raiser};
use crate::store::*;

fn policy_from_row(row: &AnyRow) -> Result<PolicyRecord, sqlx::Error> {
    Ok(PolicyRecord {
        workspace_id: row.try_get("workspace_id")?,
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        current_version: row.try_get("current_version")?,
        current_hash: row.try_get("current_hash")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

const POLICY_COLUMNS: &str =
    "workspace_id, id, name, current_version, current_hash, created_at, updated_at";

fn version_from_row(row: &AnyRow) -> Result<PolicyVersion, sqlx::Error> {
    Ok(PolicyVersion {
        workspace_id: row.try_get("workspace_id")?,
        policy_id: row.try_get("policy_id")?,
        version: row.try_get("version")?,
        hash: row.try_get("hash")?,
        spec: serde_json::from_str(&row.try_get::<String, _>("spec")?).unwrap_or(Value::Null),
        cedar: row.try_get("cedar")?,
        author: row.try_get("author")?,
        created_at: row.try_get("created_at")?,
    })
}

const VERSION_COLUMNS: &str =
    "workspace_id, policy_id, version, hash, spec, cedar, author, created_at";

fn list(text: &str) -> Vec<String> {
    serde_json::from_str(text).unwrap_or_default()
}

fn challenge_from_row(row: &AnyRow) -> Result<PolicyChallenge, sqlx::Error> {
    let status: String = row.try_get("status")?;
    Ok(PolicyChallenge {
        id: row.try_get("id")?,
        workspace_id: row.try_get("workspace_id")?,
        agent_id: row.try_get("agent_id")?,
        policy_id: row.try_get("policy_id")?,
        action: row.try_get("action")?,
        fingerprint: row.try_get("fingerprint")?,
        token_hash: row.try_get("token_hash")?,
        status: ChallengeStatus::parse(&status)
            .ok_or_else(|| sqlx::Error::Decode(format!("challenge status `{status}`").into()))?,
        reasons: list(&row.try_get::<String, _>("reasons")?),
        reason_codes: list(&row.try_get::<String, _>("reason_codes")?),
        summary: serde_json::from_str(&row.try_get::<String, _>("summary")?).unwrap_or(Value::Null),
        trace_id: row.try_get("trace_id")?,
        created_at: row.try_get("created_at")?,
        expires_at: row.try_get("expires_at")?,
        decided_at: row.try_get("decided_at")?,
        decided_by: row.try_get("decided_by")?,
        decision_reason: row.try_get("decision_reason")?,
        consumed_at: row.try_get("consumed_at")?,
        raised_by: Raiser::parse(&row.try_get::<String, _>("raised_by")?),
        approvers: list(&row.try_get::<String, _>("approvers")?),
    })
}

/// The conflict of an `Idempotency-Key` stored meanwhile by another request.
pub const IDEMPOTENCY_KEY_TAKEN: &str = "the idempotency key was stored by another request";

/// Applies a policy operation inside `tx`.
pub(super) async fn apply(
    tx: &mut Transaction<'_, Any>,
    op: &PolicyOp,
) -> Result<Applied, StoreError> {
    let applied = match op {
        PolicyOp::Apply(apply) => apply_policy(tx, apply).await?,
        PolicyOp::StoreIdempotency(r) => {
            let done = sqlx::query(
                "INSERT INTO idempotency_keys (workspace_id, key, request_hash, status, response, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6) \
                 ON CONFLICT (workspace_id, key) DO UPDATE SET request_hash = excluded.request_hash, \
                 status = excluded.status, response = excluded.response, created_at = excluded.created_at \
                 WHERE idempotency_keys.created_at < $7",
            )
            .bind(&r.workspace_id)
            .bind(&r.key)
            .bind(&r.request_hash)
            .bind(r.status)
            .bind(&r.response)
            .bind(r.created_at)
            // A record older than 24 h may be replaced.
            .bind(r.created_at - 86_400_000)
            .execute(&mut **tx)
            .await?;
            // Another request holds the key: this one must not apply anything.
            affected_or_conflict(done.rows_affected(), IDEMPOTENCY_KEY_TAKEN)?
        }
        PolicyOp::DecideChallenge {
            id,
            status,
            by,
            reason,
            at,
        } => {
            let done = sqlx::query(
                "UPDATE policy_challenges SET status = $1, decided_at = $2, decided_by = $3, decision_reason = $5 \
                 WHERE id = $4 AND status = 'pending' AND expires_at > $2",
            )
            .bind(status.as_str())
            .bind(*at)
            .bind(by)
            .bind(id)
            .bind(reason.clone())
            .execute(&mut **tx)
            .await?;
            affected_or_conflict(
                done.rows_affected(),
                "the challenge was decided or expired meanwhile",
            )?
        }
        PolicyOp::ConsumeApproval { id, at } => {
            let done = sqlx::query(
                "UPDATE policy_challenges SET consumed_at = $1 WHERE id = $2 AND status = 'approved' AND consumed_at IS NULL",
            )
            .bind(*at)
            .bind(id)
            .execute(&mut **tx)
            .await?;
            affected_or_conflict(done.rows_affected(), APPROVAL_USED)?
        }
        PolicyOp::CreateChallenge(c) => {
            sqlx::query(
                "INSERT INTO policy_challenges (id, workspace_id, agent_id, policy_id, action, fingerprint, token_hash, \
                 status, reasons, reason_codes, summary, trace_id, created_at, expires_at, raised_by, approvers) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)",
            )
            .bind(&c.id)
            .bind(&c.workspace_id)
            .bind(&c.agent_id)
            .bind(&c.policy_id)
            .bind(&c.action)
            .bind(&c.fingerprint)
            .bind(&c.token_hash)
            .bind(c.status.as_str())
            .bind(serde_json::to_string(&c.reasons).unwrap_or_else(|_| "[]".into()))
            .bind(serde_json::to_string(&c.reason_codes).unwrap_or_else(|_| "[]".into()))
            .bind(c.summary.to_string())
            .bind(&c.trace_id)
            .bind(c.created_at)
            .bind(c.expires_at)
            .bind(c.raised_by.as_str())
            .bind(serde_json::to_string(&c.approvers).unwrap_or_else(|_| "[]".into()))
            .execute(&mut **tx)
            .await?;
            Applied::Done
        }
        PolicyOp::ClaimApprovalNotice(n) => claim_approval_notice(tx, n).await?,
    };
    Ok(applied)
}

/// Claims the approval mail of a challenge (see [`ApprovalNotice`]): `Count(1)` when it is to
/// go out, `Count(0)` when a mail for the same request is still open, `Conflict` (nothing
/// kept) when the agent reached its bound. The row of the same agent and fingerprint is taken
/// only when the challenge it names expired or was decided, so two replicas never both mail
/// one request (a challenge another replica just made, not yet visible to this statement,
/// keeps its row); the agent's count is one row per agent, moved by one statement.
async fn claim_approval_notice(
    tx: &mut Transaction<'_, Any>,
    n: &ApprovalNotice,
) -> Result<Applied, StoreError> {
    // Rows that no longer hold a request back.
    sqlx::query(
        "DELETE FROM approval_notices WHERE workspace_id = $1 AND agent_id = $2 AND expires_at <= $3",
    )
    .bind(&n.workspace_id)
    .bind(&n.agent_id)
    .bind(n.now)
    .execute(&mut **tx)
    .await?;
    let claimed = sqlx::query(
        "INSERT INTO approval_notices (workspace_id, agent_id, fingerprint, challenge_id, notified_at, expires_at) \
         VALUES ($1, $2, $3, $4, $5, $6) \
         ON CONFLICT (workspace_id, agent_id, fingerprint) DO UPDATE SET challenge_id = excluded.challenge_id, \
         notified_at = excluded.notified_at, expires_at = excluded.expires_at \
         WHERE approval_notices.expires_at <= $5 OR EXISTS (SELECT 1 FROM policy_challenges p \
         WHERE p.id = approval_notices.challenge_id AND p.status <> 'pending')",
    )
    .bind(&n.workspace_id)
    .bind(&n.agent_id)
    .bind(&n.fingerprint)
    .bind(&n.challenge_id)
    .bind(n.now)
    .bind(n.expires_at)
    .execute(&mut **tx)
    .await?
    .rows_affected();
    if claimed == 0 {
        return Ok(Applied::Count(0));
    }
    // The agent's mails in its current window (which starts with its first mail and ends
    // after the window's length): a new window, or one more below the bound.
    let counted = sqlx::query(
        "INSERT INTO approval_mail_counts (workspace_id, agent_id, window_start, sent) VALUES ($1, $2, $3, 1) \
         ON CONFLICT (workspace_id, agent_id) DO UPDATE SET \
         sent = CASE WHEN approval_mail_counts.window_start <= $4 THEN 1 ELSE approval_mail_counts.sent + 1 END, \
         window_start = CASE WHEN approval_mail_counts.window_start <= $4 THEN $3 ELSE approval_mail_counts.window_start END \
         WHERE approval_mail_counts.window_start <= $4 OR approval_mail_counts.sent < $5",
    )
    .bind(&n.workspace_id)
    .bind(&n.agent_id)
    .bind(n.now)
    .bind(n.window_start)
    .bind(n.max_per_window)
    .execute(&mut **tx)
    .await?
    .rows_affected();
    affected_or_conflict(counted, APPROVAL_MAILS_SPENT)?;
    Ok(Applied::Count(1))
}

async fn apply_policy(
    tx: &mut Transaction<'_, Any>,
    a: &PolicyApply,
) -> Result<Applied, StoreError> {
    let v = &a.version;
    let moved = || StoreError::Conflict("the policy changed meanwhile".into());
    if a.expected_version == 0 {
        let created = sqlx::query(
            "INSERT INTO policies (workspace_id, id, name, current_version, current_hash, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $6) ON CONFLICT (workspace_id, id) DO NOTHING",
        )
        .bind(&v.workspace_id)
        .bind(&v.policy_id)
        .bind(&a.name)
        .bind(v.version)
        .bind(&v.hash)
        .bind(v.created_at)
        .execute(&mut **tx)
        .await?
        .rows_affected();
        changed_rows(created, moved)?;
    } else {
        let updated = sqlx::query(
            "UPDATE policies SET name = $1, current_version = $2, current_hash = $3, updated_at = $4 \
             WHERE workspace_id = $5 AND id = $6 AND current_version = $7",
        )
        .bind(&a.name)
        .bind(v.version)
        .bind(&v.hash)
        .bind(v.created_at)
        .bind(&v.workspace_id)
        .bind(&v.policy_id)
        .bind(a.expected_version)
        .execute(&mut **tx)
        .await?
        .rows_affected();
        changed_rows(updated, moved)?;
    }
    sqlx::query(
        "INSERT INTO policy_versions (workspace_id, policy_id, version, hash, spec, cedar, author, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(&v.workspace_id)
    .bind(&v.policy_id)
    .bind(v.version)
    .bind(&v.hash)
    .bind(v.spec.to_string())
    .bind(&v.cedar)
    .bind(&v.author)
    .bind(v.created_at)
    .execute(&mut **tx)
    .await?;
    for table in ["policy_group_members", "policy_bindings"] {
        sqlx::query(&format!(
            "DELETE FROM {table} WHERE workspace_id = $1 AND policy_id = $2"
        ))
        .bind(&v.workspace_id)
        .bind(&v.policy_id)
        .execute(&mut **tx)
        .await?;
    }
    for (group, agent) in &a.members {
        sqlx::query(
            "INSERT INTO policy_group_members (workspace_id, policy_id, group_name, agent_id) VALUES ($1, $2, $3, $4) \
             ON CONFLICT DO NOTHING",
        )
        .bind(&v.workspace_id)
        .bind(&v.policy_id)
        .bind(group)
        .bind(agent)
        .execute(&mut **tx)
        .await?;
    }
    for (binding, group, block, actions) in &a.bindings {
        sqlx::query(
            "INSERT INTO policy_bindings (workspace_id, policy_id, binding_name, group_name, block_name, actions) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
        )
        .bind(&v.workspace_id)
        .bind(&v.policy_id)
        .bind(binding)
        .bind(group)
        .bind(block)
        .bind(actions)
        .execute(&mut **tx)
        .await?;
    }
    Ok(Applied::Done)
}

/// The policies of one workspace, or of every workspace for `None`.
async fn policies(
    pool: &AnyPool,
    workspace_id: Option<&str>,
) -> Result<Vec<PolicyRecord>, StoreError> {
    let rows = match workspace_id {
        Some(ws) => {
            let sql = format!(
                "SELECT {POLICY_COLUMNS} FROM policies WHERE workspace_id = $1 ORDER BY id"
            );
            sqlx::query(&sql).bind(ws).fetch_all(pool).await?
        }
        None => {
            let sql = format!("SELECT {POLICY_COLUMNS} FROM policies ORDER BY workspace_id, id");
            sqlx::query(&sql).fetch_all(pool).await?
        }
    };
    Ok(rows.iter().map(policy_from_row).collect::<Result<_, _>>()?)
}

const CHALLENGE_COLUMNS: &str =
    "id, workspace_id, agent_id, policy_id, action, fingerprint, token_hash, status, reasons, \
     reason_codes, summary, trace_id, created_at, expires_at, decided_at, decided_by, consumed_at, \
     raised_by, approvers, decision_reason";

/// The challenge whose `column` (`id` or `token_hash`) is `value`.
async fn policy_challenge(
    pool: &AnyPool,
    column: &str,
    value: &str,
) -> Result<Option<PolicyChallenge>, StoreError> {
    let sql = format!("SELECT {CHALLENGE_COLUMNS} FROM policy_challenges WHERE {column} = $1");
    let row = sqlx::query(&sql).bind(value).fetch_optional(pool).await?;
    Ok(row.map(|r| challenge_from_row(&r)).transpose()?)
}

#[async_trait]
impl PolicyStore for SqlStore {
    #[tracing::instrument(level = "debug", skip_all)]
    async fn policy(
        &self,
        workspace_id: &str,
        policy_id: &str,
    ) -> Result<Option<PolicyRecord>, StoreError> {
        let sql =
            format!("SELECT {POLICY_COLUMNS} FROM policies WHERE workspace_id = $1 AND id = $2");
        let row = sqlx::query(&sql)
            .bind(workspace_id)
            .bind(policy_id)
            .fetch_optional(&self.read)
            .await?;
        Ok(row.map(|r| policy_from_row(&r)).transpose()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn policies(&self, workspace_id: &str) -> Result<Vec<PolicyRecord>, StoreError> {
        policies(&self.read, Some(workspace_id)).await
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn all_policies(&self) -> Result<Vec<PolicyRecord>, StoreError> {
        policies(&self.read, None).await
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn policy_heads(&self) -> Result<Vec<(String, String, i64)>, StoreError> {
        let rows = sqlx::query("SELECT workspace_id, id, current_version FROM policies")
            .fetch_all(&self.read)
            .await?;
        let mut heads = Vec::with_capacity(rows.len());
        for r in rows {
            heads.push((
                r.try_get("workspace_id")?,
                r.try_get("id")?,
                r.try_get("current_version")?,
            ));
        }
        Ok(heads)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn policy_version(
        &self,
        workspace_id: &str,
        policy_id: &str,
        version: i64,
    ) -> Result<Option<PolicyVersion>, StoreError> {
        let sql = format!("SELECT {VERSION_COLUMNS} FROM policy_versions WHERE workspace_id = $1 AND policy_id = $2 AND version = $3");
        let row = sqlx::query(&sql)
            .bind(workspace_id)
            .bind(policy_id)
            .bind(version)
            .fetch_optional(&self.read)
            .await?;
        Ok(row.map(|r| version_from_row(&r)).transpose()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn policy_versions(
        &self,
        workspace_id: &str,
        policy_id: &str,
    ) -> Result<Vec<PolicyVersion>, StoreError> {
        let sql = format!(
            "SELECT {VERSION_COLUMNS} FROM policy_versions WHERE workspace_id = $1 AND policy_id = $2 ORDER BY version DESC"
        );
        let rows = sqlx::query(&sql)
            .bind(workspace_id)
            .bind(policy_id)
            .fetch_all(&self.read)
            .await?;
        Ok(rows
            .iter()
            .map(version_from_row)
            .collect::<Result<_, _>>()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn idempotency(
        &self,
        workspace_id: &str,
        key: &str,
        since: i64,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        let row = sqlx::query(
            "SELECT workspace_id, key, request_hash, status, response, created_at FROM idempotency_keys \
             WHERE workspace_id = $1 AND key = $2 AND created_at >= $3",
        )
        .bind(workspace_id)
        .bind(key)
        .bind(since)
        .fetch_optional(&self.read)
        .await?;
        Ok(match row {
            Some(r) => Some(IdempotencyRecord {
                workspace_id: r.try_get("workspace_id")?,
                key: r.try_get("key")?,
                request_hash: r.try_get("request_hash")?,
                status: r.try_get("status")?,
                response: r.try_get("response")?,
                created_at: r.try_get("created_at")?,
            }),
            None => None,
        })
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn policy_challenge(&self, id: &str) -> Result<Option<PolicyChallenge>, StoreError> {
        policy_challenge(&self.read, "id", id).await
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn policy_challenge_by_token(
        &self,
        token_hash: &str,
    ) -> Result<Option<PolicyChallenge>, StoreError> {
        policy_challenge(&self.read, "token_hash", token_hash).await
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn policy_challenges(
        &self,
        query: &ChallengeQuery,
    ) -> Result<Vec<PolicyChallenge>, StoreError> {
        let mut f = Filters::new();
        f.text("workspace_id = ?", Some(&query.workspace_id));
        f.text("agent_id = ?", query.agent_id.as_deref());
        match query.status {
            None => {}
            Some(ChallengeStatus::Pending) => {
                f.push(
                    "status = 'pending' AND expires_at > ?",
                    [Arg::Int(query.now)],
                );
            }
            Some(ChallengeStatus::Expired) => {
                f.push(
                    "status = 'pending' AND expires_at <= ?",
                    [Arg::Int(query.now)],
                );
            }
            Some(decided) => f.text("status = ?", Some(decided.as_str())),
        }
        if query.decided {
            f.push("status IN ('approved', 'denied')", []);
        }
        f.cursor(query.after.as_ref());
        let sql = f.sql(
            &format!("SELECT {CHALLENGE_COLUMNS} FROM policy_challenges"),
            &format!("ORDER BY created_at DESC, id DESC LIMIT {}", query.limit),
        );
        let rows = f.fetch(&self.read, &sql).await?;
        Ok(rows
            .iter()
            .map(challenge_from_row)
            .collect::<Result<_, _>>()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn decided_challenge(
        &self,
        workspace_id: &str,
        agent_id: &str,
        fingerprint: &str,
        since: i64,
        approved_by_person: bool,
    ) -> Result<Option<PolicyChallenge>, StoreError> {
        let sql = format!(
            "SELECT {CHALLENGE_COLUMNS} FROM policy_challenges WHERE workspace_id = $1 AND agent_id = $2 AND fingerprint = $3 \
             AND decided_at >= $4 AND (status = 'denied' OR (status = 'approved' AND consumed_at IS NULL \
             AND ($5 = 0 OR decided_by <> $6))) \
             ORDER BY decided_at DESC, id DESC LIMIT 1"
        );
        let row = sqlx::query(&sql)
            .bind(workspace_id)
            .bind(agent_id)
            .bind(fingerprint)
            .bind(since)
            .bind(i64::from(approved_by_person))
            .bind(crate::domain::challenge::DECIDED_BY_LINK)
            .fetch_optional(&self.read)
            .await?;
        Ok(row.map(|r| challenge_from_row(&r)).transpose()?)
    }
}
