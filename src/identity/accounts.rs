//! Dashboard identity: magic-link login, sessions, personal access tokens, workspaces and
//! memberships, and the workspace's API keys as managed from the dashboard.

use askama::Template;
use serde_json::json;

use super::error::{IdentityError, IdentityResult};
use crate::api;
use crate::audit::{self, Actor};
use crate::context::Context;
use crate::domain::access::{Scopes, KEY_SCOPES, TOKEN_SCOPES};
use crate::domain::ids::{self, ApiKeyId, TokenId, UserId, WorkspaceId};
use crate::domain::{EmailAddress, Role};
use crate::identity::api_keys::{NewApiKey, MAX_RATE_LIMIT};
use crate::mail::Email;
use crate::secret::{random_base62, sha256_hex, Secret};
use crate::store::{
    AccountOp, ApiKeyRecord, Applied, Change, Membership, Op, PatRecord, SessionRecord, StoreError,
    User, Workspace,
};
use crate::time::{iso, now_ms};

pub const SESSION_COOKIE: &str = "acp_session";
pub const PAT_PREFIX: &str = "svc_pat_";
const LOGIN_TOKEN_TTL_MS: i64 = 15 * 60 * 1000;
const LOGIN_WINDOW_MS: i64 = 15 * 60 * 1000;

/// The CSRF token of a session: derived from the session id, so only its holder can know it,
/// and nothing more needs storing.
pub fn csrf_token(session_id: &str) -> String {
    sha256_hex(format!("csrf:{session_id}").as_bytes())
}

/// Counts a hit in a fixed window shared by every replica; 429 beyond `limit`.
pub async fn enforce_rate_limit(
    ctx: &Context,
    bucket: String,
    window_ms: i64,
    limit: i64,
) -> IdentityResult<()> {
    let now = now_ms();
    let window_start = now - now.rem_euclid(window_ms);
    match ctx
        .writer
        .commit(Change::new(AccountOp::HitRateLimit {
            bucket,
            window_start,
        }))
        .await?
    {
        Applied::Count(hits) if hits > limit => Err(IdentityError::RateLimited {
            retry_after_secs: (window_start + window_ms - now + 999) / 1000,
        }),
        _ => Ok(()),
    }
}

/// Whether `email` may sign up here (the `signup` setting): by the setting alone (`open`, or a
/// domain `domains:` lists), or as a member of some workspace (`invite`, and always).
async fn may_sign_up(ctx: &Context, email: &EmailAddress) -> IdentityResult<bool> {
    if ctx.config.signup.admits_without_membership(email) {
        return Ok(true);
    }
    let Some(user) = ctx.store.user_by_email(email.as_str()).await? else {
        return Ok(false);
    };
    Ok(!ctx.store.memberships(&user.id).await?.is_empty())
}

fn signup_closed() -> IdentityError {
    IdentityError::forbidden(
        "signup_closed",
        "this server admits only the people a workspace owner or admin added: ask one to add you",
    )
}

/// Sends a one-time login link to `email`. Answers the same whether or not a user exists, and
/// whether or not the address may sign up (one that may not gets no mail, and nothing is
/// stored for it).
pub async fn start_login(ctx: &Context, email: &str, client_ip: &str) -> IdentityResult<()> {
    let address = EmailAddress::from_field("email", email)?;
    let per_email = ctx.config.login_limit_per_email;
    let per_ip = ctx.config.login_limit_per_ip;
    enforce_rate_limit(
        ctx,
        format!("login:ip:{client_ip}"),
        LOGIN_WINDOW_MS,
        per_ip,
    )
    .await?;
    if !may_sign_up(ctx, &address).await? {
        tracing::debug!("login link not sent: the address may not sign up");
        return Ok(());
    }
    let email = address.into_string();
    enforce_rate_limit(
        ctx,
        format!("login:email:{}", sha256_hex(email.as_bytes())),
        LOGIN_WINDOW_MS,
        per_email,
    )
    .await?;
    let (token, token_hash) = new_login_token();
    let now = now_ms();
    ctx.writer
        .commit(Change::new(AccountOp::CreateLoginToken {
            token_hash,
            email: email.clone(),
            created_at: now,
            expires_at: now + LOGIN_TOKEN_TTL_MS,
        }))
        .await?;
    let link = login_link(&ctx.public_url, &token);
    ctx.mailer
        .send(&login_email(email, link.expose())?)
        .await
        .map_err(IdentityError::from)?;
    Ok(())
}

