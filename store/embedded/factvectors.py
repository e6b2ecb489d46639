"""Fact embeddings kept in memory between searches (embedded store).

A fact search ranks every live fact of an agent on each prompt build, and dedup compares each
write with them: at 1 000 facts, reading their 1.5 KB embeddings from SQLite each time took most
of a 29 ms search. The light columns come from a covering index (``facts_light``); the vectors
from here, keyed by fact and checked against the row's ``version`` and ``updated_at`` (every
write of a fact bumps its version, in any process), so a changed fact is read again and a stale
vector is never used. Bounded (least recently used out), thread-safe."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from vcm.store.embedded.db import chunked
from vcm.store.fact_rank import Candidate, Vector, blob_vector

Stamp = tuple[int, float]  # version, updated_at


class Row(Protocol):
    """A row by column name (``sqlite3.Row``)."""

    def __getitem__(self, key: str, /) -> Any: ...


R = TypeVar("R", bound=Row)
T = TypeVar("T")

DEFAULT_CAPACITY = 50_000  # ~75 MB of 384-dimensional vectors


class FactVectors:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._held: OrderedDict[tuple[str, str], tuple[Stamp, Vector | None]] = OrderedDict()
        # A search's ranking candidates, built once per fact stamp: a prompt build ranks the same
        # facts turn after turn, and making 1 000 of them (text, tags, vector) took ~2 ms a search.
        self._made: OrderedDict[tuple[str, str], tuple[Stamp, Candidate]] = OrderedDict()
        self._lock = threading.Lock()

    def candidates(
        self,
        rows: Sequence[R],
        read: Callable[[str, Sequence[str]], Sequence[Row]],
        make: Callable[[R, Vector | None], Candidate],
    ) -> list[Candidate]:
        """The ranking candidate of each light row, ``make(row, its vector)`` for the ones not
        made at that stamp yet (see :meth:`vectors` for ``read``)."""
        made, fresh = self._found(self._made, rows)
        out: list[Candidate | None] = [made.get(i) for i in range(len(rows))]
        vectors = self.vectors([rows[i] for i in fresh], read) if fresh else []
        for i, vector in zip(fresh, vectors, strict=True):
            r = rows[i]
            candidate = out[i] = make(r, vector)
            key, stamp = (r["agent_id"], r["fact_id"]), (int(r["version"]), float(r["updated_at"]))
            with self._lock:
                held = self._held.get(key)
                if held is None or held[0] != stamp:
                    continue  # written between the reads: made again next time
                self._made[key] = (stamp, candidate)
                while len(self._made) > self.capacity:
                    self._made.popitem(last=False)
        return [c for c in out if c is not None]

    def vectors(self, rows: Sequence[Row], read: Callable[[str, Sequence[str]], Sequence[Row]]) -> list[Vector | None]:
        """The embedding of each light row (``agent_id``, ``fact_id``, ``version``,
        ``updated_at``), None where it has none; ``read(agent_id, fact_ids)`` returns the rows
        (those columns and ``embedding``) of the ones not held at that stamp."""
        hits, absent = self._found(self._held, rows)
        out: list[Vector | None] = [hits.get(i) for i in range(len(rows))]
        missing: dict[str, list[int]] = {}
        for i in absent:
            missing.setdefault(rows[i]["agent_id"], []).append(i)
        for agent_id, positions in missing.items():
            wanted = {rows[i]["fact_id"]: i for i in positions}
            for part in chunked(list(wanted)):
                for r in read(agent_id, part):
                    i = wanted[r["fact_id"]]
                    stamp = (int(r["version"]), float(r["updated_at"]))
                    if stamp != (int(rows[i]["version"]), float(rows[i]["updated_at"])):
                        continue  # written between the two reads: no vector this time
                    vector = blob_vector(r["embedding"])
                    out[i] = vector
                    self._hold((agent_id, r["fact_id"]), stamp, vector)
        return out

    def _found(
        self, cache: OrderedDict[tuple[str, str], tuple[Stamp, T]], rows: Sequence[Row]
    ) -> tuple[dict[int, T], list[int]]:
        """What ``cache`` holds for the rows at their stamps, by position, and the positions of
        the rows it does not."""
        out: dict[int, T] = {}
        absent: list[int] = []
        with self._lock:
            for i, r in enumerate(rows):
                key = (r["agent_id"], r["fact_id"])
                held = cache.get(key)
                if held is not None and held[0] == (int(r["version"]), float(r["updated_at"])):
                    cache.move_to_end(key)
                    out[i] = held[1]
                else:
                    absent.append(i)
        return out, absent

    def _hold(self, key: tuple[str, str], stamp: Stamp, vector: Vector | None) -> None:
        with self._lock:
            self._held[key] = (stamp, vector)
            self._held.move_to_end(key)
            while len(self._held) > self.capacity:
                self._held.popitem(last=False)
