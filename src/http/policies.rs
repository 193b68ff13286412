//! `POST /v1/check`, policy sync (`/v1/policies/sync`, alias `/v1/sync`) and the policies API.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::Value;

use crate::api::{
    CheckRequest, DecisionResponse, ErrorBody, PolicyDetail, PolicyListResponse, PolicySummary,
    PolicyVersionItem, PolicyVersionList, SyncRequest, SyncResponse,
};
use crate::cache::DEFAULT_POLICY_ID;
use crate::context::SharedContext;
use crate::error::ApiResult;
use crate::identity::accounts::Principal;
use crate::policy::{check, sync};
use crate::time::iso;

use super::extract::{parse_json, AppJson, AppPath, Deciding, RawBody};

/// Decides `allow`, `challenge` or `deny` for an action of an agent under a policy. All three
/// are 200; the audit event is durable before the answer.
#[utoipa::path(post, path = "/v1/check", tag = "decisions", request_body = CheckRequest, security(("api_key" = [])),
    responses((status = 200, body = DecisionResponse), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, description = "`unknown_agent`, `unknown_policy`", body = ErrorBody)))]
pub async fn check(
    State(ctx): State<SharedContext>,
    Deciding(caller): Deciding,
    AppJson(req): AppJson<CheckRequest>,
) -> ApiResult<Json<DecisionResponse>> {
    Ok(Json(
        check::check(&ctx, &caller.access, &caller.actor(), req).await?,
    ))
}

async fn run_sync(
    ctx: SharedContext,
    principal: Principal,
    headers: HeaderMap,
    raw: RawBody,
) -> ApiResult<Response> {
    // Parsed as any JSON body, and kept as text: the spec inside is read again strictly (a
    // duplicate key is an error, not a silent overwrite).
    let body: Value = parse_json(&raw.0)?;
    let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok());
    let answer = sync::sync(&ctx, &principal, key, &body, &raw.0).await?;
    Ok((answer.status, Json(answer.body)).into_response())
}

/// Dry-runs or applies a policy spec. Session or personal access token of a workspace owner or
/// admin; an API key is refused.
#[utoipa::path(post, path = "/v1/policies/sync", tag = "decisions", request_body = SyncRequest,
    params(("Idempotency-Key" = Option<String>, Header, description = "the first response is replayed for 24 h; another body with the key is 422 `idempotency_key_reused`")),
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = SyncResponse),
        (status = 409, description = "`sync_conflict` with `current_policy_hash`", body = ErrorBody),
        (status = 422, description = "`invalid_spec` with `errors: [{path, message}]`, or `idempotency_key_reused`", body = ErrorBody)))]
pub async fn policies_sync(
    State(ctx): State<SharedContext>,
    headers: HeaderMap,
    principal: Principal,
    body: RawBody,
) -> ApiResult<Response> {
    run_sync(ctx, principal, headers, body).await
}

/// Same as `POST /v1/policies/sync`.
#[utoipa::path(post, path = "/v1/sync", tag = "decisions", request_body = SyncRequest,
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = SyncResponse), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn sync_alias(
    State(ctx): State<SharedContext>,
    headers: HeaderMap,
    principal: Principal,
    body: RawBody,
) -> ApiResult<Response> {
    run_sync(ctx, principal, headers, body).await
}

/// The active workspace's policies (`pol_default` always among them).
#[utoipa::path(get, path = "/v1/policies", tag = "decisions", security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = PolicyListResponse), (status = 401, body = ErrorBody)))]
pub async fn list(
    State(ctx): State<SharedContext>,
    principal: Principal,
) -> ApiResult<Json<PolicyListResponse>> {
    let (workspace_id, _) = principal.membership()?;
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
        let d = crate::cache::default_policy()?;
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
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = PolicyDetail), (status = 404, description = "`unknown_policy`", body = ErrorBody)))]
pub async fn get(
    State(ctx): State<SharedContext>,
    principal: Principal,
    AppPath(policy_id): AppPath<String>,
) -> ApiResult<Json<PolicyDetail>> {
    let (workspace_id, _) = principal.membership()?;
    Ok(Json(
        sync::policy_detail(&ctx, &workspace_id, &policy_id, None).await?,
    ))
}

/// Every applied version of a policy, newest first.
#[utoipa::path(get, path = "/v1/policies/{policy_id}/versions", tag = "decisions", params(("policy_id" = String, Path)),
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = PolicyVersionList), (status = 404, body = ErrorBody)))]
pub async fn versions(
    State(ctx): State<SharedContext>,
    principal: Principal,
    AppPath(policy_id): AppPath<String>,
) -> ApiResult<Json<PolicyVersionList>> {
    let (workspace_id, _) = principal.membership()?;
    // Answers 404 for a policy the workspace does not have.
    sync::policy_detail(&ctx, &workspace_id, &policy_id, None).await?;
    let items = ctx
        .store
        .policy_versions(&workspace_id, &policy_id)
        .await?
        .into_iter()
        .map(|v| PolicyVersionItem {
            version: v.version,
            policy_hash: v.hash,
            author: v.author,
            created_at: iso(v.created_at),
        })
        .collect();
    Ok(Json(PolicyVersionList { ok: true, items }))
}

/// One version of a policy.
#[utoipa::path(get, path = "/v1/policies/{policy_id}/versions/{version}", tag = "decisions",
    params(("policy_id" = String, Path), ("version" = i64, Path)),
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = PolicyDetail), (status = 404, description = "`unknown_policy`, `unknown_version`", body = ErrorBody)))]
pub async fn version(
    State(ctx): State<SharedContext>,
    principal: Principal,
    AppPath((policy_id, version)): AppPath<(String, i64)>,
) -> ApiResult<Json<PolicyDetail>> {
    let (workspace_id, _) = principal.membership()?;
    Ok(Json(
        sync::policy_detail(&ctx, &workspace_id, &policy_id, Some(version)).await?,
    ))
}
