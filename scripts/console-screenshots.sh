#!/usr/bin/env bash
# Screenshots of the console's pages, at desk (1280 px) and phone (390 px) width, into
# docs/console/: a fresh server on a temporary SQLite file with a few agents, an owner logged in
# through the outbox, headless Chromium driven through chromedriver (Debian's `chromium` and
# `chromium-driver`). Run after changing a page, and commit the pictures.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
cargo build -q --bin acp
. scripts/server.sh
start_server "$dir" > /dev/null
ws=$(sed -n 's/^Created the default workspace \([^.]*\)\..*/\1/p' "$dir/out.txt")
# An Ed25519 public key (raw, base64): the last 32 bytes of its SPKI DER.
public_key() { openssl genpkey -algorithm ed25519 2>/dev/null | openssl pkey -pubout -outform DER | tail -c 32 | base64; }
for name in payments-bot support-bot reporting; do
    curl -sf -X POST "$url/v1/agents/register" -H "X-Service-Api-Key: $key" -H 'Content-Type: application/json' \
        -d "{\"name\":\"$name\",\"public_key\":\"$(public_key)\"}" > /dev/null
done
agent=$(curl -sf "$url/v1/agents" -H "X-Service-Api-Key: $key" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["items"][0]["agent_id"])')
# Refunds over 100 USD wait for a human: two waiting, one decided, one allowed, one denied.
curl -sf -X POST "$url/v1/agents/$agent/approve" -H "X-Service-Api-Key: $key" -H 'Content-Type: application/json' -d '{}' > /dev/null
pat=$(owner_token "$url" "$dir" owner@example.com screenshots)
curl -sf -X POST "$url/v1/policies/sync" -H "Authorization: Bearer $pat" -H "X-Service-Workspace: $ws" -H 'Content-Type: application/json' \
    -d "{\"spec\":{\"reusable_policy_blocks\":{\"refunds\":{\"amount\":{\"limits\":{\"USD\":{\"allow_up_to\":100,\"challenge_up_to\":1000}}}}},
        \"agent_groups\":[{\"name\":\"finance\",\"members\":[\"$agent\"]}],\"bindings\":[{\"group\":\"finance\",\"blocks\":[\"refunds\"]}]}}" > /dev/null
challenge=""
for amount in 250 40 2400 480 730; do
    out=$(curl -sf -X POST "$url/v1/check" -H "X-Service-Api-Key: $key" -H 'Content-Type: application/json' \
        -d "{\"agent_id\":\"$agent\",\"action\":\"refund\",\"context\":{\"currency\":\"USD\",\"amount\":$amount,\"order\":\"ord_$amount\"}}")
    [ -n "$challenge" ] || challenge=$(printf '%s' "$out" | python3 -c 'import json, sys; print(json.load(sys.stdin).get("challenge_id") or "")')
done
curl -sf -X POST "$url/v1/policy-challenges/$challenge/decide" -H "Authorization: Bearer $pat" -H "X-Service-Workspace: $ws" \
    -H 'Content-Type: application/json' -d '{"decision":"approve"}' > /dev/null
event=$(curl -sf "$url/v1/workspace/audit/events?event_type=decision.check&decision=challenge&limit=1" -H "X-Service-Api-Key: $key" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["items"][0]["event_id"])')
python3 scripts/console_screenshots.py "$url" "$dir/acp.db" docs/console "$ws" "agent=/dashboard/agents/$agent" \
    "approvals=/dashboard/approvals" "audit=/dashboard/audit" "audit-event=/dashboard/audit/$event" \
    policies=/dashboard/policies policy=/dashboard/policies/pol_default policy-dry-run=/dashboard/policies/pol_default/dry-run \
    policy-bench=/dashboard/policies/pol_default/test
echo "console screenshots: $(ls docs/console | wc -l) written to docs/console/"
