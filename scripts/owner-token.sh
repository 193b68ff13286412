# Sourced by the scripts that drive a real server: `owner_token URL DIR EMAIL NAME` makes EMAIL an
# owner of the default workspace of the server at URL (its SQLite database and `out.txt` banner
# in DIR), logs in through the outbox as a browser would, and prints a personal access token
# named NAME (valid one day). Sets `ws` to the default workspace's id.
owner_token() {
    local url=$1 dir=$2 email=$3 name=$4 login csrf pat
    acp() { ACP_DATABASE_URL="sqlite:$dir/acp.db" target/debug/acp "$@"; }
    ws=$(sed -n 's/^Created the default workspace \([^.]*\)\..*/\1/p' "$dir/out.txt")
    acp workspace add-member --workspace "$ws" --email "$email" --role owner > /dev/null
    curl -sf -X POST "$url/auth/start-login" -H 'Content-Type: application/json' \
        -d "{\"email\":\"$email\"}" > /dev/null
    login=$(acp outbox list --limit 1 --output json | grep -o 'token=[A-Za-z0-9_-]*' | head -1 | cut -d= -f2)
    [ -n "$login" ] || { echo "no login link in the outbox" >&2; return 1; }
    csrf=$(curl -sf -c "$dir/cookies" -X POST "$url/auth/verify-login" -H 'Content-Type: application/json' \
        -d "{\"token\":\"$login\"}" | sed -n 's/.*"csrf_token":"\([^"]*\)".*/\1/p')
    pat=$(curl -sf -b "$dir/cookies" -X POST "$url/v1/auth/tokens" -H 'Content-Type: application/json' \
        -H "X-CSRF-Token: $csrf" -d "{\"name\":\"$name\",\"expires_in_days\":1}" |
        sed -n 's/.*"token":"\(svc_pat_[^"]*\)".*/\1/p')
    [ -n "$pat" ] || { echo "no personal access token" >&2; return 1; }
    echo "$pat"
}
