"""Summaries from any OpenAI-compatible chat endpoint, falling back to extractive on any failure.

The endpoint's answer is cut at sentence boundaries to the summary cap (a model's ``max_tokens``
counts its own tokenizer, not ours) and scored for drift like an extractive draft. The drift
retry does not ask the model again: it takes the extractive summary with the stronger setting,
which stays close to the source's own sentences. Nothing here raises: a timeout, an HTTP error,
or an answer that is not the expected JSON all end in the extractive summary, so eviction never
waits on, or fails because of, a model server.

Safety: the model reads the batch as fact units (:func:`vcm.tasks.summary.recursive.units_of`), in which every
sentence the poisoning filter flags is already a marked quote, and its answer is scanned again
sentence by sentence (a flagged one is replaced by its marked report), so nothing that reads like an
instruction reaches the summary bare.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import httpx

from vcm.settings.memory import SummarizerSettings
from vcm.tasks.summary import drift, units
from vcm.tasks.summary.centrality import candidates
from vcm.tasks.summary.recursive import extractive, room_for, sentence_lines, units_of
from vcm.tasks.summary.request import Draft, Params, Request

log = logging.getLogger(__name__)

INSTRUCTIONS = (
    "You keep the running summary of a conversation that an AI agent can no longer see. Merge the "
    "previous summary and the new messages into one updated summary of at most {cap} tokens. Keep "
    "every name, number, date and identifier, and who said what. Drop pleasantries. Write short "
    "plain sentences, one per line, with no preamble."
)


class LlmSummarizer:
    def __init__(
        self, url: str, model: str, *, api_key: str = "", timeout_s: float = 20.0, client: httpx.Client | None = None
    ) -> None:
        self.endpoint = url.rstrip("/") + "/chat/completions"
        self.model = model
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = client or httpx.Client(
            timeout=httpx.Timeout(timeout_s, connect=min(5.0, timeout_s)), headers=headers
        )

    @classmethod
    def of(cls, settings: SummarizerSettings) -> LlmSummarizer:
        return cls(
            settings.llm_url,
            settings.llm_model,
            api_key=os.environ.get(settings.llm_api_key_env, ""),
            timeout_s=settings.llm_timeout_s,
        )

    def __call__(self, request: Request, params: Params) -> Draft:
        if params.attempt > 0:
            return extractive(request, params)
        try:
            answer = self._complete(request)
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
            log.warning("LLM summariser failed (%r); using the extractive summary", exc)
            return extractive(request, params)
        lines, flagged = sentence_lines(answer, request, params)
        if not lines:
            log.warning("LLM summariser returned nothing usable; using the extractive summary")
            return extractive(request, params)
        source = candidates(request, params)
        text = "\n".join(lines)
        score = drift.similarity(request.embed(lines), source.vectors, source.weights)
        batch = units_of(request, params)
        salient, retained = units.retention(batch.batch, lines, batch.speakers)
        return Draft(
            text,
            request.count(text),
            score,
            "llm",
            len(lines),
            salient=salient,
            retained=retained,
            flagged=flagged + batch.flagged,
            room=room_for(request, batch),
        )

    def _complete(self, request: Request) -> str:
        transcript = "\n".join(u.line for u in units_of(request, Params(), telegraphic=False).batch)
        body: dict[str, Any] = {
            "model": self.model,
            "temperature": 0,
            "max_tokens": max(16, request.cap),
            "messages": [
                {"role": "system", "content": INSTRUCTIONS.format(cap=request.cap)},
                {
                    "role": "user",
                    "content": f"Previous summary:\n{request.previous or '(none)'}\n\nNew messages:\n{transcript}",
                },
            ],
        }
        response = self._client.post(self.endpoint, json=body)
        response.raise_for_status()
        content = response.json()["choices"][0]["message"]["content"]
        if not isinstance(content, str):
            raise TypeError("the answer's message content is not text")
        return content

    def close(self) -> None:
        self._client.close()
