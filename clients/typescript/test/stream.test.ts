/** The server-sent events reader on hand-made bodies (no server). */

import assert from "node:assert/strict";
import { it } from "node:test";

import { frames, type Frame } from "../src/stream.js";

function body(...chunks: string[]): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  return new ReadableStream({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(encoder.encode(chunk));
      controller.close();
    },
  });
}

async function all(stream: ReadableStream<Uint8Array>): Promise<Frame[]> {
  const out: Frame[] = [];
  for await (const frame of frames(stream)) out.push(frame);
  return out;
}

it("reads frames split anywhere across chunks, with ids, and skips comments", async () => {
  const read = await all(
    body('id: 0\nevent: ready\nda', 'ta: {"head":"1-0","after":null}\n\n: keepalive\n\n', "id: 1-0\r\nevent: change\r\ndata: {\"key\":\"k\"}\r\n\r\n"),
  );
  assert.deepEqual(read, [
    { event: "ready", id: "0", data: { head: "1-0", after: null } },
    { event: "change", id: "1-0", data: { key: "k" } },
  ]);
});

it("reads \\r\\n line ends split between chunks as one line end", async () => {
  const text = 'event: a\r\ndata: 1\r\n\r\nevent: b\r\ndata: 2\r\n\r\n';
  for (let cut = 1; cut < text.length; cut++) {
    const read = await all(body(text.slice(0, cut), text.slice(cut)));
    assert.deepEqual(read.map((f) => [f.event, f.data]), [["a", 1], ["b", 2]], `cut at ${cut}`);
  }
});

it("joins data lines, keeps text that is not JSON, and drops an unfinished frame", async () => {
  const read = await all(body("data: one\ndata: two\n\nevent: bye\ndata: {\"reconnect\":true}\n\nevent: change\ndata: {"));
  assert.deepEqual(read, [
    { event: "message", id: null, data: "one\ntwo" },
    { event: "bye", id: null, data: { reconnect: true } },
  ]);
});
