"""A LangGraph store over vcm: LangGraph's memory examples run on vcm unchanged::

    from vcm import VcmClient
    from vcm.integrations.langgraph import VcmStore

    graph = builder.compile(store=VcmStore("alice", VcmClient(url, token)))

``VcmStore`` implements ``langgraph.store.base.BaseStore`` (its abstract ``batch`` and
``abatch``; ``get``, ``search``, ``put``, ``delete``, ``list_namespaces`` and their async forms
come from the base class) for one vcm agent, whose memory holds the items:

- each item is a state key of the agent (``lg:`` and a digest of its namespace and key; the
  record holds namespace, key, value, creation time and its fact): ``get`` reads it, ``put``
  writes it (``ttl`` minutes: it expires that long after it was written; reads do not extend it),
  ``delete`` removes it;
- each item is indexed by a fact of the agent (type ``learned``, tag ``langgraph``, the item's
  state key as its key, the item's text or the text at ``index`` paths as its value): ``search``
  with a query is vcm's hybrid fact search (BM25 and vectors, comparable scores in [0, 1]),
  without one the newest items first; ``filter`` compares value fields (``$eq``, ``$ne``,
  ``$gt``, ``$gte``, ``$lt``, ``$lte``). A fact written without evidence starts as a shadow
  fact: the store searches shadow and active facts; the model's relevant-memory layer sees
  them once vcm's consolidation promotes them;
- namespaces are the records' namespaces (``list_namespaces``: prefix, suffix, ``*``, depth).

The agent's state header shows the items to the model as the rest of its state (within the
header's budget). ``client`` is a :class:`~vcm.client.VcmClient` (sync and async forms; the
async ones run its calls in a worker thread) or an :class:`~vcm.client.AsyncVcmClient` (async
forms only).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)
from langgraph.store.base.embed import get_text_at_path

from vcm.errors import NotFound
from vcm.integrations import store_records as records
from vcm.integrations.bridge import Client, Flow, adrive, call, drive

Json = dict[str, Any]

# vcm's fact search answers at most this many hits; a query's page is taken from them.
MAX_HITS = 100
# A fact's value holds at most this many characters (vcm's [facts] max_value_chars default).
MAX_FACT_CHARS = 4000
# The fact statuses a search finds: the store's own facts start as shadow facts.
STATUSES = ["active", "shadow"]


class VcmStore(BaseStore):
    """LangGraph's ``BaseStore`` over the state and facts of the vcm agent ``agent_id``.
    ``index``: the value paths whose text a fact indexes by default (None: all of a value's text)."""

    supports_ttl = True

    def __init__(self, agent_id: str, client: Client, *, index: Sequence[str] | None = None) -> None:
        self.agent_id = agent_id
        self.client = client
        self.fields = list(index) if index else None

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return [drive(self._flow(op), self.client) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return [await adrive(self._flow(op), self.client) for op in ops]

    def _flow(self, op: Op) -> Flow[Any]:
        if isinstance(op, GetOp):
            return self._get(op)
        if isinstance(op, SearchOp):
            return self._search(op)
        if isinstance(op, ListNamespacesOp):
            return self._namespaces(op)
        if isinstance(op, PutOp):
            return self._put(op)
        raise ValueError(f"unknown store operation {type(op).__name__}")

    def _get(self, op: GetOp) -> Flow[Item | None]:
        try:
            entry = yield call("state", self.agent_id, records.state_key(op.namespace, op.key))
        except NotFound:
            return None
        rec = entry["value"]
        return Item(
            value=rec["value"], key=rec["key"], namespace=tuple(rec["namespace"]),
            created_at=_time(rec["created_at"]), updated_at=_time(entry["updated_at"]),
        )  # fmt: skip

    def _put(self, op: PutOp) -> Flow[None]:
        key = records.state_key(op.namespace, op.key)
        try:
            old: Json | None = (yield call("state", self.agent_id, key))["value"]
        except NotFound:
            old = None
        fact_id: str | None = None
        if op.value is not None and op.index is not False:
            text = records.index_text(op.value, op.index or self.fields, get_text_at_path, MAX_FACT_CHARS)
            if text:
                # ttl_s 0: the fact lives as long as the item (vcm's types otherwise expire facts).
                ttl_s = 0 if op.ttl is None else max(1, round(op.ttl * 60))
                reply = yield call(
                    "remember", self.agent_id, text, type=records.FACT_TYPE, key=key, tags=[records.TAG], ttl_s=ttl_s
                )
                fact_id = str(reply["fact"]["fact_id"])
        if old is not None and old.get("fact_id") not in (None, fact_id):
            yield from self._drop_fact(str(old["fact_id"]), key)
        if op.value is None:
            with contextlib.suppress(NotFound):  # gone already: deleting is done
                yield call("delete_state", self.agent_id, key)
            return None
        created = float(old["created_at"]) if old is not None else time.time()
        value = records.record(op.namespace, op.key, op.value, created, fact_id)
        ttl = None if op.ttl is None else max(1, round(op.ttl * 60))
        yield call("set_state", self.agent_id, key, value, ttl_s=ttl)
        return None

    def _drop_fact(self, fact_id: str, key: str) -> Flow[None]:
        """Forget an item's old fact, unless vcm's dedup made it another item's too (its key)."""
        try:
            fact = yield call("fact", self.agent_id, fact_id)
            if fact.get("key") == key:
                yield call("forget_fact", self.agent_id, fact_id)
        except NotFound:
            pass

    def _items(self) -> Flow[list[Json]]:
        listing = yield call("state", self.agent_id)
        return [e for e in listing["state"] if records.is_record(e)]

    def _search(self, op: SearchOp) -> Flow[list[SearchItem]]:
        entries = [
            e
            for e in (yield from self._items())
            if tuple(e["value"]["namespace"][: len(op.namespace_prefix)]) == tuple(op.namespace_prefix)
            and records.passes(e["value"]["value"], op.filter)
        ]
        scored: list[tuple[float | None, Json]]
        if op.query:
            found = yield call(
                "search_facts", self.agent_id, op.query, limit=MAX_HITS, tag=[records.TAG], status=STATUSES
            )
            scores = {h["fact"]["fact_id"]: float(h["score"]) for h in found["hits"]}
            hits = [(scores[e["value"]["fact_id"]], e) for e in entries if e["value"].get("fact_id") in scores]
            scored = [(s, e) for s, e in sorted(hits, key=lambda p: -p[0])]
        else:
            scored = [(None, e) for e in sorted(entries, key=lambda e: -float(e["updated_at"]))]
        return [
            SearchItem(
                namespace=tuple(e["value"]["namespace"]),
                key=e["value"]["key"],
                value=e["value"]["value"],
                created_at=_time(e["value"]["created_at"]),
                updated_at=_time(e["updated_at"]),
                score=score,
            )
            for score, e in scored[op.offset : op.offset + op.limit]
        ]

    def _namespaces(self, op: ListNamespacesOp) -> Flow[list[tuple[str, ...]]]:
        entries = yield from self._items()
        conditions = [(c.match_type, tuple(c.path)) for c in op.match_conditions or ()]
        return records.list_namespaces(
            (e["value"]["namespace"] for e in entries), conditions, op.max_depth, op.limit, op.offset
        )


def _time(seconds: float) -> datetime:
    return datetime.fromtimestamp(float(seconds), tz=UTC)
