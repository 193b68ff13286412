//! People: sessions, members, API keys and access tokens, workspaces; the status page and the
//! contact form.

use super::*;

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
