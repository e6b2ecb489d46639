// The viewer: who the token is, which agent to show, loading each panel through the JSON API,
// and keeping them current from the agent's live stream.

import { ApiError, agentPath, api, clearToken, follow, setToken, takeFragment, token } from "./api.js";
import { $, fill, h } from "./dom.js";
import { renderGauges } from "./gauges.js";
import {
  renderBlocks,
  renderContext,
  renderFacts,
  renderHealth,
  renderInjections,
  renderRecall,
  renderState,
  renderSummary,
  renderTimeline,
} from "./panels.js";

const MAX_EVENTS = 2000;
const HISTORY_DAYS = 30;

const view = {
  who: null, // {admin, agent_id}
  agentId: null,
  stream: null,
  status: null,
  events: new Map(), // event_id -> row, in arrival order (the stream sends them oldest first)
  blocks: [],
};

// --- loading panels --------------------------------------------------------------------------

/** Every row of a listing (following cursors), at most `pages` pages. */
async function allEvents(query, pages = 5) {
  const rows = [];
  let cursor;
  for (let i = 0; i < pages; i++) {
    const page = await api(agentPath(view.agentId, "/events"), { query: { ...query, limit: 1000, cursor } });
    rows.push(...page.items);
    cursor = page.next_cursor;
    if (!cursor) break;
  }
  return rows;
}

const daysAgo = (days) => Date.now() / 1000 - days * 86400;

const loaders = {
  async context() {
    // The built prompt (GET leaves fact lifetimes alone): what the model sees, injected memory included.
    const ctx = await api(agentPath(view.agentId, "/context"), { query: { built: true } });
    renderContext($("context-messages"), $("context-count"), ctx);
    const { items } = await api(agentPath(view.agentId, "/injections"), { query: { since: daysAgo(1 / 24), limit: 1000 } });
    renderInjections($("injections"), $("injections-count"), items.slice(-20));
  },
  async blocks() {
    const [{ blocks }, history] = await Promise.all([
      api(agentPath(view.agentId, "/blocks")),
      allEvents({ kinds: ["core_write", "core_delete"], since: daysAgo(HISTORY_DAYS) }),
    ]);
    view.blocks = blocks;
    renderBlocks($("blocks"), blocks, history);
  },
  async facts() {
    const { facts } = await api(agentPath(view.agentId, "/facts"), { query: { limit: 1000 } });
    renderFacts($("facts"), facts, deleteFact);
  },
  async state() {
    const { state } = await api(agentPath(view.agentId, "/state"));
    renderState($("state"), state);
  },
  async summary() {
    const { versions } = await api(agentPath(view.agentId, "/summary/versions"), { query: { limit: 20 } });
    const oldest = versions.length ? versions[versions.length - 1].created_at - 3600 : Date.now() / 1000;
    const evictions = versions.length ? await allEvents({ kinds: ["evict"], since: oldest }) : [];
    renderSummary($("summary"), versions, evictions);
  },
};

// Panels to reload, gathered for a moment so that a burst of rows reloads each panel once.
const dirty = new Set();
let reloadTimer = null;

function reload(...panels) {
  for (const p of panels) dirty.add(p);
  if (reloadTimer === null) reloadTimer = setTimeout(reloadDirty, 150);
}

function reloadDirty() {
  reloadTimer = null;
  const agentId = view.agentId;
  for (const name of [...dirty]) {
    dirty.delete(name);
    loaders[name]().catch((err) => agentId === view.agentId && problem(err));
  }
}

// Which panels an audit row makes stale (appends and flushes reach the context via `status`;
// facts and state reach it too, as the prompt's state header, sticky facts and memory).
function stale(kind) {
  if (kind.startsWith("fact")) return ["facts", "context"];
  if (kind === "injection") return ["context"];
  if (kind.startsWith("state")) return ["state", "context"];
  if (kind.startsWith("core")) return ["blocks", "context"];
  if (["evict", "summarize", "reset", "restore", "snapshot_restored", "forget"].includes(kind)) {
    return ["summary", "context", "blocks", "facts", "state"];
  }
  return [];
}

async function deleteFact(fact) {
  try {
    await api(agentPath(view.agentId, `/facts/${encodeURIComponent(fact.fact_id)}`), { method: "DELETE" });
  } catch (err) {
    problem(err);
  }
  reload("facts");
}

// --- the live stream -------------------------------------------------------------------------

function timelineFilter() {
  return { hideAppends: $("hide-appends").checked, text: $("kind-filter").value };
}

function redrawEvents() {
  const events = [...view.events.values()];
  renderTimeline($("timeline"), events, timelineFilter());
  renderHealth($("health"), view.status, events);
}

let redrawTimer = null;
function redrawSoon() {
  if (redrawTimer === null) {
    redrawTimer = setTimeout(() => {
      redrawTimer = null;
      redrawEvents();
    }, 100);
  }
}

