//! The vault's administration: secret sets with versions, sealed at rest
//! with envelope encryption, and grants of them to agents.
//!
//! Each set has its own data key (32 random bytes) sealed with the master key, the associated
//! data naming the workspace and the set. A version's entries are one JSON object sealed with
//! the data key, the associated data naming the workspace, the set and the version: a sealed
//! value copied into another row, set or workspace does not open. Key names and profiles
//! (templates, no values) are stored in the clear so that listing never decrypts.
//!
//! Why one file of this length: every change of a set (write, rollback, the lifecycle, grants)
//! seals or opens with the same associated data, keeps the same version history and audits
//! the same way; one file keeps the sealing rules where they can be checked together.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::api;
use crate::audit::{self, Actor};
use crate::context::Context;
use crate::domain::ids::{self, SecretSetId};
use crate::domain::VaultAction;
use crate::secret::{DataKey, MasterKey};
use crate::store::backup::SealedKeys;
use crate::store::{
    Change, GrantRecord, SecretSetRecord, SecretVersion, SetRef, Store, StoreError, VaultOp,
};
use crate::time::{iso, now_ms, parse_iso};

use crate::enforce::{EnforceError, EnforceResult};

/// The id prefixes of secret sets and grants.
pub use crate::domain::ids::SECRET_SET;
pub const GRANT: &str = "grt";

const MAX_KEYS: usize = 256;
const MAX_KEY_LEN: usize = 128;
const MAX_VALUE_BYTES: usize = 64 * 1024;

fn dek_context(workspace_id: &str, set_id: &str) -> String {
    format!("vault-dek:{workspace_id}:{set_id}")
}

fn entries_context(workspace_id: &str, set_id: &str, version: i64) -> String {
    format!("vault:{workspace_id}:{set_id}:{version}")
}

pub(super) fn unknown_set() -> EnforceError {
    EnforceError::not_found("unknown_secret_set", "no such secret set in this workspace")
}

/// A `secret_set_id` as requests send it: `ss_...`, or the number (JSON integer or digits).
pub fn set_ref(value: &Value) -> EnforceResult<SetRef> {
    match value {
        Value::String(s) => set_ref_text(s),
        Value::Number(n) => n
            .as_i64()
            .filter(|n| *n > 0)
            .map(SetRef::Number)
            .ok_or_else(unknown_set),
        Value::Null => Err(EnforceError::missing("secret_set_id")),
        _ => Err(EnforceError::invalid(
            "secret_set_id",
            "must be a secret set id (`ss_...`) or its number",
        )),
    }
}

/// A set named in a path or query: `ss_...` or its number.
pub fn set_ref_text(text: &str) -> EnforceResult<SetRef> {
    if let Some(id) = SecretSetId::parse(text) {
        Ok(SetRef::Id(id))
    } else {
        text.parse::<i64>()
            .ok()
            .filter(|n| *n > 0)
            .map(SetRef::Number)
            .ok_or_else(unknown_set)
    }
}

/// A set of the workspace that is not destroyed (deleted ones only when `deleted_ok`).
async fn find_set(
    ctx: &Context,
    workspace_id: &str,
    set: &SetRef,
    deleted_ok: bool,
) -> EnforceResult<SecretSetRecord> {
    let found = ctx
        .store
        .secret_set(workspace_id, set)
        .await?
        .filter(|s| is_live(s) || (deleted_ok && s.destroyed_at.is_none()));
    found.ok_or_else(unknown_set)
}

/// A set that is neither deleted nor destroyed.
pub(super) fn is_live(set: &SecretSetRecord) -> bool {
    set.destroyed_at.is_none() && set.deleted_at.is_none()
}

/// A live set (not deleted, not destroyed) of the workspace.
pub async fn live_set(
    ctx: &Context,
    workspace_id: &str,
    set: &SetRef,
) -> EnforceResult<SecretSetRecord> {
    find_set(ctx, workspace_id, set, false).await
}

/// A set of the workspace that is not destroyed (deleted ones too).
pub async fn any_set(
    ctx: &Context,
    workspace_id: &str,
    set: &SetRef,
) -> EnforceResult<SecretSetRecord> {
    find_set(ctx, workspace_id, set, true).await
}

fn label(field: &'static str, value: &str, max: usize) -> EnforceResult<String> {
    let value = value.trim();
    if value.is_empty() {
        return Err(EnforceError::missing(field));
    }
    if value.chars().count() > max || value.chars().any(char::is_control) {
        return Err(EnforceError::invalid(
            field,
            format!("must be at most {max} printable characters"),
        ));
    }
    Ok(value.to_owned())
}

