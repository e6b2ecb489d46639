"""The LLM-facing tools as JSON-schema function definitions in the OpenAI format.

Mutating tools take an ``idempotency_key`` (a retry with the same key returns the first result)
and, where they edit a document, its ``_rev``. Every tool takes ``request_heartbeat`` (required
here, as the OpenAI format's strict mode wants; the executor and MCP take its absence as false).

The nine memory tools take seed 000's arguments under its names and return its fields
(:data:`RESULT_FIELDS`); what vcm adds (text queries, server-side chunking and embedding, evicting
by ``count``, ``cursor``/``next_cursor``) are optional alternatives beside them. Every argument
carries a description (tests/tools/test_seed_api.py holds the seed's table and checks both).
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


ROLE = {"type": "string", "enum": ["user", "assistant", "system", "tool"]}
# seed 000 names the paging arguments of search_archival page_token / next_page_token; vcm's other
# reads call them cursor / next_cursor. Both are accepted; a result carries both names.
PAGE_TOKEN = {"type": "string", "description": "seed 000's name for cursor (next_page_token of the previous page)"}
SEED_HEARTBEAT = {
    "type": "boolean",
    "description": "seed 000's name for request_heartbeat (a heartbeat runs when either is true)",
}
SCOPE = {"type": "string", "enum": ["agent", "user", "domain"], "description": "whose fact (default agent)"}
ENTRY = {
    "type": "object",
    "properties": {
        "content": {"type": "string", "minLength": 1, "description": "the text to keep"},
        "role": ROLE | {"description": "who said it (default assistant)"},
    },
    "required": ["content"],
    "additionalProperties": False,
}

_TOOLS: list[dict[str, Any]] = [
    _tool(
        "store_core",
        "Create or edit a working memory block that stays in your context. To edit, pass the block's "
        "current _rev from fetch_core; a stale _rev fails with REV_CONFLICT. Pinned blocks share a cap "
        "of 25% of the window. Returns block_id, _rev and token_estimate.",
        {
            "block_id": {
                "type": "string",
                "pattern": "^[A-Za-z0-9][A-Za-z0-9_.\\-]{0,63}$",
                "description": "the block's name (letters, digits, _ . -)",
            },
            "content": {"type": "string", "minLength": 1, "description": "the block's full new text"},
            "policy": {
                "type": "string",
                "enum": ["pinned", "default"],
                "description": "seed 000's eviction policy: pinned blocks count against the pin cap; default does "
                "not pin (the same as pinned=false); do not send both policy and pinned",
            },
            "role": {"type": "string", "pattern": "^[A-Za-z0-9_\\-]{1,64}$", "description": "label, e.g. persona"},
            "pinned": {"type": "boolean", "description": "pin the block (counts against the pin cap)"},
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
        "Read working memory blocks with their _rev: one block (block_id, content, _rev, token_estimate) "
        "or, when block_id is omitted, all of them in pages of at most 512 tokens (pass next_cursor for more).",
        {"block_id": {"type": "string", "description": "the block to read; omit for every block"}, "cursor": CURSOR},
        [],
    ),
    _tool(
        "append_fifo",
        "Append a message to the conversation queue (your context). Old messages move to recall memory "
        "when the context fills up. Returns message_id and token_estimate.",
        {
            "role": ROLE | {"description": "who speaks (tool is reserved for tool results)"},
            "message": {"type": "string", "minLength": 1, "description": "the message text (seed 000's name)"},
            "content": {"type": "string", "minLength": 1, "description": "the message text (send message or content)"},
            "pinned": {"type": "boolean", "description": "keep the message out of eviction"},
            "idempotency_key": IDEMPOTENCY,
        },
        ["role", "idempotency_key"],
    ),
    _tool(
        "evict_fifo",
        "Move the oldest unpinned messages out of your context into recall memory now, to free room: "
        "until the context holds at most target_tokens (default: the target line, half the window), or "
        "exactly count messages. Returns evicted_count, new_summary_tokens and after_occupancy.",
        {
            "strategy": {"type": "string", "enum": ["fifo"], "description": "oldest first (the only strategy)"},
            "target_tokens": {
                "type": "integer",
                "minimum": 0,
                "description": "evict until the context holds at most this many tokens (default: the target line)",
            },
            "count": {
                "type": "integer",
                "minimum": 1,
                "maximum": 10000,
                "description": "evict this many of the oldest unpinned messages instead of a token target",
            },
            "summarize": {
                "type": "boolean",
                "description": "fold the evicted messages into the recursive summary (default true); false keeps "
                "the summary as it is (recall still gets every message)",
            },
            "idempotency_key": IDEMPOTENCY,
        },
        ["idempotency_key"],
    ),
    _tool(
        "write_recall",
        "Write notes straight into recall memory (searchable later) without adding them to your context: "
        "entries (several, in one write under one idempotency_key) or one content. Returns inserted_ids and "
        "total_tokens.",
        {
            "entries": {
                "type": "array",
                "items": ENTRY,
                "minItems": 1,
                "maxItems": 100,
                "description": "the notes, written together or not at all",
            },
            "content": {"type": "string", "minLength": 1, "description": "one note (instead of entries)"},
            "role": ROLE | {"description": "who said the one note (default assistant)"},
            "idempotency_key": IDEMPOTENCY,
        },
        ["idempotency_key"],
    ),
    _tool(
        "search_recall",
        "Search every past message of this conversation (hybrid keyword + semantic by default). "
        "Results come in pages of at most 512 tokens; pass next_cursor for more. Returns results and "
        "tokens_added.",
        {
            "query": {"type": "string", "minLength": 1, "description": "what to look for"},
            "mode": {
                "type": "string",
                "enum": ["hybrid", "text", "vector"],
                "description": "text (BM25), vector or hybrid (default; text when no embedder is configured)",
            },
            "limit": {"type": "integer", "minimum": 1, "maximum": 50, "description": "hits per page (default 10)"},
            "since": {"type": "number", "description": "unix time, inclusive"},
            "until": {"type": "number", "description": "unix time, exclusive"},
            "cursor": CURSOR,
            "rehydrate": {"type": "boolean", "description": "also append the found messages to your context"},
            "heartbeat": SEED_HEARTBEAT,
        },
        ["query"],
    ),
    _tool(
        "search_archival",
        "Semantic search over archived documents, by a text query or a query_vector of the store's "
        "dimension. Results come in pages of at most 512 tokens. Returns results, next_page_token and "
        "tokens_added.",
        {
            "query_vector": {
                "type": "array",
                "items": {"type": "number"},
                "minItems": 1,
                "maxItems": 8192,
                "description": "the query embedding (the store's dimension and model); send query_vector or query",
            },
            "query": {"type": "string", "minLength": 1, "description": "a text query, embedded by vcm"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 50, "description": "hits per page (default 10)"},
            "k": {"type": "integer", "minimum": 1, "maximum": 50, "description": "the same as limit"},
            "page_token": PAGE_TOKEN,
            "cursor": CURSOR,
            "nProbe": {
                "type": "integer",
                "minimum": 1,
                "description": "vector index cells to search (more: better recall, slower); at most "
                "[ingest] max_n_probe; default: the index's own",
            },
            "filters": {"type": "object", "description": "equality filters on doc_id, source or metadata keys"},
            "heartbeat": SEED_HEARTBEAT,
        },
        [],
    ),
    _tool(
        "ingest_archival",
        "Store a document in archival memory: text (chunked with late chunking and embedded in the "
        "background), or chunks with their embeddings computed by the caller with the store's model "
        "(dimension, metric, embedding_version and model_id must match the store's). Returns inserted "
        "and vector_index_used.",
        {
            "doc_id": {
                "type": "string",
                "pattern": "^[A-Za-z0-9][A-Za-z0-9_.:\\-/]{0,199}$",
                "description": "the document's id (default: from its text)",
            },
            "text": {"type": "string", "minLength": 1, "description": "the document, chunked and embedded by vcm"},
            "chunks": {
                "type": "array",
                "items": {"type": "string", "minLength": 1},
                "minItems": 1,
                "maxItems": 10000,
                "description": "the document's chunks in order (instead of text)",
            },
            "embeddings": {
                "type": "array",
                "items": {"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 8192},
                "minItems": 1,
                "maxItems": 10000,
                "description": "one embedding per chunk, late-chunked, in the same order",
            },
            "dimension": {"type": "integer", "minimum": 1, "maximum": 8192, "description": "of every embedding"},
            "metric": {"type": "string", "enum": ["cosine", "l2"], "description": "the embeddings' metric"},
            "embedding_version": {
                "type": "string",
                "minLength": 1,
                "maxLength": 200,
                "description": "<model_id>:late:<suffix>, as the store's late-chunked chunks are versioned",
            },
            "model_id": {"type": "string", "minLength": 1, "maxLength": 200, "description": "the embedding model"},
            "source": {"type": "string", "description": "provenance: a file path, URL or name"},
            "metadata": {"type": "object", "description": "post-filterable attributes"},
            "idempotency_key": IDEMPOTENCY,
        },
        ["idempotency_key"],
    ),
    _tool(
        "remember_fact",
        "Keep a fact you learned (a preference, a project detail, a lesson) in long-term memory. A "
        "fact matching one you hold joins it; one with the same key and another value is kept as a "
        "CONFLICT for you to resolve. Secrets and personal data are refused (POLICY_REFUSED) unless "
        "you give a justification.",
        {
            "value": {"type": "string", "minLength": 1, "maxLength": 4000, "description": "the fact, in a sentence"},
            "type": {"type": "string", "description": "sticky (never expires), preference, project, learned, ..."},
            "key": {"type": "string", "description": "a stable name for the fact (e.g. home_city)"},
            "scope": SCOPE,
            "category": {"type": "string", "maxLength": 64, "description": "a free grouping label"},
            "tags": {
                "type": "array",
                "items": {"type": "string", "maxLength": 64},
                "maxItems": 32,
                "description": "words to find the fact by",
            },
            "importance": {"type": "number", "minimum": 0, "maximum": 1, "description": "0 (trivia) to 1 (vital)"},
            "evidence_message_ids": {
                "type": "array",
                "items": {"type": "string"},
                "maxItems": 64,
                "description": "messages that show the fact",
            },
            "justification": {"type": "string", "description": "why a refused value must be kept anyway"},
            "idempotency_key": IDEMPOTENCY,
        },
        ["value", "type", "idempotency_key"],
    ),
    _tool(
        "recall_fact",
        "Read the facts kept under a key (more than one: they conflict).",
        {"key": {"type": "string", "minLength": 1, "description": "the fact's key"}, "scope": SCOPE},
        ["key"],
    ),
    _tool(
        "search_facts",
        "Search your long-term facts by meaning and keywords, optionally by type or tags.",
        {
            "query": {"type": "string", "minLength": 1, "description": "what to look for"},
            "types": {"type": "array", "items": {"type": "string"}, "description": "only facts of these types"},
            "tags": {"type": "array", "items": {"type": "string"}, "description": "only facts with these tags"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 20, "description": "facts to return (default 5)"},
        },
        ["query"],
    ),
    _tool(
        "forget_fact",
        "Delete one fact from long-term memory.",
        {
            "fact_id": {"type": "string", "minLength": 1, "description": "the fact's id (from recall_fact)"},
            "idempotency_key": IDEMPOTENCY,
        },
        ["fact_id", "idempotency_key"],
    ),
    _tool(
        "get_state",
        "Read a working-memory key (or every key when key is omitted).",
        {"key": {"type": "string", "minLength": 1, "description": "the key; omit for every key"}},
        [],
    ),
    _tool(
        "set_state",
        "Set a working-memory key to a JSON value, optionally expiring after ttl_s seconds; pass the "
        "key's _rev to update it only if nobody changed it meanwhile.",
        {
            "key": {"type": "string", "minLength": 1, "maxLength": 128, "description": "the key"},
            "value": {"description": "any JSON value"},
            "ttl_s": {"type": "integer", "minimum": 1, "description": "seconds until the key expires"},
            "_rev": {"type": "string", "description": "the key's current revision (update only if unchanged)"},
            "delete": {"type": "boolean", "description": "delete the key instead"},
            "idempotency_key": IDEMPOTENCY,
        },
        ["key", "idempotency_key"],
    ),
    _tool(
        "record_heartbeat",
        "Report the state of your heartbeat chain; set request_heartbeat=false to end the chain. Returns "
        "chain_depth, duration_ms and, once the chain ended, terminated_reason.",
        {
            "state": {"type": "string", "maxLength": 500, "description": "where the chain stands (kept with its end)"},
            "note": {"type": "string", "maxLength": 500, "description": "the same as state"},
        },
        [],
    ),
]

TOOL_NAMES: tuple[str, ...] = tuple(t["function"]["name"] for t in _TOOLS)

# The fields each of seed 000's nine tools returns (at least; vcm adds its own beside them, and every
# result carries context_total, context_free and the heartbeat report). A spooled result holds
# spooled, message_ids, preview and tokens instead; an error, {"error": {"code", "message", ...}}.
RESULT_FIELDS: dict[str, tuple[str, ...]] = {
    "store_core": ("block_id", "_rev", "token_estimate", "tokens", "action"),
    "fetch_core": ("block_id", "content", "_rev", "token_estimate", "role", "pinned"),
    "append_fifo": ("message_id", "token_estimate", "tokens", "action"),
    "evict_fifo": ("evicted_count", "new_summary_tokens", "after_occupancy", "after_tokens"),
    "write_recall": ("inserted_ids", "total_tokens", "stored_in"),
    "search_recall": ("results", "tokens_added", "next_cursor", "mode", "page_tokens", "partial"),
    "search_archival": ("results", "next_page_token", "tokens_added", "next_cursor", "page_tokens"),
    "ingest_archival": ("inserted", "vector_index_used", "doc_id"),
    "record_heartbeat": ("chain_depth", "duration_ms", "terminated_reason", "chain_id", "depth", "run"),
}


def tool_schemas() -> list[dict[str, Any]]:
    """A fresh copy of every tool definition (callers may mutate it)."""
    return copy.deepcopy(_TOOLS)


def schema_of(name: str) -> dict[str, Any]:
    for tool in _TOOLS:
        if tool["function"]["name"] == name:
            return copy.deepcopy(tool["function"]["parameters"])
    raise KeyError(name)
