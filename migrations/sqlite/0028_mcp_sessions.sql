-- The MCP gateway's sessions: one per agent's `initialize` at `/mcp/{name}`. The id the agent
-- holds (`Mcp-Session-Id`) is stored only as its SHA-256. A session belongs to the agent that
-- opened it; the credential it opened with is kept for the audit trail. `upstream_session` is
-- the upstream's own session id, sealed with the master key. A session ends when the agent
-- deletes it, when its server is deleted, when its agent is suspended or revoked, on the kill
-- switch's revoke-all, when the agent opens too many, when the upstream ends it, or at
-- `expires_at`; the row is deleted a day after `expires_at`.
CREATE TABLE mcp_sessions (
    id_hash           TEXT PRIMARY KEY,
    workspace_id      TEXT NOT NULL REFERENCES workspaces(id),
    server_id         TEXT NOT NULL,
    agent_id          TEXT NOT NULL,
    credential_id     TEXT NOT NULL,
    protocol_version  TEXT NOT NULL,
    url_elicitation   INTEGER NOT NULL DEFAULT 0,
    upstream_session  TEXT,
    created_at        INTEGER NOT NULL,
    expires_at        INTEGER NOT NULL,
    ended_at          INTEGER,
    ended_reason      TEXT
);
CREATE INDEX mcp_sessions_agent ON mcp_sessions (agent_id, created_at);
CREATE INDEX mcp_sessions_server ON mcp_sessions (server_id);
CREATE INDEX mcp_sessions_workspace ON mcp_sessions (workspace_id, created_at);
CREATE INDEX mcp_sessions_expiry ON mcp_sessions (expires_at);
