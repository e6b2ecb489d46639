"""Document keys derived from identities (pure).

Every write of the adapter is idempotent because the ``_key`` of what it writes is a function
of the write's identity (agent + message id, agent + batch id, event id, ...): a replay inserts
the same ``_key`` with ``overwriteMode: "ignore"`` and changes nothing.

ArangoDB allows ``_key`` values of at most 254 bytes from ``[A-Za-z0-9]`` and
``_ - : . @ ( ) + , = ; $ ! * ' %``. python-arango puts keys into URL paths unquoted, so this
module uses the subset ``[A-Za-z0-9-]`` verbatim, escapes every other byte as ``_xx`` (so ``.``
and ``%`` never reach a URL), joins parts with ``:`` and falls back to ``h.<sha256>`` above
:data:`MAX_READABLE` characters. ``.`` never occurs in a readable key, so the two forms cannot
collide.

Graph vertices are addressed by :class:`~vcm.store.types.NodeRef`; the vertex ``_key`` of a ref is
``doc_key(ref.key)``, and every stored node document is keyed by the key of its own ref
(:func:`vcm.store.types.message_node`, :func:`vcm.store.types.core_node`, ...), so edges and
documents line up.
"""

from __future__ import annotations

import hashlib

from vcm.store.types import EdgeKind, NodeRef

MAX_READABLE = 200
_VERBATIM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")


def doc_key(*parts: str) -> str:
    """A valid, deterministic ``_key`` for the given identity parts."""
    readable = ":".join(_escape(p) for p in parts)
    if 0 < len(readable) <= MAX_READABLE:
        return readable
    return "h." + _digest(*parts)


def _escape(part: str) -> str:
    out: list[str] = []
    for ch in part:
        if ch in _VERBATIM:
            out.append(ch)
        else:
            out.extend(f"_{b:02x}" for b in ch.encode("utf-8"))
    return "".join(out)


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        raw = p.encode("utf-8")
        h.update(len(raw).to_bytes(8, "big"))  # length-prefixed: ("ab","c") != ("a","bc")
        h.update(raw)
    return h.hexdigest()


# --- node refs ------------------------------------------------------------------------------------
# The port's graph addresses of stored documents (vcm.store.types: core_node, message_node, ...); a
# document's ``_key`` is the vertex key of its own ref, so edges and documents line up.
def vertex_key(ref: NodeRef) -> str:
    return doc_key(ref.key)


def vertex_id(ref: NodeRef) -> str:
    return f"{ref.collection}/{vertex_key(ref)}"


def edge_key(kind: EdgeKind, src: NodeRef, dst: NodeRef) -> str:
    """Idempotent by (kind, src, dst), like the port asks; hashed so any ref length fits."""
    return "h." + _digest(kind, src.collection, src.key, dst.collection, dst.key)


# --- other identities -------------------------------------------------------------------------
def batch_key(agent_id: str, batch_id: int) -> str:
    return doc_key(agent_id, str(batch_id))


def idempotency_key(agent_id: str, scope: str, key: str) -> str:
    return doc_key(agent_id, scope, key)
