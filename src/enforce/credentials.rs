//! Short-lived credentials for an agent's follow-on calls, and the workspace kill switch. A
//! mint is a decision first (action `mint_credential`, audited like any check), then a token
//! whose hash alone is stored: opaque (`sct_...`) or an EdDSA JWT (see `jwt`). Token exchange
//! is the same flow for an agent that proves it holds its key (action `token_exchange`).

use serde_json::{json, Value};

use crate::api;
use crate::audit::{self, Actor};
use crate::context::Context;
use crate::domain::ids::{self, CredentialId};
use crate::identity::accounts::enforce_rate_limit;
use crate::identity::signing::{verify_parts, SignFailure, SignedParts};

use super::{EnforceError, EnforceResult};
use crate::policy::cache::{KeyAccess, View};
use crate::policy::check::check;
use crate::secret::{random_base62, sha256_hex};
use crate::store::{
    ActiveCredential, Applied, AuditQuery, Change, CredentialOp, CredentialQuery, CredentialRecord,
    Cursor, KillSwitch, StoreError,
};
use crate::time::{iso, now_ms};

pub use crate::domain::credential::{DEFAULT_TTL_SECS, MAX_TTL_SECS};
const MINTS_PER_MINUTE: i64 = 60;

fn check_scopes(scopes: &[String]) -> EnforceResult<()> {
    let valid = scopes.len() <= 32
        && scopes.iter().all(|s| {
            (1..=128).contains(&s.len())
                && s.bytes().all(|b| {
                    b.is_ascii_alphanumeric()
                        || matches!(b, b':' | b'.' | b'_' | b'/' | b'*' | b'-')
                })
        });
    if valid {
        Ok(())
    } else {
        Err(EnforceError::malformed(
            "invalid_scopes",
            "scopes are up to 32 strings of 1-128 characters from `A-Za-z0-9:._/*-`",
        ))
    }
}

fn short_text(field: &'static str, value: Option<String>) -> EnforceResult<Option<String>> {
    match value {
        Some(v) if v.chars().count() > 200 || v.chars().any(char::is_control) => Err(
            EnforceError::invalid(field, "must be at most 200 printable characters"),
        ),
        Some(v) if v.is_empty() => Ok(None),
        other => Ok(other),
    }
}

pub async fn mint(
    ctx: &Context,
    access: &KeyAccess,
    actor: &Actor,
    req: api::MintRequest,
) -> EnforceResult<api::MintResponse> {
    if req.agent_id.is_empty() {
        return Err(EnforceError::missing("agent_id"));
    }
    let token_type = match req.token_type.as_deref() {
        None | Some("") | Some("opaque") => "opaque",
        Some("jwt") => "jwt",
        Some(_) => {
            return Err(EnforceError::malformed(
                "invalid_token_type",
                "`token_type` must be `opaque` or `jwt`",
            ))
        }
    };
    let (ttl, scopes, audience) =
        terms(req.ttl_seconds, DEFAULT_TTL_SECS, req.scopes, req.audience)?;
    let provider = short_text("provider", req.provider)?;
    let one_time = req.one_time.unwrap_or(false);
    let agent = ctx
        .caches
        .known_agent(ctx.store.as_ref(), &access.view, &req.agent_id)
        .await?;
    let mut context = serde_json::Map::new();
    context.insert("provider".into(), json!(provider));
    context.insert("one_time".into(), json!(one_time));
    context.insert("token_type".into(), json!(token_type));
    let issued = issue(
        ctx,
        access,
        actor,
        Issue {
            agent_id: &agent.agent.id,
            policy_id: req.policy_id,
            action: "mint_credential",
            context,
            token_type,
            ttl,
            scopes: &scopes,
            audience: audience.clone(),
            provider,
            one_time,
            nonce: None,
        },
    )
    .await?;
    Ok(api::MintResponse {
        ok: true,
        credential: api::Credential {
            cred_id: issued.cred_id,
            token: issued.token,
            token_type: token_type.into(),
            expires_at: iso(issued.expires_at),
            one_time,
            audience,
            scopes,
        },
    })
}

