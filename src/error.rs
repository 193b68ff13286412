//! The one HTTP error type: a stable snake_case code, an HTTP status and a human message,
//! answered in the envelope `{"error": code, "message": text, ...extras}`.
//!
//! Use cases return their own error enums and know no status codes; every `From<...> for
//! ApiError` is here, so this file is the one table from a failure to its status. A failure
//! the caller cannot fix keeps its cause in the error and is logged once, when the response
//! is made (inside the request's trace span, so with its request id), never when it is built.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use std::borrow::Cow;

use crate::api::DecisionResponse;
use crate::context::StreamsFull;
use crate::domain::access::{Denied, Need};
use crate::domain::{FieldError, Refusal, RefusalKind};
use crate::enforce::EnforceError;
use crate::identity::signing::{SignFailure, SignRejection, SignatureFault, SIGNATURE_LEN};
use crate::identity::IdentityError;
use crate::policy::error::{CheckError, SyncError};
use crate::site::SiteError;
use crate::store::StoreError;
use crate::telemetry::TelemetryError;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: Cow<'static, str>,
    pub message: String,
    /// Extra top-level fields of the envelope, e.g. `retry_after`.
    pub extras: Vec<(String, Value)>,
    /// What went wrong inside, for the log only (never sent).
    cause: Option<String>,
}

impl ApiError {
    pub fn new(
        status: StatusCode,
        code: impl Into<Cow<'static, str>>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            status,
            code: code.into(),
            message: message.into(),
            extras: Vec::new(),
            cause: None,
        }
    }

    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extras.push((key.to_owned(), value.into()));
        self
    }

    pub fn bad_request(code: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn unauthorized(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, code, message)
    }

    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }

    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, message)
    }

    /// A required field that is absent, null or empty.
    pub fn missing(field: &str) -> Self {
        FieldError::missing(field.to_owned()).into()
    }

    /// A field whose value has the wrong type or shape.
    pub fn invalid(field: &str, why: impl std::fmt::Display) -> Self {
        FieldError::invalid(field.to_owned(), why).into()
    }

    pub fn unknown_agent() -> Self {
        Refusal::unknown_agent().into()
    }

    /// A failure the caller cannot fix: answered `internal_error`; the cause is logged when
    /// the response is made, and never sent.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            "internal error",
        )
        .caused_by(cause)
    }

    pub fn unavailable(cause: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
            "the service is shutting down or its database is unreachable; retry",
        )
        .caused_by(cause)
    }

    /// Keeps `cause` for the log line the response writes.
    pub fn caused_by(mut self, cause: impl std::fmt::Display) -> Self {
        self.cause = Some(cause.to_string());
        self
    }

    /// Logs the cause kept for the log, if any: once per answer, by whatever writes the answer
    /// (the JSON envelope here, an HTML page in `http::pages`).
    pub fn log_cause(&self) {
        if let Some(cause) = &self.cause {
            if self.status.is_server_error() {
                tracing::error!(error = %cause, code = %self.code, "request failed");
            } else {
                tracing::warn!(error = %cause, code = %self.code, "request refused");
            }
        }
    }

    /// `rate_limited`, with the seconds until the window resets (also as `Retry-After`).
    pub fn rate_limited(retry_after_secs: i64) -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            "too many requests; retry later",
        )
        .with("retry_after", retry_after_secs)
    }
}

/// A request its credential may not make (`domain::access`): 401 `session_required` for an API
/// key on a person's matter, 403 `api_key_required` for a person on a machine's, 403
/// `insufficient_role`, or 403 `insufficient_scope` naming the scope in `required_scope`.
impl From<(Denied, Need)> for ApiError {
    fn from((denied, need): (Denied, Need)) -> Self {
        match denied {
            Denied::Kind(why) if need.key_scope().is_none() => {
                Self::new(StatusCode::UNAUTHORIZED, "session_required", why)
            }
            Denied::Kind(why) => Self::new(StatusCode::FORBIDDEN, "api_key_required", why),
            Denied::Role(role) => Self::new(
                StatusCode::FORBIDDEN,
                "insufficient_role",
                format!("the `{}` role cannot do this", role.as_str()),
            ),
            Denied::Scope(scope) => Self::new(
                StatusCode::FORBIDDEN,
                "insufficient_scope",
                format!("this needs the scope `{scope}`"),
            )
            .with("required_scope", scope),
        }
    }
}

/// A stream past its caps: 429 `too_many_streams`, with `limit`, `retry_after` and
/// `Retry-After` (streams end as their clients leave, so a later try may find room).
impl From<StreamsFull> for ApiError {
    fn from(full: StreamsFull) -> Self {
        let (message, limit) = match full {
            StreamsFull::Principal { limit } => (
                format!("this caller holds {limit} live streams already, the most it may; close one and retry"),
                limit,
            ),
            StreamsFull::Server { limit } => (
                format!("the server holds {limit} live streams already, the most it serves at once; retry later"),
                limit,
            ),
        };
        Self::new(StatusCode::TOO_MANY_REQUESTS, "too_many_streams", message)
            .with("limit", limit)
            .with("retry_after", STREAM_RETRY_AFTER_SECS)
    }
}

