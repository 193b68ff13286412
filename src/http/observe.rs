//! What the server tells operators about each request: one access log line, the request
//! metrics ([`crate::observe`]), the W3C `traceparent` of the request, and `GET /metrics`.
//!
//! The middleware [`observe`] wraps every route. Before the handler runs it reads (or makes)
//! the request's trace context and opens a slot, task-local to the request, in which the
//! authentication code notes who called ([`note_principal`]) and the check handler the
//! decision's trace id ([`note_decision`]); after the handler it reads the slot, records the
//! metrics and writes the line, with the error code of an error answer (kept in the response's
//! extensions where the error was rendered). No credential is ever written: only the kind of principal.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tracing::Instrument;

use crate::api::ErrorBody;
use crate::context::SharedContext;
use crate::error::{ApiError, ErrorCode};
use crate::identity::accounts::{PAT_PREFIX, SESSION_COOKIE};
use crate::observe;

use super::headers::bearer_token;

/// The `tracing` target of the access log lines (`ACP_LOG=info,sqlx=warn,acp::access=off`
/// silences them).
pub const ACCESS_LOG: &str = "acp::access";

/// Who a request was authenticated as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrincipalKind {
    ApiKey,
    Session,
    Token,
    Agent,
}

impl PrincipalKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ApiKey => "api_key",
            Self::Session => "session",
            Self::Token => "token",
            Self::Agent => "agent",
        }
    }
}

/// What the handler's code learnt about the request, for the line written after it.
#[derive(Debug, Default)]
struct Noted {
    principal: Option<PrincipalKind>,
    workspace_id: Option<String>,
    decision_trace_id: Option<String>,
    /// The request presented an agent signature (its failures count as signature failures).
    signed: bool,
}

tokio::task_local! {
    static NOTES: Arc<Mutex<Noted>>;
}

fn with_notes(note: impl FnOnce(&mut Noted)) {
    // Outside a request (unit tests that call handlers directly) there is nothing to note.
    let _ = NOTES.try_with(|slot| note(&mut slot.lock().unwrap_or_else(PoisonError::into_inner)));
}

/// The request was authenticated as `kind`, acting in `workspace_id` when it has one.
pub fn note_principal(kind: PrincipalKind, workspace_id: Option<&str>) {
    with_notes(|n| {
        n.principal = Some(kind);
        if let Some(ws) = workspace_id {
            if n.workspace_id.as_deref() != Some(ws) {
                n.workspace_id = Some(ws.to_owned());
            }
        }
    });
}

/// The request carries an agent signature, about to be checked.
pub fn note_signed() {
    with_notes(|n| n.signed = true);
}

/// The request made (and recorded) the decision with this trace id.
pub fn note_decision(trace_id: &str) {
    with_notes(|n| n.decision_trace_id = Some(trace_id.to_owned()));
}

// ---- W3C trace context -------------------------------------------------------------------------

/// The trace context of a request (W3C Trace Context, `traceparent`): the caller's trace id and
/// span (the parent) when it sent a valid `traceparent`, else a new trace; and the span of this
/// server's handling of it, new for every request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceContext {
    pub trace_id: u128,
    pub parent_id: Option<u64>,
    pub span_id: u64,
    pub flags: u8,
}

impl TraceContext {
    /// Continues the trace of a valid `traceparent` value, or starts a new one.
    pub fn continue_or_start(traceparent: Option<&[u8]>) -> Self {
        match traceparent.and_then(parse_traceparent) {
            Some((trace_id, parent_id, flags)) => Self {
                trace_id,
                parent_id: Some(parent_id),
                span_id: nonzero_u64(),
                flags,
            },
            None => Self {
                trace_id: nonzero_u128(),
                parent_id: None,
                span_id: nonzero_u64(),
                flags: 0,
            },
        }
    }

    /// The `traceparent` of this server's span: the same trace, this request's span as parent.
    pub fn header(&self) -> String {
        format!(
            "00-{:032x}-{:016x}-{:02x}",
            self.trace_id, self.span_id, self.flags
        )
    }
}

fn nonzero_u128() -> u128 {
    loop {
        let id: u128 = rand::random();
        if id != 0 {
            return id;
        }
    }
}

fn nonzero_u64() -> u64 {
    loop {
        let id: u64 = rand::random();
        if id != 0 {
            return id;
        }
    }
}

/// Lowercase hex of exactly `text.len()` digits (the trace context allows no capitals).
fn lower_hex(text: &[u8]) -> Option<u128> {
    if text.is_empty()
        || text.len() > 32
        || !text
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    {
        return None;
    }
    let text = std::str::from_utf8(text).ok()?;
    u128::from_str_radix(text, 16).ok()
}

