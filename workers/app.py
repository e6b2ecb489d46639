"""The Celery app (``celery -A vcm.workers.app ...``), configured from vcm settings.

Importing this module is what makes a process a vcm worker (or beat, or Flower): it wires the
Celery dispatcher and the broker-backed delivery log into :mod:`vcm.workers.runtime` and connects the
worker signals.
"""

from __future__ import annotations

from celery import Celery

from vcm.dispatch import Dispatcher
from vcm.settings import Settings, get_settings
from vcm.workers import runtime
from vcm.workers.config import AMQP_CONSUMER_TIMEOUT_S, celery_settings, is_redis
from vcm.workers.deliveries import RedisDeliveryLog
from vcm.workers.dispatch import CeleryDispatcher


def create_app(settings: Settings) -> Celery:
    app = Celery("vcm", include=["vcm.workers.tasks"])
    app.conf.update(celery_settings(settings))
    return app


app = create_app(get_settings())


def _dispatcher(settings: Settings) -> Dispatcher:
    return CeleryDispatcher(app, retries=settings.worker.dispatch_retries)


def _deliveries(settings: Settings) -> runtime.DeliveryLog:
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
    return runtime.LocalDeliveryLog()  # memory:// : one process, nothing redelivers across processes


runtime.configure(dispatcher=_dispatcher, deliveries=_deliveries)

from vcm.workers import signals  # noqa: E402, F401  (connects the handlers)
