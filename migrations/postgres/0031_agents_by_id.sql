-- A workspace's agents in order of their ids: the access review's subject search walks them so,
-- a page at a time past its cursor. Without it the walk read the primary key across every
-- workspace (a small workspace in a database of a million agents read them all); agents are
-- written rarely, and a heartbeat changes neither column.
CREATE INDEX agents_by_id ON agents (workspace_id, id);
