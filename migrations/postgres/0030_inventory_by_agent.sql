-- An agent's inventory items, by agent: an agent's labels are read when it is loaded into the
-- decision path's cache (one agent) and by the access review's subject search (a page of
-- agents). Without it each read walked every inventory item of the workspace (at a million
-- agents 450 ms on SQLite, 200 ms on Postgres), on every cache miss of a check.
CREATE INDEX agent_inventory_agent ON agent_inventory (workspace_id, agent_id, external_agent_key);
