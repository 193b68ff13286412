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

INSERT OR IGNORE INTO agent_inventory_labels (workspace_id, term, external_agent_key, agent_id, source)
SELECT i.workspace_id, j.value, i.external_agent_key, i.agent_id, 'entry'
FROM agent_inventory i, json_each(CASE WHEN NOT json_valid(i.labels) THEN '[]'
                    WHEN json_type(i.labels) = 'array' THEN i.labels ELSE '[]' END) j
WHERE j.type = 'text';

INSERT OR IGNORE INTO agent_inventory_labels (workspace_id, term, external_agent_key, agent_id, source)
SELECT i.workspace_id, j.key, i.external_agent_key, i.agent_id, 'key'
FROM agent_inventory i, json_each(CASE WHEN NOT json_valid(i.labels) THEN '{}'
                    WHEN json_type(i.labels) = 'object' THEN i.labels ELSE '{}' END) j
WHERE instr(j.key, '=') = 0;

INSERT OR IGNORE INTO agent_inventory_labels (workspace_id, term, external_agent_key, agent_id, source)
SELECT i.workspace_id, j.key || '=' || j.value, i.external_agent_key, i.agent_id, 'pair'
FROM agent_inventory i, json_each(CASE WHEN NOT json_valid(i.labels) THEN '{}'
                    WHEN json_type(i.labels) = 'object' THEN i.labels ELSE '{}' END) j
WHERE instr(j.key, '=') = 0 AND j.type = 'text';
