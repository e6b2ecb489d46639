"""Requests and replies, shared by the sync and the async client: a call's httpx arguments, a
reply's JSON or the :mod:`vcm.errors` exception it stands for, and what both clients' operations
send through (:class:`Sender`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Generic, TypeVar

import httpx

from vcm.errors import ErrorCode, RevConflict, VcmError, from_payload
from vcm.sync.changes import SyncResult
from vcm.sync.flows import Flow
from vcm.sync.replica import Replica
from vcm.wire import Call

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


def decode(response: httpx.Response, ok: Sequence[int]) -> Json:
    if response.status_code not in ok and not response.is_success:
        raise error_from(response)
    data = response.json()
    if not isinstance(data, dict):
        bad = VcmError("the reply is not a JSON object")
        bad.code, bad.status = "BAD_REPLY", response.status_code
        raise bad
    return data


def idem(key: str | None) -> dict[str, str]:
    return {"Idempotency-Key": key} if key is not None else {}


def clean(params: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None}


def http_kwargs(call: Call) -> dict[str, Any]:
    return {
        "params": dict(call.params) if call.params else None,
        "json": call.json,
        "headers": dict(call.headers) if call.headers else None,
    }


def rejected_error(result: SyncResult) -> VcmError:
    first = result.rejected[0]
    if len(result.rejected) == 1:
        return first
    return RevConflict(
        f"{len(result.rejected)} pending changes were refused: {first.message}",
        rejected=[e.to_dict() for e in result.rejected],
    )


def finished(job: Json) -> Json:
    if job["status"] == "failed":
        raise from_payload(job.get("error") or {"code": "INTERNAL_ERROR", "message": "ingestion failed"})
    if job["status"] == "cancelled":  # its agent was reset before the chunks were stored
        raise from_payload(job.get("error") or {"code": "CONFLICT", "message": "ingestion cancelled"})
    return job


class Sender(Generic[R]):
    """What the operations need of a client: send one call, drive one local-cache flow."""

    # The local cache and sync (``cache=CacheConfig(...)``); None: every call goes to the server.
    _replica: Replica | None = None

    def _send(self, call: Call) -> R:
        raise NotImplementedError

    def _run(self, flow: Flow[Json]) -> R:
        """Drive a flow of the local cache (:mod:`vcm.sync.replica`) with this client."""
        raise NotImplementedError
