//! A request turned down for a reason the caller can act on, in the service's own terms: what
//! kind of refusal it is, a stable snake_case code and a one-line message. Use-case error enums
//! carry one for their one-off refusals; the HTTP layer alone turns the kind into a status.

use std::borrow::Cow;

/// What kind of refusal: the caller's input, who the caller is, what they may do, what exists,
/// the state it is in, or how often they ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// The request itself is wrong (beyond a single field: see `FieldError`).
    Invalid,
    /// The caller is not who a credential says, or sent none.
    Unauthenticated,
    /// The caller is known but may not do this.
    Forbidden,
    NotFound,
    /// The current state does not allow it (already used, already decided, taken).
    Conflict,
    /// It existed, and has expired for good.
    Gone,
    /// Well-formed, but its content cannot be accepted (a spec with errors, a reused key).
    Unacceptable,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    pub kind: RefusalKind,
    pub code: Cow<'static, str>,
    pub message: Cow<'static, str>,
}

impl Refusal {
    pub fn new(
        kind: RefusalKind,
        code: impl Into<Cow<'static, str>>,
        message: impl Into<Cow<'static, str>>,
    ) -> Self {
        Self {
            kind,
            code: code.into(),
            message: message.into(),
        }
    }

    pub fn invalid(code: &'static str, message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(RefusalKind::Invalid, code, message)
    }

    pub fn unauthenticated(code: &'static str, message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(RefusalKind::Unauthenticated, code, message)
    }

    pub fn forbidden(code: &'static str, message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(RefusalKind::Forbidden, code, message)
    }

    pub fn not_found(code: &'static str, message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(RefusalKind::NotFound, code, message)
    }

    pub fn conflict(code: &'static str, message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(RefusalKind::Conflict, code, message)
    }

    pub fn gone(code: &'static str, message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(RefusalKind::Gone, code, message)
    }

    pub fn unacceptable(code: &'static str, message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(RefusalKind::Unacceptable, code, message)
    }

    /// `unknown_agent`: agents of another workspace and unclaimed agents are answered exactly
    /// like agents that do not exist.
    pub fn unknown_agent() -> Self {
        Self::not_found("unknown_agent", "no such agent in this workspace")
    }

    /// `invalid_api_key`: the answer to a key that is malformed, unknown or revoked.
    pub fn invalid_api_key() -> Self {
        Self::unauthenticated("invalid_api_key", "the API key is not valid")
    }

    /// `agent_not_active`: only active agents may sign requests.
    pub fn agent_not_active(status: &str) -> Self {
        Self::forbidden(
            "agent_not_active",
            format!("the agent is `{status}`; only active agents may sign requests"),
        )
    }
}

/// The constructors every use-case error enum shares. The enum must have the variants
/// `Field(FieldError)`, `Refused(Refusal)` and `Internal(String)`.
#[macro_export]
macro_rules! use_case_error {
    ($error:ty) => {
        impl $error {
            /// A required field that is absent, null or empty.
            pub fn missing(field: impl Into<std::borrow::Cow<'static, str>>) -> Self {
                Self::Field($crate::FieldError::missing(field))
            }

            /// A field whose value has the wrong type, shape or value.
            pub fn invalid(
                field: impl Into<std::borrow::Cow<'static, str>>,
                why: impl std::fmt::Display,
            ) -> Self {
                Self::Field($crate::FieldError::invalid(field, why))
            }

            pub fn malformed(
                code: &'static str,
                message: impl Into<std::borrow::Cow<'static, str>>,
            ) -> Self {
                Self::Refused($crate::Refusal::invalid(code, message))
            }

            pub fn unauthenticated(
                code: &'static str,
                message: impl Into<std::borrow::Cow<'static, str>>,
            ) -> Self {
                Self::Refused($crate::Refusal::unauthenticated(code, message))
            }

            pub fn forbidden(
                code: &'static str,
                message: impl Into<std::borrow::Cow<'static, str>>,
            ) -> Self {
                Self::Refused($crate::Refusal::forbidden(code, message))
            }

            pub fn not_found(
                code: &'static str,
                message: impl Into<std::borrow::Cow<'static, str>>,
            ) -> Self {
                Self::Refused($crate::Refusal::not_found(code, message))
            }

            pub fn conflict(
                code: &'static str,
                message: impl Into<std::borrow::Cow<'static, str>>,
            ) -> Self {
                Self::Refused($crate::Refusal::conflict(code, message))
            }

            pub fn gone(
                code: &'static str,
                message: impl Into<std::borrow::Cow<'static, str>>,
            ) -> Self {
                Self::Refused($crate::Refusal::gone(code, message))
            }

            pub fn unknown_agent() -> Self {
                Self::Refused($crate::Refusal::unknown_agent())
            }

            pub fn agent_not_active(status: &str) -> Self {
                Self::Refused($crate::Refusal::agent_not_active(status))
            }

            /// A failure the caller cannot fix; `cause` is logged, never sent.
            pub fn internal(cause: impl std::fmt::Display) -> Self {
                Self::Internal(cause.to_string())
            }
        }
    };
}
pub use crate::use_case_error;

impl From<super::FieldError> for Refusal {
    fn from(err: super::FieldError) -> Self {
        Self::new(RefusalKind::Invalid, err.code(), err.to_string())
    }
}