/// A new one-time login token (`lgn_...`, shown once, in the link) and the hash that is stored.
pub fn new_login_token() -> (Secret, String) {
    let token = format!("lgn_{}", random_base62(43));
    let hash = sha256_hex(token.as_bytes());
    (Secret::new(token), hash)
}

/// How long a login link works.
pub const LOGIN_LINK_TTL_MS: i64 = LOGIN_TOKEN_TTL_MS;

/// The login link of `token` on the server at `public_url`.
pub fn login_link(public_url: &str, token: &Secret) -> Secret {
    Secret::new(format!(
        "{public_url}/auth/verify-login?token={}",
        token.expose()
    ))
}

/// The mail that carries a login link to `email`.
pub fn login_email(email: String, link: &str) -> IdentityResult<Email> {
    Ok(Email {
        to: vec![email],
        subject: "Your acp login link".into(),
        text: Some(format!(
            "Open this link to log in to acp. It works once and expires in 15 minutes.\n\n{link}\n\n\
             If you did not ask for it, ignore this message."
        )),
        html: Some(
            LoginEmail { link }
                .render()
                .map_err(|e| IdentityError::internal(e.to_string()))?,
        ),
        ..Email::default()
    })
}

/// A session just started: the cookie value (shown once, to the browser) and its user.
pub struct NewSession {
    pub session_id: Secret,
    pub user: User,
    pub workspace_id: Option<String>,
    pub max_age_secs: i64,
}

/// The login email's HTML part, auto-escaped like the pages.
#[derive(askama::Template)]
#[template(
    ext = "html",
    source = "<p>Open this link to log in to acp. It works once and expires in 15 minutes.</p><p><a href=\"{{ link }}\">Log in to acp</a></p><p>If you did not ask for it, ignore this message.</p>"
)]
struct LoginEmail<'a> {
    link: &'a str,
}

/// Consumes a login token and starts a session.
pub async fn verify_login(ctx: &Context, token: &str) -> IdentityResult<NewSession> {
    let token = token.trim();
    if token.is_empty() {
        return Err(IdentityError::missing("token"));
    }
    let token_hash = sha256_hex(token.as_bytes());
    let invalid = || {
        IdentityError::malformed(
            "invalid_token",
            "this login link is not valid; ask for a new one",
        )
    };
    let (email, expires_at, used_at) = ctx
        .store
        .login_token(&token_hash)
        .await?
        .ok_or_else(invalid)?;
    let now = now_ms();
    if used_at.is_some() {
        return Err(IdentityError::conflict(
            "token_used",
            "this login link was already used; ask for a new one",
        ));
    }
    if now >= expires_at {
        return Err(IdentityError::gone(
            "token_expired",
            "this login link expired; ask for a new one",
        ));
    }
    let existing = ctx.store.user_by_email(&email).await?;
    let user_id = existing
        .as_ref()
        .map_or_else(|| ids::new_id(ids::USER), |u| u.id.clone());
    let workspace_id = match &existing {
        Some(u) => ctx
            .store
            .memberships(&u.id)
            .await?
            .into_iter()
            .next()
            .map(|m| m.workspace.id),
        None => None,
    };
    // The setting or the memberships may have changed since the link was sent.
    let address = EmailAddress::parse(&email).map_err(IdentityError::internal)?;
    if workspace_id.is_none() && !ctx.config.signup.admits_without_membership(&address) {
        return Err(signup_closed());
    }
    let session_id = random_base62(43);
    let session = SessionRecord {
        id_hash: sha256_hex(session_id.as_bytes()),
        user_id: user_id.clone(),
        workspace_id: workspace_id.clone(),
        created_at: now,
        expires_at: now + ctx.config.session_ttl_ms,
        revoked_at: None,
    };
    let event = audit::state_change(
        "auth.login",
        "login",
        workspace_id.as_deref(),
        None,
        &Actor::User(user_id.clone()),
        json!({ "first_login": existing.is_none() }),
    );
    let change = Change::new(AccountOp::Login {
        token_hash,
        email,
        user_id,
        session,
        at: now,
    })
    .audited(event);
    let user = match ctx.writer.commit(change).await {
        Ok(Applied::User(user)) => *user,
        Ok(_) => {
            return Err(IdentityError::internal(
                "login answered an unexpected outcome",
            ))
        }
        Err(StoreError::TokenInvalid) => {
            return Err(IdentityError::conflict(
                "token_used",
                "this login link was already used",
            ))
        }
        Err(e) => return Err(e.into()),
    };
    Ok(NewSession {
        session_id: Secret::new(session_id),
        user,
        workspace_id,
        max_age_secs: ctx.config.session_ttl_ms / 1000,
    })
}

