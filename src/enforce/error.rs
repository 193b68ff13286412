//! What the enforcement use cases (approvals, credentials, email) answer when they cannot do
//! what was asked.

use crate::api::DecisionResponse;
use crate::domain::refusal::use_case_error;
use crate::domain::{FieldError, Refusal};
use crate::identity::signing::SignRejection;
use crate::identity::IdentityError;
use crate::policy::error::CheckError;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum EnforceError {
    #[error(transparent)]
    Field(#[from] FieldError),
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The workspace's kill switch pauses minting.
    #[error("minting is paused for this workspace")]
    MintingPaused { reason: Option<String> },
    /// The switch was thrown, or the agent stopped being active, between decision and commit.
    #[error("minting was paused, or the agent suspended or revoked, while this mint was checked")]
    MintRaced,
    /// A credential the policy denies; the decision is shown to the caller.
    #[error("the policy does not allow this credential")]
    CredentialDenied(Box<DecisionResponse>),
    /// A credential the policy wants a human to approve first.
    #[error("minting needs a human's approval")]
    CredentialChallenged(Box<DecisionResponse>),
    /// A vault action the policy denies; the decision is shown to the caller.
    #[error("the policy does not allow this")]
    Denied(Box<DecisionResponse>),
    /// A vault action the policy wants a human to approve first.
    #[error("this needs a human's approval first")]
    Challenged(Box<DecisionResponse>),
    /// The proxy's upstream could not be reached (`upstream_unavailable`, 502), answered too
    /// much (`upstream_response_too_large`, 502) or too late (`upstream_timeout`, 504).
    #[error("{message}")]
    Upstream {
        code: &'static str,
        message: String,
        timeout: bool,
    },
    /// An email the policy does not allow (deny or challenge); nothing was sent.
    #[error("the policy does not allow this email; nothing was sent")]
    EmailBlocked(Box<DecisionResponse>),
    /// The provider failed or timed out; the email was not sent. `cause` is logged only.
    #[error("the email provider failed or timed out; the email was not sent")]
    EmailProviderFailed {
        provider: String,
        trace_id: String,
        cause: String,
    },
    /// The agent's signature in a token exchange does not verify.
    #[error("{}", .0.failure.message())]
    Signature(SignRejection),
    #[error(transparent)]
    Check(#[from] CheckError),
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Internal(String),
}

use_case_error!(EnforceError);

pub type EnforceResult<T> = Result<T, EnforceError>;
