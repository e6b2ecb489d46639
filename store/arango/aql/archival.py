"""Archival memory: the filtered ANN and exact searches, documents and their chunks, vector spaces."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vcm.errors import ValidationError
from vcm.store.arango import names
from vcm.store.arango.aql.common import (
    SAFE_KEY,
    AqlQuery,
    vector_attribute,
)
from vcm.store.filters import CHUNK_FIELDS, ArchivalFilter
from vcm.store.types import Metric


def _archival_filters(
    var: str, flt: ArchivalFilter, embedding_version: str | None, now: float
) -> tuple[list[str], dict[str, Any]]:
    lines = [f"FILTER {var}.agent_id == @agent_id"]
    bind: dict[str, Any] = {}
    if embedding_version is not None:
        lines.append(f"FILTER {var}.embedding_version == @embedding_version")
        bind["embedding_version"] = embedding_version
    for i, (name, value) in enumerate(sorted(flt.fields.items())):
        if name not in CHUNK_FIELDS:  # parse_filters() guarantees this; defence only
            raise ValidationError("unknown chunk field", field=name)
        lines.append(f"FILTER {var}.{name} == @fv{i}")
        bind[f"fv{i}"] = value
    for i, (key, value) in enumerate(sorted(flt.metadata.items())):
        if not SAFE_KEY.match(key):
            raise ValidationError("invalid metadata key", key=key)
        lines.append(f"FILTER HAS({var}.metadata, @mk{i}) AND {var}.metadata[@mk{i}] == @mv{i}")
        bind[f"mk{i}"] = key
        bind[f"mv{i}"] = value
    if not flt.include_stale:
        lines.append(f"FILTER {var}.valid_until == null OR {var}.valid_until >= @now")
        bind["now"] = now
    return lines, bind


def archival_ann(
    agent_id: str,
    vector: Sequence[float],
    *,
    metric: Metric,
    dimension: int,
    fetch: int,
    wanted: int,
    n_probe: int,
    filters: ArchivalFilter,
    embedding_version: str | None,
    now: float,
) -> AqlQuery:
    """Approximate top-k through the vector index, post-filtered.

    The inner subquery is exactly ``FOR / LET score = APPROX_NEAR_* / SORT / LIMIT / RETURN``
    so the optimizer can apply ``use-vector-index`` on every 3.12.x; it over-fetches
    ``fetch`` candidates across all agents, and the outer loop keeps the caller's
    (``wanted``). Survivors are re-scored exactly (``COSINE_SIMILARITY``/``L2_DISTANCE``), so
    scores mean the same with and without the index (and as in the embedded adapter) whatever
    distance form the index reports. Returns one row ``{candidates, hits: [{key, score}]}``:
    when ``candidates`` equals ``fetch`` and ``hits`` is short, the caller retries with a
    larger ``fetch``.
    """
    attr = vector_attribute(metric, dimension)
    func, order = ("APPROX_NEAR_COSINE", "DESC") if metric == "cosine" else ("APPROX_NEAR_L2", "ASC")
    exact = "COSINE_SIMILARITY" if metric == "cosine" else "L2_DISTANCE"
    lines, bind = _archival_filters("c", filters, embedding_version, now)
    outer = "\n  ".join(lines)
    text = f"""LET cand = (
  FOR d IN {names.ARCHIVAL}
    LET score = {func}(d.{attr}, @vector, {{ nProbe: @n_probe }})
    SORT score {order}
    LIMIT @fetch
    RETURN d
)
LET hits = (
  FOR c IN cand
  {outer}
  LET score = {exact}(c.{attr}, @vector)
  SORT score {order}, c._key ASC
  LIMIT @wanted
  RETURN {{ key: c._key, score: score }}
)
RETURN {{ candidates: LENGTH(cand), hits: hits }}"""
    bind.update(
        {
            "agent_id": agent_id,
            "vector": [float(x) for x in vector],
            "n_probe": n_probe,
            "fetch": fetch,
            "wanted": wanted,
        }
    )
    return AqlQuery(text, bind)


def archival_exact(
    agent_id: str,
    vector: Sequence[float],
    *,
    metric: Metric,
    dimension: int,
    wanted: int,
    filters: ArchivalFilter,
    embedding_version: str | None,
    now: float,
) -> AqlQuery:
    """Exact top-k, used until the vector index exists (and as the last resort of a post-filter
    that finds too few). No vector index is involved, so FILTERs may sit anywhere; the agent
    filter uses the persistent index on ``(agent_id, doc_id, chunk_index)``."""
    attr = vector_attribute(metric, dimension)
    func, order = ("COSINE_SIMILARITY", "DESC") if metric == "cosine" else ("L2_DISTANCE", "ASC")
    lines, bind = _archival_filters("d", filters, embedding_version, now)
    filters_text = "\n  ".join(lines)
    text = f"""FOR d IN {names.ARCHIVAL}
  {filters_text}
  FILTER d.{attr} != null
  LET score = {func}(d.{attr}, @vector)
  SORT score {order}, d._key ASC
  LIMIT @wanted
  RETURN {{ key: d._key, score: score }}"""
    bind.update({"agent_id": agent_id, "vector": [float(x) for x in vector], "wanted": wanted})
    return AqlQuery(text, bind)


def archival_document(agent_id: str, doc_id: str) -> AqlQuery:
    text = (
        f"FOR d IN {names.ARCHIVAL}\n"
        "  FILTER d.agent_id == @agent_id AND d.doc_id == @doc_id\n"
        "  SORT d.embedding_version ASC, d.chunk_index ASC\n"
        "  RETURN d"
    )
    return AqlQuery(text, {"agent_id": agent_id, "doc_id": doc_id})


def document_chunks(agent_id: str, doc_id: str) -> AqlQuery:
    text = f"FOR d IN {names.ARCHIVAL}\n  FILTER d.agent_id == @agent_id AND d.doc_id == @doc_id\n  RETURN d._id"
    return AqlQuery(text, {"agent_id": agent_id, "doc_id": doc_id})


def count_vectors(metric: Metric, dimension: int) -> AqlQuery:
    """How many documents carry vectors of one space (the vector index's training set)."""
    attr = vector_attribute(metric, dimension)
    text = f"FOR d IN {names.ARCHIVAL}\n  FILTER d.{attr} != null\n  COLLECT WITH COUNT INTO n\n  RETURN n"
    return AqlQuery(text, {})


def vector_spaces() -> AqlQuery:
    """The registered vector spaces (metric, dimension, embedding_version)."""
    text = f'FOR m IN {names.META}\n  FILTER m.kind == "vector_space"\n  SORT m.metric, m.embedding_version\n  RETURN m'
    return AqlQuery(text, {})
