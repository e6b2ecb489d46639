// One render function per panel: data in, DOM out. Every piece of stored text goes in as text.

import { h, fill, badge, brief, relative, when } from "./dom.js";

const empty = (text) => h("p", { class: "muted empty" }, text);

// --- main context ----------------------------------------------------------------------------

export function renderContext(el, countEl, ctx) {
  fill(countEl, String(ctx.messages.length));
  fill(
    el,
    ctx.messages.map((m, i) =>
      h("li", { class: `msg ${ctx.layers[i] || ""}`, dataset: { layer: ctx.layers[i] || "" } },
        h("div", { class: "meta" },
          badge(ctx.layers[i] || "?", `layer ${ctx.layers[i] || ""}`),
          h("span", { class: "role" }, m.name ? `${m.role} (${m.name})` : m.role),
          h("span", { class: "num" }, `${ctx.message_tokens[i] ?? "?"} tokens`),
        ),
        h("pre", { class: "text" }, typeof m.content === "string" ? m.content : brief(m.content, 4000)),
      ),
    ),
  );
}

// --- cold path -------------------------------------------------------------------------------

export function renderHealth(el, status, events) {
  const rows = [];
  const pair = (label, value, cls = "") => rows.push(h("dt", {}, label), h("dd", { class: cls }, value));
  if (status) {
    const hl = status.health;
    pair("Redis", hl.redis ? "ok" : "unreachable", hl.redis ? "ok" : "bad");
    pair(`store (${hl.store_backend})`, hl.store ? "ok" : "unreachable", hl.store ? "ok" : "bad");
    const n = status.pending_batches.length;
    pair(
      "eviction backlog",
      n ? `${n} batch${n > 1 ? "es" : ""} pending (${status.pending_batches.join(", ")})` : "none pending",
      n > 2 ? "warn" : "",
    );
  }
  const newest = (kind) => events.filter((e) => e.kind === kind).reduce((a, e) => Math.max(a, e.created_at), 0);
  const committed = newest("evict");
  pair("last eviction committed", committed ? relative(committed) : "none seen");
  const dead = events.filter((e) => e.kind === "dead_letter").length;
  pair("dead letters", dead ? `${dead} (see the timeline)` : "none seen", dead ? "bad" : "");
  const drift = events.filter((e) => e.kind === "drift_alarm").length;
  pair("drift alarms", drift ? String(drift) : "none seen", drift ? "warn" : "");
  fill(el, rows);
}

// --- working blocks ---------------------------------------------------------------------------

export function renderBlocks(el, blocks, history) {
  if (!blocks.length) return fill(el, empty("No working blocks."));
  fill(
    el,
    blocks.map((b) => {
      const writes = history.filter((e) => e.payload.block_id === b.id).slice(-5).reverse();
      return h("article", { class: b.pinned ? "block pinned" : "block", dataset: { blockId: b.id } },
        h("div", { class: "meta" },
          h("strong", {}, b.id),
          badge(b.role),
          b.pinned && badge("pinned", "pinned"),
          h("span", { class: "num" }, `${b.tokens} tokens`),
          h("span", { class: "muted" }, `rev ${b._rev}`),
        ),
        h("pre", { class: "text" }, b.content),
        writes.length > 0 &&
          h("details", {},
            h("summary", {}, `history (${writes.length} latest)`),
            h("ul", { class: "history" },
              writes.map((e) =>
                h("li", {},
                  `${when(e.created_at)} · ${e.kind === "core_delete" ? "deleted" : "written"} by ${e.actor}`,
                  e.payload.footprint ? ` · ${brief(e.payload.footprint, 120)}` : "",
                ),
              ),
            ),
          ),
      );
    }),
  );
}

// --- injection log ---------------------------------------------------------------------------

