"""A runplane worker in Python that drives whole runs against a live `runplane serve` and
checks every answer: decisions, pushes, error codes and final statuses.

    python generate.py --out GEN              # once: the generated client
    python worker.py --target 127.0.0.1:50051 --gen GEN [--stall-profile NAME]
        [--token T | --token-file FILE] [--ca-cert FILE [--client-cert FILE --client-key FILE]]

Operator calls (StartRun, GetRun, CancelRun, ResolveAsk, ...) carry the metadata
`authorization: Bearer <token>`, the token found as the runplane CLI finds it: --token or
RUNPLANE_TOKEN, else the first line of --token-file or RUNPLANE_TOKEN_FILE (default
./runplane-data/operator.token, where `runplane serve` writes its admin token). Worker
sessions carry no operator token: each Attach carries its run's worker_token from
StartRun. --ca-cert connects with TLS (the CA that signed the server's certificate);
--client-cert/--client-key add the client certificate a server started with
--tls-client-ca requires of worker sessions. Against a server with --auth off (StartRun
returns no worker_token) the checks that need authentication are skipped.

Scenarios (each on its own run):

  full      start, attach, allowed / denied / asked calls (the ask answered by an operator
            call on a second channel from another thread), results, a repeated call_id, an
            in-stream error, a heartbeat, a dropped stream and a re-attach (resumed, step
            count kept), completion through the quality gate, the event log, and the status
            codes of a bad attach.
  stall     a profile with stall_detection and stall_threshold = 3: identical outputs end the
            run with terminate{FAILED, "stall detected"}.
  cancel    an operator's CancelRun reaches the worker; later calls are denied.
  oversize  a result over the server's 4 MiB limit ends the stream with OUT_OF_RANGE or
            RESOURCE_EXHAUSTED and loses nothing; the worker re-attaches and completes
            (trusted-mount-autonomous: no gate).
  reflection the v1 reflection service answers (grpcurl 1.8 only speaks v1alpha).
  auth      credentials: no token or a malformed one is UNAUTHENTICATED; a worker token is
            PERMISSION_DENIED on operator calls and on another run's session; an attach
            needs its run's worker token (in Attach.token or the metadata) and it expires
            with the run; health needs no token.

Not run unless named:

  needs-client-cert  against a server with --tls-client-ca, run WITHOUT --client-cert:
            operator calls work, and an attach with the right worker token is refused
            with UNAUTHENTICATED because the session has no client certificate.

Exits 0 when every check passed, 1 otherwise. The `stall` scenario needs a profile the
server loaded from its --policy-dir (see tests/interop/run.sh).
"""

from __future__ import annotations

import argparse
import collections
import os
import pathlib
import queue
import sys
import threading
import time
import traceback

HERE = pathlib.Path(__file__).resolve().parent

# Filled in by main() once the generated package is importable.
grpc = None
pb_run = pb_rs = pb_ws = pb_pol = None
rs_grpc = ws_grpc = None

PATIENCE = 10.0  # seconds to wait for any message we expect
DEFAULT_TOKEN_FILE = "./runplane-data/operator.token"  # where `runplane serve` writes it


class Mismatch(Exception):
    """An answer was not what runplane's protocol promises."""


class Checks:
    def __init__(self) -> None:
        self.passed = 0

    def eq(self, actual, expected, what: str) -> None:
        if actual != expected:
            raise Mismatch(f"{what}: expected {expected!r}, got {actual!r}")
        self.passed += 1

    def true(self, condition: bool, what: str) -> None:
        if not condition:
            raise Mismatch(what)
        self.passed += 1


def enum_name(enum, value: int) -> str:
    try:
        return enum.Name(value)
    except ValueError:
        return str(value)


def bearer_interceptor(token: str):
    """A client interceptor that adds `authorization: Bearer <token>` to every call."""

    fields = ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")

    class CallDetails(collections.namedtuple("CallDetails", fields), grpc.ClientCallDetails):
        pass

    def add(details):
        metadata = list(details.metadata or []) + [("authorization", f"Bearer {token}")]
        return CallDetails(
            details.method,
            details.timeout,
            metadata,
            details.credentials,
            getattr(details, "wait_for_ready", None),
            getattr(details, "compression", None),
        )

    class Bearer(
        grpc.UnaryUnaryClientInterceptor,
        grpc.UnaryStreamClientInterceptor,
        grpc.StreamUnaryClientInterceptor,
        grpc.StreamStreamClientInterceptor,
    ):
        def intercept_unary_unary(self, continuation, details, request):
            return continuation(add(details), request)

        def intercept_unary_stream(self, continuation, details, request):
            return continuation(add(details), request)

        def intercept_stream_unary(self, continuation, details, requests):
            return continuation(add(details), requests)

        def intercept_stream_stream(self, continuation, details, requests):
            return continuation(add(details), requests)

    return Bearer()


