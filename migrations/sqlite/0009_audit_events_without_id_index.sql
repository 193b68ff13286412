-- Audit events are read through (workspace_id, created_at, id) only. The unique index that
-- `id TEXT PRIMARY KEY` made was a third B-tree, and one more page in the WAL, for every insert
-- on the `/v1/check` path. Event ids are UUIDv7 values made by the server, unique by
-- construction. SQLite cannot drop a primary key: the table is rebuilt, rows in their order.
CREATE TABLE audit_events_new (
    id           TEXT NOT NULL,
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
INSERT INTO audit_events_new
    SELECT id, workspace_id, created_at, event_type, agent_id, action, decision, policy_id,
           policy_hash, trace_id, reasons, reason_codes, actor, details
    FROM audit_events ORDER BY rowid;
DROP TABLE audit_events;
ALTER TABLE audit_events_new RENAME TO audit_events;
CREATE INDEX audit_events_workspace ON audit_events (workspace_id, created_at, id);
