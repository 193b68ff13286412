//! Decisions and policies: checks, batches, sync and rollback, the OpenID AuthZEN API, and
//! approvals.

use super::*;

// ---- decisions and policies ---------------------------------------------------------------

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CheckRequest {
    #[schema(min_length = 1)]
    pub agent_id: String,
    /// Default `pol_default`.
    #[serde(default)]
    pub policy_id: Option<String>,
    /// E.g. `refund`, `send_email`.
    #[schema(
        max_length = 128,
        pattern = r#"^[^\x00-\x1f\x7f-\x9f"\\]*[^\x00-\x1f\x7f-\x9f"\\\t-\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\x00-\x1f\x7f-\x9f"\\]*$"#
    )]
    pub action: String,
    /// Action data (amount, currency, ...): an object.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub context: Option<Value>,
    /// For `send_email`: `{to, cc, bcc, subject, attachments: [{filename, content_type, size_bytes}]}`.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub email: Option<Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ChallengeInfo {
    /// `approval_link`.
    #[serde(rename = "type")]
    pub kind: String,
    pub url: String,
    pub expires_at: String,
    /// Seconds.
    pub expires_in: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DecisionResponse {
    pub ok: bool,
    /// `allow`, `challenge` or `deny`.
    pub decision: String,
    pub trace_id: String,
    /// Human reasons; empty on allow.
    pub reasons: Vec<String>,
    pub reason_codes: Vec<String>,
    pub policy_id: String,
    pub policy_hash: String,
    pub policy_version: i64,
    /// The spec elements whose rules decided.
    pub determining_policies: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub challenge_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub challenge: Option<ChallengeInfo>,
    /// What in the request the policy could not read as its rules expect (a context field the
    /// rules compare as a number sent as a string, say); present only when there is something
    /// to say. The decision is the policy's all the same, made as if that field were absent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<DecisionWarning>,
}

/// A warning about a check's request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DecisionWarning {
    /// A stable snake_case code: `field_type_mismatch` (a context field the policy reads as a
    /// number holds another JSON type).
    pub code: String,
    /// What is wrong and how to send it instead.
    pub message: String,
    /// The context field it is about.
    pub field: String,
}

impl From<acp_engine::evaluate::Warning> for DecisionWarning {
    fn from(w: acp_engine::evaluate::Warning) -> Self {
        Self {
            code: w.code,
            message: w.message,
            field: w.field,
        }
    }
}

/// Up to 100 checks decided together (`POST /v1/check/batch`).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CheckBatchRequest {
    /// Each as the body of `POST /v1/check`.
    #[schema(min_items = 1, max_items = 100)]
    pub checks: Vec<CheckRequest>,
}

/// The answers, one per check and in order.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CheckBatchResponse {
    pub ok: bool,
    pub results: Vec<CheckBatchResult>,
}

/// A check's answer: its decision, exactly as `POST /v1/check` answers it, or the error that
/// request would have been answered with, with its HTTP status.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum CheckBatchResult {
    Decision(Box<DecisionResponse>),
    Error(CheckBatchError),
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CheckBatchError {
    /// Always false.
    pub ok: bool,
    /// The status `POST /v1/check` would have answered.
    pub status: u16,
    /// Stable snake_case code, e.g. `unknown_agent`.
    pub error: String,
    pub message: String,
}

// ---- OpenID AuthZEN Authorization API 1.0 ------------------------------------------------

/// An AuthZEN subject: the agent (`id` is its `agt_` id; `type` is not interpreted).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuthzenSubject {
    #[serde(rename = "type")]
    pub kind: String,
    pub id: String,
    /// Ignored: acp knows the agent's facts itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub properties: Option<Value>,
}

/// An AuthZEN action: `name` is the checked action; `properties` join the check's context.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuthzenAction {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub properties: Option<Value>,
}

/// An AuthZEN resource: `type` and `id` join the check's context as `resource_type` and
/// `resource_id`, and `properties` as fields of their own.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuthzenResource {
    #[serde(rename = "type")]
    pub kind: String,
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub properties: Option<Value>,
}

/// `POST /access/v1/evaluation`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuthzenEvaluationRequest {
    pub subject: AuthzenSubject,
    pub action: AuthzenAction,
    pub resource: AuthzenResource,
    /// The check's context (an object; `email` carries a `send_email` check's email facts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub context: Option<Value>,
}

/// One evaluation of `POST /access/v1/evaluations`: what it leaves out comes from the request's
/// top level.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct AuthzenEvaluationItem {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<AuthzenSubject>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<AuthzenAction>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<AuthzenResource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub context: Option<Value>,
}

