//! The console's workspace page: the selected workspace's members and roles, its API keys and
//! its approval settings; the person's own personal access tokens; and the person's
//! workspaces, with a form to create one and a button to switch to each.
//!
//! Owners and admins change members, keys and settings; members and approvers read them (and a
//! forged POST from them is refused by the server: `insufficient_role`). Tokens belong to the
//! person, so every role manages their own. Each form goes through the same use case as its
//! JSON API route, audited with the person as actor. A new API key or token is shown exactly
//! once: on the page that answers the POST which created it (status 200, `no-store`), never
//! through a redirect, never kept in the session.

use askama::Template;
use axum::extract::{Path, State};
use axum::response::Response;
use serde::Deserialize;

use crate::api;
use crate::context::{Context, SharedContext};
use crate::domain::access::{Need, KEY_SCOPES, TOKEN_SCOPES};
use crate::domain::Role;
use crate::enforce::approvals;
use crate::error::ApiError;
use crate::identity::accounts::{self, Principal};
use crate::store::Cursor;
use crate::time::iso;

use super::extract::{NotLoggedIn, Nothing, PageQuery, PageResult, Person, Posted, Sent};
use super::{base, see_other, shell, Section, Shell, PAGE_ROWS};
use crate::http::operator::{person_requires, unscoped_required};
use crate::http::pages::render;

/// The roles a member may be given, as the form offers them.
const ROLES: [&str; 4] = ["member", "approver", "admin", "owner"];

/// The lifetimes the token form offers, in days (the use case takes 1 to 365).
const TOKEN_DAYS: [i64; 4] = [7, 30, 90, 365];

/// What each change says when it is done (the `done` of the page's query).
const NOTICES: [(&str, &str); 8] = [
    ("member", "Member saved: they have the role shown below."),
    (
        "removed",
        "Member removed: they no longer belong to this workspace.",
    ),
    (
        "key_revoked",
        "API key revoked: requests with it fail from now on.",
    ),
    (
        "token_revoked",
        "Access token revoked: requests with it fail from now on.",
    ),
    ("settings", "Approval settings saved."),
    (
        "retention",
        "Retention saved: older rows are pruned within the next minutes.",
    ),
    (
        "workspace",
        "Workspace created: you are its owner and it is selected.",
    ),
    ("nothing", "Nothing to change."),
];

fn notice(done: &str) -> Option<&'static str> {
    NOTICES.iter().find(|(k, _)| *k == done).map(|(_, n)| *n)
}

fn settings_href(base: &str, done: &str) -> String {
    format!("{base}/dashboard/settings?done={done}")
}

#[derive(Template)]
#[template(path = "workspace.html", config = "src/http/templates/askama.toml")]
struct WorkspacePage {
    shell: Shell,
    done: Option<&'static str>,
    /// The selected workspace's parts, when one is selected.
    workspace: Option<WorkspaceParts>,
    tokens: Listed<TokenRow>,
    key_scopes: &'static [&'static str],
    token_scopes: &'static [&'static str],
    token_days: &'static [i64],
}

struct WorkspaceParts {
    id: String,
    name: String,
    /// Whether the role may change members, keys and settings (the server checks again on
    /// every POST).
    can_change: bool,
    /// The roles the person may give (only owners make owners).
    grantable: Vec<&'static str>,
    members: Listed<MemberRow>,
    keys: Listed<KeyRow>,
    require_member_approval: bool,
    /// Days kept, as the form shows them (empty: everything is kept).
    audit_retention_days: String,
    heartbeat_retention_days: String,
    sinks: Vec<crate::api::AuditSink>,
}

/// One page of a list, and the links to its first and next pages.
struct Listed<T> {
    rows: Vec<T>,
    first_href: Option<String>,
    next_href: Option<String>,
}

struct MemberRow {
    /// When the account was made (the listing's order).
    at: i64,
    user_id: String,
    email: String,
    role: &'static str,
    since: String,
    is_me: bool,
    remove_href: String,
}

struct KeyRow {
    at: i64,
    id: String,
    name: String,
    mode: String,
    last_four: String,
    scopes: String,
    created: String,
    last_used: String,
    revoked: bool,
    revoke_href: String,
}

