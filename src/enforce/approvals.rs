//! Approvals: a `challenge` decision waits for a human. The approval link (one-time token,
//! stored hashed) shows what is asked and takes one decision; the backend polls the policy
//! challenge; a re-check of the same agent, action and request fingerprint after an approval
//! answers `allow` once, and after a deny answers `deny`.

use serde_json::json;

use crate::api;
use crate::audit::{self, Actor};
use crate::context::Context;
use crate::domain::ChallengeStatus;
use crate::identity::accounts::Principal;
use crate::secret::sha256_hex;
use crate::store::{
    AccountOp, AuditOp, ChallengeQuery, Change, Cursor, Op, PolicyChallenge, PolicyOp, Retention,
    StoreError,
};
use crate::time::{iso, now_ms};

use super::{EnforceError, EnforceResult};

/// The status as callers see it: a pending challenge past its expiry is `expired`.
pub fn effective_status(c: &PolicyChallenge, now: i64) -> ChallengeStatus {
    c.status.at(c.expires_at, now)
}

pub fn to_wire(c: &PolicyChallenge, now: i64) -> api::PolicyChallengeInfo {
    api::PolicyChallengeInfo {
        challenge_id: c.id.clone(),
        status: effective_status(c, now).as_str().to_owned(),
        agent_id: c.agent_id.clone(),
        action: c.action.clone(),
        policy_id: c.policy_id.clone(),
        reasons: c.reasons.clone(),
        reason_codes: c.reason_codes.clone(),
        summary: c.summary.clone(),
        trace_id: c.trace_id.clone(),
        created_at: iso(c.created_at),
        expires_at: iso(c.expires_at),
        decided_at: c.decided_at.map(iso),
        decided_by: c.decided_by.clone(),
        used: c.consumed_at.is_some(),
    }
}

fn unknown_link() -> EnforceError {
    EnforceError::not_found("unknown_approval_link", "this approval link is not valid")
}

/// The challenge behind an approval link token.
pub async fn by_token(ctx: &Context, token: &str) -> EnforceResult<PolicyChallenge> {
    if !token.starts_with("apr_") || token.len() > 100 {
        return Err(unknown_link());
    }
    ctx.store
        .policy_challenge_by_token(&sha256_hex(token.as_bytes()))
        .await?
        .ok_or_else(unknown_link)
}

/// Records the human's decision (`approve` or `deny`) taken through the link.
pub async fn decide(
    ctx: &Context,
    token: &str,
    decision: &str,
    approver: Option<&Principal>,
) -> EnforceResult<api::PolicyChallengeInfo> {
    let actor = approver.map_or(Actor::ApprovalLink, Principal::actor);
    let status = parse_decision(decision)?;
    let challenge = by_token(ctx, token).await?;
    if ctx
        .store
        .require_member_approval(&challenge.workspace_id)
        .await?
    {
        // The workspace wants more than possession of the link.
        let Some(p) = approver else {
            return Err(EnforceError::unauthenticated(
                "login_required",
                "this workspace requires approvers to be logged in as members",
            ));
        };
        if ctx
            .store
            .role_in(&challenge.workspace_id, &p.user.id)
            .await?
            .is_none()
        {
            return Err(crate::identity::accounts::not_a_member().into());
        }
    }
    record_decision(ctx, challenge, status, decision, None, &actor).await
}

/// `approve` or `deny`.
fn parse_decision(decision: &str) -> EnforceResult<ChallengeStatus> {
    match decision {
        "approve" => Ok(ChallengeStatus::Approved),
        "deny" => Ok(ChallengeStatus::Denied),
        "" => Err(EnforceError::missing("decision")),
        _ => Err(EnforceError::invalid(
            "decision",
            "must be `approve` or `deny`",
        )),
    }
}

/// At most this many characters of an approver's reason are kept.
const MAX_REASON_CHARS: usize = 500;

