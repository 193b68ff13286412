//! Agents: registration, attestation and the agent list; signed requests verified; heartbeats and
//! the inventory.

use super::*;

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
