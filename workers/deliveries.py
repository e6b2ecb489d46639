"""Per-message delivery counts kept in Redis, shared by all workers.

Celery has no redelivery counter (Celery docs, task_reject_on_worker_lost): a message whose
worker dies mid-task comes back (after the visibility timeout on a Redis broker, at once on
RabbitMQ), again and again.
``vcm.workers.tasks.VcmTask`` asks this log how often the current attempt was delivered and
dead-letters it past ``max_deliveries``. The counts live on the Redis broker, or, with a broker
that is not Redis (RabbitMQ), in the hot state's Redis (a single server or a cluster: each count
is one key, so its INCR and EXPIRE stay on one slot).
"""

from __future__ import annotations

import redis

from vcm.hotpath.connection import connect

PREFIX = "vcm-worker:deliveries:"


class RedisDeliveryLog:
    def __init__(self, url: str, ttl_s: int, prefix: str = "") -> None:
        self._prefix = prefix + PREFIX
        self._redis: redis.Redis = connect(url, decode_responses=False, socket_timeout=5, socket_connect_timeout=5)
        # Counts only matter while the message can still come back.
        self._ttl_s = ttl_s

    def record(self, task_id: str, attempt: int) -> int:
        key = f"{self._prefix}{task_id}:{attempt}"
        pipe = self._redis.pipeline(transaction=True)
        pipe.incr(key)
        pipe.expire(key, self._ttl_s)
        count, _ = pipe.execute()
        return int(count)
