//! The service's own site: component status checks and contact submissions.

use async_trait::async_trait;

use super::{ContactSubmission, StatusCheck, StoreError, Supersedes};

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
