"""Ingestion's input checks (pure): identifiers, metadata, a document's text (empty, NUL, size),
decoding bytes (binary, invalid UTF-8), JSON documents as text, and content-derived document ids."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from typing import Any

from vcm import jsontext
from vcm.errors import ValidationError

MAX_ID_CHARS = 512  # the store's limit on identifiers


RESERVED_METADATA_KEY = "vcm"  # chunk metadata written by ingestion itself lives under this key


_BINARY_SNIFF_BYTES = 8192


def document_id(relative_path: str, data: bytes) -> str:
    """``<relative path>@<content hash>``: a changed file is a new document, an unchanged one is skipped."""
    digest = hashlib.sha256(data).hexdigest()[:16]
    name = relative_path[: MAX_ID_CHARS - len(digest) - 1]
    return f"{name}@{digest}"


def identifier(name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"{name} must be a non-empty string", field=name)
    if len(value) > MAX_ID_CHARS:
        raise ValidationError(f"{name} is longer than {MAX_ID_CHARS} characters", field=name)
    return value


def checked_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """Caller metadata, checked before the model runs (the store would refuse it only after)."""
    meta = dict(metadata or {})
    if RESERVED_METADATA_KEY in meta:
        raise ValidationError(f"metadata key {RESERVED_METADATA_KEY!r} is reserved for ingestion", field="metadata")
    try:
        json.dumps(meta, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"metadata must be JSON-serialisable: {exc}", field="metadata") from None
    return meta


def check_text(doc_id: str, text: object, max_bytes: int) -> str:
    """The document text, or ValidationError saying what is wrong with it."""
    if not isinstance(text, str):
        raise ValidationError(f"document {doc_id!r}: text must be a string", doc_id=doc_id)
    if not text.strip():
        raise ValidationError(f"document {doc_id!r} is empty (no text to embed)", doc_id=doc_id)
    if "\x00" in text:
        raise ValidationError(f"document {doc_id!r} contains NUL characters: binary content?", doc_id=doc_id)
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ValidationError(
            f"document {doc_id!r} is not valid Unicode (lone surrogate at character {exc.start})", doc_id=doc_id
        ) from None
    if size > max_bytes:
        raise ValidationError(
            f"document {doc_id!r} is {size} bytes, over ingest.max_document_bytes ({max_bytes})",
            doc_id=doc_id,
            bytes=size,
        )
    return text


def decode_document(name: str, data: bytes) -> str:
    """File bytes as text: UTF-8 (a BOM is dropped); binary or undecodable bytes raise ValidationError."""
    if b"\x00" in data[:_BINARY_SNIFF_BYTES]:
        raise ValidationError(f"{name} looks binary (NUL bytes); only UTF-8 text can be ingested", path=name)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValidationError(
            f"{name} is not UTF-8 (invalid byte at offset {exc.start}); convert it to UTF-8 first",
            path=name,
            byte_offset=exc.start,
        ) from None


def json_text(name: str, text: str) -> str:
    """The string values of a JSON document, one per line, in document order. A document nested
    deeper than Python's recursion limit (about a thousand levels) is refused like invalid JSON
    (:mod:`vcm.jsontext`): the decoder's RecursionError failed the whole batch it was in."""
    try:
        value = jsontext.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationError(f"{name} is not valid JSON: {exc}", path=name) from None
    out: list[str] = []
    # Depth-first with a stack of iterators, not recursion: a document the decoder read may still
    # be deeper than the frames left to a walk called from a worker's deep stack.
    stack: list[Iterator[object]] = [iter((value,))]
    while stack:
        node = next(stack[-1], _END)
        if node is _END:
            stack.pop()
        elif isinstance(node, str):
            out.append(node)
        elif isinstance(node, Mapping):
            stack.append(iter(node.values()))
        elif isinstance(node, list):
            stack.append(iter(node))
    return "\n".join(out)


_END = object()
