"""What a restore and a reset must not undo (issue 28, items 3 and 6): a snapshot restore never
brings a forgotten message back (the store's tombstones), and ingestion job records survive a
reset and a restore, while a job whose agent is deleted or reset before its store write ends
``cancelled`` having written nothing.

Façade over the embedded store and fakeredis; the worker's job runner is called by hand."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import fakeredis
import pytest

from tests.conftest import MODEL
from tests.doubles.clock import Clock
from tests.doubles.embedder import hash_embed
from tests.doubles.ingester import SentenceIngest
from vcm.dispatch import RecordingDispatcher
from vcm.hotpath.state import HotState
from vcm.service import MemoryService
from vcm.settings import load_settings
from vcm.store.port import MemoryStore
from vcm.store.types import FactQuery, Tombstones
from vcm.tasks.ingest.jobs import Ingest, Progress, run_ingest_job
from vcm.types import IngestRequest

ALL = FactQuery(statuses=("active", "shadow", "archived", "expired"), limit=1000)
DOC = "Falcons nest on cliffs. Otters hold hands while they sleep."


def make(store: MemoryStore) -> tuple[MemoryService, RecordingDispatcher]:
    dispatcher = RecordingDispatcher()
    clock = Clock(now=time.time(), step=0.01)  # near the store's own clock: snapshots expire by it
    hot = HotState(fakeredis.FakeRedis(decode_responses=True), load_settings(environ={}), clock=clock)
    svc = MemoryService(hot, store, dispatcher, embed=hash_embed, clock=clock)
    svc.create_agent("ann", model=MODEL)
    return svc, dispatcher


def run(svc: MemoryService, ingest: Ingest, request: IngestRequest) -> str:
    return run_ingest_job(svc.hot, svc.store, ingest, request, clock=svc.core.clock).outcome


def recall_ids(svc: MemoryService, query: str, mode: str) -> set[str]:
    found = svc.search_recall("ann", query, mode=mode, limit=50)
    assert found.mode == mode
    return {h.message.message_id for h in found.page.items}


def test_a_restore_never_brings_a_forgotten_message_back(store: MemoryStore) -> None:
    svc, _ = make(store)
    heron = svc.append("ann", "user", "The heron painting hangs in the attic.").message_id
    lunch = svc.append("ann", "user", "Lunch is at noon on Fridays.").message_id
    only = svc.remember("ann", "The heron painting is in the attic", type="learned",
                        evidence=[{"kind": "message", "id": heron}]).fact  # fmt: skip
    both = svc.remember("ann", "Fridays have lunch at noon", type="learned",
                        evidence=[{"kind": "message", "id": heron}, {"kind": "message", "id": lunch}]).fact  # fmt: skip
    # Vectors for hybrid recall, as the cold path would write them.
    svc.store.put_message_vectors(
        "ann", [(m, hash_embed([t])[0].tolist()) for m, t in ((heron, "heron painting attic"), (lunch, "lunch"))], "v1"
    )
    snap = svc.create_snapshot("ann")  # its FIFO holds both messages, its facts cite the heron
    svc.reset("ann")  # the FIFO leaves for recall, where a forget reaches it
    assert heron in recall_ids(svc, "heron painting attic", "text")
    svc.forget_message("ann", heron)
    assert heron in svc.store.tombstones("ann").messages

    svc.restore_snapshot("ann", snap.snapshot_id)
    for mode in ("text", "hybrid"):
        assert heron not in recall_ids(svc, "heron painting attic", mode)
        assert lunch in recall_ids(svc, "lunch noon Fridays", mode)
    assert svc.store.get_messages("ann", [heron]) == []
    assert svc.fifo_ids("ann") == [lunch]  # the rest of the snapshot's FIFO is back
    assert "heron" not in str(svc.context("ann").messages)
    facts = {f.fact_id: f for f in svc.list_facts("ann", ALL)}
    assert only.fact_id not in facts  # derived from the forgotten message alone
    assert [e["id"] for e in facts[both.fact_id].evidence] == [lunch]
    # The FIFO's tokens are counted from what was restored: the same as a rebuild from the store.
    gauges = svc.context("ann").gauges
    svc.hot.forget("ann")
    svc.core.durable.forget("ann")
    assert svc.context("ann").gauges.total == gauges.total


def test_deleting_an_agent_removes_its_tombstones(store: MemoryStore) -> None:
    svc, _ = make(store)
    svc.forget_document("ann", "doc-1")
    assert svc.store.tombstones("ann").documents.keys() == {"doc-1"}
    svc.delete_agent("ann")
    assert svc.store.tombstones("ann") == Tombstones()


def test_reset_and_restore_keep_ingestion_job_records(store: MemoryStore) -> None:
    svc, dispatcher = make(store)
    job = svc.ingest_archival("ann", DOC, doc_id="zoo")
    assert (
        run_ingest_job(svc.hot, store, SentenceIngest(store), dispatcher.ingests[0], clock=svc.core.clock).outcome
        == "done"
    )
    snap = svc.create_snapshot("ann")
    svc.reset("ann")
    assert svc.ingest_job("ann", job.job_id).status == "done"
    svc.restore_snapshot("ann", snap.snapshot_id)
    kept = svc.ingest_job("ann", job.job_id)
    assert kept.status == "done" and kept.result is not None and kept.result["chunks"] == 2


class Interrupted(SentenceIngest):
    """Embeds, then - while it did - something happens to the agent; then stores (the double
    reports its chunk count right before the store write, as the real ingester does)."""

    def __init__(self, store: MemoryStore, meanwhile: Callable[[], object]) -> None:
        super().__init__(store)
        self.meanwhile = meanwhile

    def __call__(
        self,
        agent_id: str,
        doc_id: str,
        text: str,
        *,
        source: str,
        metadata: Mapping[str, Any],
        progress: Progress | None = None,
        incarnation: str | None = None,
    ) -> Mapping[str, Any]:
        self.meanwhile()
        return super().__call__(
            agent_id, doc_id, text, source=source, metadata=metadata, progress=progress, incarnation=incarnation
        )


@pytest.mark.parametrize("what", ["delete", "reset"])
def test_a_job_whose_agent_goes_before_its_store_write_is_cancelled_and_writes_nothing(
    store: MemoryStore, what: str
) -> None:
    svc, dispatcher = make(store)
    job = svc.ingest_archival("ann", DOC, doc_id="zoo")
    request: IngestRequest = dispatcher.ingests[0]
    act = (lambda: svc.delete_agent("ann")) if what == "delete" else (lambda: svc.reset("ann"))
    assert run(svc, Interrupted(store, act), request) == "cancelled"
    assert store.get_archival("ann", "zoo") == []
    if what == "delete":
        assert store.stats("ann")["archival_chunks"] == 0
        return
    cancelled = svc.ingest_job("ann", job.job_id)
    assert cancelled.status == "cancelled" and cancelled.error is not None
    # A late redelivery cannot revive it; resubmitting the document reopens it.
    assert not svc.hot.jobs.progress("ann", job.job_id, 1.0)
    again = svc.ingest_archival("ann", DOC, doc_id="zoo")
    assert (again.status, again.submissions) == ("queued", 2)
    assert (
        run_ingest_job(svc.hot, store, SentenceIngest(store), dispatcher.ingests[1], clock=svc.core.clock).outcome
        == "done"
    )
