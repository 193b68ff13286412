#!/usr/bin/env bash
# Times a sync's dry run end to end (HTTP, reading the recorded checks from the database, the
# semantic diff and the replay) on a server that has recorded CHECKS checks: a fresh server
# (SQLite in a temporary directory) with one agent in one group, CHECKS refunds and reads
# recorded through `POST /v1/check/batch`, then RUNS dry runs of a changed spec that replay
# them all, and RUNS that replay none (`impact_checks: 0`), interleaved. Prints each run's
# time and the medians. docs/benchmarks.md, "Batches, the dry run's analysis, and costs as data grows".
#
#   scripts/bench-dry-run.sh [SERVER_BINARY] [CHECKS] [RUNS]     (target/quick/acp, 10000, 7)
#
# The CLI steps (a workspace owner, the agent) use the debug build: `cargo build --bin acp
# --example attested_agent` first.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/quick/acp}
checks=${2:-10000}
runs=${3:-7}
dir=$(mktemp -d)
pid=
cleanup() {
    [ -n "$pid" ] && { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
    rm -rf "$dir"
}
trap cleanup EXIT
. scripts/server.sh
ACP_SERVER_BIN="$bin" start_server "$dir" > /dev/null
token=$(owner_token "$url" "$dir" owner@example.com bench-dry-run)
agent=$(ACP_URL="$url" ACP_API_KEY="$key" target/debug/examples/attested_agent bench-agent | tail -1)

spec() { # $1: USD allowance
    python3 - "$agent" "$1" <<'EOF'
import json, sys
agent, allow = sys.argv[1], float(sys.argv[2])
print(json.dumps({
  "reusable_policy_blocks": {
    "docs": {"actions": {"allow": ["read", "list"], "challenge": ["deploy"], "deny": ["drop_db"]}},
    "refunds": {"amount": {"limits": {"USD": {"allow_up_to": allow, "challenge_up_to": 1000},
                                      "EUR": {"allow_up_to": allow}}}}},
  "agent_groups": [{"name": "team", "members": [agent]}],
  "bindings": [{"name": "team-docs", "group": "team", "blocks": ["docs"]},
               {"name": "team-refunds", "group": "team", "blocks": ["refunds"], "actions": ["refund"]}]}))
EOF
}
spec 100 > "$dir/current.json"
spec 600 > "$dir/desired.json"
python3 -c 'import json,sys; print(json.dumps({"spec": json.load(open(sys.argv[1]))}))' "$dir/current.json" \
    > "$dir/apply.json"
curl -sf "$url/v1/policies/sync" -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    -d @"$dir/apply.json" > /dev/null
# The recorded checks: batches of 100 (refunds of varying amounts and currencies, reads, lists,
# deploys, drops).
python3 - "$agent" "$checks" "$dir/batch" <<'EOF'
import json, sys
agent, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
actions = ["refund", "read", "refund", "list", "deploy", "refund", "drop_db"]
for b in range((n + 99) // 100):
    checks = []
    for i in range(b * 100, min(n, b * 100 + 100)):
        a = actions[i % len(actions)]
        c = {"agent_id": agent, "action": a}
        if a == "refund":
            c["context"] = {"amount": (i * 37) % 1200 + 0.5, "currency": "EUR" if i % 3 == 0 else "USD"}
        checks.append(c)
    with open(f"{out}-{b:04d}.json", "w") as f:
        json.dump({"checks": checks}, f)
EOF
started=$(date +%s.%N)
for f in "$dir"/batch-*.json; do
    curl -sf "$url/v1/check/batch" -H "X-Service-Api-Key: $key" -H 'Content-Type: application/json' \
        -d @"$f" > /dev/null
done
echo "recorded $checks checks in $(python3 -c "print(round($(date +%s.%N) - $started, 2))") s"
for n in "$checks" 0; do
    python3 -c 'import json,sys; print(json.dumps({"dry_run": True, "impact_checks": int(sys.argv[2]), "spec": json.load(open(sys.argv[1]))}))' \
        "$dir/desired.json" "$n" > "$dir/dry-$n.json"
done
dry() { # $1: checks to replay; prints the seconds
    curl -sf -o "$dir/answer.json" -w '%{time_total}' "$url/v1/policies/sync" \
        -H "Authorization: Bearer $token" -H 'Content-Type: application/json' -d @"$dir/dry-$1.json"
}
dry "$checks" > /dev/null # warm
grep -q "\"replayed\":$checks" "$dir/answer.json" || { echo "the dry run did not replay $checks checks:"; head -c 2000 "$dir/answer.json"; exit 1; }
python3 -c 'import json,sys; i=json.load(open(sys.argv[1]))["diff"]["impact"]; print("impact:", i["changed"], "changed;", ", ".join("%s %d" % (k["kind"], k["count"]) for k in i["kinds"]))' "$dir/answer.json"
with=() without=()
for r in $(seq 1 "$runs"); do
    if ((r % 2)); then a=$(dry "$checks"); b=$(dry 0); else b=$(dry 0); a=$(dry "$checks"); fi
    with+=("$a") without+=("$b")
    echo "run $r: replaying $checks: ${a} s; replaying none: ${b} s"
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
echo "median: replaying $checks: $(median "${with[@]}") s; replaying none: $(median "${without[@]}") s"