class Connection:
    """How to reach the server: the target, TLS credentials (None: plaintext) and the
    operator token (None: none found, fine for a server with --auth off)."""

    def __init__(self, target: str, token, credentials, client_cert: bool) -> None:
        self.target = target
        self.token = token
        self.credentials = credentials
        self.client_cert = client_cert

    def channel(self):
        """A channel without operator credentials: for worker sessions, and for checking
        what is refused without a token."""
        if self.credentials is None:
            return grpc.insecure_channel(self.target)
        return grpc.secure_channel(self.target, self.credentials)

    def operator_channel(self, token=None):
        """A channel whose every call carries the operator token (or `token`)."""
        token = token or self.token
        channel = self.channel()
        return grpc.intercept_channel(channel, bearer_interceptor(token)) if token else channel


class Session:
    """One WorkerService.Session stream: a queue feeds the request iterator, a thread drains
    the response iterator into another queue so that every receive has a timeout."""

    def __init__(
        self, channel, run_id: str, worker_id: str, token: str = "", workspace_root: str = "/work/repo", metadata=None
    ):
        """`token`: the run's worker_token, sent in Attach.token (empty: none there;
        `metadata` may carry it instead)."""
        self.run_id = run_id
        self._out: queue.Queue = queue.Queue()
        self._in: queue.Queue = queue.Queue()
        self._out.put(
            pb_ws.WorkerMessage(
                attach=pb_ws.Attach(run_id=run_id, worker_id=worker_id, token=token, workspace_root=workspace_root)
            )
        )
        self._call = ws_grpc.WorkerServiceStub(channel).Session(self._requests(), metadata=metadata)
        threading.Thread(target=self._read, daemon=True).start()

    def _requests(self):
        while True:
            message = self._out.get()
            if message is None:  # half-close
                return
            yield message

    def _read(self) -> None:
        try:
            for message in self._call:
                self._in.put(("message", message))
            self._in.put(("end", None))
        except grpc.RpcError as err:  # the status that ended the stream
            self._in.put(("status", err))

    def send(self, **fields) -> None:
        self._out.put(pb_ws.WorkerMessage(**fields))

    def next(self, timeout: float = PATIENCE):
        """("message", CoordinatorMessage) | ("end", None) | ("status", RpcError)."""
        try:
            return self._in.get(timeout=timeout)
        except queue.Empty:
            raise Mismatch(f"nothing from the server within {timeout} s") from None

    def expect(self, field: str):
        """The next message, which must be the oneof `field`; returns that sub-message."""
        kind, value = self.next()
        if kind != "message":
            raise Mismatch(f"expected {field}, got stream {kind}: {describe_end(kind, value)}")
        got = value.WhichOneof("message")
        if got != field:
            raise Mismatch(f"expected {field}, got {got}: {value}")
        return getattr(value, field)

    def expect_end(self):
        """Waits for the stream to end; returns None when it ended OK, else the gRPC code."""
        kind, value = self.next()
        if kind == "message":
            raise Mismatch(f"expected the stream to end, got {value}")
        return None if kind == "end" else value.code()

    def call(self, call_id: str, tool: str, command: str = "", path: str = ""):
        self.send(
            tool_call_request=pb_run.ToolCallRequest(
                run_id=self.run_id, call_id=call_id, tool=tool, command=command, path=path
            )
        )
        return self.expect("tool_call_response")

    def result(self, call_id: str, output: str, success: bool = True, cost_usd: float = 0.0):
        self.send(
            tool_call_result=pb_run.ToolCallResult(
                run_id=self.run_id, call_id=call_id, success=success, output=output, cost_usd=cost_usd
            )
        )

    def close(self) -> None:
        """Half-closes the request side: the polite way to leave."""
        self._out.put(None)

    def drop(self) -> None:
        """Cancels the call, as a crashed or disconnected worker would."""
        self._call.cancel()
        self._out.put(None)


def describe_end(kind: str, value) -> str:
    if kind == "status":
        return f"{value.code().name}: {value.details()}"
    return "ended normally"


