//! Approvals: a `challenge` decision waits for a human. The approval link (one-time token,
//! stored hashed) shows what is asked and takes one decision; the backend polls the policy
//! challenge; a re-check of the same agent, action and request fingerprint after an approval
//! answers `allow` once, and after a deny answers `deny`.

use serde_json::{json, Map, Value};

use crate::api;
use crate::audit::{self, Actor};
use crate::context::Context;
use crate::error::{ApiError, ApiResult};
use crate::identity::accounts::Principal;
use crate::policy::check::CHALLENGE_TTL_MS;
use crate::policy::evaluate::EmailFacts;
use crate::secret::sha256_hex;
use crate::store::{Change, Op, PolicyChallenge, StoreError};
use crate::time::{iso, now_ms};

/// How long an approval (or a deny) counts for re-checks after the human decided.
pub const DECISION_TTL_MS: i64 = CHALLENGE_TTL_MS;

/// What an approver is shown of a challenged request (stored with the challenge): the agent's
/// name, the values the deciding rules read (`values`: amount and currency, environment, ...;
/// `recipients` when they read the email) and, as before, the context's field names and the
/// email's counts. Values the deciding rules did not read are not kept.
pub fn request_summary(
    agent_name: &str,
    reads: &[String],
    context: &Value,
    email: Option<&EmailFacts>,
) -> Value {
    let mut values = Map::new();
    for field in reads {
        if let Some(v) = context.get(field).filter(|v| {
            v.is_number() || v.is_boolean() || v.as_str().is_some_and(|s| s.len() <= 200)
        }) {
            values.insert(field.clone(), v.clone());
        }
    }
    let reads_email = reads.iter().any(|r| r == "email");
    let mut fields: Vec<&String> = context
        .as_object()
        .map(|o| o.keys().collect())
        .unwrap_or_default();
    fields.sort();
    json!({
        "agent_name": agent_name,
        "values": values,
        "recipients": email.filter(|_| reads_email).map(|e| e.recipients.clone()),
        "attachments": email.filter(|_| reads_email).map(|e| {
            e.attachments.iter().map(|a| json!({"filename": a.filename, "content_type": a.content_type, "size_bytes": a.size_bytes})).collect::<Vec<_>>()
        }),
        "context_fields": fields,
        "email_recipients": email.map(|e| e.recipients.len()),
        "email_attachments": email.map(|e| e.attachments.len()),
    })
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The request as `label: value` lines, for the approval page and email: the values the
/// deciding rules read, the recipients and attachments.
pub fn summary_lines(summary: &Value) -> Vec<(String, String)> {
    let mut lines: Vec<(String, String)> = summary["values"]
        .as_object()
        .map(|values| values.iter().map(|(k, v)| (k.clone(), scalar(v))).collect())
        .unwrap_or_default();
    if let Some(to) = summary["recipients"].as_array() {
        let list: Vec<String> = to.iter().map(scalar).collect();
        lines.push(("recipients".into(), list.join(", ")));
    }
    if let Some(files) = summary["attachments"].as_array().filter(|a| !a.is_empty()) {
        let list: Vec<String> = files
            .iter()
            .map(|f| {
                format!(
                    "{} ({}, {} bytes)",
                    scalar(&f["filename"]),
                    scalar(&f["content_type"]),
                    f["size_bytes"]
                )
            })
            .collect();
        lines.push(("attachments".into(), list.join(", ")));
    }
    lines
}

/// The agent as an approver reads it: `name (agt_...)`, or the id of an unnamed agent.
pub fn agent_label(summary: &Value, agent_id: &str) -> String {
    match summary["agent_name"].as_str().filter(|n| !n.is_empty()) {
        Some(name) => format!("{name} ({agent_id})"),
        None => agent_id.to_owned(),
    }
}

/// The text of the mail that asks the approvers.
pub fn approval_email_text(
    agent_id: &str,
    action: &str,
    reasons: &[String],
    summary: &Value,
    info: &api::ChallengeInfo,
) -> String {
    let mut text = format!(
        "Agent {} asks to `{action}`, which needs a human's approval:\n\n",
        agent_label(summary, agent_id)
    );
    for r in reasons {
        text.push_str(&format!("- {r}\n"));
    }
    let lines = summary_lines(summary);
    if !lines.is_empty() {
        text.push_str("\nThe request:\n\n");
        for (label, value) in lines {
            text.push_str(&format!("  {label}: {value}\n"));
        }
    }
    text.push_str(&format!(
        "\nApprove or deny (the link works once, until {}):\n\n{}\n",
        info.expires_at, info.url
    ));
    text
}

/// The status as callers see it: a pending challenge past its expiry is `expired`.
pub fn effective_status(c: &PolicyChallenge, now: i64) -> &str {
    if c.status == "pending" && now >= c.expires_at {
        "expired"
    } else {
        &c.status
    }
}

pub fn to_wire(c: &PolicyChallenge, now: i64) -> api::PolicyChallengeInfo {
    api::PolicyChallengeInfo {
        challenge_id: c.id.clone(),
        status: effective_status(c, now).to_owned(),
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

fn unknown_link() -> ApiError {
    ApiError::not_found("unknown_approval_link", "this approval link is not valid")
}

/// The challenge behind an approval link token.
pub async fn by_token(ctx: &Context, token: &str) -> ApiResult<PolicyChallenge> {
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
) -> ApiResult<api::PolicyChallengeInfo> {
    let actor = approver.map_or(Actor::ApprovalLink, Principal::actor);
    let actor = &actor;
    let by = actor.label();
    let status = match decision {
        "approve" => "approved",
        "deny" => "denied",
        "" => return Err(ApiError::missing("decision")),
        _ => return Err(ApiError::invalid("decision", "must be `approve` or `deny`")),
    };
    let challenge = by_token(ctx, token).await?;
    if ctx
        .store
        .require_member_approval(&challenge.workspace_id)
        .await?
    {
        // The workspace wants more than possession of the link.
        let Some(p) = approver else {
            return Err(ApiError::unauthorized(
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
            return Err(crate::identity::accounts::not_a_member());
        }
    }
    let now = now_ms();
    let decided = || {
        ApiError::conflict(
            "challenge_already_decided",
            "this challenge was already decided",
        )
    };
    match effective_status(&challenge, now) {
        "pending" => {}
        "expired" => {
            return Err(ApiError::new(
                axum::http::StatusCode::GONE,
                "challenge_expired",
                "this approval link expired; the agent must ask again",
            ))
        }
        _ => return Err(decided()),
    }
    let mut event = audit::state_change(
        &format!("approval.{status}"),
        decision,
        Some(&challenge.workspace_id),
        Some(&challenge.agent_id),
        actor,
        json!({ "challenge_id": challenge.id, "action": challenge.action }),
    );
    event.policy_id = Some(challenge.policy_id.clone());
    event.trace_id = Some(challenge.trace_id.clone());
    event.decision = Some(
        if status == "approved" {
            "allow"
        } else {
            "deny"
        }
        .into(),
    );
    let change = Change::new(Op::DecideChallenge {
        id: challenge.id.clone(),
        status: status.into(),
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

/// The policy challenge for a backend that polls (scoped to the caller's workspace).
pub async fn status(
    ctx: &Context,
    workspace_id: &str,
    id: &str,
) -> ApiResult<api::PolicyChallengeInfo> {
    let unknown = || {
        ApiError::not_found(
            "unknown_challenge",
            "no such policy challenge in this workspace",
        )
    };
    if !crate::ids::has_shape(id, "pch") {
        return Err(unknown());
    }
    let challenge = ctx.store.policy_challenge(id).await?.ok_or_else(unknown)?;
    if challenge.workspace_id != workspace_id {
        return Err(unknown());
    }
    Ok(to_wire(&challenge, now_ms()))
}

pub async fn settings(ctx: &Context, principal: &Principal) -> ApiResult<api::WorkspaceSettings> {
    let (workspace_id, _) = principal.membership()?;
    Ok(api::WorkspaceSettings {
        ok: true,
        workspace_id: workspace_id.clone(),
        require_member_approval: ctx.store.require_member_approval(&workspace_id).await?,
    })
}

pub async fn update_settings(
    ctx: &Context,
    principal: &Principal,
    req: api::UpdateWorkspaceSettings,
) -> ApiResult<api::WorkspaceSettings> {
    let (workspace_id, _) = principal.admin_of()?;
    let current = ctx.store.require_member_approval(&workspace_id).await?;
    let wanted = req.require_member_approval.unwrap_or(current);
    let event = audit::state_change(
        "workspace.settings_changed",
        "update_settings",
        Some(&workspace_id),
        None,
        &principal.actor(),
        json!({ "require_member_approval": wanted }),
    );
    ctx.writer
        .commit(
            Change::new(Op::SetWorkspaceSettings {
                workspace_id: workspace_id.clone(),
                require_member_approval: wanted,
                at: now_ms(),
            })
            .audited(event),
        )
        .await?;
    Ok(api::WorkspaceSettings {
        ok: true,
        workspace_id,
        require_member_approval: wanted,
    })
}
