#!/usr/bin/env bash
# A CI pipeline step for policy as code: validate and test the spec offline, dry-run it against
# the server (showing the diff), and apply it on the main branch. Fails the pipeline on a
# conflict (someone changed the policy since this branch was reviewed) or any error.
#
#   ACP_SERVER=https://acp.example.com ACP_TOKEN=svc_pat_... \
#     bash examples/ci-policy-sync.sh policies/finance-refunds.yaml [pol_default]
set -euo pipefail
spec="${1:?usage: ci-policy-sync.sh SPEC_FILE [POLICY_ID]}"
policy_id="${2:-pol_default}"
acp="${ACP_BIN:-acp}"

"$acp" policy validate "$spec"
"$acp" policy test "$spec"

# Dry run: exit 0 = no change, 2 = changes (shown), 3 = conflict, 1 = error.
set +e
"$acp" sync "$spec" --policy-id "$policy_id" --dry-run
code=$?
set -e
case "$code" in
    0) echo "policy $policy_id is up to date"; exit 0 ;;
    2) echo "policy $policy_id has changes (above)" ;;
    3) echo "conflict: the policy changed on the server; rebase and retry" >&2; exit 3 ;;
    *) echo "dry run failed" >&2; exit "$code" ;;
esac

if [ "${CI_APPLY:-}" = "1" ] || [ "${GITHUB_REF:-}" = "refs/heads/main" ]; then
    # The commit id makes a retried job safe: the server replays the first answer.
    key="sync-${policy_id}-${GITHUB_SHA:-$(git rev-parse HEAD 2>/dev/null || date +%s)}"
    "$acp" sync "$spec" --policy-id "$policy_id" --apply --idempotency-key "$key"
else
    echo "not on main: not applying (set CI_APPLY=1 to apply)"
fi
