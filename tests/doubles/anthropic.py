"""A local Anthropic-compatible Messages endpoint for tests (``POST /v1/messages``): it plays a
script, one action per request (a message, a stream of events, or a refusal), and records what
it was sent (bodies and headers)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

USAGE = {"input_tokens": 12, "output_tokens": 5}


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    events: list[tuple[str, dict[str, Any]]] | None = None  # a streamed answer: (event, data)
    headers: dict[str, str] = field(default_factory=dict)


def message(*blocks: dict[str, Any], stop_reason: str = "end_turn") -> Reply:
    return Reply(body={"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-fake",
                       "content": list(blocks), "stop_reason": stop_reason, "stop_sequence": None,
                       "usage": USAGE})  # fmt: skip


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(call_id: str, name: str, given: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": given}


def stream(*blocks: tuple[str, Any], stop_reason: str = "end_turn") -> Reply:
    """A streamed answer: ``("text", [pieces])`` or ``("tool_use", (id, name, [json pieces]))``
    blocks, in order, between message_start and message_stop, with a ping as Anthropic sends."""
    start = {"id": "msg_s", "type": "message", "role": "assistant", "model": "claude-fake", "content": [],
             "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 12, "output_tokens": 1}}  # fmt: skip
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": start}),
                                                ("ping", {"type": "ping"})]  # fmt: skip
    for i, (kind, spec) in enumerate(blocks):
        if kind == "text":
            head: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in spec]
        else:
            call_id, name, pieces = spec
            head = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in pieces]
        events.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": head}))
        events += [("content_block_delta", {"type": "content_block_delta", "index": i, "delta": d}) for d in deltas]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop_reason,
                   "stop_sequence": None}, "usage": {"output_tokens": 9}}))  # fmt: skip
    events.append(("message_stop", {"type": "message_stop"}))
    return Reply(events=events)


def refusal(status: int, kind: str, text_: str) -> Reply:
    return Reply(status=status, body={"type": "error", "error": {"type": kind, "message": text_}})


class FakeMessages:
    """An Anthropic-compatible endpoint that plays a script and records each request. When the
    script runs out it answers 418."""

    def __init__(self, script: list[Reply] | None = None) -> None:
        self.script = list(script or [])
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                owner.requests.append(json.loads(raw))
                owner.headers.append({k.lower(): v for k, v in self.headers.items()})
                act = owner.script.pop(0) if owner.script else refusal(418, "script_ended", "the script ran out")
                if act.events is not None:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    for name, data in act.events:
                        self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                        self.wfile.flush()
                    self.close_connection = True
                    return
                data = json.dumps(act.body).encode()
                self.send_response(act.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in act.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