/// The wait suggested to a stream refused at its caps, seconds.
const STREAM_RETRY_AFTER_SECS: i64 = 10;

impl From<Refusal> for ApiError {
    fn from(err: Refusal) -> Self {
        let status = match err.kind {
            RefusalKind::Invalid => StatusCode::BAD_REQUEST,
            RefusalKind::Unauthenticated => StatusCode::UNAUTHORIZED,
            RefusalKind::Forbidden => StatusCode::FORBIDDEN,
            RefusalKind::NotFound => StatusCode::NOT_FOUND,
            RefusalKind::Conflict => StatusCode::CONFLICT,
            RefusalKind::Gone => StatusCode::GONE,
            RefusalKind::Unacceptable => StatusCode::UNPROCESSABLE_ENTITY,
        };
        Self::new(status, err.code, err.message)
    }
}

impl From<FieldError> for ApiError {
    fn from(err: FieldError) -> Self {
        Self::bad_request(err.code(), err.to_string())
    }
}

impl From<IdentityError> for ApiError {
    fn from(err: IdentityError) -> Self {
        match err {
            IdentityError::Field(e) => e.into(),
            IdentityError::Refused(e) => e.into(),
            IdentityError::RateLimited { retry_after_secs } => Self::rate_limited(retry_after_secs),
            IdentityError::MailProvider(cause) => Self::new(
                StatusCode::BAD_GATEWAY,
                "provider_unavailable",
                "the email provider failed; retry later",
            )
            .caused_by(cause),
            IdentityError::Store(e) => e.into(),
            IdentityError::Internal(cause) => Self::internal(cause),
        }
    }
}

impl From<CheckError> for ApiError {
    fn from(err: CheckError) -> Self {
        match err {
            CheckError::Field(e) => e.into(),
            CheckError::Refused(e) => e.into(),
            CheckError::ConcurrentSends => Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                err.to_string(),
            )
            .with("retry_after", 1),
            CheckError::Store(e) => e.into(),
            CheckError::Internal(cause) => Self::internal(cause),
        }
    }
}

/// A signed request refused: 401 with the code, 404 `unknown_agent`, 403 `agent_not_active`.
/// A `bad_signature` also says what the server saw: `canonical_string` (the string it checked
/// the signature against), and for a signature that is not even a signature, `hint`
/// (`signature_not_base64`, or `signature_wrong_length` with `signature_length` and
/// `expected_signature_length`).
impl From<SignRejection> for ApiError {
    fn from(rejection: SignRejection) -> Self {
        let failure = rejection.failure;
        let status = match failure {
            SignFailure::UnknownAgent => StatusCode::NOT_FOUND,
            SignFailure::AgentNotActive => StatusCode::FORBIDDEN,
            _ => StatusCode::UNAUTHORIZED,
        };
        let mut err = Self::new(status, failure.code(), failure.message());
        if let Some(canonical) = rejection.canonical_string {
            err = err.with("canonical_string", canonical);
        }
        if let SignFailure::BadSignature(fault) = failure {
            if let Some(hint) = fault.hint() {
                err = err.with("hint", hint);
            }
            if let SignatureFault::WrongLength(len) = fault {
                err = err
                    .with("signature_length", len)
                    .with("expected_signature_length", SIGNATURE_LEN);
            }
        }
        err
    }
}

/// A decision the caller is shown with its refusal: what was decided, why, and its trace.
fn with_decision(mut err: ApiError, decision: &DecisionResponse, reason_codes: bool) -> ApiError {
    err = err
        .with("decision", decision.decision.clone())
        .with("reasons", json!(decision.reasons));
    if reason_codes {
        err = err.with("reason_codes", json!(decision.reason_codes));
    }
    err.with("trace_id", decision.trace_id.clone())
}

fn challenge_of(decision: &DecisionResponse) -> Value {
    decision
        .challenge
        .as_ref()
        .and_then(|c| serde_json::to_value(c).ok())
        .unwrap_or(Value::Null)
}

