"""One body of logic for a sync and an async framework API: an integration writes an operation
as a generator that yields client calls (:class:`Step`) and receives their replies, and
:func:`drive` (sync, a :class:`~vcm.client.VcmClient`) or :func:`adrive` (async, either client)
runs it. A coded error a call raises is thrown into the generator, which may catch it
(``NotFound`` on a read is often an answer, not a failure)."""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from vcm.client import AsyncVcmClient, VcmClient
from vcm.errors import VcmError

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
    try:
        step = next(flow)
        while True:
            try:
                reply = getattr(client, step.method)(*step.args, **step.kwargs)
            except VcmError as exc:
                step = flow.throw(exc)
            else:
                step = flow.send(reply)
    except StopIteration as stop:
        result: T = stop.value
        return result


async def adrive(flow: Flow[T], client: Client) -> T:
    """Run ``flow`` from async code: awaited with an AsyncVcmClient; a VcmClient's blocking calls
    run in a worker thread, so that they never stall the event loop."""
    try:
        step = next(flow)
        while True:
            method = getattr(client, step.method)
            try:
                if isinstance(client, AsyncVcmClient):
                    reply = await method(*step.args, **step.kwargs)
                else:
                    reply = await asyncio.to_thread(method, *step.args, **step.kwargs)
            except VcmError as exc:
                step = flow.throw(exc)
            else:
                step = flow.send(reply)
    except StopIteration as stop:
        result: T = stop.value
        return result
