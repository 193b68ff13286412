//! In-process caches for the decision hot path: API keys, agents (with their inventory labels),
//! compiled policies and kept decisions. Every replica keeps its own, and this is the only place
//! it keeps them: the check use case and every other use case that reads a key, an agent or a
//! policy go through [`Caches`].
//!
//! **No answer rests on superseded state**. Each workspace has a state
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
//!
//! **Memory is bounded by configuration.** Keys, agents and compiled policies are each kept in a
//! least-recently-used cache ([`moka`]) whose capacity is in bytes (`cache_keys_mib`,
//! `cache_agents_mib`, `cache_policies_mib`): every entry is weighed by an *estimate* of its size
//! (the `weight` functions below), and the entries least recently used go first once the sum
//! would exceed the capacity. Eviction only makes a later lookup a miss; it never lets an entry
//! count under a view it is older than. The decision cache keeps its fixed bounds (see
//! [`DecisionCache`]); views are one per workspace.
//!
//! Why one file of this length: the caches and the view-and-epoch rule above are one mechanism,
//! and the argument that no answer rests on superseded state reads across all of them.

use std::collections::HashMap;
use std::mem::size_of;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use moka::notification::RemovalCause;
use moka::ops::compute::Op;
use moka::policy::EvictionPolicy;
use serde_json::{json, Value};

use crate::config;
use crate::domain::access::Scopes;
use crate::domain::ids;
use crate::observe::{self, Cache};
use crate::store::{
    AgentRecord, ApiKeyRecord, Basis, Invalidation, PolicyRecord, Store, StoreError,
};

use super::compile::{compile, CompiledPolicy};
use super::evaluate::{
    evaluate_prepared, prepare_agent, ContextFields, Decision, DecisionCache, EmailFacts, Facts,
    PreparedAgent,
};
use super::rate::KeyRate;
use super::spec::{self, PolicySpec, SpecError};

/// How long a cached key or agent counts at most, however recently it was used.
const ENTRY_TTL: Duration = Duration::from_secs(60);

const MIB: u64 = 1024 * 1024;

/// The capacities of the caches, in (estimated) bytes, and the rate of the keys they hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheLimits {
    pub keys_bytes: u64,
    pub agents_bytes: u64,
    pub policies_bytes: u64,
    /// Requests and decisions per second of a key without a rate of its own, per replica
    /// (`api_key_rate_limit`; 0: none).
    pub key_rate: u64,
}

impl CacheLimits {
    /// Capacities given in MiB (and the default key rate).
    pub fn from_mib(keys: u64, agents: u64, policies: u64) -> Self {
        Self {
            keys_bytes: keys.saturating_mul(MIB),
            agents_bytes: agents.saturating_mul(MIB),
            policies_bytes: policies.saturating_mul(MIB),
            key_rate: config::DEFAULT_API_KEY_RATE_LIMIT,
        }
    }

    /// The capacities and the key rate a server's configuration sets.
    pub fn of(config: &config::Config) -> Self {
        Self {
            key_rate: config.api_key_rate_limit,
            ..Self::from_mib(
                config.cache_keys_mib,
                config.cache_agents_mib,
                config.cache_policies_mib,
            )
        }
    }
}

impl Default for CacheLimits {
    fn default() -> Self {
        Self::from_mib(
            config::DEFAULT_CACHE_KEYS_MIB,
            config::DEFAULT_CACHE_AGENTS_MIB,
            config::DEFAULT_CACHE_POLICIES_MIB,
        )
    }
}

/// Estimated bytes a cache spends on an entry beside its key and value: moka's entry (its hash
/// table slot, the shared key, the entry's bookkeeping and its nodes in the access and write
/// order queues). An estimate, like every weight here: 210,000 keys in the key cache grew the
/// resident memory by about 580 bytes each, of which about 260 were the key and its value.
const ENTRY_OVERHEAD: usize = 320;

/// The weight of an entry: its key, its value's estimated bytes and the cache's bookkeeping,
/// saturating at `u32::MAX`.
fn entry_weight(key: &str, value: usize) -> u32 {
    saturate(
        size_of::<String>()
            .saturating_add(key.len())
            .saturating_add(value)
            .saturating_add(ENTRY_OVERHEAD),
    )
}

