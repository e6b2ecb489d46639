/**
 * The client against a real embedded `vcm serve` (one server for the whole file: a free port, a
 * temporary data directory, SQLite store). The command that starts it is `VCM_SERVE_CMD` (a JSON
 * array; the pytest wrapper tests/clients/test_typescript.py passes its interpreter), else the
 * repository's `.venv/bin/python -m vcm.cli.main serve`.
 */

import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { isDeepStrictEqual } from "node:util";

import {
  Conflict,
  ERRORS,
  IdempotencyMismatch,
  LlmRejected,
  NotFound,
  RateLimited,
  RevConflict,
  Unauthorized,
  ValidationError,
  VcmClient,
  VcmError,
  fromPayload,
  type ChangeFrame,
  type ChatFrame,
} from "../src/index.js";
import { startUpstream, type Upstream } from "../testing/upstream.js";

const PACKAGE = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const ROOT = resolve(PACKAGE, "..", "..");
const ADMIN_TOKEN = "ts-client-admin-token-0123456789";

let server: ChildProcess | undefined;
let upstream: Upstream;
let dataDir = "";
let baseUrl = "";
let admin: VcmClient;
let me: VcmClient;
let ingestion: ReturnType<VcmClient["ingestArchival"]>;
const AGENT = "ts-agent";

function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const probe = createServer();
    probe.once("error", fail);
    probe.listen(0, "127.0.0.1", () => {
      const address = probe.address();
      probe.close(() => (typeof address === "object" && address !== null ? done(address.port) : fail(new Error("no port"))));
    });
  });
}

async function startServer(extra: Record<string, string>): Promise<void> {
  const port = await freePort();
  dataDir = mkdtempSync(join(tmpdir(), "vcm-ts-"));
  const command: string[] = process.env.VCM_SERVE_CMD
    ? (JSON.parse(process.env.VCM_SERVE_CMD) as string[])
    : [join(ROOT, ".venv", "bin", "python"), "-m", "vcm.cli.main", "serve"];
  // The server's settings come from its environment: none of the caller's VCM_* leak in.
  const env: Record<string, string> = {};
  for (const [name, value] of Object.entries(process.env)) if (!name.startsWith("VCM_") && value !== undefined) env[name] = value;
  Object.assign(env, {
    HF_HUB_OFFLINE: "1",
    VCM_STORE_URL: `sqlite:///${dataDir}/vcm.db`,
    VCM_API__ADMIN_TOKEN: ADMIN_TOKEN,
    // One copy of the embedding model (queries and ingestion) instead of two: half the load time.
    VCM_EMBEDDING__SUBPROCESS: "false",
    // Change streams end (`bye`) after a second, so that the stream test sees a reconnection.
    VCM_SYNC__MAX_STREAM_S: "1",
    ...extra,
  });
  const [program, ...args] = command as [string, ...string[]];
  const child = spawn(program, [...args, "--port", String(port)], { cwd: ROOT, env, stdio: ["ignore", "ignore", "pipe"], detached: true });
  server = child;
  let log = "";
  child.stderr?.on("data", (chunk: Buffer) => (log = (log + chunk.toString()).slice(-4000)));
  baseUrl = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 120_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`vcm serve exited with ${child.exitCode}:\n${log}`);
    try {
      if ((await fetch(`${baseUrl}/healthz`)).status === 200) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`vcm serve did not come up:\n${log}`);
}

before(async () => {
  upstream = await startUpstream();
  // The chat routes' model: the fake upstream, tried once (a scripted failure is not retried).
  await startServer({ VCM_CHAT__BASE_URL: upstream.url, VCM_CHAT__MODEL: "fake-model", VCM_CHAT__MAX_RETRIES: "0", OPENAI_API_KEY: "sk-test" });
  admin = new VcmClient(baseUrl, ADMIN_TOKEN);
  const created = await admin.createAgent({ agent_id: AGENT, model: "vcm-demo-4k", system_prompt: "You help." });
  me = admin.withToken(created.token);
  // The first ingestion loads the embedding model: start it now, so that it loads while the
  // tests that need no model run.
  ingestion = me.ingestArchival(AGENT, { text: "Basil needs full sun.\n\nMint spreads fast in shade.", doc_id: "garden" });
  ingestion.catch(() => undefined);
});

