"""The Redis client: a real server when a URL is configured, else in-process fakeredis (with Lua).

``redis://`` / ``rediss://`` / ``unix://`` name one server; ``redis+cluster://host:port[,host:port…]``
(``rediss+cluster://`` with TLS) names seed nodes of a Redis Cluster, whose other masters the
client discovers (``CLUSTER SLOTS``). Every key of an agent carries its hash tag
(:mod:`vcm.hotpath.keys`), so each Lua script and each MULTI pipeline of the hot state lands on one
slot and the same code runs on either kind of server.
"""

from __future__ import annotations

import threading
from typing import cast
from urllib.parse import parse_qsl, unquote, urlsplit

import fakeredis
import redis
from redis.cluster import ClusterNode, RedisCluster

CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")
SCHEMES = ("redis://", "rediss://", "unix://", *CLUSTER_SCHEMES)

_lock = threading.Lock()
_embedded: fakeredis.FakeServer | None = None


def embedded_server() -> fakeredis.FakeServer:
    """One fake server per process, so the API, the in-process worker and tests share state."""
    global _embedded
    with _lock:
        if _embedded is None:
            _embedded = fakeredis.FakeServer()
        return _embedded


def is_cluster(url: str) -> bool:
    return url.startswith(CLUSTER_SCHEMES)


def connect(url: str, *, decode_responses: bool = True, **options: object) -> redis.Redis:
    if not url:
        return fakeredis.FakeRedis(server=embedded_server(), decode_responses=decode_responses)
    if is_cluster(url):
        return connect_cluster(url, decode_responses=decode_responses, **options)
    options.setdefault("health_check_interval", 30)
    return redis.Redis.from_url(url, decode_responses=decode_responses, **options)


def connect_cluster(url: str, *, decode_responses: bool = True, **options: object) -> redis.Redis:
    """A :class:`RedisCluster` client for a ``redis+cluster://`` URL.

    Typed as :class:`redis.Redis`: the hot state uses only commands both clients route the same
    way (single-slot Lua scripts and MULTI pipelines, per-key reads, the one global agents set),
    so callers need not know which kind of server they talk to.
    """
    parts = urlsplit(url)
    if parts.path not in ("", "/", "/0"):
        # Cluster mode has database 0 only; a /N meant for a single server would be silently lost.
        raise ValueError(f"a Redis Cluster has database 0 only, not {parts.path!r}")
    userinfo, _, hosts = parts.netloc.rpartition("@")
    username, _, password = userinfo.partition(":")
    nodes = []
    for seed in hosts.split(","):
        host, _, port = seed.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"cluster seed {seed!r} must be host:port")
        nodes.append(ClusterNode(host.strip("[]"), int(port)))  # type: ignore[no-untyped-call]
    kwargs: dict[str, object] = {
        "startup_nodes": nodes,
        "decode_responses": decode_responses,
        "ssl": parts.scheme == "rediss+cluster",
        # Refuse a cluster that does not serve every slot: it would fail only some agents' calls.
        # (MOVED/ASK after a failover or resharding are followed either way.)
        "require_full_coverage": True,
    }
    if username:
        kwargs["username"] = unquote(username)
    if password:
        kwargs["password"] = unquote(password)
    for name, value in parse_qsl(parts.query):
        kwargs[name] = float(value) if name.endswith("timeout") else value
    kwargs.update(options)
    return cast(redis.Redis, RedisCluster(**kwargs))  # type: ignore[arg-type]
