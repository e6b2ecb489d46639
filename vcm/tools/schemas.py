"""The LLM-facing tools as JSON-schema function definitions in the OpenAI format.

Mutating tools take an ``idempotency_key`` (a retry with the same key returns the first result)
and, where they edit a document, its ``_rev``. Every tool takes ``request_heartbeat``.
"""

from __future__ import annotations

import copy
from typing import Any

HEARTBEAT = {
    "type": "boolean",
    "description": "Run inference again right after this tool returns (chain further steps).",
}
IDEMPOTENCY = {
    "type": "string",
    "minLength": 1,
    "maxLength": 256,
    "description": "A unique key for this write; repeating a call with the same key returns the first result.",
}
CURSOR = {"type": "string", "description": "Opaque cursor from a previous page; omit for the first page."}


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    props = dict(properties)
    props["request_heartbeat"] = HEARTBEAT
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": props,
                "required": [*required, "request_heartbeat"],
                "additionalProperties": False,
            },
        },
    }


_TOOLS: list[dict[str, Any]] = [
    _tool(
        "store_core",
        "Create or edit a working memory block that stays in your context. To edit, pass the block's "
        "current _rev from fetch_core; a stale _rev fails with REV_CONFLICT. Pinned blocks share a cap "
        "of 25% of the window.",
        {
            "block_id": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.\\-]{0,63}$"},
            "content": {"type": "string", "minLength": 1},
            "role": {"type": "string", "pattern": "^[A-Za-z0-9_\\-]{1,64}$", "description": "label, e.g. persona"},
            "pinned": {"type": "boolean"},
            "_rev": {"type": "string", "description": "current revision; omit only to create a new block"},
            "delete": {"type": "boolean", "description": "delete the block (needs _rev)"},
            "justification": {
                "type": "string",
                "description": "why text retrieved from memory may be promoted into a block (needed for tainted "
                "text: a sentence of at least 3 words)",
            },
            "idempotency_key": IDEMPOTENCY,
        },
        ["block_id", "idempotency_key"],
    ),
    _tool(
        "fetch_core",
        "Read working memory blocks with their _rev (all blocks when block_id is omitted). "
        "Results come in pages of at most 512 tokens; pass next_cursor for more.",
        {"block_id": {"type": "string"}, "cursor": CURSOR},
        [],
    ),
    _tool(
        "append_fifo",
        "Append a message to the conversation queue (your context). Old messages move to recall memory "
        "when the context fills up.",
        {
            "role": {"type": "string", "enum": ["user", "assistant", "system", "tool"]},
            "content": {"type": "string", "minLength": 1},
            "pinned": {"type": "boolean"},
            "idempotency_key": IDEMPOTENCY,
        },
        ["role", "content", "idempotency_key"],
    ),
    _tool(
        "evict_fifo",
        "Move the oldest unpinned messages out of your context into recall memory now, to free room.",
        {
            "count": {"type": "integer", "minimum": 1, "maximum": 10000},
            "idempotency_key": IDEMPOTENCY,
        },
        ["count", "idempotency_key"],
    ),
    _tool(
        "write_recall",
        "Write a note straight into recall memory (searchable later) without adding it to your context.",
        {
            "content": {"type": "string", "minLength": 1},
            "role": {"type": "string", "enum": ["user", "assistant", "system", "tool"]},
            "idempotency_key": IDEMPOTENCY,
        },
        ["content", "idempotency_key"],
    ),
    _tool(
        "search_recall",
        "Search every past message of this conversation (hybrid keyword + semantic by default). "
        "Results come in pages of at most 512 tokens; pass next_cursor for more.",
        {
            "query": {"type": "string", "minLength": 1},
            "mode": {"type": "string", "enum": ["hybrid", "text", "vector"]},
            "limit": {"type": "integer", "minimum": 1, "maximum": 50},
            "since": {"type": "number", "description": "unix time, inclusive"},
            "until": {"type": "number", "description": "unix time, exclusive"},
            "cursor": CURSOR,
            "rehydrate": {"type": "boolean", "description": "also append the found messages to your context"},
        },
        ["query"],
    ),
    _tool(
        "search_archival",
        "Semantic search over archived documents. Results come in pages of at most 512 tokens.",
        {
            "query": {"type": "string", "minLength": 1},
            "k": {"type": "integer", "minimum": 1, "maximum": 50},
            "filters": {"type": "object", "description": "equality filters on doc_id, source or metadata keys"},
            "cursor": CURSOR,
        },
        ["query"],
    ),
    _tool(
        "ingest_archival",
        "Store a document in archival memory (chunked and embedded in the background).",
        {
            "text": {"type": "string", "minLength": 1},
            "doc_id": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.:\\-/]{0,199}$"},
            "source": {"type": "string"},
            "metadata": {"type": "object"},
            "idempotency_key": IDEMPOTENCY,
        },
        ["text", "idempotency_key"],
    ),
    _tool(
        "remember_fact",
        "Keep a fact you learned (a preference, a project detail, a lesson) in long-term memory. A "
        "fact matching one you hold joins it; one with the same key and another value is kept as a "
        "CONFLICT for you to resolve. Secrets and personal data are refused (POLICY_REFUSED) unless "
        "you give a justification.",
        {
            "value": {"type": "string", "minLength": 1, "maxLength": 4000},
            "type": {"type": "string", "description": "sticky (never expires), preference, project, learned, ..."},
            "key": {"type": "string", "description": "a stable name for the fact (e.g. home_city)"},
            "scope": {"type": "string", "enum": ["agent", "user", "domain"]},
            "category": {"type": "string", "maxLength": 64},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 64}, "maxItems": 32},
            "importance": {"type": "number", "minimum": 0, "maximum": 1},
            "evidence_message_ids": {"type": "array", "items": {"type": "string"}, "maxItems": 64},
            "justification": {"type": "string", "description": "why a refused value must be kept anyway"},
            "idempotency_key": IDEMPOTENCY,
        },
        ["value", "type", "idempotency_key"],
    ),
    _tool(
        "recall_fact",
        "Read the facts kept under a key (more than one: they conflict).",
        {"key": {"type": "string", "minLength": 1}, "scope": {"type": "string", "enum": ["agent", "user", "domain"]}},
        ["key"],
    ),
    _tool(
        "search_facts",
        "Search your long-term facts by meaning and keywords, optionally by type or tags.",
        {
            "query": {"type": "string", "minLength": 1},
            "types": {"type": "array", "items": {"type": "string"}},
            "tags": {"type": "array", "items": {"type": "string"}},
            "limit": {"type": "integer", "minimum": 1, "maximum": 20},
        },
        ["query"],
    ),
    _tool(
        "forget_fact",
        "Delete one fact from long-term memory.",
        {"fact_id": {"type": "string", "minLength": 1}, "idempotency_key": IDEMPOTENCY},
        ["fact_id", "idempotency_key"],
    ),
    _tool(
        "get_state",
        "Read a working-memory key (or every key when key is omitted).",
        {"key": {"type": "string", "minLength": 1}},
        [],
    ),
    _tool(
        "set_state",
        "Set a working-memory key to a JSON value, optionally expiring after ttl_s seconds; pass the "
        "key's _rev to update it only if nobody changed it meanwhile.",
        {
            "key": {"type": "string", "minLength": 1, "maxLength": 128},
            "value": {"description": "any JSON value"},
            "ttl_s": {"type": "integer", "minimum": 1},
            "_rev": {"type": "string"},
            "delete": {"type": "boolean", "description": "delete the key instead"},
            "idempotency_key": IDEMPOTENCY,
        },
        ["key", "idempotency_key"],
    ),
    _tool(
        "record_heartbeat",
        "Report the state of your heartbeat chain; set request_heartbeat=false to end the chain.",
        {"note": {"type": "string", "maxLength": 500}},
        [],
    ),
]

TOOL_NAMES: tuple[str, ...] = tuple(t["function"]["name"] for t in _TOOLS)


def tool_schemas() -> list[dict[str, Any]]:
    """A fresh copy of every tool definition (callers may mutate it)."""
    return copy.deepcopy(_TOOLS)


def schema_of(name: str) -> dict[str, Any]:
    for tool in _TOOLS:
        if tool["function"]["name"] == name:
            return copy.deepcopy(tool["function"]["parameters"])
    raise KeyError(name)
