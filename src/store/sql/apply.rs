//! Applying changes: the batch transaction, one savepoint per change that needs one, the nonce
//! claim, the workspace versions a change was decided on (answered `Stale` when they moved)
//! and the version bump of a change that supersedes them. The operations themselves are each
//! area's SQL.

use std::collections::HashMap;
use std::fmt::Write as _;

use sqlx::{Any, AnyConnection, Connection, Row, Transaction};

use super::audit::{insert_audits, Enclosed, AUDIT_ROWS_PER_INSERT};
use super::{
    accounts, agents, and_also, audit, credentials, email, mcp, policies, script, site, telemetry,
    vault, AnyQuery,
};
use crate::store::*;

/// Applies a batch on the write connection (see [`Store::apply`](crate::store::Store::apply)).
pub(super) async fn apply(
    conn: &mut AnyConnection,
    changes: &[Change],
) -> Result<Vec<Result<Applied, StoreError>>, StoreError> {
    // Decisions only: `/v1/check`'s batches, which keep their version-checked INSERT below.
    let records = changes.iter().all(is_record);
    // Signed requests' changes (a vault action with its nonce, ...), with the decisions
    // committed beside them: one round trip instead of one per statement.
    if !records {
        if let Some(results) = script::apply(conn, changes).await? {
            return Ok(results);
        }
    }
    if changes.iter().all(|c| c.basis.is_none()) {
        return apply_fresh(conn, &changes.iter().collect::<Vec<_>>()).await;
    }
    if records {
        if let Some(results) = apply_records(conn, changes).await? {
            return Ok(results);
        }
    }
    // Changes decided on a workspace version that has moved are answered `Stale` unwritten;
    // the rest are applied. The versions are read after every change in the batch was
    // decided, so a change answered (on any replica) before one of them was made is seen.
    let versions = current_versions(conn, changes).await?;
    let is_stale = |c: &Change| stale_at(&versions, c);
    let fresh: Vec<&Change> = changes.iter().filter(|c| is_stale(c).is_none()).collect();
    let mut applied = apply_fresh(conn, &fresh).await?.into_iter();
    let mut results = Vec::with_capacity(changes.len());
    for change in changes {
        results.push(match is_stale(change) {
            Some(version) => Err(StoreError::Stale(version)),
            None => applied
                .next()
                .unwrap_or(Err(StoreError::Database("missing batch result".into()))),
        });
    }
    Ok(results)
}

/// Decisions (records decided on a workspace version): each written only if its version is
/// still current, the check and the INSERT in one statement (one round trip where a read of
/// the versions and then an INSERT took two). `None` when they do not fit one statement.
async fn apply_records(
    conn: &mut AnyConnection,
    changes: &[Change],
) -> Result<Option<Vec<Result<Applied, StoreError>>>, StoreError> {
    let rows: Vec<(&AuditRecord, Option<&Basis>)> = changes
        .iter()
        .flat_map(|c| c.audit.iter().map(|e| (e, c.basis.as_ref())))
        .collect();
    // Nothing was written on failure: each change may be tried alone.
    let retry = |e: sqlx::Error| StoreError::Retryable(e.to_string());
    if conn.backend_name() == <sqlx::Postgres as sqlx::Database>::NAME {
        // The statement answers the versions it judged by.
        let Some(versions) = audit::insert_if_current(conn, &rows).await.map_err(retry)? else {
            return Ok(None);
        };
        return Ok(Some(
            changes
                .iter()
                .map(|c| match stale_at(&versions, c) {
                    Some(version) => Err(StoreError::Stale(version)),
                    None => Ok(Applied::Done),
                })
                .collect(),
        ));
    }
    // SQLite: the statement answers the events it wrote; a record's events share its basis,
    // so all of them were written, or none.
    let written = match audit::insert_if_current_sqlite(conn, &rows)
        .await
        .map_err(retry)?
    {
        None => return Ok(None),
        Some(audit::Written::All) => {
            return Ok(Some(changes.iter().map(|_| Ok(Applied::Done)).collect()))
        }
        Some(audit::Written::Only(written)) => written,
    };
    let is_written = |c: &Change| {
        c.audit
            .first()
            .is_none_or(|e| written.contains(e.id.as_str()))
    };
    // A stale record needs the version it missed (a version never goes back, so the one read
    // now is at least the one the statement judged by).
    let versions = current_versions(conn, changes).await?;
    Ok(Some(
        changes
            .iter()
            .map(|c| {
                if is_written(c) {
                    return Ok(Applied::Done);
                }
                let version = c
                    .basis
                    .as_ref()
                    .and_then(|b| versions.get(&b.workspace_id).copied())
                    .unwrap_or_default();
                Err(StoreError::Stale(version))
            })
            .collect(),
    ))
}