/// Bytes as a weight, saturating at `u32::MAX` (moka's weights are `u32`).
fn saturate(bytes: usize) -> u32 {
    u32::try_from(bytes).unwrap_or(u32::MAX)
}

/// Estimated heap bytes of a JSON value beyond its own `Value` (which its holder counts): its
/// strings, and for arrays and objects their elements and entries with the collection's
/// bookkeeping. Approximates the memory the parsed value holds, not its serialized length
/// (which it is usually within a factor of two of).
fn json_weight(value: &Value) -> usize {
    /// A map entry's share of the map's nodes.
    const MAP_ENTRY_OVERHEAD: usize = 16;
    match value {
        Value::Null | Value::Bool(_) | Value::Number(_) => 0,
        Value::String(s) => s.len(),
        Value::Array(items) => items.iter().fold(0, |sum, item| {
            sum.saturating_add(size_of::<Value>())
                .saturating_add(json_weight(item))
        }),
        Value::Object(map) => map.iter().fold(0, |sum, (key, item)| {
            sum.saturating_add(size_of::<String>() + size_of::<Value>() + MAP_ENTRY_OVERHEAD)
                .saturating_add(key.len())
                .saturating_add(json_weight(item))
        }),
    }
}

/// A cache of `V` by string key, bounded in estimated bytes: when an insert takes the sum of
/// the weights over the capacity, the least recently used entries go. Moka applies reads and
/// evictions to its order queues in batches (on later operations, or [`Lru::report`]), so the
/// bound holds within a few operations rather than at every instant.
///
/// An entry heavier than the whole capacity (a huge compiled policy under a small
/// `cache_policies_mib`) weighs as the capacity: it is kept, alone, rather than refused, since
/// refusing it would load (compile) it again on every lookup while it is in use anyway.
struct Lru<V> {
    cache: moka::sync::Cache<String, V>,
    which: Cache,
    capacity: u64,
}

impl<V: Clone + Send + Sync + 'static> Lru<V> {
    /// `weigh`: the value's estimated bytes (the key and the entry's bookkeeping are added).
    /// `release`: takes each value the cache lets go of (evicted, replaced, removed, expired).
    fn new(
        which: Cache,
        capacity: u64,
        ttl: Option<Duration>,
        weigh: fn(&V) -> usize,
        release: fn(V),
    ) -> Self {
        let builder = moka::sync::Cache::builder()
            .max_capacity(capacity)
            .eviction_policy(EvictionPolicy::lru())
            .weigher(move |key: &String, value: &V| {
                let weight = entry_weight(key, weigh(value));
                u32::try_from(capacity).map_or(weight, |cap| weight.min(cap))
            })
            .eviction_listener(move |_key, value, cause| {
                if cause == RemovalCause::Size {
                    observe::cache_evicted(which, 1);
                }
                release(value);
            });
        let cache = match ttl {
            Some(ttl) => builder.time_to_live(ttl).build(),
            None => builder.build(),
        };
        // The evictions' series shows from the start, at 0.
        observe::cache_evicted(which, 0);
        Self {
            cache,
            which,
            capacity,
        }
    }

    fn get(&self, key: &str) -> Option<V> {
        self.cache.get(key)
    }

    fn insert(&self, key: String, value: V) {
        self.cache.insert(key, value);
    }

    /// Whether an entry was there.
    fn remove(&self, key: &str) -> bool {
        self.cache.remove(key).is_some()
    }

    /// Drops the entries `keep` refuses; how many went. Walks every entry: for rare changes.
    fn retain(&self, keep: impl Fn(&V) -> bool) -> usize {
        let mut gone = 0;
        for (key, value) in self.cache.iter() {
            if !keep(&value) && self.cache.remove(key.as_str()).is_some() {
                gone += 1;
            }
        }
        gone
    }

    /// Applies pending bookkeeping (reads, evictions, expiries), then records the size.
    fn report(&self) {
        self.cache.run_pending_tasks();
        observe::cache_size(
            self.which,
            self.cache.entry_count(),
            self.cache.weighted_size(),
            self.capacity,
        );
    }
}

