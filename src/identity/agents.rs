//! Agent use cases: register, attest, claim codes, and an admin's suspend / resume / revoke.

use serde_json::{json, Value};

use super::error::{IdentityError, IdentityResult};
use crate::api;
use crate::audit::{self, Actor};
use crate::context::Context;
use crate::domain::ids::{self, AgentId};
use crate::domain::{AgentStatus, RiskTier};
use crate::policy::cache::DEFAULT_POLICY_ID;
use crate::secret::{random_base62, random_bytes, sha256_hex};
use crate::store::{
    AgentOp, AgentQuery, AgentRecord, Applied, ChallengeRecord, Change, ClaimCodeRecord,
    GroupMembers, LastSeen, Op, SelectorTerms, StoreError,
};
use crate::time::{iso, now_ms};

use super::keys::{b64, b64_decode, parse_public_key, verify_signature};

const MAX_NAME_CHARS: usize = 200;
const MAX_METADATA_BYTES: usize = 16 * 1024;

pub fn to_wire(a: AgentRecord) -> api::Agent {
    api::Agent {
        verification_tier: if a.attested_at.is_some() {
            "attested"
        } else {
            "unverified"
        }
        .into(),
        agent_id: a.id,
        name: a.name,
        public_key: a.public_key,
        key_type: a.key_type,
        metadata: a.metadata,
        status: a.status.as_str().into(),
        workspace_id: a.workspace_id,
        risk_tier: a.risk_tier.as_str().to_owned(),
        created_at: iso(a.created_at),
        updated_at: iso(a.updated_at),
        attested_at: a.attested_at.map(iso),
        last_seen_at: a.last_seen_at.map(iso),
    }
}

/// An agent id as a caller wrote it (a path, a form, a body), checked once: text that is not an
/// agent id names no agent, `unknown_agent`, with no database round trip.
pub fn agent_id(text: &str) -> IdentityResult<AgentId> {
    AgentId::parse(text).ok_or_else(IdentityError::unknown_agent)
}

/// The agent with this id in the caller's workspace; agents of other workspaces and unclaimed
/// agents are `unknown_agent`, exactly like agents that do not exist.
pub async fn agent_in_workspace(
    ctx: &Context,
    workspace_id: &str,
    agent_id: &AgentId,
) -> IdentityResult<AgentRecord> {
    match ctx.store.agent(agent_id).await? {
        Some(agent) if agent.in_workspace(workspace_id) => Ok(agent),
        _ => Err(IdentityError::unknown_agent()),
    }
}

/// The workspace's agents as the query filters and pages them, newest first.
pub async fn list(ctx: &Context, query: &AgentQuery) -> IdentityResult<Vec<AgentRecord>> {
    Ok(ctx.store.list_agents(query).await?)
}

/// The windows of an agent's last heartbeat a list filters by (`seen=`), and their words.
pub const SEEN_WINDOWS: [(&str, &str); 4] = [
    ("hour", "in the last hour"),
    ("day", "in the last day"),
    ("stale", "not in the last day"),
    ("never", "never"),
];

/// The last-heartbeat window `seen` names (see [`SEEN_WINDOWS`]) at `now`; 400 `invalid_seen`
/// for another word.
pub fn last_seen(seen: &str, now: i64) -> IdentityResult<LastSeen> {
    const HOUR_MS: i64 = 3_600_000;
    match seen {
        "hour" => Ok(LastSeen::Since(now - HOUR_MS)),
        "day" => Ok(LastSeen::Since(now - 24 * HOUR_MS)),
        "stale" => Ok(LastSeen::Before(now - 24 * HOUR_MS)),
        "never" => Ok(LastSeen::Never),
        _ => Err(IdentityError::invalid(
            "seen",
            "must be `hour`, `day`, `stale` or `never`",
        )),
    }
}

/// The names of the groups of the workspace's default policy (what the console's agents list
/// filters by; vault grants to a group name these too), in the spec's order.
pub async fn group_names(ctx: &Context, workspace_id: &str) -> IdentityResult<Vec<String>> {
    with_default_groups(ctx, workspace_id, |groups| {
        groups.iter().map(|g| g.name.clone()).collect()
    })
    .await
}

/// The members of `group` of the workspace's default policy, as the agents list matches them;
/// none when the policy has no such group (as a label or a name no agent has matches none).
pub async fn group_members(
    ctx: &Context,
    workspace_id: &str,
    group: &str,
) -> IdentityResult<GroupMembers> {
    with_default_groups(ctx, workspace_id, |groups| {
        groups
            .iter()
            .find(|g| g.name == group)
            .map(|found| GroupMembers {
                ids: found.members.clone(),
                selectors: found
                    .selectors
                    .iter()
                    .map(|s| SelectorTerms {
                        metadata: s.metadata.clone().into_iter().collect(),
                        labels: s.labels.clone().into_iter().collect(),
                    })
                    .collect(),
            })
            .unwrap_or_default()
    })
    .await
}