struct TokenRow {
    at: i64,
    id: String,
    name: String,
    last_four: String,
    scopes: String,
    created: String,
    expires: String,
    last_used: String,
    state: &'static str,
    revoke_href: String,
}

/// The cursors of the page's three lists, as given in its query.
#[derive(Default)]
struct Cursors {
    members: Option<String>,
    keys: Option<String>,
    tokens: Option<String>,
}

/// The page's URL with one list's cursor (and that list's anchor).
fn list_href(base: &str, list: &str, cursor: Option<&str>) -> String {
    match cursor {
        Some(c) => {
            let query = form_urlencoded::Serializer::new(String::new())
                .append_pair(list, c)
                .finish();
            format!("{base}/dashboard/settings?{query}#{list}")
        }
        None => format!("{base}/dashboard/settings#{list}"),
    }
}

/// One page of `rows`, newest first (by `key`: creation time, then id), after `cursor`.
fn page_of<T>(
    mut rows: Vec<T>,
    cursor: Option<&str>,
    base: &str,
    list: &str,
    key: impl Fn(&T) -> (i64, String),
) -> Result<Listed<T>, ApiError> {
    let after: Option<Cursor> = crate::http::page_cursor(cursor)?;
    rows.sort_by_key(|r| std::cmp::Reverse(key(r)));
    if let Some(after) = after {
        let after = (after.created_at, after.id);
        rows.retain(|r| key(r) < after);
    }
    let next = crate::http::next_cursor(&mut rows, PAGE_ROWS, &key);
    Ok(Listed {
        rows,
        first_href: cursor
            .filter(|c| !c.is_empty())
            .map(|_| list_href(base, list, None)),
        next_href: next.map(|c| list_href(base, list, Some(&c))),
    })
}

fn scopes_text(scopes: &[String]) -> String {
    if scopes.is_empty() {
        "all".into()
    } else {
        scopes.join(", ")
    }
}

