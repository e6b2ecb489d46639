"""Agents of the ArangoDB store: one ``core_memory`` document per agent (seed 000's data model:
the agent vertex holding its token budget), its id floor, FIFO membership and summary history.

The FIFO of a rebuilt agent is every message with no ``recall_log`` edge from the summary;
summary versions ride on the ``eviction_batches`` markers that ``commit_eviction`` writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vcm.errors import NotFound, ValidationError
from vcm.store import validation
from vcm.store.arango import documents, keys, names
from vcm.store.arango.aql import agents as aql_agents
from vcm.store.arango.aql import common as aql_common
from vcm.store.arango.base import ArangoBase, fence_key
from vcm.store.types import (
    FACT_EDGE_KINDS,
    AgentRecord,
    ContextReset,
    Edge,
    StoredMessage,
    SummaryVersion,
    message_node,
    summary_node,
)

AGENT_KIND = "agent"


def agent_key(agent_id: str) -> str:
    # Two parts joined by ':' — block keys are one escaped part, so the two never collide.
    return fence_key(agent_id)


def record(d: Mapping[str, Any]) -> AgentRecord:
    return AgentRecord(
        agent_id=d["agent_id"],
        config=d.get("config") or {},
        token_sha256=d.get("token_sha256"),
        id_floor=int(d.get("id_floor", 0)),
        created_at=float(d.get("created_at", 0.0)),
        updated_at=float(d.get("updated_at", 0.0)),
        incarnation=str(d.get("incarnation") or ""),
        user_id=d.get("user_id"),
        domain=d.get("domain"),
    )


def _unknown(agent_id: str) -> NotFound:
    return NotFound(f"unknown agent {agent_id!r}; create it first", agent_id=agent_id)


class AgentOps(ArangoBase):
    """``put_agent``, ``get_agent``, ``list_agents``, ``set_agent_token``, ``advance_id_floor``,
    ``uncommitted_messages``, ``summary_versions`` and ``reset_context``."""

    def put_agent(self, agent_id: str, config: Mapping[str, Any], *, incarnation: str = "") -> AgentRecord:
        validation.identifier("agent_id", agent_id)
        if not isinstance(config, Mapping):
            raise ValidationError("config must be a mapping", field="config")
        if not isinstance(incarnation, str):
            raise ValidationError("incarnation must be a string", field="incarnation")
        key = agent_key(agent_id)
        with self._transaction((names.CORE,), "put_agent") as txn:
            core = txn.collection(names.CORE)
            now = self._clock()
            current = core.get(key)
            if current is None:
                doc = {
                    "_key": key,
                    "kind": AGENT_KIND,
                    "agent_id": agent_id,
                    "config": dict(config),
                    "token_sha256": None,
                    "id_floor": 0,
                    "created_at": now,
                    "updated_at": now,
                    # Only a new record takes it: an existing one keeps its own.
                    "incarnation": incarnation,
                }
                core.insert(doc)
                return record(doc)
            if current.get("config") != dict(config):
                current = {**current, "config": dict(config), "updated_at": now}
                core.update({"_key": key, "config": dict(config), "updated_at": now}, merge=False)
            return record(current)

    def get_agent(self, agent_id: str) -> AgentRecord:
        validation.identifier("agent_id", agent_id)
        doc = self._get(self._ro, names.CORE, agent_key(agent_id), "get_agent")
        if doc is None:
            raise _unknown(agent_id)
        return record(doc)

    def list_agents(self) -> list[AgentRecord]:
        return [record(d) for d in self._run(self._ro, aql_agents.list_agents(), "list_agents")]

    def set_agent_token(self, agent_id: str, token_sha256: str | None) -> None:
        validation.identifier("agent_id", agent_id)
        if token_sha256 is not None:
            validation.identifier("token_sha256", token_sha256)
        key = agent_key(agent_id)
        with self._transaction((names.CORE,), "set_agent_token") as txn:
            core = txn.collection(names.CORE)
            if core.get(key) is None:
                raise _unknown(agent_id)
            core.update({"_key": key, "token_sha256": token_sha256, "updated_at": self._clock()})

    def advance_id_floor(self, agent_id: str, floor: int) -> int:
        validation.identifier("agent_id", agent_id)
        if isinstance(floor, bool) or not isinstance(floor, int) or floor < 0:
            raise ValidationError("floor must be a non-negative integer", field="floor")
        found = self._run(self._rw, aql_agents.advance_id_floor(agent_key(agent_id), floor), "advance_id_floor")
        if not found:
            raise _unknown(agent_id)
        return int(found[0])

    def uncommitted_messages(self, agent_id: str, *, after_seq: int = -1, limit: int = 1000) -> list[StoredMessage]:
        validation.identifier("agent_id", agent_id)
        after, n = validation.after_seq(after_seq), validation.limit("limit", limit)
        query = aql_agents.uncommitted_messages(agent_id, keys.vertex_id(summary_node(agent_id)), after, n)
        return [documents.message_from_doc(d) for d in self._run(self._ro, query, "uncommitted_messages")]

    def summary_versions(self, agent_id: str, *, limit: int = 20) -> list[SummaryVersion]:
        validation.identifier("agent_id", agent_id)
        n = validation.limit("limit", limit)
        return [
            SummaryVersion(
                agent_id=d["agent_id"],
                batch_id=int(d["batch_id"]),
                text=d["summary_text"],
                tokens=int(d.get("summary_tokens", 0)),
                rev=d["summary_rev"],
                created_at=float(d["committed_at"]),
            )
            for d in self._run(self._ro, aql_agents.summary_versions(agent_id, n), "summary_versions")
        ]

    def reset_context(self, change: ContextReset) -> None:
        agent = change.agent_id
        validation.identifier("agent_id", agent)
        keep = {keys.vertex_id(message_node(agent, validation.identifier("message_id", m))) for m in change.fifo_ids}
        blocks = None if change.blocks is None else [validation.core_write(b) for b in change.blocks]
        if change.config is not None:
            validation.json_mapping("config", change.config)
        memory = None if change.memory is None else validation.agent_memory(agent, change.memory)
        summary = summary_node(agent)
        summary_vertex = keys.vertex_id(summary)
        write: tuple[str, ...] = (names.CORE, names.RECALL_LOG, names.BATCHES)
        if memory is not None:
            write = (*write, names.FACTS, names.STATE, *(k for k in FACT_EDGE_KINDS if k not in write))
        with self._transaction(write, "reset_context") as txn:
            now = self._clock()
            folded = set(self._run(txn, aql_agents.folded_message_vertices(summary_vertex), "reset_context"))
            stored = {
                keys.vertex_id(message_node(agent, str(m))): str(m)
                for m in self._run(txn, aql_agents.message_ids_of(agent), "reset_context")
            }
            leaving = [v for v in stored if v not in keep and v not in folded]
            returning = [v for v in stored if v in keep and v in folded]
            if leaving:
                edges = [
                    documents.edge_doc(
                        Edge(
                            "recall_log",
                            summary,
                            message_node(agent, stored[v]),
                            agent,
                            now,
                            {"batch_id": change.batch_id},
                        ),
                        now,
                    )
                    for v in leaving
                ]
                self._run(txn, aql_common.insert_ignore(names.RECALL_LOG, edges), "reset_context")
            if returning:
                self._run(txn, aql_agents.unfold_messages(summary_vertex, returning), "reset_context")
            core = txn.collection(names.CORE)
            doc = documents.summary_doc(agent, change.summary_text, change.summary_tokens, change.batch_id, now)
            meta = core.insert(doc, overwrite_mode="replace")
            txn.collection(names.BATCHES).insert(
                {
                    "_key": keys.batch_key(agent, change.batch_id),
                    "agent_id": agent,
                    "batch_id": change.batch_id,
                    "summary_rev": meta["_rev"],
                    "summary_text": change.summary_text,
                    "summary_tokens": change.summary_tokens,
                    "messages_committed": len(leaving),
                    "event_id": f"{agent}:reset:{change.batch_id}",
                    "committed_at": now,
                },
                overwrite_mode="replace",
            )
            if blocks is not None:
                for old in self._run(txn, aql_agents.blocks_of(agent), "reset_context"):
                    core.delete(str(old))
                for b in blocks:
                    core.insert(documents.block_doc(b, now), overwrite_mode="replace")
            if change.config is not None:
                current = core.get(agent_key(agent))
                if current is not None and current.get("config") != dict(change.config):
                    update = {"_key": agent_key(agent), "config": dict(change.config), "updated_at": now}
                    core.update(update, merge=False)
            if memory is not None:
                # Imported here: the facts module imports (through lifecycle) this one.
                from vcm.store.arango.facts import replace_memory

                replace_memory(lambda q: self._run(txn, q, "reset_context"), agent, memory, now)
            self._fault("reset_context.before_commit")
