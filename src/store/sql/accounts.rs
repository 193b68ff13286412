//! SQL of accounts: workspaces and their settings, API keys, dashboard users, memberships,
//! login tokens, sessions, personal access tokens and the rate limits of logins.

use async_trait::async_trait;
use sqlx::any::AnyRow;
use sqlx::{Any, Row, Transaction};

use super::{changed_rows, SqlStore};
use crate::domain::Role;
use crate::store::*;

const API_KEY_COLUMNS: &str =
    "id, workspace_id, key_hash, mode, last_four, created_at, revoked_at, name, created_by, last_used_at, scopes, rate_limit";

fn api_key_from_row(row: &AnyRow) -> Result<ApiKeyRecord, sqlx::Error> {
    Ok(ApiKeyRecord {
        id: row.try_get("id")?,
        workspace_id: row.try_get("workspace_id")?,
        key_hash: row.try_get("key_hash")?,
        mode: row.try_get("mode")?,
        last_four: row.try_get("last_four")?,
        created_at: row.try_get("created_at")?,
        revoked_at: row.try_get("revoked_at")?,
        name: row.try_get("name")?,
        created_by: row.try_get("created_by")?,
        last_used_at: row.try_get("last_used_at")?,
        scopes: row.try_get("scopes")?,
        rate_limit: row.try_get("rate_limit")?,
    })
}

