//! The service's own site: component status checks and contact submissions.

use async_trait::async_trait;

use super::{StoreError, Supersedes};

/// Reads of the status page.
#[async_trait]
pub trait SiteStore: Send + Sync {
    /// The latest check of each component.
    async fn latest_status_checks(&self) -> Result<Vec<StatusCheck>, StoreError>;
}

/// Changes to status checks and contact submissions.
#[derive(Debug, Clone)]
pub enum SiteOp {
    RecordStatusChecks(Vec<StatusCheck>),
    StoreContact(ContactSubmission),
}

impl SiteOp {
    /// See [`super::Op::supersedes`]: nothing here is read by decisions.
    pub fn supersedes(&self) -> Option<Supersedes<'_>> {
        match self {
            SiteOp::RecordStatusChecks(_) | SiteOp::StoreContact(_) => None,
        }
    }
}

// Records of this area, as the store keeps them (times in epoch milliseconds).

#[derive(Debug, Clone)]
pub struct StatusCheck {
    pub id: String,
    pub component: String,
    /// `ok`, `degraded` or `down`.
    pub status: String,
    pub detail: String,
    pub latency_ms: f64,
    pub checked_at: i64,
}

#[derive(Debug, Clone)]
pub struct ContactSubmission {
    pub id: String,
    pub name: String,
    pub email: String,
    pub message: String,
    pub created_at: i64,
}
