"""Core memory blocks and messages: counts, committed batches, listing, and the BM25 recall search."""

from __future__ import annotations

from typing import Any

from vcm.errors import ValidationError
from vcm.store.arango import names
from vcm.store.arango.aql.common import (
    AqlQuery,
    time_window,
)


def list_core(agent_id: str) -> AqlQuery:
    text = (
        f"FOR b IN {names.CORE}\n"
        '  FILTER b.agent_id == @agent_id AND b.kind == "block"\n'
        "  SORT b.block_id ASC\n"
        "  RETURN b"
    )
    return AqlQuery(text, {"agent_id": agent_id})


def count_messages(agent_id: str, id_prefix: str = "") -> AqlQuery:
    """How many messages the agent has (whose id starts with ``id_prefix``, when given)."""
    if not id_prefix:
        text = f"FOR m IN {names.MESSAGES}\n  FILTER m.agent_id == @agent_id\n  COLLECT WITH COUNT INTO n\n  RETURN n"
        return AqlQuery(text, {"agent_id": agent_id})
    text = (
        f"FOR m IN {names.MESSAGES}\n  FILTER m.agent_id == @agent_id AND STARTS_WITH(m.message_id, @prefix)\n"
        "  COLLECT WITH COUNT INTO n\n  RETURN n"
    )
    return AqlQuery(text, {"agent_id": agent_id, "prefix": id_prefix})


def committed_batches(agent_id: str) -> AqlQuery:
    text = f"FOR b IN {names.BATCHES}\n  FILTER b.agent_id == @agent_id\n  SORT b.batch_id ASC\n  RETURN b.batch_id"
    return AqlQuery(text, {"agent_id": agent_id})


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


def message_author_after(agent_id: str, after: str) -> AqlQuery:
    """The agent's first message author (``name``) after ``after`` in sort order, or no row: one
    seek of the sparse persistent index ``messages_agent_name`` ([agent_id, name]), so listing an
    agent's n authors costs n + 1 seeks, never a scan of its messages (``after`` "": the first)."""
    text = f"""FOR d IN {names.MESSAGES}
  FILTER d.agent_id == @agent_id AND d.name != null AND d.name > @after
  SORT d.agent_id, d.name
  LIMIT 1
  RETURN d.name"""
    return AqlQuery(text, {"agent_id": agent_id, "after": after})


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
    view_time, scan_time, bind_time = time_window("d", since, until)
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
