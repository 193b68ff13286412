//! Extractors whose rejections answer in the service's error envelope: JSON bodies, query
//! strings, path parameters, the workspace API key and agent-signed requests.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::context::SharedContext;
use crate::domain::access::{key_may, Need};
use crate::domain::Refusal;
use crate::error::ApiError;
use crate::identity::api_keys;
use crate::identity::signing::{verify_parts, SignedParts};
use crate::secret::{ct_eq, sha256_hex};
use crate::store::{AgentRecord, NonceClaim};
use crate::time::now_ms;

use super::headers::{bearer_token, is_json_content_type};
use super::observe::{note_principal, note_signed, PrincipalKind};
use super::shape::{self, Failure, Node};

/// Largest accepted request body.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

fn body_error(rejection: BytesRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("request bodies are limited to {MAX_BODY_BYTES} bytes"),
        )
    } else {
        ApiError::bad_request("invalid_body", "the request body could not be read")
    }
}

/// Refuses bodies declared as something other than JSON (a missing Content-Type is accepted).
fn check_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    if is_json_content_type(value.as_bytes()) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the body as `application/json`",
        ))
    }
}

/// The first field name in a serde path such as `items[3].status` or `metadata`.
fn field_of(path: &serde_path_to_error::Path) -> Option<String> {
    path.iter().find_map(|segment| match segment {
        serde_path_to_error::Segment::Map { key } => Some(key.clone()),
        _ => None,
    })
}

/// Parses a JSON body into `T`, naming the offending field in the error code:
/// `missing_<field>` for an absent required field, `invalid_<field>` for a wrong type, and
/// `invalid_json` for a body that is not a JSON object at all (an array, even one serde could
/// read as a struct, is refused). An empty body reads as `{}`; a body of only whitespace is
/// not JSON.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    let bytes: &[u8] = match first {
        None if bytes.is_empty() => b"{}",
        None => {
            return Err(ApiError::bad_request(
                "invalid_json",
                "the body is not valid JSON (send no body, or a JSON object)",
            ))
        }
        Some(b'{') => bytes,
        Some(_) => {
            let well_formed = serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok();
            return Err(ApiError::bad_request(
                "invalid_json",
                if well_formed {
                    "the body must be a JSON object"
                } else {
                    "the body is not valid JSON"
                },
            ));
        }
    };
    // The common case, a well-formed body, is parsed without tracking paths; only a body that
    // fails is parsed again to name the offending field.
    if let Ok(value) = serde_json::from_slice::<T>(bytes) {
        if has_nul(bytes) {
            return Err(nul_in_body());
        }
        return Ok(value);
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parsed: Result<T, _> = serde_path_to_error::deserialize(&mut de);
    let value = match parsed {
        Ok(value) => value,
        Err(err) => {
            let inner = err.inner();
            // A shape error may come before a syntax error further on: a body that is not JSON
            // at all is reported as such.
            let well_formed = serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok();
            if !well_formed || inner.is_syntax() || inner.is_eof() || inner.is_io() {
                return Err(ApiError::bad_request(
                    "invalid_json",
                    "the body is not valid JSON",
                ));
            }
            let node: Option<Node> = serde_json::from_slice(bytes).ok();
            return Err(body_error_of::<T>(node.as_ref(), err.path()));
        }
    };
    de.end().map_err(|_| {
        ApiError::bad_request("invalid_json", "unexpected data after the JSON body")
    })?;
    if has_nul(bytes) {
        return Err(nul_in_body());
    }
    Ok(value)
}

fn nul_in_body() -> ApiError {
    ApiError::bad_request(
        "invalid_json",
        "text in the body must not contain NUL characters",
    )
}

/// Reads an already parsed JSON value into `T`, with the field-named errors of [`parse_json`]
/// (for handlers that need the raw value too, e.g. to hash it).
pub fn parse_value<T: DeserializeOwned>(value: serde_json::Value) -> Result<T, ApiError> {
    match serde_path_to_error::deserialize::<_, T>(&value) {
        Ok(parsed) => Ok(parsed),
        Err(err) => {
            let node = Node::deserialize(&value).ok();
            Err(body_error_of::<T>(node.as_ref(), err.path()))
        }
    }
}