/// The workspace page: members, API keys and approval settings of the selected workspace, the
/// person's access tokens and workspaces.
#[utoipa::path(get, path = "/dashboard/settings", tag = "dashboard",
    params(("members" = Option<String>, Query, description = "the members' next page"),
        ("keys" = Option<String>, Query, description = "the API keys' next page"),
        ("tokens" = Option<String>, Query, description = "the access tokens' next page"),
        ("done" = Option<String>, Query, description = "the change just made, for its notice")),
    responses((status = 200, description = "HTML page of the workspace"), NotLoggedIn,
        (status = 400, description = "HTML page: `invalid_cursor`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn workspace_page(
    State(ctx): State<SharedContext>,
    PageQuery(query): PageQuery<WorkspaceQuery>,
    Person(principal): Person,
) -> PageResult {
    let principal = &principal;
    Ok(overview(&ctx, principal, query).await?)
}

/// The page's query: where each of its lists is (`members`, `keys`, `tokens`: cursors), and
/// `done`, the change just made.
#[derive(Deserialize)]
pub struct WorkspaceQuery {
    members: Option<String>,
    keys: Option<String>,
    tokens: Option<String>,
    done: Option<String>,
}

async fn overview(
    ctx: &Context,
    principal: &Principal,
    query: WorkspaceQuery,
) -> Result<Response, ApiError> {
    let given = |v: Option<String>| v.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
    let done = given(query.done).as_deref().and_then(notice);
    let cursors = Cursors {
        members: given(query.members),
        keys: given(query.keys),
        tokens: given(query.tokens),
    };
    let shell = shell(ctx, principal, Section::Workspace).await?;
    let base = shell.base.clone();
    // Without a selected workspace the person still has their tokens and workspaces.
    let workspace = match person_requires(principal, Need::WorkspaceRead) {
        Ok(()) => Some(workspace_parts(ctx, principal, &cursors, &base).await?),
        Err(_) if principal.workspace_id.is_none() || principal.role.is_none() => None,
        Err(err) => return Err(err),
    };
    let tokens = ctx
        .store
        .pats(&principal.user.id)
        .await?
        .iter()
        .map(|p| {
            let wire = accounts::pat_wire(p);
            TokenRow {
                at: p.created_at,
                revoke_href: format!("{base}/dashboard/settings/tokens/{}/revoke", wire.token_id),
                state: if p.revoked_at.is_some() {
                    "revoked"
                } else if p.expires_at <= crate::time::now_ms() {
                    "expired"
                } else {
                    "active"
                },
                scopes: scopes_text(&wire.scopes),
                created: wire.created_at,
                expires: wire.expires_at,
                last_used: wire.last_used_at.unwrap_or_else(|| "never".into()),
                id: wire.token_id,
                name: wire.name,
                last_four: wire.last_four,
            }
        })
        .collect::<Vec<_>>();
    let tokens = page_of(tokens, cursors.tokens.as_deref(), &base, "tokens", |t| {
        (t.at, t.id.clone())
    })?;
    Ok(render(&WorkspacePage {
        shell,
        done,
        workspace,
        tokens,
        key_scopes: KEY_SCOPES,
        token_scopes: TOKEN_SCOPES,
        token_days: &TOKEN_DAYS,
    }))
}

async fn workspace_parts(
    ctx: &Context,
    principal: &Principal,
    cursors: &Cursors,
    base: &str,
) -> Result<WorkspaceParts, ApiError> {
    let (workspace_id, role) = principal.membership()?;
    let name = ctx
        .store
        .memberships(&principal.user.id)
        .await?
        .into_iter()
        .find(|m| m.workspace.id == workspace_id)
        .map(|m| m.workspace.name)
        .unwrap_or_default();
    let members = ctx
        .store
        .members(&workspace_id)
        .await?
        .into_iter()
        .map(|(user, role)| MemberRow {
            at: user.created_at,
            remove_href: format!("{base}/dashboard/settings/members/{}/remove", user.id),
            is_me: user.id == principal.user.id,
            since: iso(user.created_at),
            role: role.as_str(),
            email: user.email,
            user_id: user.id,
        })
        .collect::<Vec<_>>();
    let members = page_of(members, cursors.members.as_deref(), base, "members", |m| {
        (m.at, m.user_id.clone())
    })?;
    let keys = ctx
        .store
        .api_keys(&workspace_id)
        .await?
        .iter()
        .map(|k| {
            let wire = accounts::api_key_wire(k);
            KeyRow {
                at: k.created_at,
                revoke_href: format!("{base}/dashboard/settings/api-keys/{}/revoke", wire.key_id),
                revoked: wire.revoked_at.is_some(),
                scopes: scopes_text(&wire.scopes),
                name: wire.name.unwrap_or_default(),
                created: wire.created_at,
                last_used: wire.last_used_at.unwrap_or_else(|| "never".into()),
                id: wire.key_id,
                mode: wire.mode,
                last_four: wire.last_four,
            }
        })
        .collect::<Vec<_>>();
    let keys = page_of(keys, cursors.keys.as_deref(), base, "keys", |k| {
        (k.at, k.id.clone())
    })?;
    let settings = approvals::settings(ctx, principal).await?;
    let can_change = person_requires(principal, Need::WorkspaceChange).is_ok() && role.can_manage();
    Ok(WorkspaceParts {
        id: workspace_id,
        name,
        can_change,
        grantable: ROLES
            .into_iter()
            .filter(|r| *r != "owner" || role == Role::Owner)
            .collect(),
        members,
        keys,
        require_member_approval: settings.require_member_approval,
        audit_retention_days: settings
            .audit_retention_days
            .map(|d| d.to_string())
            .unwrap_or_default(),
        heartbeat_retention_days: settings
            .heartbeat_retention_days
            .map(|d| d.to_string())
            .unwrap_or_default(),
        sinks: crate::audit::sinks::list(ctx, principal).await?.items,
    })
}

/// The values of a repeated field (checkboxes), or `None` when there are none.
fn all_of(values: &[String]) -> Option<Vec<String>> {
    Some(values.to_vec()).filter(|v| !v.is_empty())
}

/// The form that adds a member or changes a member's role.
#[derive(Deserialize)]
pub struct MemberForm {
    #[serde(default)]
    email: String,
    #[serde(default)]
    role: Sent,
}

/// The form that creates an API key (`scopes` repeated) or an access token.
#[derive(Deserialize)]
pub struct CredentialForm {
    #[serde(default)]
    name: Sent,
    mode: Option<String>,
    expires_in_days: Option<String>,
    #[serde(default)]
    scopes: Vec<String>,
}

/// The form of the approval setting.
#[derive(Deserialize)]
pub struct ApprovalForm {
    require_member_approval: Option<String>,
}

/// The form of the retention settings: absent leaves one, empty keeps everything.
#[derive(Deserialize)]
pub struct RetentionForm {
    #[serde(default)]
    audit_retention_days: Sent,
    #[serde(default)]
    heartbeat_retention_days: Sent,
}

/// The form that creates a workspace.
#[derive(Deserialize)]
pub struct WorkspaceForm {
    #[serde(default)]
    name: String,
}

// ---- members ----------------------------------------------------------------------------------

/// Adds a member by email with a role, or changes a member's role (a form: `csrf`, `email`,
/// `role`), as `POST /v1/workspace/members`; then back to the page.
#[utoipa::path(post, path = "/dashboard/settings/members", tag = "dashboard",
    request_body(content = String, content_type = "application/x-www-form-urlencoded", description = "`csrf` (the session's token), `email` and `role` (`owner`, `admin`, `approver` or `member`)"),
    responses((status = 303, description = "saved: to /dashboard/settings (or not logged in: to /login)"),
        (status = 400, description = "HTML page: `invalid_email`, `invalid_role`"),
        (status = 403, description = "HTML page: `csrf_failed`, or `insufficient_role`"),
        (status = 409, description = "HTML page: `last_owner`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn save_member(
    State(ctx): State<SharedContext>,
    posted: Posted<MemberForm>,
) -> PageResult {
    let principal = &posted.person;
    person_requires(principal, Need::WorkspaceChange)?;
    let req = api::AddMemberRequest {
        email: posted.form.email.trim().to_owned(),
        role: posted.form.role.0.clone(),
    };
    accounts::add_member(&ctx, principal, req).await?;
    Ok(see_other(settings_href(&base(&ctx), "member")))
}

#[derive(Template)]
#[template(
    path = "workspace_confirm.html",
    config = "src/http/templates/askama.toml"
)]
struct ConfirmPage {
    shell: Shell,
    title: &'static str,
    subject: String,
    consequence: &'static str,
    button: &'static str,
    action_href: String,
    back_href: String,
}

