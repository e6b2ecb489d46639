"""A long-lived agent's earlier facts for the benchmarks: other conversations' turns, spread
evenly, held as active facts with their vectors on a real SQLite store."""

from __future__ import annotations

from pathlib import Path

from tests.doubles.embedder import hash_embed
from vcm.eval.prior_facts import hold_facts, other_turns
from vcm.store import open_store
from vcm.store.types import FactQuery


def sample(sample_id: str, speaker: str, sessions: int, turns: int) -> dict[str, object]:
    conv: dict[str, object] = {"speaker_a": speaker, "speaker_b": "Bo"}
    for s in range(1, sessions + 1):
        said = [{"speaker": speaker, "dia_id": f"D{s}:{t}", "text": f"{sample_id} turn {s}.{t}"} for t in range(turns)]
        conv[f"session_{s}"] = [*said, {"speaker": "Bo", "dia_id": f"D{s}:x", "text": ""}]
    return {"sample_id": sample_id, "conversation": conv}


def test_other_turns_leave_the_conversation_out_and_alternate_between_the_others() -> None:
    samples = [sample("c1", "Ann", 2, 3), sample("c2", "Cy", 1, 2), sample("c3", "Di", 1, 4)]
    got = other_turns(samples, "c1", 5)
    assert got == ["Cy: c2 turn 1.0", "Di: c3 turn 1.0", "Cy: c2 turn 1.1", "Di: c3 turn 1.1", "Di: c3 turn 1.2"]
    assert len(other_turns(samples, "c1", 100)) == 6  # all there are; empty turns left out
    assert other_turns(samples, "c2", 100)[:2] == ["Ann: c1 turn 1.0", "Di: c3 turn 1.0"]


def test_held_facts_are_active_with_their_vectors_and_ordered_in_time(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'vcm.db'}")
    try:
        values = [f"Cy: fact {i} about the harbour" for i in range(4)]
        hold_facts(store, "ann", values, hash_embed(values), 1_700_000_000.0)
        facts = store.query_facts("ann", FactQuery(limit=10))
        assert sorted(f.value for f in facts) == sorted(values)
        by_value = {f.value: f for f in facts}
        assert [by_value[v].updated_at for v in values] == [1_700_000_000.0 - 4 + i for i in range(4)]
        hits = store.search_facts("ann", "", hash_embed([values[2]])[0], FactQuery(limit=1))
        assert hits[0].fact.value == values[2]  # found by its vector alone
    finally:
        store.close()