/// The current version of the workspace `change` was decided on, when it has moved since.
fn stale_at(versions: &HashMap<String, i64>, change: &Change) -> Option<i64> {
    change
        .basis
        .as_ref()
        .and_then(|b| versions.get(&b.workspace_id).filter(|v| **v != b.version))
        .copied()
}

/// A pure record: audit events only (a decision), no nonce, no operation.
fn is_record(change: &Change) -> bool {
    change.nonce.is_none() && matches!(change.op, Op::Nothing)
}

/// Changes whose only precondition is checked before their first write: audit-only and
/// nonce-only changes (decisions, verifications) and heartbeats.
fn checks_before_writing(change: &Change) -> bool {
    matches!(
        change.op,
        Op::Nothing | Op::Telemetry(TelemetryOp::RecordHeartbeats(_))
    )
}

/// Applies one change inside `tx` (a savepoint of the batch transaction).
async fn apply_change(
    tx: &mut Transaction<'_, Any>,
    change: &Change,
) -> Result<Applied, StoreError> {
    let applied = apply_unaudited(tx, change).await?;
    let events: Vec<&AuditRecord> = change.audit.iter().collect();
    insert_audits(tx, &events, Enclosed::InTransaction).await?;
    Ok(applied)
}

/// Applies one change's nonce claim and operation, not its audit events.
async fn apply_unaudited(
    tx: &mut Transaction<'_, Any>,
    change: &Change,
) -> Result<Applied, StoreError> {
    if let Some(claim) = &change.nonce {
        // Inserts the claim, or takes over an expired one not yet cleaned up; a live claim
        // leaves the row as it is and affects nothing. The claim also requires the agent to
        // be active at this moment, so a request checked before a revoke cannot commit after.
        static SQL: std::sync::LazyLock<String> =
            std::sync::LazyLock::new(|| nonce_claim_sql(["$1", "$2", "$3", "$4", "$5"], ""));
        let claimed = bind_nonce_claim(sqlx::query(&SQL), claim)
            .execute(&mut **tx)
            .await?
            .rows_affected();
        if claimed == 0 {
            if let Some(agent_id) = &claim.agent_id {
                let status: Option<String> = sqlx::query("SELECT status FROM agents WHERE id = $1")
                    .bind(agent_id)
                    .fetch_optional(&mut **tx)
                    .await?
                    .map(|row| row.try_get("status"))
                    .transpose()?;
                if status.as_deref() != Some("active") {
                    return Err(StoreError::AgentNotActive);
                }
            }
            return Err(StoreError::Replay);
        }
    }
    apply_op(tx, &change.op).await
}

/// The nonce claim's INSERT, one row changed when the claim is taken, with its values at the
/// placeholders `p` (scope, nonce, expiry, now, agent; bound by [`bind_nonce_claim`]).
/// With `also`, a condition the claim needs besides (none when empty).
pub(super) fn nonce_claim_sql(p: [&str; 5], also: &str) -> String {
    let [scope, nonce, expires_at, now, agent] = p;
    let also = and_also(also);
    format!(
        "INSERT INTO nonces (scope, nonce, expires_at) SELECT {scope}, {nonce}, {expires_at} \
         WHERE ({agent} = '' OR EXISTS (SELECT 1 FROM agents WHERE id = {agent} AND status = 'active')){also} \
         ON CONFLICT (scope, nonce) DO UPDATE SET expires_at = excluded.expires_at \
         WHERE nonces.expires_at < {now}"
    )
}

