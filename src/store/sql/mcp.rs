//! SQL of the MCP gateway's registered servers.

use std::sync::LazyLock;

use async_trait::async_trait;
use sqlx::any::AnyRow;
use sqlx::{Any, Row, Transaction};

use super::{aliased, found, is_unique_violation, joined, SqlStore};
use crate::store::*;

const COLUMNS: &str = "id, workspace_id, name, url, auth_secret_set_id, auth_profile, \
     record_arguments, created_at, created_by, updated_at";

fn server_from_row(row: &AnyRow) -> Result<McpServerRecord, sqlx::Error> {
    server_from_columns(row, |name| name)
}

/// A server from `row`, each of its columns read under the name `column` gives it (a joined
/// read names them apart from the other tables' columns).
fn server_from_columns(
    row: &AnyRow,
    column: impl Fn(&'static str) -> &'static str,
) -> Result<McpServerRecord, sqlx::Error> {
    let secret_set_id: Option<String> = row.try_get(column("auth_secret_set_id"))?;
    let profile: Option<String> = row.try_get(column("auth_profile"))?;
    Ok(McpServerRecord {
        id: row.try_get(column("id"))?,
        workspace_id: row.try_get(column("workspace_id"))?,
        name: row.try_get(column("name"))?,
        url: row.try_get(column("url"))?,
        auth: secret_set_id
            .zip(profile)
            .map(|(secret_set_id, profile)| McpServerAuth {
                secret_set_id,
                profile,
            }),
        record_arguments: row.try_get::<i64, _>(column("record_arguments"))? != 0,
        created_at: row.try_get(column("created_at"))?,
        created_by: row.try_get(column("created_by"))?,
        updated_at: row.try_get(column("updated_at"))?,
    })
}

/// The server's columns as [`GATE`] names them.
const GATE_SERVER: [(&str, &str); 10] = [
    ("id", "server_id"),
    ("workspace_id", "server_workspace_id"),
    ("name", "server_name"),
    ("url", "server_url"),
    ("auth_secret_set_id", "server_auth_secret_set_id"),
    ("auth_profile", "server_auth_profile"),
    ("record_arguments", "server_record_arguments"),
    ("created_at", "server_created_at"),
    ("created_by", "server_created_by"),
    ("updated_at", "server_updated_at"),
];

/// The session's columns as [`GATE`] names them.
const GATE_SESSION: [(&str, &str); 12] = [
    ("id_hash", "session_id_hash"),
    ("workspace_id", "session_workspace_id"),
    ("server_id", "session_server_id"),
    ("agent_id", "session_agent_id"),
    ("credential_id", "session_credential_id"),
    ("protocol_version", "session_protocol_version"),
    ("url_elicitation", "session_url_elicitation"),
    ("upstream_session", "session_upstream_session"),
    ("created_at", "session_created_at"),
    ("expires_at", "session_expires_at"),
    ("ended_at", "session_ended_at"),
    ("ended_reason", "session_ended_reason"),
];

/// [`McpStore::mcp_gate`]'s statement: the credential, its workspace's kill switch, the server
/// of that name (its columns named as [`GATE_SERVER`] says), its live secret set's current
/// version and the session of that id hash (named as [`GATE_SESSION`] says; none without a
/// hash). Only the credential's and the kill switch's columns keep their own names.
static GATE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT c.id, c.workspace_id, c.agent_id, c.token_hash, c.token_type, c.provider, \
         c.audience, c.scopes, c.one_time, c.created_at, c.expires_at, c.revoked_at, \
         c.revoked_reason, c.used_at, k.minting_paused, k.minting_paused_reason, \
         k.all_revoked_at, {}, v.current_version AS server_set_version, {} \
         FROM credentials c \
         LEFT JOIN kill_switches k ON k.workspace_id = c.workspace_id \
         LEFT JOIN mcp_servers s ON s.workspace_id = c.workspace_id AND s.name = $2 \
         LEFT JOIN vault_secret_sets v ON v.id = s.auth_secret_set_id \
           AND v.workspace_id = c.workspace_id AND v.deleted_at IS NULL \
           AND v.destroyed_at IS NULL \
         LEFT JOIN mcp_sessions m ON m.id_hash = $3 \
         WHERE c.token_hash = $1",
        aliased("s", &GATE_SERVER),
        aliased("m", &GATE_SESSION),
    )
});

