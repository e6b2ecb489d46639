"""Celery task names of the cold path: the contract between dispatchers, routes and the tasks."""

from __future__ import annotations

EVICT = "tasks.evict_batch"
SPOOL = "tasks.spool_messages"
# The messages of several agents in one task: what the API's background publisher sends, one
# task per publishing round rather than one per agent (vcm.workers.dispatch.BackgroundDispatcher).
SPOOL_MANY = "tasks.spool_agents"
SWEEP = "tasks.sweep"
SWEEP_CONFIRM = "tasks.sweep_confirm"
EXPIRE = "tasks.expire_recall"
# Periodic snapshots of every agent (beat, when durability.snapshot_interval_s > 0).
SNAPSHOT = "tasks.snapshot_agents"
# Promotes shadow facts that pass the replay test (vcm.service.facts.Facts.consolidate), beat.
CONSOLIDATE = "tasks.consolidate_facts"
# Records the dead letter of an eviction whose worker process died on its last attempt.
DEAD_LETTER = "tasks.record_dead_letter"
# Archival ingestion (tasks/ingest/documents.py) registers under this name; it runs on the ingest queue.
INGEST = "tasks.ingest_archival"
# Embeds stored messages lacking a vector of the current version (tasks/recall/reembed.py), ingest queue.
REEMBED = "tasks.reembed_messages"

# Tasks that take the shared retry policy (backoff, max_retries, delivery cap) from the worker
# settings; a task subclassing vcm.workers.tasks.VcmTask should be listed here.
RETRIED = (EVICT, SPOOL, SPOOL_MANY, SWEEP, SWEEP_CONFIRM, EXPIRE, SNAPSHOT, CONSOLIDATE, DEAD_LETTER, INGEST, REEMBED)
