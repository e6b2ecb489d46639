"""Names of every ArangoDB object vcm uses, in one place.

``config/arango_schema.json`` declares the same names as data; ``tests/store/test_arango_schema``
checks that the two agree. Query text only ever contains these constants (never caller input).
"""

from __future__ import annotations

from typing import Final

from vcm.store.types import EDGE_KINDS, EdgeKind, NodeCollection

CORE: Final = "core_memory"
MESSAGES: Final = "messages"
ARCHIVAL: Final = "archival_docs"
EVENTS: Final = "memory_events"
RECALL_LOG: Final = "recall_log"
CITES: Final = "cites"
DERIVED_FROM: Final = "derived_from"
MENTIONS: Final = "mentions"
RELATES_TO: Final = "relates_to"
BATCHES: Final = "eviction_batches"
IDEMPOTENCY: Final = "idempotency"
CURSORS: Final = "cursors"
META: Final = "vcm_meta"
SNAPSHOTS: Final = "agent_state_snapshots"
FACTS: Final = "agent_longterm_memory"
STATE: Final = "agent_working_memory"
TOMBSTONES: Final = "tombstones"

VIEW: Final = "messages_view"
GRAPH: Final = "g_mem"
TEXT_ANALYZER: Final = "text_en"

NODE_COLLECTIONS: Final[tuple[NodeCollection, ...]] = (CORE, MESSAGES, ARCHIVAL, EVENTS, FACTS)
EDGE_COLLECTIONS: Final[tuple[EdgeKind, ...]] = EDGE_KINDS
DOCUMENT_COLLECTIONS: Final = (*NODE_COLLECTIONS, BATCHES, IDEMPOTENCY, CURSORS, META, SNAPSHOTS, STATE, TOMBSTONES)
ALL_COLLECTIONS: Final = (*DOCUMENT_COLLECTIONS, *EDGE_COLLECTIONS)

# commit_eviction touches exactly these; a stream transaction must declare them up front.
EVICTION_WRITE: Final = (MESSAGES, RECALL_LOG, CORE, EVENTS, BATCHES)
PUT_CORE_WRITE: Final = (CORE, IDEMPOTENCY)
# Everything an agent owns, in the order delete_agent removes it (the record first, so nothing
# rebuilds a half-deleted agent; each removal filters on agent_id, so a retry finishes the job).
AGENT_OWNED: Final = (
    CORE, MESSAGES, ARCHIVAL, EVENTS, BATCHES, IDEMPOTENCY, CURSORS, SNAPSHOTS, FACTS, STATE, TOMBSTONES,
    *EDGE_COLLECTIONS,
)  # fmt: skip
