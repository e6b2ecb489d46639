"""Rewriting stored summary versions (a forgotten message's words leave every version of it)."""

from __future__ import annotations

from collections.abc import Sequence

from vcm.store import semantics, validation
from vcm.store.embedded import rows
from vcm.store.embedded.base import EmbeddedBase
from vcm.store.types import SUMMARY_BLOCK_ID, Summary, SummaryVersion


class SummaryOps(EmbeddedBase):
    """``rewrite_summaries``."""

    def rewrite_summaries(
        self, agent_id: str, versions: Sequence[SummaryVersion], *, expected_rev: str | None
    ) -> Summary | None:
        versions = validation.summary_rewrites(agent_id, versions)
        now = self._clock()
        with self._db.write("rewrite summaries") as conn:
            found = conn.execute(
                f"SELECT {rows.CORE_COLUMNS} FROM core_memory WHERE agent_id = ? AND block_id = ?",
                (agent_id, SUMMARY_BLOCK_ID),
            ).fetchone()
            current = rows.summary(found) if found else None
            if current is not None and current.rev != expected_rev:
                raise semantics.rev_conflict(f"the summary of agent {agent_id!r}", expected_rev, current.rev)
            for v in versions:
                rev = self._next_rev(conn)
                conn.execute(
                    "UPDATE summary_versions SET text = ?, tokens = ?, rev = ? WHERE agent_id = ? AND batch_id = ?",
                    (v.text, v.tokens, rev, agent_id, v.batch_id),
                )
                if current is not None and v.batch_id == current.batch_id:
                    conn.execute(
                        "UPDATE core_memory SET content = ?, tokens = ?, rev = ?, updated_at = ? "
                        "WHERE agent_id = ? AND block_id = ?",
                        (v.text, v.tokens, rev, now, agent_id, SUMMARY_BLOCK_ID),
                    )
            self._fault("rewrite_summaries.before_commit")
            found = conn.execute(
                f"SELECT {rows.CORE_COLUMNS} FROM core_memory WHERE agent_id = ? AND block_id = ?",
                (agent_id, SUMMARY_BLOCK_ID),
            ).fetchone()
        return rows.summary(found) if found else None
