//! In-process caches for the decision hot path: API keys, agents (with their inventory labels),
//! compiled policies and kept decisions. Every replica keeps its own, and this is the only place
//! it keeps them: the check use case and every other use case that reads a key, an agent or a
//! policy go through [`Caches`].
//!
//! **No answer rests on superseded state** (CONTRACT section 7). Each workspace has a state
//! version in the database, bumped in the transaction of every change that decisions or
//! authentications read (a key revoked, an agent's status, labels or reputation, a policy
//! applied, the kill switch). A replica keeps, per workspace, a [`View`]: the version it last
//! read and the cache *epoch* at which it read it. Every cached entry carries the epoch read
//! before it was loaded from the database, and counts only under views it is not older than:
//! an entry loaded after the view's version was read reflects at least that version. A
//! decision made on a view commits only if the view's version is still the database's (checked
//! in the group-commit batch that makes the decision durable, so the hot path gains no round
//! trip); otherwise it is answered `Stale`, the view moves to the new version, and the request
//! is decided again on entries loaded afresh. Answers that commit nothing confirm the version
//! with one read. A poller (woken early by Postgres LISTEN/NOTIFY) moves views and evicts or
//! reloads what other replicas changed, so that stale decisions are rare; entries also expire on
//! their own.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::domain::access::Scopes;
use crate::domain::ids;
use crate::observe::{self, Cache};
use crate::store::{
    AgentRecord, ApiKeyRecord, Basis, Invalidation, PolicyRecord, Store, StoreError,
};

use super::compile::{compile, CompiledPolicy};
use super::evaluate::{
    evaluate_prepared, prepare_agent, Decision, DecisionCache, EmailFacts, Facts, PreparedAgent,
};
use super::spec::{self, PolicySpec, SpecError};

const ENTRY_TTL: Duration = Duration::from_secs(60);
const MAX_ENTRIES: usize = 100_000;

/// A map whose entries expire after [`ENTRY_TTL`].
pub struct TtlMap<V: Clone> {
    map: RwLock<HashMap<String, (V, Instant)>>,
}

impl<V: Clone> Default for TtlMap<V> {
    fn default() -> Self {
        Self {
            map: RwLock::new(HashMap::new()),
        }
    }
}

impl<V: Clone> TtlMap<V> {
    pub fn get(&self, key: &str) -> Option<V> {
        let map = self.map.read().ok()?;
        map.get(key)
            .filter(|(_, at)| at.elapsed() < ENTRY_TTL)
            .map(|(v, _)| v.clone())
    }

    pub fn insert(&self, key: String, value: V) {
        if let Ok(mut map) = self.map.write() {
            if map.len() >= MAX_ENTRIES {
                map.retain(|_, (_, at)| at.elapsed() < ENTRY_TTL);
                if map.len() >= MAX_ENTRIES {
                    map.clear();
                }
            }
            map.insert(key, (value, Instant::now()));
        }
    }

    /// Whether an entry was there.
    pub fn remove(&self, key: &str) -> bool {
        match self.map.write() {
            Ok(mut map) => map.remove(key).is_some(),
            Err(_) => false,
        }
    }

    /// How many entries went.
    pub fn retain(&self, keep: impl Fn(&V) -> bool) -> usize {
        match self.map.write() {
            Ok(mut map) => {
                let before = map.len();
                map.retain(|_, (v, _)| keep(v));
                before - map.len()
            }
            Err(_) => 0,
        }
    }
}

/// A workspace API key as the hot path needs it (a live key: revoked keys are not kept).
#[derive(Debug, Clone)]
pub struct CachedKey {
    pub workspace_id: String,
    pub key_id: String,
    /// What the key is narrowed to.
    pub scopes: Scopes,
    /// The cache epoch read before the key was loaded.
    loaded: u64,
}

/// A live API key, authenticated under a view of its workspace.
#[derive(Debug, Clone)]
pub struct KeyAccess {
    pub key: CachedKey,
    /// SHA-256 of the key (to read it again when the view moves).
    key_hash: String,
    pub view: View,
    /// The stored key, when it was just read from the store (not from the cache).
    pub record: Option<ApiKeyRecord>,
}