/// The terms every credential request states: its lifetime (`default` when absent), its
/// scopes and its audience, checked in that order.
fn terms(
    ttl: Option<i64>,
    default: i64,
    scopes: Option<Vec<String>>,
    audience: Option<String>,
) -> EnforceResult<(i64, Vec<String>, Option<String>)> {
    let ttl = ttl.unwrap_or(default);
    if ttl <= 0 || ttl > MAX_TTL_SECS {
        return Err(EnforceError::malformed(
            "invalid_ttl",
            format!("`ttl_seconds` must be between 1 and {MAX_TTL_SECS}"),
        ));
    }
    let scopes = scopes.unwrap_or_default();
    check_scopes(&scopes)?;
    Ok((ttl, scopes, short_text("audience", audience)?))
}

/// What to decide and, on allow, issue.
struct Issue<'a> {
    agent_id: &'a str,
    policy_id: Option<String>,
    action: &'static str,
    /// The request's own facts; `issue` adds the terms (audience, lifetime, scopes).
    context: serde_json::Map<String, Value>,
    token_type: &'static str,
    ttl: i64,
    scopes: &'a [String],
    audience: Option<String>,
    provider: Option<String>,
    one_time: bool,
    /// The agent's own signature's nonce, claimed with the credential (token exchange).
    nonce: Option<crate::store::NonceClaim>,
}

struct Issued {
    cred_id: String,
    token: String,
    expires_at: i64,
}

/// The kill switch, the per-agent rate limit and the policy, then the credential: its hash,
/// the audit event and the nonce claim (if any) in one transaction that re-checks the switch
/// and the agent.
async fn issue(
    ctx: &Context,
    access: &KeyAccess,
    actor: &Actor,
    mut it: Issue<'_>,
) -> EnforceResult<Issued> {
    let workspace_id = access.view.workspace_id.as_str();
    // The terms are part of the request a policy and an approval see (the scopes as one sorted
    // string); the service's facts win over the caller's.
    let mut sorted = it.scopes.to_vec();
    sorted.sort();
    for (k, v) in [
        ("audience", json!(it.audience)),
        ("ttl_seconds", json!(it.ttl)),
        ("scope_count", json!(it.scopes.len())),
        ("scopes", json!(sorted.join(" "))),
    ] {
        it.context.insert(k.into(), v);
    }
    let switch = ctx.store.kill_switch(workspace_id).await?;
    if switch.minting_paused {
        return Err(EnforceError::MintingPaused {
            reason: switch.minting_paused_reason.clone(),
        });
    }
    enforce_rate_limit(
        ctx,
        format!("mint:agent:{}", it.agent_id),
        60_000,
        MINTS_PER_MINUTE,
    )
    .await?;
    let decision = check(
        ctx,
        access,
        actor,
        api::CheckRequest {
            agent_id: it.agent_id.to_owned(),
            policy_id: it.policy_id,
            action: it.action.into(),
            context: Some(Value::Object(it.context)),
            email: None,
        },
    )
    .await?;
    match decision.decision.as_str() {
        "allow" => {}
        "challenge" => return Err(EnforceError::CredentialChallenged(Box::new(decision))),
        _ => return Err(EnforceError::CredentialDenied(Box::new(decision))),
    }

    let now = now_ms();
    let cred_id = ids::new_id(ids::CREDENTIAL);
    let expires_at = now + it.ttl * 1000;
    let token = if it.token_type == "jwt" {
        let key = crate::enforce::jwt::current_key(ctx.store.as_ref(), &ctx.master_key).await?;
        let claims = crate::enforce::jwt::Claims {
            issuer: &ctx.public_url,
            agent_id: it.agent_id,
            audience: it.audience.as_deref().unwrap_or(&ctx.public_url),
            workspace_id,
            cred_id: &cred_id,
            scopes: it.scopes,
            issued_at_ms: now,
            expires_at_ms: expires_at,
        };
        crate::enforce::jwt::sign(&key, &ctx.master_key, &claims.to_json())
            .map_err(EnforceError::internal)?
    } else {
        format!("sct_{}", random_base62(43))
    };
    let record = CredentialRecord {
        id: cred_id.clone(),
        workspace_id: workspace_id.to_owned(),
        agent_id: it.agent_id.to_owned(),
        token_hash: sha256_hex(token.as_bytes()),
        token_type: it.token_type.into(),
        provider: it.provider,
        audience: it.audience,
        scopes: it.scopes.to_vec(),
        one_time: it.one_time,
        created_at: now,
        expires_at,
        revoked_at: None,
        revoked_reason: None,
        used_at: None,
    };
    let mut event = audit::state_change(
        "credential.minted",
        it.action,
        Some(workspace_id),
        Some(it.agent_id),
        actor,
        json!({ "cred_id": record.id, "token_type": it.token_type, "expires_at": iso(expires_at), "one_time": it.one_time, "scopes": it.scopes }),
    );
    event.decision = Some("allow".into());
    event.trace_id = Some(decision.trace_id);
    event.policy_id = Some(decision.policy_id);
    event.policy_hash = Some(decision.policy_hash);
    let mut change = Change::new(CredentialOp::Create(Box::new(record))).audited(event);
    if let Some(nonce) = it.nonce {
        change = change.with_nonce(nonce);
    }
    match ctx.writer.commit(change).await {
        Ok(_) => {}
        Err(StoreError::Conflict(_)) => return Err(EnforceError::MintRaced),
        Err(StoreError::AgentNotActive) => {
            return Err(EnforceError::Signature(SignFailure::AgentNotActive.into()))
        }
        Err(e) => return Err(e.into()),
    }
    Ok(Issued {
        cred_id,
        token,
        expires_at,
    })
}

