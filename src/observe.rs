//! Metrics: the name, kind, labels and meaning of every metric the server exports at
//! `GET /metrics` (Prometheus text format, `docs/observability.md`), and one recording function
//! per thing measured, so that names and labels are written here and nowhere else.
//!
//! The recorder is process-wide (`metrics` has one global recorder): [`install`] sets it up
//! once, however many servers a process builds (the tests build many), and every server's
//! `/metrics` renders the same registry. Before it is installed (admin commands, unit tests)
//! recording is a no-op.
//!
//! Labels come from bounded sets only: route templates (never raw paths), methods and statuses
//! mapped to fixed strings, error codes the server defines. The labels whose values tenants
//! choose (policy ids and reason codes of decisions, audit sink ids) keep the first values seen
//! up to a bound each ([`LabelLimits`]), and count every later one as `other`: workspaces are
//! unbounded, so what is bounded per workspace is not bounded per server. Never an agent, key,
//! workspace or user id. Where a label is fixed by the caller it is a `&'static str`, so
//! recording builds no strings; the decision counters are handles made once per policy version
//! and label value ([`DecisionCounters`]), not looked up by name per decision.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError, RwLock};
use std::time::Duration;

use metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Counter,
    Histogram, Unit,
};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

// ---- names ------------------------------------------------------------------------------------

/// Gauge: audit streams (server-sent events) open on this server.
pub const AUDIT_STREAMS_OPEN: &str = "acp_audit_streams_open";
/// Counter: audit streams refused 429 `too_many_streams`, by `cap` (`principal`, `server`).
pub const AUDIT_STREAMS_REFUSED: &str = "acp_audit_streams_refused_total";

