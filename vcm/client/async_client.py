"""The asynchronous client: the same operations, awaited."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable

import httpx

from vcm.client.agent_ops import AgentOperations
from vcm.client.chat_stream import AsyncChatStreamOperations
from vcm.client.memory_ops import MemoryOperations
from vcm.client.portable_ops import AsyncPortableOperations
from vcm.client.replies import Json, decode, finished, http_kwargs, rejected_error
from vcm.errors import VcmError
from vcm.sync.config import CacheConfig
from vcm.sync.flows import Flow, adrive
from vcm.sync.replica import Replica
from vcm.wire import Call


class AsyncVcmClient(
    AgentOperations[Awaitable[Json]],
    MemoryOperations[Awaitable[Json]],
    AsyncPortableOperations,
    AsyncChatStreamOperations,
):
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
        response = await self._http.request(call.method, call.path, **http_kwargs(call))
        return decode(response, call.ok)

    async def _run(self, flow: Flow[Json]) -> Json:
        return await adrive(flow, self._send)

    async def sync(self) -> Json:
        """As :meth:`VcmClient.sync`."""
        if self._replica is None:
            raise VcmError("this client has no local cache: pass cache=CacheConfig(...)")
        result = await adrive(self._replica.sync(), self._send)
        if result.rejected:
            raise rejected_error(result)
        return result.as_dict()

    def sync_metrics(self) -> Json:
        if self._replica is None:
            raise VcmError("this client has no local cache: pass cache=CacheConfig(...)")
        return self._replica.metrics()

    async def wait_for_ingest(self, agent_id: str, job_id: str, *, timeout: float = 300.0, poll: float = 0.25) -> Json:
        """Poll an ingestion job until it is done (its job), failed or cancelled (raises its coded
        error)."""
        deadline = time.monotonic() + timeout
        while True:
            job = await self.ingest_job(agent_id, job_id)
            if job["status"] in ("done", "failed", "cancelled"):
                return finished(job)
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