function remember(row) {
  view.events.set(row.event_id, row);
  if (view.events.size > MAX_EVENTS) view.events.delete(view.events.keys().next().value);
}

function listen(agentId) {
  return follow(agentId, {
    audit(row) {
      if (!view.events.has(row.event_id)) {
        remember(row);
        reload(...stale(row.kind));
        redrawSoon();
      }
    },
    status(status) {
      const before = view.status;
      view.status = status;
      renderGauges($("gauges"), status);
      reload("context");
      if (before && before.gauges.summary !== status.gauges.summary) reload("summary");
      redrawSoon();
    },
    gap(gap) {
      const text = `Older events skipped (too many to show); live again from ${new Date(gap.resumed_from * 1000).toLocaleTimeString()}.`;
      remember({ gap: true, event_id: `gap-${gap.resumed_from}`, kind: "gap", actor: "", text, created_at: gap.resumed_from });
      redrawSoon();
    },
    state(state) {
      const el = $("live");
      el.className = `live ${state === "live" ? "on" : "off"}`;
      fill(el, state === "live" ? "live" : state);
    },
    fatal(err) {
      problem(err);
    },
  });
}

// --- agents, login, errors -------------------------------------------------------------------

function problem(err) {
  const el = $("notice");
  el.hidden = false;
  const text = err instanceof ApiError ? `${err.code}: ${err.message}` : String(err);
  fill(el, text);
  if (err instanceof ApiError && err.code === "UNAUTHORIZED") {
    clearToken();
    showLogin("The token was refused (rotated or mistyped?).");
  }
}

function clearPanels() {
  for (const id of ["gauges", "context-messages", "health", "blocks", "facts", "state", "summary", "recall-results", "timeline"]) {
    fill($(id));
  }
  fill($("context-count"), "0");
}

async function selectAgent(agentId) {
  view.stream?.close();
  view.stream = null;
  Object.assign(view, { agentId, status: null, events: new Map(), blocks: [] });
  dirty.clear();
  $("notice").hidden = true;
  clearPanels();
  fill($("agent-title"), agentId);
  const here = new URL(location.href);
  here.searchParams.set("agent", agentId);
  history.replaceState(null, "", here);
  for (const li of $("agent-list").children) li.classList.toggle("selected", li.dataset.agent === agentId);
  try {
    await api(agentPath(agentId)); // NOT_FOUND for an unknown agent, or another agent's
  } catch (err) {
    problem(err);
    return;
  }
  view.stream = listen(agentId);
  reload("context", "blocks", "facts", "state", "summary");
}

function showLogin(message = "") {
  view.stream?.close();
  $("main").hidden = true;
  $("logout").hidden = true;
  $("login").hidden = false;
  fill($("login-error"), message);
  $("token-input").focus();
}

async function open(wanted) {
  if (!token()) return showLogin();
  try {
    view.who = await api("v1/whoami");
  } catch (err) {
    if (err instanceof ApiError && err.code === "UNAUTHORIZED") {
      clearToken();
      return showLogin("That token was refused.");
    }
    return showLogin(String(err.message || err));
  }
  $("login").hidden = true;
  $("main").hidden = false;
  $("logout").hidden = false;
  const requested = wanted || new URL(location.href).searchParams.get("agent");
  if (view.who.admin) {
    const { agents } = await api("v1/agents");
    $("agents").hidden = false;
    fill(
      $("agent-list"),
      agents.map((id) => h("li", { dataset: { agent: id } }, h("button", { type: "button", on: { click: () => selectAgent(id) } }, id))),
    );
    const first = requested || agents[0];
    if (first) await selectAgent(first);
    else fill($("agent-title"), "no agents yet");
  } else {
    // An agent token sees its own agent; asking for another one is the API's NOT_FOUND.
    $("agents").hidden = true;
    await selectAgent(requested || view.who.agent_id);
  }
}

function wire() {
  $("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    setToken($("token-input").value);
    $("token-input").value = "";
    open(null);
  });
  $("logout").addEventListener("click", () => {
    clearToken();
    showLogin();
  });
  $("recall-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const page = await api(agentPath(view.agentId, "/recall"), {
        query: { query: $("recall-query").value, mode: $("recall-mode").value, limit: 20 },
      });
      renderRecall($("recall-results"), page);
    } catch (err) {
      problem(err);
    }
  });
  $("hide-appends").addEventListener("change", redrawEvents);
  $("kind-filter").addEventListener("input", redrawEvents);
}

wire();
open(takeFragment().agent);
// A link with another token (or agent) opened in this tab changes only the fragment: no reload.
window.addEventListener("hashchange", () => {
  const { agent } = takeFragment();
  if (token()) open(agent);
});