/// Counter: HTTP requests answered, by `method`, `route` (the route template) and `status`.
pub const HTTP_REQUESTS: &str = "acp_http_requests_total";
/// Histogram: time from the request reaching the router to the answer's head, by `method` and
/// `route`.
pub const HTTP_DURATION: &str = "acp_http_request_duration_seconds";
/// Counter: decisions made and recorded (`/v1/check` and the checks of email sends, credential
/// mints and the vault), by `outcome` and `policy_id`.
pub const DECISIONS: &str = "acp_decisions_total";
/// Counter: reason codes of recorded decisions, by `outcome`, `policy_id` and `reason`.
pub const DECISION_REASONS: &str = "acp_decision_reasons_total";
/// Counter: requests refused 401 for their credential, by `credential` (what was presented)
/// and `reason` (the error code).
pub const AUTH_FAILURES: &str = "acp_auth_failures_total";
/// Counter: agent signatures that failed, by `source` (`request`: a signed request to this
/// server; `verify`: a signature a backend asked `/v1/verify` about) and `reason`.
pub const SIGNATURE_FAILURES: &str = "acp_signature_failures_total";
/// Counter: requests refused 429 `rate_limited`, by `route`.
pub const RATE_LIMITED: &str = "acp_rate_limited_total";
/// Histogram: changes in one group-commit batch.
pub const COMMIT_BATCH_SIZE: &str = "acp_group_commit_batch_size";
/// Histogram: time to apply and commit one group-commit batch, by `outcome`.
pub const COMMIT_DURATION: &str = "acp_group_commit_duration_seconds";
/// Counter: cache lookups, by `cache` (`api_key`, `agent`, `policy`) and `result` (`hit`,
/// `miss`).
pub const CACHE_LOOKUPS: &str = "acp_cache_lookups_total";
/// Counter: cache entries dropped or reloaded because their state changed, by `cache`.
pub const CACHE_INVALIDATIONS: &str = "acp_cache_invalidations_total";
/// Gauge: entries in a cache, by `cache` (refreshed about once a second).
pub const CACHE_ENTRIES: &str = "acp_cache_entries";
/// Gauge: the estimated bytes a cache holds (the sum of its entries' weights), by `cache`.
pub const CACHE_BYTES: &str = "acp_cache_bytes";
/// Gauge: the configured capacity of a cache, estimated bytes, by `cache`.
pub const CACHE_CAPACITY: &str = "acp_cache_capacity_bytes";
/// Counter: cache entries evicted to keep a cache within its capacity, by `cache`.
pub const CACHE_EVICTIONS: &str = "acp_cache_evictions_total";
/// Histogram: from a workspace change's commit (its `changed_at`) to this replica's caches
/// moving to it through the change poll.
pub const CHANGE_LAG: &str = "acp_cache_change_lag_seconds";
/// Gauge: database connections, by `pool` and `state` (`in_use`, `idle`).
pub const DB_CONNECTIONS: &str = "acp_db_pool_connections";
/// Gauge: the most connections a pool opens, by `pool`.
pub const DB_MAX_CONNECTIONS: &str = "acp_db_pool_max_connections";
/// Counter: mail delivered to the provider, by `provider`.
pub const MAIL_SENT: &str = "acp_mail_sent_total";
/// Counter: mail not delivered, by `provider` and `kind` (`invalid`, `provider`).
pub const MAIL_FAILURES: &str = "acp_mail_failures_total";
/// Counter: uses of vault request leases, by `action` (`read`, `proxy`).
pub const VAULT_LEASE_USES: &str = "acp_vault_lease_uses_total";
/// Histogram: the vault proxy's upstream calls, connection to last byte, by `outcome`.
pub const VAULT_UPSTREAM_DURATION: &str = "acp_vault_proxy_upstream_duration_seconds";
/// Counter: requests the MCP gateway decided, by `server`, `tool`, `method` (`tools/call`,
/// `resources/read`, `prompts/get`) and `outcome` (`allow`, `challenge`, `deny`).
pub const MCP_CALLS: &str = "acp_mcp_calls_total";
/// Counter: batches POSTed to audit sinks, by `outcome` (`delivered`, `failed`).
pub const SINK_DELIVERIES: &str = "acp_audit_sink_deliveries_total";
/// Counter: audit events delivered to sinks (repeats after a failure count again).
pub const SINK_EVENTS: &str = "acp_audit_sink_events_delivered_total";
/// Gauge: events committed and not yet delivered, by `sink_id` (counted up to 100,000).
pub const SINK_LAG_EVENTS: &str = "acp_audit_sink_lag_events";
/// Gauge: age of the oldest event not yet delivered, by `sink_id` (0 when caught up).
pub const SINK_LAG_SECONDS: &str = "acp_audit_sink_lag_seconds";
/// Gauge: consecutive failed deliveries, by `sink_id` (0 when the last one succeeded).
pub const SINK_FAILURES: &str = "acp_audit_sink_consecutive_failures";
/// Counter: rows removed by retention, by `table` (`audit_events`, `heartbeats`).
pub const RETENTION_PRUNED: &str = "acp_retention_pruned_rows_total";
/// Gauge, always 1: what this binary was built from, by `version`, `git_sha`, `profile` and
/// `rustc`.
pub const BUILD_INFO: &str = "acp_build_info";

/// What this binary was built from (`build.rs`): the crate's version, the commit (`unknown`
/// outside a git checkout), the Cargo profile and the compiler's version.
pub const BUILD: [(&str, &str); 4] = [
    ("version", env!("CARGO_PKG_VERSION")),
    ("git_sha", env!("ACP_BUILD_GIT_SHA")),
    ("profile", env!("ACP_BUILD_PROFILE")),
    ("rustc", env!("ACP_BUILD_RUSTC")),
];

/// Bucket bounds of request-like durations, seconds.
const DURATION_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Bucket bounds of the change lag, seconds (the poll runs every second).
const LAG_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0, 300.0,
];
/// Bucket bounds of batch sizes, changes.
const BATCH_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
];

// ---- the recorder -----------------------------------------------------------------------------

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// How many distinct values each label whose values tenants choose keeps: the first values
/// seen keep their own series, every later one is counted as [`OTHER`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LabelLimits {
    /// `policy_id` of `acp_decisions_total` and `acp_decision_reasons_total`.
    pub policy_ids: usize,
    /// `reason` of `acp_decision_reasons_total`.
    pub reasons: usize,
    /// `sink_id` of the audit sinks' lag gauges.
    pub sink_ids: usize,
    /// `server` and `tool` pairs of `acp_mcp_calls_total`.
    pub mcp_tools: usize,
}

impl Default for LabelLimits {
    fn default() -> Self {
        Self {
            policy_ids: 50,
            reasons: 100,
            sink_ids: 50,
            mcp_tools: 200,
        }
    }
}

/// The limits of the process (those of the first [`install`]).
static LIMITS: OnceLock<LabelLimits> = OnceLock::new();

