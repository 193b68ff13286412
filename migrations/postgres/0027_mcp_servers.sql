-- The MCP gateway's registered servers: the upstream a workspace's agents reach at
-- `/mcp/{name}`. `name` is unique in the workspace (it is the path and part of the tools'
-- action names). With `auth_secret_set_id`, the upstream's credentials are the named profile's
-- injections, filled from that vault secret set on every upstream request.
CREATE TABLE mcp_servers (
    id                 TEXT PRIMARY KEY,
    workspace_id       TEXT NOT NULL REFERENCES workspaces(id),
    name               TEXT NOT NULL,
    url                TEXT NOT NULL,
    auth_secret_set_id TEXT,
    auth_profile       TEXT,
    record_arguments   BIGINT NOT NULL DEFAULT 0,
    created_at         BIGINT NOT NULL,
    created_by         TEXT NOT NULL,
    updated_at         BIGINT NOT NULL
);
CREATE UNIQUE INDEX mcp_servers_name ON mcp_servers (workspace_id, name);
