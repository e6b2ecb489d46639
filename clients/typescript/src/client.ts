/**
 * The vcm HTTP client: one method per operation of the API, typed from the OpenAPI schema the
 * server serves (`src/schema.ts`, generated; each method names its path and verb, so a route that
 * changes shape fails to compile after `python -m tests.clients.schema` regenerates the types).
 * No dependency beyond the platform's `fetch`.
 */

import { errorFromReply, fromPayload, VcmError, type Details } from "./errors.js";
import type { components, paths } from "./schema.js";
import { frames, lines, type Frame } from "./stream.js";

export type Schemas = components["schemas"];
type Method = "get" | "put" | "post" | "delete";
type Op<P extends keyof paths, M extends Method> = NonNullable<paths[P][M]>;
type JsonOf<R> = R extends { content: { "application/json": infer J } } ? J : never;
/** The JSON reply of an operation (its 200, 201 or 202). */
export type Reply<P extends keyof paths, M extends Method> =
  Op<P, M> extends { responses: infer R } ? JsonOf<R[Extract<keyof R, 200 | 201 | 202>]> : never;
/** The JSON body an operation takes. */
export type Body<P extends keyof paths, M extends Method> =
  Op<P, M> extends { requestBody?: { content: { "application/json": infer B } } } ? B : never;
/** The query parameters an operation takes. */
export type Query<P extends keyof paths, M extends Method> =
  Op<P, M> extends { parameters: { query?: infer Q } } ? NonNullable<Q> : never;

type QueryValue = string | number | boolean | null | undefined | readonly (string | number | boolean)[];

export interface ClientOptions {
  /** Per-request time limit in milliseconds (default 30 000). */
  timeoutMs?: number;
  /** The fetch to use (default: the global one). */
  fetch?: typeof fetch;
}

export interface Idempotent {
  /** Sent as `Idempotency-Key`: a retry with the same key has the effect once. */
  idempotencyKey?: string;
}

/** One frame of the change stream: `ready` (first), `change`, `gap` (drop cached state), `bye`. */
export type ChangeFrame =
  | { event: "ready"; id: string | null; data: { head: string; after: string | null } }
  | { event: "change"; id: string; data: Schemas["ChangeOut"] }
  | { event: "gap"; id: string | null; data: { head: string } }
  | { event: "bye"; id: string | null; data: { reconnect: boolean } };

/** One frame of a streamed chat turn: `delta` (a piece of the model's text), `tool_result` (a
 * tool call the turn ran), then `done` (the turn's result, as `chat` answers it). */
export type ChatFrame =
  | { event: "delta"; id: string | null; data: { content: string } }
  | { event: "tool_result"; id: string | null; data: Record<string, unknown> }
  | { event: "done"; id: string | null; data: Schemas["ChatOut"] };

/** What a chat turn is sent: the message, and the user's name (`idempotency_key` and `stream` are
 * set by the method). */
export type ChatMessage = Omit<Body<"/v1/agents/{agent_id}/chat", "post">, "stream" | "idempotency_key">;

export interface StreamOptions {
  /** Start after this change id (`"0"`: from the oldest kept); none: from now on. */
  after?: string;
  /** Stop following: the iteration ends. */
  signal?: AbortSignal;
  /** Reconnect (from the last id seen) when the server ends the stream with `bye` (default true). */
  reconnect?: boolean;
}

const seg = (part: string): string => encodeURIComponent(part);
const agentPath = (agentId: string): string => `/v1/agents/${seg(agentId)}`;

export class VcmClient {
  readonly baseUrl: string;
  readonly #token: string;
  readonly #timeoutMs: number;
  readonly #fetch: typeof fetch;

