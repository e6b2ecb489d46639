"""Agents of the embedded store: their records, id floors, FIFO membership and summary history.

The record is what a lost hot state is rebuilt from (``vcm.durable``); the FIFO of a rebuilt
agent is every stored message that no committed eviction batch holds, which needs no table of
its own: ``commit_eviction`` links each message it folds into the summary with a ``recall_log``
edge, in the same transaction.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from typing import Any

from vcm.errors import NotFound, ValidationError
from vcm.store import validation
from vcm.store.embedded import rows
from vcm.store.embedded.base import EmbeddedBase
from vcm.store.embedded.facts import replace_memory
from vcm.store.types import (
    SUMMARY_BLOCK_ID,
    AgentRecord,
    ContextReset,
    StoredMessage,
    SummaryVersion,
    message_node,
    summary_node,
)

AGENT_COLUMNS = "agent_id, config, token_sha256, id_floor, created_at, updated_at, incarnation, user_id, domain"


def agent_record(row: sqlite3.Row) -> AgentRecord:
    return AgentRecord(
        agent_id=row["agent_id"],
        config=json.loads(row["config"]),
        token_sha256=row["token_sha256"],
        id_floor=int(row["id_floor"]),
        created_at=float(row["created_at"]),
        updated_at=float(row["updated_at"]),
        incarnation=row["incarnation"] or "",
        user_id=row["user_id"],
        domain=row["domain"],
    )


class AgentOps(EmbeddedBase):
    """``put_agent``, ``get_agent``, ``list_agents``, ``set_agent_token``, ``advance_id_floor``,
    ``uncommitted_messages``, ``summary_versions`` and ``reset_context``."""

    def put_agent(self, agent_id: str, config: Mapping[str, Any], *, incarnation: str = "") -> AgentRecord:
        validation.identifier("agent_id", agent_id)
        text = validation.json_mapping("config", config)
        if not isinstance(incarnation, str):
            raise ValidationError("incarnation must be a string", field="incarnation")
        now = self._clock()
        with self._db.write("write an agent") as conn:
            # An existing record keeps its incarnation: only a new agent (a deleted one's id
            # included) gets the one given.
            conn.execute(
                "INSERT INTO agents (agent_id, config, created_at, updated_at, incarnation) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (agent_id) DO UPDATE SET config = excluded.config, updated_at = excluded.updated_at "
                "WHERE agents.config != excluded.config",
                (agent_id, text, now, now, incarnation),
            )
            row = conn.execute(f"SELECT {AGENT_COLUMNS} FROM agents WHERE agent_id = ?", (agent_id,)).fetchone()
        return agent_record(row)

    def get_agent(self, agent_id: str) -> AgentRecord:
        validation.identifier("agent_id", agent_id)
        found = self._db.query("read an agent", f"SELECT {AGENT_COLUMNS} FROM agents WHERE agent_id = ?", (agent_id,))
        if not found:
            raise NotFound(f"unknown agent {agent_id!r}; create it first", agent_id=agent_id)
        return agent_record(found[0])

    def list_agents(self) -> list[AgentRecord]:
        found = self._db.query("list agents", f"SELECT {AGENT_COLUMNS} FROM agents ORDER BY agent_id")
        return [agent_record(r) for r in found]

    def set_agent_token(self, agent_id: str, token_sha256: str | None) -> None:
        validation.identifier("agent_id", agent_id)
        if token_sha256 is not None:
            validation.identifier("token_sha256", token_sha256)
        with self._db.write("record an agent token") as conn:
            done = conn.execute(
                "UPDATE agents SET token_sha256 = ?, updated_at = ? WHERE agent_id = ?",
                (token_sha256, self._clock(), agent_id),
            )
            if done.rowcount == 0:
                raise NotFound(f"unknown agent {agent_id!r}; create it first", agent_id=agent_id)

    def advance_id_floor(self, agent_id: str, floor: int) -> int:
        validation.identifier("agent_id", agent_id)
        if isinstance(floor, bool) or not isinstance(floor, int) or floor < 0:
            raise ValidationError("floor must be a non-negative integer", field="floor")
        with self._db.write("advance an id floor") as conn:
            conn.execute("UPDATE agents SET id_floor = MAX(id_floor, ?) WHERE agent_id = ?", (floor, agent_id))
            row = conn.execute("SELECT id_floor FROM agents WHERE agent_id = ?", (agent_id,)).fetchone()
        if row is None:
            raise NotFound(f"unknown agent {agent_id!r}; create it first", agent_id=agent_id)
        return int(row[0])

    def uncommitted_messages(self, agent_id: str, *, after_seq: int = -1, limit: int = 1000) -> list[StoredMessage]:
        validation.identifier("agent_id", agent_id)
        after, n = validation.after_seq(after_seq), validation.limit("limit", limit)
        summary = summary_node(agent_id)
        # The edges' primary key (src_coll, src_key, kind, dst_coll, dst_key) answers each probe.
        found = self._db.query(
            "list uncommitted messages",
            f"SELECT {rows.MESSAGE_COLUMNS} FROM messages m WHERE m.agent_id = ? AND m.seq > ? "
            "AND NOT EXISTS (SELECT 1 FROM edges e WHERE e.src_coll = ? AND e.src_key = ? "
            "AND e.kind = 'recall_log' AND e.dst_coll = 'messages' AND e.dst_key = m.agent_id || ':' || m.message_id) "
            "ORDER BY m.seq, m.id LIMIT ?",
            (agent_id, after, summary.collection, summary.key, n),
        )
        return [rows.message(r) for r in found]

    def summary_versions(self, agent_id: str, *, limit: int = 20) -> list[SummaryVersion]:
        validation.identifier("agent_id", agent_id)
        n = validation.limit("limit", limit)
        found = self._db.query(
            "list summary versions",
            "SELECT agent_id, batch_id, text, tokens, rev, created_at FROM summary_versions "
            "WHERE agent_id = ? ORDER BY batch_id DESC LIMIT ?",
            (agent_id, n),
        )
        return [
            SummaryVersion(
                r["agent_id"], int(r["batch_id"]), r["text"], int(r["tokens"]), r["rev"], float(r["created_at"])
            )
            for r in found
        ]

    def reset_context(self, change: ContextReset) -> None:
        agent = change.agent_id
        validation.identifier("agent_id", agent)
        keep = {validation.identifier("message_id", m) for m in change.fifo_ids}
        blocks = None if change.blocks is None else [validation.core_write(b) for b in change.blocks]
        config = None if change.config is None else validation.json_mapping("config", change.config)
        memory = None if change.memory is None else validation.agent_memory(agent, change.memory)
        summary = summary_node(agent)
        now = self._clock()
        with self._db.write("reset a context") as conn:
            folded = {
                r[0]
                for r in conn.execute(
                    "SELECT dst_key FROM edges WHERE src_coll = ? AND src_key = ? AND kind = 'recall_log'",
                    (summary.collection, summary.key),
                )
            }
            ids = [r[0] for r in conn.execute("SELECT message_id FROM messages WHERE agent_id = ?", (agent,))]
            leaving = [m for m in ids if m not in keep and message_node(agent, m).key not in folded]
            returning = [m for m in ids if m in keep and message_node(agent, m).key in folded]
            conn.executemany(
                "INSERT OR IGNORE INTO edges (kind, src_coll, src_key, dst_coll, dst_key, agent_id, created_at, "
                "attributes) VALUES ('recall_log', ?, ?, 'messages', ?, ?, ?, ?)",
                [
                    (
                        summary.collection,
                        summary.key,
                        message_node(agent, m).key,
                        agent,
                        now,
                        rows.dumps({"batch_id": change.batch_id}),
                    )
                    for m in leaving
                ],
            )
            conn.executemany(
                "DELETE FROM edges WHERE src_coll = ? AND src_key = ? AND kind = 'recall_log' "
                "AND dst_coll = 'messages' AND dst_key = ?",
                [(summary.collection, summary.key, message_node(agent, m).key) for m in returning],
            )
            rev = self._next_rev(conn)
            conn.execute(
                "INSERT INTO core_memory (agent_id, block_id, role, content, tokens, pinned, rev, "
                "updated_at, metadata, batch_id) VALUES (?, ?, 'system', ?, ?, 0, ?, ?, '{}', ?) "
                "ON CONFLICT (agent_id, block_id) DO UPDATE SET content = excluded.content, "
                "tokens = excluded.tokens, rev = excluded.rev, updated_at = excluded.updated_at, "
                "batch_id = excluded.batch_id",
                (agent, SUMMARY_BLOCK_ID, change.summary_text, change.summary_tokens, rev, now, change.batch_id),
            )
            conn.execute(
                "INSERT OR REPLACE INTO summary_versions (agent_id, batch_id, text, tokens, rev, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (agent, change.batch_id, change.summary_text, change.summary_tokens, rev, now),
            )
            if blocks is not None:
                conn.execute("DELETE FROM core_memory WHERE agent_id = ? AND block_id != ?", (agent, SUMMARY_BLOCK_ID))
                for b in blocks:
                    conn.execute(
                        "INSERT INTO core_memory (agent_id, block_id, role, content, tokens, pinned, rev, "
                        "updated_at, metadata) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            agent,
                            b.block_id,
                            b.role,
                            b.content,
                            b.tokens,
                            int(b.pinned),
                            self._next_rev(conn),
                            now,
                            rows.dumps(dict(b.metadata)),
                        ),
                    )
            if config is not None:
                conn.execute(
                    "UPDATE agents SET config = ?, updated_at = ? WHERE agent_id = ? AND config != ?",
                    (config, now, agent, config),
                )
            if memory is not None:
                replace_memory(conn, agent, memory, lambda: self._next_rev(conn))
            self._fault("reset_context.before_commit")