/// What a replica knows of a workspace's state: the version it read, and the epoch at which it
/// read it. Entries loaded at or after `moved` reflect at least `version`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    pub workspace_id: String,
    pub version: i64,
    moved: u64,
}

impl View {
    /// Whether an entry loaded at epoch `loaded` may be used under this view.
    fn admits(&self, loaded: u64) -> bool {
        loaded >= self.moved
    }

    /// The state a change decided under this view rests on.
    pub fn basis(&self) -> Basis {
        Basis {
            workspace_id: self.workspace_id.clone(),
            version: self.version,
        }
    }
}

/// An agent with its inventory labels.
#[derive(Debug)]
pub struct CachedAgent {
    pub agent: AgentRecord,
    pub labels: Value,
    /// The cache epoch read before the agent was loaded.
    loaded: u64,
    /// The agent's part of a check, prepared under the last compiled policy it was checked
    /// against (a new `CachedAgent` replaces this one when the agent changes).
    prepared: RwLock<Option<Arc<PreparedAgent>>>,
}

impl CachedAgent {
    pub fn new(agent: AgentRecord, labels: Value, loaded: u64) -> Self {
        Self {
            agent,
            labels,
            loaded,
            prepared: RwLock::new(None),
        }
    }

    /// The facts of a check of this agent: `sent` is its emails in the last minute and day.
    pub fn facts<'a>(
        &'a self,
        action: &'a str,
        context: &'a Value,
        email: Option<&'a EmailFacts>,
        sent: (u64, u64),
    ) -> Facts<'a> {
        Facts {
            agent_id: &self.agent.id,
            status: self.agent.status.as_str(),
            risk_tier: self.agent.risk_tier.as_str(),
            metadata: &self.agent.metadata,
            labels: &self.labels,
            action,
            context,
            email,
            emails_sent_last_minute: sent.0,
            emails_sent_last_day: sent.1,
        }
    }

    /// The agent prepared for evaluation under `policy`, made once per policy version.
    fn prepared(&self, policy: &CompiledPolicy) -> Result<Arc<PreparedAgent>, String> {
        let hit = self
            .prepared
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .filter(|p| p.fits(policy, &self.agent.id))
            .cloned();
        if let Some(hit) = hit {
            return Ok(hit);
        }
        // Only the agent's part of the facts is read.
        let facts = self.facts("", &Value::Null, None, (0, 0));
        let prepared = Arc::new(prepare_agent(policy, &facts)?);
        *self
            .prepared
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(prepared.clone());
        Ok(prepared)
    }
}

/// A compiled policy version.
#[derive(Debug)]
pub struct LoadedPolicy {
    pub name: String,
    /// 0 for the built-in default that no sync has replaced yet.
    pub version: i64,
    pub compiled: CompiledPolicy,
}

pub const DEFAULT_POLICY_ID: &str = "pol_default";

/// The spec of `pol_default` until a workspace syncs its own: only the status guardrails, so
/// every action is denied (`no_matching_rule`) until a policy allows it.
pub fn default_policy() -> Result<Arc<LoadedPolicy>, StoreError> {
    static DEFAULT: std::sync::OnceLock<Result<Arc<LoadedPolicy>, String>> =
        std::sync::OnceLock::new();
    DEFAULT
        .get_or_init(|| {
            compile(&PolicySpec::default())
                .map(|compiled| {
                    Arc::new(LoadedPolicy {
                        name: "default".into(),
                        version: 0,
                        compiled,
                    })
                })
                .map_err(|errors| {
                    format!(
                        "the default policy does not compile: {}",
                        SpecError::list(&errors)
                    )
                })
        })
        .clone()
        .map_err(StoreError::Database)
}

pub struct Caches {
    /// By key hash.
    keys: TtlMap<CachedKey>,
    /// By agent id (agents of a workspace only: unclaimed agents are read from the store).
    agents: TtlMap<Arc<CachedAgent>>,
    /// By `workspace_id/policy_id`, with the epoch at which its version was last confirmed
    /// current; no expiry (reloaded on change).
    policies: RwLock<HashMap<String, (Arc<LoadedPolicy>, u64)>>,
    /// By workspace id.
    views: RwLock<HashMap<String, View>>,
    /// Moves forward each time a view moves.
    epoch: AtomicU64,
    /// Decisions and Cedar contexts of earlier checks (keyed by the agent's preparation, which
    /// a changed agent or policy replaces, so no view applies to them).
    decisions: DecisionCache,
}

