//! `/v1/vault/*`: the vault's administration (secret sets, their versions, grants), for people
//! and their tokens by role. No answer here ever carries a secret value.

use axum::extract::State;
use axum::Json;

use crate::api::AuditListResponse;
use crate::api::{
    CreateGrantRequest, CreateSecretSetRequest, ErrorBody, GrantList, GrantListParams,
    GrantResponse, ImportSecretSetRequest, LeaseList, LeaseListParams, OkResponse,
    RevokeLeasesRequest, RevokedCount, SecretRollbackRequest, SecretSetList, SecretSetListParams,
    SecretSetResponse, SecretVersionList, UpdateSecretSetRequest, VaultAuditParams,
    WorkflowLeaseRequest, WorkflowLeaseResponse,
};
use crate::context::SharedContext;
use crate::error::ApiResult;
use crate::vault::leases;
use crate::vault::sets::{self as vault, Lifecycle};

use super::extract::{AppJson, AppPath, AppQuery};
use super::operator::{needs, Authorized};

fn answer(secret_set: crate::api::SecretSetInfo) -> Json<SecretSetResponse> {
    Json(SecretSetResponse {
        ok: true,
        secret_set,
    })
}

/// Creates a secret set with its entries as version 1 (owner or admin).
#[utoipa::path(post, path = "/v1/vault/secret-sets", tag = "vault", request_body = CreateSecretSetRequest,
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = SecretSetResponse),
        (status = 400, description = "`missing_*`, `invalid_name`, `invalid_entries`, `invalid_profiles`", body = ErrorBody),
        (status = 409, description = "`secret_set_exists`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn create(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::VaultChange>,
    AppJson(req): AppJson<CreateSecretSetRequest>,
) -> ApiResult<Json<SecretSetResponse>> {
    Ok(answer(
        vault::create_set(&ctx, &op.workspace_id, &op.actor(), req).await?,
    ))
}

/// Creates a secret set from dotenv text.
#[utoipa::path(post, path = "/v1/vault/secret-sets/import", tag = "vault", request_body = ImportSecretSetRequest,
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = SecretSetResponse),
        (status = 400, description = "`invalid_dotenv`, ...", body = ErrorBody),
        (status = 409, description = "`secret_set_exists`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn import(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::VaultChange>,
    AppJson(req): AppJson<ImportSecretSetRequest>,
) -> ApiResult<Json<SecretSetResponse>> {
    Ok(answer(
        vault::import_set(&ctx, &op.workspace_id, &op.actor(), req).await?,
    ))
}

/// The workspace's secret sets: names, key names, versions and profiles, never values.
#[utoipa::path(get, path = "/v1/vault/secret-sets", tag = "vault", params(SecretSetListParams),
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = SecretSetList)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn list(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::VaultRead>,
    AppQuery(params): AppQuery<SecretSetListParams>,
) -> ApiResult<Json<SecretSetList>> {
    let items = vault::list_sets(
        &ctx,
        &op.workspace_id,
        params.include_deleted.unwrap_or(false),
    )
    .await?;
    Ok(Json(SecretSetList { ok: true, items }))
}

/// One secret set (by `ss_...` or number), deleted and destroyed ones included.
#[utoipa::path(get, path = "/v1/vault/secret-sets/{secret_set_id}", tag = "vault", params(("secret_set_id" = String, Path)),
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = SecretSetResponse), (status = 404, description = "`unknown_secret_set`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn get(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::VaultRead>,
    AppPath(id): AppPath<String>,
) -> ApiResult<Json<SecretSetResponse>> {
    let set = vault::set_ref_text(&id)?;
    Ok(answer(vault::get_set(&ctx, &op.workspace_id, &set).await?))
}

/// A new version: `entries` (all) or `set`/`unset` (some), `profiles`; `expected_version` for
/// check-and-set.
#[utoipa::path(post, path = "/v1/vault/secret-sets/{secret_set_id}", tag = "vault", params(("secret_set_id" = String, Path)),
    request_body = UpdateSecretSetRequest, security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = SecretSetResponse), (status = 400, body = ErrorBody),
        (status = 404, description = "`unknown_secret_set`", body = ErrorBody),
        (status = 409, description = "`version_conflict`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn update(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::VaultChange>,
    AppPath(id): AppPath<String>,
    AppJson(req): AppJson<UpdateSecretSetRequest>,
) -> ApiResult<Json<SecretSetResponse>> {
    let set = vault::set_ref_text(&id)?;
    Ok(answer(
        vault::update_set(&ctx, &op.workspace_id, &op.actor(), &set, req).await?,
    ))
}

