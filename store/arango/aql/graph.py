"""The memory graph ``g_mem``: traversal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from vcm.errors import ValidationError
from vcm.store.arango import names
from vcm.store.arango.aql.common import (
    AqlQuery,
)
from vcm.store.validation import MAX_DEPTH

Direction = Literal["outbound", "inbound", "any"]


_DIRECTIONS: dict[str, str] = {"outbound": "OUTBOUND", "inbound": "INBOUND", "any": "ANY"}


def traverse(start_id: str, edge_collections: Sequence[str], *, max_depth: int, direction: Direction) -> AqlQuery:
    """Breadth-first traversal of ``g_mem`` returning, per reached vertex, its path's edges.

    Vertices need not exist as documents (the port allows edges between any refs): the
    traverser expands dangling vertices by id and yields ``v = null`` with a warning, so the
    caller rebuilds each vertex from the path's edges (``src``/``dst`` refs stored on them).
    """
    if direction not in _DIRECTIONS:
        raise ValidationError("direction must be outbound, inbound or any")
    for coll in edge_collections:
        if coll not in names.EDGE_COLLECTIONS:
            raise ValidationError("unknown edge kind", kind=coll)
    if not 1 <= max_depth <= MAX_DEPTH:
        raise ValidationError(f"max_depth must be 1..{MAX_DEPTH}")
    text = f"""FOR v, e, p IN 1..@max_depth {_DIRECTIONS[direction]} @start GRAPH "{names.GRAPH}"
  OPTIONS {{ order: "bfs", uniqueVertices: "global", edgeCollections: @edge_collections }}
  RETURN p.edges[* RETURN {{
    f: CURRENT._from, t: CURRENT._to, k: CURRENT.kind, src: CURRENT.src, dst: CURRENT.dst
  }}]"""
    return AqlQuery(
        text,
        {"start": start_id, "max_depth": max_depth, "edge_collections": list(edge_collections)},
    )
