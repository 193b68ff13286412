-- An agent's metadata as rows (issue 22): the agents list filtered by a policy group whose
-- selector names metadata (`metadata: {team: payments}`) reads an index instead of parsing every
-- agent's JSON. One row per key with a string, boolean or number value, as a selector compares
-- it (`domain::agent::metadata_pairs`); written with the agent's metadata (registration,
-- attestation), in its transaction.
CREATE TABLE agent_metadata_pairs (
    agent_id TEXT NOT NULL,
    key      TEXT NOT NULL,
    value    TEXT NOT NULL,
    PRIMARY KEY (key, value, agent_id)
);
CREATE INDEX agent_metadata_pairs_agent ON agent_metadata_pairs (agent_id);

INSERT OR IGNORE INTO agent_metadata_pairs (agent_id, key, value)
SELECT a.id, m.key, CASE m.type WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' ELSE CAST(m.value AS TEXT) END
FROM agents a,
     json_each(CASE WHEN NOT json_valid(a.metadata) THEN '{}'
                    WHEN json_type(a.metadata) = 'object' THEN a.metadata ELSE '{}' END) m
WHERE m.type IN ('text', 'integer', 'real', 'true', 'false');
