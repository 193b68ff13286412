-- When the gateway ended upstream the upstream's own session of an MCP session that acp ended
-- for its own reasons (the agent suspended or revoked, the kill switch's revoke-all, replaced by
-- a newer session): a background task sends the upstream a `DELETE` for each session ended for
-- one of those reasons, before it expired, with an upstream session and no `upstream_closed_at`
-- yet, claiming it first so that at most one replica sends it. Sessions ended for other reasons
-- are never sent anywhere: the agent's own `DELETE` was sent upstream at once, the upstream
-- ended its own, and a change or deletion of their server (which also marks every session of
-- that server closed) means its URL or credentials are no longer the session's. Sessions that
-- ended before this column existed count as closed.
ALTER TABLE mcp_sessions ADD COLUMN upstream_closed_at INTEGER;
UPDATE mcp_sessions SET upstream_closed_at = ended_at WHERE ended_at IS NOT NULL;
CREATE INDEX mcp_sessions_to_close ON mcp_sessions (ended_at)
    WHERE upstream_closed_at IS NULL AND upstream_session IS NOT NULL AND ended_at IS NOT NULL
    AND ended_at < expires_at
    AND ended_reason IN ('agent_suspended', 'agent_revoked', 'revoked_by_kill_switch', 'replaced');
