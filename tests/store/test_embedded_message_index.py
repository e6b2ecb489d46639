"""Embedded adapter: the per-agent message vector index (exact -> IVF switch, keeping in step
with puts and expiry, persistence and rebuild, recall@k against exact search)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.store.factories import clustered, msg
from vcm.store.embedded import EmbeddedStore

A, B = "agent-a", "agent-b"
V = "test-v1"
DIM = 16
THRESHOLD = 200


def _spool(store: EmbeddedStore, agent: str, points: np.ndarray, start: int = 0, **kw: Any) -> None:
    store.spool_messages([msg(agent, start + i, f"turn {start + i}", **kw) for i in range(len(points))])
    store.put_message_vectors(agent, [(f"m{start + i:04d}", p.tolist()) for i, p in enumerate(points)], V)


def _top(store: EmbeddedStore, query: np.ndarray, k: int, agent: str = A, **kw: Any) -> list[int]:
    page = store.search_recall_hybrid(agent, "q", query.tolist(), mode="vector", limit=k, embedding_version=V, **kw)
    return [int(h.message.message_id[1:]) for h in page.items]


def _exact(points: np.ndarray, query: np.ndarray, k: int) -> list[int]:
    unit = points / np.linalg.norm(points, axis=1, keepdims=True)
    return [int(i) for i in np.argsort(-(unit @ (query / np.linalg.norm(query))), kind="stable")[:k]]


def _space(store: EmbeddedStore, agent: str = A) -> dict[str, Any]:
    """The agent's space after maintenance (what the upkeep thread does in the background)."""
    store.flush_vector_indexes(agent)
    spaces = store._message_vectors.describe(agent)
    assert len(spaces) == 1
    return spaces[0]


@pytest.fixture
def points() -> np.ndarray:
    pts, _ = clustered(8, 40, DIM, spread=0.2)
    return pts


def test_exact_below_the_threshold_then_ivf(tmp_path: Path, points: np.ndarray) -> None:
    with EmbeddedStore(str(tmp_path / "vcm.db"), train_threshold=THRESHOLD) as store:
        _spool(store, A, points[: THRESHOLD - 1])
        assert _top(store, points[5], 10) == _exact(points[: THRESHOLD - 1], points[5], 10)
        assert _space(store)["kind"] == "exact"

        _spool(store, A, points[THRESHOLD - 1 :], start=THRESHOLD - 1)
        top = _top(store, points[5], 10)
        space = _space(store)
        assert (space["kind"], space["vectors"]) == ("ivf", len(points))
        assert space["n_lists"] == len(points) // 39
        assert top[0] == 5
        assert list((tmp_path / "vcm.db.faiss" / "messages").glob("*.faiss"))


def test_agents_have_their_own_index(tmp_path: Path, points: np.ndarray) -> None:
    with EmbeddedStore(str(tmp_path / "vcm.db"), train_threshold=THRESHOLD) as store:
        _spool(store, A, points)
        _spool(store, B, points[:50])
        assert store._message_vectors.describe(A) == []  # loaded lazily, by maintenance
        assert _top(store, points[7], 5, agent=B) == _exact(points[:50], points[7], 5)
        assert _space(store, B)["vectors"] == 50
        _top(store, points[7], 5)
        assert _space(store, A)["kind"] == "ivf"


def test_restart_and_rebuild_give_the_same_results(tmp_path: Path, points: np.ndarray) -> None:
    path = str(tmp_path / "vcm.db")
    queries = points[::17]
    with EmbeddedStore(path, train_threshold=THRESHOLD) as store:
        _spool(store, A, points)
        before = [_top(store, q, 10) for q in queries]
        assert _space(store)["kind"] == "ivf"
        _spool(store, A, points[:20] * 1.01, start=len(points))  # after the persisted file
        # Copies score the same as their originals: compare one scorer (the index) with itself.
        store.flush_vector_indexes()
        after_put = [_top(store, q, 10) for q in queries]
    with EmbeddedStore(path, train_threshold=THRESHOLD) as store:
        store.flush_vector_indexes()
        assert [_top(store, q, 10) for q in queries] == after_put  # persisted index + the log
        store.rebuild_vector_indexes()
        assert not list((tmp_path / "vcm.db.faiss" / "messages").glob("*.faiss"))
        store.flush_vector_indexes()
        assert [_top(store, q, 10) for q in queries] == after_put  # rebuilt from SQLite
        assert _space(store)["vectors"] == len(points) + 20
    assert before  # the first run searched too


def test_another_process_puts_are_seen(tmp_path: Path, points: np.ndarray) -> None:
    path = str(tmp_path / "vcm.db")
    with EmbeddedStore(path, train_threshold=THRESHOLD) as reader, EmbeddedStore(path) as writer:
        _spool(writer, A, points[:100])
        assert _top(reader, points[3], 1) == [3]
        _spool(writer, A, points[100:], start=100)
        assert _top(reader, points[250], 1) == [250]
        assert _space(reader)["vectors"] == len(points)


@pytest.mark.parametrize("n", [100, 320], ids=["exact", "ivf"])
def test_expiry_removes_vectors_from_the_index(tmp_path: Path, points: np.ndarray, n: int) -> None:
    now = 1_800_000_000.0
    with EmbeddedStore(str(tmp_path / "vcm.db"), train_threshold=THRESHOLD, clock=lambda: now) as store:
        store.spool_messages(
            [msg(A, i, f"turn {i}", expires_at=None if i % 2 else now + 10) for i in range(n)]  # even ids expire
        )
        store.put_message_vectors(A, [(f"m{i:04d}", points[i].tolist()) for i in range(n)], V)
        survivors = np.arange(1, n, 2)
        seen = _top(store, points[4], 5)
        assert seen[0] == 4 and _space(store)["vectors"] == n
        assert store.expire(now + 11) == n // 2

        top = _top(store, points[4], 20)
        assert top and all(i % 2 for i in top)
        assert _space(store)["vectors"] == n // 2
        if n < THRESHOLD:  # exact: exactly the survivors' ranking
            exact = _exact(points[survivors], points[4], 20)
            assert top == [int(survivors[i]) for i in exact]


def test_time_window_on_an_ivf_index_is_searched_exactly(tmp_path: Path, points: np.ndarray) -> None:
    with EmbeddedStore(str(tmp_path / "vcm.db"), train_threshold=THRESHOLD) as store:
        _spool(store, A, points)
        assert _space(store)["kind"] == "ivf"
        assert _top(store, points[0], 1) == [0]
        lo, hi = 40, 60  # created_at = 1.7e9 + i
        top = _top(store, points[0], 10, since=1_700_000_000.0 + lo, until=1_700_000_000.0 + hi)
        assert top == [lo + i for i in _exact(points[lo:hi], points[0], 10)]


def test_recall_at_10_against_exact_on_clustered_vectors(tmp_path: Path) -> None:
    pts, _ = clustered(50, 80, 32, spread=0.1, seed=3)  # 4 000 vectors, IVF at default settings
    rng = np.random.default_rng(9)
    queries = pts[rng.choice(len(pts), 40, replace=False)] + rng.normal(scale=0.05, size=(40, 32))
    with EmbeddedStore(str(tmp_path / "vcm.db"), train_threshold=1000) as store:
        _spool(store, A, pts)
        space = _space(store)
        assert space["kind"] == "ivf" and space["n_lists"] == 63
        found = [_top(store, q, 10) for q in queries]
    recall = np.mean([len(set(f) & set(_exact(pts, q, 10))) / 10 for f, q in zip(found, queries, strict=True)])
    assert recall >= 0.95
