//! `POST /v1/check`: the decision hot path. The API key, the agent and the compiled policy come
//! from caches; evaluation is pure and in memory; the one database round trip is the group
//! commit that makes the decision's audit event (and, for a challenge, its policy challenge)
//! durable before the answer goes out. (A `send_email` check also reads the agent's email counts
//! for the email block's rate limits.)

use std::sync::Arc;

use serde_json::{json, Value};

use crate::api;
use crate::audit::Actor;
use crate::cache::{AgentFacts, KeyAccess, View, DEFAULT_POLICY_ID};
use crate::context::Context;
use crate::error::{ApiError, ApiResult};
use crate::ids;
use crate::secret::{random_base62, sha256_hex};
use crate::store::{AuditEvent, Change, Op, PolicyChallenge, StoreError};
use crate::time::{iso, now_ms};

use super::evaluate::{evaluate_prepared, EmailFacts};
use super::spec::sort_keys;
use super::spec::Outcome;

/// Lifetime of a policy challenge's approval link.
pub const CHALLENGE_TTL_MS: i64 = 300_000;

/// `pol_` + 1-64 of `[a-z0-9_-]`.
pub fn is_policy_id(id: &str) -> bool {
    id.strip_prefix("pol_").is_some_and(|rest| {
        !rest.is_empty()
            && rest.len() <= 64
            && rest
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    })
}

pub fn unknown_policy() -> ApiError {
    ApiError::not_found("unknown_policy", "no such policy in this workspace")
}

/// The agent with its labels as of `view`; `unknown_agent` unless it is in the view's
/// workspace.
pub async fn agent_facts(ctx: &Context, view: &View, agent_id: &str) -> ApiResult<Arc<AgentFacts>> {
    if !ids::has_shape(agent_id, ids::AGENT) {
        return Err(ApiError::unknown_agent());
    }
    ctx.caches
        .agent_in(ctx.store.as_ref(), view, agent_id)
        .await?
        .ok_or_else(ApiError::unknown_agent)
}

/// The canonical request fingerprint: action, context and email facts, object keys sorted so
/// that the client's key order does not matter.
fn fingerprint(action: &str, context: &Value, email: &Value) -> String {
    let canonical = json!([action, sort_keys(context.clone()), sort_keys(email.clone())]);
    sha256_hex(canonical.to_string().as_bytes())
}

/// An email send to commit with its allow decision (see `Op::ReserveEmail`).
#[derive(Debug, Clone)]
pub struct EmailReservation {
    pub id: String,
    pub recipients: i64,
}

/// How often a send decides again when other sends of its agent got in between.
const RESERVE_ATTEMPTS: u32 = 8;

pub async fn check(
    ctx: &Context,
    access: &KeyAccess,
    actor: &Actor,
    req: api::CheckRequest,
) -> ApiResult<api::DecisionResponse> {
    check_with(ctx, access, actor, req, None, RESERVE_ATTEMPTS).await
}

/// A `send_email` check whose allow also reserves the send (see `check_with`).
pub async fn check_reserving(
    ctx: &Context,
    access: &KeyAccess,
    actor: &Actor,
    req: api::CheckRequest,
    reserve: &EmailReservation,
) -> ApiResult<api::DecisionResponse> {
    check_with(ctx, access, actor, req, Some(reserve), RESERVE_ATTEMPTS).await
}

