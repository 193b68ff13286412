#!/usr/bin/env bash
# Runs the README's quickstart exactly as written: the command lines between
# `<!-- quickstart:begin -->` and `<!-- quickstart:end -->`, in a new empty folder, with
# target/debug/acp on PATH standing for the installed binary. The `acp serve` line runs in the
# background (a person runs it in a second terminal); every other line runs in this shell, one
# after the other, so that its `export`s hold for the next ones. A line whose comment says
# `(exit N)` must end with N, every other line with 0; allow (0), challenge (9) and deny (8) must
# all come out. Prints the seconds from the first line to the challenge. Two things differ from
# a person's run, and only these: the server listens on a free port instead of 8080 (the lines'
# `127.0.0.1:8080` is rewritten to it, and ACP_ADDR set), and HOME is the temporary folder (so
# the stored login is not yours). Exits non-zero if anything differs from the README.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
cargo build -q --bin acp

# The quickstart's command lines: inside the markers, inside ```sh blocks, not comments.
lines=()
while IFS= read -r line; do
    lines+=("$line")
done < <(awk '
    /<!-- quickstart:begin -->/ { on = 1; next }
    /<!-- quickstart:end -->/ { on = 0; next }
    on && /^[[:space:]]*```sh/ { code = 1; next }
    on && /^[[:space:]]*```/ { code = 0; next }
    on && code && $0 !~ /^[[:space:]]*(#|$)/ { sub(/^[[:space:]]+/, ""); print }
' README.md)
[ "${#lines[@]}" -gt 0 ] || { echo "no quickstart lines between the markers in README.md" >&2; exit 1; }
[ "${#lines[@]}" -le 8 ] || { echo "the quickstart has ${#lines[@]} commands; it promises at most 8" >&2; exit 1; }

dir=$(mktemp -d)
pid=
cleanup() {
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    rm -rf "$dir"
}
trap cleanup EXIT

# A clean terminal: none of the caller's ACP_ settings, the binary on PATH, a fresh home.
for name in $(env | sed -n 's/^\(ACP_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$name"; done
export PATH="$repo/target/debug:$PATH" HOME="$dir/home" XDG_CONFIG_HOME="$dir/home/.config"
mkdir -p "$HOME" "$dir/work"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export ACP_ADDR="127.0.0.1:$port"
cd "$dir/work"

now_ms() { date +%s%3N; }
seen=" "
started=$(now_ms)
challenged=
for raw in "${lines[@]}"; do
    line=${raw//127.0.0.1:8080/127.0.0.1:$port}
    expect=0
    if [[ $line =~ \(exit\ ([0-9]+)\) ]]; then expect=${BASH_REMATCH[1]}; fi
    echo "\$ $raw"
    if [[ $line == "acp serve"* ]]; then
        # The second terminal: in the background, until it says it listens.
        command=${line%%  #*}
        # `exec`: the background job is the server itself, so that the clean-up stops it.
        eval "exec $command" > "$dir/serve.out" 2> "$dir/serve.err" &
        pid=$!
        for _ in $(seq 1 300); do
            grep -q '^acp listening on' "$dir/serve.out" 2>/dev/null && break
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        grep -q '^acp listening on' "$dir/serve.out" || { cat "$dir/serve.out" "$dir/serve.err" >&2; exit 1; }
        continue
    fi
    set +e
    eval "$line" > "$dir/out" 2>&1
    code=$?
    set -e
    if [ "$code" != "$expect" ]; then
        cat "$dir/out" >&2
        echo "exit $code, the README says $expect" >&2
        exit 1
    fi
    case $expect in
        0) [[ $line == "acp check"* ]] && seen+="allow " ;;
        9) seen+="challenge "; challenged=$(now_ms) ;;
        8) seen+="deny " ;;
    esac
    sed 's/^/  /' "$dir/out" | head -n 12
done
for decision in allow challenge deny; do
    [[ $seen == *" $decision "* ]] || { echo "the quickstart never answered $decision" >&2; exit 1; }
done
[ -n "$challenged" ] || exit 1
elapsed=$((challenged - started))
printf 'first five minutes: allow, challenge and deny from the README in %d commands; %d.%03d s from the first line to the challenge\n' \
    "${#lines[@]}" $((elapsed / 1000)) $((elapsed % 1000))
