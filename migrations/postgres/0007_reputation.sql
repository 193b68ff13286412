-- Provider feedback about agents, and the reputation it moves.
ALTER TABLE agents ADD COLUMN risk_score DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE agents ADD COLUMN risk_scored_at BIGINT;

CREATE TABLE agent_feedback (
    id           TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL REFERENCES workspaces(id),
    agent_id     TEXT NOT NULL REFERENCES agents(id),
    key_id       TEXT NOT NULL,
    verdict      TEXT NOT NULL,
    evidence     TEXT NOT NULL,
    created_at   BIGINT NOT NULL
);
CREATE INDEX agent_feedback_agent ON agent_feedback (agent_id, created_at);