after(async () => {
  if (server?.pid !== undefined && server.exitCode === null) {
    const started = Date.now();
    const exited = new Promise((r) => server?.once("exit", r));
    // The whole process group: the server and any child it started (the cold path's processes).
    process.kill(-server.pid, "SIGTERM");
    await within(exited, 10_000).catch(() => undefined);
    if (server.exitCode === null && server.signalCode === null) process.kill(-server.pid, "SIGKILL");
    console.error(`vcm serve stopped in ${Date.now() - started} ms`);
  }
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  await upstream?.close();
});

/** `promise`, or a rejection after `ms` (its timer cleared either way: a pending timer would keep
 * the test process alive). */
async function within<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, fail) => (timer = setTimeout(() => fail(new Error(`nothing after ${ms} ms`)), ms)));
  try {
    return await Promise.race([promise, expired]);
  } finally {
    clearTimeout(timer);
  }
}

async function eventually<T>(probe: () => Promise<T>, ok: (value: T) => boolean, ms = 30_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await probe();
    if (ok(value) || Date.now() >= deadline) return value;
    await new Promise((r) => setTimeout(r, 250));
  }
}

describe("schema", () => {
  it("the served OpenAPI document is the one the types were generated from", async () => {
    type Doc = { paths: Record<string, unknown>; components: { schemas: Record<string, unknown> } };
    const served = (await (await fetch(`${baseUrl}/openapi.json`)).json()) as Doc;
    const snapshot = JSON.parse(readFileSync(join(PACKAGE, "openapi.json"), "utf8")) as Doc;
    const differ = (a: Record<string, unknown>, b: Record<string, unknown>): string[] =>
      [...new Set([...Object.keys(a), ...Object.keys(b)])].filter((k) => !isDeepStrictEqual(a[k], b[k])).sort();
    const drift = [...differ(served.paths, snapshot.paths), ...differ(served.components.schemas, snapshot.components.schemas)];
    assert.deepEqual(drift, [], "the server's schema drifted from the client's: regenerate with .venv/bin/python -m tests.clients.schema");
    assert.deepEqual(served, snapshot);
  });
});

describe("agents", () => {
  it("creates, lists and reads agents; a second create is a Conflict", async () => {
    assert.ok((await admin.agents()).agents.includes(AGENT));
    const agent = await me.agent(AGENT);
    assert.equal(agent.agent_id, AGENT);
    assert.equal(agent.model, "vcm-demo-4k");
    await assert.rejects(admin.createAgent({ agent_id: AGENT }), (error: unknown) => {
      assert.ok(error instanceof Conflict && error instanceof VcmError);
      assert.equal(error.code, "CONFLICT");
      assert.equal(error.status, 409);
      return true;
    });
  });

  it("refuses a wrong token, an unknown agent and a bad body with their coded errors", async () => {
    await assert.rejects(new VcmClient(baseUrl, "not-a-token").agent(AGENT), Unauthorized);
    await assert.rejects(admin.agent("nobody-here"), (error: unknown) => error instanceof NotFound && error.status === 404);
    const before = (await me.context(AGENT)).messages.length;
    await assert.rejects(
      me.request("post", `/v1/agents/${AGENT}/messages`, { json: { role: "user", content: "x", colour: "red" } }),
      (error: unknown) => error instanceof ValidationError && error.status === 422 && error.code === "VALIDATION_ERROR",
    );
    assert.equal((await me.context(AGENT)).messages.length, before, "a refused request changes nothing");
  });
});

