#!/usr/bin/env bash
# Runs the vault example end to end: the HTTPS echo server (its own CA), a fresh server on a
# temporary SQLite file that trusts that CA and may reach loopback (the operator allow-list),
# an owner's personal access token, then examples/vault_flow.rs against them. Exits non-zero if
# any step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
pid=
echo_pid=
cleanup() {
    for p in "$pid" "$echo_pid"; do
        [ -n "$p" ] || continue
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$dir"
}
trap cleanup EXIT
cargo build -q --bin acp --example vault_flow --example https_echo
. scripts/server.sh

target/debug/examples/https_echo "$dir/echo-ca.pem" > "$dir/echo.out" 2> "$dir/echo.err" &
echo_pid=$!
for _ in $(seq 1 100); do grep -q '^https_echo listening on' "$dir/echo.out" 2>/dev/null && break; sleep 0.1; done
upstream=$(sed -n 's/^https_echo listening on \(https:[^ ]*\).*/\1/p' "$dir/echo.out")
[ -n "$upstream" ] || { echo "https_echo did not start"; cat "$dir/echo.err"; exit 1; }

ACP_VAULT_PROXY_CA_FILE="$dir/echo-ca.pem" ACP_VAULT_PROXY_ALLOW=127.0.0.1/32 start_server "$dir"
owner_token "$url" "$dir" owner@example.com vault-example > "$dir/pat"
ACP_URL="$url" ACP_API_KEY="$key" ACP_TOKEN="$(cat "$dir/pat")" UPSTREAM_URL="$upstream" \
    target/debug/examples/vault_flow
echo "vault example: 1 passed, 0 failed"
