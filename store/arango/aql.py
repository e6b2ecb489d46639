"""Every AQL query the ArangoDB adapter sends, as pure functions returning ``(text, bind_vars)``.

Rules that every function here keeps (``tests/store/test_arango_aql.py`` checks them):

* Query text is assembled only from constants of :mod:`vcm.store.arango.names`, validated attribute
  names (:func:`vector_attribute`) and fixed keywords. Every value a caller supplies (agent ids,
  query strings, vectors, metadata keys and values) travels as a bind variable; collections
  chosen at run time travel as ``@@collection`` bind variables.
* Full-text search names its analyzer explicitly: ``ANALYZER(... IN TOKENS(@q, "text_en"),
  "text_en")``. An ``arangosearch`` view's default analyzer context is ``identity``, so without
  it nothing would match (reference/arangodb.md §2.4).
* Approximate vector search (``APPROX_NEAR_*``) keeps no ``FILTER`` between its ``FOR`` and
  ``LIMIT``: 3.12.4/3.12.5 refuse to use the vector index otherwise, and 3.12.6+ allow only one
  FILTER (reference §1.5). The ANN part is an inner subquery that over-fetches; all filters run
  in an outer loop over its result.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple

from vcm.errors import ValidationError
from vcm.store import filters as filters_module
from vcm.store.arango import names
from vcm.store.filters import CHUNK_FIELDS
from vcm.store.filters import ArchivalFilter as ArchivalFilter  # re-exported: the type of every filters argument here
from vcm.store.types import Metric
from vcm.store.validation import MAX_DEPTH


class AqlQuery(NamedTuple):
    text: str
    bind_vars: dict[str, Any]


Direction = Literal["outbound", "inbound", "any"]
_DIRECTIONS: dict[str, str] = {"outbound": "OUTBOUND", "inbound": "INBOUND", "any": "ANY"}

# Metadata filter keys go through bind variables anyway; the pattern only keeps them sane.
SAFE_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,127}$")
_VECTOR_ATTRIBUTE = re.compile(r"^emb_(cosine|l2)_[1-9][0-9]{0,4}$")

MAX_DIMENSION = 65_536


# --- archival filters ---------------------------------------------------------------------------
def parse_filters(filters: Mapping[str, Any] | None) -> ArchivalFilter:
    """The shared post-filters (:mod:`vcm.store.filters`), keys also held to :data:`SAFE_KEY`.

    The stricter key rule is this adapter's own: keys travel as bind variables anyway, but a
    key that is not an identifier is refused before it reaches a query.
    """
    if isinstance(filters, Mapping):
        for key in filters:
            if not isinstance(key, str) or not SAFE_KEY.match(key):
                raise ValidationError(
                    "filter keys must be identifiers (letters, digits, _ and -, at most 128)",
                    key=repr(key),
                )
    return filters_module.parse_filters(filters)


def vector_attribute(metric: Metric, dimension: int) -> str:
    """The document attribute holding vectors of one space; one vector index per attribute.

    A vector index has one metric and one dimension, and refuses documents of another
    dimension, so each (metric, dimension) gets its own attribute.
    """
    if metric not in ("cosine", "l2"):
        raise ValidationError("metric must be 'cosine' or 'l2'", metric=str(metric))
    if not isinstance(dimension, int) or not 0 < dimension <= MAX_DIMENSION:
        raise ValidationError(f"embedding dimension must be 1..{MAX_DIMENSION}")
    attr = f"emb_{metric}_{dimension}"
    return _checked_attribute(attr)


def _checked_attribute(attr: str) -> str:
    if not _VECTOR_ATTRIBUTE.match(attr):  # never true for vector_attribute(); defence only
        raise ValidationError("invalid vector attribute", attribute=attr)
    return attr


# --- generic writes -------------------------------------------------------------------------------
def insert_ignore(collection: str, docs: Sequence[Mapping[str, Any]], *, stamp_ingested: bool = False) -> AqlQuery:
    """Insert documents whose ``_key`` already encodes their identity; existing keys are kept.

    Returns one row per document: its ``_key`` when it was new, ``null`` when it existed
    (``RETURN NEW`` is null for an ignored insert). ``stamp_ingested`` records the server
    clock in ``ingested_at`` (ms), which read-after-write recall relies on.
    """
    _known_collection(collection)
    doc = "MERGE(doc, { ingested_at: DATE_NOW() })" if stamp_ingested else "doc"
    text = (
        f'FOR doc IN @docs\n  INSERT {doc} INTO @@collection OPTIONS {{ overwriteMode: "ignore" }}\n  RETURN NEW._key'
    )
    return AqlQuery(text, {"docs": [dict(d) for d in docs], "@collection": collection})


def documents(ids: Sequence[str], agent_id: str | None = None) -> AqlQuery:
    """Documents by ``_id``, in the order asked, missing ones left out."""
    owner = " AND d.agent_id == @agent_id" if agent_id is not None else ""
    text = f"FOR id IN @ids\n  LET d = DOCUMENT(id)\n  FILTER d != null{owner}\n  RETURN d"
    bind: dict[str, Any] = {"ids": list(ids)}
    if agent_id is not None:
        bind["agent_id"] = agent_id
    return AqlQuery(text, bind)


# --- core memory ------------------------------------------------------------------------------------
def list_core(agent_id: str) -> AqlQuery:
    text = (
        f"FOR b IN {names.CORE}\n"
        '  FILTER b.agent_id == @agent_id AND b.kind == "block"\n'
        "  SORT b.block_id ASC\n"
        "  RETURN b"
    )
    return AqlQuery(text, {"agent_id": agent_id})


# --- messages ---------------------------------------------------------------------------------------
def count_messages(agent_id: str) -> AqlQuery:
    text = f"FOR m IN {names.MESSAGES}\n  FILTER m.agent_id == @agent_id\n  COLLECT WITH COUNT INTO n\n  RETURN n"
    return AqlQuery(text, {"agent_id": agent_id})


def committed_batches(agent_id: str) -> AqlQuery:
    text = f"FOR b IN {names.BATCHES}\n  FILTER b.agent_id == @agent_id\n  SORT b.batch_id ASC\n  RETURN b.batch_id"
    return AqlQuery(text, {"agent_id": agent_id})


def recall_search(
    agent_id: str,
    query: str,
    *,
    fetch: int,
    since: float | None = None,
    until: float | None = None,
    lag_ms: int = 10_000,
    fresh_cap: int = 10_000,
    k1: float = 1.2,
    b: float = 0.75,
) -> AqlQuery:
    """BM25 over the view, merged with a scan of messages the view may not hold yet.

    ArangoSearch views are eventually consistent: a message becomes searchable only after the
    view's next commit (``commitIntervalMsec``, 1 s here; reference §2.4). Read-after-write
    therefore also scans the agent's messages *ingested* in the last ``lag_ms`` (server clock,
    persistent index on ``(agent_id, ingested_at)``; ingestion time, not ``created_at``,
    because write-behind spooling can store an old message late). Those not already among the
    view's hits are scored in AQL with the same BM25 formula and the view's own term
    statistics (document frequency per query term from the view, N from the collection),
    ignoring length normalisation; once the view catches up the real ``BM25()`` replaces that
    approximation. The two lists are merged by score, ties broken by age then ``_key``. The
    scan looks at no more than ``fresh_cap`` of the most recently ingested messages (a bulk
    spool bigger than that is searchable once the view has caught up).
    ``since`` is inclusive and ``until`` exclusive, as in the embedded adapter.

    Returns one row per hit: ``{key, score, at}``, best first, at most ``fetch``.
    """
    if fetch < 1:
        raise ValidationError("fetch must be positive")
    view_time, scan_time, bind_time = _time_window("d", since, until)
    text = f"""LET q_terms = UNIQUE(TOKENS(@q, "{names.TEXT_ANALYZER}"))
