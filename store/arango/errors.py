"""Translation of python-arango failures into :mod:`vcm.errors`.

The adapter lets nothing of python-arango escape: every call into the driver runs inside
:func:`translated`, which maps::

    DocumentRevisionError (HTTP 412)        -> RevConflict     (current rev if known)
    errorNum 1200 (write-write conflict)    -> RevConflict
    errorNum 1210 (unique constraint)       -> RevConflict     (callers that expect it
                                                                     for idempotency catch it first)
    errorNum 1202 (document not found)      -> NotFound
    HTTP 401 / 403                          -> StoreUnavailable  (credentials or grants)
    errorNum 1655 / HTTP 410 (trx gone),
    errorNum 32 (resource limit), HTTP 5xx,
    any other server error                  -> StoreUnavailable
    ArangoClientError, requests errors,
    OSError (ConnectionAbortedError after the
    driver's host retries)                  -> StoreUnavailable

:class:`ArangoConfigError` (``CONFIG_ERROR``) is raised by the startup guard and URL parsing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from arango.exceptions import (
    ArangoClientError,
    ArangoServerError,
    DocumentRevisionError,
)

from vcm.errors import (
    ErrorCode,
    NotFound,
    RevConflict,
    StoreUnavailable,
    VcmError,
)

# errorNum values (arango/errno.py; docs/reference/arangodb.md §3.1, §4.1)
CONFLICT = 1200
DOCUMENT_NOT_FOUND = 1202
DUPLICATE_NAME = 1207
DATABASE_NOT_FOUND = 1228
UNIQUE_CONSTRAINT_VIOLATED = 1210
RESOURCE_LIMIT = 32
QUERY_VECTOR_SEARCH_NOT_APPLIED = 1554
QUERY_VECTOR_INDEX_NOT_READY = 1555
TRANSACTION_NOT_FOUND = 1655
GRAPH_DUPLICATE = 1925


class ArangoConfigError(VcmError):
    """The deployment cannot serve vcm (version, startup options, URL); fix the setup."""

    code = ErrorCode.CONFIG_ERROR


def error_num(exc: BaseException) -> int | None:
    """ArangoDB's errorNum of a server error (python-arango falls back to the HTTP status)."""
    value = getattr(exc, "error_code", None)
    return value if isinstance(value, int) else None


def http_status(exc: BaseException) -> int | None:
    value = getattr(exc, "http_code", None)
    return value if isinstance(value, int) else None


def is_error(exc: BaseException, *nums: int) -> bool:
    return isinstance(exc, ArangoServerError) and error_num(exc) in nums


def _server_message(exc: BaseException) -> str:
    message = getattr(exc, "error_message", None) or str(exc)
    return str(message)


def translate(exc: BaseException, operation: str) -> VcmError:
    """The store error for a driver failure during ``operation`` (e.g. "put_core")."""
    if isinstance(exc, VcmError):
        return exc
    details: dict[str, Any] = {"operation": operation}
    if isinstance(exc, DocumentRevisionError) or (isinstance(exc, ArangoServerError) and http_status(exc) == 412):
        current = _current_rev(exc)
        return RevConflict(
            f"{operation}: the document changed since it was read; reload it and retry with its current rev",
            current_rev=current,
            **details,
        )
    if isinstance(exc, ArangoServerError):
        num, status = error_num(exc), http_status(exc)
        details.update(error_num=num, http_status=status)
        if num in (CONFLICT, UNIQUE_CONSTRAINT_VIOLATED):
            return RevConflict(
                f"{operation}: a concurrent write got there first ({_server_message(exc)}); reload and retry",
                current_rev=None,
                **details,
            )
        if num == DOCUMENT_NOT_FOUND:
            return NotFound(f"{operation}: not found", **details)
        if status in (401, 403):
            return StoreUnavailable(
                f"{operation}: ArangoDB refused the credentials or the user lacks access "
                f"({_server_message(exc)}); check the vcm users' grants on the database",
                **details,
            )
        return StoreUnavailable(f"{operation}: ArangoDB failed: {_server_message(exc)}", **details)
    if isinstance(exc, ArangoClientError):
        return StoreUnavailable(f"{operation}: ArangoDB client error: {exc}", **details)
    return StoreUnavailable(
        f"{operation}: cannot reach ArangoDB ({type(exc).__name__}: {exc}); "
        "check that the server is up and the URL is right",
        **details,
    )


def _current_rev(exc: BaseException) -> str | None:
    response = getattr(exc, "response", None)
    body = getattr(response, "body", None)
    if isinstance(body, dict):
        rev = body.get("_rev")
        if isinstance(rev, str):
            return rev
    return None


def is_driver_failure(exc: BaseException) -> bool:
    """Failures :func:`translate` turns into store errors (not programming errors)."""
    if isinstance(exc, ArangoServerError | ArangoClientError | OSError):
        return True
    try:
        import requests
    except ImportError:  # pragma: no cover - requests is a python-arango dependency
        return False
    return isinstance(exc, requests.RequestException)


@contextmanager
def translated(operation: str) -> Iterator[None]:
    try:
        yield
    except VcmError:
        raise
    except Exception as exc:
        if is_driver_failure(exc):
            raise translate(exc, operation) from exc
        raise