/// `version-traceid-parentid-flags` as the W3C Trace Context defines it: version `00` is
/// exactly 55 characters; a later version (not `ff`) may add fields after a `-`; ids are
/// lowercase hex and not all zero. Answers the trace id, the parent id and the flags.
pub fn parse_traceparent(value: &[u8]) -> Option<(u128, u64, u8)> {
    if value.len() < 55 || value[2] != b'-' || value[35] != b'-' || value[52] != b'-' {
        return None;
    }
    let version = lower_hex(&value[0..2])?;
    match version {
        0xff => return None,
        0 if value.len() != 55 => return None,
        _ if value.len() > 55 && value[55] != b'-' => return None,
        _ => {}
    }
    let trace_id = lower_hex(&value[3..35]).filter(|id| *id != 0)?;
    let parent_id = lower_hex(&value[36..52])
        .filter(|id| *id != 0)
        .and_then(|id| u64::try_from(id).ok())?;
    let flags = lower_hex(&value[53..55]).and_then(|f| u8::try_from(f).ok())?;
    Some((trace_id, parent_id, flags))
}

/// An id printed as the trace context writes it.
struct Hex<T>(T, usize);

impl<T: fmt::LowerHex> fmt::Display for Hex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:0width$x}", self.0, width = self.1)
    }
}

// ---- the middleware ----------------------------------------------------------------------------

/// A metrics label for the method: the standard ones by name, anything else `other` (a client
/// may send any token as a method).
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// The kind of credential a request presented (never its value), for refusals.
fn presented_credential(headers: &HeaderMap) -> &'static str {
    if headers.contains_key("x-service-signature") || headers.contains_key("x-service-agent-id") {
        return "agent";
    }
    if headers.contains_key("x-service-api-key") {
        return "api_key";
    }
    match bearer_token(headers) {
        Some(token) if token.starts_with(PAT_PREFIX) => "token",
        Some(token) if token.starts_with("svc_") => "api_key",
        Some(_) => "bearer",
        None if super::headers::cookie(headers, SESSION_COOKIE).is_some() => "session",
        None => "none",
    }
}

/// The error codes of a failed agent signature (README, "Signing requests as an agent").
const SIGNATURE_CODES: &[&str] = &[
    "missing_signature_headers",
    "timestamp_out_of_range",
    "invalid_nonce",
    "replay_detected",
    "bad_signature",
    "agent_header_mismatch",
    "unknown_agent",
    "agent_not_active",
];

/// The error code of an answer made from an [`ApiError`], when it is one the server fixed
/// (not built from input): the metrics' `reason` label.
fn static_code(response: &Response) -> &'static str {
    match response.extensions().get::<ErrorCode>().map(|c| &c.0) {
        Some(std::borrow::Cow::Borrowed(code)) => code,
        Some(_) => "other",
        None => "none",
    }
}

/// The stable code of an error answer (`{"error": CODE, ...}`), read from the response's
/// extensions where the error was rendered ([`ApiError`]'s `into_response`), so the body is
/// never parsed again. Borrowed: a successful answer carries no code and costs one failed
/// lookup in an empty extension map, nothing allocated.
fn error_code(response: &Response) -> Option<&str> {
    response
        .extensions()
        .get::<ErrorCode>()
        .map(|code| code.0.as_ref())
}

/// Wraps a request: its trace context and span, the slot for what the handler learns, then the
/// metrics, the access log line and the `traceparent` of the answer.
pub async fn observe(req: Request, next: Next) -> Response {
    let started = Instant::now();
    let trace = TraceContext::continue_or_start(
        req.headers().get("traceparent").map(HeaderValue::as_bytes),
    );
    let route = observe::intern(
        req.extensions()
            .get::<MatchedPath>()
            .map_or("unmatched", MatchedPath::as_str),
    );
    let method = req.method().clone();
    let credential = presented_credential(req.headers());
    // A clone of the header value shares its bytes.
    let request_id = req.headers().get("x-request-id").cloned();
    let request_id = request_id
        .as_ref()
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let span = tracing::info_span!(
        "request",
        method = %method,
        route,
        request_id = %request_id,
        trace_id = %Hex(trace.trace_id, 32),
    );
    let notes = Arc::new(Mutex::new(Noted::default()));
    let mut response = NOTES
        .scope(notes.clone(), next.run(req).instrument(span))
        .await;
    let took = started.elapsed();
    let status = response.status();
    let noted = std::mem::take(&mut *notes.lock().unwrap_or_else(PoisonError::into_inner));

    observe::http_request(
        method_label(&method),
        route,
        observe::intern(status.as_str()),
        took,
    );
    if status == StatusCode::UNAUTHORIZED {
        observe::auth_failure(credential, static_code(&response));
    }
    if noted.signed && status.is_client_error() {
        let code = static_code(&response);
        if SIGNATURE_CODES.contains(&code) {
            observe::signature_failure("request", code);
        }
    }
    if status == StatusCode::TOO_MANY_REQUESTS {
        observe::rate_limited(route);
    }

    tracing::info!(
        target: ACCESS_LOG,
        method = %method,
        route,
        status = status.as_u16(),
        latency_ms = took.as_micros() as f64 / 1000.0,
        request_id = %request_id,
        trace_id = %Hex(trace.trace_id, 32),
        span_id = %Hex(trace.span_id, 16),
        parent_span_id = trace.parent_id.map(|p| tracing::field::display(Hex(p, 16))),
        principal = noted.principal.map_or("anonymous", PrincipalKind::as_str),
        workspace_id = noted.workspace_id.as_deref(),
        decision_trace_id = noted.decision_trace_id.as_deref(),
        error_code = error_code(&response),
        "request"
    );
    if let Ok(value) = HeaderValue::from_str(&trace.header()) {
        response.headers_mut().insert("traceparent", value);
    }
    response
}

