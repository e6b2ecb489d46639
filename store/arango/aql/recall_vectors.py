"""Vector recall over messages: the vectors on message documents, and the exact, ANN and
filtered-ANN searches with the plan that picks one (docs/recall-scale.md).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal, NamedTuple

from vcm.errors import ValidationError
from vcm.store.arango import names
from vcm.store.arango.aql.common import (
    AqlQuery,
    time_window,
)

# A message's recall embedding lives on its document: ``recall_emb`` (unit vector) and
# ``recall_emb_version``. One version per message (the first write stays).
RECALL_VECTOR = "recall_emb"


RECALL_VERSION = "recall_emb_version"


def put_message_vectors(agent_id: str, items: Sequence[tuple[str, Sequence[float]]], version: str) -> AqlQuery:
    """Attach vectors to existing messages of the agent that have none of ``version``
    (idempotent: the first write of a version stays); a message keeps one vector, so one of a
    new version (a model change) replaces the old. ``items`` are (document key, unit vector).
    Returns one row per newly attached vector."""
    text = f"""FOR v IN @items
  LET d = DOCUMENT({names.MESSAGES}, v.key)
  FILTER d != null AND d.agent_id == @agent_id AND (d.{RECALL_VECTOR} == null OR d.{RECALL_VERSION} != @version)
  UPDATE d WITH {{ {RECALL_VECTOR}: v.vector, {RECALL_VERSION}: @version }} IN {names.MESSAGES}
  RETURN 1"""
    bind = {
        "items": [{"key": k, "vector": [float(x) for x in vec]} for k, vec in items],
        "agent_id": agent_id,
        "version": version,
    }
    return AqlQuery(text, bind)


def recall_positions(
    agent_id: str, keys: Sequence[str], version: str | None = None, *, authors: bool = False
) -> AqlQuery:
    """The conversation position (``seq``) of the agent's messages with these keys, for hybrid
    recall's neighbour spreading, and with a ``version``, whether each carries a recall vector of
    it (hybrid scores a missing one by the text score); with ``authors``, each one's author
    (``name``, null when none) for author anchoring. Rows ``{key, seq}`` plus ``embedded`` and
    ``author`` as asked; keys of other agents or gone are left out."""
    embedded = f", embedded: d.{RECALL_VERSION} == @version" if version is not None else ""
    author = ", author: d.name" if authors else ""
    text = f"""FOR id IN @ids
  LET d = DOCUMENT(id)
  FILTER d != null AND d.agent_id == @agent_id
  RETURN {{ key: d._key, seq: d.seq{embedded}{author} }}"""
    bind: dict[str, Any] = {"agent_id": agent_id, "ids": [f"{names.MESSAGES}/{k}" for k in keys]}
    if version is not None:
        bind["version"] = version
    return AqlQuery(text, bind)


def message_vector_keys(agent_id: str, keys: Sequence[str], version: str) -> AqlQuery:
    """Keys among ``keys`` of the agent's messages that carry a recall vector of ``version``."""
    text = f"""FOR d IN {names.MESSAGES}
  FILTER d._key IN @keys AND d.agent_id == @agent_id AND d.{RECALL_VERSION} == @version
  RETURN d._key"""
    return AqlQuery(text, {"keys": list(keys), "agent_id": agent_id, "version": version})


def recall_vector_versions(agent_id: str) -> AqlQuery:
    """The agent's message-vector versions, most used first, with their dimension."""
    text = f"""FOR d IN {names.MESSAGES}
  FILTER d.agent_id == @agent_id AND d.{RECALL_VERSION} != null
  COLLECT version = d.{RECALL_VERSION}, dimension = LENGTH(d.{RECALL_VECTOR}) WITH COUNT INTO n
  SORT n DESC, version ASC
  RETURN {{ version, dimension, n }}"""
    return AqlQuery(text, {"agent_id": agent_id})


def recall_vector_dimensions() -> AqlQuery:
    """How many messages carry a recall vector of each dimension (a collection scan: index
    maintenance only, never a query or a write)."""
    text = f"""FOR d IN {names.MESSAGES}
  FILTER d.{RECALL_VECTOR} != null
  COLLECT dimension = LENGTH(d.{RECALL_VECTOR}) WITH COUNT INTO n
  SORT dimension
  RETURN {{ dimension, n }}"""
    return AqlQuery(text, {})


