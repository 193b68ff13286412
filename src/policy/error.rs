//! What the policy use cases, a check and a sync, answer when they cannot do what was asked.

use crate::domain::refusal::use_case_error;
use crate::domain::{FieldError, Refusal};
use crate::store::StoreError;

use super::spec::SpecError;

#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error(transparent)]
    Field(#[from] FieldError),
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// Other sends of the agent kept getting in first: the caller retries in a second.
    #[error("too many concurrent sends for this agent; retry shortly")]
    ConcurrentSends,
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Internal(String),
}

use_case_error!(CheckError);

pub type CheckResult<T> = Result<T, CheckError>;

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Field(#[from] FieldError),
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The spec does not compile; every error is named with its place.
    #[error("the spec has {} error(s)", .0.len())]
    InvalidSpec(Vec<SpecError>),
    /// The policy is not at the hash the caller expected, or another apply won the race.
    #[error("{why}")]
    Conflict {
        why: &'static str,
        current_policy_hash: Option<String>,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Internal(String),
}

use_case_error!(SyncError);

pub type SyncResult<T> = Result<T, SyncError>;
