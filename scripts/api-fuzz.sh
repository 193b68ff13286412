#!/usr/bin/env bash
# Property-based API fuzzing: schemathesis, with all its checks, against the real server's own
# `/openapi.json`. A fresh `acp serve` on a temporary SQLite file is fuzzed twice: once with the
# workspace API key, once with a personal access token of an owner (so that the operations for
# people, which refuse API keys, are reached too). Fails on any 5xx and on any answer the document
# does not allow (status, content type, headers, body schema), on bad input that is accepted and
# valid input that is refused.
#
# Environment: ACP_FUZZ_SECONDS (time budget of each of the two runs, default 90),
# ACP_FUZZ_SEED (default: random, printed), ACP_FUZZ_VENV (where schemathesis is installed,
# default target/fuzz-venv). Needs python3 (3.9+) with venv and pip, curl, and target/debug/acp
# (built here when absent).
#
# Left out: `GET /v1/workspace/audit/stream`, a server-sent event stream that by design never
# ends (schemathesis reads whole bodies; tests/api/operators.rs drives it), and the console's
# pages under `/dashboard`, which answer HTML (errors too, as pages) and send a visitor without a
# session to the login page before reading anything else; tests/api/dashboard.rs (both engines)
# and tests/api/browser.rs (Chromium) drive them, their refusals and bad input.
# Every other operation and every check runs in both passes. The server's rate
# limits are raised for the run so that rate-limited operations are exercised rather than
# answered 429 (which the document allows) after their first few calls.
set -euo pipefail
cd "$(dirname "$0")/.."

SCHEMATHESIS_VERSION=4.32.5
seconds="${ACP_FUZZ_SECONDS:-90}"
seed="${ACP_FUZZ_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}"
venv="${ACP_FUZZ_VENV:-target/fuzz-venv}"

if [ ! -x "$venv/bin/st" ] || ! "$venv/bin/st" --version 2>/dev/null | grep -q "$SCHEMATHESIS_VERSION"; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
fi
[ -x target/debug/acp ] || cargo build -q --bin acp

dir=$(mktemp -d)
pid=
cleanup() {
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    rm -rf "$dir"
}
trap cleanup EXIT

. scripts/server.sh
ACP_LOGIN_LIMIT_PER_EMAIL=100000 ACP_LOGIN_LIMIT_PER_IP=100000 \
    ACP_REGISTER_LIMIT_PER_IP=100000 ACP_CONTACT_LIMIT_PER_IP=100000 \
    start_server "$dir"

# An owner of the default workspace logs in through the outbox and makes a token.
owner_token "$url" "$dir" fuzz@example.com api-fuzz > "$dir/pat"
pat=$(cat "$dir/pat")
ws=$(sed -n 's/^Created the default workspace \([^.]*\)\..*/\1/p' "$dir/out.txt")

