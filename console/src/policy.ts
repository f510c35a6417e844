// #/policy: the server's profiles with their rules in order, and a form that asks the
// server's judge (Evaluate) how it would decide a call, with the rule and the part of a
// shell command that decided.

import { PolicyMode, type PermissionRule, type PolicyProfile } from "../gen/runplane/v1/policy_pb.js";
import { decisionName, describe, policy } from "./api.js";
import { field, h, notice, replace } from "./dom.js";

export function renderPolicy(root: HTMLElement): () => void {
  const profilesBox = h("div", { class: "profiles" }, "loading…");
  const profileSelect = h("select", { name: "profile", "aria-label": "profile" });
  const [toolLabel, tool] = field("tool", "tool", "Bash");
  const [commandLabel, command] = field("command", "command");
  const [pathLabel, path] = field("path", "path");
  const [urlLabel, url] = field("url", "url");
  const result = h("div", { class: "result", id: "evaluate-result" });
  const form = h(
    "form",
    { class: "try" },
    h("label", {}, h("span", {}, "profile"), profileSelect),
    toolLabel,
    commandLabel,
    pathLabel,
    urlLabel,
    h("button", { type: "submit" }, "Evaluate"),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const answer = await policy.evaluate({ profile: profileSelect.value, tool: tool.value, command: command.value, path: path.value, url: url.value });
      replace(
        result,
        h(
          "dl",
          { class: "fields" },
          h("dt", {}, "decision"),
          h("dd", { class: `decision ${decisionName(answer.decision)}` }, decisionName(answer.decision)),
          h("dt", {}, "rule"),
          h("dd", {}, answer.ruleIndex >= 0 ? `rules[${answer.ruleIndex}]` : "none (the mode decided)"),
          h("dt", {}, "part"),
          h("dd", {}, h("code", { class: "exact" }, answer.part || "—")),
          h("dt", {}, "reason"),
          h("dd", { class: "exact" }, answer.reason),
        ),
      );
    } catch (err) {
      replace(result, notice(describe(err)));
    }
  });
  replace(root, h("h1", {}, "Policy"), h("h2", {}, "Try a call"), form, result, h("h2", {}, "Profiles"), profilesBox);

  let stopped = false;
  policy.listProfiles({}).then(
    (response) => {
      if (stopped) return;
      replace(profileSelect, ...response.profiles.map((p) => h("option", { value: p.name }, p.name)));
      replace(profilesBox, ...response.profiles.map(profileCard));
    },
    (err) => !stopped && replace(profilesBox, notice(describe(err))),
  );
  return () => {
    stopped = true;
  };
}

function profileCard(profile: PolicyProfile): HTMLElement {
  const mode = (PolicyMode[profile.mode] ?? String(profile.mode)).replace(/^POLICY_MODE_/, "").toLowerCase();
  const t = profile.termination;
  const limits = t ? `max ${t.maxSteps || "∞"} steps · $${t.maxCost || "∞"} · ${t.timeoutSeconds || "∞"} s · asks time out after ${t.askTimeoutSeconds} s` : "";
  return h(
    "details",
    { class: "card profile" },
    h("summary", {}, h("strong", {}, profile.name), ` — mode ${mode}, ${profile.rules.length} rules`),
    h("p", {}, profile.description),
    h("p", { class: "who" }, limits),
    h("div", { class: "table-wrap" }, h("table", { class: "rules" }, h("thead", {}, h("tr", {}, ...["#", "tool", "decision", "conditions"].map((c) => h("th", {}, c)))), h("tbody", {}, ...profile.rules.map(ruleRow)))),
  );
}

function ruleRow(rule: PermissionRule, index: number): HTMLElement {
  const spec = rule.specifier;
  const tool = spec ? (spec.subPattern ? `${spec.tool}(${spec.subPattern})` : spec.tool) : "*";
  const lists: [string, string[]][] = [
    ["command allow", rule.commandAllow],
    ["command deny", rule.commandDeny],
    ["path allow", rule.pathAllow],
    ["path deny", rule.pathDeny],
    ["domain allow", rule.domainAllow],
    ["domain deny", rule.domainDeny],
    ["input", Object.entries(rule.inputMatch).map(([k, v]) => `${k} = ${v}`)],
  ];
  const conditions = lists.filter(([, v]) => v.length).map(([k, v]) => h("div", {}, h("span", { class: "cond" }, `${k}: `), h("code", { class: "exact" }, v.join("  "))));
  return h("tr", {}, h("td", { class: "num" }, String(index)), h("td", {}, h("code", {}, tool)), h("td", {}, h("span", { class: `decision ${decisionName(rule.decision)}` }, decisionName(rule.decision))), h("td", {}, ...conditions));
}