class Operator:
    """RunService on its own channel, as a person or CI would call it, with the operator
    token on every call."""

    def __init__(self, conn: Connection) -> None:
        self.channel = conn.operator_channel()
        self.stub = rs_grpc.RunServiceStub(self.channel)

    def start(self, profile: str = "", task: str = "interop-task"):
        """The StartRunResponse: `.run`, and `.worker_token` for the attach (empty when the
        server runs with --auth off)."""
        return self.stub.StartRun(
            pb_run.StartRequest(
                task_id=task, agent_id="python-worker", project_id="runplane-interop", policy_profile=profile
            ),
            timeout=PATIENCE,
        )

    def get(self, run_id: str):
        return self.stub.GetRun(pb_rs.GetRunRequest(run_id=run_id), timeout=PATIENCE)

    def events(self, run_id: str):
        return self.stub.ListRunEvents(
            pb_rs.ListRunEventsRequest(run_id=run_id, page_size=1000), timeout=PATIENCE
        ).events


def status_code(callable_, *args, **kwargs):
    """Calls a unary RPC that must fail; returns its gRPC status code."""
    try:
        callable_(*args, **kwargs)
    except grpc.RpcError as err:
        return err.code()
    raise Mismatch(f"{callable_} succeeded but should have failed")


def attach(c: Checks, channel, run_id: str, worker_id: str, token: str):
    session = Session(channel, run_id, worker_id, token)
    attached = session.expect("attached")
    c.eq(attached.run.id, run_id, "attached.run.id")
    c.eq(enum_name(pb_run.RunStatus, attached.run.status), "RUN_STATUS_RUNNING", "attached.run.status")
    return session, attached


def decision(response) -> str:
    return enum_name(pb_run.Decision, response.decision)


# --- scenarios -----------------------------------------------------------------------------


