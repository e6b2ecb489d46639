"""Maintenance of the ArangoDB store: expiry, health and stats.

``expire`` deletes in batches of ``expire_batch`` messages per transaction (with their edges),
so one call never builds an unbounded transaction.
"""

from __future__ import annotations

import contextlib
from typing import Any

from vcm.errors import VcmError
from vcm.store import validation
from vcm.store.arango import names
from vcm.store.arango.aql import common as aql_common
from vcm.store.arango.aql import maintenance as aql_maintenance
from vcm.store.arango.errors import translated
from vcm.store.arango.vector_spaces import VectorSpaceOps
from vcm.store.types import Expiry, Health


class MaintenanceOps(VectorSpaceOps):
    """``expire``, ``health`` and ``stats``."""

    def expire_all(self, now: float) -> Expiry:
        validation.finite("now", now)
        removed = 0
        while True:
            with self._transaction((names.MESSAGES, *names.EDGE_COLLECTIONS), "expire") as txn:
                ids = [
                    str(i) for i in self._run(txn, aql_maintenance.expire_messages(now, self._expire_batch), "expire")
                ]
                if ids:
                    for edges in names.EDGE_COLLECTIONS:
                        self._run(txn, aql_common.remove_edges_of(edges, ids), "expire")
            removed += len(ids)
            if len(ids) < self._expire_batch:
                break
        counts = {"snapshots": 0, "state": 0, "facts": 0}
        with contextlib.suppress(VcmError):  # housekeeping only
            self._run(self._rw, aql_maintenance.purge_cursors(self._clock()), "expire")
            for name, query in (
                ("snapshots", aql_maintenance.expire_snapshots(now)),
                ("state", aql_maintenance.expire_state(now)),
                ("facts", aql_maintenance.expire_facts(now)),
            ):
                counts[name] = sum(int(n) for n in self._run(self._rw, query, "expire"))
        return Expiry(messages=removed, **counts)

    def health(self) -> Health:
        try:
            details = self._details()
        except VcmError as exc:
            return Health(False, self.backend, {"database": self._conn.database, "error": exc.message})
        return Health(True, self.backend, details)

    def _details(self) -> dict[str, Any]:
        with translated("health"):
            version = str(self._ro.version())
        spaces = []
        for s in self._spaces():
            st = self._space_state(s.metric, s.dimension)
            spaces.append(
                {
                    "metric": s.metric,
                    "dimension": s.dimension,
                    "embedding_version": s.embedding_version,
                    "kind": st.state,
                    "n_lists": st.n_lists,
                    "error": st.error,
                }
            )
        return {
            "database": self._conn.database,
            "server_version": version,
            "vector_index": "ivf" if spaces and all(s["kind"] == "ivf" for s in spaces) else "exact",
            "vector_spaces": spaces,
            "vector_threshold": self._vector_threshold,
            "n_probe": self._n_probe,
            "guard": None
            if self.guard_report is None
            else {
                "vector_index_option": self.guard_report.vector_index,
                "detected_by": self.guard_report.detected_by,
                "warnings": [p.message for p in self.guard_report.problems if not p.fatal],
            },
        }

    def stats(self, agent_id: str | None = None) -> dict[str, Any]:
        if agent_id is not None:
            validation.identifier("agent_id", agent_id)
        rows = self._run(self._ro, aql_maintenance.stats(agent_id), "stats")
        counts = {k: int(v or 0) for k, v in (rows[0] if rows else {}).items()}
        out: dict[str, Any] = {"backend": self.backend, "agent_id": agent_id, **counts}
        if agent_id is None:
            out["facts_by_type"] = list(self._run(self._ro, aql_maintenance.fact_type_counts(), "stats"))
            out.update(self._details())
        return out