/// What `read` makes of the groups of the workspace's default policy (none without one), read
/// in the replica's cache of compiled policies.
async fn with_default_groups<T>(
    ctx: &Context,
    workspace_id: &str,
    read: impl FnOnce(&[crate::policy::spec::AgentGroup]) -> T,
) -> IdentityResult<T> {
    let store = ctx.store.as_ref();
    let view = ctx.caches.view(store, workspace_id).await?;
    let policy = ctx.caches.policy(store, &view, DEFAULT_POLICY_ID).await?;
    Ok(read(policy.as_ref().map_or(&[][..], |p| {
        p.compiled.spec.agent_groups.as_slice()
    })))
}

/// How many of the workspace's agents have each status, in the order pending, active,
/// suspended, revoked (a status without agents counts 0).
pub async fn status_counts(
    ctx: &Context,
    workspace_id: &str,
) -> IdentityResult<[(AgentStatus, i64); 4]> {
    let stored = ctx.store.agent_status_counts(workspace_id).await?;
    Ok([
        AgentStatus::Pending,
        AgentStatus::Active,
        AgentStatus::Suspended,
        AgentStatus::Revoked,
    ]
    .map(|status| {
        let n = stored
            .iter()
            .find(|(s, _)| *s == status)
            .map_or(0, |(_, n)| *n);
        (status, n)
    }))
}

fn new_challenge(
    ctx: &Context,
    agent_id: &str,
    now: i64,
    name: &str,
    metadata: &Value,
) -> ChallengeRecord {
    ChallengeRecord {
        id: ids::new_id(ids::CHALLENGE),
        agent_id: agent_id.to_owned(),
        challenge: b64(&random_bytes::<32>()),
        created_at: now,
        expires_at: now + ctx.config.challenge_ttl_ms,
        used_at: None,
        name: Some(name.to_owned()),
        metadata: Some(metadata.clone()),
    }
}

/// Registers an agent (or, for a public key already registered in the same workspace, issues a
/// new challenge for that agent). `workspace_id` is the caller's when an API key was sent;
/// without one the agent is unclaimed.
pub async fn register(
    ctx: &Context,
    workspace_id: Option<&str>,
    actor: &Actor,
    req: &api::RegisterRequest,
) -> IdentityResult<api::RegisterResponse> {
    let name = req.name.trim();
    if name.is_empty() {
        return Err(IdentityError::missing("name"));
    }
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(IdentityError::invalid(
            "name",
            format!("must be at most {MAX_NAME_CHARS} characters"),
        ));
    }
    match req.key_type.as_deref() {
        None | Some("ed25519") => {}
        Some(_) => return Err(IdentityError::invalid("key_type", "must be `ed25519`")),
    }
    if req.public_key.trim().is_empty() {
        return Err(IdentityError::missing("public_key"));
    }
    let key =
        parse_public_key(&req.public_key).map_err(|e| IdentityError::invalid("public_key", e))?;
    let public_key = b64(key.as_bytes());
    let metadata = match req.metadata.clone() {
        None | Some(Value::Null) => json!({}),
        Some(Value::Object(map)) => Value::Object(map),
        Some(_) => return Err(IdentityError::invalid("metadata", "must be a JSON object")),
    };
    if metadata.to_string().len() > MAX_METADATA_BYTES {
        return Err(IdentityError::invalid(
            "metadata",
            format!("must be at most {MAX_METADATA_BYTES} bytes of JSON"),
        ));
    }

    let now = now_ms();
    let existing = ctx
        .store
        .agent_by_public_key(workspace_id, &public_key)
        .await?;
    if let Some(agent) = existing
        .as_ref()
        .filter(|a| a.status == AgentStatus::Revoked)
    {
        return Err(IdentityError::agent_not_active(agent.status.as_str()));
    }
    let agent_id = existing
        .as_ref()
        .map_or_else(|| ids::new_id(ids::AGENT), |a| a.id.clone());
    let challenge = new_challenge(ctx, &agent_id, now, name, &metadata);
    let response = api::RegisterResponse {
        ok: true,
        agent_id: agent_id.clone(),
        challenge_id: challenge.id.clone(),
        challenge: challenge.challenge.clone(),
        expires_at: iso(challenge.expires_at),
        status: existing
            .as_ref()
            .map_or(AgentStatus::Pending, |a| a.status)
            .as_str()
            .into(),
    };
    let change = match existing {
        // Public keys are public: a second registration yields a new challenge and changes
        // nothing yet. The name and metadata it proposes travel with the challenge and apply
        // only when the key holder attests it.
        Some(_) => {
            let event = audit::state_change(
                "agent.challenge_issued",
                "register",
                workspace_id,
                Some(&agent_id),
                actor,
                json!({ "challenge_id": challenge.id }),
            );
            Change::new(AgentOp::IssueChallenge(challenge)).audited(event)
        }
        None => {
            let agent = AgentRecord {
                id: agent_id.clone(),
                workspace_id: workspace_id.map(str::to_owned),
                name: name.to_owned(),
                public_key,
                key_type: "ed25519".into(),
                metadata,
                status: AgentStatus::Pending,
                risk_tier: RiskTier::Low,
                created_at: now,
                updated_at: now,
                attested_at: None,
                last_seen_at: None,
            };
            let event = audit::state_change(
                "agent.registered",
                "register",
                workspace_id,
                Some(&agent_id),
                actor,
                json!({ "name": agent.name, "challenge_id": challenge.id, "claimed": workspace_id.is_some() }),
            );
            Change::new(AgentOp::Register {
                agent: Box::new(agent),
                challenge,
            })
            .audited(event)
        }
    };
    let first_registration = matches!(change.op, Op::Agent(AgentOp::Register { .. }));
    match ctx.writer.commit(change).await {
        Ok(_) => Ok(response),
        // The same key was registered at the same instant (another replica): this request is
        // now a re-registration of that agent.
        Err(StoreError::Conflict(_)) if first_registration => {
            Box::pin(register(ctx, workspace_id, actor, req)).await
        }
        Err(e) => Err(e.into()),
    }
}