/// The label value of every value past its label's bound.
pub const OTHER: &str = "other";

/// Installs the process's Prometheus recorder and describes every metric, once; later calls
/// answer the same handle. `None` when another recorder was installed first (then `/metrics`
/// renders nothing of this one). The first call's `limits` hold for the process.
pub fn install(limits: LabelLimits) -> Option<&'static PrometheusHandle> {
    let _ = LIMITS.set(limits);
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Full(CHANGE_LAG.into()), LAG_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full(COMMIT_BATCH_SIZE.into()), BATCH_BUCKETS)
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Suffix("_seconds".into()), DURATION_BUCKETS)
                });
            let handle = match builder.map(PrometheusBuilder::install_recorder) {
                Ok(Ok(handle)) => handle,
                Ok(Err(err)) | Err(err) => {
                    tracing::warn!(error = %err, "metrics recorder not installed; /metrics stays empty");
                    return None;
                }
            };
            describe();
            let build: Vec<metrics::Label> = BUILD
                .iter()
                .map(|(name, value)| metrics::Label::new(*name, *value))
                .collect();
            gauge!(BUILD_INFO, build).set(1.0);
            process_collector().describe();
            process_collector().collect();
            Some(handle)
        })
        .as_ref()
}

/// The collector of the standard process metrics (`process_resident_memory_bytes`,
/// `process_open_fds`, `process_cpu_seconds_total`, ...; on Linux read from `/proc/self`).
fn process_collector() -> &'static metrics_process::Collector {
    static COLLECTOR: OnceLock<metrics_process::Collector> = OnceLock::new();
    COLLECTOR.get_or_init(metrics_process::Collector::default)
}

/// Reads the process metrics again (at each scrape: they are gauges of the moment).
pub fn process() {
    if HANDLE.get().and_then(Option::as_ref).is_some() {
        process_collector().collect();
    }
}

/// The metrics in the Prometheus text format (empty before [`install`]).
pub fn render() -> String {
    HANDLE
        .get()
        .and_then(Option::as_ref)
        .map(PrometheusHandle::render)
        .unwrap_or_default()
}

/// Folds recorded histogram samples into their buckets, so memory stays bounded between scrapes
/// (run every few seconds by the server).
pub fn upkeep() {
    if let Some(handle) = HANDLE.get().and_then(Option::as_ref) {
        handle.run_upkeep();
    }
}

