//! The console's policies: the list, a policy's spec, compiled Cedar and versions, a diff
//! between two versions, a dry run of a pasted (or uploaded) spec with its apply, a rollback to
//! an earlier version, and the test bench.
//!
//! The pages call the use cases of the policies API: [`sync::sync`] (dry run, then apply with
//! `expected_policy_hash` and an `Idempotency-Key`), [`sync::rollback`], [`sync::policy_detail`],
//! [`diff`], and for the bench the compiled policy `/v1/check` uses (or a draft compiled as
//! sync compiles) evaluated by [`bench::run`], as `acp policy test` evaluates a case. Reading
//! needs `policies:read` (every role); dry runs, applies and rollbacks are for owners and admins,
//! checked by the server on every request, GET or POST.
//!
//! Why one file of this length: the section's pages (the list, a policy, the versions diff, the
//! dry run, apply, rollback, the test bench) share the diff's views and the spec's readers.

use askama::Template;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};

use crate::api;
use serde::Deserialize;

use crate::context::{Context, SharedContext};
use crate::domain::access::Need;
use crate::error::ApiError;
use crate::identity::accounts::Principal;
use crate::policy::cache::{default_policy, DEFAULT_POLICY_ID};
use crate::policy::diff::diff;
use crate::policy::error::SyncError;
use crate::policy::spec::{from_value, parse_located, Format, PolicySpec, SpecError};
use crate::policy::{bench, sync, Decision};
use crate::secret::{random_base62, sha256_hex};
use crate::time::iso;

use super::extract::{NotLoggedIn, PageQuery, PageResult, Person, Positive, Posted, Sent};
use super::{base, see_other, shell, Section, Shell};
use crate::http::extract::AppPath;
use crate::http::operator::person_requires;
use crate::http::pages::render;

/// The most spec text a form may carry (a spec's own limits apply after parsing).
const MAX_SPEC_TEXT: usize = 512 * 1024;
/// The most text of each JSON field of the bench.
const MAX_BENCH_FIELD: usize = 64 * 1024;

/// The person's workspace, when their role may dry-run, apply and roll back policies.
fn may_sync(principal: &Principal) -> Result<String, ApiError> {
    person_requires(principal, Need::PolicySync)?;
    let (workspace_id, _) = principal.admin_of()?;
    Ok(workspace_id)
}

fn readable(principal: &Principal) -> Result<String, ApiError> {
    person_requires(principal, Need::PoliciesRead)?;
    Ok(principal.membership()?.0)
}

fn policy_href(base: &str, policy_id: &str) -> String {
    format!("{base}/dashboard/policies/{policy_id}")
}

/// A spec as a person reads it: YAML of the stored JSON.
fn yaml_of(spec: &Value) -> String {
    serde_yaml_ng::to_string(spec).unwrap_or_else(|_| spec.to_string())
}

/// A policy page's query: an earlier `version` to show, `done` the change just made, and for
/// the test bench the audit `event` whose request it takes.
#[derive(Deserialize)]
pub struct PolicyQuery {
    version: Option<Positive>,
    done: Option<String>,
    event: Option<String>,
}

/// The versions diff's query: the two versions.
#[derive(Deserialize)]
pub struct DiffQuery {
    from: Option<Positive>,
    to: Option<Positive>,
}

// ---- the diff, as the pages show it -------------------------------------------------------------

struct ChangeRow {
    kind: &'static str,
    change: &'static str,
    names: String,
}

struct DiffLine {
    class: &'static str,
    text: String,
}

struct DiffView {
    changed: bool,
    rows: Vec<ChangeRow>,
    lines: Vec<DiffLine>,
}

