"""Celery task names of the cold path: the contract between dispatchers, routes and the tasks."""

from __future__ import annotations

EVICT = "tasks.evict_batch"
SPOOL = "tasks.spool_messages"
SWEEP = "tasks.sweep"
SWEEP_CONFIRM = "tasks.sweep_confirm"
EXPIRE = "tasks.expire_recall"
# Records the dead letter of an eviction whose worker process died on its last attempt.
DEAD_LETTER = "tasks.record_dead_letter"
# Archival ingestion (tasks/ingest.py) registers under this name; it runs on the ingest queue.
INGEST = "tasks.ingest_archival"
# Embeds stored messages lacking a vector of the current version (tasks/reembed.py), ingest queue.
REEMBED = "tasks.reembed_messages"

# Tasks that take the shared retry policy (backoff, max_retries, delivery cap) from the worker
# settings; a task subclassing vcm.tasks.celery_tasks.VcmTask should be listed here.
RETRIED = (EVICT, SPOOL, SWEEP, SWEEP_CONFIRM, EXPIRE, DEAD_LETTER, INGEST, REEMBED)
