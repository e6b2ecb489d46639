"""Embedded adapter: the tantivy index is derived from SQLite, lags safely, and self-repairs."""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tantivy

from tests.store.factories import FaultSwitch, msg
from vcm.errors import InjectedFailure
from vcm.store.embedded import EmbeddedStore
from vcm.store.embedded import recall as recall_module
from vcm.store.embedded.background import NICE
from vcm.store.embedded.textindex import TextIndex

A = "agent-a"
TOPICS = ["alpine hiking trip", "sourdough bread baking", "quarterly tax filing", "jazz piano lesson"]


def _messages(n: int, start: int = 0) -> list[Any]:
    return [msg(A, i, f"{TOPICS[i % 4]} number {i} token{i}") for i in range(start, start + n)]


def _text(store: EmbeddedStore) -> dict[str, Any]:
    details = store.health().details
    return {**details["text_index"], "lag": details["text_index_lag"]}


def _ids(store: EmbeddedStore, query: str, limit: int = 50) -> list[str]:
    return [h.message.message_id for h in store.search_recall(A, query, limit=limit).items]


@contextlib.contextmanager
def writer_held_elsewhere(db: Path) -> Iterator[None]:
    """Hold tantivy's writer lock as another process would (once the store's indexer let go)."""
    index = tantivy.Index.open(f"{db}.tantivy")
    deadline = time.monotonic() + 10
    while True:
        try:
            writer = index.writer(heap_size=15_000_000, num_threads=1)
            break
        except ValueError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)
    try:
        yield
    finally:
        writer.wait_merging_threads()


def test_text_index_is_rebuilt_when_its_directory_is_deleted(tmp_path: Path) -> None:
    db = tmp_path / "vcm.db"
    with EmbeddedStore(str(db)) as store:
        store.spool_messages(_messages(40))
        assert store.flush_text_index()
        before = _ids(store, "sourdough baking")
    shutil.rmtree(f"{db}.tantivy")

    with EmbeddedStore(str(db)) as store:
        state = _text(store)
        assert (state["lag"], state["documents"], state["high_water_mark"]) == (0, 40, 40)
        assert _ids(store, "sourdough baking") == before
        assert len(before) == 10


def test_corrupt_text_index_is_rebuilt_at_open(tmp_path: Path) -> None:
    db = tmp_path / "vcm.db"
    with EmbeddedStore(str(db)) as store:
        store.spool_messages(_messages(12))
    (Path(f"{db}.tantivy") / "meta.json").write_text("{not json")

    with EmbeddedStore(str(db)) as store:
        assert _text(store)["documents"] == 12
        assert _ids(store, "token7") == ["m0007"]


def test_index_behind_sqlite_catches_up_at_open(tmp_path: Path) -> None:
    db = tmp_path / "vcm.db"
    store = EmbeddedStore(str(db))
    store.spool_messages(_messages(5))
    assert store.flush_text_index()
    with writer_held_elsewhere(db):
        store.spool_messages(_messages(20, start=5))
        assert store.flush_text_index(timeout_s=0.05) is False
        # Read-after-write while another process owns the index: the tail comes from SQLite.
        assert _ids(store, "token17") == ["m0017"]
        assert _text(store)["lag"] == 20
        store.close()  # its last catch-up attempt fails too: the index stays behind

    with EmbeddedStore(str(db)) as reopened:
        state = _text(reopened)
        assert (state["lag"], state["documents"]) == (0, 25)
        assert _ids(reopened, "token17") == ["m0017"]


def test_crash_after_index_commit_never_duplicates_hits(tmp_path: Path) -> None:
    db = tmp_path / "vcm.db"
    faults = FaultSwitch()
    faults.armed.add("text_index.after_index_commit")
    store = EmbeddedStore(str(db), fault_hook=faults, text_index_lag_ok=False)
    try:
        store.spool_messages(_messages(8))  # tantivy commits, the mark is never recorded
        with pytest.raises(InjectedFailure):
            store.flush_text_index()
        state = _text(store)
        assert (state["documents"], state["high_water_mark"]) == (8, 0)
        assert _ids(store, "alpine hiking") == ["m0000", "m0004"]

        faults.armed.clear()
        assert store.flush_text_index()
        state = _text(store)
        assert (state["documents"], state["high_water_mark"], state["lag"]) == (8, 8, 0)
        assert _ids(store, "alpine hiking") == ["m0000", "m0004"]
    finally:
        faults.armed.clear()
        store.close()


