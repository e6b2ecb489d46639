"""Embedded adapter: index maintenance off the query path (issue 35). A query searches the index
as maintenance left it plus an exact scan of the unindexed tail (bounded, flagged past the
bound); it never trains; maintenance (the upkeep thread, or flush) builds, trains, swaps and
persists; deletes are honoured at once, before, during and after a rebuild."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.store.factories import clustered, msg
from vcm.store.embedded import EmbeddedStore, messagebuild
from vcm.store.embedded.messagetail import LogRow, Tail, merge
from vcm.store.embedded.vectorindex import VectorIndex
from vcm.store.types import Page, RecallHit

A = "agent-a"
V = "test-v1"
DIM = 16
THRESHOLD = 200


def _spool(store: EmbeddedStore, points: np.ndarray, start: int = 0, **kw: Any) -> None:
    store.spool_messages([msg(A, start + i, f"turn {start + i}", **kw) for i in range(len(points))])
    store.put_message_vectors(A, [(f"m{start + i:04d}", p.tolist()) for i, p in enumerate(points)], V)


def _search(store: EmbeddedStore, query: np.ndarray, k: int = 10, mode: str = "vector") -> Page[RecallHit]:
    return store.search_recall_hybrid(A, "turn", query.tolist(), mode=mode, limit=k, embedding_version=V)


def _ids(page: Page[RecallHit]) -> list[int]:
    return [int(h.message.message_id[1:]) for h in page.items]


def _exact(points: np.ndarray, query: np.ndarray, k: int) -> list[int]:
    unit = points / np.linalg.norm(points, axis=1, keepdims=True)
    return [int(i) for i in np.argsort(-(unit @ (query / np.linalg.norm(query))), kind="stable")[:k]]


def _kind(store: EmbeddedStore) -> str | None:
    spaces = store._message_vectors.describe(A)
    return spaces[0]["kind"] if spaces else None


def _no_upkeep_thread(store: EmbeddedStore) -> None:
    """Queries no longer wake the upkeep thread (it starts on the first wake): maintenance runs
    only when the test flushes."""
    store._message_vectors.on_lag = None
    store._recall.on_stale = None


@pytest.fixture
def points() -> np.ndarray:
    pts, _ = clustered(8, 40, DIM, spread=0.2)
    return pts


@pytest.fixture
def no_training(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Fails any training; records the thread that tried."""
    tried: list[str] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        tried.append(threading.current_thread().name)
        raise AssertionError("training")

    monkeypatch.setattr(VectorIndex, "trained", classmethod(refuse))
    return tried


@contextlib.contextmanager
def held_build(built: threading.Event, release: threading.Event) -> Iterator[None]:
    """An index build that, once it has read SQLite, sets ``built`` and waits for ``release``
    before the swap: what a query or a write meets during a rebuild."""
    original = messagebuild.build

    def slow_build(*args: Any) -> Any:
        out = original(*args)
        built.set()
        assert release.wait(20)
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("vcm.store.embedded.messageindex.build", slow_build)
        yield


def test_the_first_query_after_a_load_scans_the_tail_and_never_trains(
    tmp_path: Path, points: np.ndarray, no_training: list[str]
) -> None:
    with EmbeddedStore(str(tmp_path / "vcm.db"), train_threshold=THRESHOLD) as store:
        _no_upkeep_thread(store)  # the query alone
        _spool(store, points)
        page = _search(store, points[5])
        assert _ids(page) == _exact(points, points[5], 10)  # exact over the tail: the full scan's result
        assert page.stats is not None and not page.stats.partial
        assert no_training == [] and _kind(store) is None  # nothing built by the query
        hybrid = _search(store, points[5], mode="hybrid")
        assert 5 in _ids(hybrid) and no_training == []