fn describe() {
    describe_gauge!(
        BUILD_INFO,
        Unit::Count,
        "Always 1: the version, commit, Cargo profile and compiler this binary was built with"
    );
    describe_counter!(
        HTTP_REQUESTS,
        Unit::Count,
        "HTTP requests answered, by method, route template and status"
    );
    describe_histogram!(
        HTTP_DURATION,
        Unit::Seconds,
        "Time to answer an HTTP request, by method and route template"
    );
    describe_counter!(
        DECISIONS,
        Unit::Count,
        "Decisions recorded, by outcome (allow, challenge, deny) and policy id"
    );
    describe_counter!(
        DECISION_REASONS,
        Unit::Count,
        "Reason codes of recorded decisions, by outcome, policy id and reason code"
    );
    describe_counter!(
        AUTH_FAILURES,
        Unit::Count,
        "Requests refused 401 for their credential, by the credential presented and the error code"
    );
    describe_counter!(
        SIGNATURE_FAILURES,
        Unit::Count,
        "Agent signatures that failed, by source (request, verify) and reason code"
    );
    describe_gauge!(
        AUDIT_STREAMS_OPEN,
        Unit::Count,
        "Audit streams (server-sent events) open on this server"
    );
    describe_counter!(
        AUDIT_STREAMS_REFUSED,
        Unit::Count,
        "Audit streams refused 429 too_many_streams, by the cap reached (principal, server)"
    );
    describe_counter!(
        RATE_LIMITED,
        Unit::Count,
        "Requests refused 429 rate_limited, by route template"
    );
    describe_histogram!(
        COMMIT_BATCH_SIZE,
        Unit::Count,
        "Changes committed together in one group-commit batch"
    );
    describe_histogram!(
        COMMIT_DURATION,
        Unit::Seconds,
        "Time to apply and commit one group-commit batch, by outcome"
    );
    describe_counter!(
        CACHE_LOOKUPS,
        Unit::Count,
        "Cache lookups of API keys, agents and compiled policies, by cache and result (hit, miss)"
    );
    describe_counter!(
        CACHE_INVALIDATIONS,
        Unit::Count,
        "Cache entries dropped or reloaded because the state they hold changed, by cache"
    );
    describe_gauge!(
        CACHE_ENTRIES,
        Unit::Count,
        "Entries in the caches of API keys, agents and compiled policies, by cache"
    );
    describe_gauge!(
        CACHE_BYTES,
        Unit::Bytes,
        "Estimated bytes held by the caches of API keys, agents and compiled policies, by cache"
    );
    describe_gauge!(
        CACHE_CAPACITY,
        Unit::Bytes,
        "Configured capacity of the caches of API keys, agents and compiled policies, estimated bytes, by cache"
    );
    describe_counter!(
        CACHE_EVICTIONS,
        Unit::Count,
        "Cache entries evicted (least recently used first) to keep a cache within its capacity, by cache"
    );
    describe_histogram!(CHANGE_LAG, Unit::Seconds, "Delay from a workspace change's commit to this replica's caches moving to it (change poll)");
    describe_gauge!(
        DB_CONNECTIONS,
        Unit::Count,
        "Database connections of a pool, by pool and state (in_use, idle)"
    );
    describe_gauge!(
        DB_MAX_CONNECTIONS,
        Unit::Count,
        "Most connections a database pool opens, by pool"
    );
    describe_counter!(
        MAIL_SENT,
        Unit::Count,
        "Mail handed to the provider, by provider (outbox, smtp)"
    );
    describe_counter!(
        MAIL_FAILURES,
        Unit::Count,
        "Mail not delivered, by provider and kind (invalid, provider)"
    );
    describe_counter!(
        VAULT_LEASE_USES,
        Unit::Count,
        "Uses of vault request leases, by action (read, proxy)"
    );
    describe_histogram!(
        VAULT_UPSTREAM_DURATION,
        Unit::Seconds,
        "Duration of the vault proxy's upstream calls, by outcome"
    );
    describe_counter!(
        MCP_CALLS,
        Unit::Count,
        "Requests the MCP gateway decided, by server, tool, method and outcome"
    );
    describe_counter!(
        SINK_DELIVERIES,
        Unit::Count,
        "Batches POSTed to audit sinks, by outcome (delivered, failed)"
    );
    describe_counter!(
        SINK_EVENTS,
        Unit::Count,
        "Audit events delivered to sinks (a batch sent again counts again)"
    );
    describe_gauge!(
        SINK_LAG_EVENTS,
        Unit::Count,
        "Audit events committed and not yet delivered to a sink, by sink id (up to 100000)"
    );
    describe_gauge!(
        SINK_LAG_SECONDS,
        Unit::Seconds,
        "Age of the oldest audit event a sink has not received, by sink id (0: caught up)"
    );
    describe_gauge!(
        SINK_FAILURES,
        Unit::Count,
        "Consecutive failed deliveries to a sink, by sink id"
    );
    describe_counter!(
        RETENTION_PRUNED,
        Unit::Count,
        "Rows removed by retention, by table (audit_events, heartbeats)"
    );
}

// ---- label helpers ----------------------------------------------------------------------------

/// The values one label has kept, at most `max`.
struct Kept {
    max: usize,
    seen: Mutex<HashSet<String>>,
}

impl Kept {
    /// `value` if it is kept or there is room to keep it, else [`OTHER`]. Takes a lock: called
    /// once per label value and handle, never per request.
    fn label(&self, value: &str) -> String {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.contains(value) {
            return value.to_owned();
        }
        if seen.len() < self.max {
            seen.insert(value.to_owned());
            return value.to_owned();
        }
        OTHER.to_owned()
    }

    /// Whether `value` has a series of its own.
    fn keeps(&self, value: &str) -> bool {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(value)
    }
}

/// The labels tenants choose the values of.
#[derive(Clone, Copy)]
enum Chosen {
    PolicyId,
    Reason,
    SinkId,
    McpTool,
}

