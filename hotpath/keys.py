"""Every Redis key vcm uses, in one place.

All keys of one agent share the hash tag ``{<agent_id>}`` so every multi-key Lua script touches
one cluster slot. Scripts derive per-batch keys (``evicting:<id>``) from :data:`AGENT_PREFIX`.
"""

from __future__ import annotations

import hashlib

ROOT = "vcm"
AGENT_PREFIX = ROOT + ":{%s}:"
# Global (untagged) set of agent ids; written outside the per-agent scripts, read by sweepers.
AGENTS = ROOT + ":agents"
# Global key of the MACs on the tool executor's result cursors (created once, shared by processes).
CURSOR_SECRET = ROOT + ":cursor_secret"

META = "meta"  # hash: budget in tokens, counters, sequences, flags
SYSTEM = "system"  # hash: system prompt, tool schemas (JSON), model
FIFO = "fifo"  # list: "<tokens>:<pinned 0|1>:<message id>", oldest first
MESSAGES = "msg"  # hash: message id -> message JSON (FIFO and pending batches)
BATCHES = "batches"  # zset: pending eviction batch ids (score = id)
PLACEHOLDERS = "ph"  # hash: batch id -> "<count>|<tokens it added to the one shared placeholder>"
BLOCKS = "blocks"  # hash: block id -> block JSON
SUMMARY = "summary"  # hash: text, tokens, rev, batch_id
EVICTING = "evicting:"  # list per batch: message ids, oldest first
IDEMPOTENCY = "idem:"  # string per key: {"fp": ..., "result": ...}, with a TTL
HEARTBEAT = "heartbeat"  # hash: v (version, for compare-and-set), s (heartbeat chain state JSON)
# string: the sweeper found every FIFO message up to this seq in the store (reconcile watermark)
RECONCILED = "reconciled"
JOB = "job:"  # hash per archival ingestion job: status, progress, result (see vcm.hotpath.jobs)
TOKEN = "token"  # string: SHA-256 (hex) of the agent's API bearer token; the token itself is never stored
# stream: the agent's change feed (kind, key, version, op, time of each change; never content)
CHANGES = "changes"
INSTANCES = "instances"  # hash: client instance id -> its latest sync status report (JSON)
TURN = "turn"  # string with a TTL: the lock of the chat turn running (vcm.hotpath.turns)
# zset, write-behind only: message id -> the time its append was acknowledged, until the store
# holds it (the spool's backlog, bounded by [durability] write_behind_max_s / _max_messages)
UNSPOOLED = "unspooled"


def prefix(agent_id: str) -> str:
    return AGENT_PREFIX % agent_id


def key(agent_id: str, name: str) -> str:
    return prefix(agent_id) + name


def evicting(agent_id: str, batch_id: int) -> str:
    return prefix(agent_id) + EVICTING + str(batch_id)


def idempotency(agent_id: str, idempotency_key: str) -> str:
    # Hashed so any caller-chosen key is a short, safe Redis key.
    digest = hashlib.sha256(idempotency_key.encode("utf-8")).hexdigest()[:32]
    return prefix(agent_id) + IDEMPOTENCY + digest


def job(agent_id: str, job_id: str) -> str:
    return prefix(agent_id) + JOB + job_id


# Message ids of the hot path: ``m<seq>`` in the agent's message sequence (the Lua scripts
# build the same form: ``'m' .. seq``).
MESSAGE_ID_PREFIX = "m"


def message_id(seq: int) -> str:
    return f"{MESSAGE_ID_PREFIX}{seq}"


def message_seq(message_id: str) -> int | None:
    """The seq in a hot-path message id; None for any other id."""
    digits = message_id.removeprefix(MESSAGE_ID_PREFIX)
    return int(digits) if message_id.startswith(MESSAGE_ID_PREFIX) and digits.isdigit() else None


# string per batch, with a TTL: the batch was begun by evict_fifo(summarize=false), so the cold
# path commits it to recall and leaves the recursive summary as it is (deleted once it finished).
SKIP_SUMMARY = "skip_summary:"
SKIP_SUMMARY_TTL_S = 7 * 86400  # far beyond any batch's life; a stale flag must not outlive its id


def skip_summary(agent_id: str, batch_id: int) -> str:
    return prefix(agent_id) + SKIP_SUMMARY + str(batch_id)