fn valid_key(key: &str) -> bool {
    let mut chars = key.chars();
    key.len() <= MAX_KEY_LEN
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `{KEY: "value"}` checked: key names, value sizes, how many.
fn entries_of(field: &'static str, value: &Value) -> EnforceResult<BTreeMap<String, String>> {
    let Value::Object(map) = value else {
        return Err(EnforceError::invalid(
            field,
            "must be an object of `KEY: \"value\"`",
        ));
    };
    let mut out = BTreeMap::new();
    for (key, v) in map {
        if !valid_key(key) {
            return Err(EnforceError::invalid(
                field,
                format!("`{key}` is not a key name: letters, digits and `_`, not starting with a digit, at most {MAX_KEY_LEN}"),
            ));
        }
        let Value::String(text) = v else {
            return Err(EnforceError::invalid(
                field,
                format!("the value of `{key}` must be a string"),
            ));
        };
        if text.len() > MAX_VALUE_BYTES {
            return Err(EnforceError::invalid(
                field,
                format!(
                    "the value of `{key}` is over {} KiB",
                    MAX_VALUE_BYTES / 1024
                ),
            ));
        }
        out.insert(key.clone(), text.clone());
    }
    Ok(out)
}

fn check_count(entries: &BTreeMap<String, String>) -> EnforceResult<()> {
    if entries.len() > MAX_KEYS {
        return Err(EnforceError::invalid(
            "entries",
            format!("at most {MAX_KEYS} keys"),
        ));
    }
    Ok(())
}

/// The `${KEY}` references of a template.
pub fn template_keys(template: &str) -> Result<Vec<String>, String> {
    let mut keys = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("`{template}` opens `${{` without closing it"))?;
        let key = &after[..end];
        if !valid_key(key) {
            return Err(format!("`${{{key}}}` is not a key name"));
        }
        keys.push(key.to_owned());
        rest = &after[end + 1..];
    }
    Ok(keys)
}

fn header_name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

const METHODS: &[&str] = &["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

/// Checks proxy profiles against the entries they inject: shapes, host patterns, methods, path
/// prefixes, header names, templates naming existing keys, and no CR, LF or NUL in a value a
/// header or query template injects.
fn check_profiles(profiles: &Value, entries: &BTreeMap<String, String>) -> EnforceResult<Value> {
    let bad = |msg: String| EnforceError::invalid("profiles", msg);
    let Value::Object(all) = profiles else {
        return Err(bad(
            "must be an object of `NAME: {hosts, inject, ...}`".into()
        ));
    };
    for (name, profile) in all {
        if !valid_key(name)
            && !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(bad(format!("`{name}` is not a profile name")));
        }
        let Value::Object(p) = profile else {
            return Err(bad(format!("`{name}` must be an object")));
        };
        for key in p.keys() {
            if ![
                "hosts",
                "methods",
                "path_prefixes",
                "allow_http",
                "ports",
                "inject",
            ]
            .contains(&key.as_str())
            {
                return Err(bad(format!(
                    "`{name}.{key}` is not a profile field: hosts, methods, path_prefixes, allow_http, ports, inject"
                )));
            }
        }
        let hosts = p["hosts"]
            .as_array()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| {
                bad(format!(
                    "`{name}.hosts` must list at least one host pattern"
                ))
            })?;
        for h in hosts {
            let ok = h.as_str().is_some_and(|h| {
                let bare = h.strip_prefix("*.").unwrap_or(h);
                !bare.is_empty()
                    && bare.len() <= 253
                    && bare
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
            });
            if !ok {
                return Err(bad(format!(
                    "`{name}.hosts`: {h} is not a host name or `*.domain` pattern"
                )));
            }
        }
        if let Some(methods) = p.get("methods") {
            let ok = methods.as_array().is_some_and(|m| {
                m.iter()
                    .all(|m| m.as_str().is_some_and(|m| METHODS.contains(&m)))
            });
            if !ok {
                return Err(bad(format!(
                    "`{name}.methods` must list some of {}",
                    METHODS.join(", ")
                )));
            }
        }
        if let Some(prefixes) = p.get("path_prefixes") {
            let ok = prefixes.as_array().is_some_and(|m| {
                m.iter().all(|m| {
                    m.as_str()
                        .is_some_and(|m| m.starts_with('/') && !m.contains(['?', '#']))
                })
            });
            if !ok {
                return Err(bad(format!(
                    "`{name}.path_prefixes` must list paths starting with `/`"
                )));
            }
        }
        if let Some(ports) = p.get("ports") {
            let ok = ports.as_array().is_some_and(|ports| {
                ports
                    .iter()
                    .all(|n| n.as_u64().is_some_and(|n| (1..=65535).contains(&n)))
            });
            if !ok {
                return Err(bad(format!(
                    "`{name}.ports` must list port numbers (1 to 65535)"
                )));
            }
        }
        if p.get("allow_http").is_some_and(|v| !v.is_boolean()) {
            return Err(bad(format!("`{name}.allow_http` must be true or false")));
        }
        let Some(Value::Object(inject)) = p.get("inject") else {
            return Err(bad(format!(
                "`{name}.inject` must be an object with `headers` or `query`"
            )));
        };
        for (slot, templates) in inject {
            if slot != "headers" && slot != "query" {
                return Err(bad(format!(
                    "`{name}.inject.{slot}`: only `headers` and `query`"
                )));
            }
            let Value::Object(templates) = templates else {
                return Err(bad(format!("`{name}.inject.{slot}` must be an object")));
            };
            for (target, template) in templates {
                if slot == "headers" && !header_name_ok(target) {
                    return Err(bad(format!(
                        "`{name}.inject.headers`: `{target}` is not a header name"
                    )));
                }
                let Some(template) = template.as_str() else {
                    return Err(bad(format!(
                        "`{name}.inject.{slot}.{target}` must be a string"
                    )));
                };
                for key in template_keys(template).map_err(bad)? {
                    let Some(value) = entries.get(&key) else {
                        return Err(bad(format!(
                            "`{name}.inject.{slot}.{target}` uses `${{{key}}}`, which is not an entry"
                        )));
                    };
                    if value.contains(['\r', '\n', '\0']) {
                        return Err(EnforceError::invalid(
                            "entries",
                            format!("`{key}` holds CR, LF or NUL and cannot be injected into `{name}.inject.{slot}.{target}`"),
                        ));
                    }
                }
            }
        }
    }
    Ok(profiles.clone())
}

