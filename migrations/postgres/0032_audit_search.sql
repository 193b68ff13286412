-- The console's and the sinks' search structures off the request path.
--
-- Every audit insert on the `/v1/check` path wrote six B-trees: the table, the workspace's
-- order, and four indexes kept for searches (by trace, agent, action, event type) plus the
-- sinks' `(workspace_id, seq, id)`. The insert now writes the table, the workspace's order and
-- one global `(seq, id)` order. The searched columns are copied, in `(seq, id)` order and only
-- below the oldest running transaction (see migration 0020), into `audit_search` by a follower
-- task that trails the commit by milliseconds (one replica at a time, under the point's row
-- lock), and the indexes sit on the copy. `audit_search_point` is the last event copied: a
-- search reads the copy up to it and `audit_events` after it (a short range of the global
-- order), so nothing committed is missed while the follower catches up.
--
-- Events written before migration 0020 have no `seq`; they get 0, below every sink's cursor
-- (sinks never delivered them, and still do not), so that every event has a place in the order.
UPDATE audit_events SET seq = 0 WHERE seq IS NULL;
CREATE TABLE audit_search (
    seq          BIGINT NOT NULL,
    id           TEXT NOT NULL,
    workspace_id TEXT,
    created_at   BIGINT NOT NULL,
    event_type   TEXT NOT NULL,
    agent_id     TEXT,
    action       TEXT,
    trace_id     TEXT,
    PRIMARY KEY (seq, id)
);
INSERT INTO audit_search
    SELECT seq, id, workspace_id, created_at, event_type, agent_id, action, trace_id
    FROM audit_events
    WHERE seq < pg_snapshot_xmin(pg_current_snapshot())::text::bigint;
CREATE TABLE audit_search_point (
    one BIGINT PRIMARY KEY CHECK (one = 1),
    seq BIGINT NOT NULL,
    id  TEXT NOT NULL
);
INSERT INTO audit_search_point (one, seq, id) VALUES (1, -1, '');
UPDATE audit_search_point SET (seq, id) =
    (SELECT seq, id FROM audit_search ORDER BY seq DESC, id DESC LIMIT 1)
    WHERE EXISTS (SELECT 1 FROM audit_search);
DROP INDEX audit_events_trace;
DROP INDEX audit_events_agent;
DROP INDEX audit_events_action;
DROP INDEX audit_events_type;
DROP INDEX audit_events_sequence;
CREATE INDEX audit_events_order ON audit_events (seq, id);
CREATE INDEX audit_search_trace ON audit_search (workspace_id, trace_id);
CREATE INDEX audit_search_agent ON audit_search (workspace_id, agent_id, created_at, id);
CREATE INDEX audit_search_action ON audit_search (workspace_id, action, created_at, id);
CREATE INDEX audit_search_type ON audit_search (workspace_id, event_type, created_at, id);
CREATE INDEX audit_search_sequence ON audit_search (workspace_id, seq, id);