def scenario_full(c: Checks, conn: Connection, _args) -> None:
    op = Operator(conn)
    worker_channel = conn.channel()
    started = op.start("")  # empty: the default profile
    run, token = started.run, started.worker_token
    auth_on = token != ""
    run_id = run.id
    c.eq(run.policy_profile, "headless-safe-sandbox", "default profile")
    c.eq(enum_name(pb_run.RunStatus, run.status), "RUN_STATUS_PENDING", "new run status")

    w, attached = attach(c, worker_channel, run_id, "py-worker-1", token)
    c.eq(attached.resumed, False, "first attach is not resumed")
    c.eq(attached.limits.max_steps, 50, "limits.max_steps")
    c.eq(attached.limits.stall_detection, True, "limits.stall_detection")
    c.eq(attached.limits.ask_timeout_seconds, 300, "limits.ask_timeout_seconds")

    # Allowed call and its result.
    r = w.call("c1", "Read", path="src/lib.rs")
    c.eq((r.call_id, r.run_id, decision(r)), ("c1", run_id, "DECISION_ALLOW"), "Read is allowed")
    w.result("c1", "fn main() {}", cost_usd=0.25)
    ack = w.expect("result_ack")
    c.eq((ack.call_id, ack.step_count), ("c1", 1), "result_ack of c1")
    c.true(abs(ack.cost_usd - 0.25) < 1e-9, f"result_ack cost 0.25, got {ack.cost_usd}")

    # Denied call: the shell-aware policy sees the second command.
    r = w.call("c2", "Bash", command="git status && rm -rf /")
    c.eq(decision(r), "DECISION_DENY", "git status && rm -rf / is denied")
    c.true("rm -rf /" in r.reason, f"deny reason names the command part: {r.reason!r}")
    # A result for a denied call is refused in-stream; the session goes on.
    w.result("c2", "should not have run")
    err = w.expect("error")
    c.eq((err.code, err.call_id), ("FAILED_PRECONDITION", "c2"), "result for a denied call")

    r = w.call("c3", "Bash", command="cargo test --locked")
    c.eq(decision(r), "DECISION_ALLOW", "cargo test is allowed")
    w.result("c3", "test result: ok. 12 passed")
    c.eq(w.expect("result_ack").step_count, 3, "step_count after c3")

    # An ask, answered by an operator from another thread on another channel.
    answer: dict = {}

    def operator_answers() -> None:
        try:
            resolver = Operator(conn)
            deadline = time.monotonic() + PATIENCE
            while time.monotonic() < deadline:
                asks = resolver.stub.ListPendingAsks(
                    pb_rs.ListPendingAsksRequest(run_id=run_id), timeout=PATIENCE
                ).asks
                if asks:
                    answer["pending"] = asks
                    break
                time.sleep(0.05)
            answer["response"] = resolver.stub.ResolveAsk(
                pb_rs.ResolveAskRequest(
                    run_id=run_id,
                    call_id="c4",
                    decision=pb_run.DECISION_ALLOW,
                    reason="approved by the interop operator",
                    resolver="interop-operator",
                ),
                timeout=PATIENCE,
            )
            resolver.channel.close()
        except Exception as exc:  # reported by the main thread
            answer["error"] = exc

    r = w.call("c4", "Edit", path="/etc/hosts")
    c.eq(decision(r), "DECISION_ASK", "Edit /etc/hosts is asked")
    operator = threading.Thread(target=operator_answers)
    operator.start()
    final = w.expect("tool_call_response")
    operator.join(PATIENCE)
    c.true("error" not in answer, f"operator thread failed: {answer.get('error')!r}")
    pending = answer.get("pending", [])
    c.eq(len(pending), 1, "one pending ask")
    c.eq((pending[0].request.call_id, pending[0].request.path), ("c4", "/etc/hosts"), "pending ask's call")
    c.true(pending[0].HasField("deadline"), "pending ask has a deadline")
    c.eq(decision(answer["response"]), "DECISION_ALLOW", "ResolveAsk returns the final decision")
    c.eq((final.call_id, decision(final)), ("c4", "DECISION_ALLOW"), "the worker gets the final allow")
    c.eq(final.reason, "approved by the interop operator", "final decision carries the operator's reason")
    w.result("c4", "edited /etc/hosts")
    c.eq(w.expect("result_ack").step_count, 4, "the resolution counts no step")
    again = status_code(
        op.stub.ResolveAsk,
        pb_rs.ResolveAskRequest(run_id=run_id, call_id="c4", decision=pb_run.DECISION_DENY),
        timeout=PATIENCE,
    )
    c.eq(again, grpc.StatusCode.FAILED_PRECONDITION, "resolving an answered ask again")

    # Idempotency: a repeated call_id gets the same decision and counts nothing.
    r = w.call("c2", "Bash", command="git status && rm -rf /")
    c.eq(decision(r), "DECISION_DENY", "repeated c2 is denied again")
    c.eq(op.get(run_id).step_count, 4, "a repeated call_id counts no step")

    # Malformed message: in-stream INVALID_ARGUMENT, nothing recorded, session goes on.
    w.send(tool_call_request=pb_run.ToolCallRequest(run_id=run_id, call_id="", tool="Read"))
    err = w.expect("error")
    c.eq((err.code, err.message), ("INVALID_ARGUMENT", "call_id: required"), "empty call_id")

    w.send(heartbeat=pb_ws.Heartbeat())
    beat = w.expect("heartbeat")
    c.eq(enum_name(pb_run.RunStatus, beat.status), "RUN_STATUS_RUNNING", "heartbeat status")

    # Drop the stream (as a crash would) and re-attach on a fresh stream.
    w.drop()
    c.eq(w.expect_end(), grpc.StatusCode.CANCELLED, "a cancelled call ends CANCELLED locally")
    w, attached = attach(c, worker_channel, run_id, "py-worker-1", token)
    c.eq(attached.resumed, True, "re-attach is resumed")
    c.eq(attached.run.step_count, 4, "re-attach keeps step_count")
    # After a re-attach, repeat a call_id to learn its decision; repeat a result: acked, not
    # recorded twice.
    r = w.call("c4", "Edit", path="/etc/hosts")
    c.eq(decision(r), "DECISION_ALLOW", "repeated c4 after re-attach: the final decision")
    w.result("c4", "edited /etc/hosts", cost_usd=5.0)
    ack = w.expect("result_ack")
    c.eq(ack.step_count, 4, "repeated result: step_count unchanged")
    c.true(abs(ack.cost_usd - 0.25) < 1e-9, f"repeated result: cost not added again ({ack.cost_usd})")

    # Completion through the quality gate.
    w.send(complete=pb_ws.RunComplete(status=pb_run.RUN_STATUS_COMPLETED, output="all done"))
    gate = w.expect("quality_gate_request")
    c.eq((gate.run_tests, gate.run_lint), (True, True), "gate asks for tests and lint")
    c.eq(enum_name(pb_run.RunStatus, op.get(run_id).status), "RUN_STATUS_QUALITY_GATE", "status in gate")
    w.send(
        quality_gate_result=pb_ws.QualityGateResult(
            tests_passed=True, lint_passed=True, test_output="ok", lint_output="clean"
        )
    )
    finished = w.expect("finished")
    c.eq(enum_name(pb_run.RunStatus, finished.run.status), "RUN_STATUS_COMPLETED", "finished status")
    c.eq(finished.run.output, "all done", "finished output")
    c.eq(w.expect_end(), None, "the server closes the stream OK after finished")

    run = op.get(run_id)
    c.eq(enum_name(pb_run.RunStatus, run.status), "RUN_STATUS_COMPLETED", "GetRun status")
    c.true(run.HasField("completed_at"), "completed_at set")
    c.eq(run.step_count, 4, "final step_count")
    events = op.events(run_id)
    c.eq([e.seq for e in events], list(range(1, len(events) + 1)), "event seqs are gapless from 1")
    types = [e.type for e in events]
    expected = [
        "run.created", "run.started", "run.worker.attached",
        "run.toolcall.approved", "run.toolcall.result",
        "run.toolcall.denied",
        "run.toolcall.approved", "run.toolcall.result",
        "run.toolcall.asked", "run.toolcall.resolved", "run.toolcall.result",
        "run.worker.detached", "run.worker.attached",
        "run.qualitygate.started", "run.qualitygate.passed",
        # `finished` ends the stream: its detach is recorded with the run's end.
        "run.worker.detached", "run.completed",
    ]
    c.eq(types, expected, "event log")
    # Who did what: the operator token's name as `by` (anonymous with --auth off); the
    # resolver text is only a note.
    created, resolved = events[0].attributes, events[types.index("run.toolcall.resolved")].attributes
    c.true(created["by"] != "", f"run.created names who started the run: {dict(created)}")
    c.eq(created["by"] != "anonymous", auth_on, "run.created by is the token's name when auth is on")
    c.eq((resolved["by"], resolved["note"]), (created["by"], "interop-operator"), "run.toolcall.resolved by and note")

    # Attach errors end the stream with a status. With authentication on, the worker token
    # expires with its run, so a late attach is UNAUTHENTICATED before the run is looked up.
    late = Session(worker_channel, run_id, "late", token)
    c.eq(
        late.expect_end(),
        grpc.StatusCode.UNAUTHENTICATED if auth_on else grpc.StatusCode.FAILED_PRECONDITION,
        "attach to a finished run",
    )
    if not auth_on:  # with auth, no token can name an unknown run: see the auth scenario
        unknown = Session(worker_channel, "no-such-run", "lost")
        c.eq(unknown.expect_end(), grpc.StatusCode.NOT_FOUND, "attach to an unknown run")
    broken = ws_grpc.WorkerServiceStub(worker_channel).Session(
        iter([pb_ws.WorkerMessage(heartbeat=pb_ws.Heartbeat())])
    )
    try:
        list(broken)
        raise Mismatch("a session that does not start with attach was accepted")
    except grpc.RpcError as e:
        c.eq(e.code(), grpc.StatusCode.INVALID_ARGUMENT, "first message not attach")
    worker_channel.close()
    op.channel.close()