# Real objects for the fuzzer to reach: an active and a pending agent, a policy that allows
# credentials and the vault, a challenge, a secret set with a grant and a workflow lease, a
# credential. Their ids go into dictionaries that the generated config binds to the id
# parameters and body fields, so that most requests about one object find it (instead of a 404
# that would hide what the operation answers) and the rest stay random.
[ -x target/debug/examples/quickstart ] || cargo build -q --example quickstart
api() { curl -s -X "$1" "$url$2" -H 'Content-Type: application/json' -H "Authorization: Bearer $pat" -H "X-Service-Workspace-Id: $ws" ${3:+-d "$3"}; }
keyed() { curl -s -X "$1" "$url$2" -H 'Content-Type: application/json' -H "X-Service-Api-Key: $key" ${3:+-d "$3"}; }
field() { sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p" | head -1; }
active=$(ACP_URL="$url" ACP_API_KEY="$key" target/debug/examples/quickstart | sed -n 's/^registered \(agt_[0-9a-f]*\).*/\1/p')
pending=$(keyed POST /v1/agents/register '{"name":"fuzz-pending","public_key":"11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo="}' | field agent_id)
api POST /v1/policies/sync '{"spec":{"global_guardrails":{"actions":{"allow":["mint_credential","token_exchange","vault.read","vault.proxy","vault.mint_lease","deploy"]}}}}' > /dev/null
challenge=$(keyed POST /v1/check "{\"agent_id\":\"$pending\",\"action\":\"deploy\"}" | field challenge_id)
set_id=$(api POST /v1/vault/secret-sets '{"name":"fuzz","provider":"echo","environment":"staging","entries":{"TOKEN":"fuzz-secret-value"}}' | field secret_set_id)
grant=$(api POST /v1/vault/grants "{\"secret_set_id\":\"$set_id\",\"agent_id\":\"$active\",\"allowed_keys\":\"*\",\"allowed_actions\":[\"read\",\"mint_lease\"]}" | field grant_id)
lease=$(keyed POST /v1/vault/leases/workflow "{\"agent_id\":\"$active\",\"secret_set_id\":\"$set_id\",\"purpose\":\"fuzz\",\"actions\":[\"read\"]}" | field lease_id)
cred=$(keyed POST /v1/identity/credentials/mint "{\"agent_id\":\"$active\"}" | field cred_id)
user=$(api GET /v1/workspace/members | field user_id)
for v in active pending challenge set_id grant lease cred user; do
    [ -n "${!v}" ] || { echo "seeding the fuzz run: no $v"; exit 1; }
done
dict() { local name=$1; shift; printf '\n[dictionaries.%s]\nvalues = [' "$name"; printf '"%s", ' "$@"; printf '"%s_nope"]\n' "$name"; }
config="$dir/api-fuzz.toml"
{
    cat scripts/api-fuzz.toml
    dict agents "$active" "$pending"
    dict challenges "$challenge"
    dict sets "$set_id" 1
    dict grants "$grant"
    dict leases "$lease"
    dict credentials "$cred"
    dict users "$user"
    dict policies pol_default
    printf '\n[parameters]\n'
    for binding in path.agent_id:agents body.agent_id:agents path.challenge_id:challenges \
        path.secret_set_id:sets body.secret_set_id:sets path.grant_id:grants path.lease_id:leases \
        path.cred_id:credentials body.cred_id:credentials path.user_id:users path.policy_id:policies \
        body.policy_id:policies; do
        printf '"%s" = { dictionary = "%s", probability = 0.7 }\n' "${binding%%:*}" "${binding##*:}"
    done
} > "$config"

fuzz() {
    local name=$1 budget=$2
    shift 2
    echo "== schemathesis, $name (seed $seed, ${budget}s)"
    # One worker: Python 3.11's parser is not thread-safe, and hypothesis parses while drawing.
    "$venv/bin/st" --config-file "$config" run "$url/openapi.json" --url "$url" \
        --checks all --max-time "$budget" --seed "$seed" --workers 1 --request-timeout 30 \
        --no-color --generation-database none --report junit --report-dir "$dir/report-$name" \
        --exclude-name 'GET /v1/workspace/audit/stream' --exclude-path-regex '^/dashboard' "$@"
}
status=0
fuzz api-key "$seconds" -H "X-Service-Api-Key: $key" || status=1
# The token names its workspace: the run may create more workspaces for the user, and a token
# that spans several must name one (else 400 `workspace_required`).
person=(-H "Authorization: Bearer $pat" -H "X-Service-Workspace-Id: $ws")
# Two operations can take the run's own access away: revoking a token (the fuzzer lists the
# tokens and follows their ids, so it revokes the run's own) and removing a member (after adding
# another owner, it removes the user itself). Either would leave the rest of the run answering
# 401 or 403, so they get a pass of their own, last.
last=(--include-name 'POST /v1/auth/tokens/{token_id}/revoke'
    --include-name 'POST /v1/workspace/members/{user_id}/remove')
first=(--exclude-name 'POST /v1/auth/tokens/{token_id}/revoke'
    --exclude-name 'POST /v1/workspace/members/{user_id}/remove')
fuzz access-token "$seconds" "${person[@]}" "${first[@]}" || status=1
fuzz access-token-last 30 "${person[@]}" "${last[@]}" || status=1
if grep -q 'panicked' "$dir/err.txt"; then
    echo "the server panicked:"
    grep -A5 'panicked' "$dir/err.txt"
    status=1
fi
exit $status
