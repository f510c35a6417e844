// #/asks: every pending ask, newest first. ListPendingAsks is polled every POLL_MS: the API
// has no stream of asks across runs, and a poll keeps the page right after a reconnect or
// a server restart without any bookkeeping. Rows are kept across polls (so a reason being
// typed survives) and leave when their ask is no longer pending, whoever answered it.

import { Decision } from "../gen/runplane/v1/run_pb.js";
import type { PendingAsk } from "../gen/runplane/v1/run_service_pb.js";
import { currentRole, demote, describe, isDenied, millis, runs, span, when } from "./api.js";
import { button, h, notice, replace } from "./dom.js";

const POLL_MS = 1500;

interface Row {
  element: HTMLElement;
  deadline?: number;
  countdown: HTMLElement;
}

export function renderAsks(root: HTMLElement): () => void {
  const status = h("div", { class: "status-line" });
  const list = h("ol", { class: "asks", id: "asks" });
  const empty = h("p", { class: "empty" }, "No pending asks.");
  replace(root, h("h1", {}, "Pending asks"), status, empty, list);
  const rows = new Map<string, Row>();
  let stopped = false;
  let timer: number | undefined;

  const tick = () => {
    const now = Date.now();
    for (const row of rows.values()) {
      if (row.deadline === undefined) continue;
      const left = (row.deadline - now) / 1000;
      row.countdown.textContent = left > 0 ? `${span(left)} left` : "deadline passed";
      row.countdown.classList.toggle("urgent", left < 30);
    }
  };
  const clock = window.setInterval(tick, 1000);

  const poll = async () => {
    try {
      const [response, role] = await Promise.all([runs.listPendingAsks({}), currentRole()]);
      if (stopped) return;
      const seen = new Set<string>();
      // Oldest first from the server; the page shows the newest on top.
      const asks = [...response.asks].reverse();
      let previous: HTMLElement | null = null;
      for (const ask of asks) {
        const key = `${ask.request?.runId}/${ask.request?.callId}`;
        seen.add(key);
        let row = rows.get(key);
        if (!row) {
          row = askRow(ask, role === "operator", () => remove(key));
          rows.set(key, row);
        }
        // Keep the on-screen order equal to the newest-first order.
        const expected: ChildNode | null = previous ? previous.nextSibling : list.firstChild;
        if (expected !== row.element) list.insertBefore(row.element, expected);
        previous = row.element;
      }
      for (const key of [...rows.keys()]) if (!seen.has(key)) remove(key);
      empty.hidden = rows.size > 0;
      replace(status, `${rows.size} pending · updated ${new Date().toLocaleTimeString()}`);
      tick();
    } catch (err) {
      if (!stopped) replace(status, notice(describe(err)));
    }
    if (!stopped) timer = window.setTimeout(poll, POLL_MS);
  };

  const remove = (key: string) => {
    rows.get(key)?.element.remove();
    rows.delete(key);
    empty.hidden = rows.size > 0;
  };

  void poll();
  return () => {
    stopped = true;
    window.clearTimeout(timer);
    window.clearInterval(clock);
  };
}

/** One ask: what was asked, why, its deadline, and (for an operator) the answer buttons. */
function askRow(ask: PendingAsk, canAnswer: boolean, answered: () => void): Row {
  const request = ask.request;
  const runId = request?.runId ?? "";
  const callId = request?.callId ?? "";
  const countdown = h("span", { class: "countdown" });
  const details = h(
    "dl",
    { class: "fields" },
    ...pair("run", h("a", { href: `#/runs/${encodeURIComponent(runId)}` }, runId)),
    ...pair("call", callId),
    ...pair("tool", request?.tool ?? ""),
    ...(request?.command ? pair("command", h("code", { class: "exact command" }, request.command)) : []),
    ...(request?.path ? pair("path", h("code", { class: "exact path" }, request.path)) : []),
    ...(request?.resolvedPath ? pair("resolved", h("code", { class: "exact" }, request.resolvedPath)) : []),
    ...(request?.paths.length ? pair("paths", h("code", { class: "exact" }, request.paths.join("\n"))) : []),
    ...(request?.url ? pair("url", h("code", { class: "exact" }, request.url)) : []),
    ...(request?.input ? pair("input", h("code", { class: "exact" }, request.input)) : []),
    ...pair("rule", ruleOf(ask)),
    ...(ask.part ? pair("part", h("code", { class: "exact part" }, ask.part)) : []),
    ...pair("why", h("span", { class: "reason" }, ask.reason)),
    ...pair("asked", when(ask.askedAt)),
  );
  const element = h("li", { class: "ask card", "data-run": runId, "data-call": callId }, h("div", { class: "ask-head" }, h("strong", {}, request?.tool ?? "?"), countdown), details);
  // Agent and task are the run's: fetched once per row.
  const who = h("p", { class: "who" });
  element.insertBefore(who, details);
  runs.getRun({ runId }).then(
    (run) => replace(who, `agent ${run.agentId} · task ${run.taskId} · project ${run.projectId}`),
    () => undefined,
  );
  if (canAnswer) element.append(answerForm(runId, callId, answered));
  return { element, deadline: millis(ask.deadline), countdown };
}

/** Which rule sent the call to a person: its index and, when the server has it, its text
 * as the policy file writes it; or the profile's mode, when no rule matched. */
function ruleOf(ask: PendingAsk): HTMLElement {
  if (ask.ruleIndex === undefined) return h("span", { class: "rule-index" }, "no rule matched: the profile's mode asks");
  return h(
    "div",
    { class: "rule" },
    h("span", { class: "rule-index" }, `rules[${ask.ruleIndex}]`),
    ask.rule ? h("pre", { class: "exact rule-text" }, ask.rule.trimEnd()) : null,
  );
}

function pair(name: string, value: Node | string): Node[] {
  return [h("dt", {}, name), h("dd", {}, value)];
}

function answerForm(runId: string, callId: string, answered: () => void): HTMLElement {
  const reason = h("input", { type: "text", class: "reason-input", placeholder: "reason (optional)", "aria-label": "reason" });
  const message = h("span", { class: "answer-message" });
  const form = h("div", { class: "answer" }, reason);
  const answer = async (decision: Decision) => {
    for (const b of form.querySelectorAll("button")) b.disabled = true;
    try {
      await runs.resolveAsk({ runId, callId, decision, reason: reason.value, resolver: "console" });
      answered();
    } catch (err) {
      if (isDenied(err)) {
        // Not an operator after all: the buttons go, the refusal stays visible.
        demote();
        for (const control of form.querySelectorAll("button, input")) control.remove();
        replace(message, notice(describe(err)));
        return;
      }
      replace(message, notice(describe(err)));
      for (const b of form.querySelectorAll("button")) b.disabled = false;
    }
  };
  form.append(
    button("Allow", "allow", () => void answer(Decision.ALLOW)),
    button("Deny", "deny", () => void answer(Decision.DENY)),
    message,
  );
  return form;
}