/// Records the decision of an approver acting by role (`POST /v1/policy-challenges/{id}/decide`,
/// and the console's approvals page) on a challenge of `workspace_id`; `reason`, if given, is
/// kept in the audit event's details.
pub async fn decide_by_id(
    ctx: &Context,
    workspace_id: &str,
    id: &str,
    decision: &str,
    reason: Option<&str>,
    actor: &Actor,
) -> EnforceResult<api::PolicyChallengeInfo> {
    let status = parse_decision(decision)?;
    let reason = reason.map(str::trim).filter(|r| !r.is_empty());
    if reason.is_some_and(|r| r.chars().count() > MAX_REASON_CHARS) {
        return Err(EnforceError::invalid(
            "reason",
            "must be at most 500 characters",
        ));
    }
    let challenge = in_workspace(ctx, workspace_id, id).await?;
    record_decision(ctx, challenge, status, decision, reason, actor).await
}

/// Records a decision on a challenge the caller may decide; the audit event names `actor`.
async fn record_decision(
    ctx: &Context,
    challenge: PolicyChallenge,
    status: ChallengeStatus,
    decision: &str,
    reason: Option<&str>,
    actor: &Actor,
) -> EnforceResult<api::PolicyChallengeInfo> {
    let by = actor.label();
    let now = now_ms();
    let decided = || {
        EnforceError::conflict(
            "challenge_already_decided",
            "this challenge was already decided",
        )
    };
    match effective_status(&challenge, now) {
        ChallengeStatus::Pending => {}
        ChallengeStatus::Expired => {
            return Err(EnforceError::gone(
                "challenge_expired",
                "this approval link expired; the agent must ask again",
            ))
        }
        _ => return Err(decided()),
    }
    let mut details = json!({ "challenge_id": challenge.id, "action": challenge.action });
    if let Some(reason) = reason {
        details["reason"] = json!(reason);
    }
    let mut event = audit::state_change(
        &format!("approval.{}", status.as_str()),
        decision,
        Some(&challenge.workspace_id),
        Some(&challenge.agent_id),
        actor,
        details,
    );
    event.policy_id = Some(challenge.policy_id.clone());
    event.trace_id = Some(challenge.trace_id.clone());
    event.decision = Some(
        if status == ChallengeStatus::Approved {
            "allow"
        } else {
            "deny"
        }
        .into(),
    );
    let change = Change::new(PolicyOp::DecideChallenge {
        id: challenge.id.clone(),
        status,
        by,
        at: now,
    })
    .audited(event);
    match ctx.writer.commit(change).await {
        Ok(_) => {}
        Err(StoreError::Conflict(_)) => return Err(decided()),
        Err(e) => return Err(e.into()),
    }
    let updated = ctx
        .store
        .policy_challenge(&challenge.id)
        .await?
        .unwrap_or(challenge);
    Ok(to_wire(&updated, now))
}

/// A challenge of `workspace_id` by id (404 `unknown_challenge` for another workspace's).
async fn in_workspace(
    ctx: &Context,
    workspace_id: &str,
    id: &str,
) -> EnforceResult<PolicyChallenge> {
    let unknown = || {
        EnforceError::not_found(
            "unknown_challenge",
            "no such policy challenge in this workspace",
        )
    };
    if !crate::domain::ids::has_shape(id, "pch") {
        return Err(unknown());
    }
    let challenge = ctx.store.policy_challenge(id).await?.ok_or_else(unknown)?;
    if challenge.workspace_id != workspace_id {
        return Err(unknown());
    }
    Ok(challenge)
}

/// The policy challenge for a backend that polls (scoped to the caller's workspace).
pub async fn status(
    ctx: &Context,
    workspace_id: &str,
    id: &str,
) -> EnforceResult<api::PolicyChallengeInfo> {
    let challenge = in_workspace(ctx, workspace_id, id).await?;
    Ok(to_wire(&challenge, now_ms()))
}

/// The workspace's challenges, newest first: `status` (effective: `pending`, `approved`,
/// `denied`, `expired`) and `agent_id` filter; `limit` rows after `after`, plus one to tell
/// whether there is a next page.
pub async fn list(
    ctx: &Context,
    workspace_id: &str,
    status: Option<&str>,
    agent_id: Option<&str>,
    after: Option<Cursor>,
    limit: i64,
) -> EnforceResult<Vec<api::PolicyChallengeInfo>> {
    let status = match status.filter(|s| !s.is_empty()) {
        None => None,
        Some(s) => Some(ChallengeStatus::parse(s).ok_or_else(|| {
            EnforceError::invalid(
                "status",
                "must be `pending`, `approved`, `denied` or `expired`",
            )
        })?),
    };
    let now = now_ms();
    let rows = ctx
        .store
        .policy_challenges(&ChallengeQuery {
            workspace_id: workspace_id.to_owned(),
            status,
            decided: false,
            agent_id: agent_id.filter(|a| !a.is_empty()).map(str::to_owned),
            now,
            after,
            limit,
        })
        .await?;
    Ok(rows.iter().map(|c| to_wire(c, now)).collect())
}

