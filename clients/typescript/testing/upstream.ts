/**
 * A local OpenAI-compatible chat-completions endpoint for the chat tests (no LLM is reachable
 * here): it answers each request with the next scripted text, streamed as OpenAI streams it
 * (`data:` chunks, a finish chunk, `data: [DONE]`) when the request asks for a stream, and records
 * the request bodies so a test can check what vcm sent the model.
 */

import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";

export interface Upstream {
  /** The base URL vcm is pointed at (`[chat] base_url`), ending in /v1. */
  url: string;
  /** Answers, one per request, in order: a text (streamed in two pieces when asked), or a text
   * sent only after `delayMs`. */
  script: Array<string | { text: string; delayMs: number }>;
  /** The request bodies received, in order. */
  requests: Array<{ model?: string; stream?: boolean; messages: Array<{ role: string; content: unknown }> }>;
  close(): Promise<void>;
}

export async function startUpstream(): Promise<Upstream> {
  const upstream: Upstream = { url: "", script: [], requests: [], close: async () => undefined };
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let raw = "";
    req.on("data", (chunk: Buffer) => (raw += chunk.toString()));
    req.on("end", () => void answer(raw, req, res));
  });
  const answer = async (raw: string, req: IncomingMessage, res: ServerResponse): Promise<void> => {
    let body: Upstream["requests"][number];
    try {
      body = JSON.parse(raw) as Upstream["requests"][number];
    } catch {
      res.writeHead(400, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ error: { message: "the body is not JSON" } }));
      return;
    }
    upstream.requests.push(body);
    const next = upstream.script.shift();
    if (typeof next === "object") await new Promise((done) => setTimeout(done, next.delayMs));
    const text = typeof next === "object" ? next.text : next;
    if (req.url !== "/v1/chat/completions" || text === undefined) {
      // 418: the script ran out (or an unexpected path), so a test asking for more fails loudly.
      res.writeHead(418, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ error: { message: `unscripted request to ${req.url}` } }));
      return;
    }
    const base = { id: "chatcmpl-ts", object: "chat.completion.chunk", created: 0, model: "fake-model" };
    if (!body.stream) {
      const message = { role: "assistant", content: text };
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ ...base, object: "chat.completion", choices: [{ index: 0, message, finish_reason: "stop" }] }));
      return;
    }
    res.writeHead(200, { "Content-Type": "text/event-stream" });
    const half = Math.ceil(text.length / 2);
    const chunks = [
      { ...base, choices: [{ index: 0, delta: { role: "assistant", content: "" } }] },
      { ...base, choices: [{ index: 0, delta: { content: text.slice(0, half) } }] },
      { ...base, choices: [{ index: 0, delta: { content: text.slice(half) } }] },
      { ...base, choices: [{ index: 0, delta: {}, finish_reason: "stop" }] },
    ];
    for (const chunk of chunks) res.write(`data: ${JSON.stringify(chunk)}\n\n`);
    res.end("data: [DONE]\n\n");
  };
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  const address = server.address();
  if (address === null || typeof address !== "object") throw new Error("the fake upstream has no port");
  upstream.url = `http://127.0.0.1:${address.port}/v1`;
  upstream.close = () =>
    new Promise<void>((done) => {
      server.closeAllConnections();
      server.close(() => done());
    });
  return upstream;
}