impl Default for Caches {
    fn default() -> Self {
        Self {
            keys: TtlMap::default(),
            agents: TtlMap::default(),
            policies: RwLock::default(),
            views: RwLock::default(),
            epoch: AtomicU64::new(1),
            decisions: DecisionCache::default(),
        }
    }
}

fn policy_key(workspace_id: &str, policy_id: &str) -> String {
    [workspace_id, "/", policy_id].concat()
}

/// How often a load is repeated when the workspace's view moved while it ran.
const LOAD_ATTEMPTS: usize = 4;

fn moving() -> StoreError {
    StoreError::Stale(-1)
}

impl Caches {
    /// The epoch to tag an entry with: read before the entry is loaded from the store.
    fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    fn known_view(&self, workspace_id: &str) -> Option<View> {
        self.views.read().ok()?.get(workspace_id).cloned()
    }

    /// This replica's view of the workspace; read from the store the first time.
    pub async fn view(&self, store: &dyn Store, workspace_id: &str) -> Result<View, StoreError> {
        if let Some(view) = self.known_view(workspace_id) {
            return Ok(view);
        }
        let version = store.workspace_version(workspace_id).await?;
        Ok(self.advance(workspace_id, version))
    }

    /// Moves the workspace's view to `version` (read from the store just before) unless it is
    /// there already: every entry of the workspace loaded before now stops counting.
    pub fn advance(&self, workspace_id: &str, version: i64) -> View {
        let Ok(mut views) = self.views.write() else {
            // A poisoned lock: answer a view no entry satisfies, so everything is reloaded.
            return View {
                workspace_id: workspace_id.to_owned(),
                version,
                moved: u64::MAX,
            };
        };
        if let Some(view) = views.get(workspace_id).filter(|v| v.version >= version) {
            return view.clone();
        }
        // Under the lock, so that views and epochs move in one order.
        let moved = self.epoch.fetch_add(1, Ordering::SeqCst) + 1;
        let view = View {
            workspace_id: workspace_id.to_owned(),
            version,
            moved,
        };
        views.insert(workspace_id.to_owned(), view.clone());
        view
    }

    /// Moves the views of workspaces this replica knows to the versions another replica (or
    /// this one) committed (`(workspace_id, version, changed_at)`), recording for each view
    /// moved how long after the change's commit this replica learnt of it.
    pub fn advance_known(&self, versions: &[(String, i64, i64)]) {
        let now = crate::time::now_ms();
        for (workspace_id, version, changed_at) in versions {
            if self
                .known_view(workspace_id)
                .is_some_and(|v| v.version < *version)
            {
                self.advance(workspace_id, *version);
                observe::change_lag(now - changed_at);
            }
        }
    }

    /// The view, confirmed current with one read of the store (for answers that commit
    /// nothing, so no batch checks them).
    pub async fn confirmed_view(
        &self,
        store: &dyn Store,
        workspace_id: &str,
    ) -> Result<View, StoreError> {
        let version = store.workspace_version(workspace_id).await?;
        Ok(self.advance(workspace_id, version))
    }

    /// The live API key with this hash and the view of its workspace it was read under; `None`
    /// for an unknown or revoked key. `Err(Stale)` only when the workspace kept changing
    /// through every attempt.
    pub async fn api_key(
        &self,
        store: &dyn Store,
        key_hash: &str,
    ) -> Result<Option<KeyAccess>, StoreError> {
        if let Some(key) = self.keys.get(key_hash) {
            let view = self.view(store, &key.workspace_id).await?;
            if view.admits(key.loaded) {
                observe::cache_lookup(Cache::ApiKey, true);
                return Ok(Some(KeyAccess {
                    key,
                    key_hash: key_hash.to_owned(),
                    view,
                    record: None,
                }));
            }
        }
        observe::cache_lookup(Cache::ApiKey, false);
        for _ in 0..LOAD_ATTEMPTS {
            let loaded = self.epoch();
            let Some(record) = store.api_key_by_hash(key_hash).await? else {
                return Ok(None);
            };
            if record.revoked_at.is_some() {
                self.keys.remove(key_hash);
                return Ok(None);
            }
            let view = self.view(store, &record.workspace_id).await?;
            if !view.admits(loaded) {
                // The view was new or moved meanwhile: read the key again under it.
                continue;
            }
            let key = CachedKey {
                workspace_id: record.workspace_id.clone(),
                key_id: record.id.clone(),
                scopes: Scopes::from_stored(record.scopes.as_deref()),
                loaded,
            };
            self.keys.insert(key_hash.to_owned(), key.clone());
            return Ok(Some(KeyAccess {
                key,
                key_hash: key_hash.to_owned(),
                view,
                record: Some(record),
            }));
        }
        Err(moving())
    }

