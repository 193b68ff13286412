//! Who acts on a management endpoint: a workspace API key, or a person by
//! session cookie or personal access token; and whether they may do what the endpoint does.
//!
//! A handler names what it needs in its signature, `Authorized<needs::AgentsChange>`, so no
//! management handler runs without the check: the extractor authenticates whichever credential
//! the request carries, picks the workspace (the key's; the session's selected one; for a token
//! `X-Service-Workspace`, `X-Service-Workspace-Id` or `?workspace_id=`), and applies the rules
//! of [`crate::domain::access`]: the role of a person, the scopes of a key or token.

use std::marker::PhantomData;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::HeaderMap;

use crate::audit::Actor;
use crate::context::SharedContext;
use crate::domain::access::{key_may, person_may, Need};
use crate::error::ApiError;
use crate::identity::accounts::{Principal, PAT_PREFIX, SESSION_COOKIE};
use crate::policy::cache::View;

use super::extract::{authenticate, Caller};
use super::headers::{bearer_token, cookie};
use super::session::authenticate_user;

/// What a handler needs, as a type (see [`needs`]).
pub trait Grant {
    const NEED: Need;
}

/// One marker type per [`Need`] of a management endpoint.
pub mod needs {
    use super::{Grant, Need};

    macro_rules! grants {
        ($($name:ident),* $(,)?) => {$(
            #[derive(Debug)]
            pub struct $name;
            impl Grant for $name {
                const NEED: Need = Need::$name;
            }
        )*};
    }

    grants!(
        AgentsRead,
        AgentsChange,
        AuditRead,
        KillSwitchRead,
        KillSwitch,
        Credentials,
        PoliciesRead,
        PolicySync,
        ChallengesRead,
        ChallengesDecide,
        WorkspaceRead,
        WorkspaceChange,
        VaultRead,
        VaultChange,
        VaultLeasesRead,
        VaultLeases,
        McpRead,
        McpChange,
    );
}

/// The caller behind an authorized request.
#[derive(Debug, Clone)]
pub enum Who {
    Key(Box<Caller>),
    Person(Principal),
}

/// A request allowed to do `G::NEED` in `workspace_id`.
#[derive(Debug, Clone)]
pub struct Authorized<G> {
    pub workspace_id: String,
    pub who: Who,
    need: PhantomData<G>,
}

impl<G> Authorized<G> {
    /// Who the audit trail names: the key, or the person (session or token).
    pub fn actor(&self) -> Actor {
        match &self.who {
            Who::Key(caller) => caller.actor(),
            Who::Person(principal) => principal.actor(),
        }
    }

    /// Refuses (403, as the extractor refuses) unless the caller may also do `need`: for an
    /// answer that shows what two grants read.
    pub fn also(&self, need: Need) -> Result<(), ApiError> {
        match &self.who {
            Who::Key(caller) => caller.require(need),
            Who::Person(principal) => person_requires(principal, need),
        }
    }

    /// The view of the workspace the request was authorized under.
    pub async fn view(&self, ctx: &SharedContext) -> Result<View, ApiError> {
        match &self.who {
            Who::Key(caller) => Ok(caller.access.view.clone()),
            Who::Person(_) => Ok(ctx
                .caches
                .confirmed_view(ctx.store.as_ref(), &self.workspace_id)
                .await?),
        }
    }
}

/// Which kind of credential a request carries; a request with none is refused the way the
/// endpoint's usual caller expects (`missing_api_key` where keys may come, else
/// `unauthenticated`).
enum Presented {
    Key,
    Person,
    Nothing,
}

fn presented(headers: &HeaderMap) -> Presented {
    if headers.contains_key("x-service-api-key") {
        return Presented::Key;
    }
    match bearer_token(headers) {
        Some(token) if token.starts_with(PAT_PREFIX) => Presented::Person,
        Some(token) if !token.is_empty() => Presented::Key,
        _ if cookie(headers, SESSION_COOKIE).is_some() => Presented::Person,
        _ => Presented::Nothing,
    }
}

impl<G: Grant + Send + Sync> FromRequestParts<SharedContext> for Authorized<G> {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        ctx: &SharedContext,
    ) -> Result<Self, Self::Rejection> {
        let need = G::NEED;
        let (workspace_id, who) = match presented(&parts.headers) {
            Presented::Key => {
                let caller = authenticate(ctx, &parts.headers).await?;
                key_may(&caller.access.key.scopes, need).map_err(|d| ApiError::from((d, need)))?;
                (caller.workspace_id.clone(), Who::Key(Box::new(caller)))
            }
            Presented::Person => {
                let principal = authenticate_user(ctx, &parts.method, &parts.headers, &parts.uri)
                    .await?;
                let (workspace_id, role) = principal.membership()?;
                person_may(role, &principal.scopes, need).map_err(|d| ApiError::from((d, need)))?;
                (workspace_id, Who::Person(principal))
            }
            Presented::Nothing if need.key_scope().is_some() => {
                return Err(ApiError::unauthorized(
                    "missing_api_key",
                    "send a workspace API key in `X-Service-Api-Key` or `Authorization: Bearer`, a session cookie, or a personal access token",
                ))
            }
            Presented::Nothing => {
                return Err(crate::identity::accounts::unauthenticated().into());
            }
        };
        Ok(Self {
            workspace_id,
            who,
            need: PhantomData,
        })
    }
}

/// A person presenting a personal access token (`Authorization: Bearer svc_pat_...`) on an
/// endpoint whose usual caller is an API key (registering agents, the inventory): `None` when
/// the request carries no such token, else their workspace and themselves if their role and
/// the token's scopes allow `need` there. A session cookie is not taken here: these endpoints
/// are for programs, and a cookie is sent by the browser on its own.
pub async fn token_person(
    ctx: &SharedContext,
    method: &axum::http::Method,
    uri: &axum::http::Uri,
    headers: &HeaderMap,
    need: Need,
) -> Option<Result<(String, Principal), ApiError>> {
    if headers.contains_key("x-service-api-key") {
        return None;
    }
    if !bearer_token(headers).is_some_and(|t| t.starts_with(PAT_PREFIX)) {
        return None;
    }
    Some(
        async {
            let principal = authenticate_user(ctx, method, headers, uri).await?;
            let (workspace_id, role) = principal.membership()?;
            person_may(role, &principal.scopes, need).map_err(|d| ApiError::from((d, need)))?;
            Ok((workspace_id, principal))
        }
        .await,
    )
}

/// For the handlers that only people reach (their `Principal` extractor refuses API keys):
/// refuses unless the person's role and their token's scopes allow `need` in the active
/// workspace.
/// The person's own account matters (their tokens, new workspaces): a session, or a token
/// without scopes (one that acts with its user's whole power anyway).
pub fn unscoped_required(principal: &Principal) -> Result<(), ApiError> {
    if principal.scopes.is_unscoped() {
        Ok(())
    } else {
        let scope = "(none: an unscoped token)";
        Err(ApiError::new(
            axum::http::StatusCode::FORBIDDEN,
            "insufficient_scope",
            "a token with scopes cannot manage tokens or create workspaces",
        )
        .with("required_scope", scope))
    }
}

pub fn person_requires(principal: &Principal, need: Need) -> Result<(), ApiError> {
    let (_, role) = principal.membership()?;
    person_may(role, &principal.scopes, need).map_err(|d| ApiError::from((d, need)))
}
