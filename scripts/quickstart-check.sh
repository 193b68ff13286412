#!/usr/bin/env bash
# Runs the README quickstart end to end: a fresh server on a temporary SQLite file, then the
# quickstart example against it. Exits non-zero if any step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
cargo build -q --bin acp --example quickstart --example approval_backend --example enforcement_flow
. scripts/server.sh
start_server "$dir"
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
owner_token "$url" "$dir" ops@example.com quickstart-check > "$dir/pat"
pat=$(cat "$dir/pat")
ws=$(sed -n 's/^Created the default workspace \([^.]*\)\..*/\1/p' "$dir/out.txt")
target/debug/acp sync policies/payments-enforcement.yaml --server "$url" --token "$pat" --apply > /dev/null
ACP_URL="$url" ACP_API_KEY="$key" target/debug/examples/enforcement_flow
echo "quickstart: 3 passed, 0 failed"
