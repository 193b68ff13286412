-- Foundation: workspaces, API keys, agents, attestation, nonces, heartbeats, inventory, audit.
-- Times are Unix epoch milliseconds (INTEGER); JSON documents are TEXT.

CREATE TABLE instance_meta (
    key        TEXT PRIMARY KEY,
    value      TEXT NOT NULL
);

CREATE TABLE workspaces (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    created_at INTEGER NOT NULL
);

CREATE TABLE api_keys (
    id           TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL REFERENCES workspaces(id),
    key_hash     TEXT NOT NULL UNIQUE,
    mode         TEXT NOT NULL,
    last_four    TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    revoked_at   INTEGER
);
CREATE INDEX api_keys_workspace ON api_keys (workspace_id);

CREATE TABLE agents (
    id           TEXT PRIMARY KEY,
    workspace_id TEXT REFERENCES workspaces(id),
    name         TEXT NOT NULL,
    public_key   TEXT NOT NULL,
    key_type     TEXT NOT NULL,
    metadata     TEXT NOT NULL,
    status       TEXT NOT NULL,
    risk_tier    TEXT NOT NULL DEFAULT 'low',
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    attested_at  INTEGER,
    last_seen_at INTEGER
);
CREATE UNIQUE INDEX agents_scope_key ON agents (COALESCE(workspace_id, ''), public_key);
CREATE INDEX agents_workspace ON agents (workspace_id, id);

CREATE TABLE attestation_challenges (
    id         TEXT PRIMARY KEY,
    agent_id   TEXT NOT NULL REFERENCES agents(id),
    challenge  TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    used_at    INTEGER
);
CREATE INDEX attestation_challenges_agent ON attestation_challenges (agent_id);

CREATE TABLE agent_claim_codes (
    code_hash  TEXT PRIMARY KEY,
    agent_id   TEXT NOT NULL REFERENCES agents(id),
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    used_at    INTEGER
);
CREATE INDEX agent_claim_codes_agent ON agent_claim_codes (agent_id);

CREATE TABLE nonces (
    scope      TEXT NOT NULL,
    nonce      TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (scope, nonce)
);
CREATE INDEX nonces_expiry ON nonces (expires_at);

CREATE TABLE heartbeats (
    id           TEXT PRIMARY KEY,
    workspace_id TEXT,
    agent_id     TEXT NOT NULL REFERENCES agents(id),
    status       TEXT NOT NULL,
    latency_ms   REAL NOT NULL,
    observed_at  INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    source       TEXT NOT NULL
);
CREATE INDEX heartbeats_recent ON heartbeats (workspace_id, created_at, id);
CREATE INDEX heartbeats_agent ON heartbeats (agent_id, created_at, id);

CREATE TABLE agent_inventory (
    workspace_id       TEXT NOT NULL REFERENCES workspaces(id),
    external_agent_key TEXT NOT NULL,
    agent_id           TEXT NOT NULL REFERENCES agents(id),
    display_name       TEXT,
    labels             TEXT NOT NULL,
    environment        TEXT,
    source             TEXT,
    status             TEXT NOT NULL,
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    PRIMARY KEY (workspace_id, external_agent_key)
);

CREATE TABLE audit_events (
    id           TEXT PRIMARY KEY,
    workspace_id TEXT,
    created_at   INTEGER NOT NULL,
    event_type   TEXT NOT NULL,
    agent_id     TEXT,
    action       TEXT,
    decision     TEXT,
    policy_id    TEXT,
    policy_hash  TEXT,
    trace_id     TEXT,
    reasons      TEXT NOT NULL,
    reason_codes TEXT NOT NULL,
    actor        TEXT NOT NULL,
    details      TEXT NOT NULL
);
CREATE INDEX audit_events_workspace ON audit_events (workspace_id, created_at, id);
