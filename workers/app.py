"""The Celery app (``celery -A vcm.workers.app ...``), configured from vcm settings.

Importing this module is what makes a process a vcm worker (or beat, or Flower): it wires the
Celery dispatcher and the broker-backed delivery log into :mod:`vcm.tasks.runtime` and connects the
worker signals.
"""

from __future__ import annotations

from celery import Celery

from vcm.dispatch import Dispatcher
from vcm.settings import Settings, get_settings
from vcm.tasks import runtime
from vcm.workers.config import celery_settings
from vcm.workers.deliveries import RedisDeliveryLog
from vcm.workers.dispatch import CeleryDispatcher


def create_app(settings: Settings) -> Celery:
    app = Celery("vcm", include=["vcm.tasks.celery_tasks"])
    app.conf.update(celery_settings(settings))
    return app


app = create_app(get_settings())


def _dispatcher(settings: Settings) -> Dispatcher:
    return CeleryDispatcher(app, retries=settings.worker.dispatch_retries)


def _deliveries(settings: Settings) -> runtime.DeliveryLog:
    if settings.broker_url.startswith(("redis://", "rediss://", "unix://")):
        w = settings.worker
        return RedisDeliveryLog(
            settings.broker_url, ttl_s=w.visibility_timeout_s * (w.max_deliveries + 1), prefix=w.broker_prefix
        )
    return runtime.LocalDeliveryLog()  # memory:// : one process, nothing redelivers across processes


runtime.configure(dispatcher=_dispatcher, deliveries=_deliveries)

from vcm.workers import signals  # noqa: E402, F401  (connects the handlers)
