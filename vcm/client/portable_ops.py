"""Portable export and import through the HTTP API (admin only; docs/portable.md): the file is
JSON Lines, streamed down on export and sent as one body on import, so these two calls are the
clients' own rather than :class:`~vcm.client.replies.Sender` operations."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

import httpx

from vcm.client.replies import Json, decode, error_from
from vcm.sync.sse import Lines
from vcm.wire import seg

MEDIA_TYPE = "application/x-ndjson"


def _export(agent_id: str, vectors: bool) -> dict[str, Any]:
    return {"url": f"/v1/agents/{seg(agent_id)}/export", "params": {"vectors": "true"} if vectors else None}


def _import(lines: Iterable[str] | str, as_id: str | None) -> dict[str, Any]:
    text = lines if isinstance(lines, str) else "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    return {
        "url": "/v1/import",
        "content": text.encode("utf-8"),
        "params": {"as_id": as_id} if as_id is not None else None,
        "headers": {"Content-Type": MEDIA_TYPE},
    }


class PortableOperations:
    _http: httpx.Client

    def export_agent(self, agent_id: str, *, vectors: bool = False) -> Iterator[str]:
        """The agent's portable file, line by line as the server streams it (each line ends in a
        newline; write them to a file as they come). The request starts at the first ``next``;
        an error reply raises there."""
        with self._http.stream("GET", **_export(agent_id, vectors)) as response:
            if not response.is_success:
                response.read()
                raise error_from(response)
            lines = Lines()  # not iter_lines: it also cuts at U+2028, which an old file may hold raw
            for chunk in response.iter_text():
                yield from (line + "\n" for line in lines.feed(chunk) if line)
            yield from (line + "\n" for line in lines.end())

    def import_agent(self, lines: Iterable[str] | str, *, as_id: str | None = None) -> Json:
        """Create the agent a portable file holds (its lines, or its whole text); ``as_id``
        imports it under another id. The reply's ``replayed`` is true for a file imported before."""
        return decode(self._http.post(**_import(lines, as_id)), ())


class AsyncPortableOperations:
    _http: httpx.AsyncClient

    async def export_agent(self, agent_id: str, *, vectors: bool = False) -> AsyncIterator[str]:
        """As :meth:`PortableOperations.export_agent`: ``async for line in client.export_agent(a)``."""
        async with self._http.stream("GET", **_export(agent_id, vectors)) as response:
            if not response.is_success:
                await response.aread()
                raise error_from(response)
            lines = Lines()
            async for chunk in response.aiter_text():
                for line in lines.feed(chunk):
                    if line:
                        yield line + "\n"
            for line in lines.end():
                yield line + "\n"

    async def import_agent(self, lines: Iterable[str] | str, *, as_id: str | None = None) -> Json:
        return decode(await self._http.post(**_import(lines, as_id)), ())
