"""The request the client SDK sends, apart from the clients that send it: :class:`Call` is built
once by an operation (:mod:`vcm.client`) or a local-cache flow (:mod:`vcm.sync`) and sent by the
sync or the async client. Imports nothing from vcm."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote


@dataclass(frozen=True)
class Call:
    """One request, built once and sent by the sync or the async client."""

    method: str
    path: str
    params: Mapping[str, Any] | None = None
    json: Any = None
    headers: Mapping[str, str] | None = None
    ok: tuple[int, ...] = ()  # statuses besides 2xx whose body is a result (503 from /healthz)


def seg(value: str) -> str:
    """One path segment, quoted."""
    return quote(value, safe="")


__all__ = ["Call", "seg"]
