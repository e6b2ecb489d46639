"""Python client of the vcm HTTP API (:mod:`vcm.api.app`): :class:`VcmClient` (sync) and
:class:`AsyncVcmClient`, one method per route, over httpx.

Every method returns the route's JSON body as a dict. An error response is raised as the
:mod:`vcm.errors` class of its code (``RevConflict`` for ``REV_CONFLICT`` with ``current_rev``
in ``.details``, ``TokenBudgetExceeded`` with ``required_headroom``, ...), so code written against
the in-process :class:`~vcm.service.MemoryService` catches the same exceptions::

    VcmError                the root; raised itself for a code this client does not know, or a
    │                       reply that is not vcm's JSON (``.code`` ``HTTP_<status>``)
    ├── StoreUnavailable    STORE_UNAVAILABLE (503): Redis or the store is down; retry later
    └── ...                 one class per code, as the server raises them

Transport failures (connection refused, timeouts) are httpx's own exceptions. Pass ``transport``
to route requests anywhere (``httpx.ASGITransport(app)``, ``httpx.MockTransport``) in tests.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import httpx

from vcm.errors import ErrorCode, RevConflict, VcmError, from_payload
from vcm.sync.background import Follower, Periodic
from vcm.sync.config import CacheConfig
from vcm.sync.replica import Flow, Replica, SyncResult, adrive, drive
from vcm.tools.schemas import tool_schemas
from vcm.wire import Call
from vcm.wire import seg as _seg

R = TypeVar("R")
Json = dict[str, Any]


def error_from(response: httpx.Response) -> VcmError:
    """The exception an error reply stands for: the class of its code from :mod:`vcm.errors`."""
    try:
        error = dict(response.json()["error"])
        if not isinstance(error.get("code"), str) or not isinstance(error.get("message"), str):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        unknown = VcmError(f"HTTP {response.status_code} without a vcm error body")
        unknown.code, unknown.status = f"HTTP_{response.status_code}", response.status_code
        return unknown
    if error["code"] == ErrorCode.RATE_LIMITED and "retry_after_s" not in error:
        try:
            error["retry_after_s"] = float(response.headers.get("Retry-After", "1"))
        except ValueError:
            error["retry_after_s"] = 1.0
    return from_payload(error, response.status_code)


def _decode(response: httpx.Response, ok: Sequence[int]) -> Json:
    if response.status_code not in ok and not response.is_success:
        raise error_from(response)
    data = response.json()
    if not isinstance(data, dict):
        bad = VcmError("the reply is not a JSON object")
        bad.code, bad.status = "BAD_REPLY", response.status_code
        raise bad
    return data


def _idem(key: str | None) -> dict[str, str]:
    return {"Idempotency-Key": key} if key is not None else {}


def _clean(params: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None}


class _Operations(Generic[R]):
    # The local cache and sync (``cache=CacheConfig(...)``); None: every call goes to the server.
    _replica: Replica | None = None

    def _send(self, call: Call) -> R:
        raise NotImplementedError

    def _run(self, flow: Flow[Json]) -> R:
        """Drive a flow of the local cache (:mod:`vcm.sync.replica`) with this client."""
        raise NotImplementedError

    # --- agents ---------------------------------------------------------------------------------
    def create_agent(
        self,
        agent_id: str,
        *,
        model: str | None = None,
        system_prompt: str = "",
        tools: Sequence[Mapping[str, Any]] = (),
        vcm_tools: bool = False,
    ) -> R:
        """Admin only. The reply's ``token`` is the agent's bearer token, shown this once."""
        body: Json = {"agent_id": agent_id, "system_prompt": system_prompt, "tools": [dict(t) for t in tools]}
        if model is not None:
            body["model"] = model
        if vcm_tools:
            body["vcm_tools"] = True
        return self._send(Call("POST", "/v1/agents", json=body))

    def agents(self) -> R:
        return self._send(Call("GET", "/v1/agents"))

    def agent(self, agent_id: str) -> R:
        return self._send(Call("GET", f"/v1/agents/{_seg(agent_id)}"))

    def rotate_token(self, agent_id: str) -> R:
        return self._send(Call("POST", f"/v1/agents/{_seg(agent_id)}/token"))

    # --- lifecycle and snapshots ----------------------------------------------------------------
    def delete_agent(self, agent_id: str) -> R:
        """Admin or the agent itself: everything of the agent goes (counts in the reply)."""
        return self._send(Call("DELETE", f"/v1/agents/{_seg(agent_id)}"))

    def forget_message(self, agent_id: str, message_id: str) -> R:
        return self._send(Call("DELETE", f"/v1/agents/{_seg(agent_id)}/messages/{_seg(message_id)}"))

    def forget_document(self, agent_id: str, doc_id: str) -> R:
        return self._send(Call("DELETE", f"/v1/agents/{_seg(agent_id)}/archival/{_seg(doc_id)}"))

    def reset(self, agent_id: str, *, idempotency_key: str | None = None) -> R:
        return self._send(Call("POST", f"/v1/agents/{_seg(agent_id)}/reset", headers=_idem(idempotency_key)))

    def create_snapshot(
        self,
        agent_id: str,
        *,
        kind: str = "manual",
        reason: str = "",
        ttl_s: int | None = None,
        idempotency_key: str | None = None,
    ) -> R:
        body = _clean({"kind": kind, "reason": reason, "ttl_s": ttl_s})
        return self._send(
            Call("POST", f"/v1/agents/{_seg(agent_id)}/snapshots", json=body, headers=_idem(idempotency_key))
        )

    def snapshots(self, agent_id: str) -> R:
        return self._send(Call("GET", f"/v1/agents/{_seg(agent_id)}/snapshots"))

    def restore_snapshot(self, agent_id: str, snapshot_id: str, *, idempotency_key: str | None = None) -> R:
        path = f"/v1/agents/{_seg(agent_id)}/snapshots/{_seg(snapshot_id)}/restore"
        return self._send(Call("POST", path, headers=_idem(idempotency_key)))

    def delete_snapshot(self, agent_id: str, snapshot_id: str) -> R:
        return self._send(Call("DELETE", f"/v1/agents/{_seg(agent_id)}/snapshots/{_seg(snapshot_id)}"))

    def summary_versions(self, agent_id: str, *, limit: int = 20) -> R:
        return self._send(Call("GET", f"/v1/agents/{_seg(agent_id)}/summary/versions", params={"limit": limit}))

    # --- facts and state ------------------------------------------------------------------------
    def remember(
        self,
        agent_id: str,
        value: str,
        *,
        type: str,
        key: str | None = None,
        scope: str = "agent",
        tags: Sequence[str] = (),
        importance: float = 0.5,
        evidence: Sequence[Mapping[str, Any]] = (),
        ttl_s: int | None = None,
        justification: str | None = None,
        idempotency_key: str | None = None,
    ) -> R:
        body = _clean(
            {
                "value": value, "type": type, "key": key, "scope": scope, "tags": list(tags), "importance": importance,
                "evidence": [dict(e) for e in evidence], "ttl_s": ttl_s, "justification": justification,
            }
        )  # fmt: skip
        call = Call("POST", f"/v1/agents/{_seg(agent_id)}/facts", json=body, headers=_idem(idempotency_key))
        if (replica := self._replica) is not None:
            return self._run(replica.direct(agent_id, call, lambda reply: replica.fact_written(agent_id, reply)))
        return self._send(call)

    def facts(
        self, agent_id: str, *, types: Sequence[str] | None = None, key: str | None = None, limit: int = 100
    ) -> R:
        params = _clean({"type": list(types) if types else None, "key": key, "limit": limit})
        return self._send(Call("GET", f"/v1/agents/{_seg(agent_id)}/facts", params=params))

    def search_facts(self, agent_id: str, query: str, *, types: Sequence[str] | None = None, limit: int = 10) -> R:
        params = _clean({"query": query, "type": list(types) if types else None, "limit": limit})
        return self._send(Call("GET", f"/v1/agents/{_seg(agent_id)}/facts/search", params=params))

    def fact(self, agent_id: str, fact_id: str) -> R:
        if self._replica is not None:
            return self._run(self._replica.read(agent_id, "fact", fact_id))
        return self._send(Call("GET", f"/v1/agents/{_seg(agent_id)}/facts/{_seg(fact_id)}"))

    def forget_fact(self, agent_id: str, fact_id: str) -> R:
        call = Call("DELETE", f"/v1/agents/{_seg(agent_id)}/facts/{_seg(fact_id)}")
        if (replica := self._replica) is not None:
            return self._run(replica.direct(agent_id, call, lambda _: replica.forgotten(agent_id, "fact", fact_id)))
        return self._send(call)

    def fact_stats(self, agent_id: str) -> R:
        return self._send(Call("GET", f"/v1/agents/{_seg(agent_id)}/facts/stats"))

    def working_set(self, agent_id: str, query: str = "") -> R:
        """Goal, constraints, top facts, entities, relations and agenda, ranked for ``query``."""
        return self._send(Call("GET", f"/v1/agents/{_seg(agent_id)}/working-set", params={"query": query}))

    def entity_graph(self, agent_id: str, name: str, *, depth: int = 1) -> R:
        """An entity, the entities related to it within ``depth`` hops, their relations and the
        messages that mention it."""
        return self._send(Call("GET", f"/v1/agents/{_seg(agent_id)}/entities/{_seg(name)}", params={"depth": depth}))

    def state(self, agent_id: str, key: str | None = None) -> R:
        path = f"/v1/agents/{_seg(agent_id)}/state" + (f"/{_seg(key)}" if key else "")
        if self._replica is not None:
            if key:
                return self._run(self._replica.read(agent_id, "state", key))
            return self._run(self._replica.listing(agent_id, "state", Call("GET", path)))
        return self._send(Call("GET", path))

    def set_state(self, agent_id: str, key: str, value: Any, *, ttl_s: int | None = None, rev: str | None = None) -> R:
        """Set a key (``rev=""``: only if it does not exist yet). With a cache, the change is
        based on ``rev`` or else on the version this client last saw, and a stale one is a
        conflict (``CacheConfig.conflict``)."""
        if self._replica is not None:
            change = self._replica.change(agent_id, "state", key, value, rev, ttl_s=ttl_s)
            return self._run(self._replica.submit(change))
        body = _clean({"value": value, "ttl_s": ttl_s, "_rev": rev}) | {"value": value}
        return self._send(Call("PUT", f"/v1/agents/{_seg(agent_id)}/state/{_seg(key)}", json=body))

    def delete_state(self, agent_id: str, key: str | None = None, *, rev: str | None = None) -> R:
        """Delete one key (only if still at ``rev``, when given), or every key (``key`` None)."""
        path = f"/v1/agents/{_seg(agent_id)}/state" + (f"/{_seg(key)}" if key else "")
        if (replica := self._replica) is not None:
            if key:
                return self._run(replica.submit(replica.change(agent_id, "state", key, None, rev)))
            return self._run(
                replica.direct(agent_id, Call("DELETE", path), lambda _: replica.cleared(agent_id, "state"))
            )
        return self._send(Call("DELETE", path, params=_clean({"_rev": rev}) or None))

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
    ) -> R:
        body = _clean(
            {
                "role": role,
                "content": content,
                "name": name,
                "pinned": pinned,
                "metadata": dict(metadata) if metadata is not None else None,
                "tool_call_id": tool_call_id,
                "tool_calls": [dict(t) for t in tool_calls] if tool_calls is not None else None,
            }
        )
        return self._send(
            Call("POST", f"/v1/agents/{_seg(agent_id)}/messages", json=body, headers=_idem(idempotency_key))
        )

    def context(self, agent_id: str, *, built: bool = False, query: str | None = None) -> R:
        """The main context; ``built``: the prompt the model sees, with the builder's layers."""
        params = _clean({"built": "true" if built else None, "query": query})
        return self._send(Call("GET", f"/v1/agents/{_seg(agent_id)}/context", params=params or None))

    def chat(self, agent_id: str, message: str, *, name: str | None = None) -> R:
        """One turn of the agent over the server's configured model (tools and heartbeats run)."""
        return self._send(
            Call("POST", f"/v1/agents/{_seg(agent_id)}/chat", json=_clean({"message": message, "name": name}))
        )

    def stats(self, agent_id: str) -> R:
        return self._send(Call("GET", f"/v1/agents/{_seg(agent_id)}/stats"))

    def evict(self, agent_id: str, count: int, *, idempotency_key: str | None = None) -> R:
        return self._send(
            Call(
                "POST",
                f"/v1/agents/{_seg(agent_id)}/evictions",
                json={"count": count},
                headers=_idem(idempotency_key),
            )
        )

    # --- working blocks ---------------------------------------------------------------------------
    def blocks(self, agent_id: str) -> R:
        call = Call("GET", f"/v1/agents/{_seg(agent_id)}/blocks")
        if self._replica is not None:
            return self._run(self._replica.listing(agent_id, "block", call))
        return self._send(call)

    def block(self, agent_id: str, block_id: str) -> R:
        if self._replica is not None:
            return self._run(self._replica.read(agent_id, "block", block_id))
        return self._send(Call("GET", f"/v1/agents/{_seg(agent_id)}/blocks/{_seg(block_id)}"))

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
        body = _clean(
            {
                "content": content,
                "role": role,
                "pinned": pinned,
                "_rev": rev,
                "metadata": dict(metadata) if metadata is not None else None,
            }
        )
        path = f"/v1/agents/{_seg(agent_id)}/blocks/{_seg(block_id)}"
        return self._send(Call("PUT", path, json=body, headers=_idem(idempotency_key)))

    def delete_block(
        self, agent_id: str, block_id: str, rev: str | None = None, *, idempotency_key: str | None = None
    ) -> R:
        """Delete a block at ``rev`` (with a cache: by default the version this client last saw)."""
        if self._replica is not None:
            change = self._replica.change(agent_id, "block", block_id, None, rev, idempotency_key=idempotency_key)
            return self._run(self._replica.submit(change))
        path = f"/v1/agents/{_seg(agent_id)}/blocks/{_seg(block_id)}"
        return self._send(Call("DELETE", path, params=_clean({"_rev": rev}), headers=_idem(idempotency_key)))

    # --- instances: change feed, sync status --------------------------------------------------------
    def changes(self, agent_id: str, *, after: str | None = None, limit: int = 100) -> R:
        """A page of the agent's change feed (kind, key, version, op, time of each change of its
        blocks, state and facts). Without ``after``: none, and ``next_after`` is where it is now."""
        params = _clean({"after": after, "limit": limit})
        return self._send(Call("GET", f"/v1/agents/{_seg(agent_id)}/changes", params=params))

    def instances(self, agent_id: str) -> R:
        """The sync status every client instance of the agent reported last."""
        return self._send(Call("GET", f"/v1/agents/{_seg(agent_id)}/instances"))

    # --- recall and archival ----------------------------------------------------------------------
    def write_recall(self, agent_id: str, content: str, *, idempotency_key: str, role: str = "assistant") -> R:
        return self._send(
            Call(
                "POST",
                f"/v1/agents/{_seg(agent_id)}/recall",
                json={"content": content, "role": role},
                headers=_idem(idempotency_key),
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
        params = _clean(
            {"query": query, "mode": mode, "limit": limit, "cursor": cursor, "since": since, "until": until}
        )
        return self._send(Call("GET", f"/v1/agents/{_seg(agent_id)}/recall", params=params))

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
        body = _clean(
            {
                "text": text,
                "doc_id": doc_id,
                "source": source,
                "metadata": dict(metadata) if metadata is not None else None,
            }
        )
        return self._send(
            Call("POST", f"/v1/agents/{_seg(agent_id)}/archival", json=body, headers=_idem(idempotency_key))
        )

    def ingest_job(self, agent_id: str, job_id: str) -> R:
        """An ingestion job (``ingest_archival`` returns it queued): status, progress, result or error."""
        return self._send(Call("GET", f"/v1/agents/{_seg(agent_id)}/archival/jobs/{_seg(job_id)}"))

    def search_archival(
        self,
        agent_id: str,
        query: str,
        *,
        k: int = 10,
        filters: Mapping[str, Any] | None = None,
        cursor: str | None = None,
    ) -> R:
        body = _clean(
            {"query": query, "k": k, "filters": dict(filters) if filters is not None else None, "cursor": cursor}
        )
        return self._send(Call("POST", f"/v1/agents/{_seg(agent_id)}/archival/search", json=body))

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
        body = _clean({"arguments": dict(arguments), "tool_call_id": tool_call_id})
        path = f"/v1/agents/{_seg(agent_id)}/tools/{_seg(name)}"
        return self._send(Call("POST", path, json=body, headers=_idem(idempotency_key)))

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
        params = _clean(
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
        return self._send(Call("GET", f"/v1/agents/{_seg(agent_id)}/events", params=params))

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
        params = _clean(
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
        params = _clean({"agent_id": list(agent_ids) if agent_ids else None, "since": since})
        return self._send(Call("GET", "/v1/report", params=params))

    def health(self) -> R:
        """``{"ok": ..., "redis": ..., "store": ...}``; an unhealthy server answers too (503)."""
        return self._send(Call("GET", "/healthz", ok=(503,)))


def _http_kwargs(call: Call) -> dict[str, Any]:
    return {
        "params": dict(call.params) if call.params else None,
        "json": call.json,
        "headers": dict(call.headers) if call.headers else None,
    }


def _rejected(result: SyncResult) -> VcmError:
    first = result.rejected[0]
    if len(result.rejected) == 1:
        return first
    return RevConflict(
        f"{len(result.rejected)} pending changes were refused: {first.message}",
        rejected=[e.to_dict() for e in result.rejected],
    )


def _finished(job: Json) -> Json:
    if job["status"] == "failed":
        raise from_payload(job.get("error") or {"code": "INTERNAL_ERROR", "message": "ingestion failed"})
    return job


class VcmClient(_Operations[Json]):
    """Synchronous client. ``token`` is an agent's token or the admin token.

    ``cache=CacheConfig(...)`` keeps a local cache of blocks, state keys and facts (see
    :mod:`vcm.sync`): a background thread per agent follows its change feed, another syncs every
    ``sync_interval_s``; :meth:`sync` syncs now and :meth:`close` flushes what is pending."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        cache: CacheConfig | None = None,
    ) -> None:
        options: dict[str, Any] = {
            "base_url": base_url, "headers": {"Authorization": f"Bearer {token}"}, "transport": transport,
        }  # fmt: skip
        self._http = httpx.Client(timeout=timeout, **options)
        self._replica = Replica(cache) if cache is not None else None
        self._stop = threading.Event()
        self._sync_lock = threading.Lock()
        self._followers: dict[str, Follower] = {}
        self._stream_http: httpx.Client | None = None
        if cache is not None and self._replica is not None:
            if cache.follow:
                self._stream_http = httpx.Client(timeout=timeout, **options)
                self._replica.on_new_agent = self._follow
            if cache.sync_interval_s > 0:
                Periodic(cache.sync_interval_s, self._periodic, self._stop).start()

    def _send(self, call: Call) -> Json:
        response = self._http.request(call.method, call.path, **_http_kwargs(call))
        return _decode(response, call.ok)

    def _run(self, flow: Flow[Json]) -> Json:
        return drive(flow, self._send)

    # --- local cache and sync ---------------------------------------------------------------------
    def sync(self) -> Json:
        """Push pending changes, pull the changes the cache may have missed, report this
        instance's status. Raises RevConflict when the ``reject`` strategy refused pending
        changes (each in ``.details["rejected"]``); they are dropped, the remote versions kept."""
        replica = self._cached()
        with self._sync_lock:
            result = drive(replica.sync(), self._send)
        if result.rejected:
            raise _rejected(result)
        return result.as_dict()

    def sync_metrics(self) -> Json:
        """This instance's counters: cache hits, misses and hit ratio, syncs, failures, conflicts
        and conflict rate, sync latency, notifications, pending changes."""
        return self._cached().metrics()

    def on_change(self, listener: Callable[[str, Json], None]) -> None:
        """Call ``listener(agent_id, change)`` for each change of the feed this client applies
        (in the follower's thread; keep it short)."""
        self._cached().listen(listener)

    @property
    def instance_id(self) -> str:
        return self._cached().instance_id

    def _cached(self) -> Replica:
        if self._replica is None:
            raise VcmError("this client has no local cache: pass cache=CacheConfig(...)")
        return self._replica

    def _follow(self, agent_id: str) -> None:
        if self._stream_http is None or self._stop.is_set() or agent_id in self._followers:
            return
        follower = self._followers[agent_id] = Follower(self._stream_http, self._cached(), agent_id, self._stop)
        follower.start()

    def _periodic(self) -> None:
        with self._sync_lock:
            drive(self._cached().sync(), self._send)

    def wait_for_ingest(self, agent_id: str, job_id: str, *, timeout: float = 300.0, poll: float = 0.25) -> Json:
        """Poll an ingestion job until it is done (its job) or failed (raises its coded error)."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.ingest_job(agent_id, job_id)
            if job["status"] in ("done", "failed"):
                return _finished(job)
            if time.monotonic() >= deadline:
                raise TimeoutError(f"ingestion job {job_id} still {job['status']} after {timeout} s")
            time.sleep(poll)

    def close(self) -> None:
        """Flush pending changes (a sync; raises as :meth:`sync` does), then stop and close."""
        try:
            if self._replica is not None and self._replica.pending:
                self.sync()
        finally:
            self._stop.set()
            for follower in self._followers.values():
                follower.halt()
            if self._stream_http is not None:
                self._stream_http.close()
            self._http.close()

    def __enter__(self) -> VcmClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncVcmClient(_Operations[Awaitable[Json]]):
    """The same operations, awaited: ``await client.append(...)``."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
        cache: CacheConfig | None = None,
    ) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            transport=transport,
        )
        # The async client reads and writes through the cache and syncs when asked (no threads:
        # other instances' changes reach it by sync(), or when entries' lifetimes end).
        self._replica = Replica(cache) if cache is not None else None

    async def _send(self, call: Call) -> Json:
        response = await self._http.request(call.method, call.path, **_http_kwargs(call))
        return _decode(response, call.ok)

    async def _run(self, flow: Flow[Json]) -> Json:
        return await adrive(flow, self._send)

    async def sync(self) -> Json:
        """As :meth:`VcmClient.sync`."""
        if self._replica is None:
            raise VcmError("this client has no local cache: pass cache=CacheConfig(...)")
        result = await adrive(self._replica.sync(), self._send)
        if result.rejected:
            raise _rejected(result)
        return result.as_dict()

    def sync_metrics(self) -> Json:
        if self._replica is None:
            raise VcmError("this client has no local cache: pass cache=CacheConfig(...)")
        return self._replica.metrics()

    async def wait_for_ingest(self, agent_id: str, job_id: str, *, timeout: float = 300.0, poll: float = 0.25) -> Json:
        """Poll an ingestion job until it is done (its job) or failed (raises its coded error)."""
        deadline = time.monotonic() + timeout
        while True:
            job = await self.ingest_job(agent_id, job_id)
            if job["status"] in ("done", "failed"):
                return _finished(job)
            if time.monotonic() >= deadline:
                raise TimeoutError(f"ingestion job {job_id} still {job['status']} after {timeout} s")
            await asyncio.sleep(poll)

    async def aclose(self) -> None:
        """Flush pending changes (a sync), then close."""
        try:
            if self._replica is not None and self._replica.pending:
                await self.sync()
        finally:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncVcmClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


__all__ = ["AsyncVcmClient", "CacheConfig", "Call", "VcmClient", "error_from", "tool_schemas"]
