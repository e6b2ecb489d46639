"""Flows: an operation of the local cache as a generator that yields the requests it needs
(:class:`~vcm.wire.Call`), is sent each one's JSON result (or has its coded error thrown in), and
returns the operation's result; :func:`drive` and :func:`adrive` run one with a sync or an
async ``send``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

from vcm.wire import Call

T = TypeVar("T")
Flow = Generator[Call, Any, T]


def drive(flow: Flow[T], send: Callable[[Call], Any]) -> T:
    """Run a flow with a synchronous ``send``; its errors go into the flow (which may handle
    them), so its cleanup runs whatever happens on the wire."""
    try:
        call = next(flow)
        while True:
            try:
                result = send(call)
            except Exception as exc:
                call = flow.throw(exc)
                continue
            call = flow.send(result)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def adrive(flow: Flow[T], send: Callable[[Call], Awaitable[Any]]) -> T:
    """:func:`drive` with an awaited ``send``."""
    try:
        call = next(flow)
        while True:
            try:
                result = await send(call)
            except Exception as exc:
                call = flow.throw(exc)
                continue
            call = flow.send(result)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
