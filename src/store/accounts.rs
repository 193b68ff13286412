//! Workspaces and who may act in them: workspace settings, API keys, dashboard users and their
//! memberships, login tokens, sessions, personal access tokens and the rate limits of logins.

use async_trait::async_trait;

use super::{Role, StoreError, Supersedes};

/// Reads of workspaces, keys, users, memberships, sessions and tokens.
#[async_trait]
pub trait AccountStore: Send + Sync {
    async fn workspace(&self, id: &str) -> Result<Option<Workspace>, StoreError>;
    /// The workspace the first start of this database created (`None` before it).
    async fn default_workspace_id(&self) -> Result<Option<String>, StoreError>;
    /// Every workspace of the database, oldest first (for `acp admin workspace list`).
    async fn all_workspaces(&self) -> Result<Vec<Workspace>, StoreError>;
    /// The names of actors in one lookup: the email addresses of `users`, and the names of the
    /// workspace's API keys `keys` and agents `agents` (ids of another workspace are not found).
    async fn actor_names(
        &self,
        workspace_id: &str,
        users: &[String],
        keys: &[String],
        agents: &[String],
    ) -> Result<Vec<ActorName>, StoreError>;
    /// Whether approval links of the workspace need a logged-in member.
    async fn require_member_approval(&self, workspace_id: &str) -> Result<bool, StoreError>;
    async fn api_key_by_hash(&self, key_hash: &str) -> Result<Option<ApiKeyRecord>, StoreError>;
    async fn api_keys(&self, workspace_id: &str) -> Result<Vec<ApiKeyRecord>, StoreError>;

    async fn user(&self, id: &str) -> Result<Option<User>, StoreError>;
    async fn user_by_email(&self, email: &str) -> Result<Option<User>, StoreError>;
    /// The user's workspaces with their role, oldest membership first.
    async fn memberships(&self, user_id: &str) -> Result<Vec<Membership>, StoreError>;
    async fn role_in(&self, workspace_id: &str, user_id: &str) -> Result<Option<Role>, StoreError>;
    async fn members(&self, workspace_id: &str) -> Result<Vec<(User, Role)>, StoreError>;
    async fn session(&self, id_hash: &str) -> Result<Option<SessionRecord>, StoreError>;
    /// `(email, expires_at, used_at)` of a login token.
    async fn login_token(
        &self,
        token_hash: &str,
    ) -> Result<Option<(String, i64, Option<i64>)>, StoreError>;
    async fn pat_by_hash(&self, token_hash: &str) -> Result<Option<PatRecord>, StoreError>;
    async fn pats(&self, user_id: &str) -> Result<Vec<PatRecord>, StoreError>;
    /// Whether the token `pat_id` and every token above it (its maker, the maker's maker...)
    /// is neither revoked nor expired at `now`.
    async fn pat_lineage_live(&self, pat_id: &str, now: i64) -> Result<bool, StoreError>;
}

/// Changes to workspaces, keys, users, memberships, sessions and tokens.
#[derive(Debug, Clone)]
pub enum AccountOp {
    /// Creates the default workspace and its key, once per database (guarded by a marker row so
    /// that replicas starting together create it only once), with its first owner when one is
    /// named. Answers `Bootstrapped(created)`; `Conflict` (nothing written) when the database
    /// was set up before.
    Bootstrap {
        workspace: Workspace,
        key: ApiKeyRecord,
        owner: Option<FirstOwner>,
    },
    CreateWorkspace(Workspace),
    /// Sets the workspace's settings.
    SetWorkspaceSettings {
        workspace_id: String,
        require_member_approval: bool,
        at: i64,
    },
    CreateApiKey(ApiKeyRecord),
    /// `NotFound` when there is no such live key in the workspace.
    RevokeApiKey {
        workspace_id: String,
        key_id: String,
        at: i64,
    },
    /// Records when an API key was last used (throttled by the caller).
    TouchApiKey {
        key_id: String,
        at: i64,
    },
    /// A single-use magic-link token (its hash) for an address.
    CreateLoginToken {
        token_hash: String,
        email: String,
        created_at: i64,
        expires_at: i64,
    },
    /// Consumes the login token, creates the user on first login (with `user_id`) and starts
    /// `session` for that user. Answers `User`; `TokenInvalid` when the token is unknown, used
    /// or expired; `Conflict` when the user was created with another id meanwhile.
    Login {
        token_hash: String,
        email: String,
        user_id: String,
        session: SessionRecord,
        at: i64,
    },
    EndSession {
        id_hash: String,
        at: i64,
    },
    SelectWorkspace {
        id_hash: String,
        workspace_id: String,
    },
    /// Gives the user with this email (created with `user_id` if new) `role` in the workspace.
    /// Answers `User`.
    UpsertMembership {
        workspace_id: String,
        email: String,
        user_id: String,
        role: Role,
        at: i64,
    },
    /// `NotFound` when the user is not a member.
    RemoveMembership {
        workspace_id: String,
        user_id: String,
    },
    /// `Conflict` when the token's parent is no longer live.
    CreatePat(PatRecord),
    /// Revokes the token and every live token made from it, transitively; answers
    /// `Count(revoked)`. `NotFound` when the user has no such live token.
    RevokePat {
        user_id: String,
        pat_id: String,
        at: i64,
    },
    /// Records when a personal access token was last used (throttled by the caller).
    TouchPat {
        pat_id: String,
        at: i64,
    },
    /// Counts one hit in a fixed window; answers `Count(hits in the window so far)`.
    HitRateLimit {
        bucket: String,
        window_start: i64,
    },
}

