//! `POST /v1/check`, policy sync (`/v1/policies/sync`, alias `/v1/sync`) and the policies API.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use serde_json::Value;

use crate::api::{
    ErrorBody, PolicyDetail, PolicyListResponse, PolicySummary, PolicyVersionItem,
    PolicyVersionList, RollbackRequest, SyncRequest, SyncResponse,
};
use crate::audit::names::ActorNames;
use crate::context::{Context, SharedContext};
use crate::domain::access::Need;
use crate::error::{ApiError, ApiResult};
use crate::identity::accounts::Principal;
use crate::policy::cache::DEFAULT_POLICY_ID;
use crate::policy::error::SyncError;
use crate::policy::{source, sync};
use crate::secret::sha256_hex;
use crate::time::iso;

use super::extract::{parse_json, parse_value, AppPath, RawBody};
use super::operator::{needs, person_requires, Authorized};

async fn run_sync(
    ctx: SharedContext,
    principal: Principal,
    headers: HeaderMap,
    raw: RawBody,
) -> ApiResult<Json<Value>> {
    // Parsed as any JSON body, and kept as text: the spec inside is read again strictly (a
    // duplicate key is an error, not a silent overwrite).
    let body: Value = parse_json(&raw.0)?;
    person_requires(&principal, Need::PolicySync)?;
    let (workspace_id, _) = principal.admin_of()?;
    strict_body(&raw.0)?;
    // A retry is recognised by the hash of the request's JSON (its keys in sorted order).
    let request_hash = sha256_hex(body.to_string().as_bytes());
    let retry = match retry_of(&ctx, &workspace_id, &headers, request_hash).await? {
        Retry::Replay(first) => return Ok(sync_answer(&first)),
        Retry::First(retry) => retry,
    };
    let req: SyncRequest = parse_value(body)?;
    let answer = sync::sync(&ctx, &workspace_id, &principal.actor(), req, retry).await?;
    Ok(sync_answer(&answer))
}

/// What the `Idempotency-Key` of a sync or rollback makes of it.
enum Retry {
    /// The key's first request was answered this.
    Replay(Box<SyncResponse>),
    /// Not seen: the key (if any) and the request's hash, stored with the answer.
    First(Option<(sync::IdempotencyKey, String)>),
}

async fn retry_of(
    ctx: &SharedContext,
    workspace_id: &str,
    headers: &HeaderMap,
    request_hash: String,
) -> ApiResult<Retry> {
    let key =
        sync::IdempotencyKey::parse(headers.get("idempotency-key").and_then(|v| v.to_str().ok()))?;
    if let Some(key) = &key {
        if let Some(first) = sync::replayed(ctx, workspace_id, key, &request_hash).await? {
            return Ok(Retry::Replay(Box::new(first)));
        }
    }
    Ok(Retry::First(key.map(|key| (key, request_hash))))
}

/// The answer as a JSON value, whose keys serialize in sorted order, as the stored answer that
/// a retry replays does.
fn sync_answer(answer: &SyncResponse) -> Json<Value> {
    Json(serde_json::to_value(answer).unwrap_or(Value::Null))
}

/// Reads the request body again, strictly: a key written twice in the spec is 422
/// `invalid_spec` naming both places (the spec path, and line and column in the body), elsewhere
/// in the body 400 `invalid_json`; so are specs nested deeper than the spec's limit.
fn strict_body(raw: &[u8]) -> ApiResult<()> {
    let text = std::str::from_utf8(raw)
        .map_err(|_| ApiError::bad_request("invalid_json", "the body is not UTF-8"))?;
    if text.trim().is_empty() {
        return Ok(());
    }
    match source::parse_json(text) {
        Ok(_) => Ok(()),
        Err(mut e) => {
            let in_spec =
                e.path == "spec" || e.path.starts_with("spec.") || e.path.starts_with("spec[");
            if in_spec {
                e.path = e
                    .path
                    .strip_prefix("spec")
                    .unwrap_or("")
                    .trim_start_matches('.')
                    .to_owned();
                Err(SyncError::InvalidSpec(vec![e]).into())
            } else {
                Err(ApiError::bad_request("invalid_json", e.message))
            }
        }
    }
}