/// The workspace's decided challenges (approved or denied), newest first: `limit` rows after
/// `after` (the console's history).
pub async fn history(
    ctx: &Context,
    workspace_id: &str,
    after: Option<Cursor>,
    limit: i64,
) -> EnforceResult<Vec<api::PolicyChallengeInfo>> {
    let now = now_ms();
    let rows = ctx
        .store
        .policy_challenges(&ChallengeQuery {
            workspace_id: workspace_id.to_owned(),
            status: None,
            decided: true,
            agent_id: None,
            now,
            after,
            limit,
        })
        .await?;
    Ok(rows.iter().map(|c| to_wire(c, now)).collect())
}

pub async fn settings(
    ctx: &Context,
    principal: &Principal,
) -> EnforceResult<api::WorkspaceSettings> {
    let (workspace_id, _) = principal.membership()?;
    let retention = ctx.store.retention(&workspace_id).await?;
    Ok(api::WorkspaceSettings {
        ok: true,
        workspace_id: workspace_id.clone(),
        require_member_approval: ctx.store.require_member_approval(&workspace_id).await?,
        audit_retention_days: retention.audit_days,
        heartbeat_retention_days: retention.heartbeat_days,
    })
}

/// The longest retention that may be set: a hundred years.
pub const MAX_RETENTION_DAYS: i64 = 36_500;

fn retention_days(
    field: &str,
    wanted: Option<Option<i64>>,
    current: Option<i64>,
) -> EnforceResult<Option<i64>> {
    match wanted {
        None => Ok(current),
        Some(None) => Ok(None),
        Some(Some(days)) if (1..=MAX_RETENTION_DAYS).contains(&days) => Ok(Some(days)),
        Some(Some(_)) => Err(EnforceError::malformed(
            "invalid_retention",
            format!("`{field}` must be a number of days from 1 to {MAX_RETENTION_DAYS}, or null to keep everything"),
        )),
    }
}

pub async fn update_settings(
    ctx: &Context,
    principal: &Principal,
    req: api::UpdateWorkspaceSettings,
) -> EnforceResult<api::WorkspaceSettings> {
    let (workspace_id, _) = principal.admin_of()?;
    let current = ctx.store.require_member_approval(&workspace_id).await?;
    let wanted = req.require_member_approval.unwrap_or(current);
    let kept = ctx.store.retention(&workspace_id).await?;
    let retention = Retention {
        audit_days: retention_days(
            "audit_retention_days",
            req.audit_retention_days,
            kept.audit_days,
        )?,
        heartbeat_days: retention_days(
            "heartbeat_retention_days",
            req.heartbeat_retention_days,
            kept.heartbeat_days,
        )?,
    };
    let event = audit::state_change(
        "workspace.settings_changed",
        "update_settings",
        Some(&workspace_id),
        None,
        &principal.actor(),
        json!({
            "require_member_approval": wanted,
            "audit_retention_days": retention.audit_days,
            "heartbeat_retention_days": retention.heartbeat_days,
        }),
    );
    let at = now_ms();
    ctx.writer
        .commit(
            Change::new(Op::Batch(vec![
                AccountOp::SetWorkspaceSettings {
                    workspace_id: workspace_id.clone(),
                    require_member_approval: wanted,
                    at,
                }
                .into(),
                AuditOp::SetRetention {
                    workspace_id: workspace_id.clone(),
                    retention,
                    at,
                }
                .into(),
            ]))
            .audited(event),
        )
        .await?;
    Ok(api::WorkspaceSettings {
        ok: true,
        workspace_id,
        require_member_approval: wanted,
        audit_retention_days: retention.audit_days,
        heartbeat_retention_days: retention.heartbeat_days,
    })
}
