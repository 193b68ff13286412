//! Credentials (opaque and JWT), token exchange, reputation and the kill switch.

use super::*;

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

pub(super) fn integer_or_text() -> utoipa::openapi::schema::Schema {
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
pub(super) fn secret_set_ref() -> utoipa::openapi::schema::Schema {
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
pub(super) fn optional_secret_set_ref() -> utoipa::openapi::schema::Schema {
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
pub(super) fn key_selection() -> utoipa::openapi::schema::Schema {
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