/// Who a session-authenticated request comes from.
#[derive(Debug, Clone)]
pub struct Principal {
    pub user: User,
    /// The session's hash for cookie sessions; `None` for a personal access token.
    pub session_hash: Option<String>,
    pub pat_id: Option<String>,
    /// When the token (for a token) expires.
    pub pat_expires_at: Option<i64>,
    /// The active workspace: the session's, or for a token the `X-Service-Workspace` header or `?workspace_id=`
    /// (or the user's only workspace).
    pub workspace_id: Option<String>,
    /// For cookie sessions, the token state-changing requests must echo in `X-CSRF-Token`.
    pub csrf_token: Option<String>,
    /// The user's role in `workspace_id`, read once when the request was authenticated.
    pub role: Option<Role>,
    /// What a token is narrowed to; every scope for a session.
    pub scopes: Scopes,
}

impl Principal {
    pub fn actor(&self) -> Actor {
        Actor::User(self.user.id.clone())
    }

    /// `workspace_id` if the user is a member of it: where events of their own acts go.
    pub fn audit_workspace(&self) -> Option<&str> {
        self.role.and(self.workspace_id.as_deref())
    }

    /// The active workspace and the user's role in it; 400 when none is selected, 403 when the
    /// user is not (or no longer) a member.
    pub fn membership(&self) -> IdentityResult<(String, Role)> {
        let workspace_id = self.workspace_id.clone().ok_or_else(|| {
            IdentityError::malformed(
                "workspace_required",
                "select a workspace first (POST /v1/workspaces/select, or X-Service-Workspace with a token)",
            )
        })?;
        match self.role {
            Some(role) => Ok((workspace_id, role)),
            None => Err(not_a_member()),
        }
    }

    /// Like [`Self::membership`], but the role must be owner or admin.
    pub fn admin_of(&self) -> IdentityResult<(String, Role)> {
        let (workspace_id, role) = self.membership()?;
        if !role.can_manage() {
            return Err(insufficient_role(
                "only workspace owners and admins may do this",
            ));
        }
        Ok((workspace_id, role))
    }
}

/// The user's role in the active workspace, if any is selected and they (still) belong to it.
async fn role_in(
    ctx: &Context,
    workspace_id: Option<&str>,
    user_id: &str,
) -> IdentityResult<Option<Role>> {
    // A workspace named by a request is read as a workspace id first: one of another shape is
    // a workspace the person is not a member of, answered without a lookup.
    match workspace_id.and_then(WorkspaceId::parse) {
        Some(ws) => Ok(ctx.store.role_in(&ws, user_id).await?),
        None => Ok(None),
    }
}

pub fn not_a_member() -> IdentityError {
    IdentityError::forbidden("not_a_member", "you are not a member of this workspace")
}

pub fn unauthenticated() -> IdentityError {
    IdentityError::unauthenticated(
        "unauthenticated",
        "log in (session cookie) or send a personal access token",
    )
}

/// Resolves a cookie session.
pub async fn session_principal(ctx: &Context, session_id: &str) -> IdentityResult<Principal> {
    let id_hash = sha256_hex(session_id.as_bytes());
    let session = ctx
        .store
        .session(&id_hash)
        .await?
        .ok_or_else(unauthenticated)?;
    if session.revoked_at.is_some() || now_ms() >= session.expires_at {
        return Err(unauthenticated());
    }
    let user = ctx
        .store
        .user(&session.user_id)
        .await?
        .ok_or_else(unauthenticated)?;
    let role = role_in(ctx, session.workspace_id.as_deref(), &user.id).await?;
    Ok(Principal {
        user,
        session_hash: Some(id_hash),
        pat_id: None,
        pat_expires_at: None,
        workspace_id: session.workspace_id,
        role,
        csrf_token: Some(csrf_token(session_id)),
        scopes: Scopes::all(),
    })
}

