// Building the page without markup: every string lands in the DOM as a text node or an
// attribute value, never through innerHTML, so a command such as
// `<img src=x onerror=alert(1)>` from an agent is shown as the characters it is.

/** What an element may be given: text (always a text node), nodes, or nothing. */
export type Child = Node | string | null | undefined | false;

/** Attributes set with setAttribute (values are never parsed as markup); `on*` names are
 * refused, so no handler is ever made from a string. */
export type Attrs = Record<string, string | undefined>;

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Attrs = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined) continue;
    if (name.toLowerCase().startsWith("on")) throw new Error(`refused attribute ${name}`);
    element.setAttribute(name, value);
  }
  append(element, ...children);
  return element;
}

/** Control characters other than newline and tab, and the invisible format characters
 * (bidi embeddings, overrides, isolates and marks, zero-width characters, the BOM, soft
 * hyphen, tag characters, line and paragraph separators). */
const HIDDEN = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb\u{e0000}-\u{e007f}]/gu;

/** `text` with every HIDDEN character shown as its escape (`\x1b`, `\u{202e}`), as the CLI
 * shows them (src/cli/escape.rs): a right-to-left override or a carriage return would
 * otherwise make a command look like another one, and the operator approves what they see. */
export function visible(text: string): string {
  return text.replace(HIDDEN, (c) => {
    const code = c.codePointAt(0) ?? 0;
    if (code === 0x0d) return "\\r";
    return code < 0x100 ? `\\x${code.toString(16).padStart(2, "0")}` : `\\u{${code.toString(16)}}`;
  });
}

/** Appends children; strings become text nodes, with hidden characters made visible. */
export function append(parent: Node, ...children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    parent.appendChild(typeof child === "string" ? document.createTextNode(visible(child)) : child);
  }
}

/** Replaces every child of `parent`. */
export function replace(parent: Node, ...children: Child[]): void {
  while (parent.firstChild) parent.removeChild(parent.firstChild);
  append(parent, ...children);
}

/** A button that runs `action` on click. */
export function button(label: string, cls: string, action: () => void): HTMLButtonElement {
  const b = h("button", { type: "button", class: cls }, label);
  b.addEventListener("click", action);
  return b;
}

/** A labelled text input. */
export function field(label: string, name: string, value = ""): [HTMLLabelElement, HTMLInputElement] {
  const input = h("input", { type: "text", name, autocomplete: "off", spellcheck: "false" });
  input.value = value;
  return [h("label", {}, h("span", {}, label), input), input];
}

/** A progress bar of `used` against `limit` (no limit: the value alone), `note` after its
 * figures; `data-bar` holds the label, so a test or a stylesheet can pick one bar. */
export function bar(label: string, used: number, limit: number, unit: (n: number) => string, note = ""): HTMLElement {
  const figures = limit > 0 ? `${unit(used)} of ${unit(limit)}` : `${unit(used)} (no limit)`;
  const text = note ? `${figures} · ${note}` : figures;
  const meter = h("progress", { max: String(limit > 0 ? limit : 1), value: String(limit > 0 ? Math.min(used, limit) : 0) });
  const over = limit > 0 && used >= limit * 0.8;
  return h(
    "div",
    { class: over ? "bar near" : "bar", "data-bar": label },
    h("span", { class: "bar-label" }, label),
    meter,
    h("span", { class: "bar-text" }, text),
  );
}

/** A message line for errors and notices. */
export function notice(text: string, cls = "error"): HTMLElement {
  return h("p", { class: `notice ${cls}`, role: cls === "error" ? "alert" : "status" }, text);
}
