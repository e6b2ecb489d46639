"""The composition root of a worker-side process: one explicit :func:`build` from settings.

A process entry point reads its settings once and calls :func:`build` (``vcm serve`` and the rest
of the CLI through :mod:`vcm.workers.wiring`, ``celery -A vcm.workers.app`` through
:mod:`vcm.workers.app`). It makes the Celery app, registers the dispatcher and the delivery log
that the cold path's per-process dependencies use (:mod:`vcm.workers.runtime`), and connects the
worker signals. Importing this module changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from celery import Celery

from vcm.dispatch import Dispatcher
from vcm.settings import Settings
from vcm.workers import runtime, signals
from vcm.workers.config import AMQP_CONSUMER_TIMEOUT_S, celery_settings, is_redis
from vcm.workers.deliveries import RedisDeliveryLog
from vcm.workers.dispatch import CeleryDispatcher


@dataclass(frozen=True)
class Worker:
    """What :func:`build` wired: the settings it read and the Celery app."""

    settings: Settings
    app: Celery


def create_app(settings: Settings) -> Celery:
    """A Celery app configured from vcm settings, with the vcm tasks registered on finalisation."""
    app = Celery("vcm", include=["vcm.workers.tasks"])
    app.conf.update(celery_settings(settings))
    return app


def build(settings: Settings) -> Worker:
    """Wire this process: the Celery app, the cold path's dispatcher and delivery log, the signals."""
    app = create_app(settings)
    runtime.configure(
        settings=settings,
        dispatcher=lambda s: dispatcher(app, s),
        deliveries=delivery_log,
    )
    signals.connect()
    return Worker(settings, app)


def dispatcher(app: Celery, settings: Settings) -> Dispatcher:
    return CeleryDispatcher(app, retries=settings.worker.dispatch_retries)


def delivery_log(settings: Settings) -> runtime.DeliveryLog:
    """Where redeliveries are counted: the broker's Redis, the hot state's Redis beside RabbitMQ,
    or process memory for ``memory://`` (one process: nothing redelivers across processes)."""
    w = settings.worker
    ttl_s = w.visibility_timeout_s * (w.max_deliveries + 1)
    if is_redis(settings.broker_url):
        return RedisDeliveryLog(settings.broker_url, ttl_s=ttl_s, prefix=w.broker_prefix)
    if not settings.broker_url.startswith("memory://") and settings.redis_url:
        # RabbitMQ redelivers too, but keeps no count a worker can read (classic queues): the
        # workers share the hot state's Redis instead. A delivery there can stay unacknowledged
        # up to RabbitMQ's consumer_timeout (not the visibility timeout) before it comes back.
        ttl_s = max(w.visibility_timeout_s, AMQP_CONSUMER_TIMEOUT_S) * (w.max_deliveries + 1)
        return RedisDeliveryLog(settings.redis_url, ttl_s=ttl_s, prefix=w.broker_prefix)
    return runtime.LocalDeliveryLog()
