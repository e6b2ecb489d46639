"""Opaque, tamper-evident cursor strings (pure: no I/O), the same format in both adapters.

A cursor is ``base64url(compact JSON) "." base64url(HMAC-SHA256(secret, JSON)[:16])``. The JSON
carries a version field ``v`` and whatever position the caller needs (a snapshot id and an
offset, or a keyset position). The MAC is keyed with a per-database secret, so a cursor that was
edited, truncated, or minted by another database fails to decode instead of silently paging
through someone else's snapshot. The embedded adapter keeps the secret in its ``meta`` table, the
ArangoDB adapter in ``vcm_meta``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from vcm.errors import ValidationError

CURSOR_VERSION = 1
_MAC_BYTES = 16
_MAX_CURSOR_CHARS = 4096


def encode_cursor(payload: dict[str, Any], secret: bytes) -> str:
    body = json.dumps({"v": CURSOR_VERSION, **payload}, separators=(",", ":"), sort_keys=True)
    raw = body.encode()
    return f"{_b64(raw)}.{_b64(_mac(raw, secret))}"


def decode_cursor(cursor: str, secret: bytes, *, kind: str) -> dict[str, Any]:
    """Return the payload of a cursor this store minted for a search of ``kind``."""
    if not isinstance(cursor, str) or not cursor or len(cursor) > _MAX_CURSOR_CHARS:
        raise bad_cursor("the cursor is empty or too long")
    body_part, sep, mac_part = cursor.partition(".")
    if not sep:
        raise bad_cursor("the cursor is not in the expected format")
    try:
        raw = _unb64(body_part)
        mac = _unb64(mac_part)
    except (binascii.Error, ValueError) as exc:
        raise bad_cursor("the cursor is not valid base64") from exc
    if not hmac.compare_digest(mac, _mac(raw, secret)):
        raise bad_cursor("the cursor was not issued by this store or was modified")
    try:
        payload = json.loads(raw)
    except ValueError as exc:  # unreachable for cursors we minted; kept for safety
        raise bad_cursor("the cursor body is not JSON") from exc
    if not isinstance(payload, dict) or payload.get("v") != CURSOR_VERSION:
        raise bad_cursor("the cursor has an unsupported version; rerun the search")
    if payload.get("k") != kind:
        raise bad_cursor(f"the cursor belongs to a different operation, not {kind}")
    return payload


def fingerprint(*parts: Any) -> str:
    """Stable digest of search parameters, to refuse a cursor replayed with another query."""
    blob = json.dumps(parts, separators=(",", ":"), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def left_out(message_ids: Collection[str]) -> list[list[str]]:
    """A search's excluded message ids as a part of its :func:`fingerprint` (a cursor continues
    the same exclusion); nothing without any, so other searches' fingerprints stay as they were."""
    return [sorted(set(message_ids))] if message_ids else []


def bad_cursor(reason: str) -> ValidationError:
    return ValidationError(f"invalid cursor: {reason}; start the search again without one")


def _mac(raw: bytes, secret: bytes) -> bytes:
    return hmac.new(secret, raw, hashlib.sha256).digest()[:_MAC_BYTES]


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def vector_digest(vector: Sequence[float] | npt.NDArray[Any]) -> str:
    """Digest of a query vector for a cursor fingerprint, as the indexes see it (float32)."""
    return hashlib.sha256(np.asarray(vector, dtype="<f4").tobytes()).hexdigest()
