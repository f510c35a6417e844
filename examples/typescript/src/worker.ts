// A runplane worker in TypeScript: Connect's gRPC transport over HTTP/2 against a live
// `runplane serve`. It starts runs, attaches, asks for an allowed and a denied tool call,
// reports a result, and completes (once without a quality gate, once through it), checking
// every answer. Exits 0 when all checks pass, 1 otherwise.
//
//   npm ci && npm run generate      # gen/ from ../../proto with the local protoc-gen-es
//   npx tsx src/worker.ts --target 127.0.0.1:50051 [--token T | --token-file FILE]
//                         [--ca-cert FILE [--client-cert FILE --client-key FILE]]
//
// Operator calls (RunService) carry `authorization: Bearer <token>`, added by a transport
// interceptor; the token is found as the runplane CLI finds it: --token or RUNPLANE_TOKEN,
// else the first line of --token-file or RUNPLANE_TOKEN_FILE (default
// ./runplane-data/operator.token, where `runplane serve` writes its admin token). Worker
// sessions go over a transport without it: each Attach carries its run's worker_token.
// --ca-cert connects with TLS (https, the CA that signed the server's certificate);
// --client-cert/--client-key add the client certificate that a server started with
// --tls-client-ca requires of worker sessions.

import { readFileSync } from "node:fs";

import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
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
/** Where `runplane serve` writes its admin token, relative to the directory it runs in. */
const DEFAULT_TOKEN_FILE = "./runplane-data/operator.token";
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

  /** `token`: the run's worker_token from StartRun (empty while auth is off). */
  constructor(
    workers: Client<typeof WorkerService>,
    readonly runId: string,
    workerId: string,
    token: string,
  ) {
    this.send({ message: { case: "attach", value: { runId, workerId, token, workspaceRoot: "/work/repo" } } });
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
  /** RunService with the operator token on every call. */
  runs: Client<typeof RunService>;
  /** RunService without credentials. */
  anonymousRuns: Client<typeof RunService>;
  workers: Client<typeof WorkerService>;
}

interface Started {
  runId: string;
  /** For Attach.token; empty when the server runs with --auth off. */
  token: string;
}

async function attach(c: Clients, run: Started, workerId: string, resumed = false): Promise<Session> {
  const runId = run.runId;
  const session = new Session(c.workers, runId, workerId, run.token);
  const attached = await session.expect("attached");
  eq(attached.run?.id, runId, "attached.run.id");
  eq(RunStatus[attached.run!.status], "RUNNING", "attached.run.status");
  eq(attached.resumed, resumed, "attached.resumed");
  return session;
}

async function startRun(c: Clients, profile: string): Promise<Started> {
  const { run, workerToken } = await c.runs.startRun({
    taskId: "ts-task",
    agentId: "typescript-worker",
    projectId: "runplane-interop",
    policyProfile: profile,
  });
  eq(RunStatus[run!.status], "PENDING", "new run status");
  eq(run!.policyProfile, profile, "policy profile");
  return { runId: run!.id, token: workerToken };
}

/** trusted-mount-autonomous: no quality gate, so `complete` finishes the run at once. */
async function noGate(c: Clients): Promise<void> {
  const started = await startRun(c, "trusted-mount-autonomous");
  const runId = started.runId;
  let w = await attach(c, started, "ts-worker");

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
  w = await attach(c, started, "ts-worker", true);
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
      // `finished` ends the stream: its detach is recorded with the run's end.
      "run.worker.detached",
      "run.completed",
    ],
    "event log",
  );
}

