//! In-process caches for the decision hot path: API keys, agents (with their inventory labels)
//! and compiled policies. Every replica keeps its own; they stay correct across replicas
//! because writes evict locally at once and a poller (woken early by Postgres LISTEN/NOTIFY)
//! evicts or reloads what other replicas changed, typically within a second. Entries also
//! expire on their own as a last line of defence.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::policy::evaluate::{prepare_agent, EmailFacts, Facts, PreparedAgent};
use crate::policy::{compile, CompiledPolicy, PolicySpec};
use crate::store::{AgentRecord, Invalidation, Store, StoreError};

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

    pub fn remove(&self, key: &str) {
        if let Ok(mut map) = self.map.write() {
            map.remove(key);
        }
    }

    pub fn retain(&self, keep: impl Fn(&V) -> bool) {
        if let Ok(mut map) = self.map.write() {
            map.retain(|_, (v, _)| keep(v));
        }
    }
}

/// A workspace API key as the hot path needs it.
#[derive(Debug, Clone)]
pub struct CachedKey {
    pub workspace_id: String,
    pub key_id: String,
}

/// An agent with its inventory labels.
#[derive(Debug)]
pub struct AgentFacts {
    pub agent: AgentRecord,
    pub labels: Value,
    /// The agent's part of a check, prepared under the last compiled policy it was checked
    /// against (a new `AgentFacts` replaces this one when the agent changes).
    prepared: Mutex<Option<Arc<PreparedAgent>>>,
}

impl AgentFacts {
    pub fn new(agent: AgentRecord, labels: Value) -> Self {
        Self {
            agent,
            labels,
            prepared: Mutex::new(None),
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
            risk_tier: &self.agent.risk_tier,
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
    pub fn prepared(&self, policy: &CompiledPolicy) -> Result<Arc<PreparedAgent>, String> {
        let slot = || self.prepared.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(hit) = slot().as_ref().filter(|p| p.fits(policy, &self.agent.id)) {
            return Ok(hit.clone());
        }
        // Only the agent's part of the facts is read.
        let facts = self.facts("", &Value::Null, None, (0, 0));
        let prepared = Arc::new(prepare_agent(policy, &facts)?);
        *slot() = Some(prepared.clone());
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
                .map_err(|e| format!("{e:?}"))
        })
        .clone()
        .map_err(StoreError::Database)
}

#[derive(Default)]
pub struct Caches {
    /// By key hash.
    pub keys: TtlMap<CachedKey>,
    /// By agent id.
    pub agents: TtlMap<Arc<AgentFacts>>,
    /// By `workspace_id/policy_id`; no expiry (reloaded on change).
    policies: RwLock<HashMap<String, Arc<LoadedPolicy>>>,
}

fn policy_key(workspace_id: &str, policy_id: &str) -> String {
    [workspace_id, "/", policy_id].concat()
}

impl Caches {
    pub fn cached_policy(&self, workspace_id: &str, policy_id: &str) -> Option<Arc<LoadedPolicy>> {
        self.policies
            .read()
            .ok()?
            .get(&policy_key(workspace_id, policy_id))
            .cloned()
    }

    /// Installs a version unless a newer one is already there.
    pub fn put_policy(&self, workspace_id: &str, policy_id: &str, loaded: Arc<LoadedPolicy>) {
        if let Ok(mut map) = self.policies.write() {
            let key = policy_key(workspace_id, policy_id);
            if map
                .get(&key)
                .is_none_or(|old| old.version <= loaded.version)
            {
                map.insert(key, loaded);
            }
        }
    }

    /// The current compiled policy: from the cache, else loaded and compiled once (off the
    /// async workers). `None` when the workspace has no such policy.
    pub async fn policy(
        &self,
        store: &dyn Store,
        workspace_id: &str,
        policy_id: &str,
    ) -> Result<Option<Arc<LoadedPolicy>>, StoreError> {
        if let Some(hit) = self.cached_policy(workspace_id, policy_id) {
            return Ok(Some(hit));
        }
        let loaded = load_policy(store, workspace_id, policy_id).await?;
        if let Some(loaded) = &loaded {
            self.put_policy(workspace_id, policy_id, loaded.clone());
        }
        Ok(loaded)
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
            .filter(|(key, loaded)| {
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

    /// Applies what changed elsewhere: evicts agents and keys, reloads policies.
    pub async fn apply(&self, store: &dyn Store, changes: Vec<Invalidation>) {
        for change in changes {
            match change {
                Invalidation::Agent(id) => self.agents.remove(&id),
                Invalidation::ApiKey(id) => self.keys.retain(|k| k.key_id != id),
                Invalidation::Policy(ws, pol) => {
                    let cached = self.cached_policy(&ws, &pol).map(|p| p.version);
                    let Ok(Some(record)) = store.policy(&ws, &pol).await else {
                        continue;
                    };
                    if cached.is_some_and(|v| v >= record.current_version) {
                        continue;
                    }
                    match load_policy(store, &ws, &pol).await {
                        Ok(Some(loaded)) => self.put_policy(&ws, &pol, loaded),
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
pub async fn load_policy(
    store: &dyn Store,
    workspace_id: &str,
    policy_id: &str,
) -> Result<Option<Arc<LoadedPolicy>>, StoreError> {
    let Some(record) = store.policy(workspace_id, policy_id).await? else {
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
        let spec = crate::policy::spec::from_value(&version.spec).map_err(|e| format!("{e:?}"))?;
        compile(&spec).map_err(|e| format!("{e:?}"))
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
        caches.put_policy("ws_a", "pol_default", at_version(0));
        caches.put_policy("ws_a", "pol_x", at_version(3));
        caches.put_policy("ws_b", "pol_y", at_version(2));
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