def test_past_the_tail_bound_a_query_says_it_is_partial(tmp_path: Path, points: np.ndarray) -> None:
    with EmbeddedStore(str(tmp_path / "vcm.db"), train_threshold=THRESHOLD, recall_tail_limit=50) as store:
        _no_upkeep_thread(store)
        _spool(store, points)
        page = _search(store, points[300])
        assert page.stats is not None and page.stats.partial and page.stats.unindexed >= len(points) - 50
        assert _ids(page)[0] == 300  # the newest 50 are scanned
        assert all(i >= len(points) - 50 for i in _ids(page))
        assert 5 not in _ids(_search(store, points[5]))  # the oldest are not: that is what partial says
        store.flush_vector_indexes()
        page = _search(store, points[5])
        assert page.stats is not None and not page.stats.partial and _ids(page)[0] == 5
        assert _kind(store) == "ivf"


def test_a_partial_hybrid_query_scores_the_text_hits_it_did_not_scan_by_their_text(
    tmp_path: Path, points: np.ndarray
) -> None:
    """Past the tail bound the vector half sees only the newest vectors: an older keyword match
    has a vector this search never scored, so it counts as unknown (its text score for both
    parts), not as a cosine of 0 that would rank it below the tail's every near vector."""
    with EmbeddedStore(str(tmp_path / "vcm.db"), train_threshold=THRESHOLD, recall_tail_limit=50) as store:
        _no_upkeep_thread(store)
        old = (5, 17, 29)  # far apart: no neighbour spreading between them
        store.spool_messages([msg(A, i, "the zebra crossed" if i in old else f"turn {i}") for i in range(len(points))])
        store.put_message_vectors(A, [(f"m{i:04d}", p.tolist()) for i, p in enumerate(points)], V)

        def zebra() -> tuple[Page[RecallHit], list[float]]:
            page = store.search_recall_hybrid(
                A, "zebra", points[300].tolist(), mode="hybrid", limit=5, embedding_version=V
            )
            return page, [h.score for h in page.items if int(h.message.message_id[1:]) in old]

        asked: list[tuple[str, Any]] = []
        query = store._db.query

        def recorded(action: str, sql: str, params: Any = ()) -> Any:
            if action == "read recall hit positions":
                asked.append((sql, params))
            return query(action, sql, params)

        store._db.query = recorded  # type: ignore[method-assign]
        page, scores = zebra()
        assert page.stats is not None and page.stats.partial
        assert sorted(_ids(page)[:3]) == list(old) and scores == pytest.approx([1.0] * 3)
        # Its position is read by primary key, not by a scan of the agent's (agent_id, seq) index.
        assert asked
        for sql, params in asked:
            plan = " ".join(str(r[-1]) for r in query("plan", f"EXPLAIN QUERY PLAN {sql}", params))
            assert "INTEGER PRIMARY KEY" in plan and "message_vectors" not in sql, plan
        store.flush_vector_indexes()  # now its vector is searched, and scored
        page, scores = zebra()
        assert page.stats is not None and not page.stats.partial
        assert len(scores) == 3 and all(0.5 <= s < 1.0 for s in scores)


def test_the_upkeep_thread_trains_and_later_queries_use_the_index(tmp_path: Path, points: np.ndarray) -> None:
    trained: list[str] = []
    niceness: list[int] = []
    original = VectorIndex.trained.__func__  # type: ignore[attr-defined]

    def spy(cls: type[VectorIndex], *args: Any) -> VectorIndex:
        trained.append(threading.current_thread().name)
        if sys.platform == "linux":  # the thread's own priority
            niceness.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        return original(cls, *args)  # type: ignore[no-any-return]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(VectorIndex, "trained", classmethod(spy))
        with EmbeddedStore(str(tmp_path / "vcm.db"), train_threshold=THRESHOLD) as store:
            _spool(store, points)
            assert _ids(_search(store, points[7]))[0] == 7  # wakes the upkeep thread
            deadline = time.monotonic() + 20
            while _kind(store) != "ivf" or store._message_vectors.describe(A)[0]["tail_rows"]:
                assert time.monotonic() < deadline, store._message_vectors.describe(A)
                time.sleep(0.05)
                _search(store, points[7])
            assert trained == ["vcm-index-upkeep"]  # trained once, in the upkeep thread
            if sys.platform == "linux":  # at a lower priority than the queries' thread
                assert niceness == [min(19, os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) + 10)]
            while not list((tmp_path / "vcm.db.faiss" / "messages").glob("*.faiss")):  # persisted after the swap
                assert time.monotonic() < deadline
                time.sleep(0.05)
            # The index serves now: hide the tail and the hits still come (from IVF, all lists probed).
            assert _ids(_search(store, points[7]))[:1] == [7]