/// The error for a body that is JSON but not a `T`, by serde's category of the first failure
/// in it: `missing_<field>` for a required field that is absent, or null; `invalid_<field>` for
/// any other failure under a named field; `invalid_json` when no field is named. `path` is
/// where reading the body directly failed, for the unlikely body its tree reads after all.
fn body_error_of<T: DeserializeOwned>(
    node: Option<&Node>,
    path: &serde_path_to_error::Path,
) -> ApiError {
    let (path, failure) = match node.and_then(shape::failure_of::<T>) {
        Some((path, failure)) => (path, failure),
        None => (path.clone(), Failure::Other),
    };
    match (failure, field_of(&path)) {
        (Failure::MissingField(field), _) => ApiError::missing(field),
        (Failure::Null, Some(field)) => ApiError::missing(&field),
        (_, Some(field)) => ApiError::invalid(&field, "has the wrong type or shape"),
        (_, None) => ApiError::bad_request("invalid_json", "the body must be a JSON object"),
    }
}

/// The error for a query string that is not a `T`: `invalid_<parameter>` for the parameter
/// that failed, else `invalid_query`. Every query parameter is optional, so none is missing.
fn query_error(path: &serde_path_to_error::Path) -> ApiError {
    match field_of(path) {
        Some(field) => ApiError::invalid(&field, "has the wrong type or shape"),
        None => ApiError::bad_request("invalid_query", "the query string is malformed"),
    }
}

/// True when a JSON string in the body holds U+0000 (only possible as the `\\u0000` escape),
/// which text columns cannot store. Checked only when the escape appears at all.
fn has_nul(bytes: &[u8]) -> bool {
    let escape = |at: usize| {
        bytes
            .get(at..at + 6)
            .is_some_and(|w| w.eq_ignore_ascii_case(b"\\u0000"))
    };
    if !bytes
        .iter()
        .enumerate()
        .any(|(at, b)| *b == b'\\' && escape(at))
    {
        return false;
    }
    fn walk(v: &serde_json::Value) -> bool {
        match v {
            serde_json::Value::String(s) => s.contains('\0'),
            serde_json::Value::Array(a) => a.iter().any(walk),
            serde_json::Value::Object(o) => o.iter().any(|(k, v)| k.contains('\0') || walk(v)),
            _ => false,
        }
    }
    serde_json::from_slice::<serde_json::Value>(bytes).map_or(true, |v| walk(&v))
}

/// A JSON body parsed with [`parse_json`].
pub struct AppJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for AppJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        check_content_type(req.headers())?;
        let bytes = Bytes::from_request(req, state).await.map_err(body_error)?;
        parse_json(&bytes).map(AppJson)
    }
}

/// The raw body bytes (for endpoints that sign over them), with the JSON content-type check
/// and the size limit answered in the envelope.
pub struct RawBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        check_content_type(req.headers())?;
        Bytes::from_request(req, state)
            .await
            .map(RawBody)
            .map_err(body_error)
    }
}

/// A query string; a bad parameter answers `invalid_query`.
pub struct AppQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for AppQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let _ = state;
        let query = parts.uri.query().unwrap_or("");
        let decoded = form_urlencoded::parse(query.as_bytes());
        if decoded
            .clone()
            .any(|(k, v)| k.contains('\0') || v.contains('\0'))
        {
            return Err(ApiError::bad_request(
                "invalid_query",
                "query parameters must not contain NUL characters",
            ));
        }
        serde_path_to_error::deserialize(serde_urlencoded::Deserializer::new(decoded))
            .map(AppQuery)
            .map_err(|err| query_error(err.path()))
    }
}

/// A path parameter.
pub struct AppPath<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for AppPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        if parts.uri.path().contains("%00") {
            return Err(ApiError::bad_request(
                "invalid_path",
                "the path must not contain NUL characters",
            ));
        }
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(v)| AppPath(v))
            .map_err(|e: PathRejection| ApiError::bad_request("invalid_path", e.body_text()))
    }
}

/// The workspace a request acts in, proven by a workspace API key.
#[derive(Debug, Clone)]
pub struct Caller {
    pub workspace_id: String,
    pub key_id: String,
    /// The key and the view of its workspace it was authenticated under.
    pub access: crate::policy::cache::KeyAccess,
}

