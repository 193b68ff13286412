-- Inventory labels as rows (issue 22): `GET /v1/workspace/agents?label=X` and the console's
-- agents filtered by label read an index instead of parsing every item's JSON. A label term is
-- what `label=` matches (see `store::model::label_terms`): each string of a list; for an object,
-- each key, and `key=value` for each string value (keys holding `=` are never matched). Written
-- with the item, in its transaction. `source` says where a term comes from (`entry` of a list,
-- `key` or `pair` of an object): a policy group's selector `labels: {k: v}` matches a pair
-- `k=v`, or for `v` = "true" a list entry `k`, as policies read labels.
CREATE TABLE agent_inventory_labels (
    workspace_id       TEXT NOT NULL,
    term               TEXT NOT NULL,
    external_agent_key TEXT NOT NULL,
    agent_id           TEXT NOT NULL,
    source             TEXT NOT NULL,
    PRIMARY KEY (workspace_id, term, external_agent_key)
);
CREATE INDEX agent_inventory_labels_agent ON agent_inventory_labels (workspace_id, term, agent_id);

INSERT INTO agent_inventory_labels (workspace_id, term, external_agent_key, agent_id, source)
SELECT i.workspace_id, e.value #>> '{}', i.external_agent_key, i.agent_id, 'entry'
FROM agent_inventory i,
     jsonb_array_elements(CASE WHEN jsonb_typeof(i.labels::jsonb) = 'array' THEN i.labels::jsonb ELSE '[]'::jsonb END) e(value)
WHERE jsonb_typeof(e.value) = 'string'
ON CONFLICT DO NOTHING;

INSERT INTO agent_inventory_labels (workspace_id, term, external_agent_key, agent_id, source)
SELECT i.workspace_id, p.key, i.external_agent_key, i.agent_id, 'key'
FROM agent_inventory i,
     jsonb_each(CASE WHEN jsonb_typeof(i.labels::jsonb) = 'object' THEN i.labels::jsonb ELSE '{}'::jsonb END) p
WHERE strpos(p.key, '=') = 0
ON CONFLICT DO NOTHING;

INSERT INTO agent_inventory_labels (workspace_id, term, external_agent_key, agent_id, source)
SELECT i.workspace_id, p.key || '=' || (p.value #>> '{}'), i.external_agent_key, i.agent_id, 'pair'
FROM agent_inventory i,
     jsonb_each(CASE WHEN jsonb_typeof(i.labels::jsonb) = 'object' THEN i.labels::jsonb ELSE '{}'::jsonb END) p
WHERE strpos(p.key, '=') = 0 AND jsonb_typeof(p.value) = 'string'
ON CONFLICT DO NOTHING;