fn confirm(
    shell: Shell,
    title: &'static str,
    subject: String,
    consequence: &'static str,
    button: &'static str,
    action_href: String,
) -> Response {
    let back_href = format!("{}/dashboard/settings", shell.base);
    render(&ConfirmPage {
        shell,
        title,
        subject,
        consequence,
        button,
        action_href,
        back_href,
    })
}

/// The confirmation step of removing a member (owners and admins).
#[utoipa::path(get, path = "/dashboard/settings/members/{user_id}/remove", tag = "dashboard",
    params(("user_id" = String, Path)),
    responses((status = 200, description = "HTML confirmation form"), NotLoggedIn,
        (status = 403, description = "HTML page: `insufficient_role`"), (status = 404, description = "HTML page: `unknown_member`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn confirm_remove_member(
    State(ctx): State<SharedContext>,
    Path(user_id): Path<String>,
    _query: PageQuery<Nothing>,
    Person(principal): Person,
) -> PageResult {
    let principal = &principal;
    person_requires(principal, Need::WorkspaceChange)?;
    principal.admin_of()?;
    let members = accounts::list_members(&ctx, principal).await?;
    let member = members
        .items
        .into_iter()
        .find(|m| m.user_id == user_id)
        .ok_or_else(|| ApiError::not_found("unknown_member", "no such member of this workspace"))?;
    let shell = shell(&ctx, principal, Section::Workspace).await?;
    let action_href = format!(
        "{}/dashboard/settings/members/{}/remove",
        shell.base, member.user_id
    );
    Ok(confirm(
        shell,
        "Remove this member?",
        format!("{} ({})", member.email, member.role),
        "They lose access to this workspace at once: its pages, its API and its approval mail. Their account and their own tokens stay.",
        "Remove",
        action_href,
    ))
}

/// Removes a member (a form: `csrf`), as `POST /v1/workspace/members/{user_id}/remove`; a
/// workspace keeps at least one owner.
#[utoipa::path(post, path = "/dashboard/settings/members/{user_id}/remove", tag = "dashboard",
    params(("user_id" = String, Path)),
    request_body(content = String, content_type = "application/x-www-form-urlencoded", description = "`csrf` (the session's token)"),
    responses((status = 303, description = "removed: to /dashboard/settings (or not logged in: to /login)"),
        (status = 403, description = "HTML page: `csrf_failed`, or `insufficient_role`"),
        (status = 404, description = "HTML page: `unknown_member`"), (status = 409, description = "HTML page: `last_owner`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn remove_member(
    State(ctx): State<SharedContext>,
    Path(user_id): Path<String>,
    posted: Posted<Nothing>,
) -> PageResult {
    let principal = &posted.person;
    person_requires(principal, Need::WorkspaceChange)?;
    accounts::remove_member(&ctx, principal, &user_id).await?;
    Ok(see_other(settings_href(&base(&ctx), "removed")))
}

// ---- the page that shows a new secret once ---------------------------------------------------

#[derive(Template)]
#[template(
    path = "workspace_secret.html",
    config = "src/http/templates/askama.toml"
)]
struct SecretPage {
    shell: Shell,
    /// "API key" or "access token".
    kind: &'static str,
    /// How to send it.
    usage: &'static str,
    secret: String,
    facts: Vec<(&'static str, String)>,
    back_href: String,
}

fn secret_page(
    shell: Shell,
    kind: &'static str,
    usage: &'static str,
    secret: String,
    facts: Vec<(&'static str, String)>,
) -> Response {
    let back_href = format!("{}/dashboard/settings", shell.base);
    // `render` marks the answer `no-store`: the secret is in this response and nowhere else.
    render(&SecretPage {
        shell,
        kind,
        usage,
        secret,
        facts,
        back_href,
    })
}

// ---- API keys ---------------------------------------------------------------------------------

/// Creates an API key (a form: `csrf`, `name`, `mode` — `test` or `live` — and `scopes`, one
/// field per scope), as `POST /v1/workspace/api-keys`; the answer shows the key, once.
#[utoipa::path(post, path = "/dashboard/settings/api-keys", tag = "dashboard",
    request_body(content = String, content_type = "application/x-www-form-urlencoded", description = "`csrf` (the session's token), `name`, `mode` (`test` or `live`) and `scopes` (repeated)"),
    responses((status = 200, description = "HTML page showing the new key once (`no-store`)"), NotLoggedIn,
        (status = 400, description = "HTML page: `invalid_name`, `invalid_mode`, `invalid_scopes`"),
        (status = 403, description = "HTML page: `csrf_failed`, or `insufficient_role`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn create_api_key(
    State(ctx): State<SharedContext>,
    posted: Posted<CredentialForm>,
) -> PageResult {
    let principal = &posted.person;
    person_requires(principal, Need::WorkspaceChange)?;
    let live = match posted.form.mode.as_deref().unwrap_or("test") {
        "test" | "" => false,
        "live" => true,
        _ => return Err(ApiError::invalid("mode", "must be `test` or `live`").into()),
    };
    let req = api::CreateApiKeyRequest {
        name: posted.form.name.0.clone(),
        live: Some(live),
        scopes: all_of(&posted.form.scopes),
        // The server's default; a rate of its own is set through the API or the CLI.
        rate_limit: None,
    };
    let created = accounts::create_api_key(&ctx, principal, req).await?;
    let shell = shell(&ctx, principal, Section::Workspace).await?;
    let key = created.api_key;
    Ok(secret_page(
        shell,
        "API key",
        "Send it in the X-Service-Api-Key header.",
        created.key,
        vec![
            ("Name", key.name.unwrap_or_default()),
            ("Mode", key.mode),
            ("Ends in", key.last_four),
            ("Scopes", scopes_text(&key.scopes)),
            ("Created", key.created_at),
        ],
    ))
}

/// The confirmation step of revoking an API key (owners and admins).
#[utoipa::path(get, path = "/dashboard/settings/api-keys/{key_id}/revoke", tag = "dashboard",
    params(("key_id" = String, Path)),
    responses((status = 200, description = "HTML confirmation form"), NotLoggedIn,
        (status = 403, description = "HTML page: `insufficient_role`"), (status = 404, description = "HTML page: `unknown_api_key`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn confirm_revoke_api_key(
    State(ctx): State<SharedContext>,
    Path(key_id): Path<String>,
    _query: PageQuery<Nothing>,
    Person(principal): Person,
) -> PageResult {
    let principal = &principal;
    person_requires(principal, Need::WorkspaceChange)?;
    let (workspace_id, _) = principal.admin_of()?;
    let key = ctx
        .store
        .api_keys(&workspace_id)
        .await?
        .into_iter()
        .find(|k| k.id == key_id && k.revoked_at.is_none())
        .ok_or_else(|| {
            ApiError::not_found("unknown_api_key", "no such live key in this workspace")
        })?;
    let shell = shell(&ctx, principal, Section::Workspace).await?;
    let action_href = format!(
        "{}/dashboard/settings/api-keys/{}/revoke",
        shell.base, key.id
    );
    let name = key.name.unwrap_or_else(|| "(no name)".into());
    Ok(confirm(
        shell,
        "Revoke this API key?",
        format!("{name} (svc_{}_…{})", key.mode, key.last_four),
        "Requests with this key fail at once, and it cannot be brought back: whatever uses it needs a new key.",
        "Revoke",
        action_href,
    ))
}

/// Revokes an API key (a form: `csrf`), as `POST /v1/workspace/api-keys/{key_id}/revoke`.
#[utoipa::path(post, path = "/dashboard/settings/api-keys/{key_id}/revoke", tag = "dashboard",
    params(("key_id" = String, Path)),
    request_body(content = String, content_type = "application/x-www-form-urlencoded", description = "`csrf` (the session's token)"),
    responses((status = 303, description = "revoked: to /dashboard/settings (or not logged in: to /login)"),
        (status = 403, description = "HTML page: `csrf_failed`, or `insufficient_role`"),
        (status = 404, description = "HTML page: `unknown_api_key`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn revoke_api_key(
    State(ctx): State<SharedContext>,
    Path(key_id): Path<String>,
    posted: Posted<Nothing>,
) -> PageResult {
    let principal = &posted.person;
    person_requires(principal, Need::WorkspaceChange)?;
    accounts::revoke_api_key(&ctx, principal, &key_id).await?;
    Ok(see_other(settings_href(&base(&ctx), "key_revoked")))
}

// ---- personal access tokens -------------------------------------------------------------------

/// Creates one of the person's access tokens (a form: `csrf`, `name`, `expires_in_days` and
/// `scopes`, one field per scope), as `POST /v1/auth/tokens`; the answer shows it, once.
#[utoipa::path(post, path = "/dashboard/settings/tokens", tag = "dashboard",
    request_body(content = String, content_type = "application/x-www-form-urlencoded", description = "`csrf` (the session's token), `name`, `expires_in_days` (1 to 365) and `scopes` (repeated)"),
    responses((status = 200, description = "HTML page showing the new token once (`no-store`)"), NotLoggedIn,
        (status = 400, description = "HTML page: `missing_name`, `invalid_name`, `invalid_expires_in_days`, `invalid_scopes`"),
        (status = 403, description = "HTML page: `csrf_failed`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn create_token(
    State(ctx): State<SharedContext>,
    posted: Posted<CredentialForm>,
) -> PageResult {
    let principal = &posted.person;
    unscoped_required(principal)?;
    let days =
        match posted.form.expires_in_days.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(d) => Some(d.parse::<i64>().map_err(|_| {
                ApiError::invalid("expires_in_days", "must be a whole number of days")
            })?),
        };
    let req = api::CreateTokenRequest {
        name: posted.form.name.as_deref().unwrap_or("").to_owned(),
        expires_in_days: days,
        scopes: all_of(&posted.form.scopes),
    };
    let created = accounts::create_pat(&ctx, principal, req).await?;
    let shell = shell(&ctx, principal, Section::Workspace).await?;
    let token = created.access_token;
    Ok(secret_page(
        shell,
        "access token",
        "Send it as Authorization: Bearer, with X-Service-Workspace naming the workspace if you belong to more than one.",
        created.token,
        vec![
            ("Name", token.name),
            ("Ends in", token.last_four),
            ("Scopes", scopes_text(&token.scopes)),
            ("Created", token.created_at),
            ("Expires", token.expires_at),
        ],
    ))
}

/// The confirmation step of revoking one of the person's tokens.
#[utoipa::path(get, path = "/dashboard/settings/tokens/{token_id}/revoke", tag = "dashboard",
    params(("token_id" = String, Path)),
    responses((status = 200, description = "HTML confirmation form"), NotLoggedIn,
        (status = 404, description = "HTML page: `unknown_token`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn confirm_revoke_token(
    State(ctx): State<SharedContext>,
    Path(token_id): Path<String>,
    _query: PageQuery<Nothing>,
    Person(principal): Person,
) -> PageResult {
    let principal = &principal;
    let token = ctx
        .store
        .pats(&principal.user.id)
        .await?
        .into_iter()
        .find(|p| p.id == token_id && p.revoked_at.is_none())
        .ok_or_else(|| ApiError::not_found("unknown_token", "no such live token of yours"))?;
    let shell = shell(&ctx, principal, Section::Workspace).await?;
    let action_href = format!(
        "{}/dashboard/settings/tokens/{}/revoke",
        shell.base, token.id
    );
    Ok(confirm(
        shell,
        "Revoke this access token?",
        format!("{} (…{})", token.name, token.last_four),
        "Requests with this token fail at once, and it cannot be brought back.",
        "Revoke",
        action_href,
    ))
}

/// Revokes one of the person's tokens (a form: `csrf`), as `POST /v1/auth/tokens/{token_id}/revoke`.
#[utoipa::path(post, path = "/dashboard/settings/tokens/{token_id}/revoke", tag = "dashboard",
    params(("token_id" = String, Path)),
    request_body(content = String, content_type = "application/x-www-form-urlencoded", description = "`csrf` (the session's token)"),
    responses((status = 303, description = "revoked: to /dashboard/settings (or not logged in: to /login)"),
        (status = 403, description = "HTML page: `csrf_failed`"), (status = 404, description = "HTML page: `unknown_token`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn revoke_token(
    State(ctx): State<SharedContext>,
    Path(token_id): Path<String>,
    posted: Posted<Nothing>,
) -> PageResult {
    let principal = &posted.person;
    unscoped_required(principal)?;
    accounts::revoke_pat(&ctx, principal, &token_id).await?;
    Ok(see_other(settings_href(&base(&ctx), "token_revoked")))
}

// ---- approval settings and workspaces ---------------------------------------------------------

/// Changes the approval settings (a form: `csrf`, `require_member_approval` — `true` or
/// `false`), as `POST /v1/workspace/settings`.
#[utoipa::path(post, path = "/dashboard/settings/approval", tag = "dashboard",
    request_body(content = String, content_type = "application/x-www-form-urlencoded", description = "`csrf` (the session's token) and `require_member_approval` (`true` or `false`)"),
    responses((status = 303, description = "saved: to /dashboard/settings (or not logged in: to /login)"),
        (status = 400, description = "HTML page: `missing_require_member_approval`, `invalid_require_member_approval`"),
        (status = 403, description = "HTML page: `csrf_failed`, or `insufficient_role`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn save_settings(
    State(ctx): State<SharedContext>,
    posted: Posted<ApprovalForm>,
) -> PageResult {
    let principal = &posted.person;
    person_requires(principal, Need::WorkspaceChange)?;
    let wanted = match posted.form.require_member_approval.as_deref() {
        None | Some("") => return Err(ApiError::missing("require_member_approval").into()),
        Some("true") => true,
        Some("false") => false,
        Some(_) => {
            return Err(
                ApiError::invalid("require_member_approval", "must be `true` or `false`").into(),
            )
        }
    };
    let settings = api::UpdateWorkspaceSettings {
        require_member_approval: Some(wanted),
        ..Default::default()
    };
    save(&ctx, principal, settings, "settings").await
}

/// Saves the workspace's settings as `POST /v1/workspace/settings` does, then back to the
/// settings page with the notice `done`.
async fn save(
    ctx: &Context,
    principal: &Principal,
    settings: api::UpdateWorkspaceSettings,
    done: &str,
) -> PageResult {
    approvals::update_settings(ctx, principal, settings).await?;
    Ok(see_other(settings_href(&base(ctx), done)))
}

/// A retention field of the form: absent leaves it, empty keeps everything, else days.
fn retention_field(sent: &Sent, name: &str) -> Result<Option<Option<i64>>, ApiError> {
    match sent.as_deref().map(str::trim) {
        None => Ok(None),
        Some("") => Ok(Some(None)),
        Some(text) => text
            .parse::<i64>()
            .map(|days| Some(Some(days)))
            .map_err(|_| {
                ApiError::bad_request(
                    "invalid_retention",
                    format!("`{name}` must be a number of days, or empty to keep everything"),
                )
            }),
    }
}

/// Sets the workspace's retention (a form: `csrf`, `audit_retention_days`,
/// `heartbeat_retention_days`; empty keeps everything), as `POST /v1/workspace/settings`.
#[utoipa::path(post, path = "/dashboard/settings/retention", tag = "dashboard",
    request_body(content = String, content_type = "application/x-www-form-urlencoded", description = "`csrf` (the session's token), `audit_retention_days` and `heartbeat_retention_days` (days; empty keeps everything)"),
    responses((status = 303, description = "saved: to /dashboard/settings (or not logged in: to /login)"),
        (status = 400, description = "HTML page: `invalid_retention`"),
        (status = 403, description = "HTML page: `csrf_failed`, or `insufficient_role`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn save_retention(
    State(ctx): State<SharedContext>,
    posted: Posted<RetentionForm>,
) -> PageResult {
    let principal = &posted.person;
    person_requires(principal, Need::WorkspaceChange)?;
    let settings = api::UpdateWorkspaceSettings {
        audit_retention_days: retention_field(
            &posted.form.audit_retention_days,
            "audit_retention_days",
        )?,
        heartbeat_retention_days: retention_field(
            &posted.form.heartbeat_retention_days,
            "heartbeat_retention_days",
        )?,
        ..Default::default()
    };
    save(&ctx, principal, settings, "retention").await
}

/// Creates a workspace with the person as owner and selects it (a form: `csrf`, `name`), as
/// `POST /v1/workspaces`.
#[utoipa::path(post, path = "/dashboard/settings/workspaces", tag = "dashboard",
    request_body(content = String, content_type = "application/x-www-form-urlencoded", description = "`csrf` (the session's token) and `name`"),
    responses((status = 303, description = "created and selected: to /dashboard/settings (or not logged in: to /login)"),
        (status = 400, description = "HTML page: `missing_name`, `invalid_name`"),
        (status = 403, description = "HTML page: `csrf_failed`, `signup_closed`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn create_workspace(
    State(ctx): State<SharedContext>,
    posted: Posted<WorkspaceForm>,
) -> PageResult {
    let principal = &posted.person;
    unscoped_required(principal)?;
    accounts::create_workspace(&ctx, principal, &posted.form.name).await?;
    Ok(see_other(settings_href(&base(&ctx), "workspace")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_page_newest_first_with_cursors() {
        let rows: Vec<(i64, String)> = (0..30).map(|i| (i, format!("id{i:02}"))).collect();
        let first = page_of(rows.clone(), None, "/acp", "keys", Clone::clone).unwrap();
        assert_eq!(first.rows.len(), 25);
        assert_eq!(first.rows[0].0, 29);
        assert!(first.first_href.is_none());
        let next = first.next_href.unwrap();
        assert!(next.starts_with("/acp/dashboard/settings?keys=") && next.ends_with("#keys"));
        let cursor = next
            .trim_start_matches("/acp/dashboard/settings?keys=")
            .trim_end_matches("#keys");
        let cursor: String = form_urlencoded::parse(format!("c={cursor}").as_bytes())
            .next()
            .unwrap()
            .1
            .into_owned();
        let second = page_of(rows, Some(&cursor), "/acp", "keys", Clone::clone).unwrap();
        assert_eq!(
            second.rows.iter().map(|r| r.0).collect::<Vec<_>>(),
            [4, 3, 2, 1, 0]
        );
        assert!(second.next_href.is_none());
        assert_eq!(
            second.first_href.as_deref(),
            Some("/acp/dashboard/settings#keys")
        );
        assert!(page_of(
            Vec::<(i64, String)>::new(),
            Some("junk"),
            "",
            "keys",
            Clone::clone
        )
        .is_err());
    }

    #[test]
    fn notices_name_the_changes() {
        assert!(notice("member").is_some() && notice("key_revoked").is_some());
        assert!(notice("<script>").is_none());
        assert_eq!(scopes_text(&[]), "all");
    }
}
