"""The portable agent format (``vcm export`` / ``vcm import``, docs/portable.md): one agent's own
memory as JSON Lines, versioned, read back whole before anything is written.

Pure: no I/O. :func:`header` and the ``*_record`` functions build the lines an export writes;
:func:`parse` reads a whole file's lines into a :class:`Bundle`, refusing the first bad line with a
VALIDATION_ERROR that names its number (``line``), so an import validates everything first and
writes nothing on a bad file. Facts, state keys and fact edges use the snapshot payload's
encoding (:func:`vcm.snapshots.memory_json`), so both formats read facts the same way.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vcm import jsontext, validation
from vcm import snapshots as payloads
from vcm.errors import SnapshotCorrupt, ValidationError
from vcm.store.types import (
    AgentMemory,
    ArchivalChunk,
    CoreBlock,
    SnapshotRecord,
    StoredMessage,
    SummaryVersion,
    Tombstones,
)

FORMAT = "vcm.agent"
VERSION = 1
# Every kind a line may have; a file must hold the header first and the end line last.
KINDS = (
    "header", "agent", "block", "summary", "summary_version", "message", "fact", "state", "edge",
    "chunk", "tombstone", "snapshot", "end",
)  # fmt: skip


@dataclass
class Bundle:
    """A whole file, read and checked: what an import writes."""

    header: dict[str, Any]
    config: dict[str, Any] = field(default_factory=dict)
    id_floor: int = 0
    blocks: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=lambda: {"text": "", "tokens": 0, "batch_id": 0})
    versions: list[dict[str, Any]] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    memory: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {"facts": [], "state": [], "edges": []})
    chunks: list[dict[str, Any]] = field(default_factory=list)
    snapshots: list[dict[str, Any]] = field(default_factory=list)
    tombstones: list[dict[str, Any]] = field(default_factory=list)

    @property
    def export_id(self) -> str:
        return str(self.header["export_id"])

    @property
    def agent_id(self) -> str:
        return str(self.header["agent_id"])

    def counts(self) -> dict[str, int]:
        return {
            "blocks": len(self.blocks), "summary_versions": len(self.versions), "messages": len(self.messages),
            "facts": len(self.memory["facts"]), "state": len(self.memory["state"]),
            "edges": len(self.memory["edges"]), "chunks": len(self.chunks), "snapshots": len(self.snapshots),
            "tombstones": len(self.tombstones),
        }  # fmt: skip


# --- writing -----------------------------------------------------------------------------------------
def line(record: Mapping[str, Any]) -> str:
    # line_safe: a message's U+2028 written raw was a line end to str.splitlines and to httpx's
    # iter_lines, so such an agent's file did not import again.
    return jsontext.line_safe(json.dumps(record, ensure_ascii=False, sort_keys=True, separators=(",", ":"))) + "\n"


def split_lines(text: str) -> list[str]:
    """A file's lines, each with its ``\\n``: JSON Lines ends a line there only (``\\r`` before it
    is JSON whitespace), where ``str.splitlines`` also splits at U+2028 and others that a file
    written before :func:`line` escaped them may hold raw inside a string."""
    parts = text.split("\n")
    return [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def header(
    export_id: str, agent_id: str, *, vcm_version: str, embedding_version: str | None, vectors: bool, now: float
) -> dict[str, Any]:
    return {
        "kind": "header", "format": FORMAT, "version": VERSION, "export_id": export_id,
        "vcm_version": vcm_version, "agent_id": agent_id, "created_at": now, "vectors": vectors,
        "embedding": {"version": embedding_version},
        # Shared memory (user and domain scopes across agents) is not part of an agent's export.
        "scope": "agent",
    }  # fmt: skip


def block_record(b: CoreBlock) -> dict[str, Any]:
    return {
        "kind": "block", "block_id": b.block_id, "role": b.role, "content": b.content, "tokens": b.tokens,
        "pinned": b.pinned, "metadata": dict(b.metadata),
    }  # fmt: skip


def version_record(v: SummaryVersion) -> dict[str, Any]:
    return {"kind": "summary_version", "batch_id": v.batch_id, "text": v.text, "tokens": v.tokens}


def message_record(m: StoredMessage, *, folded: bool, batch_id: int | None) -> dict[str, Any]:
    """``folded``: a committed eviction took it out of the FIFO (under ``batch_id`` when known)."""
    return {
        "kind": "message", "id": m.message_id, "seq": m.seq, "role": m.role, "content": m.content,
        "tokens": m.tokens, "created_at": m.created_at, "name": m.name, "metadata": dict(m.metadata),
        "expires_at": m.expires_at, "folded": folded, "batch_id": batch_id,
    }  # fmt: skip


def memory_records(memory: AgentMemory, *, vectors: bool) -> list[dict[str, Any]]:
    section = payloads.memory_json(memory)
    facts = [{**f, "kind": "fact", **({} if vectors else {"embedding": None})} for f in section["facts"]]
    state = [{**s, "kind": "state"} for s in section["state"]]
    # An edge's own kind (evidence_of, ...) goes under edge_kind: "kind" names the line's.
    edges = [{**e, "kind": "edge", "edge_kind": e["kind"]} for e in section["edges"]]
    return [*facts, *state, *edges]


def chunk_record(c: ArchivalChunk, *, vectors: bool) -> dict[str, Any]:
    return {
        "kind": "chunk", "doc_id": c.doc_id, "chunk_index": c.chunk_index, "text": c.text,
        "metric": c.metric, "embedding_version": c.embedding_version, "model_id": c.model_id,
        "char_start": c.char_start, "char_end": c.char_end, "source": c.source, "metadata": dict(c.metadata),
        "created_at": c.created_at, "valid_until": c.valid_until,
        "embedding": [float(x) for x in c.embedding] if vectors else None,
    }  # fmt: skip


def tombstone_records(marks: Tombstones) -> list[dict[str, Any]]:
    """What forgets removed (ids and times, never content): an imported agent's snapshot restores
    honour them as the source's did."""
    return [
        *({"kind": "tombstone", "target": "message", "id": i, "at": at} for i, at in sorted(marks.messages.items())),
        *({"kind": "tombstone", "target": "document", "id": i, "at": at} for i, at in sorted(marks.documents.items())),
    ]


