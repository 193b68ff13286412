-- Policies as code: current policy per workspace, every applied version, the group memberships
-- and bindings each apply materialises, idempotency records of sync requests, and the policy
-- challenges created by `challenge` decisions.

CREATE TABLE policies (
    workspace_id    TEXT NOT NULL REFERENCES workspaces(id),
    id              TEXT NOT NULL,
    name            TEXT NOT NULL,
    current_version BIGINT NOT NULL,
    current_hash    TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    PRIMARY KEY (workspace_id, id)
);
CREATE INDEX policies_updated ON policies (updated_at);

CREATE TABLE policy_versions (
    workspace_id TEXT NOT NULL,
    policy_id    TEXT NOT NULL,
    version      BIGINT NOT NULL,
    hash         TEXT NOT NULL,
    spec         TEXT NOT NULL,
    cedar        TEXT NOT NULL,
    author       TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    PRIMARY KEY (workspace_id, policy_id, version),
    FOREIGN KEY (workspace_id, policy_id) REFERENCES policies (workspace_id, id)
);

CREATE TABLE policy_group_members (
    workspace_id TEXT NOT NULL,
    policy_id    TEXT NOT NULL,
    group_name   TEXT NOT NULL,
    agent_id     TEXT NOT NULL,
    PRIMARY KEY (workspace_id, policy_id, group_name, agent_id)
);

CREATE TABLE policy_bindings (
    workspace_id TEXT NOT NULL,
    policy_id    TEXT NOT NULL,
    binding_name TEXT NOT NULL,
    group_name   TEXT NOT NULL,
    block_name   TEXT NOT NULL,
    actions      TEXT NOT NULL,
    PRIMARY KEY (workspace_id, policy_id, binding_name, block_name)
);

CREATE TABLE idempotency_keys (
    workspace_id TEXT NOT NULL,
    key          TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    status       BIGINT NOT NULL,
    response     TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    PRIMARY KEY (workspace_id, key)
);

CREATE TABLE policy_challenges (
    id            TEXT PRIMARY KEY,
    workspace_id  TEXT NOT NULL REFERENCES workspaces(id),
    agent_id      TEXT NOT NULL,
    policy_id     TEXT NOT NULL,
    action        TEXT NOT NULL,
    fingerprint   TEXT NOT NULL,
    token_hash    TEXT NOT NULL UNIQUE,
    status        TEXT NOT NULL,
    reasons       TEXT NOT NULL,
    reason_codes  TEXT NOT NULL,
    summary       TEXT NOT NULL,
    trace_id      TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    decided_at    BIGINT,
    decided_by    TEXT,
    consumed_at   BIGINT
);
CREATE INDEX policy_challenges_lookup ON policy_challenges (workspace_id, agent_id, fingerprint);