/// `POST /access/v1/evaluations`: defaults at the top level, up to 100 evaluations.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct AuthzenEvaluationsRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<AuthzenSubject>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<AuthzenAction>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<AuthzenResource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub context: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_items = 100)]
    pub evaluations: Option<Vec<AuthzenEvaluationItem>>,
    /// `{"evaluations_semantic": "execute_all" | "deny_on_first_deny" | "permit_on_first_permit"}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub options: Option<Value>,
}

/// An AuthZEN decision: `true` only for `allow`. A denial's `context` says why (`reason`,
/// `reason_codes`, `trace_id`); a challenge is a denial whose context carries `challenge_id`
/// and the approval link (`challenge`); a request that could not be decided is a denial whose
/// context carries `error: {status, code, message}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuthzenDecision {
    pub decision: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub context: Option<Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuthzenEvaluationsResponse {
    pub evaluations: Vec<AuthzenDecision>,
}

/// What `POST /access/v1/evaluations` answers: the list of decisions, or one decision when the
/// request has no evaluations (the single-evaluation form).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum AuthzenEvaluationsAnswer {
    Many(AuthzenEvaluationsResponse),
    One(AuthzenDecision),
}

/// `GET /.well-known/authzen-configuration`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuthzenConfiguration {
    pub policy_decision_point: String,
    pub access_evaluation_endpoint: String,
    pub access_evaluations_endpoint: String,
    pub search_subject_endpoint: String,
    pub search_action_endpoint: String,
    pub search_resource_endpoint: String,
}

