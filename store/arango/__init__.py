"""The ArangoDB adapter of the store port (ArangoDB 3.12.4+, python-arango).

Modules, each small and named after what it holds:

* :mod:`~store.arango.adapter` - :class:`ArangoStore`, the port implementation
* :mod:`~store.arango.aql` - every query, as pure ``(text, bind_vars)`` builders
* :mod:`~store.arango.schema` - ``config/arango_schema.json`` loading, idempotent bootstrap,
  the lazily created vector index
* :mod:`~store.arango.client` - URLs, the Unix-socket HTTP client, read-only/read-write handles
* :mod:`~store.arango.guard` - refuses servers that cannot serve vcm
* :mod:`~store.arango.eviction` - ``commit_eviction`` planning and size-cap splitting
* :mod:`~store.arango.snapshots` - stable search cursors (stored in ``cursors``)
* :mod:`~store.arango.keys`, :mod:`~store.arango.documents`, :mod:`~store.arango.names`,
  :mod:`~store.arango.errors` - plumbing

Argument checks, cursors, post-filters and write rules are shared with the embedded adapter
(:mod:`store.validation`, :mod:`store.cursor`, :mod:`store.paging`, :mod:`store.filters`,
:mod:`store.semantics`), so both refuse and answer alike.

Facts about ArangoDB behind the choices are in the shared ``reference/arangodb.md``.
"""

from __future__ import annotations

from store.arango.adapter import ArangoStore

__all__ = ["ArangoStore"]
