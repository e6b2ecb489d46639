"""The embedded store's fact vector cache: a search reads each fact's embedding once, again only
when the fact was written since (any process: every write bumps its version), never a stale one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from vcm.store import open_store
from vcm.store.embedded import EmbeddedStore
from vcm.store.embedded.factvectors import FactVectors
from vcm.store.types import Fact, FactQuery


def row(fact_id: str, version: int, updated_at: float, vector: list[float] | None = None) -> dict[str, Any]:
    blob = None if vector is None else np.asarray(vector, dtype="<f4").tobytes()
    return {"agent_id": "a1", "fact_id": fact_id, "version": version, "updated_at": updated_at, "embedding": blob}


class Blobs:
    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = {r["fact_id"]: r for r in rows}
        self.asked: list[list[str]] = []

    def __call__(self, agent_id: str, fact_ids: Sequence[str]) -> list[Any]:
        self.asked.append(list(fact_ids))
        return [self.rows[f] for f in fact_ids if f in self.rows]


def test_vectors_are_read_once_and_again_only_when_the_fact_changed() -> None:
    cache = FactVectors()
    blobs = Blobs([row("f1", 1, 10.0, [1.0, 0.0]), row("f2", 1, 11.0, None)])
    light = [row("f1", 1, 10.0), row("f2", 1, 11.0)]
    first = cache.vectors(light, blobs)
    assert first[0] is not None and list(first[0]) == [1.0, 0.0] and first[1] is None
    again = cache.vectors(light, blobs)
    assert blobs.asked == [["f1", "f2"]] and again[0] is first[0]  # held: no second read
    blobs.rows["f1"] = row("f1", 2, 12.0, [0.0, 1.0])  # written since: another version
    changed = cache.vectors([row("f1", 2, 12.0), row("f2", 1, 11.0)], blobs)
    assert blobs.asked[-1] == ["f1"] and changed[0] is not None and list(changed[0]) == [0.0, 1.0]


def test_a_fact_written_between_the_two_reads_gets_no_vector_and_is_not_held() -> None:
    cache = FactVectors()
    blobs = Blobs([row("f1", 3, 13.0, [1.0, 0.0])])  # the light read saw version 2
    assert cache.vectors([row("f1", 2, 12.0)], blobs) == [None]
    assert cache.vectors([row("f1", 3, 13.0)], blobs)[0] is not None
    assert len(blobs.asked) == 2


def test_the_cache_holds_at_most_its_capacity_least_recently_used_out() -> None:
    cache = FactVectors(capacity=2)
    blobs = Blobs([row(f"f{i}", 1, float(i), [float(i), 1.0]) for i in range(3)])
    cache.vectors([row("f0", 1, 0.0), row("f1", 1, 1.0)], blobs)
    cache.vectors([row("f0", 1, 0.0)], blobs)  # f0 used last
    cache.vectors([row("f2", 1, 2.0)], blobs)  # f1 goes
    cache.vectors([row("f0", 1, 0.0), row("f1", 1, 1.0)], blobs)
    assert blobs.asked == [["f0", "f1"], ["f2"], ["f1"]]


def test_search_ranks_by_the_vector_a_fact_holds_now(tmp_path: Path) -> None:
    """Two store handles on one file, as two processes: a write through one is seen by the other's
    next search, its cached vector of the old version left unused."""
    path = f"sqlite:///{tmp_path / 'vcm.db'}"
    a, b = open_store(path), open_store(path)
    assert isinstance(a, EmbeddedStore)
    try:
        f = Fact("a1", "f1", "agent", "learned", "likes tea", evidence=({"kind": "message", "id": "m1"},),
                 updated_at=1.0, embedding=[1.0, 0.0, 0.0])  # fmt: skip
        g = replace(f, fact_id="f2", value="likes coffee", updated_at=2.0, embedding=[0.0, 1.0, 0.0])
        a.put_fact(f, None)
        a.put_fact(g, None)
        near_x = [h.fact.fact_id for h in a.search_facts("a1", "zzz", [1.0, 0.0, 0.0], FactQuery(limit=1))]
        assert near_x == ["f1"]
        b.put_fact(replace(a.get_fact("a1", "f1"), embedding=[0.0, 0.0, 1.0], updated_at=3.0), 1)
        b.put_fact(replace(a.get_fact("a1", "f2"), embedding=[1.0, 0.0, 0.0], updated_at=4.0), 1)
        near_x = [h.fact.fact_id for h in a.search_facts("a1", "zzz", [1.0, 0.0, 0.0], FactQuery(limit=1))]
        assert near_x == ["f2"]
        [c1] = [c for c in a.dedup_candidates("a1", FactQuery(), [0.0, 0.0, 1.0]) if c.fact_id == "f1"]
        assert c1.cosine == 1.0
    finally:
        a.close()
        b.close()
