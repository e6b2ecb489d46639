"""The ArangoDB adapter of the store port (ArangoDB 3.12.4+, python-arango).

Modules, each small and named after what it holds:

* :mod:`~vcm.store.arango.adapter` - :class:`ArangoStore`, the port implementation
* :mod:`~vcm.store.arango.aql` - every query, as pure ``(text, bind_vars)`` builders, one module per family
* :mod:`~vcm.store.arango.schema` - ``config/arango_schema.json`` loading, idempotent bootstrap,
  the lazily created vector index
* :mod:`~vcm.store.arango.client` - URLs, the Unix-socket HTTP client, read-only/read-write handles
* :mod:`~vcm.store.arango.guard` - refuses servers that cannot serve vcm
* :mod:`~vcm.store.arango.eviction` - ``commit_eviction`` planning and size-cap splitting
* :mod:`~vcm.store.arango.snapshots` - stable search cursors (stored in ``cursors``)
* :mod:`~vcm.store.arango.keys`, :mod:`~vcm.store.arango.documents`, :mod:`~vcm.store.arango.names`,
  :mod:`~vcm.store.arango.errors` - plumbing

Argument checks, cursors, post-filters and write rules are shared with the embedded adapter
(:mod:`vcm.store.validation`, :mod:`vcm.store.cursor`, :mod:`vcm.store.paging`, :mod:`vcm.store.filters`,
:mod:`vcm.store.semantics`), so both refuse and answer alike.

Facts about ArangoDB behind the choices are in ``docs/reference/arangodb.md``.
"""

from __future__ import annotations

from vcm.store.arango.adapter import ArangoStore

__all__ = ["ArangoStore"]
