"""Embedded adapter: several processes writing one store (WAL, BEGIN IMMEDIATE, one tantivy
writer at a time, everyone else catching up from SQLite)."""

from __future__ import annotations

import multiprocessing
import uuid
from pathlib import Path

import pytest

from tests.store.factories import chunk, eviction, msg
from vcm.errors import RevConflict
from vcm.store.embedded import EmbeddedStore
from vcm.store.types import CoreBlockWrite

WORKERS = 3
MESSAGES = 60
INCREMENTS = 10
SHARED = "shared"


def _worker(db: str, worker: int) -> None:
    agent = f"agent-{worker}"
    store = EmbeddedStore(db)
    try:
        for start in range(0, MESSAGES, 10):
            store.spool_messages(
                [msg(agent, i, f"process{worker} wrote kiwi{worker}x{i}") for i in range(start, start + 10)]
            )
            # Reads its own writes whoever owns the text index at the moment.
            hit = store.search_recall(agent, f"kiwi{worker}x{start + 9}").items
            assert [h.message.message_id for h in hit] == [f"m{start + 9:04d}"]
        done = 0
        while done < INCREMENTS:
            current = store.get_core(SHARED, "counter")
            try:
                store.put_core(
                    CoreBlockWrite(SHARED, "counter", "system", str(int(current.content) + 1), 1),
                    current.rev,
                    uuid.uuid4().hex,
                )
                done += 1
            except RevConflict:
                pass
        rev = None
        for batch in (1, 2, 3):
            rev = store.commit_eviction(
                eviction(agent, batch, [msg(agent, 100 + batch, f"evicted kiwi{worker}e{batch}")], rev)
            ).summary_rev
        store.ingest_archival([chunk(agent, "doc", i, [float(worker + 1), float(i + 1), 1.0]) for i in range(5)])
    finally:
        store.close()


@pytest.mark.slow
def test_processes_write_one_store_without_losing_anything(tmp_path: Path) -> None:
    db = str(tmp_path / "vcm.db")
    with EmbeddedStore(db) as store:
        store.put_core(CoreBlockWrite(SHARED, "counter", "system", "0", 1), None, "seed")

    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(db, w)) for w in range(WORKERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * WORKERS

    with EmbeddedStore(db) as store:
        assert store.get_core(SHARED, "counter").content == str(WORKERS * INCREMENTS)
        details = store.health().details
        total = WORKERS * (MESSAGES + 3)
        assert details["text_index_lag"] == 0
        assert details["text_index"]["documents"] == total  # each message indexed exactly once
        for w in range(WORKERS):
            agent = f"agent-{w}"
            assert store.count_messages(agent) == MESSAGES + 3
            assert store.committed_batches(agent) == [1, 2, 3]
            assert len(store.get_archival(agent, "doc")) == 5
            for i in (0, 31, 59):
                hits = store.search_recall(agent, f"kiwi{w}x{i}").items
                assert [h.message.message_id for h in hits] == [f"m{i:04d}"]
            hits = store.search_recall(agent, f"kiwi{w}e2").items
            assert [h.message.message_id for h in hits] == ["m0102"]