async fn insert_workspace(tx: &mut Transaction<'_, Any>, w: &Workspace) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO workspaces (id, name, created_at) VALUES ($1, $2, $3)")
        .bind(&w.id)
        .bind(&w.name)
        .bind(w.created_at)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

async fn insert_api_key(
    tx: &mut Transaction<'_, Any>,
    k: &ApiKeyRecord,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO api_keys (id, workspace_id, key_hash, mode, last_four, created_at, revoked_at, name, created_by, scopes, rate_limit) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
    )
    .bind(&k.id)
    .bind(&k.workspace_id)
    .bind(&k.key_hash)
    .bind(&k.mode)
    .bind(&k.last_four)
    .bind(k.created_at)
    .bind(k.revoked_at)
    .bind(k.name.clone())
    .bind(k.created_by.clone())
    .bind(k.scopes.clone())
    .bind(k.rate_limit)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

fn user_from_row(row: &AnyRow) -> Result<User, sqlx::Error> {
    Ok(User {
        id: row.try_get("id")?,
        email: row.try_get("email")?,
        created_at: row.try_get("created_at")?,
        last_login_at: row.try_get("last_login_at")?,
    })
}

fn role_from_text(text: &str) -> Result<Role, sqlx::Error> {
    Role::parse(text).ok_or_else(|| sqlx::Error::Decode(format!("role `{text}`").into()))
}

fn session_from_row(row: &AnyRow) -> Result<SessionRecord, sqlx::Error> {
    Ok(SessionRecord {
        id_hash: row.try_get("id_hash")?,
        user_id: row.try_get("user_id")?,
        workspace_id: row.try_get("workspace_id")?,
        created_at: row.try_get("created_at")?,
        expires_at: row.try_get("expires_at")?,
        revoked_at: row.try_get("revoked_at")?,
    })
}

fn pat_from_row(row: &AnyRow) -> Result<PatRecord, sqlx::Error> {
    Ok(PatRecord {
        id: row.try_get("id")?,
        user_id: row.try_get("user_id")?,
        name: row.try_get("name")?,
        token_hash: row.try_get("token_hash")?,
        last_four: row.try_get("last_four")?,
        created_at: row.try_get("created_at")?,
        expires_at: row.try_get("expires_at")?,
        revoked_at: row.try_get("revoked_at")?,
        last_used_at: row.try_get("last_used_at")?,
        scopes: row.try_get("scopes")?,
        parent_id: row.try_get("parent_id")?,
    })
}

const USER_COLUMNS: &str = "id, email, created_at, last_login_at";
const PAT_COLUMNS: &str =
    "id, user_id, name, token_hash, last_four, created_at, expires_at, revoked_at, last_used_at, scopes, parent_id";

/// Creates the user with this email unless it exists; answers the user either way.
async fn ensure_user(
    tx: &mut Transaction<'_, Any>,
    email: &str,
    user_id: &str,
    at: i64,
) -> Result<User, StoreError> {
    sqlx::query("INSERT INTO users (id, email, created_at) VALUES ($1, $2, $3) ON CONFLICT (email) DO NOTHING")
        .bind(user_id)
        .bind(email)
        .bind(at)
        .execute(&mut **tx)
        .await?;
    let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE email = $1");
    let row = sqlx::query(&sql).bind(email).fetch_one(&mut **tx).await?;
    Ok(user_from_row(&row)?)
}

fn affected_or_not_found(rows: u64) -> Result<Applied, StoreError> {
    changed_rows(rows, || StoreError::NotFound)?;
    Ok(Applied::Done)
}

/// Applies an account operation inside `tx`.
pub(super) async fn apply(
    tx: &mut Transaction<'_, Any>,
    op: &AccountOp,
) -> Result<Applied, StoreError> {
    let applied = match op {
        AccountOp::Bootstrap {
            workspace,
            key,
            owner,
        } => {
            let first = sqlx::query("INSERT INTO instance_meta (key, value) VALUES ('bootstrapped', $1) ON CONFLICT (key) DO NOTHING")
                .bind(&workspace.id)
                .execute(&mut **tx)
                .await?
                .rows_affected();
            if first == 0 {
                // An error, so that the change's audit events (about a workspace that is not
                // made) are rolled back with it.
                return Err(StoreError::Conflict(ALREADY_BOOTSTRAPPED.into()));
            }
            insert_workspace(tx, workspace).await?;
            insert_api_key(tx, key).await?;
            if let Some(owner) = owner {
                let at = workspace.created_at;
                let user = ensure_user(tx, &owner.email, &owner.user_id, at).await?;
                sqlx::query(
                    "INSERT INTO memberships (workspace_id, user_id, role, created_at) VALUES ($1, $2, $3, $4)",
                )
                .bind(&workspace.id)
                .bind(&user.id)
                .bind(Role::Owner.as_str())
                .bind(at)
                .execute(&mut **tx)
                .await?;
                sqlx::query("INSERT INTO login_tokens (token_hash, email, created_at, expires_at) VALUES ($1, $2, $3, $4)")
                    .bind(&owner.login_token_hash)
                    .bind(&owner.email)
                    .bind(at)
                    .bind(owner.login_expires_at)
                    .execute(&mut **tx)
                    .await?;
            }
            Applied::Bootstrapped(true)
        }
        AccountOp::CreateWorkspace(workspace) => {
            insert_workspace(tx, workspace).await?;
            // A workspace made by hand also counts as the instance being set up.
            sqlx::query("INSERT INTO instance_meta (key, value) VALUES ('bootstrapped', $1) ON CONFLICT (key) DO NOTHING")
                .bind(&workspace.id)
                .execute(&mut **tx)
                .await?;
            Applied::Done
        }
        AccountOp::SetWorkspaceSettings {
            workspace_id,
            require_member_approval,
            at,
        } => {
            sqlx::query(
                "INSERT INTO workspace_settings (workspace_id, require_member_approval, updated_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (workspace_id) DO UPDATE SET require_member_approval = excluded.require_member_approval, \
                 updated_at = excluded.updated_at",
            )
            .bind(workspace_id)
            .bind(i64::from(*require_member_approval))
            .bind(*at)
            .execute(&mut **tx)
            .await?;
            Applied::Done
        }
        AccountOp::CreateApiKey(key) => {
            insert_api_key(tx, key).await?;
            Applied::Done
        }
        AccountOp::CreateLoginToken {
            token_hash,
            email,
            created_at,
            expires_at,
        } => {
            sqlx::query("INSERT INTO login_tokens (token_hash, email, created_at, expires_at) VALUES ($1, $2, $3, $4)")
                .bind(token_hash)
                .bind(email)
                .bind(*created_at)
                .bind(*expires_at)
                .execute(&mut **tx)
                .await?;
            Applied::Done
        }
        AccountOp::Login {
            token_hash,
            email,
            user_id,
            session,
            at,
        } => {
            let used = sqlx::query(
                "UPDATE login_tokens SET used_at = $1 WHERE token_hash = $2 AND email = $3 AND used_at IS NULL AND expires_at > $1",
            )
            .bind(*at)
            .bind(token_hash)
            .bind(email)
            .execute(&mut **tx)
            .await?
            .rows_affected();
            changed_rows(used, || StoreError::TokenInvalid)?;
            let user = ensure_user(tx, email, user_id, *at).await?;
            if user.id != *user_id || session.user_id != *user_id {
                return Err(StoreError::Conflict(
                    "the user was created meanwhile; follow the link again".into(),
                ));
            }
            sqlx::query("UPDATE users SET last_login_at = $1 WHERE id = $2")
                .bind(*at)
                .bind(&user.id)
                .execute(&mut **tx)
                .await?;
            sqlx::query(
                "INSERT INTO sessions (id_hash, user_id, workspace_id, created_at, expires_at) VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(&session.id_hash)
            .bind(&user.id)
            .bind(session.workspace_id.clone())
            .bind(session.created_at)
            .bind(session.expires_at)
            .execute(&mut **tx)
            .await?;
            Applied::User(Box::new(User {
                last_login_at: Some(*at),
                ..user
            }))
        }
        AccountOp::EndSession { id_hash, at } => {
            sqlx::query(
                "UPDATE sessions SET revoked_at = $1 WHERE id_hash = $2 AND revoked_at IS NULL",
            )
            .bind(*at)
            .bind(id_hash)
            .execute(&mut **tx)
            .await?;
            Applied::Done
        }
        AccountOp::SelectWorkspace {
            id_hash,
            workspace_id,
        } => {
            let rows = sqlx::query(
                "UPDATE sessions SET workspace_id = $1 WHERE id_hash = $2 AND revoked_at IS NULL",
            )
            .bind(workspace_id)
            .bind(id_hash)
            .execute(&mut **tx)
            .await?
            .rows_affected();
            affected_or_not_found(rows)?
        }
        AccountOp::UpsertMembership {
            workspace_id,
            email,
            user_id,
            role,
            at,
        } => {
            let user = ensure_user(tx, email, user_id, *at).await?;
            sqlx::query(
                "INSERT INTO memberships (workspace_id, user_id, role, created_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (workspace_id, user_id) DO UPDATE SET role = excluded.role",
            )
            .bind(workspace_id)
            .bind(&user.id)
            .bind(role.as_str())
            .bind(*at)
            .execute(&mut **tx)
            .await?;
            Applied::User(Box::new(user))
        }
        AccountOp::RemoveMembership {
            workspace_id,
            user_id,
        } => {
            // Never the last owner, even when two owners remove each other at once.
            let rows = sqlx::query(
                "DELETE FROM memberships WHERE workspace_id = $1 AND user_id = $2 AND (role <> 'owner' OR \
                 (SELECT COUNT(*) FROM memberships o WHERE o.workspace_id = $1 AND o.role = 'owner') > 1)",
            )
            .bind(workspace_id)
            .bind(user_id)
            .execute(&mut **tx)
            .await?
            .rows_affected();
            changed_rows(rows, || {
                StoreError::Conflict("not a member, or the last owner".into())
            })?;
            Applied::Done
        }
        AccountOp::RevokeApiKey {
            workspace_id,
            key_id,
            at,
        } => {
            let rows = sqlx::query(
                "UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND workspace_id = $3 AND revoked_at IS NULL",
            )
            .bind(*at)
            .bind(key_id)
            .bind(workspace_id)
            .execute(&mut **tx)
            .await?
            .rows_affected();
            affected_or_not_found(rows)?
        }
        AccountOp::TouchApiKey { key_id, at } => {
            sqlx::query("UPDATE api_keys SET last_used_at = $1 WHERE id = $2")
                .bind(*at)
                .bind(key_id)
                .execute(&mut **tx)
                .await?;
            Applied::Done
        }
        AccountOp::TouchPat { pat_id, at } => {
            sqlx::query("UPDATE personal_access_tokens SET last_used_at = $1 WHERE id = $2")
                .bind(*at)
                .bind(pat_id)
                .execute(&mut **tx)
                .await?;
            Applied::Done
        }
        AccountOp::CreatePat(pat) => {
            if let Some(parent) = &pat.parent_id {
                // A token made by a token only while its maker is live. The write holds the
                // maker's row until this transaction ends: a revocation of the maker on another
                // replica either comes first (and nothing is made) or waits, then finds this
                // token among those it revokes.
                let live = sqlx::query(
                    "UPDATE personal_access_tokens SET revoked_at = revoked_at \
                     WHERE id = $1 AND revoked_at IS NULL AND expires_at > $2",
                )
                .bind(parent)
                .bind(pat.created_at)
                .execute(&mut **tx)
                .await?
                .rows_affected();
                changed_rows(live, || {
                    StoreError::Conflict("the token that made it is no longer live".into())
                })?;
            }
            sqlx::query(
                "INSERT INTO personal_access_tokens (id, user_id, name, token_hash, last_four, created_at, expires_at, scopes, parent_id) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            )
            .bind(&pat.id)
            .bind(&pat.user_id)
            .bind(&pat.name)
            .bind(&pat.token_hash)
            .bind(&pat.last_four)
            .bind(pat.created_at)
            .bind(pat.expires_at)
            .bind(pat.scopes.clone())
            .bind(pat.parent_id.clone())
            .execute(&mut **tx)
            .await?;
            Applied::Done
        }
        AccountOp::RevokePat {
            user_id,
            pat_id,
            at,
        } => {
            let rows = sqlx::query(
                "UPDATE personal_access_tokens SET revoked_at = $1 WHERE id = $2 AND user_id = $3 AND revoked_at IS NULL",
            )
            .bind(*at)
            .bind(pat_id)
            .bind(user_id)
            .execute(&mut **tx)
            .await?
            .rows_affected();
            changed_rows(rows, || StoreError::NotFound)?;
            // And every live token it made, and they made, in the same transaction: a statement
            // of its own, so that on Postgres it sees a token whose making the update above
            // waited for. (A token made meanwhile two levels down can still escape it; the
            // lineage check at authentication refuses that one.)
            let made = sqlx::query(
                "WITH RECURSIVE made(id) AS (SELECT id FROM personal_access_tokens WHERE parent_id = $2 \
                 UNION SELECT t.id FROM personal_access_tokens t JOIN made m ON t.parent_id = m.id) \
                 UPDATE personal_access_tokens SET revoked_at = $1 \
                 WHERE id IN (SELECT id FROM made) AND revoked_at IS NULL AND expires_at > $1",
            )
            .bind(*at)
            .bind(pat_id)
            .execute(&mut **tx)
            .await?
            .rows_affected();
            Applied::Count(i64::try_from(rows + made).unwrap_or(i64::MAX))
        }
        AccountOp::HitRateLimit {
            bucket,
            window_start,
        } => {
            sqlx::query(
                "INSERT INTO rate_limit_hits (bucket, window_start, hits) VALUES ($1, $2, 1) \
                 ON CONFLICT (bucket, window_start) DO UPDATE SET hits = rate_limit_hits.hits + 1",
            )
            .bind(bucket)
            .bind(*window_start)
            .execute(&mut **tx)
            .await?;
            let hits: i64 = sqlx::query(
                "SELECT hits FROM rate_limit_hits WHERE bucket = $1 AND window_start = $2",
            )
            .bind(bucket)
            .bind(*window_start)
            .fetch_one(&mut **tx)
            .await?
            .try_get("hits")?;
            Applied::Count(hits)
        }
    };
    Ok(applied)
}

#[async_trait]
impl AccountStore for SqlStore {
    #[tracing::instrument(level = "debug", skip_all)]
    async fn default_workspace_id(&self) -> Result<Option<String>, StoreError> {
        let row = sqlx::query("SELECT value FROM instance_meta WHERE key = 'bootstrapped'")
            .fetch_optional(&self.read)
            .await?;
        Ok(row.map(|r| r.try_get("value")).transpose()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn workspace(&self, id: &str) -> Result<Option<Workspace>, StoreError> {
        let row = sqlx::query("SELECT id, name, created_at FROM workspaces WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.read)
            .await?;
        Ok(match row {
            Some(row) => Some(Workspace {
                id: row.try_get("id")?,
                name: row.try_get("name")?,
                created_at: row.try_get("created_at")?,
            }),
            None => None,
        })
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn all_workspaces(&self) -> Result<Vec<Workspace>, StoreError> {
        let rows =
            sqlx::query("SELECT id, name, created_at FROM workspaces ORDER BY created_at, id")
                .fetch_all(&self.read)
                .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            out.push(Workspace {
                id: row.try_get("id")?,
                name: row.try_get("name")?,
                created_at: row.try_get("created_at")?,
            });
        }
        Ok(out)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn actor_names(
        &self,
        workspace_id: &str,
        users: &[String],
        keys: &[String],
        agents: &[String],
    ) -> Result<Vec<ActorName>, StoreError> {
        // One statement per chunk of ids (a page has at most a few hundred actors; an export's
        // up to 10,000 events stay under every engine's limit of bound values this way).
        const CHUNK: usize = 300;
        let ids: Vec<(&str, &String)> = users
            .iter()
            .map(|id| ("user", id))
            .chain(keys.iter().map(|id| ("api_key", id)))
            .chain(agents.iter().map(|id| ("agent", id)))
            .collect();
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(CHUNK) {
            let mut parts = Vec::new();
            let mut args: Vec<&str> = Vec::new();
            for (kind, select, in_workspace) in [
                (
                    "user",
                    "SELECT 'user' AS kind, id, email AS name, CAST(NULL AS TEXT) AS last_four \
                     FROM users WHERE",
                    false,
                ),
                (
                    "api_key",
                    "SELECT 'api_key' AS kind, id, name, last_four FROM api_keys WHERE",
                    true,
                ),
                (
                    "agent",
                    "SELECT 'agent' AS kind, id, name, CAST(NULL AS TEXT) AS last_four \
                     FROM agents WHERE",
                    true,
                ),
            ] {
                let of_kind: Vec<&str> = chunk
                    .iter()
                    .filter(|(k, _)| *k == kind)
                    .map(|(_, id)| id.as_str())
                    .collect();
                if of_kind.is_empty() {
                    continue;
                }
                let mut part = select.to_owned();
                if in_workspace {
                    args.push(workspace_id);
                    part.push_str(&format!(" workspace_id = ${} AND", args.len()));
                }
                let mut placeholders = Vec::with_capacity(of_kind.len());
                for id in of_kind {
                    args.push(id);
                    placeholders.push(format!("${}", args.len()));
                }
                part.push_str(&format!(" id IN ({})", placeholders.join(", ")));
                parts.push(part);
            }
            if parts.is_empty() {
                continue;
            }
            let sql = parts.join(" UNION ALL ");
            let mut query = sqlx::query(&sql);
            for arg in &args {
                query = query.bind(*arg);
            }
            for row in query.fetch_all(&self.read).await? {
                out.push(ActorName {
                    kind: row.try_get("kind")?,
                    id: row.try_get("id")?,
                    name: row.try_get("name")?,
                    last_four: row.try_get("last_four")?,
                });
            }
        }
        Ok(out)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn require_member_approval(&self, workspace_id: &str) -> Result<bool, StoreError> {
        let row = sqlx::query(
            "SELECT require_member_approval FROM workspace_settings WHERE workspace_id = $1",
        )
        .bind(workspace_id)
        .fetch_optional(&self.read)
        .await?;
        Ok(match row {
            Some(r) => r.try_get::<i64, _>("require_member_approval")? != 0,
            // Approvals by a logged-in person unless the workspace turned it off.
            None => true,
        })
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn api_key_by_hash(&self, key_hash: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        let sql = format!("SELECT {API_KEY_COLUMNS} FROM api_keys WHERE key_hash = $1");
        let row = sqlx::query(&sql)
            .bind(key_hash)
            .fetch_optional(&self.read)
            .await?;
        Ok(row.map(|row| api_key_from_row(&row)).transpose()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn api_keys(&self, workspace_id: &str) -> Result<Vec<ApiKeyRecord>, StoreError> {
        let sql = format!("SELECT {API_KEY_COLUMNS} FROM api_keys WHERE workspace_id = $1 ORDER BY created_at DESC, id DESC");
        let rows = sqlx::query(&sql)
            .bind(workspace_id)
            .fetch_all(&self.read)
            .await?;
        Ok(rows
            .iter()
            .map(api_key_from_row)
            .collect::<Result<_, _>>()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn user(&self, id: &str) -> Result<Option<User>, StoreError> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE id = $1");
        let row = sqlx::query(&sql)
            .bind(id)
            .fetch_optional(&self.read)
            .await?;
        Ok(row.map(|r| user_from_row(&r)).transpose()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn user_by_email(&self, email: &str) -> Result<Option<User>, StoreError> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE email = $1");
        let row = sqlx::query(&sql)
            .bind(email)
            .fetch_optional(&self.read)
            .await?;
        Ok(row.map(|r| user_from_row(&r)).transpose()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn memberships(&self, user_id: &str) -> Result<Vec<Membership>, StoreError> {
        let rows = sqlx::query(
            "SELECT w.id, w.name, w.created_at AS ws_created_at, m.role, m.created_at FROM memberships m \
             JOIN workspaces w ON w.id = m.workspace_id WHERE m.user_id = $1 ORDER BY m.created_at, w.id",
        )
        .bind(user_id)
        .fetch_all(&self.read)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(Membership {
                    workspace: Workspace {
                        id: row.try_get("id")?,
                        name: row.try_get("name")?,
                        created_at: row.try_get("ws_created_at")?,
                    },
                    user_id: user_id.to_owned(),
                    role: role_from_text(&row.try_get::<String, _>("role")?)?,
                    created_at: row.try_get("created_at")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(StoreError::from)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn role_in(&self, workspace_id: &str, user_id: &str) -> Result<Option<Role>, StoreError> {
        let row =
            sqlx::query("SELECT role FROM memberships WHERE workspace_id = $1 AND user_id = $2")
                .bind(workspace_id)
                .bind(user_id)
                .fetch_optional(&self.read)
                .await?;
        Ok(row
            .map(|r| role_from_text(&r.try_get::<String, _>("role")?))
            .transpose()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn members(&self, workspace_id: &str) -> Result<Vec<(User, Role)>, StoreError> {
        let rows = sqlx::query(
            "SELECT u.id, u.email, u.created_at, u.last_login_at, m.role FROM memberships m \
             JOIN users u ON u.id = m.user_id WHERE m.workspace_id = $1 ORDER BY u.email",
        )
        .bind(workspace_id)
        .fetch_all(&self.read)
        .await?;
        rows.iter()
            .map(|row| {
                Ok((
                    user_from_row(row)?,
                    role_from_text(&row.try_get::<String, _>("role")?)?,
                ))
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(StoreError::from)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn session(&self, id_hash: &str) -> Result<Option<SessionRecord>, StoreError> {
        let row = sqlx::query(
            "SELECT id_hash, user_id, workspace_id, created_at, expires_at, revoked_at FROM sessions WHERE id_hash = $1",
        )
        .bind(id_hash)
        .fetch_optional(&self.read)
        .await?;
        Ok(row.map(|r| session_from_row(&r)).transpose()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn login_token(
        &self,
        token_hash: &str,
    ) -> Result<Option<(String, i64, Option<i64>)>, StoreError> {
        let row = sqlx::query(
            "SELECT email, expires_at, used_at FROM login_tokens WHERE token_hash = $1",
        )
        .bind(token_hash)
        .fetch_optional(&self.read)
        .await?;
        Ok(match row {
            Some(r) => Some((
                r.try_get("email")?,
                r.try_get("expires_at")?,
                r.try_get("used_at")?,
            )),
            None => None,
        })
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn pat_by_hash(&self, token_hash: &str) -> Result<Option<PatRecord>, StoreError> {
        let sql = format!("SELECT {PAT_COLUMNS} FROM personal_access_tokens WHERE token_hash = $1");
        let row = sqlx::query(&sql)
            .bind(token_hash)
            .fetch_optional(&self.read)
            .await?;
        Ok(row.map(|r| pat_from_row(&r)).transpose()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn pats(&self, user_id: &str) -> Result<Vec<PatRecord>, StoreError> {
        let sql = format!("SELECT {PAT_COLUMNS} FROM personal_access_tokens WHERE user_id = $1 ORDER BY created_at DESC, id DESC");
        let rows = sqlx::query(&sql)
            .bind(user_id)
            .fetch_all(&self.read)
            .await?;
        Ok(rows.iter().map(pat_from_row).collect::<Result<_, _>>()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn pat_lineage_live(&self, pat_id: &str, now: i64) -> Result<bool, StoreError> {
        let dead: i64 = sqlx::query_scalar(
            "WITH RECURSIVE lineage(id, parent_id, revoked_at, expires_at) AS (\
             SELECT id, parent_id, revoked_at, expires_at FROM personal_access_tokens WHERE id = $1 \
             UNION ALL SELECT t.id, t.parent_id, t.revoked_at, t.expires_at FROM personal_access_tokens t \
             JOIN lineage l ON t.id = l.parent_id) \
             SELECT COUNT(*) FROM lineage WHERE revoked_at IS NOT NULL OR expires_at <= $2",
        )
        .bind(pat_id)
        .bind(now)
        .fetch_one(&self.read)
        .await?;
        Ok(dead == 0)
    }
}
