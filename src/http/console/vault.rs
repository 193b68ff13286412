//! The console's vault: the selected workspace's secret sets (key names, versions and profiles,
//! never a value), one set's page with its versions, profiles, grants, live leases and vault
//! audit trail, and for the roles that change the vault (owner, admin) the forms that write new
//! values, roll back, delete, undelete and destroy a set, grant and revoke, and issue and revoke
//! workflow leases.
//!
//! Values are write-only: they are typed into password inputs that are never pre-filled, go
//! straight to the same use cases as `/v1/vault/*`, and no page, notice or error page ever
//! carries one (the use cases' errors name keys, never values). Every form is posted with the
//! session's CSRF token, every request checks the role again, and every change is audited by
//! its use case with the person as actor. A workflow lease's token is shown exactly once: on the
//! page that answers the POST which issued it (status 200, `no-store`), never through a redirect,
//! never kept in the session, never in a log line or an audit event.
//!
//! Why one file of this length: the section has twelve pages and forms (the list, a set,
//! writing, delete/undelete/destroy, rollback, grants, leases), each with its template's view;
//! split, one section's notices, confirmation steps and form readers would import each other.

use std::collections::BTreeSet;

use askama::Template;
use axum::extract::{Path, State};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::api::{
    CreateGrantRequest, CreateSecretSetRequest, GrantInfo, LeaseInfo, LeaseListParams,
    SecretRollbackRequest, SecretSetInfo, SecretVersionItem, UpdateSecretSetRequest,
    WorkflowLeaseRequest,
};
use crate::context::{Context, SharedContext};
use crate::domain::access::Need;
use crate::domain::VaultAction;
use crate::error::ApiError;
use crate::identity::accounts::Principal;
use crate::store::SetRef;
use crate::time::{now_ms, parse_iso};
use crate::vault::leases;
use crate::vault::sets::{self as vault, Lifecycle};

use super::extract::{NotLoggedIn, Nothing, PageQuery, PageResult, Paged, Person, Posted};
use super::{base, see_other, shell, Section, Shell, PAGE_ROWS};
use crate::http::operator::person_requires;
use crate::http::pages::render;

/// Blank key/value rows on the form that creates a set, and for new keys on a set's page.
const CREATE_ROWS: usize = 5;
const NEW_KEY_ROWS: usize = 3;

/// What a grant may allow, by the names answers use (`POST /v1/vault/grants` takes them).
const GRANT_ACTIONS: [VaultAction; 3] = VaultAction::ALL;

/// What a workflow lease may be for (`POST /v1/vault/leases/workflow` takes them).
const LEASE_ACTIONS: [VaultAction; 2] = VaultAction::LEASABLE;

/// How long a workflow lease issued on the set's page lasts: the choices, in seconds (the
/// first is the default; the use case checks any other value a forged form sends).
const LEASE_TTLS: [(i64, &str); 4] = [
    (3_600, "1 hour"),
    (900, "15 minutes"),
    (28_800, "8 hours"),
    (86_400, "24 hours"),
];

/// The notices after a change, by the `done` word the redirect carries.
const NOTICES: [(&str, &str); 9] = [
    ("created", "Secret set created: the values you typed are its version 1."),
    ("updated", "New values written: they are the set's new version (the previous one stays in its history)."),
    ("rolled_back", "Rolled back: the earlier version's entries and profiles are now the newest version."),
    ("deleted", "Secret set deleted: it is hidden from lists and cannot be used until it is undeleted."),
    ("undeleted", "Secret set undeleted: it can be used again."),
    ("destroyed", "Secret set destroyed: its values are gone for good and its grants and leases revoked."),
    ("granted", "Grant added."),
    ("grant_revoked", "Grant revoked: it allows nothing from now on."),
    ("lease_revoked", "Lease revoked, with the request leases minted from it."),
];

fn notice(word: &str) -> Option<&'static str> {
    NOTICES.iter().find(|(w, _)| *w == word).map(|(_, n)| *n)
}

fn set_href(base: &str, set_id: &str) -> String {
    format!("{base}/dashboard/vault/{set_id}")
}

fn done_at(ctx: &Context, set_id: &str, word: &str) -> Response {
    see_other(format!("{}?done={word}", set_href(&base(ctx), set_id)))
}

/// The set a path names (`ss_...` or its number), checked before anything is read.
fn set_ref(id: &str) -> Result<SetRef, ApiError> {
    Ok(vault::set_ref_text(id)?)
}

fn state_of(set: &SecretSetInfo) -> &'static str {
    if set.destroyed_at.is_some() {
        "destroyed"
    } else if set.deleted_at.is_some() {
        "deleted"
    } else {
        "live"
    }
}

fn profile_count(set: &SecretSetInfo) -> usize {
    set.profiles.as_object().map_or(0, Map::len)
}

// ---- the list -------------------------------------------------------------------------------

#[derive(Template)]
#[template(path = "vault.html", config = "src/http/templates/askama.toml")]
struct VaultPage {
    shell: Shell,
    sets: Vec<SetRow>,
    show_deleted: bool,
    /// Whether the role may create sets (the server checks again on every POST).
    can_change: bool,
    rows: Vec<usize>,
    done: Option<&'static str>,
}

struct SetRow {
    href: String,
    id: String,
    number: i64,
    name: String,
    provider: String,
    environment: String,
    keys: usize,
    version: i64,
    profiles: usize,
    state: &'static str,
}

