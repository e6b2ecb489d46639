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

from vcm.store.port import MemoryStore


def open_store(url: str, **options: Any) -> MemoryStore:
    if url.startswith("arango"):
        from vcm.store.arango.adapter import ArangoStore

        return ArangoStore.from_url(url, **options)
    from vcm.store.embedded.adapter import EmbeddedStore

    # SQLAlchemy's convention: sqlite:///relative.db, sqlite:////absolute.db
    path = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else url
    return EmbeddedStore(path, **options)


__all__ = ["MemoryStore", "open_store"]
