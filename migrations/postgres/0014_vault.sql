-- The vault (CONTRACT section 11): secret sets with versions, and grants of them to agents.
-- Values are sealed with a data key per set (ChaCha20-Poly1305, associated data binding the
-- workspace, the set and the version); the data key is sealed with the master key.
CREATE TABLE vault_secret_sets (
    id              TEXT PRIMARY KEY,
    workspace_id    TEXT NOT NULL REFERENCES workspaces(id),
    number          BIGINT NOT NULL,
    name            TEXT NOT NULL,
    provider        TEXT NOT NULL,
    environment     TEXT NOT NULL,
    current_version BIGINT NOT NULL,
    data_key        TEXT NOT NULL,
    key_version     BIGINT NOT NULL,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    deleted_at      BIGINT,
    destroyed_at    BIGINT,
    UNIQUE (workspace_id, number)
);
CREATE UNIQUE INDEX vault_secret_sets_name ON vault_secret_sets (workspace_id, name) WHERE destroyed_at IS NULL;

CREATE TABLE vault_secret_versions (
    secret_set_id TEXT NOT NULL REFERENCES vault_secret_sets(id),
    version       BIGINT NOT NULL,
    sealed        TEXT NOT NULL,
    keys          TEXT NOT NULL,
    profiles      TEXT NOT NULL,
    author        TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    PRIMARY KEY (secret_set_id, version)
);

CREATE TABLE vault_grants (
    id              TEXT PRIMARY KEY,
    workspace_id    TEXT NOT NULL REFERENCES workspaces(id),
    secret_set_id   TEXT NOT NULL REFERENCES vault_secret_sets(id),
    agent_id        TEXT,
    group_name      TEXT,
    allowed_keys    TEXT NOT NULL,
    allowed_actions TEXT NOT NULL,
    expires_at      BIGINT,
    created_at      BIGINT NOT NULL,
    created_by      TEXT NOT NULL,
    revoked_at      BIGINT
);
CREATE INDEX vault_grants_set ON vault_grants (secret_set_id, created_at);
CREATE INDEX vault_grants_workspace ON vault_grants (workspace_id, created_at);