  /** `token`: an agent's token or the admin token. */
  constructor(baseUrl: string, token: string, options: ClientOptions = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.#token = token;
    this.#timeoutMs = options.timeoutMs ?? 30_000;
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  /** A client for the same server with another token (e.g. the token `createAgent` returned). */
  withToken(token: string): VcmClient {
    return new VcmClient(this.baseUrl, token, { timeoutMs: this.#timeoutMs, fetch: this.#fetch });
  }

  // --- the wire ----------------------------------------------------------------------------------
  /** One request; the JSON reply, or the coded error it stands for (thrown). */
  async request<T>(
    method: string,
    path: string,
    init: {
      query?: Record<string, QueryValue>;
      json?: unknown;
      /** A body that is not JSON, with its media type (`json` and `text` are not sent together). */
      text?: { body: string; type: string };
      headers?: Record<string, string | undefined>;
      ok?: number[];
    } = {},
  ): Promise<T> {
    if (init.json !== undefined && init.text !== undefined) throw new TypeError("request: send json or text, not both");
    const headers = this.#headers(init.headers, init.json !== undefined);
    if (init.text !== undefined) headers["Content-Type"] = init.text.type;
    const response = await this.#fetch(this.#url(path, init.query), {
      method: method.toUpperCase(),
      headers,
      body: init.json !== undefined ? JSON.stringify(init.json) : (init.text?.body ?? null),
      signal: AbortSignal.timeout(this.#timeoutMs),
    });
    const text = await response.text();
    if (!response.ok && !(init.ok ?? []).includes(response.status)) {
      throw errorFromReply(response.status, text, response.headers.get("Retry-After"));
    }
    try {
      return JSON.parse(text) as T;
    } catch {
      const bad = new VcmError("the reply is not JSON");
      bad.code = "BAD_REPLY";
      bad.status = response.status;
      throw bad;
    }
  }

  #url(path: string, query: Record<string, QueryValue> | undefined): string {
    const url = new URL(this.baseUrl + path);
    for (const [name, value] of Object.entries(query ?? {})) {
      if (value === undefined || value === null) continue;
      for (const item of Array.isArray(value) ? value : [value]) url.searchParams.append(name, String(item));
    }
    return url.toString();
  }

  #headers(extra: Record<string, string | undefined> = {}, json = false): Record<string, string> {
    const headers: Record<string, string> = { Authorization: `Bearer ${this.#token}`, Accept: "application/json" };
    if (json) headers["Content-Type"] = "application/json";
    for (const [name, value] of Object.entries(extra)) if (value !== undefined) headers[name] = value;
    return headers;
  }