/// The default lifetime of an exchanged token.
pub const EXCHANGE_DEFAULT_TTL_SECS: i64 = 900;

/// `POST /v1/token/exchange`: a backend trades the agent's signed proof for a short-lived JWT.
pub async fn exchange(
    ctx: &Context,
    access: &KeyAccess,
    actor: &Actor,
    req: api::TokenExchangeRequest,
) -> EnforceResult<api::TokenExchangeResponse> {
    if req.agent_id.is_empty() {
        return Err(EnforceError::missing("agent_id"));
    }
    let (ttl, scopes, audience) = terms(
        req.ttl_seconds,
        EXCHANGE_DEFAULT_TTL_SECS,
        req.scopes,
        req.audience,
    )?;
    let mut context = match req.context {
        None | Some(Value::Null) => serde_json::Map::new(),
        Some(Value::Object(map)) => map,
        Some(_) => return Err(EnforceError::invalid("context", "must be an object")),
    };
    let proof = &req.agent_request;
    let timestamp = match &proof.timestamp_ms {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => {
            return Err(EnforceError::invalid(
                "agent_request.timestamp_ms",
                "must be Unix epoch milliseconds",
            ))
        }
    };
    let agent = ctx
        .caches
        .known_agent(ctx.store.as_ref(), &access.view, &req.agent_id)
        .await?;
    let parts = SignedParts {
        method: &proof.method,
        path: &proof.path,
        timestamp: &timestamp,
        nonce: &proof.nonce,
        body_sha256: &proof.body_sha256,
        signature_b64: &proof.signature_b64,
    };
    let nonce = verify_parts(
        &parts,
        Some(&agent.agent),
        now_ms(),
        ctx.config.signature_window_ms,
    )
    .map_err(|failure| EnforceError::Signature(parts.reject(failure)))?;
    // Single use per purpose: a signed request can be verified once (`/v1/verify`) and
    // exchanged once.
    let nonce = crate::store::NonceClaim {
        scope: format!("exchange:{}", nonce.scope),
        ..nonce
    };
    // The service's own facts win over the caller's.
    context.insert("request_method".into(), json!(proof.method));
    context.insert("request_path".into(), json!(proof.path));
    let issued = issue(
        ctx,
        access,
        actor,
        Issue {
            agent_id: &agent.agent.id,
            policy_id: req.policy_id,
            action: "token_exchange",
            context,
            token_type: "jwt",
            ttl,
            scopes: &scopes,
            audience,
            provider: None,
            one_time: false,
            nonce: Some(nonce),
        },
    )
    .await?;
    Ok(api::TokenExchangeResponse {
        ok: true,
        token: issued.token,
        token_type: "Bearer".into(),
        expires_in: ttl,
    })
}