LET fresh_since = DATE_NOW() - @lag_ms
LET indexed = (
  FOR d IN {names.VIEW}
    SEARCH ANALYZER(d.content IN TOKENS(@q, "{names.TEXT_ANALYZER}"), "{names.TEXT_ANALYZER}")
      AND d.agent_id == @agent_id{view_time}
    LET score = BM25(d, @k1, @b)
    SORT score DESC, d.created_at ASC, d._key ASC
    LIMIT @fetch
    RETURN {{ key: d._key, score: score, at: d.created_at }}
)
LET indexed_keys = indexed[*].key
LET fresh = (
  FOR d IN {names.MESSAGES}
    FILTER d.agent_id == @agent_id AND d.ingested_at >= fresh_since
    SORT d.ingested_at DESC
    LIMIT @fresh_cap
    FILTER d._key NOT IN indexed_keys{scan_time}
    LET d_terms = TOKENS(d.content, "{names.TEXT_ANALYZER}")
    LET tf = (
      FOR t IN q_terms
        LET n = LENGTH(FOR x IN d_terms FILTER x == t RETURN 1)
        FILTER n > 0
        RETURN {{ t: t, n: n }}
    )
    FILTER LENGTH(tf) > 0
    RETURN {{ key: d._key, at: d.created_at, tf: tf }}
)
LET n_docs = LENGTH({names.MESSAGES})
LET df = (
  FOR ignored IN (LENGTH(fresh) > 0 ? [1] : [])
    FOR t IN q_terms
      LET c = FIRST(
        FOR v IN {names.VIEW}
          SEARCH ANALYZER(v.content == t, "{names.TEXT_ANALYZER}")
          COLLECT WITH COUNT INTO docs_with_term
          RETURN docs_with_term
      )
      RETURN {{ t: t, c: c }}
)
LET fresh_scored = (
  FOR f IN fresh
    LET score = SUM(
      FOR h IN f.tf
        LET dfc = FIRST(FOR y IN df FILTER y.t == h.t RETURN y.c) || 0
        LET idf = LOG(1 + (MAX([n_docs, dfc]) - dfc + 0.5) / (dfc + 0.5))
        RETURN idf * h.n * (@k1 + 1) / (h.n + @k1)
    )
    RETURN {{ key: f.key, score: score, at: f.at }}
)
FOR h IN UNION(indexed, fresh_scored)
  SORT h.score DESC, h.at ASC, h.key ASC
  LIMIT @fetch
  RETURN h"""
    bind: dict[str, Any] = {
        "q": query,
        "agent_id": agent_id,
        "fetch": fetch,
        "lag_ms": lag_ms,
        "fresh_cap": fresh_cap,
        "k1": k1,
        "b": b,
        **bind_time,
    }
    return AqlQuery(text, bind)


def _time_window(var: str, since: float | None, until: float | None) -> tuple[str, str, dict[str, Any]]:
    view_parts: list[str] = []
    scan_parts: list[str] = []
    bind: dict[str, Any] = {}
    if since is not None:
        view_parts.append(f"\n      AND {var}.created_at >= @since")
        scan_parts.append(f"\n    FILTER {var}.created_at >= @since")
        bind["since"] = since
    if until is not None:
        view_parts.append(f"\n      AND {var}.created_at < @until")
        scan_parts.append(f"\n    FILTER {var}.created_at < @until")
        bind["until"] = until
    return "".join(view_parts), "".join(scan_parts), bind


def expire_messages(now: float, batch: int) -> AqlQuery:
    """Remove up to ``batch`` messages whose ``expires_at`` is before ``now``.

    Deliberately independent of a TTL index (which runs on its own schedule, every
    ``--ttl.frequency``, and may lag; reference/arangodb.md §6); batched so one call never
    builds a huge transaction. Uses the sparse index on ``expires_at``. Returns the removed
    ``_id``s so their edges can be removed in the same transaction.
    """
    text = (
        f"FOR d IN {names.MESSAGES}\n"
        "  FILTER d.expires_at != null AND d.expires_at < @now\n"
        "  LIMIT @batch\n"
        f"  REMOVE d IN {names.MESSAGES}\n"
        "  RETURN OLD._id"
    )
    return AqlQuery(text, {"now": now, "batch": batch})


def purge_cursors(now: float) -> AqlQuery:
    """Drop expired cursor snapshots (the TTL index does it too, on its own schedule)."""
    text = f"FOR c IN {names.CURSORS}\n  FILTER c.expires_at < @now\n  REMOVE c IN {names.CURSORS}\n  RETURN 1"
    return AqlQuery(text, {"now": now})


def remove_edges_of(edge_collection: str, vertex_ids: Sequence[str]) -> AqlQuery:
    """Remove every edge touching one of the given vertices (after they were deleted)."""
    if edge_collection not in names.EDGE_COLLECTIONS:
        raise ValidationError("unknown edge collection", collection=edge_collection)
    text = "FOR e IN @@edges\n  FILTER e._from IN @ids OR e._to IN @ids\n  REMOVE e IN @@edges\n  RETURN OLD._key"
    return AqlQuery(text, {"@edges": edge_collection, "ids": list(vertex_ids)})


# --- archival ---------------------------------------------------------------------------------------
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


def collection_count(collection: str) -> AqlQuery:
    """Documents in a collection, in constant time (``LENGTH(coll)`` uses the count)."""
    _known_collection(collection)  # a schema constant, never caller input
    return AqlQuery(f"RETURN LENGTH({collection})", {})


def count_vectors(metric: Metric, dimension: int) -> AqlQuery:
    """How many documents carry vectors of one space (the vector index's training set)."""
    attr = vector_attribute(metric, dimension)
    text = f"FOR d IN {names.ARCHIVAL}\n  FILTER d.{attr} != null\n  COLLECT WITH COUNT INTO n\n  RETURN n"
    return AqlQuery(text, {})


# --- events -----------------------------------------------------------------------------------------
def events_page(
    agent_id: str | None,
    kinds: Sequence[str] | None,
    *,
    since: float | None,
    after: tuple[float, str] | None,
    limit: int,
    until: float | None = None,
    actor: str | None = None,
    idempotency_key: str | None = None,
) -> AqlQuery:
    """Events oldest first, keyset-paged on ``(created_at, _key)``: stable while events arrive.

    Every filter is a bind parameter (never text), so no caller value can change the query.
    """
    lines: list[str] = []
    bind: dict[str, Any] = {"limit": limit}
    if agent_id is not None:
        lines.append("FILTER e.agent_id == @agent_id")
        bind["agent_id"] = agent_id
    if kinds is not None:
        lines.append("FILTER e.kind IN @kinds")
        bind["kinds"] = list(kinds)
    if since is not None:
        lines.append("FILTER e.created_at >= @since")
        bind["since"] = since
    if until is not None:
        lines.append("FILTER e.created_at < @until")
        bind["until"] = until
    if actor is not None:
        lines.append("FILTER e.actor == @actor")
        bind["actor"] = actor
    if idempotency_key is not None:
        lines.append("FILTER e.idempotency_key == @idempotency_key")
        bind["idempotency_key"] = idempotency_key
    if after is not None:
        lines.append("FILTER e.created_at > @after_t OR (e.created_at == @after_t AND e._key > @after_k)")
        bind["after_t"], bind["after_k"] = after
    body = "".join(f"\n  {line}" for line in lines)
    text = f"FOR e IN {names.EVENTS}{body}\n  SORT e.created_at ASC, e._key ASC\n  LIMIT @limit\n  RETURN e"
    return AqlQuery(text, bind)


# --- graph ------------------------------------------------------------------------------------------
def traverse(start_id: str, edge_collections: Sequence[str], *, max_depth: int, direction: Direction) -> AqlQuery:
    """Breadth-first traversal of ``g_mem`` returning, per reached vertex, its path's edges.

    Vertices need not exist as documents (the port allows edges between any refs): the
    traverser expands dangling vertices by id and yields ``v = null`` with a warning, so the
    caller rebuilds each vertex from the path's edges (``src``/``dst`` refs stored on them).
    """
    if direction not in _DIRECTIONS:
        raise ValidationError("direction must be outbound, inbound or any")
    for coll in edge_collections:
        if coll not in names.EDGE_COLLECTIONS:
            raise ValidationError("unknown edge kind", kind=coll)
    if not 1 <= max_depth <= MAX_DEPTH:
        raise ValidationError(f"max_depth must be 1..{MAX_DEPTH}")
    text = f"""FOR v, e, p IN 1..@max_depth {_DIRECTIONS[direction]} @start GRAPH "{names.GRAPH}"
  OPTIONS {{ order: "bfs", uniqueVertices: "global", edgeCollections: @edge_collections }}
  RETURN p.edges[* RETURN {{
    f: CURRENT._from, t: CURRENT._to, k: CURRENT.kind, src: CURRENT.src, dst: CURRENT.dst
  }}]"""
    return AqlQuery(
        text,
        {"start": start_id, "max_depth": max_depth, "edge_collections": list(edge_collections)},
    )


# --- stats --------------------------------------------------------------------------------------------
def stats(agent_id: str | None) -> AqlQuery:
    """Counts under the port's stats keys, for one agent or overall."""
    edges = " + ".join(f"LENGTH({e})" for e in names.EDGE_COLLECTIONS)
    if agent_id is None:
        text = f"""RETURN {{
  messages: LENGTH({names.MESSAGES}),
  archival_chunks: LENGTH({names.ARCHIVAL}),
  events: LENGTH({names.EVENTS}),
  edges: {edges},
  committed_batches: LENGTH({names.BATCHES}),
  recall_log_edges: LENGTH({names.RECALL_LOG}),
  message_vectors: FIRST(FOR m IN {names.MESSAGES} FILTER m.{RECALL_VECTOR} != null COLLECT WITH COUNT INTO n RETURN n),
  core_blocks: FIRST(FOR b IN {names.CORE} FILTER b.kind == "block" COLLECT WITH COUNT INTO n RETURN n),
  summaries: FIRST(FOR b IN {names.CORE} FILTER b.kind == "summary" COLLECT WITH COUNT INTO n RETURN n)
}}"""
        return AqlQuery(text, {})

    def count(collection: str, extra: str = "") -> str:
        return f"FIRST(FOR x IN {collection} FILTER x.agent_id == @agent_id{extra} COLLECT WITH COUNT INTO n RETURN n)"

    agent_edges = " + ".join(count(e) for e in names.EDGE_COLLECTIONS)
    text = f"""RETURN {{
  messages: {count(names.MESSAGES)},
  archival_chunks: {count(names.ARCHIVAL)},
  events: {count(names.EVENTS)},
  edges: {agent_edges},
  committed_batches: {count(names.BATCHES)},
  recall_log_edges: {count(names.RECALL_LOG)},
  message_vectors: {count(names.MESSAGES, f" AND x.{RECALL_VECTOR} != null")},
  core_blocks: {count(names.CORE, ' AND x.kind == "block"')},
  summaries: {count(names.CORE, ' AND x.kind == "summary"')}
}}"""
    return AqlQuery(text, {"agent_id": agent_id})


def vector_spaces() -> AqlQuery:
    """The registered vector spaces (metric, dimension, embedding_version)."""
    text = f'FOR m IN {names.META}\n  FILTER m.kind == "vector_space"\n  SORT m.metric, m.embedding_version\n  RETURN m'
    return AqlQuery(text, {})


def _known_collection(collection: str) -> None:
    if collection not in names.ALL_COLLECTIONS:
        raise ValidationError("unknown collection", collection=collection)


# --- vector recall over messages ------------------------------------------------------------
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


def recall_positions(agent_id: str, keys: Sequence[str], version: str | None = None) -> AqlQuery:
    """The conversation position (``seq``) of the agent's messages with these keys, for hybrid
    recall's neighbour spreading, and with a ``version``, whether each carries a recall vector of
    it (hybrid scores a missing one by the text score). Rows ``{key, seq}`` or
    ``{key, seq, embedded}``; keys of other agents or gone are left out."""
    embedded = f", embedded: d.{RECALL_VERSION} == @version" if version is not None else ""
    text = f"""FOR id IN @ids
  LET d = DOCUMENT(id)
  FILTER d != null AND d.agent_id == @agent_id
  RETURN {{ key: d._key, seq: d.seq{embedded} }}"""
    bind: dict[str, Any] = {"agent_id": agent_id, "ids": [f"{names.MESSAGES}/{k}" for k in keys]}
    if version is not None:
        bind["version"] = version
    return AqlQuery(text, bind)


def list_messages(agent_id: str, after_seq: int, limit: int) -> AqlQuery:
    """The agent's messages after ``after_seq`` in ``seq`` order. Sorted on ``seq`` alone (unique
    per agent), so the persistent index ``messages_agent_seq`` serves filter, sort and limit
    without sorting the agent's whole log."""
    text = f"""FOR d IN {names.MESSAGES}
  FILTER d.agent_id == @agent_id AND d.seq > @after_seq
  SORT d.seq ASC
  LIMIT @limit
  RETURN d"""
    return AqlQuery(text, {"agent_id": agent_id, "after_seq": after_seq, "limit": limit})


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
    _, scan_time, bind_time = _time_window("d", since, until)
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
    _, scan_time, bind_time = _time_window("c", since, until)
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


# --- vector recall at scale (issue 16; docs/recall-scale.md) ----------------------------------
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
    one_filter, _, bind_time = _time_window("d", since, until)  # "AND ..." parts: a single FILTER
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


# --- agents, lifecycle, snapshots ---------------------------------------------------------------
def uncommitted_messages(agent_id: str, summary_vertex: str, after_seq: int, limit: int) -> AqlQuery:
    """Messages by seq with no ``recall_log`` edge from the summary (the FIFO of a rebuild). The
    (agent_id, seq) index serves FILTER and SORT; the edge index on ``_to`` answers each probe."""
    text = (
        f"FOR m IN {names.MESSAGES}\n"
        "  FILTER m.agent_id == @agent_id AND m.seq > @after\n"
        "  SORT m.seq ASC\n"
        f"  LET folded = FIRST(FOR e IN {names.RECALL_LOG} FILTER e._to == m._id AND e._from == @summary "
        "LIMIT 1 RETURN true)\n"
        "  FILTER folded == null\n"
        "  LIMIT @limit\n"
        "  RETURN m"
    )
    return AqlQuery(text, {"agent_id": agent_id, "after": after_seq, "summary": summary_vertex, "limit": limit})


def list_agents() -> AqlQuery:
    text = f'FOR a IN {names.CORE}\n  FILTER a.kind == "agent"\n  SORT a.agent_id ASC\n  RETURN a'
    return AqlQuery(text, {})


def advance_id_floor(key: str, floor: int) -> AqlQuery:
    """Raise ``id_floor`` atomically (one document, one UPDATE): never lowers it."""
    text = (
        f"FOR a IN {names.CORE}\n"
        '  FILTER a._key == @key AND a.kind == "agent"\n'
        f"  UPDATE a WITH {{ id_floor: MAX([a.id_floor, @floor]) }} IN {names.CORE}\n"
        "  RETURN NEW.id_floor"
    )
    return AqlQuery(text, {"key": key, "floor": floor})


def summary_versions(agent_id: str, limit: int) -> AqlQuery:
    text = (
        f"FOR b IN {names.BATCHES}\n"
        '  FILTER b.agent_id == @agent_id AND HAS(b, "summary_text")\n'
        "  SORT b.batch_id DESC\n"
        "  LIMIT @limit\n"
        "  RETURN b"
    )
    return AqlQuery(text, {"agent_id": agent_id, "limit": limit})


def remove_of_agent(collection: str, agent_id: str) -> AqlQuery:
    """Remove every document of one agent from a collection; returns how many."""
    _known_collection(collection)
    text = (
        "FOR d IN @@collection\n  FILTER d.agent_id == @agent_id\n  REMOVE d IN @@collection\n"
        "  COLLECT WITH COUNT INTO n\n  RETURN n"
    )
    return AqlQuery(text, {"@collection": collection, "agent_id": agent_id})


def document_chunks(agent_id: str, doc_id: str) -> AqlQuery:
    text = f"FOR d IN {names.ARCHIVAL}\n  FILTER d.agent_id == @agent_id AND d.doc_id == @doc_id\n  RETURN d._id"
    return AqlQuery(text, {"agent_id": agent_id, "doc_id": doc_id})


def remove_documents(collection: str, ids: Sequence[str]) -> AqlQuery:
    """Remove documents by ``_id`` (of one collection); missing ones are skipped."""
    _known_collection(collection)
    text = (
        "FOR id IN @ids\n  LET d = DOCUMENT(id)\n  FILTER d != null\n"
        "  REMOVE d IN @@collection\n  COLLECT WITH COUNT INTO n\n  RETURN n"
    )
    return AqlQuery(text, {"@collection": collection, "ids": list(ids)})


def list_snapshots(agent_id: str, now: float) -> AqlQuery:
    """Unexpired snapshots, newest first, without their payloads."""
    text = (
        f"FOR s IN {names.SNAPSHOTS}\n"
        "  FILTER s.agent_id == @agent_id AND (s.expires_at == null OR s.expires_at >= @now)\n"
        "  SORT s.created_at DESC, s.snapshot_id ASC\n"
        '  RETURN UNSET(s, "payload")'
    )
    return AqlQuery(text, {"agent_id": agent_id, "now": now})


def expire_snapshots(now: float) -> AqlQuery:
    text = (
        f"FOR s IN {names.SNAPSHOTS}\n  FILTER s.expires_at != null AND s.expires_at < @now\n"
        f"  REMOVE s IN {names.SNAPSHOTS}\n  COLLECT WITH COUNT INTO n\n  RETURN n"
    )
    return AqlQuery(text, {"now": now})


def message_ids_of(agent_id: str) -> AqlQuery:
    text = f"FOR m IN {names.MESSAGES}\n  FILTER m.agent_id == @agent_id\n  RETURN m.message_id"
    return AqlQuery(text, {"agent_id": agent_id})


def folded_message_vertices(summary_vertex: str) -> AqlQuery:
    """The message vertices the summary's ``recall_log`` edges point at (the edge index serves it)."""
    text = f"FOR e IN {names.RECALL_LOG}\n  FILTER e._from == @summary\n  RETURN e._to"
    return AqlQuery(text, {"summary": summary_vertex})


def unfold_messages(summary_vertex: str, message_vertices: Sequence[str]) -> AqlQuery:
    """Remove the summary's ``recall_log`` edges to these messages (they re-enter the FIFO)."""
    text = (
        f"FOR e IN {names.RECALL_LOG}\n  FILTER e._from == @summary AND e._to IN @ids\n  REMOVE e IN {names.RECALL_LOG}"
    )
    return AqlQuery(text, {"summary": summary_vertex, "ids": list(message_vertices)})


def blocks_of(agent_id: str) -> AqlQuery:
    text = f'FOR b IN {names.CORE}\n  FILTER b.agent_id == @agent_id AND b.kind == "block"\n  RETURN b._key'
    return AqlQuery(text, {"agent_id": agent_id})


# --- facts and state ------------------------------------------------------------------------------
def query_facts(agent_id: str, scope: str | None, types: Sequence[str] | None, key: str | None,
                statuses: Sequence[str] | None, category: str | None, tags: Sequence[str] | None,
                min_importance: float | None, since: float | None, until: float | None,
                limit: int, with_embedding: bool) -> AqlQuery:  # fmt: skip
    """Facts passing the filters, most recently updated first (``embedding`` only when asked)."""
    lines = [f"FOR f IN {names.FACTS}", "  FILTER f.agent_id == @agent_id"]
    bind: dict[str, Any] = {"agent_id": agent_id, "limit": limit}
    for name, value, test in (
        ("scope", scope, "f.scope == @scope"),
        ("types", list(types) if types else None, "f.type IN @types"),
        ("key", key, "f.key == @key"),
        ("statuses", list(statuses) if statuses else None, "f.status IN @statuses"),
        ("category", category, "f.category == @category"),
        ("tags", list(tags) if tags else None, "@tags ALL IN f.tags"),
        ("min_importance", min_importance, "f.importance >= @min_importance"),
        ("since", since, "f.updated_at >= @since"),
        ("until", until, "f.updated_at < @until"),
    ):
        if value is not None:
            lines.append(f"  FILTER {test}")
            bind[name] = value
    lines += ["  SORT f.updated_at DESC, f.fact_id ASC", "  LIMIT @limit"]
    lines.append("  RETURN f" if with_embedding else '  RETURN UNSET(f, "embedding")')
    return AqlQuery("\n".join(lines), bind)


def touch_facts(agent_id: str, keys_: Sequence[str], now: float) -> AqlQuery:
    """A use: the expiry of a live fact with a lifetime moves to now + lifetime, only forward
    (the port's rule)."""
    text = (
        f"FOR k IN @keys\n  LET f = DOCUMENT({names.FACTS}, k)\n  FILTER f != null AND f.agent_id == @agent_id\n"
        "  LET renewed = f.lifetime_s != null AND f.expires_at != null AND f.expires_at >= @now\n"
        "    AND @now + f.lifetime_s > f.expires_at\n"
        f"  UPDATE f WITH {{ last_used: @now, access_count: f.access_count + 1, "
        f"expires_at: renewed ? @now + f.lifetime_s : f.expires_at }} IN {names.FACTS}"
    )
    return AqlQuery(text, {"keys": list(keys_), "agent_id": agent_id, "now": now})


def list_state(agent_id: str, now: float) -> AqlQuery:
    text = (
        f"FOR s IN {names.STATE}\n  FILTER s.agent_id == @agent_id AND (s.expires_at == null OR s.expires_at >= @now)\n"
        "  SORT s.key ASC\n  RETURN s"
    )
    return AqlQuery(text, {"agent_id": agent_id, "now": now})


def expire_state(now: float) -> AqlQuery:
    text = f"FOR s IN {names.STATE}\n  FILTER s.expires_at != null AND s.expires_at < @now\n  REMOVE s IN {names.STATE}"
    return AqlQuery(text, {"now": now})


def expire_facts(now: float) -> AqlQuery:
    """Expired facts are marked, not deleted: their evidence stays auditable."""
    text = (
        f"FOR f IN {names.FACTS}\n  FILTER f.expires_at != null AND f.expires_at < @now"
        ' AND f.status IN ["active", "shadow"]\n'
        f'  UPDATE f WITH {{ status: "expired" }} IN {names.FACTS}'
    )
    return AqlQuery(text, {"now": now})


def fact_type_counts() -> AqlQuery:
    """Facts of all agents by type and status (the /metrics gauge)."""
    text = (
        f"FOR f IN {names.FACTS}\n  COLLECT type = f.type, status = f.status WITH COUNT INTO n\n"
        "  RETURN {type, status, count: n}"
    )
    return AqlQuery(text, {})


def fact_counts(agent_id: str) -> AqlQuery:
    text = (
        f"LET mine = (FOR f IN {names.FACTS} FILTER f.agent_id == @agent_id "
        'RETURN KEEP(f, "type", "status", "scope", "conflict_with"))\n'
        "RETURN {\n"
        "  type: MERGE(FOR f IN mine COLLECT v = f.type WITH COUNT INTO n RETURN {[v]: n}),\n"
        "  status: MERGE(FOR f IN mine COLLECT v = f.status WITH COUNT INTO n RETURN {[v]: n}),\n"
        "  scope: MERGE(FOR f IN mine COLLECT v = f.scope WITH COUNT INTO n RETURN {[v]: n}),\n"
        "  conflicts: {live: LENGTH(FOR f IN mine FILTER LENGTH(f.conflict_with) > 0"
        ' AND f.status IN ["active", "shadow"] RETURN 1)}\n'
        "}"
    )
    return AqlQuery(text, {"agent_id": agent_id})
