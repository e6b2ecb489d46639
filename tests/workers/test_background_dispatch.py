"""The API's background publisher (vcm.workers.dispatch.BackgroundDispatcher): the appends of a
publishing round leave as one spool task, nothing handed over is dropped by a failing publish or
by closing, and ingestion stays synchronous (its caller must hear of a failure)."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

import pytest

from vcm.dispatch import RecordingDispatcher
from vcm.errors import StoreUnavailable
from vcm.types import IngestRequest
from vcm.workers import dispatch
from vcm.workers.dispatch import BackgroundDispatcher


class Publisher(RecordingDispatcher):
    """Records what it publishes, with a spool_many like CeleryDispatcher's; can be made to fail
    or to hold each publish until released."""

    def __init__(self) -> None:
        super().__init__()
        self.tasks: list[dict[str, list[str]]] = []
        self.fail = 0
        self.release = threading.Event()
        self.release.set()

    def spool_many(self, batches: Mapping[str, Sequence[str]]) -> None:
        self.release.wait(10)
        if self.fail:
            self.fail -= 1
            raise ConnectionError("broker down")
        self.tasks.append({a: list(ids) for a, ids in batches.items()})

    def ingest(self, request: IngestRequest) -> None:
        raise StoreUnavailable("the ingestion queue is unavailable; retry shortly")


def spooled(p: Publisher) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for task in p.tasks:
        for agent, ids in task.items():
            out.setdefault(agent, []).extend(ids)
    return out


def test_a_round_of_appends_leaves_as_one_task() -> None:
    inner = Publisher()
    bg = BackgroundDispatcher(inner, linger_s=0.2)
    inner.release.clear()  # the first round is held while the next fills
    bg.spool("a", ["m1"])
    for i in range(2, 40):
        bg.spool("a" if i % 3 else "b", [f"m{i}"])
    bg.evict("a", 1)
    bg.evict("a", 1)  # the same batch twice: published once
    inner.release.set()
    assert bg.flush(10)
    assert spooled(inner) == {
        "a": [f"m{i}" for i in range(1, 40) if i % 3 or i == 1],
        "b": [f"m{i}" for i in range(2, 40) if not i % 3],
    }
    assert len(inner.tasks) <= 2  # 39 appends of two agents: one round, or two if the first left early
    assert inner.evictions == [("a", 1)] and inner.spooled == []
    bg.close()


def test_long_runs_are_split_into_bounded_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dispatch, "SPOOL_CHUNK", 10)
    inner = Publisher()
    bg = BackgroundDispatcher(inner, linger_s=0.05)
    inner.release.clear()
    bg.spool("a", [f"m{i}" for i in range(25)])
    bg.spool("b", ["x1", "x2"])
    bg.spool("a", ["m3"])  # a duplicate id is spooled once
    inner.release.set()
    assert bg.flush(10)
    assert all(sum(len(ids) for ids in task.values()) <= 10 for task in inner.tasks)
    assert spooled(inner) == {"a": [f"m{i}" for i in range(25)], "b": ["x1", "x2"]}
    bg.close()


def test_a_failed_publish_is_counted_and_the_thread_goes_on() -> None:
    inner = Publisher()
    inner.fail = 1
    bg = BackgroundDispatcher(inner, linger_s=0.01)
    bg.spool("a", ["m1"])
    assert bg.flush(10)
    bg.spool("a", ["m2"])
    assert bg.flush(10)
    # m1 went with the failed publish: the sweeper's reconcile spools it (tests/tasks cover that).
    assert spooled(inner) == {"a": ["m2"]}
    bg.close()


def test_closing_publishes_what_is_queued_and_later_work_synchronously() -> None:
    inner = Publisher()
    bg = BackgroundDispatcher(inner, linger_s=30.0)  # the thread would wait long
    bg.spool("a", ["m1"])
    bg.evict("a", 3)
    bg.close(timeout_s=1)
    assert spooled(inner) == {"a": ["m1"]} and inner.evictions == [("a", 3)]
    bg.spool("a", ["m2"])  # after close (interpreter exit): published in the caller's thread
    assert spooled(inner) == {"a": ["m1", "m2"]}


def test_a_full_queue_drops_new_work_for_the_sweeper() -> None:
    inner = Publisher()
    inner.release.clear()
    bg = BackgroundDispatcher(inner, linger_s=0.01, max_pending=3)
    bg.spool("a", ["m1", "m2"])
    bg.spool("a", ["m3", "m4"])  # over the bound: dropped, counted, the sweeper spools them
    bg.spool("a", ["m5"])
    inner.release.set()
    assert bg.flush(10)
    assert spooled(inner) == {"a": ["m1", "m2", "m5"]}
    bg.close()


def test_ingestion_is_handed_over_synchronously() -> None:
    bg = BackgroundDispatcher(Publisher())
    request = IngestRequest("a", "ing-1", "doc-1", "text", "", {})
    with pytest.raises(StoreUnavailable):
        bg.ingest(request)
    bg.close()