/// Revokes the live credentials of the workspace that match: by token hash, by id, or every
/// one of an agent.
async fn revoke_where(
    ctx: &Context,
    workspace_id: &str,
    actor: &Actor,
    token_hash: Option<String>,
    cred_id: Option<String>,
    agent_id: Option<&str>,
    reason: Option<String>,
) -> EnforceResult<api::RevokeResponse> {
    let event = audit::state_change(
        "credential.revoked",
        "revoke_credentials",
        Some(workspace_id),
        agent_id,
        actor,
        json!({ "reason": reason }),
    );
    let op = CredentialOp::Revoke {
        workspace_id: workspace_id.to_owned(),
        token_hash,
        cred_id,
        agent_id: agent_id.map(str::to_owned),
        reason,
        at: now_ms(),
    };
    match ctx.writer.commit(Change::new(op).audited(event)).await? {
        Applied::Count(n) => Ok(api::RevokeResponse {
            ok: true,
            revoked: n,
        }),
        _ => Err(EnforceError::internal(
            "revoke answered an unexpected outcome",
        )),
    }
}

pub async fn revoke(
    ctx: &Context,
    workspace_id: &str,
    actor: &Actor,
    req: api::RevokeRequest,
) -> EnforceResult<api::RevokeResponse> {
    let reason = short_text("reason", req.reason)?;
    let token_hash = req
        .token
        .filter(|t| !t.is_empty())
        .map(|t| sha256_hex(t.trim().as_bytes()));
    let cred_id = req.cred_id.filter(|c| !c.is_empty());
    if token_hash.is_none() && cred_id.is_none() {
        return Err(EnforceError::missing("token"));
    }
    revoke_where(ctx, workspace_id, actor, token_hash, cred_id, None, reason).await
}

fn unknown_credential() -> EnforceError {
    EnforceError::not_found("unknown_credential", "no such credential in this workspace")
}

/// A credential id as a request sends it: one of the shape of a credential's id, else
/// `unknown_credential` (answered without a lookup, as for one that does not exist).
pub fn credential_id(text: &str) -> EnforceResult<CredentialId> {
    CredentialId::parse(text).ok_or_else(unknown_credential)
}

/// One credential of the workspace by its id, whatever its state; another workspace's, or
/// none, is `unknown_credential`.
pub async fn credential_in(
    ctx: &Context,
    workspace_id: &str,
    cred_id: &CredentialId,
) -> EnforceResult<CredentialRecord> {
    ctx.store
        .credential_in(workspace_id, cred_id)
        .await?
        .ok_or_else(unknown_credential)
}

/// Revokes one credential of the workspace by its id (the console's revoke): the same change
/// and audit event (`credential.revoked`, naming the agent) as [`revoke`]. Another workspace's
/// credential, or none, is `unknown_credential`; one no longer live revokes nothing.
pub async fn revoke_by_id(
    ctx: &Context,
    workspace_id: &str,
    actor: &Actor,
    cred_id: &str,
    reason: Option<String>,
) -> EnforceResult<api::RevokeResponse> {
    let reason = short_text("reason", reason)?;
    let credential = credential_in(ctx, workspace_id, &credential_id(cred_id)?).await?;
    revoke_where(
        ctx,
        workspace_id,
        actor,
        None,
        Some(credential.id),
        Some(&credential.agent_id),
        reason,
    )
    .await
}

/// The workspace's active credentials, newest first (`limit` rows past `after`), all or one
/// agent's: not revoked, not expired, not a used one-time credential, and not minted before
/// the last revoke-all. A credential of a suspended agent is listed (it counts again when the
/// agent is resumed). Never a token or its hash.
pub async fn active(
    ctx: &Context,
    workspace_id: &str,
    agent_id: Option<&str>,
    after: Option<Cursor>,
    limit: i64,
) -> EnforceResult<Vec<ActiveCredential>> {
    let now = now_ms();
    let cutoff = ctx.store.kill_switch(workspace_id).await?.all_revoked_at;
    // No credential lives longer than MAX_TTL_SECS: older ones are all expired.
    let minted_from = (now - MAX_TTL_SECS * 1000).max(cutoff.unwrap_or(i64::MIN));
    Ok(ctx
        .store
        .active_credentials(&CredentialQuery {
            workspace_id: workspace_id.to_owned(),
            agent_id: agent_id.map(str::to_owned),
            now,
            minted_from,
            after,
            limit,
        })
        .await?)
}

