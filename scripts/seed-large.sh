#!/usr/bin/env bash
# Seeds an existing acp database with a large workspace: AGENTS agents (with inventory labels)
# and EVENTS audit events spread over the last 30 days, in bulk SQL (a recursive CTE through
# the `sqlite3` CLI on SQLite, `generate_series` through `psql` on Postgres), then a policy spec
# of GROUPS groups of 10 seeded agents each (examples/seed_policy.rs).
#
#   scripts/seed-large.sh DATABASE_URL [AGENTS] [EVENTS] [GROUPS]
#
# Defaults: 100000 agents, 10000000 events, and as many groups (at most 10000) as the agents
# after the first ten fill; GROUPS 0 installs no spec. The scale docs/scale.md measured is
# `scripts/seed-large.sh URL 1000000 10000000` (10,000 groups, 100,000 members). The spec's
# installer is built with cargo's `quick` profile (SEED_PROFILE=dev for a debug build).
#
# DATABASE_URL is `sqlite:PATH`, `sqlite://PATH`, a bare path, or `postgres://...`. The database
# must have been made by `acp serve` (migrations applied, the default workspace bootstrapped):
# the rows go into the oldest workspace. Run it once per database; it refuses a seeded one.
#
# What it writes (the filters of the console's lists have selective and unselective values):
# - agents `agt_5eed<28 hex digits of n>` (valid agent ids) named `agent-<n>`: 83 % active, 10 % pending, 5 % suspended,
#   2 % revoked; risk tiers low/medium/high; metadata {team, env, n}; created over 30 days.
#   Agents 1-10 are rare (`rare-agent-<n>`, label `rare`), agents 11-1010 are busy.
# - one inventory row per agent (`ext-<n>`, environment prod/staging/dev, labels
#   [team-<k>, <env>] plus `rare` for the rare agents), and its label terms; each agent's
#   metadata pairs.
# - events `evt_...` in time order, one every 30 days / EVENTS: 80 % from the 1,000 busy agents,
#   the rest from all others, and each rare agent one event in 1,000,000; event types
#   decision.check 90 %, credential.minted 5 %, vault.lease.used 3 %, inventory.upserted 1.5 %,
#   vault.secret.read 0.4 %, credential.revoked 0.1 %, and agent.suspended 1 per 100,000 (rare);
#   checks have one of 20 actions (plus `payments.wire.large`, 1 per 200,000: rare) and the
#   decisions allow 90 %, deny 8 %, challenge 2 %; every event has a trace id of its own
#   (`trc_` + 32 hex digits of its number).
set -euo pipefail

