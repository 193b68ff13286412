-- The console's lists stay fast on a large workspace (issue 22): every selective filter of the
-- audit search has an index that also gives the order of a page (newest first, by
-- `created_at, id`), so a page reads its rows and stops; before, the only index was
-- (workspace_id, created_at, id) and a rare agent's events or one trace scanned the workspace.
-- A decision (allow, deny, challenge) is not selective: it is filtered along another index.
-- Each index is one more B-tree written by every audit insert on the `/v1/check` path, so there
-- are four and no more (docs/benchmarks.md measures the check throughput with and without).
-- When a search has several of these filters, the query uses one index, in the order
-- trace_id, agent_id, action, event_type (see `src/store/sql/audit.rs`). A trace holds a few
-- events: its index has no order columns (shorter entries to write), its rows are sorted.
CREATE INDEX audit_events_trace ON audit_events (workspace_id, trace_id);
CREATE INDEX audit_events_agent ON audit_events (workspace_id, agent_id, created_at, id);
CREATE INDEX audit_events_action ON audit_events (workspace_id, action, created_at, id);
CREATE INDEX audit_events_type ON audit_events (workspace_id, event_type, created_at, id);
-- The agents list pages newest first, by status or by name; each index has the order columns,
-- or SQLite prefers reading the workspace in order to sorting a few rows. Agents are written
-- rarely. (workspace_id, created_at, id) replaces (workspace_id, id): every query that used it
-- names the id (the primary key) too.
DROP INDEX agents_workspace;
CREATE INDEX agents_recent ON agents (workspace_id, created_at, id);
CREATE INDEX agents_status ON agents (workspace_id, status, created_at, id);
CREATE INDEX agents_name ON agents (workspace_id, name, created_at, id);
