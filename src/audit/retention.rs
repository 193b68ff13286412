//! Retention: each workspace may keep its audit events and heartbeats for a number of days
//! (default: everything is kept). Every replica prunes periodically, in small batches with a
//! pause between them so that the hot path's writes never wait long behind a prune, and each
//! prune that removed something is audited (`retention.pruned`: what, how many, the cutoff).
//! Audit events that a sink of the workspace has not delivered yet are never pruned.

use std::time::Duration;

use serde_json::json;

use crate::audit::{state_change, Actor};
use crate::context::{Context, SharedContext};
use crate::store::{Change, Pruned, StoreError};
use crate::time::{iso, now_ms};

/// Rows deleted per statement.
pub const PRUNE_BATCH: i64 = 1_000;
/// The pause between two batches, for the writes of the hot path.
const PAUSE: Duration = Duration::from_millis(50);
const DAY_MS: i64 = 86_400_000;

/// Runs until the server closes.
pub async fn run(ctx: SharedContext) {
    let mut closing = ctx.closing.subscribe();
    let every = Duration::from_secs(ctx.config.retention_interval_secs);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = closing.changed() => {}
        }
        if *closing.borrow() {
            return;
        }
        if let Err(err) = prune_all(&ctx).await {
            tracing::warn!(error = %err, "retention: pruning failed; will retry");
        }
    }
}

/// One pass over every workspace that has a retention: answers the rows removed.
pub async fn prune_all(ctx: &Context) -> Result<u64, StoreError> {
    let mut total = 0;
    for (workspace_id, retention) in ctx.store.retention_settings().await? {
        for (what, days) in [
            (Pruned::AuditEvents, retention.audit_days),
            (Pruned::Heartbeats, retention.heartbeat_days),
        ] {
            let Some(days) = days else {
                continue;
            };
            if *ctx.closing.borrow() {
                return Ok(total);
            }
            total += prune(ctx, &workspace_id, what, days).await?;
        }
    }
    Ok(total)
}

/// Prunes one kind of rows of one workspace older than `days`, then audits the prune.
async fn prune(
    ctx: &Context,
    workspace_id: &str,
    what: Pruned,
    days: i64,
) -> Result<u64, StoreError> {
    let before = now_ms() - days.saturating_mul(DAY_MS);
    let mut deleted = 0;
    loop {
        let n = ctx
            .store
            .prune(what, workspace_id, before, PRUNE_BATCH)
            .await?;
        deleted += n;
        if n < PRUNE_BATCH as u64 || *ctx.closing.borrow() {
            break;
        }
        tokio::time::sleep(PAUSE).await;
    }
    if deleted > 0 {
        let table = match what {
            Pruned::AuditEvents => "audit_events",
            Pruned::Heartbeats => "heartbeats",
        };
        let event = state_change(
            "retention.pruned",
            "prune",
            Some(workspace_id),
            None,
            &Actor::System,
            json!({ "table": table, "deleted": deleted, "created_before": iso(before), "retention_days": days }),
        );
        ctx.writer.commit(Change::default().audited(event)).await?;
        crate::observe::retention_pruned(table, deleted);
        tracing::info!(workspace = %workspace_id, table, deleted, "retention: pruned");
    }
    Ok(deleted)
}