/// The values kept of `label`, bounded by the process's [`LabelLimits`].
fn kept(label: Chosen) -> &'static Kept {
    static KEPT: OnceLock<[Kept; 4]> = OnceLock::new();
    let all = KEPT.get_or_init(|| {
        let limits = LIMITS.get().copied().unwrap_or_default();
        [
            limits.policy_ids,
            limits.reasons,
            limits.sink_ids,
            limits.mcp_tools,
        ]
        .map(|max| Kept {
            max,
            seen: Mutex::default(),
        })
    });
    &all[label as usize]
}

/// `text` as a `&'static str`, kept once per distinct value. Only for label values from a set
/// the server bounds (route templates, status codes): each distinct value is kept for the
/// life of the process.
pub fn intern(text: &str) -> &'static str {
    static SEEN: OnceLock<RwLock<HashSet<&'static str>>> = OnceLock::new();
    let seen = SEEN.get_or_init(Default::default);
    if let Some(hit) = seen
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .get(text)
    {
        return hit;
    }
    let mut set = seen.write().unwrap_or_else(PoisonError::into_inner);
    if let Some(hit) = set.get(text) {
        return hit;
    }
    let kept: &'static str = Box::leak(text.to_owned().into_boxed_str());
    set.insert(kept);
    kept
}

// ---- recording --------------------------------------------------------------------------------

/// Whether this process's recorder is installed: handles are kept only then (one made before
/// would be a no-op handle for good).
fn recording() -> bool {
    HANDLE.get().and_then(Option::as_ref).is_some()
}

/// Metric handles kept by their labels, made at a label set's first use: `counter!` and
/// `histogram!` build a key and look the series up by name and labels on every call, a kept
/// handle is an atomic add. Only for labels that are interned `&'static str` (compared by
/// address: one address per distinct value) from sets the server bounds.
struct Handles<T> {
    kept: RwLock<HashMap<[usize; 3], T>>,
}

impl<T: Clone> Handles<T> {
    fn new() -> Self {
        Self {
            kept: RwLock::new(HashMap::new()),
        }
    }

    fn get(&self, labels: [&'static str; 3], make: impl FnOnce() -> T) -> T {
        let key = labels.map(|l| l.as_ptr() as usize);
        if let Some(hit) = self
            .kept
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
        {
            return hit.clone();
        }
        // Read before the handle is made: one made while the recorder was not yet installed
        // is never kept.
        let keep = recording();
        let made = make();
        if keep {
            self.kept
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(key, made.clone());
        }
        made
    }
}

/// One HTTP request answered.
pub fn http_request(
    method: &'static str,
    route: &'static str,
    status: &'static str,
    took: Duration,
) {
    static REQUESTS: OnceLock<Handles<Counter>> = OnceLock::new();
    static DURATIONS: OnceLock<Handles<Histogram>> = OnceLock::new();
    REQUESTS
        .get_or_init(Handles::new)
        .get(
            [method, route, status],
            || counter!(HTTP_REQUESTS, "method" => method, "route" => route, "status" => status),
        )
        .increment(1);
    DURATIONS
        .get_or_init(Handles::new)
        .get(
            [method, route, ""],
            || histogram!(HTTP_DURATION, "method" => method, "route" => route),
        )
        .record(took.as_secs_f64());
}

/// A request refused 401.
pub fn auth_failure(credential: &'static str, reason: &'static str) {
    counter!(AUTH_FAILURES, "credential" => credential, "reason" => reason).increment(1);
}

/// A failed agent signature.
pub fn signature_failure(source: &'static str, reason: &'static str) {
    counter!(SIGNATURE_FAILURES, "source" => source, "reason" => reason).increment(1);
}

/// A request refused 429.
pub fn rate_limited(route: &'static str) {
    counter!(RATE_LIMITED, "route" => route).increment(1);
}

/// The outcomes of a decision, in the order of [`DecisionCounters`]' slots.
const OUTCOMES: [&str; 3] = ["allow", "challenge", "deny"];

/// The decision counters of one policy version, made with it and kept with it: recording a
/// decision reads handles made at the first decision of each outcome and reason (a lock-free
/// read of a slot), never a lookup of a series by name. The policy's label is its id if it is
/// among the first [`LabelLimits::policy_ids`] seen, else [`OTHER`]; a reason's likewise.
pub struct DecisionCounters {
    policy_id: String,
    /// Chosen at the policy's first decision (so the bound keeps the policies decided with).
    label: OnceLock<String>,
    /// `acp_decisions_total`, by outcome.
    decisions: [OnceLock<Counter>; 3],
    /// `acp_decision_reasons_total`, by each reason code the policy can give, by outcome.
    reasons: HashMap<String, [OnceLock<Counter>; 3]>,
}

impl std::fmt::Debug for DecisionCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecisionCounters")
            .field("policy_id", &self.policy_id)
            .field("label", &self.label.get())
            .finish_non_exhaustive()
    }
}

