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
python3 scripts/console_screenshots.py "$url" "$dir/acp.db" docs/console "$ws" "agent=/dashboard/agents/$agent" \
    policies=/dashboard/policies policy=/dashboard/policies/pol_default policy-dry-run=/dashboard/policies/pol_default/dry-run \
    policy-bench=/dashboard/policies/pol_default/test
echo "console screenshots: $(ls docs/console | wc -l) written to docs/console/"
