//! Policy sync: a desired spec against the current policy — dry run (hashes and diff) or apply
//! (a new version, memberships and bindings materialised, audited, live on every replica).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::api;
use crate::audit::{self, Actor};
use crate::context::Context;
use crate::domain::Refusal;
use crate::store::{
    AuditQuery, Change, IdempotencyRecord, Op, PolicyApply, PolicyOp, PolicyVersion, StoreError,
};
use crate::time::now_ms;

use super::cache::{LoadedPolicy, DEFAULT_POLICY_ID};
use super::check::unknown_policy;
use super::compile::compile_with;
use super::diff::diff;
use super::error::{SyncError, SyncResult};
use super::impact::{Impact, DEFAULT_REPLAY_CHECKS, MAX_REPLAY_CHECKS};
use super::limits::{Budget, CancelOnDrop};
use super::semantic::{semantic_diff, SemanticDiff};
use super::spec::{from_value, PolicySpec, SpecError};
use super::CompiledPolicy;
use crate::domain::ids::PolicyId;

const IDEMPOTENCY_WINDOW_MS: i64 = 24 * 3_600_000;

/// Stack of the thread that compiles a spec: the spec's limits keep Cedar's recursion far
/// below it (see `limits`), this keeps a wide margin on top.
const COMPILE_STACK_BYTES: usize = 16 * 1024 * 1024;

/// Compiles on a thread of its own; the work stops when the returned future is dropped (the
/// client went away, or the request timed out) or when it runs over its budget.
///
/// With `check_unused`, the blocks nothing uses are checked too, as a binding would check them
/// (a new spec; not a rollback to a version that was accepted before that check existed).
pub async fn compile_in_background(
    spec: PolicySpec,
    check_unused: bool,
) -> SyncResult<Result<CompiledPolicy, Vec<SpecError>>> {
    let cancel = Arc::new(AtomicBool::new(false));
    let _cancel_on_drop = CancelOnDrop(cancel.clone());
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("acp-compile".into())
        .stack_size(COMPILE_STACK_BYTES)
        .spawn(move || {
            let compiled = compile_with(&spec, &Budget::cancellable(cancel)).and_then(|c| {
                let unused = if check_unused {
                    super::compile::unused_block_errors(&spec)
                } else {
                    Vec::new()
                };
                if unused.is_empty() {
                    Ok(c)
                } else {
                    Err(unused)
                }
            });
            let _ = tx.send(compiled);
        })
        .map_err(SyncError::internal)?;
    rx.await
        .map_err(|_| SyncError::internal("the compilation thread ended without an answer"))
}

fn conflict(current: Option<&str>, why: &'static str) -> SyncError {
    SyncError::Conflict {
        why,
        current_policy_hash: current.map(str::to_owned),
    }
}

/// An `Idempotency-Key` as sent, checked: at most 200 printable characters. A sync that carries
/// one answers a retry of the same request (within 24 hours) with its first answer.
#[derive(Debug, Clone)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// `None` for an absent or blank key.
    pub fn parse(raw: Option<&str>) -> SyncResult<Option<Self>> {
        let Some(key) = raw.map(str::trim).filter(|k| !k.is_empty()) else {
            return Ok(None);
        };
        if key.len() > 200 || key.chars().any(char::is_control) {
            return Err(SyncError::invalid(
                "idempotency_key",
                "must be at most 200 printable characters",
            ));
        }
        Ok(Some(Self(key.to_owned())))
    }
}

/// The first answer to an earlier request under `key`, when `request_hash` (the fingerprint of
/// the request's JSON) is that request's; `idempotency_key_reused` for another request; `None`
/// when the key is new.
pub async fn replayed(
    ctx: &Context,
    workspace_id: &str,
    key: &IdempotencyKey,
    request_hash: &str,
) -> SyncResult<Option<api::SyncResponse>> {
    match ctx
        .store
        .idempotency(workspace_id, &key.0, now_ms() - IDEMPOTENCY_WINDOW_MS)
        .await?
    {
        Some(stored) => replay(&stored, request_hash).map(Some),
        None => Ok(None),
    }
}

