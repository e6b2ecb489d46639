"""vcm: a virtual context manager for LLM agents.

What a user imports::

    from vcm import VcmClient              # talk to a running `vcm serve` (needs only httpx)
    from vcm import CacheConfig            # VcmClient(..., cache=CacheConfig()): local cache + sync
    from vcm import MemoryService          # the in-process façade (needs the `server` extra)
    from vcm import tool_schemas           # the LLM tools in OpenAI function format
    from vcm import VcmError, RevConflict  # the one exception tree (vcm.errors)

A running service with its cold path (in-process worker in embedded mode) comes from
``vcm.workers.wiring.running_service()``, as the CLI builds it.

Importing ``vcm`` loads only the client, the tool schemas and the errors; ``MemoryService`` is
imported on first use, so a client-only install never touches Redis, Celery or torch.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from vcm.client import AsyncVcmClient, VcmClient
from vcm.errors import (
    ERRORS,
    ConfigError,
    Conflict,
    ErrorCode,
    IdempotencyMismatch,
    InternalError,
    NotFound,
    PinLimitExceeded,
    PolicyRefused,
    RateLimited,
    RevConflict,
    SnapshotCorrupt,
    StoreUnavailable,
    TaintedContent,
    TokenBudgetExceeded,
    Unauthorized,
    ValidationError,
    VcmError,
)
from vcm.sync import CacheConfig
from vcm.tools.schemas import schema_of, tool_schemas

if TYPE_CHECKING:
    from vcm.service import MemoryService

try:
    __version__ = version("vcm")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"


def __getattr__(name: str) -> Any:
    # Lazy: the façade pulls in the server side (redis, the store adapters).
    if name == "MemoryService":
        from vcm.service import MemoryService

        return MemoryService
    raise AttributeError(f"module 'vcm' has no attribute {name!r}")


__all__ = [
    "ERRORS",
    "AsyncVcmClient",
    "CacheConfig",
    "ConfigError",
    "Conflict",
    "ErrorCode",
    "IdempotencyMismatch",
    "InternalError",
    "MemoryService",
    "NotFound",
    "PinLimitExceeded",
    "PolicyRefused",
    "RateLimited",
    "RevConflict",
    "SnapshotCorrupt",
    "StoreUnavailable",
    "TaintedContent",
    "TokenBudgetExceeded",
    "Unauthorized",
    "ValidationError",
    "VcmClient",
    "VcmError",
    "__version__",
    "schema_of",
    "tool_schemas",
]
