"""The client's operations on an agent's memory: messages and context, working blocks, the
change feed, recall and archival, tools, events, the report and health."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from vcm.client.replies import R, Sender, clean, idem
from vcm.wire import Call, seg


class MemoryOperations(Sender[R]):
    # --- messages and context -------------------------------------------------------------------
    def append(
        self,
        agent_id: str,
        role: str,
        content: str,
        *,
        name: str | None = None,
        pinned: bool = False,
        metadata: Mapping[str, Any] | None = None,
        tool_call_id: str | None = None,
        tool_calls: Sequence[Mapping[str, Any]] | None = None,
        idempotency_key: str | None = None,
        created_at: float | datetime | None = None,
    ) -> R:
        """Append a message; ``created_at``: when it was said (seconds since the epoch, or a
        datetime, UTC when naive), for history imported with its own times."""
        when: float | str | None = (
            created_at
            if not isinstance(created_at, datetime)
            else (created_at if created_at.tzinfo else created_at.replace(tzinfo=UTC)).isoformat()
        )
        body = clean(
            {
                "role": role,
                "content": content,
                "name": name,
                "pinned": pinned,
                "metadata": dict(metadata) if metadata is not None else None,
                "tool_call_id": tool_call_id,
                "tool_calls": [dict(t) for t in tool_calls] if tool_calls is not None else None,
                "created_at": when,
            }
        )
        return self._send(
            Call("POST", f"/v1/agents/{seg(agent_id)}/messages", json=body, headers=idem(idempotency_key))
        )

    def append_many(
        self,
        agent_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        idempotency_key: str | None = None,
        first_index: int = 0,
    ) -> R:
        """Append a list of messages in order (``POST .../messages/batch``): each a mapping of
        ``append``'s fields, ``created_at`` a number or an ISO 8601 string (a datetime is sent as
        one). Bad input appends nothing; with ``idempotency_key`` a retry replays what went in.
        ``first_index``: the list's place in a longer conversation sent in lists (see the route)."""
        listed = [
            {k: v.isoformat() if isinstance(v, datetime) else v for k, v in m.items() if v is not None}
            for m in messages
        ]
        body = clean({"messages": listed, "idempotency_key": idempotency_key, "first_index": first_index or None})
        return self._send(Call("POST", f"/v1/agents/{seg(agent_id)}/messages/batch", json=body))

    def context(self, agent_id: str, *, built: bool = False, query: str | None = None) -> R:
        """The main context; ``built``: the prompt the model sees, with the builder's layers."""
        params = clean({"built": "true" if built else None, "query": query})
        return self._send(Call("GET", f"/v1/agents/{seg(agent_id)}/context", params=params or None))

    def chat(self, agent_id: str, message: str, *, name: str | None = None, idempotency_key: str | None = None) -> R:
        """One turn of the agent over the server's configured model (tools and heartbeats run).
        With ``idempotency_key`` a retry answers the first turn's result (``replayed``)."""
        return self._send(
            Call(
                "POST",
                f"/v1/agents/{seg(agent_id)}/chat",
                json=clean({"message": message, "name": name}),
                headers=idem(idempotency_key),
            )
        )

    def stats(self, agent_id: str) -> R:
        return self._send(Call("GET", f"/v1/agents/{seg(agent_id)}/stats"))

    def evict(self, agent_id: str, count: int, *, idempotency_key: str | None = None) -> R:
        return self._send(
            Call(
                "POST",
                f"/v1/agents/{seg(agent_id)}/evictions",
                json={"count": count},
                headers=idem(idempotency_key),
            )
        )

    # --- working blocks ---------------------------------------------------------------------------
    def blocks(self, agent_id: str) -> R:
        call = Call("GET", f"/v1/agents/{seg(agent_id)}/blocks")
        if self._replica is not None:
            return self._run(self._replica.listing(agent_id, "block", call))
        return self._send(call)

    def block(self, agent_id: str, block_id: str) -> R:
        if self._replica is not None:
            return self._run(self._replica.read(agent_id, "block", block_id))
        return self._send(Call("GET", f"/v1/agents/{seg(agent_id)}/blocks/{seg(block_id)}"))

    def put_block(
        self,
        agent_id: str,
        block_id: str,
        content: str,
        *,
        role: str = "working",
        pinned: bool = False,
        rev: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> R:
        """Create (``rev=None``) or replace a block; a stale ``rev`` raises RevConflict. With a
        cache, ``rev`` defaults to the version this client last saw (a stale one is a conflict,
        settled by ``CacheConfig.conflict``)."""
        if self._replica is not None:
            change = self._replica.change(
                agent_id, "block", block_id, content, rev, idempotency_key=idempotency_key, role=role, pinned=pinned,
                metadata=dict(metadata) if metadata is not None else None,
            )  # fmt: skip
            return self._run(self._replica.submit(change))
        body = clean(
            {
                "content": content,
                "role": role,
                "pinned": pinned,
                "_rev": rev,
                "metadata": dict(metadata) if metadata is not None else None,
            }
        )
        path = f"/v1/agents/{seg(agent_id)}/blocks/{seg(block_id)}"
        return self._send(Call("PUT", path, json=body, headers=idem(idempotency_key)))

    def delete_block(
        self, agent_id: str, block_id: str, rev: str | None = None, *, idempotency_key: str | None = None
    ) -> R:
        """Delete a block at ``rev`` (with a cache: by default the version this client last saw)."""
        if self._replica is not None:
            change = self._replica.change(agent_id, "block", block_id, None, rev, idempotency_key=idempotency_key)
            return self._run(self._replica.submit(change))
        path = f"/v1/agents/{seg(agent_id)}/blocks/{seg(block_id)}"
        return self._send(Call("DELETE", path, params=clean({"_rev": rev}), headers=idem(idempotency_key)))

    # --- instances: change feed, sync status --------------------------------------------------------
    def changes(self, agent_id: str, *, after: str | None = None, limit: int = 100) -> R:
        """A page of the agent's change feed (kind, key, version, op, time of each change of its
        blocks, state and facts). Without ``after``: none, and ``next_after`` is where it is now."""
        params = clean({"after": after, "limit": limit})
        return self._send(Call("GET", f"/v1/agents/{seg(agent_id)}/changes", params=params))

    def instances(self, agent_id: str) -> R:
        """The sync status every client instance of the agent reported last."""
        return self._send(Call("GET", f"/v1/agents/{seg(agent_id)}/instances"))

    # --- recall and archival ----------------------------------------------------------------------
    def write_recall(self, agent_id: str, content: str, *, idempotency_key: str, role: str = "assistant") -> R:
        return self._send(
            Call(
                "POST",
                f"/v1/agents/{seg(agent_id)}/recall",
                json={"content": content, "role": role},
                headers=idem(idempotency_key),
            )
        )

    def search_recall(
        self,
        agent_id: str,
        query: str,
        *,
        mode: str = "hybrid",
        limit: int = 10,
        cursor: str | None = None,
        since: float | None = None,
        until: float | None = None,
    ) -> R:
        params = clean({"query": query, "mode": mode, "limit": limit, "cursor": cursor, "since": since, "until": until})
        return self._send(Call("GET", f"/v1/agents/{seg(agent_id)}/recall", params=params))

    def ingest_archival(
        self,
        agent_id: str,
        text: str,
        *,
        doc_id: str | None = None,
        source: str = "",
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> R:
        body = clean(
            {
                "text": text,
                "doc_id": doc_id,
                "source": source,
                "metadata": dict(metadata) if metadata is not None else None,
            }
        )
        return self._send(
            Call("POST", f"/v1/agents/{seg(agent_id)}/archival", json=body, headers=idem(idempotency_key))
        )

    def ingest_job(self, agent_id: str, job_id: str) -> R:
        """An ingestion job (``ingest_archival`` returns it queued): status, progress, result or error."""
        return self._send(Call("GET", f"/v1/agents/{seg(agent_id)}/archival/jobs/{seg(job_id)}"))

    def search_archival(
        self,
        agent_id: str,
        query: str,
        *,
        k: int = 10,
        filters: Mapping[str, Any] | None = None,
        cursor: str | None = None,
    ) -> R:
        body = clean(
            {"query": query, "k": k, "filters": dict(filters) if filters is not None else None, "cursor": cursor}
        )
        return self._send(Call("POST", f"/v1/agents/{seg(agent_id)}/archival/search", json=body))

    # --- tools, events, health --------------------------------------------------------------------
    def tools(self) -> R:
        """The tool schemas the server offers (``tool_schemas()`` gives them without a request)."""
        return self._send(Call("GET", "/v1/tools"))

    def call_tool(
        self,
        agent_id: str,
        name: str,
        arguments: Mapping[str, Any],
        *,
        tool_call_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> R:
        body = clean({"arguments": dict(arguments), "tool_call_id": tool_call_id})
        path = f"/v1/agents/{seg(agent_id)}/tools/{seg(name)}"
        return self._send(Call("POST", path, json=body, headers=idem(idempotency_key)))

    def events(
        self,
        agent_id: str,
        *,
        kinds: Sequence[str] | None = None,
        since: float | None = None,
        until: float | None = None,
        actor: str | None = None,
        idempotency_key: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> R:
        params = clean(
            {
                "kinds": list(kinds) if kinds else None,
                "since": since,
                "until": until,
                "actor": actor,
                "idempotency_key": idempotency_key,
                "limit": limit,
                "cursor": cursor,
            }
        )
        return self._send(Call("GET", f"/v1/agents/{seg(agent_id)}/events", params=params))

    def all_events(
        self,
        *,
        agent_id: str | None = None,
        kinds: Sequence[str] | None = None,
        since: float | None = None,
        until: float | None = None,
        actor: str | None = None,
        idempotency_key: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> R:
        """Admin only: events of every agent (or of ``agent_id``)."""
        params = clean(
            {
                "agent_id": agent_id,
                "kinds": list(kinds) if kinds else None,
                "since": since,
                "until": until,
                "actor": actor,
                "idempotency_key": idempotency_key,
                "limit": limit,
                "cursor": cursor,
            }
        )
        return self._send(Call("GET", "/v1/events", params=params))

    def report(self, agent_ids: Sequence[str] | None = None, *, since: float | None = None) -> R:
        """Admin only: the Conveyance report (``vcm report --json``'s document)."""
        params = clean({"agent_id": list(agent_ids) if agent_ids else None, "since": since})
        return self._send(Call("GET", "/v1/report", params=params))

    def run_maintenance(self, job: str) -> R:
        """Admin only: run one maintenance job now on the server (expire, sweep, consolidate,
        snapshot); ``{"job", "outcome"}``."""
        return self._send(Call("POST", f"/v1/maintenance/{seg(job)}"))

    def maintenance_runs(self) -> R:
        """Admin only: when each maintenance job last ran, ``{"jobs": [{"job", "at", "outcome"}]}``."""
        return self._send(Call("GET", "/v1/maintenance"))

    def health(self) -> R:
        """``{"ok": ..., "redis": ..., "store": ...}``; an unhealthy server answers too (503)."""
        return self._send(Call("GET", "/healthz", ok=(503,)))