if [[ $# -lt 1 || $# -gt 4 ]]; then
    echo "usage: $0 DATABASE_URL [AGENTS] [EVENTS] [GROUPS]" >&2
    exit 2
fi
url=$1
agents=${2:-100000}
events=${3:-10000000}
if ! [[ $agents =~ ^[0-9]+$ && $events =~ ^[0-9]+$ && $agents -ge 1011 ]]; then
    echo "AGENTS and EVENTS must be whole numbers, AGENTS at least 1011" >&2
    exit 2
fi
fill=$(((agents - 10) / 10))
((fill > 10000)) && fill=10000
groups=${4:-$fill}
if ! [[ $groups =~ ^[0-9]+$ ]] || ((groups > fill)); then
    echo "GROUPS must be a whole number of at most $fill (10 members each, agents 11 onwards)" >&2
    exit 2
fi
batch=1000000
day_ms=86400000
now_ms=$(($(date +%s) * 1000))
base_ms=$((now_ms - 30 * day_ms))
agent_step=$((30 * day_ms / agents))
event_step_num=$((30 * day_ms))
start=$(date +%s)

# The columns of one seeded event, in SQL both engines speak, from the event's number `j` and
# the hex helpers HEX16(x) and HEX32(x) each engine defines below (as text substitution).
# `r` spreads the agents, `t` the event types, `a` the actions, `d` the decisions: each a
# product modulo its own prime, so that none of them follows from another (taken modulo 1000
# directly, an agent's number fixed its event type and decision).
event_select() {
    cat <<SQL
SELECT
  'evt_' || HEX16(created_at) || HEX16(j) AS id,
  '$1' AS workspace_id,
  created_at,
  CASE
    WHEN j % 100000 = 50000 THEN 'agent.suspended'
    WHEN t < 900 THEN 'decision.check'
    WHEN t < 950 THEN 'credential.minted'
    WHEN t < 980 THEN 'vault.lease.used'
    WHEN t < 995 THEN 'inventory.upserted'
    WHEN t < 999 THEN 'vault.secret.read'
    ELSE 'credential.revoked'
  END AS event_type,
  'agt_5eed' || HEX28(CASE
    WHEN j % 100000 = 777 THEN 1 + (j / 100000) % 10
    WHEN r < 800000 THEN 11 + r % 1000
    ELSE 11 + (j * 7919) % ($agents - 10)
  END) AS agent_id,
  CASE
    WHEN j % 100000 = 50000 THEN 'suspend'
    WHEN t >= 900 THEN 'create'
    WHEN j % 200000 = 123 THEN 'payments.wire.large'
    ELSE CASE a
      WHEN 0 THEN 'payments.refund' WHEN 1 THEN 'payments.charge' WHEN 2 THEN 'email.send'
      WHEN 3 THEN 'email.read' WHEN 4 THEN 'files.read' WHEN 5 THEN 'files.write'
      WHEN 6 THEN 'crm.lookup' WHEN 7 THEN 'crm.update' WHEN 8 THEN 'tickets.create'
      WHEN 9 THEN 'tickets.close' WHEN 10 THEN 'calendar.book' WHEN 11 THEN 'search.web'
      WHEN 12 THEN 'db.query' WHEN 13 THEN 'db.export' WHEN 14 THEN 'http.get'
      WHEN 15 THEN 'http.post' WHEN 16 THEN 'slack.post' WHEN 17 THEN 'github.merge'
      WHEN 18 THEN 'invoices.issue' ELSE 'deploy.run' END
  END AS action,
  CASE WHEN t >= 900 OR j % 100000 = 50000 THEN NULL
    WHEN d < 90 THEN 'allow' WHEN d < 98 THEN 'deny' ELSE 'challenge' END AS decision,
  CASE WHEN t < 900 THEN 'refunds' END AS policy_id,
  CASE WHEN t < 900 THEN 'sha256:5eed' END AS policy_hash,
  'trc_' || HEX32(j) AS trace_id,
  '[]' AS reasons,
  '[]' AS reason_codes,
  'api_key:key_5eed' AS actor,
  '{"seeded":true}' AS details
SQL
}

# The inner rows: j, created_at and the hashes, from a source of numbers `j` (SOURCE).
event_numbers() {
    cat <<SQL
SELECT j,
  $base_ms + (j * $event_step_num) / $events AS created_at,
  (j * 2654435761) % 2147483647 % 1000000 AS r,
  (j * 2246822519) % 2147483629 % 1000 AS t,
  (j * 3266489917) % 2147483587 % 20 AS a,
  (j * 668265263) % 2147483579 % 100 AS d
FROM SOURCE
SQL
}

agent_select() {
    cat <<SQL
SELECT
  'agt_5eed' || HEX28(i), '$1',
  CASE WHEN i <= 10 THEN 'rare-agent-' || i ELSE 'agent-' || i END,
  'c2VlZC1wdWJsaWMta2V5LQ' || HEX32(i), 'ed25519',
  '{"team":"team-' || (i % 20) || '","env":"' || CASE i % 3 WHEN 0 THEN 'prod' WHEN 1 THEN 'staging' ELSE 'dev' END || '","n":' || i || '}',
  CASE WHEN i % 50 = 0 THEN 'revoked' WHEN i % 20 = 1 AND i > 10 THEN 'suspended'
       WHEN i % 10 = 2 THEN 'pending' ELSE 'active' END,
  CASE i % 7 WHEN 0 THEN 'high' WHEN 1 THEN 'medium' WHEN 2 THEN 'medium' ELSE 'low' END,
  $base_ms + i * $agent_step, $base_ms + i * $agent_step,
  CASE WHEN i % 10 = 2 THEN NULL ELSE $base_ms + i * $agent_step + 1000 END,
  CASE WHEN i % 10 = 2 THEN NULL ELSE $now_ms - (i % 86400) * 1000 END
FROM SOURCE
SQL
}

inventory_select() {
    cat <<SQL
SELECT '$1', 'ext-' || i, 'agt_5eed' || HEX28(i), 'Agent ' || i,
  '["team-' || (i % 20) || '","' || CASE i % 3 WHEN 0 THEN 'prod' WHEN 1 THEN 'staging' ELSE 'dev' END || '"'
    || CASE WHEN i <= 10 THEN ',"rare"' ELSE '' END || ']',
  CASE i % 3 WHEN 0 THEN 'prod' WHEN 1 THEN 'staging' ELSE 'dev' END,
  'seed', CASE WHEN i % 50 = 0 THEN 'retired' ELSE 'active' END,
  $base_ms + i * $agent_step, $base_ms + i * $agent_step
FROM SOURCE
SQL
}

# The label terms `label=` matches (migration 0018), as the service writes them with each item.
label_select() {
    cat <<SQL
SELECT '$1', 'team-' || (i % 20), 'ext-' || i, 'agt_5eed' || HEX28(i), 'entry' FROM SOURCE
UNION ALL
SELECT '$1', CASE i % 3 WHEN 0 THEN 'prod' WHEN 1 THEN 'staging' ELSE 'dev' END, 'ext-' || i, 'agt_5eed' || HEX28(i), 'entry' FROM SOURCE
UNION ALL
SELECT '$1', 'rare', 'ext-' || i, 'agt_5eed' || HEX28(i), 'entry' FROM SOURCE WHERE i <= 10
SQL
}

# The metadata pairs a group's selector matches (migration 0019), as the service writes them.
pairs_select() {
    cat <<SQL
SELECT 'agt_5eed' || HEX28(i), 'team', 'team-' || (i % 20) FROM SOURCE
UNION ALL
SELECT 'agt_5eed' || HEX28(i), 'env', CASE i % 3 WHEN 0 THEN 'prod' WHEN 1 THEN 'staging' ELSE 'dev' END FROM SOURCE
UNION ALL
SELECT 'agt_5eed' || HEX28(i), 'n', '' || i FROM SOURCE
SQL
}

agent_columns="id, workspace_id, name, public_key, key_type, metadata, status, risk_tier, created_at, updated_at, attested_at, last_seen_at"
inventory_columns="workspace_id, external_agent_key, agent_id, display_name, labels, environment, source, status, created_at, updated_at"
event_columns="id, workspace_id, created_at, event_type, agent_id, action, decision, policy_id, policy_hash, trace_id, reasons, reason_codes, actor, details"

seed_sqlite() {
    local path=$1
    command -v sqlite3 >/dev/null || { echo "the sqlite3 CLI is needed (apt-get install -y sqlite3)" >&2; exit 1; }
    [[ -f $path ]] || { echo "no database at $path: run \`acp serve\` on it once first" >&2; exit 1; }
    local db=(sqlite3 -batch -bail "$path")
    local ws
    ws=$("${db[@]}" "SELECT id FROM workspaces ORDER BY created_at, id LIMIT 1;")
    [[ -n $ws ]] || { echo "no workspace in $path: run \`acp serve\` on it once first" >&2; exit 1; }
    if [[ $("${db[@]}" "SELECT count(*) FROM agents WHERE id LIKE 'agt_5eed%';") != 0 ]]; then
        echo "$path is seeded already" >&2
        exit 1
    fi
    echo "seeding workspace $ws of $path: $agents agents, $events events"
    hexify() { sed -E -e "s/HEX16\(([^()]*)\)/printf('%016x', \1)/g" -e "s/HEX32\(/printf('%032x', /g" -e "s/HEX28\(/printf('%028x', /g"; }
    local pragmas="PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF; PRAGMA cache_size=-1000000; PRAGMA temp_store=MEMORY;"
    {
        echo "$pragmas BEGIN;"
        echo "INSERT INTO agents ($agent_columns)"
        echo "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $agents)"
        agent_select "$ws" | sed 's/FROM SOURCE/FROM n/'
        echo ";"
        echo "INSERT INTO agent_inventory ($inventory_columns)"
        echo "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $agents)"
        inventory_select "$ws" | sed 's/FROM SOURCE/FROM n/'
        echo ";"
        echo "INSERT INTO agent_inventory_labels (workspace_id, term, external_agent_key, agent_id, source)"
        echo "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $agents)"
        label_select "$ws" | sed 's/FROM SOURCE/FROM n/'
        echo ";"
        echo "INSERT INTO agent_metadata_pairs (agent_id, key, value)"
        echo "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $agents)"
        pairs_select | sed 's/FROM SOURCE/FROM n/'
        echo "; COMMIT;"
    } | hexify | "${db[@]}" >/dev/null
    echo "  agents and inventory: $(($(date +%s) - start)) s"
    local from=1
    while ((from <= events)); do
        local to=$((from + batch - 1))
        ((to > events)) && to=$events
        {
            echo "$pragmas BEGIN;"
            echo "INSERT INTO audit_events ($event_columns)"
            echo "WITH RECURSIVE n(j) AS (SELECT $from UNION ALL SELECT j + 1 FROM n WHERE j < $to),"
            echo "e AS ($(event_numbers | sed 's/FROM SOURCE/FROM n/'))"
            event_select "$ws"
            echo "FROM e; COMMIT;"
        } | hexify | "${db[@]}" >/dev/null
        echo "  events to $to: $(($(date +%s) - start)) s"
        from=$((to + 1))
    done
    "${db[@]}" "PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null
    echo "done in $(($(date +%s) - start)) s; $(du -h "$path" | cut -f1)"
}

seed_postgres() {
    local db=(psql "$1" -X -q -v ON_ERROR_STOP=1 -At)
    local ws
    ws=$("${db[@]}" -c "SELECT id FROM workspaces ORDER BY created_at, id LIMIT 1")
    [[ -n $ws ]] || { echo "no workspace in the database: run \`acp serve\` on it once first" >&2; exit 1; }
    if [[ $("${db[@]}" -c "SELECT count(*) FROM agents WHERE id LIKE 'agt_5eed%'") != 0 ]]; then
        echo "the database is seeded already" >&2
        exit 1
    fi
    echo "seeding workspace $ws: $agents agents, $events events"
    # HEX32 wraps a multi-line CASE: a function of the session (inlined by the planner).
    pg_hex() { sed -E -e "s/HEX16\(([^()]*)\)/lpad(to_hex(\1), 16, '0')/g" -e "s/HEX32\(/pg_temp.hex32(/g" -e "s/HEX28\(/pg_temp.hex28(/g"; }
    {
        echo "SET synchronous_commit = off;"
        echo "CREATE OR REPLACE FUNCTION pg_temp.hex32(x bigint) RETURNS text LANGUAGE sql IMMUTABLE AS \$\$ SELECT lpad(to_hex(x), 32, '0') \$\$;"
        echo "CREATE OR REPLACE FUNCTION pg_temp.hex28(x bigint) RETURNS text LANGUAGE sql IMMUTABLE AS \$\$ SELECT lpad(to_hex(x), 28, '0') \$\$;"
        echo "BEGIN;"
        echo "INSERT INTO agents ($agent_columns)"
        agent_select "$ws" | sed 's/FROM SOURCE/FROM generate_series(1::bigint, '"$agents"') AS g(i)/'
        echo ";"
        echo "INSERT INTO agent_inventory ($inventory_columns)"
        inventory_select "$ws" | sed 's/FROM SOURCE/FROM generate_series(1::bigint, '"$agents"') AS g(i)/'
        echo ";"
        echo "INSERT INTO agent_inventory_labels (workspace_id, term, external_agent_key, agent_id, source)"
        label_select "$ws" | sed 's/FROM SOURCE/FROM generate_series(1::bigint, '"$agents"') AS g(i)/'
        echo ";"
        echo "INSERT INTO agent_metadata_pairs (agent_id, key, value)"
        pairs_select | sed 's/FROM SOURCE/FROM generate_series(1::bigint, '"$agents"') AS g(i)/'
        echo "; COMMIT;"
    } | pg_hex | "${db[@]}" >/dev/null
    echo "  agents and inventory: $(($(date +%s) - start)) s"
    local from=1
    while ((from <= events)); do
        local to=$((from + batch - 1))
        ((to > events)) && to=$events
        {
            echo "SET synchronous_commit = off;"
            echo "CREATE OR REPLACE FUNCTION pg_temp.hex32(x bigint) RETURNS text LANGUAGE sql IMMUTABLE AS \$\$ SELECT lpad(to_hex(x), 32, '0') \$\$;"
            echo "CREATE OR REPLACE FUNCTION pg_temp.hex28(x bigint) RETURNS text LANGUAGE sql IMMUTABLE AS \$\$ SELECT lpad(to_hex(x), 28, '0') \$\$;"
            echo "INSERT INTO audit_events ($event_columns)"
            echo "WITH e AS ($(event_numbers | sed 's/FROM SOURCE/FROM generate_series('"$from"'::bigint, '"$to"') AS g(j)/'))"
            event_select "$ws"
            echo "FROM e;"
        } | pg_hex | "${db[@]}" >/dev/null
        echo "  events to $to: $(($(date +%s) - start)) s"
        from=$((to + 1))
    done
    "${db[@]}" -c "VACUUM ANALYZE agents" -c "VACUUM ANALYZE agent_inventory" -c "VACUUM ANALYZE agent_inventory_labels" -c "VACUUM ANALYZE agent_metadata_pairs" -c "VACUUM ANALYZE audit_events" >/dev/null
    echo "done in $(($(date +%s) - start)) s; $("${db[@]}" -c "SELECT pg_size_pretty(pg_total_relation_size('audit_events'))") of audit events"
}

case $url in
postgres://* | postgresql://*)
    seed_postgres "$url"
    ws=$(psql "$url" -X -At -c "SELECT id FROM workspaces ORDER BY created_at, id LIMIT 1")
    policy_url=$url
    ;;
*)
    path=${url#sqlite://}
    path=${path#sqlite:}
    path=${path%%\?*}
    seed_sqlite "$path"
    ws=$(sqlite3 -batch "$path" "SELECT id FROM workspaces ORDER BY created_at, id LIMIT 1;")
    policy_url="sqlite:$path"
    ;;
esac
# The spec: written as the next version of the workspace's default policy (its text is over the
# 1 MiB a sync takes; see examples/seed_policy.rs).
if ((groups > 0)); then
    (cd "$(dirname "$(readlink -f "$0")")/.." &&
        cargo run -q --profile "${SEED_PROFILE:-quick}" --example seed_policy -- "$policy_url" "$ws" "$groups")
    echo "spec installed: $(($(date +%s) - start)) s in all"
fi
