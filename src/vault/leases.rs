//! Vault leases, the administrative side: workflow leases issued for an agent by a person, a
//! token or an API key; listing; revoking by id (with the request leases minted from it), by
//! agent and by secret set. The workspace kill switch covers them: while minting is paused no
//! lease is issued (checked in the writing transaction), and a lease issued before a revoke-all
//! counts as revoked from that instant.

use serde_json::json;

use crate::api;
use crate::audit::{self, Actor};
use crate::context::Context;
use crate::domain::{ids, VaultAction};
use crate::secret::{random_base62, sha256_hex};
use crate::store::{Change, LeaseFilter, LeaseRecord, StoreError, VaultOp};
use crate::time::{iso, now_ms};

use super::sets::{set_ref, set_ref_text};
use crate::enforce::{EnforceError, EnforceResult};

/// The id prefix of leases, and of workflow lease tokens.
pub const LEASE: &str = "ls";
pub const WORKFLOW_TOKEN_PREFIX: &str = "vwl_";

const DEFAULT_WORKFLOW_TTL_SECS: i64 = 3_600;
const MAX_WORKFLOW_TTL_SECS: i64 = 86_400;

/// What a lease may be for, as `field` of a request names it: `read` or `proxy` (or an alias,
/// see [`VaultAction`]); `mint_lease` and other words are `invalid_<field>`.
pub fn lease_action(field: &'static str, text: &str) -> EnforceResult<VaultAction> {
    VaultAction::parse_leasable(text).ok_or_else(|| {
        EnforceError::invalid(
            field,
            format!(
                "`{}` is not an action a lease is for: {}",
                text.trim(),
                VaultAction::listed(&VaultAction::LEASABLE)
            ),
        )
    })
}

fn wire(l: &LeaseRecord, all_revoked_at: Option<i64>) -> api::LeaseInfo {
    // A revoke-all revokes every lease issued before it.
    let killed = all_revoked_at.filter(|cutoff| l.created_at < *cutoff);
    api::LeaseInfo {
        lease_id: l.id.clone(),
        kind: l.kind.clone(),
        workflow_lease_id: l.workflow_id.clone(),
        agent_id: l.agent_id.clone(),
        secret_set_id: l.secret_set_id.clone(),
        purpose: l.purpose.clone(),
        actions: VaultAction::names(&l.actions),
        keys: l.keys.clone(),
        uses_left: l.uses_left,
        expires_at: iso(l.expires_at),
        revoked_at: match (l.revoked_at, killed) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
        .map(iso),
        created_at: iso(l.created_at),
        created_by: l.created_by.clone(),
    }
}

/// Issues a workflow lease for an active agent of the workspace on a live secret set.
pub async fn issue_workflow(
    ctx: &Context,
    workspace_id: &str,
    actor: &Actor,
    req: api::WorkflowLeaseRequest,
) -> EnforceResult<api::WorkflowLeaseResponse> {
    let set = super::sets::live_set(ctx, workspace_id, &set_ref(&req.secret_set_id)?).await?;
    let agent = ctx
        .store
        .agent(&req.agent_id)
        .await?
        .filter(|a| a.workspace_id.as_deref() == Some(workspace_id))
        .ok_or_else(|| {
            EnforceError::not_found("unknown_agent", "no such agent in this workspace")
        })?;
    if agent.status != crate::domain::AgentStatus::Active {
        return Err(EnforceError::forbidden(
            "agent_not_active",
            "leases are issued to active agents only",
        ));
    }
    let purpose = req.purpose.trim();
    if purpose.is_empty() {
        return Err(EnforceError::missing("purpose"));
    }
    if purpose.chars().count() > 200 || purpose.chars().any(char::is_control) {
        return Err(EnforceError::invalid(
            "purpose",
            "must be at most 200 printable characters",
        ));
    }
    let mut actions: Vec<VaultAction> = Vec::new();
    for a in &req.actions {
        let action = lease_action("actions", a)?;
        if !actions.contains(&action) {
            actions.push(action);
        }
    }
    if actions.is_empty() {
        return Err(EnforceError::missing("actions"));
    }
    let ttl = req.ttl_seconds.unwrap_or(DEFAULT_WORKFLOW_TTL_SECS);
    if !(1..=MAX_WORKFLOW_TTL_SECS).contains(&ttl) {
        return Err(EnforceError::invalid(
            "ttl_seconds",
            format!("must be between 1 and {MAX_WORKFLOW_TTL_SECS}"),
        ));
    }
    let token = format!("{WORKFLOW_TOKEN_PREFIX}{}", random_base62(43));
    let now = now_ms();
    let lease = LeaseRecord {
        id: ids::new_id(LEASE),
        workspace_id: workspace_id.to_owned(),
        kind: "workflow".into(),
        workflow_id: None,
        agent_id: agent.id.clone(),
        secret_set_id: set.id.clone(),
        purpose: purpose.to_owned(),
        actions,
        keys: None,
        token_hash: sha256_hex(token.as_bytes()),
        uses_left: None,
        expires_at: now + ttl * 1000,
        revoked_at: None,
        created_at: now,
        created_by: actor.label(),
    };
    let event = audit::state_change(
        "vault.lease.minted",
        "mint_workflow_lease",
        Some(workspace_id),
        Some(&agent.id),
        actor,
        json!({
            "lease_id": lease.id, "kind": "workflow", "secret_set_id": set.id, "number": set.number,
            "purpose": lease.purpose, "actions": lease.actions, "expires_at": iso(lease.expires_at),
        }),
    );
    let answer = api::WorkflowLeaseResponse {
        ok: true,
        lease_id: lease.id.clone(),
        workflow_lease_token: token,
        expires_at: iso(lease.expires_at),
    };
    match ctx
        .writer
        .commit(Change::new(VaultOp::CreateLease(Box::new(lease))).audited(event))
        .await
    {
        Ok(_) => Ok(answer),
        Err(StoreError::Conflict(_)) => Err(EnforceError::MintingPaused { reason: None }),
        Err(e) => Err(e.into()),
    }
}

