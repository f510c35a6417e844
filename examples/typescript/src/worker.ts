// A runplane worker in TypeScript: Connect's gRPC transport over HTTP/2 against a live
// `runplane serve`. It starts runs, attaches, asks for an allowed and a denied tool call,
// reports a result, and completes (once without a quality gate, once through it), checking
// every answer. Exits 0 when all checks pass, 1 otherwise.
//
//   npm ci && npm run generate      # gen/ from ../../proto with the local protoc-gen-es
//   npx tsx src/worker.ts --target 127.0.0.1:50051

import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";

import { Decision, RunStatus, ToolCallRequestSchema, ToolCallResultSchema } from "../gen/runplane/v1/run_pb.js";
import { RunService } from "../gen/runplane/v1/run_service_pb.js";
import {
  type CoordinatorMessage,
  type WorkerMessage,
  WorkerMessageSchema,
  WorkerService,
} from "../gen/runplane/v1/worker_service_pb.js";

const PATIENCE_MS = 10_000;
/** runplane's default limit in both directions (`runplane serve --max-message-bytes`). */
const MAX_MESSAGE_BYTES = 4 * 1024 * 1024;

class Mismatch extends Error {}

let checks = 0;

function eq<T>(actual: T, expected: T, what: string): void {
  const a = JSON.stringify(actual);
  const e = JSON.stringify(expected);
  if (a !== e) throw new Mismatch(`${what}: expected ${e}, got ${a}`);
  checks++;
}

/** The request side of a bidi stream: messages pushed here are sent in order. An async
 * generator, because Connect calls `throw`/`return` on the iterator when the call ends. */
class Outbox<T> implements AsyncIterable<T> {
  private items: T[] = [];
  private wake?: () => void;
  private closed = false;

  push(item: T): void {
    this.items.push(item);
    this.notify();
  }

  /** Half-closes the stream. */
  close(): void {
    this.closed = true;
    this.notify();
  }

  private notify(): void {
    const wake = this.wake;
    this.wake = undefined;
    wake?.();
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<T> {
    for (;;) {
      const item = this.items.shift();
      if (item !== undefined) {
        yield item;
      } else if (this.closed) {
        return;
      } else {
        await new Promise<void>((resolve) => (this.wake = resolve));
      }
    }
  }
}

type Out = NonNullable<CoordinatorMessage["message"]["case"]>;
type OutValue<C extends Out> = Extract<CoordinatorMessage["message"], { case: C }>["value"];

function withTimeout<T>(promise: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Mismatch(`no ${what} within ${PATIENCE_MS} ms`)), PATIENCE_MS);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** One WorkerService.Session stream. */
class Session {
  private readonly outbox = new Outbox<WorkerMessage>();
  private readonly abort = new AbortController();
  private readonly responses: AsyncIterator<CoordinatorMessage>;

  constructor(
    workers: Client<typeof WorkerService>,
    readonly runId: string,
    workerId: string,
  ) {
    this.send({ message: { case: "attach", value: { runId, workerId, workspaceRoot: "/work/repo" } } });
    this.responses = workers.session(this.outbox, { signal: this.abort.signal })[Symbol.asyncIterator]();
  }

  send(init: MessageInitShape<typeof WorkerMessageSchema>): void {
    this.outbox.push(create(WorkerMessageSchema, init));
  }

  /** The next message, which must be the oneof case `kind`. */
  async expect<C extends Out>(kind: C): Promise<OutValue<C>> {
    const next = await withTimeout(this.responses.next(), kind);
    if (next.done) throw new Mismatch(`expected ${kind}, the stream ended`);
    const message = next.value.message;
    if (message.case !== kind) throw new Mismatch(`expected ${kind}, got ${message.case}: ${JSON.stringify(message.value)}`);
    return message.value as OutValue<C>;
  }

  /** Waits for the end of the stream: undefined when it ended OK, else the error's code. */
  async end(): Promise<Code | undefined> {
    try {
      const next = await withTimeout(this.responses.next(), "end of stream");
      if (!next.done) throw new Mismatch(`expected the stream to end, got ${next.value.message.case}`);
      return undefined;
    } catch (err) {
      if (err instanceof Mismatch) throw err;
      return ConnectError.from(err).code;
    }
  }

  async call(callId: string, tool: string, fields: { command?: string; path?: string } = {}) {
    this.send({
      message: {
        case: "toolCallRequest",
        value: create(ToolCallRequestSchema, { runId: this.runId, callId, tool, ...fields }),
      },
    });
    return this.expect("toolCallResponse");
  }

  result(callId: string, output: string, costUsd = 0): void {
    this.send({
      message: {
        case: "toolCallResult",
        value: create(ToolCallResultSchema, { runId: this.runId, callId, success: true, output, costUsd }),
      },
    });
  }

  close(): void {
    this.outbox.close();
  }

  drop(): void {
    this.abort.abort();
  }
}

interface Clients {
  runs: Client<typeof RunService>;
  workers: Client<typeof WorkerService>;
}

async function attach(c: Clients, runId: string, workerId: string, resumed = false): Promise<Session> {
  const session = new Session(c.workers, runId, workerId);
  const attached = await session.expect("attached");
  eq(attached.run?.id, runId, "attached.run.id");
  eq(RunStatus[attached.run!.status], "RUNNING", "attached.run.status");
  eq(attached.resumed, resumed, "attached.resumed");
  return session;
}

async function startRun(c: Clients, profile: string): Promise<string> {
  const { run } = await c.runs.startRun({
    taskId: "ts-task",
    agentId: "typescript-worker",
    projectId: "runplane-interop",
    policyProfile: profile,
  });
  eq(RunStatus[run!.status], "PENDING", "new run status");
  eq(run!.policyProfile, profile, "policy profile");
  return run!.id;
}

