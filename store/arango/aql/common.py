"""What every family of queries shares: the query type, checked names and attributes, the
archival filters' parsing, and the generic reads, writes and removals by collection.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from vcm.errors import ValidationError
from vcm.store import filters as filters_module
from vcm.store.arango import names
from vcm.store.filters import ArchivalFilter as ArchivalFilter  # re-exported: the type of every filters argument
from vcm.store.types import Metric


class AqlQuery(NamedTuple):
    text: str
    bind_vars: dict[str, Any]


# Metadata filter keys go through bind variables anyway; the pattern only keeps them sane.
SAFE_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,127}$")


_VECTOR_ATTRIBUTE = re.compile(r"^emb_(cosine|l2)_[1-9][0-9]{0,4}$")


MAX_DIMENSION = 65_536


def parse_filters(filters: Mapping[str, Any] | None) -> ArchivalFilter:
    """The shared post-filters (:mod:`vcm.store.filters`), keys also held to :data:`SAFE_KEY`.

    The stricter key rule is this adapter's own: keys travel as bind variables anyway, but a
    key that is not an identifier is refused before it reaches a query.
    """
    if isinstance(filters, Mapping):
        for key in filters:
            if not isinstance(key, str) or not SAFE_KEY.match(key):
                raise ValidationError(
                    "filter keys must be identifiers (letters, digits, _ and -, at most 128)",
                    key=repr(key),
                )
    return filters_module.parse_filters(filters)


def vector_attribute(metric: Metric, dimension: int) -> str:
    """The document attribute holding vectors of one space; one vector index per attribute.

    A vector index has one metric and one dimension, and refuses documents of another
    dimension, so each (metric, dimension) gets its own attribute.
    """
    if metric not in ("cosine", "l2"):
        raise ValidationError("metric must be 'cosine' or 'l2'", metric=str(metric))
    if not isinstance(dimension, int) or not 0 < dimension <= MAX_DIMENSION:
        raise ValidationError(f"embedding dimension must be 1..{MAX_DIMENSION}")
    attr = f"emb_{metric}_{dimension}"
    return _checked_attribute(attr)


def _checked_attribute(attr: str) -> str:
    if not _VECTOR_ATTRIBUTE.match(attr):  # never true for vector_attribute(); defence only
        raise ValidationError("invalid vector attribute", attribute=attr)
    return attr


def insert_ignore(collection: str, docs: Sequence[Mapping[str, Any]], *, stamp_ingested: bool = False) -> AqlQuery:
    """Insert documents whose ``_key`` already encodes their identity; existing keys are kept.

    Returns one row per document: its ``_key`` when it was new, ``null`` when it existed
    (``RETURN NEW`` is null for an ignored insert). ``stamp_ingested`` records the server
    clock in ``ingested_at`` (ms), which read-after-write recall relies on.
    """
    known_collection(collection)
    doc = "MERGE(doc, { ingested_at: DATE_NOW() })" if stamp_ingested else "doc"
    text = (
        f'FOR doc IN @docs\n  INSERT {doc} INTO @@collection OPTIONS {{ overwriteMode: "ignore" }}\n  RETURN NEW._key'
    )
    return AqlQuery(text, {"docs": [dict(d) for d in docs], "@collection": collection})


def documents(ids: Sequence[str], agent_id: str | None = None) -> AqlQuery:
    """Documents by ``_id``, in the order asked, missing ones left out."""
    owner = " AND d.agent_id == @agent_id" if agent_id is not None else ""
    text = f"FOR id IN @ids\n  LET d = DOCUMENT(id)\n  FILTER d != null{owner}\n  RETURN d"
    bind: dict[str, Any] = {"ids": list(ids)}
    if agent_id is not None:
        bind["agent_id"] = agent_id
    return AqlQuery(text, bind)


def collection_count(collection: str) -> AqlQuery:
    """Documents in a collection, in constant time (``LENGTH(coll)`` uses the count)."""
    known_collection(collection)  # a schema constant, never caller input
    return AqlQuery(f"RETURN LENGTH({collection})", {})


def remove_edges_of(edge_collection: str, vertex_ids: Sequence[str]) -> AqlQuery:
    """Remove every edge touching one of the given vertices (after they were deleted)."""
    if edge_collection not in names.EDGE_COLLECTIONS:
        raise ValidationError("unknown edge collection", collection=edge_collection)
    text = "FOR e IN @@edges\n  FILTER e._from IN @ids OR e._to IN @ids\n  REMOVE e IN @@edges\n  RETURN OLD._key"
    return AqlQuery(text, {"@edges": edge_collection, "ids": list(vertex_ids)})


def remove_of_agent(collection: str, agent_id: str) -> AqlQuery:
    """Remove every document of one agent from a collection; returns how many."""
    known_collection(collection)
    text = (
        "FOR d IN @@collection\n  FILTER d.agent_id == @agent_id\n  REMOVE d IN @@collection\n"
        "  COLLECT WITH COUNT INTO n\n  RETURN n"
    )
    return AqlQuery(text, {"@collection": collection, "agent_id": agent_id})


def remove_documents(collection: str, ids: Sequence[str]) -> AqlQuery:
    """Remove documents by ``_id`` (of one collection); missing ones are skipped."""
    known_collection(collection)
    text = (
        "FOR id IN @ids\n  LET d = DOCUMENT(id)\n  FILTER d != null\n"
        "  REMOVE d IN @@collection\n  COLLECT WITH COUNT INTO n\n  RETURN n"
    )
    return AqlQuery(text, {"@collection": collection, "ids": list(ids)})


def known_collection(collection: str) -> None:
    if collection not in names.ALL_COLLECTIONS:
        raise ValidationError("unknown collection", collection=collection)


def time_window(var: str, since: float | None, until: float | None) -> tuple[str, str, dict[str, Any]]:
    view_parts: list[str] = []
    scan_parts: list[str] = []
    bind: dict[str, Any] = {}
    if since is not None:
        view_parts.append(f"\n      AND {var}.created_at >= @since")
        scan_parts.append(f"\n    FILTER {var}.created_at >= @since")
        bind["since"] = since
    if until is not None:
        view_parts.append(f"\n      AND {var}.created_at < @until")
        scan_parts.append(f"\n    FILTER {var}.created_at < @until")
        bind["until"] = until
    return "".join(view_parts), "".join(scan_parts), bind
