// The main context's token gauges: one bar of the window, split by layer, with the budget's lines
// (target, warning, flush) and the output reserve; and the pinned and summary caps.

import { h, fill, percent } from "./dom.js";

const LAYERS = [
  ["system", "system + tools"],
  ["working", "working blocks"],
  ["summary", "summary"],
  ["placeholders", "eviction placeholder"],
  ["fifo", "message queue (FIFO)"],
];

function share(el, fraction) {
  // CSSOM, not a style attribute: allowed by the page's Content-Security-Policy.
  el.style.width = `${Math.max(0, Math.min(1, fraction)) * 100}%`;
  return el;
}

function at(el, fraction) {
  el.style.left = `${Math.max(0, Math.min(1, fraction)) * 100}%`;
  return el;
}

function capBar(label, used, cap, window) {
  const limit = cap * window;
  const ratio = limit > 0 ? used / limit : 0;
  return h(
    "div",
    { class: "cap", dataset: { cap: label } },
    h("span", { class: "cap-label" }, `${label}: ${used} of ${Math.round(limit)} tokens (cap ${percent(cap)} of window)`),
    h("div", { class: "cap-bar" }, share(h("div", { class: ratio > 1 ? "cap-fill over" : "cap-fill" }), ratio)),
  );
}

/** Renders `status` (the stream's status frame: gauges and thresholds) into `el`. */
export function renderGauges(el, { gauges: g, thresholds: t }) {
  const bar = h("div", { class: "bar" });
  for (const [key, label] of LAYERS) {
    if (g[key] > 0) {
      bar.append(share(h("div", { class: `seg ${key}`, title: `${label}: ${g[key]} tokens` }), g[key] / g.window));
    }
  }
  // Above max: the output reserve (the answer's room) and any memory reserve (injected per call).
  const reserved = t.memory_reserve ? "output and memory reserve" : "output reserve";
  const reserve = h("div", { class: "reserve", title: `${reserved}: ${g.window - g.max} tokens` });
  bar.append(at(share(reserve, (g.window - g.max) / g.window), g.max / g.window));
  for (const [name, fraction] of [
    ["target", t.target],
    ["warning", t.warning],
    ["flush", t.flush],
  ]) {
    bar.append(at(h("div", { class: `line ${name}`, dataset: { line: name } }, h("span", {}, `${name} ${percent(fraction)}`)), fraction));
  }

  const rows = LAYERS.map(([key, label]) =>
    h("tr", { dataset: { layer: key } },
      h("td", {}, h("span", { class: `swatch ${key}` }), label),
      h("td", { class: "num" }, String(g[key])),
      h("td", { class: "num" }, percent(g[key] / g.window)),
    ),
  );
  const level = g.occupancy >= t.flush ? "flush" : g.occupancy >= t.warning ? "warning" : "ok";
  fill(
    el,
    h("p", { class: `occupancy ${level}`, id: "occupancy" },
      `${g.total} of ${g.window} tokens (${percent(g.occupancy)}) · ${g.free} free below max ${g.max}`,
    ),
    h("div", { class: "gauge", role: "img", "aria-label": `occupancy ${percent(g.occupancy)}` }, bar),
    h("table", { class: "layers" },
      h("thead", {}, h("tr", {}, h("th", {}, "layer"), h("th", {}, "tokens"), h("th", {}, "of window"))),
      h("tbody", {}, rows),
    ),
    h("div", { class: "caps" },
      capBar("pinned", g.pinned, t.pinned_cap, g.window),
      capBar("summary", g.summary, t.summary_cap, g.window),
    ),
  );
}
