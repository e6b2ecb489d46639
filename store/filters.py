"""Archival post-filters: parsing and matching (pure).

``filters`` of :meth:`MemoryStore.search_archival` is a mapping of equality conditions, all of
which must hold:

* ``doc_id``, ``source``, ``model_id`` compare with the chunk's own fields;
* ``include_stale`` (bool, default False) keeps chunks whose ``valid_until`` has passed, which
  are otherwise skipped;
* any other key compares with ``chunk.metadata[key]`` (a missing key never matches).

Both adapters apply them after the vector search: the embedded adapter with
:meth:`ArchivalFilter.matches` on hydrated candidates, the ArangoDB adapter as AQL ``FILTER``s
in the subquery around ``APPROX_NEAR`` (``store/arango/aql/``), which must mean the same.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vcm.errors import ValidationError
from vcm.store.types import ArchivalChunk

CHUNK_FIELDS = ("doc_id", "source", "model_id")
INCLUDE_STALE = "include_stale"


@dataclass(frozen=True)
class ArchivalFilter:
    fields: Mapping[str, Any] = field(default_factory=dict)
    metadata: Mapping[str, Any] = field(default_factory=dict)
    include_stale: bool = False

    def canonical(self) -> list[Any]:
        """JSON-ready form, for cursor fingerprints."""
        return [sorted(self.fields.items()), sorted(self.metadata.items()), self.include_stale]

    def matches(self, chunk: ArchivalChunk, now: float) -> bool:
        if not self.include_stale and chunk.valid_until is not None and chunk.valid_until < now:
            return False
        for name, wanted in self.fields.items():
            if getattr(chunk, name) != wanted:
                return False
        for key, wanted in self.metadata.items():
            if key not in chunk.metadata or chunk.metadata[key] != wanted:
                return False
        return True


def parse_filters(filters: Mapping[str, Any] | None) -> ArchivalFilter:
    if filters is None:
        return ArchivalFilter()
    if not isinstance(filters, Mapping):
        raise ValidationError("filters must be a mapping of field name to value")
    chunk_fields: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    include_stale = False
    for key, value in filters.items():
        if not isinstance(key, str) or not key:
            raise ValidationError("filter keys must be non-empty strings", key=repr(key))
        if key == INCLUDE_STALE:
            if not isinstance(value, bool):
                raise ValidationError("filter include_stale must be true or false")
            include_stale = value
            continue
        _check_json_value(key, value)
        (chunk_fields if key in CHUNK_FIELDS else metadata)[key] = value
    return ArchivalFilter(chunk_fields, metadata, include_stale)


def _check_json_value(key: str, value: Any) -> None:
    """A value both backends compare the same way: JSON scalars, lists and string-keyed objects.

    Stored metadata comes back from JSON, so a non-string object key could never match anyway.
    """
    if value is None or isinstance(value, bool | int | str):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValidationError(f"filter {key!r} must be a finite number", key=key)
        return
    if isinstance(value, list | tuple):
        for item in value:
            _check_json_value(key, item)
        return
    if isinstance(value, Mapping):
        for k, item in value.items():
            if not isinstance(k, str):
                raise ValidationError(f"filter {key!r} must be a JSON value", key=key)
            _check_json_value(key, item)
        return
    raise ValidationError(f"filter {key!r} must be a JSON value", key=key)