    /// The key again, after its workspace moved to `version` (a decision made under the
    /// access's view was found stale): `None` when the key was revoked meanwhile.
    pub async fn renew(
        &self,
        store: &dyn Store,
        access: &KeyAccess,
        version: i64,
    ) -> Result<Option<KeyAccess>, StoreError> {
        self.advance(&access.view.workspace_id, version);
        self.api_key(store, &access.key_hash).await
    }

    /// Forgets keys by id (after a local revoke).
    pub fn forget_key(&self, key_id: &str) {
        let dropped = self.keys.retain(|k| k.key_id != key_id);
        observe::cache_invalidated(Cache::ApiKey, dropped as u64);
    }

    /// Forgets an agent (after a local change).
    pub fn forget_agent(&self, agent_id: &str) {
        if self.agents.remove(agent_id) {
            observe::cache_invalidated(Cache::Agent, 1);
        }
    }

    /// The agent with its labels, as of `view` (of the agent's workspace). `None` when the
    /// agent does not exist or belongs to no workspace or another one.
    pub async fn agent_in(
        &self,
        store: &dyn Store,
        view: &View,
        agent_id: &str,
    ) -> Result<Option<Arc<CachedAgent>>, StoreError> {
        if !ids::has_shape(agent_id, ids::AGENT) {
            return Ok(None);
        }
        if let Some(hit) = self.agents.get(agent_id) {
            if view.admits(hit.loaded) && hit.agent.in_workspace(&view.workspace_id) {
                observe::cache_lookup(Cache::Agent, true);
                return Ok(Some(hit));
            }
        }
        observe::cache_lookup(Cache::Agent, false);
        // The view was read before this epoch, so what is loaded now is at least as new.
        let loaded = self.epoch();
        let cached = self.load_agent(store, agent_id, loaded).await?;
        Ok(cached.filter(|c| c.agent.in_workspace(&view.workspace_id)))
    }

    /// [`Caches::agent_in`] for a request that names the agent: `UnknownAgent` unless it is
    /// an agent of the view's workspace.
    pub async fn known_agent(
        &self,
        store: &dyn Store,
        view: &View,
        agent_id: &str,
    ) -> Result<Arc<CachedAgent>, StoreError> {
        self.agent_in(store, view, agent_id)
            .await?
            .ok_or(StoreError::UnknownAgent)
    }

    /// The agent with its labels, in whichever workspace it is (for signed requests, whose
    /// workspace is the agent's): its status may be older than the store's, so whatever rests
    /// on it is checked again in the transaction that commits it (the nonce claim).
    pub async fn agent(
        &self,
        store: &dyn Store,
        agent_id: &str,
    ) -> Result<Option<Arc<CachedAgent>>, StoreError> {
        if let Some(hit) = self.agents.get(agent_id) {
            if let Some(ws) = &hit.agent.workspace_id {
                if self.view(store, ws).await?.admits(hit.loaded) {
                    observe::cache_lookup(Cache::Agent, true);
                    return Ok(Some(hit));
                }
            }
        }
        observe::cache_lookup(Cache::Agent, false);
        let loaded = self.epoch();
        self.load_agent(store, agent_id, loaded).await
    }

