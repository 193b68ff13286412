-- When the gateway ended upstream the upstream's own session of an MCP session that acp ended
-- for its own reasons (the agent suspended or revoked, the kill switch's revoke-all, replaced by
-- a newer session): a background task sends the upstream a `DELETE` for each ended session with
-- an upstream session and no `upstream_closed_at` yet, claiming it first, so that one replica
-- sends it. Sessions ended by the agent's own `DELETE` (sent upstream at once), by the upstream
-- itself, or by a change or deletion of their server (whose URL or credentials are no longer
-- the session's) are closed when they end. Sessions that ended before this column existed count
-- as closed.
ALTER TABLE mcp_sessions ADD COLUMN upstream_closed_at INTEGER;
UPDATE mcp_sessions SET upstream_closed_at = ended_at WHERE ended_at IS NOT NULL;
CREATE INDEX mcp_sessions_to_close ON mcp_sessions (ended_at)
    WHERE upstream_closed_at IS NULL AND upstream_session IS NOT NULL AND ended_at IS NOT NULL;
