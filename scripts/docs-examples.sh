#!/usr/bin/env bash
# Runs the examples of docs/ that are marked runnable: every ```sh block of the files below, in
# order, against one fresh server (a temporary SQLite file); ```shell blocks are illustrations
# and are not run. Each block runs in `bash -euo pipefail` with these variables set:
#   ACP_URL       the server's base URL (ACP_SERVER too, for the `acp` client commands)
#   ACP_API_KEY   the default workspace's API key
#   ACP_TOKEN     a personal access token of the workspace's owner (for `acp sync`)
#   ACP_DATABASE_URL  the server's database (for the seeding script of docs/scale.md)
#   AGENT_ID      an attested agent of the workspace (examples/attested_agent.rs)
#   EXAMPLES      a scratch directory shared by the blocks (spec files, answers)
#   UPSTREAM      an HTTPS echo server for the vault's proxy (examples/https_echo.rs; the
#                 server trusts its CA and may reach loopback for it)
# and `acp` on the PATH (target/debug/acp). A block fails the run when any command in it does;
# the blocks check what they show with `grep`/`test`. Exits non-zero on the first failure.
#
#   scripts/docs-examples.sh [DOC.md ...]     (default: the docs listed below)
set -euo pipefail
cd "$(dirname "$0")/.."
docs=("$@")
# The vault's page last: its example replaces the default policy.
[ ${#docs[@]} -gt 0 ] || docs=(docs/decisions.md docs/policy-impact.md docs/scale.md docs/access-review.md docs/vault.md)
dir=$(mktemp -d)
. scripts/server.sh
clean_on_exit "$dir"
cargo build -q --bin acp --example attested_agent --example seed_policy --example https_echo
start_listener https_echo "$dir" target/debug/examples/https_echo "$dir/echo-ca.pem"
upstream=$listener_url
ACP_VAULT_PROXY_CA_FILE="$dir/echo-ca.pem" ACP_VAULT_PROXY_ALLOW=127.0.0.1/32 start_server "$dir" > /dev/null
token=$(owner_token "$url" "$dir" owner@example.com docs-examples)
agent=$(ACP_URL="$url" ACP_API_KEY="$key" target/debug/examples/attested_agent docs-agent | tail -1)
mkdir -p "$dir/examples" "$dir/bin"
ln -s "$PWD/target/debug/acp" "$dir/bin/acp"
# The repository's scripts, as the docs name them (`scripts/seed-large.sh`).
ln -s "$PWD/scripts" "$dir/examples/scripts"

passed=0
for doc in "${docs[@]}"; do
    # The ```sh blocks, each into a file of its own.
    awk -v out="$dir/block" '
        /^```sh$/ { n++; file = sprintf("%s-%03d.sh", out, n); inside = 1; next }
        /^```/ && inside { inside = 0; close(file); next }
        inside { print > file }
    ' "$doc"
    for block in "$dir"/block-*.sh; do
        [ -e "$block" ] || continue
        if ! (cd "$dir/examples" && PATH="$dir/bin:$PATH" ACP_URL="$url" ACP_SERVER="$url" ACP_API_KEY="$key" \
            ACP_TOKEN="$token" ACP_DATABASE_URL="sqlite:$dir/acp.db" AGENT_ID="$agent" EXAMPLES="$dir/examples" \
            UPSTREAM="${upstream%/}/echo" ACP_CREDENTIALS="$dir/credentials.json" \
            bash -euo pipefail "$block") > "$dir/block.out" 2>&1; then
            echo "docs example failed: $doc, block $(basename "$block" .sh | sed 's/block-0*//'):"
            sed 's/^/  | /' "$block"
            echo "output:"
            sed 's/^/  > /' "$dir/block.out"
            exit 1
        fi
        passed=$((passed + 1))
        rm "$block"
    done
done
echo "docs examples: $passed passed, 0 failed"
