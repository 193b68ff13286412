# Sourced by the scripts that drive a real server (quickstart check, API fuzzing).
#
# The processes started here (servers, upstreams), stopped on exit by `clean_on_exit`.
server_pids=()

# `clean_on_exit DIR`: on exit, stops every process started here and removes DIR.
clean_on_exit() {
    # shellcheck disable=SC2064 # DIR is fixed now.
    trap "stop_started; rm -rf '$1'" EXIT
}

stop_started() {
    for p in "${server_pids[@]}"; do
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
}

# `start_listener NAME DIR COMMAND...`: runs COMMAND in the background (its output in
# DIR/NAME.out and DIR/NAME.err) until it prints `NAME listening on https://...`; sets
# `listener_url` to that URL.
start_listener() {
    local name=$1 dir=$2
    shift 2
    "$@" > "$dir/$name.out" 2> "$dir/$name.err" &
    server_pids+=("$!")
    for _ in $(seq 1 100); do grep -q "^$name listening on" "$dir/$name.out" 2>/dev/null && break; sleep 0.1; done
    listener_url=$(sed -n "s/^$name listening on \(https:[^ ]*\).*/\1/p" "$dir/$name.out")
    [ -n "$listener_url" ] || { echo "$name did not start" >&2; cat "$dir/$name.err" >&2; return 1; }
}

# `start_server DIR`: starts `target/debug/acp serve` (or `$ACP_SERVER_BIN serve`) on a free
# loopback port with a fresh SQLite database in DIR (its banner in DIR/out.txt) and a random bootstrap key; sets `key`, `pid` and
# `url` once it answers its health check. Settings go in the environment of the call.
start_server() {
    local dir=$1
    key="svc_test_$(head -c 64 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 43)"
    ACP_BOOTSTRAP_API_KEY="$key" "${ACP_SERVER_BIN:-target/debug/acp}" serve --addr 127.0.0.1:0 \
        --database-url "sqlite:$dir/acp.db" > "$dir/out.txt" 2> "$dir/err.txt" &
    pid=$!
    server_pids+=("$pid")
    for _ in $(seq 1 100); do grep -q '^acp listening on' "$dir/out.txt" 2>/dev/null && break; sleep 0.1; done
    url=$(sed -n 's/^acp listening on \([^ ]*\).*/\1/p' "$dir/out.txt")
    [ -n "$url" ] || { cat "$dir/err.txt" >&2; return 1; }
    target/debug/acp healthcheck --url "$url"
}

# `owner_token URL DIR EMAIL NAME` makes EMAIL an
# owner of the default workspace of the server at URL (its SQLite database and `out.txt` banner
# in DIR), logs in through the outbox as a browser would, and prints a personal access token
# named NAME (valid one day). Sets `ws` to the default workspace's id.
owner_token() {
    local url=$1 dir=$2 email=$3 name=$4 login csrf pat
    acp() { ACP_DATABASE_URL="sqlite:$dir/acp.db" target/debug/acp "$@"; }
    ws=$(sed -n 's/^Created the default workspace \([^.]*\)\..*/\1/p' "$dir/out.txt")
    acp admin add-member --workspace "$ws" --email "$email" --role owner > /dev/null
    curl -sf -X POST "$url/auth/start-login" -H 'Content-Type: application/json' \
        -d "{\"email\":\"$email\"}" > /dev/null
    login=$(acp admin outbox list --limit 1 --output json | grep -o 'token=[A-Za-z0-9_-]*' | head -1 | cut -d= -f2)
    [ -n "$login" ] || { echo "no login link in the outbox" >&2; return 1; }
    csrf=$(curl -sf -c "$dir/cookies" -X POST "$url/auth/verify-login" -H 'Content-Type: application/json' \
        -d "{\"token\":\"$login\"}" | sed -n 's/.*"csrf_token":"\([^"]*\)".*/\1/p')
    pat=$(curl -sf -b "$dir/cookies" -X POST "$url/v1/auth/tokens" -H 'Content-Type: application/json' \
        -H "X-CSRF-Token: $csrf" -d "{\"name\":\"$name\",\"expires_in_days\":1}" |
        sed -n 's/.*"token":"\(svc_pat_[^"]*\)".*/\1/p')
    [ -n "$pat" ] || { echo "no personal access token" >&2; return 1; }
    echo "$pat"
}
