//! The vault: secret sets, versions, grants, leases and the agent side.

use super::*;

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
