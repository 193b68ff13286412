-- The console's and the sinks' search structures off the request path.
--
-- Every audit insert on the `/v1/check` path wrote seven B-trees: the table, the workspace's
-- order, and five indexes kept for searches (by trace, agent, action, event type, and the sinks'
-- `seq`). The insert now writes the table and the workspace's order only. The searched columns
-- are copied, in `seq` order, into `audit_search` by a follower task that trails the commit by
-- milliseconds (many events per transaction, so each page of an index is written once per batch
-- rather than once per commit of a few checks), and the indexes sit on the copy.
-- `audit_search_point` is the last event copied: a search reads the copy up to it and
-- `audit_events` after it (a short range of the table's own key), so nothing committed is
-- missed while the follower catches up.
CREATE TABLE audit_search (
    seq          INTEGER PRIMARY KEY,
    id           TEXT NOT NULL,
    workspace_id TEXT,
    created_at   INTEGER NOT NULL,
    event_type   TEXT NOT NULL,
    agent_id     TEXT,
    action       TEXT,
    trace_id     TEXT
);
INSERT INTO audit_search
    SELECT seq, id, workspace_id, created_at, event_type, agent_id, action, trace_id
    FROM audit_events ORDER BY seq;
CREATE TABLE audit_search_point (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    seq INTEGER NOT NULL,
    id  TEXT NOT NULL
);
INSERT INTO audit_search_point (one, seq, id) VALUES (1, 0, '');
UPDATE audit_search_point SET
    seq = (SELECT seq FROM audit_search ORDER BY seq DESC LIMIT 1),
    id = (SELECT id FROM audit_search ORDER BY seq DESC LIMIT 1)
    WHERE EXISTS (SELECT 1 FROM audit_search);
DROP INDEX audit_events_trace;
DROP INDEX audit_events_agent;
DROP INDEX audit_events_action;
DROP INDEX audit_events_type;
DROP INDEX audit_events_sequence;
CREATE INDEX audit_search_trace ON audit_search (workspace_id, trace_id);
CREATE INDEX audit_search_agent ON audit_search (workspace_id, agent_id, created_at, id);
CREATE INDEX audit_search_action ON audit_search (workspace_id, action, created_at, id);
CREATE INDEX audit_search_type ON audit_search (workspace_id, event_type, created_at, id);
CREATE INDEX audit_search_sequence ON audit_search (workspace_id, seq);
