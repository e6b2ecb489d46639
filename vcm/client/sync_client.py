"""The synchronous client, with its local cache's follower and periodic sync threads."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

from vcm.client.agent_ops import AgentOperations
from vcm.client.chat_stream import ChatStreamOperations
from vcm.client.memory_ops import MemoryOperations
from vcm.client.portable_ops import PortableOperations
from vcm.client.replies import Json, decode, finished, http_kwargs, rejected_error
from vcm.errors import VcmError
from vcm.sync.background import Follower, Periodic
from vcm.sync.config import CacheConfig
from vcm.sync.flows import Flow, drive
from vcm.sync.replica import Replica
from vcm.wire import Call


class VcmClient(AgentOperations[Json], MemoryOperations[Json], PortableOperations, ChatStreamOperations):
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
        response = self._http.request(call.method, call.path, **http_kwargs(call))
        return decode(response, call.ok)

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
            raise rejected_error(result)
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
        """Poll an ingestion job until it is done (its job), failed or cancelled (raises its coded
        error)."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.ingest_job(agent_id, job_id)
            if job["status"] in ("done", "failed", "cancelled"):
                return finished(job)
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
