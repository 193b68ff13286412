//! The console's credentials and kill switch: the workspace's kill switch (is minting paused,
//! why, since when and by whom; the last revoke-all) and its active credentials (not revoked,
//! not expired, not a used one-time credential, not minted before the last revoke-all), newest
//! first, paged by cursor, all or one agent's. Never a token or its hash.
//!
//! Owners and admins pause and resume minting, revoke every credential (behind a typed
//! confirmation: the workspace's name, exactly), revoke one credential and every credential of
//! an agent; members and approvers read. Each change is a form posted with the session's CSRF
//! token and goes through the same use case as the API (`/v1/identity/kill-switch/*`,
//! `/v1/identity/credentials/revoke*`), audited with the person as actor.

use askama::Template;
use axum::extract::{Path, State};
use axum::response::Response;
use serde::Deserialize;

use crate::api;
use crate::audit::names::ActorNames;
use crate::context::{Context, SharedContext};
use crate::domain::access::Need;
use crate::enforce::credentials::{self, SwitchChange};
use crate::error::ApiError;
use crate::identity::accounts::Principal;
use crate::identity::agents;
use crate::store::ActiveCredential;
use crate::time::{iso, parse_iso};
use crate::vault::leases;

use super::extract::{Count, NotLoggedIn, Nothing, PageQuery, PageResult, Paged, Person, Posted};
use super::{base, see_other, shell, Section, Shell, PAGE_ROWS};
use crate::http::operator::person_requires;
use crate::http::pages::render;

/// The integer parameters of the page: its size, and the count of a revoke just done.
/// The page's filter (one agent's credentials only) and, after a change, how many it revoked.
#[derive(Deserialize)]
pub struct CredentialFilters {
    agent_id: Option<String>,
    revoked: Option<Count>,
}

/// The form that pauses or resumes minting: `minting` (`pause` or `resume`), the reason.
#[derive(Deserialize)]
pub struct SwitchForm {
    minting: Option<String>,
    reason: Option<String>,
}

/// The form that revokes everything: the workspace's name typed as `confirm`, the reason.
#[derive(Deserialize)]
pub struct RevokeAllForm {
    confirm: Option<String>,
    reason: Option<String>,
}

/// The form that revokes one credential, or an agent's: the reason.
#[derive(Deserialize)]
pub struct ReasonForm {
    reason: Option<String>,
}

#[derive(Template)]
#[template(path = "credentials.html", config = "src/http/templates/askama.toml")]
struct CredentialsPage {
    shell: Shell,
    /// Whether the role may pause minting and revoke all (the server checks again).
    can_switch: bool,
    /// Whether the role may revoke credentials (the server checks again).
    can_revoke: bool,
    minting_paused: bool,
    paused_reason: Option<String>,
    minting_changed: Option<ChangeRow>,
    /// When every credential was last revoked, by whom and why.
    revoked_all: Option<ChangeRow>,
    /// What the person types to revoke everything: the workspace's name.
    confirm_word: String,
    /// The agent the list is narrowed to.
    agent: Option<AgentFilter>,
    agent_id: String,
    credentials: Vec<CredentialRow>,
    first_href: Option<String>,
    next_href: Option<String>,
    done: Option<String>,
}

struct ChangeRow {
    at: String,
    actor: String,
    reason: Option<String>,
}

struct AgentFilter {
    name: String,
    href: String,
    revoke_href: String,
}

pub(super) struct CredentialRow {
    pub(super) id: String,
    pub(super) agent_name: String,
    pub(super) agent_href: String,
    pub(super) token_type: String,
    pub(super) provider: String,
    pub(super) audience: String,
    pub(super) scopes: String,
    pub(super) one_time: bool,
    pub(super) issued: String,
    pub(super) expires: String,
    pub(super) revoke_href: String,
}

/// A listed credential as a page shows it (also the agent's page).
pub(super) fn credential_row(base: &str, c: ActiveCredential) -> CredentialRow {
    CredentialRow {
        agent_href: format!("{base}/dashboard/agents/{}", c.agent_id),
        revoke_href: format!("{base}/dashboard/credentials/{}/revoke", c.id),
        agent_name: if c.agent_name.is_empty() {
            c.agent_id
        } else {
            c.agent_name
        },
        id: c.id,
        token_type: c.token_type,
        provider: c.provider.unwrap_or_default(),
        audience: c.audience.unwrap_or_default(),
        scopes: c.scopes.join(" "),
        one_time: c.one_time,
        issued: iso(c.created_at),
        expires: iso(c.expires_at),
    }
}

