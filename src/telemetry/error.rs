//! What the telemetry use cases answer when they cannot do what was asked.

use crate::domain::refusal::use_case_error;
use crate::domain::{FieldError, Refusal};
use crate::identity::IdentityError;
use crate::policy::error::CheckError;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error(transparent)]
    Field(#[from] FieldError),
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// An ingest batch over the item limit.
    #[error("send at most {max} items per request")]
    TooManyItems { max: usize },
    #[error(transparent)]
    Identity(#[from] IdentityError),
    /// The agent lookup of the decision path.
    #[error(transparent)]
    Check(#[from] CheckError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Internal(String),
}

use_case_error!(TelemetryError);

pub type TelemetryResult<T> = Result<T, TelemetryError>;