def test_deletes_are_honoured_before_during_and_after_a_rebuild(tmp_path: Path, points: np.ndarray) -> None:
    now = 1_800_000_000.0
    doomed = {4, 150, 319}
    with EmbeddedStore(str(tmp_path / "vcm.db"), train_threshold=THRESHOLD, clock=lambda: now) as store:
        _no_upkeep_thread(store)
        store.spool_messages([msg(A, i, f"turn {i}", expires_at=now + 10 if i in doomed else None) for i in range(150)])
        store.put_message_vectors(A, [(f"m{i:04d}", points[i].tolist()) for i in range(150)], V)
        store.flush_vector_indexes()
        assert _kind(store) == "exact"
        more = range(150, len(points))
        store.spool_messages([msg(A, i, f"turn {i}", expires_at=now + 10 if i in doomed else None) for i in more])
        store.put_message_vectors(A, [(f"m{i:04d}", points[i].tolist()) for i in more], V)

        # A rebuild (exact -> IVF) in progress: the build has read SQLite, the expiry lands, then
        # the swap. Queries meanwhile, and after, never see an expired message.
        built, release = threading.Event(), threading.Event()
        with held_build(built, release):
            worker = threading.Thread(target=store.flush_vector_indexes)
            worker.start()
            assert built.wait(20)
            assert store.expire(now + 11) == len(doomed)
            for d in doomed:  # during: the old (exact) index + the tail, whose removes hide them
                assert d not in _ids(_search(store, points[d], 20))
            assert _kind(store) == "exact"
            release.set()
            worker.join(20)
        assert _kind(store) == "ivf"
        for d in doomed:  # after: the new index caught up with the removes before the swap
            top = _ids(_search(store, points[d], 20))
            assert d not in top and top
        survivors = [i for i in range(len(points)) if i not in doomed]
        assert store._message_vectors.describe(A)[0]["vectors"] == len(survivors)


def test_forget_during_a_rebuild_leaves_no_index_file(tmp_path: Path, points: np.ndarray) -> None:
    with EmbeddedStore(str(tmp_path / "vcm.db"), train_threshold=THRESHOLD) as store:
        _no_upkeep_thread(store)
        _spool(store, points)
        _search(store, points[0])
        built, release = threading.Event(), threading.Event()
        with held_build(built, release):
            worker = threading.Thread(target=store.flush_vector_indexes)
            worker.start()
            assert built.wait(20)
            store.delete_agent(A)
            release.set()
            worker.join(20)
        assert not list((tmp_path / "vcm.db.faiss" / "messages").glob("*"))
        assert _search(store, points[0]).items == []


def test_tail_keeps_the_newest_rows_and_hides_removed_ids() -> None:
    vec = np.ones(4, dtype="<f4") / 2
    tail = Tail(4, limit=3)
    tail.extend([LogRow(s, 1, s, vec.tobytes(), s) for s in (1, 2, 3, 4)])
    assert len(tail) == 3 and tail.partial(0) and not tail.partial(1)
    tail.extend([LogRow(5, -1, 3, None, None)])
    assert tail.hides() >= {3} and 3 not in tail.positions() and tail.removes() == 1
    tail.applied(4)
    assert len(tail) == 1 and not tail.partial(4)
    assert merge([(3, 0.9), (7, 0.5)], [(8, 0.5)], frozenset({3}), 5) == [(7, 0.5), (8, 0.5)]