/// The versions kept, newest first (key names, author, time).
#[utoipa::path(get, path = "/v1/vault/secret-sets/{secret_set_id}/versions", tag = "vault", params(("secret_set_id" = String, Path)),
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = SecretVersionList), (status = 404, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn versions(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::VaultRead>,
    AppPath(id): AppPath<String>,
) -> ApiResult<Json<SecretVersionList>> {
    let set = vault::set_ref_text(&id)?;
    let items = vault::versions(&ctx, &op.workspace_id, &set).await?;
    Ok(Json(SecretVersionList { ok: true, items }))
}

/// An earlier version's entries and profiles as the new version.
#[utoipa::path(post, path = "/v1/vault/secret-sets/{secret_set_id}/rollback", tag = "vault", params(("secret_set_id" = String, Path)),
    request_body = SecretRollbackRequest, security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = SecretSetResponse),
        (status = 404, description = "`unknown_secret_set`, `unknown_version`", body = ErrorBody),
        (status = 409, description = "`version_conflict`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn rollback(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::VaultChange>,
    AppPath(id): AppPath<String>,
    AppJson(req): AppJson<SecretRollbackRequest>,
) -> ApiResult<Json<SecretSetResponse>> {
    let set = vault::set_ref_text(&id)?;
    Ok(answer(
        vault::rollback(&ctx, &op.workspace_id, &op.actor(), &set, req).await?,
    ))
}

async fn lifecycle(
    ctx: SharedContext,
    op: Authorized<needs::VaultChange>,
    id: String,
    what: Lifecycle,
) -> ApiResult<Json<SecretSetResponse>> {
    let set = vault::set_ref_text(&id)?;
    Ok(answer(
        vault::lifecycle(&ctx, &op.workspace_id, &op.actor(), &set, what).await?,
    ))
}

/// Soft delete: the set is hidden from lists and cannot be used until undeleted.
#[utoipa::path(post, path = "/v1/vault/secret-sets/{secret_set_id}/delete", tag = "vault", params(("secret_set_id" = String, Path)),
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = SecretSetResponse), (status = 404, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn delete(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::VaultChange>,
    AppPath(id): AppPath<String>,
) -> ApiResult<Json<SecretSetResponse>> {
    lifecycle(ctx, op, id, Lifecycle::Delete).await
}

/// Undoes a soft delete.
#[utoipa::path(post, path = "/v1/vault/secret-sets/{secret_set_id}/undelete", tag = "vault", params(("secret_set_id" = String, Path)),
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = SecretSetResponse), (status = 404, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn undelete(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::VaultChange>,
    AppPath(id): AppPath<String>,
) -> ApiResult<Json<SecretSetResponse>> {
    lifecycle(ctx, op, id, Lifecycle::Undelete).await
}

/// Forgets the set's values for good (every version and its data key) and revokes its grants.
#[utoipa::path(post, path = "/v1/vault/secret-sets/{secret_set_id}/destroy", tag = "vault", params(("secret_set_id" = String, Path)),
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = SecretSetResponse), (status = 404, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn destroy(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::VaultChange>,
    AppPath(id): AppPath<String>,
) -> ApiResult<Json<SecretSetResponse>> {
    lifecycle(ctx, op, id, Lifecycle::Destroy).await
}

/// Grants an agent or an agent group the use of a secret set.
#[utoipa::path(post, path = "/v1/vault/grants", tag = "vault", request_body = CreateGrantRequest,
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = GrantResponse),
        (status = 400, description = "`missing_agent_id`, `invalid_allowed_keys`, `invalid_allowed_actions`, `invalid_expires_at`", body = ErrorBody),
        (status = 404, description = "`unknown_secret_set`, `unknown_agent`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn create_grant(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::VaultChange>,
    AppJson(req): AppJson<CreateGrantRequest>,
) -> ApiResult<Json<GrantResponse>> {
    let grant = vault::create_grant(&ctx, &op.workspace_id, &op.actor(), req).await?;
    Ok(Json(GrantResponse { ok: true, grant }))
}

/// The workspace's grants, newest first (revoked ones included).
#[utoipa::path(get, path = "/v1/vault/grants", tag = "vault", params(GrantListParams),
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = GrantList), (status = 404, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn list_grants(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::VaultRead>,
    AppQuery(params): AppQuery<GrantListParams>,
) -> ApiResult<Json<GrantList>> {
    let items = vault::list_grants(&ctx, &op.workspace_id, params.secret_set_id.as_deref()).await?;
    Ok(Json(GrantList { ok: true, items }))
}

/// Revokes a grant; it stops allowing anything at once.
#[utoipa::path(post, path = "/v1/vault/grants/{grant_id}/revoke", tag = "vault", params(("grant_id" = String, Path)),
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = OkResponse), (status = 404, description = "`unknown_grant`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn revoke_grant(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::VaultChange>,
    AppPath(grant_id): AppPath<String>,
) -> ApiResult<Json<OkResponse>> {
    vault::revoke_grant(&ctx, &op.workspace_id, &op.actor(), &grant_id).await?;
    Ok(Json(OkResponse { ok: true }))
}

