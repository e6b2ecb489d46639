"""One body of logic for a sync and an async framework API: an integration writes an operation
as a generator that yields client calls (:class:`Step`) and receives their replies, and
:func:`drive` (sync, a :class:`~vcm.client.VcmClient`) or :func:`adrive` (async, either client)
runs it (with the local cache's driver, :mod:`vcm.sync.flows`). An error a call raises is thrown
into the generator, which may catch it (``NotFound`` on a read is often an answer, not a
failure)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from vcm.client import AsyncVcmClient, VcmClient
from vcm.sync import flows
from vcm.wire import Call

T = TypeVar("T")
Json = dict[str, Any]
Client = VcmClient | AsyncVcmClient


@dataclass(frozen=True)
class Step:
    """One client call: ``getattr(client, method)(*args, **kwargs)``."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


Flow = Generator[Step, Json, T]


def call(method: str, *args: Any, **kwargs: Any) -> Step:
    return Step(method, args, kwargs)


def drive(flow: Flow[T], client: Client) -> T:
    """Run ``flow`` with a synchronous client."""
    if isinstance(client, AsyncVcmClient):
        raise TypeError("this operation is synchronous: pass a VcmClient, or use the async form with AsyncVcmClient")

    def send(step: Step) -> Json:
        reply: Json = getattr(client, step.method)(*step.args, **step.kwargs)
        return reply

    # The local cache's driver (vcm.sync.flows) runs any generator of requests: here, steps.
    return flows.drive(cast("flows.Flow[T]", flow), cast("Callable[[Call], Json]", send))


async def adrive(flow: Flow[T], client: Client) -> T:
    """Run ``flow`` from async code: awaited with an AsyncVcmClient; a VcmClient's blocking calls
    run in a worker thread, so that they never stall the event loop."""

    async def send(step: Step) -> Json:
        method = getattr(client, step.method)
        if isinstance(client, AsyncVcmClient):
            reply: Json = await method(*step.args, **step.kwargs)
            return reply
        return cast(Json, await asyncio.to_thread(method, *step.args, **step.kwargs))

    return await flows.adrive(cast("flows.Flow[T]", flow), cast("Callable[[Call], Awaitable[Json]]", send))
