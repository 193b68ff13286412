//! Policy sync: a desired spec against the current policy — dry run (hashes and diff) or apply
//! (a new version, memberships and bindings materialised, audited, live on every replica).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use axum::http::StatusCode;
use serde_json::{json, Value};

use crate::api;
use crate::audit;
use crate::cache::{LoadedPolicy, DEFAULT_POLICY_ID};
use crate::context::Context;
use crate::error::{ApiError, ApiResult};
use crate::identity::accounts::Principal;
use crate::secret::sha256_hex;
use crate::store::{Change, IdempotencyRecord, Op, PolicyApply, PolicyVersion, StoreError};
use crate::time::now_ms;

use super::check::{is_policy_id, unknown_policy};
use super::compile::compile_with;
use super::diff::diff;
use super::limits::{Budget, CancelOnDrop};
use super::spec::{from_value, PolicySpec, SpecError};
use super::CompiledPolicy;

const IDEMPOTENCY_WINDOW_MS: i64 = 24 * 3_600_000;

fn invalid_spec(errors: Vec<SpecError>) -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_spec",
        format!("the spec has {} error(s)", errors.len()),
    )
    .with(
        "errors",
        serde_json::to_value(errors).unwrap_or(Value::Null),
    )
}

/// Stack of the thread that compiles a spec: the spec's limits keep Cedar's recursion far
/// below it (see `limits`), this keeps a wide margin on top.
const COMPILE_STACK_BYTES: usize = 16 * 1024 * 1024;

/// Compiles on a thread of its own; the work stops when the returned future is dropped (the
/// client went away, or the request timed out) or when it runs over its budget.
async fn compile_in_background(
    spec: PolicySpec,
) -> ApiResult<Result<CompiledPolicy, Vec<SpecError>>> {
    let cancel = Arc::new(AtomicBool::new(false));
    let _cancel_on_drop = CancelOnDrop(cancel.clone());
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("acp-compile".into())
        .stack_size(COMPILE_STACK_BYTES)
        .spawn(move || {
            let _ = tx.send(compile_with(&spec, &Budget::cancellable(cancel)));
        })
        .map_err(ApiError::internal)?;
    rx.await
        .map_err(|_| ApiError::internal("the compilation thread ended without an answer"))
}

fn conflict(current: Option<&str>, why: &str) -> ApiError {
    ApiError::conflict("sync_conflict", why.to_owned())
        .with("current_policy_hash", current.map(str::to_owned))
}

/// A sync answer: the status and body to send (and to store for an idempotent retry).
pub struct SyncAnswer {
    pub status: StatusCode,
    pub body: Value,
}

/// Handles a sync request, with `Idempotency-Key` replay when a key is given.
pub async fn sync(
    ctx: &Context,
    principal: &Principal,
    idempotency_key: Option<&str>,
    body: &Value,
    raw: &[u8],
) -> ApiResult<SyncAnswer> {
    let (workspace_id, _) = principal.admin_of()?;
    strict_body(raw)?;
    let Some(key) = idempotency_key.map(str::trim).filter(|k| !k.is_empty()) else {
        let (status, body) = run(ctx, principal, &workspace_id, body, None).await?;
        return Ok(SyncAnswer { status, body });
    };
    if key.len() > 200 || key.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            "idempotency_key",
            "must be at most 200 printable characters",
        ));
    }
    let request_hash = sha256_hex(body.to_string().as_bytes());
    if let Some(stored) = ctx
        .store
        .idempotency(&workspace_id, key, now_ms() - IDEMPOTENCY_WINDOW_MS)
        .await?
    {
        let (status, body) = replay(&stored, &request_hash)?;
        return Ok(SyncAnswer { status, body });
    }
    let record = IdempotencyRecord {
        workspace_id: workspace_id.clone(),
        key: key.to_owned(),
        request_hash,
        status: 200,
        response: String::new(),
        created_at: now_ms(),
    };
    let (status, body) = run(ctx, principal, &workspace_id, body, Some(record)).await?;
    Ok(SyncAnswer { status, body })
}

/// Reads the request body again, strictly: a key written twice in the spec is 422
/// `invalid_spec` naming both places (the spec path, and line and column in the body), elsewhere
/// in the body 400 `invalid_json`; so are specs nested deeper than the spec's limit.
fn strict_body(raw: &[u8]) -> ApiResult<()> {
    let text = std::str::from_utf8(raw)
        .map_err(|_| ApiError::bad_request("invalid_json", "the body is not UTF-8"))?;
    if text.trim().is_empty() {
        return Ok(());
    }
    match super::source::parse_json(text) {
        Ok(_) => Ok(()),
        Err(mut e) => {
            let in_spec =
                e.path == "spec" || e.path.starts_with("spec.") || e.path.starts_with("spec[");
            if in_spec {
                e.path = e
                    .path
                    .strip_prefix("spec")
                    .unwrap_or("")
                    .trim_start_matches('.')
                    .to_owned();
                Err(invalid_spec(vec![e]))
            } else {
                Err(ApiError::bad_request("invalid_json", e.message))
            }
        }
    }
}

