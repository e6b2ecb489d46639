"""The Redis client: a real server when a URL is configured, else in-process fakeredis (with Lua)."""

from __future__ import annotations

import threading

import fakeredis
import redis

_lock = threading.Lock()
_embedded: fakeredis.FakeServer | None = None


def embedded_server() -> fakeredis.FakeServer:
    """One fake server per process, so the API, the in-process worker and tests share state."""
    global _embedded
    with _lock:
        if _embedded is None:
            _embedded = fakeredis.FakeServer()
        return _embedded


def connect(url: str) -> redis.Redis:
    if not url:
        return fakeredis.FakeRedis(server=embedded_server(), decode_responses=True)
    return redis.Redis.from_url(url, decode_responses=True, health_check_interval=30)
