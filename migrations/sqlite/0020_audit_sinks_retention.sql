-- Audit streaming and retention (issue 23).
--
-- Every audit event gets `seq`, its place in the order in which events were committed. SQLite
-- commits one writer at a time, so an `INTEGER PRIMARY KEY` (the rowid, assigned as the
-- largest so far plus one inside the writer's lock) is commit-ordered: a reader that has seen
-- `seq` N will never later find a new event below N. A sink's cursor is such a `seq`, so a
-- delivery resumes exactly where it stopped, across restarts. An explicit INTEGER PRIMARY KEY
-- also keeps the numbers through VACUUM and `acp backup` (VACUUM INTO), which may renumber an
-- implicit rowid. The table is rebuilt, rows in their order (existing rowids kept).
CREATE TABLE audit_events_new (
    seq          INTEGER PRIMARY KEY,
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
    SELECT rowid, id, workspace_id, created_at, event_type, agent_id, action, decision, policy_id,
           policy_hash, trace_id, reasons, reason_codes, actor, details
    FROM audit_events ORDER BY rowid;
DROP TABLE audit_events;
ALTER TABLE audit_events_new RENAME TO audit_events;
CREATE INDEX audit_events_workspace ON audit_events (workspace_id, created_at, id);
CREATE INDEX audit_events_trace ON audit_events (workspace_id, trace_id);
CREATE INDEX audit_events_agent ON audit_events (workspace_id, agent_id, created_at, id);
CREATE INDEX audit_events_action ON audit_events (workspace_id, action, created_at, id);
CREATE INDEX audit_events_type ON audit_events (workspace_id, event_type, created_at, id);
-- A sink reads its workspace's events in `seq` order from its cursor; without this index a
-- quiet workspace's sink would read every other workspace's events since its cursor. It is
-- the fifth B-tree written by each audit insert (docs/benchmarks.md measures the cost).
CREATE INDEX audit_events_sequence ON audit_events (workspace_id, seq);

-- Outbound audit sinks: HTTPS endpoints that receive a workspace's events as signed NDJSON
-- batches, in `seq` order, from a durable cursor (`cursor_seq`, `cursor_id`: the last event
-- delivered). `secret_sealed` is the signing secret sealed with the master key. One replica
-- at a time delivers a sink: the one holding its lease (`lease_owner` until `lease_until`).
CREATE TABLE audit_sinks (
    id                TEXT PRIMARY KEY,
    workspace_id      TEXT NOT NULL REFERENCES workspaces(id),
    name              TEXT NOT NULL,
    url               TEXT NOT NULL,
    secret_sealed     TEXT NOT NULL,
    enabled           INTEGER NOT NULL,
    created_at        INTEGER NOT NULL,
    created_by        TEXT NOT NULL,
    cursor_seq        INTEGER NOT NULL,
    cursor_id         TEXT NOT NULL,
    delivered_events  INTEGER NOT NULL DEFAULT 0,
    last_delivered_at INTEGER,
    last_attempt_at   INTEGER,
    last_error        TEXT,
    failures          INTEGER NOT NULL DEFAULT 0,
    next_attempt_at   INTEGER NOT NULL DEFAULT 0,
    lease_owner       TEXT,
    lease_until       INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX audit_sinks_workspace ON audit_sinks (workspace_id, created_at, id);

-- Retention per workspace, in days; NULL keeps everything (the default).
ALTER TABLE workspace_settings ADD COLUMN audit_retention_days INTEGER;
ALTER TABLE workspace_settings ADD COLUMN heartbeat_retention_days INTEGER;
