//! The one HTTP error type: a stable snake_case code, an HTTP status and a human message,
//! answered in the envelope `{"error": code, "message": text, ...extras}`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};
use std::borrow::Cow;

use crate::store::StoreError;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: Cow<'static, str>,
    pub message: String,
    /// Extra top-level fields of the envelope, e.g. `retry_after`.
    pub extras: Vec<(String, Value)>,
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
        Self::bad_request(format!("missing_{field}"), format!("`{field}` is required"))
    }

    /// A field whose value has the wrong type or shape.
    pub fn invalid(field: &str, why: impl std::fmt::Display) -> Self {
        Self::bad_request(format!("invalid_{field}"), format!("`{field}` {why}"))
    }

    pub fn unknown_agent() -> Self {
        Self::not_found("unknown_agent", "no such agent in this workspace")
    }

    pub fn agent_not_active(status: &str) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "agent_not_active",
            format!("the agent is `{status}`; only active agents may sign requests"),
        )
    }

    /// A failure the caller cannot fix. The cause is logged (with the request id, by the
    /// trace span) and never sent.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "internal error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            "internal error",
        )
    }

    pub fn unavailable(cause: impl std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "service unavailable");
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
            "the service is shutting down or its database is unreachable; retry",
        )
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
            StoreError::AgentNotActive => ApiError::agent_not_active("inactive"),
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
        let retry_after = self
            .extras
            .iter()
            .find(|(k, _)| k == "retry_after")
            .and_then(|(_, v)| v.as_i64());
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
        if let Some(secs) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
        }
        response
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
