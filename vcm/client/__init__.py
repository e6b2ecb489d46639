"""Python client of the vcm HTTP API (:mod:`vcm.api.app`): :class:`VcmClient` (sync) and
:class:`AsyncVcmClient`, one method per route, over httpx.

Every method returns the route's JSON body as a dict. An error response is raised as the
:mod:`vcm.errors` class of its code (``RevConflict`` for ``REV_CONFLICT`` with ``current_rev``
in ``.details``, ``TokenBudgetExceeded`` with ``required_headroom``, ...), so code written against
the in-process :class:`~vcm.service.MemoryService` catches the same exceptions::

    VcmError                the root; raised itself for a code this client does not know, or a
    │                       reply that is not vcm's JSON (``.code`` ``HTTP_<status>``)
    ├── StoreUnavailable    STORE_UNAVAILABLE (503): Redis or the store is down; retry later
    └── ...                 one class per code, as the server raises them

Transport failures (connection refused, timeouts) are httpx's own exceptions. Pass ``transport``
to route requests anywhere (``httpx.ASGITransport(app)``, ``httpx.MockTransport``) in tests.

The package: :mod:`.replies` (requests and replies, the error mapping), :mod:`.agent_ops` and
:mod:`.memory_ops` (one method per route, shared by both clients), :mod:`.sync_client` and
:mod:`.async_client`.
"""

from __future__ import annotations

from vcm.client.async_client import AsyncVcmClient
from vcm.client.replies import error_from
from vcm.client.sync_client import VcmClient
from vcm.sync.config import CacheConfig
from vcm.tools.schemas import tool_schemas
from vcm.wire import Call

__all__ = ["AsyncVcmClient", "CacheConfig", "Call", "VcmClient", "error_from", "tool_schemas"]
