// #/runs/{id}: the run's fields, steps, cost and time against its profile's limits, the
// stall tracker's count against its threshold, and its event timeline, live: WatchRun (a
// server stream over gRPC-Web) replays the log from the start and follows it until the run
// ends. The run itself is read again every POLL_MS, and at once when a result or a stall
// arrives on the stream (the events do not carry the stall count; GetRun does). An operator
// may cancel it with a reason. The agent's sandbox is shown beside the status
// (`unsandboxed` as a warning), and each effect the sandbox refused — a connection the
// egress proxy turned away, a refusal a tool's result showed — also under the call that was
// running, so the operator reads the blocked effect next to the decision that let it run.

import type { TerminationCondition } from "../gen/runplane/v1/policy_pb.js";
import type { Run, RunStall } from "../gen/runplane/v1/run_pb.js";
import type { RunEvent } from "../gen/runplane/v1/run_service_pb.js";
import { currentRole, demote, describe, finished, isDenied, millis, policy, runs, span, statusName, when } from "./api.js";
import { bar, button, h, notice, replace } from "./dom.js";

const POLL_MS = 2000;
/** The events after which the run's counters (steps, cost, stall) have moved. */
const COUNTED = new Set(["run.toolcall.result", "run.stall_detected"]);
/** After a stream error, wait this long before watching again (from the next seq). */
const REWATCH_MS = 2000;
/** The events of a sandbox's refusals, which name the call they belong to. */
const REFUSALS = new Set(["sandbox.egress_refused", "sandbox.denied"]);

export function renderRun(root: HTMLElement, runId: string): () => void {
  const fields = h("dl", { class: "fields" });
  const limits = h("div", { class: "limits" });
  const actions = h("div", { class: "actions" });
  const message = h("div", { class: "status-line" });
  const timeline = h("ol", { class: "timeline", id: "timeline" });
  const streamState = h("span", { class: "stream-state" }, "connecting…");
  replace(
    root,
    h("p", {}, h("a", { href: "#/runs" }, "← runs")),
    h("h1", {}, "Run ", h("code", {}, runId)),
    message,
    fields,
    limits,
    actions,
    h("h2", {}, "Events ", streamState),
    timeline,
  );
  const abort = new AbortController();
  let stopped = false;
  let timer: number | undefined;
  let termination: TerminationCondition | undefined;
  let profileAsked = false;
  let actionsFor: string | undefined;
  // One GetRun at a time: a read asked for while one is under way runs once it is done,
  // so a burst of events (the replay of a long log) costs two reads, not one per event.
  let loading = false;
  let again = false;

  const load = async () => {
    if (loading) {
      again = true;
      return;
    }
    loading = true;
    window.clearTimeout(timer);
    try {
      const run = await runs.getRun({ runId });
      if (stopped) return;
      if (!profileAsked && run.policyProfile) {
        // Once: the limits are the profile's. Unreadable, the bars show no limit.
        profileAsked = true;
        termination = await policy.getProfile({ name: run.policyProfile }).then(
          (p) => p.termination,
          () => undefined,
        );
      }
      showFields(fields, run);
      showLimits(limits, run, termination);
      const role = await currentRole();
      // Rebuilt only when the status changes, so a reason being typed survives the poll.
      const key = `${role}/${statusName(run.status)}`;
      if (key !== actionsFor) {
        actionsFor = key;
        replace(actions, role === "operator" && !finished(run.status) ? cancelForm(runId, message, () => void load()) : null);
      }
    } catch (err) {
      if (!stopped) replace(message, notice(describe(err)));
    }
    loading = false;
    if (stopped) return;
    if (again) {
      again = false;
      void load();
    } else {
      timer = window.setTimeout(load, POLL_MS);
    }
  };

  // Each call's first event (its decision), where the sandbox's refusals of it are listed.
  const calls = new Map<string, HTMLElement>();
  let nextSeq = 1n;
  const watch = async () => {
    while (!stopped) {
      try {
        replace(streamState, "live");
        for await (const event of runs.watchRun({ runId, fromSeq: nextSeq }, { signal: abort.signal })) {
          nextSeq = event.seq + 1n;
          const item = eventItem(event);
          timeline.append(item);
          const callId = event.attributes["call_id"] ?? "";
          if (event.type.startsWith("run.toolcall.") && callId && !calls.has(callId)) calls.set(callId, item);
          const call = calls.get(callId);
          if (REFUSALS.has(event.type) && call) blockedList(call).append(refusalItem(event));
          if (COUNTED.has(event.type)) void load();
        }
        replace(streamState, "the run has ended");
        return;
      } catch (err) {
        if (stopped) return;
        replace(streamState, `reconnecting (${describe(err)})`);
        await new Promise((resolve) => window.setTimeout(resolve, REWATCH_MS));
      }
    }
  };

  void load();
  void watch();
  return () => {
    stopped = true;
    abort.abort();
    window.clearTimeout(timer);
  };
}