/// The set's data key, opened with the master key.
fn data_key(ctx: &Context, set: &SecretSetRecord) -> EnforceResult<DataKey> {
    DataKey::unwrap_with(
        &ctx.master_key,
        &set.data_key,
        &dek_context(&set.workspace_id, &set.id),
    )
    .map_err(EnforceError::Internal)
}

fn seal_entries(
    key: &DataKey,
    set: &SecretSetRecord,
    version: i64,
    entries: &BTreeMap<String, String>,
) -> EnforceResult<String> {
    let json = serde_json::to_vec(entries).map_err(|e| EnforceError::Internal(e.to_string()))?;
    key.seal(&json, &entries_context(&set.workspace_id, &set.id, version))
        .map_err(EnforceError::Internal)
}

/// The entries of one version, opened.
pub fn open_entries(
    ctx: &Context,
    set: &SecretSetRecord,
    version: &SecretVersion,
) -> EnforceResult<BTreeMap<String, String>> {
    let key = data_key(ctx, set)?;
    let plain = key
        .open(
            &version.sealed,
            &entries_context(&set.workspace_id, &set.id, version.version),
        )
        .map_err(EnforceError::Internal)?;
    serde_json::from_slice(&plain).map_err(|e| EnforceError::Internal(e.to_string()))
}

fn set_wire(set: &SecretSetRecord, current: Option<&SecretVersion>) -> api::SecretSetInfo {
    api::SecretSetInfo {
        secret_set_id: set.id.clone(),
        number: set.number,
        name: set.name.clone(),
        provider: set.provider.clone(),
        environment: set.environment.clone(),
        version: set.current_version,
        keys: current.map(|v| v.keys.clone()).unwrap_or_default(),
        profiles: current
            .map(|v| v.profiles.clone())
            .unwrap_or_else(|| json!({})),
        created_at: iso(set.created_at),
        updated_at: iso(set.updated_at),
        deleted_at: set.deleted_at.map(iso),
        destroyed_at: set.destroyed_at.map(iso),
    }
}

async fn wire_of(ctx: &Context, set: &SecretSetRecord) -> EnforceResult<api::SecretSetInfo> {
    let current = ctx
        .store
        .secret_version(&set.id, set.current_version)
        .await?;
    Ok(set_wire(set, current.as_ref()))
}

fn event(
    event_type: &str,
    action: &str,
    set: &SecretSetRecord,
    actor: &Actor,
    mut details: Value,
) -> crate::store::AuditRecord {
    details["secret_set_id"] = json!(set.id);
    details["number"] = json!(set.number);
    audit::state_change(
        event_type,
        action,
        Some(&set.workspace_id),
        None,
        actor,
        details,
    )
}

/// A new secret set with `entries` as its version 1.
pub async fn create_set(
    ctx: &Context,
    workspace_id: &str,
    actor: &Actor,
    req: api::CreateSecretSetRequest,
) -> EnforceResult<api::SecretSetInfo> {
    let entries = entries_of("entries", &req.entries)?;
    create(
        ctx,
        workspace_id,
        actor,
        (&req.name, &req.provider, &req.environment),
        entries,
        req.profiles,
    )
    .await
}

/// A new secret set from dotenv text.
pub async fn import_set(
    ctx: &Context,
    workspace_id: &str,
    actor: &Actor,
    req: api::ImportSecretSetRequest,
) -> EnforceResult<api::SecretSetInfo> {
    let mut entries = BTreeMap::new();
    for (n, item) in dotenvy::from_read_iter(req.dotenv.as_bytes()).enumerate() {
        let (key, value) =
            item.map_err(|e| EnforceError::invalid("dotenv", format!("entry {}: {e}", n + 1)))?;
        if !valid_key(&key) {
            return Err(EnforceError::invalid(
                "dotenv",
                format!("`{key}` is not a key name"),
            ));
        }
        if value.len() > MAX_VALUE_BYTES {
            return Err(EnforceError::invalid(
                "dotenv",
                format!(
                    "the value of `{key}` is over {} KiB",
                    MAX_VALUE_BYTES / 1024
                ),
            ));
        }
        entries.insert(key, value);
    }
    create(
        ctx,
        workspace_id,
        actor,
        (&req.name, &req.provider, &req.environment),
        entries,
        req.profiles,
    )
    .await
}

