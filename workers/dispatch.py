"""The Celery implementation of the hot path's :class:`vcm.dispatch.Dispatcher` port.

Cheap on the caller's path: one publish by task name (no task module import, so the API process
never loads the summariser or the embedder), a short bounded publish retry, and no waiting for
results. The message is already committed in Redis when this runs, so a broker failure must not
fail the caller: it is logged and counted, and the sweeper re-drives the batch / spools the
message after its grace period.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from celery import Celery

from vcm.errors import StoreUnavailable
from vcm.tasks import names
from vcm.types import IngestRequest
from vcm.workers import metrics

log = logging.getLogger(__name__)


class CeleryDispatcher:
    def __init__(self, app: Celery, *, retries: int = 2) -> None:
        self.app = app
        self._policy = {"max_retries": retries, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5}

    def spool(self, agent_id: str, message_ids: Sequence[str]) -> None:
        if message_ids:
            self._send(names.SPOOL, [agent_id, list(message_ids)], "spool")

    def evict(self, agent_id: str, batch_id: int) -> None:
        self._send(names.EVICT, [agent_id, int(batch_id)], "evict")

    def ingest(self, request: IngestRequest) -> None:
        # The document travels in the message (it is nowhere else yet): a failed publish is the
        # caller's to know, not the sweeper's to repair.
        try:
            self.app.send_task(names.INGEST, kwargs=request.as_kwargs(), retry=True, retry_policy=self._policy)
        except Exception as exc:
            metrics.DISPATCH_FAILURES.labels(kind="ingest").inc()
            log.error("could not queue ingestion job %s of %s: %r", request.job_id, request.agent_id, exc)
            raise StoreUnavailable("the ingestion queue is unavailable; retry shortly", job_id=request.job_id) from exc

    def _send(self, task: str, args: list[Any], kind: str) -> None:
        try:
            self.app.send_task(task, args=args, retry=True, retry_policy=self._policy)
        except Exception as exc:  # any broker/transport error; the sweeper repairs the omission
            metrics.DISPATCH_FAILURES.labels(kind=kind).inc()
            log.error("could not dispatch %s%s: %r; the sweeper will pick it up", task, args, exc)