/// The stored first answer to an `Idempotency-Key`, for a retry of the same request; 422
/// `idempotency_key_reused` for another request.
fn replay(stored: &IdempotencyRecord, request_hash: &str) -> SyncResult<api::SyncResponse> {
    if stored.request_hash != request_hash {
        return Err(SyncError::Refused(Refusal::unacceptable(
            "idempotency_key_reused",
            "this Idempotency-Key was used with a different request",
        )));
    }
    serde_json::from_str(&stored.response)
        .map_err(|e| SyncError::internal(format!("stored sync answer: {e}")))
}

struct Current {
    version: i64,
    hash: String,
    name: String,
    spec: PolicySpec,
    cedar: String,
    stored: bool,
}

async fn current(
    ctx: &Context,
    workspace_id: &str,
    policy_id: &str,
) -> SyncResult<Option<Current>> {
    match ctx.store.policy(workspace_id, policy_id).await? {
        Some(record) => {
            let version = ctx
                .store
                .policy_version(workspace_id, policy_id, record.current_version)
                .await?
                .ok_or_else(|| SyncError::internal("policy without its current version"))?;
            let spec = from_value(&version.spec)
                .map_err(|e| SyncError::internal(format!("stored spec: {}", spec_errors(&e))))?;
            Ok(Some(Current {
                version: record.current_version,
                hash: record.current_hash,
                name: record.name,
                spec,
                cedar: version.cedar,
                stored: true,
            }))
        }
        None if policy_id == DEFAULT_POLICY_ID => {
            let default = super::cache::default_policy()?;
            Ok(Some(Current {
                version: 0,
                hash: default.compiled.hash.clone(),
                name: default.name.clone(),
                spec: default.compiled.spec.clone(),
                cedar: default.compiled.cedar.clone(),
                stored: false,
            }))
        }
        None => Ok(None),
    }
}

