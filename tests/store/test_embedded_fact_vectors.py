"""The embedded store's fact vector cache: a search reads each fact's embedding once, again only
when the fact was written since (any process: every write bumps its version), never a stale one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from vcm.store import fact_rank, open_store
from vcm.store.embedded import EmbeddedStore
from vcm.store.embedded.factvectors import FactVectors
from vcm.store.fact_rank import Candidate, Vector
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


def test_ranking_candidates_are_made_once_per_fact_version() -> None:
    cache = FactVectors()
    blobs = Blobs([row("f1", 1, 10.0, [1.0, 0.0]), row("f2", 1, 11.0, [0.0, 1.0])])
    made: list[str] = []

    def make(r: Any, vector: Vector | None) -> Candidate:
        made.append(r["fact_id"])
        return Candidate(r["fact_id"], f"text of {r['fact_id']} v{r['version']}", r["updated_at"], vector)

    light = [row("f1", 1, 10.0), row("f2", 1, 11.0)]
    first = cache.candidates(light, blobs, make)
    again = cache.candidates(light, blobs, make)
    assert made == ["f1", "f2"] and again[0] is first[0] and again[1] is first[1]
    blobs.rows["f1"] = row("f1", 2, 12.0, [0.5, 0.5])  # written since
    changed = cache.candidates([row("f1", 2, 12.0), row("f2", 1, 11.0)], blobs, make)
    assert made == ["f1", "f2", "f1"] and changed[1] is first[1]
    assert (
        changed[0].text == "text of f1 v2" and changed[0].vector is not None and list(changed[0].vector) == [0.5, 0.5]
    )
    blobs.rows["f3"] = row("f3", 4, 14.0, [1.0, 1.0])  # the light read saw version 3: made, not kept
    assert cache.candidates([row("f3", 3, 13.0)], blobs, make)[0].vector is None
    cache.candidates([row("f3", 3, 13.0)], blobs, make)
    assert made[-2:] == ["f3", "f3"]


def test_search_finds_a_fact_by_the_words_it_holds_now(tmp_path: Path) -> None:
    """A handle that ranked a fact before another handle rewrote it ranks its new text."""
    path = f"sqlite:///{tmp_path / 'vcm.db'}"
    a, b = open_store(path), open_store(path)
    try:
        f = Fact("a1", "f1", "agent", "learned", "likes tea", evidence=({"kind": "message", "id": "m1"},),
                 updated_at=1.0, embedding=[1.0, 0.0, 0.0])  # fmt: skip
        a.put_fact(f, None)
        assert [h.fact.fact_id for h in a.search_facts("a1", "tea", None, FactQuery(limit=1))] == ["f1"]
        b.put_fact(replace(b.get_fact("a1", "f1"), value="likes juice", updated_at=2.0), 1)
        assert a.search_facts("a1", "tea", None, FactQuery(limit=1)) == []
        assert [h.fact.value for h in a.search_facts("a1", "juice", None, FactQuery(limit=1))] == ["likes juice"]
    finally:
        a.close()
        b.close()


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


def test_ranking_reuses_stacked_vectors_only_for_the_same_candidates() -> None:
    """fact_rank keeps the stacked vectors of the last candidate lists by their identities: the
    same objects rank from them, new objects (a fact written since) never from a stale matrix."""
    tea = Candidate("f1", "likes tea", 1.0, np.asarray([1.0, 0.0], dtype=np.float32))
    coffee = Candidate("f2", "likes coffee", 2.0, np.asarray([0.0, 1.0], dtype=np.float32))
    assert [i for i, _ in fact_rank.order("zzz", [1.0, 0.0], [tea, coffee], 1)] == ["f1"]
    assert [i for i, _ in fact_rank.order("zzz", [0.0, 1.0], [tea, coffee], 1)] == ["f2"]  # same matrix
    turned = Candidate("f1", "likes tea", 3.0, np.asarray([0.0, 1.0], dtype=np.float32))
    coffee_now = Candidate("f2", "likes coffee", 4.0, np.asarray([1.0, 0.0], dtype=np.float32))
    assert [i for i, _ in fact_rank.order("zzz", [1.0, 0.0], [turned, coffee_now], 1)] == ["f2"]