/// Proves key ownership: the signature over the decoded challenge bytes activates the agent.
pub async fn attest(ctx: &Context, req: api::AttestRequest) -> IdentityResult<api::AttestResponse> {
    for (field, value) in [
        ("agent_id", &req.agent_id),
        ("challenge_id", &req.challenge_id),
        ("signature", &req.signature),
    ] {
        if value.trim().is_empty() {
            return Err(IdentityError::missing(field));
        }
    }
    let unknown = || {
        IdentityError::not_found(
            "unknown_challenge",
            "no such attestation challenge for this agent",
        )
    };
    if !ids::has_shape(&req.challenge_id, ids::CHALLENGE) {
        return Err(unknown());
    }
    let challenge = ctx
        .store
        .challenge(&req.challenge_id)
        .await?
        .ok_or_else(unknown)?;
    if challenge.agent_id != req.agent_id {
        return Err(unknown());
    }
    let agent = ctx
        .store
        .agent(&challenge.agent_id)
        .await?
        .ok_or_else(unknown)?;
    let used = || {
        IdentityError::conflict(
            "challenge_used",
            "this challenge was already used; register again for a new one",
        )
    };
    if challenge.used_at.is_some() {
        return Err(used());
    }
    let now = now_ms();
    if now >= challenge.expires_at {
        return Err(IdentityError::gone(
            "challenge_expired",
            "this challenge expired; register again for a new one",
        ));
    }
    let key = parse_public_key(&agent.public_key).map_err(IdentityError::internal)?;
    let bytes = b64_decode(&challenge.challenge)
        .ok_or_else(|| IdentityError::internal("stored challenge is not base64"))?;
    if !verify_signature(&key, &bytes, &req.signature) {
        return Err(IdentityError::unauthenticated(
            "invalid_signature",
            "the signature does not verify over the decoded challenge bytes with the registered key",
        ));
    }
    if agent.status == AgentStatus::Revoked {
        return Err(IdentityError::agent_not_active(agent.status.as_str()));
    }
    let event = audit::state_change(
        "agent.attested",
        "attest",
        agent.workspace_id.as_deref(),
        Some(&agent.id),
        &Actor::Agent(agent.id.clone()),
        json!({ "challenge_id": challenge.id }),
    );
    let change = Change::new(AgentOp::Attest {
        challenge_id: challenge.id.clone(),
        agent_id: agent.id.clone(),
        at: now,
    })
    .audited(event);
    match ctx.writer.commit(change).await {
        Ok(Applied::Agent(agent)) => {
            ctx.agent_changed(&agent.id).await;
            Ok(api::AttestResponse {
                ok: true,
                agent_id: agent.id,
                status: agent.status.as_str().into(),
                attested_at: iso(now),
            })
        }
        Ok(_) => Err(IdentityError::internal(
            "attest answered an unexpected outcome",
        )),
        Err(StoreError::ChallengeUsed) => Err(used()),
        Err(StoreError::Conflict(_)) => Err(IdentityError::agent_not_active("revoked")),
        Err(e) => Err(e.into()),
    }
}