/// The stored first answer to an `Idempotency-Key`, for a retry of the same request; 422
/// `idempotency_key_reused` for another request.
fn replay(stored: &IdempotencyRecord, request_hash: &str) -> ApiResult<(StatusCode, Value)> {
    if stored.request_hash != request_hash {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "idempotency_key_reused",
            "this Idempotency-Key was used with a different request",
        ));
    }
    Ok((
        StatusCode::from_u16(stored.status as u16).unwrap_or(StatusCode::OK),
        serde_json::from_str(&stored.response).unwrap_or(Value::Null),
    ))
}

struct Current {
    version: i64,
    hash: String,
    name: String,
    spec: PolicySpec,
    cedar: String,
    stored: bool,
}

async fn current(ctx: &Context, workspace_id: &str, policy_id: &str) -> ApiResult<Option<Current>> {
    match ctx.store.policy(workspace_id, policy_id).await? {
        Some(record) => {
            let version = ctx
                .store
                .policy_version(workspace_id, policy_id, record.current_version)
                .await?
                .ok_or_else(|| ApiError::internal("policy without its current version"))?;
            let spec = from_value(&version.spec)
                .map_err(|e| ApiError::internal(format!("stored spec: {e:?}")))?;
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
            let default = crate::cache::default_policy()?;
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

async fn run(
    ctx: &Context,
    principal: &Principal,
    workspace_id: &str,
    body: &Value,
    idempotency: Option<IdempotencyRecord>,
) -> ApiResult<(StatusCode, Value)> {
    let req: api::SyncRequest = crate::http::extract::parse_value(body.clone())?;
    let policy_id = req
        .policy_id
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| DEFAULT_POLICY_ID.to_owned());
    if !is_policy_id(&policy_id) {
        return Err(ApiError::invalid(
            "policy_id",
            "must be `pol_` followed by 1-64 of a-z, 0-9, _ and -",
        ));
    }
    if req
        .policy_name
        .as_ref()
        .is_some_and(|n| n.chars().count() > 200)
    {
        return Err(ApiError::invalid(
            "policy_name",
            "must be at most 200 characters",
        ));
    }
    let spec = from_value(&req.spec).map_err(invalid_spec)?;
    let compiled = compile_in_background(spec).await?.map_err(invalid_spec)?;

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
            summary: serde_json::to_value(&d.summary).unwrap_or(Value::Null),
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
                    author: principal.actor().label(),
                    created_at: now_ms(),
                },
                members: compiled
                    .spec
                    .agent_groups
                    .iter()
                    .flat_map(|g| g.members.iter().map(move |m| (g.name.clone(), m.clone())))
                    .collect(),
                bindings: compiled
                    .spec
                    .bindings
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
                    .collect(),
            };
            ops.push(Op::ApplyPolicy(Box::new(apply)));
            let mut event = audit::state_change(
                "policy.applied",
                "sync",
                Some(workspace_id),
                None,
                &principal.actor(),
                json!({ "version": version, "previous_hash": current_hash, "summary": answer.diff.summary }),
            );
            event.policy_id = Some(policy_id.clone());
            event.policy_hash = Some(compiled.hash.clone());
            audit_events.push(event);
            answer.applied = Some(true);
            answer.policy_hash = Some(compiled.hash.clone());
            answer.version = Some(version);
            installed = Some(Arc::new(LoadedPolicy {
                name: name.clone(),
                version,
                compiled,
            }));
        }
    }
    let body = serde_json::to_value(&answer).unwrap_or(Value::Null);
    let held = idempotency
        .as_ref()
        .map(|r| (r.key.clone(), r.request_hash.clone()));
    if let Some(mut record) = idempotency {
        record.response = body.to_string();
        ops.push(Op::StoreIdempotency(Box::new(record)));
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
                    .ok_or_else(|| ApiError::internal("idempotency record vanished"))?;
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
    Ok((StatusCode::OK, body))
}

/// Reads a policy of the workspace (current or a given version).
pub async fn policy_detail(
    ctx: &Context,
    workspace_id: &str,
    policy_id: &str,
    version: Option<i64>,
) -> ApiResult<api::PolicyDetail> {
    if !is_policy_id(policy_id) {
        return Err(unknown_policy());
    }
    let record = ctx.store.policy(workspace_id, policy_id).await?;
    let Some(record) = record else {
        if policy_id == DEFAULT_POLICY_ID && version.is_none_or(|v| v == 0) {
            let d = crate::cache::default_policy()?;
            return Ok(api::PolicyDetail {
                ok: true,
                policy_id: policy_id.to_owned(),
                name: d.name.clone(),
                version: 0,
                policy_hash: d.compiled.hash.clone(),
                spec: serde_json::to_value(&d.compiled.spec).unwrap_or(Value::Null),
                cedar: d.compiled.cedar.clone(),
                author: None,
                created_at: None,
            });
        }
        return Err(unknown_policy());
    };
    let v = ctx
        .store
        .policy_version(
            workspace_id,
            policy_id,
            version.unwrap_or(record.current_version),
        )
        .await?
        .ok_or_else(|| ApiError::not_found("unknown_version", "no such version of this policy"))?;
    Ok(api::PolicyDetail {
        ok: true,
        policy_id: policy_id.to_owned(),
        name: record.name,
        version: v.version,
        policy_hash: v.hash,
        spec: v.spec,
        cedar: v.cedar,
        author: Some(v.author),
        created_at: Some(crate::time::iso(v.created_at)),
    })
}
