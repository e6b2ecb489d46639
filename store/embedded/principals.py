"""Users and domains of the embedded store (``principals`` rows), and the fence of a write to a
principal's memory. Shared facts are ``facts`` rows whose ``agent_id`` is the principal's holder id
(:mod:`vcm.store.principals`); deleting the principal deletes them in the same transaction."""

from __future__ import annotations

import sqlite3

from vcm.errors import NotFound, ValidationError
from vcm.store import validation
from vcm.store.embedded.agents import AGENT_COLUMNS, agent_record
from vcm.store.embedded.base import EmbeddedBase
from vcm.store.principals import PRINCIPAL_KINDS, Principal, holder_id, is_holder, principal_of
from vcm.store.types import FACT_EDGE_KINDS, AgentRecord


def _kind(kind: str) -> str:
    if kind not in PRINCIPAL_KINDS:
        raise ValidationError(f"kind must be one of {', '.join(PRINCIPAL_KINDS)}", field="kind")
    return kind


def _principal(row: sqlite3.Row) -> Principal:
    kind, _ = principal_of(holder_id(row["kind"], row["name"]))
    return Principal(kind, row["name"], row["incarnation"], float(row["created_at"]))


class PrincipalOps(EmbeddedBase):
    """``put_principal``, ``get_principal``, ``list_principals``, ``delete_principal`` and
    ``set_agent_principals``."""

    def put_principal(self, principal: Principal) -> Principal:
        kind = _kind(principal.kind)
        validation.identifier("name", principal.name)
        validation.identifier("incarnation", principal.incarnation)
        with self._db.write("write a principal") as conn:
            conn.execute(
                "INSERT OR IGNORE INTO principals (kind, name, incarnation, created_at) VALUES (?, ?, ?, ?)",
                (kind, principal.name, principal.incarnation, self._clock()),
            )
            row = conn.execute(
                "SELECT kind, name, incarnation, created_at FROM principals WHERE kind = ? AND name = ?",
                (kind, principal.name),
            ).fetchone()
        return _principal(row)

    def get_principal(self, kind: str, name: str) -> Principal:
        _kind(kind)
        validation.identifier("name", name)
        found = self._db.query(
            "read a principal",
            "SELECT kind, name, incarnation, created_at FROM principals WHERE kind = ? AND name = ?",
            (kind, name),
        )
        if not found:
            raise NotFound(f"unknown {kind} {name!r}", **{kind: name})
        return _principal(found[0])

    def list_principals(self, kind: str) -> list[Principal]:
        _kind(kind)
        found = self._db.query(
            "list principals",
            "SELECT kind, name, incarnation, created_at FROM principals WHERE kind = ? ORDER BY name",
            (kind,),
        )
        return [_principal(r) for r in found]

    def delete_principal(self, kind: str, name: str) -> int:
        _kind(kind)
        validation.identifier("name", name)
        holder = holder_id(kind, name)
        column = "user_id" if kind == "user" else "domain"
        kinds = ",".join("?" * len(FACT_EDGE_KINDS))
        with self._db.write("delete a principal") as conn:
            removed = int(conn.execute("DELETE FROM facts WHERE agent_id = ?", (holder,)).rowcount)
            conn.execute(f"DELETE FROM edges WHERE agent_id = ? AND kind IN ({kinds})", (holder, *FACT_EDGE_KINDS))
            conn.execute("DELETE FROM state WHERE agent_id = ?", (holder,))
            conn.execute("DELETE FROM events WHERE agent_id = ?", (holder,))
            conn.execute(f"UPDATE agents SET {column} = NULL WHERE {column} = ?", (name,))
            conn.execute("DELETE FROM principals WHERE kind = ? AND name = ?", (kind, name))
        return removed

    def set_agent_principals(self, agent_id: str, *, user_id: str | None, domain: str | None) -> AgentRecord:
        validation.identifier("agent_id", agent_id)
        if is_holder(agent_id):
            raise ValidationError("agent_id names no agent", field="agent_id")
        with self._db.write("set an agent's principals") as conn:
            for kind, name in (("user", user_id), ("domain", domain)):
                if name is None:
                    continue
                validation.identifier(kind, name)
                known = conn.execute("SELECT 1 FROM principals WHERE kind = ? AND name = ?", (kind, name))
                if known.fetchone() is None:
                    raise NotFound(f"unknown {kind} {name!r}", **{kind: name})
            done = conn.execute(
                "UPDATE agents SET user_id = ?, domain = ?, updated_at = ? WHERE agent_id = ?",
                (user_id, domain, self._clock(), agent_id),
            )
            if done.rowcount == 0:
                raise NotFound(f"unknown agent {agent_id!r}; create it first", agent_id=agent_id)
            row = conn.execute(f"SELECT {AGENT_COLUMNS} FROM agents WHERE agent_id = ?", (agent_id,)).fetchone()
        return agent_record(row)
