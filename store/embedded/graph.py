"""The graph of the embedded store: edges between nodes, kept in the ``edges`` table.

Besides the port's ``add_edge`` and ``traverse``, it holds :func:`delete_node_edges`, which the
writes that remove a node (``delete_core``, ``expire``) call so that no edge outlives its node.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from vcm.store import validation
from vcm.store.embedded import rows
from vcm.store.embedded.base import EmbeddedBase, fence
from vcm.store.types import Edge, EdgeKind, NodeRef


class GraphOps(EmbeddedBase):
    """``add_edge`` and a breadth-first ``traverse`` over the ``edges`` table."""

    def add_edge(self, edge: Edge, *, incarnation: str | None = None) -> None:
        validation.edge(edge)
        with self._db.write("add an edge") as conn:
            fence(conn, (edge.agent_id,), incarnation)
            conn.execute(
                "INSERT OR IGNORE INTO edges (kind, src_coll, src_key, dst_coll, dst_key, "
                "agent_id, created_at, attributes) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    edge.kind,
                    edge.src.collection,
                    edge.src.key,
                    edge.dst.collection,
                    edge.dst.key,
                    edge.agent_id,
                    self._now(edge.created_at),
                    rows.dumps(dict(edge.attributes)),
                ),
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
        marks = ",".join("?" * len(wanted))
        queries = []
        if direction in ("outbound", "any"):
            queries.append(
                "SELECT dst_coll, dst_key FROM edges WHERE src_coll = ? AND src_key = ? "
                f"AND kind IN ({marks}) ORDER BY kind, dst_coll, dst_key"
            )
        if direction in ("inbound", "any"):
            queries.append(
                "SELECT src_coll, src_key FROM edges WHERE dst_coll = ? AND dst_key = ? "
                f"AND kind IN ({marks}) ORDER BY kind, src_coll, src_key"
            )
        seen = {start}
        reached: list[NodeRef] = []
        frontier = [start]
        with self._db.read("traverse the graph") as conn:
            for _ in range(max_depth):
                following: list[NodeRef] = []
                for node in frontier:
                    for sql in queries:
                        for coll, key in conn.execute(sql, (node.collection, node.key, *wanted)):
                            found = NodeRef(coll, key)
                            if found not in seen:
                                seen.add(found)
                                reached.append(found)
                                following.append(found)
                if not following:
                    break
                frontier = following
        return reached


# --- helpers (run inside an open write transaction) -------------------------------------------
def delete_node_edges(conn: sqlite3.Connection, nodes: Sequence[NodeRef]) -> None:
    """Remove every edge from or to these nodes (``delete_core`` and ``expire`` remove nodes)."""
    pairs = [(n.collection, n.key) for n in nodes]
    conn.executemany("DELETE FROM edges WHERE src_coll = ? AND src_key = ?", pairs)
    conn.executemany("DELETE FROM edges WHERE dst_coll = ? AND dst_key = ?", pairs)
