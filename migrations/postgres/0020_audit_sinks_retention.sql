-- Audit streaming and retention (issue 23).
--
-- Every audit event gets `seq`: the id of the transaction that wrote it. Transactions of many
-- replicas commit in any order, so no counter is commit-ordered; transaction ids give a safe
-- cursor instead: every transaction still running has an id at or above
-- `pg_snapshot_xmin(pg_current_snapshot())`, so the events below that horizon are final, and
-- no event can later appear below it. A sink delivers `(seq, id)` in order up to the horizon,
-- from a durable cursor. Events written before this migration have no `seq` (sinks start at
-- their creation). The default is set apart from ADD COLUMN so that the existing rows are not
-- rewritten; the INSERTs of the audit trail are unchanged.
ALTER TABLE audit_events ADD COLUMN seq BIGINT;
ALTER TABLE audit_events ALTER COLUMN seq SET DEFAULT (pg_current_xact_id()::text::bigint);
-- A sink reads its workspace's events in `(seq, id)` order from its cursor. The fifth B-tree
-- written by each audit insert (docs/benchmarks.md measures the cost).
CREATE INDEX audit_events_sequence ON audit_events (workspace_id, seq, id);

-- Outbound audit sinks: HTTPS endpoints that receive a workspace's events as signed NDJSON
-- batches, in `(seq, id)` order, from a durable cursor (`cursor_seq`, `cursor_id`: the last
-- event delivered). `secret_sealed` is the signing secret sealed with the master key. One
-- replica at a time delivers a sink: the one holding its lease (`lease_owner` until
-- `lease_until`).
CREATE TABLE audit_sinks (
    id                TEXT PRIMARY KEY,
    workspace_id      TEXT NOT NULL REFERENCES workspaces(id),
    name              TEXT NOT NULL,
    url               TEXT NOT NULL,
    secret_sealed     TEXT NOT NULL,
    enabled           BIGINT NOT NULL,
    created_at        BIGINT NOT NULL,
    created_by        TEXT NOT NULL,
    cursor_seq        BIGINT NOT NULL,
    cursor_id         TEXT NOT NULL,
    delivered_events  BIGINT NOT NULL DEFAULT 0,
    last_delivered_at BIGINT,
    last_attempt_at   BIGINT,
    last_error        TEXT,
    failures          BIGINT NOT NULL DEFAULT 0,
    next_attempt_at   BIGINT NOT NULL DEFAULT 0,
    lease_owner       TEXT,
    lease_until       BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX audit_sinks_workspace ON audit_sinks (workspace_id, created_at, id);

-- Retention per workspace, in days; NULL keeps everything (the default).
ALTER TABLE workspace_settings ADD COLUMN audit_retention_days BIGINT;
ALTER TABLE workspace_settings ADD COLUMN heartbeat_retention_days BIGINT;