/// A change of the kill switch, from the audit trail: when, by whom, and the reason given.
#[derive(Debug, Clone)]
pub struct SwitchChange {
    pub at: i64,
    pub actor: String,
    pub reason: Option<String>,
}

/// The kill switch with its last changes: the last pause or resume of minting and the last
/// revoke-all.
#[derive(Debug, Clone)]
pub struct KillSwitchView {
    pub switch: KillSwitch,
    pub minting_changed: Option<SwitchChange>,
    pub revoked_all: Option<SwitchChange>,
}

pub async fn kill_switch_view(ctx: &Context, workspace_id: &str) -> EnforceResult<KillSwitchView> {
    let switch = ctx.store.kill_switch(workspace_id).await?;
    // Each is the newest event along an index of the audit trail (action, or event type).
    let last = |action: Option<&str>, event_type: Option<&str>| AuditQuery {
        workspace_id: workspace_id.to_owned(),
        action: action.map(str::to_owned),
        event_type: event_type.map(str::to_owned),
        limit: 1,
        ..AuditQuery::default()
    };
    let change = |events: Vec<crate::store::AuditRecord>| {
        events.into_iter().next().map(|e| SwitchChange {
            at: e.created_at,
            reason: e.details.value()["reason"].as_str().map(str::to_owned),
            actor: e.actor,
        })
    };
    let minting_changed = change(
        ctx.store
            .audit_events(&last(Some("kill_switch_minting"), None))
            .await?,
    );
    let revoked_all = change(
        ctx.store
            .audit_events(&last(None, Some("kill_switch.revoke_all")))
            .await?,
    );
    Ok(KillSwitchView {
        switch,
        minting_changed,
        revoked_all,
    })
}

pub async fn revoke_by_agent(
    ctx: &Context,
    view: &View,
    actor: &Actor,
    req: api::RevokeByAgentRequest,
) -> EnforceResult<api::RevokeResponse> {
    let workspace_id = view.workspace_id.as_str();
    if req.agent_id.is_empty() {
        return Err(EnforceError::missing("agent_id"));
    }
    let reason = short_text("reason", req.reason)?;
    let agent = ctx
        .caches
        .known_agent(ctx.store.as_ref(), view, &req.agent_id)
        .await?;
    revoke_where(
        ctx,
        workspace_id,
        actor,
        None,
        None,
        Some(&agent.agent.id),
        reason,
    )
    .await
}

fn inactive(reason: &str) -> api::IntrospectResponse {
    api::IntrospectResponse {
        ok: true,
        active: false,
        reason: Some(reason.into()),
        ..api::IntrospectResponse::default()
    }
}

/// Why a credential of `view`'s workspace no longer stands, if it does not: revoked by the
/// kill switch or on its own, its agent suspended or revoked, or expired (a one-time
/// credential's use is its holder's to judge).
pub async fn standing(
    ctx: &Context,
    view: &View,
    c: &crate::store::CredentialRecord,
) -> EnforceResult<Option<&'static str>> {
    let switch = ctx.store.kill_switch(&view.workspace_id).await?;
    standing_under(ctx, view, &switch, c).await
}

/// [`standing`] under the workspace's kill switch `switch`, read already.
pub async fn standing_under(
    ctx: &Context,
    view: &View,
    switch: &crate::store::KillSwitch,
    c: &crate::store::CredentialRecord,
) -> EnforceResult<Option<&'static str>> {
    // A credential is no better than its agent: suspended or revoked agents' tokens are off.
    let agent_active = ctx
        .caches
        .agent_in(ctx.store.as_ref(), view, &c.agent_id)
        .await?
        .is_some_and(|a| {
            !matches!(
                a.agent.status,
                crate::domain::AgentStatus::Revoked | crate::domain::AgentStatus::Suspended
            )
        });
    // Revoke-all marks the credentials it finds revoked too: those count as the kill switch's.
    let by_kill_switch = switch
        .all_revoked_at
        .is_some_and(|cutoff| c.created_at < cutoff || c.revoked_at.is_some_and(|at| at == cutoff));
    Ok(if by_kill_switch {
        Some("revoked_by_kill_switch")
    } else if c.revoked_at.is_some() {
        Some("revoked")
    } else if !agent_active {
        Some("agent_not_active")
    } else if now_ms() >= c.expires_at {
        Some("expired")
    } else {
        None
    })
}