impl Caller {
    fn new(access: crate::policy::cache::KeyAccess) -> Self {
        Self {
            workspace_id: access.key.workspace_id.clone(),
            key_id: access.key.key_id.clone(),
            access,
        }
    }

    pub fn actor(&self) -> crate::audit::Actor {
        crate::audit::Actor::ApiKey(self.key_id.clone())
    }

    /// Spends the tokens of a batch's `n` decisions (at least one: every request spends one)
    /// of the key's rate, or refuses: 429 `rate_limited`.
    pub fn spend(&self, n: usize) -> Result<(), ApiError> {
        self.access
            .spend(u64::try_from(n.max(1)).unwrap_or(u64::MAX))
            .map_err(rate_limited)
    }

    /// Refuses (403 `insufficient_scope`) unless the key's scopes grant `need`.
    pub fn require(&self, need: Need) -> Result<(), ApiError> {
        key_may(&self.access.key.scopes, need).map_err(|d| ApiError::from((d, need)))
    }
}

/// 429 `rate_limited` for a key whose rate is spent, `retry_after` the seconds until it is not.
fn rate_limited(retry_after_secs: u64) -> ApiError {
    let mut err = ApiError::rate_limited(i64::try_from(retry_after_secs).unwrap_or(i64::MAX));
    err.message = "this API key's rate on this replica is spent; retry later".into();
    err
}

/// The API key of a request: `X-Service-Api-Key`, else `Authorization: Bearer`.
pub fn presented_api_key(headers: &HeaderMap) -> Option<&str> {
    if let Some(v) = headers.get("x-service-api-key") {
        return v.to_str().ok().map(str::trim);
    }
    bearer_token(headers)
}

/// Authenticates the workspace API key among `headers`, confirming with one read that the
/// workspace's state is the one the cached key was read under (for answers that commit
/// nothing a batch would check).
pub async fn authenticate(ctx: &SharedContext, headers: &HeaderMap) -> Result<Caller, ApiError> {
    let caller = authenticate_deferred(ctx, headers, 1).await?;
    let store = ctx.store.as_ref();
    let current = ctx
        .caches
        .confirmed_view(store, &caller.workspace_id)
        .await?;
    if current == caller.access.view {
        return Ok(caller);
    }
    // The workspace changed since the key was cached: read it again under the new view.
    let access = ctx
        .caches
        .renew(store, &caller.access, current.version)
        .await?
        .ok_or_else(Refusal::invalid_api_key)?;
    Ok(Caller::new(access))
}

/// Authenticates the workspace API key among `headers` from the cache: whatever the caller
/// commits must carry `caller.access.view.basis()`, so that the batch that commits it checks
/// the key's workspace has not changed meanwhile. The request spends `spend` tokens of the
/// key's rate (every request one, but a batch, which spends one per decision once it knows
/// how many: [`DecidingBatch`]).
pub async fn authenticate_deferred(
    ctx: &SharedContext,
    headers: &HeaderMap,
    spend: u64,
) -> Result<Caller, ApiError> {
    let key = match presented_api_key(headers) {
        None | Some("") => {
            return Err(ApiError::unauthorized(
                "missing_api_key",
                "send a workspace API key in `X-Service-Api-Key` or `Authorization: Bearer`",
            ))
        }
        Some(key) => key,
    };
    if !api_keys::is_well_formed(key) {
        return Err(Refusal::invalid_api_key().into());
    }
    let hash = sha256_hex(key.as_bytes());
    // The cache is keyed by the hash itself: a hit is a match.
    let access = ctx
        .caches
        .api_key(ctx.store.as_ref(), &hash)
        .await?
        .ok_or_else(Refusal::invalid_api_key)?;
    if let Some(record) = &access.record {
        if !ct_eq(record.key_hash.as_bytes(), hash.as_bytes()) {
            return Err(Refusal::invalid_api_key().into());
        }
        let now = now_ms();
        if record.last_used_at.is_none_or(|t| now - t > 60_000) {
            crate::identity::accounts::touch(
                ctx,
                crate::store::AccountOp::TouchApiKey {
                    key_id: record.id.clone(),
                    at: now,
                }
                .into(),
            );
        }
    }
    if spend > 0 {
        access.spend(spend).map_err(rate_limited)?;
    }
    let caller = Caller::new(access);
    note_principal(PrincipalKind::ApiKey, Some(&caller.workspace_id));
    Ok(caller)
}