/// The `Conflict` of a [`AccountOp::Bootstrap`] on a database that was set up before.
pub const ALREADY_BOOTSTRAPPED: &str = "the database was set up before";

/// The first owner of the default workspace, made with it: the user (created if new), their
/// owner membership and a one-time login link (its token's hash).
#[derive(Debug, Clone)]
pub struct FirstOwner {
    pub email: String,
    pub user_id: String,
    pub login_token_hash: String,
    pub login_expires_at: i64,
}

impl AccountOp {
    /// See [`super::Op::supersedes`].
    pub fn supersedes(&self) -> Option<Supersedes<'_>> {
        match self {
            AccountOp::RevokeApiKey { workspace_id, .. } => {
                Some(Supersedes::Workspace(workspace_id))
            }
            AccountOp::Bootstrap { .. }
            | AccountOp::CreateWorkspace(_)
            | AccountOp::SetWorkspaceSettings { .. }
            | AccountOp::CreateApiKey(_)
            | AccountOp::TouchApiKey { .. }
            | AccountOp::CreateLoginToken { .. }
            | AccountOp::Login { .. }
            | AccountOp::EndSession { .. }
            | AccountOp::SelectWorkspace { .. }
            | AccountOp::UpsertMembership { .. }
            | AccountOp::RemoveMembership { .. }
            | AccountOp::CreatePat(_)
            | AccountOp::RevokePat { .. }
            | AccountOp::TouchPat { .. }
            | AccountOp::HitRateLimit { .. } => None,
        }
    }
}

// Records of this area, as the store keeps them (times in epoch milliseconds).

#[derive(Debug, Clone)]
pub struct Workspace {
    pub id: String,
    pub name: String,
    pub created_at: i64,
}

/// What people read for an actor of the audit trail (see `AccountStore::actor_names`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActorName {
    /// `user`, `api_key` or `agent`: the part of the actor before `:`.
    pub kind: String,
    pub id: String,
    /// The user's email address, the key's or the agent's name (`None` for an unnamed key).
    pub name: Option<String>,
    /// An API key's last four characters.
    pub last_four: Option<String>,
}

/// A workspace API key as stored: its SHA-256 hash, never the key.
#[derive(Debug, Clone)]
pub struct ApiKeyRecord {
    pub id: String,
    pub workspace_id: String,
    pub key_hash: String,
    /// `live` or `test`.
    pub mode: String,
    pub last_four: String,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
    pub name: Option<String>,
    /// `usr_...` of the user who made it, `None` for the CLI and bootstrap.
    pub created_by: Option<String>,
    pub last_used_at: Option<i64>,
    /// Space-separated scopes that narrow the key; `None` for none (see `domain::access`).
    pub scopes: Option<String>,
    /// Requests and decisions per second per replica; `None` for the server's default.
    pub rate_limit: Option<i64>,
}

/// A dashboard user, known by email.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub id: String,
    pub email: String,
    pub created_at: i64,
    pub last_login_at: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct Membership {
    pub workspace: Workspace,
    pub user_id: String,
    pub role: Role,
    pub created_at: i64,
}

/// A login session, stored by the SHA-256 of its id.
#[derive(Debug, Clone)]
pub struct SessionRecord {
    pub id_hash: String,
    pub user_id: String,
    pub workspace_id: Option<String>,
    pub created_at: i64,
    pub expires_at: i64,
    pub revoked_at: Option<i64>,
}

/// A personal access token (`svc_pat_...`), stored by its hash.
#[derive(Debug, Clone)]
pub struct PatRecord {
    pub id: String,
    pub user_id: String,
    pub name: String,
    pub token_hash: String,
    pub last_four: String,
    pub created_at: i64,
    pub expires_at: i64,
    pub revoked_at: Option<i64>,
    pub last_used_at: Option<i64>,
    /// Space-separated scopes that narrow the token; `None` for none (see `domain::access`).
    pub scopes: Option<String>,
    /// The token that made this one (`POST /v1/auth/tokens` with a token); `None` when a
    /// session made it. Revoking the parent revokes this one; it never outlives the parent.
    pub parent_id: Option<String>,
}