    async fn load_agent(
        &self,
        store: &dyn Store,
        agent_id: &str,
        loaded: u64,
    ) -> Result<Option<Arc<CachedAgent>>, StoreError> {
        let Some(agent) = store.agent(agent_id).await? else {
            return Ok(None);
        };
        let Some(ws) = agent.workspace_id.clone() else {
            // Unclaimed: not kept (a claim would move it into a workspace).
            return Ok(Some(Arc::new(CachedAgent::new(agent, json!({}), loaded))));
        };
        let labels = store.agent_labels(&ws, agent_id).await?;
        let cached = Arc::new(CachedAgent::new(agent, labels, loaded));
        self.agents.insert(agent_id.to_owned(), cached.clone());
        Ok(Some(cached))
    }

    /// The policy's current compiled version as of `view`: from the cache (its version
    /// confirmed once per view), else loaded and compiled once (off the async workers). `None`
    /// when the workspace has no such policy.
    pub async fn policy(
        &self,
        store: &dyn Store,
        view: &View,
        policy_id: &str,
    ) -> Result<Option<Arc<LoadedPolicy>>, StoreError> {
        let workspace_id = view.workspace_id.as_str();
        let cached = self.cached_policy(workspace_id, policy_id);
        if let Some((hit, confirmed)) = &cached {
            if view.admits(*confirmed) {
                observe::cache_lookup(Cache::Policy, true);
                return Ok(Some(hit.clone()));
            }
        }
        observe::cache_lookup(Cache::Policy, false);
        let loaded = self.epoch();
        let head = store.policy(workspace_id, policy_id).await?;
        let current = head.as_ref().map_or(0, |h| h.current_version);
        if let Some((hit, _)) = cached.filter(|(hit, _)| hit.version == current) {
            // Still the current version: confirmed under this view without compiling again.
            self.put_policy(workspace_id, policy_id, hit.clone(), loaded);
            return Ok(Some(hit));
        }
        let fresh = load_policy(store, workspace_id, policy_id, head).await?;
        if let Some(fresh) = &fresh {
            self.put_policy(workspace_id, policy_id, fresh.clone(), loaded);
        }
        Ok(fresh)
    }

    fn cached_policy(
        &self,
        workspace_id: &str,
        policy_id: &str,
    ) -> Option<(Arc<LoadedPolicy>, u64)> {
        self.policies
            .read()
            .ok()?
            .get(&policy_key(workspace_id, policy_id))
            .cloned()
    }

    /// Installs a version (confirmed current at epoch `loaded`) unless a newer one is there.
    pub fn put_policy(
        &self,
        workspace_id: &str,
        policy_id: &str,
        loaded_policy: Arc<LoadedPolicy>,
        loaded: u64,
    ) {
        if let Ok(mut map) = self.policies.write() {
            let key = policy_key(workspace_id, policy_id);
            match map.get_mut(&key) {
                Some((old, _)) if old.version > loaded_policy.version => {}
                Some((old, at)) if old.version == loaded_policy.version => *at = (*at).max(loaded),
                _ => {
                    map.insert(key, (loaded_policy, loaded));
                }
            }
        }
    }

    /// Decides a check of `agent` under `policy`: the agent's part is prepared once per policy
    /// version and kept with the cached agent, and a check like an earlier one gets its decision
    /// from the decision cache (see [`DecisionCache`]).
    pub fn decide(
        &self,
        agent: &CachedAgent,
        policy: &CompiledPolicy,
        facts: &Facts<'_>,
    ) -> Result<Decision, String> {
        let prepared = agent.prepared(policy)?;
        evaluate_prepared(policy, &prepared, facts, &self.decisions)
    }

    /// Installs a version this replica just applied.
    pub fn applied_policy(&self, workspace_id: &str, policy_id: &str, loaded: Arc<LoadedPolicy>) {
        // Confirmed at epoch 0: the view moves past the apply's version bump before use.
        self.put_policy(workspace_id, policy_id, loaded, 0);
    }

    /// The cached policies whose version is not the store's current one: a safety net for a
    /// change the poll missed (a replica's clock far off, a commit long after its change row).
    pub fn stale_policies(&self, heads: &[(String, String, i64)]) -> Vec<Invalidation> {
        let current: HashMap<String, i64> = heads
            .iter()
            .map(|(ws, pol, v)| (policy_key(ws, pol), *v))
            .collect();
        let Ok(map) = self.policies.read() else {
            return Vec::new();
        };
        map.iter()
            .filter(|(key, (loaded, _))| {
                // The built-in default (version 0) has no row until a sync creates one.
                current
                    .get(*key)
                    .map_or(loaded.version != 0, |v| *v != loaded.version)
            })
            .filter_map(|(key, _)| {
                key.split_once('/')
                    .map(|(ws, pol)| Invalidation::Policy(ws.to_owned(), pol.to_owned()))
            })
            .collect()
    }

