"""The memory service (:class:`MemoryService`), composed of parts that share one typed core.

| module | holds |
| --- | --- |
| :mod:`~vcm.service.facade` | :class:`MemoryService`: builds the parts and binds their methods |
| :mod:`~vcm.service.core` | what the parts share: tiers, ports, agent lookup, claims, audit, change feed, |
| | poisoning scan and policy guard, query vectors |
| :mod:`~vcm.service.agents` | agent creation and what entry points read (gauges, stats, health, events, turns) |
| :mod:`~vcm.service.messages` | append, evict, write_recall, the assembled context, captured tags |
| :mod:`~vcm.service.blocks` | working blocks |
| :mod:`~vcm.service.search` | recall and archival search, archival ingestion jobs |
| :mod:`~vcm.service.facts` | facts (guard, dedup, evidence, graph edges) |
| :mod:`~vcm.service.fact_input` | what a fact write may carry, checked |
| :mod:`~vcm.service.state` | state keys |
| :mod:`~vcm.service.graph` | the entity neighbourhood query |
| :mod:`~vcm.service.lifecycle` | delete, forget a document, reset |
| :mod:`~vcm.service.forgetting` | forget a message wherever it is, with what was derived from it; receipts |
| :mod:`~vcm.service.snapshots` | snapshots and restores |
| :mod:`~vcm.service.replicas` | the change feed, sync conflicts, instance status |
| :mod:`~vcm.service.context` | the prompt the model sees (``build_context``) |
| :mod:`~vcm.service.bulk` | the CLI's bulk jobs (``vcm ingest``, ``vcm reembed``), through a port |
| :mod:`~vcm.service.maintenance` | run a maintenance job now, when each last ran, through a port |
| :mod:`~vcm.service.tokens` | agent tokens: their format, issuing one with a new agent, rotation |
"""

from vcm.service.context import BuiltContext
from vcm.service.core import QUERY_VECTORS, Embed
from vcm.service.facade import MemoryService
from vcm.service.fact_input import RememberResult
from vcm.service.graph import EntityGraph
from vcm.service.search import ArchivalResult, RecallResult, doc_id_for, ingest_job_id
from vcm.service.snapshots import new_snapshot_id

__all__ = [
    "QUERY_VECTORS",
    "ArchivalResult",
    "BuiltContext",
    "Embed",
    "EntityGraph",
    "MemoryService",
    "RecallResult",
    "RememberResult",
    "doc_id_for",
    "ingest_job_id",
    "new_snapshot_id",
]
