/**
 * Streamed bodies read from `fetch()`: JSON Lines (an agent's export) and server-sent events (no
 * EventSource: it cannot send the bearer header). The server's event frames are one `event:`
 * line, an optional `id:` line and one `data:` line of JSON; comments (`: keepalive`) are skipped.
 */

export interface Frame {
  event: string;
  id: string | null;
  data: unknown;
}

/** A body's text as it arrives (a character split across chunks decoded whole), until it ends;
 * the body is released and cancelled however the reading stops. */
async function* texts(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  const reader = body.getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      yield decoder.decode(value, { stream: true });
    }
    const rest = decoder.decode();
    if (rest) yield rest;
  } finally {
    reader.releaseLock();
    await body.cancel().catch(() => undefined);
  }
}

/** The lines of a JSON Lines body (each with its newline; blank ones skipped), until it ends. */
export async function* lines(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  let buffer = "";
  for await (const text of texts(body)) {
    buffer += text;
    let end: number;
    while ((end = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, end + 1);
      buffer = buffer.slice(end + 1);
      if (line.trim()) yield line;
    }
  }
  if (buffer.trim()) yield buffer.endsWith("\n") ? buffer : `${buffer}\n`;
}

/** The frames of one response body, in order, until it ends. */
export async function* frames(body: ReadableStream<Uint8Array>): AsyncGenerator<Frame> {
  let buffer = "";
  let held = ""; // a chunk's last \r, which may be the first half of a \r\n
  for await (const text of texts(body)) {
    const raw = held + text;
    held = raw.endsWith("\r") ? "\r" : "";
    buffer += raw.slice(0, raw.length - held.length).replace(/\r\n?/g, "\n");
    let end: number;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const frame = parse(block);
      if (frame !== null) yield frame;
    }
  }
}

function parse(block: string): Frame | null {
  let event = "message";
  let id: string | null = null;
  const data: string[] = [];
  for (const line of block.split("\n")) {
    if (line === "" || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") event = value;
    else if (field === "id") id = value;
    else if (field === "data") data.push(value);
  }
  if (data.length === 0) return null;
  const text = data.join("\n");
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // not JSON: hand the text over as it came
  }
  return { event, id, data: parsed };
}