impl FromRequestParts<SharedContext> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        ctx: &SharedContext,
    ) -> Result<Self, Self::Rejection> {
        authenticate(ctx, &parts.headers).await
    }
}

/// An API-key caller whose handler decides and commits on cached state: the commit checks the
/// workspace version, so authentication costs no database round trip (the hot paths).
pub struct Deciding(pub Caller);

impl FromRequestParts<SharedContext> for Deciding {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        ctx: &SharedContext,
    ) -> Result<Self, Self::Rejection> {
        authenticate_deferred(ctx, &parts.headers, 1)
            .await
            .map(Deciding)
    }
}

/// [`Deciding`] for a batch of decisions: the request spends nothing of the key's rate until
/// its handler knows how many decisions it asks for and spends one per decision
/// ([`Caller::spend`]), all at once.
pub struct DecidingBatch(pub Caller);

impl FromRequestParts<SharedContext> for DecidingBatch {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        ctx: &SharedContext,
    ) -> Result<Self, Self::Rejection> {
        authenticate_deferred(ctx, &parts.headers, 0)
            .await
            .map(DecidingBatch)
    }
}

/// An agent-signed request whose signature, timestamp and agent status have been verified.
/// The nonce is not yet consumed: the handler commits `nonce` together with the request's own
/// effect, so a request that fails later does not burn it, and replays fail atomically.
pub struct SignedRequest {
    pub agent: AgentRecord,
    pub nonce: NonceClaim,
    pub body: Bytes,
}

impl SignedRequest {
    /// Parses the body; its `agent_id` must be the signer's.
    pub fn json<T: DeserializeOwned>(
        &self,
        agent_id_of: impl Fn(&T) -> &str,
    ) -> Result<T, ApiError> {
        let value: T = parse_json(&self.body)?;
        let body_agent = agent_id_of(&value);
        if body_agent.is_empty() {
            return Err(ApiError::missing("agent_id"));
        }
        if body_agent != self.agent.id {
            return Err(ApiError::unauthorized(
                "agent_header_mismatch",
                "the body `agent_id` differs from `X-Service-Agent-Id`",
            ));
        }
        Ok(value)
    }
}

impl SignedRequest {
    /// Parses a body that names no agent (the vault's agent endpoints, whose public client
    /// sends none): the signer is the agent. An `agent_id` it does send must be the signer's.
    pub fn json_of_signer<T: DeserializeOwned>(&self) -> Result<T, ApiError> {
        #[derive(serde::Deserialize)]
        struct Named {
            #[serde(default)]
            agent_id: Option<String>,
        }
        let named: Named = parse_json(&self.body)?;
        if named
            .agent_id
            .is_some_and(|a| !a.is_empty() && a != self.agent.id)
        {
            return Err(ApiError::unauthorized(
                "agent_header_mismatch",
                "the body `agent_id` differs from `X-Service-Agent-Id`",
            ));
        }
        parse_json(&self.body)
    }
}

fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
}

impl FromRequest<SharedContext> for SignedRequest {
    type Rejection = ApiError;