/// A check; with `reserve`, an allow also reserves the email send in the same transaction as
/// the decision's audit event, against the very counts the decision saw (deciding again, at
/// most `attempts` times in all, when other sends of the agent got in first). The decision is
/// made on cached state under the access's view and commits only if that view is still
/// current; otherwise it is made again on fresh state (a key revoked meanwhile answers 401).
async fn check_with(
    ctx: &Context,
    access: &KeyAccess,
    actor: &Actor,
    req: api::CheckRequest,
    reserve: Option<&EmailReservation>,
    attempts: u32,
) -> ApiResult<api::DecisionResponse> {
    if req.agent_id.is_empty() {
        return Err(ApiError::missing("agent_id"));
    }
    let action = req.action.trim();
    if action.is_empty() {
        return Err(ApiError::missing("action"));
    }
    if action.chars().count() > 128
        || action
            .chars()
            .any(|c| c.is_control() || c == '"' || c == '\\')
    {
        return Err(ApiError::invalid(
            "action",
            "must be at most 128 printable characters",
        ));
    }
    let context = match req.context {
        None | Some(Value::Null) => json!({}),
        Some(v @ Value::Object(_)) => v,
        Some(_) => return Err(ApiError::invalid("context", "must be an object")),
    };
    let email_json = req.email.unwrap_or(Value::Null);
    let email = match &email_json {
        Value::Null if action == "send_email" => return Err(ApiError::missing("email")),
        Value::Null => None,
        v => Some(EmailFacts::from_json(v).map_err(|_| {
            ApiError::invalid("email", "must be {to, cc, bcc, subject, attachments}")
        })?),
    };
    let policy_id = req
        .policy_id
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| DEFAULT_POLICY_ID.to_owned());
    if !is_policy_id(&policy_id) {
        return Err(unknown_policy());
    }

    let view = &access.view;
    let workspace_id = view.workspace_id.as_str();
    let agent = agent_facts(ctx, view, &req.agent_id).await?;
    let policy = ctx
        .caches
        .policy(ctx.store.as_ref(), view, &policy_id)
        .await?
        .ok_or_else(unknown_policy)?;

    let now = now_ms();
    // Emails sent through `/v1/email/send` count towards the email block's rate limits: one
    // more read, for `send_email` checks under a policy whose rules read the counts.
    let counts = if action == "send_email" && policy.compiled.counts_emails {
        Some(
            ctx.store
                .email_counts(
                    workspace_id,
                    &agent.agent.id,
                    now - 60_000,
                    now - 86_400_000,
                )
                .await?,
        )
    } else {
        None
    };
    let (sent_minute, sent_day) = counts.unwrap_or((0, 0));
    let sent = (
        u64::try_from(sent_minute).unwrap_or(0),
        u64::try_from(sent_day).unwrap_or(0),
    );
    let facts = agent.facts(action, &context, email.as_ref(), sent);
    let prepared = agent
        .prepared(&policy.compiled)
        .map_err(ApiError::internal)?;
    let mut decision =
        evaluate_prepared(&policy.compiled, &prepared, &facts).map_err(ApiError::internal)?;
    let trace_id = ids::new_id(ids::TRACE);
    let mut change = Change::default().on(view.basis());
    let mut challenge = None;
    let mut challenge_id = None;
    // The challenge to mail to its approvers, once committed.
    let mut notify = None;
    // Only challenges need the fingerprint: allow and deny answers skip the hashing.
    let request_fingerprint = (decision.outcome == Outcome::Challenge)
        .then(|| fingerprint(action, &context, &email_json));
    // A human already decided this very request: an approval allows it once, a deny denies it.
    let mut human = None;
    if let Some(request_fingerprint) = &request_fingerprint {
        let since = now - crate::enforce::approvals::DECISION_TTL_MS;
        if let Some(decided) = ctx
            .store
            .decided_challenge(workspace_id, &agent.agent.id, request_fingerprint, since)
            .await?
        {
            if decided.status == "approved" {
                decision.outcome = Outcome::Allow;
                decision.reasons = Vec::new();
                decision.reason_codes = vec!["approved".into()];
                change.op = Op::ConsumeApproval {
                    id: decided.id.clone(),
                    at: now,
                };
            } else {
                decision.outcome = Outcome::Deny;
                decision.reasons = vec!["a human denied this request".into()];
                decision.reason_codes = vec!["approval_denied".into()];
            }
            human = Some(decided);
        }
    }
    if decision.outcome == Outcome::Challenge {
        let ttl_ms = decision
            .approval
            .as_ref()
            .and_then(|a| a.ttl_secs)
            .map_or(CHALLENGE_TTL_MS, |s| {
                i64::try_from(s).unwrap_or(86_400) * 1000
            });
        let token = format!("apr_{}", random_base62(43));
        let id = ids::new_id("pch");
        let record = PolicyChallenge {
            id: id.clone(),
            workspace_id: workspace_id.to_owned(),
            agent_id: agent.agent.id.clone(),
            policy_id: policy_id.clone(),
            action: action.to_owned(),
            fingerprint: request_fingerprint.clone().unwrap_or_default(),
            token_hash: sha256_hex(token.as_bytes()),
            status: "pending".into(),
            reasons: decision.reasons.clone(),
            reason_codes: decision.reason_codes.clone(),
            // What an approver sees: the agent, and the values the deciding rules read.
            summary: crate::enforce::approvals::request_summary(
                &agent.agent.name,
                &decision.reads,
                &context,
                email.as_ref(),
            ),
            trace_id: trace_id.clone(),
            created_at: now,
            expires_at: now + ttl_ms,
            decided_at: None,
            decided_by: None,
            consumed_at: None,
        };
        challenge = Some(api::ChallengeInfo {
            kind: "approval_link".into(),
            url: format!("{}/v1/approval-links/{token}", ctx.public_url),
            expires_at: iso(record.expires_at),
            expires_in: ttl_ms / 1000,
        });
        challenge_id = Some(id);
        if decision.approval.is_some() {
            notify = Some(record.clone());
        }
        change.op = Op::CreatePolicyChallenge(Box::new(record));
    }
    if let (Some(r), Outcome::Allow) = (reserve, decision.outcome) {
        let op = Op::ReserveEmail {
            id: r.id.clone(),
            workspace_id: workspace_id.to_owned(),
            agent_id: agent.agent.id.clone(),
            recipients: r.recipients,
            // A decision that did not read the counts does not depend on them: no need to
            // decide again when other sends got in first.
            seen: counts,
            at: now,
        };
        change.op = match std::mem::take(&mut change.op) {
            Op::Nothing => op,
            other => Op::Batch(vec![other, op]),
        };
    }
    change.audit.push(AuditEvent {
        id: ids::new_id(ids::EVENT),
        workspace_id: Some(workspace_id.to_owned()),
        created_at: now,
        event_type: "decision.check".into(),
        agent_id: Some(agent.agent.id.clone()),
        action: Some(action.to_owned()),
        decision: Some(decision.outcome.as_str().into()),
        policy_id: Some(policy_id.clone()),
        policy_hash: Some(policy.compiled.hash.clone()),
        trace_id: Some(trace_id.clone()),
        reasons: decision.reasons.clone(),
        reason_codes: decision.reason_codes.clone(),
        actor: actor.label(),
        details: json!({
            "policy_version": policy.version,
            "determining_policies": decision.determining_policies,
                        "challenge_id": challenge_id,
            "approval": human.as_ref().map(|h| json!({"challenge_id": h.id, "status": h.status, "decided_by": h.decided_by})),
        }),
    });
    let again = |access: KeyAccess, attempts: u32| {
        let req = api::CheckRequest {
            agent_id: agent.agent.id.clone(),
            policy_id: Some(policy_id.clone()),
            action: action.to_owned(),
            context: Some(context.clone()),
            email: (!email_json.is_null()).then(|| email_json.clone()),
        };
        Box::pin(async move { check_with(ctx, &access, actor, req, reserve, attempts).await })
    };
    match ctx.writer.commit(change).await {
        Ok(_) => {}
        // Decided on state another request replaced meanwhile: decide again on fresh state.
        Err(StoreError::Stale(version)) if attempts > 1 => {
            let renewed = ctx
                .caches
                .renew(ctx.store.as_ref(), access, version)
                .await?
                .ok_or_else(crate::identity::api_keys::invalid_api_key)?;
            return again(renewed, attempts - 1).await;
        }
        // The approval was used by a concurrent re-check: this request asks again.
        // Or another send of the agent got in first: decide again with the new counts.
        Err(StoreError::Conflict(_)) if human.is_some() || reserve.is_some() && attempts > 1 => {
            return again(access.clone(), attempts.saturating_sub(1)).await;
        }
        Err(StoreError::Conflict(_)) if reserve.is_some() => {
            return Err(ApiError::new(
                axum::http::StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                "too many concurrent sends for this agent; retry shortly",
            )
            .with("retry_after", 1));
        }
        Err(e) => return Err(e.into()),
    }
    if let (Some(info), Some(approval), Some(record)) = (&challenge, &decision.approval, &notify) {
        notify_approvers(ctx, record, info, approval).await;
    }
    Ok(api::DecisionResponse {
        ok: true,
        decision: decision.outcome.as_str().into(),
        trace_id,
        reasons: decision.reasons,
        reason_codes: decision.reason_codes,
        policy_id,
        policy_hash: policy.compiled.hash.clone(),
        policy_version: policy.version,
        determining_policies: decision.determining_policies,
        challenge_id,
        challenge,
    })
}

