//! `/v1/workspace/api-keys`: the active workspace's API keys.

use axum::extract::State;
use axum::Json;

use crate::api::{
    ApiKeyListResponse, CreateApiKeyRequest, CreateApiKeyResponse, ErrorBody, OkResponse,
};
use crate::context::SharedContext;
use crate::domain::access::Need;
use crate::error::ApiResult;
use crate::identity::accounts::{self, Principal};

use super::extract::{AppJson, AppPath};
use super::operator::person_requires;

/// The active workspace's API keys (never the keys themselves).
#[utoipa::path(get, path = "/v1/workspace/api-keys", tag = "workspaces", security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = ApiKeyListResponse), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn list_api_keys(
    State(ctx): State<SharedContext>,
    principal: Principal,
) -> ApiResult<Json<ApiKeyListResponse>> {
    person_requires(&principal, Need::WorkspaceRead)?;
    let (workspace_id, _) = principal.membership()?;
    let keys = ctx.store.api_keys(&workspace_id).await?;
    // Who made each key, by email, in one lookup.
    let makers: Vec<String> = keys
        .iter()
        .filter_map(|k| k.created_by.as_ref().map(|u| format!("user:{u}")))
        .collect();
    let names = crate::audit::names::ActorNames::lookup(
        ctx.store.as_ref(),
        &workspace_id,
        makers.iter().map(String::as_str),
    )
    .await?;
    let items = keys
        .iter()
        .map(|k| {
            let mut wire = accounts::api_key_wire(k);
            wire.created_by_name = k
                .created_by
                .as_ref()
                .and_then(|u| names.get(&format!("user:{u}")));
            wire
        })
        .collect();
    Ok(Json(ApiKeyListResponse { ok: true, items }))
}

/// Creates an API key for the active workspace (owners and admins); the key is shown once.
#[utoipa::path(post, path = "/v1/workspace/api-keys", tag = "workspaces", request_body = CreateApiKeyRequest,
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = CreateApiKeyResponse), (status = 403, description = "`insufficient_role`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn create_api_key(
    State(ctx): State<SharedContext>,
    principal: Principal,
    AppJson(req): AppJson<CreateApiKeyRequest>,
) -> ApiResult<Json<CreateApiKeyResponse>> {
    person_requires(&principal, Need::WorkspaceChange)?;
    Ok(Json(accounts::create_api_key(&ctx, &principal, req).await?))
}

/// Revokes an API key of the active workspace (owners and admins); it stops working at once.
#[utoipa::path(post, path = "/v1/workspace/api-keys/{key_id}/revoke", tag = "workspaces", params(("key_id" = String, Path)),
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = OkResponse), (status = 403, body = ErrorBody), (status = 404, description = "`unknown_api_key`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn revoke_api_key(
    State(ctx): State<SharedContext>,
    principal: Principal,
    AppPath(key_id): AppPath<String>,
) -> ApiResult<Json<OkResponse>> {
    person_requires(&principal, Need::WorkspaceChange)?;
    accounts::revoke_api_key(&ctx, &principal, &key_id).await?;
    Ok(Json(OkResponse { ok: true }))
}