/// Applies (or dry-runs) an earlier version's spec as a new version.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RollbackRequest {
    /// The version whose spec to apply again.
    #[serde(deserialize_with = "int::required")]
    #[schema(minimum = 1)]
    pub version: i64,
    #[serde(default)]
    pub dry_run: bool,
    /// Refuse (409 `sync_conflict`) unless the current hash is this.
    #[serde(default)]
    pub expected_policy_hash: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SyncRequest {
    /// Default `pol_default` (also when empty).
    #[serde(default)]
    #[schema(pattern = "^(|pol_[a-z0-9_-]{1,64})$")]
    pub policy_id: Option<String>,
    #[serde(default)]
    #[schema(max_length = 200)]
    pub policy_name: Option<String>,
    #[serde(default)]
    pub dry_run: bool,
    /// Refuse (409 `sync_conflict`) unless the current hash is this.
    #[serde(default)]
    pub expected_policy_hash: Option<String>,
    /// The policy spec (see docs/policy-spec.md).
    #[schema(value_type = Object)]
    pub spec: Value,
    /// Dry runs: how many of the workspace's newest recorded checks under this policy to
    /// replay into `diff.impact` (default 10,000; 0 skips the replay).
    #[serde(default, deserialize_with = "int::optional")]
    #[schema(minimum = 0, maximum = 100000)]
    pub impact_checks: Option<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SyncDiff {
    pub changed: bool,
    /// Unified diff of the compiled Cedar, current → desired.
    pub cedar_diff: String,
    /// Dry runs: unified diff of the two specs as `acp policy fmt` writes them, current →
    /// desired (empty when they read the same): the change in the spec's own words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_diff: Option<String>,
    /// Blocks, groups, bindings and memberships added, removed and changed.
    pub summary: Value,
    /// Dry runs: the workspace's recorded checks replayed against the current and the desired
    /// policy, and the decisions that would change (docs/policy-impact.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub impact: Option<Value>,
    /// Dry runs: the cells (group, action, condition) of the spec that become more or less
    /// permissive, each with an example request (docs/policy-impact.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub semantic: Option<Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SyncResponse {
    pub ok: bool,
    pub dry_run: bool,
    pub policy_id: String,
    pub policy_name: String,
    /// Null when the policy does not exist yet.
    pub current_policy_hash: Option<String>,
    pub desired_policy_hash: String,
    pub diff: SyncDiff,
    /// Apply only: whether a new version was created (false for an unchanged spec).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub applied: Option<bool>,
    /// Apply only: the policy's hash after the apply.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_hash: Option<String>,
    /// Apply only: the policy's version after the apply.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PolicySummary {
    pub policy_id: String,
    pub name: String,
    pub version: i64,
    pub policy_hash: String,
    pub updated_at: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PolicyListResponse {
    pub ok: bool,
    pub items: Vec<PolicySummary>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PolicyDetail {
    pub ok: bool,
    pub policy_id: String,
    pub name: String,
    pub version: i64,
    pub policy_hash: String,
    pub spec: Value,
    pub cedar: String,
    /// Who applied this version: `user:<id>` or `api_key:<id>`; `null` for the built-in default.
    pub author: Option<String>,
    /// The author as people read it: the person's email address or `API key <name>`.
    #[serde(default)]
    pub author_name: Option<String>,
    pub created_at: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PolicyVersionItem {
    pub version: i64,
    pub policy_hash: String,
    /// Who applied it: `user:<id>` or `api_key:<id>`.
    pub author: String,
    /// The author as people read it: the person's email address or `API key <name>`.
    #[serde(default)]
    pub author_name: Option<String>,
    pub created_at: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PolicyVersionList {
    pub ok: bool,
    pub items: Vec<PolicyVersionItem>,
}

// ---- approvals ----------------------------------------------------------------------------

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PolicyChallengeInfo {
    pub challenge_id: String,
    /// `pending`, `approved`, `denied` or `expired`.
    pub status: String,
    pub agent_id: String,
    pub action: String,
    pub policy_id: String,
    pub reasons: Vec<String>,
    pub reason_codes: Vec<String>,
    /// What was asked: `agent_name`; `values`, the context values the deciding rules read (e.g.
    /// `amount`, `currency`, `environment`); `recipients` and `attachments` when they read the
    /// email; `context_fields` (all field names) and the email's counts. Other values are not kept.
    pub summary: Value,
    pub trace_id: String,
    pub created_at: String,
    pub expires_at: String,
    pub decided_at: Option<String>,
    /// `user:<id>` when a logged-in user decided, else `approval_link`.
    pub decided_by: Option<String>,
    /// The reason the person who decided gave (at most 500 characters), if any.
    pub decision_reason: Option<String>,
    /// Who raised it: `backend` (a backend's check, mint or send, with an API key) or `agent`
    /// (the agent itself, in a request it signed).
    #[schema(pattern = "^(backend|agent)$")]
    pub raised_by: String,
    /// Who decided as people read it: the person's email address (`null` for the link alone).
    #[serde(default)]
    pub decided_by_name: Option<String>,
    /// Whether an approval was already used by a re-check.
    pub used: bool,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PolicyChallengeResponse {
    pub ok: bool,
    pub challenge: PolicyChallengeInfo,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ChallengeListParams {
    /// `pending`, `approved`, `denied` or `expired` (a pending challenge past its expiry).
    #[param(pattern = "^(|pending|approved|denied|expired)$")]
    pub status: Option<String>,
    pub agent_id: Option<String>,
    /// 1 to 200, default 50.
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<i64>,
    pub cursor: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PolicyChallengeList {
    pub ok: bool,
    /// Newest first.
    pub items: Vec<PolicyChallengeInfo>,
    pub next_cursor: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ApprovalDecisionRequest {
    /// `approve` or `deny`.
    #[schema(pattern = "^(approve|deny)$")]
    pub decision: String,
    /// Why, in the approver's words: kept in the decision's audit event.
    #[serde(default)]
    #[schema(max_length = 500)]
    pub reason: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ClaimInfo {
    pub agent: Agent,
    /// `pending`, `used` or `expired`.
    pub status: String,
    pub expires_at: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ClaimInfoResponse {
    pub ok: bool,
    pub claim: ClaimInfo,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ClaimDecisionRequest {
    /// `claim` or `reject`.
    #[schema(pattern = "^(claim|reject)$")]
    pub decision: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct WorkspaceSettings {
    pub ok: bool,
    pub workspace_id: String,
    /// Approval links need a logged-in member of the workspace, not just the link.
    pub require_member_approval: bool,
    /// Days audit events are kept; `null`: all are kept.
    pub audit_retention_days: Option<i64>,
    /// Days heartbeats are kept; `null`: all are kept.
    pub heartbeat_retention_days: Option<i64>,
}

#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
pub struct UpdateWorkspaceSettings {
    #[serde(default)]
    pub require_member_approval: Option<bool>,
    /// Days to keep audit events (1 to 36500); `null` keeps everything. Absent: unchanged.
    #[serde(default, deserialize_with = "present_int")]
    #[schema(value_type = Option<i64>, minimum = 1, maximum = 36500)]
    pub audit_retention_days: Option<Option<i64>>,
    /// Days to keep heartbeats (1 to 36500); `null` keeps everything. Absent: unchanged.
    #[serde(default, deserialize_with = "present_int")]
    #[schema(value_type = Option<i64>, minimum = 1, maximum = 36500)]
    pub heartbeat_retention_days: Option<Option<i64>>,
}

/// An integer field that is absent (`None`, by `default`), `null` (`Some(None)`) or a value
/// (an integral number, `5.0` too, as JSON Schema's `integer` allows).
pub(super) fn present_int<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<i64>>, D::Error> {
    int::optional(d).map(Some)
}
