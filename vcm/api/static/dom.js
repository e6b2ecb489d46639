// Building DOM nodes without HTML strings: message text, fact values and event payloads are user
// content, so text only ever goes in as text nodes, never parsed as markup.

/**
 * h("li", {class: "fact", dataset: {factId: id}}, "text", child) -> HTMLLIElement.
 * Attributes are set with setAttribute, except `class`, `dataset`, `hidden`, `disabled`,
 * `title` and `value`; event handlers are attached with `on: {click: fn}`. Strings become text nodes.
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") el.className = value;
    else if (name === "dataset") Object.assign(el.dataset, value);
    else if (name === "on") for (const [type, fn] of Object.entries(value)) el.addEventListener(type, fn);
    else if (name === "hidden" || name === "disabled") el[name] = Boolean(value);
    else if (name === "title" || name === "value") el[name] = String(value);
    else if (name.startsWith("on")) throw new Error(`use {on: {...}} for ${name}`);
    else el.setAttribute(name, String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replace an element's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export const $ = (id) => document.getElementById(id);

/** A badge: a short label with a class for its colour. */
export const badge = (text, kind = "") => h("span", { class: `badge ${kind}`.trim() }, text);

export function when(seconds) {
  if (!seconds) return "";
  return new Date(seconds * 1000).toLocaleString();
}

/** "in 3 h", "2 min ago": expiry and age at a glance. */
export function relative(seconds) {
  if (!seconds) return "";
  const delta = seconds - Date.now() / 1000;
  const abs = Math.abs(delta);
  const [n, unit] =
    abs < 90 ? [abs, "s"] : abs < 5400 ? [abs / 60, "min"] : abs < 129600 ? [abs / 3600, "h"] : [abs / 86400, "d"];
  const text = `${Math.round(n)} ${unit}`;
  return delta >= 0 ? `in ${text}` : `${text} ago`;
}

export const percent = (x) => `${(x * 100).toFixed(x < 0.1 ? 1 : 0)} %`;

/** JSON on one line, shortened: for payloads and state values. */
export function brief(value, max = 160) {
  const text = typeof value === "string" ? value : JSON.stringify(value);
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}