impl DecisionCounters {
    /// The counters of policy `policy_id`, with a slot for each reason code it can give.
    pub fn new(policy_id: &str, reasons: impl IntoIterator<Item = String>) -> Self {
        Self {
            policy_id: policy_id.to_owned(),
            label: OnceLock::new(),
            decisions: Default::default(),
            reasons: reasons
                .into_iter()
                .map(|reason| (reason, Default::default()))
                .collect(),
        }
    }

    /// A decision that was recorded (its audit event committed).
    pub fn record(&self, outcome: &'static str, reason_codes: &[String]) {
        let label = self
            .label
            .get_or_init(|| kept(Chosen::PolicyId).label(&self.policy_id));
        let Some(at) = OUTCOMES.iter().position(|o| *o == outcome) else {
            // Not an outcome the slots know (none such is made): counted the slow way.
            decision_counter(outcome, label).increment(1);
            for reason in reason_codes {
                reason_counter(outcome, label, reason).increment(1);
            }
            return;
        };
        self.decisions[at]
            .get_or_init(|| decision_counter(outcome, label))
            .increment(1);
        for reason in reason_codes {
            match self.reasons.get(reason.as_str()) {
                Some(slots) => slots[at]
                    .get_or_init(|| reason_counter(outcome, label, reason))
                    .increment(1),
                // A code the policy was not known to give: looked up by name.
                None => reason_counter(outcome, label, reason).increment(1),
            }
        }
    }
}

fn decision_counter(outcome: &'static str, policy_label: &str) -> Counter {
    counter!(DECISIONS, "outcome" => outcome, "policy_id" => policy_label.to_owned())
}

fn reason_counter(outcome: &'static str, policy_label: &str, reason: &str) -> Counter {
    counter!(DECISION_REASONS, "outcome" => outcome, "policy_id" => policy_label.to_owned(),
        "reason" => kept(Chosen::Reason).label(reason))
}

/// One group-commit batch: its size, how long applying and committing it took, and whether it
/// committed (`committed`), was applied change by change after a transient conflict
/// (`retried`), or failed (`failed`).
pub fn commit_batch(size: usize, took: Duration, outcome: &'static str) {
    static SIZES: OnceLock<Handles<Histogram>> = OnceLock::new();
    static DURATIONS: OnceLock<Handles<Histogram>> = OnceLock::new();
    SIZES
        .get_or_init(Handles::new)
        .get(["", "", ""], || histogram!(COMMIT_BATCH_SIZE))
        .record(size as f64);
    DURATIONS
        .get_or_init(Handles::new)
        .get(
            [outcome, "", ""],
            || histogram!(COMMIT_DURATION, "outcome" => outcome),
        )
        .record(took.as_secs_f64());
}

/// The caches of the decision path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cache {
    ApiKey,
    Agent,
    Policy,
}

impl Cache {
    fn label(self) -> &'static str {
        match self {
            Cache::ApiKey => "api_key",
            Cache::Agent => "agent",
            Cache::Policy => "policy",
        }
    }
}

/// A cache lookup that found a usable entry (`hit`) or went to the store.
pub fn cache_lookup(cache: Cache, hit: bool) {
    static LOOKUPS: OnceLock<Handles<Counter>> = OnceLock::new();
    let result = if hit { "hit" } else { "miss" };
    LOOKUPS
        .get_or_init(Handles::new)
        .get(
            [cache.label(), result, ""],
            || counter!(CACHE_LOOKUPS, "cache" => cache.label(), "result" => result),
        )
        .increment(1);
}

/// `count` entries of `cache` dropped or reloaded because their state changed.
pub fn cache_invalidated(cache: Cache, count: u64) {
    if count > 0 {
        counter!(CACHE_INVALIDATIONS, "cache" => cache.label()).increment(count);
    }
}

