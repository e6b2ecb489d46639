"""Core memory of the ArangoDB store: blocks and the recursive summary (``core_memory`` documents).

Revisions are ArangoDB's ``_rev``; replacements and deletes check it (``check_rev``) inside a
stream transaction. ``put_core`` is idempotent per key through the ``idempotency`` collection,
written in the same transaction; the summary document is only read here (``commit_eviction`` in
:mod:`vcm.store.arango.messages` writes it).
"""

from __future__ import annotations

from vcm.errors import NotFound, RevConflict
from vcm.store import semantics, validation
from vcm.store.arango import documents, keys, names
from vcm.store.arango.aql import common as aql_common
from vcm.store.arango.aql import messages as aql_messages
from vcm.store.arango.base import ArangoBase
from vcm.store.types import CoreBlock, CoreBlockWrite, Summary, core_node


class CoreMemoryOps(ArangoBase):
    """``get_core``, ``list_core``, ``put_core``, ``delete_core`` and ``get_summary``."""

    def get_core(self, agent_id: str, block_id: str) -> CoreBlock:
        validation.identifier("agent_id", agent_id)
        validation.identifier("block_id", block_id)
        doc = self._get(self._ro, names.CORE, documents.block_key(agent_id, block_id), "get_core")
        if doc is None:
            raise NotFound(
                f"core block {block_id!r} of agent {agent_id!r} does not exist",
                agent_id=agent_id,
                block_id=block_id,
            )
        return documents.block_from_doc(doc)

    def list_core(self, agent_id: str) -> list[CoreBlock]:
        validation.identifier("agent_id", agent_id)
        return [documents.block_from_doc(d) for d in self._run(self._ro, aql_messages.list_core(agent_id), "list_core")]

    def put_core(self, block: CoreBlockWrite, expected_rev: str | None, idempotency_key: str) -> CoreBlock:
        validation.core_write(block)
        validation.rev("expected_rev", expected_rev, optional=True)
        validation.identifier("idempotency_key", idempotency_key)
        content = semantics.core_write_fingerprint(block)
        idem_key = keys.idempotency_key(block.agent_id, "core", idempotency_key)
        seen = self._get(self._ro, names.IDEMPOTENCY, idem_key, "put_core")
        if seen is not None:
            return semantics.replayed_core_write(seen.get("fingerprint"), seen["result"], content, idempotency_key)
        key = documents.block_key(block.agent_id, block.block_id)
        try:
            with self._transaction(names.PUT_CORE_WRITE, "put_core") as txn:
                seen = txn.collection(names.IDEMPOTENCY).get(idem_key)
                if seen is not None:
                    return semantics.replayed_core_write(
                        seen.get("fingerprint"), seen["result"], content, idempotency_key
                    )
                current = txn.collection(names.CORE).get(key)
                current_rev = None if current is None else current["_rev"]
                if current_rev != expected_rev:
                    raise semantics.rev_conflict(f"core block {block.block_id!r}", expected_rev, current_rev)
                now = self._clock()
                doc = documents.block_doc(block, now)
                if current is None:
                    meta = txn.collection(names.CORE).insert(doc)
                else:
                    meta = txn.collection(names.CORE).replace({**doc, "_rev": expected_rev}, check_rev=True)
                stored = documents.block_from_doc(doc, rev=meta["_rev"])
                txn.collection(names.IDEMPOTENCY).insert(
                    {
                        "_key": idem_key,
                        "agent_id": block.agent_id,
                        "scope": "core",
                        "key": idempotency_key,
                        "fingerprint": content,
                        "result": semantics.core_block_to_json(stored),
                        "created_at": now,
                    }
                )
                self._fault("put_core.before_commit")
            return stored
        except RevConflict:
            # A concurrent call with the same key may have won; its answer is ours.
            seen = self._get(self._ro, names.IDEMPOTENCY, idem_key, "put_core")
            if seen is not None:
                return semantics.replayed_core_write(seen.get("fingerprint"), seen["result"], content, idempotency_key)
            raise

    def delete_core(self, agent_id: str, block_id: str, expected_rev: str) -> None:
        validation.identifier("agent_id", agent_id)
        validation.block_id(block_id)
        validation.rev("expected_rev", expected_rev, optional=False)
        key = documents.block_key(agent_id, block_id)
        vertex = keys.vertex_id(core_node(agent_id, block_id))
        with self._transaction((names.CORE, *names.EDGE_COLLECTIONS), "delete_core") as txn:
            current = txn.collection(names.CORE).get(key)
            if current is None:
                raise NotFound(
                    f"core block {block_id!r} of agent {agent_id!r} does not exist",
                    agent_id=agent_id,
                    block_id=block_id,
                )
            if current["_rev"] != expected_rev:
                raise semantics.rev_conflict(f"core block {block_id!r}", expected_rev, current["_rev"])
            txn.collection(names.CORE).delete({"_key": key, "_rev": expected_rev}, check_rev=True)
            for edges in names.EDGE_COLLECTIONS:
                self._run(txn, aql_common.remove_edges_of(edges, [vertex]), "delete_core")

    def get_summary(self, agent_id: str) -> Summary | None:
        validation.identifier("agent_id", agent_id)
        doc = self._get(self._ro, names.CORE, documents.summary_key(agent_id), "get_summary")
        return documents.summary_from_doc(doc) if doc is not None else None
