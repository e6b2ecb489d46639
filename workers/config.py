"""Celery settings, derived from vcm settings. Every setting says why in the comment above it
(settings listed together share one); ``tests/workers/test_config.py`` checks that none is left
without. Sources: the Celery documentation on tasks and acknowledgements
(https://docs.celeryq.dev/en/stable/userguide/tasks.html), the Redis broker's caveats
(https://docs.celeryq.dev/en/stable/getting-started/backends-and-brokers/redis.html#redis-caveats),
prefetch limits (https://docs.celeryq.dev/en/stable/userguide/optimizing.html#prefetch-limits) and
the configuration reference (https://docs.celeryq.dev/en/stable/userguide/configuration.html).
"""

from __future__ import annotations

from typing import Any

from vcm.errors import ConfigError
from vcm.settings import Settings
from vcm.workers import names, routes
from vcm.workers.beat import schedule


def is_redis(url: str) -> bool:
    return url.startswith(("redis://", "rediss://", "unix://"))


def is_amqp(url: str) -> bool:
    return url.startswith(("amqp://", "amqps://", "pyamqp://"))


# RabbitMQ closes a channel whose delivery stays unacknowledged longer than its consumer_timeout
# (30 min by default), and redelivers the message: the same trap as Redis's visibility timeout.
AMQP_CONSUMER_TIMEOUT_S = 1800


def broker_transport_options(settings: Settings) -> dict[str, Any]:
    w = settings.worker
    if is_amqp(settings.broker_url):
        longest = w.task_time_limit_s + w.retry_backoff_max_s
        if longest >= AMQP_CONSUMER_TIMEOUT_S:
            # A late-ack task (or a retry's countdown, held unacked by the worker) outliving it
            # would be redelivered while it still runs or waits.
            raise ConfigError(
                f"with RabbitMQ, task_time_limit_s + retry_backoff_max_s ({longest}) must stay below its "
                f"consumer_timeout ({AMQP_CONSUMER_TIMEOUT_S} s by default)",
                setting="worker.task_time_limit_s",
            )
        # RabbitMQ hands a dead consumer's unacknowledged messages back at once (no visibility
        # timeout to tune). Publisher confirms: a send returns only once the broker holds the message,
        # as a Redis LPUSH does, so a dispatch that "succeeded" cannot vanish in a broker crash.
        return {"confirm_publish": w.amqp_confirm_publish}
    if not is_redis(settings.broker_url):
        # memory:// (embedded mode): the in-process worker polls its queues; 10 ms keeps a hand-off short.
        return {"polling_interval": 0.01}
    options: dict[str, Any] = {
        # A delivered message unacked this long goes to another worker: above the hard time limit
        # plus the longest retry countdown, or running/waiting tasks run twice (Celery docs, Redis
        # broker caveats).
        "visibility_timeout": w.visibility_timeout_s,
        # How often a worker looks for such messages (a killed worker's tasks come back this soon
        # after the timeout); the throttle of 1 makes this interval the only knob.
        "unacked_restore_interval": w.restore_interval_s,
        "unacked_restore_throttle": 1,
    }
    if w.broker_prefix:
        # Deployments sharing one Redis database keep apart (queues, unacked sets, event channels).
        options["global_keyprefix"] = w.broker_prefix
    return options


def celery_settings(settings: Settings) -> dict[str, Any]:
    w = settings.worker
    return {
        # From vcm settings: memory:// in embedded mode, Redis or RabbitMQ (amqp://) in production.
        "broker_url": settings.broker_url,
        # Visibility timeout, restore cadence and key prefix (see broker_transport_options).
        "broker_transport_options": broker_transport_options(settings),
        # Compose starts workers alongside Redis: keep trying instead of exiting at boot.
        "broker_connection_retry_on_startup": True,
        # Results only when a backend is configured: tasks report through the store's events,
        # and nothing on the hot path waits for a task.
        "result_backend": w.result_backend or None,
        "task_ignore_result": not w.result_backend,
        # Keep results a bounded time (Celery's default too, stated so it follows the setting).
        "result_expires": w.result_expires_s,
        # The docs ask for the visibility timeout in all three places (celery#7651).
        "result_backend_transport_options": {"visibility_timeout": w.visibility_timeout_s},
        "visibility_timeout": w.visibility_timeout_s,
        # JSON only: tasks take ids, and no pickle crosses the broker.
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        # Ack after the task ran: a worker that dies mid-task leaves the message to be delivered
        # again. Safe because every task is idempotent (batch ids, message ids, event ids).
        "task_acks_late": True,
        # A task that raised has already retried or dead-lettered itself; requeueing would loop.
        "task_acks_on_failure": True,
        # A task killed by the hard time limit is acked and marked failed; the sweeper re-drives
        # its batch after the grace period instead of an immediate requeue loop.
        "task_acks_on_timeout": True,
        # A pool child that dies mid-task (OOM in the embedder, segfault) is retried like any
        # failure, counted against max_retries: the redelivery cap that makes the next line safe.
        "task_retry_on_worker_lost": True,
        # If sending that retry fails, requeue rather than ack, so a batch is never dropped; the
        # loop this can cause (Celery docs, task_reject_on_worker_lost) is bounded by the retry
        # count above and by the per-message delivery cap in vcm.workers.tasks (max_deliveries).
        "task_reject_on_worker_lost": True,
        # Retry policy for every vcm task (read by vcm.workers.tasks.VcmTask): exponential
        # backoff with full jitter, capped, then dead-lettered.
        "task_annotations": {name: retry_policy(settings) for name in names.RETRIED},
        # Bound every task; the soft limit raises inside the task first so it can retry cleanly.
        "task_time_limit": w.task_time_limit_s,
        "task_soft_time_limit": w.task_soft_time_limit_s,
        # Evictions and embeddings are long: reserve one task per process, not four, so a busy
        # process does not hold tasks another could run (Celery docs, prefetch limits).
        "worker_prefetch_multiplier": 1,
        # Retries are countdown messages held in worker memory; cap them (celery#9849).
        "worker_eta_task_limit": w.eta_task_limit,
        # On broker connection loss, stop long tasks whose ack can no longer be sent, instead of
        # finishing them and running them again elsewhere (the default from Celery 6).
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        # On shutdown, finish or hand back in-flight late-ack tasks instead of leaving them until
        # the visibility timeout (Celery docs, Redis broker caveats).
        "worker_soft_shutdown_timeout": w.soft_shutdown_timeout_s,
        # Flower and Prometheus exporters build their view from task events.
        "worker_send_task_events": True,
        # ... including task-sent, which gives queue wait time.
        "task_send_sent_event": True,
        # STARTED state, so Flower shows what is running, not only what is queued.
        "task_track_started": True,
        # Queues and routes: hot / cold / ingest, one worker pool each.
        "task_queues": routes.queues(),
        "task_default_queue": routes.COLD,
        "task_routes": routes.ROUTES,
        # Periodic maintenance, run by exactly one `celery beat` (see workers/beat.py).
        "beat_schedule": schedule(settings),
    }


def retry_policy(settings: Settings) -> dict[str, Any]:
    w = settings.worker
    return {
        "max_retries": w.max_retries,
        "retry_backoff": w.retry_backoff_s,
        "retry_backoff_max": w.retry_backoff_max_s,
        "max_deliveries": w.max_deliveries,
        "default_retry_delay": w.retry_backoff_s,  # the countdown of a worker-lost retry
    }