/// A workspace API key as the hot path needs it (a live key: revoked keys are not kept).
#[derive(Debug, Clone)]
pub struct CachedKey {
    pub workspace_id: String,
    pub key_id: String,
    /// What the key is narrowed to.
    pub scopes: Scopes,
    /// The key's token bucket on this replica (`None`: not limited), carried over when the key
    /// is read again.
    rate: Option<Arc<KeyRate>>,
    /// The cache epoch read before the key was loaded.
    loaded: u64,
}

impl CachedKey {
    /// Spends `n` of the key's tokens on this replica (one compare-and-swap, no lock), or
    /// answers the seconds until `n` could be spent.
    pub fn spend(&self, n: u64) -> Result<(), u64> {
        match &self.rate {
            Some(rate) => rate.take(n),
            None => Ok(()),
        }
    }

    /// Estimated bytes: the struct, its strings and its scopes (each a string in a shared set).
    pub fn weight(&self) -> u32 {
        /// A scope's share of its set: the `String` and the set's nodes.
        const PER_SCOPE: usize = size_of::<String>() + 16;
        let scopes = self.scopes.list();
        let scopes = if scopes.is_empty() {
            0
        } else {
            // The shared set itself (an `Arc` around a `BTreeSet`).
            64 + scopes.iter().map(|s| s.len() + PER_SCOPE).sum::<usize>()
        };
        let rate = self.rate.as_ref().map_or(0, |_| 16 + size_of::<KeyRate>());
        saturate(
            size_of::<Self>()
                .saturating_add(self.workspace_id.len())
                .saturating_add(self.key_id.len())
                .saturating_add(scopes)
                .saturating_add(rate),
        )
    }
}

/// A live API key, authenticated under a view of its workspace.
#[derive(Debug, Clone)]
pub struct KeyAccess {
    /// Shared with the cache (a hit copies no string).
    pub key: Arc<CachedKey>,
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

impl KeyAccess {
    /// Spends `n` of the key's tokens on this replica, or answers the seconds until `n` could
    /// be spent.
    pub fn spend(&self, n: u64) -> Result<(), u64> {
        self.key.spend(n)
    }
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
    /// The agent's facts as a decision event records them (status, risk tier, metadata,
    /// labels), written once when the agent is cached rather than once per check.
    facts_json: Box<serde_json::value::RawValue>,
    /// The cache epoch read before the agent was loaded.
    loaded: u64,
    /// The agent's part of a check, prepared under the last compiled policy it was checked
    /// against (a new `CachedAgent` replaces this one when the agent changes).
    prepared: RwLock<Option<Arc<PreparedAgent>>>,
}

impl CachedAgent {
    pub fn new(agent: AgentRecord, labels: Value, loaded: u64) -> Self {
        let facts = json!({
            "status": agent.status.as_str(),
            "risk_tier": agent.risk_tier.as_str(),
            "metadata": agent.metadata,
            "labels": labels,
        });
        Self {
            facts_json: super::impact::raw(&facts),
            agent,
            labels,
            loaded,
            prepared: RwLock::new(None),
        }
    }

    /// The agent's facts as JSON text, as a decision event records them.
    pub fn facts_json(&self) -> &serde_json::value::RawValue {
        &self.facts_json
    }

    /// The facts of a check of this agent: `sent` is its emails in the last minute and day.
    pub fn facts<'a>(
        &'a self,
        action: &'a str,
        context: ContextFields<'a>,
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

