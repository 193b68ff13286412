#!/usr/bin/env bash
# Runs the agent client libraries' suites (clients/python, clients/typescript) against one
# fresh server: target/debug/acp (built before, e.g. by `cargo test`) on a free loopback port
# with a throwaway SQLite database, its vault proxy allowed to reach loopback (the tests' echo
# upstream), and an owner's personal access token. Python in a venv under target/, TypeScript
# with npm. Exits non-zero if any step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)

if [ ! -x target/debug/acp ]; then
    echo "clients-check: target/debug/acp is missing; build it first (cargo build, or cargo test)" >&2
    exit 1
fi
for tool in python3 node npm curl; do
    command -v "$tool" > /dev/null || { echo "clients-check: $tool is not installed" >&2; exit 1; }
done

dir=$(mktemp -d)
pid=
cleanup() {
    if [ -n "$pid" ]; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    rm -rf "$dir"
}
trap cleanup EXIT

. scripts/server.sh
# The default sign-up rule (`invite`) suits: the owner is made a member before logging in.
ACP_VAULT_PROXY_ALLOW=127.0.0.1/32 start_server "$dir"
owner_token "$url" "$dir" owner@example.com clients-check > "$dir/pat"
ACP_TOKEN=$(cat "$dir/pat")
export ACP_URL="$url" ACP_API_KEY="$key" ACP_TOKEN

echo "== clients/python"
venv=target/clients-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
# Built in the venv itself (no isolated build environment to download each time), from a copy
# of this tree (a build leaves `build/` behind, which must not outlive a removed file).
"${pip[@]}" "setuptools>=61" wheel
cp -r clients/python "$dir/python-client"
rm -rf "$dir/python-client/build" "$dir/python-client"/*.egg-info
"${pip[@]}" --no-build-isolation "$dir/python-client"
# The suite runs from the repository's root with only its own folder added to the path, so
# `acp_client` is the installed package, not the source.
"$venv/bin/python" -c 'import acp_client, sys; sys.exit("acp_client is not the installed one" if "site-packages" not in acp_client.__file__ else 0)'
"$venv/bin/python" -m unittest discover -s clients/python/tests -v

echo "== clients/typescript"
(
    cd clients/typescript
    npm ci --no-audit --no-fund --loglevel=error
    npm run build --silent
    npm test
)

echo "clients check took $(( $(date +%s) - started )) s"
echo "clients check: 2 passed, 0 failed"
