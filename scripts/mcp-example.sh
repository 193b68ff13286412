#!/usr/bin/env bash
# Runs the MCP gateway example end to end: the MCP server of examples/mcp_upstream.rs (the
# official Rust SDK's, over TLS with its own CA, requiring its own token), a fresh server on a
# temporary SQLite file that trusts that CA and may reach loopback (the operator allow-list),
# an owner's personal access token, then examples/mcp_flow.rs against them. Exits non-zero if
# any step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
pid=
upstream_pid=
cleanup() {
    for p in "$pid" "$upstream_pid"; do
        [ -n "$p" ] || continue
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$dir"
}
trap cleanup EXIT
cargo build -q --bin acp --example mcp_flow --example mcp_upstream
. scripts/server.sh

upstream_token="ghp_example_$(head -c 32 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 24)"
MCP_UPSTREAM_TOKEN="$upstream_token" target/debug/examples/mcp_upstream "$dir/mcp-ca.pem" \
    > "$dir/upstream.out" 2> "$dir/upstream.err" &
upstream_pid=$!
for _ in $(seq 1 100); do grep -q '^mcp_upstream listening on' "$dir/upstream.out" 2>/dev/null && break; sleep 0.1; done
upstream=$(sed -n 's/^mcp_upstream listening on \(https:[^ ]*\).*/\1/p' "$dir/upstream.out")
[ -n "$upstream" ] || { echo "mcp_upstream did not start"; cat "$dir/upstream.err"; exit 1; }

ACP_VAULT_PROXY_CA_FILE="$dir/mcp-ca.pem" ACP_VAULT_PROXY_ALLOW=127.0.0.1/32 start_server "$dir"
owner_token "$url" "$dir" owner@example.com mcp-example > "$dir/pat"
ACP_URL="$url" ACP_API_KEY="$key" ACP_TOKEN="$(cat "$dir/pat")" UPSTREAM_URL="$upstream" \
    UPSTREAM_TOKEN="$upstream_token" target/debug/examples/mcp_flow
echo "mcp example: 1 passed, 0 failed"