/// The size of `cache`: its entries, their estimated bytes and its capacity.
pub fn cache_size(cache: Cache, entries: u64, bytes: u64, capacity: u64) {
    gauge!(CACHE_ENTRIES, "cache" => cache.label()).set(entries as f64);
    gauge!(CACHE_BYTES, "cache" => cache.label()).set(bytes as f64);
    gauge!(CACHE_CAPACITY, "cache" => cache.label()).set(capacity as f64);
}

/// `count` entries of `cache` evicted to keep it within its capacity (0 shows the series).
pub fn cache_evicted(cache: Cache, count: u64) {
    counter!(CACHE_EVICTIONS, "cache" => cache.label()).increment(count);
}

/// A replica moved to a workspace version committed `lag_ms` earlier (negative values, from
/// clocks that differ between replicas, count as 0).
pub fn change_lag(lag_ms: i64) {
    histogram!(CHANGE_LAG).record(lag_ms.max(0) as f64 / 1000.0);
}

/// The state of one connection pool.
pub fn pool(pool: &'static str, open: u32, idle: usize, max: u32) {
    let idle = idle as f64;
    gauge!(DB_CONNECTIONS, "pool" => pool, "state" => "in_use")
        .set((f64::from(open) - idle).max(0.0));
    gauge!(DB_CONNECTIONS, "pool" => pool, "state" => "idle").set(idle);
    gauge!(DB_MAX_CONNECTIONS, "pool" => pool).set(f64::from(max));
}

/// A message handed to the provider.
pub fn mail_sent(provider: &'static str) {
    counter!(MAIL_SENT, "provider" => provider).increment(1);
}

/// A message not delivered: refused as `invalid`, or the `provider` failed.
pub fn mail_failed(provider: &'static str, kind: &'static str) {
    counter!(MAIL_FAILURES, "provider" => provider, "kind" => kind).increment(1);
}

/// One use of a vault request lease.
pub fn lease_used(action: &'static str) {
    counter!(VAULT_LEASE_USES, "action" => action).increment(1);
}

/// One upstream call of the vault proxy: `answered`, `timeout` or `failed`.
pub fn upstream_call(outcome: &'static str, took: Duration) {
    histogram!(VAULT_UPSTREAM_DURATION, "outcome" => outcome).record(took.as_secs_f64());
}

/// One request the MCP gateway decided. The first [`LabelLimits::mcp_tools`] server and tool
/// pairs seen have series of their own; later ones count as `other` (both labels), as do
/// resources and prompts beyond them. Resources are counted by method only: their URIs are
/// unbounded.
pub fn mcp_call(server: &str, target: &str, method: &'static str, outcome: &str) {
    let outcome: &'static str = match outcome {
        "allow" => "allow",
        "challenge" => "challenge",
        _ => "deny",
    };
    let tool = if method == "resources/read" {
        ""
    } else {
        target
    };
    let pair = format!("{server}/{tool}");
    // A denied call names whatever tool the agent wrote: it takes a series of its own only
    // when the tool has one already, so made-up names cannot use up the bound.
    let kept_tools = kept(Chosen::McpTool);
    let other = if outcome == "deny" {
        !kept_tools.keeps(&pair)
    } else {
        kept_tools.label(&pair) == OTHER
    };
    let (server, tool) = if other {
        (OTHER.to_owned(), OTHER.to_owned())
    } else {
        (server.to_owned(), tool.to_owned())
    };
    counter!(MCP_CALLS, "server" => server, "tool" => tool, "method" => method, "outcome" => outcome)
        .increment(1);
}

/// One batch POSTed to an audit sink: `delivered` (with its events) or `failed`.
pub fn sink_delivery(outcome: &'static str, events: u64) {
    counter!(SINK_DELIVERIES, "outcome" => outcome).increment(1);
    if events > 0 {
        counter!(SINK_EVENTS).increment(events);
    }
}

/// One sink's lag: `(sink_id, events, seconds, consecutive failures)`.
pub type SinkLag<'a> = (&'a str, i64, f64, i64);

