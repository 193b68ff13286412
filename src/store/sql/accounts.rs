//! SQL for dashboard identity: users, memberships, login tokens, sessions, personal access
//! tokens, rate limits, the outbox, status checks and contact submissions.

use sqlx::any::AnyRow;
use sqlx::{Any, AnyPool, Row, Transaction};

use super::changed_rows;
use crate::store::*;

pub(super) fn user_from_row(row: &AnyRow) -> Result<User, sqlx::Error> {
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
    })
}

const USER_COLUMNS: &str = "id, email, created_at, last_login_at";
const PAT_COLUMNS: &str =
    "id, user_id, name, token_hash, last_four, created_at, expires_at, revoked_at, last_used_at";

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

fn affected_or_not_found(rows: u64) -> Result<Outcome, StoreError> {
    changed_rows(rows, || StoreError::NotFound)?;
    Ok(Outcome::Done)
}

/// Applies this module's operations; `None` for operations that are not its.
pub(super) async fn apply(
    tx: &mut Transaction<'_, Any>,
    op: &Op,
) -> Result<Option<Outcome>, StoreError> {
    let outcome = match op {
        Op::CreateLoginToken {
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
            Outcome::Done
        }
        Op::Login {
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
            Outcome::User(Box::new(User {
                last_login_at: Some(*at),
                ..user
            }))
        }
        Op::EndSession { id_hash, at } => {
            sqlx::query(
                "UPDATE sessions SET revoked_at = $1 WHERE id_hash = $2 AND revoked_at IS NULL",
            )
            .bind(*at)
            .bind(id_hash)
            .execute(&mut **tx)
            .await?;
            Outcome::Done
        }
        Op::SelectWorkspace {
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
        Op::UpsertMembership {
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
            Outcome::User(Box::new(user))
        }
        Op::RemoveMembership {
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
            Outcome::Done
        }
        Op::RevokeApiKey {
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
        Op::TouchApiKey { key_id, at } => {
            sqlx::query("UPDATE api_keys SET last_used_at = $1 WHERE id = $2")
                .bind(*at)
                .bind(key_id)
                .execute(&mut **tx)
                .await?;
            Outcome::Done
        }
        Op::TouchPat { pat_id, at } => {
            sqlx::query("UPDATE personal_access_tokens SET last_used_at = $1 WHERE id = $2")
                .bind(*at)
                .bind(pat_id)
                .execute(&mut **tx)
                .await?;
            Outcome::Done
        }
        Op::CreatePat(pat) => {
            sqlx::query(
                "INSERT INTO personal_access_tokens (id, user_id, name, token_hash, last_four, created_at, expires_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(&pat.id)
            .bind(&pat.user_id)
            .bind(&pat.name)
            .bind(&pat.token_hash)
            .bind(&pat.last_four)
            .bind(pat.created_at)
            .bind(pat.expires_at)
            .execute(&mut **tx)
            .await?;
            Outcome::Done
        }
        Op::RevokePat {
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
            affected_or_not_found(rows)?
        }
        Op::StoreOutboxMessage(m) => {
            sqlx::query(
                "INSERT INTO outbox_messages (id, recipients, subject, text_body, html_body, attachments, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(&m.id)
            .bind(serde_json::to_string(&m.recipients).unwrap_or_else(|_| "[]".into()))
            .bind(&m.subject)
            .bind(m.text_body.clone())
            .bind(m.html_body.clone())
            .bind(attachments_json(&m.attachments))
            .bind(m.created_at)
            .execute(&mut **tx)
            .await?;
            Outcome::Done
        }
        Op::RecordStatusChecks(checks) => {
            for c in checks {
                sqlx::query(
                    "INSERT INTO status_checks (id, component, status, detail, latency_ms, checked_at) \
                     VALUES ($1, $2, $3, $4, $5, $6)",
                )
                .bind(&c.id)
                .bind(&c.component)
                .bind(&c.status)
                .bind(&c.detail)
                .bind(c.latency_ms)
                .bind(c.checked_at)
                .execute(&mut **tx)
                .await?;
            }
            Outcome::Done
        }
        Op::StoreContact(c) => {
            sqlx::query("INSERT INTO contact_submissions (id, name, email, message, created_at) VALUES ($1, $2, $3, $4, $5)")
                .bind(&c.id)
                .bind(&c.name)
                .bind(&c.email)
                .bind(&c.message)
                .bind(c.created_at)
                .execute(&mut **tx)
                .await?;
            Outcome::Done
        }
        Op::HitRateLimit {
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
            Outcome::Count(hits)
        }
        _ => return Ok(None),
    };
    Ok(Some(outcome))
}

pub(super) async fn user(pool: &AnyPool, id: &str) -> Result<Option<User>, StoreError> {
    let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE id = $1");
    let row = sqlx::query(&sql).bind(id).fetch_optional(pool).await?;
    Ok(row.map(|r| user_from_row(&r)).transpose()?)
}

pub(super) async fn user_by_email(pool: &AnyPool, email: &str) -> Result<Option<User>, StoreError> {
    let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE email = $1");
    let row = sqlx::query(&sql).bind(email).fetch_optional(pool).await?;
    Ok(row.map(|r| user_from_row(&r)).transpose()?)
}

pub(super) async fn memberships(
    pool: &AnyPool,
    user_id: &str,
) -> Result<Vec<Membership>, StoreError> {
    let rows = sqlx::query(
        "SELECT w.id, w.name, w.created_at AS ws_created_at, m.role, m.created_at FROM memberships m \
         JOIN workspaces w ON w.id = m.workspace_id WHERE m.user_id = $1 ORDER BY m.created_at, w.id",
    )
    .bind(user_id)
    .fetch_all(pool)
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

pub(super) async fn role_in(
    pool: &AnyPool,
    workspace_id: &str,
    user_id: &str,
) -> Result<Option<Role>, StoreError> {
    let row = sqlx::query("SELECT role FROM memberships WHERE workspace_id = $1 AND user_id = $2")
        .bind(workspace_id)
        .bind(user_id)
        .fetch_optional(pool)
        .await?;
    Ok(row
        .map(|r| role_from_text(&r.try_get::<String, _>("role")?))
        .transpose()?)
}

pub(super) async fn members(
    pool: &AnyPool,
    workspace_id: &str,
) -> Result<Vec<(User, Role)>, StoreError> {
    let rows = sqlx::query(
        "SELECT u.id, u.email, u.created_at, u.last_login_at, m.role FROM memberships m \
         JOIN users u ON u.id = m.user_id WHERE m.workspace_id = $1 ORDER BY u.email",
    )
    .bind(workspace_id)
    .fetch_all(pool)
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

pub(super) async fn session(
    pool: &AnyPool,
    id_hash: &str,
) -> Result<Option<SessionRecord>, StoreError> {
    let row = sqlx::query(
        "SELECT id_hash, user_id, workspace_id, created_at, expires_at, revoked_at FROM sessions WHERE id_hash = $1",
    )
    .bind(id_hash)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|r| session_from_row(&r)).transpose()?)
}

pub(super) async fn login_token(
    pool: &AnyPool,
    token_hash: &str,
) -> Result<Option<(String, i64, Option<i64>)>, StoreError> {
    let row =
        sqlx::query("SELECT email, expires_at, used_at FROM login_tokens WHERE token_hash = $1")
            .bind(token_hash)
            .fetch_optional(pool)
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

pub(super) async fn pat_by_hash(
    pool: &AnyPool,
    token_hash: &str,
) -> Result<Option<PatRecord>, StoreError> {
    let sql = format!("SELECT {PAT_COLUMNS} FROM personal_access_tokens WHERE token_hash = $1");
    let row = sqlx::query(&sql)
        .bind(token_hash)
        .fetch_optional(pool)
        .await?;
    Ok(row.map(|r| pat_from_row(&r)).transpose()?)
}

pub(super) async fn pats(pool: &AnyPool, user_id: &str) -> Result<Vec<PatRecord>, StoreError> {
    let sql = format!("SELECT {PAT_COLUMNS} FROM personal_access_tokens WHERE user_id = $1 ORDER BY created_at DESC, id DESC");
    let rows = sqlx::query(&sql).bind(user_id).fetch_all(pool).await?;
    Ok(rows.iter().map(pat_from_row).collect::<Result<_, _>>()?)
}

pub(super) async fn outbox(pool: &AnyPool, limit: i64) -> Result<Vec<OutboxMessage>, StoreError> {
    let rows = sqlx::query(
        "SELECT id, recipients, subject, text_body, html_body, attachments, created_at FROM outbox_messages \
         ORDER BY created_at DESC, id DESC LIMIT $1",
    )
    .bind(limit)
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|row| {
            Ok(OutboxMessage {
                id: row.try_get("id")?,
                recipients: serde_json::from_str(&row.try_get::<String, _>("recipients")?)
                    .unwrap_or_default(),
                subject: row.try_get("subject")?,
                text_body: row.try_get("text_body")?,
                html_body: row.try_get("html_body")?,
                attachments: attachments_from_json(&row.try_get::<String, _>("attachments")?)?,
                created_at: row.try_get("created_at")?,
            })
        })
        .collect::<Result<_, sqlx::Error>>()
        .map_err(StoreError::from)
}

/// `[{filename, content_type, content}]`, the content in standard base64.
fn attachments_json(attachments: &[OutboxAttachment]) -> String {
    use base64::Engine as _;
    serde_json::Value::Array(
        attachments
            .iter()
            .map(|a| {
                serde_json::json!({
                    "filename": a.filename,
                    "content_type": a.content_type,
                    "content": base64::engine::general_purpose::STANDARD.encode(&a.content),
                })
            })
            .collect(),
    )
    .to_string()
}

fn attachments_from_json(text: &str) -> Result<Vec<OutboxAttachment>, sqlx::Error> {
    use base64::Engine as _;
    #[derive(serde::Deserialize)]
    struct Stored {
        filename: String,
        content_type: String,
        content: String,
    }
    let corrupt = |e: String| sqlx::Error::Decode(format!("outbox attachments: {e}").into());
    let stored: Vec<Stored> = serde_json::from_str(text).map_err(|e| corrupt(e.to_string()))?;
    stored
        .into_iter()
        .map(|s| {
            Ok(OutboxAttachment {
                content: base64::engine::general_purpose::STANDARD
                    .decode(s.content)
                    .map_err(|e| corrupt(e.to_string()))?,
                filename: s.filename,
                content_type: s.content_type,
            })
        })
        .collect()
}

pub(super) async fn latest_status_checks(pool: &AnyPool) -> Result<Vec<StatusCheck>, StoreError> {
    let rows = sqlx::query(
        "SELECT c.id, c.component, c.status, c.detail, c.latency_ms, c.checked_at FROM status_checks c \
         WHERE c.id = (SELECT l.id FROM status_checks l WHERE l.component = c.component \
                       ORDER BY l.checked_at DESC, l.id DESC LIMIT 1) \
         ORDER BY c.component",
    )
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|row| {
            Ok(StatusCheck {
                id: row.try_get("id")?,
                component: row.try_get("component")?,
                status: row.try_get("status")?,
                detail: row.try_get("detail")?,
                latency_ms: row.try_get("latency_ms")?,
                checked_at: row.try_get("checked_at")?,
            })
        })
        .collect::<Result<_, sqlx::Error>>()
        .map_err(StoreError::from)
}