fn invalid_token() -> IdentityError {
    IdentityError::unauthenticated("invalid_token", "the access token is not valid")
}

/// Resolves a personal access token; `workspace` is the requested workspace, if any.
pub async fn token_principal(
    ctx: &Context,
    token: &str,
    workspace: Option<&str>,
) -> IdentityResult<Principal> {
    let hash = sha256_hex(token.as_bytes());
    let pat = ctx
        .store
        .pat_by_hash(&hash)
        .await?
        .ok_or_else(invalid_token)?;
    let now = now_ms();
    if !crate::secret::ct_eq(pat.token_hash.as_bytes(), hash.as_bytes())
        || pat.revoked_at.is_some()
        || now >= pat.expires_at
    {
        return Err(invalid_token());
    }
    // A token made by a token is no better than its makers. Revoking a token revokes those it
    // made, and none outlives its maker; this catches one made on another replica while its
    // maker's maker was being revoked.
    if let Some(parent) = &pat.parent_id {
        if !ctx.store.pat_lineage_live(parent, now).await? {
            return Err(IdentityError::unauthenticated(
                "invalid_token",
                "the access token is not valid: the token that made it was revoked or expired",
            ));
        }
    }
    let user = ctx
        .store
        .user(&pat.user_id)
        .await?
        .ok_or_else(invalid_token)?;
    if pat.last_used_at.is_none_or(|t| now - t > 60_000) {
        touch(
            ctx,
            AccountOp::TouchPat {
                pat_id: pat.id.clone(),
                at: now,
            }
            .into(),
        );
    }
    let workspace_id = match workspace {
        Some(ws) => Some(ws.to_owned()),
        None => {
            let mut all = ctx.store.memberships(&user.id).await?;
            if all.len() == 1 {
                all.pop().map(|m| m.workspace.id)
            } else {
                None
            }
        }
    };
    let role = role_in(ctx, workspace_id.as_deref(), &user.id).await?;
    Ok(Principal {
        user,
        session_hash: None,
        pat_id: Some(pat.id),
        pat_expires_at: Some(pat.expires_at),
        workspace_id,
        role,
        csrf_token: None,
        scopes: Scopes::from_stored(pat.scopes.as_deref()),
    })
}

/// Records last-use metadata without holding up the request.
pub fn touch(ctx: &Context, op: Op) {
    let writer = ctx.writer.clone();
    tokio::spawn(async move {
        if let Err(err) = writer.commit(Change::new(op)).await {
            tracing::debug!(error = %err, "last-used update skipped");
        }
    });
}

pub async fn logout(ctx: &Context, principal: &Principal) -> IdentityResult<()> {
    let Some(id_hash) = principal.session_hash.clone() else {
        return Err(session_required());
    };
    let event = audit::state_change(
        "auth.logout",
        "logout",
        principal.audit_workspace(),
        None,
        &principal.actor(),
        json!({}),
    );
    ctx.writer
        .commit(
            Change::new(AccountOp::EndSession {
                id_hash,
                at: now_ms(),
            })
            .audited(event),
        )
        .await?;
    Ok(())
}

pub fn session_required() -> IdentityError {
    IdentityError::forbidden(
        "session_required",
        "this needs a browser session, not an access token",
    )
}

fn workspace_wire(m: &Membership) -> api::WorkspaceItem {
    api::WorkspaceItem {
        workspace_id: m.workspace.id.clone(),
        name: m.workspace.name.clone(),
        role: m.role.as_str().into(),
        created_at: iso(m.workspace.created_at),
    }
}

pub fn user_wire(u: &User) -> api::UserInfo {
    api::UserInfo {
        user_id: u.id.clone(),
        email: u.email.clone(),
        created_at: iso(u.created_at),
        last_login_at: u.last_login_at.map(iso),
    }
}

pub async fn me(ctx: &Context, principal: &Principal) -> IdentityResult<api::MeResponse> {
    let workspaces = ctx.store.memberships(&principal.user.id).await?;
    Ok(api::MeResponse {
        ok: true,
        user: user_wire(&principal.user),
        active_workspace_id: principal.workspace_id.clone(),
        workspaces: workspaces.iter().map(workspace_wire).collect(),
        auth: if principal.pat_id.is_some() {
            "token"
        } else {
            "session"
        }
        .into(),
        csrf_token: principal.csrf_token.clone(),
    })
}

