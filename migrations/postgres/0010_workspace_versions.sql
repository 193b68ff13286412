-- The version of each workspace's decision-relevant state (API keys, agents and their labels
-- and reputation, policies, the kill switch). Every change that can alter a decision or an
-- authentication bumps it in the change's own transaction; a decision made on cached state
-- commits only if the version it was made on is still the current one (CONTRACT section 7: no
-- 2xx rests on superseded state, on any replica). A workspace without a row is at version 0.
CREATE TABLE workspace_versions (
    workspace_id TEXT PRIMARY KEY,
    version      BIGINT NOT NULL,
    changed_at   BIGINT NOT NULL
);
CREATE INDEX workspace_versions_changed ON workspace_versions (changed_at);