/// The summary (blocks, groups, bindings, memberships added, removed or changed) and the Cedar
/// diff line by line.
fn diff_view(changed: bool, summary: &Value, cedar_diff: &str) -> DiffView {
    let mut rows = Vec::new();
    for kind in ["blocks", "groups", "bindings", "memberships"] {
        for change in ["added", "removed", "changed"] {
            let names: Vec<&str> = summary[kind][change]
                .as_array()
                .map(|items| items.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if !names.is_empty() {
                rows.push(ChangeRow {
                    kind,
                    change,
                    names: names.join(", "),
                });
            }
        }
    }
    let lines = cedar_diff
        .lines()
        .map(|line| DiffLine {
            class: match line.as_bytes().first() {
                Some(b'+') if !line.starts_with("+++") => "add",
                Some(b'-') if !line.starts_with("---") => "del",
                Some(b'@') => "hunk",
                _ => "",
            },
            text: line.to_owned(),
        })
        .collect();
    DiffView {
        changed,
        rows,
        lines,
    }
}

// ---- the list -----------------------------------------------------------------------------------

#[derive(Template)]
#[template(path = "policies.html", config = "src/http/templates/askama.toml")]
struct PoliciesPage {
    shell: Shell,
    policies: Vec<PolicyRow>,
}

struct PolicyRow {
    href: String,
    id: String,
    name: String,
    version: i64,
    hash: String,
    updated: String,
}

/// The workspace's policies (`pol_default` always among them): id, name, version, hash and
/// when it last changed.
#[utoipa::path(get, path = "/dashboard/policies", tag = "dashboard",
    responses((status = 200, description = "HTML list of policies"), NotLoggedIn,
        (status = 403, description = "HTML page: the role may not read policies")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn policies_page(
    State(ctx): State<SharedContext>,
    Person(principal): Person,
) -> PageResult {
    Ok(policies_list(&ctx, &principal).await?)
}

async fn policies_list(ctx: &Context, principal: &Principal) -> Result<Response, ApiError> {
    let workspace_id = readable(principal)?;
    let shell = shell(ctx, principal, Section::Policies).await?;
    let base = shell.base.clone();
    let mut policies: Vec<PolicyRow> = ctx
        .store
        .policies(&workspace_id)
        .await?
        .into_iter()
        .map(|p| PolicyRow {
            href: policy_href(&base, &p.id),
            id: p.id,
            name: p.name,
            version: p.current_version,
            hash: p.current_hash,
            updated: iso(p.updated_at),
        })
        .collect();
    if !policies.iter().any(|p| p.id == DEFAULT_POLICY_ID) {
        let d = default_policy()?;
        policies.insert(
            0,
            PolicyRow {
                href: policy_href(&base, DEFAULT_POLICY_ID),
                id: DEFAULT_POLICY_ID.into(),
                name: d.name.clone(),
                version: 0,
                hash: d.compiled.hash.clone(),
                updated: "built in, never synced".into(),
            },
        );
    }
    Ok(render(&PoliciesPage { shell, policies }))
}

// ---- a policy -----------------------------------------------------------------------------------

#[derive(Template)]
#[template(path = "policy.html", config = "src/http/templates/askama.toml")]
struct PolicyPage {
    shell: Shell,
    policy: api::PolicyDetail,
    href: String,
    spec_yaml: String,
    spec_json: String,
    versions: Vec<VersionRow>,
    /// The two versions the diff form proposes (the previous and the current, or the version
    /// shown and the current).
    diff_from: i64,
    done: Option<String>,
    /// When the page shows an earlier version than the current one.
    earlier: Option<EarlierVersion>,
}

/// An earlier version shown on the policy's page: the current version's number, and the diff
/// from the one shown to it.
struct EarlierVersion {
    current: i64,
    diff_href: String,
}

struct VersionRow {
    version: i64,
    hash: String,
    author: String,
    created: String,
    current: bool,
    rollback_href: String,
}

/// The version list of a policy (the built-in default has none until a sync).
async fn version_rows(
    ctx: &Context,
    workspace_id: &str,
    policy: &api::PolicyDetail,
    href: &str,
) -> Result<Vec<VersionRow>, ApiError> {
    let versions = ctx
        .store
        .policy_versions(workspace_id, &policy.policy_id)
        .await?;
    let names = crate::audit::names::ActorNames::lookup(
        ctx.store.as_ref(),
        workspace_id,
        versions.iter().map(|v| v.author.as_str()),
    )
    .await?;
    Ok(versions
        .into_iter()
        .map(|v| VersionRow {
            current: v.version == policy.version,
            rollback_href: format!("{href}/rollback/{}", v.version),
            version: v.version,
            hash: v.hash,
            author: names.shown(&v.author),
            created: iso(v.created_at),
        })
        .collect())
}

/// A policy: its current spec (YAML and JSON), compiled Cedar, hash and versions, with the
/// diff form and (for owners and admins) dry run and rollback; with `version`, that version's
/// spec and Cedar instead (the audit trail links a decision to the version that made it).
#[utoipa::path(get, path = "/dashboard/policies/{policy_id}", tag = "dashboard",
    params(("policy_id" = String, Path), ("done" = Option<String>, Query, description = "`applied`, `unchanged` or `rolled_back`, for its notice"),
        ("version" = Option<i64>, Query, description = "an earlier version to show (default: the current one)")),
    responses((status = 200, description = "HTML page of the policy"), NotLoggedIn,
        (status = 400, description = "HTML page: `invalid_version`"),
        (status = 403, description = "HTML page: the role may not read policies"), (status = 404, description = "HTML page: `unknown_policy`, `unknown_version`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn policy_page(
    State(ctx): State<SharedContext>,
    Path(policy_id): Path<String>,
    PageQuery(query): PageQuery<PolicyQuery>,
    Person(principal): Person,
) -> PageResult {
    let done = query.done.as_deref().and_then(done_notice);
    let version = query.version.map(|v| v.0);
    Ok(policy_detail(&ctx, &principal, &policy_id, done, version).await?)
}

fn done_notice(done: &str) -> Option<String> {
    match done {
        "applied" => Some("Applied: the policy is live at the version below.".into()),
        "unchanged" => Some("Nothing to apply: the spec is the current policy.".into()),
        "rolled_back" => Some("Rolled back: the earlier spec is live as a new version.".into()),
        _ => None,
    }
}

async fn policy_detail(
    ctx: &Context,
    principal: &Principal,
    policy_id: &str,
    done: Option<String>,
    version: Option<i64>,
) -> Result<Response, ApiError> {
    let workspace_id = readable(principal)?;
    let current = sync::policy_detail(ctx, &workspace_id, policy_id, None).await?;
    let shown = match version.filter(|v| *v != current.version) {
        Some(v) => Some(sync::policy_detail(ctx, &workspace_id, policy_id, Some(v)).await?),
        None => None,
    };
    let shell = shell(ctx, principal, Section::Policies).await?;
    let href = policy_href(&shell.base, &current.policy_id);
    let versions = version_rows(ctx, &workspace_id, &current, &href).await?;
    let earlier = shown.as_ref().map(|p| EarlierVersion {
        current: current.version,
        diff_href: format!("{href}/diff?from={}&to={}", p.version, current.version),
    });
    let mut policy = shown.unwrap_or(current);
    // The shown version's author, as the version list names it.
    policy.author_name = versions
        .iter()
        .find(|v| v.version == policy.version)
        .map(|v| v.author.clone());
    Ok(render(&PolicyPage {
        spec_yaml: yaml_of(&policy.spec),
        spec_json: serde_json::to_string_pretty(&policy.spec).unwrap_or_default(),
        diff_from: match &earlier {
            Some(_) => policy.version,
            None => (policy.version - 1).max(1),
        },
        earlier,
        versions,
        policy,
        href,
        done,
        shell,
    }))
}

// ---- the diff between two versions --------------------------------------------------------------

#[derive(Template)]
#[template(path = "policy_diff.html", config = "src/http/templates/askama.toml")]
struct DiffPage {
    shell: Shell,
    policy_id: String,
    href: String,
    from: api::PolicyDetail,
    to: api::PolicyDetail,
    diff: DiffView,
}

/// What changed from one version of a policy to another (`from` and `to`, any order): the
/// summary of blocks, groups, bindings and memberships, and the diff of the compiled Cedar.
#[utoipa::path(get, path = "/dashboard/policies/{policy_id}/diff", tag = "dashboard",
    params(("policy_id" = String, Path), ("from" = i64, Query), ("to" = i64, Query)),
    responses((status = 200, description = "HTML diff"), NotLoggedIn,
        (status = 400, description = "HTML page: `invalid_from`, `invalid_to`"),
        (status = 403, description = "HTML page: the role may not read policies"),
        (status = 404, description = "HTML page: `unknown_policy`, `unknown_version`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn diff_page(
    State(ctx): State<SharedContext>,
    Path(policy_id): Path<String>,
    PageQuery(query): PageQuery<DiffQuery>,
    Person(principal): Person,
) -> PageResult {
    let principal = &principal;
    Ok(versions_diff(&ctx, principal, &policy_id, query).await?)
}

fn version_param(version: Option<Positive>, name: &'static str) -> Result<i64, ApiError> {
    version
        .map(|v| v.0)
        .ok_or_else(|| ApiError::invalid(name, "must be a version number"))
}

async fn versions_diff(
    ctx: &Context,
    principal: &Principal,
    policy_id: &str,
    query: DiffQuery,
) -> Result<Response, ApiError> {
    let workspace_id = readable(principal)?;
    let (from_v, to_v) = (
        version_param(query.from, "from")?,
        version_param(query.to, "to")?,
    );
    let from = sync::policy_detail(ctx, &workspace_id, policy_id, Some(from_v)).await?;
    let to = sync::policy_detail(ctx, &workspace_id, policy_id, Some(to_v)).await?;
    let spec_of = |d: &api::PolicyDetail| -> Result<PolicySpec, ApiError> {
        from_value(&d.spec).map_err(|e| {
            ApiError::internal(format!(
                "stored spec of version {}: {}",
                d.version,
                SpecError::list(&e)
            ))
        })
    };
    let (from_spec, to_spec) = (spec_of(&from)?, spec_of(&to)?);
    let d = diff(Some((&from_spec, &from.cedar)), &to_spec, &to.cedar);
    let summary = serde_json::to_value(&d.summary).unwrap_or(Value::Null);
    let shell = shell(ctx, principal, Section::Policies).await?;
    Ok(render(&DiffPage {
        href: policy_href(&shell.base, policy_id),
        policy_id: policy_id.to_owned(),
        diff: diff_view(d.changed, &summary, &d.cedar_diff),
        from,
        to,
        shell,
    }))
}

// ---- dry run and apply --------------------------------------------------------------------------

#[derive(Template)]
#[template(path = "policy_sync.html", config = "src/http/templates/askama.toml")]
struct SyncPage {
    shell: Shell,
    policy_id: String,
    href: String,
    /// The spec text as written.
    spec: String,
    errors: Vec<String>,
    /// The policy changed since the dry run: its hash now.
    conflict: Option<String>,
    result: Option<DryRun>,
}

struct DryRun {
    current_hash: String,
    desired_hash: String,
    diff: DiffView,
    /// The recorded checks replayed against both policies (`diff.impact`).
    impact: Option<ImpactView>,
    /// The cells that become more or less permissive (`diff.semantic`).
    semantic: Option<SemanticView>,
    /// The key the apply form carries, so a second click replays the first answer.
    idempotency_key: String,
}

/// `diff.impact` as the page shows it (read back from the answer's JSON).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct ImpactView {
    read: u64,
    replayed: u64,
    skipped: u64,
    changed: u64,
    more_permissive: u64,
    less_permissive: u64,
    kinds: Vec<ImpactKindView>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct ImpactKindView {
    kind: String,
    from: String,
    to: String,
    count: u64,
    examples: Vec<ImpactExampleView>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct ImpactExampleView {
    event_id: String,
    action: Option<String>,
    agent_id: Option<String>,
    at: String,
}

/// `diff.semantic` as the page shows it.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct SemanticView {
    more_permissive: Vec<CellView>,
    less_permissive: Vec<CellView>,
    more_permissive_total: u64,
    less_permissive_total: u64,
    complete: bool,
    not_analysed: Vec<String>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct CellView {
    group: String,
    action: String,
    condition: String,
    before: String,
    after: String,
}

/// A part of a dry run's answer read for the page (`None` when absent or not understood).
fn view_of<T: serde::de::DeserializeOwned>(part: Option<&serde_json::Value>) -> Option<T> {
    part.and_then(|v| T::deserialize(v).ok())
}

/// The dry-run form: a spec (YAML or JSON) to paste or load from a file, prefilled with the
/// current one. Owners and admins only.
#[utoipa::path(get, path = "/dashboard/policies/{policy_id}/dry-run", tag = "dashboard",
    params(("policy_id" = String, Path)),
    responses((status = 200, description = "HTML form"), NotLoggedIn,
        (status = 403, description = "HTML page: the role may not sync policies"), (status = 404, description = "HTML page: `unknown_policy`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn dry_run_form(
    State(ctx): State<SharedContext>,
    Path(policy_id): Path<String>,
    Person(principal): Person,
) -> PageResult {
    Ok(sync_form(&ctx, &principal, &policy_id).await?)
}

async fn sync_form(
    ctx: &Context,
    principal: &Principal,
    policy_id: &str,
) -> Result<Response, ApiError> {
    let workspace_id = may_sync(principal)?;
    let policy = sync::policy_detail(ctx, &workspace_id, policy_id, None).await?;
    let shell = shell(ctx, principal, Section::Policies).await?;
    Ok(render(&SyncPage {
        href: policy_href(&shell.base, policy_id),
        policy_id: policy.policy_id,
        spec: yaml_of(&policy.spec),
        errors: Vec::new(),
        conflict: None,
        result: None,
        shell,
    }))
}

/// Reads spec text (JSON when it starts with `{`, else YAML) strictly, as `acp sync` reads a
/// file: every error with its line and column.
fn spec_value(text: &str) -> Result<Value, Vec<String>> {
    if text.len() > MAX_SPEC_TEXT {
        return Err(vec![format!(
            "the spec is over {} KiB",
            MAX_SPEC_TEXT / 1024
        )]);
    }
    if text.trim().is_empty() {
        return Err(vec!["the spec is empty".into()]);
    }
    let format = if text.trim_start().starts_with('{') {
        Format::Json
    } else {
        Format::Yaml
    };
    parse_located(text, format)
        .map(|(_, located)| located.to_value())
        .map_err(|errors| errors.iter().map(spec_error_text).collect())
}

fn spec_error_text(e: &SpecError) -> String {
    match (e.line, e.column) {
        (Some(line), Some(column)) => format!("line {line}, column {column}: {e}"),
        _ => e.to_string(),
    }
}

/// The page again with `spec` as written and what went wrong, with the status it deserves.
fn sync_page_with(
    shell: Shell,
    policy_id: &str,
    spec: &str,
    errors: Vec<String>,
    conflict: Option<String>,
    status: StatusCode,
) -> Response {
    let mut response = render(&SyncPage {
        href: policy_href(&shell.base, policy_id),
        policy_id: policy_id.to_owned(),
        spec: spec.to_owned(),
        errors,
        conflict,
        result: None,
        shell,
    });
    if response.status().is_success() {
        *response.status_mut() = status;
    }
    response
}

/// Dry-runs the posted spec (a form: `csrf`, `spec`) against the policy: the diff, the current
/// and the new hash, and the form that applies exactly this spec if the policy is still at the
/// current hash. Owners and admins only.
#[utoipa::path(post, path = "/dashboard/policies/{policy_id}/dry-run", tag = "dashboard",
    params(("policy_id" = String, Path)),
    request_body(content = String, content_type = "application/x-www-form-urlencoded", description = "`csrf` (the session's token) and `spec` (YAML or JSON)"),
    responses((status = 200, description = "HTML page: the diff and hashes, and the apply form"), NotLoggedIn,
        (status = 403, description = "HTML page: `csrf_failed`, or the role may not sync policies"),
        (status = 404, description = "HTML page: `unknown_policy`"), (status = 422, description = "HTML page: the spec's errors")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn dry_run(
    State(ctx): State<SharedContext>,
    Path(policy_id): Path<String>,
    posted: Posted<SpecForm>,
) -> PageResult {
    let spec = posted.form.spec.as_deref().unwrap_or("");
    Ok(run_dry_run(&ctx, &posted.person, &policy_id, spec).await?)
}

/// The dry run's form: the spec, YAML or JSON.
#[derive(Deserialize)]
pub struct SpecForm {
    spec: Option<String>,
}

async fn run_dry_run(
    ctx: &Context,
    principal: &Principal,
    policy_id: &str,
    text: &str,
) -> Result<Response, ApiError> {
    let workspace_id = may_sync(principal)?;
    sync::policy_detail(ctx, &workspace_id, policy_id, None).await?;
    let shell = shell(ctx, principal, Section::Policies).await?;
    let value = match spec_value(text) {
        Ok(value) => value,
        Err(errors) => {
            let status = StatusCode::UNPROCESSABLE_ENTITY;
            return Ok(sync_page_with(shell, policy_id, text, errors, None, status));
        }
    };
    let req = api::SyncRequest {
        policy_id: Some(policy_id.to_owned()),
        policy_name: None,
        dry_run: true,
        expected_policy_hash: None,
        spec: value,
        impact_checks: None,
    };
    let answer = match sync::sync(ctx, &workspace_id, &principal.actor(), req, None).await {
        Ok(answer) => answer,
        Err(SyncError::InvalidSpec(errors)) => {
            let errors = errors.iter().map(spec_error_text).collect();
            let status = StatusCode::UNPROCESSABLE_ENTITY;
            return Ok(sync_page_with(shell, policy_id, text, errors, None, status));
        }
        Err(e) => return Err(e.into()),
    };
    Ok(render(&SyncPage {
        href: policy_href(&shell.base, policy_id),
        policy_id: policy_id.to_owned(),
        spec: text.to_owned(),
        errors: Vec::new(),
        conflict: None,
        result: Some(DryRun {
            current_hash: answer.current_policy_hash.unwrap_or_default(),
            desired_hash: answer.desired_policy_hash,
            diff: diff_view(
                answer.diff.changed,
                &answer.diff.summary,
                &answer.diff.cedar_diff,
            ),
            impact: view_of(answer.diff.impact.as_ref()),
            semantic: view_of(answer.diff.semantic.as_ref()),
            idempotency_key: format!("console-{}", random_base62(24)),
        }),
        shell,
    }))
}

/// Applies the spec a dry run showed (a form: `csrf`, `spec`, `expected_policy_hash`,
/// `idempotency_key`), under the rules of sync: a policy that changed since the dry run is a
/// conflict shown on the page, not overwritten; the same form posted twice is applied once.
#[utoipa::path(post, path = "/dashboard/policies/{policy_id}/apply", tag = "dashboard",
    params(("policy_id" = String, Path)),
    request_body(content = String, content_type = "application/x-www-form-urlencoded",
        description = "`csrf`, `spec` (YAML or JSON), `expected_policy_hash` (from the dry run) and `idempotency_key`"),
    responses((status = 303, description = "applied (or unchanged): to the policy's page (or not logged in: to /login)"),
        (status = 400, description = "HTML page: `invalid_idempotency_key`"),
        (status = 403, description = "HTML page: `csrf_failed`, or the role may not sync policies"),
        (status = 404, description = "HTML page: `unknown_policy`"),
        (status = 409, description = "HTML page: the policy changed since the dry run, with its hash now"),
        (status = 422, description = "HTML page: the spec's errors, or `idempotency_key_reused`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn apply(
    State(ctx): State<SharedContext>,
    Path(policy_id): Path<String>,
    posted: Posted<ApplyForm>,
) -> PageResult {
    let principal = &posted.person;
    Ok(run_apply(&ctx, principal, &policy_id, &posted.form).await?)
}

/// The apply form: the spec the dry run showed, the policy's hash then, and the key that
/// makes a second post of the same form a retry.
#[derive(Deserialize)]
pub struct ApplyForm {
    #[serde(default)]
    spec: String,
    expected_policy_hash: Option<String>,
    #[serde(default)]
    idempotency_key: Sent,
}

async fn run_apply(
    ctx: &Context,
    principal: &Principal,
    policy_id: &str,
    form: &ApplyForm,
) -> Result<Response, ApiError> {
    let workspace_id = may_sync(principal)?;
    sync::policy_detail(ctx, &workspace_id, policy_id, None).await?;
    let text = form.spec.as_str();
    let expected = form
        .expected_policy_hash
        .as_deref()
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .ok_or_else(|| {
            ApiError::invalid(
                "expected_policy_hash",
                "is required: dry-run the spec first",
            )
        })?;
    let key = sync::IdempotencyKey::parse(form.idempotency_key.as_deref())?;
    let value = match spec_value(text) {
        Ok(value) => value,
        Err(errors) => {
            let shell = shell(ctx, principal, Section::Policies).await?;
            let status = StatusCode::UNPROCESSABLE_ENTITY;
            return Ok(sync_page_with(shell, policy_id, text, errors, None, status));
        }
    };
    // The fingerprint of this apply: the same form posted again is a retry.
    let request_hash = sha256_hex(
        json!({"console_apply": policy_id, "spec": value, "expected_policy_hash": expected})
            .to_string()
            .as_bytes(),
    );
    let replay = match &key {
        Some(key) => sync::replayed(ctx, &workspace_id, key, &request_hash).await?,
        None => None,
    };
    let answer = match replay {
        Some(first) => Ok(first),
        None => {
            let req = api::SyncRequest {
                policy_id: Some(policy_id.to_owned()),
                policy_name: None,
                dry_run: false,
                expected_policy_hash: Some(expected.to_owned()),
                spec: value,
                impact_checks: None,
            };
            let retry = key.map(|key| (key, request_hash));
            sync::sync(ctx, &workspace_id, &principal.actor(), req, retry).await
        }
    };
    match answer {
        Ok(answer) => {
            let done = if answer.applied == Some(true) {
                "applied"
            } else {
                "unchanged"
            };
            Ok(see_other(format!(
                "{}?done={done}",
                policy_href(&base(ctx), policy_id)
            )))
        }
        Err(SyncError::Conflict {
            current_policy_hash,
            ..
        }) => {
            let shell = shell(ctx, principal, Section::Policies).await?;
            Ok(sync_page_with(
                shell,
                policy_id,
                text,
                Vec::new(),
                Some(current_policy_hash.unwrap_or_default()),
                StatusCode::CONFLICT,
            ))
        }
        Err(SyncError::InvalidSpec(errors)) => {
            let shell = shell(ctx, principal, Section::Policies).await?;
            let errors = errors.iter().map(spec_error_text).collect();
            let status = StatusCode::UNPROCESSABLE_ENTITY;
            Ok(sync_page_with(shell, policy_id, text, errors, None, status))
        }
        Err(e) => Err(e.into()),
    }
}

// ---- rollback -----------------------------------------------------------------------------------

#[derive(Template)]
#[template(
    path = "policy_rollback.html",
    config = "src/http/templates/askama.toml"
)]
struct RollbackPage {
    shell: Shell,
    policy_id: String,
    href: String,
    action_href: String,
    version: i64,
    current_hash: String,
    desired_hash: String,
    diff: DiffView,
    idempotency_key: String,
}

/// The confirmation of a rollback: what applying the version's spec again would change (a dry
/// run of the rollback), and the form that does it. Owners and admins only.
#[utoipa::path(get, path = "/dashboard/policies/{policy_id}/rollback/{version}", tag = "dashboard",
    params(("policy_id" = String, Path), ("version" = i64, Path)),
    responses((status = 200, description = "HTML confirmation with the diff"), NotLoggedIn,
        (status = 403, description = "HTML page: the role may not sync policies"),
        (status = 404, description = "HTML page: `unknown_policy`, `unknown_version`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn confirm_rollback(
    State(ctx): State<SharedContext>,
    AppPath((policy_id, version)): AppPath<(String, i64)>,
    Person(principal): Person,
) -> PageResult {
    Ok(rollback_confirmation(&ctx, &principal, &policy_id, version).await?)
}

async fn rollback_confirmation(
    ctx: &Context,
    principal: &Principal,
    policy_id: &str,
    version: i64,
) -> Result<Response, ApiError> {
    let workspace_id = may_sync(principal)?;
    let req = api::RollbackRequest {
        version,
        dry_run: true,
        expected_policy_hash: None,
    };
    let answer =
        sync::rollback(ctx, &workspace_id, &principal.actor(), policy_id, req, None).await?;
    let shell = shell(ctx, principal, Section::Policies).await?;
    let href = policy_href(&shell.base, policy_id);
    Ok(render(&RollbackPage {
        action_href: format!("{href}/rollback/{version}"),
        href,
        policy_id: policy_id.to_owned(),
        version,
        current_hash: answer.current_policy_hash.unwrap_or_default(),
        desired_hash: answer.desired_policy_hash,
        diff: diff_view(
            answer.diff.changed,
            &answer.diff.summary,
            &answer.diff.cedar_diff,
        ),
        idempotency_key: format!("console-{}", random_base62(24)),
        shell,
    }))
}

/// Rolls back to a version (a form: `csrf`, `expected_policy_hash`, `idempotency_key`): its spec
/// applied again as a new version, audited as `policy.rolled_back`, under the rules of sync.
#[utoipa::path(post, path = "/dashboard/policies/{policy_id}/rollback/{version}", tag = "dashboard",
    params(("policy_id" = String, Path), ("version" = i64, Path)),
    request_body(content = String, content_type = "application/x-www-form-urlencoded",
        description = "`csrf`, `expected_policy_hash` (from the confirmation) and `idempotency_key`"),
    responses((status = 303, description = "rolled back: to the policy's page (or not logged in: to /login)"),
        (status = 403, description = "HTML page: `csrf_failed`, or the role may not sync policies"),
        (status = 404, description = "HTML page: `unknown_policy`, `unknown_version`"),
        (status = 409, description = "HTML page: `sync_conflict`, the policy changed since the confirmation"),
        (status = 422, description = "HTML page: `idempotency_key_reused`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn rollback(
    State(ctx): State<SharedContext>,
    AppPath((policy_id, version)): AppPath<(String, i64)>,
    posted: Posted<ApplyForm>,
) -> PageResult {
    Ok(run_rollback(&ctx, &posted.person, &policy_id, version, &posted.form).await?)
}

async fn run_rollback(
    ctx: &Context,
    principal: &Principal,
    policy_id: &str,
    version: i64,
    form: &ApplyForm,
) -> Result<Response, ApiError> {
    let workspace_id = may_sync(principal)?;
    let expected = form
        .expected_policy_hash
        .as_deref()
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .ok_or_else(|| ApiError::invalid("expected_policy_hash", "is required"))?;
    let key = sync::IdempotencyKey::parse(form.idempotency_key.as_deref())?;
    let request_hash = sha256_hex(
        json!({"console_rollback": policy_id, "version": version, "expected_policy_hash": expected})
            .to_string()
            .as_bytes(),
    );
    let replay = match &key {
        Some(key) => sync::replayed(ctx, &workspace_id, key, &request_hash).await?,
        None => None,
    };
    if replay.is_none() {
        let req = api::RollbackRequest {
            version,
            dry_run: false,
            expected_policy_hash: Some(expected.to_owned()),
        };
        let retry = key.map(|key| (key, request_hash));
        sync::rollback(
            ctx,
            &workspace_id,
            &principal.actor(),
            policy_id,
            req,
            retry,
        )
        .await?;
    }
    Ok(see_other(format!(
        "{}?done=rolled_back",
        policy_href(&base(ctx), policy_id)
    )))
}

// ---- the test bench -----------------------------------------------------------------------------

#[derive(Template)]
#[template(path = "policy_bench.html", config = "src/http/templates/askama.toml")]
struct BenchPage {
    shell: Shell,
    policy_id: String,
    href: String,
    form: BenchForm,
    status_options: Vec<(&'static str, bool)>,
    risk_options: Vec<(&'static str, bool)>,
    errors: Vec<String>,
    decision: Option<BenchDecision>,
    /// What the form was filled in from (an audit event, an earlier version), and what of the
    /// recorded request it could not take.
    notes: Vec<String>,
}

/// The bench's fields as written; as posted, a field not sent is empty.
#[derive(Deserialize)]
pub struct BenchForm {
    #[serde(default)]
    agent_id: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    risk_tier: String,
    #[serde(default)]
    metadata: String,
    #[serde(default)]
    labels: String,
    #[serde(default)]
    action: String,
    #[serde(default)]
    context: String,
    #[serde(default)]
    email: String,
    /// `current` or `draft`.
    #[serde(default)]
    against: String,
    #[serde(default)]
    draft: String,
}

impl Default for BenchForm {
    fn default() -> Self {
        Self {
            agent_id: "agt_bench".into(),
            status: "active".into(),
            risk_tier: "low".into(),
            metadata: "{}".into(),
            labels: "{}".into(),
            action: String::new(),
            context: "{}".into(),
            email: String::new(),
            against: "current".into(),
            draft: String::new(),
        }
    }
}

impl BenchForm {
    /// The form as posted, `against` read as `draft` or else `current`.
    fn posted(mut self) -> Self {
        if self.against != "draft" {
            self.against = "current".into();
        }
        self
    }

    /// The request, or every field that does not read.
    fn request(&self) -> Result<bench::BenchRequest, Vec<String>> {
        let mut errors = Vec::new();
        let mut json_field = |name: &str, text: &str| -> Value {
            let text = text.trim();
            if text.is_empty() {
                return Value::Null;
            }
            if text.len() > MAX_BENCH_FIELD {
                errors.push(format!("`{name}` is over {} KiB", MAX_BENCH_FIELD / 1024));
                return Value::Null;
            }
            serde_json::from_str(text).unwrap_or_else(|e| {
                errors.push(format!("`{name}` is not JSON: {e}"));
                Value::Null
            })
        };
        let metadata = json_field("agent.metadata", &self.metadata);
        let labels = json_field("agent.labels", &self.labels);
        let context = json_field("context", &self.context);
        let email = json_field("email", &self.email);
        if self.agent_id.chars().count() > 200 || self.action.chars().count() > 200 {
            errors.push("`agent.id` and `action` are at most 200 characters".into());
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let agent_id = match self.agent_id.trim() {
            "" => "agt_bench".to_owned(),
            id => id.to_owned(),
        };
        Ok(bench::BenchRequest {
            agent_id,
            status: self.status.trim().to_owned(),
            risk_tier: self.risk_tier.trim().to_owned(),
            metadata,
            labels,
            action: self.action.trim().to_owned(),
            context,
            email: Some(email).filter(|e| !e.is_null()),
        })
    }
}

struct BenchDecision {
    against: String,
    policy_hash: String,
    outcome: &'static str,
    reason_codes: Vec<String>,
    reasons: Vec<String>,
    determining: Vec<String>,
}

fn bench_page(
    shell: Shell,
    policy_id: &str,
    form: BenchForm,
    errors: Vec<String>,
    decision: Option<BenchDecision>,
) -> BenchPage {
    let options =
        |values: &[&'static str], chosen: &str| values.iter().map(|v| (*v, *v == chosen)).collect();
    BenchPage {
        href: policy_href(&shell.base, policy_id),
        policy_id: policy_id.to_owned(),
        status_options: options(&bench::STATUSES, &form.status),
        risk_options: options(&bench::RISK_TIERS, &form.risk_tier),
        form,
        errors,
        decision,
        notes: Vec::new(),
        shell,
    }
}

/// The bench's fields filled in from a recorded decision (`decision.check`): the agent and the
/// action, and from what its evaluation read (`details.input`) the agent's status, risk tier,
/// metadata and labels, the context and the email facts. Answers notes on what the event did
/// not keep (an input over the recorded size, or none at all) or the bench does not take (the
/// agent's email counts).
fn prefill_from_event(form: &mut BenchForm, event: &api::AuditEvent) -> Vec<String> {
    let pretty = |value: &Value| serde_json::to_string_pretty(value).unwrap_or_default();
    let mut notes = vec![format!(
        "Filled in from the decision {} ({}): it answered {}{}.",
        event.event_id,
        event.created_at,
        event.decision.as_deref().unwrap_or("nothing"),
        if event.reason_codes.is_empty() {
            String::new()
        } else {
            format!(" ({})", event.reason_codes.join(", "))
        }
    )];
    form.agent_id = event.agent_id.clone().unwrap_or_default();
    form.action = event.action.clone().unwrap_or_default();
    let input = &event.details["input"];
    if !input.is_object() {
        notes.push(
            "The event kept no request (it was recorded before decisions kept theirs): only the agent and the action are filled in."
                .into(),
        );
        return notes;
    }
    if let Some(bytes) = input["bytes"]
        .as_u64()
        .filter(|_| input["omitted"].is_string())
    {
        notes.push(format!(
            "The event did not keep its request ({bytes} bytes, over what a decision records): only the agent and the action are filled in."
        ));
        return notes;
    }
    let agent = &input["agent"];
    if let Some(status) = agent["status"].as_str() {
        form.status = status.to_owned();
    }
    if let Some(tier) = agent["risk_tier"].as_str() {
        form.risk_tier = tier.to_owned();
    }
    for (field, value) in [
        (&mut form.metadata, &agent["metadata"]),
        (&mut form.labels, &agent["labels"]),
        (&mut form.context, &input["context"]),
    ] {
        *field = if value.is_null() {
            "{}".into()
        } else {
            pretty(value)
        };
    }
    if !input["email"].is_null() {
        form.email = pretty(&input["email"]);
    }
    if let Some([minute, day]) = input["sent"].as_array().map(Vec::as_slice) {
        notes.push(format!(
            "The policy read the agent's mail counts ({minute} in the minute, {day} in the day before); the bench counts none."
        ));
    }
    notes
}

/// The test bench: a hand-written request (the agent's id, status, risk tier, metadata and
/// labels, the action, the context and an optional email) to evaluate against the current policy
/// or a draft. Every role that reads policies. With `event`, the form is filled in with what
/// that recorded decision of this policy read (roles that read the audit trail), and the draft
/// is the version that decided it when that is not the current one; with `version`, the draft
/// is that version.
#[utoipa::path(get, path = "/dashboard/policies/{policy_id}/test", tag = "dashboard",
    params(("policy_id" = String, Path),
        ("event" = Option<String>, Query, description = "a decision event (`decision.check`) of this policy to fill the form in from"),
        ("version" = Option<i64>, Query, description = "an earlier version of the policy as the draft")),
    responses((status = 200, description = "HTML form"), NotLoggedIn,
        (status = 400, description = "HTML page: `invalid_version`, `invalid_event` (not a decision of this policy)"),
        (status = 403, description = "HTML page: the role may not read policies (or, with `event`, the audit trail)"),
        (status = 404, description = "HTML page: `unknown_policy`, `unknown_version`, `unknown_event`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn bench_form(
    State(ctx): State<SharedContext>,
    Path(policy_id): Path<String>,
    PageQuery(query): PageQuery<PolicyQuery>,
    Person(principal): Person,
) -> PageResult {
    let event_id = query
        .event
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty());
    let version = query.version.map(|v| v.0);
    let result: Result<Response, ApiError> = async {
        let workspace_id = readable(&principal)?;
        let policy = sync::policy_detail(&ctx, &workspace_id, &policy_id, None).await?;
        let mut form = BenchForm {
            draft: yaml_of(&policy.spec),
            ..BenchForm::default()
        };
        let mut notes = Vec::new();
        let mut version = version;
        if let Some(event_id) = event_id {
            person_requires(&principal, Need::AuditRead)?;
            let event = crate::audit::summary::event(&ctx, &workspace_id, &event_id)
                .await?
                .ok_or_else(|| {
                    ApiError::not_found("unknown_event", "no such audit event in this workspace")
                })?;
            if event.event_type != "decision.check"
                || event.policy_id.as_deref() != Some(policy.policy_id.as_str())
            {
                return Err(ApiError::bad_request(
                    "invalid_event",
                    format!("the event is not a decision of {}", policy.policy_id),
                ));
            }
            notes = prefill_from_event(&mut form, &event);
            if version.is_none() {
                version = super::audit::decided_version(
                    &ctx,
                    &workspace_id,
                    &event,
                    &policy.policy_id,
                )
                .await?;
            }
        }
        if let Some(v) = version.filter(|v| *v != policy.version) {
            let earlier = sync::policy_detail(&ctx, &workspace_id, &policy_id, Some(v)).await?;
            form.draft = yaml_of(&earlier.spec);
            form.against = "draft".into();
            notes.push(format!(
                "The draft is version {v} of the policy{}; choose the current policy (version {}) for today's answer.",
                if notes.is_empty() { "" } else { ", the one that decided" },
                policy.version
            ));
        }
        let shell = shell(&ctx, &principal, Section::Policies).await?;
        let mut page = bench_page(shell, &policy.policy_id, form, Vec::new(), None);
        page.notes = notes;
        Ok(render(&page))
    }
    .await;
    Ok(result?)
}

/// Evaluates the bench's request (a form: `csrf` and the fields) against the current policy or
/// the draft in the form, and shows the decision, its reason codes and reasons and the
/// determining policies. Evaluation only: nothing is recorded.
#[utoipa::path(post, path = "/dashboard/policies/{policy_id}/test", tag = "dashboard",
    params(("policy_id" = String, Path)),
    request_body(content = String, content_type = "application/x-www-form-urlencoded",
        description = "`csrf`, `agent_id`, `status`, `risk_tier`, `metadata`, `labels` (JSON objects), `action`, `context` (JSON object), `email` (optional JSON), `against` (`current` or `draft`) and `draft` (YAML or JSON)"),
    responses((status = 200, description = "HTML page with the decision"), NotLoggedIn,
        (status = 400, description = "HTML page: a field of the request does not read"),
        (status = 403, description = "HTML page: `csrf_failed`, or the role may not read policies"),
        (status = 404, description = "HTML page: `unknown_policy`"), (status = 422, description = "HTML page: the draft's errors")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn bench_run(
    State(ctx): State<SharedContext>,
    Path(policy_id): Path<String>,
    posted: Posted<BenchForm>,
) -> PageResult {
    let form = posted.form.posted();
    Ok(evaluate_bench(&ctx, &posted.person, &policy_id, form).await?)
}

fn with_status(mut response: Response, status: StatusCode) -> Response {
    if response.status().is_success() {
        *response.status_mut() = status;
    }
    response
}

async fn evaluate_bench(
    ctx: &Context,
    principal: &Principal,
    policy_id: &str,
    form: BenchForm,
) -> Result<Response, ApiError> {
    let workspace_id = readable(principal)?;
    // Answers 404 for a policy the workspace does not have.
    sync::policy_detail(ctx, &workspace_id, policy_id, None).await?;
    let shell = shell(ctx, principal, Section::Policies).await?;
    let request = match form.request() {
        Ok(request) => request,
        Err(errors) => {
            let page = bench_page(shell, policy_id, form, errors, None);
            return Ok(with_status(render(&page), StatusCode::BAD_REQUEST));
        }
    };
    let compiled = if form.against == "draft" {
        let draft = spec_value(&form.draft).and_then(|value| {
            from_value(&value).map_err(|errors| errors.iter().map(spec_error_text).collect())
        });
        let spec = match draft {
            Ok(spec) => spec,
            Err(errors) => {
                let page = bench_page(shell, policy_id, form, errors, None);
                return Ok(with_status(render(&page), StatusCode::UNPROCESSABLE_ENTITY));
            }
        };
        match sync::compile_in_background(spec, true).await? {
            Ok(compiled) => std::sync::Arc::new(compiled),
            Err(errors) => {
                let errors = errors.iter().map(spec_error_text).collect();
                let page = bench_page(shell, policy_id, form, errors, None);
                return Ok(with_status(render(&page), StatusCode::UNPROCESSABLE_ENTITY));
            }
        }
    } else {
        let view = ctx.caches.view(&*ctx.store, &workspace_id).await?;
        let loaded = ctx
            .caches
            .policy(&*ctx.store, &view, policy_id)
            .await?
            .ok_or_else(|| ApiError::from(crate::policy::check::unknown_policy()))?;
        return Ok(bench_decide(
            shell,
            policy_id,
            form,
            &request,
            &loaded.compiled,
        ));
    };
    Ok(bench_decide(shell, policy_id, form, &request, &compiled))
}

fn bench_decide(
    shell: Shell,
    policy_id: &str,
    form: BenchForm,
    request: &bench::BenchRequest,
    policy: &crate::policy::CompiledPolicy,
) -> Response {
    match bench::run(policy, request, crate::mail::address_of) {
        Ok(decision) => {
            let decision = decided(&form.against, &policy.hash, decision);
            render(&bench_page(
                shell,
                policy_id,
                form,
                Vec::new(),
                Some(decision),
            ))
        }
        Err(why) => with_status(
            render(&bench_page(shell, policy_id, form, vec![why], None)),
            StatusCode::BAD_REQUEST,
        ),
    }
}

fn decided(against: &str, hash: &str, d: Decision) -> BenchDecision {
    BenchDecision {
        against: against.to_owned(),
        policy_hash: hash.to_owned(),
        outcome: d.outcome.as_str(),
        reason_codes: d.reason_codes,
        reasons: d.reasons,
        determining: d.determining_policies,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_diff_view_lists_changes_and_marks_lines() {
        let summary = json!({"blocks": {"added": ["a"], "removed": [], "changed": ["b", "c"]},
            "groups": {"added": [], "removed": ["g"], "changed": []}});
        let view = diff_view(
            true,
            &summary,
            "--- current\n+++ desired\n@@ -1 +1 @@\n-x\n+y\n z\n",
        );
        let rows: Vec<_> = view
            .rows
            .iter()
            .map(|r| (r.kind, r.change, r.names.as_str()))
            .collect();
        assert_eq!(
            rows,
            [
                ("blocks", "added", "a"),
                ("blocks", "changed", "b, c"),
                ("groups", "removed", "g")
            ]
        );
        let classes: Vec<_> = view.lines.iter().map(|l| l.class).collect();
        assert_eq!(classes, ["", "", "hunk", "del", "add", ""]);
    }

    #[test]
    fn spec_text_is_read_strictly_as_json_or_yaml() {
        assert!(spec_value("{\"agent_groups\": []}").is_ok());
        assert!(spec_value("agent_groups: []\n").is_ok());
        let errors = spec_value("agent_groups: []\nagent_groups: []\n").unwrap_err();
        assert!(errors[0].starts_with("line 2"), "{errors:?}");
        assert!(spec_value("  ").is_err());
    }

    #[test]
    fn bench_fields_that_are_not_json_are_named() {
        let form = BenchForm {
            context: "{nope".into(),
            action: "read".into(),
            ..BenchForm::default()
        };
        let errors = form.request().unwrap_err();
        assert!(errors[0].contains("`context` is not JSON"), "{errors:?}");
        let form = BenchForm {
            action: "read".into(),
            agent_id: String::new(),
            ..BenchForm::default()
        };
        let request = form.request().unwrap();
        assert_eq!(request.agent_id, "agt_bench");
        assert!(request.email.is_none());
    }
}
