//! `/v1/agents/*`: registration, attestation, claim codes, listing and admin status changes.

use crate::http::wire::Peer;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, Method, Uri};
use axum::Json;

use crate::api::{
    AgentListParams, AgentListResponse, AgentResponse, AgentStatusRequest, AttestRequest,
    AttestResponse, ClaimCodeResponse, ErrorBody, RegisterRequest, RegisterResponse,
};
use crate::audit::Actor;
use crate::context::SharedContext;
use crate::domain::access::Need;
use crate::domain::{AgentStatus, RiskTier};
use crate::error::{ApiError, ApiResult};
use crate::identity::accounts::enforce_rate_limit;
use crate::identity::agents::{self, StatusAction};
use crate::store::AgentQuery;
use crate::time::now_ms;

use super::extract::{presented_api_key, AppJson, AppPath, AppQuery, Caller, SignedRequest};
use super::operator::{needs, token_person, Authorized};

/// Registers an agent by its Ed25519 public key and issues an attestation challenge. With a
/// workspace API key the agent joins that workspace; without one it is created unclaimed.
/// A person's token (owner or admin) registers into their workspace as a key does.
#[utoipa::path(post, path = "/v1/agents/register", tag = "agents", request_body = RegisterRequest,
    security((), ("api_key" = []), ("access_token" = [])),
    responses((status = 200, body = RegisterResponse), (status = 400, body = ErrorBody),
        (status = 401, description = "`invalid_api_key` (a key was sent but is not valid)", body = ErrorBody),
        (status = 403, description = "`agent_not_active`: the key belongs to a revoked agent", body = ErrorBody),
        (status = 429, description = "`rate_limited`: too many registrations without a key from this address", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn register(
    State(ctx): State<SharedContext>,
    ConnectInfo(Peer(peer)): ConnectInfo<Peer>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    AppJson(req): AppJson<RegisterRequest>,
) -> ApiResult<Json<RegisterResponse>> {
    if let Some(person) = token_person(&ctx, &method, &uri, &headers, Need::AgentsChange).await {
        let (workspace_id, person) = person?;
        return Ok(Json(
            agents::register(&ctx, Some(&workspace_id), &person.actor(), &req).await?,
        ));
    }
    // The key is optional here, but a key that is sent must be valid.
    let caller = match presented_api_key(&headers) {
        None | Some("") => None,
        Some(_) => Some(super::extract::authenticate(&ctx, &headers).await?),
    };
    if let Some(caller) = &caller {
        caller.require(Need::AgentsChange)?;
    }
    let actor = caller.as_ref().map_or(Actor::System, Caller::actor);
    let workspace = caller.as_ref().map(|c| c.workspace_id.as_str());
    if caller.is_none() {
        // Registration without a key is open to anyone: bound it per client address.
        enforce_rate_limit(
            &ctx,
            format!("register:ip:{}", peer.ip()),
            600_000,
            ctx.config.register_limit_per_ip,
        )
        .await?;
    }
    Ok(Json(agents::register(&ctx, workspace, &actor, &req).await?))
}

/// Proves key ownership with the signature over the decoded challenge bytes.
#[utoipa::path(post, path = "/v1/agents/attest", tag = "agents", request_body = AttestRequest,
    responses((status = 200, body = AttestResponse), (status = 400, body = ErrorBody),
        (status = 401, description = "`invalid_signature`", body = ErrorBody),
        (status = 403, description = "`agent_not_active`", body = ErrorBody),
        (status = 404, description = "`unknown_challenge`", body = ErrorBody),
        (status = 409, description = "`challenge_used`", body = ErrorBody),
        (status = 410, description = "`challenge_expired`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn attest(
    State(ctx): State<SharedContext>,
    AppJson(req): AppJson<AttestRequest>,
) -> ApiResult<Json<AttestResponse>> {
    Ok(Json(agents::attest(&ctx, req).await?))
}

/// An unclaimed agent asks (signed) for a single-use code a workspace admin uses to claim it.
#[utoipa::path(post, path = "/v1/agents/{agent_id}/claim-code", tag = "agents",
    params(("agent_id" = String, Path, description = "must equal `X-Service-Agent-Id`")),
    security(("agent_signature" = [])),
    responses((status = 200, body = ClaimCodeResponse),
        (status = 401, description = "signature errors, `agent_header_mismatch`", body = ErrorBody),
        (status = 403, description = "`agent_not_active`", body = ErrorBody),
        (status = 404, description = "`unknown_agent`", body = ErrorBody),
        (status = 409, description = "`agent_already_claimed`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn claim_code(
    State(ctx): State<SharedContext>,
    AppPath(agent_id): AppPath<String>,
    signed: SignedRequest,
) -> ApiResult<Json<ClaimCodeResponse>> {
    if agent_id != signed.agent.id {
        return Err(ApiError::unauthorized(
            "agent_header_mismatch",
            "the agent in the path differs from `X-Service-Agent-Id`",
        ));
    }
    Ok(Json(
        agents::claim_code(&ctx, &signed.agent, signed.nonce).await?,
    ))
}

/// Lists the workspace's agents, newest first.
#[utoipa::path(get, path = "/v1/agents", tag = "agents", params(AgentListParams), security(("api_key" = []), ("session" = []), ("access_token" = [])),
    responses((status = 200, body = AgentListResponse), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn list(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::AgentsRead>,
    AppQuery(params): AppQuery<AgentListParams>,
) -> ApiResult<Json<AgentListResponse>> {
    let status = match params.status.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(s) => Some(AgentStatus::parse(s).ok_or_else(|| {
            ApiError::invalid(
                "status",
                "must be `pending`, `active`, `suspended` or `revoked`",
            )
        })?),
    };
    let risk_tier =
        match params.risk_tier.as_deref().filter(|s| !s.is_empty()) {
            None => None,
            Some(t) => Some(RiskTier::parse(t).ok_or_else(|| {
                ApiError::invalid("risk_tier", "must be `low`, `medium` or `high`")
            })?),
        };
    let search = params.q.filter(|q| !q.is_empty());
    if search.as_ref().is_some_and(|q| q.chars().count() > 200) {
        return Err(ApiError::invalid("q", "must be at most 200 characters"));
    }
    let limit = super::page_limit(params.limit, 50, 200)?;
    let last_seen = match params.seen.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(seen) => Some(agents::last_seen(seen, now_ms())?),
    };
    let group = match params.group.as_deref().filter(|g| !g.is_empty()) {
        None => None,
        Some(group) => Some(agents::group_members(&ctx, &op.workspace_id, group).await?),
    };
    let query = AgentQuery {
        workspace_id: op.workspace_id,
        status,
        name: params.name.filter(|n| !n.is_empty()),
        risk_tier,
        search,
        label: params.label.filter(|l| !l.is_empty()),
        group,
        last_seen,
        after: super::page_cursor(params.cursor.as_deref())?,
        by_id: None,
        limit: limit + 1,
    };
    let mut rows = agents::list(&ctx, &query).await?;
    let next_cursor = super::next_cursor(&mut rows, limit, |a| (a.created_at, a.id.clone()));
    Ok(Json(AgentListResponse {
        ok: true,
        items: rows.into_iter().map(agents::to_wire).collect(),
        next_cursor,
    }))
}

/// One agent of the workspace.
#[utoipa::path(get, path = "/v1/agents/{agent_id}", tag = "agents", params(("agent_id" = String, Path)),
    security(("api_key" = []), ("session" = []), ("access_token" = [])),
    responses((status = 200, body = AgentResponse), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn get(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::AgentsRead>,
    AppPath(agent_id): AppPath<String>,
) -> ApiResult<Json<AgentResponse>> {
    let agent_id = agents::agent_id(&agent_id)?;
    let agent = agents::agent_in_workspace(&ctx, &op.workspace_id, &agent_id).await?;
    Ok(Json(AgentResponse {
        ok: true,
        agent: agents::to_wire(agent),
    }))
}

async fn change_status(
    ctx: SharedContext,
    op: Authorized<needs::AgentsChange>,
    agent_id: String,
    req: AgentStatusRequest,
    action: StatusAction,
) -> ApiResult<Json<AgentResponse>> {
    let reason = agents::StatusReason::parse(req.reason)?;
    let agent = agents::set_status(
        &ctx,
        &op.workspace_id,
        &agents::agent_id(&agent_id)?,
        action,
        reason,
        &op.actor(),
    )
    .await?;
    Ok(Json(AgentResponse { ok: true, agent }))
}

/// Suspends an agent: its signed requests fail with `agent_not_active` until resumed.
#[utoipa::path(post, path = "/v1/agents/{agent_id}/suspend", tag = "agents", params(("agent_id" = String, Path)),
    request_body(content = AgentStatusRequest, description = "optional"), security(("api_key" = []), ("session" = []), ("access_token" = [])),
    responses((status = 200, body = AgentResponse), (status = 400, description = "`invalid_reason`", body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "`invalid_status_transition`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn suspend(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::AgentsChange>,
    AppPath(agent_id): AppPath<String>,
    AppJson(req): AppJson<AgentStatusRequest>,
) -> ApiResult<Json<AgentResponse>> {
    change_status(ctx, op, agent_id, req, StatusAction::Suspend).await
}

/// Resumes a suspended agent (back to `active`, or `pending` if it never attested).
#[utoipa::path(post, path = "/v1/agents/{agent_id}/resume", tag = "agents", params(("agent_id" = String, Path)),
    request_body(content = AgentStatusRequest, description = "optional"), security(("api_key" = []), ("session" = []), ("access_token" = [])),
    responses((status = 200, body = AgentResponse), (status = 400, description = "`invalid_reason`", body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "`invalid_status_transition`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn resume(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::AgentsChange>,
    AppPath(agent_id): AppPath<String>,
    AppJson(req): AppJson<AgentStatusRequest>,
) -> ApiResult<Json<AgentResponse>> {
    change_status(ctx, op, agent_id, req, StatusAction::Resume).await
}

/// Revokes an agent for good.
#[utoipa::path(post, path = "/v1/agents/{agent_id}/revoke", tag = "agents", params(("agent_id" = String, Path)),
    request_body(content = AgentStatusRequest, description = "optional"), security(("api_key" = []), ("session" = []), ("access_token" = [])),
    responses((status = 200, body = AgentResponse), (status = 400, description = "`invalid_reason`", body = ErrorBody), (status = 404, body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn revoke(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::AgentsChange>,
    AppPath(agent_id): AppPath<String>,
    AppJson(req): AppJson<AgentStatusRequest>,
) -> ApiResult<Json<AgentResponse>> {
    change_status(ctx, op, agent_id, req, StatusAction::Revoke).await
}

/// Approves a pending agent that has not attested (an admin vouches for it): it becomes active.
#[utoipa::path(post, path = "/v1/agents/{agent_id}/approve", tag = "agents", params(("agent_id" = String, Path)),
    request_body(content = AgentStatusRequest, description = "optional"), security(("api_key" = []), ("session" = []), ("access_token" = [])),
    responses((status = 200, body = AgentResponse), (status = 400, description = "`invalid_reason`", body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "`invalid_status_transition`", body = ErrorBody)))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn approve(
    State(ctx): State<SharedContext>,
    op: Authorized<needs::AgentsChange>,
    AppPath(agent_id): AppPath<String>,
    AppJson(req): AppJson<AgentStatusRequest>,
) -> ApiResult<Json<AgentResponse>> {
    change_status(ctx, op, agent_id, req, StatusAction::Approve).await
}
