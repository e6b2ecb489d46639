"""Persistence for vcm: the store port (:mod:`vcm.store.port`) and its adapters.

Pure modules both adapters share: :mod:`vcm.store.validation` (argument checks), :mod:`vcm.store.cursor`
(cursor codec), :mod:`vcm.store.paging` (snapshot and keyset paging), :mod:`vcm.store.filters` (archival
post-filters), :mod:`vcm.store.semantics` (ids, event payloads, idempotent replays, rev conflicts).

``open_store(url)`` picks the adapter from the URL scheme, so mode is chosen by settings:

* ``sqlite:///relative.db``, ``sqlite:////abs/vcm.db`` (or a bare path) - the embedded adapter (default)
* ``arango+http://host:8529/db``, ``arango+https://...``, ``arango+unix:///run/arangodb/arangod.sock/db``
  - the ArangoDB adapter
"""

from __future__ import annotations

from typing import Any

from vcm.store import authors, diversity
from vcm.store.port import MemoryStore


def open_store(
    url: str,
    *,
    recall_diversity: diversity.Diversity | None = diversity.DEFAULT,
    other_author_weight: float = authors.OTHER_AUTHOR_WEIGHT,
    **options: Any,
) -> MemoryStore:
    """The adapter for ``url``, opened with its ``options``; ``recall_diversity``: how its hybrid
    rankings spread across the conversation ([recall] diversity_*; None: as fused);
    ``other_author_weight``: what they multiply other authors' messages by when a query names
    some of the agent's authors ([recall] other_author_weight; 1.0: off)."""
    authors.check_weight(other_author_weight)
    if url.startswith("arango"):
        from vcm.store.arango.adapter import ArangoStore

        arango = ArangoStore.from_url(url, **options)
        arango.recall_diversity = recall_diversity
        arango.recall_author_weight = other_author_weight
        return arango
    from vcm.store.embedded.adapter import EmbeddedStore

    # SQLAlchemy's convention: sqlite:///relative.db, sqlite:////absolute.db
    path = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else url
    embedded = EmbeddedStore(path, **options)
    embedded.recall_diversity = recall_diversity
    embedded.recall_author_weight = other_author_weight
    return embedded


__all__ = ["MemoryStore", "open_store"]