/// The workspace's secret sets (names, providers, environments, key counts, versions and
/// profiles, never values), and for owners and admins the form that creates one.
#[utoipa::path(get, path = "/dashboard/vault", tag = "dashboard",
    params(("deleted" = Option<bool>, Query, description = "list deleted sets too"),
        ("done" = Option<String>, Query, description = "the change just made, for its notice")),
    responses((status = 200, description = "HTML list of secret sets"), NotLoggedIn,
        (status = 400, description = "HTML page: `invalid_deleted`"),
        (status = 403, description = "HTML page: the role may not read the vault")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn vault_page(
    State(ctx): State<SharedContext>,
    PageQuery(query): PageQuery<ListQuery>,
    Person(principal): Person,
) -> PageResult {
    let principal = &principal;
    Ok(list_page(&ctx, principal, query).await?)
}

/// The list's query: `deleted` to list deleted sets too, `done` the change just made.
#[derive(Deserialize)]
pub struct ListQuery {
    deleted: Option<String>,
    done: Option<String>,
}

async fn list_page(
    ctx: &Context,
    principal: &Principal,
    query: ListQuery,
) -> Result<Response, ApiError> {
    person_requires(principal, Need::VaultRead)?;
    let (workspace_id, _) = principal.membership()?;
    let show_deleted = match query.deleted.as_deref().map(str::trim) {
        None | Some("" | "0" | "false") => false,
        Some("1" | "true" | "on") => true,
        Some(_) => return Err(ApiError::invalid("deleted", "must be `true` or `false`")),
    };
    let done = query.done.as_deref().and_then(notice);
    let sets = vault::list_sets(ctx, &workspace_id, show_deleted).await?;
    let shell = shell(ctx, principal, Section::Vault).await?;
    let sets = sets
        .into_iter()
        .map(|s| SetRow {
            href: set_href(&shell.base, &s.secret_set_id),
            keys: s.keys.len(),
            profiles: profile_count(&s),
            state: state_of(&s),
            id: s.secret_set_id,
            number: s.number,
            name: s.name,
            provider: s.provider,
            environment: s.environment,
            version: s.version,
        })
        .collect();
    Ok(render(&VaultPage {
        can_change: person_requires(principal, Need::VaultChange).is_ok(),
        rows: (1..=CREATE_ROWS).collect(),
        sets,
        show_deleted,
        done,
        shell,
    }))
}

/// The form's key/value rows in order (`key` and `value` fields pair up), keys trimmed; rows
/// left blank are skipped. A value is never part of an error message.
fn form_rows(keys: &[String], values: &[String]) -> Result<Vec<(String, String)>, ApiError> {
    let keys: Vec<&str> = keys.iter().map(|k| k.trim()).collect();
    if keys.len() != values.len() {
        return Err(ApiError::invalid(
            "entries",
            "every row has a key name and a value",
        ));
    }
    let mut rows = Vec::new();
    let mut seen = BTreeSet::new();
    for (n, (key, value)) in keys.into_iter().zip(values.iter()).enumerate() {
        if key.is_empty() {
            if value.is_empty() {
                continue;
            }
            return Err(ApiError::invalid(
                "entries",
                format!("row {} has a value but no key name", n + 1),
            ));
        }
        if !seen.insert(key.to_owned()) {
            return Err(ApiError::invalid(
                "entries",
                format!("`{key}` is given twice"),
            ));
        }
        rows.push((key.to_owned(), value.to_owned()));
    }
    Ok(rows)
}

fn object(entries: Vec<(String, String)>) -> Value {
    Value::Object(
        entries
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect(),
    )
}

/// The optional `profiles` field: JSON as the API takes it, or nothing.
fn profiles_field(profiles: Option<&str>) -> Result<Option<Value>, ApiError> {
    match profiles.map(str::trim).filter(|p| !p.is_empty()) {
        None => Ok(None),
        Some(text) => serde_json::from_str(text)
            .map(Some)
            .map_err(|e| ApiError::invalid("profiles", format!("must be a JSON object: {e}"))),
    }
}

/// Creates a secret set (a form: `csrf`, `name`, `provider`, `environment`, `key`/`value`
/// rows, optional `profiles` JSON) as version 1, audited with the person as actor, then to the
/// set's page.
#[utoipa::path(post, path = "/dashboard/vault", tag = "dashboard",
    request_body(content = String, content_type = "application/x-www-form-urlencoded",
        description = "`csrf`, `name`, `provider`, `environment`, repeated `key` and `value` (paired in order), optional `profiles` (JSON)"),
    responses((status = 303, description = "created: to the set's page (or not logged in: to /login)"),
        (status = 400, description = "HTML page: `missing_*`, `invalid_name`, `invalid_entries`, `invalid_profiles`"),
        (status = 403, description = "HTML page: `csrf_failed`, or the role may not change the vault"),
        (status = 409, description = "HTML page: `secret_set_exists`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn create_set(
    State(ctx): State<SharedContext>,
    posted: Posted<CreateForm>,
) -> PageResult {
    let principal = &posted.person;
    Ok(create(&ctx, principal, &posted.form).await?)
}

/// The form that creates a set.
#[derive(Deserialize)]
pub struct CreateForm {
    #[serde(default)]
    name: String,
    #[serde(default)]
    provider: String,
    #[serde(default)]
    environment: String,
    #[serde(default)]
    key: Vec<String>,
    #[serde(default)]
    value: Vec<String>,
    profiles: Option<String>,
}

async fn create(
    ctx: &Context,
    principal: &Principal,
    form: &CreateForm,
) -> Result<Response, ApiError> {
    person_requires(principal, Need::VaultChange)?;
    let (workspace_id, _) = principal.membership()?;
    let req = CreateSecretSetRequest {
        name: form.name.clone(),
        provider: form.provider.clone(),
        environment: form.environment.clone(),
        entries: object(form_rows(&form.key, &form.value)?),
        profiles: profiles_field(form.profiles.as_deref())?,
    };
    let set = vault::create_set(ctx, &workspace_id, &principal.actor(), req).await?;
    Ok(done_at(ctx, &set.secret_set_id, "created"))
}

// ---- one set --------------------------------------------------------------------------------

#[derive(Template)]
#[template(path = "vault_set.html", config = "src/http/templates/askama.toml")]
struct SetPage {
    shell: Shell,
    set: SecretSetInfo,
    state: &'static str,
    href: String,
    /// Whether the role may write, roll back, delete and grant (checked again on every POST).
    can_change: bool,
    /// Whether the role may revoke leases (checked again on every POST).
    can_lease: bool,
    /// Whether the page offers to issue a workflow lease: the role may, and the set is live.
    can_issue: bool,
    lease_actions: [&'static str; 2],
    lease_ttls: [(i64, &'static str); 4],
    /// The agents with a live grant of the set, offered in the lease form.
    grantees: Vec<String>,
    done: Option<&'static str>,
    versions: Vec<VersionRow>,
    profiles: Vec<ProfileRow>,
    grants: Vec<GrantRow>,
    leases: Vec<LeaseRow>,
    new_rows: Vec<usize>,
    grant_actions: [&'static str; 3],
    events: Vec<EventRow>,
    first_href: Option<String>,
    next_href: Option<String>,
    lifecycle: Vec<ActionLink>,
}

struct VersionRow {
    version: i64,
    author: String,
    created_at: String,
    keys: String,
    added: String,
    removed: String,
    current: bool,
    rollback_href: Option<String>,
}

struct ProfileRow {
    name: String,
    hosts: String,
    methods: String,
    paths: String,
    ports: String,
    allow_http: bool,
    /// `header Authorization: Bearer ${KEY}`: where a value goes (templates, never values).
    slots: Vec<String>,
}

struct GrantRow {
    id: String,
    agent_id: Option<String>,
    agent_href: Option<String>,
    group: Option<String>,
    actions: String,
    keys: String,
    expires: String,
    created_at: String,
    created_by: String,
    state: &'static str,
    revoke_href: Option<String>,
}

struct LeaseRow {
    id: String,
    kind: String,
    agent_id: String,
    agent_href: String,
    purpose: String,
    actions: String,
    keys: String,
    expires_at: String,
    uses_left: String,
    created_by: String,
    revoke_href: Option<String>,
}

struct EventRow {
    href: String,
    created_at: String,
    event_type: String,
    actor: String,
    details: String,
}

struct ActionLink {
    href: String,
    label: &'static str,
    danger: bool,
}

fn joined(items: &[String], empty: &str) -> String {
    if items.is_empty() {
        empty.to_owned()
    } else {
        items.join(", ")
    }
}

fn texts(value: Option<&Value>) -> String {
    value
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .map(|i| match i {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

fn profile_rows(profiles: &Value) -> Vec<ProfileRow> {
    let Some(all) = profiles.as_object() else {
        return Vec::new();
    };
    all.iter()
        .map(|(name, p)| {
            let mut slots = Vec::new();
            for (slot, word) in [("headers", "header"), ("query", "query")] {
                if let Some(templates) = p["inject"][slot].as_object() {
                    for (target, template) in templates {
                        slots.push(format!(
                            "{word} {target}: {}",
                            template.as_str().unwrap_or_default()
                        ));
                    }
                }
            }
            ProfileRow {
                name: name.clone(),
                hosts: texts(p.get("hosts")),
                methods: Some(texts(p.get("methods")))
                    .filter(|m| !m.is_empty())
                    .unwrap_or_else(|| "any".into()),
                paths: Some(texts(p.get("path_prefixes")))
                    .filter(|m| !m.is_empty())
                    .unwrap_or_else(|| "any".into()),
                ports: Some(texts(p.get("ports")))
                    .filter(|m| !m.is_empty())
                    .unwrap_or_else(|| "the scheme's own".into()),
                allow_http: p["allow_http"].as_bool().unwrap_or(false),
                slots,
            }
        })
        .collect()
}

/// Versions newest first, each with the key names added and removed since the one before it
/// (the vault keeps no record of which values changed, only that a version was written).
fn version_rows(
    items: Vec<SecretVersionItem>,
    current: i64,
    rollback_base: Option<&str>,
) -> Vec<VersionRow> {
    let older: Vec<Option<BTreeSet<String>>> = (0..items.len())
        .map(|i| items.get(i + 1).map(|v| v.keys.iter().cloned().collect()))
        .collect();
    items
        .into_iter()
        .zip(older)
        .map(|(v, before)| {
            let now: BTreeSet<String> = v.keys.iter().cloned().collect();
            let (added, removed) = match before {
                Some(before) => (
                    now.difference(&before).cloned().collect::<Vec<_>>(),
                    before.difference(&now).cloned().collect::<Vec<_>>(),
                ),
                None => (Vec::new(), Vec::new()),
            };
            VersionRow {
                current: v.version == current,
                rollback_href: rollback_base
                    .filter(|_| v.version != current)
                    .map(|b| format!("{b}/rollback/{}", v.version)),
                version: v.version,
                author: v.author,
                created_at: v.created_at,
                keys: joined(&v.keys, "no keys"),
                added: added.join(", "),
                removed: removed.join(", "),
            }
        })
        .collect()
}

fn grant_state(g: &GrantInfo, now: i64) -> &'static str {
    if g.revoked_at.is_some() {
        "revoked"
    } else if g
        .expires_at
        .as_deref()
        .and_then(parse_iso)
        .is_some_and(|at| at <= now)
    {
        "expired"
    } else {
        "live"
    }
}

fn lease_is_live(l: &LeaseInfo, now: i64) -> bool {
    l.revoked_at.is_none()
        && parse_iso(&l.expires_at).is_some_and(|at| at > now)
        && l.uses_left != Some(0)
}

/// The set page's URL with an audit cursor and limit.
fn audit_href(href: &str, cursor: Option<&str>, limit: Option<i64>) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    if let Some(limit) = limit {
        query.append_pair("limit", &limit.to_string());
    }
    if let Some(cursor) = cursor {
        query.append_pair("cursor", cursor);
    }
    let query = query.finish();
    if query.is_empty() {
        format!("{href}#audit")
    } else {
        format!("{href}?{query}#audit")
    }
}

/// One secret set: its facts and key names (never values), versions, profiles, grants, live
/// leases and its vault audit events (paged by cursor); for owners and admins the forms that
/// change it.
#[utoipa::path(get, path = "/dashboard/vault/{secret_set_id}", tag = "dashboard",
    params(("secret_set_id" = String, Path, description = "`ss_...` or the set's number"),
        ("limit" = Option<i64>, Query, description = "audit events shown, 1 to 200, default 25"),
        ("cursor" = Option<String>, Query, description = "the audit events' next page"),
        ("done" = Option<String>, Query, description = "the change just made, for its notice")),
    responses((status = 200, description = "HTML page of the secret set"), NotLoggedIn,
        (status = 400, description = "HTML page: the limit or the cursor is not valid"),
        (status = 403, description = "HTML page: the role may not read the vault"),
        (status = 404, description = "HTML page: `unknown_secret_set`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn set_page(
    State(ctx): State<SharedContext>,
    Path(secret_set_id): Path<String>,
    PageQuery(query): PageQuery<Paged>,
    Person(principal): Person,
) -> PageResult {
    let principal = &principal;
    Ok(set_detail(&ctx, principal, &secret_set_id, query).await?)
}

async fn set_detail(
    ctx: &Context,
    principal: &Principal,
    secret_set_id: &str,
    query: Paged,
) -> Result<Response, ApiError> {
    person_requires(principal, Need::VaultRead)?;
    let (workspace_id, _) = principal.membership()?;
    let (cursor, limit) = (query.cursor(), query.limit());
    let done = notice(query.done());
    let page_rows = crate::http::page_limit(limit, PAGE_ROWS, 200)?;
    let after = crate::http::page_cursor(cursor.as_deref())?;
    let set = vault::get_set(ctx, &workspace_id, &set_ref(secret_set_id)?).await?;
    let state = state_of(&set);
    let id = set.secret_set_id.clone();
    let can_change = person_requires(principal, Need::VaultChange).is_ok();
    let can_lease = person_requires(principal, Need::VaultLeases).is_ok();
    let shell = shell(ctx, principal, Section::Vault).await?;
    let base = shell.base.clone();
    let href = set_href(&base, &id);
    let now = now_ms();
    // A destroyed set keeps only its facts and its trail.
    let (versions, grants, leases) = if state == "destroyed" {
        (Vec::new(), Vec::new(), Vec::new())
    } else {
        let set_id = SetRef::Number(set.number);
        let versions = vault::versions(ctx, &workspace_id, &set_id).await?;
        let grants = vault::list_grants(ctx, &workspace_id, Some(&id)).await?;
        let leases = if person_requires(principal, Need::VaultLeasesRead).is_ok() {
            leases::list(
                ctx,
                &workspace_id,
                LeaseListParams {
                    secret_set_id: Some(id.clone()),
                    ..LeaseListParams::default()
                },
            )
            .await?
        } else {
            Vec::new()
        };
        (versions, grants, leases)
    };
    let live = state == "live";
    let mut events = vault::audit_of(ctx, &workspace_id, Some(&id), after, page_rows + 1).await?;
    // Every actor of the page (authors, grantors, lessors, the events') in one lookup.
    let names = crate::audit::names::ActorNames::lookup(
        ctx.store.as_ref(),
        &workspace_id,
        versions
            .iter()
            .map(|v| v.author.as_str())
            .chain(grants.iter().map(|g| g.created_by.as_str()))
            .chain(leases.iter().map(|l| l.created_by.as_str()))
            .chain(events.iter().map(|e| e.actor.as_str())),
    )
    .await?;
    let mut versions = version_rows(
        versions,
        set.version,
        Some(href.as_str()).filter(|_| can_change && live),
    );
    for v in &mut versions {
        v.author = names.shown(&v.author);
    }
    let agent_href = |agent_id: &str| format!("{base}/dashboard/agents/{agent_id}");
    let mut grantees: Vec<String> = grants
        .iter()
        .filter(|g| grant_state(g, now) == "live")
        .filter_map(|g| g.agent_id.clone())
        .collect();
    grantees.sort();
    grantees.dedup();
    let grants = grants
        .into_iter()
        .map(|g| {
            let state = grant_state(&g, now);
            GrantRow {
                revoke_href: (can_change && state != "revoked")
                    .then(|| format!("{href}/grants/{}/revoke", g.grant_id)),
                agent_href: g.agent_id.as_deref().map(agent_href),
                keys: match &g.allowed_keys {
                    Value::Array(keys) => keys
                        .iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(", "),
                    _ => "all keys".into(),
                },
                actions: g.allowed_actions.join(", "),
                expires: g.expires_at.unwrap_or_else(|| "never".into()),
                id: g.grant_id,
                agent_id: g.agent_id,
                group: g.group,
                created_at: g.created_at,
                created_by: names.shown(&g.created_by),
                state,
            }
        })
        .collect();
    let leases = leases
        .into_iter()
        .filter(|l| lease_is_live(l, now))
        .map(|l| LeaseRow {
            revoke_href: can_lease.then(|| format!("{href}/leases/{}/revoke", l.lease_id)),
            agent_href: agent_href(&l.agent_id),
            actions: l.actions.join(", "),
            keys: l
                .keys
                .as_deref()
                .map_or_else(|| "all granted".into(), |k| joined(k, "none")),
            uses_left: l
                .uses_left
                .map_or_else(|| "no limit".into(), |n| n.to_string()),
            id: l.lease_id,
            kind: l.kind,
            agent_id: l.agent_id,
            purpose: l.purpose,
            expires_at: l.expires_at,
            created_by: names.shown(&l.created_by),
        })
        .collect();
    let next = crate::http::next_cursor(&mut events, page_rows, |e| (e.created_at, e.id.clone()));
    let events = events
        .into_iter()
        .map(crate::audit::to_wire)
        .map(|e| EventRow {
            href: format!("{base}/dashboard/audit/{}", e.event_id),
            details: if e.details.as_object().is_some_and(|d| !d.is_empty()) {
                e.details.to_string()
            } else {
                String::new()
            },
            created_at: e.created_at,
            event_type: e.event_type,
            actor: names.shown(&e.actor),
        })
        .collect();
    let lifecycle = if !can_change {
        Vec::new()
    } else {
        LIFECYCLE
            .iter()
            .filter(|a| match a.what {
                Lifecycle::Delete => state == "live",
                Lifecycle::Undelete => state == "deleted",
                Lifecycle::Destroy => state != "destroyed",
            })
            .map(|a| ActionLink {
                href: format!("{href}/{}", a.verb),
                label: a.label,
                danger: a.danger,
            })
            .collect()
    };
    let limit_kept = limit.filter(|l| *l != PAGE_ROWS);
    Ok(render(&SetPage {
        first_href: cursor.map(|_| audit_href(&href, None, limit_kept)),
        next_href: next.map(|c| audit_href(&href, Some(&c), limit_kept)),
        profiles: profile_rows(&set.profiles),
        can_change: can_change && live,
        can_issue: can_lease && live,
        lease_actions: LEASE_ACTIONS.map(VaultAction::name),
        lease_ttls: LEASE_TTLS,
        grantees,
        can_lease,
        new_rows: (1..=NEW_KEY_ROWS).collect(),
        grant_actions: GRANT_ACTIONS.map(VaultAction::name),
        state,
        href,
        done,
        versions,
        grants,
        leases,
        events,
        lifecycle,
        set,
        shell,
    }))
}

/// `expected_version` as a form sends it: absent, or a version number.
fn expected_version(text: Option<&str>) -> Result<Option<i64>, ApiError> {
    match text.map(str::trim).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(text) => text
            .parse::<i64>()
            .ok()
            .filter(|n| *n > 0)
            .map(Some)
            .ok_or_else(|| ApiError::invalid("expected_version", "must be a version number")),
    }
}

/// Writes new values as a new version (a form: `csrf`, `expected_version`, `key`/`value` rows
/// — an empty value keeps a key's value — and `unset` for keys to remove), audited with the
/// person as actor, then back to the set's page.
#[utoipa::path(post, path = "/dashboard/vault/{secret_set_id}", tag = "dashboard",
    params(("secret_set_id" = String, Path, description = "`ss_...` or the set's number")),
    request_body(content = String, content_type = "application/x-www-form-urlencoded",
        description = "`csrf`, `expected_version`, repeated `key` and `value` (paired in order; an empty value keeps the key's value), repeated `unset`"),
    responses((status = 303, description = "written: to the set's page (or not logged in: to /login)"),
        (status = 400, description = "HTML page: `invalid_entries`, `invalid_expected_version`"),
        (status = 403, description = "HTML page: `csrf_failed`, or the role may not change the vault"),
        (status = 404, description = "HTML page: `unknown_secret_set`"),
        (status = 409, description = "HTML page: `version_conflict`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn write_values(
    State(ctx): State<SharedContext>,
    Path(secret_set_id): Path<String>,
    posted: Posted<WriteForm>,
) -> PageResult {
    let principal = &posted.person;
    Ok(write(&ctx, principal, &secret_set_id, &posted.form).await?)
}

/// The form that writes new values.
#[derive(Deserialize)]
pub struct WriteForm {
    expected_version: Option<String>,
    #[serde(default)]
    key: Vec<String>,
    #[serde(default)]
    value: Vec<String>,
    #[serde(default)]
    unset: Vec<String>,
}

async fn write(
    ctx: &Context,
    principal: &Principal,
    secret_set_id: &str,
    form: &WriteForm,
) -> Result<Response, ApiError> {
    person_requires(principal, Need::VaultChange)?;
    let (workspace_id, _) = principal.membership()?;
    let set_ref = set_ref(secret_set_id)?;
    let current = vault::get_set(ctx, &workspace_id, &set_ref).await?;
    let known: BTreeSet<&str> = current.keys.iter().map(String::as_str).collect();
    let mut set = Vec::new();
    for (key, value) in form_rows(&form.key, &form.value)? {
        if !value.is_empty() {
            set.push((key, value));
        } else if !known.contains(key.as_str()) {
            return Err(ApiError::invalid(
                "entries",
                format!("the new key `{key}` needs a value"),
            ));
        }
    }
    let unset = given(&form.unset);
    if let Some((key, _)) = set.iter().find(|(k, _)| unset.contains(k)) {
        return Err(ApiError::invalid(
            "entries",
            format!("`{key}` is both given a value and removed"),
        ));
    }
    if set.is_empty() && unset.is_empty() {
        return Err(ApiError::invalid(
            "entries",
            "nothing to write: type a new value, or tick a key to remove",
        ));
    }
    let req = UpdateSecretSetRequest {
        set: (!set.is_empty()).then(|| object(set)),
        unset: (!unset.is_empty()).then_some(unset),
        expected_version: expected_version(form.expected_version.as_deref())?,
        ..UpdateSecretSetRequest::default()
    };
    let updated = vault::update_set(ctx, &workspace_id, &principal.actor(), &set_ref, req).await?;
    Ok(done_at(ctx, &updated.secret_set_id, "updated"))
}

// ---- rollback, delete, undelete, destroy ----------------------------------------------------

#[derive(Template)]
#[template(path = "vault_confirm.html", config = "src/http/templates/askama.toml")]
struct ConfirmPage {
    shell: Shell,
    title: String,
    consequence: String,
    set_name: String,
    set_href: String,
    action_href: String,
    button: &'static str,
    danger: bool,
    expected_version: Option<i64>,
    /// Destroying asks for the set's name, typed.
    type_name: bool,
}

/// A lifecycle change of a set: what it is, says and does.
struct SetAction {
    what: Lifecycle,
    verb: &'static str,
    label: &'static str,
    consequence: &'static str,
    danger: bool,
}

const LIFECYCLE: [SetAction; 3] = [
    SetAction {
        what: Lifecycle::Delete,
        verb: "delete",
        label: "Delete",
        consequence: "The set is hidden from lists and cannot be written or used (agents' reads and proxied calls with it fail) until it is undeleted. Its values, versions and grants are kept.",
        danger: false,
    },
    SetAction {
        what: Lifecycle::Undelete,
        verb: "undelete",
        label: "Undelete",
        consequence: "The set is listed again and can be written and used as before.",
        danger: false,
    },
    SetAction {
        what: Lifecycle::Destroy,
        verb: "destroy",
        label: "Destroy",
        consequence: "Destroying is irreversible: every version's sealed values and the set's data key are deleted, its grants and leases revoked, and its name is free again. Only its audit trail remains.",
        danger: true,
    },
];

fn set_action(verb: &str) -> Result<&'static SetAction, ApiError> {
    LIFECYCLE
        .iter()
        .find(|a| a.verb == verb)
        .ok_or_else(|| ApiError::not_found("not_found", "no such action on secret sets"))
}

/// The confirmation step of deleting, undeleting or destroying a set (destroying asks for the
/// set's name). Only roles that change the vault get it.
#[utoipa::path(get, path = "/dashboard/vault/{secret_set_id}/{action}", tag = "dashboard",
    params(("secret_set_id" = String, Path), ("action" = String, Path, description = "`delete`, `undelete` or `destroy`")),
    responses((status = 200, description = "HTML confirmation form"), NotLoggedIn,
        (status = 403, description = "HTML page: the role may not change the vault"),
        (status = 404, description = "HTML page: `unknown_secret_set`, or no such action")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn confirm_lifecycle(
    State(ctx): State<SharedContext>,
    Path((secret_set_id, verb)): Path<(String, String)>,
    _query: PageQuery<Nothing>,
    Person(principal): Person,
) -> PageResult {
    let principal = &principal;
    Ok(confirm_lifecycle_page(&ctx, principal, &secret_set_id, &verb).await?)
}

async fn confirm_lifecycle_page(
    ctx: &Context,
    principal: &Principal,
    secret_set_id: &str,
    verb: &str,
) -> Result<Response, ApiError> {
    person_requires(principal, Need::VaultChange)?;
    let action = set_action(verb)?;
    let (workspace_id, _) = principal.membership()?;
    let set = vault::any_set(ctx, &workspace_id, &set_ref(secret_set_id)?).await?;
    let shell = shell(ctx, principal, Section::Vault).await?;
    let set_href = set_href(&shell.base, &set.id);
    Ok(render(&ConfirmPage {
        title: format!("{} the secret set", action.label),
        consequence: action.consequence.to_owned(),
        set_name: set.name,
        action_href: format!("{set_href}/{}", action.verb),
        set_href,
        button: action.label,
        danger: action.danger,
        expected_version: None,
        type_name: action.what == Lifecycle::Destroy,
        shell,
    }))
}

/// Deletes, undeletes or destroys a set (a form: `csrf`; `confirm_name`, the set's name, to
/// destroy), audited with the person as actor.
#[utoipa::path(post, path = "/dashboard/vault/{secret_set_id}/{action}", tag = "dashboard",
    params(("secret_set_id" = String, Path), ("action" = String, Path, description = "`delete`, `undelete` or `destroy`")),
    request_body(content = String, content_type = "application/x-www-form-urlencoded", description = "`csrf`, and `confirm_name` (the set's name) to destroy"),
    responses((status = 303, description = "done: to the set's page, or the list after destroying (or not logged in: to /login)"),
        (status = 400, description = "HTML page: `invalid_confirm_name`"),
        (status = 403, description = "HTML page: `csrf_failed`, or the role may not change the vault"),
        (status = 404, description = "HTML page: `unknown_secret_set`, or no such action")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn lifecycle(
    State(ctx): State<SharedContext>,
    Path((secret_set_id, verb)): Path<(String, String)>,
    posted: Posted<LifecycleForm>,
) -> PageResult {
    let principal = &posted.person;
    Ok(change_lifecycle(&ctx, principal, &secret_set_id, &verb, &posted.form).await?)
}

/// The form of a lifecycle change: `confirm_name`, the set's name typed, to destroy it.
#[derive(Deserialize)]
pub struct LifecycleForm {
    confirm_name: Option<String>,
}

async fn change_lifecycle(
    ctx: &Context,
    principal: &Principal,
    secret_set_id: &str,
    verb: &str,
    form: &LifecycleForm,
) -> Result<Response, ApiError> {
    person_requires(principal, Need::VaultChange)?;
    let action = set_action(verb)?;
    let (workspace_id, _) = principal.membership()?;
    let set_ref = set_ref(secret_set_id)?;
    if action.what == Lifecycle::Destroy {
        let set = vault::any_set(ctx, &workspace_id, &set_ref).await?;
        if form.confirm_name.as_deref() != Some(set.name.as_str()) {
            return Err(ApiError::invalid(
                "confirm_name",
                "type the set's name exactly to destroy it",
            ));
        }
    }
    let set = vault::lifecycle(
        ctx,
        &workspace_id,
        &principal.actor(),
        &set_ref,
        action.what,
    )
    .await?;
    Ok(match action.what {
        Lifecycle::Destroy => see_other(format!("{}/dashboard/vault?done=destroyed", base(ctx))),
        Lifecycle::Delete => done_at(ctx, &set.secret_set_id, "deleted"),
        Lifecycle::Undelete => done_at(ctx, &set.secret_set_id, "undeleted"),
    })
}

fn version_number(text: &str) -> Result<i64, ApiError> {
    text.parse::<i64>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| ApiError::not_found("unknown_version", "no such version of this secret set"))
}

/// The confirmation step of rolling a set back to a kept version.
#[utoipa::path(get, path = "/dashboard/vault/{secret_set_id}/rollback/{version}", tag = "dashboard",
    params(("secret_set_id" = String, Path), ("version" = String, Path, description = "the kept version to roll back to")),
    responses((status = 200, description = "HTML confirmation form"), NotLoggedIn,
        (status = 403, description = "HTML page: the role may not change the vault"),
        (status = 404, description = "HTML page: `unknown_secret_set`, `unknown_version`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn confirm_rollback_set(
    State(ctx): State<SharedContext>,
    Path((secret_set_id, version)): Path<(String, String)>,
    _query: PageQuery<Nothing>,
    Person(principal): Person,
) -> PageResult {
    let principal = &principal;
    Ok(confirm_rollback_page(&ctx, principal, &secret_set_id, &version).await?)
}

async fn confirm_rollback_page(
    ctx: &Context,
    principal: &Principal,
    secret_set_id: &str,
    version: &str,
) -> Result<Response, ApiError> {
    person_requires(principal, Need::VaultChange)?;
    let (workspace_id, _) = principal.membership()?;
    let version = version_number(version)?;
    let set_ref = set_ref(secret_set_id)?;
    let set = vault::live_set(ctx, &workspace_id, &set_ref).await?;
    let kept = vault::versions(ctx, &workspace_id, &set_ref).await?;
    let Some(earlier) = kept.iter().find(|v| v.version == version) else {
        return Err(ApiError::not_found(
            "unknown_version",
            "no such version of this secret set (only the last versions are kept)",
        ));
    };
    let shell = shell(ctx, principal, Section::Vault).await?;
    let set_href = set_href(&shell.base, &set.id);
    Ok(render(&ConfirmPage {
        title: format!("Roll back to version {version}"),
        consequence: format!(
            "Version {version}'s entries ({}) and profiles become version {}, written by you; version {} stays in the history. Agents use the rolled-back values from their next use.",
            joined(&earlier.keys, "no keys"),
            set.current_version + 1,
            set.current_version
        ),
        set_name: set.name,
        action_href: format!("{set_href}/rollback/{version}"),
        set_href,
        button: "Roll back",
        danger: false,
        expected_version: Some(set.current_version),
        type_name: false,
        shell,
    }))
}

/// Rolls a set back to a kept version (a form: `csrf`, `expected_version`), audited with the
/// person as actor.
#[utoipa::path(post, path = "/dashboard/vault/{secret_set_id}/rollback/{version}", tag = "dashboard",
    params(("secret_set_id" = String, Path), ("version" = String, Path, description = "the kept version to roll back to")),
    request_body(content = String, content_type = "application/x-www-form-urlencoded", description = "`csrf` and `expected_version`"),
    responses((status = 303, description = "rolled back: to the set's page (or not logged in: to /login)"),
        (status = 403, description = "HTML page: `csrf_failed`, or the role may not change the vault"),
        (status = 404, description = "HTML page: `unknown_secret_set`, `unknown_version`"),
        (status = 409, description = "HTML page: `version_conflict`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn rollback_set(
    State(ctx): State<SharedContext>,
    Path((secret_set_id, version)): Path<(String, String)>,
    posted: Posted<RollbackForm>,
) -> PageResult {
    let principal = &posted.person;
    Ok(roll_back(&ctx, principal, &secret_set_id, &version, &posted.form).await?)
}

/// The form of a rollback: the version the page showed as the newest.
#[derive(Deserialize)]
pub struct RollbackForm {
    expected_version: Option<String>,
}

async fn roll_back(
    ctx: &Context,
    principal: &Principal,
    secret_set_id: &str,
    version: &str,
    form: &RollbackForm,
) -> Result<Response, ApiError> {
    person_requires(principal, Need::VaultChange)?;
    let (workspace_id, _) = principal.membership()?;
    let req = SecretRollbackRequest {
        version: version_number(version)?,
        expected_version: expected_version(form.expected_version.as_deref())?,
    };
    let set = vault::rollback(
        ctx,
        &workspace_id,
        &principal.actor(),
        &set_ref(secret_set_id)?,
        req,
    )
    .await?;
    Ok(done_at(ctx, &set.secret_set_id, "rolled_back"))
}

// ---- grants and leases ----------------------------------------------------------------------

/// `expires_at` as typed: RFC 3339, or a `datetime-local` input's `YYYY-MM-DDTHH:MM[:SS]`
/// read as UTC; empty for a grant that does not expire.
fn expiry(text: &str) -> Option<String> {
    let text = text.trim();
    let local = |t: &str| {
        t.len() >= 16 && t.as_bytes().get(10) == Some(&b'T') && !t.ends_with('Z') && {
            let time = &t[11..];
            !time.contains(['+', '-'])
        }
    };
    match text {
        "" => None,
        t if t.len() == 16 && local(t) => Some(format!("{t}:00Z")),
        t if t.len() == 19 && local(t) => Some(format!("{t}Z")),
        t => Some(t.to_owned()),
    }
}

/// Grants an agent or an agent group the use of the set (a form: `csrf`, `agent_id` or
/// `group`, repeated `action`, `all_keys` or repeated `key`, optional `expires_at`), audited
/// with the person as actor.
#[utoipa::path(post, path = "/dashboard/vault/{secret_set_id}/grants", tag = "dashboard",
    params(("secret_set_id" = String, Path)),
    request_body(content = String, content_type = "application/x-www-form-urlencoded",
        description = "`csrf`, `agent_id` or `group`, repeated `action` (`proxy`, `read`, `mint_lease`; or an alias: `proxy_use`, `mint_request_lease`), `all_keys` or repeated `key`, optional `expires_at` (RFC 3339, or `YYYY-MM-DDTHH:MM` UTC)"),
    responses((status = 303, description = "granted: to the set's page (or not logged in: to /login)"),
        (status = 400, description = "HTML page: `missing_agent_id`, `missing_allowed_keys`, `missing_allowed_actions`, `invalid_allowed_actions`, `invalid_expires_at`"),
        (status = 403, description = "HTML page: `csrf_failed`, or the role may not change the vault"),
        (status = 404, description = "HTML page: `unknown_secret_set`, `unknown_agent`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn add_grant(
    State(ctx): State<SharedContext>,
    Path(secret_set_id): Path<String>,
    posted: Posted<GrantForm>,
) -> PageResult {
    let principal = &posted.person;
    Ok(grant(&ctx, principal, &secret_set_id, &posted.form).await?)
}

/// The form that grants the set: to an agent or a group, which actions on which keys, until
/// when.
#[derive(Deserialize)]
pub struct GrantForm {
    agent_id: Option<String>,
    group: Option<String>,
    #[serde(default)]
    action: Vec<String>,
    all_keys: Option<String>,
    #[serde(default)]
    key: Vec<String>,
    expires_at: Option<String>,
}

/// The values given, trimmed, without the blank ones.
fn given(values: &[String]) -> Vec<String> {
    values
        .iter()
        .map(|v| v.trim())
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A text field, trimmed; `None` when blank.
fn text(value: Option<&str>) -> Option<String> {
    value
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

async fn grant(
    ctx: &Context,
    principal: &Principal,
    secret_set_id: &str,
    form: &GrantForm,
) -> Result<Response, ApiError> {
    person_requires(principal, Need::VaultChange)?;
    let (workspace_id, _) = principal.membership()?;
    set_ref(secret_set_id)?;
    let keys = given(&form.key);
    let allowed_keys = if form.all_keys.as_deref().is_some_and(|v| !v.is_empty()) {
        Value::String("*".into())
    } else if keys.is_empty() {
        Value::Null
    } else {
        Value::Array(keys.into_iter().map(Value::String).collect())
    };
    let req = CreateGrantRequest {
        secret_set_id: Value::String(secret_set_id.to_owned()),
        agent_id: text(form.agent_id.as_deref()),
        group: text(form.group.as_deref()),
        allowed_keys,
        allowed_actions: given(&form.action),
        expires_at: form.expires_at.as_deref().and_then(expiry),
    };
    let made = vault::create_grant(ctx, &workspace_id, &principal.actor(), req).await?;
    Ok(done_at(ctx, &made.secret_set_id, "granted"))
}

/// Revokes a grant of the set (a form: `csrf`), audited with the person as actor.
#[utoipa::path(post, path = "/dashboard/vault/{secret_set_id}/grants/{grant_id}/revoke", tag = "dashboard",
    params(("secret_set_id" = String, Path), ("grant_id" = String, Path)),
    request_body(content = String, content_type = "application/x-www-form-urlencoded", description = "`csrf`"),
    responses((status = 303, description = "revoked: to the set's page (or not logged in: to /login)"),
        (status = 403, description = "HTML page: `csrf_failed`, or the role may not change the vault"),
        (status = 404, description = "HTML page: `unknown_secret_set`, `unknown_grant`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn revoke_set_grant(
    State(ctx): State<SharedContext>,
    Path((secret_set_id, grant_id)): Path<(String, String)>,
    posted: Posted<Nothing>,
) -> PageResult {
    let principal = &posted.person;
    Ok(end_grant(&ctx, principal, &secret_set_id, &grant_id).await?)
}

async fn end_grant(
    ctx: &Context,
    principal: &Principal,
    secret_set_id: &str,
    grant_id: &str,
) -> Result<Response, ApiError> {
    person_requires(principal, Need::VaultChange)?;
    let (workspace_id, _) = principal.membership()?;
    let set = vault::any_set(ctx, &workspace_id, &set_ref(secret_set_id)?).await?;
    // Only a grant of this set, so the page's link cannot end another set's grant.
    let of_set = vault::list_grants(ctx, &workspace_id, Some(&set.id))
        .await?
        .iter()
        .any(|g| g.grant_id == grant_id);
    if !of_set {
        return Err(ApiError::not_found(
            "unknown_grant",
            "no such live grant of this secret set",
        ));
    }
    vault::revoke_grant(ctx, &workspace_id, &principal.actor(), grant_id).await?;
    Ok(done_at(ctx, &set.id, "grant_revoked"))
}

#[derive(Template)]
#[template(path = "vault_lease.html", config = "src/http/templates/askama.toml")]
struct LeasePage {
    shell: Shell,
    set_name: String,
    set_href: String,
    /// Shown on this page only; the server keeps its hash.
    token: String,
    facts: Vec<(&'static str, String)>,
}

/// Issues a workflow lease for an agent on the set (a form: `csrf`, `agent_id`, repeated
/// `action`, `purpose`, `ttl_seconds`), as `POST /v1/vault/leases/workflow`, audited with the
/// person as actor (never the token); the answer shows the token, once.
#[utoipa::path(post, path = "/dashboard/vault/{secret_set_id}/leases", tag = "dashboard",
    params(("secret_set_id" = String, Path, description = "`ss_...` or the set's number")),
    request_body(content = String, content_type = "application/x-www-form-urlencoded",
        description = "`csrf`, `agent_id`, repeated `action` (`proxy`, `read`; or an alias: `proxy_use`), `purpose`, optional `ttl_seconds` (1 to 86,400, default 3,600)"),
    responses((status = 200, description = "HTML page showing the new lease's token once (`no-store`)"),
        NotLoggedIn,
        (status = 400, description = "HTML page: `missing_agent_id`, `missing_actions`, `invalid_actions`, `missing_purpose`, `invalid_purpose`, `invalid_ttl_seconds`"),
        (status = 403, description = "HTML page: `csrf_failed`, `minting_paused`, `agent_not_active`, or the role may not issue leases"),
        (status = 404, description = "HTML page: `unknown_secret_set` (also a deleted set), `unknown_agent`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn issue_set_lease(
    State(ctx): State<SharedContext>,
    Path(secret_set_id): Path<String>,
    posted: Posted<LeaseForm>,
) -> PageResult {
    let principal = &posted.person;
    Ok(issue_lease(&ctx, principal, &secret_set_id, &posted.form).await?)
}

/// The form that issues a workflow lease.
#[derive(Deserialize)]
pub struct LeaseForm {
    agent_id: Option<String>,
    #[serde(default)]
    action: Vec<String>,
    purpose: Option<String>,
    ttl_seconds: Option<String>,
}

async fn issue_lease(
    ctx: &Context,
    principal: &Principal,
    secret_set_id: &str,
    form: &LeaseForm,
) -> Result<Response, ApiError> {
    person_requires(principal, Need::VaultLeases)?;
    let (workspace_id, _) = principal.membership()?;
    let set = vault::live_set(ctx, &workspace_id, &set_ref(secret_set_id)?).await?;
    let Some(agent_id) = text(form.agent_id.as_deref()) else {
        return Err(ApiError::missing("agent_id"));
    };
    let ttl_seconds = match text(form.ttl_seconds.as_deref()) {
        None => None,
        Some(t) => Some(
            t.parse::<i64>()
                .map_err(|_| ApiError::invalid("ttl_seconds", "must be a number of seconds"))?,
        ),
    };
    let purpose = text(form.purpose.as_deref()).unwrap_or_default();
    let actions = given(&form.action);
    // The actions as the lease is written (by their names), for the facts shown with the token.
    let mut names: Vec<&str> = Vec::new();
    for action in actions
        .iter()
        .filter_map(|a| VaultAction::parse_leasable(a))
    {
        if !names.contains(&action.name()) {
            names.push(action.name());
        }
    }
    let names = names.join(", ");
    let req = WorkflowLeaseRequest {
        agent_id: agent_id.clone(),
        secret_set_id: Value::String(set.id.clone()),
        purpose: purpose.clone(),
        actions,
        ttl_seconds,
    };
    let issued = leases::issue_workflow(ctx, &workspace_id, &principal.actor(), req).await?;
    let shell = shell(ctx, principal, Section::Vault).await?;
    let set_href = set_href(&shell.base, &set.id);
    let facts = vec![
        ("Lease", issued.lease_id),
        ("Agent", agent_id),
        (
            "Secret set",
            format!("{} (number {})", set.name, set.number),
        ),
        ("Actions", names),
        ("Purpose", purpose),
        ("Expires", issued.expires_at),
    ];
    // `render` marks the answer `no-store`: the token is in this response and nowhere else.
    Ok(render(&LeasePage {
        shell,
        set_name: set.name,
        set_href,
        token: issued.workflow_lease_token,
        facts,
    }))
}

/// Revokes a lease of the set and the request leases minted from it (a form: `csrf`), audited
/// with the person as actor.
#[utoipa::path(post, path = "/dashboard/vault/{secret_set_id}/leases/{lease_id}/revoke", tag = "dashboard",
    params(("secret_set_id" = String, Path), ("lease_id" = String, Path)),
    request_body(content = String, content_type = "application/x-www-form-urlencoded", description = "`csrf`"),
    responses((status = 303, description = "revoked: to the set's page (or not logged in: to /login)"),
        (status = 403, description = "HTML page: `csrf_failed`, or the role may not revoke leases"),
        (status = 404, description = "HTML page: `unknown_secret_set`, `unknown_lease`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn revoke_set_lease(
    State(ctx): State<SharedContext>,
    Path((secret_set_id, lease_id)): Path<(String, String)>,
    posted: Posted<Nothing>,
) -> PageResult {
    let principal = &posted.person;
    Ok(end_lease(&ctx, principal, &secret_set_id, &lease_id).await?)
}

async fn end_lease(
    ctx: &Context,
    principal: &Principal,
    secret_set_id: &str,
    lease_id: &str,
) -> Result<Response, ApiError> {
    person_requires(principal, Need::VaultLeases)?;
    let (workspace_id, _) = principal.membership()?;
    let set = vault::any_set(ctx, &workspace_id, &set_ref(secret_set_id)?).await?;
    leases::revoke(ctx, &workspace_id, &principal.actor(), lease_id).await?;
    Ok(done_at(ctx, &set.id, "lease_revoked"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rows of a form that sent these `key` and `value` fields, in order.
    fn form_rows_of(pairs: &[(&str, &str)]) -> Result<Vec<(String, String)>, ApiError> {
        let of = |name: &str| -> Vec<String> {
            pairs
                .iter()
                .filter(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
                .collect()
        };
        form_rows(&of("key"), &of("value"))
    }

    #[test]
    fn rows_pair_keys_and_values_and_never_name_a_value() {
        let rows = form_rows_of(&[
            ("key", " A "),
            ("value", "one"),
            ("key", ""),
            ("value", ""),
            ("key", "B"),
            ("value", ""),
        ]);
        assert_eq!(
            rows.ok(),
            Some(vec![
                ("A".into(), "one".into()),
                ("B".into(), String::new())
            ])
        );
        let err = form_rows_of(&[("key", ""), ("value", "s3cret-value")])
            .err()
            .map(|e| (e.code.to_string(), e.message));
        let (code, message) = err.unwrap_or_default();
        assert_eq!(code, "invalid_entries");
        assert!(!message.contains("s3cret-value"), "{message}");
        assert!(
            form_rows_of(&[("key", "A"), ("value", "x"), ("key", "A"), ("value", "y")]).is_err()
        );
        assert!(form_rows_of(&[("key", "A")]).is_err());
    }

    #[test]
    fn a_local_time_is_read_as_utc() {
        assert_eq!(
            expiry("2099-01-31T09:00").as_deref(),
            Some("2099-01-31T09:00:00Z")
        );
        assert_eq!(
            expiry("2099-01-31T09:00:30").as_deref(),
            Some("2099-01-31T09:00:30Z")
        );
        assert_eq!(
            expiry("2099-01-31T09:00:00+02:00").as_deref(),
            Some("2099-01-31T09:00:00+02:00")
        );
        assert_eq!(expiry("  "), None);
    }

    #[test]
    fn versions_say_which_keys_came_and_went() {
        let item = |version, keys: &[&str]| SecretVersionItem {
            version,
            keys: keys.iter().map(|k| (*k).to_owned()).collect(),
            author: "user:usr_1".into(),
            created_at: String::new(),
        };
        let rows = version_rows(
            vec![item(3, &["A", "C"]), item(2, &["A", "B"]), item(1, &["A"])],
            3,
            Some("/dashboard/vault/ss_1"),
        );
        let shown: Vec<_> = rows
            .iter()
            .map(|r| {
                (
                    r.version,
                    r.added.as_str(),
                    r.removed.as_str(),
                    r.rollback_href.is_some(),
                )
            })
            .collect();
        assert_eq!(
            shown,
            [(3, "C", "B", false), (2, "B", "", true), (1, "", "", true)]
        );
        assert_eq!(
            rows[1].rollback_href.as_deref(),
            Some("/dashboard/vault/ss_1/rollback/2")
        );
        assert!(notice("updated").is_some() && notice("<script>").is_none());
    }
}
