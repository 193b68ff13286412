//! Approvals: a `challenge` decision waits for a human. The approval link (one-time token,
//! stored hashed) shows what is asked and takes one decision; the backend polls the policy
//! challenge; a re-check of the same agent, action and request fingerprint after an approval
//! answers `allow` once, and after a deny answers `deny`.

use serde_json::json;

use crate::api;
use crate::audit::{self, Actor};
use crate::context::Context;
use crate::domain::access::{person_may, Denied, Need};
use crate::domain::ids::PolicyChallengeId;
use crate::domain::{ChallengeStatus, Raiser, Role};
use crate::identity::accounts::Principal;
use crate::secret::sha256_hex;
use crate::store::{
    AccountOp, AgentRecord, AuditOp, ChallengeQuery, Change, Cursor, NonceClaim, Op,
    PolicyChallenge, PolicyOp, Retention, StoreError,
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
        decision_reason: c.decision_reason.clone(),
        raised_by: c.raised_by.as_str().to_owned(),
        decided_by_name: None,
        used: c.consumed_at.is_some(),
    }
}

/// The challenges with the names of who decided them (one lookup for all).
async fn with_names(
    ctx: &Context,
    workspace_id: &str,
    mut items: Vec<api::PolicyChallengeInfo>,
) -> EnforceResult<Vec<api::PolicyChallengeInfo>> {
    let names = crate::audit::names::ActorNames::lookup(
        ctx.store.as_ref(),
        workspace_id,
        items.iter().filter_map(|c| c.decided_by.as_deref()),
    )
    .await?;
    for c in &mut items {
        c.decided_by_name = c.decided_by.as_deref().and_then(|by| names.get(by));
    }
    Ok(items)
}