    /// Estimated bytes: the struct (with its record), the record's strings, the metadata and
    /// labels, and the [`PreparedAgent`] it will hold once checked (made after the agent is
    /// cached, so estimated here from what it is made of; see [`PREPARED_BASE`]).
    pub fn weight(&self) -> u32 {
        let agent = &self.agent;
        let strings = [
            agent.id.len(),
            agent.workspace_id.as_ref().map_or(0, String::len),
            agent.name.len(),
            agent.public_key.len(),
            agent.key_type.len(),
        ]
        .into_iter()
        .fold(0usize, usize::saturating_add);
        let facts = json_weight(&agent.metadata).saturating_add(json_weight(&self.labels));
        saturate(
            size_of::<Self>()
                .saturating_add(strings)
                .saturating_add(self.facts_json.get().len())
                .saturating_add(facts)
                .saturating_add(PREPARED_BASE)
                .saturating_add(facts.saturating_mul(PREPARED_PER_FACT_BYTE)),
        )
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
        let facts = self.facts("", ContextFields::new(&Value::Null), None, (0, 0));
        let prepared = Arc::new(prepare_agent(policy, &facts)?);
        *self
            .prepared
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(prepared.clone());
        Ok(prepared)
    }
}

/// Estimated bytes of a [`PreparedAgent`] beside its metadata and labels: its ids, the policy
/// hash, its groups and the two Cedar entity stores holding the agent's entity.
///
/// Measured once (20,000 agents prepared under a small policy and kept, resident memory growth
/// per agent against the weight of its cache entry): 5.8 KB with one metadata entry and no
/// labels (weight 5.8 KB), 8.9 KB with 10 short labels (9.9 KB), 23.4 KB with 50 (26.3 KB).
const PREPARED_BASE: usize = 4608;
/// Estimated bytes a [`PreparedAgent`] spends per byte of the agent's metadata and labels
/// (their string and boolean values become Cedar tags, `key=value`, in both entity stores).
const PREPARED_PER_FACT_BYTE: usize = 2;

/// A compiled policy version.
#[derive(Debug)]
pub struct LoadedPolicy {
    pub name: String,
    /// 0 for the built-in default that no sync has replaced yet.
    pub version: i64,
    pub compiled: CompiledPolicy,
    /// The counters its decisions are recorded in (`/metrics`), made with it.
    pub metrics: observe::DecisionCounters,
    /// What the policy lets each kind of agent reach (the MCP gateway's `tools/list`), made on
    /// first use: no check reads it.
    reach: std::sync::OnceLock<acp_engine::semantic::Reach>,
}

/// Estimated bytes of a compiled policy per rule placed in one of its rule sets (the
/// guardrails' set and each group's): Cedar's copy of the rule in that set, and the indexes by
/// action and context field that point at it. Placements, not the Cedar text, drive the size:
/// a group's set repeats the guardrail rules that apply to it.
const POLICY_PER_PLACED_RULE: usize = 15 * 1024;
/// Estimated bytes of a compiled policy per rule of a group that shares its set with others:
/// what the rule means for that group (its source), kept by the rule's id.
const POLICY_PER_OWN_RULE: usize = 1024;
/// Estimated bytes of a compiled policy per byte of its Cedar text: the text it keeps, and the
/// typed spec it was compiled from (of about the same size).
const POLICY_PER_CEDAR_BYTE: usize = 2;
/// Estimated bytes of a compiled policy beside what grows with its rules.
const POLICY_BASE: usize = 16 * 1024;

impl LoadedPolicy {
    /// Version `version` of policy `policy_id`, with a decision counter for each reason code
    /// it can give.
    pub fn new(policy_id: &str, name: String, version: i64, compiled: CompiledPolicy) -> Self {
        // Every group's set holds the guardrails and rules meaning what the group's own do.
        let mut reasons: std::collections::HashSet<String> = compiled
            .guardrails
            .rules
            .values()
            .chain(
                compiled
                    .groups
                    .values()
                    .flat_map(|group| group.own.values()),
            )
            .map(|rule| rule.reason_code.clone())
            .collect();
        reasons.extend(super::evaluate::FIXED_REASON_CODES.map(str::to_owned));
        Self {
            metrics: observe::DecisionCounters::new(policy_id, reasons),
            name,
            version,
            compiled,
            reach: std::sync::OnceLock::new(),
        }
    }

    /// The semantic model's reach of this policy (see [`acp_engine::semantic::Reach`]).
    pub fn reach(&self) -> &acp_engine::semantic::Reach {
        self.reach
            .get_or_init(|| acp_engine::semantic::Reach::of(&self.compiled.spec))
    }

