"""The fence of a write to a principal's memory (embedded store): shared facts are ``facts`` rows
whose ``agent_id`` is a holder id (:mod:`vcm.store.principals`), and none may be written for a
principal that is gone."""

from __future__ import annotations

import sqlite3

from vcm.errors import AgentFenced
from vcm.store.principals import principal_of


def fence_holder(conn: sqlite3.Connection, holder: str, incarnation: str | None) -> None:
    """Inside a write transaction: the principal whose memory ``holder`` keys still exists (and,
    given ``incarnation``, is that one). Every write to shared memory passes it, so nothing is
    written for a principal deleted meanwhile: its memory stays gone."""
    kind, name = principal_of(holder)
    row = conn.execute("SELECT incarnation FROM principals WHERE kind = ? AND name = ?", (kind, name)).fetchone()
    if row is None or (incarnation is not None and row[0] != incarnation):
        raise AgentFenced(f"{kind} {name!r} was deleted or re-created; nothing written", agent_id=holder)
