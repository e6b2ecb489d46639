"""Dedup over light candidates: cosines in one matrix product against the plain definition, and
the verdicts a per-candidate loop over whole facts reaches."""

from __future__ import annotations

import math
import random

from vcm.facts import dedup
from vcm.store import fact_rank
from vcm.store.types import DedupCandidate, Fact


def light(facts: list[Fact], embedding: list[float] | None) -> list[DedupCandidate]:
    """Whole facts as a store's ``dedup_candidates`` returns them, the cosines taken here."""
    near = fact_rank.cosines(embedding, [f.embedding for f in facts])
    return [
        DedupCandidate(f.agent_id, f.fact_id, f.value, f.key, f.duplicate_of, c)
        for f, c in zip(facts, near, strict=True)
    ]


def jaccard(a: str, b: str) -> float:
    x, y = dedup.word_set(a), dedup.word_set(b)
    return len(x & y) / len(x | y) if x and y else 0.0


def plain_cosine(a: list[float] | None, b: list[float] | None) -> float:
    if not a or not b or len(a) != len(b):
        return 0.0
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(y * y for y in b))
    return sum(x * y for x, y in zip(a, b, strict=True)) / (na * nb) if na and nb else 0.0


def test_cosines_match_the_definition_for_missing_short_and_zero_vectors() -> None:
    rng = random.Random(7)
    q = [rng.uniform(-1, 1) for _ in range(16)]
    others: list[list[float] | None] = [[rng.uniform(-1, 1) for _ in range(16)] for _ in range(30)]
    others += [None, [], [0.0] * 16, q[:8], [2 * x for x in q], [-x for x in q]]
    got = fact_rank.cosines(q, others)
    assert len(got) == len(others)
    for g, b in zip(got, others, strict=True):
        assert math.isclose(g, plain_cosine(q, b), abs_tol=1e-12)
    assert math.isclose(got[-2], 1.0) and math.isclose(got[-1], -1.0) and got[-6:-2] == [0.0] * 4
    assert fact_rank.cosines(None, others) == [0.0] * len(others) and fact_rank.cosines([], [q]) == [0.0]
    assert fact_rank.cosines(q, []) == []


def test_the_verdict_is_the_one_a_loop_over_whole_facts_reaches() -> None:
    """Over random facts around a query vector, the MATCH and UNSURE targets are the ones a loop
    of the plain cosine and Jaccard finds, skipping facts of another key."""
    rng = random.Random(11)
    seen: set[str] = set()
    words = ["river", "sea", "boat", "ann", "likes", "swims", "north", "cold", "lake", "tea"]
    for trial in range(40):
        q = [rng.gauss(0, 1) for _ in range(8)]
        value = " ".join(rng.sample(words, 4))
        facts = []
        noise = [0.1, 0.4, 1.5] if trial % 3 else [1.0, 2.0, 3.0]  # every third: mostly NEW
        for i in range(25):
            v = [x + rng.gauss(0, rng.choice(noise)) for x in q] if rng.random() < 0.9 else None
            key = rng.choice([None, None, "k1", "k2"])
            facts.append(Fact("ann", f"f{i}", "agent", "learned", " ".join(rng.sample(words, 4)), key=key, embedding=v))
        key = rng.choice([None, "k3"])
        got = dedup.by_similarity(
            value,
            key,
            light(facts, q),
            word_overlap=0.8,
            embedding_similarity=0.95,
            unsure_overlap=0.6,
            unsure_similarity=0.8,
        )
        best: tuple[float, Fact | None] = (0.0, None)
        maybe: tuple[float, Fact | None] = (0.0, None)
        for f in facts:
            if key is not None and f.key is not None and f.key != key:
                continue
            overlap, near = jaccard(value, f.value), plain_cosine(q, list(f.embedding or []))
            score = max(overlap, near)
            if overlap >= 0.8 or near >= 0.95:
                best = (score, f) if score > best[0] else best
            elif (overlap >= 0.6 or near >= 0.8) and score > maybe[0]:
                maybe = (score, f)
        want = ("MATCH", best[1]) if best[1] else ("UNSURE", maybe[1]) if maybe[1] else ("NEW", None)
        assert (got.decision, got.target and got.target.fact_id) == (want[0], want[1] and want[1].fact_id), trial
        seen.add(got.decision)
    assert seen == {"MATCH", "UNSURE", "NEW"}


def test_a_key_decides_before_similarity() -> None:
    tea = Fact("ann", "f1", "agent", "preference", "likes green tea", key="drink")
    assert dedup.by_key("likes coffee", None, [tea]) is None
    assert dedup.by_key("likes coffee", "food", []) is None
    same = dedup.by_key("Likes green tea.", "drink", [tea])
    assert same is not None and same.decision == "MATCH" and same.target == tea
    other = dedup.by_key("likes coffee", "drink", [tea])
    assert other is not None and other.decision == "CONFLICT" and other.conflicting == (tea,)
    entity = dedup.by_key("Ann, a sailor", "ann", [replace_key(tea, "ann")], identity=True)
    assert entity is not None and entity.decision == "MATCH"


def replace_key(f: Fact, key: str) -> Fact:
    from dataclasses import replace

    return replace(f, key=key)
