"""Coded JSON errors for the HTTP API, and the request-size guard.

Every error response has the body ``{"error": {"code": ..., "message": ..., ...details}}``.
The status follows the code (each :mod:`vcm.errors` class's ``http_status``); FastAPI's own
request-validation errors and Starlette's HTTP errors (bad JSON, unknown route, wrong method) are
rewritten into the same shape, so a client needs one decoder. Only a genuine bug reaches the catch-all: a coded 500
(``INTERNAL_ERROR``) whose body says nothing about the failure; the traceback goes to the log.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

import redis
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from vcm.errors import STATUS, ErrorCode, VcmError

log = logging.getLogger(__name__)

INTERNAL_ERROR = ErrorCode.INTERNAL_ERROR


def _clean(value: Any) -> Any:
    """JSON-safe copy: lone surrogates (from hostile input echoed in a message) become escapes,
    non-finite floats become null; anything else unknown becomes its str()."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, bool | int) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {_clean(str(k)): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return _clean(str(value))


def error_response(code: str, message: str, status: int | None = None, **details: Any) -> Response:
    extra = {k: v for k, v in details.items() if k not in ("code", "message")}
    body = _clean({"error": {"code": code, "message": message, **extra}})
    headers: dict[str, str] = {}
    status = status or STATUS.get(code, 500)
    if code == ErrorCode.RATE_LIMITED:
        retry = details.get("retry_after_s", details.get("retry_after", 1))
        try:
            headers["Retry-After"] = str(max(1, math.ceil(float(retry))))
        except (TypeError, ValueError):
            headers["Retry-After"] = "1"
    elif code == ErrorCode.UNAUTHORIZED:
        headers["WWW-Authenticate"] = 'Bearer realm="vcm"'
    elif code == ErrorCode.STORE_UNAVAILABLE:
        headers["Retry-After"] = "1"
    content = json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return Response(content, status_code=status, media_type="application/json", headers=headers)


def coded(exc: VcmError) -> Response:
    return error_response(str(exc.code), exc.message, exc.status, **exc.details)


def _field(loc: Sequence[Any]) -> str:
    # ("body", "content") -> "content"; ("query", "limit") -> "limit"; ("body",) -> "body"
    parts = [str(p) for p in loc]
    if len(parts) > 1 and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    return ".".join(parts)


async def _on_vcm_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, VcmError)
    return coded(exc)


async def _on_request_validation(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    raw = list(exc.errors())
    if raw and raw[0].get("type") == "json_invalid":
        position = list(raw[0].get("loc", ("body", 0)))[-1]
        return error_response(
            ErrorCode.VALIDATION_ERROR, f"request body is not valid JSON (at character {position})", field="body"
        )
    # loc, msg and type only: the echoed input and ctx can be large, binary or secret.
    errors = [
        {
            "loc": list(err.get("loc", ())),
            "msg": str(err.get("msg", "")).removeprefix("Value error, "),
            "type": str(err.get("type", "")),
        }
        for err in raw
    ]
    first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
    field = _field(first["loc"])
    message = f"{field}: {first['msg']}" if field else str(first["msg"])
    return error_response(ErrorCode.VALIDATION_ERROR, message, field=field, errors=errors)


async def _on_http_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if isinstance(exc, _TooLarge):
        return error_response(ErrorCode.VALIDATION_ERROR, str(exc.detail), 413, field="body", limit=exc.limit)
    if exc.status_code == 404:
        return error_response(ErrorCode.NOT_FOUND, "no such route", 404)
    if exc.status_code == 405:
        response = error_response(ErrorCode.VALIDATION_ERROR, str(exc.detail), 405)
        if exc.headers and "Allow" in exc.headers:
            response.headers["Allow"] = exc.headers["Allow"]
        return response
    if isinstance(exc, _NotUtf8):
        return error_response(ErrorCode.VALIDATION_ERROR, str(exc.detail), field="body")
    if exc.status_code == 400:
        # FastAPI's "There was an error parsing the body"; the cause says what was wrong with it.
        return error_response(ErrorCode.VALIDATION_ERROR, _unparsable(exc.__cause__), field="body")
    if exc.status_code < 500:
        return error_response(ErrorCode.VALIDATION_ERROR, str(exc.detail), exc.status_code)
    log.error("HTTP %s raised inside the app: %s", exc.status_code, exc.detail)
    return error_response(INTERNAL_ERROR, "internal error", exc.status_code)


def _unparsable(cause: BaseException | None) -> str:
    if isinstance(cause, RecursionError):
        return "request body is nested too deeply to be read as JSON"
    if isinstance(cause, ValueError) and "digits" in str(cause):
        return "request body holds an integer too long to be read (over 4300 digits)"
    return "request body could not be read as UTF-8 JSON"


async def _on_redis_error(_: Request, exc: Exception) -> Response:
    log.warning("hot state unavailable: %s", type(exc).__name__)
    return error_response(ErrorCode.STORE_UNAVAILABLE, "the hot state (Redis) is unavailable; retry shortly")


async def _on_bug(request: Request, exc: Exception) -> Response:
    # The path only, never headers: they hold bearer tokens.
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(INTERNAL_ERROR, "internal error; the server log has the details")


def install(app: FastAPI) -> None:
    app.add_exception_handler(VcmError, _on_vcm_error)
    app.add_exception_handler(RequestValidationError, _on_request_validation)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
    app.add_exception_handler(redis.exceptions.ConnectionError, _on_redis_error)
    app.add_exception_handler(redis.exceptions.TimeoutError, _on_redis_error)
    app.add_exception_handler(Exception, _on_bug)


class BodyLimit:
    """Refuses request bodies above ``limit`` bytes with a coded 413, before they are buffered.

    Checks Content-Length first, then counts the chunks of a streamed (chunked) body as they come.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    too_big = int(value) > self.limit
                except ValueError:
                    too_big = False  # the server rejects a malformed length itself
                if too_big:
                    await self._refuse(scope, receive, send)
                    return
        seen = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                chunk = message.get("body", b"")
                if seen == 0 and _not_utf8_json(chunk):
                    raise _NotUtf8()
                seen += len(chunk)
                if seen > self.limit:
                    raise _TooLarge(self.limit)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except _TooLarge:
            if not started:
                await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(
            ErrorCode.VALIDATION_ERROR,
            f"request body is larger than {self.limit} bytes",
            413,
            field="body",
            limit=self.limit,
        )
        await response(scope, receive, send)


def _not_utf8_json(first: bytes) -> bool:
    """A body that starts with a byte order mark, or with the NUL bytes of UTF-16/32 text: JSON
    between systems is UTF-8 without a BOM (RFC 8259 §8.1), though Python's json would decode it."""
    if first.startswith((b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")):
        return True
    return b"\x00" in first[:4]


class _NotUtf8(StarletteHTTPException):
    def __init__(self) -> None:
        super().__init__(400, "request body must be UTF-8 JSON without a byte order mark")


class _TooLarge(StarletteHTTPException):
    # An HTTPException so that FastAPI's body reader re-raises it (it turns other exceptions from
    # `receive` into a 400) and the handler below renders it as a coded 413.
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body is larger than {limit} bytes")
        self.limit = limit