    async fn from_request(req: Request, ctx: &SharedContext) -> Result<Self, Self::Rejection> {
        let (parts, body) = req.into_parts();
        let headers = &parts.headers;
        note_signed();
        let (Some(agent_id), Some(timestamp), Some(nonce), Some(signature)) = (
            header_text(headers, "x-service-agent-id"),
            header_text(headers, "x-service-timestamp"),
            header_text(headers, "x-service-nonce"),
            header_text(headers, "x-service-signature"),
        ) else {
            return Err(ApiError::unauthorized(
                "missing_signature_headers",
                "signed requests need X-Service-Agent-Id, X-Service-Timestamp, X-Service-Nonce and X-Service-Signature",
            ));
        };
        check_content_type(headers)?;
        let body = Bytes::from_request(Request::from_parts(parts.clone(), body), ctx)
            .await
            .map_err(body_error)?;
        let agent = if crate::domain::ids::has_shape(agent_id, crate::domain::ids::AGENT) {
            ctx.caches
                .agent(ctx.store.as_ref(), agent_id)
                .await?
                .map(|f| f.agent.clone())
        } else {
            None
        };
        let signed = SignedParts {
            method: parts.method.as_str(),
            path: parts.uri.path(),
            timestamp,
            nonce,
            body_sha256: &sha256_hex(&body),
            signature_b64: signature,
        };
        let nonce = verify_parts(
            &signed,
            agent.as_ref(),
            now_ms(),
            ctx.config.signature_window_ms,
        )
        .map_err(|failure| ApiError::from(signed.reject(failure)))?;
        let agent = agent.ok_or_else(ApiError::unknown_agent)?;
        note_principal(PrincipalKind::Agent, agent.workspace_id.as_deref());
        Ok(SignedRequest { agent, nonce, body })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct Body {
        name: String,
        #[serde(default)]
        count: Option<u32>,
    }

    #[derive(Debug, serde::Deserialize)]
    struct AllOptional {
        #[serde(default)]
        #[allow(
            dead_code,
            reason = "read only to test that an absent field is accepted"
        )]
        reason: Option<String>,
    }

    fn code(body: &str) -> String {
        match parse_json::<Body>(body.as_bytes()) {
            Ok(b) => format!("ok:{}:{:?}", b.name, b.count),
            Err(e) => format!("{}:{}", e.code, e.message),
        }
    }

    #[test]
    fn well_formed_bodies_parse_and_bad_ones_name_their_field() {
        assert_eq!(code(r#"{"name":"a","count":2}"#), "ok:a:Some(2)");
        assert_eq!(code(" {\"name\":\"a\"} \n"), "ok:a:None");
        assert!(code(r#"{"count":2}"#).starts_with("missing_name:"));
        assert!(code(r#"{"name":"a","count":"two"}"#).starts_with("invalid_count:"));
        assert!(code(r#"{"name":"a"} trailing"#).starts_with("invalid_json:"));
        assert!(code(r#"{"name":"a""#).starts_with("invalid_json:"));
        assert!(code("[1, 2]").starts_with("invalid_json:"));
        // A struct whose fields are all optional must not be read from an array.
        assert_eq!(
            parse_json::<AllOptional>(b" []")
                .map_err(|e| e.message)
                .err(),
            Some("the body must be a JSON object".to_owned())
        );
        assert!(parse_json::<AllOptional>(b"").is_ok());
        assert!(code("\"x\"").starts_with("invalid_json:"));
        assert!(code("null").starts_with("invalid_json:"));
        // An empty body reads as `{}`; whitespace alone is not JSON.
        assert!(code("").starts_with("missing_name:"));
        assert!(code("   ").starts_with("invalid_json:"));
    }

    /// A signed request's PATH is `uri.path()` of the request as received: the documented
    /// vectors' targets (with query strings, percent escapes) give their documented paths.
    #[test]
    fn the_signed_path_of_every_documented_vector_is_the_uri_path() {
        let vectors = crate::identity::signing::documented_vectors();
        for request in vectors["requests"].as_array().unwrap() {
            let target = request["target"].as_str().unwrap();
            let uri: axum::http::Uri = target.parse().unwrap();
            assert_eq!(
                Some(uri.path()),
                request["path"].as_str(),
                "{}",
                request["name"]
            );
        }
    }

    #[test]
    fn a_nul_in_any_string_is_refused_but_an_escaped_backslash_is_not_a_nul() {
        assert_eq!(
            code(r#"{"name":"a\u0000b"}"#),
            "invalid_json:text in the body must not contain NUL characters"
        );
        assert_eq!(
            code(r#"{"name":"a","extra":{"k\u0000":1}}"#),
            "invalid_json:text in the body must not contain NUL characters"
        );
        // `\\u0000` is a backslash followed by the text `u0000`.
        assert_eq!(code(r#"{"name":"a\\u0000"}"#), "ok:a\\u0000:None");
        assert_eq!(
            code(r#"{"name":"ends with a backslash \\"}"#),
            "ok:ends with a backslash \\:None"
        );
    }
}
