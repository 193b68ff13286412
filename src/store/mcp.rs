//! The MCP gateway's registered servers and sessions as stored.

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

/// A gateway session: opened by an agent's `initialize`, bound to that agent.
#[derive(Clone, PartialEq, Eq)]
pub struct McpSessionRecord {
    /// SHA-256 (hex) of the `Mcp-Session-Id` the agent holds.
    pub id_hash: String,
    pub workspace_id: String,
    pub server_id: String,
    pub agent_id: String,
    /// The credential the session was opened with.
    pub credential_id: String,
    /// The protocol revision the handshake settled on.
    pub protocol_version: String,
    /// Whether the client declared URL elicitation (`capabilities.elicitation.url`).
    pub url_elicitation: bool,
    /// The upstream's own session id, sealed with the master key.
    pub upstream_session: Option<String>,
    pub created_at: i64,
    pub expires_at: i64,
    pub ended_at: Option<i64>,
    pub ended_reason: Option<String>,
}

/// Shows neither hash nor the upstream's sealed id.
impl std::fmt::Debug for McpSessionRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpSessionRecord")
            .field("server_id", &self.server_id)
            .field("agent_id", &self.agent_id)
            .field("protocol_version", &self.protocol_version)
            .field("created_at", &self.created_at)
            .field("ended_at", &self.ended_at)
            .finish()
    }
}

/// Changes to the registered servers (configured by people, audited) and to the sessions.
#[derive(Debug, Clone)]
pub enum McpOp {
    /// `Conflict("mcp_server_exists")` when the workspace has a server of that name;
    /// `Conflict("too_many_mcp_servers")` beyond `max`.
    CreateServer { server: McpServerRecord, max: i64 },
    /// Replaces the server's settings (`workspace_id` and `id` find it, `created_*` are kept)
    /// if it is still as it was read (`updated_at` = `read_at`). `NotFound` when the workspace
    /// has no such server; `Conflict("mcp_server_changed")` when it changed since it was read;
    /// `Conflict("mcp_server_exists")` when the new name is another server's. With
    /// `end_sessions`, its open sessions end (reason `server_changed`).
    UpdateServer {
        server: McpServerRecord,
        read_at: i64,
        end_sessions: bool,
    },
    /// Deletes the server and ends its sessions (reason `server_deleted`).
    DeleteServer {
        workspace_id: String,
        server_id: String,
        at: i64,
    },
    /// Opens a session; when its agent already has `max` open ones, the oldest are ended
    /// (reason `replaced`), so that an agent's open sessions stay bounded. `AgentNotActive`
    /// when the agent is suspended or revoked, or the credential revoked, by now.
    OpenSession { session: McpSessionRecord, max: i64 },
    /// Ends the agent's session (`NotFound` when it is not an open session of that agent),
    /// its upstream session counted as closed: the agent's `DELETE` is sent upstream at once,
    /// and a session the upstream ended is closed there already.
    EndSession {
        id_hash: String,
        agent_id: String,
        at: i64,
        reason: &'static str,
    },
    /// Claims an ended session's upstream session for closing (see
    /// [`McpStore::mcp_sessions_to_close`]): `NotFound` when another replica claimed it first.
    ClaimUpstreamClose { id_hash: String, at: i64 },
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
    /// A session by the hash of its id, open or ended.
    async fn mcp_session(&self, id_hash: &str) -> Result<Option<McpSessionRecord>, StoreError>;
    /// Sessions acp ended whose upstream session is still to be ended upstream (claimed by
    /// none), the longest ended first; at most `limit`.
    async fn mcp_sessions_to_close(&self, limit: i64) -> Result<Vec<McpSessionRecord>, StoreError>;
    /// What the gateway reads of a message's caller in one statement: the credential of
    /// `token_hash`, its workspace's kill switch, the workspace's server named `server_name`,
    /// the current version of that server's secret set while the set is live, and the session
    /// of `session_hash` (open or ended, whoever's). `None` when no credential has that hash.
    async fn mcp_gate(
        &self,
        token_hash: &str,
        server_name: &str,
        session_hash: Option<&str>,
    ) -> Result<Option<McpGate>, StoreError>;
}

/// [`McpStore::mcp_gate`]'s answer: everything read at once, so a message waits on one round
/// trip for it rather than four.
#[derive(Debug, Clone)]
pub struct McpGate {
    pub credential: super::CredentialRecord,
    pub kill_switch: super::KillSwitch,
    /// The credential's workspace's server of that name, if it has one.
    pub server: Option<McpServerRecord>,
    /// The current version of the server's secret set (its `auth`), when the set is live
    /// (neither deleted nor destroyed).
    pub auth_set_version: Option<i64>,
    /// The session of the hash asked for, if there is one (checked by the caller against the
    /// credential's agent and the server).
    pub session: Option<McpSessionRecord>,
}