def snapshot_record(s: SnapshotRecord) -> dict[str, Any]:
    return {
        "kind": "snapshot", "snapshot_id": s.snapshot_id, "snapshot_kind": s.kind, "reason": s.reason,
        "created_at": s.created_at, "expires_at": s.expires_at, "sha256": s.sha256, "size": s.size,
        "payload": base64.b64encode(s.payload).decode("ascii"),
    }  # fmt: skip


def end(records: int) -> dict[str, Any]:
    """The last line: how many lines came before it, so a truncated file is refused."""
    return {"kind": "end", "records": records}


# --- reading -----------------------------------------------------------------------------------------
def _bad(n: int, reason: str) -> ValidationError:
    return ValidationError(f"line {n}: {reason}; nothing was imported", line=n)


def _need(n: int, r: Mapping[str, Any], name: str, kind: type | tuple[type, ...], *, optional: bool = False) -> Any:
    value = r.get(name)
    if value is None and optional:
        return None
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise _bad(n, f"{name} must be {_name(kind)}")
    if not isinstance(value, kind):
        raise _bad(n, f"{name} must be {_name(kind)}" if name in r else f"{name} is missing")
    return value


def _name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join({str: "a string", int: "an integer", float: "a number", dict: "an object",
                        list: "a list", bool: "true or false"}.get(k, k.__name__) for k in kinds)  # fmt: skip


NUMBER = (int, float)


def parse(lines: Iterable[str]) -> Bundle:
    """Read and check a whole file; VALIDATION_ERROR with ``line`` at the first bad line."""
    bundle: Bundle | None = None
    count, ended = 0, False
    ids: set[str] = set()
    for n, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        if ended:
            raise _bad(n, "nothing may follow the end line")
        try:
            r = jsontext.loads(text)
        except json.JSONDecodeError as exc:
            raise _bad(n, f"not JSON ({exc.msg})") from None
        if not isinstance(r, dict):
            raise _bad(n, "each line must be a JSON object")
        kind = r.get("kind")
        if kind not in KINDS:
            raise _bad(n, f"kind must be one of {', '.join(KINDS)}")
        if bundle is None:
            if kind != "header":
                raise _bad(n, "the first line must be the header")
            bundle = Bundle(_header(n, r))
        elif kind == "header":
            raise _bad(n, "only the first line may be a header")
        elif kind == "end":
            if _need(n, r, "records", int) != count:
                raise _bad(n, f"the end line counts {r['records']} records, the file holds {count}")
            ended = True
        else:
            _record(n, r, bundle, ids)
        count += 1
    if bundle is None:
        raise ValidationError("the file is empty; nothing was imported", line=0)
    if not ended:
        raise ValidationError("the file has no end line (truncated?); nothing was imported", line=count + 1)
    if not bundle.config:
        raise ValidationError("the file has no agent line; nothing was imported", line=count)
    return bundle


def _header(n: int, r: Mapping[str, Any]) -> dict[str, Any]:
    if r.get("format") != FORMAT:
        raise _bad(n, f"format must be {FORMAT!r}")
    if r.get("version") != VERSION:
        raise _bad(n, f"version {r.get('version')!r} is not one this vcm reads (it reads {VERSION})")
    for name in ("export_id", "agent_id", "vcm_version"):
        if not _need(n, r, name, str):
            raise _bad(n, f"{name} must not be empty")
    try:  # the export id becomes part of audit row ids: an idempotency key's rules
        validation.agent_id(r["agent_id"]), validation.idempotency_key(r["export_id"])
    except ValidationError as exc:
        raise _bad(n, exc.message) from None
    _need(n, r, "created_at", NUMBER)
    _need(n, r, "vectors", bool)
    embedding = _need(n, r, "embedding", dict)
    _need(n, embedding, "version", str, optional=True)
    return dict(r)


