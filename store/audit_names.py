"""The names in audit rows (``memory_events``, :class:`vcm.store.types.MemoryEvent`): their kinds,
the fixed actors, and the one format of their ids. The store writes some rows itself (``evict``,
with an eviction commit), so the names live at its level.

Kinds and actors are :class:`~enum.StrEnum` members, stored, serialised and compared as their
plain string values (``EventKind.FLUSH == "flush"``): rows written before the enums existed read
the same, and API filters (``?kinds=flush``) keep working. A new kind is added here, never spelled
at a call site. Actors that name a caller (``api:agent:<id>``, ``worker:<task>``) are built by
:mod:`vcm.obs.audit`.
"""

from __future__ import annotations

from enum import StrEnum


class EventKind(StrEnum):
    # Agents and their lifecycle
    AGENT_CREATED = "agent_created"
    AGENT_DELETED = "agent_deleted"
    AGENT_EXPORTED = "agent_exported"  # a portable export (vcm.service.portable)
    AGENT_IMPORTED = "agent_imported"  # a portable import's begun and done rows
    AGENT_PRINCIPALS = "agent_principals"  # an agent's user or domain changed (vcm.service.principals)
    PRINCIPAL_CREATED = "principal_created"  # a user or domain, under agent "*"
    PRINCIPAL_DELETED = "principal_deleted"  # ... and its deletion, with what went
    RESET = "reset"
    FORGET = "forget"
    # The main context and the eviction protocol
    APPEND = "append"
    MEMORY_PRESSURE = "memory_pressure"
    FLUSH = "flush"
    EVICT = "evict"
    SUMMARIZE = "summarize"
    DRIFT_ALARM = "drift_alarm"
    DEAD_LETTER = "dead_letter"
    TARGET_UNREACHABLE = "target_unreachable"
    # Working blocks and recall
    CORE_WRITE = "core_write"
    CORE_DELETE = "core_delete"
    RECALL_WRITE = "recall_write"
    REEMBED = "reembed"
    EXPIRE = "expire"
    # One run of a periodic maintenance job (vcm.types.MaintenanceJob), agent "*"
    MAINTENANCE = "maintenance"
    # Archival memory
    ARCHIVAL_INGEST = "archival_ingest"
    COMPLIANCE_VIOLATION = "compliance_violation"
    # Structured memory
    FACT_DECISION = "fact_decision"
    FACT_FORGOTTEN = "fact_forgotten"
    FACTS_ARCHIVED = "facts_archived"
    GUARD_OVERRIDE = "guard_override"
    STATE_SET = "state_set"
    STATE_DELETED = "state_deleted"
    # What one built prompt injected: ids of facts, messages, skills and state keys (vcm.service.injections)
    INJECTION = "injection"
    # Snapshots
    SNAPSHOT = "snapshot"
    SNAPSHOT_DELETED = "snapshot_deleted"
    SNAPSHOT_RESTORED = "snapshot_restored"
    # Tools, heartbeats, client instances
    HB_START = "hb_start"
    HEARTBEAT_END = "heartbeat_end"
    SYNC_CONFLICT = "sync_conflict"
    # A refused or failed operation (its code and numbers, never the content)
    ERROR = "error"


class Actor(StrEnum):
    """The actors that name no particular caller (see :mod:`vcm.obs.audit` for the whole list)."""

    SYSTEM = "system"  # library use with no caller named
    CLI = "cli"  # the ``vcm`` command line
    API_ADMIN = "api:admin"  # the operator's bearer token on the HTTP API
    MCP_ADMIN = "mcp:admin"  # the operator's token on a stdio MCP session


def audit_id(agent_id: str, tag: str, *parts: object) -> str:
    """The id of an audit row, ``<agent>:<tag>:<part>:...``: fixed by what the row records (a
    batch, a message, a block revision), so a replayed write finds its row and adds none. The tags
    are part of stored ids (some predate :class:`EventKind` and differ from the kind, e.g. ``core``
    for ``core_write``): changing one would make replays of older writes audit twice."""
    return ":".join((agent_id, tag, *(str(p) for p in parts)))