pub async fn list_workspaces(
    ctx: &Context,
    principal: &Principal,
) -> IdentityResult<api::WorkspaceListResponse> {
    let all = ctx.store.memberships(&principal.user.id).await?;
    Ok(api::WorkspaceListResponse {
        ok: true,
        items: all.iter().map(workspace_wire).collect(),
        active_workspace_id: principal.workspace_id.clone(),
    })
}

/// A `name` as sent, at most `max` characters (counted before trimming, as the OpenAPI
/// document's `maxLength` counts them), trimmed; `None` when only whitespace.
pub fn bounded_name(raw: &str, max: usize) -> IdentityResult<Option<String>> {
    if raw.chars().count() > max {
        return Err(IdentityError::invalid(
            "name",
            format!("must be at most {max} characters"),
        ));
    }
    let name = raw.trim();
    Ok((!name.is_empty()).then(|| name.to_owned()))
}

pub fn check_workspace_name(name: &str) -> IdentityResult<String> {
    bounded_name(name, 200)?.ok_or_else(|| IdentityError::missing("name"))
}

/// A new workspace with the caller as owner; a session switches to it.
pub async fn create_workspace(
    ctx: &Context,
    principal: &Principal,
    name: &str,
) -> IdentityResult<api::WorkspaceItem> {
    let name = check_workspace_name(name)?;
    let email = EmailAddress::parse(&principal.user.email).map_err(IdentityError::internal)?;
    if !may_sign_up(ctx, &email).await? {
        return Err(signup_closed());
    }
    let now = now_ms();
    let workspace = Workspace {
        id: ids::new_id(ids::WORKSPACE),
        name,
        created_at: now,
    };
    let mut ops = vec![
        AccountOp::CreateWorkspace(workspace.clone()),
        AccountOp::UpsertMembership {
            workspace_id: workspace.id.clone(),
            email: principal.user.email.clone(),
            user_id: principal.user.id.clone(),
            role: Role::Owner,
            at: now,
        },
    ];
    if let Some(id_hash) = &principal.session_hash {
        ops.push(AccountOp::SelectWorkspace {
            id_hash: id_hash.clone(),
            workspace_id: workspace.id.clone(),
        });
    }
    let event = audit::state_change(
        "workspace.created",
        "create",
        Some(&workspace.id),
        None,
        &principal.actor(),
        json!({ "name": workspace.name }),
    );
    ctx.writer
        .commit(Change::new(Op::Batch(ops.into_iter().map(Op::from).collect())).audited(event))
        .await?;
    Ok(api::WorkspaceItem {
        workspace_id: workspace.id,
        name: workspace.name,
        role: Role::Owner.as_str().into(),
        created_at: iso(now),
    })
}

pub async fn select_workspace(
    ctx: &Context,
    principal: &Principal,
    workspace_id: &str,
) -> IdentityResult<()> {
    let Some(id_hash) = principal.session_hash.clone() else {
        return Err(session_required());
    };
    if workspace_id.is_empty() {
        return Err(IdentityError::missing("workspace_id"));
    }
    // A workspace the user does not belong to is answered like one that does not exist.
    let unknown = || IdentityError::not_found("unknown_workspace", "no such workspace among yours");
    let workspace_id = WorkspaceId::parse(workspace_id).ok_or_else(unknown)?;
    if ctx
        .store
        .role_in(&workspace_id, &principal.user.id)
        .await?
        .is_none()
    {
        return Err(unknown());
    }
    ctx.writer
        .commit(Change::new(AccountOp::SelectWorkspace {
            id_hash,
            workspace_id: workspace_id.into_string(),
        }))
        .await?;
    Ok(())
}

pub fn api_key_wire(k: &ApiKeyRecord) -> api::ApiKeyInfo {
    api::ApiKeyInfo {
        key_id: k.id.clone(),
        name: k.name.clone(),
        mode: k.mode.clone(),
        prefix: format!("svc_{}_", k.mode),
        last_four: k.last_four.clone(),
        created_at: iso(k.created_at),
        created_by: k.created_by.clone(),
        created_by_name: None,
        last_used_at: k.last_used_at.map(iso),
        revoked_at: k.revoked_at.map(iso),
        scopes: Scopes::from_stored(k.scopes.as_deref()).list(),
        rate_limit: k.rate_limit,
    }
}

