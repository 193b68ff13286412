-- Short-lived credentials minted for agents, and the workspace kill switch.
CREATE TABLE credentials (
    id             TEXT PRIMARY KEY,
    workspace_id   TEXT NOT NULL REFERENCES workspaces(id),
    agent_id       TEXT NOT NULL REFERENCES agents(id),
    token_hash     TEXT NOT NULL UNIQUE,
    token_type     TEXT NOT NULL,
    provider       TEXT,
    audience       TEXT,
    scopes         TEXT NOT NULL,
    one_time       BIGINT NOT NULL,
    created_at     BIGINT NOT NULL,
    expires_at     BIGINT NOT NULL,
    revoked_at     BIGINT,
    revoked_reason TEXT,
    used_at        BIGINT
);
CREATE INDEX credentials_agent ON credentials (workspace_id, agent_id);

CREATE TABLE kill_switches (
    workspace_id          TEXT PRIMARY KEY REFERENCES workspaces(id),
    minting_paused        BIGINT NOT NULL DEFAULT 0,
    minting_paused_reason TEXT,
    all_revoked_at        BIGINT,
    updated_at            BIGINT NOT NULL
);
