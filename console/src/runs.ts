// #/runs: runs filtered by status, project, agent and task, newest first, one page at a
// time (ListRuns page tokens); the page shown is read again every POLL_MS so statuses stay
// live. Filters and the page live in the hash (#/runs?status=running&project=web), so a
// view can be bookmarked and the back button works.

import type { Run } from "../gen/runplane/v1/run_pb.js";
import { RunStatus } from "../gen/runplane/v1/run_pb.js";
import { describe, runs, statusName, when } from "./api.js";
import { button, field, h, notice, replace } from "./dom.js";

const POLL_MS = 2000;
const PAGE_SIZE = 25;
const FILTERS = ["project", "agent", "task"] as const;

export function renderRuns(root: HTMLElement, query: URLSearchParams): () => void {
  const statusSelect = h("select", { name: "status", "aria-label": "status" }, h("option", { value: "" }, "any status"));
  for (const value of Object.values(RunStatus)) {
    if (typeof value !== "number" || value === RunStatus.UNSPECIFIED) continue;
    const option = h("option", { value: statusName(value) }, statusName(value));
    statusSelect.append(option);
  }
  statusSelect.value = query.get("status") ?? "";
  const inputs = FILTERS.map((name) => field(name, name, query.get(name) ?? ""));
  const form = h("form", { class: "filters" }, h("label", {}, h("span", {}, "status"), statusSelect), ...inputs.map(([label]) => label), h("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    if (statusSelect.value) next.set("status", statusSelect.value);
    inputs.forEach(([, input], i) => input.value.trim() && next.set(FILTERS[i], input.value.trim()));
    location.hash = `#/runs?${next}`;
  });

  const table = h("tbody");
  const message = h("div", { class: "status-line" });
  const pager = h("div", { class: "pager" });
  replace(
    root,
    h("h1", {}, "Runs"),
    form,
    message,
    h("div", { class: "table-wrap" }, h("table", { class: "runs" }, h("thead", {}, h("tr", {}, ...["run", "status", "task", "agent", "project", "steps", "cost", "created"].map((c) => h("th", {}, c)))), table)),
    pager,
  );

  const status = Object.values(RunStatus).find((v) => typeof v === "number" && statusName(v) === query.get("status")) as RunStatus | undefined;
  // Tokens of the pages before this one, for "previous"; the current page's own token.
  const previous = (query.get("back") ?? "")
    .split(",")
    .filter(Boolean)
    .map((t) => (t === "-" ? "" : t));
  const pageToken = query.get("page") ?? "";
  let stopped = false;
  let timer: number | undefined;

  const load = async () => {
    try {
      const response = await runs.listRuns({
        status: status ?? RunStatus.UNSPECIFIED,
        projectId: query.get("project") ?? "",
        agentId: query.get("agent") ?? "",
        taskId: query.get("task") ?? "",
        pageSize: PAGE_SIZE,
        pageToken,
      });
      if (stopped) return;
      replace(table, ...response.runs.map(runRow));
      if (response.runs.length === 0) replace(table, h("tr", {}, h("td", { colspan: "8", class: "empty" }, "No runs match.")));
      replace(pager, previous.length || pageToken ? button("← previous", "", () => go(previous.slice(0, -1), previous.at(-1) ?? "")) : null, response.nextPageToken ? button("next →", "", () => go([...previous, pageToken], response.nextPageToken)) : null);
      replace(message, `updated ${new Date().toLocaleTimeString()}`);
    } catch (err) {
      if (!stopped) replace(message, notice(describe(err)));
    }
    if (!stopped) timer = window.setTimeout(load, POLL_MS);
  };

  const go = (back: string[], page: string) => {
    const next = new URLSearchParams(query);
    // The first page has no token: an empty entry stands for it.
    next.set("back", back.map((t) => t || "-").join(","));
    if (page && page !== "-") next.set("page", page);
    else next.delete("page");
    if (back.length === 0) next.delete("back");
    location.hash = `#/runs?${next}`;
  };

  void load();
  return () => {
    stopped = true;
    window.clearTimeout(timer);
  };
}

function runRow(run: Run): HTMLElement {
  return h(
    "tr",
    { "data-run": run.id },
    h("td", {}, h("a", { href: `#/runs/${encodeURIComponent(run.id)}` }, run.id)),
    h("td", {}, h("span", { class: `pill status ${statusName(run.status)}` }, statusName(run.status)), run.sandbox === "unsandboxed" ? h("span", { class: "pill sandbox unsandboxed" }, "unsandboxed") : null),
    h("td", {}, run.taskId),
    h("td", {}, run.agentId),
    h("td", {}, run.projectId),
    h("td", { class: "num" }, String(run.stepCount)),
    h("td", { class: "num" }, `$${run.costUsd.toFixed(2)}`),
    h("td", {}, when(run.createdAt)),
  );
}