def test_tail_scores_equal_index_scores(tmp_path: Path) -> None:
    db = tmp_path / "vcm.db"
    with EmbeddedStore(str(db)) as store:
        store.spool_messages(_messages(30))
        assert store.flush_text_index()
        with writer_held_elsewhere(db):
            store.spool_messages(_messages(10, start=30))
            from_tail = store.search_recall(A, "jazz piano token35 lesson", limit=20).items
            assert _text(store)["lag"] == 10
        assert store.flush_text_index()
        from_index = store.search_recall(A, "jazz piano token35 lesson", limit=20).items

    assert _text_ids(from_tail) == _text_ids(from_index)
    assert from_tail[0].message.message_id == "m0035"
    # Hits from the tail were scored in Python with the statistics tantivy uses once it has
    # indexed them (the others were scored by tantivy over the smaller corpus of the moment).
    tail_scores = {h.message.message_id: h.score for h in from_tail if h.message.seq >= 30}
    index_scores = {h.message.message_id: h.score for h in from_index if h.message.seq >= 30}
    assert len(tail_scores) == 3
    assert tail_scores == pytest.approx(index_scores, rel=1e-5)


def test_the_tail_is_analysed_once_per_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "vcm.db"
    analysed: list[str] = []
    real = recall_module.analyze
    monkeypatch.setattr(recall_module, "analyze", lambda text: analysed.append(text) or real(text))
    monkeypatch.setattr(recall_module, "TAIL_TERMS_KEPT", 6)
    with EmbeddedStore(str(db)) as store:
        store.spool_messages(_messages(30))
        assert store.flush_text_index()
        with writer_held_elsewhere(db):
            store.spool_messages(_messages(5, start=30))
            first = store.search_recall(A, "jazz piano token33 lesson", limit=20).items
            assert len(analysed) == 5  # the five unindexed rows
            again = store.search_recall(A, "jazz piano token33 lesson", limit=20).items
            assert len(analysed) == 5 and [(h.message.message_id, h.score) for h in again] == [
                (h.message.message_id, h.score) for h in first
            ]
            store.spool_messages(_messages(3, start=35))  # eight unindexed rows: three new ones analysed
            store.search_recall(A, "jazz piano", limit=20)
            assert len(analysed) == 5 + 3
            assert len(store._recall._tail_terms) == 6  # bounded


def _text_ids(hits: list[Any]) -> list[str]:
    return [h.message.message_id for h in hits]


def test_background_indexer_catches_up_without_a_flush(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    applied: list[tuple[str, int]] = []  # the applying thread's name and nice value
    original = TextIndex.apply

    def spy(*args: Any, **kwargs: Any) -> None:
        applied.append((threading.current_thread().name, os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))
        original(*args, **kwargs)

    monkeypatch.setattr(TextIndex, "apply", staticmethod(spy))
    with EmbeddedStore(str(tmp_path / "vcm.db")) as store:
        store.spool_messages(_messages(30))
        deadline = time.monotonic() + 10
        while _text(store)["lag"] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _text(store)["lag"] == 0
        assert _text(store)["documents"] == 30
    # Indexed in the background thread, at a lower priority than the caller's (queries come first).
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    assert applied and set(applied) == {("vcm-text-indexer", min(19, mine + NICE))}


def test_synchronous_indexing_when_lag_is_not_ok(tmp_path: Path) -> None:
    with EmbeddedStore(str(tmp_path / "vcm.db"), text_index_lag_ok=False) as store:
        store.spool_messages(_messages(6))
        assert (_text(store)["lag"], _text(store)["documents"]) == (0, 6)


def test_expired_messages_leave_the_text_index(tmp_path: Path) -> None:
    with EmbeddedStore(str(tmp_path / "vcm.db"), text_index_lag_ok=False) as store:
        store.spool_messages([msg(A, i, "walrus fact", expires_at=100.0 if i < 3 else None) for i in range(6)])
        assert _text(store)["documents"] == 6

        assert store.expire(200.0) == 3
        assert store.flush_text_index()

        state = _text(store)
        assert (state["documents"], state["pending_deletes"]) == (3, 0)
        assert sorted(_ids(store, "walrus")) == ["m0003", "m0004", "m0005"]


def test_expired_but_still_indexed_messages_are_not_returned(tmp_path: Path) -> None:
    db = tmp_path / "vcm.db"
    with EmbeddedStore(str(db)) as store:
        store.spool_messages([msg(A, i, "walrus fact", expires_at=100.0 if i < 3 else None) for i in range(6)])
        assert store.flush_text_index()
        with writer_held_elsewhere(db):
            store.expire(200.0)
            assert _text(store)["pending_deletes"] == 3
            assert sorted(_ids(store, "walrus", limit=3)) == ["m0003", "m0004", "m0005"]


def test_rebuild_text_index_gives_the_same_answers(tmp_path: Path) -> None:
    with EmbeddedStore(str(tmp_path / "vcm.db"), text_index_lag_ok=False) as store:
        store.spool_messages(_messages(50))
        before = store.search_recall(A, "quarterly tax", limit=20).items

        store.rebuild_text_index()

        after = store.search_recall(A, "quarterly tax", limit=20).items
        assert _text_ids(after) == _text_ids(before) and len(after) == 12
        assert [h.score for h in after] == pytest.approx([h.score for h in before])
        assert _text(store)["documents"] == 50