/** The injection log's latest rows, newest first: ids only, as the server records them. */
export function renderInjections(el, countEl, rows) {
  countEl.textContent = String(rows.length);
  if (!rows.length) return fill(el, empty("No prompt built for a model call in the last hour."));
  const ids = (label, list) => list.length > 0 && h("span", {}, `${label}: ${list.join(", ")}`);
  fill(
    el,
    [...rows].reverse().map((r) =>
      h("li", { class: "injection", dataset: { eventId: r.event_id } },
        h("span", { class: "muted" }, when(r.created_at)),
        ids("facts", r.facts), ids("messages", r.messages), ids("skills", r.skills), ids("state", r.state),
        h("span", { class: "muted" }, Object.entries(r.layers).map(([n, t]) => `${n} ${t}`).join(" · ")),
      ),
    ),
  );
}

// --- facts -----------------------------------------------------------------------------------

/** Facts grouped by type, UNSURE dedup candidates (waiting for review) first, then sticky;
 * `onDelete(fact)` runs after the user confirmed. */
export function renderFacts(el, facts, onDelete) {
  if (!facts.length) return fill(el, empty("No facts."));
  const groups = new Map();
  for (const f of facts) {
    const group = f.duplicate_of ? "unsure" : f.type;
    if (!groups.has(group)) groups.set(group, []);
    groups.get(group).push(f);
  }
  const rank = (t) => (t === "unsure" ? 0 : t === "sticky" ? 1 : 2);
  const types = [...groups.keys()].sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
  fill(
    el,
    types.map((type) =>
      h("section", { class: "fact-group", dataset: { type } },
        h("h3", {}, type === "sticky" ? badge("sticky", "sticky") : badge(type), ` ${groups.get(type).length}`),
        h("ul", { class: "facts" }, groups.get(type).map((f) => factItem(f, onDelete))),
      ),
    ),
  );
}

function factItem(f, onDelete) {
  const remove = h("button", { type: "button", class: "delete", title: "delete this fact" }, "Delete");
  remove.addEventListener("click", () => {
    // confirm() shows plain text: the value cannot inject markup here either.
    if (window.confirm(`Delete this ${f.type} fact?\n\n${brief(f.value, 300)}`)) onDelete(f);
  });
  return h("li", { class: f.type === "sticky" ? "fact sticky" : "fact", dataset: { factId: f.fact_id } },
    h("div", { class: "value" }, f.key ? h("span", { class: "key" }, `${f.key}: `) : null, f.value),
    h("div", { class: "meta" },
      f.type === "sticky" && badge("sticky · always in context", "sticky"),
      f.status !== "active" && badge(f.status, f.status),
      f.conflict_with.length > 0 && badge(`conflicts with ${f.conflict_with.length}`, "warn"),
      f.duplicate_of && badge(`unsure: may duplicate ${f.duplicate_of}`, "warn"),
      h("span", {}, `importance ${f.importance.toFixed(2)} · confidence ${f.confidence.toFixed(2)}`),
      f.tags.length > 0 && h("span", {}, `tags: ${f.tags.join(", ")}`),
      h("span", {}, f.expires_at ? `expires ${relative(f.expires_at)}` : "never expires"),
      h("span", { class: "muted" }, `used ${f.access_count}× · v${f.version}`),
      remove,
    ),
  );
}

// --- state -----------------------------------------------------------------------------------

export function renderState(el, entries) {
  if (!entries.length) return fill(el, empty("No state."));
  fill(
    el,
    h("table", { class: "state" },
      h("thead", {}, h("tr", {}, h("th", {}, "key"), h("th", {}, "value"), h("th", {}, "expires"))),
      h("tbody", {},
        entries.map((e) =>
          h("tr", { dataset: { key: e.key } },
            h("td", { class: "key" }, e.key),
            h("td", {}, h("code", {}, brief(e.value, 300))),
            h("td", { title: e.expires_at ? when(e.expires_at) : "" }, e.expires_at ? relative(e.expires_at) : "never"),
          ),
        ),
      ),
    ),
  );
}

// --- summary ---------------------------------------------------------------------------------

