"""The probes (no auth): ``/healthz`` (and ``/health``) from memory, ``/readyz`` probed now, and
``/metrics`` (Prometheus; the admin's with ``[metrics] require_admin``).

No ``from __future__ import annotations``: FastAPI reads these signatures at import time.
"""

from collections.abc import Callable, Mapping
from typing import Any

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool

from vcm.api.auth import TokenAuthority
from vcm.api.deps import HealthDep
from vcm.api.models import ComponentHealth, HealthOut
from vcm.obs import metrics
from vcm.obs.metrics_state import StateCollector
from vcm.service import MemoryService
from vcm.settings import Settings

router = APIRouter(tags=["probes"])


async def health(response: Response, cache: HealthDep) -> HealthOut:
    """Health of Redis and the store as last probed (at most a second or so ago; see
    :mod:`vcm.api.health`): answered from memory, with no thread-pool hop and no I/O. No auth,
    and no details beyond ok and the backend."""
    report = cache.cached()
    if report is None:  # the first ask of this process: probe once
        report = await run_in_threadpool(cache.refresh)
    return _health_out(report, response)


def ready(response: Response, cache: HealthDep) -> HealthOut:
    """Redis and the store probed now (a PING and the store's health query)."""
    return _health_out(cache.refresh(), response)


router.add_api_route("/healthz", health, methods=["GET"], response_model=HealthOut)
# compose/docker-compose.yml probes /health.
router.add_api_route("/health", health, methods=["GET"], response_model=HealthOut, include_in_schema=False)
router.add_api_route("/readyz", ready, methods=["GET"], response_model=HealthOut)


def _health_out(report: Mapping[str, Any], response: Response) -> HealthOut:
    response.status_code = 200 if report["ok"] else 503
    return HealthOut(
        ok=report["ok"],
        redis=ComponentHealth(ok=report["redis"], backend="redis"),
        store=ComponentHealth(ok=report["store"], backend=report["store_backend"]),
    )


def metrics_route(
    service: MemoryService, authority: TokenAuthority, settings: Settings
) -> Callable[[Request], Response]:
    """Prometheus exposition: this process's vcm_* families (every process's, summed, under
    PROMETHEUS_MULTIPROC_DIR) and the state read at scrape time (:mod:`vcm.obs.metrics_state`).
    A plain Starlette endpoint, built per app: its registry reads this app's service."""
    m = settings.metrics
    # The collector reads the hot state's Redis itself, read-only: the pending batches of every
    # agent and the instance reports, one pipelined pass per scrape, which no per-agent operation
    # of the hot state could answer without a round trip per agent.
    registry = metrics.registry(
        StateCollector(service.hot.redis, service.stats, agent_stats=service.stats,
                       memory_quota_items=m.memory_quota_items, max_agents=m.max_agent_series)
    )  # fmt: skip

    def exposition(request: Request) -> Response:
        if settings.metrics.require_admin:
            authority.principal(request.headers.get("authorization")).require_admin()
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return exposition