/// A unique-index violation is the name being taken; anything else is the database's.
fn name_taken(err: sqlx::Error) -> StoreError {
    if is_unique_violation(&err) {
        StoreError::Conflict("mcp_server_exists".into())
    } else {
        err.into()
    }
}

/// Applies an MCP gateway operation inside `tx`.
pub(super) async fn apply(
    tx: &mut Transaction<'_, Any>,
    op: &McpOp,
) -> Result<Applied, StoreError> {
    match op {
        McpOp::CreateServer { server, max } => {
            let count: i64 =
                sqlx::query_scalar("SELECT COUNT(*) FROM mcp_servers WHERE workspace_id = $1")
                    .bind(&server.workspace_id)
                    .fetch_one(&mut **tx)
                    .await?;
            if count >= *max {
                return Err(StoreError::Conflict("too_many_mcp_servers".into()));
            }
            let auth = server.auth.as_ref();
            sqlx::query(&format!(
                "INSERT INTO mcp_servers ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
            ))
            .bind(&server.id)
            .bind(&server.workspace_id)
            .bind(&server.name)
            .bind(&server.url)
            .bind(auth.map(|a| a.secret_set_id.as_str()))
            .bind(auth.map(|a| a.profile.as_str()))
            .bind(i64::from(server.record_arguments))
            .bind(server.created_at)
            .bind(&server.created_by)
            .bind(server.updated_at)
            .execute(&mut **tx)
            .await
            .map_err(name_taken)?;
            Ok(Applied::Done)
        }
        McpOp::UpdateServer {
            server,
            read_at,
            end_sessions,
        } => {
            let auth = server.auth.as_ref();
            let done = sqlx::query(
                "UPDATE mcp_servers SET name = $3, url = $4, auth_secret_set_id = $5, auth_profile = $6, \
                 record_arguments = $7, updated_at = $8 WHERE workspace_id = $1 AND id = $2 AND updated_at = $9",
            )
            .bind(&server.workspace_id)
            .bind(&server.id)
            .bind(&server.name)
            .bind(&server.url)
            .bind(auth.map(|a| a.secret_set_id.as_str()))
            .bind(auth.map(|a| a.profile.as_str()))
            .bind(i64::from(server.record_arguments))
            .bind(server.updated_at)
            .bind(read_at)
            .execute(&mut **tx)
            .await
            .map_err(name_taken)?;
            if done.rows_affected() == 0 {
                // Gone, or changed since it was read.
                let exists: Option<i64> = sqlx::query_scalar(
                    "SELECT 1 FROM mcp_servers WHERE workspace_id = $1 AND id = $2",
                )
                .bind(&server.workspace_id)
                .bind(&server.id)
                .fetch_optional(&mut **tx)
                .await?;
                return Err(match exists {
                    Some(_) => StoreError::Conflict("mcp_server_changed".into()),
                    None => StoreError::NotFound,
                });
            }
            if *end_sessions {
                let of = Sessions::Server(&server.id);
                self::end_sessions(tx, of, server.updated_at, "server_changed").await?;
            }
            Ok(Applied::Done)
        }
        McpOp::DeleteServer {
            workspace_id,
            server_id,
            at,
        } => {
            let done = sqlx::query("DELETE FROM mcp_servers WHERE workspace_id = $1 AND id = $2")
                .bind(workspace_id)
                .bind(server_id)
                .execute(&mut **tx)
                .await?;
            end_sessions(tx, Sessions::Server(server_id), *at, "server_deleted").await?;
            found(done.rows_affected())
        }
        McpOp::OpenSession { session, max } => {
            // The agent's open sessions beyond `max - 1`, oldest first, make room.
            sqlx::query(
                "UPDATE mcp_sessions SET ended_at = $1, ended_reason = 'replaced' WHERE id_hash IN \
                 (SELECT id_hash FROM mcp_sessions WHERE agent_id = $2 AND ended_at IS NULL \
                  AND expires_at > $1 ORDER BY created_at DESC, id_hash LIMIT 1000000 OFFSET $3)",
            )
            .bind(session.created_at)
            .bind(&session.agent_id)
            .bind((*max - 1).max(0))
            .execute(&mut **tx)
            .await?;
            // Only for an agent still active, by a credential still standing (the kill switch's
            // revoke-all marks every credential revoked): either may have changed since the
            // request was authenticated.
            let done = sqlx::query(&format!(
                "INSERT INTO mcp_sessions ({SESSION_COLUMNS}) \
                 SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12 \
                 WHERE EXISTS (SELECT 1 FROM agents a WHERE a.id = $4 AND a.workspace_id = $2 \
                               AND a.status NOT IN ('revoked', 'suspended')) \
                 AND EXISTS (SELECT 1 FROM credentials c WHERE c.id = $5 AND c.revoked_at IS NULL)"
            ))
            .bind(&session.id_hash)
            .bind(&session.workspace_id)
            .bind(&session.server_id)
            .bind(&session.agent_id)
            .bind(&session.credential_id)
            .bind(&session.protocol_version)
            .bind(i64::from(session.url_elicitation))
            .bind(session.upstream_session.as_deref())
            .bind(session.created_at)
            .bind(session.expires_at)
            .bind(session.ended_at)
            .bind(session.ended_reason.as_deref())
            .execute(&mut **tx)
            .await?;
            if done.rows_affected() == 0 {
                return Err(StoreError::AgentNotActive);
            }
            Ok(Applied::Done)
        }
        McpOp::EndSession {
            id_hash,
            agent_id,
            at,
            reason,
        } => {
            let done = sqlx::query(
                "UPDATE mcp_sessions SET ended_at = $1, ended_reason = $2, upstream_closed_at = $1 \
                 WHERE id_hash = $3 AND agent_id = $4 AND ended_at IS NULL",
            )
            .bind(*at)
            .bind(*reason)
            .bind(id_hash)
            .bind(agent_id)
            .execute(&mut **tx)
            .await?;
            found(done.rows_affected())
        }
        McpOp::ClaimUpstreamClose { id_hash, at } => {
            let done = sqlx::query(
                "UPDATE mcp_sessions SET upstream_closed_at = $1 \
                 WHERE id_hash = $2 AND upstream_closed_at IS NULL",
            )
            .bind(*at)
            .bind(id_hash)
            .execute(&mut **tx)
            .await?;
            found(done.rows_affected())
        }
    }
}