/// The most scopes one key or token request may list.
pub const MAX_SCOPES: usize = 16;

/// The scopes a request asks for, checked against those of its kind.
fn requested_scopes(
    scopes: Option<&[String]>,
    known: &'static [&'static str],
) -> IdentityResult<Scopes> {
    // As the OpenAPI document says (`maxItems`): a list, not a bag of repeats.
    if scopes.is_some_and(|s| s.len() > MAX_SCOPES) {
        return Err(IdentityError::invalid(
            "scopes",
            format!("must list at most {MAX_SCOPES} scopes"),
        ));
    }
    Scopes::parse(scopes.unwrap_or(&[]).iter().map(String::as_str), known)
        .map_err(|e| IdentityError::invalid("scopes", e.to_string()))
}

pub async fn create_api_key(
    ctx: &Context,
    principal: &Principal,
    req: api::CreateApiKeyRequest,
) -> IdentityResult<api::CreateApiKeyResponse> {
    let (workspace_id, _) = principal.admin_of()?;
    let name = match req.name.as_deref() {
        Some(raw) => bounded_name(raw, 100)?,
        None => None,
    };
    let scopes = requested_scopes(req.scopes.as_deref(), KEY_SCOPES)?;
    if req
        .rate_limit
        .is_some_and(|r| !(1..=MAX_RATE_LIMIT).contains(&r))
    {
        return Err(IdentityError::invalid(
            "rate_limit",
            format!("must be between 1 and {MAX_RATE_LIMIT} per second"),
        ));
    }
    let key = NewApiKey::generate(req.live.unwrap_or(false));
    let record = ApiKeyRecord {
        id: ids::new_id(ids::API_KEY),
        workspace_id: workspace_id.clone(),
        key_hash: key.hash.clone(),
        mode: key.mode.into(),
        last_four: key.last_four.clone(),
        created_at: now_ms(),
        revoked_at: None,
        name,
        created_by: Some(principal.user.id.clone()),
        last_used_at: None,
        scopes: scopes.stored(),
        rate_limit: req.rate_limit,
    };
    let event = audit::state_change(
        "api_key.created",
        "create",
        Some(&workspace_id),
        None,
        &principal.actor(),
        json!({ "key_id": record.id, "mode": record.mode, "name": record.name, "scopes": scopes.list(), "rate_limit": record.rate_limit }),
    );
    ctx.writer
        .commit(Change::new(AccountOp::CreateApiKey(record.clone())).audited(event))
        .await?;
    Ok(api::CreateApiKeyResponse {
        ok: true,
        api_key: api_key_wire(&record),
        key: key.secret.expose().to_owned(),
    })
}

pub async fn revoke_api_key(
    ctx: &Context,
    principal: &Principal,
    key_id: &str,
) -> IdentityResult<()> {
    let (workspace_id, _) = principal.admin_of()?;
    let unknown =
        || IdentityError::not_found("unknown_api_key", "no such live key in this workspace");
    let key_id = ApiKeyId::parse(key_id).ok_or_else(unknown)?;
    let event = audit::state_change(
        "api_key.revoked",
        "revoke",
        Some(&workspace_id),
        None,
        &principal.actor(),
        json!({ "key_id": key_id }),
    );
    let change = Change::new(AccountOp::RevokeApiKey {
        workspace_id,
        key_id: key_id.as_str().to_owned(),
        at: now_ms(),
    })
    .audited(event);
    match ctx.writer.commit(change).await {
        Ok(_) => {
            ctx.caches.forget_key(&key_id);
            ctx.announce_change().await;
            Ok(())
        }
        Err(StoreError::NotFound) => Err(unknown()),
        Err(e) => Err(e.into()),
    }
}

pub fn pat_wire(p: &PatRecord) -> api::TokenInfo {
    api::TokenInfo {
        token_id: p.id.clone(),
        name: p.name.clone(),
        last_four: p.last_four.clone(),
        created_at: iso(p.created_at),
        expires_at: iso(p.expires_at),
        last_used_at: p.last_used_at.map(iso),
        revoked_at: p.revoked_at.map(iso),
        scopes: Scopes::from_stored(p.scopes.as_deref()).list(),
        parent_token_id: p.parent_id.clone(),
    }
}