/// Issues a workflow lease for an agent (person or token by role, or an API key with the
/// `vault:lease` scope). The token is shown once.
#[utoipa::path(post, path = "/v1/vault/leases/workflow", tag = "vault", request_body = WorkflowLeaseRequest,
    security(("api_key" = []), ("session" = []), ("access_token" = [])),
    responses((status = 200, body = WorkflowLeaseResponse),
        (status = 400, description = "`missing_purpose`, `invalid_actions`, `invalid_ttl_seconds`, ...", body = ErrorBody),
        (status = 403, description = "`minting_paused`, `agent_not_active`", body = ErrorBody),
        (status = 404, description = "`unknown_secret_set`, `unknown_agent`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn issue_workflow_lease(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::VaultLeases>,
    AppJson(req): AppJson<WorkflowLeaseRequest>,
) -> ApiResult<Json<WorkflowLeaseResponse>> {
    Ok(Json(
        leases::issue_workflow(&ctx, &op.workspace_id, &op.actor(), req).await?,
    ))
}

/// The workspace's leases, newest first (at most 200); never their tokens.
#[utoipa::path(get, path = "/v1/vault/leases", tag = "vault", params(LeaseListParams),
    security(("api_key" = []), ("session" = []), ("access_token" = [])),
    responses((status = 200, body = LeaseList), (status = 400, body = ErrorBody),
        (status = 404, description = "`unknown_secret_set`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn list_leases(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::VaultLeasesRead>,
    AppQuery(params): AppQuery<LeaseListParams>,
) -> ApiResult<Json<LeaseList>> {
    let items = leases::list(&ctx, &op.workspace_id, params).await?;
    Ok(Json(LeaseList { ok: true, items }))
}

/// Revokes a lease, and the request leases minted from a workflow lease.
#[utoipa::path(post, path = "/v1/vault/leases/{lease_id}/revoke", tag = "vault", params(("lease_id" = String, Path)),
    security(("api_key" = []), ("session" = []), ("access_token" = [])),
    responses((status = 200, body = RevokedCount), (status = 404, description = "`unknown_lease`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn revoke_lease(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::VaultLeases>,
    AppPath(lease_id): AppPath<String>,
) -> ApiResult<Json<RevokedCount>> {
    let revoked = leases::revoke(&ctx, &op.workspace_id, &op.actor(), &lease_id).await?;
    Ok(Json(RevokedCount { ok: true, revoked }))
}

/// Revokes every live lease of an agent, of a secret set, or of both.
#[utoipa::path(post, path = "/v1/vault/leases/revoke", tag = "vault", request_body = RevokeLeasesRequest,
    security(("api_key" = []), ("session" = []), ("access_token" = [])),
    responses((status = 200, body = RevokedCount), (status = 400, description = "`missing_agent_id`: neither given", body = ErrorBody),
        (status = 404, description = "`unknown_secret_set`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn revoke_leases(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::VaultLeases>,
    AppJson(req): AppJson<RevokeLeasesRequest>,
) -> ApiResult<Json<RevokedCount>> {
    let revoked = leases::revoke_matching(&ctx, &op.workspace_id, &op.actor(), req).await?;
    Ok(Json(RevokedCount { ok: true, revoked }))
}

/// The vault's audit trail (of one set, or of all): `vault.*` events, newest first, with a
/// cursor. The same events are in the workspace's audit trail.
#[utoipa::path(get, path = "/v1/vault/audit", tag = "vault", params(VaultAuditParams),
    security(("session" = []), ("access_token" = [])),
    responses((status = 200, body = AuditListResponse),
        (status = 400, description = "`invalid_limit`, `invalid_cursor`", body = ErrorBody),
        (status = 404, description = "`unknown_secret_set`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn audit(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::VaultRead>,
    AppQuery(params): AppQuery<VaultAuditParams>,
) -> ApiResult<Json<AuditListResponse>> {
    let limit = super::page_limit(params.limit, 50, 200)?;
    let mut rows = vault::audit_of(
        &ctx,
        &op.workspace_id,
        params.secret_set_id.as_deref(),
        super::page_cursor(params.cursor.as_deref())?,
        limit + 1,
    )
    .await?;
    let next_cursor = super::next_cursor(&mut rows, limit, |e| (e.created_at, e.id.clone()));
    Ok(Json(AuditListResponse {
        ok: true,
        items: rows.into_iter().map(crate::audit::to_wire).collect(),
        next_cursor,
    }))
}
