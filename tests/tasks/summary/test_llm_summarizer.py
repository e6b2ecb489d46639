"""The LLM summariser against a local OpenAI-compatible server (tests/doubles/llm.py): success, and every failure
falling back to the extractive summary."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.doubles.coldpath import line
from tests.doubles.embedder import word_embed
from tests.doubles.llm import Action, FakeLLM
from vcm.settings.memory import DriftSettings
from vcm.tasks.summary.llm import LlmSummarizer
from vcm.tasks.summary.recursive import extractive
from vcm.tasks.summary.request import Draft, Params, Request, Turn


@pytest.fixture
def server() -> Iterator[FakeLLM]:
    llm = FakeLLM([])
    yield llm
    llm.close()


def reply(mode: str, text: str) -> Action:
    """What the endpoint does: answers ``text`` (ok), answers it after the client's timeout (slow),
    fails (error) or answers something that is not JSON (garbage)."""
    ok = {"choices": [{"message": {"role": "assistant", "content": text}}]}
    if mode == "error":
        return Action(status=500, raw=b"")
    if mode == "garbage":
        return Action(raw=b"not json")
    return Action(body=ok, delay_s=1.0 if mode == "slow" else 0.0)


def count(text: str) -> int:
    return 8 + len(text.split())


REQUEST = Request("user: Alice owns Project Falcon.", [Turn("bob", line(i)) for i in range(6)], 40, count, word_embed)


def summarize(server: FakeLLM, mode: str, answer: str = "", params: Params | None = None) -> Draft:
    server.default = reply(mode, answer)
    llm = LlmSummarizer(server.url, "tiny-model", api_key="k-123", timeout_s=0.5)
    try:
        return llm(REQUEST, params or Params())
    finally:
        llm.close()


def test_the_endpoint_answer_becomes_the_summary(server: FakeLLM) -> None:
    draft = summarize(server, "ok", "Alice owns Project Falcon. Bob flagged invoice INV-1.")
    assert draft.method == "llm" and draft.text == "Alice owns Project Falcon.\nBob flagged invoice INV-1."
    assert draft.tokens == count(draft.text) and 0 < draft.score <= 1
    [call] = server.seen
    assert call["path"] == "/v1/chat/completions" and call["auth"] == "Bearer k-123"
    assert call["body"]["model"] == "tiny-model"
    assert "Alice owns Project Falcon." in call["body"]["messages"][1]["content"]


def test_a_long_answer_is_cut_at_sentences_to_the_cap(server: FakeLLM) -> None:
    draft = summarize(server, "ok", " ".join(f"Fact number {i} is here." for i in range(40)))
    assert draft.method == "llm" and draft.tokens <= REQUEST.cap
    assert all(x.startswith("Fact number") and x.endswith(".") for x in draft.text.split("\n"))


@pytest.mark.parametrize("mode", ["error", "slow", "garbage"])
def test_any_failure_falls_back_to_extractive(server: FakeLLM, mode: str) -> None:
    draft = summarize(server, mode, "unused")
    assert draft == extractive(REQUEST, Params())


def test_an_empty_answer_and_the_drift_retry_go_extractive(server: FakeLLM) -> None:
    assert summarize(server, "ok", "   ").method == "extractive"
    server.clear()
    retry = Params().stronger(DriftSettings())
    assert summarize(server, "ok", "Something.", retry).method == "extractive"
    assert server.seen == []  # the retry does not call the model


def test_an_unreachable_endpoint_falls_back() -> None:
    llm = LlmSummarizer("http://127.0.0.1:9/v1", "m", timeout_s=0.5)
    assert llm(REQUEST, Params()).method == "extractive"