/// Dry-runs or applies a policy spec. Session or personal access token of a workspace owner or
/// admin; an API key is refused.
#[utoipa::path(post, path = "/v1/policies/sync", tag = "decisions", request_body = SyncRequest,
    params(("Idempotency-Key" = Option<String>, Header, max_length = 200, pattern = "^[ -~]*$", description = "at most 200 printable characters; the first response is replayed for 24 h; another body with the key is 422 `idempotency_key_reused`")),
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = SyncResponse),
        (status = 409, description = "`sync_conflict` with `current_policy_hash`", body = ErrorBody),
        (status = 422, description = "`invalid_spec` with `errors: [{path, message}]`, or `idempotency_key_reused`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn policies_sync(
    State(ctx): State<SharedContext>,
    headers: HeaderMap,
    principal: Principal,
    body: RawBody,
) -> ApiResult<Json<Value>> {
    run_sync(ctx, principal, headers, body).await
}

/// Same as `POST /v1/policies/sync`.
#[utoipa::path(post, path = "/v1/sync", tag = "decisions", request_body = SyncRequest,
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = SyncResponse), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn sync_alias(
    State(ctx): State<SharedContext>,
    headers: HeaderMap,
    principal: Principal,
    body: RawBody,
) -> ApiResult<Json<Value>> {
    run_sync(ctx, principal, headers, body).await
}

/// Applies an earlier version's spec as a new version of the policy (or, with `dry_run`, shows
/// what that would change). The rules of sync hold: `expected_policy_hash`, the
/// `Idempotency-Key` header, and an unchanged result is a no-op. Audited as `policy.rolled_back`.
#[utoipa::path(post, path = "/v1/policies/{policy_id}/rollback", tag = "decisions", request_body = RollbackRequest,
    params(("policy_id" = String, Path),
        ("Idempotency-Key" = Option<String>, Header, max_length = 200, pattern = "^[ -~]*$", description = "at most 200 printable characters; the first response is replayed for 24 h; another body with the key is 422 `idempotency_key_reused`")),
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = SyncResponse),
        (status = 404, description = "`unknown_policy`, `unknown_version`", body = ErrorBody),
        (status = 409, description = "`sync_conflict` with `current_policy_hash`", body = ErrorBody),
        (status = 422, description = "`idempotency_key_reused`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn rollback(
    State(ctx): State<SharedContext>,
    headers: HeaderMap,
    principal: Principal,
    AppPath(policy_id): AppPath<String>,
    raw: RawBody,
) -> ApiResult<Json<Value>> {
    let body: Value = parse_json(&raw.0)?;
    person_requires(&principal, Need::PolicySync)?;
    let (workspace_id, _) = principal.admin_of()?;
    let request_hash = sha256_hex(format!("rollback {policy_id} {body}").as_bytes());
    let retry = match retry_of(&ctx, &workspace_id, &headers, request_hash).await? {
        Retry::Replay(first) => return Ok(sync_answer(&first)),
        Retry::First(retry) => retry,
    };
    let req: RollbackRequest = parse_value(body)?;
    let answer = sync::rollback(
        &ctx,
        &workspace_id,
        &principal.actor(),
        &policy_id,
        req,
        retry,
    )
    .await?;
    Ok(sync_answer(&answer))
}

