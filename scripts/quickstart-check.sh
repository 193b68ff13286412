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
# An owner logs in through the outbox and makes a personal access token: the approval example
# decides with it (approvals take a logged-in approver), and the enforcement example's policy
# (policies/payments-enforcement.yaml) is applied with `acp sync --apply`.
owner_token "$url" "$dir" ops@example.com quickstart-check > "$dir/pat"
pat=$(cat "$dir/pat")
ACP_URL="$url" ACP_API_KEY="$key" AGENT_ID="$agent" AUTO_DECIDE=approve ACP_TOKEN="$pat" target/debug/examples/approval_backend deploy '{"environment":"staging"}'

ws=$(sed -n 's/^Created the default workspace \([^.]*\)\..*/\1/p' "$dir/out.txt")
target/debug/acp sync policies/payments-enforcement.yaml --server "$url" --token "$pat" --apply > /dev/null
ACP_URL="$url" ACP_API_KEY="$key" target/debug/examples/enforcement_flow
# "Operating acp": an operator logs in from the terminal, pasting the link from the outbox,
# and does day-two work with the stored login.
creds="$dir/credentials.json"
acpdb() { ACP_DATABASE_URL="sqlite:$dir/acp.db" target/debug/acp "$@"; }
acpdb admin add-member --workspace "$ws" --email operator@example.com --role admin > /dev/null
newest() { acpdb admin outbox list --limit 1 --output json | grep -o 'http[^"]*verify-login?token=[A-Za-z0-9_-]*' | head -1 || true; }
before=$(newest)
mkfifo "$dir/paste"
ACP_CREDENTIALS="$creds" target/debug/acp login --server "$url" --email operator@example.com \
    < "$dir/paste" > "$dir/login.out" 2> "$dir/login.err" &
login_pid=$!
exec 3> "$dir/paste"
link=
for _ in $(seq 100); do
    link=$(newest)
    [ -n "$link" ] && [ "$link" != "$before" ] && break
    sleep 0.1
done
echo "$link" >&3
exec 3>&-
wait "$login_pid" || { cat "$dir/login.err"; exit 1; }
grep -q 'acp admin outbox list' "$dir/login.err" || { echo "acp login did not say where the mail is"; cat "$dir/login.err"; exit 1; }
[ "$(stat -c %a "$creds")" = 600 ] || { echo "the credentials file is not private"; exit 1; }
export ACP_CREDENTIALS="$creds"
target/debug/acp whoami | grep -q operator@example.com
target/debug/acp agents list | grep -q approval-example
target/debug/acp agents suspend "$agent" --reason quickstart --yes > /dev/null
target/debug/acp audit search --agent "$agent" --event-type agent.suspended | grep -q agent.suspended
target/debug/acp kill-switch pause --reason quickstart --yes | grep -q 'minting_paused *true'
target/debug/acp kill-switch resume > /dev/null
target/debug/acp logout > /dev/null
echo "quickstart: 4 passed, 0 failed"
