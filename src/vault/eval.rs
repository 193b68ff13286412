//! `POST /v1/vault/policy/eval`: what the vault would decide for an agent's action, a proxy
//! call read as the proxy reads it, decided and audited like any check with nothing consumed.

use serde_json::json;

use crate::api;
use crate::context::Context;
use crate::enforce::{EnforceError, EnforceResult};
use crate::policy::check::AgentCheck;

use super::agent::{judge, Scene, Signer, VaultAction};
use super::leases::lease_action;
use super::proxy::Call;

/// `POST /v1/vault/policy/eval`: the decision, committed and audited like any check, with
/// nothing consumed (a person's approval of the same request is reported, not used up). The
/// agent must hold a grant of the set for the action: the set's details are for its grantees.
pub async fn eval(
    ctx: &Context,
    signer: Signer<'_>,
    req: api::VaultEvalRequest,
) -> EnforceResult<api::DecisionResponse> {
    let workspace_id = signer.workspace_id()?;
    let action = VaultAction::parse(&req.action).ok_or_else(|| {
        EnforceError::invalid(
            "action",
            format!(
                "`{}` is not a vault action: {}",
                req.action.trim(),
                VaultAction::listed(&VaultAction::ALL)
            ),
        )
    })?;
    let scene = Scene::load(ctx, workspace_id, &req.secret_set_id).await?;
    let lease_action = match req.lease_action.as_deref() {
        None => VaultAction::Read,
        Some(a) => lease_action("lease_action", a)?,
    };
    let call = match (action, &req.profile, &req.request) {
        (VaultAction::Proxy, Some(profile), Some(request)) => {
            Some(Call::read(&scene, profile, request)?)
        }
        _ => None,
    };
    // The keys the action would touch: a proxy call's are its profile's.
    let keys = match &call {
        Some(call) => scene.keys(Some(&call.keys()))?,
        None => match &req.keys {
            Some(keys) => scene.keys(Some(keys))?,
            None => Vec::new(),
        },
    };
    let grant = scene.grant(ctx, signer.agent, action, &keys).await?;
    scene.check_claims(req.environment.as_deref(), req.provider.as_deref())?;
    let keys = if keys.is_empty() {
        scene.granted_keys(&[&grant])
    } else {
        keys
    };
    let mut context = match &call {
        Some(call) => call.context(&scene, &keys),
        None => scene.context(&keys),
    };
    if action == VaultAction::MintLease {
        context.insert("lease_action".into(), json!(lease_action.name()));
    }
    judge(ctx, &signer, action, context, AgentCheck::Ask).await
}