impl From<EnforceError> for ApiError {
    fn from(err: EnforceError) -> Self {
        let message = err.to_string();
        let forbidden =
            |code: &'static str| Self::new(StatusCode::FORBIDDEN, code, message.clone());
        match err {
            EnforceError::Field(e) => e.into(),
            EnforceError::Refused(e) => e.into(),
            EnforceError::MintingPaused { reason } => {
                forbidden("minting_paused").with("reason", reason)
            }
            EnforceError::MintRaced => forbidden("minting_paused"),
            EnforceError::CredentialDenied(d) => {
                with_decision(forbidden("policy_denied"), &d, true)
            }
            EnforceError::CredentialChallenged(d) => {
                with_decision(forbidden("policy_challenge"), &d, false)
                    .with("challenge_id", d.challenge_id.clone())
                    .with("challenge", challenge_of(&d))
            }
            EnforceError::Denied(d) => with_decision(forbidden("policy_denied"), &d, true),
            EnforceError::Challenged(d) => with_decision(forbidden("policy_challenge"), &d, true)
                .with("challenge_id", d.challenge_id.clone())
                .with("challenge", challenge_of(&d)),
            EnforceError::Upstream { code, timeout, .. } => Self::new(
                if timeout {
                    StatusCode::GATEWAY_TIMEOUT
                } else {
                    StatusCode::BAD_GATEWAY
                },
                code,
                message,
            ),
            EnforceError::EmailBlocked(d) => with_decision(forbidden("policy_blocked"), &d, true)
                .with("challenge_id", d.challenge_id.clone())
                .with("challenge", challenge_of(&d)),
            EnforceError::EmailProviderFailed {
                provider,
                trace_id,
                cause,
            } => Self::new(StatusCode::BAD_GATEWAY, "provider_unavailable", message)
                .with("provider", provider)
                .with("trace_id", trace_id)
                .caused_by(cause),
            EnforceError::Signature(failure) => failure.into(),
            EnforceError::Check(e) => e.into(),
            EnforceError::Identity(e) => e.into(),
            EnforceError::Store(e) => e.into(),
            EnforceError::Internal(cause) => Self::internal(cause),
        }
    }
}

impl From<SiteError> for ApiError {
    fn from(err: SiteError) -> Self {
        match err {
            SiteError::Field(e) => e.into(),
            SiteError::Refused(e) => e.into(),
            SiteError::Identity(e) => e.into(),
            SiteError::Store(e) => e.into(),
            SiteError::Internal(cause) => Self::internal(cause),
        }
    }
}

impl From<SyncError> for ApiError {
    fn from(err: SyncError) -> Self {
        match err {
            SyncError::Field(e) => e.into(),
            SyncError::Refused(e) => e.into(),
            SyncError::InvalidSpec(ref errors) => {
                let errors = serde_json::to_value(errors).unwrap_or(Value::Null);
                Self::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "invalid_spec",
                    err.to_string(),
                )
                .with("errors", errors)
            }
            SyncError::Conflict {
                why,
                current_policy_hash,
            } => Self::conflict("sync_conflict", why)
                .with("current_policy_hash", current_policy_hash),
            SyncError::Store(e) => e.into(),
            SyncError::Internal(cause) => Self::internal(cause),
        }
    }
}

impl From<TelemetryError> for ApiError {
    fn from(err: TelemetryError) -> Self {
        match err {
            TelemetryError::Field(e) => e.into(),
            TelemetryError::Refused(e) => e.into(),
            TelemetryError::TooManyItems { .. } => {
                Self::bad_request("too_many_items", err.to_string())
            }
            TelemetryError::Identity(e) => e.into(),
            TelemetryError::Check(e) => e.into(),
            TelemetryError::Store(e) => e.into(),
            TelemetryError::Internal(cause) => Self::internal(cause),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::Replay => {
                ApiError::unauthorized("replay_detected", "this nonce was already used")
            }
            StoreError::UnknownAgent => ApiError::unknown_agent(),
            StoreError::Conflict(message) => ApiError::conflict("conflict", message),
            StoreError::Closed => ApiError::unavailable("the commit writer has stopped"),
            StoreError::AgentNotActive => Refusal::agent_not_active("inactive").into(),
            StoreError::InvalidInput(_) => ApiError::bad_request(
                "invalid_input",
                "a value holds characters that cannot be stored (such as NUL)",
            ),
            StoreError::Retryable(cause) => ApiError::unavailable(cause),
            // Answered only when the workspace kept changing through every attempt to decide.
            StoreError::Stale(_) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "state_changed",
                "the workspace changed while the request was decided; retry",
            ),
            StoreError::NotFound => ApiError::not_found("not_found", "no such item"),
            StoreError::TokenInvalid => ApiError::bad_request(
                "invalid_token",
                "the login link is invalid, already used or expired",
            ),
            other @ (StoreError::ChallengeUsed | StoreError::Database(_)) => {
                ApiError::internal(other)
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.log_cause();
        let retry_after = self
            .extras
            .iter()
            .find(|(k, _)| k == "retry_after")
            .and_then(|(_, v)| v.as_i64());
        let code = ErrorCode(self.code.clone());
        let mut body = Map::with_capacity(self.extras.len() + 2);
        body.insert("error".into(), Value::String(self.code.into_owned()));
        body.insert("message".into(), Value::String(self.message));
        body.extend(self.extras);
        let bytes = serde_json::to_vec(&Value::Object(body)).unwrap_or_default();
        let mut response = (self.status, bytes).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response.extensions_mut().insert(code);
        if let Some(secs) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
        }
        response
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

/// The error code of an answer made from an [`ApiError`], kept in the response's extensions
/// for the request's metrics (`http::observe`).
#[derive(Debug, Clone)]
pub struct ErrorCode(pub Cow<'static, str>);
