"""Metric families read at scrape time from shared state rather than recorded by one process.

Eviction batches pending (the ``evicting:<id>`` batches every agent's hot state holds), facts by
type and status, and the vector index state (trained IVF or exact search, per index) are facts
about Redis and the store,
the same whichever process is asked. Recording them as gauges in each process would need a
multi-process aggregation that cannot be right for both (a batch begun in the API and finished in
a worker is nobody's to decrement), so the API's ``/metrics`` reads them when scraped: one
``SMEMBERS`` plus one pipelined ``ZCARD`` per agent, and the store's ``stats()``. A failed read
leaves its family out of that scrape and is logged; it never fails the scrape.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import redis
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from vcm.hot import keys

log = logging.getLogger(__name__)


class StateCollector:
    def __init__(self, client: redis.Redis, stats: Callable[[], Mapping[str, Any]]) -> None:
        self._redis = client
        self._stats = stats  # the store's stats() (through the service)

    def collect(self) -> Iterator[Metric]:
        pending = self._pending()
        if pending is not None:
            family = GaugeMetricFamily(
                "vcm_eviction_batches_pending",
                "Eviction batches begun in Redis and not yet finished, all agents (read at scrape)",
            )
            family.add_metric([], pending)
            yield family
        stats = self._store_stats()
        facts = _rows(stats, "facts_by_type")
        if facts is not None:
            family = GaugeMetricFamily(
                "vcm_facts",
                "Facts of all agents by type and status (shadow, active, expired, archived; read at scrape)",
                labels=["type", "status"],
            )
            for row in facts:
                family.add_metric([str(row.get("type")), str(row.get("status"))], float(row.get("count") or 0))
            yield family
        spaces = _rows(stats, "vector_spaces")
        if spaces is not None:
            family = GaugeMetricFamily(
                "vcm_vector_index_trained",
                "1: the vector index of this space is a trained IVF index; 0: exact search (read at scrape)",
                labels=["metric", "dimension", "embedding_version"],
            )
            for space in spaces:
                labels = [str(space.get("metric")), str(space.get("dimension")), str(space.get("embedding_version"))]
                family.add_metric(labels, 1.0 if space.get("kind") == "ivf" else 0.0)
            yield family

    def _pending(self) -> int | None:
        try:
            agents = sorted(self._redis.smembers(keys.AGENTS))
            pipe = self._redis.pipeline(transaction=False)
            for agent_id in agents:
                pipe.zcard(keys.key(_text(agent_id), keys.BATCHES))
            return sum(int(n) for n in pipe.execute())
        except Exception:  # a scrape must not fail because Redis did
            log.warning("could not read pending eviction batches for /metrics", exc_info=True)
            return None

    def _store_stats(self) -> Mapping[str, Any] | None:
        """One read of the store's counts per scrape (fact counts, vector index state)."""
        try:
            return self._stats()
        except Exception:  # same: the store being down is /healthz's to report
            log.warning("could not read the store's counts for /metrics", exc_info=True)
            return None


def _rows(stats: Mapping[str, Any] | None, name: str) -> list[dict[str, Any]] | None:
    if stats is None:
        return None
    rows = stats.get(name, [])
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else None


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)
