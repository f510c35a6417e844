// The operator console: a hash router over four pages and the sign-in form. Each page
// renders into <main> and returns a function that stops its timers and streams when the
// page is left.

import { currentRole, describe, isUnauthenticated, signIn, signOut, token } from "./api.js";
import { renderAsks } from "./asks.js";
import { button, h, notice, replace } from "./dom.js";
import { renderPolicy } from "./policy.js";
import { renderRun } from "./run.js";
import { renderRuns } from "./runs.js";

const main = document.getElementById("main") as HTMLElement;
const nav = document.getElementById("nav") as HTMLElement;
let leave: (() => void) | undefined;

function route(): void {
  leave?.();
  leave = undefined;
  if (!token()) {
    showNav(false);
    renderSignIn();
    return;
  }
  showNav(true);
  const hash = location.hash.replace(/^#/, "") || "/asks";
  const [path, queryText = ""] = hash.split("?", 2);
  const query = new URLSearchParams(queryText);
  const run = /^\/runs\/(.+)$/.exec(path);
  for (const link of nav.querySelectorAll("a")) link.classList.toggle("current", path.startsWith(link.getAttribute("href")?.slice(1) ?? "-"));
  if (path === "/asks") leave = renderAsks(main);
  else if (path === "/runs") leave = renderRuns(main, query);
  else if (run) leave = renderRun(main, decodeURIComponent(run[1]));
  else if (path === "/policy") leave = renderPolicy(main);
  else replace(main, notice(`No page ${path}.`));
  void checkToken();
}

/** Shows the token's role in the header, and sends a rejected token back to sign-in. */
async function checkToken(): Promise<void> {
  const roleBox = document.getElementById("role") as HTMLElement;
  try {
    replace(roleBox, await currentRole());
  } catch (err) {
    if (isUnauthenticated(err)) {
      signOut();
      route();
      replace(document.getElementById("signin-message") as HTMLElement, notice(`The token was refused: ${describe(err)}`));
    }
  }
}

function showNav(signedIn: boolean): void {
  nav.hidden = !signedIn;
  const out = document.getElementById("signout") as HTMLElement;
  replace(
    out,
    signedIn &&
      button("Sign out", "signout", () => {
        signOut();
        location.hash = "#/asks";
        route();
      }),
  );
}

function renderSignIn(): void {
  const input = h("input", { type: "password", id: "token", name: "token", autocomplete: "off", spellcheck: "false", placeholder: "rpo_…", "aria-label": "operator token" });
  const form = h(
    "form",
    { class: "signin card" },
    h("h1", {}, "Sign in"),
    h("p", {}, "Paste an operator token. The admin token of a fresh server is in ", h("code", {}, "<data dir>/operator.token"), "; ", h("code", {}, "runplane tokens create"), " makes others."),
    input,
    h("button", { type: "submit" }, "Sign in"),
    h("p", { class: "who" }, "The token is kept in this tab only (sessionStorage) and sent as an authorization header, never as a cookie."),
    h("div", { id: "signin-message" }),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (!input.value.trim()) return;
    signIn(input.value);
    route();
  });
  replace(main, form);
  input.focus();
}

window.addEventListener("hashchange", route);
route();