pub async fn create_pat(
    ctx: &Context,
    principal: &Principal,
    req: api::CreateTokenRequest,
) -> IdentityResult<api::CreateTokenResponse> {
    let name = bounded_name(&req.name, 100)?.ok_or_else(|| IdentityError::missing("name"))?;
    let days = req.expires_in_days.unwrap_or(90);
    if !(1..=365).contains(&days) {
        return Err(IdentityError::invalid(
            "expires_in_days",
            "must be between 1 and 365",
        ));
    }
    let scopes = requested_scopes(req.scopes.as_deref(), TOKEN_SCOPES)?;
    let token = format!("{PAT_PREFIX}{}", random_base62(43));
    let now = now_ms();
    let record = PatRecord {
        id: ids::new_id(ids::TOKEN),
        user_id: principal.user.id.clone(),
        name,
        token_hash: sha256_hex(token.as_bytes()),
        last_four: token[token.len() - 4..].to_owned(),
        created_at: now,
        // A token made by a token lives no longer than its maker.
        expires_at: principal
            .pat_expires_at
            .map_or(now + days * 86_400_000, |limit| {
                limit.min(now + days * 86_400_000)
            }),
        revoked_at: None,
        last_used_at: None,
        scopes: scopes.stored(),
        parent_id: principal.pat_id.clone(),
    };
    let event = audit::state_change(
        "access_token.created",
        "create",
        principal.audit_workspace(),
        None,
        &principal.actor(),
        json!({ "token_id": record.id, "name": record.name, "expires_at": iso(record.expires_at), "scopes": scopes.list(), "parent_token_id": record.parent_id }),
    );
    match ctx
        .writer
        .commit(Change::new(AccountOp::CreatePat(record.clone())).audited(event))
        .await
    {
        Ok(_) => {}
        // The token this request came with was revoked (or expired) since it was read.
        Err(StoreError::Conflict(_)) => return Err(invalid_token()),
        Err(e) => return Err(e.into()),
    }
    Ok(api::CreateTokenResponse {
        ok: true,
        access_token: pat_wire(&record),
        token,
    })
}

/// Revokes one of the person's tokens and every live token made from it, transitively, in one
/// transaction; answers how many were revoked.
pub async fn revoke_pat(
    ctx: &Context,
    principal: &Principal,
    token_id: &str,
) -> IdentityResult<i64> {
    let unknown = || IdentityError::not_found("unknown_token", "no such live token of yours");
    let token_id = TokenId::parse(token_id).ok_or_else(unknown)?;
    let event = audit::state_change(
        "access_token.revoked",
        "revoke",
        principal.audit_workspace(),
        None,
        &principal.actor(),
        json!({ "token_id": token_id }),
    );
    let change = Change::new(AccountOp::RevokePat {
        user_id: principal.user.id.clone(),
        pat_id: token_id.as_str().to_owned(),
        at: now_ms(),
    })
    .audited(event);
    match ctx.writer.commit(change).await {
        Ok(Applied::Count(n)) => Ok(n),
        Ok(_) => Err(IdentityError::internal(
            "revoke answered an unexpected outcome",
        )),
        Err(StoreError::NotFound) => Err(unknown()),
        Err(e) => Err(e.into()),
    }
}

pub async fn list_members(
    ctx: &Context,
    principal: &Principal,
) -> IdentityResult<api::MemberListResponse> {
    let (workspace_id, _) = principal.membership()?;
    let items = ctx
        .store
        .members(&workspace_id)
        .await?
        .into_iter()
        .map(|(u, role)| api::Member {
            user_id: u.id,
            email: u.email,
            role: role.as_str().into(),
        })
        .collect();
    Ok(api::MemberListResponse { ok: true, items })
}

fn parse_role(text: &str) -> IdentityResult<Role> {
    Role::parse(text)
        .ok_or_else(|| IdentityError::invalid("role", "must be `owner`, `admin` or `member`"))
}

