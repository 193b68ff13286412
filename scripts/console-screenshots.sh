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
# An audit sink (paused: there is no receiver) and a retention, for the workspace page.
curl -sf -X POST "$url/v1/workspace/audit/sinks" -H "Authorization: Bearer $pat" -H "X-Service-Workspace: $ws" -H 'Content-Type: application/json' \
    -d '{"name":"siem","url":"https://siem.example.com/acp","enabled":false}' > /dev/null
curl -sf -X POST "$url/v1/workspace/settings" -H "Authorization: Bearer $pat" -H "X-Service-Workspace: $ws" -H 'Content-Type: application/json' \
    -d '{"audit_retention_days":400,"heartbeat_retention_days":30}' > /dev/null
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
# Heartbeats for the agent's latency chart (the last ten minutes, one a minute).
beats=$(python3 -c 'import json, sys, datetime as d
now = d.datetime.now(d.timezone.utc)
print(json.dumps({"items": [{"agent_id": sys.argv[1], "status": "ok", "latency_ms": 40 + (i * 37) % 90,
    "observed_at": (now - d.timedelta(minutes=10 - i)).isoformat()} for i in range(10)]}))' "$agent")
curl -sf -X POST "$url/v1/telemetry/heartbeat/ingest" -H "X-Service-Api-Key: $key" -H 'Content-Type: application/json' -d "$beats" > /dev/null
curl -sf -X POST "$url/v1/workspace/agents/upsert" -H "X-Service-Api-Key: $key" -H 'Content-Type: application/json' \
    -d "{\"external_agent_key\":\"crm-42\",\"agent_id\":\"$agent\",\"labels\":[\"payments\",\"eu\"]}" > /dev/null
# Credentials: minting allowed for the finance group, three credentials.
curl -sf -X POST "$url/v1/policies/sync" -H "Authorization: Bearer $pat" -H "X-Service-Workspace: $ws" -H 'Content-Type: application/json' \
    -d "{\"spec\":{\"reusable_policy_blocks\":{\"refunds\":{\"amount\":{\"limits\":{\"USD\":{\"allow_up_to\":100,\"challenge_up_to\":1000}}}},
        \"minting\":{\"actions\":{\"allow\":[\"mint_credential\"]}}},
        \"agent_groups\":[{\"name\":\"finance\",\"members\":[\"$agent\"]}],
        \"bindings\":[{\"group\":\"finance\",\"blocks\":[\"refunds\"]},{\"group\":\"finance\",\"blocks\":[\"minting\"]}]}}" > /dev/null
for body in '"audience":"payments-api","scopes":["refunds:write"],"provider":"stripe"' '"audience":"crm","scopes":["contacts:read"],"token_type":"jwt"' \
    '"audience":"ledger","scopes":["entries:write"],"one_time":true'; do
    curl -sf -X POST "$url/v1/identity/credentials/mint" -H "X-Service-Api-Key: $key" -H 'Content-Type: application/json' \
        -d "{\"agent_id\":\"$agent\",$body,\"ttl_seconds\":3600}" > /dev/null
done
# The vault: two sets, a second version, a grant and a workflow lease.
owner() { curl -sf -X POST "$url$1" -H "Authorization: Bearer $pat" -H "X-Service-Workspace: $ws" -H 'Content-Type: application/json' -d "$2" > /dev/null; }
owner /v1/vault/secret-sets '{"name":"stripe-prod","provider":"stripe","environment":"production","entries":{"STRIPE_SECRET_KEY":"sk_test_x","ACCOUNT":"acct_1"},
    "profiles":{"stripe":{"hosts":["api.stripe.com"],"methods":["GET","POST"],"path_prefixes":["/v1/"],"inject":{"headers":{"Authorization":"Bearer ${STRIPE_SECRET_KEY}"}}}}}'
owner /v1/vault/secret-sets/1 '{"set":{"WEBHOOK_SECRET":"whsec_x"}}'
owner /v1/vault/secret-sets '{"name":"openai-dev","provider":"openai","environment":"development","entries":{"OPENAI_API_KEY":"sk-x"}}'
owner /v1/vault/grants "{\"secret_set_id\":1,\"agent_id\":\"$agent\",\"allowed_keys\":\"*\",\"allowed_actions\":[\"proxy\",\"mint_lease\"]}"
owner /v1/vault/leases/workflow "{\"agent_id\":\"$agent\",\"secret_set_id\":1,\"purpose\":\"nightly payouts\",\"actions\":[\"proxy\"],\"ttl_seconds\":3600}"
# The workspace: members, keys (one revoked), a token, the approval setting.
owner /v1/workspace/members '{"email":"ada@example.com","role":"admin"}'
owner /v1/workspace/members '{"email":"bob@example.com","role":"approver"}'
owner /v1/workspace/members '{"email":"cy@example.com","role":"member"}'
owner /v1/workspace/api-keys '{"name":"payments gateway","live":true,"scopes":["check","verify"]}'
reader=$(curl -sf -X POST "$url/v1/workspace/api-keys" -H "Authorization: Bearer $pat" -H "X-Service-Workspace: $ws" -H 'Content-Type: application/json' \
    -d '{"name":"ci reader","scopes":["agents:read","audit:read"]}' | python3 -c 'import json, sys; print(json.load(sys.stdin)["api_key"]["key_id"])')
owner "/v1/workspace/api-keys/$reader/revoke" '{}'
owner /v1/workspace/settings '{"require_member_approval":true}'
# Last: minting paused (minting fails from here on).
owner /v1/identity/kill-switch/minting '{"paused":true,"reason":"INC-42: suspected key leak"}'
event=$(curl -sf "$url/v1/workspace/audit/events?event_type=decision.check&decision=challenge&limit=1" -H "X-Service-Api-Key: $key" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["items"][0]["event_id"])')
python3 scripts/console_screenshots.py "$url" "$dir/acp.db" docs/console "$ws" "agent=/dashboard/agents/$agent" \
    "approvals=/dashboard/approvals" "audit=/dashboard/audit" "audit-event=/dashboard/audit/$event" \
    policies=/dashboard/policies policy=/dashboard/policies/pol_default policy-dry-run=/dashboard/policies/pol_default/dry-run \
    policy-bench=/dashboard/policies/pol_default/test vault=/dashboard/vault vault-set=/dashboard/vault/1 \
    credentials=/dashboard/credentials settings=/dashboard/settings
echo "console screenshots: $(ls docs/console | wc -l) written to docs/console/"