// ---- GET /metrics ------------------------------------------------------------------------------

/// The server's metrics, in the Prometheus text format.
///
/// Every metric is listed in `docs/observability.md`. Open unless a metrics token is configured
/// (`ACP_METRICS_TOKEN`); then it needs `Authorization: Bearer TOKEN`.
#[utoipa::path(get, path = "/metrics", tag = "operations", security((), ("metrics_token" = [])),
    responses(
        (status = 200, description = "Prometheus text exposition format (version 0.0.4)", content_type = "text/plain", body = String),
        (status = 401, description = "`missing_metrics_token`, `invalid_metrics_token` (only when a metrics token is configured)", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn metrics(
    State(ctx): State<SharedContext>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    if let Some(token) = &ctx.config.metrics_token {
        let presented = bearer_token(&headers).unwrap_or("");
        if presented.is_empty() {
            return Err(unauthorized(
                "missing_metrics_token",
                "send the metrics token as `Authorization: Bearer TOKEN`",
            ));
        }
        // Compared as digests, so neither the value nor its length shows in the timing.
        let presented = crate::secret::sha256_hex(presented.as_bytes());
        let expected = crate::secret::sha256_hex(token.expose().as_bytes());
        if !crate::secret::ct_eq(presented.as_bytes(), expected.as_bytes()) {
            return Err(unauthorized(
                "invalid_metrics_token",
                "the metrics token is not the configured one",
            ));
        }
    }
    ctx.store.report_pools();
    observe::process();
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        observe::render(),
    )
        .into_response())
}

fn unauthorized(code: &'static str, message: &'static str) -> ApiError {
    ApiError::unauthorized(code, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_is_continued_with_a_span_of_its_own() {
        let (trace, parent, flags) = parse_traceparent(VALID.as_bytes()).unwrap();
        assert_eq!(trace, 0x4bf92f3577b34da6a3ce929d0e0e4736);
        assert_eq!(parent, 0x00f067aa0ba902b7);
        assert_eq!(flags, 1);
        let ctx = TraceContext::continue_or_start(Some(VALID.as_bytes()));
        assert_eq!(ctx.parent_id, Some(parent));
        let header = ctx.header();
        assert!(
            header.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
            "{header}"
        );
        assert!(header.ends_with("-01"));
        assert_ne!(&header[36..52], "00f067aa0ba902b7");
        assert!(parse_traceparent(header.as_bytes()).is_some());
        // A later version may carry more fields after a dash.
        let later = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes";
        assert!(parse_traceparent(later.as_bytes()).is_some());
    }

    #[test]
    fn malformed_traceparents_are_replaced_by_a_new_trace() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
            "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(parse_traceparent(bad.as_bytes()).is_none(), "{bad}");
        }
        let fresh = TraceContext::continue_or_start(Some(b"garbage"));
        assert_eq!(fresh.parent_id, None);
        assert_ne!(fresh.trace_id, 0);
        assert!(parse_traceparent(fresh.header().as_bytes()).is_some());
    }

    #[test]
    fn credentials_are_named_by_kind_only() {
        let mut headers = HeaderMap::new();
        assert_eq!(presented_credential(&headers), "none");
        headers.insert(
            "authorization",
            HeaderValue::from_static("Bearer svc_pat_abc"),
        );
        assert_eq!(presented_credential(&headers), "token");
        headers.insert(
            "authorization",
            HeaderValue::from_static("Bearer svc_test_abc"),
        );
        assert_eq!(presented_credential(&headers), "api_key");
        headers.insert("x-service-signature", HeaderValue::from_static("sig"));
        assert_eq!(presented_credential(&headers), "agent");
        assert_eq!(method_label(&Method::from_bytes(b"BREW").unwrap()), "other");
    }
}