def scenario_stall(c: Checks, conn: Connection, args) -> None:
    op = Operator(conn)
    channel = conn.channel()
    started = op.start(args.stall_profile)
    run_id = started.run.id
    w, attached = attach(c, channel, run_id, "py-stall", started.worker_token)
    c.eq((attached.limits.stall_detection, attached.limits.stall_threshold), (True, 3), "stall limits")
    # The first identical output is progress; each repeat is one step without progress.
    # With threshold 3 the fourth result ends the run.
    for i in range(4):
        r = w.call(f"s{i}", "Bash", command="make build")
        c.eq(decision(r), "DECISION_ALLOW", f"s{i} allowed")
        w.result(f"s{i}", "same output every time")
        c.eq(w.expect("result_ack").call_id, f"s{i}", f"s{i} acknowledged")
    term = w.expect("terminate")
    c.eq(enum_name(pb_run.RunStatus, term.status), "RUN_STATUS_FAILED", "terminate status")
    c.eq(term.reason, "stall detected", "terminate reason")
    run = op.get(run_id)
    c.eq((enum_name(pb_run.RunStatus, run.status), run.error), ("RUN_STATUS_FAILED", "stall detected"), "run")
    c.true("run.stall_detected" in [e.type for e in op.events(run_id)], "run.stall_detected logged")
    r = w.call("s9", "Read", path="x")
    c.eq((decision(r), r.reason), ("DECISION_DENY", "run is not running"), "calls after terminate")
    w.send(heartbeat=pb_ws.Heartbeat())
    c.eq(enum_name(pb_run.RunStatus, w.expect("heartbeat").status), "RUN_STATUS_FAILED", "heartbeat")
    # The server keeps the stream open after terminate; the worker leaves.
    w.close()
    c.eq(w.expect_end(), None, "stream ends OK after the worker half-closes")
    channel.close()
    op.channel.close()


