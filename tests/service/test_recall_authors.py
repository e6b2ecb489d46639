"""Hybrid recall through the façade embeds the query without the names of the agent's message
authors it mentions (``[recall] query_vector_without_authors``, vcm.store.authors), and BM25 and
the store's author anchoring still read the query as written."""

from __future__ import annotations

from collections.abc import Sequence
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


def run(hot: HotState, path: Path) -> tuple[list[str], list[str]]:
    """What was embedded for two queries, and the hits of the one naming Caroline."""
    h = Harness(hot, str(path))
    embed = Recording()
    h.service.core.embed = embed
    try:
        h.service.create_agent("au", model="vcm-demo-2k")
        h.service.append("au", "user", "We went to the lake on Sunday", name="Caroline")
        h.service.append("au", "assistant", "The lake sounds lovely", name="Melanie")
        h.service.append("au", "user", "The weather was grey")
        embed.texts.clear()
        found = h.service.search_recall("au", "What did Caroline's family do at the lake?", limit=3)
        h.service.search_recall("au", "What about the weather?", limit=3)
        return embed.texts, [x.message.content for x in found.page.items]
    finally:
        h.close()


def test_the_query_vector_leaves_out_the_authors_it_names(hot: HotState, tmp_path: Path) -> None:
    embedded, hits = run(hot, tmp_path / "vcm.db")
    assert embedded == ["What did family do at the lake?", "What about the weather?"]
    assert hits[0] == "We went to the lake on Sunday"


def test_the_query_vector_keeps_them_when_the_setting_is_off(tmp_path: Path) -> None:
    settings = load_settings(environ={}, overrides={"recall": {"query_vector_without_authors": False}})
    hot = HotState(fakeredis.FakeRedis(decode_responses=True), settings)
    embedded, _ = run(hot, tmp_path / "vcm.db")
    assert embedded == ["What did Caroline's family do at the lake?", "What about the weather?"]