    /// Applies what changed elsewhere: evicts agents and keys, reloads policies (compiled off
    /// the request path, so that checks after an apply find them ready).
    pub async fn apply(&self, store: &dyn Store, changes: Vec<Invalidation>) {
        for change in changes {
            match change {
                Invalidation::Agent(id) => self.forget_agent(&id),
                Invalidation::ApiKey(id) => self.forget_key(&id),
                Invalidation::Policy(ws, pol) => {
                    let cached = self.cached_policy(&ws, &pol).map(|(p, _)| p.version);
                    let loaded = self.epoch();
                    let Ok(Some(record)) = store.policy(&ws, &pol).await else {
                        continue;
                    };
                    if cached.is_some_and(|v| v >= record.current_version) {
                        continue;
                    }
                    observe::cache_invalidated(Cache::Policy, 1);
                    match load_policy(store, &ws, &pol, Some(record)).await {
                        Ok(Some(fresh)) => self.put_policy(&ws, &pol, fresh, loaded),
                        Ok(None) => {}
                        Err(err) => {
                            // Forget the old version: the next check loads the current one.
                            if let Ok(mut map) = self.policies.write() {
                                map.remove(&policy_key(&ws, &pol));
                            }
                            tracing::warn!(error = %err, workspace = %ws, policy = %pol, "policy reload failed; the next check loads it")
                        }
                    }
                }
            }
        }
    }
}

/// Loads the current version of a policy and compiles it on the blocking pool.
/// `head` is the policy's row, read by the caller.
pub async fn load_policy(
    store: &dyn Store,
    workspace_id: &str,
    policy_id: &str,
    head: Option<PolicyRecord>,
) -> Result<Option<Arc<LoadedPolicy>>, StoreError> {
    let Some(record) = head else {
        return if policy_id == DEFAULT_POLICY_ID {
            default_policy().map(Some)
        } else {
            Ok(None)
        };
    };
    let Some(version) = store
        .policy_version(workspace_id, policy_id, record.current_version)
        .await?
    else {
        return Err(StoreError::Database(format!(
            "policy `{policy_id}` has no version {}",
            record.current_version
        )));
    };
    let name = record.name.clone();
    let compiled = tokio::task::spawn_blocking(move || {
        let spec = spec::from_value(&version.spec).map_err(|e| SpecError::list(&e))?;
        compile(&spec).map_err(|e| SpecError::list(&e))
    })
    .await
    .map_err(|e| StoreError::Database(e.to_string()))?
    .map_err(|e| {
        StoreError::Database(format!(
            "stored policy `{policy_id}` no longer compiles: {e}"
        ))
    })?;
    Ok(Some(Arc::new(LoadedPolicy {
        name,
        version: record.current_version,
        compiled,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at_version(version: i64) -> Arc<LoadedPolicy> {
        let default = default_policy().unwrap();
        Arc::new(LoadedPolicy {
            name: "p".into(),
            version,
            compiled: default.compiled.clone(),
        })
    }

    #[test]
    fn policies_behind_the_store_are_found_stale() {
        let caches = Caches::default();
        caches.put_policy("ws_a", "pol_default", at_version(0), 1);
        caches.put_policy("ws_a", "pol_x", at_version(3), 1);
        caches.put_policy("ws_b", "pol_y", at_version(2), 1);
        let heads = vec![
            ("ws_a".to_owned(), "pol_x".to_owned(), 4),
            ("ws_b".to_owned(), "pol_y".to_owned(), 2),
        ];
        let stale = caches.stale_policies(&heads);
        assert_eq!(stale.len(), 1);
        assert!(
            matches!(&stale[0], Invalidation::Policy(ws, pol) if ws == "ws_a" && pol == "pol_x")
        );
        // The built-in default stays until a sync gives it a row.
        let synced = vec![("ws_a".to_owned(), "pol_default".to_owned(), 1)];
        assert_eq!(caches.stale_policies(&synced).len(), 3);
    }
}