fn change_row(change: SwitchChange, names: &ActorNames) -> ChangeRow {
    ChangeRow {
        at: iso(change.at),
        actor: names.shown(&change.actor),
        reason: change.reason,
    }
}

/// The notice after a change, by the `done` the change redirected with.
fn notice(done: &str, revoked: Option<i64>) -> Option<String> {
    let count = |n: i64| match n {
        0 => "nothing was live to revoke".to_owned(),
        1 => "1 credential revoked".to_owned(),
        n => format!("{n} credentials revoked"),
    };
    Some(match done {
        "paused" => {
            "Minting paused: no credential or vault lease is issued until it is resumed.".into()
        }
        "resumed" => "Minting resumed.".into(),
        "revoked_all" => "Every credential and vault lease issued so far is revoked.".into(),
        "revoked" => format!("Revoke done: {}.", count(revoked.unwrap_or(0))),
        _ => return None,
    })
}

/// The page's URL with its filter, cursor and limit.
fn href(base: &str, agent_id: &str, cursor: Option<&str>, limit: Option<i64>) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    if !agent_id.is_empty() {
        query.append_pair("agent_id", agent_id);
    }
    if let Some(limit) = limit {
        query.append_pair("limit", &limit.to_string());
    }
    if let Some(cursor) = cursor {
        query.append_pair("cursor", cursor);
    }
    let query = query.finish();
    if query.is_empty() {
        format!("{base}/dashboard/credentials")
    } else {
        format!("{base}/dashboard/credentials?{query}")
    }
}

/// The workspace's name: what a person types to revoke every credential.
async fn workspace_name(ctx: &Context, workspace_id: &str) -> Result<String, ApiError> {
    Ok(ctx
        .store
        .workspace(workspace_id)
        .await?
        .map(|w| w.name)
        .unwrap_or_else(|| workspace_id.to_owned()))
}

