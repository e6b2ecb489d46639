"""Snapshot payloads (seed 001 §3.3): an agent's state as compressed JSON with a SHA-256.

Pure: no I/O. The checksum covers the compressed bytes as stored, so a flipped bit anywhere is
refused before anything is decompressed or restored.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Mapping
from typing import Any

from vcm.errors import SnapshotCorrupt

FORMAT = 1
KINDS = ("manual", "periodic", "pre_upgrade", "pre_restore")


def encode(state: Mapping[str, Any]) -> tuple[bytes, str, int]:
    """(payload, its SHA-256 hex, bytes of the uncompressed JSON)."""
    raw = json.dumps({"format": FORMAT, **state}, sort_keys=True, separators=(",", ":")).encode("utf-8")
    payload = zlib.compress(raw, 6)
    return payload, hashlib.sha256(payload).hexdigest(), len(raw)


def decode(payload: bytes, sha256: str) -> dict[str, Any]:
    """The state a payload holds; SnapshotCorrupt when the checksum or the contents are off."""
    if hashlib.sha256(payload).hexdigest() != sha256:
        raise SnapshotCorrupt("the snapshot does not match its SHA-256 checksum; nothing was restored")
    try:
        state = json.loads(zlib.decompress(payload))
    except (zlib.error, ValueError) as exc:
        raise SnapshotCorrupt(f"the snapshot cannot be read ({exc}); nothing was restored") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise SnapshotCorrupt("the snapshot has an unknown format; nothing was restored")
    return state