def scenario_cancel(c: Checks, conn: Connection, _args) -> None:
    op = Operator(conn)
    channel = conn.channel()
    started = op.start("plan-readonly")
    run_id = started.run.id
    w, _ = attach(c, channel, run_id, "py-cancel", started.worker_token)
    r = w.call("p1", "Write", path="src/main.rs")
    c.eq(decision(r), "DECISION_DENY", "Write under plan-readonly")
    cancelled = op.stub.CancelRun(pb_rs.CancelRunRequest(run_id=run_id, reason="wrong task"), timeout=PATIENCE)
    c.eq(enum_name(pb_run.RunStatus, cancelled.status), "RUN_STATUS_CANCELLED", "CancelRun result")
    c.eq(w.expect("cancel").reason, "wrong task", "cancel reason")
    r = w.call("p2", "Read", path="a")
    c.eq((decision(r), r.reason), ("DECISION_DENY", "run is not running"), "calls after cancel")
    w.send(heartbeat=pb_ws.Heartbeat())
    c.eq(enum_name(pb_run.RunStatus, w.expect("heartbeat").status), "RUN_STATUS_CANCELLED", "heartbeat")
    again = status_code(op.stub.CancelRun, pb_rs.CancelRunRequest(run_id=run_id), timeout=PATIENCE)
    c.eq(again, grpc.StatusCode.FAILED_PRECONDITION, "cancelling twice")
    w.close()
    c.eq(w.expect_end(), None, "stream ends OK after the worker half-closes")
    channel.close()
    op.channel.close()


def scenario_oversize(c: Checks, conn: Connection, _args) -> None:
    op = Operator(conn)
    channel = conn.channel()
    started = op.start("trusted-mount-autonomous")
    run_id, token = started.run.id, started.worker_token
    w, _ = attach(c, channel, run_id, "py-big", token)
    c.eq(decision(w.call("b1", "Bash", command="make")), "DECISION_ALLOW", "make allowed")
    w.result("b1", "x" * (5 * 1024 * 1024))  # over the default 4 MiB
    code = w.expect_end()
    c.true(
        code in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.OUT_OF_RANGE),
        f"oversize message ends the stream with RESOURCE_EXHAUSTED/OUT_OF_RANGE, got {code}",
    )
    run = op.get(run_id)
    c.eq((enum_name(pb_run.RunStatus, run.status), run.step_count), ("RUN_STATUS_RUNNING", 1), "nothing lost")
    w, attached = attach(c, channel, run_id, "py-big", token)
    c.eq(attached.resumed, True, "re-attach after the size error")
    w.result("b1", "small output")
    c.eq(w.expect("result_ack").call_id, "b1", "the small result is recorded")
    w.send(complete=pb_ws.RunComplete(status=pb_run.RUN_STATUS_COMPLETED, output="built"))
    finished = w.expect("finished")  # no quality gate in trusted-mount-autonomous
    c.eq(enum_name(pb_run.RunStatus, finished.run.status), "RUN_STATUS_COMPLETED", "finished without gate")
    c.eq(w.expect_end(), None, "stream ends OK")
    channel.close()
    op.channel.close()


def scenario_reflection(c: Checks, conn: Connection, _args) -> None:
    """grpc.reflection.v1 list_services, with the request and response hand-encoded: field 7
    (list_services) = "" → b"\\x3a\\x00"; service names appear verbatim in the response.
    Reflection needs an operator token (any role) when authentication is on."""
    channel = conn.operator_channel()
    for version in ("v1", "v1alpha"):
        method = f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo"
        call = channel.stream_stream(method, request_serializer=None, response_deserializer=None)
        replies = list(call(iter([b"\x3a\x00"]), timeout=PATIENCE))
        c.eq(len(replies), 1, f"reflection {version}: one reply")
        for service in (b"runplane.v1.RunService", b"runplane.v1.WorkerService", b"runplane.v1.PolicyService"):
            c.true(service in replies[0], f"reflection {version} lists {service.decode()}")
    channel.close()


def health_check(channel) -> int:
    """grpc.health.v1.Health/Check of the whole server, hand-encoded: an empty request; the
    reply's field 1 (status) as a varint, SERVING = 1 → b"\\x08\\x01"."""
    check = channel.unary_unary("/grpc.health.v1.Health/Check", request_serializer=None, response_deserializer=None)
    reply = check(b"", timeout=PATIENCE)
    return reply[1] if reply[:1] == b"\x08" else 0


