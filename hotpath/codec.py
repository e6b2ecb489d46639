"""How the hot state talks to Redis and its Lua scripts: canonical JSON, request fingerprints,
the scripts' ``[status, body]`` replies turned into results or coded errors, and the token check
that reads share with the Lua token guard."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping, Sequence
from typing import Any

from vcm.errors import Unauthorized, error_class


def fingerprint(payload: Mapping[str, Any]) -> str:
    canonical = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def num(value: float) -> str:
    return repr(round(value, 6))


def as_str(value: bytes | str | None) -> str:
    """A reply of the client (made with ``decode_responses=True``) as ``str``; bytes only reach here
    from a client made without it, which the typing of redis-py cannot rule out."""
    if value is None:
        return ""
    return value.decode("utf-8") if isinstance(value, bytes) else value


def entry_id(entry: bytes | str) -> str:
    """The message id of a FIFO entry (``<tokens>:<pinned>:<id>``, see :mod:`vcm.hotpath.keys`)."""
    return as_str(entry).split(":", 2)[2]


def require_token(stored: bytes | str | None, token_sha256: str) -> None:
    """UNAUTHORIZED unless ``stored`` (an agent's token digest as Redis keeps it) is ``token_sha256``."""
    if not hmac.compare_digest(as_str(stored).encode(), token_sha256.encode()):
        raise Unauthorized("invalid bearer token")


def reply(raw: Sequence[str]) -> tuple[dict[str, Any], bool]:
    """A script's result and whether it was a replay; a coded error body raises its error class."""
    status, body = raw[0], raw[1]
    data = json.loads(body)
    if status == "error":
        code = data.pop("code")
        message = data.pop("message")
        raise error_class(code)(message, **data)
    return data, status == "replayed"
