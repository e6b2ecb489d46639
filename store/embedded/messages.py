"""Messages of the embedded store: spooling, reading and listing them, and eviction commits.

``spool_messages`` and ``commit_eviction`` both insert messages and their audit events; the
row-level helpers that do it (inside the caller's open write transaction) live here with them.
New messages reach the tantivy index through :meth:`EmbeddedBase._messages_written`; searching
them is :mod:`vcm.store.embedded.recall_ops`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from vcm.errors import ValidationError
from vcm.store import semantics, validation
from vcm.store.analysis import analyze
from vcm.store.audit_names import EventKind
from vcm.store.embedded import rows
from vcm.store.embedded.base import EmbeddedBase, fence
from vcm.store.embedded.db import chunked, meta_add
from vcm.store.embedded.idempotency import upsert_records
from vcm.store.embedded.schema import META_TEXT_DOCS, META_TEXT_TERMS
from vcm.store.types import (
    SUMMARY_BLOCK_ID,
    EvictionCommit,
    EvictionResult,
    IdempotencyRecord,
    MemoryEvent,
    StoredMessage,
    message_node,
    summary_node,
)


class MessageOps(EmbeddedBase):
    """Message storage and the atomic eviction commit (messages, ``recall_log`` edges, summary,
    ``evict`` event and batch marker in one SQLite transaction)."""

    def spool_messages(
        self,
        messages: Sequence[StoredMessage],
        *,
        events: Sequence[MemoryEvent] = (),
        idempotency: Sequence[IdempotencyRecord] = (),
        incarnation: str | None = None,
    ) -> int:
        batch = semantics.distinct(validation.messages(messages))
        audit = validation.keyed_events(events)
        records = validation.idempotency_records(idempotency)
        if not batch and not audit and not records:
            return 0
        lengths = [len(analyze(m.content)) for m in batch]
        with self._db.write("spool messages") as conn:
            fence(
                conn,
                [*(m.agent_id for m in batch), *(e.agent_id for e in audit), *(r.agent_id for r in records)],
                incarnation,
            )
            added = _insert_messages(conn, batch, lengths)
            _insert_events(conn, audit, self._clock())
            upsert_records(conn, records, self._clock())
            self._fault("spool_messages.before_commit")
        if added:
            self._messages_written()
        return added

    def get_messages(self, agent_id: str, message_ids: Sequence[str]) -> list[StoredMessage]:
        validation.identifier("agent_id", agent_id)
        if isinstance(message_ids, str) or not isinstance(message_ids, Sequence):
            raise ValidationError("message_ids must be a sequence of strings")
        wanted = [validation.identifier("message_id", m) for m in message_ids]
        found: dict[str, StoredMessage] = {}
        for part in chunked(list(dict.fromkeys(wanted))):
            marks = ",".join("?" * len(part))
            for row in self._db.query(
                "read messages",
                f"SELECT {rows.MESSAGE_COLUMNS} FROM messages WHERE agent_id = ? AND message_id IN ({marks})",
                [agent_id, *part],
            ):
                found[row["message_id"]] = rows.message(row)
        return [found[m] for m in wanted if m in found]

    def list_messages(self, agent_id: str, *, after_seq: int = -1, limit: int = 100) -> list[StoredMessage]:
        validation.identifier("agent_id", agent_id)
        after, n = validation.after_seq(after_seq), validation.limit("limit", limit)
        found = self._db.query(
            "list messages",
            f"SELECT {rows.MESSAGE_COLUMNS} FROM messages WHERE agent_id = ? AND seq > ? ORDER BY seq, id LIMIT ?",
            (agent_id, after, n),
        )
        return [rows.message(r) for r in found]

    def count_messages(self, agent_id: str, *, id_prefix: str = "") -> int:
        validation.identifier("agent_id", agent_id)
        # substr() rather than LIKE or GLOB: a prefix holding their wildcards matches as written.
        found = self._db.query(
            "count messages",
            "SELECT COUNT(*) FROM messages WHERE agent_id = ? AND substr(message_id, 1, ?) = ?",
            (agent_id, len(id_prefix), id_prefix),
        )
        return int(found[0][0])

    def commit_eviction(self, commit: EvictionCommit) -> EvictionResult:
        validation.eviction(commit)
        batch = semantics.distinct(list(commit.messages))
        lengths = [len(analyze(m.content)) for m in batch]
        agent = commit.agent_id
        summary = summary_node(agent)
        event_id = semantics.evict_event_id(agent, commit.batch_id)
        with self._db.write("commit an eviction batch") as conn:
            # Before the replay check: a deleted agent's batch is no longer "committed" either.
            fence(conn, (agent,), commit.incarnation)
            done = conn.execute(
                "SELECT summary_rev, messages_committed FROM batches WHERE agent_id = ? AND batch_id = ?",
                (agent, commit.batch_id),
            ).fetchone()
            if done is not None:
                return EvictionResult(agent, commit.batch_id, done["summary_rev"], done["messages_committed"], True)
            current = conn.execute(
                "SELECT rev FROM core_memory WHERE agent_id = ? AND block_id = ?",
                (agent, SUMMARY_BLOCK_ID),
            ).fetchone()
            current_rev = None if current is None else current["rev"]
            if current_rev != commit.expected_summary_rev:
                raise semantics.rev_conflict(
                    f"the summary of agent {agent!r}", commit.expected_summary_rev, current_rev
                )
            now = self._clock()
            added = _insert_messages(conn, batch, lengths)
            conn.executemany(
                "INSERT OR IGNORE INTO edges (kind, src_coll, src_key, dst_coll, dst_key, "
                "agent_id, created_at, attributes) VALUES ('recall_log', ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        summary.collection,
                        summary.key,
                        "messages",
                        message_node(agent, m.message_id).key,
                        agent,
                        now,
                        rows.dumps({"batch_id": commit.batch_id}),
                    )
                    for m in batch
                ],
            )
            self._fault("commit_eviction.after_recall_append")
            rev = self._next_rev(conn)
            conn.execute(
                "INSERT INTO core_memory (agent_id, block_id, role, content, tokens, pinned, rev, "
                "updated_at, metadata, batch_id) VALUES (?, ?, 'system', ?, ?, 0, ?, ?, '{}', ?) "
                "ON CONFLICT (agent_id, block_id) DO UPDATE SET content = excluded.content, "
                "tokens = excluded.tokens, rev = excluded.rev, updated_at = excluded.updated_at, "
                "batch_id = excluded.batch_id",
                (
                    agent,
                    SUMMARY_BLOCK_ID,
                    commit.summary_text,
                    commit.summary_tokens,
                    rev,
                    now,
                    commit.batch_id,
                ),
            )
            payload = semantics.evict_event_payload(commit, batch, rev)
            conn.execute(
                "INSERT OR IGNORE INTO events (event_id, agent_id, kind, payload, created_at, "
                "actor, idempotency_key) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (event_id, agent, EventKind.EVICT, rows.dumps(payload), now, commit.actor, event_id),
            )
            _insert_events(conn, commit.events, now)
            conn.execute(
                "INSERT OR IGNORE INTO summary_versions (agent_id, batch_id, text, tokens, rev, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (agent, commit.batch_id, commit.summary_text, commit.summary_tokens, rev, now),
            )
            conn.execute(
                "INSERT INTO batches (agent_id, batch_id, summary_rev, messages_committed, "
                "event_id, committed_at) VALUES (?, ?, ?, ?, ?, ?)",
                (agent, commit.batch_id, rev, len(batch), event_id, now),
            )
            self._fault("commit_eviction.before_commit")
        if added:
            self._messages_written()
        return EvictionResult(agent, commit.batch_id, rev, len(batch), False)

    def committed_batches(self, agent_id: str) -> list[int]:
        validation.identifier("agent_id", agent_id)
        found = self._db.query(
            "list committed batches",
            "SELECT batch_id FROM batches WHERE agent_id = ? ORDER BY batch_id",
            (agent_id,),
        )
        return [int(r[0]) for r in found]


# --- helpers (run inside an open write transaction) -------------------------------------------
def _insert_messages(conn: sqlite3.Connection, batch: Sequence[StoredMessage], lengths: Sequence[int]) -> int:
    added, terms = 0, 0
    for m, n_terms in zip(batch, lengths, strict=True):
        # A forgotten message is never written back: a spool or a commit that read it before the
        # forget (write-behind) lands after it, in this transaction, and finds its tombstone.
        if conn.execute(
            "SELECT 1 FROM tombstones WHERE agent_id = ? AND kind = 'message' AND item_id = ?",
            (m.agent_id, m.message_id),
        ).fetchone():
            continue
        inserted = conn.execute(
            "INSERT INTO messages (agent_id, message_id, seq, role, content, tokens, created_at, "
            "name, metadata, expires_at, n_terms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (agent_id, message_id) DO NOTHING RETURNING id",
            (
                m.agent_id,
                m.message_id,
                m.seq,
                m.role,
                m.content,
                m.tokens,
                m.created_at,
                m.name,
                rows.dumps(dict(m.metadata)),
                m.expires_at,
                n_terms,
            ),
        ).fetchone()
        if inserted is not None:
            added += 1
            terms += n_terms
    if added:
        meta_add(conn, META_TEXT_DOCS, added)
        meta_add(conn, META_TEXT_TERMS, terms)
    return added


def _insert_events(conn: sqlite3.Connection, events: Sequence[MemoryEvent], now: float) -> None:
    """Audit rows riding with another write; a replay finds them by event id and adds nothing."""
    conn.executemany(
        "INSERT OR IGNORE INTO events (event_id, agent_id, kind, payload, created_at, actor, "
        "idempotency_key) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (
                e.event_id,
                e.agent_id,
                e.kind,
                rows.dumps(dict(e.payload)),
                e.created_at or now,
                e.actor,
                e.idempotency_key,
            )
            for e in events
        ],
    )