/// The kill switch (with its last changes) and the active credentials, all or one agent's,
/// paged by cursor; the forms that change them for owners and admins.
#[utoipa::path(get, path = "/dashboard/credentials", tag = "dashboard",
    params(("agent_id" = Option<String>, Query, description = "only this agent's credentials"),
        ("limit" = Option<i64>, Query, description = "rows, 1 to 200, default 25"),
        ("cursor" = Option<String>, Query, description = "the next page"),
        ("done" = Option<String>, Query, description = "the change just done, for its notice"),
        ("revoked" = Option<i64>, Query, description = "how many credentials the change revoked")),
    responses((status = 200, description = "HTML kill switch and credentials"), NotLoggedIn,
        (status = 400, description = "HTML page: the limit or the cursor is not valid"),
        (status = 403, description = "HTML page: the role may not read the kill switch"),
        (status = 404, description = "HTML page: `unknown_agent`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn credentials_page(
    State(ctx): State<SharedContext>,
    PageQuery(query): PageQuery<Paged<CredentialFilters>>,
    Person(principal): Person,
) -> PageResult {
    let principal = &principal;
    Ok(listing(&ctx, principal, query).await?)
}

async fn listing(
    ctx: &Context,
    principal: &Principal,
    query: Paged<CredentialFilters>,
) -> Result<Response, ApiError> {
    person_requires(principal, Need::KillSwitchRead)?;
    let (workspace_id, _) = principal.membership()?;
    let (cursor, limit, done) = (query.cursor(), query.limit(), query.done().to_owned());
    let agent_id = query
        .filters
        .agent_id
        .as_deref()
        .map_or("", str::trim)
        .to_owned();
    let revoked = query.filters.revoked.map(|r| r.0);
    let page_rows = crate::http::page_limit(limit, PAGE_ROWS, 200)?;
    let after = crate::http::page_cursor(cursor.as_deref())?;
    let shell = shell(ctx, principal, Section::Credentials).await?;
    let base = shell.base.clone();
    let agent = if agent_id.is_empty() {
        None
    } else {
        let found =
            agents::agent_in_workspace(ctx, &workspace_id, &agents::agent_id(&agent_id)?).await?;
        Some(AgentFilter {
            href: format!("{base}/dashboard/agents/{}", found.id),
            revoke_href: format!("{base}/dashboard/credentials/agents/{}/revoke", found.id),
            name: found.name,
        })
    };
    let view = credentials::kill_switch_view(ctx, &workspace_id).await?;
    let mut rows = credentials::active(
        ctx,
        &workspace_id,
        Some(agent_id.as_str()).filter(|a| !a.is_empty()),
        after,
        page_rows + 1,
    )
    .await?;
    let next = crate::http::next_cursor(&mut rows, page_rows, |c| (c.created_at, c.id.clone()));
    let limit_kept = limit.filter(|l| *l != PAGE_ROWS);
    let names = ActorNames::lookup(
        ctx.store.as_ref(),
        &workspace_id,
        [&view.minting_changed, &view.revoked_all]
            .into_iter()
            .flatten()
            .map(|c| c.actor.as_str()),
    )
    .await?;
    Ok(render(&CredentialsPage {
        can_switch: person_requires(principal, Need::KillSwitch).is_ok(),
        can_revoke: person_requires(principal, Need::Credentials).is_ok(),
        minting_paused: view.switch.minting_paused,
        paused_reason: view.switch.minting_paused_reason,
        minting_changed: view.minting_changed.map(|c| change_row(c, &names)),
        revoked_all: match (view.switch.all_revoked_at, view.revoked_all) {
            (Some(at), Some(change)) => Some(ChangeRow {
                at: iso(at),
                ..change_row(change, &names)
            }),
            (Some(at), None) => Some(ChangeRow {
                at: iso(at),
                actor: String::new(),
                reason: None,
            }),
            (None, _) => None,
        },
        confirm_word: workspace_name(ctx, &workspace_id).await?,
        credentials: rows.into_iter().map(|c| credential_row(&base, c)).collect(),
        first_href: cursor.map(|_| href(&base, &agent_id, None, limit_kept)),
        next_href: next.map(|c| href(&base, &agent_id, Some(&c), limit_kept)),
        done: notice(&done, revoked),
        agent,
        agent_id,
        shell,
    }))
}

/// Pauses or resumes minting (a form: `csrf`, `minting` — `pause` or `resume` — and an
/// optional `reason`), audited with the person as actor, then back to the page.
#[utoipa::path(post, path = "/dashboard/credentials/minting", tag = "dashboard",
    request_body(content = String, content_type = "application/x-www-form-urlencoded", description = "`csrf` (the session's token), `minting` (`pause` or `resume`) and an optional `reason`"),
    responses((status = 303, description = "done: to /dashboard/credentials (or not logged in: to /login)"),
        (status = 400, description = "HTML page: `invalid_minting`, `invalid_reason`"),
        (status = 403, description = "HTML page: `csrf_failed`, or the role may not use the kill switch")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn minting(State(ctx): State<SharedContext>, posted: Posted<SwitchForm>) -> PageResult {
    let principal = &posted.person;
    Ok(switch_minting(&ctx, principal, &posted.form).await?)
}

async fn switch_minting(
    ctx: &Context,
    principal: &Principal,
    form: &SwitchForm,
) -> Result<Response, ApiError> {
    person_requires(principal, Need::KillSwitch)?;
    let (workspace_id, _) = principal.membership()?;
    let paused = match form.minting.as_deref() {
        Some("pause") => true,
        Some("resume") => false,
        _ => return Err(ApiError::invalid("minting", "must be `pause` or `resume`")),
    };
    credentials::set_minting(
        ctx,
        &workspace_id,
        &principal.actor(),
        api::MintingSwitchRequest {
            paused,
            reason: reason_of(form.reason.as_deref()),
        },
    )
    .await?;
    let done = if paused { "paused" } else { "resumed" };
    Ok(see_other(format!(
        "{}/dashboard/credentials?done={done}",
        base(ctx)
    )))
}

fn reason_of(reason: Option<&str>) -> Option<String> {
    reason
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(str::to_owned)
}

/// Revokes every credential and vault lease issued so far (a form: `csrf`, `confirm` — the
/// workspace's name, typed exactly — and an optional `reason`), audited with the person as
/// actor, then back to the page. A wrong or missing confirmation changes nothing.
#[utoipa::path(post, path = "/dashboard/credentials/revoke-all", tag = "dashboard",
    request_body(content = String, content_type = "application/x-www-form-urlencoded", description = "`csrf` (the session's token), `confirm` (the workspace's name) and an optional `reason`"),
    responses((status = 303, description = "done: to /dashboard/credentials (or not logged in: to /login)"),
        (status = 400, description = "HTML page: `confirmation_mismatch`, `invalid_reason`"),
        (status = 403, description = "HTML page: `csrf_failed`, or the role may not use the kill switch")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn revoke_all(
    State(ctx): State<SharedContext>,
    posted: Posted<RevokeAllForm>,
) -> PageResult {
    let principal = &posted.person;
    Ok(kill_all(&ctx, principal, &posted.form).await?)
}

/// Whether what was typed is the confirmation word (surrounding blanks aside).
fn confirmed(typed: Option<&str>, word: &str) -> bool {
    typed.is_some_and(|t| !t.trim().is_empty() && t.trim() == word.trim())
}

async fn kill_all(
    ctx: &Context,
    principal: &Principal,
    form: &RevokeAllForm,
) -> Result<Response, ApiError> {
    person_requires(principal, Need::KillSwitch)?;
    let (workspace_id, _) = principal.membership()?;
    let word = workspace_name(ctx, &workspace_id).await?;
    if !confirmed(form.confirm.as_deref(), &word) {
        return Err(ApiError::bad_request(
            "confirmation_mismatch",
            "Nothing was revoked: type the workspace's name exactly as the page shows it to revoke every credential.",
        ));
    }
    credentials::revoke_all(
        ctx,
        &workspace_id,
        &principal.actor(),
        api::RevokeAllRequest {
            reason: reason_of(form.reason.as_deref()),
        },
    )
    .await?;
    Ok(see_other(format!(
        "{}/dashboard/credentials?done=revoked_all",
        base(ctx)
    )))
}

#[derive(Template)]
#[template(
    path = "credentials_revoke.html",
    config = "src/http/templates/askama.toml"
)]
struct RevokePage {
    shell: Shell,
    /// What is revoked, in words.
    title: String,
    /// The facts shown about it.
    facts: Vec<(&'static str, String)>,
    agent_name: String,
    agent_href: String,
    action_href: String,
    back_href: String,
}

/// The confirmation step of revoking one credential: what it is, a reason, and the form.
#[utoipa::path(get, path = "/dashboard/credentials/{cred_id}/revoke", tag = "dashboard",
    params(("cred_id" = String, Path)),
    responses((status = 200, description = "HTML confirmation form"), NotLoggedIn,
        (status = 403, description = "HTML page: the role may not revoke credentials"),
        (status = 404, description = "HTML page: `unknown_credential`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn confirm_revoke(
    State(ctx): State<SharedContext>,
    Path(cred_id): Path<String>,
    _query: PageQuery<Nothing>,
    Person(principal): Person,
) -> PageResult {
    Ok(revoke_one_page(&ctx, &principal, &cred_id).await?)
}

async fn revoke_one_page(
    ctx: &Context,
    principal: &Principal,
    cred_id: &str,
) -> Result<Response, ApiError> {
    person_requires(principal, Need::Credentials)?;
    let (workspace_id, _) = principal.membership()?;
    let c = credentials::credential_in(ctx, &workspace_id, &credentials::credential_id(cred_id)?)
        .await?;
    let agent =
        agents::agent_in_workspace(ctx, &workspace_id, &agents::agent_id(&c.agent_id)?).await?;
    let shell = shell(ctx, principal, Section::Credentials).await?;
    let base = shell.base.clone();
    let state = if c.revoked_at.is_some() {
        "revoked"
    } else if c.one_time && c.used_at.is_some() {
        "used"
    } else if c.expires_at <= crate::time::now_ms() {
        "expired"
    } else {
        "live"
    };
    Ok(render(&RevokePage {
        title: "Revoke this credential?".into(),
        facts: vec![
            ("Credential", c.id.clone()),
            ("State", state.into()),
            ("Type", c.token_type),
            ("Provider", c.provider.unwrap_or_default()),
            ("Audience", c.audience.unwrap_or_default()),
            ("Scopes", c.scopes.join(" ")),
            ("One-time", if c.one_time { "yes" } else { "no" }.into()),
            ("Issued", iso(c.created_at)),
            ("Expires", iso(c.expires_at)),
        ],
        agent_href: format!("{base}/dashboard/agents/{}", agent.id),
        agent_name: agent.name,
        action_href: format!("{base}/dashboard/credentials/{}/revoke", c.id),
        back_href: format!("{base}/dashboard/credentials"),
        shell,
    }))
}

/// Revokes one credential of the workspace (a form: `csrf`, optional `reason`), audited with
/// the person as actor, then back to the page.
#[utoipa::path(post, path = "/dashboard/credentials/{cred_id}/revoke", tag = "dashboard",
    params(("cred_id" = String, Path)),
    request_body(content = String, content_type = "application/x-www-form-urlencoded", description = "`csrf` (the session's token) and an optional `reason`"),
    responses((status = 303, description = "done: to /dashboard/credentials (or not logged in: to /login)"),
        (status = 400, description = "HTML page: `invalid_reason`"),
        (status = 403, description = "HTML page: `csrf_failed`, or the role may not revoke credentials"),
        (status = 404, description = "HTML page: `unknown_credential`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn revoke(
    State(ctx): State<SharedContext>,
    Path(cred_id): Path<String>,
    posted: Posted<ReasonForm>,
) -> PageResult {
    let principal = &posted.person;
    Ok(revoke_one(&ctx, principal, &cred_id, &posted.form).await?)
}

async fn revoke_one(
    ctx: &Context,
    principal: &Principal,
    cred_id: &str,
    form: &ReasonForm,
) -> Result<Response, ApiError> {
    person_requires(principal, Need::Credentials)?;
    let (workspace_id, _) = principal.membership()?;
    let done = credentials::revoke_by_id(
        ctx,
        &workspace_id,
        &principal.actor(),
        cred_id,
        reason_of(form.reason.as_deref()),
    )
    .await?;
    Ok(see_other(format!(
        "{}/dashboard/credentials?done=revoked&revoked={}",
        base(ctx),
        done.revoked
    )))
}

/// The confirmation step of revoking every credential of an agent.
#[utoipa::path(get, path = "/dashboard/credentials/agents/{agent_id}/revoke", tag = "dashboard",
    params(("agent_id" = String, Path)),
    responses((status = 200, description = "HTML confirmation form"), NotLoggedIn,
        (status = 403, description = "HTML page: the role may not revoke credentials"),
        (status = 404, description = "HTML page: `unknown_agent`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn confirm_revoke_agent(
    State(ctx): State<SharedContext>,
    Path(agent_id): Path<String>,
    _query: PageQuery<Nothing>,
    Person(principal): Person,
) -> PageResult {
    Ok(revoke_agent_page(&ctx, &principal, &agent_id).await?)
}

async fn revoke_agent_page(
    ctx: &Context,
    principal: &Principal,
    agent_id: &str,
) -> Result<Response, ApiError> {
    person_requires(principal, Need::Credentials)?;
    let (workspace_id, _) = principal.membership()?;
    let agent =
        agents::agent_in_workspace(ctx, &workspace_id, &agents::agent_id(agent_id)?).await?;
    let shell = shell(ctx, principal, Section::Credentials).await?;
    let base = shell.base.clone();
    Ok(render(&RevokePage {
        title: "Revoke every credential of this agent?".into(),
        facts: vec![
            ("Agent", agent.id.clone()),
            ("Status", agent.status.as_str().into()),
        ],
        agent_href: format!("{base}/dashboard/agents/{}", agent.id),
        action_href: format!("{base}/dashboard/credentials/agents/{}/revoke", agent.id),
        back_href: href(&base, &agent.id, None, None),
        agent_name: agent.name,
        shell,
    }))
}

/// Revokes every live credential of one agent (a form: `csrf`, optional `reason`), audited
/// with the person as actor, then back to the agent's credentials.
#[utoipa::path(post, path = "/dashboard/credentials/agents/{agent_id}/revoke", tag = "dashboard",
    params(("agent_id" = String, Path)),
    request_body(content = String, content_type = "application/x-www-form-urlencoded", description = "`csrf` (the session's token) and an optional `reason`"),
    responses((status = 303, description = "done: to the agent's credentials (or not logged in: to /login)"),
        (status = 400, description = "HTML page: `invalid_reason`"),
        (status = 403, description = "HTML page: `csrf_failed`, or the role may not revoke credentials"),
        (status = 404, description = "HTML page: `unknown_agent`")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn revoke_agent(
    State(ctx): State<SharedContext>,
    Path(agent_id): Path<String>,
    posted: Posted<ReasonForm>,
) -> PageResult {
    let principal = &posted.person;
    Ok(revoke_of_agent(&ctx, principal, &agent_id, &posted.form).await?)
}

async fn revoke_of_agent(
    ctx: &Context,
    principal: &Principal,
    agent_id: &str,
    form: &ReasonForm,
) -> Result<Response, ApiError> {
    person_requires(principal, Need::Credentials)?;
    let (workspace_id, _) = principal.membership()?;
    let view = ctx
        .caches
        .confirmed_view(ctx.store.as_ref(), &workspace_id)
        .await?;
    let done = credentials::revoke_by_agent(
        ctx,
        &view,
        &principal.actor(),
        api::RevokeByAgentRequest {
            agent_id: agent_id.to_owned(),
            reason: reason_of(form.reason.as_deref()),
        },
    )
    .await?;
    let mut query = form_urlencoded::Serializer::new(String::new());
    query
        .append_pair("agent_id", agent_id)
        .append_pair("done", "revoked")
        .append_pair("revoked", &done.revoked.to_string());
    Ok(see_other(format!(
        "{}/dashboard/credentials?{}",
        base(ctx),
        query.finish()
    )))
}

/// Credentials listed on an agent's page; the rest are a link away.
const AGENT_ROWS: i64 = 10;

/// The agent page's sections about what the agent holds: its active credentials and its live
/// vault leases, each `None` when the role may not read it.
pub(super) struct AgentHoldings {
    pub(super) credentials: Option<Vec<CredentialRow>>,
    /// Whether the agent has more active credentials than listed.
    pub(super) more_credentials: bool,
    /// The credentials page narrowed to the agent.
    pub(super) credentials_href: String,
    pub(super) leases: Option<Vec<LeaseRow>>,
}

pub(super) struct LeaseRow {
    pub(super) id: String,
    pub(super) kind: String,
    pub(super) secret_set_id: String,
    pub(super) actions: String,
    pub(super) keys: String,
    pub(super) expires: String,
    pub(super) uses_left: String,
}

/// What the agent holds now, for its page.
pub(super) async fn agent_holdings(
    ctx: &Context,
    principal: &Principal,
    workspace_id: &str,
    agent_id: &str,
    base: &str,
) -> Result<AgentHoldings, ApiError> {
    let (credentials, more_credentials) = match person_requires(principal, Need::KillSwitchRead) {
        Ok(()) => {
            let mut rows =
                credentials::active(ctx, workspace_id, Some(agent_id), None, AGENT_ROWS + 1)
                    .await?;
            let more =
                crate::http::next_cursor(&mut rows, AGENT_ROWS, |c| (c.created_at, c.id.clone()))
                    .is_some();
            (
                Some(rows.into_iter().map(|c| credential_row(base, c)).collect()),
                more,
            )
        }
        Err(_) => (None, false),
    };
    let leases = match person_requires(principal, Need::VaultLeasesRead) {
        Ok(()) => {
            let now = crate::time::now_ms();
            let listed = leases::list(
                ctx,
                workspace_id,
                api::LeaseListParams {
                    agent_id: Some(agent_id.to_owned()),
                    ..api::LeaseListParams::default()
                },
            )
            .await?;
            Some(
                listed
                    .into_iter()
                    .filter(|l| {
                        l.revoked_at.is_none()
                            && l.uses_left != Some(0)
                            && parse_iso(&l.expires_at).is_some_and(|at| at > now)
                    })
                    .map(|l| LeaseRow {
                        id: l.lease_id,
                        kind: l.kind,
                        secret_set_id: l.secret_set_id,
                        actions: l.actions.join(", "),
                        keys: l.keys.map_or_else(|| "all".to_owned(), |k| k.join(", ")),
                        expires: l.expires_at,
                        uses_left: l
                            .uses_left
                            .map_or_else(|| "unlimited".to_owned(), |n| n.to_string()),
                    })
                    .collect(),
            )
        }
        Err(_) => None,
    };
    Ok(AgentHoldings {
        credentials,
        more_credentials,
        credentials_href: href(base, agent_id, None, None),
        leases,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_keep_the_filter_and_the_limit() {
        assert_eq!(href("", "", None, None), "/dashboard/credentials");
        assert_eq!(
            href("/acp", "agt_1", Some("c1"), Some(5)),
            "/acp/dashboard/credentials?agent_id=agt_1&limit=5&cursor=c1"
        );
    }

    #[test]
    fn the_confirmation_is_the_name_exactly() {
        assert!(confirmed(Some("Acme Ops"), "Acme Ops"));
        assert!(confirmed(Some(" Acme Ops\n"), "Acme Ops"));
        assert!(!confirmed(Some("acme ops"), "Acme Ops"));
        assert!(!confirmed(Some(""), ""));
        assert!(!confirmed(None, "Acme Ops"));
    }

    #[test]
    fn notices_count_what_was_revoked() {
        assert_eq!(
            notice("revoked", Some(0)).as_deref(),
            Some("Revoke done: nothing was live to revoke.")
        );
        assert_eq!(
            notice("revoked", Some(3)).as_deref(),
            Some("Revoke done: 3 credentials revoked.")
        );
        assert!(notice("paused", None).is_some() && notice("<b>", None).is_none());
    }
}