describe("memory", () => {
  it("appends messages and reads them back in the context", async () => {
    const first = await me.append(AGENT, { role: "user", content: "my locker code is 4417" }, { idempotencyKey: "m1" });
    const again = await me.append(AGENT, { role: "user", content: "my locker code is 4417" }, { idempotencyKey: "m1" });
    assert.equal(again.message_id, first.message_id);
    assert.equal(again.replayed, true);
    await me.append(AGENT, { role: "assistant", content: "Noted." });
    const context = await me.context(AGENT);
    const said = context.messages.map((m) => String(m.content));
    assert.ok(said.some((text) => text.includes("4417")), said.join(" | "));
    assert.equal(said.filter((text) => text.includes("4417")).length, 1, "the replayed append landed once");
    assert.ok(context.gauges.window > 0);
  });

  it("imports history with the times it was said (created_at)", async () => {
    await me.append(AGENT, { role: "user", content: "We moved to Porto.", created_at: "2023-05-08T13:56:00Z" });
    await me.append(AGENT, { role: "user", content: "The boxes are unpacked.", created_at: 1683554160 + 7 * 86400 });
    const said = (await me.context(AGENT)).messages.map((m) => String(m.content));
    assert.ok(said.includes("[Mon 15 May 2023, 1 week later] The boxes are unpacked."), said.join(" | "));
    await assert.rejects(
      me.append(AGENT, { role: "user", content: "x", created_at: "next week" }),
      (error: unknown) => error instanceof ValidationError && error.details.field === "created_at",
    );
    const listed = [
      { role: "user" as const, content: "The movers came.", created_at: "2023-05-16T09:00:00Z" },
      { role: "user" as const, content: "All unpacked now.", created_at: "2023-05-16T18:00:00Z" },
    ];
    const done = await me.appendMany(AGENT, { messages: listed }, { idempotencyKey: "import-1" });
    const again = await me.appendMany(AGENT, { messages: listed }, { idempotencyKey: "import-1" });
    assert.deepEqual(again.results.map((r) => r.message_id), done.results.map((r) => r.message_id));
    assert.ok(again.results.every((r) => r.replayed));
  });

  it("writes blocks with revisions; a stale revision is a RevConflict carrying the current one", async () => {
    const put = await me.putBlock(AGENT, "persona", { content: "I like tea." });
    assert.ok(put._rev);
    const block = await me.block(AGENT, "persona");
    assert.equal(block.content, "I like tea.");
    const edited = await me.putBlock(AGENT, "persona", { content: "I like green tea.", _rev: put._rev });
    await assert.rejects(me.putBlock(AGENT, "persona", { content: "stale", _rev: put._rev }), (error: unknown) => {
      assert.ok(error instanceof RevConflict);
      assert.equal(error.status, 409);
      assert.equal(error.details.current_rev, edited._rev);
      return true;
    });
    assert.ok((await me.blocks(AGENT)).blocks.some((b) => b.id === "persona"));
    const removed = await me.deleteBlock(AGENT, "persona", edited._rev ?? "");
    assert.equal(removed.deleted, true);
    await assert.rejects(me.block(AGENT, "persona"), NotFound);
  });

  it("writes a recall note and finds it", async () => {
    await me.writeRecall(AGENT, { content: "The ferry to Hydra leaves at 7:40." }, { idempotencyKey: "r1" });
    const page = await eventually(
      () => me.searchRecall(AGENT, { query: "ferry Hydra", mode: "text" }),
      (p) => p.items.length > 0,
    );
    assert.ok(page.items.some((hit) => JSON.stringify(hit).includes("7:40")), JSON.stringify(page));
  });

  it("ingests an archival document as a job and searches it", async () => {
    const job = await ingestion;
    assert.ok(["queued", "running", "done"].includes(job.status));
    const done = await me.waitForIngest(AGENT, job.job_id, { timeoutMs: 60_000 });
    assert.equal(done.status, "done");
    const hits = await me.searchArchival(AGENT, { query: "mint shade", k: 2 });
    assert.ok(hits.items.length > 0);
    assert.ok(hits.items.some((hit) => JSON.stringify(hit).includes("Mint")), JSON.stringify(hits));
    await assert.rejects(me.ingestJob(AGENT, "not a job id"), ValidationError);
  });

  it("remembers, lists, searches and forgets facts", async () => {
    const said = await me.append(AGENT, { role: "user", content: "I always take a window seat." });
    const evidence = [{ kind: "message" as const, id: said.message_id }];
    const saved = await me.remember(AGENT, { value: "prefers window seats", type: "preference", key: "seat", evidence });
    assert.equal(saved.fact.status, "active");
    const factId = saved.fact.fact_id;
    assert.equal((await me.fact(AGENT, factId)).value, "prefers window seats");
    assert.ok((await me.facts(AGENT, { type: ["preference"] })).facts.some((f) => f.fact_id === factId));
    const found = await eventually(() => me.searchFacts(AGENT, { query: "window seats" }), (f) => f.hits.length > 0);
    assert.ok(found.hits.length > 0, JSON.stringify(found));
    assert.ok((await me.factStats(AGENT)) !== null);
    await me.forgetFact(AGENT, factId);
    await assert.rejects(me.fact(AGENT, factId), NotFound);
  });

  it("sets, reads and deletes state with optimistic revisions", async () => {
    const set = await me.setState(AGENT, "step", { value: { n: 1 } });
    assert.deepEqual((await me.state(AGENT, "step")).value, { n: 1 });
    await assert.rejects(me.setState(AGENT, "step", { value: 2, _rev: "" }), RevConflict);
    const next = await me.setState(AGENT, "step", { value: 2, _rev: set._rev });
    await assert.rejects(me.deleteState(AGENT, "step", set._rev), RevConflict);
    assert.ok((await me.stateKeys(AGENT)).state.some((s) => s.key === "step"));
    await me.deleteState(AGENT, "step", next._rev);
    await assert.rejects(me.state(AGENT, "step"), NotFound);
    await me.setState(AGENT, "other", { value: "x" });
    await me.clearState(AGENT);
    assert.equal((await me.stateKeys(AGENT)).state.length, 0);
  });

  it("takes, lists and restores snapshots", async () => {
    await me.putBlock(AGENT, "plan", { content: "before" });
    const snapshot = await me.createSnapshot(AGENT, { kind: "manual", reason: "ts test" });
    assert.equal(snapshot.agent_id, AGENT);
    await me.putBlock(AGENT, "plan", { content: "after", _rev: (await me.block(AGENT, "plan"))._rev });
    assert.ok((await me.snapshots(AGENT)).snapshots.some((s) => s.snapshot_id === snapshot.snapshot_id));
    const restored = await me.restoreSnapshot(AGENT, snapshot.snapshot_id);
    assert.equal(restored.snapshot_id, snapshot.snapshot_id);
    assert.equal((await me.block(AGENT, "plan")).content, "before");
    await me.deleteSnapshot(AGENT, snapshot.snapshot_id);
    assert.ok(!(await me.snapshots(AGENT)).snapshots.some((s) => s.snapshot_id === snapshot.snapshot_id));
  });
});

