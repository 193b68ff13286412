-- Vault leases: workflow leases (issued by a person, token or API key for an agent) and the
-- request leases agents mint from them. Tokens are stored as SHA-256 only.
CREATE TABLE vault_leases (
    id            TEXT PRIMARY KEY,
    workspace_id  TEXT NOT NULL REFERENCES workspaces(id),
    kind          TEXT NOT NULL,
    workflow_id   TEXT,
    agent_id      TEXT NOT NULL,
    secret_set_id TEXT NOT NULL REFERENCES vault_secret_sets(id),
    purpose       TEXT NOT NULL,
    actions       TEXT NOT NULL,
    keys          TEXT,
    token_hash    TEXT NOT NULL UNIQUE,
    uses_left     BIGINT,
    expires_at    BIGINT NOT NULL,
    revoked_at    BIGINT,
    created_at    BIGINT NOT NULL,
    created_by    TEXT NOT NULL
);
CREATE INDEX vault_leases_workspace ON vault_leases (workspace_id, created_at);
CREATE INDEX vault_leases_workflow ON vault_leases (workflow_id);