/** The current summary, then each version beside the eviction batch it was made from. */
export function renderSummary(el, versions, evictions) {
  if (!versions.length) return fill(el, empty("No summary yet: nothing has been evicted."));
  const byBatch = new Map(evictions.map((e) => [e.payload.batch_id, e]));
  fill(
    el,
    versions.map((v, i) => {
      const batch = byBatch.get(v.batch_id);
      const ids = batch ? batch.payload.message_ids || [] : [];
      return h("article", { class: i === 0 ? "version current" : "version", dataset: { batch: String(v.batch_id) } },
        h("div", { class: "side" },
          h("div", { class: "meta" },
            i === 0 ? badge("current", "pinned") : badge(`version ${versions.length - i}`),
            h("span", { class: "num" }, `${v.tokens} tokens`),
            h("span", { class: "muted" }, when(v.created_at)),
          ),
          h("pre", { class: "text" }, v.text),
        ),
        h("div", { class: "side batch" },
          h("div", { class: "meta" }, h("strong", {}, `from batch ${v.batch_id}`)),
          batch
            ? h("p", {},
                `${ids.length} messages moved to recall by ${batch.actor}`,
                batch.payload.footprint?.tokens_moved !== undefined ? `, ${batch.payload.footprint.tokens_moved} tokens` : "",
                h("br"),
                h("span", { class: "muted ids" }, ids.join(" ")),
              )
            : h("p", { class: "muted" }, "its eviction row is older than the events read"),
        ),
      );
    }),
  );
}

// --- recall ----------------------------------------------------------------------------------

export function renderRecall(el, page) {
  if (!page.items.length) return fill(el, h("li", { class: "muted" }, `No hits (${page.mode}).`));
  fill(
    el,
    page.items.map((hit) =>
      h("li", { class: hit.tainted ? "hit tainted" : "hit", dataset: { messageId: hit.message.message_id } },
        h("div", { class: "meta" },
          h("span", { class: "num score" }, hit.score.toFixed(4)),
          badge(page.mode),
          h("span", { class: "role" }, hit.message.role),
          h("span", { class: "muted" }, `${hit.message.message_id} · ${when(hit.message.created_at)}`),
          hit.tainted && badge(`tainted: ${hit.taint_reasons.join(", ")}`, "bad"),
        ),
        h("pre", { class: "text" }, hit.message.content),
      ),
    ),
  );
}

// --- timeline --------------------------------------------------------------------------------

const CATEGORIES = [
  [/^(flush|warning|pressure|target_unreachable)/, "pressure"],
  [/^(evict|summarize|drift|dead_letter)/, "eviction"],
  [/^(hb_|heartbeat)/, "heartbeat"],
  [/^(error)$/, "refusal"],
  [/^(fact|facts|state)/, "knowledge"],
  [/^(core)/, "blocks"],
];

export function category(event) {
  if (event.kind === "fact_decision" && event.payload.decision === "REFUSED") return "refusal";
  for (const [pattern, name] of CATEGORIES) if (pattern.test(event.kind)) return name;
  return "other";
}

function describe(e) {
  const { footprint, ...rest } = e.payload;
  return brief(rest, 220);
}

/** Newest first; `filter` is {hideAppends, text}. */
export function renderTimeline(el, events, filter) {
  const needle = filter.text.trim().toLowerCase();
  const shown = events
    .filter((e) => !(filter.hideAppends && e.kind === "append"))
    .filter((e) => !needle || e.kind.toLowerCase().includes(needle) || e.actor.toLowerCase().includes(needle))
    .slice(-300)
    .reverse();
  if (!shown.length) return fill(el, h("li", { class: "muted" }, "No events yet."));
  fill(
    el,
    shown.map((e) =>
      e.gap
        ? h("li", { class: "gap muted" }, e.text)
        : h("li", { class: `event ${category(e)}`, dataset: { kind: e.kind, eventId: e.event_id } },
            h("span", { class: "time", title: when(e.created_at) }, new Date(e.created_at * 1000).toLocaleTimeString()),
            badge(e.kind, category(e)),
            h("span", { class: "actor" }, e.actor),
            h("span", { class: "payload" }, describe(e)),
          ),
    ),
  );
}