describe("chat", () => {
  it("runs a turn on the server's model, replays it under its key, and streams the next", async () => {
    upstream.script.length = 0; // nothing an earlier test left unanswered
    const created = await admin.createAgent({ agent_id: "ts-chat", model: "vcm-demo-4k", system_prompt: "You help Ann." });
    const ann = admin.withToken(created.token);
    await ann.append("ts-chat", { role: "user", content: "My bike lock code is 2291.", name: "Ann" });
    upstream.script.push("Your code is 2291.");
    const asked = upstream.requests.length;
    const turn = await ann.chat("ts-chat", { message: "What is my bike lock code?", name: "Ann" }, { idempotencyKey: "turn-1" });
    assert.equal(turn.reply, "Your code is 2291.");
    assert.equal(turn.replayed, false);
    assert.equal(turn.stop, "answer");
    const sent = upstream.requests[asked];
    assert.ok(sent !== undefined && sent.model === "fake-model" && !sent.stream);
    const prompt = sent.messages.map((m) => String(m.content)).join(" | ");
    assert.ok(prompt.includes("What is my bike lock code?") && prompt.includes("2291"), prompt);

    // The same key: the recorded answer, the model not asked again; with another message: refused.
    const again = await ann.chat("ts-chat", { message: "What is my bike lock code?", name: "Ann" }, { idempotencyKey: "turn-1" });
    assert.equal(again.replayed, true);
    assert.equal(again.reply, turn.reply);
    await assert.rejects(
      ann.chat("ts-chat", { message: "Something else", name: "Ann" }, { idempotencyKey: "turn-1" }),
      (error: unknown) => error instanceof IdempotencyMismatch && error.code === "IDEMPOTENCY_MISMATCH",
    );
    assert.equal(upstream.requests.length, asked + 1, "neither the replay nor the refused retry reached the model");

    upstream.script.push("Noted, Ann: the blue bike.");
    const frames: ChatFrame[] = [];
    for await (const frame of ann.chatStream("ts-chat", { message: "It is the blue bike.", name: "Ann" }, { idempotencyKey: "turn-2" })) {
      frames.push(frame);
    }
    const last = frames.at(-1);
    assert.ok(last?.event === "done", JSON.stringify(frames));
    const deltas = frames.flatMap((f) => (f.event === "delta" ? [f.data.content] : []));
    assert.ok(deltas.length >= 2, "the answer came in pieces");
    assert.equal(deltas.join(""), "Noted, Ann: the blue bike.");
    assert.equal(last.data.reply, "Noted, Ann: the blue bike.");
    assert.equal(upstream.requests.at(-1)?.stream, true);
    const replayed: ChatFrame[] = [];
    for await (const frame of ann.chatStream("ts-chat", { message: "It is the blue bike.", name: "Ann" }, { idempotencyKey: "turn-2" })) {
      replayed.push(frame);
    }
    assert.deepEqual(replayed.map((f) => f.event), ["done"]);
    assert.ok(replayed[0]?.event === "done" && replayed[0].data.replayed === true);

    // Each message landed once, the replies after them.
    const said = (await ann.context("ts-chat")).messages.map((m) => String(m.content));
    for (const text of ["What is my bike lock code?", "Your code is 2291.", "It is the blue bike.", "Noted, Ann: the blue bike."]) {
      assert.equal(said.filter((t) => t.endsWith(text)).length, 1, `${text} in ${said.join(" | ")}`);
    }
    const stats = await ann.stats("ts-chat");
    assert.equal(stats.agent_id, "ts-chat");
    assert.equal(stats.fifo_messages, 5);
    const injections = await ann.injections("ts-chat");
    assert.ok(injections.items.length >= 2, "each built prompt is logged");
  });

  it("throws the model's failure as its coded error, appending nothing twice", async () => {
    upstream.script.length = 0;
    const created = await admin.createAgent({ agent_id: "ts-chat-down", model: "vcm-demo-4k" });
    const bob = admin.withToken(created.token);
    // The script is empty: the fake answers 418, a refusal the server reports as LLM_REJECTED (502).
    await assert.rejects(
      bob.chat("ts-chat-down", { message: "hello?" }, { idempotencyKey: "down-1" }),
      (error: unknown) => error instanceof LlmRejected && error.status === 502,
    );
    upstream.script.push("Hello Bob.");
    const retried = await bob.chat("ts-chat-down", { message: "hello?" }, { idempotencyKey: "down-1" });
    assert.equal(retried.reply, "Hello Bob.");
    const said = (await bob.context("ts-chat-down")).messages.map((m) => String(m.content));
    assert.equal(said.filter((t) => t.endsWith("hello?")).length, 1, said.join(" | "));

    // Streamed: a refusal before the turn throws at the first frame; the model's failure after
    // the 200 (the server's error frame) throws its coded error where it comes.
    const refused = bob.chatStream("ts-chat-down", { message: "not hello" }, { idempotencyKey: "down-1" });
    await assert.rejects(refused.next(), (error: unknown) => error instanceof IdempotencyMismatch);
    const seen: string[] = [];
    await assert.rejects(
      (async () => {
        for await (const frame of bob.chatStream("ts-chat-down", { message: "still there?" })) seen.push(frame.event);
      })(),
      (error: unknown) => error instanceof LlmRejected && error.code === "LLM_REJECTED",
    );
    assert.deepEqual(seen, [], "the model failed before writing anything");
  });

  it("ends a streamed turn when the caller aborts or the server goes quiet past timeoutMs", async () => {
    upstream.script.length = 0;
    const created = await admin.createAgent({ agent_id: "ts-chat-slow", model: "vcm-demo-4k" });
    const slow = admin.withToken(created.token);
    const impatient = new VcmClient(baseUrl, created.token, { timeoutMs: 300 });
    upstream.script.push({ text: "Finally.", delayMs: 1_500 });
    await assert.rejects(
      (async () => {
        for await (const frame of impatient.chatStream("ts-chat-slow", { message: "slow one" })) void frame;
      })(),
      (error: unknown) => error instanceof Error && error.name === "TimeoutError",
    );
    // The server's turn ends when its model answers; then an abort by the caller ends the next.
    await eventually(
      () => slow.context("ts-chat-slow").then((c) => c.messages.some((m) => String(m.content).endsWith("Finally."))),
      (done) => done,
      10_000,
    );
    upstream.script.push({ text: "Too late.", delayMs: 1_500 });
    const stop = new AbortController();
    setTimeout(() => stop.abort(), 200);
    await assert.rejects(
      (async () => {
        for await (const frame of slow.chatStream("ts-chat-slow", { message: "then stop" }, { signal: stop.signal })) void frame;
      })(),
      (error: unknown) => error instanceof Error && error.name === "AbortError",
    );
  });
});