/** headless-safe-sandbox: the quality gate is asked for and answered. */
async function withGate(c: Clients): Promise<void> {
  const w = await attach(c, await startRun(c, "headless-safe-sandbox"), "ts-worker");
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

/** The code of a call that must fail. */
async function failsWith(call: () => Promise<unknown>, what: string): Promise<string> {
  try {
    await call();
  } catch (err) {
    return Code[ConnectError.from(err).code];
  }
  throw new Mismatch(`${what} succeeded`);
}

/** Status codes a worker must handle when attaching, and the credentials checks. */
async function attachErrors(c: Clients): Promise<void> {
  eq(await failsWith(() => c.runs.getRun({ runId: "no-such-run" }), "GetRun"), "NotFound", "GetRun of an unknown run");
  const run = await startRun(c, "trusted-mount-autonomous");
  const authOn = run.token !== "";
  if (authOn) {
    // Nothing but its own run's session opens with a worker token; no token opens nothing.
    eq(await failsWith(() => c.anonymousRuns.getRun({ runId: run.runId }), "GetRun"), "Unauthenticated", "GetRun without a token");
    const asWorker = { headers: { authorization: `Bearer ${run.token}` } };
    eq(await failsWith(() => c.anonymousRuns.listRuns({}, asWorker), "ListRuns"), "PermissionDenied", "ListRuns with a worker token");
    const none = new Session(c.workers, run.runId, "ts-none", "");
    eq(Code[(await none.end())!], "Unauthenticated", "attach without a worker token");
    const elsewhere = new Session(c.workers, "no-such-run", "ts-lost", run.token);
    eq(Code[(await elsewhere.end())!], "PermissionDenied", "attach to another run with this run's worker token");
  } else {
    const unknown = new Session(c.workers, "no-such-run", "ts-lost", "");
    eq(Code[(await unknown.end())!], "NotFound", "attach to an unknown run");
  }
  const cancelled = await c.runs.cancelRun({ runId: run.runId, reason: "attach errors checked" });
  eq(RunStatus[cancelled.status], "CANCELLED", "CancelRun");
}

/** The value of `--name`, else `env`, else `fallback`. */
function option(args: string[], name: string, env?: string, fallback?: string): string | undefined {
  const at = args.indexOf(name);
  if (at >= 0) {
    if (at + 1 >= args.length) throw new Error(`${name} needs a value`);
    return args[at + 1];
  }
  const fromEnv = env === undefined ? undefined : process.env[env];
  return fromEnv ? fromEnv : fallback;
}

/** --token / RUNPLANE_TOKEN, else the first line of the token file; undefined if none. */
function operatorToken(args: string[]): string | undefined {
  const token = option(args, "--token", "RUNPLANE_TOKEN")?.trim();
  if (token) return token;
  const file = option(args, "--token-file", "RUNPLANE_TOKEN_FILE", DEFAULT_TOKEN_FILE)!;
  try {
    return readFileSync(file, "utf8").split("\n")[0].trim() || undefined;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") {
      console.error(`typescript worker: no operator token (--token, RUNPLANE_TOKEN, ${file}); operator calls go without one`);
      return undefined;
    }
    throw err;
  }
}

/** Adds `authorization: Bearer <token>` to every request of the transport. */
function bearer(token: string): Interceptor {
  return (next) => (request) => {
    request.header.set("authorization", `Bearer ${token}`);
    return next(request);
  };
}

async function main(): Promise<number> {
  const args = process.argv.slice(2);
  const target = option(args, "--target", undefined, "127.0.0.1:50051");
  const token = operatorToken(args);
  const caCert = option(args, "--ca-cert", "RUNPLANE_CA_CERT");
  const clientCert = option(args, "--client-cert");
  const clientKey = option(args, "--client-key");
  if ((clientCert === undefined) !== (clientKey === undefined)) throw new Error("--client-cert and --client-key go together");
  if (clientCert !== undefined && caCert === undefined) throw new Error("--client-cert needs --ca-cert (TLS)");
  const transport = (interceptors: Interceptor[]) =>
    createGrpcTransport({
      baseUrl: caCert === undefined ? `http://${target}` : `https://${target}`,
      // TLS: trust the CA that signed the server's certificate; present a client
      // certificate if given (Node's http2.connect options).
      nodeOptions:
        caCert === undefined
          ? undefined
          : {
              ca: readFileSync(caCert),
              cert: clientCert === undefined ? undefined : readFileSync(clientCert),
              key: clientKey === undefined ? undefined : readFileSync(clientKey),
            },
      interceptors,
      // Match the server's limits (both default to 4 MiB).
      readMaxBytes: MAX_MESSAGE_BYTES,
      writeMaxBytes: MAX_MESSAGE_BYTES,
    });
  const plain = transport([]);
  const clients: Clients = {
    runs: createClient(RunService, token === undefined ? plain : transport([bearer(token)])),
    anonymousRuns: createClient(RunService, plain),
    workers: createClient(WorkerService, plain),
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
