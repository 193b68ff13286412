-- Emails sent through the service (reservations until the provider answers), counted for the
-- per-agent rate limits; a counter row per agent serialises reservations across replicas.
CREATE TABLE email_counters (
    workspace_id TEXT NOT NULL,
    agent_id     TEXT NOT NULL,
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (workspace_id, agent_id)
);

CREATE TABLE email_sends (
    id                  TEXT PRIMARY KEY,
    workspace_id        TEXT NOT NULL REFERENCES workspaces(id),
    agent_id            TEXT NOT NULL REFERENCES agents(id),
    sent_at             INTEGER NOT NULL,
    status              TEXT NOT NULL,
    recipients          INTEGER NOT NULL,
    provider            TEXT,
    provider_message_id TEXT
);
CREATE INDEX email_sends_agent ON email_sends (workspace_id, agent_id, sent_at);

-- The JWT issuer's Ed25519 keys. The newest unretired key signs; a retired key stays
-- published until every token it signed has expired.
CREATE TABLE signing_keys (
    kid           TEXT PRIMARY KEY,
    private_key   TEXT NOT NULL,
    public_key    TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    retired_at    INTEGER,
    publish_until INTEGER
);
