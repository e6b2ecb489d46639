// The JSON API and the live stream, called with the bearer token this tab keeps.
//
// The token lives in sessionStorage (this tab only, gone when it closes). It arrives typed into
// the form, or in the URL fragment (/viewer/#token=...): browsers never send the fragment to a
// server, and the page drops it from the address bar and history as soon as it has read it.

const TOKEN_KEY = "vcm.viewer.token";
// The page is served at <root>/viewer/, so the API is one level up (works behind a path prefix).
const ROOT = new URL("../", document.baseURI);

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export const token = () => sessionStorage.getItem(TOKEN_KEY);
export const setToken = (value) => sessionStorage.setItem(TOKEN_KEY, value.trim());
export const clearToken = () => sessionStorage.removeItem(TOKEN_KEY);

/** Moves `token` (and returns `agent`, if named) out of the URL fragment. */
export function takeFragment() {
  const params = new URLSearchParams(location.hash.slice(1));
  const found = params.get("token");
  if (found) setToken(found);
  if (location.hash) history.replaceState(null, "", location.pathname + location.search);
  return { agent: params.get("agent") };
}

export const agentPath = (agentId, rest = "") => `v1/agents/${encodeURIComponent(agentId)}${rest}`;

function url(path, query) {
  const u = new URL(path, ROOT);
  for (const [name, value] of Object.entries(query || {})) {
    if (value === undefined || value === null) continue;
    for (const one of Array.isArray(value) ? value : [value]) u.searchParams.append(name, String(one));
  }
  return u;
}

const headers = (extra = {}) => ({ Authorization: `Bearer ${token()}`, ...extra });

async function failure(res) {
  let code = "HTTP_" + res.status;
  let message = res.statusText;
  try {
    const body = await res.json();
    ({ code, message } = body.error || { code, message });
  } catch {
    // not a coded JSON error: keep the status line
  }
  return new ApiError(res.status, code, message);
}

/** GET (or `method`) a JSON route; throws ApiError with the API's code on a non-2xx reply. */
export async function api(path, { method = "GET", query, body } = {}) {
  const init = { method, headers: headers(body === undefined ? {} : { "Content-Type": "application/json" }) };
  if (body !== undefined) init.body = JSON.stringify(body);
  const res = await fetch(url(path, query), init);
  if (!res.ok) throw await failure(res);
  return res.json();
}

const FATAL = new Set(["UNAUTHORIZED", "NOT_FOUND", "VALIDATION_ERROR"]);

/**
 * Follows GET /v1/agents/{id}/stream (server-sent events) with fetch(), which, unlike
 * EventSource, sends the Authorization header. Reconnects with back-off from the newest audit row
 * seen; gives up on UNAUTHORIZED or NOT_FOUND (a rotated token, a deleted agent).
 * handlers: {audit(row), status(s), gap(g), state("live"|"reconnecting"|"closed"), fatal(ApiError)}.
 * Returns {close()}.
 */
export function follow(agentId, handlers) {
  const abort = new AbortController();
  let since = null;
  let closed = false;

  const dispatch = (name, data) => {
    if (name === "audit") since = Math.max(since ?? 0, data.created_at);
    if (name === "gap") since = Math.max(since ?? 0, data.resumed_from);
    if (name === "error") {
      if (FATAL.has(data.code)) throw new ApiError(0, data.code, data.message);
      return; // the server ends the stream; the loop below reconnects
    }
    try {
      handlers[name]?.(data);
    } catch (err) {
      console.error(`viewer: handling ${name} failed`, err); // a rendering bug must not drop the stream
    }
  };

  async function read(body) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value.replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let name = "message";
        const data = [];
        for (const line of block.split("\n")) {
          if (line.startsWith(":")) continue; // keep-alive comment
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
          if (field === "event") name = text;
          else if (field === "data") data.push(text);
        }
        if (data.length) dispatch(name, JSON.parse(data.join("\n")));
      }
    }
  }

  (async () => {
    let delay = 1000;
    while (!closed) {
      try {
        const res = await fetch(url(agentPath(agentId, "/stream"), { since }), {
          headers: headers({ Accept: "text/event-stream" }),
          signal: abort.signal,
          cache: "no-store",
        });
        if (!res.ok) {
          const err = await failure(res);
          if (FATAL.has(err.code)) throw err;
        } else {
          handlers.state?.("live");
          delay = 1000;
          await read(res.body);
        }
      } catch (err) {
        if (closed) return;
        if (err instanceof ApiError && FATAL.has(err.code)) {
          closed = true;
          handlers.state?.("closed");
          handlers.fatal?.(err);
          return;
        }
      }
      if (closed) return;
      handlers.state?.("reconnecting");
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay = Math.min(delay * 2, 30000);
    }
  })();

  return {
    close() {
      closed = true;
      abort.abort();
    },
  };
}