describe("tools, audit and operations", () => {
  it("runs a tool as a model's call would, and finds it in the agent's events", async () => {
    const names = (await me.tools()).tools.map((t) => (t as { function: { name: string } }).function.name);
    assert.ok(names.includes("set_state"), names.join(", "));
    const out = await me.callTool(AGENT, "set_state", {
      arguments: { key: "mood", value: "curious", idempotency_key: "tool-1", request_heartbeat: false },
      tool_call_id: "call-1",
    });
    assert.equal(out.ok, true, JSON.stringify(out));
    assert.equal(out.tool_call_id, "call-1");
    assert.equal((await me.state(AGENT, "mood")).value, "curious");
    const events = await me.events(AGENT, { kinds: ["state_set"] });
    assert.ok(events.items.length > 0 && events.items.every((e) => e.kind === "state_set"), JSON.stringify(events));
    await assert.rejects(me.callTool(AGENT, "no_such_tool", { arguments: {} }), VcmError);
  });

  it("gives the admin every agent's events, the report and maintenance; an agent none of them", async () => {
    const all = await admin.allEvents({ agent_id: AGENT, limit: 5 });
    assert.ok(all.items.length > 0 && all.items.every((e) => e.agent_id === AGENT), JSON.stringify(all));
    const report = await admin.report({ agent_id: [AGENT] });
    assert.ok(JSON.stringify(report).includes(AGENT));
    const ran = await admin.runMaintenance("expire");
    assert.equal(ran.job, "expire");
    assert.ok((await admin.maintenanceRuns()).jobs.some((j) => j.job === "expire"));
    await assert.rejects(admin.runMaintenance("no-such-job"), VcmError);
    await assert.rejects(me.allEvents(), Unauthorized);
    await assert.rejects(me.runMaintenance("expire"), Unauthorized);
  });

  it("reads an entity and its relations once they are settled", async () => {
    const saved = await me.remember(AGENT, { value: "Maya is Priya's sister", type: "relation", key: "Priya|sister|Maya" });
    await assert.rejects(me.entityGraph(AGENT, "Priya"), NotFound, "a shadow relation is no structure yet");
    await admin.settleFact(AGENT, saved.fact.fact_id, "promote");
    const near = await me.entityGraph(AGENT, "Priya");
    assert.equal(near.entity.key, "priya");
    assert.deepEqual(near.neighbours.map((n) => n.key), ["maya"]);
  });

  it("exports an agent line by line and imports it under another id, once", async () => {
    const created = await admin.createAgent({ agent_id: "ts-export", model: "vcm-demo-4k" });
    const owner = admin.withToken(created.token);
    await owner.append("ts-export", { role: "user", content: "It is the blue bike." });
    // U+2028 is a line end to some readers: the file escapes it, the import reads it back.
    await owner.append("ts-export", { role: "user", content: "Two\u2028lines." });
    const lines: string[] = [];
    for await (const line of admin.exportAgent("ts-export")) lines.push(line);
    assert.ok(!lines.join("").includes("\u2028"), "written escaped");
    assert.ok(lines.length > 2 && lines.every((l) => l.endsWith("\n")));
    assert.equal((JSON.parse(lines.at(-1) ?? "{}") as { kind?: string }).kind, "end");
    await assert.rejects(admin.importAgent(lines.slice(0, -1), { asId: "ts-cut" }), ValidationError, "a cut file is refused");
    await assert.rejects(admin.agent("ts-cut"), NotFound);
    const imported = await admin.importAgent(lines, { asId: "ts-export-copy" });
    assert.equal(imported.agent_id, "ts-export-copy");
    assert.equal(imported.source_agent_id, "ts-export");
    assert.equal(imported.replayed, false);
    assert.equal((await admin.importAgent(lines.join(""), { asId: "ts-export-copy" })).replayed, true);
    const said = (await admin.context("ts-export-copy")).messages.map((m) => String(m.content));
    assert.ok(said.some((t) => t.endsWith("It is the blue bike.")), said.join(" | "));
    assert.ok(said.some((t) => t.endsWith("Two\u2028lines.")), said.join(" | "));
    await assert.rejects(
      (async () => {
        for await (const line of me.exportAgent(AGENT)) void line;
      })(),
      Unauthorized,
    );
  });
});