async fn create(
    ctx: &Context,
    workspace_id: &str,
    actor: &Actor,
    (name, provider, environment): (&str, &str, &str),
    entries: BTreeMap<String, String>,
    profiles: Option<Value>,
) -> EnforceResult<api::SecretSetInfo> {
    let name = label("name", name, 100)?;
    let provider = label("provider", provider, 64)?;
    let environment = label("environment", environment, 64)?;
    check_count(&entries)?;
    let profiles = check_profiles(&profiles.unwrap_or_else(|| json!({})), &entries)?;
    let now = now_ms();
    let id = ids::new_id(SECRET_SET);
    let key = DataKey::generate();
    let mut set = SecretSetRecord {
        id: id.clone(),
        workspace_id: workspace_id.to_owned(),
        number: 0,
        name,
        provider,
        environment,
        current_version: 1,
        data_key: key
            .wrap(&ctx.master_key, &dek_context(workspace_id, &id))
            .map_err(EnforceError::Internal)?,
        key_version: 1,
        created_at: now,
        updated_at: now,
        deleted_at: None,
        destroyed_at: None,
    };
    let version = SecretVersion {
        secret_set_id: id.clone(),
        version: 1,
        sealed: seal_entries(&key, &set, 1, &entries)?,
        keys: entries.keys().cloned().collect(),
        profiles,
        author: actor.label(),
        created_at: now,
    };
    let change = Change::new(VaultOp::CreateSet {
        set: Box::new(set.clone()),
        version: Box::new(version.clone()),
    })
    .audited(event(
        "vault.secret_set.created",
        "create",
        &set,
        actor,
        json!({ "name": set.name, "version": 1, "keys": version.keys }),
    ));
    match ctx.writer.commit(change).await {
        Ok(crate::store::Applied::Count(number)) => set.number = number,
        Ok(_) => {}
        Err(StoreError::Conflict(_)) => {
            return Err(EnforceError::conflict(
                "secret_set_exists",
                "a secret set of this workspace has that name",
            ))
        }
        Err(e) => return Err(e.into()),
    }
    Ok(set_wire(&set, Some(&version)))
}

pub async fn list_sets(
    ctx: &Context,
    workspace_id: &str,
    include_deleted: bool,
) -> EnforceResult<Vec<api::SecretSetInfo>> {
    let mut out = Vec::new();
    for set in ctx.store.secret_sets(workspace_id, include_deleted).await? {
        out.push(wire_of(ctx, &set).await?);
    }
    Ok(out)
}

pub async fn get_set(
    ctx: &Context,
    workspace_id: &str,
    set: &SetRef,
) -> EnforceResult<api::SecretSetInfo> {
    let found = ctx
        .store
        .secret_set(workspace_id, set)
        .await?
        .ok_or_else(unknown_set)?;
    wire_of(ctx, &found).await
}

/// Commits `entries` and `profiles` as the set's next version.
async fn add_version(
    ctx: &Context,
    set: &SecretSetRecord,
    actor: &Actor,
    expected: Option<i64>,
    entries: BTreeMap<String, String>,
    profiles: Value,
    (event_type, action, mut details): (&str, &str, Value),
) -> EnforceResult<api::SecretSetInfo> {
    if expected.is_some_and(|e| e != set.current_version) {
        return Err(version_conflict(set.current_version));
    }
    check_count(&entries)?;
    let profiles = check_profiles(&profiles, &entries)?;
    let key = data_key(ctx, set)?;
    let next = set.current_version + 1;
    let now = now_ms();
    let version = SecretVersion {
        secret_set_id: set.id.clone(),
        version: next,
        sealed: seal_entries(&key, set, next, &entries)?,
        keys: entries.keys().cloned().collect(),
        profiles,
        author: actor.label(),
        created_at: now,
    };
    details["version"] = json!(next);
    details["keys"] = json!(version.keys);
    let change = Change::new(VaultOp::AddVersion {
        workspace_id: set.workspace_id.clone(),
        secret_set_id: set.id.clone(),
        expected_version: set.current_version,
        version: Box::new(version.clone()),
        keep_from: next - ctx.config.vault_history + 1,
    })
    .audited(event(event_type, action, set, actor, details));
    match ctx.writer.commit(change).await {
        Ok(_) => {}
        Err(StoreError::Conflict(_)) => {
            let now_at = ctx
                .store
                .secret_set(&set.workspace_id, &SetRef::Number(set.number))
                .await?
                .map_or(set.current_version, |s| s.current_version);
            return Err(version_conflict(now_at));
        }
        Err(e) => return Err(e.into()),
    }
    let updated = SecretSetRecord {
        current_version: next,
        updated_at: now,
        ..set.clone()
    };
    Ok(set_wire(&updated, Some(&version)))
}

fn version_conflict(current: i64) -> EnforceError {
    EnforceError::conflict(
        "version_conflict",
        format!("the secret set is at version {current}; read it again and retry with that `expected_version`"),
    )
}

