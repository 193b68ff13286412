//! SQL of the service's own site: component status checks and contact submissions.

use async_trait::async_trait;
use sqlx::{Any, Row, Transaction};

use super::SqlStore;
use crate::store::*;

/// Applies a site operation inside `tx`.
pub(super) async fn apply(
    tx: &mut Transaction<'_, Any>,
    op: &SiteOp,
) -> Result<Applied, StoreError> {
    match op {
        SiteOp::RecordStatusChecks(checks) => {
            for c in checks {
                sqlx::query(
                    "INSERT INTO status_checks (id, component, status, detail, latency_ms, checked_at) \
                     VALUES ($1, $2, $3, $4, $5, $6)",
                )
                .bind(&c.id)
                .bind(&c.component)
                .bind(&c.status)
                .bind(&c.detail)
                .bind(c.latency_ms)
                .bind(c.checked_at)
                .execute(&mut **tx)
                .await?;
            }
            Ok(Applied::Done)
        }
        SiteOp::StoreContact(c) => {
            sqlx::query("INSERT INTO contact_submissions (id, name, email, message, created_at) VALUES ($1, $2, $3, $4, $5)")
                .bind(&c.id)
                .bind(&c.name)
                .bind(&c.email)
                .bind(&c.message)
                .bind(c.created_at)
                .execute(&mut **tx)
                .await?;
            Ok(Applied::Done)
        }
    }
}

#[async_trait]
impl SiteStore for SqlStore {
    #[tracing::instrument(level = "debug", skip_all)]
    async fn latest_status_checks(&self) -> Result<Vec<StatusCheck>, StoreError> {
        let rows = sqlx::query(
            "SELECT c.id, c.component, c.status, c.detail, c.latency_ms, c.checked_at FROM status_checks c \
             WHERE c.id = (SELECT l.id FROM status_checks l WHERE l.component = c.component \
                           ORDER BY l.checked_at DESC, l.id DESC LIMIT 1) \
             ORDER BY c.component",
        )
        .fetch_all(&self.read)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(StatusCheck {
                    id: row.try_get("id")?,
                    component: row.try_get("component")?,
                    status: row.try_get("status")?,
                    detail: row.try_get("detail")?,
                    latency_ms: row.try_get("latency_ms")?,
                    checked_at: row.try_get("checked_at")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(StoreError::from)
    }
}
