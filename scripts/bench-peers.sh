#!/usr/bin/env bash
# `/v1/check` side by side with its peers, on this machine, in one run:
#   - acp's `POST /v1/check` as a user runs it (the release binary, default settings: access
#     log, metrics, durable audit with `synchronous=FULL` on SQLite, decision inputs recorded),
#     the starter policy synced, one agent made by `acp agents new`;
#   - a bare axum JSON endpoint answering the same body (`examples/bare_json.rs`): the floor;
#   - cedar-agent (crates.io, installed once into a cache folder) with the equivalent policy
#     and entity, answering `POST /v1/is_authorized`: as it runs by default (a log line per
#     request at `info`) and, for reference, quiet (`--log-level error`).
# wrk drives each for the same seconds with the same connections, in rounds whose order
# alternates; every request carries another refund amount (1 to 100 USD, all allowed). Prints
# each round and then the medians: req/s, p50/p99 and the two ratios (acp / cedar-agent,
# acp / bare), each ratio taken within a round.
#
# Usage: scripts/bench-peers.sh [--postgres] [--rounds N] [--secs S] [--connections C]
#                               [--acp LABEL=BINARY]...
#   --postgres     acp on a fresh Postgres database of ACP_BENCH_POSTGRES_URL's server
#                  (default postgres://postgres@127.0.0.1:5432/postgres), dropped at the end
#   --rounds N     rounds (default 3); --secs S seconds per side (default 10);
#   --connections C  wrk connections (default 64), always 2 threads
#   --acp L=BIN    measure this acp binary under the label L; give it several times to compare
#                  builds in the same rounds (default: target/release/acp, built first, as `acp`)
# Environment: ACP_BENCH_CACHE (where cedar-agent is installed; default ~/.cache/acp-bench),
# ACP_BENCH_BARE (a bare_json binary built already).
# Needs wrk (Debian's package), python3 and, the first time, the crates.io registry.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

rounds=3 secs=10 connections=64 postgres= acps=()
while [ $# -gt 0 ]; do
    case $1 in
        --postgres) postgres=1 ;;
        --rounds) rounds=$2; shift ;;
        --secs) secs=$2; shift ;;
        --connections) connections=$2; shift ;;
        --acp) acps+=("$2"); shift ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "bench-peers: unknown argument $1 (see --help)" >&2; exit 1 ;;
    esac
    shift
done
command -v wrk > /dev/null || { echo "bench-peers: wrk is not installed (apt-get install wrk)" >&2; exit 1; }