/// Several spec errors as one line, each as its `Display` writes it.
fn spec_errors(errors: &[SpecError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Dry-runs or applies `req` in the workspace, as `actor`. With `retry` (the key and the
/// fingerprint of the request's JSON), the answer is stored with the apply, for retries.
pub async fn sync(
    ctx: &Context,
    workspace_id: &str,
    actor: &Actor,
    req: api::SyncRequest,
    retry: Option<(IdempotencyKey, String)>,
) -> SyncResult<api::SyncResponse> {
    sync_as(ctx, workspace_id, actor, req, retry, None).await
}

/// Applies (or dry-runs) the spec of an earlier version of `policy_id` as a new version, under
/// the rules of a sync (dry run, `expected_policy_hash`, idempotency); audited as
/// `policy.rolled_back`.
pub async fn rollback(
    ctx: &Context,
    workspace_id: &str,
    actor: &Actor,
    policy_id: &str,
    req: api::RollbackRequest,
    retry: Option<(IdempotencyKey, String)>,
) -> SyncResult<api::SyncResponse> {
    if req.version < 1 {
        return Err(SyncError::invalid("version", "must be 1 or more"));
    }
    let earlier = policy_detail(ctx, workspace_id, policy_id, Some(req.version)).await?;
    let sync_req = api::SyncRequest {
        policy_id: Some(policy_id.to_owned()),
        policy_name: None,
        dry_run: req.dry_run,
        expected_policy_hash: req.expected_policy_hash,
        spec: earlier.spec,
        impact_checks: None,
    };
    sync_as(ctx, workspace_id, actor, sync_req, retry, Some(req.version)).await
}

/// A sync; `rollback_to` names the earlier version whose spec `req` carries.
async fn sync_as(
    ctx: &Context,
    workspace_id: &str,
    actor: &Actor,
    req: api::SyncRequest,
    retry: Option<(IdempotencyKey, String)>,
    rollback_to: Option<i64>,
) -> SyncResult<api::SyncResponse> {
    let idempotency = retry.map(|(key, request_hash)| IdempotencyRecord {
        workspace_id: workspace_id.to_owned(),
        key: key.0,
        request_hash,
        status: 200,
        response: String::new(),
        created_at: now_ms(),
    });
    let policy_id = match req.policy_id.filter(|p| !p.is_empty()) {
        None => PolicyId::default_policy(),
        Some(id) => PolicyId::from_string(id).ok_or_else(|| {
            SyncError::invalid(
                "policy_id",
                "must be `pol_` followed by 1-64 of a-z, 0-9, _ and -",
            )
        })?,
    }
    .into_string();
    if req
        .policy_name
        .as_ref()
        .is_some_and(|n| n.chars().count() > 200)
    {
        return Err(SyncError::invalid(
            "policy_name",
            "must be at most 200 characters",
        ));
    }
    let impact_checks = match req.impact_checks {
        None => DEFAULT_REPLAY_CHECKS,
        Some(n) => usize::try_from(n)
            .ok()
            .filter(|n| *n <= MAX_REPLAY_CHECKS)
            .ok_or_else(|| {
                SyncError::invalid(
                    "impact_checks",
                    format_args!("must be 0 to {MAX_REPLAY_CHECKS}"),
                )
            })?,
    };
    let spec = from_value(&req.spec).map_err(SyncError::InvalidSpec)?;
    let compiled = compile_in_background(spec, rollback_to.is_none())
        .await?
        .map_err(SyncError::InvalidSpec)?;

    let current = current(ctx, workspace_id, &policy_id).await?;
    let current_hash = current.as_ref().map(|c| c.hash.clone());
    if let Some(expected) = req
        .expected_policy_hash
        .as_deref()
        .filter(|e| !e.is_empty())
    {
        if current_hash.as_deref() != Some(expected) {
            return Err(conflict(
                current_hash.as_deref(),
                "the policy's current hash is not `expected_policy_hash`",
            ));
        }
    }
    let name = req
        .policy_name
        .clone()
        .filter(|n| !n.trim().is_empty())
        .or_else(|| current.as_ref().map(|c| c.name.clone()))
        .unwrap_or_else(|| policy_id.trim_start_matches("pol_").to_owned());
    let d = diff(
        current.as_ref().map(|c| (&c.spec, c.cedar.as_str())),
        &compiled.spec,
        &compiled.cedar,
    );
    let changed = current.as_ref().is_none_or(|c| c.hash != compiled.hash);
    let (compiled, analysis) = if req.dry_run {
        let (compiled, analysis) =
            analyse(ctx, workspace_id, &policy_id, compiled, impact_checks).await?;
        (compiled, Some(analysis))
    } else {
        (compiled, None)
    };
    let (spec_diff, impact, semantic) = analysis.map_or((None, None, None), |a| {
        (Some(a.spec_diff), a.impact, Some(a.semantic))
    });
    let mut answer = api::SyncResponse {
        ok: true,
        dry_run: req.dry_run,
        policy_id: policy_id.clone(),
        policy_name: name.clone(),
        current_policy_hash: current_hash.clone(),
        desired_policy_hash: compiled.hash.clone(),
        diff: api::SyncDiff {
            changed,
            cedar_diff: d.cedar_diff,
            spec_diff,
            summary: serde_json::to_value(&d.summary).unwrap_or(Value::Null),
            impact: impact.map(|i| serde_json::to_value(i).unwrap_or(Value::Null)),
            semantic: semantic.map(|d| serde_json::to_value(d).unwrap_or(Value::Null)),
        },
        applied: None,
        policy_hash: None,
        version: None,
    };
    let mut ops = Vec::new();
    let mut audit_events = Vec::new();
    let mut installed: Option<Arc<LoadedPolicy>> = None;
    if !req.dry_run {
        let current_version = current.as_ref().map_or(0, |c| c.version);
        if !changed {
            answer.applied = Some(false);
            answer.policy_hash = current_hash.clone();
            answer.version = Some(current_version);
        } else {
            let version = current_version + 1;
            let spec_json = serde_json::to_value(&compiled.spec).unwrap_or(Value::Null);
            let apply = PolicyApply {
                name: name.clone(),
                expected_version: if current.as_ref().is_some_and(|c| c.stored) {
                    current_version
                } else {
                    0
                },
                version: PolicyVersion {
                    workspace_id: workspace_id.to_owned(),
                    policy_id: policy_id.clone(),
                    version,
                    hash: compiled.hash.clone(),
                    spec: spec_json,
                    cedar: compiled.cedar.clone(),
                    author: actor.label(),
                    created_at: now_ms(),
                },
                members: memberships(&compiled.spec),
                bindings: binding_rows(&compiled.spec),
            };
            ops.push(PolicyOp::Apply(Box::new(apply)).into());
            let (event_type, action) = match rollback_to {
                None => ("policy.applied", "sync"),
                Some(_) => ("policy.rolled_back", "rollback"),
            };
            let mut details = json!({ "version": version, "previous_hash": current_hash, "summary": answer.diff.summary });
            if let Some(to) = rollback_to {
                details["rolled_back_to"] = json!(to);
            }
            let mut event =
                audit::state_change(event_type, action, Some(workspace_id), None, actor, details);
            event.policy_id = Some(policy_id.clone());
            event.policy_hash = Some(compiled.hash.clone());
            audit_events.push(event);
            answer.applied = Some(true);
            answer.policy_hash = Some(compiled.hash.clone());
            answer.version = Some(version);
            installed = Some(Arc::new(LoadedPolicy::new(
                &policy_id,
                name.clone(),
                version,
                compiled,
            )));
        }
    }
    let body = serde_json::to_value(&answer).unwrap_or(Value::Null);
    let held = idempotency
        .as_ref()
        .map(|r| (r.key.clone(), r.request_hash.clone()));
    if let Some(mut record) = idempotency {
        record.response = body.to_string();
        ops.push(PolicyOp::StoreIdempotency(Box::new(record)).into());
    }
    if !ops.is_empty() {
        let mut change = Change::new(Op::Batch(ops));
        change.audit = audit_events;
        match ctx.writer.commit(change).await {
            Ok(_) => {}
            // Another request with the same key committed first: answer as its retry would.
            Err(StoreError::Conflict(why)) if why == crate::store::IDEMPOTENCY_KEY_TAKEN => {
                let (key, request_hash) = held.unwrap_or_default();
                let stored = ctx
                    .store
                    .idempotency(workspace_id, &key, now_ms() - IDEMPOTENCY_WINDOW_MS)
                    .await?
                    .ok_or_else(|| SyncError::internal("idempotency record vanished"))?;
                return replay(&stored, &request_hash);
            }
            Err(StoreError::Conflict(_)) => {
                let now = ctx
                    .store
                    .policy(workspace_id, &policy_id)
                    .await?
                    .map(|p| p.current_hash);
                return Err(conflict(
                    now.as_deref(),
                    "another apply for this policy won the race; dry-run again",
                ));
            }
            Err(e) => return Err(e.into()),
        }
    }
    if let Some(loaded) = installed {
        // Live here at once; other replicas hear of it and reload.
        ctx.caches.applied_policy(workspace_id, &policy_id, loaded);
        ctx.announce_change().await;
    }
    Ok(answer)
}

/// What a dry run finds beyond the text: the semantic diff of the specs, and the impact on
/// the recorded checks.
struct Analysis {
    /// The specs' own text, compared (see `diff::spec_diff`).
    spec_diff: String,
    semantic: SemanticDiff,
    impact: Option<Impact>,
}

/// The semantic diff of the current policy and `desired`, and the workspace's newest `limit`
/// recorded checks under `policy_id` replayed against both (none when `limit` is 0, or for a
/// policy that does not exist yet: no check was ever decided under it). Off the async threads
/// (up to a second or so of evaluation), which borrow `desired` and hand it back.
async fn analyse(
    ctx: &Context,
    workspace_id: &str,
    policy_id: &str,
    desired: CompiledPolicy,
    limit: usize,
) -> SyncResult<(CompiledPolicy, Analysis)> {
    let store = ctx.store.as_ref();
    let view = ctx.caches.view(store, workspace_id).await?;
    let current = ctx.caches.policy(store, &view, policy_id).await?;
    let events = match (&current, limit) {
        (Some(_), 1..) => Some(
            store
                .audit_events(&AuditQuery {
                    workspace_id: workspace_id.to_owned(),
                    event_type: Some("decision.check".into()),
                    policy_id: Some(policy_id.to_owned()),
                    limit: i64::try_from(limit).unwrap_or(i64::MAX),
                    ..AuditQuery::default()
                })
                .await?,
        ),
        _ => None,
    };
    tokio::task::spawn_blocking(move || {
        let before = current.as_ref().map(|c| &c.compiled);
        let spec_diff = super::diff::spec_diff(before.map(|c| &c.spec), &desired.spec);
        let semantic = semantic_diff(before, &desired);
        let impact = match (before, events) {
            (Some(before), Some(events)) => {
                Some(super::impact::replay(&events, limit, before, &desired)?)
            }
            _ => None,
        };
        Ok::<_, String>((
            desired,
            Analysis {
                spec_diff,
                semantic,
                impact,
            },
        ))
    })
    .await
    .map_err(|e| SyncError::internal(format!("the dry run's analysis stopped: {e}")))?
    .map_err(|e| SyncError::internal(format!("the replay could not evaluate: {e}")))
}

/// Reads a policy of the workspace (current or a given version).
pub async fn policy_detail(
    ctx: &Context,
    workspace_id: &str,
    policy_id: &str,
    version: Option<i64>,
) -> SyncResult<api::PolicyDetail> {
    let Some(policy_id) = PolicyId::parse(policy_id) else {
        return Err(unknown_policy().into());
    };
    let policy_id = policy_id.as_str();
    let record = ctx.store.policy(workspace_id, policy_id).await?;
    let Some(record) = record else {
        if policy_id == DEFAULT_POLICY_ID && version.is_none_or(|v| v == 0) {
            let d = super::cache::default_policy()?;
            return Ok(api::PolicyDetail {
                ok: true,
                policy_id: policy_id.to_owned(),
                name: d.name.clone(),
                version: 0,
                policy_hash: d.compiled.hash.clone(),
                spec: serde_json::to_value(&d.compiled.spec).unwrap_or(Value::Null),
                cedar: d.compiled.cedar.clone(),
                author: None,
                author_name: None,
                created_at: None,
            });
        }
        return Err(unknown_policy().into());
    };
    let v = ctx
        .store
        .policy_version(
            workspace_id,
            policy_id,
            version.unwrap_or(record.current_version),
        )
        .await?
        .ok_or_else(|| SyncError::not_found("unknown_version", "no such version of this policy"))?;
    Ok(api::PolicyDetail {
        ok: true,
        policy_id: policy_id.to_owned(),
        name: record.name,
        version: v.version,
        policy_hash: v.hash,
        spec: v.spec,
        cedar: v.cedar,
        author: Some(v.author),
        author_name: None,
        created_at: Some(crate::time::iso(v.created_at)),
    })
}

/// The explicit memberships an apply stores beside a version: `(group, agent_id)`.
pub fn memberships(spec: &PolicySpec) -> Vec<(String, String)> {
    spec.agent_groups
        .iter()
        .flat_map(|g| g.members.iter().map(move |m| (g.name.clone(), m.clone())))
        .collect()
}

/// The bindings an apply stores beside a version: `(binding, group, block, actions JSON)`, one
/// per block a binding names.
pub fn binding_rows(spec: &PolicySpec) -> Vec<(String, String, String, String)> {
    spec.bindings
        .iter()
        .flat_map(|b| {
            let actions = json!(b.actions).to_string();
            b.blocks.iter().map(move |block| {
                (
                    b.display_name(),
                    b.group.clone(),
                    block.clone(),
                    actions.clone(),
                )
            })
        })
        .collect()
}
