#!/usr/bin/env bash
# A CI pipeline step for policy as code: validate and test the spec offline, dry-run it against
# the server (showing the diff), and apply it on the main branch with the hash the dry run was
# computed against (`--expect-hash`). If someone changed the policy on the server after the dry
# run, the apply fails with exit 3 instead of silently reverting their change.
#
#   ACP_SERVER=https://acp.example.com ACP_TOKEN=svc_pat_... \
#     bash examples/ci-policy-sync.sh policies/finance-refunds.yaml [pol_default]
#
# Exit codes (those of every acp command): 0 up to date or applied, 3 conflict (the policy
# changed since the dry run, or another apply won), 4 the token is not valid, 5 the token may
# not sync, anything else an error.
set -euo pipefail
spec="${1:?usage: ci-policy-sync.sh SPEC_FILE [POLICY_ID]}"
policy_id="${2:-pol_default}"
acp="${ACP_BIN:-acp}"

"$acp" policy validate "$spec"
"$acp" policy test "$spec"

plan=$(mktemp)
trap 'rm -f "$plan"' EXIT

# Dry run: exit 0 = no change, 2 = changes (shown), 3 = conflict, 4/5 = the token, 1 = error.
set +e
"$acp" sync "$spec" --policy-id "$policy_id" --dry-run | tee "$plan"
code=${PIPESTATUS[0]}
set -e
case "$code" in
    0) echo "policy $policy_id is up to date"; exit 0 ;;
    2) echo "policy $policy_id has changes (above)" ;;
    3) echo "conflict: the policy changed on the server; rebase and retry" >&2; exit 3 ;;
    *) echo "dry run failed" >&2; exit "$code" ;;
esac

# The hash the reviewed diff was computed against (the dry run prints the apply command).
reviewed=$(grep -oE -- '--expect-hash sha256:[0-9a-f]{64}' "$plan" | head -n 1 | cut -d' ' -f2 || true)

if [ "${CI_APPLY:-}" = "1" ] || [ "${GITHUB_REF:-}" = "refs/heads/main" ]; then
    # The commit id makes a retried job safe: the server replays the first answer.
    key="sync-${policy_id}-${GITHUB_SHA:-$(git rev-parse HEAD 2>/dev/null || date +%s)}"
    expect=()
    if [ -n "$reviewed" ]; then
        expect=(--expect-hash "$reviewed")
    else
        echo "policy $policy_id is new: applying without an expected hash"
    fi
    set +e
    "$acp" sync "$spec" --policy-id "$policy_id" --apply --idempotency-key "$key" ${expect[@]+"${expect[@]}"}
    code=$?
    set -e
    case "$code" in
        0) ;;
        3) echo "conflict: policy $policy_id changed on the server after the dry run; review the new diff and retry" >&2; exit 3 ;;
        *) echo "apply failed" >&2; exit "$code" ;;
    esac
else
    echo "not on main: not applying (set CI_APPLY=1 to apply)"
fi