# ---- the binaries -------------------------------------------------------------------------
# Two builds: an example is linked with the dev-dependencies, whose features would otherwise
# change the dependencies of the `acp` measured (it is built as `cargo build --release` builds it).
if [ ${#acps[@]} -eq 0 ]; then
    cargo build -q --release --bin acp
    acps=("acp=$repo/target/release/acp")
fi
bare_bin=${ACP_BENCH_BARE:-}
if [ -z "$bare_bin" ]; then
    cargo build -q --release --example bare_json
    bare_bin=$repo/target/release/examples/bare_json
fi
cache=${ACP_BENCH_CACHE:-$HOME/.cache/acp-bench}
cedar_agent=$cache/cedar-agent/bin/cedar-agent
if [ ! -x "$cedar_agent" ]; then
    echo "bench-peers: installing cedar-agent into $cache/cedar-agent (once) ..." >&2
    CARGO_TARGET_DIR=$cache/cedar-agent-target cargo install -q cedar-agent --version 0.2.0 --locked --root "$cache/cedar-agent"
    rm -rf "$cache/cedar-agent-target"
fi

dir=$(mktemp -d)
pids=() databases=()
pg_base=${ACP_BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    for db in "${databases[@]}"; do
        psql -q "$pg_base" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" || echo "bench-peers: could not drop the database $db" >&2
    done
    rm -rf "$dir"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_for() { # FILE PATTERN PID
    for _ in $(seq 1 600); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        kill -0 "$3" 2>/dev/null || break
        sleep 0.1
    done
    echo "bench-peers: $1 never said '$2':" >&2; cat "$1" "${1%.out}.err" >&2 2>/dev/null; return 1
}

# ---- acp: one server per binary, each set up as the README's quickstart does ---------------
targets=() urls=() scripts=()
body_lua() { # NAME TEMPLATE(with %d for the amount) [HEADER VALUE]
    {
        echo 'wrk.method = "POST"'
        echo 'wrk.headers["Content-Type"] = "application/json"'
        [ $# -gt 2 ] && echo "wrk.headers[\"$3\"] = \"$4\""
        echo "local template = [[$2]]"
        echo 'local n = 0'
        echo 'request = function()'
        echo '    n = n + 1'
        echo '    return wrk.format(nil, nil, nil, string.format(template, n % 100 + 1))'
        echo 'end'
    } > "$dir/$1.lua"
}
agent_body='{"agent_id":"%s","action":"refund","context":{"amount":%%d,"currency":"USD"}}'
first_agent=
for entry in "${acps[@]}"; do
    label=${entry%%=*} bin=${entry#*=}
    [ -x "$bin" ] || { echo "bench-peers: $bin is not an executable" >&2; exit 1; }
    home=$dir/$label
    mkdir -p "$home"
    port=$(free_port)
    if [ -n "$postgres" ]; then
        db="acp_bench_peers_${label//[^A-Za-z0-9]/_}_$$"
        psql -q "$pg_base" -c "CREATE DATABASE $db"
        databases+=("$db")
        # The server's URL with this database in place of its own (and its parameters kept).
        pg_server=${pg_base%%\?*}
        database_url="${pg_server%/*}/$db${pg_base#"$pg_server"}"
        master_key=$(head -c 32 /dev/urandom | base64)
    else
        database_url="sqlite:$home/acp.db"
        master_key=
    fi
    (
        cd "$home"
        export HOME=$home XDG_CONFIG_HOME=$home/.config ACP_DATABASE_URL=$database_url
        [ -n "$master_key" ] && export ACP_MASTER_KEY=$master_key
        exec "$bin" serve --addr "127.0.0.1:$port" --owner bench@example.com > serve.out 2> serve.err
    ) &
    pids+=($!)
    wait_for "$home/serve.out" '^acp listening on' "${pids[-1]}"
    key=$(
        cd "$home"
        export HOME=$home XDG_CONFIG_HOME=$home/.config ACP_DATABASE_URL=$database_url
        [ -n "$master_key" ] && export ACP_MASTER_KEY=$master_key
        # Each server is set up by its own binary: `login --outbox` opens the database, whose
        # migrations only that build knows.
        "$bin" login --server "http://127.0.0.1:$port" --email bench@example.com --outbox > /dev/null
        "$bin" policy starter | "$bin" sync - --apply > /dev/null
        "$bin" api-keys create --name bench --rate-limit 1000000
    )
    agent=$(cd "$home" && HOME=$home XDG_CONFIG_HOME=$home/.config ACP_API_KEY=$key "$bin" agents new bench-agent --key-file agent.json)
    # One check as the load will send it: it must be allowed.
    probe=$(curl -sf -X POST "http://127.0.0.1:$port/v1/check" -H 'Content-Type: application/json' \
        -H "X-Service-Api-Key: $key" -d "$(printf "$(printf "$agent_body" "$agent")" 42)")
    [[ $probe == *'"decision":"allow"'* ]] || { echo "bench-peers: $label did not allow the probe: $probe" >&2; exit 1; }
    # shellcheck disable=SC2059
    body_lua "$label" "$(printf "$agent_body" "$agent")" X-Service-Api-Key "$key"
    targets+=("$label") urls+=("http://127.0.0.1:$port/v1/check")
    first_agent=${first_agent:-$agent}
done

# ---- the bare endpoint ---------------------------------------------------------------------
"$bare_bin" "127.0.0.1:$(free_port)" > "$dir/bare.out" 2> "$dir/bare.err" &
pids+=($!)
wait_for "$dir/bare.out" '^bare_json listening on' "${pids[-1]}"
# shellcheck disable=SC2059
body_lua bare "$(printf "$agent_body" "$first_agent")"
targets+=(bare) urls+=("$(sed -n 's/^bare_json listening on //p' "$dir/bare.out")/v1/check")

# ---- cedar-agent: the starter policy's refund rule and guardrail, the agent as an entity ---
cat > "$dir/policies.json" << 'EOF'
[
  {"id": "refunds", "content": "permit(principal, action == Action::\"refund\", resource) when { principal.status == \"active\" && context.currency == \"USD\" && context.amount <= 100 };"},
  {"id": "risk", "content": "forbid(principal, action, resource) when { principal.risk_tier == \"high\" };"}
]
EOF
cat > "$dir/data.json" << EOF
[
  {"uid": {"type": "Agent", "id": "$first_agent"}, "attrs": {"status": "active", "risk_tier": "low"}, "parents": []},
  {"uid": {"type": "Action", "id": "refund"}, "attrs": {}, "parents": []},
  {"uid": {"type": "Resource", "id": "refund"}, "attrs": {}, "parents": []}
]
EOF
cedar_body='{"principal":"Agent::\"'$first_agent'\"","action":"Action::\"refund\"","resource":"Resource::\"refund\"","context":{"amount":%d,"currency":"USD"}}'
# Twice: as a user runs it (its default log level, `info`, writes lines for every request to
# stderr, here a file) and, for reference, with `--log-level error` (no line per request).
for variant in cedar-agent cedar-agent-quiet; do
    cedar_port=$(free_port)
    quiet=()
    [ "$variant" = cedar-agent-quiet ] && quiet=(--log-level error)
    "$cedar_agent" --addr 127.0.0.1 --port "$cedar_port" --policies "$dir/policies.json" --data "$dir/data.json" \
        "${quiet[@]}" > "$dir/$variant.out" 2> "$dir/$variant.err" &
    pids+=($!)
    for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$cedar_port/v1/" > /dev/null 2>&1 && break; sleep 0.1; done
    probe=$(curl -sf -X POST "http://127.0.0.1:$cedar_port/v1/is_authorized" -H 'Content-Type: application/json' \
        -d "${cedar_body/\%d/42}")
    [[ $probe == *'"decision":"Allow"'* ]] || { echo "bench-peers: $variant did not allow the probe: $probe" >&2; cat "$dir/$variant.err" >&2; exit 1; }
    body_lua "$variant" "$cedar_body"
    targets+=("$variant") urls+=("http://127.0.0.1:$cedar_port/v1/is_authorized")
done

# ---- the rounds ----------------------------------------------------------------------------
engine=SQLite
[ -n "$postgres" ] && engine=Postgres
echo "bench-peers: acp on $engine; ${rounds} rounds of ${secs} s per side, wrk -t2 -c${connections}; $(nproc) cores" >&2
for i in "${!targets[@]}"; do # a short warm-up of each
    wrk -t2 -c"$connections" -d2s -s "$dir/${targets[$i]}.lua" "${urls[$i]}" > /dev/null
done
results=$dir/results.tsv
: > "$results"
n=${#targets[@]}
for round in $(seq 1 "$rounds"); do
    order=()
    for i in $(seq 0 $((n - 1))); do order+=($(((i + round - 1) % n))); done
    if [ $((round % 2)) -eq 0 ]; then # every other round backwards
        reversed=()
        for ((j = ${#order[@]} - 1; j >= 0; j--)); do reversed+=("${order[$j]}"); done
        order=("${reversed[@]}")
    fi
    for i in "${order[@]}"; do
        out=$(wrk -t2 -c"$connections" -d"${secs}s" --latency -s "$dir/${targets[$i]}.lua" "${urls[$i]}")
        if grep -q 'Non-2xx or 3xx responses\|Socket errors' <<< "$out"; then
            echo "bench-peers: ${targets[$i]} answered errors in round $round:" >&2; echo "$out" >&2; exit 1
        fi
        # wrk prints latencies as 812.00us, 1.23ms or 1.01s: all in ms here.
        awk -v round="$round" -v target="${targets[$i]}" '
            function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; if (v ~ /s$/) return v * 1000; return v }
            $1 == "50%" { p50 = ms($2) } $1 == "99%" { p99 = ms($2) }
            $1 == "Requests/sec:" { rps = $2 }
            END { printf "%s\t%s\t%s\t%.3f\t%.3f\n", round, target, rps, p50, p99 }' <<< "$out" >> "$results"
        tail -1 "$results" | awk -F'\t' '{ printf "bench-peers: round %s  %-12s %9.0f req/s  p50 %6.2f ms  p99 %6.2f ms\n", $1, $2, $3, $4, $5 }' >&2
    done
done

python3 - "$results" "$engine" "$connections" "${acps[@]%%=*}" << 'EOF'
import statistics, sys
path, engine, connections, labels = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
rows = [line.rstrip("\n").split("\t") for line in open(path)]
by = {}
for r, target, rps, p50, p99 in rows:
    by.setdefault(target, {})[int(r)] = (float(rps), float(p50), float(p99))
rounds = sorted({int(r[0]) for r in rows})
print(f"\n### `/v1/check` against its peers: {engine}, wrk -t2 -c{connections}, {len(rounds)} rounds\n")
print("| target | req/s (median; each round) | p50 ms | p99 ms |")
print("|---|---:|---:|---:|")
for target, per in by.items():
    rps = [per[r][0] for r in rounds]
    print(f"| {target} | {statistics.median(rps):,.0f} ({', '.join(f'{x:,.0f}' for x in rps)}) "
          f"| {statistics.median(per[r][1] for r in rounds):.2f} | {statistics.median(per[r][2] for r in rounds):.2f} |")
print()
def ratio(label, peer):
    each = [by[label][r][0] / by[peer][r][0] for r in rounds]
    return f"{statistics.median(each):.2f} ({', '.join(f'{x:.2f}' for x in each)})"
print("| acp binary | × cedar-agent (median; each round) | × bare (median; each round) | × cedar-agent, quiet | p99 ms |")
print("|---|---:|---:|---:|---:|")
for label in labels:
    print(f"| {label} | {ratio(label, 'cedar-agent')} | {ratio(label, 'bare')} | {ratio(label, 'cedar-agent-quiet')} "
          f"| {statistics.median(by[label][r][2] for r in rounds):.2f} |")
EOF
