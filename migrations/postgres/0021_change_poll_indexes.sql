-- The change poll (every second on every replica, and at once on a Postgres NOTIFY) reads what
-- changed since its last poll: agents and inventory entries by `updated_at`, revoked keys by
-- `revoked_at`, policies by `updated_at` (indexed since 0004). Without these indexes each poll
-- read the whole of both agent tables: at a million agents, a fifth of `/v1/check`'s
-- throughput on SQLite (docs/benchmarks.md, "Issue 24"). Agents are written rarely
-- (registration, status, labels), so the extra B-trees cost little.
CREATE INDEX agents_updated ON agents (updated_at);
CREATE INDEX agent_inventory_updated ON agent_inventory (updated_at);
CREATE INDEX api_keys_revoked ON api_keys (revoked_at);
