//! What the identity use cases answer when they cannot do what was asked.

use crate::domain::refusal::use_case_error;
use crate::domain::{FieldError, Refusal};
use crate::mail::MailError;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error(transparent)]
    Field(#[from] FieldError),
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// Too many attempts in the current window; it resets in `retry_after_secs`.
    #[error("too many requests; retry later")]
    RateLimited { retry_after_secs: i64 },
    /// The email provider failed to take a message (the cause is logged).
    #[error("the email provider failed; retry later")]
    MailProvider(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Internal(String),
}

use_case_error!(IdentityError);

impl From<MailError> for IdentityError {
    fn from(err: MailError) -> Self {
        match err {
            MailError::Invalid(message) => Self::malformed("invalid_email", message),
            MailError::Provider(cause) => Self::MailProvider(cause.to_string()),
        }
    }
}

pub type IdentityResult<T> = Result<T, IdentityError>;
