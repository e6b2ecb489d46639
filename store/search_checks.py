"""Argument checks of vector spaces, chunks and searches (pure), the same for both adapters.

Split from :mod:`vcm.store.validation` (the port's other checks), with the same rule: bad input
raises :class:`~vcm.errors.ValidationError` before anything is written or sent. Checks that depend
on stored state (a vector space's dimension) take that state as an argument.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from vcm.errors import ValidationError
from vcm.store.filters import ArchivalFilter, parse_filters
from vcm.store.types import ArchivalChunk
from vcm.store.validation import METRICS, finite, identifier, json_mapping, limit, non_negative_int, text


def metric(value: Any) -> str:
    if value not in METRICS:
        raise ValidationError(f"metric must be one of {', '.join(METRICS)}", field="metric")
    return str(value)


def vector(name: str, values: Any, *, metric_name: str) -> npt.NDArray[np.float64]:
    """A finite, non-empty, flat vector that float32 can hold (non-zero in float32 for cosine).

    Both vector indexes (FAISS here, FAISS inside ArangoDB) compute in float32, so that is the
    range that counts. The values come back as given (float64): the embedded adapter stores
    them as float32, the ArangoDB adapter as JSON numbers.
    """
    if isinstance(values, str | bytes):
        raise ValidationError(f"{name} must be a sequence of numbers", field=name)
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"{name} must be a sequence of numbers", field=name) from exc
    if array.ndim != 1 or array.size == 0:
        raise ValidationError(f"{name} must be a non-empty flat vector", field=name)
    as32 = array.astype(np.float32)
    # One pass on the hot path (bulk ingest): NaN/inf survive the cast, overflow becomes inf.
    if not np.isfinite(as32).all():
        if not np.isfinite(array).all():
            raise ValidationError(f"{name} contains NaN or infinite values", field=name)
        raise ValidationError(f"{name} overflows float32", field=name)
    if metric_name == "cosine" and not as32.any():
        raise ValidationError(f"{name} is all zeros; cosine needs a direction", field=name)
    return array


def chunk(c: Any) -> tuple[ArchivalChunk, npt.NDArray[np.float64]]:
    if not isinstance(c, ArchivalChunk):
        raise ValidationError("chunks must be ArchivalChunk instances")
    identifier("agent_id", c.agent_id)
    identifier("doc_id", c.doc_id)
    identifier("embedding_version", c.embedding_version)
    identifier("model_id", c.model_id)
    non_negative_int("chunk_index", c.chunk_index)
    non_negative_int("char_start", c.char_start)
    non_negative_int("char_end", c.char_end)
    if c.char_end < c.char_start:
        raise ValidationError("char_end must not be before char_start", doc_id=c.doc_id)
    text("text", c.text)
    text("source", c.source)
    metric(c.metric)
    finite("created_at", c.created_at)
    finite("valid_until", c.valid_until, optional=True)
    json_mapping("metadata", c.metadata)
    return c, vector("embedding", c.embedding, metric_name=c.metric)


# --- whole operations -----------------------------------------------------------------------------
def recall_search(agent_id: Any, query: Any, limit_: Any, since: Any, until: Any) -> tuple[float | None, float | None]:
    """Arguments of ``search_recall``; returns the time window (``since`` <= t < ``until``)."""
    identifier("agent_id", agent_id)
    text("query", query)
    if not query.strip():
        raise ValidationError("query must contain at least one word", field="query")
    limit("limit", limit_)
    start = finite("since", since, optional=True)
    end = finite("until", until, optional=True)
    if start is not None and end is not None and start > end:
        raise ValidationError("since must not be after until")
    return start, end


CheckedChunk = tuple[ArchivalChunk, npt.NDArray[np.float64]]
Space = tuple[str, str]  # (metric, embedding_version): one vector space, one dimension


def chunk_batch(chunks: Any) -> tuple[list[CheckedChunk], dict[Space, int]]:
    """Arguments of ``ingest_archival``: each chunk checked, and the dimension of each space in
    the batch (one space may not mix dimensions within a call)."""
    if isinstance(chunks, str | bytes) or not isinstance(chunks, Sequence):
        raise ValidationError("chunks must be a sequence of ArchivalChunk")
    checked = [chunk(c) for c in chunks]
    dims: dict[Space, int] = {}
    for c, vec in checked:
        space = (c.metric, c.embedding_version)
        if dims.setdefault(space, len(vec)) != len(vec):
            raise ValidationError(
                f"embedding_version {c.embedding_version!r} ({c.metric}) has vectors of "
                f"two dimensions in one call: {dims[space]} and {len(vec)}"
            )
    return checked, dims


def space_dimension(metric_name: str, version: str, dimension: int, known: int | None) -> None:
    """A space keeps the dimension of its first vectors: another model needs another version."""
    if known is not None and known != dimension:
        raise ValidationError(
            f"embedding_version {version!r} ({metric_name}) holds {known}-d vectors, "
            f"not {dimension}-d; use a new embedding_version for another model",
            expected_dimension=known,
            dimension=dimension,
        )


class _Dimensioned(Protocol):
    @property
    def dimension(self) -> int: ...


S = TypeVar("S", bound=_Dimensioned)


def matching_spaces(known: Sequence[S], dimension: int, metric_name: str, version: str | None) -> list[S]:
    """The spaces (already narrowed to the metric and version asked) a query vector can search.

    None known: nothing ingested yet, an empty answer. Some known but none of the query's
    dimension: a wrong query vector, refused.
    """
    matching = [s for s in known if s.dimension == dimension]
    if known and not matching:
        dims = sorted({s.dimension for s in known})
        raise ValidationError(
            f"query vector has {dimension} dimensions; the {metric_name} index"
            f"{'' if version is None else f' for {version!r}'} holds {dims}",
            dimension=dimension,
            expected_dimensions=dims,
        )
    return matching


@dataclass(frozen=True)
class ArchivalQuery:
    vector: npt.NDArray[np.float64]
    n_probe: int | None  # None: the adapter's default
    filters: ArchivalFilter


def archival_search(
    agent_id: Any,
    query: Any,
    k: Any,
    *,
    filters: Any,
    n_probe: Any,
    metric_name: Any,
    embedding_version: Any,
    parse: Callable[[Any], ArchivalFilter] = parse_filters,
) -> ArchivalQuery:
    """Arguments of ``search_archival``; ``parse`` lets an adapter hold filter keys to more."""
    identifier("agent_id", agent_id)
    limit("k", k)
    metric(metric_name)
    probe = None if n_probe is None else limit("n_probe", n_probe, 1 << 20)
    if embedding_version is not None:
        identifier("embedding_version", embedding_version)
    parsed = parse(filters)
    return ArchivalQuery(vector("vector", query, metric_name=metric_name), probe, parsed)