/// A new version from `req` (see [`api::UpdateSecretSetRequest`]).
pub async fn update_set(
    ctx: &Context,
    workspace_id: &str,
    actor: &Actor,
    set: &SetRef,
    req: api::UpdateSecretSetRequest,
) -> EnforceResult<api::SecretSetInfo> {
    let set = find_set(ctx, workspace_id, set, false).await?;
    if req.entries.is_some() && (req.set.is_some() || req.unset.is_some()) {
        return Err(EnforceError::invalid(
            "entries",
            "give `entries` (every entry) or `set`/`unset` (some), not both",
        ));
    }
    let current = ctx
        .store
        .secret_version(&set.id, set.current_version)
        .await?
        .ok_or_else(|| EnforceError::Internal("the current version is missing".into()))?;
    let mut entries = match &req.entries {
        Some(all) => entries_of("entries", all)?,
        None => open_entries(ctx, &set, &current)?,
    };
    if let Some(more) = &req.set {
        entries.extend(entries_of("set", more)?);
    }
    for key in req.unset.iter().flatten() {
        entries.remove(key);
    }
    let profiles = req.profiles.unwrap_or_else(|| current.profiles.clone());
    add_version(
        ctx,
        &set,
        actor,
        req.expected_version,
        entries,
        profiles,
        ("vault.secret_set.updated", "update", json!({})),
    )
    .await
}

/// The version `version`'s entries and profiles as the set's new version.
pub async fn rollback(
    ctx: &Context,
    workspace_id: &str,
    actor: &Actor,
    set: &SetRef,
    req: api::SecretRollbackRequest,
) -> EnforceResult<api::SecretSetInfo> {
    let set = find_set(ctx, workspace_id, set, false).await?;
    let earlier = ctx
        .store
        .secret_version(&set.id, req.version)
        .await?
        .ok_or_else(|| {
            EnforceError::not_found(
                "unknown_version",
                "no such version of this secret set (only the last versions are kept)",
            )
        })?;
    let entries = open_entries(ctx, &set, &earlier)?;
    add_version(
        ctx,
        &set,
        actor,
        req.expected_version,
        entries,
        earlier.profiles.clone(),
        (
            "vault.secret_set.rolled_back",
            "rollback",
            json!({ "rolled_back_to": req.version }),
        ),
    )
    .await
}

pub async fn versions(
    ctx: &Context,
    workspace_id: &str,
    set: &SetRef,
) -> EnforceResult<Vec<api::SecretVersionItem>> {
    let set = find_set(ctx, workspace_id, set, true).await?;
    Ok(ctx
        .store
        .secret_versions(&set.id)
        .await?
        .into_iter()
        .map(|v| api::SecretVersionItem {
            version: v.version,
            keys: v.keys,
            author: v.author,
            created_at: iso(v.created_at),
        })
        .collect())
}

/// What `delete`, `undelete` and `destroy` do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    Delete,
    Undelete,
    Destroy,
}

pub async fn lifecycle(
    ctx: &Context,
    workspace_id: &str,
    actor: &Actor,
    set: &SetRef,
    what: Lifecycle,
) -> EnforceResult<api::SecretSetInfo> {
    let found = find_set(ctx, workspace_id, set, true).await?;
    let now = now_ms();
    let (op, event_type, action) = match what {
        Lifecycle::Delete => (
            VaultOp::SetDeleted {
                workspace_id: workspace_id.to_owned(),
                secret_set_id: found.id.clone(),
                deleted_at: Some(found.deleted_at.unwrap_or(now)),
                at: now,
            },
            "vault.secret_set.deleted",
            "delete",
        ),
        Lifecycle::Undelete => (
            VaultOp::SetDeleted {
                workspace_id: workspace_id.to_owned(),
                secret_set_id: found.id.clone(),
                deleted_at: None,
                at: now,
            },
            "vault.secret_set.undeleted",
            "undelete",
        ),
        Lifecycle::Destroy => (
            VaultOp::Destroy {
                workspace_id: workspace_id.to_owned(),
                secret_set_id: found.id.clone(),
                at: now,
            },
            "vault.secret_set.destroyed",
            "destroy",
        ),
    };
    let change = Change::new(op).audited(event(event_type, action, &found, actor, json!({})));
    match ctx.writer.commit(change).await {
        Ok(_) => {}
        Err(StoreError::NotFound) => return Err(unknown_set()),
        Err(e) => return Err(e.into()),
    }
    let after = ctx
        .store
        .secret_set(workspace_id, &SetRef::Number(found.number))
        .await?
        .ok_or_else(unknown_set)?;
    wire_of(ctx, &after).await
}

fn grant_wire(g: &GrantRecord, number: i64) -> api::GrantInfo {
    api::GrantInfo {
        grant_id: g.id.clone(),
        secret_set_id: g.secret_set_id.clone(),
        number,
        agent_id: g.agent_id.clone(),
        group: g.group_name.clone(),
        allowed_keys: match &g.allowed_keys {
            None => json!("*"),
            Some(keys) => json!(keys),
        },
        allowed_actions: VaultAction::names(&g.allowed_actions),
        expires_at: g.expires_at.map(iso),
        created_at: iso(g.created_at),
        created_by: g.created_by.clone(),
        revoked_at: g.revoked_at.map(iso),
    }
}

