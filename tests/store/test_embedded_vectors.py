"""Embedded adapter: FAISS exact -> IVF switch, nProbe, persistence, rebuild from SQLite."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.store.factories import chunk, clustered
from vcm.store.embedded import EmbeddedStore

A = "agent-a"
DIM = 16


def _spaces(store: EmbeddedStore) -> list[dict[str, Any]]:
    spaces: list[dict[str, Any]] = store.health().details["vector_spaces"]
    return spaces


def _ingest(store: EmbeddedStore, points: np.ndarray, start: int = 0, **kw: Any) -> None:
    store.ingest_archival([chunk(A, "doc", start + i, p, **kw) for i, p in enumerate(points)])


def _exact_top(points: np.ndarray, query: np.ndarray, k: int) -> list[int]:
    unit = points / np.linalg.norm(points, axis=1, keepdims=True)
    sims = unit @ (query / np.linalg.norm(query))
    return [int(i) for i in np.argsort(-sims, kind="stable")[:k]]


def _top(store: EmbeddedStore, query: np.ndarray, k: int, **kw: Any) -> list[int]:
    return [h.chunk.chunk_index for h in store.search_archival(A, query.tolist(), k=k, **kw).items]


@pytest.fixture
def points() -> np.ndarray:
    pts, _ = clustered(8, 40, DIM, spread=0.2)
    return pts


def test_exact_until_threshold_then_ivf(tmp_path: Path, points: np.ndarray) -> None:
    with EmbeddedStore(str(tmp_path / "vcm.db"), train_threshold=200, n_lists=4) as store:
        _ingest(store, points[:150])
        assert _top(store, points[3], 5) == _exact_top(points[:150], points[3], 5)
        assert [s["kind"] for s in _spaces(store)] == ["exact"]
        assert store.health().details["vector_index"] == "exact"

        _ingest(store, points[150:], start=150)
        top = _top(store, points[3], 5)

        space = _spaces(store)[0]
        assert (space["kind"], space["n_lists"], space["vectors"]) == ("ivf", 4, 320)
        assert store.health().details["vector_index"] == "ivf"
        assert top[0] == 3
        assert list((tmp_path / "vcm.db.faiss").glob("*.faiss"))


def test_n_probe_bounds_the_lists_searched(tmp_path: Path, points: np.ndarray) -> None:
    with EmbeddedStore(str(tmp_path / "vcm.db"), train_threshold=200, n_lists=4, n_probe=4) as store:
        _ingest(store, points)

        one_list = store.search_archival(A, points[0].tolist(), k=300, n_probe=1)
        all_lists = store.search_archival(A, points[0].tolist(), k=300)

        assert 0 < len(one_list.items) < 300 and one_list.next_cursor is None  # list exhausted
        assert len(all_lists.items) == 300 and all_lists.next_cursor is not None
        # Probing every list is exact search.
        assert _top(store, points[77], 10) == _exact_top(points, points[77], 10)


def test_auto_n_lists_is_sqrt_n_capped(tmp_path: Path, points: np.ndarray) -> None:
    with EmbeddedStore(str(tmp_path / "vcm.db"), train_threshold=100) as store:
        _ingest(store, points)
        _top(store, points[0], 3)
        assert _spaces(store)[0]["n_lists"] == 320 // 39


def test_a_backlog_that_doubles_n_lists_retrains_with_every_vector(tmp_path: Path, points: np.ndarray) -> None:
    with EmbeddedStore(str(tmp_path / "vcm.db"), train_threshold=100) as store:
        _ingest(store, points[:160])
        _top(store, points[0], 3)
        assert (_spaces(store)[0]["n_lists"], _spaces(store)[0]["vectors"]) == (160 // 39, 160)

        _ingest(store, points[160:], start=160)  # 320 vectors: 8 lists now fit
        top = _top(store, points[200], 3, n_probe=8)

        space = _spaces(store)[0]
        assert (space["kind"], space["n_lists"], space["vectors"], space["hwm"]) == ("ivf", 8, 320, 320)
        assert top[0] == 200


def test_trained_index_persists_across_reopen(tmp_path: Path, points: np.ndarray) -> None:
    db = str(tmp_path / "vcm.db")
    with EmbeddedStore(db, train_threshold=200, n_lists=4, n_probe=2) as store:
        _ingest(store, points)
        before = store.search_archival(A, points[5].tolist(), k=10).items
    files = list((tmp_path / "vcm.db.faiss").glob("*.faiss"))
    assert len(files) == 1
    mtime = files[0].stat().st_mtime_ns

    with EmbeddedStore(db, train_threshold=200, n_lists=4, n_probe=2) as store:
        assert _spaces(store)[0]["kind"] == "ivf"  # known from disk before any search
        after = store.search_archival(A, points[5].tolist(), k=10).items
        assert _spaces(store)[0]["vectors"] == 320

    assert [(h.chunk.chunk_index, h.score) for h in after] == [(h.chunk.chunk_index, h.score) for h in before]
    assert files[0].stat().st_mtime_ns == mtime  # loaded, not retrained


@pytest.mark.parametrize("damage", ["delete", "corrupt", "rebuild"])
def test_vector_index_is_rebuilt_from_sqlite(tmp_path: Path, points: np.ndarray, damage: str) -> None:
    db = str(tmp_path / "vcm.db")
    with EmbeddedStore(db, train_threshold=200, n_lists=4, n_probe=4) as store:
        _ingest(store, points)
        before = _top(store, points[9], 10)
        if damage == "rebuild":
            store.rebuild_vector_indexes()
            assert _top(store, points[9], 10) == before
            return
    path = next((tmp_path / "vcm.db.faiss").glob("*.faiss"))
    if damage == "delete":
        path.unlink()
    else:
        path.write_bytes(b'{"format": 1}\nnot a faiss index')

    with EmbeddedStore(db, train_threshold=200, n_lists=4, n_probe=4) as store:
        assert _top(store, points[9], 10) == before
        assert _spaces(store)[0]["kind"] == "ivf"


def test_chunks_ingested_through_another_handle_are_found(tmp_path: Path, points: np.ndarray) -> None:
    db = str(tmp_path / "vcm.db")
    with EmbeddedStore(db, train_threshold=200, n_lists=4, n_probe=4) as writer, EmbeddedStore(db) as reader:
        _ingest(writer, points[:100])
        assert _top(reader, points[10], 1) == [10]
        _ingest(writer, points[100:], start=100)  # crosses the training threshold elsewhere
        assert _top(reader, points[250], 1) == [250]


def test_versions_and_metrics_are_separate_spaces(tmp_path: Path, points: np.ndarray) -> None:
    with EmbeddedStore(str(tmp_path / "vcm.db")) as store:
        _ingest(store, points[:20], version="v1")
        _ingest(store, points[20:40] * 3.0, start=20, version="v2")
        _ingest(store, points[40:60], start=40, metric="l2")

        both = _top(store, points[25], 3)
        only_v1 = _top(store, points[25], 3, embedding_version="v1")
        l2 = _top(store, points[45], 1, metric="l2")

        assert both[0] == 25 and all(i < 40 for i in both)
        assert all(i < 20 for i in only_v1)
        assert l2 == [45]
        assert {(s["metric"], s["embedding_version"]) for s in _spaces(store)} == {
            ("cosine", "v1"),
            ("cosine", "v2"),
            ("l2", "v1"),
        }
