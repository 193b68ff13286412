//! The vault, the agent's side: an agent, with its own signed requests,
//! asks how the policy would judge a vault action, mints short request leases from the
//! workflow lease a person handed it, and reads secrets with them (the proxy, which uses
//! secrets without handing them over, is in `proxy.rs`).
//!
//! Every action is judged three ways, in this order: the lease (the agent's, for this set and
//! action, live, with uses left), the grants (a live grant of the set to the agent or one of
//! its groups allowing the action and every key), then the policy (actions `vault.read`,
//! `vault.proxy`, `vault.mint_lease`, whose decision is committed and audited as any check's).
//! Only then is a lease's use consumed, in one transaction that checks again the lease, the
//! grant, the agent's status and the kill switch, so two replicas racing for the last use of a
//! lease cannot both succeed.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Map, Value};

use crate::api;
use crate::audit::{self, Actor};
use crate::context::Context;
use crate::domain::ids;
use crate::net::egress::Profile;
use crate::policy::cache::DEFAULT_POLICY_ID;
use crate::policy::check::{check_for_agent, AgentCheck, Effect};
use crate::policy::error::CheckError;
use crate::policy::evaluate::groups_of;
use crate::secret::{random_base62, sha256_hex};
use crate::store::{
    AgentRecord, AuditRecord, GrantRecord, LeaseRecord, LeasedScene, NonceClaim, SecretSetRecord,
    SecretVersion, StoreError, VaultOp,
};
use crate::time::{iso, now_ms};

use super::leases::{lease_action, LEASE};
use super::sets::{is_live, live_set, open_entries, set_ref, unknown_set};
pub use crate::domain::VaultAction;
use crate::enforce::{EnforceError, EnforceResult};

pub const REQUEST_TOKEN_PREFIX: &str = "vrl_";
const DEFAULT_REQUEST_TTL_SECS: i64 = 60;
const MAX_REQUEST_TTL_SECS: i64 = 900;
const MAX_USES: i64 = 100;

/// An agent's signed request: who signed it, and the nonce its first commit spends.
pub struct Signer<'a> {
    pub agent: &'a AgentRecord,
    pub nonce: NonceClaim,
}

impl Signer<'_> {
    pub(super) fn workspace_id(&self) -> EnforceResult<&str> {
        self.agent
            .workspace_id
            .as_deref()
            .ok_or_else(EnforceError::unknown_agent)
    }

    fn actor(&self) -> Actor {
        Actor::Agent(self.agent.id.clone())
    }
}

/// The set a request names, live, with its current version.
pub struct Scene {
    pub workspace_id: String,
    pub set: SecretSetRecord,
    pub version: SecretVersion,
}

impl Scene {
    pub async fn load(
        ctx: &Context,
        workspace_id: &str,
        secret_set_id: &Value,
    ) -> EnforceResult<Scene> {
        let set = live_set(ctx, workspace_id, &set_ref(secret_set_id)?).await?;
        Scene::of_set(ctx, workspace_id, set).await
    }

    /// A live set read already, with its current version.
    pub async fn of_set(
        ctx: &Context,
        workspace_id: &str,
        set: SecretSetRecord,
    ) -> EnforceResult<Scene> {
        let version = ctx
            .store
            .secret_version(&set.id, set.current_version)
            .await?;
        Scene::with_version(workspace_id, set, version)
    }

    /// A live set with its current version, read already (`None`: it is missing).
    fn with_version(
        workspace_id: &str,
        set: SecretSetRecord,
        version: Option<SecretVersion>,
    ) -> EnforceResult<Scene> {
        let version = version
            .ok_or_else(|| EnforceError::internal("a secret set's current version is missing"))?;
        Ok(Scene {
            workspace_id: workspace_id.to_owned(),
            set,
            version,
        })
    }