pub async fn create_grant(
    ctx: &Context,
    workspace_id: &str,
    actor: &Actor,
    req: api::CreateGrantRequest,
) -> EnforceResult<api::GrantInfo> {
    let set = find_set(ctx, workspace_id, &set_ref(&req.secret_set_id)?, false).await?;
    let agent_id = req.agent_id.filter(|a| !a.is_empty());
    let group = req.group.filter(|g| !g.trim().is_empty());
    match (&agent_id, &group) {
        (Some(_), Some(_)) => {
            return Err(EnforceError::invalid(
                "agent_id",
                "give `agent_id` or `group`, not both",
            ))
        }
        (None, None) => return Err(EnforceError::missing("agent_id")),
        (Some(agent), None) => {
            let known = ctx
                .store
                .agent(agent)
                .await?
                .is_some_and(|a| a.workspace_id.as_deref() == Some(workspace_id));
            if !known {
                return Err(EnforceError::not_found(
                    "unknown_agent",
                    "no such agent in this workspace",
                ));
            }
        }
        (None, Some(g)) => {
            label("group", g, 200)?;
        }
    }
    let allowed_keys = match &req.allowed_keys {
        Value::String(s) if s == "*" => None,
        Value::Array(items) if !items.is_empty() => {
            let mut keys = Vec::new();
            for item in items {
                match item.as_str() {
                    Some(k) if valid_key(k) => keys.push(k.to_owned()),
                    _ => {
                        return Err(EnforceError::invalid(
                            "allowed_keys",
                            "must be \"*\" or a list of key names",
                        ))
                    }
                }
            }
            keys.sort();
            keys.dedup();
            Some(keys)
        }
        Value::Null => return Err(EnforceError::missing("allowed_keys")),
        _ => {
            return Err(EnforceError::invalid(
                "allowed_keys",
                "must be \"*\" or a non-empty list of key names",
            ))
        }
    };
    let mut actions: Vec<VaultAction> = Vec::new();
    for a in &req.allowed_actions {
        let action = VaultAction::parse(a).ok_or_else(|| {
            EnforceError::invalid(
                "allowed_actions",
                format!(
                    "`{a}` is not a vault action: {}",
                    VaultAction::listed(&VaultAction::ALL)
                ),
            )
        })?;
        if !actions.contains(&action) {
            actions.push(action);
        }
    }
    if actions.is_empty() {
        return Err(EnforceError::missing("allowed_actions"));
    }
    let now = now_ms();
    let expires_at = match req.expires_at.as_deref().filter(|e| !e.is_empty()) {
        None => None,
        Some(text) => match parse_iso(text) {
            Some(at) if at > now => Some(at),
            Some(_) => return Err(EnforceError::invalid("expires_at", "must be in the future")),
            None => {
                return Err(EnforceError::invalid(
                    "expires_at",
                    "must be an RFC 3339 time",
                ))
            }
        },
    };
    let grant = GrantRecord {
        id: ids::new_id(GRANT),
        workspace_id: workspace_id.to_owned(),
        secret_set_id: set.id.clone(),
        agent_id,
        group_name: group,
        allowed_keys,
        allowed_actions: actions,
        expires_at,
        created_at: now,
        created_by: actor.label(),
        revoked_at: None,
    };
    let wire = grant_wire(&grant, set.number);
    let mut record = event(
        "vault.grant.created",
        "grant",
        &set,
        actor,
        json!({
            "grant_id": grant.id, "group": grant.group_name,
            "allowed_keys": wire.allowed_keys, "allowed_actions": grant.allowed_actions,
            "expires_at": wire.expires_at,
        }),
    );
    record.agent_id = grant.agent_id.clone();
    ctx.writer
        .commit(Change::new(VaultOp::CreateGrant(Box::new(grant))).audited(record))
        .await?;
    Ok(wire)
}

pub async fn list_grants(
    ctx: &Context,
    workspace_id: &str,
    set: Option<&str>,
) -> EnforceResult<Vec<api::GrantInfo>> {
    let only = match set.filter(|s| !s.is_empty()) {
        Some(text) => Some(
            find_set(ctx, workspace_id, &set_ref_text(text)?, true)
                .await?
                .id,
        ),
        None => None,
    };
    let numbers: BTreeMap<String, i64> = ctx
        .store
        .secret_sets(workspace_id, true)
        .await?
        .into_iter()
        .map(|s| (s.id, s.number))
        .collect();
    Ok(ctx
        .store
        .vault_grants(workspace_id, only.as_deref())
        .await?
        .iter()
        .map(|g| grant_wire(g, numbers.get(&g.secret_set_id).copied().unwrap_or(0)))
        .collect())
}

pub async fn revoke_grant(
    ctx: &Context,
    workspace_id: &str,
    actor: &Actor,
    grant_id: &str,
) -> EnforceResult<()> {
    let unknown =
        || EnforceError::not_found("unknown_grant", "no such live grant in this workspace");
    if !ids::has_shape(grant_id, GRANT) {
        return Err(unknown());
    }
    // The set it was of, for the set's audit trail.
    let grant = ctx
        .store
        .vault_grants(workspace_id, None)
        .await?
        .into_iter()
        .find(|g| g.id == grant_id)
        .ok_or_else(unknown)?;
    let record = audit::state_change(
        "vault.grant.revoked",
        "revoke",
        Some(workspace_id),
        grant.agent_id.as_deref(),
        actor,
        json!({ "grant_id": grant_id, "secret_set_id": grant.secret_set_id }),
    );
    match ctx
        .writer
        .commit(
            Change::new(VaultOp::RevokeGrant {
                workspace_id: workspace_id.to_owned(),
                grant_id: grant_id.to_owned(),
                at: now_ms(),
            })
            .audited(record),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(StoreError::NotFound) => Err(unknown()),
        Err(e) => Err(e.into()),
    }
}