/// Binds a nonce claim's values in [`nonce_claim_sql`]'s order (the time is now).
pub(super) fn bind_nonce_claim<'q>(query: AnyQuery<'q>, claim: &'q NonceClaim) -> AnyQuery<'q> {
    query
        .bind(&claim.scope)
        .bind(&claim.nonce)
        .bind(claim.expires_at)
        .bind(crate::time::now_ms())
        .bind(claim.agent_id.as_deref().unwrap_or_default())
}

/// Applies `op` and, when it changes what decisions or authentications rest on, bumps its
/// workspace's version in the same transaction (see [`Op::supersedes`]).
async fn apply_op(tx: &mut Transaction<'_, Any>, op: &Op) -> Result<Applied, StoreError> {
    let applied = apply_area(tx, op).await?;
    if let Some(superseded) = op.supersedes() {
        bump_version(tx, superseded).await?;
    }
    Ok(applied)
}

async fn bump_version(
    tx: &mut Transaction<'_, Any>,
    superseded: Supersedes<'_>,
) -> Result<(), StoreError> {
    const UPSERT: &str = " ON CONFLICT (workspace_id) DO UPDATE \
        SET version = workspace_versions.version + 1, changed_at = excluded.changed_at";
    let (sql, id) = match superseded {
        Supersedes::Workspace(ws) => (
            ["INSERT INTO workspace_versions (workspace_id, version, changed_at) VALUES ($1, 1, $2)", UPSERT].concat(),
            ws,
        ),
        Supersedes::AgentsWorkspace(agent) => (
            ["INSERT INTO workspace_versions (workspace_id, version, changed_at) \
              SELECT workspace_id, 1, $2 FROM agents WHERE id = $1 AND workspace_id IS NOT NULL", UPSERT].concat(),
            agent,
        ),
    };
    sqlx::query(&sql)
        .bind(id)
        .bind(crate::time::now_ms())
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// The current versions of the workspaces the changes were decided on.
async fn current_versions(
    conn: &mut AnyConnection,
    changes: &[Change],
) -> Result<HashMap<String, i64>, StoreError> {
    let mut ids: Vec<&str> = changes
        .iter()
        .filter_map(|c| c.basis.as_ref().map(|b| b.workspace_id.as_str()))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    let mut sql = String::from(
        "SELECT workspace_id, version FROM workspace_versions WHERE workspace_id IN (",
    );
    for i in 1..=ids.len() {
        let _ = write!(sql, "{}${i}", if i == 1 { "" } else { ", " });
    }
    sql.push(')');
    let mut query = sqlx::query(&sql);
    for id in &ids {
        query = query.bind(*id);
    }
    let mut versions: HashMap<String, i64> = ids.iter().map(|id| ((*id).to_owned(), 0)).collect();
    for row in query.fetch_all(conn).await? {
        versions.insert(row.try_get("workspace_id")?, row.try_get("version")?);
    }
    Ok(versions)
}

/// Applies `op` by its area's SQL: each area matches every operation of its enum, so an
/// operation without SQL does not compile.
async fn apply_area(tx: &mut Transaction<'_, Any>, op: &Op) -> Result<Applied, StoreError> {
    match op {
        Op::Nothing => Ok(Applied::Done),
        Op::Agent(op) => agents::apply(tx, op).await,
        Op::Account(op) => accounts::apply(tx, op).await,
        Op::Policy(op) => policies::apply(tx, op).await,
        Op::Credential(op) => credentials::apply(tx, op).await,
        Op::Email(op) => email::apply(tx, op).await,
        Op::Telemetry(op) => telemetry::apply(tx, op).await,
        Op::Site(op) => site::apply(tx, op).await,
        Op::Vault(op) => vault::apply(tx, op).await,
        Op::Audit(op) => audit::apply(tx, op).await,
        Op::Mcp(op) => mcp::apply(tx, op).await,
        Op::Batch(ops) => {
            let mut last = Applied::Done;
            for op in ops {
                last = Box::pin(apply_op(tx, op)).await?;
            }
            Ok(last)
        }
    }
}

/// Applies changes (whose basis, if any, is current) in one transaction, each inside its own
/// savepoint (see [`Store::apply`](crate::store::Store::apply)).
async fn apply_fresh(
    conn: &mut AnyConnection,
    changes: &[&Change],
) -> Result<Vec<Result<Applied, StoreError>>, StoreError> {
    // A batch of pure records (decisions: no nonce, no operation) that fits one INSERT
    // needs no transaction: the statement is atomic on its own, so the `/v1/check` hot path
    // has no BEGIN and COMMIT round trips.
    if changes.iter().all(|c| is_record(c)) {
        let events: Vec<&AuditRecord> = changes.iter().flat_map(|c| &c.audit).collect();
        if events.len() <= AUDIT_ROWS_PER_INSERT {
            if !events.is_empty() {
                // Nothing was written on failure: each change may be tried alone.
                insert_audits(conn, &events, Enclosed::Alone)
                    .await
                    .map_err(|e| StoreError::Retryable(e.to_string()))?;
            }
            return Ok(changes.iter().map(|_| Ok(Applied::Done)).collect());
        }
    }
    let mut tx = conn.begin().await?;
    let mut results = Vec::with_capacity(changes.len());
    // A single change needs no savepoint: its failure rolls back the whole transaction.
    if let [change] = changes {
        let result = apply_change(&mut tx, change).await;
        return match result {
            Ok(applied) => {
                tx.commit().await?;
                Ok(vec![Ok(applied)])
            }
            Err(err @ StoreError::Retryable(_)) => {
                tx.rollback().await?;
                Err(err)
            }
            Err(err) => {
                tx.rollback().await?;
                Ok(vec![Err(err)])
            }
        };
    }
    // The audit events of such changes, written together before the next change that
    // needs a savepoint and at the end: one statement for many decisions.
    let mut pending: Vec<&AuditRecord> = Vec::new();
    for change in changes {
        if checks_before_writing(change) {
            // Its precondition (the nonce claim) fails before it writes anything, so it
            // needs no savepoint: two round trips fewer per change on the hot paths.
            match apply_unaudited(&mut tx, change).await {
                Ok(applied) => {
                    pending.extend(change.audit.iter());
                    results.push(Ok(applied));
                }
                Err(err @ (StoreError::Replay | StoreError::AgentNotActive)) => {
                    results.push(Err(err))
                }
                // Anything else may have left the transaction unusable (Postgres aborts it):
                // give the batch back to be applied change by change.
                Err(err) => {
                    tx.rollback().await?;
                    return Err(StoreError::Retryable(err.to_string()));
                }
            }
            continue;
        }
        if let Err(err) = insert_audits(&mut tx, &pending, Enclosed::InTransaction).await {
            tx.rollback().await?;
            return Err(StoreError::Retryable(err.to_string()));
        }
        pending.clear();
        let mut savepoint = tx.begin().await?;
        match apply_change(&mut savepoint, change).await {
            Ok(applied) => {
                savepoint.commit().await?;
                results.push(Ok(applied));
            }
            // A deadlock or serialization failure is the batch's, not the change's: roll
            // everything back and let the caller retry (nothing was committed).
            Err(err @ StoreError::Retryable(_)) => {
                drop(savepoint);
                tx.rollback().await?;
                return Err(err);
            }
            Err(err) => {
                savepoint.rollback().await?;
                results.push(Err(err));
            }
        }
    }
    if let Err(err) = insert_audits(&mut tx, &pending, Enclosed::InTransaction).await {
        tx.rollback().await?;
        return Err(StoreError::Retryable(err.to_string()));
    }
    // A failure here leaves the outcome unknown (the commit may have happened): it is
    // reported as a database error and never retried.
    tx.commit().await?;
    Ok(results)
}