/// The workspace's leases, newest first (at most 200), revoked ones with when.
pub async fn list(
    ctx: &Context,
    workspace_id: &str,
    params: api::LeaseListParams,
) -> EnforceResult<Vec<api::LeaseInfo>> {
    let kind = params.kind.filter(|k| !k.is_empty());
    if kind
        .as_deref()
        .is_some_and(|k| k != "workflow" && k != "request")
    {
        return Err(EnforceError::invalid(
            "kind",
            "must be `workflow` or `request`",
        ));
    }
    let secret_set_id = match params.secret_set_id.as_deref().filter(|s| !s.is_empty()) {
        Some(text) => Some(
            super::sets::any_set(ctx, workspace_id, &set_ref_text(text)?)
                .await?
                .id,
        ),
        None => None,
    };
    let filter = LeaseFilter {
        agent_id: params.agent_id.filter(|a| !a.is_empty()),
        secret_set_id,
        kind,
    };
    let cutoff = ctx.store.kill_switch(workspace_id).await?.all_revoked_at;
    Ok(ctx
        .store
        .vault_leases(workspace_id, &filter, 200)
        .await?
        .iter()
        .map(|l| wire(l, cutoff))
        .collect())
}

/// Revokes one lease (and the request leases minted from it).
pub async fn revoke(
    ctx: &Context,
    workspace_id: &str,
    actor: &Actor,
    lease_id: &str,
) -> EnforceResult<i64> {
    if !ids::has_shape(lease_id, LEASE) {
        return Err(unknown_lease());
    }
    // Read to name the lease's agent and set in the event (the set's vault trail shows it).
    let lease = ctx
        .store
        .vault_lease(workspace_id, lease_id)
        .await?
        .ok_or_else(unknown_lease)?;
    let named = (Some(lease.agent_id), Some(lease.secret_set_id));
    revoke_where(
        ctx,
        workspace_id,
        actor,
        Some(lease_id.to_owned()),
        LeaseFilter::default(),
        named,
    )
    .await
}

/// Revokes every live lease of an agent, of a set, or of both.
pub async fn revoke_matching(
    ctx: &Context,
    workspace_id: &str,
    actor: &Actor,
    req: api::RevokeLeasesRequest,
) -> EnforceResult<i64> {
    let agent_id = req.agent_id.filter(|a| !a.is_empty());
    let secret_set_id = match &req.secret_set_id {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => Some(
            super::sets::any_set(ctx, workspace_id, &set_ref(v)?)
                .await?
                .id,
        ),
    };
    if agent_id.is_none() && secret_set_id.is_none() {
        return Err(EnforceError::missing("agent_id"));
    }
    revoke_where(
        ctx,
        workspace_id,
        actor,
        None,
        LeaseFilter {
            agent_id: agent_id.clone(),
            secret_set_id: secret_set_id.clone(),
            kind: None,
        },
        (agent_id, secret_set_id),
    )
    .await
}

fn unknown_lease() -> EnforceError {
    EnforceError::not_found("unknown_lease", "no such live lease in this workspace")
}

async fn revoke_where(
    ctx: &Context,
    workspace_id: &str,
    actor: &Actor,
    lease_id: Option<String>,
    filter: LeaseFilter,
    (agent_id, secret_set_id): (Option<String>, Option<String>),
) -> EnforceResult<i64> {
    let event = audit::state_change(
        "vault.lease.revoked",
        "revoke_lease",
        Some(workspace_id),
        agent_id.as_deref(),
        actor,
        json!({ "lease_id": lease_id, "secret_set_id": secret_set_id }),
    );
    let change = Change::new(VaultOp::RevokeLeases {
        workspace_id: workspace_id.to_owned(),
        lease_id,
        filter,
        at: now_ms(),
    })
    .audited(event);
    match ctx.writer.commit(change).await {
        Ok(crate::store::Applied::Count(n)) => Ok(n),
        Ok(_) => Ok(0),
        Err(StoreError::NotFound) => Err(unknown_lease()),
        Err(e) => Err(e.into()),
    }
}