/// How far behind every sink is, each refresh. Sinks are few per workspace (ten at most), but
/// workspaces are not: the first [`LabelLimits::sink_ids`] sinks seen have series of their
/// own, and the rest are reported together as `other`, with the largest lag and failure count
/// among them (zero when there are none). A deleted sink's series is set to zero by
/// [`sink_gone`].
pub fn sink_lags<'a>(sinks: impl IntoIterator<Item = SinkLag<'a>>) {
    static OTHERS_SHOWN: AtomicBool = AtomicBool::new(false);
    let mut others: Option<(i64, f64, i64)> = None;
    for (sink_id, events, seconds, failures) in sinks {
        let label = kept(Chosen::SinkId).label(sink_id);
        if label == OTHER {
            let (e, s, f) = others.get_or_insert((0, 0.0, 0));
            (*e, *s, *f) = ((*e).max(events), s.max(seconds), (*f).max(failures));
        } else {
            set_sink_lag(label, events, seconds, failures);
        }
    }
    match others {
        Some((events, seconds, failures)) => {
            OTHERS_SHOWN.store(true, Ordering::Relaxed);
            set_sink_lag(OTHER.to_owned(), events, seconds, failures);
        }
        None if OTHERS_SHOWN.load(Ordering::Relaxed) => set_sink_lag(OTHER.to_owned(), 0, 0.0, 0),
        None => {}
    }
}

fn set_sink_lag(label: String, events: i64, seconds: f64, failures: i64) {
    gauge!(SINK_LAG_EVENTS, "sink_id" => label.clone()).set(events as f64);
    gauge!(SINK_LAG_SECONDS, "sink_id" => label.clone()).set(seconds);
    gauge!(SINK_FAILURES, "sink_id" => label).set(failures as f64);
}

/// A sink that no longer exists: its series (if it has its own) read zero.
pub fn sink_gone(sink_id: &str) {
    if kept(Chosen::SinkId).keeps(sink_id) {
        set_sink_lag(sink_id.to_owned(), 0, 0.0, 0);
    }
}

/// The audit streams open now.
pub fn audit_streams_open(open: usize) {
    gauge!(AUDIT_STREAMS_OPEN).set(open as f64);
}

/// An audit stream refused at a cap: `principal` or `server`.
pub fn audit_stream_refused(cap: &'static str) {
    counter!(AUDIT_STREAMS_REFUSED, "cap" => cap).increment(1);
}

/// Rows removed by one retention prune.
pub fn retention_pruned(table: &'static str, rows: u64) {
    counter!(RETENTION_PRUNED, "table" => table).increment(rows);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interned_labels_are_kept_once() {
        let a = intern("/v1/agents/{agent_id}");
        let b = intern(&String::from("/v1/agents/{agent_id}"));
        assert!(std::ptr::eq(a, b));
        assert_eq!(a, "/v1/agents/{agent_id}");
    }

    #[test]
    fn names_follow_the_prometheus_conventions() {
        let counters = [
            HTTP_REQUESTS,
            DECISIONS,
            DECISION_REASONS,
            AUTH_FAILURES,
            SIGNATURE_FAILURES,
            RATE_LIMITED,
            CACHE_LOOKUPS,
            CACHE_INVALIDATIONS,
            CACHE_EVICTIONS,
            MAIL_SENT,
            MAIL_FAILURES,
            VAULT_LEASE_USES,
            SINK_DELIVERIES,
            SINK_EVENTS,
            RETENTION_PRUNED,
        ];
        for name in counters {
            assert!(
                name.starts_with("acp_") && name.ends_with("_total"),
                "{name}"
            );
        }
        for name in [
            HTTP_DURATION,
            COMMIT_DURATION,
            CHANGE_LAG,
            VAULT_UPSTREAM_DURATION,
            SINK_LAG_SECONDS,
        ] {
            assert!(
                name.starts_with("acp_") && name.ends_with("_seconds"),
                "{name}"
            );
        }
        for name in [CACHE_BYTES, CACHE_CAPACITY] {
            assert!(
                name.starts_with("acp_") && name.ends_with("_bytes"),
                "{name}"
            );
        }
        assert!(CACHE_ENTRIES.starts_with("acp_"));
        assert!(BUILD_INFO.starts_with("acp_") && BUILD_INFO.ends_with("_info"));
    }

    #[test]
    fn the_build_is_named() {
        let labels: Vec<&str> = BUILD.iter().map(|(name, _)| *name).collect();
        assert_eq!(labels, ["version", "git_sha", "profile", "rustc"]);
        assert!(BUILD.iter().all(|(_, value)| !value.is_empty()));
        assert_eq!(BUILD[0].1, env!("CARGO_PKG_VERSION"));
    }
}