function showFields(fields: HTMLElement, run: Run): void {
  const rows: [string, string][] = [
    ["status", statusName(run.status)],
    ["task", run.taskId],
    ["agent", run.agentId],
    ["project", run.projectId],
    ["team", run.teamId],
    ["profile", run.policyProfile],
    ["sandbox", run.sandbox],
    ["created", when(run.createdAt)],
    ["started", when(run.startedAt)],
    ["completed", when(run.completedAt)],
    ["output", run.output],
    ["error", run.error],
  ];
  replace(fields, ...rows.filter(([, v]) => v !== "").flatMap(([k, v]) => [h("dt", {}, k), h("dd", { class: k === "status" || k === "sandbox" ? `pill ${k} ${v}` : "exact" }, v)]));
}

function showLimits(limits: HTMLElement, run: Run, termination: TerminationCondition | undefined): void {
  const started = millis(run.startedAt);
  const end = millis(run.completedAt) ?? Date.now();
  const elapsed = started === undefined ? 0 : (end - started) / 1000;
  replace(
    limits,
    bar("steps", run.stepCount, termination?.maxSteps ?? 0, String),
    bar("cost", run.costUsd, termination?.maxCost ?? 0, (n) => `$${n.toFixed(2)}`),
    bar("time", elapsed, Number(termination?.timeoutSeconds ?? 0n), span),
    run.stall ? stallBar(run.stall, termination) : null,
  );
}

/** Consecutive results without progress against the threshold. With the profile's stall
 * detection off the run is not ended at the threshold, and the bar says so. */
function stallBar(stall: RunStall, termination: TerminationCondition | undefined): HTMLElement {
  const notes: string[] = [];
  if (stall.detected) notes.push("stalled");
  if (termination && !termination.stallDetection) notes.push("detection off");
  return bar("stall", stall.count, stall.threshold, String, notes.join(", "));
}

/** One event: its number, time, type and every attribute, each as text. */
function eventItem(event: RunEvent): HTMLElement {
  const attributes = Object.entries(event.attributes).sort(([a], [b]) => a.localeCompare(b));
  return h(
    "li",
    { class: `event ${event.type.replace(/[^a-z.]/g, "").split(".").slice(0, 2).join("-")}`, "data-seq": String(event.seq), "data-call": event.attributes["call_id"] || undefined },
    h("div", { class: "event-head" }, h("span", { class: "seq" }, `#${event.seq}`), h("strong", {}, event.type), h("time", {}, when(event.at))),
    attributes.length ? h("dl", { class: "attributes" }, ...attributes.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, h("code", { class: "exact" }, v))])) : null,
  );
}

/** The list of the sandbox's refusals under a call's event, made on the first one. */
function blockedList(call: HTMLElement): HTMLElement {
  const found = call.querySelector<HTMLElement>("ul.blocked");
  if (found) return found;
  const list = h("ul", { class: "blocked", "aria-label": "blocked by the sandbox" });
  call.append(list);
  return list;
}

/** One refusal, in words: what was refused and why, with the event's number. */
function refusalItem(event: RunEvent): HTMLElement {
  const a = event.attributes;
  const text =
    event.type === "sandbox.egress_refused"
      ? `sandbox refused ${a["method"] ?? ""} ${a["host"] ?? ""}:${a["port"] ?? ""}: ${a["reason"] ?? ""}`
      : `sandbox refused (${a["errno"] ?? ""}): ${a["line"] ?? ""}`;
  return h("li", { class: "refusal", "data-seq": String(event.seq) }, h("span", { class: "seq" }, `#${event.seq}`), " ", h("code", { class: "exact" }, text));
}

function cancelForm(runId: string, message: HTMLElement, changed: () => void): HTMLElement {
  const reason = h("input", { type: "text", class: "reason-input", placeholder: "reason (optional)", "aria-label": "cancel reason" });
  const form = h("div", { class: "answer" }, reason);
  form.append(
    button("Cancel run", "deny cancel", async () => {
      try {
        await runs.cancelRun({ runId, reason: reason.value });
        changed();
      } catch (err) {
        if (isDenied(err)) {
          demote();
          form.remove();
        }
        replace(message, notice(describe(err)));
      }
    }),
  );
  return form;
}
