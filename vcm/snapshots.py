"""Snapshot payloads (seed 001 §3.3): an agent's state as compressed JSON with a SHA-256.

Pure: no I/O. The checksum covers the compressed bytes as stored, so a flipped bit anywhere is
refused before anything is decompressed or restored.

A payload holds ``agent_id``, ``config``, ``blocks``, ``summary``, ``fifo`` and, since snapshots
hold the whole agent, ``memory``: the facts (every field, the embedding as base64 of
little-endian float32), state keys and fact edges (:func:`memory_json`). A payload without
``memory`` (taken before it existed) restores without touching facts and state.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import zlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from vcm import jsontext
from vcm.errors import SnapshotCorrupt
from vcm.store.types import AgentMemory, Edge, Fact, NodeRef, StateEntry

FORMAT = 1
KINDS = ("manual", "periodic", "pre_upgrade", "pre_restore")


def encode(state: Mapping[str, Any]) -> tuple[bytes, str, int]:
    """(payload, its SHA-256 hex, bytes of the uncompressed JSON)."""
    raw = json.dumps({"format": FORMAT, **state}, sort_keys=True, separators=(",", ":")).encode("utf-8")
    payload = zlib.compress(raw, 6)
    return payload, hashlib.sha256(payload).hexdigest(), len(raw)


def decode(payload: bytes, sha256: str) -> dict[str, Any]:
    """The state a payload holds; SnapshotCorrupt when the checksum or the contents are off."""
    if hashlib.sha256(payload).hexdigest() != sha256:
        raise SnapshotCorrupt("the snapshot does not match its SHA-256 checksum; nothing was restored")
    try:
        state = jsontext.loads(zlib.decompress(payload))
    except (zlib.error, ValueError) as exc:
        raise SnapshotCorrupt(f"the snapshot cannot be read ({exc}); nothing was restored") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise SnapshotCorrupt("the snapshot has an unknown format; nothing was restored")
    return state


# --- the memory section ----------------------------------------------------------------------------
def memory_json(memory: AgentMemory) -> dict[str, Any]:
    """The ``memory`` section of a payload."""
    return {
        "facts": [_fact_json(f) for f in memory.facts],
        "state": [
            {"key": e.key, "value": e.value, "rev": e.rev, "updated_at": e.updated_at, "expires_at": e.expires_at}
            for e in memory.state
        ],
        "edges": [
            {
                "kind": e.kind,
                "src": [e.src.collection, e.src.key],
                "dst": [e.dst.collection, e.dst.key],
                "created_at": e.created_at,
                "attributes": dict(e.attributes),
            }
            for e in memory.edges
        ],
    }


def memory_of(state: Mapping[str, Any], agent_id: str) -> AgentMemory | None:
    """The ``memory`` section of a decoded payload; None when it has none (an older snapshot);
    SnapshotCorrupt when it cannot be read."""
    section = state.get("memory")
    if section is None:
        return None
    try:
        return AgentMemory(
            facts=tuple(_fact_of(agent_id, f) for f in section["facts"]),
            state=tuple(_state_of(agent_id, e) for e in section["state"]),
            edges=tuple(_edge_of(agent_id, e) for e in section["edges"]),
        )
    except (KeyError, TypeError, ValueError, struct.error) as exc:
        reason = f"the snapshot's facts and state cannot be read ({exc!r}); nothing was restored"
        raise SnapshotCorrupt(reason) from None


def redacted(memory: AgentMemory, messages: Collection[str], documents: Collection[str]) -> AgentMemory:
    """The memory without what forgotten messages and documents (their tombstones' ids) gave it,
    by the rule a forget applies to live facts: a fact's evidence pointing at one loses that
    pointer; a fact left with no evidence (it came from them alone), or a conflict's open question
    quoting one, goes; the others' ``conflict_with`` lose the ids of facts gone. Edges to facts
    gone are left to the caller, which keeps only edges whose ends exist."""

    def forgotten(e: Any) -> bool:
        kind, ident = (e.get("kind"), str(e.get("id"))) if isinstance(e, Mapping) else (None, "")
        return (kind == "message" and ident in messages) or (kind == "document" and ident in documents)

    kept: list[Fact] = []
    gone: set[str] = set()
    for f in memory.facts:
        rest = tuple(e for e in f.evidence if not forgotten(e))
        if len(rest) == len(f.evidence):
            kept.append(f)
        elif rest and not (f.type == "question" and (f.key or "").startswith("conflict:")):
            kept.append(replace(f, evidence=rest))
        else:
            gone.add(f.fact_id)
    if gone:
        kept = [replace(f, conflict_with=tuple(c for c in f.conflict_with if c not in gone)) for f in kept]
    return replace(memory, facts=tuple(kept))


def _fact_json(f: Fact) -> dict[str, Any]:
    return {
        "fact_id": f.fact_id, "scope": f.scope, "type": f.type, "value": f.value, "key": f.key,
        "category": f.category, "tags": list(f.tags), "importance": f.importance, "confidence": f.confidence,
        "evidence": [dict(e) for e in f.evidence], "status": f.status, "conflict_with": list(f.conflict_with),
        "created_at": f.created_at, "updated_at": f.updated_at, "last_used": f.last_used,
        "access_count": f.access_count, "expires_at": f.expires_at, "version": f.version,
        "lifetime_s": f.lifetime_s, "embedding": None if not f.embedding else _vector_text(f.embedding),
        **({"duplicate_of": f.duplicate_of} if f.duplicate_of else {}),
    }  # fmt: skip


def _fact_of(agent_id: str, d: Mapping[str, Any]) -> Fact:
    fields = {k: v for k, v in d.items() if k != "embedding"}
    for name in ("tags", "evidence", "conflict_with"):
        fields[name] = tuple(fields.get(name) or ())
    embedding = d.get("embedding")
    return Fact(agent_id=agent_id, **fields, embedding=None if embedding is None else _vector_of(str(embedding)))


def _state_of(agent_id: str, e: Mapping[str, Any]) -> StateEntry:
    expires_at = None if e.get("expires_at") is None else float(e["expires_at"])
    return StateEntry(agent_id, str(e["key"]), e["value"], str(e.get("rev", "")), float(e["updated_at"]), expires_at)


def _edge_of(agent_id: str, e: Mapping[str, Any]) -> Edge:
    src, dst = NodeRef(*e["src"]), NodeRef(*e["dst"])
    return Edge(e["kind"], src, dst, agent_id, float(e["created_at"]), dict(e.get("attributes") or {}))


def _vector_text(vector: Sequence[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


def _vector_of(text: str) -> list[float]:
    raw = base64.b64decode(text, validate=True)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))
