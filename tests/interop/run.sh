#!/usr/bin/env bash
# Interop checks: clients in other languages and tools against a freshly started
# `runplane serve` (release build), with authentication on (the default): every client
# gets the admin token the server wrote to its data directory.
#
#   bash tests/interop/run.sh
#
#   1. python      examples/python/worker.py (grpcio, code generated with grpcio-tools)
#   2. typescript  examples/typescript/src/worker.ts (Connect gRPC transport, protoc-gen-es)
#   3. grpcurl     tests/interop/grpcurl.sh (grpcurl 1.8.6, reflection v1alpha; credentials)
#   4. buf         buf lint and buf format --diff --exit-code on proto/
#   5. tls         a second server with --tls-cert/--tls-key/--tls-client-ca and a throwaway
#                  CA (openssl): grpcurl over TLS, plaintext refused, the Python and
#                  TypeScript workers and the CLI over TLS with a client certificate, and
#                  a worker without one refused at attach
#
# Needs only Rust, Python 3 (with venv/pip), Node/npm and openssl (installed with apt-get
# when missing), plus the package registries: it installs everything else itself (a venv
# in a temp dir, `npm ci` in examples/typescript).
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
tls_pid=""
started=$SECONDS

cleanup() {
    local rc=$? pid
    for pid in "$server_pid" "$tls_pid"; do
        if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
        fi
    done
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

# A throwaway CA, a server certificate for localhost and 127.0.0.1, a worker's client
# certificate, and an unrelated CA (for a failed verification); EC P-256, valid two days.
setup_tls() {
    if ! command -v openssl >/dev/null; then
        local apt=(env DEBIAN_FRONTEND=noninteractive apt-get)
        [[ $(id -u) == 0 ]] || apt=(sudo "${apt[@]}")
        "${apt[@]}" install -y openssl || { "${apt[@]}" update && "${apt[@]}" install -y openssl; }
    fi
    local d=$tmp/tls
    mkdir -p "$d"
    key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$d/$1.key"; }
    ca() {
        key "$1"
        openssl req -x509 -new -key "$d/$1.key" -out "$d/$1.pem" -days 2 -subj "/CN=$2" \
            -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
    }
    # leaf NAME CN EXTENSION...: a certificate signed by the CA.
    leaf() {
        local name=$1 cn=$2
        shift 2
        key "$name"
        openssl req -new -key "$d/$name.key" -subj "/CN=$cn" -out "$d/$name.csr"
        printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" "$@" >"$d/$name.ext"
        openssl x509 -req -in "$d/$name.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" \
            -set_serial "0x$(openssl rand -hex 8)" -days 2 -extfile "$d/$name.ext" -out "$d/$name.pem"
    }
    ca ca "runplane interop CA"
    ca other-ca "some other CA"
    leaf server localhost "extendedKeyUsage=serverAuth" "subjectAltName=DNS:localhost,IP:127.0.0.1"
    leaf client interop-worker "extendedKeyUsage=clientAuth"
    openssl verify -CAfile "$d/ca.pem" "$d/server.pem" "$d/client.pem"
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

step "setup (venv, npm ci, TLS certificates) in the background"
background python setup_python
python_setup=$!
background typescript setup_typescript
typescript_setup=$!
background tls setup_tls
tls_setup=$!

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
await_setup tls "$tls_setup"

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# serve PORT LOG ARGS...: starts `runplane serve` on 127.0.0.1:PORT in the background
# (its pid in $launched) and waits until the port accepts connections.
serve() {
    local port=$1 log=$2
    shift 2
    "$bin" serve --listen "127.0.0.1:$port" "$@" >"$log" 2>&1 &
    launched=$!
    for _ in $(seq 1 150); do
        if ! kill -0 "$launched" 2>/dev/null; then
            echo "interop: the server exited at start:" >&2
            cat "$log" >&2
            exit 1
        fi
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            return 0
        fi
        sleep 0.2
    done
    echo "interop: 127.0.0.1:$port never opened" >&2
    exit 1
}

# stop PID NAME: SIGTERM, and report whether it exited cleanly.
stop() {
    kill -TERM "$1"
    if wait "$1"; then
        echo "$2 stopped cleanly on SIGTERM"
    else
        echo "interop: $2 exited with $? on SIGTERM"
    fi
}

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
port=$(free_port)
addr=127.0.0.1:$port
serve "$port" "$tmp/server.log" --data-dir "$tmp/data" --policy-dir "$tmp/policies" --reattach-grace 30
server_pid=$launched
# Authentication is on: the server wrote its admin token before it opened the port.
token_file=$tmp/data/operator.token
[[ -s $token_file ]] || { echo "interop: no admin token at $token_file" >&2; exit 1; }
echo "runplane serving on $addr (pid $server_pid), admin token in $token_file"

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

python=("$tmp/venv/bin/python" examples/python/worker.py --gen "$tmp/pygen")
grpcurl=$tmp/venv/bin/grpcurl
check "python worker" "${python[@]}" --target "$addr" --token-file "$token_file"
check "typescript worker" bash -c 'cd "$1" && exec node_modules/.bin/tsx src/worker.ts --target "$2" --token-file "$3"' \
    _ "$ts_dir" "$addr" "$token_file"
check "grpcurl" env GRPCURL="$grpcurl" RUNPLANE_TOKEN_FILE="$token_file" bash tests/interop/grpcurl.sh "$addr"
check "buf lint and format" bash -c '"$1" lint && "$1" format --diff --exit-code && echo "buf: lint and format clean"' \
    _ "$ts_dir/node_modules/.bin/buf"

step "stop the server"
stop "$server_pid" "runplane serve"
server_pid=""

step "start runplane serve with TLS (client certificates from the interop CA)"
certs=$tmp/tls
tls_port=$(free_port)
tls_addr=127.0.0.1:$tls_port
serve "$tls_port" "$tmp/server-tls.log" --data-dir "$tmp/data-tls" --policy-dir "$tmp/policies" \
    --tls-cert "$certs/server.pem" --tls-key "$certs/server.key" --tls-client-ca "$certs/ca.pem"
tls_pid=$launched
tls_token_file=$tmp/data-tls/operator.token
echo "runplane serving TLS on $tls_addr (pid $tls_pid)"

# grpcurl over TLS: a real handshake (no -plaintext), the server's certificate verified
# against the interop CA, reflection and ListRuns with the token; another CA fails.
tls_grpcurl() {
    local out
    out=$("$grpcurl" -cacert "$certs/ca.pem" -max-time 10 -H "authorization: Bearer $(cat "$tls_token_file")" \
        -d '{}' "$tls_addr" runplane.v1.RunService/ListRuns 2>&1) || { echo "ListRuns over TLS failed: $out"; return 1; }
    echo "ListRuns over TLS: ok"
    if out=$("$grpcurl" -cacert "$certs/other-ca.pem" -max-time 10 "$tls_addr" list 2>&1); then
        echo "a certificate from another CA was accepted: $out"
        return 1
    fi
    [[ $out == *"certificate"* ]] || { echo "another CA: expected a certificate error, got: $out"; return 1; }
    echo "another CA: refused ($out)"
}
check "tls: grpcurl -cacert" tls_grpcurl

# Plaintext against the TLS port fails, and promptly (timeout 30 would say 124 on a hang).
tls_plaintext() {
    local out rc t0=$SECONDS
    out=$(timeout 30 "$grpcurl" -plaintext -max-time 5 "$tls_addr" list 2>&1) && rc=0 || rc=$?
    echo "grpcurl -plaintext against TLS: exit $rc after $((SECONDS - t0)) s: $out"
    ((rc != 0 && rc != 124))
}
check "tls: plaintext refused" tls_plaintext

check "tls: python worker with a client certificate" "${python[@]}" --target "$tls_addr" \
    --token-file "$tls_token_file" --ca-cert "$certs/ca.pem" --client-cert "$certs/client.pem" --client-key "$certs/client.key"
check "tls: python worker without a client certificate is refused at attach" "${python[@]}" --target "$tls_addr" \
    --token-file "$tls_token_file" --ca-cert "$certs/ca.pem" needs-client-cert
check "tls: typescript worker with a client certificate" bash -c \
    'cd "$1" && exec node_modules/.bin/tsx src/worker.ts --target "$2" --token-file "$3" --ca-cert "$4/ca.pem" --client-cert "$4/client.pem" --client-key "$4/client.key"' \
    _ "$ts_dir" "$tls_addr" "$tls_token_file" "$certs"
check "tls: runplane CLI" "$bin" runs list --server "https://$tls_addr" --ca-cert "$certs/ca.pem" --token-file "$tls_token_file"

step "stop the TLS server"
stop "$tls_pid" "runplane serve (TLS)"
tls_pid=""
if ((failed > 0)); then
    echo "--- server log (last 40 lines) ---"
    tail -n 40 "$tmp/server.log"
    echo "--- TLS server log (last 20 lines) ---"
    tail -n 20 "$tmp/server-tls.log"
    echo "interop: failed: ${failures[*]}"
fi
echo "interop: took $((SECONDS - started)) s"
echo "interop: $passed passed, $failed failed"
((failed == 0))