  /**
   * A streamed reply (a chat turn's events, an export's lines): the caller's `signal` ends it, and
   * so does `timeoutMs` without a byte from the server (a TimeoutError, as a request's time limit
   * throws), measured from the request and restarted by each chunk. `body` is the reply's body
   * with that timer attached (read it only after checking `response.ok`); `stop` clears the timer.
   */
  async #streamed(
    url: string,
    init: RequestInit,
    signal: AbortSignal | undefined,
  ): Promise<{ response: Response; body: () => ReadableStream<Uint8Array>; stop: () => void }> {
    const idle = new AbortController();
    const ms = this.#timeoutMs;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const arm = (): void => {
      clearTimeout(timer);
      timer = setTimeout(() => idle.abort(new DOMException(`nothing from the server for ${ms} ms`, "TimeoutError")), ms);
    };
    const stop = (): void => clearTimeout(timer);
    arm();
    let response: Response;
    try {
      response = await this.#fetch(url, { ...init, signal: signal ? AbortSignal.any([signal, idle.signal]) : idle.signal });
    } catch (error) {
      stop();
      throw error;
    }
    const watch = new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, out) {
        arm();
        out.enqueue(chunk);
      },
      flush: stop,
    });
    const body = (): ReadableStream<Uint8Array> => {
      if (response.body === null) throw new VcmError("the reply has no body");
      return response.body.pipeThrough(watch);
    };
    return { response, body, stop };
  }

  // --- agents ------------------------------------------------------------------------------------
  /** Admin only. The reply's `token` is the agent's bearer token, shown this once. */
  createAgent(body: Body<"/v1/agents", "post">): Promise<Reply<"/v1/agents", "post">> {
    return this.request("post", "/v1/agents", { json: body });
  }

  /** Admin only: every agent's id. */
  agents(): Promise<Reply<"/v1/agents", "get">> {
    return this.request("get", "/v1/agents");
  }

  agent(agentId: string): Promise<Reply<"/v1/agents/{agent_id}", "get">> {
    return this.request("get", agentPath(agentId));
  }

  /** Admin only: a new token for the agent; the old one stops working. */
  rotateToken(agentId: string, options: Idempotent = {}): Promise<Reply<"/v1/agents/{agent_id}/token", "post">> {
    return this.request("post", `${agentPath(agentId)}/token`, { headers: idem(options) });
  }

  /** Everything of the agent goes (counts in the reply). */
  deleteAgent(agentId: string): Promise<Reply<"/v1/agents/{agent_id}", "delete">> {
    return this.request("delete", agentPath(agentId));
  }

  /** Empty the agent's memory, keeping the agent. */
  reset(agentId: string, options: Idempotent = {}): Promise<Reply<"/v1/agents/{agent_id}/reset", "post">> {
    return this.request("post", `${agentPath(agentId)}/reset`, { headers: idem(options) });
  }

  // --- users and domains: whose shared memory an agent reads (admin; an agent reads its own) ------
  createUser(userId: string): Promise<Reply<"/v1/users", "post">> {
    return this.request("post", "/v1/users", { json: { user_id: userId } });
  }

  users(): Promise<Reply<"/v1/users", "get">> {
    return this.request("get", "/v1/users");
  }

  /** The user and all its memory go; its agents stay, belonging to no user. */
  deleteUser(userId: string): Promise<Reply<"/v1/users/{user_id}", "delete">> {
    return this.request("delete", `/v1/users/${seg(userId)}`);
  }

  createDomain(domain: string): Promise<Reply<"/v1/domains", "post">> {
    return this.request("post", "/v1/domains", { json: { domain } });
  }

  domains(): Promise<Reply<"/v1/domains", "get">> {
    return this.request("get", "/v1/domains");
  }

  /** The domain and all its memory go; its agents stay, in no domain. */
  deleteDomain(domain: string): Promise<Reply<"/v1/domains/{domain}", "delete">> {
    return this.request("delete", `/v1/domains/${seg(domain)}`);
  }

  /** Name the agent's user and domain (null: none); both are always sent. */
  setAgentPrincipals(
    agentId: string,
    body: Body<"/v1/agents/{agent_id}/principals", "put">,
  ): Promise<Reply<"/v1/agents/{agent_id}/principals", "put">> {
    return this.request("put", `${agentPath(agentId)}/principals`, { json: body });
  }

  agentPrincipals(agentId: string): Promise<Reply<"/v1/agents/{agent_id}/principals", "get">> {
    return this.request("get", `${agentPath(agentId)}/principals`);
  }

  // --- messages and context ----------------------------------------------------------------------
  /** Append a message to the FIFO (evictions follow on their own when the window fills). */
  append(
    agentId: string,
    message: Body<"/v1/agents/{agent_id}/messages", "post">,
    options: Idempotent = {},
  ): Promise<Reply<"/v1/agents/{agent_id}/messages", "post">> {
    return this.request("post", `${agentPath(agentId)}/messages`, { json: message, headers: idem(options) });
  }

  /**
   * Append a list of messages in order (an imported conversation, each with its `created_at`): bad
   * input appends nothing; with an idempotency key a retry of the list replays what went in.
   */
  appendMany(
    agentId: string,
    body: Body<"/v1/agents/{agent_id}/messages/batch", "post">,
    options: Idempotent = {},
  ): Promise<Reply<"/v1/agents/{agent_id}/messages/batch", "post">> {
    return this.request("post", `${agentPath(agentId)}/messages/batch`, { json: body, headers: idem(options) });
  }

  /** Forget a message wherever it is, and the facts derived from it; `checkForget` re-checks its receipt. */
  forgetMessage(agentId: string, messageId: string): Promise<Reply<"/v1/agents/{agent_id}/messages/{message_id}", "delete">> {
    return this.request("delete", `${agentPath(agentId)}/messages/${seg(messageId)}`);
  }

  checkForget(agentId: string, receipt: string): Promise<Reply<"/v1/agents/{agent_id}/forget/{receipt}", "get">> {
    return this.request("get", `${agentPath(agentId)}/forget/${seg(receipt)}`);
  }

  /** The main context and its gauges; `built: true`: the prompt the model sees, with its layers. */
  context(
    agentId: string,
    query: Query<"/v1/agents/{agent_id}/context", "get"> = {},
  ): Promise<Reply<"/v1/agents/{agent_id}/context", "get">> {
    return this.request("get", `${agentPath(agentId)}/context`, { query: query as Record<string, QueryValue> });
  }

  /** Move the oldest `count` messages out of the FIFO now. */
  evict(agentId: string, count: number, options: Idempotent = {}): Promise<Reply<"/v1/agents/{agent_id}/evictions", "post">> {
    const json: Body<"/v1/agents/{agent_id}/evictions", "post"> = { count };
    return this.request("post", `${agentPath(agentId)}/evictions`, { json, headers: idem(options) });
  }

  summaryVersions(agentId: string, limit = 20): Promise<Reply<"/v1/agents/{agent_id}/summary/versions", "get">> {
    return this.request("get", `${agentPath(agentId)}/summary/versions`, { query: { limit } });
  }

  // --- working blocks ----------------------------------------------------------------------------
  blocks(agentId: string): Promise<Reply<"/v1/agents/{agent_id}/blocks", "get">> {
    return this.request("get", `${agentPath(agentId)}/blocks`);
  }

  block(agentId: string, blockId: string): Promise<Reply<"/v1/agents/{agent_id}/blocks/{block_id}", "get">> {
    return this.request("get", `${agentPath(agentId)}/blocks/${seg(blockId)}`);
  }

  /** Create (no `_rev`) or replace a block; a stale `_rev` throws RevConflict. */
  putBlock(
    agentId: string,
    blockId: string,
    block: Body<"/v1/agents/{agent_id}/blocks/{block_id}", "put">,
    options: Idempotent = {},
  ): Promise<Reply<"/v1/agents/{agent_id}/blocks/{block_id}", "put">> {
    const path = `${agentPath(agentId)}/blocks/${seg(blockId)}`;
    return this.request("put", path, { json: block, headers: idem(options) });
  }

  /** Delete a block at `rev` (its current `_rev`). */
  deleteBlock(
    agentId: string,
    blockId: string,
    rev: string,
    options: Idempotent = {},
  ): Promise<Reply<"/v1/agents/{agent_id}/blocks/{block_id}", "delete">> {
    const path = `${agentPath(agentId)}/blocks/${seg(blockId)}`;
    return this.request("delete", path, { query: { _rev: rev }, headers: idem(options) });
  }

  // --- recall ------------------------------------------------------------------------------------
  /** Write a note straight into recall memory. */
  writeRecall(
    agentId: string,
    note: Body<"/v1/agents/{agent_id}/recall", "post">,
    options: Idempotent = {},
  ): Promise<Reply<"/v1/agents/{agent_id}/recall", "post">> {
    return this.request("post", `${agentPath(agentId)}/recall`, { json: note, headers: idem(options) });
  }

  /** Search recall memory (`mode`: hybrid, text or vector; `cursor` pages on). */
  searchRecall(
    agentId: string,
    query: Query<"/v1/agents/{agent_id}/recall", "get">,
  ): Promise<Reply<"/v1/agents/{agent_id}/recall", "get">> {
    return this.request("get", `${agentPath(agentId)}/recall`, { query: query as Record<string, QueryValue> });
  }

  // --- archival memory and its ingestion jobs ----------------------------------------------------
  /** Queue a document for ingestion; the reply is its job (poll with `ingestJob` or `waitForIngest`). */
  ingestArchival(
    agentId: string,
    document: Body<"/v1/agents/{agent_id}/archival", "post">,
    options: Idempotent = {},
  ): Promise<Reply<"/v1/agents/{agent_id}/archival", "post">> {
    return this.request("post", `${agentPath(agentId)}/archival`, { json: document, headers: idem(options) });
  }

  ingestJob(agentId: string, jobId: string): Promise<Reply<"/v1/agents/{agent_id}/archival/jobs/{job_id}", "get">> {
    return this.request("get", `${agentPath(agentId)}/archival/jobs/${seg(jobId)}`);
  }

  /** Poll an ingestion job until it is done (its job) or failed / cancelled (throws its coded error). */
  async waitForIngest(
    agentId: string,
    jobId: string,
    { timeoutMs = 300_000, pollMs = 250 }: { timeoutMs?: number; pollMs?: number } = {},
  ): Promise<Reply<"/v1/agents/{agent_id}/archival/jobs/{job_id}", "get">> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const job = await this.ingestJob(agentId, jobId);
      if (job.status === "done") return job;
      if (job.status === "failed" || job.status === "cancelled") {
        const fallback = job.status === "failed" ? "INTERNAL_ERROR" : "CONFLICT";
        throw fromPayload((job.error as Details | null) ?? { code: fallback, message: `ingestion ${job.status}` });
      }
      if (Date.now() >= deadline) throw new Error(`ingestion job ${jobId} still ${job.status} after ${timeoutMs} ms`);
      await new Promise((resolve) => setTimeout(resolve, pollMs));
    }
  }

  searchArchival(
    agentId: string,
    search: Body<"/v1/agents/{agent_id}/archival/search", "post">,
  ): Promise<Reply<"/v1/agents/{agent_id}/archival/search", "post">> {
    return this.request("post", `${agentPath(agentId)}/archival/search`, { json: search });
  }

  forgetDocument(agentId: string, docId: string): Promise<Reply<"/v1/agents/{agent_id}/archival/{doc_id}", "delete">> {
    return this.request("delete", `${agentPath(agentId)}/archival/${seg(docId)}`);
  }

  // --- facts -------------------------------------------------------------------------------------
  remember(
    agentId: string,
    fact: Body<"/v1/agents/{agent_id}/facts", "post">,
    options: Idempotent = {},
  ): Promise<Reply<"/v1/agents/{agent_id}/facts", "post">> {
    return this.request("post", `${agentPath(agentId)}/facts`, { json: fact, headers: idem(options) });
  }

  /** Facts by filter (`type`, `key`, `status`, `category`, `min_importance`, ...). */
  facts(
    agentId: string,
    filters: Query<"/v1/agents/{agent_id}/facts", "get"> = {},
  ): Promise<Reply<"/v1/agents/{agent_id}/facts", "get">> {
    return this.request("get", `${agentPath(agentId)}/facts`, { query: filters as Record<string, QueryValue> });
  }

  /** Hybrid fact search; scores in [0, 1], comparable across queries. */
  searchFacts(
    agentId: string,
    query: Query<"/v1/agents/{agent_id}/facts/search", "get">,
  ): Promise<Reply<"/v1/agents/{agent_id}/facts/search", "get">> {
    return this.request("get", `${agentPath(agentId)}/facts/search`, { query: query as Record<string, QueryValue> });
  }

  fact(agentId: string, factId: string): Promise<Reply<"/v1/agents/{agent_id}/facts/{fact_id}", "get">> {
    return this.request("get", `${agentPath(agentId)}/facts/${seg(factId)}`);
  }

  /** A person's word on a shadow fact (admin token): `promote` or `reject`. */
  settleFact(
    agentId: string,
    factId: string,
    action: Body<"/v1/agents/{agent_id}/facts/{fact_id}/settle", "post">["action"],
  ): Promise<Reply<"/v1/agents/{agent_id}/facts/{fact_id}/settle", "post">> {
    return this.request("post", `${agentPath(agentId)}/facts/${seg(factId)}/settle`, { json: { action } });
  }

  forgetFact(agentId: string, factId: string): Promise<Reply<"/v1/agents/{agent_id}/facts/{fact_id}", "delete">> {
    return this.request("delete", `${agentPath(agentId)}/facts/${seg(factId)}`);
  }

  factStats(agentId: string): Promise<Reply<"/v1/agents/{agent_id}/facts/stats", "get">> {
    return this.request("get", `${agentPath(agentId)}/facts/stats`);
  }

  /** Goal, constraints, top facts, entities, relations and agenda, ranked for `query`. */
  workingSet(agentId: string, query = ""): Promise<Reply<"/v1/agents/{agent_id}/working-set", "get">> {
    return this.request("get", `${agentPath(agentId)}/working-set`, { query: { query } });
  }

  // --- state -------------------------------------------------------------------------------------
  /** Every state key of the agent. */
  stateKeys(agentId: string): Promise<Reply<"/v1/agents/{agent_id}/state", "get">> {
    return this.request("get", `${agentPath(agentId)}/state`);
  }

  state(agentId: string, key: string): Promise<Reply<"/v1/agents/{agent_id}/state/{key}", "get">> {
    return this.request("get", `${agentPath(agentId)}/state/${seg(key)}`);
  }

  /** Set a key (`_rev: ""`: only if it does not exist yet; a stale `_rev` throws RevConflict). */
  setState(
    agentId: string,
    key: string,
    entry: Body<"/v1/agents/{agent_id}/state/{key}", "put">,
  ): Promise<Reply<"/v1/agents/{agent_id}/state/{key}", "put">> {
    return this.request("put", `${agentPath(agentId)}/state/${seg(key)}`, { json: entry });
  }

  /** Delete one key (only if still at `rev`, when given). */
  deleteState(agentId: string, key: string, rev?: string): Promise<Reply<"/v1/agents/{agent_id}/state/{key}", "delete">> {
    return this.request("delete", `${agentPath(agentId)}/state/${seg(key)}`, { query: { _rev: rev } });
  }

  /** Delete every state key of the agent. */
  clearState(agentId: string): Promise<Reply<"/v1/agents/{agent_id}/state", "delete">> {
    return this.request("delete", `${agentPath(agentId)}/state`);
  }

  // --- snapshots ---------------------------------------------------------------------------------
  createSnapshot(
    agentId: string,
    snapshot: Body<"/v1/agents/{agent_id}/snapshots", "post"> = {},
    options: Idempotent = {},
  ): Promise<Reply<"/v1/agents/{agent_id}/snapshots", "post">> {
    return this.request("post", `${agentPath(agentId)}/snapshots`, { json: snapshot, headers: idem(options) });
  }

  snapshots(agentId: string): Promise<Reply<"/v1/agents/{agent_id}/snapshots", "get">> {
    return this.request("get", `${agentPath(agentId)}/snapshots`);
  }

  restoreSnapshot(
    agentId: string,
    snapshotId: string,
    options: Idempotent = {},
  ): Promise<Reply<"/v1/agents/{agent_id}/snapshots/{snapshot_id}/restore", "post">> {
    const path = `${agentPath(agentId)}/snapshots/${seg(snapshotId)}/restore`;
    return this.request("post", path, { headers: idem(options) });
  }

  deleteSnapshot(agentId: string, snapshotId: string): Promise<Reply<"/v1/agents/{agent_id}/snapshots/{snapshot_id}", "delete">> {
    return this.request("delete", `${agentPath(agentId)}/snapshots/${seg(snapshotId)}`);
  }

  // --- chat: a turn of the agent loop on the server's model -------------------------------------
  /**
   * One turn: the message is appended, the server's model answers over the built context with
   * vcm's memory tools, and the reply is appended. With an idempotency key a retry answers the
   * first turn's result (`replayed`: the model is not called again), and a retry of a turn that
   * failed runs it without appending the message twice.
   */
  chat(agentId: string, message: ChatMessage, options: Idempotent = {}): Promise<Reply<"/v1/agents/{agent_id}/chat", "post">> {
    return this.request("post", `${agentPath(agentId)}/chat`, { json: { ...message, stream: false }, headers: idem(options) });
  }

  /**
   * The same turn as server-sent events, as the model writes: `delta` and `tool_result` frames,
   * then `done` with the turn's result (a replayed turn: `done` alone). A failure before the
   * turn starts (a busy agent, a key used for another message) throws at the first frame; one
   * during the turn (the `error` frame) throws its coded error there. Aborting `signal` ends the
   * turn and throws its reason (an AbortError); `timeoutMs` without a byte throws a TimeoutError.
   */
  async *chatStream(
    agentId: string,
    message: ChatMessage,
    options: Idempotent & { signal?: AbortSignal } = {},
  ): AsyncGenerator<ChatFrame> {
    const { response, body, stop } = await this.#streamed(
      this.#url(`${agentPath(agentId)}/chat`, {}),
      {
        method: "POST",
        headers: this.#headers({ ...idem(options), Accept: "text/event-stream" }, true),
        body: JSON.stringify({ ...message, stream: true }),
      },
      options.signal,
    );
    try {
      if (!response.ok) throw errorFromReply(response.status, await response.text(), response.headers.get("Retry-After"));
      for await (const frame of frames(body())) {
        // The turn's own failure, after the 200: its code's class (the 200 is not its status).
        if (frame.event === "error") throw fromPayload(frame.data as Details);
        yield frame as ChatFrame;
        if (frame.event === "done") return;
      }
    } finally {
      stop();
    }
    const cut = new VcmError("the chat stream ended before its done frame");
    cut.code = "BAD_REPLY";
    cut.status = response.status;
    throw cut;
  }

  /** Tokens by layer, counts, evictions, facts and last activity of the agent. */
  stats(agentId: string): Promise<Reply<"/v1/agents/{agent_id}/stats", "get">> {
    return this.request("get", `${agentPath(agentId)}/stats`);
  }

  /** What each built prompt put before the model (layers and the ids they held), newest first. */
  injections(
    agentId: string,
    query: Query<"/v1/agents/{agent_id}/injections", "get"> = {},
  ): Promise<Reply<"/v1/agents/{agent_id}/injections", "get">> {
    return this.request("get", `${agentPath(agentId)}/injections`, { query: query as Record<string, QueryValue> });
  }

  /** An entity and what links to it, `depth` hops out. */
  entityGraph(agentId: string, name: string, depth = 1): Promise<Reply<"/v1/agents/{agent_id}/entities/{name}", "get">> {
    return this.request("get", `${agentPath(agentId)}/entities/${seg(name)}`, { query: { depth } });
  }

  // --- tools -------------------------------------------------------------------------------------
  /** The LLM tool schemas the server offers. */
  tools(): Promise<Reply<"/v1/tools", "get">> {
    return this.request("get", "/v1/tools");
  }

  /** Run one of vcm's tools for the agent, as a model's tool call would (`arguments`, and the
   * `tool_call_id` it answers). */
  callTool(
    agentId: string,
    name: string,
    call: Body<"/v1/agents/{agent_id}/tools/{name}", "post">,
    options: Idempotent = {},
  ): Promise<Reply<"/v1/agents/{agent_id}/tools/{name}", "post">> {
    return this.request("post", `${agentPath(agentId)}/tools/${seg(name)}`, { json: call, headers: idem(options) });
  }

  // --- the audit log and operations --------------------------------------------------------------
  /** The agent's events (what happened to its memory, by whom), oldest first; `cursor` pages on. */
  events(agentId: string, query: Query<"/v1/agents/{agent_id}/events", "get"> = {}): Promise<Reply<"/v1/agents/{agent_id}/events", "get">> {
    return this.request("get", `${agentPath(agentId)}/events`, { query: query as Record<string, QueryValue> });
  }

  /** Admin only: the events of every agent (or of `agent_id`). */
  allEvents(query: Query<"/v1/events", "get"> = {}): Promise<Reply<"/v1/events", "get">> {
    return this.request("get", "/v1/events", { query: query as Record<string, QueryValue> });
  }

  /** Admin only: the Conveyance report (`vcm report --json`'s document). */
  report(query: Query<"/v1/report", "get"> = {}): Promise<Reply<"/v1/report", "get">> {
    return this.request("get", "/v1/report", { query: query as Record<string, QueryValue> });
  }

  /** Admin only: run one maintenance job now (`expire`, `sweep`, `consolidate`, `snapshot`). */
  runMaintenance(job: string): Promise<Reply<"/v1/maintenance/{job}", "post">> {
    return this.request("post", `/v1/maintenance/${seg(job)}`);
  }

  /** Admin only: when each maintenance job last ran, and how it went. */
  maintenanceRuns(): Promise<Reply<"/v1/maintenance", "get">> {
    return this.request("get", "/v1/maintenance");
  }

  // --- portable export and import (admin) --------------------------------------------------------
  /**
   * The agent in the portable format, line by line as the server streams it (each line ends in a
   * newline: write them to a file as they come). The last line counts the records, so a cut file
   * is refused on import. `vectors`: with fact and archival vectors. `signal` stops it;
   * `timeoutMs` without a byte throws a TimeoutError.
   */
  async *exportAgent(
    agentId: string,
    { vectors = false, signal }: { vectors?: boolean; signal?: AbortSignal } = {},
  ): AsyncGenerator<string> {
    const { response, body, stop } = await this.#streamed(
      this.#url(`${agentPath(agentId)}/export`, { vectors }),
      { headers: this.#headers({ Accept: "application/x-ndjson" }) },
      signal,
    );
    try {
      if (!response.ok) throw errorFromReply(response.status, await response.text(), response.headers.get("Retry-After"));
      yield* lines(body());
    } finally {
      stop();
    }
  }

  /**
   * Create the agent a portable file holds (its lines, or its whole text); `asId` imports it under
   * another id. The whole file is checked first: a bad line is a ValidationError naming it, and
   * nothing is written. The reply's `replayed` is true for a file imported before.
   */
  importAgent(lines: Iterable<string> | string, { asId }: { asId?: string } = {}): Promise<Reply<"/v1/import", "post">> {
    const body = typeof lines === "string" ? lines : [...lines].map((l) => (l.endsWith("\n") ? l : `${l}\n`)).join("");
    return this.request("post", "/v1/import", { query: { as_id: asId }, text: { body, type: "application/x-ndjson" } });
  }

  // --- the change feed ---------------------------------------------------------------------------
  /** A page of the change feed (kind, key, version, op, time; never content). Without `after`: no
   * changes, and `next_after` is where the feed is now. */
  changes(
    agentId: string,
    query: Query<"/v1/agents/{agent_id}/changes", "get"> = {},
  ): Promise<Reply<"/v1/agents/{agent_id}/changes", "get">> {
    return this.request("get", `${agentPath(agentId)}/changes`, { query: query as Record<string, QueryValue> });
  }

  /**
   * The change feed as it happens (server-sent events of `GET .../changes/stream`): `ready`
   * first, then each `change`; `gap` when changes after the position were lost. When the server
   * ends the stream (`bye`, its lifetime) it reconnects from the last id seen, so nothing is
   * missed; an `error` frame throws its coded error. Ends when `signal` aborts.
   */
  async *changeStream(agentId: string, options: StreamOptions = {}): AsyncGenerator<ChangeFrame> {
    const { signal, reconnect = true } = options;
    let last: string | undefined = options.after;
    for (;;) {
      const headers = this.#headers({ Accept: "text/event-stream", "Last-Event-ID": last });
      let response: Response;
      try {
        response = await this.#fetch(this.#url(`${agentPath(agentId)}/changes/stream`, {}), {
          headers,
          ...(signal ? { signal } : {}),
        });
      } catch (error) {
        if (signal?.aborted) return;
        throw error;
      }
      if (!response.ok || response.body === null) {
        throw errorFromReply(response.status, await response.text(), response.headers.get("Retry-After"));
      }
      let bye = false;
      try {
        for await (const frame of frames(response.body)) {
          if (frame.id !== null) last = frame.id;
          if (frame.event === "error") throw fromPayload(frame.data as Details);
          if (frame.event === "bye") bye = true;
          yield frame as ChangeFrame;
        }
      } catch (error) {
        if (signal?.aborted) return;
        throw error;
      }
      if (signal?.aborted || !reconnect || !bye) return;
    }
  }

  // --- health ------------------------------------------------------------------------------------
  /** `{ok, redis, store}`; an unhealthy server answers too (503). */
  health(): Promise<Reply<"/healthz", "get">> {
    return this.request("get", "/healthz", { ok: [503] });
  }

}

function idem(options: Idempotent): Record<string, string | undefined> {
  return { "Idempotency-Key": options.idempotencyKey };
}

export type { Frame };
