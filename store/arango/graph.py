"""The graph of the ArangoDB store: adding edges and traversing them.

The traversal runs in AQL (:func:`vcm.store.arango.aql.graph.traverse`); :func:`order_traversal`, a pure
function, puts what it reached in the embedded adapter's breadth-first order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from vcm.store import validation
from vcm.store.arango import documents, keys
from vcm.store.arango.aql import common as aql_common
from vcm.store.arango.aql import graph as aql_graph
from vcm.store.arango.base import ArangoBase
from vcm.store.types import Edge, EdgeKind, NodeRef


class GraphOps(ArangoBase):
    """``add_edge`` and ``traverse``."""

    def add_edge(self, edge: Edge, *, incarnation: str | None = None) -> None:
        validation.edge(edge)
        doc = documents.edge_doc(edge, self._clock())
        self._fenced_run(
            aql_common.insert_ignore(edge.kind, [doc]), (edge.kind,), (edge.agent_id,), incarnation, "add_edge"
        )

    def traverse(
        self,
        start: NodeRef,
        kinds: Sequence[EdgeKind] | None = None,
        *,
        max_depth: int = 1,
        direction: str = "outbound",
    ) -> list[NodeRef]:
        wanted = validation.traversal(start, kinds, max_depth, direction)
        start_id = keys.vertex_id(start)
        q = aql_graph.traverse(
            start_id, list(wanted), max_depth=max_depth, direction=cast(aql_graph.Direction, direction)
        )
        paths = self._run(self._ro, q, "traverse")
        return order_traversal(start, start_id, paths)


# --- helpers --------------------------------------------------------------------------------------
def order_traversal(start: NodeRef, start_id: str, paths: Sequence[Any]) -> list[NodeRef]:
    """Reached refs, breadth first, in the embedded adapter's order.

    Each path is the list of edges ``{f, t, k, src, dst}`` from the start to one newly reached
    vertex. Vertices are rebuilt from the edges (not from ``v``, which is null for refs without
    a document). Within one depth the order is: parent's position, outbound before inbound,
    then edge kind, collection and key.
    """
    position: dict[str, int] = {start_id: -1}
    ref_of: dict[str, NodeRef] = {start_id: start}
    by_depth: dict[int, list[tuple[tuple[Any, ...], str, NodeRef]]] = {}
    for path in paths:
        if not isinstance(path, list) or not path:
            continue
        current = start_id
        parent = start_id
        ref: NodeRef | None = None
        outbound = True
        kind = ""
        for e in path:
            parent = current
            if e.get("f") == current:
                current, ref, outbound = e.get("t"), documents.ref_from_pair(e.get("dst")), True
            else:
                current, ref, outbound = e.get("f"), documents.ref_from_pair(e.get("src")), False
            kind = str(e.get("k") or "")
        if not isinstance(current, str) or current in ref_of:
            continue
        if ref is None:  # an edge written without refs: fall back to the document id
            collection, _, key = current.partition("/")
            ref = NodeRef(cast(Any, collection), key)
        by_depth.setdefault(len(path), []).append(((parent, not outbound, kind), current, ref))
    out: list[NodeRef] = []
    for depth in sorted(by_depth):
        level = by_depth[depth]
        level.sort(
            key=lambda item: (
                position.get(item[0][0], len(position)),
                item[0][1],
                item[0][2],
                item[2].collection,
                item[2].key,
            )
        )
        for _, vertex, ref in level:
            if vertex in ref_of:
                continue
            ref_of[vertex] = ref
            position[vertex] = len(out)
            out.append(ref)
    return [r for r in out if r != start]