const SESSION_COLUMNS: &str = "id_hash, workspace_id, server_id, agent_id, credential_id, \
     protocol_version, url_elicitation, upstream_session, created_at, expires_at, ended_at, \
     ended_reason";

fn session_from_row(row: &AnyRow) -> Result<McpSessionRecord, sqlx::Error> {
    session_from_columns(row, |name| name)
}

/// A session from `row`, each column read under the name `column` gives it.
fn session_from_columns(
    row: &AnyRow,
    column: impl Fn(&'static str) -> &'static str,
) -> Result<McpSessionRecord, sqlx::Error> {
    Ok(McpSessionRecord {
        id_hash: row.try_get(column("id_hash"))?,
        workspace_id: row.try_get(column("workspace_id"))?,
        server_id: row.try_get(column("server_id"))?,
        agent_id: row.try_get(column("agent_id"))?,
        credential_id: row.try_get(column("credential_id"))?,
        protocol_version: row.try_get(column("protocol_version"))?,
        url_elicitation: row.try_get::<i64, _>(column("url_elicitation"))? != 0,
        upstream_session: row.try_get(column("upstream_session"))?,
        created_at: row.try_get(column("created_at"))?,
        expires_at: row.try_get(column("expires_at"))?,
        ended_at: row.try_get(column("ended_at"))?,
        ended_reason: row.try_get(column("ended_reason"))?,
    })
}

/// Whose open sessions [`end_sessions`] ends.
#[derive(Clone, Copy)]
pub(super) enum Sessions<'a> {
    Server(&'a str),
    /// An agent's (its suspension or revocation, in the transaction that changes its status).
    Agent(&'a str),
    /// A workspace's (the kill switch's revoke-all, in its transaction).
    Workspace(&'a str),
}

/// Ends every open session of a server, agent or workspace, for `reason`. A server's sessions
/// end because its URL or credentials changed, or it is gone: the upstream sessions of all its
/// sessions, ended now or before, count as closed (only the old URL and credentials reached
/// them); the others are closed upstream by the gateway.
pub(super) async fn end_sessions(
    tx: &mut Transaction<'_, Any>,
    of: Sessions<'_>,
    at: i64,
    reason: &str,
) -> Result<(), StoreError> {
    let (column, id) = match of {
        Sessions::Server(id) => ("server_id", id),
        Sessions::Agent(id) => ("agent_id", id),
        Sessions::Workspace(id) => ("workspace_id", id),
    };
    let closed = matches!(of, Sessions::Server(_)).then_some(at);
    sqlx::query(&format!(
        "UPDATE mcp_sessions SET ended_at = $1, ended_reason = $2, upstream_closed_at = $4 \
         WHERE {column} = $3 AND ended_at IS NULL"
    ))
    .bind(at)
    .bind(reason)
    .bind(id)
    .bind(closed)
    .execute(&mut **tx)
    .await?;
    if let Sessions::Server(id) = of {
        sqlx::query(
            "UPDATE mcp_sessions SET upstream_closed_at = $1 \
             WHERE server_id = $2 AND upstream_closed_at IS NULL",
        )
        .bind(at)
        .bind(id)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

#[async_trait]
impl McpStore for SqlStore {
    #[tracing::instrument(level = "debug", skip_all)]
    async fn mcp_servers(&self, workspace_id: &str) -> Result<Vec<McpServerRecord>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM mcp_servers WHERE workspace_id = $1 ORDER BY name"
        ))
        .bind(workspace_id)
        .fetch_all(&self.read)
        .await?;
        Ok(rows.iter().map(server_from_row).collect::<Result<_, _>>()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn mcp_session(&self, id_hash: &str) -> Result<Option<McpSessionRecord>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {SESSION_COLUMNS} FROM mcp_sessions WHERE id_hash = $1"
        ))
        .bind(id_hash)
        .fetch_optional(&self.read)
        .await?;
        Ok(row.as_ref().map(session_from_row).transpose()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn mcp_sessions_to_close(&self, limit: i64) -> Result<Vec<McpSessionRecord>, StoreError> {
        // Along the partial index `mcp_sessions_to_close`, which holds only such sessions. The
        // reasons are named, not inferred from the column alone, so that a session ended by a
        // replica of an earlier version (which never sets the column) is sent only for them.
        let rows = sqlx::query(&format!(
            "SELECT {SESSION_COLUMNS} FROM mcp_sessions \
             WHERE upstream_closed_at IS NULL AND upstream_session IS NOT NULL \
             AND ended_at IS NOT NULL AND ended_at < expires_at \
             AND ended_reason IN ('agent_suspended', 'agent_revoked', 'revoked_by_kill_switch', \
                                  'replaced') \
             ORDER BY ended_at LIMIT $1"
        ))
        .bind(limit)
        .fetch_all(&self.read)
        .await?;
        Ok(rows
            .iter()
            .map(session_from_row)
            .collect::<Result<_, _>>()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn mcp_server(
        &self,
        workspace_id: &str,
        server: ServerRef<'_>,
    ) -> Result<Option<McpServerRecord>, StoreError> {
        let (column, value) = match server {
            ServerRef::Id(id) => ("id", id),
            ServerRef::Name(name) => ("name", name),
        };
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM mcp_servers WHERE workspace_id = $1 AND {column} = $2"
        ))
        .bind(workspace_id)
        .bind(value)
        .fetch_optional(&self.read)
        .await?;
        Ok(row.as_ref().map(server_from_row).transpose()?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn mcp_gate(
        &self,
        token_hash: &str,
        server_name: &str,
        session_hash: Option<&str>,
    ) -> Result<Option<McpGate>, StoreError> {
        let Some(row) = sqlx::query(GATE.as_str())
            .bind(token_hash)
            .bind(server_name)
            .bind(session_hash)
            .fetch_optional(&self.read)
            .await?
        else {
            return Ok(None);
        };
        let server = joined(&row, &GATE_SERVER, "id", |column| {
            server_from_columns(&row, column)
        })?;
        Ok(Some(McpGate {
            credential: super::credentials::credential_from_row(&row)?,
            kill_switch: super::credentials::kill_switch_from_row(&row)?,
            server,
            auth_set_version: row.try_get("server_set_version")?,
            session: joined(&row, &GATE_SESSION, "id_hash", |column| {
                session_from_columns(&row, column)
            })?,
        }))
    }
}