/// One challenge with the name of who decided it.
async fn with_name(
    ctx: &Context,
    workspace_id: &str,
    item: api::PolicyChallengeInfo,
) -> EnforceResult<api::PolicyChallengeInfo> {
    let mut named = with_names(ctx, workspace_id, vec![item]).await?;
    named
        .pop()
        .ok_or_else(|| EnforceError::Internal("a challenge went missing".into()))
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

/// Records the human's decision (`approve` or `deny`) taken through the link. The link alone
/// decides only a challenge a backend raised, in a workspace that turned
/// `require_member_approval` off; otherwise the person must be logged in and may decide it
/// (see [`ensure_may_decide`]).
pub async fn decide(
    ctx: &Context,
    token: &str,
    decision: &str,
    reason: Option<&str>,
    approver: Option<&Principal>,
) -> EnforceResult<api::PolicyChallengeInfo> {
    let status = parse_decision(decision)?;
    let reason = approver_reason(reason)?;
    let challenge = by_token(ctx, token).await?;
    let alone = link_alone_decides(ctx, &challenge).await?;
    let actor = match approver {
        Some(p) if alone => p.actor(),
        None if alone => Actor::ApprovalLink,
        Some(p) => {
            ensure_may_decide(ctx, &challenge, p).await?;
            p.actor()
        }
        None => {
            return Err(EnforceError::unauthenticated(
                "login_required",
                "log in as an approver of this workspace to decide this challenge",
            ))
        }
    };
    record_decision(ctx, challenge, status, decision, reason, &actor).await
}

/// Whether possession of the approval link is enough: only for a challenge a backend raised,
/// in a workspace that allows it. An agent never decides a challenge it raised itself.
pub async fn link_alone_decides(ctx: &Context, challenge: &PolicyChallenge) -> EnforceResult<bool> {
    Ok(challenge.raised_by == Raiser::Backend
        && !ctx
            .store
            .require_member_approval(&challenge.workspace_id)
            .await?)
}

/// Whether `person` may decide `challenge`, as one rule for the approval link, the decide API
/// and the console: a member of the challenge's workspace who is an approver, admin or owner
/// there, or whom the deciding rules name as an approver; a personal access token also needs
/// the `approve` scope (or none).
pub async fn may_decide(
    ctx: &Context,
    challenge: &PolicyChallenge,
    person: &Principal,
) -> EnforceResult<bool> {
    Ok(ensure_may_decide(ctx, challenge, person).await.is_ok())
}

/// [`may_decide`], refusing with `not_a_member`, `insufficient_role` or `insufficient_scope`.
pub async fn ensure_may_decide(
    ctx: &Context,
    challenge: &PolicyChallenge,
    person: &Principal,
) -> EnforceResult<()> {
    let role = match person.workspace_id.as_deref() {
        // Read with the request: no second read for the usual case.
        Some(ws) if ws == challenge.workspace_id => person.role,
        _ => {
            ctx.store
                .role_in(&challenge.workspace_id, &person.user.id)
                .await?
        }
    };
    let Some(role) = role else {
        return Err(crate::identity::accounts::not_a_member().into());
    };
    let named = challenge
        .approvers
        .iter()
        .any(|e| e.eq_ignore_ascii_case(&person.user.email));
    // A named approver decides this challenge as an approver would.
    let role = if named {
        role.max(Role::Approver)
    } else {
        role
    };
    person_may(role, &person.scopes, Need::ChallengesDecide).map_err(|denied| match denied {
        Denied::Role(role) => cannot_decide(role),
        Denied::Scope(scope) => EnforceError::forbidden(
            "insufficient_scope",
            format!("this needs the scope `{scope}`"),
        ),
        Denied::Kind(why) => EnforceError::forbidden("insufficient_role", why),
    })
}

fn cannot_decide(role: Role) -> EnforceError {
    EnforceError::forbidden(
        "insufficient_role",
        format!(
            "the `{}` role cannot decide challenges, and the deciding rules do not name you as an approver",
            role.as_str()
        ),
    )
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

/// An approver's reason, trimmed (`None` when blank); over [`MAX_REASON_CHARS`] is refused.
fn approver_reason(reason: Option<&str>) -> EnforceResult<Option<&str>> {
    let reason = reason.map(str::trim).filter(|r| !r.is_empty());
    if reason.is_some_and(|r| r.chars().count() > MAX_REASON_CHARS) {
        return Err(EnforceError::invalid(
            "reason",
            "must be at most 500 characters",
        ));
    }
    Ok(reason)
}

/// Records the decision of `person` (`POST /v1/policy-challenges/{id}/decide`, the console's
/// approvals page, `acp challenges approve|deny`) on a challenge of their active workspace, if
/// they may decide it ([`ensure_may_decide`]); `reason`, if given, is kept in the audit
/// event's details.
pub async fn decide_by_id(
    ctx: &Context,
    person: &Principal,
    id: &str,
    decision: &str,
    reason: Option<&str>,
) -> EnforceResult<api::PolicyChallengeInfo> {
    let status = parse_decision(decision)?;
    let reason = approver_reason(reason)?;
    let (workspace_id, role) = person.membership()?;
    let found = match challenge_id(id) {
        Ok(id) => in_workspace(ctx, &workspace_id, &id).await,
        Err(err) => Err(err),
    };
    let challenge = match found {
        Ok(challenge) => challenge,
        // Someone who may decide only the challenges that name them learns nothing of others.
        Err(_) if role < Role::Approver => return Err(cannot_decide(role)),
        Err(err) => return Err(err),
    };
    ensure_may_decide(ctx, &challenge, person).await?;
    record_decision(ctx, challenge, status, decision, reason, &person.actor()).await
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
        reason: reason.map(str::to_owned),
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
    let workspace_id = updated.workspace_id.clone();
    with_name(ctx, &workspace_id, to_wire(&updated, now)).await
}

fn unknown_challenge() -> EnforceError {
    EnforceError::not_found(
        "unknown_challenge",
        "no such policy challenge in this workspace",
    )
}

/// A challenge id as a request sends it: one of the shape of a challenge's id, else
/// `unknown_challenge` (answered without a lookup, as for a challenge that does not exist).
pub fn challenge_id(text: &str) -> EnforceResult<PolicyChallengeId> {
    PolicyChallengeId::parse(text).ok_or_else(unknown_challenge)
}

/// A challenge of `workspace_id` by id (404 `unknown_challenge` for another workspace's).
async fn in_workspace(
    ctx: &Context,
    workspace_id: &str,
    id: &PolicyChallengeId,
) -> EnforceResult<PolicyChallenge> {
    let challenge = ctx
        .store
        .policy_challenge(id)
        .await?
        .ok_or_else(unknown_challenge)?;
    if challenge.workspace_id != workspace_id {
        return Err(unknown_challenge());
    }
    Ok(challenge)
}

/// The status of a challenge the signing agent raised itself, for the agent that waits: its
/// request's nonce is spent with the read. Another agent's challenge is `unknown_challenge`.
pub async fn status_for_agent(
    ctx: &Context,
    agent: &AgentRecord,
    nonce: NonceClaim,
    id: &PolicyChallengeId,
) -> EnforceResult<api::PolicyChallengeInfo> {
    let workspace_id = agent.workspace_id.as_deref().unwrap_or_default();
    let challenge = in_workspace(ctx, workspace_id, id).await?;
    if challenge.agent_id != agent.id {
        return Err(unknown_challenge());
    }
    ctx.writer
        .commit(Change::new(Op::Nothing).with_nonce(nonce))
        .await?;
    Ok(to_wire(&challenge, now_ms()))
}

/// The policy challenge for a backend that polls (scoped to the caller's workspace).
pub async fn status(
    ctx: &Context,
    workspace_id: &str,
    id: &PolicyChallengeId,
) -> EnforceResult<api::PolicyChallengeInfo> {
    let challenge = in_workspace(ctx, workspace_id, id).await?;
    with_name(ctx, workspace_id, to_wire(&challenge, now_ms())).await
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
    with_names(
        ctx,
        workspace_id,
        rows.iter().map(|c| to_wire(c, now)).collect(),
    )
    .await
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
    with_names(
        ctx,
        workspace_id,
        rows.iter().map(|c| to_wire(c, now)).collect(),
    )
    .await
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
