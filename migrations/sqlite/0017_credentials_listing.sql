-- The console's list of a workspace's active credentials (issue 22), newest first by
-- `created_at, id`, whole workspace or one agent's: each index gives the page's order, and the
-- listing reads only the last hour of mints (no credential lives longer), so a page reads its
-- rows and stops however many expired credentials the workspace has kept. (workspace_id,
-- agent_id, created_at, id) replaces (workspace_id, agent_id): revoking an agent's credentials
-- reads its prefix as before.
DROP INDEX credentials_agent;
CREATE INDEX credentials_recent ON credentials (workspace_id, created_at, id);
CREATE INDEX credentials_agent ON credentials (workspace_id, agent_id, created_at, id);
