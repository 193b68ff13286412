#!/usr/bin/env bash
# Runs the vault example end to end: the HTTPS echo server (its own CA), a fresh server on a
# temporary SQLite file that trusts that CA and may reach loopback (the operator allow-list),
# an owner's personal access token, then examples/vault_flow.rs against them. Exits non-zero if
# any step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
. scripts/server.sh
clean_on_exit "$dir"
cargo build -q --bin acp --example vault_flow --example https_echo

start_listener https_echo "$dir" target/debug/examples/https_echo "$dir/echo-ca.pem"
upstream=$listener_url

ACP_VAULT_PROXY_CA_FILE="$dir/echo-ca.pem" ACP_VAULT_PROXY_ALLOW=127.0.0.1/32 start_server "$dir"
owner_token "$url" "$dir" owner@example.com vault-example > "$dir/pat"
ACP_URL="$url" ACP_API_KEY="$key" ACP_TOKEN="$(cat "$dir/pat")" UPSTREAM_URL="$upstream" \
    target/debug/examples/vault_flow
echo "vault example: 1 passed, 0 failed"
