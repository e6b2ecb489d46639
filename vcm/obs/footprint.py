"""Diff footprints of audited writes: small, content-free summaries of what a write changed. Pure.

An audit row must say *what* changed without becoming a second copy of the user's data, so a
footprint holds only counts, revisions and SHA-256 digests, never text. ``content_sha256`` lets an
auditor prove which content was written (given the content) without the log holding it.

Block edits are measured by trimming the common prefix and suffix of the old and new text: the
middle that differs is ``chars_removed`` from the old and ``chars_added`` in the new. That is
O(n), exact for the usual single-span edit (append, insert, replace one part) and an upper bound
for scattered edits. ``difflib.SequenceMatcher`` would be exact in more cases but is quadratic in
the worst case, and a block may hold hundreds of thousands of characters.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

Footprint = dict[str, Any]


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:  # the usual append-only edit: one C-speed comparison
        return n
    lo, hi = 0, n  # binary search on slice equality: O(n log n) in C, no per-character Python loop
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def changed_span(before: str, after: str) -> tuple[int, int]:
    """(chars removed from ``before``, chars added in ``after``) around their common ends."""
    prefix = _common_prefix(before, after)
    rest_before, rest_after = before[prefix:], after[prefix:]
    suffix = _common_prefix(rest_before[::-1], rest_after[::-1])
    return len(rest_before) - suffix, len(rest_after) - suffix


def append(content: str, tokens: int, *, role: str, pinned: bool = False) -> Footprint:
    """A message appended to the FIFO: the context grew by one message and ``tokens``."""
    return {
        "op": "append",
        "role": role,
        "tokens": tokens,
        "fifo_len": 1,
        "pinned": pinned,
        "chars": len(content),
        "content_sha256": sha256(content),
    }


def recall_note(content: str, tokens: int, *, role: str) -> Footprint:
    """A note written straight to recall: the context did not change."""
    return {
        "op": "recall_write",
        "role": role,
        "tokens": tokens,
        "chars": len(content),
        "content_sha256": sha256(content),
    }


def block(
    before: str | None,
    after: str | None,
    *,
    before_rev: str | None,
    after_rev: str | None,
    tokens_before: int,
    tokens_after: int,
) -> Footprint:
    """A working block created (``before`` None), edited, or deleted (``after`` None)."""
    old, new = before or "", after or ""
    removed, added = changed_span(old, new)
    op = "block_create" if before is None else "block_delete" if after is None else "block_edit"
    return {
        "op": op,
        "before_rev": before_rev,
        "after_rev": after_rev,
        "tokens_before": tokens_before,
        "tokens_after": tokens_after,
        "tokens": tokens_after - tokens_before,
        "chars_added": added,
        "chars_removed": removed,
        "sha_before": sha256(old) if before is not None else None,
        "sha_after": sha256(new) if after is not None else None,
    }


def eviction_begun(count: int, tokens: int, total_after: int | None) -> Footprint:
    """Messages moved from the FIFO into a pending eviction batch (the hot half of an eviction).
    ``total_after`` is unknown (None) to a writer that did not begin the batch itself."""
    out: Footprint = {"op": "evict_begin", "fifo_len": -count, "tokens": -tokens, "messages": count}
    return out if total_after is None else out | {"total_after": total_after}


def eviction_committed(
    message_tokens: Sequence[int], *, summary_rev_before: str | None, summary_tokens_after: int, summary_chars: int
) -> Footprint:
    """Messages committed to recall and the summary replaced (the cold half). The summary's new
    rev is known only inside the store transaction; the adapters add it as ``summary_rev``."""
    return {
        "op": "evict_commit",
        "messages": len(message_tokens),
        "tokens_moved": sum(message_tokens),
        "summary_rev_before": summary_rev_before,
        "summary_tokens_after": summary_tokens_after,
        "summary_chars_after": summary_chars,
    }


def ingest(text: str, result: Mapping[str, Any]) -> Footprint:
    """An archival document ingested; ``result`` is the ingest's own count report (no text)."""
    counts = {k: v for k, v in result.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    return {"op": "archival_ingest", "chars": len(text), "content_sha256": sha256(text), **counts}


def expiry(removed: int, now: float) -> Footprint:
    """Recall messages deleted by the retention sweep."""
    return {"op": "expire", "messages": -removed, "before": now}
