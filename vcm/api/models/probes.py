"""The health probes' answer (:mod:`vcm.api.routes.probes`)."""

from __future__ import annotations

from pydantic import BaseModel


class ComponentHealth(BaseModel):
    ok: bool
    backend: str


class HealthOut(BaseModel):
    ok: bool
    redis: ComponentHealth
    store: ComponentHealth
