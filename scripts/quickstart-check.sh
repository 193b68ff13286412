#!/usr/bin/env bash
# Runs the README quickstart end to end: a fresh server on a temporary SQLite file, then the
# quickstart example against it. Exits non-zero if any step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
cargo build -q --bin acp --example quickstart --example approval_backend --example enforcement_flow
key="svc_test_$(head -c 64 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 43)"
ACP_BOOTSTRAP_API_KEY="$key" target/debug/acp serve --addr 127.0.0.1:0 --database-url "sqlite:$dir/acp.db" \
    > "$dir/out.txt" 2> "$dir/err.txt" &
pid=$!
for _ in $(seq 1 100); do grep -q '^acp listening on' "$dir/out.txt" 2>/dev/null && break; sleep 0.1; done
url=$(sed -n 's/^acp listening on \([^ ]*\).*/\1/p' "$dir/out.txt")
[ -n "$url" ] || { cat "$dir/err.txt"; exit 1; }
target/debug/acp healthcheck --url "$url"
ACP_URL="$url" ACP_API_KEY="$key" target/debug/examples/quickstart
# The approval example: a registered but unattested agent is challenged by the default policy;
# the example decides through the link itself and is then allowed once. (RFC 8032's first test
# public key: any valid key will do for an agent that is never attested.)
agent=$(curl -sf -X POST "$url/v1/agents/register" -H 'Content-Type: application/json' -H "X-Service-Api-Key: $key" \
    -d '{"name":"approval-example","public_key":"11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo="}' |
    sed -n 's/.*"agent_id":"\([^"]*\)".*/\1/p')
[ -n "$agent" ] || { echo "registration failed"; exit 1; }
ACP_URL="$url" ACP_API_KEY="$key" AGENT_ID="$agent" AUTO_DECIDE=approve target/debug/examples/approval_backend deploy '{"environment":"staging"}'
# The enforcement example needs its policy: an owner logs in through the outbox, makes a
# personal access token, and `acp sync --apply`s policies/payments-enforcement.yaml with it.
. scripts/owner-token.sh
owner_token "$url" "$dir" ops@example.com quickstart-check > "$dir/pat"
pat=$(cat "$dir/pat")
ws=$(sed -n 's/^Created the default workspace \([^.]*\)\..*/\1/p' "$dir/out.txt")
target/debug/acp sync policies/payments-enforcement.yaml --server "$url" --token "$pat" --apply > /dev/null
ACP_URL="$url" ACP_API_KEY="$key" target/debug/examples/enforcement_flow
echo "quickstart: 3 passed, 0 failed"
