"""Metric families read at scrape time from shared state rather than recorded by one process.

Eviction batches pending (the ``evicting:<id>`` batches every agent's hot state holds), facts by
type and status, and the vector index state (trained IVF or exact search, per index) are facts
about Redis and the store,
the same whichever process is asked. So are the sync status client instances reported
(``vcm_sync_instances``, ``vcm_sync_consecutive_failures``) and, when a quota is set, each
agent's stored items (``vcm_agent_memory_items``), and write-behind's backlog
(``vcm_write_behind_backlog_*``). Recording them as gauges in each process would need a
multi-process aggregation that cannot be right for both (a batch begun in the API and finished in
a worker is nobody's to decrement), so the API's ``/metrics`` reads them when scraped: one
``SMEMBERS`` plus one pipelined ``ZCARD`` per agent, and the store's ``stats()``. A failed read
leaves its family out of that scrape and is logged; it never fails the scrape.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import redis
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from vcm.hotpath import keys
from vcm.hotpath.backlog import SpoolBacklog

log = logging.getLogger(__name__)


class StateCollector:
    def __init__(
        self,
        client: redis.Redis,
        stats: Callable[[], Mapping[str, Any]],
        *,
        agent_stats: Callable[[str], Mapping[str, Any]] | None = None,
        memory_quota_items: int = 0,
        max_agents: int = 1000,
    ) -> None:
        self._redis = client
        self._stats = stats  # the store's stats() (through the service)
        # One agent's store counts, read per agent at scrape only when a memory quota is set.
        self._agent_stats = agent_stats
        self._quota = memory_quota_items
        self._max_agents = max_agents

    def collect(self) -> Iterator[Metric]:
        yield from self._instances()
        yield from self._memory()
        yield from self._backlog()
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

    def _agents(self) -> list[str]:
        return sorted(_text(a) for a in self._redis.smembers(keys.AGENTS))

    def _instances(self) -> Iterator[Metric]:
        """Client instances by reported status, and per agent the longest run of failed syncs one
        of its instances reports (only agents with one): one pipelined HGETALL per agent."""
        try:
            agents = self._agents()
            pipe = self._redis.pipeline(transaction=False)
            for agent_id in agents:
                pipe.hgetall(keys.key(agent_id, keys.INSTANCES))
            boards = pipe.execute()
        except Exception:  # a scrape must not fail because Redis did
            log.warning("could not read client instances for /metrics", exc_info=True)
            return
        statuses = {s: 0 for s in ("synced", "syncing", "conflict", "error")}
        failing: dict[str, int] = {}
        for agent_id, board in zip(agents, boards, strict=True):
            for raw in (board or {}).values():
                try:
                    record = json.loads(_text(raw))
                except ValueError:
                    continue
                status = str(record.get("status"))
                statuses[status] = statuses.get(status, 0) + 1
                run = int(record.get("consecutive_failures") or 0)
                if run > 0:
                    failing[agent_id] = max(failing.get(agent_id, 0), run)
        family = GaugeMetricFamily(
            "vcm_sync_instances", "Client instances by their last reported status (read at scrape)", labels=["status"]
        )
        for status, count in sorted(statuses.items()):
            family.add_metric([status], count)
        yield family
        runs = GaugeMetricFamily(
            "vcm_sync_consecutive_failures",
            "Longest run of failed syncs an instance of the agent reported last; agents with one only (read at scrape)",
            labels=["agent"],
        )
        for agent_id, run in sorted(failing.items()):
            runs.add_metric([agent_id], run)
        yield runs

    def _memory(self) -> Iterator[Metric]:
        """With ``[metrics] memory_quota_items`` set: each agent's stored items (messages,
        archival chunks, blocks; at most ``max_agents`` agents, one store count each) and the quota."""
        if self._quota <= 0 or self._agent_stats is None:
            return
        family = GaugeMetricFamily(
            "vcm_agent_memory_items",
            "Items the store holds of the agent: messages, archival chunks, working blocks (read at scrape)",
            labels=["agent"],
        )
        try:
            for agent_id in self._agents()[: self._max_agents]:
                counts = self._agent_stats(agent_id)
                size = sum(int(counts.get(n) or 0) for n in ("messages", "archival_chunks", "core_blocks"))
                family.add_metric([agent_id], size)
        except Exception:
            log.warning("could not read agents' memory sizes for /metrics", exc_info=True)
            return
        yield family
        quota = GaugeMetricFamily("vcm_agent_memory_quota_items", "[metrics] memory_quota_items: items per agent")
        quota.add_metric([], self._quota)
        yield quota

    def _backlog(self) -> Iterator[Metric]:
        """Write-behind's backlog (appends acknowledged, not yet in the store: what a Redis loss
        would take), all agents: its size, the largest agent's, and the age of its oldest message.
        One pipelined ZCARD and ZRANGE per agent; all 0 when appends are written through."""
        try:
            totals = SpoolBacklog(self._redis).totals(self._agents())
        except Exception:  # a scrape must not fail because Redis did
            log.warning("could not read the write-behind backlog for /metrics", exc_info=True)
            return
        age = max(0.0, time.time() - totals.oldest_at) if totals.oldest_at is not None else 0.0
        for name, text, value in (
            (
                "vcm_write_behind_backlog_messages",
                "Appends acknowledged and not yet in the store, all agents",
                totals.messages,
            ),
            ("vcm_write_behind_backlog_agent_max_messages", "The largest backlog of one agent", totals.largest),
            ("vcm_write_behind_backlog_age_seconds", "Age of the oldest acknowledged append not yet in the store", age),
        ):
            family = GaugeMetricFamily(name, text + " (write-behind; read at scrape)")
            family.add_metric([], value)
            yield family

    def _pending(self) -> int | None:
        try:
            agents = self._agents()
            pipe = self._redis.pipeline(transaction=False)
            for agent_id in agents:
                pipe.zcard(keys.key(agent_id, keys.BATCHES))
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