/// The active workspace's policies (`pol_default` always among them).
#[utoipa::path(get, path = "/v1/policies", tag = "decisions", security(("api_key" = []), ("session" = []), ("access_token" = [])),
    responses((status = 200, body = PolicyListResponse), (status = 401, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn list(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::PoliciesRead>,
) -> ApiResult<Json<PolicyListResponse>> {
    let workspace_id = op.workspace_id;
    let mut items: Vec<PolicySummary> = ctx
        .store
        .policies(&workspace_id)
        .await?
        .into_iter()
        .map(|p| PolicySummary {
            policy_id: p.id,
            name: p.name,
            version: p.current_version,
            policy_hash: p.current_hash,
            updated_at: Some(iso(p.updated_at)),
        })
        .collect();
    if !items.iter().any(|p| p.policy_id == DEFAULT_POLICY_ID) {
        let d = crate::policy::cache::default_policy()?;
        items.insert(
            0,
            PolicySummary {
                policy_id: DEFAULT_POLICY_ID.into(),
                name: d.name.clone(),
                version: 0,
                policy_hash: d.compiled.hash.clone(),
                updated_at: None,
            },
        );
    }
    Ok(Json(PolicyListResponse { ok: true, items }))
}

/// A policy with its current spec, compiled Cedar, hash and version.
#[utoipa::path(get, path = "/v1/policies/{policy_id}", tag = "decisions", params(("policy_id" = String, Path)),
    security(("api_key" = []), ("session" = []), ("access_token" = [])),
    responses((status = 200, body = PolicyDetail), (status = 404, description = "`unknown_policy`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn get(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::PoliciesRead>,
    AppPath(policy_id): AppPath<String>,
) -> ApiResult<Json<PolicyDetail>> {
    let workspace_id = op.workspace_id;
    let detail = sync::policy_detail(&ctx, &workspace_id, &policy_id, None).await?;
    Ok(Json(with_author_name(&ctx, &workspace_id, detail).await?))
}

/// The policy with the name of its version's author.
async fn with_author_name(
    ctx: &Context,
    workspace_id: &str,
    mut detail: PolicyDetail,
) -> ApiResult<PolicyDetail> {
    if let Some(author) = &detail.author {
        let names = ActorNames::lookup(ctx.store.as_ref(), workspace_id, [author.as_str()]).await?;
        detail.author_name = names.get(author);
    }
    Ok(detail)
}

/// Every applied version of a policy, newest first.
#[utoipa::path(get, path = "/v1/policies/{policy_id}/versions", tag = "decisions", params(("policy_id" = String, Path)),
    security(("api_key" = []), ("session" = []), ("access_token" = [])),
    responses((status = 200, body = PolicyVersionList), (status = 404, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn versions(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::PoliciesRead>,
    AppPath(policy_id): AppPath<String>,
) -> ApiResult<Json<PolicyVersionList>> {
    let workspace_id = op.workspace_id;
    // Answers 404 for a policy the workspace does not have.
    sync::policy_detail(&ctx, &workspace_id, &policy_id, None).await?;
    let versions = ctx.store.policy_versions(&workspace_id, &policy_id).await?;
    let names = ActorNames::lookup(
        ctx.store.as_ref(),
        &workspace_id,
        versions.iter().map(|v| v.author.as_str()),
    )
    .await?;
    let items = versions
        .into_iter()
        .map(|v| PolicyVersionItem {
            version: v.version,
            policy_hash: v.hash,
            author_name: names.get(&v.author),
            author: v.author,
            created_at: iso(v.created_at),
        })
        .collect();
    Ok(Json(PolicyVersionList { ok: true, items }))
}

/// One version of a policy.
#[utoipa::path(get, path = "/v1/policies/{policy_id}/versions/{version}", tag = "decisions",
    params(("policy_id" = String, Path), ("version" = i64, Path)),
    security(("api_key" = []), ("session" = []), ("access_token" = [])),
    responses((status = 200, body = PolicyDetail), (status = 404, description = "`unknown_policy`, `unknown_version`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn version(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::PoliciesRead>,
    AppPath((policy_id, version)): AppPath<(String, i64)>,
) -> ApiResult<Json<PolicyDetail>> {
    let workspace_id = op.workspace_id;
    let detail = sync::policy_detail(&ctx, &workspace_id, &policy_id, Some(version)).await?;
    Ok(Json(with_author_name(&ctx, &workspace_id, detail).await?))
}