def scenario_auth(c: Checks, conn: Connection, _args) -> None:
    op = Operator(conn)
    bare = conn.channel()  # no operator credentials
    started = op.start("trusted-mount-autonomous", task="interop-auth")
    run_id, token = started.run.id, started.worker_token
    c.eq(health_check(bare), 1, "health check without a token is SERVING")
    if not token:
        # --auth off: nothing is checked; calls without a token work.
        runs = rs_grpc.RunServiceStub(bare).ListRuns(pb_rs.ListRunsRequest(), timeout=PATIENCE)
        c.true(run_id in [r.id for r in runs.runs], "with --auth off, ListRuns needs no token")
        print("python worker: auth: the server runs with --auth off; credential checks skipped", flush=True)
        op.stub.CancelRun(pb_rs.CancelRunRequest(run_id=run_id), timeout=PATIENCE)
        bare.close()
        op.channel.close()
        return
    c.true(token.startswith("rpw_") and len(token) == 68, f"worker_token is rpw_ + 64 hex digits: {token[:8]}…")

    def code_of(channel):
        """The status of a ListRuns (viewer role) that must fail."""
        stub = rs_grpc.RunServiceStub(channel)
        return status_code(stub.ListRuns, pb_rs.ListRunsRequest(), timeout=PATIENCE)

    c.eq(code_of(bare), grpc.StatusCode.UNAUTHENTICATED, "ListRuns without a token")
    malformed = conn.operator_channel("not-a-token")
    c.eq(code_of(malformed), grpc.StatusCode.UNAUTHENTICATED, "ListRuns with a malformed token")
    unknown = conn.operator_channel("rpo_" + "0" * 64)
    c.eq(code_of(unknown), grpc.StatusCode.UNAUTHENTICATED, "ListRuns with an unknown token")
    as_worker = conn.operator_channel(token)
    c.eq(code_of(as_worker), grpc.StatusCode.PERMISSION_DENIED, "ListRuns with a worker token")
    c.eq(
        status_code(
            rs_grpc.RunServiceStub(as_worker).StartRun,
            pb_run.StartRequest(task_id="t", agent_id="a", project_id="p"),
            timeout=PATIENCE,
        ),
        grpc.StatusCode.PERMISSION_DENIED,
        "StartRun with a worker token",
    )

    # The session: only this run's worker token opens it.
    other = op.start("trusted-mount-autonomous", task="interop-auth-other")
    none = Session(bare, run_id, "py-auth")
    c.eq(none.expect_end(), grpc.StatusCode.UNAUTHENTICATED, "attach without a token")
    wrong = Session(bare, run_id, "py-auth", other.worker_token)
    c.eq(wrong.expect_end(), grpc.StatusCode.PERMISSION_DENIED, "attach with another run's worker token")
    operator_token = Session(bare, run_id, "py-auth", conn.token)
    c.eq(operator_token.expect_end(), grpc.StatusCode.PERMISSION_DENIED, "attach with an operator token")
    lost = Session(bare, "no-such-run", "py-auth", token)
    c.eq(lost.expect_end(), grpc.StatusCode.PERMISSION_DENIED, "attach to an unknown run with a worker token")
    # The worker token may come in the metadata instead of Attach.token.
    w = Session(bare, run_id, "py-auth", metadata=[("authorization", f"Bearer {token}")])
    c.eq(w.expect("attached").run.id, run_id, "attach with the worker token in the metadata")
    w.send(complete=pb_ws.RunComplete(status=pb_run.RUN_STATUS_COMPLETED, output="auth checked"))
    c.eq(enum_name(pb_run.RunStatus, w.expect("finished").run.status), "RUN_STATUS_COMPLETED", "finished")
    c.eq(w.expect_end(), None, "stream ends OK")
    # The token expires with its run.
    late = Session(bare, run_id, "py-auth", token)
    c.eq(late.expect_end(), grpc.StatusCode.UNAUTHENTICATED, "the worker token of an ended run")
    cancelled = op.stub.CancelRun(pb_rs.CancelRunRequest(run_id=other.run.id, reason="auth checked"), timeout=PATIENCE)
    c.eq(enum_name(pb_run.RunStatus, cancelled.status), "RUN_STATUS_CANCELLED", "cancel the other run")
    by = {e.type: e.attributes.get("by") for e in op.events(other.run.id)}
    c.eq(by["run.cancelled"], by["run.created"], "run.cancelled names the same token as run.created")
    for channel in (bare, malformed, unknown, as_worker, op.channel):
        channel.close()


def scenario_needs_client_cert(c: Checks, conn: Connection, _args) -> None:
    if conn.credentials is None or conn.client_cert:
        raise Mismatch("needs-client-cert needs --ca-cert and no --client-cert")
    op = Operator(conn)
    started = op.start("trusted-mount-autonomous", task="interop-no-client-cert")
    c.true(started.worker_token != "", "StartRun over TLS without a client certificate works")
    channel = conn.channel()
    w = Session(channel, started.run.id, "py-no-cert", started.worker_token)
    kind, value = w.next()
    c.eq(kind, "status", "the attach is refused with a status")
    c.eq(value.code(), grpc.StatusCode.UNAUTHENTICATED, "attach without a client certificate")
    c.true("client certificate" in value.details(), f"the refusal says why: {value.details()!r}")
    op.stub.CancelRun(pb_rs.CancelRunRequest(run_id=started.run.id), timeout=PATIENCE)
    channel.close()
    op.channel.close()


