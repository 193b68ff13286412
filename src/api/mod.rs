//! Wire types: the JSON bodies of the HTTP interface, shared by the server, the CLI and the
//! OpenAPI document. Serde and schema derives only; no behaviour.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

/// The error envelope of every non-2xx answer.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// Stable snake_case code, e.g. `unknown_agent`.
    pub error: String,
    /// Human-readable explanation.
    pub message: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct HealthResponse {
    pub ok: bool,
    /// `alive` or `ready`.
    pub status: String,
}

/// Integers in JSON bodies: JSON Schema's `integer` is any number without a fractional part, so
/// `5.0` reads as `5`, as the OpenAPI document promises; `5.5` and text are refused.
pub mod int {
    use serde::de::{Deserializer, Error, Visitor};
    use std::fmt;

    struct Int;

    impl Visitor<'_> for Int {
        type Value = i64;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an integer")
        }

        fn visit_i64<E: Error>(self, v: i64) -> Result<i64, E> {
            Ok(v)
        }

        fn visit_u64<E: Error>(self, v: u64) -> Result<i64, E> {
            i64::try_from(v).map_err(|_| E::custom("integer out of range"))
        }

        fn visit_f64<E: Error>(self, v: f64) -> Result<i64, E> {
            // An integral f64 is an exact integer, and every one strictly between -2^63 and 2^63
            // is an i64. Not -2^63 itself: an integer literal below i64's range reaches here
            // as a float rounded to it.
            const TWO_63: f64 = 9_223_372_036_854_775_808.0;
            if v.fract() == 0.0 && v > -TWO_63 && v < TWO_63 {
                #[allow(
                    clippy::cast_possible_truncation,
                    reason = "a whole number strictly inside the i64 range"
                )]
                Ok(v as i64)
            } else {
                Err(E::invalid_type(serde::de::Unexpected::Float(v), &self))
            }
        }
    }

    pub fn required<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        d.deserialize_any(Int)
    }

    pub fn optional<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
        struct Opt;
        impl<'de> Visitor<'de> for Opt {
            type Value = Option<i64>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an integer or null")
            }

            fn visit_none<E: Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }

            fn visit_unit<E: Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }

            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                required(d).map(Some)
            }
        }
        d.deserialize_option(Opt)
    }

    #[cfg(test)]
    mod tests {
        #[derive(serde::Deserialize)]
        struct T {
            #[serde(deserialize_with = "super::required")]
            a: i64,
            #[serde(default, deserialize_with = "super::optional")]
            b: Option<i64>,
        }

        fn read(text: &str) -> Option<(i64, Option<i64>)> {
            serde_json::from_str::<T>(text).ok().map(|t| (t.a, t.b))
        }

        #[test]
        fn integral_numbers_read_as_integers_and_nothing_else_does() {
            assert_eq!(read(r#"{"a": 5}"#), Some((5, None)));
            assert_eq!(read(r#"{"a": -5.0, "b": 2.0}"#), Some((-5, Some(2))));
            assert_eq!(read(r#"{"a": 1, "b": null}"#), Some((1, None)));
            assert_eq!(read(r#"{"a": 5.5}"#), None);
            assert_eq!(read(r#"{"a": "5"}"#), None);
            assert_eq!(read(r#"{"a": 1e300}"#), None);
            assert_eq!(
                read(r#"{"a": 9007199254740991.0}"#),
                Some((9_007_199_254_740_991, None))
            );
            assert_eq!(read(r#"{"a": 9223372036854775808.0}"#), None);
            assert_eq!(read(r#"{"a": -9223372036854775809}"#), None);
            assert_eq!(read(r#"{"a": 18446744073709551615}"#), None);
            assert_eq!(read(r#"{"a": 1, "b": "2"}"#), None);
        }
    }
}

// ---- agents -------------------------------------------------------------------------------

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RegisterRequest {
    #[schema(
        max_length = 200,
        pattern = r"^[^\x00]*[^\x00\t-\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\x00]*$"
    )]
    pub name: String,
    /// Base64 Ed25519 public key: the raw 32 bytes, or SPKI DER.
    #[schema(
        pattern = r"^[^\x00]*[^\x00\t-\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\x00]*$"
    )]
    pub public_key: String,
    /// `ed25519` (the default and only accepted value).
    #[serde(default)]
    #[schema(pattern = "^ed25519$")]
    pub key_type: Option<String>,
    /// Free-form JSON object.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Value>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RegisterResponse {
    pub ok: bool,
    pub agent_id: String,
    pub challenge_id: String,
    /// Base64 of 32 random bytes; sign the decoded bytes.
    pub challenge: String,
    pub expires_at: String,
    pub status: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AttestRequest {
    #[schema(
        pattern = r"^[^\x00]*[^\x00\t-\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\x00]*$"
    )]
    pub agent_id: String,
    #[schema(
        pattern = r"^[^\x00]*[^\x00\t-\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\x00]*$"
    )]
    pub challenge_id: String,
    /// Base64 of the 64-byte Ed25519 signature over the decoded challenge bytes.
    #[schema(
        pattern = r"^[^\x00]*[^\x00\t-\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\x00]*$"
    )]
    pub signature: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AttestResponse {
    pub ok: bool,
    pub agent_id: String,
    pub status: String,
    pub attested_at: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ClaimCodeResponse {
    pub ok: bool,
    pub agent_id: String,
    /// Single-use code a workspace admin redeems to claim the agent.
    pub claim_code: String,
    pub claim_url: String,
    pub expires_at: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Agent {
    pub agent_id: String,
    pub name: String,
    pub public_key: String,
    pub key_type: String,
    pub metadata: Value,
    /// `pending`, `active`, `suspended` or `revoked`.
    pub status: String,
    pub workspace_id: Option<String>,
    /// `attested` once the agent proved its key, else `unverified`.
    pub verification_tier: String,
    pub risk_tier: String,
    pub created_at: String,
    pub updated_at: String,
    pub attested_at: Option<String>,
    pub last_seen_at: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AgentResponse {
    pub ok: bool,
    pub agent: Agent,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AgentListResponse {
    pub ok: bool,
    pub items: Vec<Agent>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
pub struct AgentStatusRequest {
    /// Why; recorded in the audit event.
    #[serde(default)]
    #[schema(max_length = 500)]
    pub reason: Option<String>,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AgentListParams {
    /// `pending`, `active`, `suspended` or `revoked`.
    #[param(pattern = "^(|pending|active|suspended|revoked)$")]
    pub status: Option<String>,
    /// Exact agent name.
    pub name: Option<String>,
    /// An agent id, or part of a name (case-insensitive for ASCII letters), as the console's
    /// "Name or id" filter; at most 200 characters.
    #[param(max_length = 200)]
    pub q: Option<String>,
    /// `low`, `medium` or `high`.
    #[param(pattern = "^(|low|medium|high)$")]
    pub risk_tier: Option<String>,
    /// Agents with an inventory item whose labels hold this (as `GET /v1/workspace/agents?label=`).
    pub label: Option<String>,
    /// Members of this group of the workspace's default policy (explicit or by selector); a
    /// group the policy lacks has none.
    pub group: Option<String>,
    /// Last heartbeat: `hour` (in the last hour), `day` (in the last day), `stale` (seen, not in
    /// the last day) or `never`.
    #[param(pattern = "^(|hour|day|stale|never)$")]
    pub seen: Option<String>,
    /// 1 to 200, default 50.
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<i64>,
    pub cursor: Option<String>,
}

// ---- verify -------------------------------------------------------------------------------

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct VerifyRequest {
    #[schema(min_length = 1)]
    pub agent_id: String,
    /// Uppercase HTTP method.
    #[schema(pattern = "^[A-Z]{1,16}$")]
    pub method: String,
    /// Path only, exactly as received.
    #[schema(max_length = 4096, pattern = r"^/[^\x00]*$")]
    pub path: String,
    /// Unix epoch milliseconds.
    #[serde(deserialize_with = "int::required")]
    pub timestamp_ms: i64,
    #[schema(min_length = 1)]
    pub nonce: String,
    /// Lowercase hex SHA-256 of the raw body bytes.
    #[schema(pattern = "^[0-9a-f]{64}$")]
    pub body_sha256: String,
    #[schema(min_length = 1)]
    pub signature_b64: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct VerifyResponse {
    pub ok: bool,
    pub valid: bool,
    pub agent_id: String,
    pub verified_at: String,
    /// Why `valid` is false: `timestamp_out_of_range`, `invalid_nonce`, `unknown_agent`,
    /// `bad_signature`, `agent_not_active` or `replay_detected`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `attested` or `unverified`.
    pub verification_tier: String,
    /// `low`, `medium` or `high`.
    pub risk_tier: String,
    pub revoked: bool,
    /// With `bad_signature`: the canonical string the server built from the request's parts
    /// (method, path, timestamp, nonce, body hash) and checked the signature against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canonical_string: Option<String>,
    /// With `bad_signature`, when the signature is not one at all: `signature_not_base64`, or
    /// `signature_wrong_length` (with `signature_length` and `expected_signature_length`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// With `signature_wrong_length`: the bytes the signature decodes to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature_length: Option<usize>,
    /// With `signature_wrong_length`: 64, an Ed25519 signature's bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_signature_length: Option<usize>,
}

// ---- telemetry ----------------------------------------------------------------------------

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct HeartbeatRequest {
    #[schema(min_length = 1)]
    pub agent_id: String,
    /// Short status string: `ok`, `degraded`, `error`, ...
    #[schema(min_length = 1, max_length = 64, pattern = r"^[^\x00-\x1f\x7f-\x9f]*$")]
    pub status: String,
    #[schema(minimum = 0)]
    pub latency_ms: f64,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct HeartbeatResponse {
    pub ok: bool,
    pub agent_id: String,
    pub status: String,
    pub recorded_at: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct IngestRequest {
    /// Up to 1,000 items `{agent_id, status, latency_ms, observed_at?}`; `observed_at` is
    /// ISO 8601 or epoch milliseconds. Each item is checked on its own.
    #[schema(max_items = 1000)]
    pub items: Vec<Value>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct IngestRejection {
    pub index: usize,
    pub error: String,
    pub message: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct IngestResponse {
    pub ok: bool,
    pub accepted: usize,
    pub rejected: Vec<IngestRejection>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Heartbeat {
    pub agent_id: String,
    pub status: String,
    pub latency_ms: f64,
    pub observed_at: String,
    pub created_at: String,
    /// `signed` or `ingest`.
    pub source: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RecentHeartbeatsResponse {
    pub ok: bool,
    pub items: Vec<Heartbeat>,
    pub count: usize,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RecentHeartbeatsParams {
    pub agent_id: Option<String>,
    /// 1 to 200, default 20.
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<i64>,
}

// ---- inventory ----------------------------------------------------------------------------

/// Inventory labels, for the OpenAPI document: a list of strings (the documented form), or an
/// object of string values.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum InventoryLabels {
    List(Vec<String>),
    Map(std::collections::HashMap<String, String>),
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct InventoryUpsertRequest {
    /// Your system's key for the agent (1 to 200 characters).
    #[schema(
        max_length = 200,
        pattern = r"^[^\x00]*[^\x00\t-\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\x00]*$"
    )]
    pub external_agent_key: String,
    #[schema(min_length = 1)]
    pub agent_id: String,
    #[serde(default)]
    #[schema(max_length = 200)]
    pub display_name: Option<String>,
    /// A list of strings, e.g. `["payments"]` (the documented form); an object of string
    /// values is accepted too.
    #[serde(default)]
    #[schema(value_type = Option<InventoryLabels>)]
    pub labels: Option<Value>,
    #[serde(default)]
    #[schema(max_length = 200)]
    pub environment: Option<String>,
    #[serde(default)]
    #[schema(max_length = 200)]
    pub source: Option<String>,
    /// Default `active`.
    #[serde(default)]
    #[schema(max_length = 200)]
    pub status: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct InventoryItem {
    pub external_agent_key: String,
    pub agent_id: String,
    pub display_name: Option<String>,
    /// As sent: a list of strings (`[]` when none), or an object of string values.
    pub labels: Value,
    pub environment: Option<String>,
    pub source: Option<String>,
    pub status: String,
    pub created_at: String,
    pub updated_at: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct InventoryUpsertResponse {
    pub ok: bool,
    pub created: bool,
    pub changed: bool,
    pub item: InventoryItem,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct InventoryListResponse {
    pub ok: bool,
    pub items: Vec<InventoryItem>,
    /// Items on this page.
    pub count: usize,
    /// The next page's `cursor`; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct InventoryListParams {
    pub environment: Option<String>,
    pub status: Option<String>,
    /// Agents whose labels list contains this label; for object labels, `key` or `key=value`.
    pub label: Option<String>,
    /// Items a page, 1 to 500 (default 200), in the order of `external_agent_key`.
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

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

// ---- dashboard identity -------------------------------------------------------------------

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct OkResponse {
    pub ok: bool,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct StartLoginRequest {
    #[schema(format = Email, max_length = 254)]
    pub email: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct StartLoginResponse {
    pub ok: bool,
    pub message: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct VerifyLoginRequest {
    #[schema(
        pattern = r"^[^\x00]*[^\x00\t-\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\x00]*$"
    )]
    pub token: String,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct VerifyLoginParams {
    pub token: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct UserInfo {
    pub user_id: String,
    pub email: String,
    pub created_at: String,
    pub last_login_at: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct VerifyLoginResponse {
    pub ok: bool,
    pub user: UserInfo,
    pub active_workspace_id: Option<String>,
    /// Send as `X-CSRF-Token` on state-changing cookie requests whose body is not JSON.
    pub csrf_token: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct WorkspaceItem {
    pub workspace_id: String,
    pub name: String,
    /// `owner`, `admin`, `approver` or `member`.
    pub role: String,
    pub created_at: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MeResponse {
    pub ok: bool,
    pub user: UserInfo,
    pub active_workspace_id: Option<String>,
    pub workspaces: Vec<WorkspaceItem>,
    /// `session` (cookie) or `token` (personal access token).
    pub auth: String,
    /// For cookie sessions: the value to send as `X-CSRF-Token` with bodies that are not JSON.
    pub csrf_token: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct WorkspaceListResponse {
    pub ok: bool,
    pub items: Vec<WorkspaceItem>,
    pub active_workspace_id: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CreateWorkspaceRequest {
    #[schema(
        max_length = 200,
        pattern = r"^[^\x00]*[^\x00\t-\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\x00]*$"
    )]
    pub name: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct WorkspaceResponse {
    pub ok: bool,
    pub workspace: WorkspaceItem,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SelectWorkspaceRequest {
    #[schema(
        pattern = r"^[^\x00]*[^\x00\t-\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\x00]*$"
    )]
    pub workspace_id: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SelectWorkspaceResponse {
    pub ok: bool,
    pub active_workspace_id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ApiKeyInfo {
    pub key_id: String,
    pub name: Option<String>,
    /// `test` or `live`.
    pub mode: String,
    pub prefix: String,
    pub last_four: String,
    pub created_at: String,
    /// The user id of the person who made it; `null` for keys made on the server's machine.
    pub created_by: Option<String>,
    /// Who made it as people read it: the person's email address.
    #[serde(default)]
    pub created_by_name: Option<String>,
    pub last_used_at: Option<String>,
    pub revoked_at: Option<String>,
    /// The scopes that narrow the key; empty for none (the key does all a key may).
    pub scopes: Vec<String>,
    /// The key's own rate, requests and decisions per second per replica; `null` for the
    /// server's default.
    pub rate_limit: Option<i64>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ApiKeyListResponse {
    pub ok: bool,
    pub items: Vec<ApiKeyInfo>,
}

#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
pub struct CreateApiKeyRequest {
    #[serde(default)]
    #[schema(max_length = 100)]
    pub name: Option<String>,
    /// A `svc_live_` key instead of `svc_test_`.
    #[serde(default)]
    pub live: Option<bool>,
    /// Narrow the key to these scopes (`check`, `verify`, `email`, `credentials`, `telemetry`,
    /// `agents:read`, `agents:write`, `audit:read`, `kill-switch`, `policies:read`,
    /// `challenges:read`); none or empty for a key that does all a key may.
    #[serde(default)]
    #[schema(max_items = 16, value_type = Option<Vec<KeyScope>>)]
    pub scopes: Option<Vec<String>>,
    /// The key's own rate: requests and decisions per second on each replica (a batch counts
    /// each decision); beyond it, 429 `rate_limited`. Default: the server's
    /// `api_key_rate_limit`.
    #[serde(default, deserialize_with = "int::optional")]
    #[schema(minimum = 1, maximum = 1_000_000)]
    pub rate_limit: Option<i64>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CreateApiKeyResponse {
    pub ok: bool,
    pub api_key: ApiKeyInfo,
    /// The key itself, shown this once.
    pub key: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TokenInfo {
    pub token_id: String,
    pub name: String,
    pub last_four: String,
    pub created_at: String,
    pub expires_at: String,
    pub last_used_at: Option<String>,
    pub revoked_at: Option<String>,
    /// The scopes that narrow the token; empty for none (the token acts with its user's role).
    pub scopes: Vec<String>,
    /// The token that made this one (with `POST /v1/auth/tokens`); null when a session made it.
    /// Revoking that token revokes this one, which never outlives it.
    pub parent_token_id: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TokenListResponse {
    pub ok: bool,
    pub items: Vec<TokenInfo>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CreateTokenRequest {
    #[schema(
        max_length = 100,
        pattern = r"^[^\x00]*[^\x00\t-\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\x00]*$"
    )]
    pub name: String,
    /// 1 to 365, default 90.
    #[serde(default, deserialize_with = "int::optional")]
    #[schema(minimum = 1, maximum = 365)]
    pub expires_in_days: Option<i64>,
    /// Narrow the token to these scopes (`read`, `policy:sync`, `approve`); none or empty for a
    /// token that acts with its user's whole role.
    #[serde(default)]
    #[schema(max_items = 16, value_type = Option<Vec<TokenScope>>)]
    pub scopes: Option<Vec<String>>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CreateTokenResponse {
    pub ok: bool,
    pub access_token: TokenInfo,
    /// `svc_pat_...`, shown this once. Send as `Authorization: Bearer`.
    pub token: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Member {
    pub user_id: String,
    pub email: String,
    pub role: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MemberListResponse {
    pub ok: bool,
    pub items: Vec<Member>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AddMemberRequest {
    #[schema(format = Email, max_length = 254)]
    pub email: String,
    /// `owner`, `admin`, `approver` or `member` (default).
    #[serde(default)]
    #[schema(pattern = "^(owner|admin|approver|member)$")]
    pub role: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MemberResponse {
    pub ok: bool,
    pub member: Member,
}

// ---- status and contact -------------------------------------------------------------------

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct StatusComponent {
    /// `database`, `mailer`, ...
    pub component: String,
    /// `ok`, `degraded` or `down`.
    pub status: String,
    pub detail: String,
    pub latency_ms: f64,
    pub checked_at: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct StatusSummary {
    pub ok: bool,
    /// The worst component status, or `unknown` before the first check.
    pub status: String,
    pub components: Vec<StatusComponent>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ContactRequest {
    #[schema(
        max_length = 200,
        pattern = r"^[^\x00]*[^\x00\t-\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\x00]*$"
    )]
    pub name: String,
    #[schema(format = Email, max_length = 254)]
    pub email: String,
    #[schema(
        max_length = 5000,
        pattern = r"^[^\x00]*[^\x00\t-\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\x00]*$"
    )]
    pub message: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ContactResponse {
    pub ok: bool,
    pub id: String,
    pub received_at: String,
    /// Whether the notification mail went out (false when none is configured or it failed).
    pub notified: bool,
}

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
fn present_int<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<i64>>, D::Error> {
    int::optional(d).map(Some)
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

// ---- credentials and kill switch ----------------------------------------------------------

/// A scope of a workspace API key (see `domain::access::KEY_SCOPES`).
#[derive(ToSchema)]
#[schema(
    pattern = "^(check|verify|email|credentials|telemetry|agents:read|agents:write|audit:read|kill-switch|policies:read|challenges:read|vault:lease)$"
)]
pub struct KeyScope(pub String);

/// A scope of a personal access token (see `domain::access::TOKEN_SCOPES`).
#[derive(ToSchema)]
#[schema(pattern = "^(read|policy:sync|approve)$")]
pub struct TokenScope(pub String);

/// A credential scope: 1 to 128 of `A-Za-z0-9:._/*-`.
#[derive(ToSchema)]
#[schema(pattern = "^[A-Za-z0-9:._/*-]{1,128}$")]
pub struct Scope(pub String);

fn integer_or_text() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, Type};
    Schema::OneOf(
        OneOfBuilder::new()
            .item(ObjectBuilder::new().schema_type(Type::Integer))
            .item(ObjectBuilder::new().schema_type(Type::String))
            .description(Some(
                "Unix epoch milliseconds (a number, or its decimal text exactly as signed).",
            ))
            .build(),
    )
}

/// A secret set named by its id or its workspace-local number, as every vault field takes it.
fn secret_set_ref() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, Type};
    Schema::OneOf(
        OneOfBuilder::new()
            .item(ObjectBuilder::new().schema_type(Type::String))
            .item(ObjectBuilder::new().schema_type(Type::Integer))
            .description(Some("`ss_...` or the set's number."))
            .build(),
    )
}

/// [`secret_set_ref`], or `null` (as absent) where the field is optional.
fn optional_secret_set_ref() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, Type};
    Schema::OneOf(
        OneOfBuilder::new()
            .item(ObjectBuilder::new().schema_type(Type::String))
            .item(ObjectBuilder::new().schema_type(Type::Integer))
            .item(ObjectBuilder::new().schema_type(Type::Null))
            .description(Some("`ss_...` or the set's number."))
            .build(),
    )
}

/// A grant's keys: every key (`"*"`) or a list of key names.
fn key_selection() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, OneOfBuilder, Schema, Type};
    Schema::OneOf(
        OneOfBuilder::new()
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .enum_values(Some(["*"])),
            )
            .item(ArrayBuilder::new().items(ObjectBuilder::new().schema_type(Type::String)))
            .description(Some("`\"*\"` or a list of key names."))
            .build(),
    )
}

/// The agent's own signature over the exchange, made like a signed request's (canonical string
/// `METHOD\nPATH\nTIMESTAMP\nNONCE\nBODY_SHA256`).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AgentRequestProof {
    pub method: String,
    pub path: String,
    /// Unix epoch milliseconds (a number, or its decimal text exactly as signed).
    #[schema(schema_with = integer_or_text)]
    pub timestamp_ms: Value,
    pub nonce: String,
    /// Lowercase hex SHA-256 of the body the agent signed.
    pub body_sha256: String,
    pub signature_b64: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TokenExchangeRequest {
    #[serde(default)]
    #[schema(required = true, min_length = 1)]
    pub agent_id: String,
    #[serde(default)]
    #[schema(max_length = 200, pattern = r"^[^\x00-\x1f\x7f-\x9f]*$")]
    pub audience: Option<String>,
    /// Default `pol_default`; evaluated as action `token_exchange`.
    #[serde(default)]
    pub policy_id: Option<String>,
    #[serde(default)]
    #[schema(max_items = 32, value_type = Option<Vec<Scope>>)]
    pub scopes: Option<Vec<String>>,
    /// Default 900, at most 3600.
    #[serde(default, deserialize_with = "int::optional")]
    #[schema(minimum = 1, maximum = 3600)]
    pub ttl_seconds: Option<i64>,
    /// More facts for the policy (an object).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub context: Option<Value>,
    pub agent_request: AgentRequestProof,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TokenExchangeResponse {
    pub ok: bool,
    /// An EdDSA JWT (claims `iss, sub, aud, exp, iat, jti, scope, ws`).
    pub token: String,
    /// `Bearer`.
    pub token_type: String,
    /// Seconds.
    pub expires_in: i64,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct EmailSendRequest {
    #[serde(default)]
    #[schema(required = true, min_length = 1)]
    pub agent_id: String,
    /// Default `pol_default`; evaluated as action `send_email`.
    #[serde(default)]
    pub policy_id: Option<String>,
    /// `{to, cc, bcc, subject, text, html, attachments}`: recipients a string or a list of
    /// mailboxes (`jane@example.com` or `Jane Doe <jane@example.com>`), at least one of `text`
    /// and `html`; `attachments` a list of `{filename, content_type, content}` with `content` in
    /// base64, checked by the policy's attachment rules and delivered with the message.
    #[schema(value_type = Object)]
    pub email: Value,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct EmailSendResponse {
    pub ok: bool,
    /// `smtp` or `outbox`.
    pub provider: String,
    pub provider_message_id: String,
    pub trace_id: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MintRequest {
    #[schema(min_length = 1)]
    pub agent_id: String,
    #[serde(default)]
    #[schema(max_length = 200, pattern = r"^[^\x00-\x1f\x7f-\x9f]*$")]
    pub provider: Option<String>,
    #[serde(default)]
    #[schema(max_length = 200, pattern = r"^[^\x00-\x1f\x7f-\x9f]*$")]
    pub audience: Option<String>,
    /// Default 300, at most 3600.
    #[serde(default, deserialize_with = "int::optional")]
    #[schema(minimum = 1, maximum = 3600)]
    pub ttl_seconds: Option<i64>,
    #[serde(default)]
    pub one_time: Option<bool>,
    /// Up to 32 of `[A-Za-z0-9:._/*-]{1,128}`.
    #[serde(default)]
    #[schema(max_items = 32, value_type = Option<Vec<Scope>>)]
    pub scopes: Option<Vec<String>>,
    /// `opaque` (default) or `jwt` (EdDSA, verifiable with `/.well-known/jwks.json`).
    #[serde(default)]
    #[schema(pattern = "^(|opaque|jwt)$")]
    pub token_type: Option<String>,
    /// Default `pol_default`; the mint is checked as action `mint_credential`.
    #[serde(default)]
    pub policy_id: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Credential {
    pub cred_id: String,
    /// Returned once, at minting.
    pub token: String,
    pub token_type: String,
    pub expires_at: String,
    pub one_time: bool,
    pub audience: Option<String>,
    pub scopes: Vec<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MintResponse {
    pub ok: bool,
    pub credential: Credential,
}

#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
pub struct RevokeRequest {
    #[serde(default)]
    pub token: Option<String>,
    #[serde(default)]
    pub cred_id: Option<String>,
    #[serde(default)]
    #[schema(max_length = 200, pattern = r"^[^\x00-\x1f\x7f-\x9f]*$")]
    pub reason: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RevokeByAgentRequest {
    #[schema(min_length = 1)]
    pub agent_id: String,
    #[serde(default)]
    #[schema(max_length = 200, pattern = r"^[^\x00-\x1f\x7f-\x9f]*$")]
    pub reason: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RevokeResponse {
    pub ok: bool,
    /// How many were revoked (for a personal access token: it and the tokens made from it).
    pub revoked: i64,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct IntrospectRequest {
    /// Text that is not only whitespace (the token is read trimmed).
    #[schema(
        min_length = 1,
        pattern = r"^[^\x00]*[^\x00\t-\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\x00]*$"
    )]
    pub token: String,
}

#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
pub struct IntrospectResponse {
    pub ok: bool,
    pub active: bool,
    /// Why `active` is false: `unknown`, `revoked`, `agent_not_active`, `expired`,
    /// `revoked_by_kill_switch`, `already_used`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub cred_id: Option<String>,
    pub agent_id: Option<String>,
    pub audience: Option<String>,
    pub scopes: Vec<String>,
    pub expires_at: Option<String>,
    pub token_type: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MintingSwitchRequest {
    pub paused: bool,
    #[serde(default)]
    #[schema(max_length = 200, pattern = r"^[^\x00-\x1f\x7f-\x9f]*$")]
    pub reason: Option<String>,
}

#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
pub struct RevokeAllRequest {
    #[serde(default)]
    #[schema(max_length = 200, pattern = r"^[^\x00-\x1f\x7f-\x9f]*$")]
    pub reason: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct KillSwitchStatus {
    pub ok: bool,
    pub minting_paused: bool,
    pub minting_paused_reason: Option<String>,
    /// The workspace cutoff: credentials minted before it count as revoked (null until used).
    pub all_credentials_revoked_at: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct FeedbackRequest {
    #[schema(min_length = 1)]
    pub agent_id: String,
    /// `good` or `bad`.
    #[schema(pattern = "^(good|bad)$")]
    pub verdict: String,
    /// Free-form, e.g. `{"reason": "spam"}`.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub evidence: Option<Value>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct FeedbackResponse {
    pub ok: bool,
    pub accepted: bool,
    pub received_at: String,
    /// The agent's risk tier after this feedback.
    pub risk_tier: String,
}

#[cfg(test)]
mod scope_tests {
    use super::{KeyScope, TokenScope};
    use crate::domain::access::{KEY_SCOPES, TOKEN_SCOPES};
    use utoipa::PartialSchema;

    fn pattern(schema: utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>) -> String {
        let value = serde_json::to_value(schema).unwrap_or_default();
        value["pattern"].as_str().unwrap_or("").to_owned()
    }

    /// The OpenAPI document allows exactly the scopes the server knows.
    #[test]
    fn the_documented_scopes_are_the_known_ones() {
        assert_eq!(
            pattern(KeyScope::schema()),
            format!("^({})$", KEY_SCOPES.join("|"))
        );
        assert_eq!(
            pattern(TokenScope::schema()),
            format!("^({})$", TOKEN_SCOPES.join("|"))
        );
    }
}

// ---- vault ----------------------------------------------------------------------------------

/// A secret set as administrators see it: key names, versions and profiles, never values.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SecretSetInfo {
    /// `ss_...`
    pub secret_set_id: String,
    /// The workspace-local number (any `secret_set_id` accepts it too).
    pub number: i64,
    pub name: String,
    pub provider: String,
    pub environment: String,
    /// The current version.
    pub version: i64,
    /// The current version's key names, sorted.
    pub keys: Vec<String>,
    /// The proxy profiles: `{NAME: {hosts, methods?, path_prefixes?, allow_http?, inject: {headers?, query?}}}`.
    #[schema(value_type = Object)]
    pub profiles: Value,
    pub created_at: String,
    pub updated_at: String,
    pub deleted_at: Option<String>,
    pub destroyed_at: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SecretSetResponse {
    pub ok: bool,
    pub secret_set: SecretSetInfo,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SecretSetList {
    pub ok: bool,
    pub items: Vec<SecretSetInfo>,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SecretSetListParams {
    /// List soft-deleted sets too.
    pub include_deleted: Option<bool>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CreateSecretSetRequest {
    /// 1 to 100 printable characters, unique among the workspace's sets.
    #[schema(max_length = 100)]
    pub name: String,
    /// What the secrets are for, e.g. `stripe` (1 to 64 printable characters).
    #[schema(max_length = 64)]
    pub provider: String,
    /// e.g. `production` (1 to 64 printable characters).
    #[schema(max_length = 64)]
    pub environment: String,
    /// `{KEY: value}`: keys `[A-Za-z_][A-Za-z0-9_]*` (at most 128 characters, 256 keys), values
    /// at most 64 KiB.
    #[schema(value_type = Object)]
    pub entries: Value,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub profiles: Option<Value>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ImportSecretSetRequest {
    #[schema(max_length = 100)]
    pub name: String,
    #[schema(max_length = 64)]
    pub provider: String,
    #[schema(max_length = 64)]
    pub environment: String,
    /// dotenv text: `KEY=value` lines, `export ` prefixes, quotes and `#` comments.
    pub dotenv: String,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub profiles: Option<Value>,
}

/// A new version: `entries` replaces every entry, or `set` adds and changes and `unset`
/// removes some; `profiles` replaces the profiles. With `expected_version`, refused (409
/// `version_conflict`) unless the set is at that version.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
pub struct UpdateSecretSetRequest {
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub entries: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub set: Option<Value>,
    #[serde(default)]
    pub unset: Option<Vec<String>>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub profiles: Option<Value>,
    #[serde(default, deserialize_with = "int::optional")]
    pub expected_version: Option<i64>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SecretRollbackRequest {
    /// The version whose entries and profiles become the new version.
    #[serde(deserialize_with = "int::required")]
    #[schema(minimum = 1)]
    pub version: i64,
    #[serde(default, deserialize_with = "int::optional")]
    pub expected_version: Option<i64>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SecretVersionItem {
    pub version: i64,
    pub keys: Vec<String>,
    pub author: String,
    pub created_at: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SecretVersionList {
    pub ok: bool,
    /// The versions kept (the last `ACP_VAULT_HISTORY` by default 10), newest first.
    pub items: Vec<SecretVersionItem>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct GrantInfo {
    /// `grt_...`
    pub grant_id: String,
    pub secret_set_id: String,
    pub number: i64,
    pub agent_id: Option<String>,
    pub group: Option<String>,
    #[schema(schema_with = key_selection)]
    pub allowed_keys: Value,
    /// Some of `proxy`, `read`, `mint_lease` (always these names, whichever alias was sent).
    pub allowed_actions: Vec<String>,
    pub expires_at: Option<String>,
    pub created_at: String,
    pub created_by: String,
    pub revoked_at: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct GrantResponse {
    pub ok: bool,
    pub grant: GrantInfo,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct GrantList {
    pub ok: bool,
    pub items: Vec<GrantInfo>,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct GrantListParams {
    /// Only this set's grants (`ss_...` or its number).
    pub secret_set_id: Option<String>,
}

/// Grants one agent, or every member of one agent group, the use of a secret set.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CreateGrantRequest {
    #[schema(schema_with = secret_set_ref)]
    pub secret_set_id: Value,
    #[serde(default)]
    pub agent_id: Option<String>,
    /// An agent group of the workspace's policy specs.
    #[serde(default)]
    pub group: Option<String>,
    #[schema(schema_with = key_selection)]
    pub allowed_keys: Value,
    /// Some of `proxy`, `read`, `mint_lease` (`read` is never implied). Aliases accepted:
    /// `proxy_use`, `mint_request_lease` and the `vault.` names; answers use the first names.
    pub allowed_actions: Vec<String>,
    /// RFC 3339; absent for a grant that does not expire.
    #[serde(default)]
    pub expires_at: Option<String>,
}

/// Issues a workflow lease: the agent may then mint short request leases for `actions` on
/// the set with its signed requests.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct WorkflowLeaseRequest {
    pub agent_id: String,
    #[schema(schema_with = secret_set_ref)]
    pub secret_set_id: Value,
    /// Why (1 to 200 printable characters; audited).
    #[schema(max_length = 200)]
    pub purpose: String,
    /// Some of `read`, `proxy` (aliases accepted: `proxy_use`, `vault.read`, `vault.proxy`).
    pub actions: Vec<String>,
    /// 1 to 86,400, default 3,600.
    #[serde(default, deserialize_with = "int::optional")]
    #[schema(minimum = 1, maximum = 86400)]
    pub ttl_seconds: Option<i64>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct WorkflowLeaseResponse {
    pub ok: bool,
    /// `ls_...`
    pub lease_id: String,
    /// Shown this once; stored as a hash.
    pub workflow_lease_token: String,
    pub expires_at: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LeaseInfo {
    pub lease_id: String,
    /// `workflow` or `request`.
    pub kind: String,
    pub workflow_lease_id: Option<String>,
    pub agent_id: String,
    pub secret_set_id: String,
    pub purpose: String,
    /// `read` and/or `proxy` (always these names, whichever alias was sent).
    pub actions: Vec<String>,
    pub keys: Option<Vec<String>>,
    pub uses_left: Option<i64>,
    pub expires_at: String,
    /// When it stopped counting: revoked by id, agent, set or the kill switch.
    pub revoked_at: Option<String>,
    pub created_at: String,
    pub created_by: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LeaseList {
    pub ok: bool,
    /// Newest first, at most 200.
    pub items: Vec<LeaseInfo>,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LeaseListParams {
    pub agent_id: Option<String>,
    /// `ss_...` or the set's number.
    pub secret_set_id: Option<String>,
    /// `workflow` or `request`.
    #[param(pattern = "^(|workflow|request)$")]
    pub kind: Option<String>,
}

/// Revokes every live lease of an agent, of a set, or of both.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
pub struct RevokeLeasesRequest {
    #[serde(default)]
    pub agent_id: Option<String>,
    #[serde(default)]
    #[schema(schema_with = optional_secret_set_ref)]
    pub secret_set_id: Option<Value>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RevokedCount {
    pub ok: bool,
    pub revoked: i64,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct VaultAuditParams {
    /// Only this set's events (`ss_...` or its number); every vault event without it.
    pub secret_set_id: Option<String>,
    /// 1 to 200, default 50.
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<i64>,
    pub cursor: Option<String>,
}

/// An agent asks how the policy would decide a vault action (nothing is consumed).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct VaultEvalRequest {
    #[schema(schema_with = secret_set_ref)]
    pub secret_set_id: Value,
    /// `read`, `proxy` or `mint_lease` (aliases accepted: `proxy_use`, `mint_request_lease` and
    /// the `vault.` names).
    pub action: String,
    /// The keys the action would touch (default: every key of the set).
    #[serde(default)]
    pub keys: Option<Vec<String>>,
    /// Must be the set's environment when given.
    #[serde(default)]
    pub environment: Option<String>,
    /// Must be the set's provider when given.
    #[serde(default)]
    pub provider: Option<String>,
    /// For `mint_lease`: what the lease would be for, `read` (default) or `proxy`.
    #[serde(default)]
    pub lease_action: Option<String>,
    /// For `proxy`: the profile and the call, so host rules can be judged.
    #[serde(default)]
    pub profile: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub request: Option<Value>,
}

/// An agent mints a short request lease from its workflow lease.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RequestLeaseMintRequest {
    /// The `vwl_...` token a person or pipeline handed the agent.
    pub workflow_lease_token: String,
    #[schema(schema_with = secret_set_ref)]
    pub secret_set_id: Value,
    /// `read` or `proxy` (aliases accepted: `proxy_use`, `vault.read`, `vault.proxy`): what the
    /// request lease is for.
    pub action: String,
    /// The keys it may touch (default: every key the grant allows).
    #[serde(default)]
    pub keys: Option<Vec<String>>,
    /// 1 to 900, default 60 (never past the workflow lease).
    #[serde(default, deserialize_with = "int::optional")]
    #[schema(minimum = 1, maximum = 900)]
    pub ttl_seconds: Option<i64>,
    /// 1 to 100, default 1.
    #[serde(default, deserialize_with = "int::optional")]
    #[schema(minimum = 1, maximum = 100)]
    pub uses: Option<i64>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RequestLeaseResponse {
    pub ok: bool,
    pub lease_id: String,
    /// Shown this once; stored as a hash.
    pub request_lease_token: String,
    pub expires_at: String,
    pub uses_left: i64,
}

/// An agent reads secrets with a request lease (`read` granted).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SecretsReadRequest {
    pub request_lease_token: String,
    #[schema(schema_with = secret_set_ref)]
    pub secret_set_id: Value,
    pub keys: Vec<String>,
    #[serde(default)]
    pub environment: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SecretsReadResponse {
    pub ok: bool,
    /// The keys asked for, with their values.
    pub secrets: std::collections::BTreeMap<String, String>,
    pub version: i64,
    pub trace_id: String,
}

/// An agent has acp call an upstream with the set's secrets injected by a profile.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ProxyRequest {
    pub request_lease_token: String,
    #[schema(schema_with = secret_set_ref)]
    pub secret_set_id: Value,
    /// The profile of the set that says where the secrets may go and how.
    pub profile: String,
    /// `{method, url, headers?: {NAME: value}, body?: text, body_base64?: base64}`.
    #[schema(value_type = Object)]
    pub request: Value,
    #[serde(default)]
    pub environment: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ProxyResponse {
    pub ok: bool,
    /// The upstream's status (a redirect is returned, never followed).
    pub status: u16,
    /// The upstream's headers (hop-by-hop ones dropped; repeated ones joined with `, `).
    pub headers: std::collections::BTreeMap<String, String>,
    /// The body when it is UTF-8 text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// The body otherwise, in standard base64.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<String>,
    pub trace_id: String,
}