def recall_vector_exact(
    agent_id: str,
    vector: Sequence[float],
    *,
    version: str,
    fetch: int,
    since: float | None = None,
    until: float | None = None,
) -> AqlQuery:
    """Exact cosine over the agent's message vectors of ``version``, best first, ties by age
    then ``_key`` (as BM25 recall). Rows ``{key, score}``."""
    if fetch < 1:
        raise ValidationError("fetch must be positive")
    _, scan_time, bind_time = time_window("d", since, until)
    text = f"""FOR d IN {names.MESSAGES}
  FILTER d.agent_id == @agent_id AND d.{RECALL_VERSION} == @version{scan_time}
  LET score = COSINE_SIMILARITY(d.{RECALL_VECTOR}, @vector)
  SORT score DESC, d.created_at ASC, d._key ASC
  LIMIT @fetch
  RETURN {{ key: d._key, score: score }}"""
    bind = {"agent_id": agent_id, "version": version, "vector": [float(x) for x in vector], "fetch": fetch, **bind_time}
    return AqlQuery(text, bind)


def recall_vector_ann(
    agent_id: str,
    vector: Sequence[float],
    *,
    version: str,
    fetch: int,
    wanted: int,
    n_probe: int,
    since: float | None = None,
    until: float | None = None,
) -> AqlQuery:
    """Approximate top-k through a vector index on ``messages.recall_emb``: the inner subquery
    is exactly ``FOR / LET APPROX_NEAR_COSINE / SORT / LIMIT / RETURN`` (no FILTER between FOR
    and LIMIT), the agent, version and time filters are applied in the outer loop and survivors
    re-scored exactly. Returns ``{candidates, hits}`` like :func:`archival_ann`."""
    if fetch < 1 or wanted < 1:
        raise ValidationError("fetch and wanted must be positive")
    _, scan_time, bind_time = time_window("c", since, until)
    text = f"""LET cand = (
  FOR d IN {names.MESSAGES}
    LET score = APPROX_NEAR_COSINE(d.{RECALL_VECTOR}, @vector, {{ nProbe: @n_probe }})
    SORT score DESC
    LIMIT @fetch
    RETURN d
)
LET hits = (
  FOR c IN cand
  FILTER c.agent_id == @agent_id AND c.{RECALL_VERSION} == @version{scan_time}
  LET score = COSINE_SIMILARITY(c.{RECALL_VECTOR}, @vector)
  SORT score DESC, c.created_at ASC, c._key ASC
  LIMIT @wanted
  RETURN {{ key: c._key, score: score }}
)
RETURN {{ candidates: LENGTH(cand), hits: hits }}"""
    bind = {
        "agent_id": agent_id,
        "version": version,
        "vector": [float(x) for x in vector],
        "fetch": fetch,
        "wanted": wanted,
        "n_probe": n_probe,
        **bind_time,
    }
    return AqlQuery(text, bind)


# Below this many vectors of the agent, exact cosine over its messages is used: it needs no
# index and is exact (its cost grows with the agent's count, which is small here).
RECALL_EXACT_BELOW = 10_000


# 3.12.4/3.12.5 (no pre-FILTER): the most candidates one over-fetch may ask the index for; an
# agent whose share of the collection is too small for the wanted depth within it is searched
# exactly instead (a global top-``fetch`` post-filtered by agent would return almost nothing).
RECALL_MAX_FETCH = 50_000


# Headroom over the expected number of the agent's vectors among the candidates.
RECALL_FETCH_MARGIN = 2.0


FILTERED_ANN_SINCE = (3, 12, 6)


class RecallVectorPlan(NamedTuple):
    """How the vector half of one recall search runs: ``form`` is ``"exact"``
    (:func:`recall_vector_exact`), ``"filtered"`` (:func:`recall_vector_ann_filtered`, 3.12.6+)
    or ``"overfetch"`` (:func:`recall_vector_ann`, 3.12.4+); ``fetch`` and ``n_probe`` are its
    bind values (0 for exact)."""

    form: Literal["exact", "filtered", "overfetch"]
    fetch: int
    n_probe: int


def server_version(text: str) -> tuple[int, int, int]:
    """``"3.12.5"`` or ``"3.12.6-1"`` as a comparable triple (missing parts 0)."""
    parts = re.findall(r"\d+", text.split("-")[0])[:3]
    if not parts:
        raise ValidationError(f"not a server version: {text!r}")
    nums = [int(p) for p in parts] + [0] * (3 - len(parts))
    return nums[0], nums[1], nums[2]