pub async fn introspect(
    ctx: &Context,
    view: &View,
    req: api::IntrospectRequest,
) -> EnforceResult<api::IntrospectResponse> {
    let workspace_id = view.workspace_id.as_str();
    let token = req.token.trim();
    if token.is_empty() {
        return Err(EnforceError::missing("token"));
    }
    let Some(c) = ctx
        .store
        .credential_by_hash(&sha256_hex(token.as_bytes()))
        .await?
    else {
        return Ok(inactive("unknown"));
    };
    if c.workspace_id != workspace_id {
        return Ok(inactive("unknown"));
    }
    let now = now_ms();
    let mut answer = api::IntrospectResponse {
        ok: true,
        active: false,
        reason: None,
        cred_id: Some(c.id.clone()),
        agent_id: Some(c.agent_id.clone()),
        audience: c.audience.clone(),
        scopes: c.scopes.clone(),
        expires_at: Some(iso(c.expires_at)),
        token_type: Some(c.token_type.clone()),
    };
    let reason = match standing(ctx, view, &c).await? {
        Some(reason) => Some(reason),
        None if c.one_time && c.used_at.is_some() => Some("already_used"),
        None => None,
    };
    if let Some(reason) = reason {
        answer.reason = Some(reason.into());
        return Ok(answer);
    }
    if c.one_time {
        // The first introspection uses it up, on any replica.
        match ctx
            .writer
            .commit(Change::new(CredentialOp::Use {
                id: c.id.clone(),
                at: now,
            }))
            .await
        {
            Ok(_) => {}
            Err(StoreError::Conflict(_)) => {
                answer.reason = Some("already_used".into());
                return Ok(answer);
            }
            Err(e) => return Err(e.into()),
        }
    }
    answer.active = true;
    Ok(answer)
}

fn status_of(s: &crate::store::KillSwitch) -> api::KillSwitchStatus {
    api::KillSwitchStatus {
        ok: true,
        minting_paused: s.minting_paused,
        minting_paused_reason: s.minting_paused_reason.clone(),
        all_credentials_revoked_at: s.all_revoked_at.map(iso),
    }
}

pub async fn kill_switch_status(
    ctx: &Context,
    workspace_id: &str,
) -> EnforceResult<api::KillSwitchStatus> {
    Ok(status_of(&ctx.store.kill_switch(workspace_id).await?))
}

pub async fn set_minting(
    ctx: &Context,
    workspace_id: &str,
    actor: &Actor,
    req: api::MintingSwitchRequest,
) -> EnforceResult<api::KillSwitchStatus> {
    let reason = short_text("reason", req.reason)?;
    let event = audit::state_change(
        if req.paused {
            "kill_switch.minting_paused"
        } else {
            "kill_switch.minting_resumed"
        },
        "kill_switch_minting",
        Some(workspace_id),
        None,
        actor,
        json!({ "paused": req.paused, "reason": reason }),
    );
    let op = CredentialOp::SetMinting {
        workspace_id: workspace_id.to_owned(),
        paused: req.paused,
        reason,
        at: now_ms(),
    };
    ctx.writer.commit(Change::new(op).audited(event)).await?;
    kill_switch_status(ctx, workspace_id).await
}

pub async fn revoke_all(
    ctx: &Context,
    workspace_id: &str,
    actor: &Actor,
    req: api::RevokeAllRequest,
) -> EnforceResult<api::KillSwitchStatus> {
    let reason = short_text("reason", req.reason)?;
    let event = audit::state_change(
        "kill_switch.revoke_all",
        "kill_switch_revoke_all",
        Some(workspace_id),
        None,
        actor,
        json!({ "reason": reason }),
    );
    let op = CredentialOp::RevokeAll {
        workspace_id: workspace_id.to_owned(),
        at: now_ms(),
    };
    ctx.writer.commit(Change::new(op).audited(event)).await?;
    kill_switch_status(ctx, workspace_id).await
}
