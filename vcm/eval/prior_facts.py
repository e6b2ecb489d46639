"""A long-lived agent's facts, for the benchmarks: ``--prior-facts N`` gives the agent N facts
before the measured work, so the paths that compare with or rank all of an agent's facts (dedup
of each extracted fact, the prompt's fact search and working set) are timed at that count."""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt

from vcm.store.port import MemoryStore
from vcm.store.types import Fact

TYPES = ("learned", "preference", "project")  # what fact extraction writes


def add_prior_facts_flag(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--prior-facts",
        type=int,
        default=0,
        help=f"facts the agent already holds, active, before {what} (a long-lived agent)",
    )


def hold_prior_facts(store: MemoryStore, agent: str, n: int, dimension: int) -> None:
    """``n`` active facts of the types fact extraction writes, as a long-lived agent holds them:
    distinct sentences with unit vectors in random directions (near nothing a conversation says, so
    dedup keeps every new fact and a search ranks them all without showing them)."""
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((n, dimension)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    values = [f"Speaker {i % 7}: earlier fact number {i} about topic {i * 7919 % 1000}" for i in range(n)]
    hold_facts(store, agent, values, vectors.tolist(), time.time())


def hold_facts(
    store: MemoryStore,
    agent: str,
    values: Sequence[str],
    vectors: Sequence[Sequence[float]] | npt.NDArray[Any],
    now: float,
) -> None:
    """``values`` as the agent's active facts with their ``vectors``, the last updated at ``now``
    and each earlier one a second before."""
    n = len(values)
    for i, (value, v) in enumerate(zip(values, vectors, strict=True)):
        at = now - n + i
        evidence = ({"kind": "message", "id": f"old{i}"},)
        fact = Fact(agent, f"prior{i}", "agent", TYPES[i % 3], value, evidence=evidence, created_at=at, updated_at=at)
        store.put_fact(replace(fact, embedding=[float(x) for x in v]), None)


def other_turns(samples: Sequence[Mapping[str, Any]], sample_id: str, n: int) -> list[str]:
    """Up to ``n`` turns ("Speaker: text") of the LoCoMo conversations other than ``sample_id``,
    taken evenly across them: what another part of a long-lived agent's life would have left as
    facts (real sentences, unrelated to this conversation's questions)."""
    pools = []
    for sample in samples:
        if sample.get("sample_id") == sample_id:
            continue
        conv, turns, k = sample["conversation"], [], 1
        while f"session_{k}" in conv:
            turns += [f"{t['speaker']}: {t['text']}" for t in conv[f"session_{k}"] if t.get("text")]
            k += 1
        pools.append(turns)
    out: list[str] = []
    for i in range(max((len(p) for p in pools), default=0)):
        out += [p[i] for p in pools if i < len(p)]
    return list(dict.fromkeys(out))[:n]