SCENARIOS = {
    "full": scenario_full,
    "stall": scenario_stall,
    "cancel": scenario_cancel,
    "oversize": scenario_oversize,
    "reflection": scenario_reflection,
    "auth": scenario_auth,
}
# Only when named on the command line.
EXTRA_SCENARIOS = {
    "needs-client-cert": scenario_needs_client_cert,
}


def read_token_file(path: pathlib.Path):
    """The first line of the token file; None when there is none (the server then answers
    UNAUTHENTICATED, unless it runs with --auth off)."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return None
    return lines[0].strip() if lines and lines[0].strip() else None


def main() -> int:
    parser = argparse.ArgumentParser(description="runplane interop worker (Python)")
    parser.add_argument("--target", default="127.0.0.1:50051", help="host:port of runplane serve")
    parser.add_argument("--gen", type=pathlib.Path, default=HERE / "gen", help="output of generate.py")
    parser.add_argument("--stall-profile", default="interop-stall", help="profile with stall_threshold = 3")
    parser.add_argument(
        "--token",
        default=os.environ.get("RUNPLANE_TOKEN") or None,
        help="operator token for operator calls [env RUNPLANE_TOKEN]; wins over --token-file",
    )
    parser.add_argument(
        "--token-file",
        type=pathlib.Path,
        default=pathlib.Path(os.environ.get("RUNPLANE_TOKEN_FILE") or DEFAULT_TOKEN_FILE),
        help=f"file whose first line is the operator token [env RUNPLANE_TOKEN_FILE, default {DEFAULT_TOKEN_FILE}]",
    )
    parser.add_argument(
        "--ca-cert",
        type=pathlib.Path,
        default=os.environ.get("RUNPLANE_CA_CERT") or None,
        help="PEM CA certificate of the server: connect with TLS [env RUNPLANE_CA_CERT]",
    )
    parser.add_argument("--client-cert", type=pathlib.Path, help="PEM client certificate for mutual TLS")
    parser.add_argument("--client-key", type=pathlib.Path, help="PEM private key of --client-cert")
    every = {**SCENARIOS, **EXTRA_SCENARIOS}
    parser.add_argument(
        "scenarios", nargs="*", help=f"any of {', '.join(every)} (default: {', '.join(SCENARIOS)})"
    )
    args = parser.parse_args()
    args.scenarios = args.scenarios or list(SCENARIOS)
    unknown = [name for name in args.scenarios if name not in every]
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(every)}")
    if (args.client_cert is None) != (args.client_key is None):
        parser.error("--client-cert and --client-key go together")
    if args.client_cert is not None and args.ca_cert is None:
        parser.error("--client-cert needs --ca-cert (TLS)")

    global grpc, pb_run, pb_rs, pb_ws, pb_pol, rs_grpc, ws_grpc
    sys.path.insert(0, str(args.gen))
    import grpc as _grpc
    from runplane.v1 import policy_pb2, run_pb2, run_service_pb2, run_service_pb2_grpc
    from runplane.v1 import worker_service_pb2, worker_service_pb2_grpc

    grpc = _grpc
    pb_run, pb_rs, pb_ws, pb_pol = run_pb2, run_service_pb2, worker_service_pb2, policy_pb2
    rs_grpc, ws_grpc = run_service_pb2_grpc, worker_service_pb2_grpc

    token = args.token.strip() if args.token and args.token.strip() else read_token_file(args.token_file)
    credentials = None
    if args.ca_cert is not None:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=args.ca_cert.read_bytes(),
            private_key=args.client_key.read_bytes() if args.client_key else None,
            certificate_chain=args.client_cert.read_bytes() if args.client_cert else None,
        )
    conn = Connection(args.target, token, credentials, client_cert=args.client_cert is not None)
    if token is None:
        print(
            f"python worker: no operator token (--token, RUNPLANE_TOKEN, {args.token_file}): operator calls "
            "go without one, which only a server with --auth off accepts",
            file=sys.stderr,
            flush=True,
        )

    failed = []
    checks = Checks()
    for name in args.scenarios:
        started = time.monotonic()
        try:
            every[name](checks, conn, args)
            print(f"python worker: {name}: ok ({time.monotonic() - started:.1f} s)", flush=True)
        except Mismatch as mismatch:
            failed.append(name)
            print(f"python worker: {name}: MISMATCH: {mismatch}", flush=True)
        except Exception:  # a crash is a failure too, with its trace
            failed.append(name)
            print(f"python worker: {name}: ERROR", flush=True)
            traceback.print_exc()
    total = len(args.scenarios)
    print(f"python worker: {total - len(failed)} passed, {len(failed)} failed ({checks.passed} checks)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
