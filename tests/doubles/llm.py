"""A local OpenAI-compatible chat-completions server for tests: it plays a script, one action per
request, and records what it was sent (bodies, headers, paths)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Action:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # answer this late (past the client's timeout, in the timeout tests)
    events: list[dict[str, Any]] | None = None  # a streamed answer: these chunks as server-sent events
    raw: bytes | None = None  # sent as it is instead of ``body`` (an answer that is not JSON)


def calls(*items: tuple[str, dict[str, Any]], content: str | None = None) -> Action:
    tool_calls = [
        {"id": f"call_{i}_{name}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        for i, (name, args) in enumerate(items)
    ]
    message = {"role": "assistant", "content": content, "tool_calls": tool_calls}
    return Action(
        body={"id": "chatcmpl-1", "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}
    )


def answer(text: str) -> Action:
    message = {"role": "assistant", "content": text}
    return Action(body={"id": "chatcmpl-2", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})


def streamed(*pieces: str, usage: dict[str, int] | None = None) -> Action:
    """An answer streamed in these content pieces (then a finish chunk, and usage if given)."""
    base = {"id": "chatcmpl-s", "object": "chat.completion.chunk", "model": "fake-model"}
    events = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}]
    events += [{**base, "choices": [{"index": 0, "delta": {"content": p}}]} for p in pieces]
    events.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    if usage:
        events.append({**base, "choices": [], "usage": usage})
    return Action(events=events)


def streamed_calls(*items: tuple[str, dict[str, Any]]) -> Action:
    """Tool calls streamed the way OpenAI does: name first, arguments in two pieces."""
    base = {"id": "chatcmpl-s", "object": "chat.completion.chunk", "model": "fake-model"}
    events: list[dict[str, Any]] = []
    for i, (name, args) in enumerate(items):
        text = json.dumps(args)
        head = {"index": i, "id": f"call_{i}_{name}", "type": "function", "function": {"name": name, "arguments": ""}}
        events.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [head]}}]})
        for piece in (text[: len(text) // 2], text[len(text) // 2 :]):
            events.append(
                {
                    **base,
                    "choices": [
                        {"index": 0, "delta": {"tool_calls": [{"index": i, "function": {"arguments": piece}}]}}
                    ],
                }
            )
    events.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    return Action(events=events)


def status(code: int, headers: dict[str, str] | None = None) -> Action:
    return Action(status=code, body={"error": {"message": f"scripted {code}"}}, headers=headers or {})


class FakeLLM:
    """An OpenAI-compatible endpoint that plays a script, one action per request, and records them.
    When the script runs out it answers ``default``, or 418 when there is none."""

    def __init__(self, script: list[Action], default: Action | None = None) -> None:
        self.script = list(script)
        self.default = default
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                owner.requests.append(json.loads(raw))
                owner.headers.append(dict(self.headers))
                owner.paths.append(self.path)
                act = owner.script.pop(0) if owner.script else owner.default or status(418)  # 418: it ran out
                if act.delay_s:
                    time.sleep(act.delay_s)
                if act.events is not None:
                    self._stream(act.events)
                    return
                data = act.raw if act.raw is not None else json.dumps(act.body).encode()
                try:
                    self.send_response(act.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in act.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up (timeout test)

            def _stream(self, events: list[dict[str, Any]]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for chunk in events:
                    self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.block_on_close = False
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def seen(self) -> list[dict[str, Any]]:
        """Each request as ``{"path", "auth", "body"}`` (its Authorization header, if any)."""
        auth = [next((v for k, v in h.items() if k.lower() == "authorization"), None) for h in self.headers]
        return [{"path": p, "auth": a, "body": b} for p, a, b in zip(self.paths, auth, self.requests, strict=True)]

    def clear(self) -> None:
        """Forget the requests recorded so far."""
        self.requests.clear()
        self.headers.clear()
        self.paths.clear()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