/** trusted-mount-autonomous: no quality gate, so `complete` finishes the run at once. */
async function noGate(c: Clients): Promise<void> {
  const runId = await startRun(c, "trusted-mount-autonomous");
  let w = await attach(c, runId, "ts-worker");

  const allowed = await w.call("t1", "Bash", { command: "npm test" });
  eq([allowed.callId, allowed.runId, Decision[allowed.decision]], ["t1", runId, "ALLOW"], "Bash npm test");
  w.result("t1", "all tests passed", 0.5);
  const ack = await w.expect("resultAck");
  eq([ack.callId, ack.stepCount, ack.costUsd], ["t1", 1, 0.5], "result_ack");

  const denied = await w.call("t2", "Edit", { path: ".env" });
  eq(Decision[denied.decision], "DENY", "Edit .env under trusted-mount-autonomous");

  // Drop the stream and re-attach: the run goes on where it was.
  w.drop();
  eq(Code[(await w.end())!], "Canceled", "an aborted call ends Canceled locally");
  w = await attach(c, runId, "ts-worker", true);
  const again = await w.call("t2", "Edit", { path: ".env" });
  eq(Decision[again.decision], "DENY", "a repeated call_id after re-attach gets its decision");

  w.send({ message: { case: "heartbeat", value: {} } });
  eq(RunStatus[(await w.expect("heartbeat")).status], "RUNNING", "heartbeat status");

  w.send({ message: { case: "complete", value: { status: RunStatus.COMPLETED, output: "done from TypeScript" } } });
  const finished = await w.expect("finished");
  eq(RunStatus[finished.run!.status], "COMPLETED", "finished status");
  eq(finished.run!.output, "done from TypeScript", "finished output");
  eq(await w.end(), undefined, "the stream ends OK after finished");

  const run = await c.runs.getRun({ runId });
  eq([RunStatus[run.status], run.stepCount, run.costUsd], ["COMPLETED", 2, 0.5], "GetRun after completion");
  const { events } = await c.runs.listRunEvents({ runId });
  eq(
    events.map((e) => e.type),
    [
      "run.created",
      "run.started",
      "run.worker.attached",
      "run.toolcall.approved",
      "run.toolcall.result",
      "run.toolcall.denied",
      "run.worker.detached",
      "run.worker.attached",
      "run.completed",
    ],
    "event log",
  );
}

/** headless-safe-sandbox: the quality gate is asked for and answered. */
async function withGate(c: Clients): Promise<void> {
  const runId = await startRun(c, "headless-safe-sandbox");
  const w = await attach(c, runId, "ts-worker");
  eq(Decision[(await w.call("g1", "Read", { path: "src/lib.rs" })).decision], "ALLOW", "Read");
  const rm = await w.call("g2", "Bash", { command: "git status && rm -rf /" });
  eq(Decision[rm.decision], "DENY", "git status && rm -rf /");

  w.send({ message: { case: "complete", value: { status: RunStatus.COMPLETED, output: "gated" } } });
  const gate = await w.expect("qualityGateRequest");
  eq([gate.runTests, gate.runLint], [true, true], "gate asks for tests and lint");
  w.send({ message: { case: "qualityGateResult", value: { testsPassed: true, lintPassed: true } } });
  const finished = await w.expect("finished");
  eq(RunStatus[finished.run!.status], "COMPLETED", "finished after the gate");
  eq(await w.end(), undefined, "the stream ends OK after finished");
}

/** Status codes a worker must handle when attaching. */
async function attachErrors(c: Clients): Promise<void> {
  const unknown = new Session(c.workers, "no-such-run", "ts-lost");
  eq(Code[(await unknown.end())!], "NotFound", "attach to an unknown run");
  try {
    await c.runs.getRun({ runId: "no-such-run" });
    throw new Mismatch("GetRun of an unknown run succeeded");
  } catch (err) {
    if (err instanceof Mismatch) throw err;
    eq(Code[ConnectError.from(err).code], "NotFound", "GetRun of an unknown run");
  }
}

async function main(): Promise<number> {
  const args = process.argv.slice(2);
  const at = args.indexOf("--target");
  const target = at >= 0 ? args[at + 1] : "127.0.0.1:50051";
  const transport = createGrpcTransport({
    baseUrl: `http://${target}`,
    // Match the server's limits (both default to 4 MiB).
    readMaxBytes: MAX_MESSAGE_BYTES,
    writeMaxBytes: MAX_MESSAGE_BYTES,
  });
  const clients: Clients = {
    runs: createClient(RunService, transport),
    workers: createClient(WorkerService, transport),
  };
  const scenarios: [string, (c: Clients) => Promise<void>][] = [
    ["no-gate", noGate],
    ["gate", withGate],
    ["attach-errors", attachErrors],
  ];
  let failed = 0;
  for (const [name, scenario] of scenarios) {
    const started = Date.now();
    try {
      await scenario(clients);
      console.log(`typescript worker: ${name}: ok (${((Date.now() - started) / 1000).toFixed(1)} s)`);
    } catch (err) {
      failed++;
      const kind = err instanceof Mismatch ? "MISMATCH" : "ERROR";
      console.log(`typescript worker: ${name}: ${kind}: ${err instanceof Error ? err.stack ?? err.message : err}`);
    }
  }
  console.log(`typescript worker: ${scenarios.length - failed} passed, ${failed} failed (${checks} checks)`);
  return failed === 0 ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