/// Mails the approval link to the approvers the deciding rules name. A delivery failure is
/// logged, not fatal: the backend still has the link and the challenge to poll.
async fn notify_approvers(
    ctx: &Context,
    record: &PolicyChallenge,
    info: &api::ChallengeInfo,
    approval: &super::spec::ApprovalRules,
) {
    let workspace_id = &record.workspace_id;
    let mut to: Vec<String> = approval
        .approvers
        .iter()
        .map(|a| a.trim().to_ascii_lowercase())
        .collect();
    if let Some(role) = approval
        .approver_role
        .as_deref()
        .and_then(crate::store::Role::parse)
    {
        match ctx.store.members(workspace_id).await {
            Ok(members) => to.extend(
                members
                    .into_iter()
                    .filter(|(_, r)| *r >= role)
                    .map(|(u, _)| u.email),
            ),
            Err(err) => tracing::error!(error = %err, "approvers by role could not be read"),
        }
    }
    to.sort();
    to.dedup();
    if to.is_empty() {
        return;
    }
    let text = crate::enforce::approvals::approval_email_text(
        &record.agent_id,
        &record.action,
        &record.reasons,
        &record.summary,
        info,
    );
    let mail = crate::mail::Email {
        to,
        subject: format!(
            "Approval needed: {} by {}",
            record.action,
            crate::enforce::approvals::agent_label(&record.summary, &record.agent_id)
        ),
        text: Some(text),
        ..Default::default()
    };
    if let Err(err) = ctx.mailer.send(&mail).await {
        tracing::error!(error = %err, "approval notification failed");
    }
}