pub async fn add_member(
    ctx: &Context,
    principal: &Principal,
    req: api::AddMemberRequest,
) -> IdentityResult<api::Member> {
    let (workspace_id, my_role) = principal.admin_of()?;
    let email = EmailAddress::from_field("email", &req.email)?.into_string();
    let role = parse_role(req.role.as_deref().unwrap_or("member"))?;
    if role == Role::Owner && my_role != Role::Owner {
        return Err(insufficient_role("only owners may make owners"));
    }
    let existing = ctx.store.user_by_email(&email).await?;
    if let Some(user) = &existing {
        if ctx.store.role_in(&workspace_id, &user.id).await? == Some(Role::Owner)
            && role != Role::Owner
        {
            // Changing an owner's role is an owner's decision, and a workspace keeps one.
            if my_role != Role::Owner {
                return Err(insufficient_role("only owners may change an owner's role"));
            }
            let owners = ctx
                .store
                .members(&workspace_id)
                .await?
                .iter()
                .filter(|(_, r)| *r == Role::Owner)
                .count();
            if owners <= 1 {
                return Err(last_owner());
            }
        }
    }
    let user_id = existing.map_or_else(|| ids::new_id(ids::USER), |u| u.id);
    let event = audit::state_change(
        "membership.granted",
        "grant",
        Some(&workspace_id),
        None,
        &principal.actor(),
        json!({ "user_id": user_id, "role": role.as_str() }),
    );
    let change = Change::new(AccountOp::UpsertMembership {
        workspace_id,
        email: email.clone(),
        user_id,
        role,
        at: now_ms(),
    })
    .audited(event);
    match ctx.writer.commit(change).await? {
        Applied::User(u) => Ok(api::Member {
            user_id: u.id,
            email: u.email,
            role: role.as_str().into(),
        }),
        _ => Err(IdentityError::internal(
            "add_member answered an unexpected outcome",
        )),
    }
}

pub async fn remove_member(
    ctx: &Context,
    principal: &Principal,
    user_id: &str,
) -> IdentityResult<()> {
    let (workspace_id, my_role) = principal.admin_of()?;
    let unknown = || IdentityError::not_found("unknown_member", "no such member of this workspace");
    let user_id = UserId::parse(user_id).ok_or_else(unknown)?;
    let members = ctx.store.members(&workspace_id).await?;
    let Some((_, their_role)) = members.iter().find(|(u, _)| u.id == *user_id) else {
        return Err(unknown());
    };
    if *their_role == Role::Owner {
        if my_role != Role::Owner {
            return Err(insufficient_role("only owners may remove owners"));
        }
        if members.iter().filter(|(_, r)| *r == Role::Owner).count() == 1 {
            return Err(last_owner());
        }
    }
    let event = audit::state_change(
        "membership.removed",
        "remove",
        Some(&workspace_id),
        None,
        &principal.actor(),
        json!({ "user_id": user_id }),
    );
    let change = Change::new(AccountOp::RemoveMembership {
        workspace_id,
        user_id: user_id.into_string(),
    })
    .audited(event);
    match ctx.writer.commit(change).await {
        Ok(_) => Ok(()),
        Err(StoreError::Conflict(_)) => Err(last_owner()),
        Err(e) => Err(e.into()),
    }
}

fn insufficient_role(why: &str) -> IdentityError {
    IdentityError::forbidden("insufficient_role", why.to_owned())
}

fn last_owner() -> IdentityError {
    IdentityError::conflict("last_owner", "a workspace keeps at least one owner")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_bounded_as_sent_then_trimmed() {
        let padded = format!("\r{}", "*".repeat(100));
        assert!(
            bounded_name(&padded, 100).is_err(),
            "101 characters as sent"
        );
        assert_eq!(
            bounded_name(&format!(" {} ", "*".repeat(98)), 100).unwrap(),
            Some("*".repeat(98))
        );
        assert_eq!(bounded_name("  \t", 100).unwrap(), None);
        assert!(check_workspace_name(" ").is_err());
    }

    #[test]
    fn the_login_email_links_the_token_and_escapes_what_it_shows() {
        let html = LoginEmail {
            link: "https://acp.example.com/auth/verify-login?token=abc",
        }
        .render()
        .unwrap();
        assert!(
            html.contains("href=\"https://acp.example.com/auth/verify-login?token=abc\""),
            "{html}"
        );
        let html = LoginEmail {
            link: "https://x.example/?a=1&b=\"<x>",
        }
        .render()
        .unwrap();
        assert!(html.contains("a=1&#38;b=&#34;&#60;x&#62;\""), "{html}");
    }
}