/// The vault's audit events of one set (or of every set), newest first: `limit` after
/// `after`, plus one to tell whether there is a next page.
pub async fn audit_of(
    ctx: &Context,
    workspace_id: &str,
    set: Option<&str>,
    after: Option<crate::store::Cursor>,
    limit: i64,
) -> EnforceResult<Vec<crate::store::AuditRecord>> {
    let secret_set_id = match set.filter(|s| !s.is_empty()) {
        Some(text) => Some(any_or_destroyed(ctx, workspace_id, &set_ref_text(text)?).await?),
        None => None,
    };
    Ok(ctx
        .store
        .audit_events(&crate::store::AuditQuery {
            workspace_id: workspace_id.to_owned(),
            event_type_prefix: Some("vault.".into()),
            secret_set_id,
            after,
            limit,
            ..Default::default()
        })
        .await?)
}

/// The id of a set of the workspace, destroyed ones included (their trail outlives them).
async fn any_or_destroyed(
    ctx: &Context,
    workspace_id: &str,
    set: &SetRef,
) -> EnforceResult<String> {
    Ok(ctx
        .store
        .secret_set(workspace_id, set)
        .await?
        .ok_or_else(unknown_set)?
        .id)
}

/// True when `master` opens the data key `wrapped` of secret set `set_id` in `workspace_id` (as
/// stored).
fn data_key_opens(master: &MasterKey, workspace_id: &str, set_id: &str, wrapped: &str) -> bool {
    DataKey::unwrap_with(master, wrapped, &dek_context(workspace_id, set_id)).is_ok()
}

/// Everything the store keeps sealed with the master key: the JWT signing keys (retired ones
/// too), the data keys of the secret sets not destroyed, and the audit sinks' secrets.
pub async fn sealed_keys(store: &dyn Store) -> Result<SealedKeys, StoreError> {
    Ok(SealedKeys {
        signing_keys: store
            .signing_keys(0)
            .await?
            .into_iter()
            .map(|k| (k.kid, k.private_key.expose().to_owned()))
            .collect(),
        data_keys: store
            .all_secret_sets()
            .await?
            .into_iter()
            .map(|s| (s.workspace_id, s.id, s.data_key))
            .collect(),
        sink_secrets: store
            .all_sinks()
            .await?
            .into_iter()
            .map(|s| (s.id, s.secret_sealed))
            .collect(),
    })
}

/// The sealed items `master` does not open, each named for a message (``the JWT signing key
/// `acp-...` ``): checked at start, so that a server with another master key refuses to start
/// rather than fail on first use, and by `acp admin restore` before it puts a backup in place.
pub fn unopened(master: &MasterKey, sealed: &SealedKeys) -> Vec<String> {
    let keys = sealed
        .signing_keys
        .iter()
        .filter(|(kid, key)| master.open(key, kid).is_err())
        .map(|(kid, _)| format!("the JWT signing key `{kid}`"));
    let sets = sealed
        .data_keys
        .iter()
        .filter(|(ws, set, wrapped)| !data_key_opens(master, ws, set, wrapped))
        .map(|(_, set, _)| format!("the data key of vault secret set `{set}`"));
    let sinks = sealed
        .sink_secrets
        .iter()
        .filter(|(id, secret)| {
            master
                .open(secret, &crate::audit::delivery::secret_context(id))
                .is_err()
        })
        .map(|(id, _)| format!("the signing secret of audit sink `{id}`"));
    keys.chain(sets).chain(sinks).collect()
}

/// What `acp admin vault rewrap` did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Rewrapped {
    /// Data keys sealed again with the new key.
    pub rewrapped: usize,
    /// Data keys already sealed with the new key.
    pub current: usize,
    /// JWT signing keys sealed again with the new key (the master key seals them too).
    pub signing_keys: usize,
    /// Audit sinks' signing secrets sealed again with the new key.
    pub sink_secrets: usize,
}

