"""Portable export and import of one agent (``vcm export`` / ``vcm import``, the admin routes
``GET /v1/agents/{id}/export`` and ``POST /v1/import``), in the format of
:mod:`vcm.service.portable_format` (docs/portable.md).

**Export** first writes every message the hot state holds to the store (as a snapshot restore
does, :meth:`~vcm.service.lifecycle.Lifecycle.persist_hot`), then reads the agent from the store,
the source of truth: record, blocks, summary and its versions, messages by seq (each marked folded
or not, with its eviction batch from the ``evict`` audit rows), facts, state keys and fact edges
(:meth:`~vcm.store.port.MemoryStore.agent_memory`, the snapshot's read), archival chunks (of the
documents the ``archival_ingest`` rows name) and snapshots. Only the agent's own memory goes.

**Import** reads and checks the whole file first (nothing is written for a bad one), refuses an
agent id that exists (CONFLICT; ``as_id`` imports under another id), then writes the store: the
record, the messages, each summary version by replaying its eviction commit (so recall holds the
same ``recall_log`` edges and versions), and one :class:`~vcm.store.types.ContextReset` for the
current summary, FIFO, blocks, settings, facts, state and edges, the switch-over a snapshot
restore makes; then archival chunks and snapshots, and the hot state is rebuilt from the store.
Two audit rows named by the file's ``export_id`` make it idempotent per file: a second import of a
file already imported answers the first result (``replayed``) and writes nothing; an import that
died half-way (begun, not done) is removed and done again.

Vectors: with ``vectors`` the facts' and archival chunks' embeddings go in the file and are kept
when the importer's embedding version is the file's (or it has none); otherwise facts are
embedded again and documents queued for ingestion again. Message vectors are never exported
(the store port does not read them back): the importing process re-embeds them when it has the
bulk jobs wired (the CLI, ``vcm serve``); otherwise the answer says so and ``vcm reembed`` does it.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import uuid
from collections.abc import Iterable, Iterator
from importlib import metadata
from typing import Any

from vcm import snapshots as payloads
from vcm import validation
from vcm.durable import agent_config
from vcm.errors import ConfigError, Conflict, NotFound
from vcm.obs import audit
from vcm.service import portable_format as fmt
from vcm.service.bulk import Bulk
from vcm.service.core import Core
from vcm.service.lifecycle import Lifecycle
from vcm.service.search import Search
from vcm.store.audit_names import Actor, EventKind, audit_id
from vcm.store.types import (
    AgentMemory,
    ArchivalChunk,
    ContextReset,
    CoreBlockWrite,
    EvictionCommit,
    SnapshotRecord,
    StoredMessage,
)

log = logging.getLogger(__name__)

PAGE = 1000
# The store answers at most this many summary versions (newest first, no paging): an export keeps
# the newest ones; older versions are history no context is built from.
VERSIONS = 1000


class Portable:
    """export_agent, import_agent."""

    def __init__(self, core: Core, lifecycle: Lifecycle, search: Search, bulk: Bulk) -> None:
        self.core = core
        self.lifecycle = lifecycle  # the hot state's hand-over to the store, and the reload
        self.search = search  # documents without their vectors are ingested again
        self.bulk = bulk  # message vectors are re-embedded where bulk jobs are wired

    # --- export ----------------------------------------------------------------------------------
    def export_agent(self, agent_id: str, *, vectors: bool = False, actor: str = Actor.SYSTEM) -> Iterator[str]:
        """The agent as lines of the portable format (each ending in a newline). The agent is
        checked (NOT_FOUND) and its hot messages stored before the first line is produced."""
        info = self.core.agent(agent_id)
        self.lifecycle.persist_hot(agent_id)
        return self._lines(agent_id, info.model, vectors, actor)

    def _lines(self, agent_id: str, model: str, vectors: bool, actor: str) -> Iterator[str]:
        store, now = self.core.store, self.core.clock()
        export_id = uuid.uuid4().hex
        # The version of the file's vectors: none without them. Asking loads the embedding model
        # (in embedded mode its process), seconds of start-up an export without vectors skips.
        version = self.core.recall_version() if vectors and self.core.recall_version else None
        records = [
            fmt.header(
                export_id, agent_id, vcm_version=_vcm_version(), embedding_version=version, vectors=vectors, now=now
            )
        ]
        record = store.get_agent(agent_id)
        config = dict(record.config) or agent_config(model, "", [])
        records.append(
            {"kind": "agent", "config": config, "id_floor": record.id_floor, "created_at": record.created_at}
        )
        records += [fmt.block_record(b) for b in store.list_core(agent_id)]
        summary = store.get_summary(agent_id)
        records.append(
            {
                "kind": "summary",
                "text": summary.text if summary else "",
                "tokens": summary.tokens if summary else 0,
                "batch_id": summary.batch_id if summary else 0,
            }
        )
        records += [fmt.version_record(v) for v in reversed(store.summary_versions(agent_id, limit=VERSIONS))]
        yield from (fmt.line(r) for r in records)
        count = len(records)
        batches = self._batches(agent_id)
        open_ids = {m.message_id for m in self.core.durable.uncommitted(agent_id)}
        after = -1
        while page := store.list_messages(agent_id, after_seq=after, limit=PAGE):
            for m in page:
                folded = m.message_id not in open_ids
                yield fmt.line(
                    fmt.message_record(m, folded=folded, batch_id=batches.get(m.message_id) if folded else None)
                )
            count += len(page)
            after = page[-1].seq
        for r in fmt.memory_records(store.agent_memory(agent_id, now), vectors=vectors):
            yield fmt.line(r)
            count += 1
        for doc_id in self._documents(agent_id):
            for c in sorted(store.get_archival(agent_id, doc_id), key=lambda c: (c.embedding_version, c.chunk_index)):
                yield fmt.line(fmt.chunk_record(c, vectors=vectors))
                count += 1
        for r in fmt.tombstone_records(store.tombstones(agent_id)):
            yield fmt.line(r)
            count += 1
        for s in store.list_snapshots(agent_id):
            try:
                full = store.get_snapshot(agent_id, s.snapshot_id)
            except NotFound:
                continue  # expired or deleted meanwhile
            yield fmt.line(fmt.snapshot_record(full))
            count += 1
        yield fmt.line(fmt.end(count))
        self.core.audit(agent_id, EventKind.AGENT_EXPORTED, {"export_id": export_id, "records": count}, actor)

    def _events(self, agent_id: str, kind: EventKind) -> Iterator[dict[str, Any]]:
        cursor: str | None = None
        while True:
            page = self.core.store.query_events(agent_id, [kind], limit=500, cursor=cursor)
            yield from (dict(e.payload) for e in page.items)
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def _batches(self, agent_id: str) -> dict[str, int]:
        """Message id -> the eviction batch that folded it, from the ``evict`` audit rows."""
        out: dict[str, int] = {}
        for p in self._events(agent_id, EventKind.EVICT):
            for m in p.get("message_ids") or ():
                out.setdefault(str(m), int(p.get("batch_id", 0)))
        return out

    def _documents(self, agent_id: str) -> list[str]:
        """The agent's archival documents: those its ``archival_ingest`` rows name (a forgotten
        one has no chunks left and adds nothing)."""
        seen = {str(p["doc_id"]) for p in self._events(agent_id, EventKind.ARCHIVAL_INGEST) if p.get("doc_id")}
        return sorted(seen)

    # --- import ----------------------------------------------------------------------------------
    def import_agent(
        self, lines: Iterable[str], *, as_id: str | None = None, actor: str = Actor.SYSTEM
    ) -> dict[str, Any]:
        """Create the agent a file holds (under ``as_id`` when given). Validates the whole file
        first (VALIDATION_ERROR naming the line; nothing written); CONFLICT when the agent exists
        and is not this file's earlier import."""
        bundle = fmt.parse(lines)
        agent_id = as_id or bundle.agent_id
        validation.agent_id(agent_id)
        validation.idempotency_key(bundle.export_id)
        if bundle.config.get("model"):  # a model this deployment has no window for: refused before any write
            self.core.settings.window_for(str(bundle.config["model"]))
        begun, done = self._marks(agent_id, bundle.export_id)
        if done is not None:
            return {**done, "replayed": True}
        if self._exists(agent_id):
            if begun is None:
                raise Conflict(
                    f"agent {agent_id!r} exists; import under another id (--as) or delete it first", agent_id=agent_id
                )
            self.lifecycle.delete_agent(agent_id, actor=actor)  # this file's import died half-way: again
        result = _Writer(self, bundle, agent_id, actor).write()
        return {**result, "replayed": False}

    def _exists(self, agent_id: str) -> bool:
        try:
            self.core.store.get_agent(agent_id)
            return True
        except NotFound:
            return self.core.hot.exists(agent_id)

    def _marks(self, agent_id: str, export_id: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        begun = done = None
        for p in self._events(agent_id, EventKind.AGENT_IMPORTED):
            if p.get("export_id") == export_id:
                if p.get("done"):
                    done = dict(p.get("result") or {})
                else:
                    begun = p
        return begun, done

    def mark(self, agent_id: str, export_id: str, actor: str, result: dict[str, Any] | None) -> None:
        """An import's audit row (``begun`` first, ``done`` with its result last): the store's own
        write, which raises, since idempotency per file rests on it."""
        tag = "done" if result is not None else "begun"
        details = {"export_id": export_id, "done": result is not None, **({"result": result} if result else {})}
        self.core.store.append_event(
            audit.event(
                agent_id,
                EventKind.AGENT_IMPORTED,
                None,
                actor=actor,
                event_id=audit_id(agent_id, "import", export_id, tag),
                created_at=self.core.clock(),
                details=details,
            )
        )


class _Writer:
    """One import's writes, in the order that leaves the store whole at the end."""

    def __init__(self, part: Portable, bundle: fmt.Bundle, agent_id: str, actor: str) -> None:
        self.part, self.core, self.b = part, part.core, bundle
        self.agent_id, self.actor = agent_id, actor

    @functools.cached_property
    def same_model(self) -> bool:
        """Vectors are kept when this process embeds with the file's model (or embeds nothing).
        Asked only when a record carries a vector: the answer loads the embedding model."""
        local = self.core.recall_version() if self.core.recall_version else None
        return local is None or local == self.b.header["embedding"].get("version")

    def write(self) -> dict[str, Any]:
        b, store, agent = self.b, self.core.store, self.agent_id
        store.put_agent(agent, b.config, incarnation=uuid.uuid4().hex)
        self.part.mark(agent, b.export_id, self.actor, None)
        top = max(
            [
                b.id_floor,
                *(m["seq"] + 1 for m in b.messages),
                *(v["batch_id"] + 1 for v in b.versions),
                b.summary["batch_id"] + 1,
            ]
        )
        store.advance_id_floor(agent, top)
        messages = [self._message(m) for m in b.messages]
        for i in range(0, len(messages), PAGE):
            store.spool_messages(messages[i : i + PAGE])
        self._versions(messages)
        store.reset_context(
            ContextReset(
                agent,
                int(b.summary["batch_id"]),
                str(b.summary["text"]),
                int(b.summary["tokens"]),
                fifo_ids=[m["id"] for m in b.messages if not m["folded"]],
                blocks=[
                    CoreBlockWrite(
                        agent, x["block_id"], x["role"], x["content"], x["tokens"], x["pinned"], x["metadata"]
                    )
                    for x in b.blocks
                ],
                config=b.config,
                memory=self._memory(),
            )
        )
        for t in b.tombstones:  # before the snapshots: no restore may bring a forgotten item back
            forget = store.forget_message if t["target"] == "message" else store.forget_document
            forget(agent, str(t["id"]))
        for s in b.snapshots:
            store.put_snapshot(self._snapshot(s))
        self.part.lifecycle.reload(agent)  # the hot state, from the store
        jobs = self._archival()
        result = {
            "agent_id": agent, "source_agent_id": b.agent_id, "export_id": b.export_id, "counts": b.counts(),
            "ingest_jobs": jobs, "message_vectors": self._reembed(),
        }  # fmt: skip
        self.part.mark(agent, b.export_id, self.actor, result)
        return result

    def _message(self, m: dict[str, Any]) -> StoredMessage:
        return StoredMessage(
            self.agent_id,
            m["id"],
            m["seq"],
            m["role"],
            m["content"],
            m["tokens"],
            float(m["created_at"]),
            m.get("name"),
            m["metadata"],
            m.get("expires_at"),
        )

    def _versions(self, messages: list[StoredMessage]) -> None:
        """Each summary version as the eviction commit that made it, with its batch's messages:
        recall gets the same ``recall_log`` edges and the store the same versions. A version no
        eviction made (a reset's, a note's: no batch messages) is written as a context reset that
        folds nothing; the final reset folds the messages whose batch the file does not know."""
        by_batch: dict[int, list[StoredMessage]] = {}
        for m, r in zip(messages, self.b.messages, strict=True):
            if r["folded"] and r.get("batch_id") is not None:
                by_batch.setdefault(int(r["batch_id"]), []).append(m)
        folded: set[str] = set()
        for v in sorted(self.b.versions, key=lambda v: int(v["batch_id"])):
            batch = by_batch.get(int(v["batch_id"]))
            if not batch:
                kept = [m.message_id for m in messages if m.message_id not in folded]
                reset = ContextReset(self.agent_id, int(v["batch_id"]), str(v["text"]), int(v["tokens"]), kept)
                self.core.store.reset_context(reset)
                continue
            folded.update(m.message_id for m in batch)
            current = self.core.store.get_summary(self.agent_id)
            self.core.store.commit_eviction(
                EvictionCommit(
                    self.agent_id,
                    int(v["batch_id"]),
                    batch,
                    str(v["text"]),
                    int(v["tokens"]),
                    None if current is None else current.rev,
                    event={"imported": True},
                    actor=self.actor,
                )
            )

    def _memory(self) -> AgentMemory:
        section = self.b.memory
        if self.agent_id != self.b.agent_id:
            old, new = self.b.agent_id, self.agent_id
            section = {**section, "edges": fmt.rekeyed_edges(section["edges"], old, new)}
        memory = payloads.memory_of({"memory": section}, self.agent_id)
        assert memory is not None  # parse read every line of it
        facts = []
        for f in memory.facts:
            if f.embedding is None or not self.same_model:
                f = dataclasses.replace(f, embedding=self.core.embedding(f.value))
            facts.append(f)
        return dataclasses.replace(memory, facts=tuple(facts))

    def _snapshot(self, s: dict[str, Any]) -> SnapshotRecord:
        payload, sha, size = fmt.snapshot_payload(s), str(s["sha256"]), int(s["size"])
        if self.agent_id != self.b.agent_id:  # a restore checks that the payload is its agent's
            state = payloads.decode(payload, sha)
            state.pop("format", None)
            memory = state.get("memory")
            if isinstance(memory, dict) and isinstance(memory.get("edges"), list):
                old, new = self.b.agent_id, self.agent_id
                memory["edges"] = fmt.rekeyed_edges(memory["edges"], old, new)
            payload, sha, size = payloads.encode({**state, "agent_id": self.agent_id})
        return SnapshotRecord(
            self.agent_id,
            str(s["snapshot_id"]),
            str(s["snapshot_kind"]),
            str(s["reason"]),
            payload,
            sha,
            size,
            float(s["created_at"]),
            s.get("expires_at"),
        )

    def _archival(self) -> list[str]:
        """Chunks with vectors of this model are stored as they were; documents without them are
        queued for ingestion again from their chunks' text. Returns the ingestion jobs' ids."""
        keep = [c for c in self.b.chunks if c.get("embedding") is not None and self.same_model]
        again: dict[str, list[dict[str, Any]]] = {}
        for c in self.b.chunks:
            if c.get("embedding") is None or not self.same_model:
                again.setdefault(str(c["doc_id"]), []).append(c)
        if keep:
            self.core.store.ingest_archival(
                [
                    ArchivalChunk(
                        self.agent_id,
                        c["doc_id"],
                        c["chunk_index"],
                        c["text"],
                        c["embedding"],
                        c["metric"],
                        c["embedding_version"],
                        c["model_id"],
                        c["char_start"],
                        c["char_end"],
                        c["source"],
                        c["metadata"],
                        float(c["created_at"]),
                        c.get("valid_until"),
                    )
                    for c in keep
                ]
            )
            # The audit row an ingestion leaves: a later export finds the agent's documents by them.
            for doc_id in sorted({str(c["doc_id"]) for c in keep}):
                count = sum(1 for c in keep if c["doc_id"] == doc_id)
                self.core.event(
                    self.agent_id,
                    EventKind.ARCHIVAL_INGEST,
                    {"doc_id": doc_id, "chunks": count, "imported": True},
                    self.actor,
                    event_id=audit_id(self.agent_id, "ingest", doc_id, "import", self.b.export_id),
                )
        jobs: list[str] = []
        for doc_id, chunks in again.items():
            first = min(chunks, key=lambda c: int(c["chunk_index"]))
            meta = {k: v for k, v in dict(first["metadata"]).items() if k != "vcm"}
            job = self.part.search.ingest_archival(
                self.agent_id,
                _document_text(chunks),
                doc_id=doc_id,
                source=str(first["source"]),
                metadata=meta,
                actor=self.actor,
            )
            jobs.append(job.job_id)
        return jobs

    def _reembed(self) -> str:
        if not self.b.messages:
            return "none"
        try:
            self.part.bulk.reembed(self.agent_id)
            return "embedded"
        except ConfigError:  # no bulk jobs wired in this process
            return "not embedded: run vcm reembed"
        except Exception:  # vectors are an index: the agent is imported whatever the model does
            log.warning("could not embed the messages imported for %s", self.agent_id, exc_info=True)
            return "not embedded: run vcm reembed"


def _vcm_version() -> str:
    # Read here rather than from ``vcm.__version__``: the package root sits above the service.
    try:
        return metadata.version("vcm")
    except metadata.PackageNotFoundError:
        return "0.0.0"


def _document_text(chunks: list[dict[str, Any]]) -> str:
    """A document's text from its chunks (of one embedding version), by their character spans."""
    version = chunks[0]["embedding_version"]
    mine = sorted((c for c in chunks if c["embedding_version"] == version), key=lambda c: int(c["char_start"]))
    out: list[str] = []
    at = 0
    for c in mine:
        start, text = int(c["char_start"]), str(c["text"])
        if start + len(text) <= at:
            continue
        out.append(text[max(0, at - start) :])
        at = start + len(text)
    return "".join(out)
