//! SQL of the MCP gateway's registered servers.

use async_trait::async_trait;
use sqlx::any::AnyRow;
use sqlx::{Any, Row, Transaction};

use super::{found, is_unique_violation, SqlStore};
use crate::store::*;

const COLUMNS: &str = "id, workspace_id, name, url, auth_secret_set_id, auth_profile, \
     record_arguments, created_at, created_by, updated_at";

fn server_from_row(row: &AnyRow) -> Result<McpServerRecord, sqlx::Error> {
    let secret_set_id: Option<String> = row.try_get("auth_secret_set_id")?;
    let profile: Option<String> = row.try_get("auth_profile")?;
    Ok(McpServerRecord {
        id: row.try_get("id")?,
        workspace_id: row.try_get("workspace_id")?,
        name: row.try_get("name")?,
        url: row.try_get("url")?,
        auth: secret_set_id
            .zip(profile)
            .map(|(secret_set_id, profile)| McpServerAuth {
                secret_set_id,
                profile,
            }),
        record_arguments: row.try_get::<i64, _>("record_arguments")? != 0,
        created_at: row.try_get("created_at")?,
        created_by: row.try_get("created_by")?,
        updated_at: row.try_get("updated_at")?,
    })
}

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
        McpOp::UpdateServer { server, read_at } => {
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
            Ok(Applied::Done)
        }
        McpOp::DeleteServer {
            workspace_id,
            server_id,
        } => {
            let done = sqlx::query("DELETE FROM mcp_servers WHERE workspace_id = $1 AND id = $2")
                .bind(workspace_id)
                .bind(server_id)
                .execute(&mut **tx)
                .await?;
            found(done.rows_affected())
        }
    }
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
}
