"""Every sample name vcm can expose, with its label names: the recorded families of
:mod:`vcm.obs.metrics` and those :class:`~vcm.obs.metrics_state.StateCollector` reads at scrape,
and Flower's (read from the installed Flower, which builds them from Celery task events). The
alert rules and the Grafana dashboard may name only these."""

from __future__ import annotations

import inspect
import json
import re

import fakeredis
from prometheus_client.metrics import MetricWrapperBase

from vcm.hotpath import keys
from vcm.obs import metrics
from vcm.obs.metrics_state import StateCollector

SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}


def exposed_families() -> dict[str, set[str]]:
    """Every sample name vcm can expose, with its label names."""
    out: dict[str, set[str]] = {}
    for family in vars(metrics).values():
        if isinstance(family, MetricWrapperBase):
            kind = family._type  # counter | gauge | histogram
            for suffix in SUFFIXES[kind]:
                out[family._name + suffix] = set(family._labelnames) | ({"le"} if suffix == "_bucket" else set())
    # The scrape-time families, from a collector that has something of each to say.
    client = fakeredis.FakeRedis(decode_responses=True)
    client.sadd(keys.AGENTS, "a")
    client.hset(keys.key("a", keys.INSTANCES), "i1", json.dumps({"status": "error", "consecutive_failures": 3}))
    collector = StateCollector(
        client, lambda: {"facts_by_type": [], "vector_spaces": []}, agent_stats=lambda _: {"messages": 5},
        memory_quota_items=1,
    )  # fmt: skip
    for family in collector.collect():
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    return out


def flower_families() -> dict[str, set[str]]:
    """Flower's families (``flower.events.PrometheusMetrics``), read from its source: building
    them would register them a second time in this process's registry."""
    import flower.events

    source = inspect.getsource(flower.events.PrometheusMetrics.__init__)
    out: dict[str, set[str]] = {}
    for kind, name, labels in re.findall(
        r"(PrometheusCounter|Histogram|Gauge)\(\s*'(flower_[a-z_]+)',\s*(?:\"[^\"]*\"|'[^']*'),\s*\[([^\]]*)\]", source
    ):
        label_set = set(re.findall(r"'([a-z_]+)'", labels))
        if kind == "PrometheusCounter":  # a counter's sample is its name with _total, once
            name, kind = name.removesuffix("_total"), "counter"
        for suffix in SUFFIXES[kind.lower()]:
            out[name + suffix] = label_set | ({"le"} if suffix == "_bucket" else set())
    return out
