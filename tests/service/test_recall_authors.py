"""Hybrid recall through the façade embeds the query without the names of the agent's message
authors it mentions (``[recall] query_vector_without_authors``, vcm.store.authors), and BM25 and
the store's author anchoring still read the query as written."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import fakeredis

from tests.doubles.embedder import hash_embed
from tests.doubles.harness import Harness
from vcm.hotpath.state import HotState
from vcm.settings import load_settings


class Recording:
    """hash_embed, remembering every text it embedded."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def __call__(self, texts: Sequence[str]) -> Any:
        self.texts.extend(texts)
        return hash_embed(texts)


@contextlib.contextmanager
def two_authors(hot: HotState, path: Path) -> Iterator[tuple[Harness, Recording]]:
    """Agent "au" with messages of Caroline and Melanie, its embedder recording from now on."""
    h = Harness(hot, str(path))
    embed = Recording()
    h.service.core.embed = embed
    try:
        h.service.create_agent("au", model="vcm-demo-2k")
        h.service.append("au", "user", "We went to the lake on Sunday", name="Caroline")
        h.service.append("au", "assistant", "The lake sounds lovely", name="Melanie")
        embed.texts.clear()
        yield h, embed
    finally:
        h.close()


def run(hot: HotState, path: Path) -> tuple[list[str], list[str]]:
    """What was embedded for two queries, and the hits of the one naming Caroline."""
    with two_authors(hot, path) as (h, embed):
        h.service.append("au", "user", "The weather was grey")
        embed.texts.clear()
        found = h.service.search_recall("au", "What did Caroline's family do at the lake?", limit=3)
        h.service.search_recall("au", "What about the weather?", limit=3)
        return embed.texts, [x.message.content for x in found.page.items]


def test_the_query_vector_leaves_out_the_authors_it_names(hot: HotState, tmp_path: Path) -> None:
    embedded, hits = run(hot, tmp_path / "vcm.db")
    assert embedded == ["What did family do at the lake?", "What about the weather?"]
    assert hits[0] == "We went to the lake on Sunday"


def test_the_query_vector_keeps_them_when_the_setting_is_off(tmp_path: Path) -> None:
    settings = load_settings(environ={}, overrides={"recall": {"query_vector_without_authors": False}})
    hot = HotState(fakeredis.FakeRedis(decode_responses=True), settings)
    embedded, _ = run(hot, tmp_path / "vcm.db")
    assert embedded == ["What did Caroline's family do at the lake?", "What about the weather?"]


def test_a_prompt_build_reads_the_authors_for_its_recall_vector_once(hot: HotState, tmp_path: Path) -> None:
    """The builder embeds the query and its name-free form in one call, and its recall search uses
    that text as worked out: the agent's authors are not read a second time for it."""
    with two_authors(hot, tmp_path / "vcm.db") as (h, embed):
        worked_out: list[str] = []
        vector_text = h.service.search.vector_text

        def counted(agent_id: str, query: str) -> str:
            worked_out.append(query)
            return vector_text(agent_id, query)

        h.service.search.vector_text = counted  # type: ignore[method-assign]
        built = h.service.build_context("au", query="What did Caroline do at the lake?")
        assert worked_out == ["What did Caroline do at the lake?"]
        assert embed.texts == ["What did Caroline do at the lake?", "What did do at the lake?"]
        assert built.query == "What did Caroline do at the lake?"