/// A single-use code with which a workspace admin claims this (unclaimed) agent. The agent asks
/// for it with a signed request; the nonce is consumed with the code.
pub async fn claim_code(
    ctx: &Context,
    agent: &AgentRecord,
    nonce: crate::store::NonceClaim,
) -> IdentityResult<api::ClaimCodeResponse> {
    if agent.workspace_id.is_some() {
        return Err(already_claimed());
    }
    super::accounts::enforce_rate_limit(ctx, format!("claim_code:{}", agent.id), 3_600_000, 10)
        .await?;
    let now = now_ms();
    let code = format!("clm_{}", random_base62(32));
    let record = ClaimCodeRecord {
        code_hash: sha256_hex(code.as_bytes()),
        agent_id: agent.id.clone(),
        created_at: now,
        expires_at: now + ctx.config.claim_code_ttl_ms,
        used_at: None,
    };
    let expires_at = record.expires_at;
    let event = audit::state_change(
        "agent.claim_code_created",
        "claim_code",
        None,
        Some(&agent.id),
        &Actor::Agent(agent.id.clone()),
        json!({ "expires_at": iso(expires_at) }),
    );
    match ctx
        .writer
        .commit(
            Change::new(AgentOp::CreateClaimCode(record))
                .with_nonce(nonce)
                .audited(event),
        )
        .await
    {
        Ok(_) => {}
        Err(StoreError::Conflict(_)) => return Err(already_claimed()),
        Err(e) => return Err(e.into()),
    }
    Ok(api::ClaimCodeResponse {
        ok: true,
        agent_id: agent.id.clone(),
        claim_url: format!("{}/v1/agent-approval/{code}", ctx.public_url),
        claim_code: code,
        expires_at: iso(expires_at),
    })
}

fn already_claimed() -> IdentityError {
    IdentityError::conflict(
        "agent_already_claimed",
        "this agent already belongs to a workspace",
    )
}

/// What an admin can do to an agent's status.
#[derive(Debug, Clone, Copy)]
pub enum StatusAction {
    Suspend,
    Resume,
    Revoke,
    /// An admin vouches for a pending agent that has not attested: it becomes active.
    Approve,
}

impl StatusAction {
    fn verb(self) -> &'static str {
        match self {
            Self::Suspend => "suspend",
            Self::Resume => "resume",
            Self::Revoke => "revoke",
            Self::Approve => "approve",
        }
    }

    fn event_type(self) -> &'static str {
        match self {
            Self::Suspend => "agent.suspended",
            Self::Resume => "agent.resumed",
            Self::Revoke => "agent.revoked",
            Self::Approve => "agent.approved",
        }
    }

    /// The status the agent moves to, `None` when it is already there (idempotent), or an
    /// error for a move that is not allowed.
    fn target(self, agent: &AgentRecord) -> IdentityResult<Option<AgentStatus>> {
        use AgentStatus::*;
        let refuse = |why: &str| {
            Err(IdentityError::conflict(
                "invalid_status_transition",
                why.to_owned(),
            ))
        };
        match (self, agent.status) {
            (Self::Revoke, Revoked) | (Self::Suspend, Suspended) => Ok(None),
            (Self::Revoke, _) => Ok(Some(Revoked)),
            (_, Revoked) => refuse("a revoked agent stays revoked"),
            (Self::Suspend, _) => Ok(Some(Suspended)),
            (Self::Resume, Suspended) => Ok(Some(if agent.attested_at.is_some() {
                Active
            } else {
                Pending
            })),
            (Self::Resume, _) => Ok(None),
            (Self::Approve, Pending) => Ok(Some(Active)),
            (Self::Approve, Active) => Ok(None),
            (Self::Approve, _) => refuse("only pending agents can be approved"),
        }
    }
}

/// The reason a caller gives for a change of an agent's status, checked: at most 500
/// characters. The edge reads it before the agent's id: a request the document refuses is
/// refused whatever the agent (a malformed id with a reason too long is `invalid_reason`).
#[derive(Debug, Clone, Default)]
pub struct StatusReason(Option<String>);

impl StatusReason {
    pub fn parse(reason: Option<String>) -> IdentityResult<Self> {
        if reason.as_deref().is_some_and(|r| r.chars().count() > 500) {
            return Err(IdentityError::invalid(
                "reason",
                "must be at most 500 characters",
            ));
        }
        Ok(Self(reason))
    }
}

