"""Core memory of the embedded store: blocks and the recursive summary (``core_memory`` rows).

Blocks carry revisions from the database-wide sequence (:meth:`EmbeddedBase._next_rev`), and
``put_core`` is idempotent per key through the ``idempotency`` table, written in the same
transaction as the block. The summary row (``SUMMARY_BLOCK_ID``) is only read here; it is written
by ``commit_eviction`` (:mod:`vcm.store.embedded.messages`).
"""

from __future__ import annotations

import json

from vcm.errors import NotFound
from vcm.store import semantics, validation
from vcm.store.embedded import rows
from vcm.store.embedded.base import EmbeddedBase
from vcm.store.embedded.graph import delete_node_edges
from vcm.store.types import SUMMARY_BLOCK_ID, CoreBlock, CoreBlockWrite, Summary, core_node


class CoreMemoryOps(EmbeddedBase):
    """``get_core``, ``list_core``, ``put_core``, ``delete_core`` and ``get_summary``."""

    def get_core(self, agent_id: str, block_id: str) -> CoreBlock:
        validation.identifier("agent_id", agent_id)
        validation.identifier("block_id", block_id)
        found = self._db.query(
            "read a core block",
            f"SELECT {rows.CORE_COLUMNS} FROM core_memory WHERE agent_id = ? AND block_id = ?",
            (agent_id, block_id),
        )
        if not found:
            raise NotFound(
                f"core block {block_id!r} of agent {agent_id!r} does not exist",
                agent_id=agent_id,
                block_id=block_id,
            )
        return rows.core_block(found[0])

    def list_core(self, agent_id: str) -> list[CoreBlock]:
        validation.identifier("agent_id", agent_id)
        found = self._db.query(
            "list core blocks",
            f"SELECT {rows.CORE_COLUMNS} FROM core_memory WHERE agent_id = ? AND block_id != ? ORDER BY block_id",
            (agent_id, SUMMARY_BLOCK_ID),
        )
        return [rows.core_block(r) for r in found]

    def put_core(self, block: CoreBlockWrite, expected_rev: str | None, idempotency_key: str) -> CoreBlock:
        validation.core_write(block)
        validation.rev("expected_rev", expected_rev, optional=True)
        validation.identifier("idempotency_key", idempotency_key)
        content = semantics.core_write_fingerprint(block)
        with self._db.write("write a core block") as conn:
            seen = conn.execute(
                "SELECT fingerprint, result FROM idempotency WHERE agent_id = ? AND scope = 'core' AND key = ?",
                (block.agent_id, idempotency_key),
            ).fetchone()
            if seen is not None:
                return semantics.replayed_core_write(
                    seen["fingerprint"], json.loads(seen["result"]), content, idempotency_key
                )
            current = conn.execute(
                "SELECT rev FROM core_memory WHERE agent_id = ? AND block_id = ?",
                (block.agent_id, block.block_id),
            ).fetchone()
            current_rev = None if current is None else current["rev"]
            if current_rev != expected_rev:
                raise semantics.rev_conflict(f"core block {block.block_id!r}", expected_rev, current_rev)
            stored = CoreBlock(
                agent_id=block.agent_id,
                block_id=block.block_id,
                role=block.role,
                content=block.content,
                tokens=block.tokens,
                pinned=block.pinned,
                rev=self._next_rev(conn),
                updated_at=self._clock(),
                metadata=dict(block.metadata),
            )
            conn.execute(
                "INSERT INTO core_memory (agent_id, block_id, role, content, tokens, pinned, "
                "rev, updated_at, metadata) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (agent_id, block_id) DO UPDATE SET role = excluded.role, "
                "content = excluded.content, tokens = excluded.tokens, pinned = excluded.pinned, "
                "rev = excluded.rev, updated_at = excluded.updated_at, "
                "metadata = excluded.metadata",
                (
                    stored.agent_id,
                    stored.block_id,
                    stored.role,
                    stored.content,
                    stored.tokens,
                    int(stored.pinned),
                    stored.rev,
                    stored.updated_at,
                    rows.dumps(dict(stored.metadata)),
                ),
            )
            conn.execute(
                "INSERT INTO idempotency (agent_id, scope, key, fingerprint, result, created_at) "
                "VALUES (?, 'core', ?, ?, ?, ?)",
                (
                    block.agent_id,
                    idempotency_key,
                    content,
                    rows.dumps(semantics.core_block_to_json(stored)),
                    stored.updated_at,
                ),
            )
            self._fault("put_core.before_commit")
        return stored

    def delete_core(self, agent_id: str, block_id: str, expected_rev: str) -> None:
        validation.identifier("agent_id", agent_id)
        validation.block_id(block_id)
        validation.rev("expected_rev", expected_rev, optional=False)
        node = core_node(agent_id, block_id)
        with self._db.write("delete a core block") as conn:
            current = conn.execute(
                "SELECT rev FROM core_memory WHERE agent_id = ? AND block_id = ?",
                (agent_id, block_id),
            ).fetchone()
            if current is None:
                raise NotFound(
                    f"core block {block_id!r} of agent {agent_id!r} does not exist",
                    agent_id=agent_id,
                    block_id=block_id,
                )
            if current["rev"] != expected_rev:
                raise semantics.rev_conflict(f"core block {block_id!r}", expected_rev, current["rev"])
            conn.execute("DELETE FROM core_memory WHERE agent_id = ? AND block_id = ?", (agent_id, block_id))
            delete_node_edges(conn, [node])

    def get_summary(self, agent_id: str) -> Summary | None:
        validation.identifier("agent_id", agent_id)
        found = self._db.query(
            "read the summary",
            f"SELECT {rows.CORE_COLUMNS} FROM core_memory WHERE agent_id = ? AND block_id = ?",
            (agent_id, SUMMARY_BLOCK_ID),
        )
        return rows.summary(found[0]) if found else None