def test_a_query_serves_the_loaded_text_searcher_and_the_upkeep_reloads_it(tmp_path: Path) -> None:
    with EmbeddedStore(str(tmp_path / "vcm.db"), text_index_lag_ok=False) as store:
        _no_upkeep_thread(store)
        store.spool_messages([msg(A, i, f"zebra {i}") for i in range(3)])
        assert len(store.search_recall(A, "zebra", 10).items) == 3  # the first query loads the searcher
        loaded = store._text.loaded()
        store.spool_messages([msg(A, 3, "zebra again"), msg(A, 4, "nothing")])  # indexed and committed now
        hits = store.search_recall(A, "zebra", 10).items
        assert {h.message.message_id for h in hits} == {f"m{i:04d}" for i in range(4)}  # the new one from the tail
        assert store._text.loaded() == loaded  # not reloaded by the query
        store.forget_message(A, "m0001")  # deleted from tantivy too, but the loaded searcher still has it
        assert "m0001" not in {h.message.message_id for h in store.search_recall(A, "zebra", 10).items}
        store._upkeep.run_once()
        assert store._text.loaded() != loaded  # reloaded off the query path
        assert len(store.search_recall(A, "zebra", 10).items) == 3


def test_a_stale_searcher_checks_its_hits_against_sqlite_only_after_a_delete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A searcher of an older generation is checked hit by hit (a deleted row would take a slot of
    the page) only when the index dropped deleted rows since it was loaded."""
    with EmbeddedStore(str(tmp_path / "vcm.db"), text_index_lag_ok=False) as store:
        _no_upkeep_thread(store)
        checked: list[int] = []
        check = store._recall._existing
        monkeypatch.setattr(store._recall, "_existing", lambda ranked: checked.append(len(ranked)) or check(ranked))
        store.spool_messages([msg(A, i, f"zebra {i}") for i in range(5)])
        assert len(store.search_recall(A, "zebra", 10).items) == 5  # loads the searcher
        loaded = store._text.loaded()
        store.spool_messages([msg(A, 5, "zebra again")])  # a new generation: the searcher is stale
        assert len(store.search_recall(A, "zebra", 10).items) == 6
        assert store._text.loaded() == loaded and checked == []  # stale, but nothing deleted since
        store.forget_message(A, "m0001")  # dropped from tantivy, still in the loaded searcher
        page = store.search_recall(A, "zebra", 4).items  # ties by age: m0001 would be second
        assert [h.message.message_id for h in page] == ["m0000", "m0002", "m0003", "m0004"]
        assert store._text.loaded() == loaded and checked
        store._upkeep.run_once()  # reloaded past the delete: no check needed any more
        checked.clear()
        assert len(store.search_recall(A, "zebra", 10).items) == 5
        store.spool_messages([msg(A, 6, "zebra once more")])
        assert len(store.search_recall(A, "zebra", 10).items) == 6 and checked == []


def test_partial_queries_place_their_candidates_from_the_persisted_members(
    tmp_path: Path, points: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reopened, while the persisted index file is still being read, hybrid recall places its
    text hits (their conversation positions, for neighbour spreading) from the persisted members,
    read first, not by a SQLite lookup per hit (about 10 ms a query at 1e6 messages, cold pages)."""
    with EmbeddedStore(str(tmp_path / "vcm.db"), train_threshold=THRESHOLD, recall_tail_limit=50) as store:
        _no_upkeep_thread(store)
        _spool(store, points)
        store.flush_vector_indexes()
        assert _kind(store) == "ivf"
        before = _ids(_search(store, points[5], mode="hybrid"))
    asked: list[int] = []
    during: list[Page[RecallHit]] = []
    original = VectorIndex.read

    def reading(key: Any, path: Path) -> Any:
        during.append(_search(reopened, points[5], mode="hybrid"))  # the index is not there yet
        return original(key, path)

    with EmbeddedStore(str(tmp_path / "vcm.db"), train_threshold=THRESHOLD, recall_tail_limit=50) as reopened:
        _no_upkeep_thread(reopened)
        real = reopened._seqs

        def counted(agent_id: str, ids: Any) -> Any:
            ids = list(ids)
            asked.extend(ids)
            return real(agent_id, ids)

        monkeypatch.setattr(reopened, "_seqs", counted)
        monkeypatch.setattr(VectorIndex, "read", staticmethod(reading))
        reopened.flush_vector_indexes()
        assert len(during) == 1 and during[0].stats is not None and during[0].stats.partial
        assert asked == []  # every candidate placed from memory
        assert _kind(reopened) == "ivf"
        assert all(s.placed is None for s in reopened._message_vectors._spaces.values())
        assert _ids(_search(reopened, points[5], mode="hybrid")) == before
