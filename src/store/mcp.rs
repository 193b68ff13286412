//! The MCP gateway's registered servers as stored.

use async_trait::async_trait;

use super::StoreError;

/// Where the upstream's credentials come from: a vault secret set's proxy profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerAuth {
    /// `ss_…` (a number given by the caller is resolved before it is stored).
    pub secret_set_id: String,
    pub profile: String,
}

/// A registered MCP server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerRecord {
    pub id: String,
    pub workspace_id: String,
    pub name: String,
    pub url: String,
    pub auth: Option<McpServerAuth>,
    /// Whether a tool call's argument values are recorded in its audit event (names and JSON
    /// types always are).
    pub record_arguments: bool,
    pub created_at: i64,
    pub created_by: String,
    pub updated_at: i64,
}

/// A server named by its id (`mcp_…`) or its name: the two never look alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerRef<'a> {
    Id(&'a str),
    Name(&'a str),
}

/// Changes to the registered servers (configured by people, audited).
#[derive(Debug, Clone)]
pub enum McpOp {
    /// `Conflict("mcp_server_exists")` when the workspace has a server of that name;
    /// `Conflict("too_many_mcp_servers")` beyond `max`.
    CreateServer { server: McpServerRecord, max: i64 },
    /// Replaces the server's settings (`workspace_id` and `id` find it, `created_*` are kept)
    /// if it is still as it was read (`updated_at` = `read_at`). `NotFound` when the workspace
    /// has no such server; `Conflict("mcp_server_changed")` when it changed since it was read;
    /// `Conflict("mcp_server_exists")` when the new name is another server's.
    UpdateServer {
        server: McpServerRecord,
        read_at: i64,
    },
    DeleteServer {
        workspace_id: String,
        server_id: String,
    },
}

impl McpOp {
    /// See [`super::Op::supersedes`]: no decision reads a server's registration.
    pub fn supersedes(&self) -> Option<super::Supersedes<'_>> {
        None
    }
}

/// Reads of the registered servers.
#[async_trait]
pub trait McpStore: Send + Sync {
    /// The workspace's servers by name.
    async fn mcp_servers(&self, workspace_id: &str) -> Result<Vec<McpServerRecord>, StoreError>;
    async fn mcp_server(
        &self,
        workspace_id: &str,
        server: ServerRef<'_>,
    ) -> Result<Option<McpServerRecord>, StoreError>;
}
