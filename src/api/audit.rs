//! The audit trail: events, pages, exports; and the audit sinks that receive it.

use super::*;

// ---- audit --------------------------------------------------------------------------------

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuditEvent {
    pub event_id: String,
    pub created_at: String,
    pub event_type: String,
    pub agent_id: Option<String>,
    pub action: Option<String>,
    pub decision: Option<String>,
    pub policy_id: Option<String>,
    pub policy_hash: Option<String>,
    pub trace_id: Option<String>,
    pub reasons: Vec<String>,
    pub reason_codes: Vec<String>,
    /// Who caused it: `user:<user_id>`, `api_key:<key_id>`, `agent:<agent_id>`,
    /// `approval_link`, `cli`, `system`.
    pub actor: String,
    /// The actor as people read it: the person's email address, `API key <name>` (`API key
    /// …<last four>` for an unnamed key) or `agent <name>`; `null` for the others.
    #[serde(default)]
    pub actor_name: Option<String>,
    pub details: Value,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AuditListResponse {
    pub ok: bool,
    pub items: Vec<AuditEvent>,
    pub next_cursor: Option<String>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize, ToSchema, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditFilters {
    pub agent_id: Option<String>,
    pub action: Option<String>,
    pub decision: Option<String>,
    pub trace_id: Option<String>,
    pub event_type: Option<String>,
    /// Inclusive lower bound, epoch milliseconds.
    pub start_ms: Option<i64>,
    /// Exclusive upper bound, epoch milliseconds.
    pub end_ms: Option<i64>,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditPageParams {
    /// 1 to 200, default 50.
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<i64>,
    pub cursor: Option<String>,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditStreamParams {
    /// Resume after this event (the `id:` of a streamed event; the `Last-Event-ID` header
    /// does the same). Without it the stream starts with events committed from now on.
    pub cursor: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AuditExportRequest {
    /// `json` (default) or `csv`.
    #[serde(default)]
    #[schema(pattern = "^(json|csv)$")]
    pub format: Option<String>,
    #[serde(default)]
    pub filters: Option<AuditFilters>,
    /// 1 to 10,000, default 1,000.
    #[serde(default, deserialize_with = "int::optional")]
    #[schema(minimum = 1, maximum = 10000)]
    pub limit: Option<i64>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AuditExportResponse {
    pub ok: bool,
    pub items: Vec<AuditEvent>,
    pub count: usize,
}

// ---- audit sinks ----------------------------------------------------------------------------

#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
pub struct CreateAuditSinkRequest {
    /// A name for people (1 to 100 characters).
    #[schema(min_length = 1, max_length = 100)]
    pub name: String,
    /// Where batches are POSTed: an `https://` URL without user info or fragment.
    #[schema(max_length = 2048, pattern = "^https://")]
    pub url: String,
    /// `false` creates it paused. Default `true`.
    #[serde(default)]
    pub enabled: Option<bool>,
}

#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
pub struct UpdateAuditSinkRequest {
    #[serde(default)]
    #[schema(min_length = 1, max_length = 100)]
    pub name: Option<String>,
    #[serde(default)]
    #[schema(max_length = 2048, pattern = "^https://")]
    pub url: Option<String>,
    /// `false` pauses delivery (events wait, and are not pruned); `true` resumes it at once.
    #[serde(default)]
    pub enabled: Option<bool>,
}

/// An outbound audit sink and how its delivery goes.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuditSink {
    pub sink_id: String,
    pub name: String,
    pub url: String,
    /// `https_ndjson`: signed NDJSON batches POSTed to `url`.
    pub kind: String,
    pub enabled: bool,
    /// `paused`, `delivering` (caught up or on its way) or `retrying` (the last attempt failed).
    pub state: String,
    pub created_at: String,
    /// Who made it: `user:<id>` or `api_key:<id>`.
    pub created_by: String,
    /// Who made it as people read it: the person's email address or `API key <name>`.
    #[serde(default)]
    pub created_by_name: Option<String>,
    /// Events delivered since the sink was created.
    pub delivered_events: i64,
    pub last_delivered_at: Option<String>,
    pub last_attempt_at: Option<String>,
    /// Why the last attempt failed (status code or connection error; never the answer's body).
    pub last_error: Option<String>,
    pub consecutive_failures: i64,
    pub next_attempt_at: Option<String>,
    /// Events committed and not yet delivered, counted up to 100,000.
    pub lag_events: i64,
    /// Age in seconds of the oldest event not yet delivered (0 when caught up).
    pub lag_seconds: f64,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AuditSinkResponse {
    pub ok: bool,
    pub sink: AuditSink,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AuditSinkListResponse {
    pub ok: bool,
    pub items: Vec<AuditSink>,
}

/// A new sink, or a sink's new secret: the secret is shown this once.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AuditSinkSecretResponse {
    pub ok: bool,
    pub sink: AuditSink,
    /// The HMAC-SHA256 key of the batches' `X-Service-Signature` (docs/operations.md).
    pub secret: String,
}
