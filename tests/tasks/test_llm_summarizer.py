"""The LLM summariser against a tiny local OpenAI-compatible server: success, and every failure
falling back to the extractive summary."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from tests.tasks.coldpath import line, word_embed
from vcm.settings.memory import DriftSettings
from vcm.tasks.summary.llm import LlmSummarizer
from vcm.tasks.summary.recursive import extractive
from vcm.tasks.summary.request import Draft, Params, Request, Turn


class Handler(BaseHTTPRequestHandler):
    mode: ClassVar[str] = "ok"
    answer: ClassVar[str] = ""
    seen: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Handler.seen.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        if self.mode == "slow":
            time.sleep(1.0)
        if self.mode == "error":
            self.send_response(500)
            self.end_headers()
            return
        payload = (
            b"not json"
            if self.mode == "garbage"
            else json.dumps({"choices": [{"message": {"role": "assistant", "content": self.answer}}]}).encode()
        )
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    Handler.seen = []
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def count(text: str) -> int:
    return 8 + len(text.split())


REQUEST = Request("user: Alice owns Project Falcon.", [Turn("bob", line(i)) for i in range(6)], 40, count, word_embed)


def summarize(url: str, mode: str, answer: str = "", params: Params | None = None) -> Draft:
    Handler.mode, Handler.answer = mode, answer
    llm = LlmSummarizer(url, "tiny-model", api_key="k-123", timeout_s=0.5)
    try:
        return llm(REQUEST, params or Params())
    finally:
        llm.close()


def test_the_endpoint_answer_becomes_the_summary(server: str) -> None:
    draft = summarize(server, "ok", "Alice owns Project Falcon. Bob flagged invoice INV-1.")
    assert draft.method == "llm" and draft.text == "Alice owns Project Falcon.\nBob flagged invoice INV-1."
    assert draft.tokens == count(draft.text) and 0 < draft.score <= 1
    [call] = Handler.seen
    assert call["path"] == "/v1/chat/completions" and call["auth"] == "Bearer k-123"
    assert call["body"]["model"] == "tiny-model"
    assert "Alice owns Project Falcon." in call["body"]["messages"][1]["content"]


def test_a_long_answer_is_cut_at_sentences_to_the_cap(server: str) -> None:
    draft = summarize(server, "ok", " ".join(f"Fact number {i} is here." for i in range(40)))
    assert draft.method == "llm" and draft.tokens <= REQUEST.cap
    assert all(x.startswith("Fact number") and x.endswith(".") for x in draft.text.split("\n"))


@pytest.mark.parametrize("mode", ["error", "slow", "garbage"])
def test_any_failure_falls_back_to_extractive(server: str, mode: str) -> None:
    draft = summarize(server, mode, "unused")
    assert draft == extractive(REQUEST, Params())


def test_an_empty_answer_and_the_drift_retry_go_extractive(server: str) -> None:
    assert summarize(server, "ok", "   ").method == "extractive"
    Handler.seen = []
    retry = Params().stronger(DriftSettings())
    assert summarize(server, "ok", "Something.", retry).method == "extractive"
    assert Handler.seen == []  # the retry does not call the model


def test_an_unreachable_endpoint_falls_back() -> None:
    llm = LlmSummarizer("http://127.0.0.1:9/v1", "m", timeout_s=0.5)
    assert llm(REQUEST, Params()).method == "extractive"
