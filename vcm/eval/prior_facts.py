"""A long-lived agent's facts, for the benchmarks: ``--prior-facts N`` gives the agent N facts
before the measured work, so the paths that compare with or rank all of an agent's facts (dedup
of each extracted fact, the prompt's fact search and working set) are timed at that count."""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np

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
    now = time.time()
    for i, v in enumerate(vectors):
        value = f"Speaker {i % 7}: earlier fact number {i} about topic {i * 7919 % 1000}"
        at = now - n + i
        evidence = ({"kind": "message", "id": f"old{i}"},)
        fact = Fact(agent, f"prior{i}", "agent", TYPES[i % 3], value, evidence=evidence, created_at=at, updated_at=at)
        store.put_fact(replace(fact, embedding=[float(x) for x in v]), None)
