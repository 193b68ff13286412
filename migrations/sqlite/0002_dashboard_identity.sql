-- Dashboard identity: users, memberships, magic-link login, sessions, personal access tokens,
-- rate-limit counters, the email outbox, status checks and contact submissions.

CREATE TABLE users (
    id            TEXT PRIMARY KEY,
    email         TEXT NOT NULL UNIQUE,
    created_at    INTEGER NOT NULL,
    last_login_at INTEGER
);

CREATE TABLE memberships (
    workspace_id TEXT NOT NULL REFERENCES workspaces(id),
    user_id      TEXT NOT NULL REFERENCES users(id),
    role         TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (workspace_id, user_id)
);
CREATE INDEX memberships_user ON memberships (user_id);

CREATE TABLE login_tokens (
    token_hash TEXT PRIMARY KEY,
    email      TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    used_at    INTEGER
);

CREATE TABLE sessions (
    id_hash      TEXT PRIMARY KEY,
    user_id      TEXT NOT NULL REFERENCES users(id),
    workspace_id TEXT REFERENCES workspaces(id),
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    revoked_at   INTEGER
);
CREATE INDEX sessions_user ON sessions (user_id);

CREATE TABLE personal_access_tokens (
    id           TEXT PRIMARY KEY,
    user_id      TEXT NOT NULL REFERENCES users(id),
    name         TEXT NOT NULL,
    token_hash   TEXT NOT NULL UNIQUE,
    last_four    TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    revoked_at   INTEGER,
    last_used_at INTEGER
);
CREATE INDEX personal_access_tokens_user ON personal_access_tokens (user_id);

ALTER TABLE api_keys ADD COLUMN name TEXT;
ALTER TABLE api_keys ADD COLUMN created_by TEXT;
ALTER TABLE api_keys ADD COLUMN last_used_at INTEGER;

CREATE TABLE rate_limit_hits (
    bucket       TEXT NOT NULL,
    window_start INTEGER NOT NULL,
    hits         INTEGER NOT NULL,
    PRIMARY KEY (bucket, window_start)
);

CREATE TABLE outbox_messages (
    id         TEXT PRIMARY KEY,
    recipients TEXT NOT NULL,
    subject    TEXT NOT NULL,
    text_body  TEXT,
    html_body  TEXT,
    created_at INTEGER NOT NULL
);

CREATE TABLE status_checks (
    id         TEXT PRIMARY KEY,
    component  TEXT NOT NULL,
    status     TEXT NOT NULL,
    detail     TEXT NOT NULL,
    latency_ms REAL NOT NULL,
    checked_at INTEGER NOT NULL
);
CREATE INDEX status_checks_component ON status_checks (component, checked_at);

CREATE TABLE contact_submissions (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    email      TEXT NOT NULL,
    message    TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
