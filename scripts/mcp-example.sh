#!/usr/bin/env bash
# Runs the MCP gateway example end to end: the MCP server of examples/mcp_upstream.rs (the
# official Rust SDK's, over TLS with its own CA, requiring its own token), a fresh server on a
# temporary SQLite file that trusts that CA and may reach loopback (the operator allow-list),
# an owner's personal access token, then examples/mcp_flow.rs against them. Exits non-zero if
# any step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
. scripts/server.sh
clean_on_exit "$dir"
cargo build -q --bin acp --example mcp_flow --example mcp_upstream

upstream_token="ghp_example_$(head -c 32 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 24)"
start_listener mcp_upstream "$dir" \
    env MCP_UPSTREAM_TOKEN="$upstream_token" target/debug/examples/mcp_upstream "$dir/mcp-ca.pem"
upstream=$listener_url

ACP_VAULT_PROXY_CA_FILE="$dir/mcp-ca.pem" ACP_VAULT_PROXY_ALLOW=127.0.0.1/32 start_server "$dir"
owner_token "$url" "$dir" owner@example.com mcp-example > "$dir/pat"
ACP_URL="$url" ACP_API_KEY="$key" ACP_TOKEN="$(cat "$dir/pat")" UPSTREAM_URL="$upstream" \
    UPSTREAM_TOKEN="$upstream_token" target/debug/examples/mcp_flow
echo "mcp example: 1 passed, 0 failed"
