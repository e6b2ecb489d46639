"""Embedded adapter: persistence, lifecycle, error mapping, cursor expiry and depth."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.doubles.clock import Clock
from tests.store.factories import FaultSwitch, chunk, eviction, msg
from vcm.errors import ErrorCode, StoreUnavailable, ValidationError
from vcm.store import open_store
from vcm.store.embedded import EmbeddedStore
from vcm.store.types import CoreBlockWrite, Edge, MemoryEvent, message_node, summary_node

A = "agent-a"


def test_everything_survives_a_reopen_and_revs_keep_growing(tmp_path: Path) -> None:
    db = str(tmp_path / "nested" / "vcm.db")
    with EmbeddedStore(db) as store:
        block = store.put_core(CoreBlockWrite(A, "persona", "system", "me", 1), None, "k1")
        result = store.commit_eviction(eviction(A, 1, [msg(A, 0, "old llama story")], None))
        store.append_event(MemoryEvent(A, "append", {"n": 1}, event_id="e1"))
        store.add_edge(Edge("cites", message_node(A, "m0000"), message_node(A, "m0001"), A))
        store.ingest_archival([chunk(A, "doc", 0, [1.0, 0.0, 0.0])])

    reopened = open_store(f"sqlite:///{db}")
    try:
        assert isinstance(reopened, EmbeddedStore)
        assert reopened.get_core(A, "persona") == block
        assert reopened.put_core(CoreBlockWrite(A, "persona", "system", "me", 1), None, "k1") == block
        summary = reopened.get_summary(A)
        assert summary is not None and summary.rev == result.summary_rev
        assert [h.message.message_id for h in reopened.search_recall(A, "llama").items] == ["m0000"]
        assert [e.event_id for e in reopened.query_events(A, ["append"]).items] == ["e1"]
        assert reopened.traverse(summary_node(A), max_depth=2) == [
            message_node(A, "m0000"),
            message_node(A, "m0001"),
        ]
        assert reopened.search_archival(A, [1.0, 0.1, 0.0], k=1).items[0].chunk.doc_id == "doc"
        newer = reopened.put_core(CoreBlockWrite(A, "persona", "system", "me too", 1), block.rev, "k2")
        assert int(newer.rev) > int(result.summary_rev) > int(block.rev)
    finally:
        reopened.close()


def test_memory_store_cleans_up_its_directory() -> None:
    store = EmbeddedStore(":memory:")
    store.spool_messages([msg(A, 0, "ephemeral")])
    directory = Path(store.path).parent
    assert store.count_messages(A) == 1 and directory.exists()

    store.close()

    assert not directory.exists()
    with pytest.raises(StoreUnavailable):
        store.count_messages(A)


def test_busy_database_maps_to_store_unavailable(tmp_path: Path) -> None:
    db = str(tmp_path / "vcm.db")
    with EmbeddedStore(db, busy_timeout_s=0.1) as store:
        blocker = sqlite3.connect(db, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(StoreUnavailable) as info:
                store.put_core(CoreBlockWrite(A, "b", "system", "x", 1), None, "k")
            assert info.value.code is ErrorCode.STORE_UNAVAILABLE and "retry" in info.value.message
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert store.put_core(CoreBlockWrite(A, "b", "system", "x", 1), None, "k").content == "x"


def test_a_fault_hook_error_of_any_type_rolls_back(tmp_path: Path) -> None:
    def hook(point: str) -> None:
        if point == "put_core.before_commit":
            raise RuntimeError("disk on fire")

    with EmbeddedStore(str(tmp_path / "vcm.db"), fault_hook=hook) as store:
        with pytest.raises(StoreUnavailable, match="disk on fire"):
            store.put_core(CoreBlockWrite(A, "b", "system", "x", 1), None, "k")
        assert store.list_core(A) == []


def test_fault_points_are_named(tmp_path: Path) -> None:
    faults = FaultSwitch()
    with EmbeddedStore(str(tmp_path / "vcm.db"), fault_hook=faults, text_index_lag_ok=False) as store:
        store.commit_eviction(eviction(A, 1, [msg(A, 0)], None))
    assert faults.seen[:3] == [
        "commit_eviction.after_recall_append",
        "commit_eviction.before_commit",
        "text_index.after_index_commit",
    ]


def test_cursors_expire(tmp_path: Path) -> None:
    clock = Clock(now=1_000_000.0)
    with EmbeddedStore(str(tmp_path / "vcm.db"), clock=clock, cursor_ttl_s=60) as store:
        store.spool_messages([msg(A, i, "heron sighting") for i in range(5)])
        cursor = store.search_recall(A, "heron", limit=2).next_cursor
        assert cursor is not None
        clock.now += 30
        assert len(store.search_recall(A, "heron", limit=2, cursor=cursor).items) == 2

        clock.now += 31
        with pytest.raises(ValidationError, match="expired"):
            store.search_recall(A, "heron", limit=2, cursor=cursor)


def test_paging_depth_is_bounded_by_cursor_max_results(tmp_path: Path) -> None:
    with EmbeddedStore(str(tmp_path / "vcm.db"), cursor_max_results=7) as store:
        store.spool_messages([msg(A, i, "puffin colony") for i in range(20)])
        seen: list[str] = []
        page = store.search_recall(A, "puffin", limit=3)
        seen += [h.message.message_id for h in page.items]
        while page.next_cursor is not None:
            page = store.search_recall(A, "puffin", limit=3, cursor=page.next_cursor)
            seen += [h.message.message_id for h in page.items]
        assert len(seen) == len(set(seen)) == 7


def test_bad_constructor_arguments(tmp_path: Path) -> None:
    for kwargs in ({"n_probe": 0}, {"n_lists": 0}, {"train_threshold": -1}, {"cursor_ttl_s": 0.0}):
        with pytest.raises(ValidationError):
            EmbeddedStore(str(tmp_path / "vcm.db"), **kwargs)


def test_wide_pages_snapshot_at_once_and_stay_stable(tmp_path: Path) -> None:
    with EmbeddedStore(str(tmp_path / "vcm.db")) as store:
        store.spool_messages([msg(A, i, f"ibis note {i}") for i in range(260)])
        page = store.search_recall(A, "ibis", limit=120)
        seen = [h.message.message_id for h in page.items]
        n = 1000
        while page.next_cursor is not None:
            store.spool_messages([msg(A, n, "ibis ibis ibis")])
            n += 1
            page = store.search_recall(A, "ibis", limit=120, cursor=page.next_cursor)
            seen += [h.message.message_id for h in page.items]
        assert len(seen) == len(set(seen)) == 260
        assert max(seen) < "m1000"
