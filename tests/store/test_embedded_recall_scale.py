"""Embedded recall at one agent's scale (issue 16): BM25 for an agent that owns most of the text
index (an unfiltered block-max WAND top-k, over-fetched and filtered, must equal the filtered
search), hybrid's candidate depth, and the message index's cheap upkeep. Real SQLite, tantivy
and FAISS."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import pytest

from tests.store.factories import msg
from vcm.store import fusion
from vcm.store.embedded import EmbeddedStore
from vcm.store.embedded import recall as recall_module
from vcm.store.embedded.messagebuild import single_threaded
from vcm.store.embedded.messagemembers import Members
from vcm.store.embedded.recall import dominant_fetch
from vcm.store.types import StoredMessage

A, B = "agent-a", "agent-b"
WORDS = [
    *("the", "of", "and", "to", "a", "in", "is", "tea", "kettle", "river"),
    *("stone", "lamp", "violin", "harbour", "glacier", "orchard"),
]


def _content(rng: np.random.Generator, n_words: int = 9) -> str:
    weights = 1.0 / np.arange(1, len(WORDS) + 1)
    picks = rng.choice(len(WORDS), size=n_words, p=weights / weights.sum())
    return " ".join(WORDS[int(i)] for i in picks)


def _messages(agent: str, start: int, n: int, rng: np.random.Generator) -> list[StoredMessage]:
    out = []
    for i in range(start, start + n):
        m = msg(agent, i, _content(rng))
        out.append(dataclasses.replace(m, message_id=f"{agent}-{i:05d}"))
    return out


def _ranked(store: EmbeddedStore, agent: str, query: str, limit: int) -> list[tuple[str, float]]:
    return [(h.message.message_id, round(h.score, 5)) for h in store.search_recall(agent, query, limit=limit).items]


def _count_calls(monkeypatch: pytest.MonkeyPatch, obj: Any, name: str) -> list[int]:
    calls: list[int] = []
    original: Callable[..., Any] = getattr(obj, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(obj, name, counted)
    return calls


QUERIES = ["the tea", "kettle river of", "glacier", "a violin and the harbour", "stone lamp", "orchard in"]


@pytest.fixture
def shared(tmp_path: Path) -> EmbeddedStore:
    """A owns 80 % of the messages, B the rest; all indexed, plus an unindexed tail of A."""
    rng = np.random.default_rng(16)
    store = EmbeddedStore(str(tmp_path / "vcm.db"))
    store.spool_messages(_messages(A, 0, 400, rng) + _messages(B, 0, 100, rng))
    assert store.flush_text_index()
    return store


def test_dominant_fetch_overfetches_by_the_agents_share() -> None:
    assert dominant_fetch(21, 1.0) == 26 + 16
    assert dominant_fetch(21, 0.5) == 51 + 16
    assert dominant_fetch(21, 0.2) is None  # below DOMINANT_SHARE: the filtered search
    assert dominant_fetch(0, 1.0) is None


def test_dominant_agent_gets_exactly_what_the_filtered_search_gives(
    shared: EmbeddedStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = shared
    store.search_recall(A, "tea")  # loads the searcher the indexer's commits made
    assert store._text.agent_share(A) == pytest.approx(0.8)
    assert store._text.agent_share(B) == pytest.approx(0.2)
    unions = _count_calls(monkeypatch, store._text, "search_any_agent")
    fast = {(A, q, k): _ranked(store, A, q, k) for q in QUERIES for k in (5, 20, 120)}
    assert len(unions) >= len(fast)
    before = len(unions)
    fast.update({(B, q, k): _ranked(store, B, q, k) for q in QUERIES for k in (5, 20, 120)})
    assert len(unions) == before  # B's share is below DOMINANT_SHARE: the filtered search
    monkeypatch.setattr(recall_module, "DOMINANT_SHARE", 2.0)  # never: always the filtered search
    slow = {key: _ranked(store, *key) for key in fast}
    assert fast == slow
    assert all(h[0].startswith(A) for (agent, _, _), hits in fast.items() if agent == A for h in hits)
    assert any(len(hits) == 120 for (agent, _, k), hits in fast.items() if agent == A and k == 120)


def test_dominant_path_keeps_the_tail_and_the_bound(shared: EmbeddedStore, monkeypatch: pytest.MonkeyPatch) -> None:
    store = shared
    # The indexer may not run while we look: the newest messages stay an unindexed tail.
    monkeypatch.setattr(store._indexer, "notify", lambda: None)
    first = store.search_recall(A, "glacier orchard", limit=10)
    assert first.next_cursor is not None
    store.spool_messages(_messages(A, 400, 30, np.random.default_rng(3)))

    def second_page() -> list[str]:
        page = store.search_recall(A, "glacier orchard", limit=10, cursor=first.next_cursor)
        return [h.message.message_id for h in page.items]

    fast_page, fresh = second_page(), _ranked(store, A, "glacier orchard", 200)
    monkeypatch.setattr(recall_module, "DOMINANT_SHARE", 2.0)
    assert fast_page == second_page()
    # A later page ranks the first page's corpus (ids up to its bound), not the new tail.
    assert fast_page and all(int(m.split("-")[-1]) < 400 for m in fast_page)
    assert fresh == _ranked(store, A, "glacier orchard", 200)
    assert any(int(m.split("-")[-1]) >= 400 for m, _ in fresh)  # a new search finds the tail


def test_dominant_path_falls_back_when_other_agents_fill_the_overfetch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(5)
    with EmbeddedStore(str(tmp_path / "vcm.db")) as store:
        # A owns 30 % (above DOMINANT_SHARE) but "zephyr" is almost only B's word, and B's
        # matches are shorter (they score higher): the over-fetched top holds one of A's.
        a_msgs = _messages(A, 0, 300, rng)
        a_msgs[7] = dataclasses.replace(a_msgs[7], content=a_msgs[7].content + " zephyr")
        b_msgs = [dataclasses.replace(m, content="zephyr tea") for m in _messages(B, 0, 700, rng)]
        store.spool_messages(a_msgs + b_msgs)
        assert store.flush_text_index()
        filtered = _count_calls(monkeypatch, store._text, "search")
        unions = _count_calls(monkeypatch, store._text, "search_any_agent")
        hits = _ranked(store, A, "zephyr", 5)
        assert len(unions) == 1 and len(filtered) == 1  # tried, came up short, fell back
        assert [m for m, _ in hits] == [f"{A}-00007"]


def test_hybrid_depth_is_proportional_to_the_page_beyond_a_conversations_size() -> None:
    big = fusion.HYBRID_FULL_DEPTH_UPTO + 1
    assert fusion.hybrid_depth(21, 1000, corpus=big) == 5 * 21
    assert fusion.hybrid_depth(3, 1000, corpus=big) == fusion.HYBRID_DEPTH_MIN
    assert fusion.hybrid_depth(999, 1000, corpus=big) == 1000
    assert fusion.hybrid_depth(21, 1000, corpus=big, factor=0) == 1000
    assert fusion.hybrid_depth(21, 1000, corpus=fusion.HYBRID_FULL_DEPTH_UPTO) == 1000  # LoCoMo-sized
    with pytest.raises(ValueError):
        fusion.hybrid_depth(-1, 1000, corpus=0)


def _hybrid_store(path: Path, factor: int) -> EmbeddedStore:
    store = EmbeddedStore(str(path), hybrid_depth_factor=factor)
    rng = np.random.default_rng(8)
    if not store.count_messages(A):
        msgs = _messages(A, 0, 300, rng)
        store.spool_messages(msgs)
        vecs = rng.standard_normal((300, 8))
        store.put_message_vectors(A, [(m.message_id, v.tolist()) for m, v in zip(msgs, vecs, strict=True)], "v1")
    return store


def test_hybrid_first_page_fuses_shallow_lists_and_pages_cover_everything_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    query = np.random.default_rng(9).standard_normal(8).tolist()
    pages: dict[int, list[list[str]]] = {}
    monkeypatch.setattr(fusion, "HYBRID_FULL_DEPTH_UPTO", 100)  # 300 vectors count as a large agent here
    for factor in (5, 0):
        with _hybrid_store(tmp_path / "vcm.db", factor) as store:
            depths: list[int] = []
            original = store._recall.rank

            def spy(
                agent: str, terms: list[str], n: int, depths: list[int] = depths, original: Any = original, **kw: Any
            ) -> Any:
                depths.append(n)
                return original(agent, terms, n, **kw)

            monkeypatch.setattr(store._recall, "rank", spy)
            page = store.search_recall_hybrid(A, "the tea", query, limit=20, embedding_version="v1")
            got = [[h.message.message_id for h in page.items]]
            while page.next_cursor:
                page = store.search_recall_hybrid(
                    A, "the tea", query, limit=20, cursor=page.next_cursor, embedding_version="v1"
                )
                got.append([h.message.message_id for h in page.items])
            pages[factor] = got
            # first page: limit + 1 ranked from lists 5 x 21 deep (or 1 000 deep with factor 0)
            assert depths[0] == (105 if factor else 1000)
            assert depths[1:] == [1000]  # the second page ranks the rest once, as deep as paging goes
    for got in pages.values():
        flat = [m for page in got for m in page]
        assert len(flat) == len(set(flat)) == 300  # every message once (all have vectors)
    # Shallower lists move the first page little (16 of 20 in common here, seeded).
    assert len(set(pages[5][0]) & set(pages[0][0])) >= 12
    # A conversation-sized agent keeps the full depth (as LoCoMo measured it).
    monkeypatch.undo()
    with _hybrid_store(tmp_path / "vcm.db", 5) as store:
        asked: list[int] = []
        rank = store._recall.rank

        def spy_full(agent: str, terms: list[str], n: int, **kw: Any) -> Any:
            asked.append(n)
            return rank(agent, terms, n, **kw)

        monkeypatch.setattr(store._recall, "rank", spy_full)
        page = store.search_recall_hybrid(A, "the tea", query, limit=20, embedding_version="v1")
        assert asked == [1000] and [h.message.message_id for h in page.items] == pages[0][0]


def test_members_merge_appends_new_ids_and_sorts_older_ones() -> None:
    members = Members()
    ids = np.arange(1, 10_001, dtype=np.int64)
    members.add(ids[:5000], ids[:5000] * 10)  # merged at 4096
    members.add(ids[5000:], ids[5000:] * 10)
    assert len(members) == 10_000
    assert members.positions([1, 5000, 5001, 10_000, 10_001]) == {1: 10, 5000: 50_000, 5001: 50_010, 10_000: 100_000}
    members.remove(np.array([5000], dtype=np.int64))
    members.add(np.array([5000, 20_000], dtype=np.int64), np.array([7, 8], dtype=np.int64))  # an older id again
    assert len(members) == 10_001
    assert np.all(np.diff(members.ids) > 0)
    assert members.positions([4999, 5000, 20_000]) == {4999: 49_990, 5000: 7, 20_000: 8}


def test_single_threaded_is_per_thread_and_restores() -> None:
    main_before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(2)
    seen: dict[str, int] = {}
    inside, release = threading.Event(), threading.Event()

    def work() -> None:
        seen["before"] = faiss.omp_get_max_threads()  # the thread's own default (the machine's)
        with single_threaded():
            seen["inside"] = faiss.omp_get_max_threads()
            inside.set()
            release.wait(5)
        seen["after"] = faiss.omp_get_max_threads()

    try:
        thread = threading.Thread(target=work)
        thread.start()
        assert inside.wait(5)
        seen["other thread meanwhile"] = faiss.omp_get_max_threads()
        release.set()
        thread.join()
    finally:
        faiss.omp_set_num_threads(main_before)
    assert seen["inside"] == 1 and seen["other thread meanwhile"] == 2 and seen["after"] == seen["before"]


def test_dominant_path_reads_each_rows_owner_once_and_drops_rows_deleted_since(
    shared: EmbeddedStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = shared
    monkeypatch.setattr(store._indexer, "notify", lambda: None)  # deletes stay pending in the index
    checked: list[int] = []
    real = store._db.query

    def counted(action: str, sql: str, params: Any = ()) -> Any:
        if action == "check recall hits' agent":
            checked.append(len(params))
        return real(action, sql, params)

    monkeypatch.setattr(store._db, "query", counted)
    first = _ranked(store, A, "kettle river", 40)
    assert checked and sum(checked) >= 40  # B's rows among the over-fetch are checked too
    checked.clear()
    assert _ranked(store, A, "kettle river", 40) == first
    assert checked == []  # every owner was known
    gone = first[0][0]
    store.forget_message(A, gone)
    after = _ranked(store, A, "kettle river", 40)
    assert gone not in [m for m, _ in after]
    assert [m for m, _ in after] == [m for m, _ in first if m != gone] + [m for m, _ in after][39:]
    monkeypatch.setattr(recall_module, "DOMINANT_SHARE", 2.0)  # the filtered search agrees
    assert _ranked(store, A, "kettle river", 40) == after