/// Seals every data key, and every JWT signing key, that `old` opens again with `new` (after a
/// master-key rotation). A key neither opens is an error naming it; nothing is half-done per
/// key (each re-wrap is one compare-and-set write), and running it again finishes the rest.
pub async fn rewrap(
    store: &dyn Store,
    old: &MasterKey,
    new: &MasterKey,
) -> Result<Rewrapped, String> {
    let mut done = Rewrapped::default();
    let sets = store.all_secret_sets().await.map_err(|e| e.to_string())?;
    for s in sets {
        let context = dek_context(&s.workspace_id, &s.id);
        if DataKey::unwrap_with(new, &s.data_key, &context).is_ok() {
            done.current += 1;
            continue;
        }
        let key = DataKey::unwrap_with(old, &s.data_key, &context).map_err(|_| {
            format!(
                "the data key of secret set {} opens with neither the old nor the new master key",
                s.id
            )
        })?;
        let wrapped = key.wrap(new, &context)?;
        crate::store::apply_one(
            store,
            Change::new(VaultOp::Rewrap {
                secret_set_id: s.id.clone(),
                previous: s.data_key.clone(),
                data_key: wrapped,
                key_version: s.key_version + 1,
            }),
        )
        .await
        .map_err(|e| e.to_string())?;
        done.rewrapped += 1;
    }
    // The JWT issuer's private keys are sealed with the master key as well.
    let keys = store.signing_keys(0).await.map_err(|e| e.to_string())?;
    for k in keys {
        if new.open(k.private_key.expose(), &k.kid).is_ok() {
            continue;
        }
        let seed = old.open(k.private_key.expose(), &k.kid).map_err(|_| {
            format!(
                "the signing key {} opens with neither the old nor the new master key",
                k.kid
            )
        })?;
        let sealed = new.seal(&seed, &k.kid)?;
        crate::store::apply_one(
            store,
            Change::new(crate::store::CredentialOp::ResealSigningKey {
                kid: k.kid.clone(),
                previous: k.private_key.clone(),
                sealed: crate::secret::Secret::new(sealed),
            }),
        )
        .await
        .map_err(|e| e.to_string())?;
        done.signing_keys += 1;
    }
    // And the audit sinks' signing secrets.
    let sinks = store.all_sinks().await.map_err(|e| e.to_string())?;
    for sink in sinks {
        let context = crate::audit::delivery::secret_context(&sink.id);
        if new.open(&sink.secret_sealed, &context).is_ok() {
            continue;
        }
        let secret = old.open(&sink.secret_sealed, &context).map_err(|_| {
            format!(
                "the secret of audit sink {} opens with neither the old nor the new master key",
                sink.id
            )
        })?;
        let sealed = new.seal(&secret, &context)?;
        crate::store::apply_one(
            store,
            Change::new(crate::store::AuditOp::ResealSinkSecret {
                sink_id: sink.id.clone(),
                previous: sink.secret_sealed.clone(),
                sealed,
            }),
        )
        .await
        .map_err(|e| e.to_string())?;
        done.sink_secrets += 1;
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_entries_open_only_in_their_place() {
        let master = MasterKey::generate();
        let key = DataKey::generate();
        let wrapped = key.wrap(&master, &dek_context("ws_a", "ss_a")).unwrap();
        let sealed = key
            .seal(b"{\"K\":\"v\"}", &entries_context("ws_a", "ss_a", 1))
            .unwrap();
        assert!(!sealed.contains("\"v\""));
        let opened = DataKey::unwrap_with(&master, &wrapped, &dek_context("ws_a", "ss_a")).unwrap();
        assert_eq!(
            opened
                .open(&sealed, &entries_context("ws_a", "ss_a", 1))
                .unwrap(),
            b"{\"K\":\"v\"}"
        );
        // Another version, set or workspace: the associated data differs, nothing opens.
        for (ws, set, v) in [
            ("ws_a", "ss_a", 2),
            ("ws_a", "ss_b", 1),
            ("ws_b", "ss_a", 1),
        ] {
            assert!(opened.open(&sealed, &entries_context(ws, set, v)).is_err());
        }
        assert!(DataKey::unwrap_with(&master, &wrapped, &dek_context("ws_a", "ss_b")).is_err());
        assert!(DataKey::unwrap_with(
            &MasterKey::generate(),
            &wrapped,
            &dek_context("ws_a", "ss_a")
        )
        .is_err());
    }

    #[test]
    fn templates_name_their_keys() {
        assert_eq!(
            template_keys("Bearer ${STRIPE_KEY}").unwrap(),
            vec!["STRIPE_KEY".to_owned()]
        );
        assert_eq!(template_keys("${A}:${B}").unwrap(), vec!["A", "B"]);
        assert!(template_keys("${A").is_err());
        assert!(template_keys("${1A}").is_err());
    }

    #[test]
    fn profiles_are_checked_against_the_entries() {
        let entries: BTreeMap<String, String> = [
            ("KEY".to_owned(), "sk_live".to_owned()),
            ("PEM".to_owned(), "line1\nline2".to_owned()),
        ]
        .into();
        let ok = json!({"stripe": {"hosts": ["api.stripe.com", "*.stripe.com"], "methods": ["GET", "POST"],
            "path_prefixes": ["/v1/"], "inject": {"headers": {"Authorization": "Bearer ${KEY}"}}}});
        assert!(check_profiles(&ok, &entries).is_ok());
        let cases = [
            json!({"p": {"hosts": [], "inject": {}}}),
            json!({"p": {"hosts": ["a b"], "inject": {}}}),
            json!({"p": {"hosts": ["a.com"], "inject": {"headers": {"Bad Header": "${KEY}"}}}}),
            json!({"p": {"hosts": ["a.com"], "inject": {"headers": {"X": "${NOPE}"}}}}),
            json!({"p": {"hosts": ["a.com"], "inject": {"headers": {"X": "${PEM}"}}}}),
            json!({"p": {"hosts": ["a.com"], "methods": ["FETCH"], "inject": {}}}),
            json!({"p": {"hosts": ["a.com"], "inject": {"body": {}}}}),
        ];
        for case in cases {
            assert!(check_profiles(&case, &entries).is_err(), "{case}");
        }
    }
}