def recall_vector_plan(
    *,
    server: tuple[int, int, int],
    agent_vectors: int,
    total_vectors: int,
    wanted: int,
    n_lists: int | None,
    default_n_probe: int,
) -> RecallVectorPlan:
    """Pick the vector half's query for an agent with ``agent_vectors`` recall vectors among
    ``total_vectors`` in ``messages`` (``n_lists`` None: no trained index).

    * exact when there is no trained index or the agent is small (< ``RECALL_EXACT_BELOW``);
    * 3.12.6+: the agent/version FILTER inside the vector lookup. The lookup only scans the
      ``nProbe`` cells nearest the query and keeps the agent's vectors among them, so recall of
      the agent's nearest neighbours is that of unfiltered IVF at the same nProbe, but the cells
      must hold ``wanted`` of them: nProbe is raised to ``margin·wanted·nLists/agent_vectors``
      (the agent's vectors are spread over the cells like everyone's, to a first approximation);
    * 3.12.4/3.12.5: a global top-``fetch`` post-filtered by agent, with ``fetch =
      margin·wanted·total/agent`` (the expected survivors are ``fetch·share``) and nProbe large
      enough for the cells to hold ``fetch`` candidates; beyond ``RECALL_MAX_FETCH`` it falls back
      to exact search (correct; its cost is linear in the agent's count).
    """
    if wanted < 1 or agent_vectors < 0 or total_vectors < agent_vectors:
        raise ValidationError("wanted must be positive and the agent's vectors within the total")
    if n_lists is None or agent_vectors < RECALL_EXACT_BELOW:
        return RecallVectorPlan("exact", 0, 0)
    wanted = min(wanted, agent_vectors)
    if server >= FILTERED_ANN_SINCE:
        needed = -(-int(RECALL_FETCH_MARGIN * wanted * n_lists) // agent_vectors)
        return RecallVectorPlan("filtered", wanted, min(n_lists, max(default_n_probe, needed)))
    fetch = -(-int(RECALL_FETCH_MARGIN * wanted * total_vectors) // agent_vectors)
    if fetch > RECALL_MAX_FETCH:
        return RecallVectorPlan("exact", 0, 0)
    fetch = min(fetch, total_vectors)
    needed = -(-int(RECALL_FETCH_MARGIN * fetch * n_lists) // total_vectors)
    return RecallVectorPlan("overfetch", fetch, min(n_lists, max(default_n_probe, needed)))


def recall_vector_ann_filtered(
    agent_id: str,
    vector: Sequence[float],
    *,
    version: str,
    fetch: int,
    n_probe: int,
    since: float | None = None,
    until: float | None = None,
) -> AqlQuery:
    """Approximate top-``fetch`` of one agent's message vectors through a vector index on
    ``messages.recall_emb``, the agent/version/time conditions in the one ``FILTER`` that
    3.12.6+ allow between ``FOR`` and ``SORT`` (applied during the index lookup); scores are
    re-computed exactly (``COSINE_SIMILARITY``) so they mean what exact search's do. Not for
    3.12.4/3.12.5 (the optimizer would not use the index: error 1554); there use
    :func:`recall_vector_ann`. Rows ``{key, score}``, best first, ties by age then key."""
    if fetch < 1 or n_probe < 1:
        raise ValidationError("fetch and n_probe must be positive")
    one_filter, _, bind_time = time_window("d", since, until)  # "AND ..." parts: a single FILTER
    text = f"""FOR d IN {names.MESSAGES}
  FILTER d.agent_id == @agent_id AND d.{RECALL_VERSION} == @version{one_filter}
  SORT APPROX_NEAR_COSINE(d.{RECALL_VECTOR}, @vector, {{ nProbe: @n_probe }}) DESC
  LIMIT @fetch
  LET score = COSINE_SIMILARITY(d.{RECALL_VECTOR}, @vector)
  SORT score DESC, d.created_at ASC, d._key ASC
  RETURN {{ key: d._key, score: score }}"""
    bind = {
        "agent_id": agent_id,
        "version": version,
        "vector": [float(x) for x in vector],
        "fetch": fetch,
        "n_probe": n_probe,
        **bind_time,
    }
    return AqlQuery(text, bind)
