// The API, through gRPC-Web on the page's own origin (the server answers gRPC-Web on its
// gRPC address), with clients generated from proto/ (protoc-gen-es) and Connect's gRPC-Web
// transport. The token lives in sessionStorage (gone when the tab closes) and travels only
// in the `authorization` header: never a cookie, so another site cannot make the browser
// send it (no CSRF).

import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createGrpcWebTransport } from "@connectrpc/connect-web";

import { PolicyService } from "../gen/runplane/v1/policy_pb.js";
import { Decision, RunStatus } from "../gen/runplane/v1/run_pb.js";
import { RunService } from "../gen/runplane/v1/run_service_pb.js";

const TOKEN_KEY = "runplane.token";

export function token(): string | null {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function signIn(value: string): void {
  sessionStorage.setItem(TOKEN_KEY, value.trim());
  role = undefined;
}

export function signOut(): void {
  sessionStorage.removeItem(TOKEN_KEY);
  role = undefined;
}

const bearer: Interceptor = (next) => async (request) => {
  const t = token();
  if (t) request.header.set("authorization", `Bearer ${t}`);
  return next(request);
};

const transport = createGrpcWebTransport({
  baseUrl: location.origin,
  useBinaryFormat: true,
  interceptors: [bearer],
});

export const runs: Client<typeof RunService> = createClient(RunService, transport);
export const policy: Client<typeof PolicyService> = createClient(PolicyService, transport);

/** What the signed-in token may do, as far as the page needs to know. */
export type Role = "viewer" | "operator";
let role: Role | undefined;

/** The token's role. The API has no "who am I" call, so the page asks for something only
 * an operator may do, in a form that changes nothing: ResolveAsk without a run. The access
 * layer refuses a viewer before the service runs (PERMISSION_DENIED); an operator gets
 * past it and the service refuses the empty request. A bad token throws UNAUTHENTICATED. */
export async function currentRole(): Promise<Role> {
  if (role) return role;
  try {
    await runs.resolveAsk({});
    role = "operator";
  } catch (err) {
    const code = ConnectError.from(err).code;
    if (code === Code.Unauthenticated) throw err;
    role = code === Code.PermissionDenied ? "viewer" : "operator";
  }
  return role;
}

/** Called when an operator action came back PERMISSION_DENIED: the page stops offering it. */
export function demote(): void {
  role = "viewer";
}

export function isDenied(err: unknown): boolean {
  return ConnectError.from(err).code === Code.PermissionDenied;
}

export function isUnauthenticated(err: unknown): boolean {
  return ConnectError.from(err).code === Code.Unauthenticated;
}

/** An error as one line: the gRPC code and the server's message. */
export function describe(err: unknown): string {
  const e = ConnectError.from(err);
  return `${Code[e.code] ?? e.code}: ${e.rawMessage}`;
}

export function millis(ts: Timestamp | undefined): number | undefined {
  return ts ? timestampDate(ts).getTime() : undefined;
}

export function when(ts: Timestamp | undefined): string {
  const ms = millis(ts);
  return ms === undefined ? "—" : new Date(ms).toLocaleString();
}

/** "RUN_STATUS_RUNNING" -> "running". */
export function statusName(status: RunStatus): string {
  return (RunStatus[status] ?? String(status)).replace(/^RUN_STATUS_/, "").toLowerCase();
}

export function decisionName(decision: Decision): string {
  return (Decision[decision] ?? String(decision)).replace(/^DECISION_/, "").toLowerCase();
}

/** Whether a run has ended (its status no longer changes). */
export function finished(status: RunStatus): boolean {
  return [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.TIMEOUT].includes(status);
}

/** A duration in seconds as "1h 02m 03s". */
export function span(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  const hours = Math.floor(s / 3600);
  const minutes = Math.floor((s % 3600) / 60);
  const rest = s % 60;
  const pad = (n: number) => String(n).padStart(2, "0");
  return hours > 0 ? `${hours}h ${pad(minutes)}m ${pad(rest)}s` : minutes > 0 ? `${minutes}m ${pad(rest)}s` : `${rest}s`;
}
