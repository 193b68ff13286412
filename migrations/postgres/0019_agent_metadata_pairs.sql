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

INSERT INTO agent_metadata_pairs (agent_id, key, value)
SELECT a.id, m.key, m.value #>> '{}'
FROM agents a,
     jsonb_each(CASE WHEN jsonb_typeof(a.metadata::jsonb) = 'object' THEN a.metadata::jsonb ELSE '{}'::jsonb END) m
WHERE jsonb_typeof(m.value) IN ('string', 'number', 'boolean')
ON CONFLICT DO NOTHING;