pub async fn set_status(
    ctx: &Context,
    workspace_id: &str,
    agent_id: &AgentId,
    action: StatusAction,
    reason: StatusReason,
    actor: &Actor,
) -> IdentityResult<api::Agent> {
    let StatusReason(reason) = reason;
    let agent = agent_in_workspace(ctx, workspace_id, agent_id).await?;
    let Some(to) = action.target(&agent)? else {
        return Ok(to_wire(agent));
    };
    let event = audit::state_change(
        action.event_type(),
        action.verb(),
        Some(workspace_id),
        Some(&agent.id),
        actor,
        json!({ "from": agent.status.as_str(), "to": to.as_str(), "reason": reason }),
    );
    let change = Change::new(AgentOp::SetStatus {
        agent_id: agent.id.clone(),
        workspace_id: workspace_id.to_owned(),
        from: agent.status,
        to,
        at: now_ms(),
    })
    .audited(event);
    match ctx.writer.commit(change).await? {
        Applied::Agent(agent) => {
            ctx.agent_changed(&agent.id).await;
            Ok(to_wire(*agent))
        }
        _ => Err(IdentityError::internal(
            "set_status answered an unexpected outcome",
        )),
    }
}

/// What a claim code stands for, for the page or API client that redeems it.
pub async fn claim_info(ctx: &Context, code: &str) -> IdentityResult<api::ClaimInfo> {
    let (record, agent) = claim_lookup(ctx, code).await?;
    let now = now_ms();
    let status = match (record.used_at, now >= record.expires_at) {
        (Some(_), _) => "used",
        (None, true) => "expired",
        (None, false) => "pending",
    };
    Ok(api::ClaimInfo {
        agent: to_wire(agent),
        status: status.into(),
        expires_at: iso(record.expires_at),
    })
}

async fn claim_lookup(ctx: &Context, code: &str) -> IdentityResult<(ClaimCodeRecord, AgentRecord)> {
    let unknown = || IdentityError::not_found("unknown_claim_code", "this claim link is not valid");
    if !code.starts_with("clm_") || code.len() > 100 {
        return Err(unknown());
    }
    let record = ctx
        .store
        .claim_code(&sha256_hex(code.as_bytes()))
        .await?
        .ok_or_else(unknown)?;
    let agent = ctx
        .store
        .agent(&record.agent_id)
        .await?
        .ok_or_else(unknown)?;
    Ok((record, agent))
}

/// A workspace owner or admin claims the unclaimed agent into their active workspace, or
/// rejects the claim. The code is used up either way.
pub async fn redeem_claim(
    ctx: &Context,
    principal: &super::accounts::Principal,
    code: &str,
    decision: &str,
) -> IdentityResult<api::Agent> {
    let (workspace_id, _) = principal.admin_of()?;
    let (record, agent) = claim_lookup(ctx, code).await?;
    let claim = match decision {
        "claim" => true,
        "reject" => false,
        "" => return Err(IdentityError::missing("decision")),
        _ => {
            return Err(IdentityError::invalid(
                "decision",
                "must be `claim` or `reject`",
            ))
        }
    };
    let now = now_ms();
    if record.used_at.is_some() {
        return Err(IdentityError::conflict(
            "claim_code_used",
            "this claim link was already used",
        ));
    }
    if now >= record.expires_at {
        return Err(IdentityError::gone(
            "claim_code_expired",
            "this claim link expired",
        ));
    }
    if agent.workspace_id.is_some() {
        return Err(already_claimed());
    }
    let event = audit::state_change(
        if claim {
            "agent.claimed"
        } else {
            "agent.claim_rejected"
        },
        if claim { "claim" } else { "reject_claim" },
        Some(&workspace_id),
        Some(&agent.id),
        &principal.actor(),
        json!({ "name": agent.name }),
    );
    let op = if claim {
        AgentOp::Claim {
            code_hash: record.code_hash.clone(),
            agent_id: agent.id.clone(),
            workspace_id,
            at: now,
        }
    } else {
        AgentOp::RejectClaim {
            code_hash: record.code_hash.clone(),
            at: now,
        }
    };
    match ctx.writer.commit(Change::new(op).audited(event)).await {
        Ok(Applied::Agent(claimed)) => {
            ctx.agent_changed(&claimed.id).await;
            Ok(to_wire(*claimed))
        }
        Ok(_) => Ok(to_wire(agent)),
        Err(StoreError::Conflict(why)) => Err(IdentityError::conflict("claim_conflict", why)),
        Err(e) => Err(e.into()),
    }
}