describe("change feed", () => {
  it("pages the feed and follows it as a stream, resuming after the server ends it", async () => {
    const start = await me.changes(AGENT);
    assert.equal(start.changes.length, 0);
    const abort = new AbortController();
    const seen: ChangeFrame[] = [];
    let wroteWhileAway = false;
    const follow = (async () => {
      for await (const frame of me.changeStream(AGENT, { after: start.next_after, signal: abort.signal })) {
        seen.push(frame);
        if (frame.event === "bye" && !wroteWhileAway) {
          // The stream is over and the iterator reconnects only when asked for the next frame: a
          // change made now must come on the next connection (Last-Event-ID), not be lost.
          wroteWhileAway = true;
          await me.putBlock(AGENT, "while-away", { content: "between two connections" });
        }
        if (frame.event === "change" && frame.data.key === "while-away") abort.abort();
      }
    })();
    await me.putBlock(AGENT, "streamed", { content: "hello" });
    await within(follow, 20_000);
    assert.equal(seen[0]?.event, "ready");
    const changes = seen.filter((f) => f.event === "change");
    const first = changes.find((f) => f.data.key === "streamed");
    assert.ok(first && first.data.kind === "block" && first.data.op === "put", JSON.stringify(seen));
    assert.ok(seen.some((f) => f.event === "bye"), "the server ended the first connection");
    assert.equal(seen.filter((f) => f.event === "ready").length, 2, "one ready frame per connection");
    assert.ok(changes.some((f) => f.data.key === "while-away"));
    assert.equal(new Set(changes.map((f) => f.id)).size, changes.length, "no change came twice");
    const page = await me.changes(AGENT, { after: start.next_after });
    // The feed may have moved on since (the cold path writes too): the stream saw its beginning.
    assert.deepEqual(
      page.changes.slice(0, changes.length).map((c) => c.id),
      changes.map((f) => f.id),
      "the stream delivered the feed's changes, in order",
    );
  });
});

describe("errors", () => {
  it("has one class per code, with its HTTP status", () => {
    assert.equal(ERRORS.REV_CONFLICT, RevConflict);
    const limited = fromPayload({ code: "RATE_LIMITED", message: "slow", retry_after_s: 2 });
    assert.ok(limited instanceof RateLimited && limited.status === 429 && limited.details.retry_after_s === 2);
    const future = fromPayload({ code: "SOMETHING_NEW", message: "?" }, 418);
    assert.ok(future.constructor === VcmError && future.code === "SOMETHING_NEW" && future.status === 418);
  });
});