    /// Estimated bytes: a fixed part, a multiple of the rules placed in its rule sets (each
    /// shared set once), a multiple of the groups' own rules and a multiple of its Cedar text's
    /// length.
    ///
    /// Measured (policies compiled and kept, resident memory growth per policy, against this
    /// estimate), when every group held a set of its own: 100 groups of 10 members 36.8 MB
    /// (estimate 30.3 MB, factor 1.2); 100 groups under ten guardrail blocks (13,015
    /// placements) 189 MB (estimate 201 MB, factor 0.94); 100 groups of long raw Cedar rules
    /// (2 KB each) 16.5 MB (estimate 19.4 MB, factor 0.85). With shared sets: the 10,000-group
    /// spec of the scale benchmarks (10 sets, 100,000 own rules) about 190 MB at rest
    /// (estimate 178 MB, factor 1.1). So within about 25% either way; the Cedar text alone
    /// would have been off by 9 to 45 times. Counting the placements walks the groups: for
    /// inserts, not lookups.
    pub fn weight(&self) -> u32 {
        let compiled = &self.compiled;
        // Each shared set once, and each group's own meaning of its rules.
        let mut sets = std::collections::HashSet::new();
        let (placed, own) = compiled.groups.values().fold(
            (compiled.guardrails.rules.len(), 0usize),
            |(placed, own), group| {
                let new = sets.insert(Arc::as_ptr(&group.set));
                (
                    placed.saturating_add(if new { group.set.rules.len() } else { 0 }),
                    own.saturating_add(group.own.len()),
                )
            },
        );
        saturate(
            POLICY_BASE
                .saturating_add(self.name.len())
                .saturating_add(placed.saturating_mul(POLICY_PER_PLACED_RULE))
                .saturating_add(own.saturating_mul(POLICY_PER_OWN_RULE))
                .saturating_add(compiled.cedar.len().saturating_mul(POLICY_PER_CEDAR_BYTE)),
        )
    }
}

/// A cached policy version with the epoch at which it was last confirmed current, and its
/// weight (computed once per version: re-confirming a version keeps it).
#[derive(Clone)]
struct PolicyEntry {
    policy: Arc<LoadedPolicy>,
    confirmed: u64,
    weight: u32,
}

pub const DEFAULT_POLICY_ID: &str = crate::domain::ids::PolicyId::DEFAULT;

/// The spec of `pol_default` until a workspace syncs its own: only the status guardrails, so
/// every action is denied (`no_matching_rule`) until a policy allows it.
pub fn default_policy() -> Result<Arc<LoadedPolicy>, StoreError> {
    static DEFAULT: std::sync::OnceLock<Result<Arc<LoadedPolicy>, String>> =
        std::sync::OnceLock::new();
    DEFAULT
        .get_or_init(|| {
            compile(&PolicySpec::default())
                .map(|compiled| {
                    Arc::new(LoadedPolicy::new(
                        DEFAULT_POLICY_ID,
                        "default".into(),
                        0,
                        compiled,
                    ))
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
    /// By key hash; entries expire after [`ENTRY_TTL`].
    keys: Lru<Arc<CachedKey>>,
    /// The rate of a key without one of its own (0: none).
    key_rate: u64,
    /// By agent id (agents of a workspace only: unclaimed agents are read from the store);
    /// entries expire after [`ENTRY_TTL`].
    agents: Lru<Arc<CachedAgent>>,
    /// By `workspace_id/policy_id`, with the epoch at which its version was last confirmed
    /// current; no expiry (reloaded on change).
    policies: Lru<PolicyEntry>,
    /// By workspace id.
    views: RwLock<HashMap<String, View>>,
    /// Moves forward each time a view moves.
    epoch: AtomicU64,
    /// Decisions and Cedar contexts of earlier checks (keyed by the agent's preparation, which
    /// a changed agent or policy replaces, so no view applies to them); fixed bounds.
    decisions: DecisionCache,
}

impl Default for Caches {
    /// The default capacities.
    fn default() -> Self {
        Self::new(CacheLimits::default())
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
    /// Caches with these capacities.
    pub fn new(limits: CacheLimits) -> Self {
        let caches = Self {
            keys: Lru::new(
                Cache::ApiKey,
                limits.keys_bytes,
                Some(ENTRY_TTL),
                |key: &Arc<CachedKey>| key.weight() as usize,
                drop,
            ),
            key_rate: limits.key_rate,
            agents: Lru::new(
                Cache::Agent,
                limits.agents_bytes,
                Some(ENTRY_TTL),
                |agent: &Arc<CachedAgent>| agent.weight() as usize,
                drop,
            ),
            policies: Lru::new(
                Cache::Policy,
                limits.policies_bytes,
                None,
                |entry: &PolicyEntry| entry.weight as usize,
                // Freed on a thread of its own: a large policy takes seconds to free.
                |entry: PolicyEntry| super::reaper::release(entry.policy),
            ),
            views: RwLock::default(),
            epoch: AtomicU64::new(1),
            decisions: DecisionCache::default(),
        };
        // The capacities show from the start.
        caches.report();
        caches
    }

    /// Records each cache's entries, estimated bytes and capacity (after applying its pending
    /// bookkeeping): run by the change poller after each poll (see [`Caches::apply`]).
    pub fn report(&self) {
        self.keys.report();
        self.agents.report();
        self.policies.report();
    }

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
        // Read again, a key keeps the bucket it had: a change in its workspace must not
        // refill it.
        let mut kept_rate = None;
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
            kept_rate = Some(key.rate.clone());
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
            let rate = kept_rate.clone().unwrap_or_else(|| {
                let per_second = record
                    .rate_limit
                    .map_or(self.key_rate, |own| u64::try_from(own).unwrap_or(0));
                KeyRate::new(per_second).map(Arc::new)
            });
            let key = Arc::new(CachedKey {
                workspace_id: record.workspace_id.clone(),
                key_id: record.id.clone(),
                scopes: Scopes::from_stored(record.scopes.as_deref()),
                rate,
                loaded,
            });
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
            .get(&policy_key(workspace_id, policy_id))
            .map(|entry| (entry.policy, entry.confirmed))
    }

    /// Installs a version (confirmed current at epoch `loaded`) unless a newer one is there.
    pub fn put_policy(
        &self,
        workspace_id: &str,
        policy_id: &str,
        loaded_policy: Arc<LoadedPolicy>,
        loaded: u64,
    ) {
        // Decided and written atomically for the key, as under a lock.
        self.policies
            .cache
            .entry(policy_key(workspace_id, policy_id))
            .and_compute_with(|old| match old.map(moka::Entry::into_value) {
                Some(old) if old.policy.version > loaded_policy.version => Op::Nop,
                Some(old) if old.policy.version == loaded_policy.version => {
                    if old.confirmed >= loaded {
                        Op::Nop
                    } else {
                        Op::Put(PolicyEntry {
                            confirmed: loaded,
                            ..old
                        })
                    }
                }
                _ => {
                    let weight = loaded_policy.weight();
                    if u64::from(weight) > self.policies.capacity {
                        tracing::warn!(
                            workspace = %workspace_id,
                            policy = %policy_id,
                            estimated_mib = weight / (1024 * 1024),
                            "a compiled policy is larger than cache_policies_mib: kept alone, every other policy evicted"
                        );
                    }
                    Op::Put(PolicyEntry {
                        weight,
                        policy: loaded_policy,
                        confirmed: loaded,
                    })
                }
            });
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
        self.policies
            .cache
            .iter()
            .filter(|(key, entry)| {
                // The built-in default (version 0) has no row until a sync creates one.
                let loaded = entry.policy.version;
                current
                    .get(key.as_str())
                    .map_or(loaded != 0, |v| *v != loaded)
            })
            .filter_map(|(key, _)| {
                key.split_once('/')
                    .map(|(ws, pol)| Invalidation::Policy(ws.to_owned(), pol.to_owned()))
            })
            .collect()
    }

    /// Applies what changed elsewhere: evicts agents and keys, reloads policies (compiled off
    /// the request path, so that checks after an apply find them ready). Then reports the
    /// caches' sizes: the change poller calls this after every poll, about once a second.
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
                            self.policies.remove(&policy_key(&ws, &pol));
                            tracing::warn!(error = %err, workspace = %ws, policy = %pol, "policy reload failed; the next check loads it")
                        }
                    }
                }
            }
        }
        self.report();
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
    Ok(Some(Arc::new(LoadedPolicy::new(
        policy_id,
        name,
        record.current_version,
        compiled,
    ))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at_version(version: i64) -> Arc<LoadedPolicy> {
        let default = default_policy().unwrap();
        Arc::new(LoadedPolicy::new(
            "pol_p",
            "p".into(),
            version,
            default.compiled.clone(),
        ))
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

    #[test]
    fn a_version_is_confirmed_forward_and_never_replaced_by_an_older_one() {
        let caches = Caches::default();
        let v2 = at_version(2);
        caches.put_policy("ws_a", "pol_x", v2.clone(), 5);
        // The same version confirmed earlier or later: the kept one stays, its epoch only grows.
        caches.put_policy("ws_a", "pol_x", at_version(2), 3);
        let (kept, confirmed) = caches.cached_policy("ws_a", "pol_x").unwrap();
        assert!(Arc::ptr_eq(&kept, &v2) && confirmed == 5);
        caches.put_policy("ws_a", "pol_x", at_version(2), 9);
        let (kept, confirmed) = caches.cached_policy("ws_a", "pol_x").unwrap();
        assert!(Arc::ptr_eq(&kept, &v2) && confirmed == 9);
        // An older version never replaces a newer one; a newer one does.
        caches.put_policy("ws_a", "pol_x", at_version(1), 20);
        assert_eq!(caches.cached_policy("ws_a", "pol_x").unwrap().0.version, 2);
        caches.put_policy("ws_a", "pol_x", at_version(3), 0);
        let (kept, confirmed) = caches.cached_policy("ws_a", "pol_x").unwrap();
        assert_eq!((kept.version, confirmed), (3, 0));
    }

    fn agent(id: &str, labels: Value) -> Arc<CachedAgent> {
        let record = AgentRecord {
            id: id.to_owned(),
            workspace_id: Some("ws_a".to_owned()),
            name: "agent".to_owned(),
            public_key: "A".repeat(44),
            key_type: "ed25519".to_owned(),
            metadata: json!({"team": "payments"}),
            status: crate::domain::AgentStatus::Active,
            risk_tier: crate::domain::RiskTier::Low,
            created_at: 0,
            updated_at: 0,
            attested_at: None,
            last_seen_at: None,
        };
        Arc::new(CachedAgent::new(record, labels, 1))
    }

    #[test]
    fn the_least_recently_used_agent_goes_first() {
        let one = entry_weight("agt_a", agent("agt_a", json!({})).weight() as usize);
        // Room for two agents, not three.
        let caches = Caches::new(CacheLimits {
            agents_bytes: u64::from(one) * 5 / 2,
            ..CacheLimits::default()
        });
        let agents = &caches.agents;
        for id in ["agt_a", "agt_b"] {
            agents.insert(id.to_owned(), agent(id, json!({})));
            agents.cache.run_pending_tasks();
        }
        // `agt_a` is read, so `agt_b` is now the least recently used.
        assert!(agents.get("agt_a").is_some());
        agents.cache.run_pending_tasks();
        agents.insert("agt_c".to_owned(), agent("agt_c", json!({})));
        agents.cache.run_pending_tasks();
        assert!(agents.get("agt_a").is_some(), "recently read: kept");
        assert!(
            agents.get("agt_b").is_none(),
            "least recently used: evicted"
        );
        assert!(agents.get("agt_c").is_some(), "just inserted: kept");
        assert_eq!(agents.cache.entry_count(), 2);
        assert!(agents.cache.weighted_size() <= agents.capacity);
    }

    #[test]
    fn an_entry_larger_than_the_capacity_is_kept_alone() {
        let caches = Caches::new(CacheLimits {
            agents_bytes: 8192,
            ..CacheLimits::default()
        });
        let agents = &caches.agents;
        let small = agent("agt_a", json!({}));
        let huge = agent("agt_b", json!({"notes": "x".repeat(10_000)}));
        assert!(small.weight() < 8192 && huge.weight() > 8192);
        agents.insert("agt_a".into(), small);
        agents.cache.run_pending_tasks();
        agents.insert("agt_b".into(), huge);
        agents.cache.run_pending_tasks();
        assert!(agents.get("agt_b").is_some());
        assert!(agents.get("agt_a").is_none());
        assert_eq!(agents.cache.weighted_size(), 8192);
    }

    #[test]
    fn weights_grow_with_what_an_entry_holds() {
        let bare = agent("agt_a", json!({}));
        let labelled = agent(
            "agt_a",
            json!({"region": "eu-west-1".repeat(100), "tier": ["a", "b"]}),
        );
        assert!(bare.weight() as usize > size_of::<CachedAgent>() + PREPARED_BASE);
        // The labels' bytes count, and again for the prepared agent.
        assert!(labelled.weight() > bare.weight() + 900 * (1 + PREPARED_PER_FACT_BYTE) as u32);
        assert_eq!(json_weight(&json!("abc")), 3);
        assert_eq!(json_weight(&json!([1, 2])), 2 * size_of::<Value>());
        assert!(json_weight(&json!({"k": "vv"})) > 3 + size_of::<Value>());

        let key = CachedKey {
            workspace_id: "ws_a".into(),
            key_id: "key_1".into(),
            scopes: Scopes::from_stored(None),
            rate: None,
            loaded: 1,
        };
        let scoped = CachedKey {
            scopes: Scopes::from_stored(Some("read policy:sync")),
            ..key.clone()
        };
        assert_eq!(key.weight() as usize, size_of::<CachedKey>() + 4 + 5);
        assert!(scoped.weight() > key.weight() + 15);

        let policy = default_policy().unwrap();
        assert!(policy.weight() as usize > policy.compiled.cedar.len() * POLICY_PER_CEDAR_BYTE);
        // A whole entry: key, value and bookkeeping; saturating rather than wrapping.
        assert_eq!(
            entry_weight("k", 10) as usize,
            size_of::<String>() + 11 + ENTRY_OVERHEAD
        );
        assert_eq!(entry_weight("k", usize::MAX), u32::MAX);
    }

    #[test]
    fn keys_and_agents_are_forgotten_and_sizes_reported() {
        let caches = Caches::default();
        let key = |id: &str| {
            Arc::new(CachedKey {
                workspace_id: "ws_a".into(),
                key_id: id.into(),
                scopes: Scopes::all(),
                rate: None,
                loaded: 1,
            })
        };
        caches.keys.insert("hash1".into(), key("key_1"));
        caches.keys.insert("hash2".into(), key("key_1"));
        caches.keys.insert("hash3".into(), key("key_2"));
        caches.forget_key("key_1");
        assert!(caches.keys.get("hash1").is_none() && caches.keys.get("hash2").is_none());
        assert!(caches.keys.get("hash3").is_some());
        caches
            .agents
            .insert("agt_a".into(), agent("agt_a", json!({})));
        assert!(caches.agents.remove("agt_a"));
        assert!(!caches.agents.remove("agt_a"));
        caches.report();
        assert_eq!(caches.keys.cache.entry_count(), 1);
        assert_eq!(caches.agents.cache.entry_count(), 0);
        assert_eq!(caches.keys.capacity, config::DEFAULT_CACHE_KEYS_MIB * MIB);
        let settings = config::Settings {
            cache_agents_mib: Some(1),
            ..config::Settings::default()
        };
        let limits = CacheLimits::of(&settings.resolve().unwrap());
        assert_eq!(limits.agents_bytes, 1024 * 1024);
        assert_eq!(limits.keys_bytes, 8 * 1024 * 1024);
    }
}