def _record(n: int, r: dict[str, Any], b: Bundle, ids: set[str]) -> None:
    kind = r["kind"]
    if kind == "agent":
        config = _need(n, r, "config", dict)
        _need(n, config, "model", str, optional=True), _need(n, config, "system_prompt", str)
        _need(n, config, "tools", list)
        b.config = dict(config)
        b.id_floor = _need(n, r, "id_floor", int)
    elif kind == "block":
        for name, t in (("block_id", str), ("role", str), ("content", str), ("tokens", int), ("pinned", bool)):
            _need(n, r, name, t)
        _need(n, r, "metadata", dict)
        b.blocks.append(r)
    elif kind in ("summary", "summary_version"):
        _need(n, r, "text", str), _need(n, r, "tokens", int), _need(n, r, "batch_id", int)
        if kind == "summary":
            b.summary = r
        else:
            b.versions.append(r)
    elif kind == "message":
        _message(n, r, ids)
        b.messages.append(r)
    elif kind in ("fact", "state", "edge"):
        section = {"fact": "facts", "state": "state", "edge": "edges"}[kind]
        entry = {k: v for k, v in r.items() if k not in ("kind", "edge_kind")}
        if kind == "edge":
            entry["kind"] = r.get("edge_kind")
        try:  # read as a snapshot's memory section would be: the same fields, the same checks
            payloads.memory_of({"memory": {"facts": [], "state": [], "edges": [], section: [entry]}}, "agent")
        except SnapshotCorrupt:
            raise _bad(n, f"the {kind} cannot be read") from None
        b.memory[section].append(entry)
    elif kind == "chunk":
        _chunk(n, r)
        b.chunks.append(r)
    elif kind == "snapshot":
        _snapshot(n, r)
        b.snapshots.append(r)
    elif kind == "tombstone":
        if r.get("target") not in ("message", "document"):
            raise _bad(n, "target must be message or document")
        _need(n, r, "id", str), _need(n, r, "at", NUMBER)
        b.tombstones.append(r)


def _message(n: int, r: Mapping[str, Any], ids: set[str]) -> None:
    for name, t in (("id", str), ("seq", int), ("role", str), ("content", str), ("tokens", int)):
        _need(n, r, name, t)
    _need(n, r, "created_at", NUMBER), _need(n, r, "metadata", dict), _need(n, r, "folded", bool)
    _need(n, r, "name", str, optional=True), _need(n, r, "expires_at", NUMBER, optional=True)
    _need(n, r, "batch_id", int, optional=True)
    if r["id"] in ids:
        raise _bad(n, f"message {r['id']!r} appears twice")
    ids.add(r["id"])


def _chunk(n: int, r: Mapping[str, Any]) -> None:
    for name, t in (("doc_id", str), ("chunk_index", int), ("text", str), ("metric", str),
                    ("embedding_version", str), ("model_id", str), ("char_start", int), ("char_end", int),
                    ("source", str), ("metadata", dict), ("created_at", NUMBER)):  # fmt: skip
        _need(n, r, name, t)
    _need(n, r, "valid_until", NUMBER, optional=True)
    vector = _need(n, r, "embedding", list, optional=True)
    if vector is not None and not all(isinstance(x, NUMBER) and not isinstance(x, bool) for x in vector):
        raise _bad(n, "embedding must be a list of numbers")


def _snapshot(n: int, r: Mapping[str, Any]) -> None:
    for name, t in (("snapshot_id", str), ("snapshot_kind", str), ("reason", str), ("sha256", str), ("size", int)):
        _need(n, r, name, t)
    _need(n, r, "created_at", NUMBER), _need(n, r, "expires_at", NUMBER, optional=True)
    try:
        payloads.decode(base64.b64decode(_need(n, r, "payload", str), validate=True), r["sha256"])
    except (binascii.Error, ValueError, SnapshotCorrupt) as exc:
        raise _bad(n, f"the snapshot cannot be read ({exc})") from None


def snapshot_payload(r: Mapping[str, Any]) -> bytes:
    return base64.b64decode(str(r["payload"]))


def rekeyed_edges(edges: Iterable[Mapping[str, Any]], old: str, new: str) -> list[dict[str, Any]]:
    """Edges (as the memory section holds them) with the node keys of agent ``old``
    (``old:...``) renamed to ``new``'s, for an import under another id."""

    def node(end: Any) -> Any:
        if isinstance(end, list) and len(end) == 2 and isinstance(end[1], str) and end[1].startswith(old + ":"):
            return [end[0], new + end[1][len(old) :]]
        return end

    return [{**e, "src": node(e.get("src")), "dst": node(e.get("dst"))} for e in edges]
