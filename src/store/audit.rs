//! The audit trail as stored. Records are written only as part of a [`super::Change`] (with
//! the state change they describe), so this area has reads and no operations of its own.

use async_trait::async_trait;

use super::{AuditQuery, AuditRecord, StoreError};

/// Reads of the audit trail.
#[async_trait]
pub trait AuditStore: Send + Sync {
    /// Newest first, as the query filters and pages them.
    async fn audit_events(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>, StoreError>;
}