    /// The proxy profile `name` of the set's current version: `unknown_profile` when it has
    /// none of that name.
    pub fn profile(&self, name: &str) -> EnforceResult<Profile> {
        let stored = self
            .version
            .profiles
            .get(name)
            .filter(|_| !name.is_empty())
            .ok_or_else(|| {
                EnforceError::not_found(
                    "unknown_profile",
                    format!("the secret set `{}` has no profile `{name}`", self.set.name),
                )
            })?;
        Profile::from_json(stored).map_err(EnforceError::internal)
    }

    /// A request's `environment` or `provider`, when given, must be the set's.
    pub(super) fn check_claims(
        &self,
        environment: Option<&str>,
        provider: Option<&str>,
    ) -> EnforceResult<()> {
        for (field, claimed, actual) in [
            ("environment", environment, &self.set.environment),
            ("provider", provider, &self.set.provider),
        ] {
            if let Some(claimed) = claimed.filter(|c| !c.is_empty()) {
                if claimed != actual {
                    return Err(EnforceError::invalid(
                        field,
                        format!(
                            "the secret set `{}` is for {field} `{actual}`, not `{claimed}`",
                            self.set.name
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The context of a vault check (see docs/policy-spec.md, "Vault checks").
    pub(super) fn context(&self, keys: &[String]) -> Map<String, Value> {
        let mut context = Map::new();
        context.insert("secret_set".into(), json!(self.set.name));
        context.insert("secret_set_id".into(), json!(self.set.id));
        if !self.set.provider.is_empty() {
            context.insert("provider".into(), json!(self.set.provider));
        }
        if !self.set.environment.is_empty() {
            context.insert("environment".into(), json!(self.set.environment));
        }
        context.insert("keys".into(), json!(keys));
        context
    }

    /// Keys a request names: each a key of the set (`unknown_key`), in order, once.
    pub(super) fn keys(&self, asked: Option<&[String]>) -> EnforceResult<Vec<String>> {
        let Some(asked) = asked else {
            return Ok(self.version.keys.clone());
        };
        let mut keys: Vec<String> = Vec::new();
        for key in asked {
            if !self.version.keys.contains(key) {
                return Err(EnforceError::not_found(
                    "unknown_key",
                    format!("the secret set `{}` has no key `{key}`", self.set.name),
                ));
            }
            if !keys.contains(key) {
                keys.push(key.clone());
            }
        }
        Ok(keys)
    }

    /// The set's keys that every one of `grants` allows.
    pub(super) fn granted_keys(&self, grants: &[&GrantRecord]) -> Vec<String> {
        self.version
            .keys
            .iter()
            .filter(|k| {
                grants
                    .iter()
                    .all(|g| g.allowed_keys.as_ref().is_none_or(|a| a.contains(k)))
            })
            .cloned()
            .collect()
    }

    /// The live grant of this set to the agent (or one of its groups) that allows `action`
    /// on every key: `no_grant` when none allows the action, `key_not_granted` when none
    /// covers some key.
    pub(super) async fn grant(
        &self,
        ctx: &Context,
        agent: &AgentRecord,
        action: VaultAction,
        keys: &[String],
    ) -> EnforceResult<GrantRecord> {
        let grants = ctx
            .store
            .vault_grants(&self.workspace_id, Some(&self.set.id))
            .await?;
        self.grant_among(ctx, agent, action, keys, &grants).await
    }

    /// [`Scene::grant`] among the set's grants `grants`, read already.
    pub(super) async fn grant_among(
        &self,
        ctx: &Context,
        agent: &AgentRecord,
        action: VaultAction,
        keys: &[String],
        grants: &[GrantRecord],
    ) -> EnforceResult<GrantRecord> {
        let now = now_ms();
        let groups = agent_groups(ctx, &self.workspace_id, agent).await?;
        let usable: Vec<GrantRecord> = grants
            .iter()
            .filter(|g| g.revoked_at.is_none() && g.expires_at.is_none_or(|e| e > now))
            .filter(|g| match (&g.agent_id, &g.group_name) {
                (Some(a), _) => *a == agent.id,
                (None, Some(group)) => groups.contains(group),
                (None, None) => false,
            })
            .filter(|g| g.allowed_actions.contains(&action))
            .cloned()
            .collect();
        if usable.is_empty() {
            return Err(EnforceError::forbidden(
                "no_grant",
                format!(
                    "no grant lets this agent `{action}` the secret set `{}`",
                    self.set.name
                ),
            ));
        }
        let covers = |g: &GrantRecord, key: &String| {
            g.allowed_keys
                .as_ref()
                .is_none_or(|allowed| allowed.contains(key))
        };
        if let Some(g) = usable.iter().find(|g| keys.iter().all(|k| covers(g, k))) {
            return Ok(g.clone());
        }
        let missing = keys
            .iter()
            .find(|k| !usable.iter().any(|g| covers(g, k)))
            .or_else(|| keys.first())
            .cloned()
            .unwrap_or_default();
        Err(key_not_granted(&missing, &self.set.name))
    }
}

pub(super) fn key_not_granted(key: &str, set_name: &str) -> EnforceError {
    EnforceError::forbidden(
        "key_not_granted",
        format!("no grant lets this agent use `{key}` of the secret set `{set_name}`"),
    )
}

/// The agent's groups under the workspace's default policy (grants to a group name the
/// groups of the workspace's policy specs).
async fn agent_groups(
    ctx: &Context,
    workspace_id: &str,
    agent: &AgentRecord,
) -> EnforceResult<BTreeSet<String>> {
    let store = ctx.store.as_ref();
    let view = ctx.caches.view(store, workspace_id).await?;
    let Some(cached) = ctx.caches.agent_in(store, &view, &agent.id).await? else {
        return Err(EnforceError::unknown_agent());
    };
    let Some(policy) = ctx.caches.policy(store, &view, DEFAULT_POLICY_ID).await? else {
        return Ok(BTreeSet::new());
    };
    let facts = cached.facts(
        "",
        crate::policy::ContextFields::new(&Value::Null),
        None,
        (0, 0),
    );
    Ok(groups_of(&policy.compiled, &facts).into_iter().collect())
}

/// Asks the policy about a vault action and, on allow, commits `effect` (the lease's use or
/// mint, with its events) in the same transaction as the decision and the request's nonce:
/// both happen or neither does. Deny and challenge answer 403; a refused effect answers why.
pub(super) async fn decide(
    ctx: &Context,
    signer: &Signer<'_>,
    action: VaultAction,
    context: Map<String, Value>,
    effect: &Effect,
) -> EnforceResult<api::DecisionResponse> {
    let decision = judge(ctx, signer, action, context, AgentCheck::Act(effect))
        .await
        .map_err(|e| match e {
            EnforceError::Check(CheckError::Store(refused)) => lease_refusal(refused),
            other => other,
        })?;
    match decision.decision.as_str() {
        "allow" => Ok(decision),
        "challenge" => Err(EnforceError::Challenged(Box::new(decision))),
        _ => Err(EnforceError::Denied(Box::new(decision))),
    }
}

pub(super) async fn judge(
    ctx: &Context,
    signer: &Signer<'_>,
    action: VaultAction,
    context: Map<String, Value>,
    mode: AgentCheck<'_>,
) -> EnforceResult<api::DecisionResponse> {
    let workspace_id = signer.workspace_id()?;
    let view = ctx.caches.view(ctx.store.as_ref(), workspace_id).await?;
    Ok(check_for_agent(
        ctx,
        view,
        Some(signer.nonce.clone()),
        &signer.actor(),
        api::CheckRequest {
            agent_id: signer.agent.id.clone(),
            action: action.check_action().into(),
            context: Some(Value::Object(context)),
            email: None,
            policy_id: None,
        },
        mode,
    )
    .await?)
}

/// A request on a secret set under one of the agent's leases: the set with its current
/// version, the lease of the request's token (checked) and the set's grants. The four are read
/// in one round trip (see `VaultStore::leased_scene`), and judged in the order the vault's
/// actions are: the set, then the lease.
pub(super) struct Leased {
    pub scene: Scene,
    pub lease: LeaseRecord,
    grants: Vec<GrantRecord>,
}

impl Leased {
    pub(super) async fn load(
        ctx: &Context,
        signer: &Signer<'_>,
        secret_set_id: &Value,
        token: &str,
        kind: &str,
    ) -> EnforceResult<Leased> {
        let workspace_id = signer.workspace_id()?;
        let set = set_ref(secret_set_id)?;
        let token_hash = (!token.is_empty()).then(|| sha256_hex(token.as_bytes()));
        let found = ctx
            .store
            .leased_scene(workspace_id, &set, token_hash.as_deref())
            .await?;
        let LeasedScene {
            set,
            version,
            grants,
            lease,
        } = found.filter(|f| is_live(&f.set)).ok_or_else(unknown_set)?;
        let scene = Scene::with_version(workspace_id, set, version)?;
        let lease = lease_judged(signer, &scene, token, kind, lease)?;
        Ok(Leased {
            scene,
            lease,
            grants,
        })
    }

    /// [`Leased::load`] for a request lease, which must have been minted for `action`.
    pub(super) async fn request(
        ctx: &Context,
        signer: &Signer<'_>,
        secret_set_id: &Value,
        token: &str,
        action: VaultAction,
    ) -> EnforceResult<Leased> {
        let leased = Leased::load(ctx, signer, secret_set_id, token, "request").await?;
        if !leased.lease.actions.contains(&action) {
            let minted: Vec<String> = leased
                .lease
                .actions
                .iter()
                .map(|a| format!("`{a}`"))
                .collect();
            return Err(EnforceError::forbidden(
                "action_not_leased",
                format!(
                    "the request lease was minted for {}, not `{action}`",
                    minted.join(", ")
                ),
            ));
        }
        Ok(leased)
    }

    /// [`Scene::grant`] among the grants read with the lease.
    pub(super) async fn grant(
        &self,
        ctx: &Context,
        agent: &AgentRecord,
        action: VaultAction,
        keys: &[String],
    ) -> EnforceResult<GrantRecord> {
        self.scene
            .grant_among(ctx, agent, action, keys, &self.grants)
            .await
    }
}

/// The lease `found` by the hash of `token`, if it is a live `kind` lease of the signer for the
/// scene's set with uses left: `invalid_lease` unless it is the agent's, of that kind and set,
/// and not revoked; `lease_expired`; `lease_used` when no use is left.
fn lease_judged(
    signer: &Signer<'_>,
    scene: &Scene,
    token: &str,
    kind: &str,
    found: Option<LeaseRecord>,
) -> EnforceResult<LeaseRecord> {
    if token.is_empty() {
        return Err(EnforceError::missing(if kind == "workflow" {
            "workflow_lease_token"
        } else {
            "request_lease_token"
        }));
    }
    let invalid = |why: &str| EnforceError::unauthenticated("invalid_lease", why.to_owned());
    let lease = found
        .filter(|l| l.kind == kind && l.agent_id == signer.agent.id)
        .filter(|l| l.workspace_id == scene.workspace_id)
        .ok_or_else(|| invalid(&format!("no {kind} lease of this agent has this token")))?;
    if lease.secret_set_id != scene.set.id {
        return Err(invalid("the lease is for another secret set"));
    }
    if lease.revoked_at.is_some() {
        return Err(invalid("the lease was revoked"));
    }
    if lease.expires_at <= now_ms() {
        return Err(EnforceError::gone("lease_expired", "the lease has expired"));
    }
    if lease.uses_left.is_some_and(|n| n <= 0) {
        return Err(EnforceError::conflict(
            "lease_used",
            "the lease has no use left",
        ));
    }
    Ok(lease)
}

/// The refusal a store conflict over a lease stands for (read in the transaction that refused).
pub(super) fn lease_refusal(err: StoreError) -> EnforceError {
    match err {
        StoreError::Conflict(why) => match why.as_str() {
            "minting_paused" => EnforceError::MintingPaused { reason: None },
            "lease_used" => EnforceError::conflict("lease_used", "the lease has no use left"),
            "lease_expired" => EnforceError::gone("lease_expired", "the lease has expired"),
            "lease_revoked" => {
                EnforceError::unauthenticated("invalid_lease", "the lease was revoked")
            }
            "no_grant" => EnforceError::forbidden(
                "no_grant",
                "the grant was revoked or expired, or its secret set deleted",
            ),
            _ => EnforceError::unauthenticated("invalid_lease", "the lease is not valid"),
        },
        StoreError::AgentNotActive => EnforceError::agent_not_active("inactive"),
        e => e.into(),
    }
}

/// The keys a lease covers, checked against what is asked: `key_not_granted` for one outside.
pub(super) fn within_lease(
    lease: &LeaseRecord,
    keys: &[String],
    set_name: &str,
) -> EnforceResult<()> {
    if let Some(allowed) = &lease.keys {
        if let Some(k) = keys.iter().find(|k| !allowed.contains(k)) {
            return Err(key_not_granted(k, set_name));
        }
    }
    Ok(())
}

/// One use of the lease, taken in the transaction that commits the decision (see [`decide`]):
/// the lease, the grant, the agent and the kill switch are checked again there.
pub(super) fn use_of(
    signer: &Signer<'_>,
    scene: &Scene,
    lease: &LeaseRecord,
    grant: &GrantRecord,
) -> VaultOp {
    VaultOp::UseLease {
        workspace_id: scene.workspace_id.clone(),
        lease_id: lease.id.clone(),
        agent_id: signer.agent.id.clone(),
        grant_id: grant.id.clone(),
        at: now_ms(),
    }
}

/// A vault event of the agent's (never a value or a token in `details`).
/// Its `trace_id` is the decision's: set when it commits with the decision, or by the caller.
pub(super) fn event(
    signer: &Signer<'_>,
    scene: &Scene,
    event_type: &str,
    action: &str,
    mut details: Value,
) -> AuditRecord {
    if let Value::Object(d) = &mut details {
        d.insert("secret_set_id".into(), json!(scene.set.id));
        d.insert("number".into(), json!(scene.set.number));
    }
    audit::state_change(
        event_type,
        action,
        Some(&scene.workspace_id),
        Some(&signer.agent.id),
        &signer.actor(),
        details,
    )
}

/// `POST /v1/vault/leases/request/mint`: a short request lease from a workflow lease.
pub async fn mint(
    ctx: &Context,
    signer: Signer<'_>,
    req: api::RequestLeaseMintRequest,
) -> EnforceResult<api::RequestLeaseResponse> {
    let workspace_id = signer.workspace_id()?;
    let leased = Leased::load(
        ctx,
        &signer,
        &req.secret_set_id,
        &req.workflow_lease_token,
        "workflow",
    )
    .await?;
    let (scene, workflow) = (&leased.scene, &leased.lease);
    let action = lease_action("action", &req.action)?;
    if !workflow.actions.contains(&action) {
        return Err(EnforceError::forbidden(
            "action_not_leased",
            format!("the workflow lease does not allow `{action}`"),
        ));
    }
    let ttl = req.ttl_seconds.unwrap_or(DEFAULT_REQUEST_TTL_SECS);
    if !(1..=MAX_REQUEST_TTL_SECS).contains(&ttl) {
        return Err(EnforceError::invalid(
            "ttl_seconds",
            format!("must be between 1 and {MAX_REQUEST_TTL_SECS}"),
        ));
    }
    let uses = req.uses.unwrap_or(1);
    if !(1..=MAX_USES).contains(&uses) {
        return Err(EnforceError::invalid(
            "uses",
            format!("must be between 1 and {MAX_USES}"),
        ));
    }
    let asked = match &req.keys {
        Some(keys) => scene.keys(Some(keys))?,
        None => Vec::new(),
    };
    // A grant must allow minting and one the lease's action, on every key asked for. Without
    // `keys` the lease gets the keys both allow, written into it. The minting grant is checked
    // again when the lease is written, the action's at each use.
    let grant = leased
        .grant(ctx, signer.agent, VaultAction::MintLease, &asked)
        .await?;
    let using = leased.grant(ctx, signer.agent, action, &asked).await?;
    let keys = if asked.is_empty() {
        let keys = scene.granted_keys(&[&grant, &using]);
        if keys.is_empty() {
            return Err(EnforceError::forbidden(
                "key_not_granted",
                format!(
                    "no key of the secret set `{}` is granted both for minting and for `{action}`",
                    scene.set.name
                ),
            ));
        }
        keys
    } else {
        asked
    };
    let mut context = scene.context(&keys);
    context.insert("lease_action".into(), json!(action.name()));

    let token = format!("{REQUEST_TOKEN_PREFIX}{}", random_base62(43));
    let now = now_ms();
    let lease = LeaseRecord {
        id: ids::new_id(LEASE),
        workspace_id: workspace_id.to_owned(),
        kind: "request".into(),
        workflow_id: Some(workflow.id.clone()),
        agent_id: signer.agent.id.clone(),
        secret_set_id: scene.set.id.clone(),
        purpose: workflow.purpose.clone(),
        actions: vec![action],
        keys: Some(keys),
        token_hash: sha256_hex(token.as_bytes()),
        uses_left: Some(uses),
        expires_at: (now + ttl * 1000).min(workflow.expires_at),
        revoked_at: None,
        created_at: now,
        created_by: signer.actor().label(),
    };
    let minted = event(
        &signer,
        scene,
        "vault.lease.minted",
        "mint_request_lease",
        json!({
            "lease_id": lease.id, "kind": "request", "workflow_lease_id": workflow.id,
            "actions": lease.actions, "keys": lease.keys, "uses": uses,
            "expires_at": iso(lease.expires_at), "grant_id": grant.id,
        }),
    );
    let answer = api::RequestLeaseResponse {
        ok: true,
        lease_id: lease.id.clone(),
        request_lease_token: token,
        expires_at: iso(lease.expires_at),
        uses_left: uses,
    };
    let effect = Effect {
        op: VaultOp::MintRequestLease {
            lease: Box::new(lease),
            grant_id: grant.id.clone(),
            at: now,
        }
        .into(),
        audit: vec![minted],
    };
    decide(ctx, &signer, VaultAction::MintLease, context, &effect).await?;
    Ok(answer)
}

/// `POST /v1/vault/secrets/read`: the values of granted keys, for one use of a request lease
/// minted for `read`.
pub async fn read(
    ctx: &Context,
    signer: Signer<'_>,
    req: api::SecretsReadRequest,
) -> EnforceResult<api::SecretsReadResponse> {
    let leased = Leased::request(
        ctx,
        &signer,
        &req.secret_set_id,
        &req.request_lease_token,
        VaultAction::Read,
    )
    .await?;
    let (scene, lease) = (&leased.scene, &leased.lease);
    if req.keys.is_empty() {
        return Err(EnforceError::missing("keys"));
    }
    let keys = scene.keys(Some(&req.keys))?;
    within_lease(lease, &keys, &scene.set.name)?;
    let grant = leased
        .grant(ctx, signer.agent, VaultAction::Read, &keys)
        .await?;
    scene.check_claims(req.environment.as_deref(), None)?;

    let mut entries = open_entries(ctx, &scene.set, &scene.version)?;
    let secrets: BTreeMap<String, String> = keys
        .iter()
        .filter_map(|k| entries.remove_entry(k))
        .collect();
    drop(entries);
    let details = json!({"lease_id": lease.id, "version": scene.version.version, "keys": keys});
    let effect = Effect {
        op: use_of(&signer, scene, lease, &grant).into(),
        audit: vec![
            event(&signer, scene, "vault.lease.used", "read", details.clone()),
            event(&signer, scene, "vault.secret.read", "read", details),
        ],
    };
    let decision = decide(
        ctx,
        &signer,
        VaultAction::Read,
        scene.context(&keys),
        &effect,
    )
    .await?;
    crate::observe::lease_used("read");
    Ok(api::SecretsReadResponse {
        ok: true,
        secrets,
        version: scene.version.version,
        trace_id: decision.trace_id,
    })
}
