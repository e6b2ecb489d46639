"""Paging the executor's read results: a page's token budget, cursors bound to their query, packing
rendered items into one page; and spooling an oversized output into recall memory."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from vcm.hotpath.tokens import TokenCounter
from vcm.service import MemoryService
from vcm.tools import paging, results
from vcm.tools.calls import (
    ENVELOPE_TOKENS,
    MIN_ROOM,
    PREVIEW_TOKENS,
    SPOOL_CHUNK_CHARS,
    SPOOL_FLOOR,
    ToolCall,
    mark_replayed,
)
from vcm.types import AgentInfo


class Pager:
    """The executor's paging and spooling (a base of :class:`~vcm.tools.executor.ToolExecutor`)."""

    service: MemoryService
    page_tokens: int
    _secret: bytes | None

    # --- paging helpers -------------------------------------------------------------------------------
    def _page_budget(self, agent_id: str) -> int:
        """Tokens a page may take now: a page, or what is free when that is less. When not even a
        small result would fit, a whole page: the executor spools what does not fit the free room
        (:meth:`_spool`), and a small result that does fit is served as it is."""
        free = self.service.gauges(agent_id).free
        room = min(self.page_tokens, free - ENVELOPE_TOKENS)
        return self.page_tokens if room < MIN_ROOM else room

    def _position(self, cursor: str | None, bound: bytes) -> paging.Position:
        if cursor is None:
            return paging.START
        return paging.decode_cursor(cursor, secret=self._cursor_secret(), bound_to=bound)

    def _page(
        self,
        kind: str,
        rendered: list[dict[str, Any]],
        afters: list[paging.Position | None],
        start: paging.Position | None,
        budget: int,
        bound: bytes,
        call: ToolCall,
        fields: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        secret = self._cursor_secret()
        text_field = results.TEXT_FIELD[kind]
        key = "blocks" if kind == "core" else "results"

        def body(items: list[dict[str, Any]], nxt: paging.Position | None, tokens: int) -> dict[str, Any]:
            cursor = None if nxt is None else paging.encode_cursor(nxt, secret=secret, bound_to=bound)
            out = {key: items, "next_cursor": cursor, **(fields or {}), "page_tokens": tokens}
            if kind == "archival":  # seed 000's name of the cursor, beside vcm's
                out["next_page_token"] = cursor
            if kind != "core":  # seed 000: what the results add to the context
                out["tokens_added"] = tokens
            return out

        def measure(items: list[dict[str, Any]], nxt: paging.Position | None) -> int:
            return call.counter.text(paging.dumps(body(items, nxt, 999)))  # 999: as wide as any real count

        def shrink(item: dict[str, Any], excess: int) -> dict[str, Any]:
            text = str(item[text_field])
            return item | {
                text_field: paging.truncate(text, excess, call.counter),
                "truncated": True,
                "full_tokens": call.counter.text(text),
            }

        tight = budget < self.page_tokens - ENVELOPE_TOKENS  # i.e. less than a page is free
        try:
            packed = paging.pack(rendered, afters, start=start, budget=budget, measure=measure, shrink=shrink)
        except ValueError:  # not even a truncated item fits the room left (only when less than a page is)
            packed = None
        if packed is None or (tight and packed.items and packed.items[0].get("truncated")):
            # Less than a page is free and the next item does not fit it whole: rather than a stub
            # the context has no room to follow up on, the page as it would be with room; the
            # executor spools it into recall, leaving a preview and its ids (seed 000).
            packed = paging.pack(rendered, afters, start=start, budget=self.page_tokens, measure=measure, shrink=shrink)
        return body(packed.items, packed.next, packed.tokens)

    def _cursor_secret(self) -> bytes:
        return self._secret if self._secret is not None else self.service.cursor_secret()

    # --- oversized outputs --------------------------------------------------------------------------------
    def _fit(
        self, info: AgentInfo, name: str, body: dict[str, Any], counter: TokenCounter, actor: str
    ) -> dict[str, Any]:
        """``body`` itself, or, when it exceeds a page, a preview and the ids of the recall notes
        that now hold it in full (the free room is checked on the whole result, :meth:`_spool`)."""
        tokens = counter.text(paging.dumps(body))
        if tokens <= max(self.page_tokens, SPOOL_FLOOR):
            return body
        return self._spool(info, name, body, counter, actor)

    def _spool(
        self, info: AgentInfo, name: str, body: dict[str, Any], counter: TokenCounter, actor: str
    ) -> dict[str, Any]:
        """Seed 000: an output that would not fit goes to recall in full (notes of at most
        SPOOL_CHUNK_CHARS, idempotent by content), and the context gets a preview, the stored ids
        and, for a page of results, the cursor to page on."""
        replayed = body.get("replayed", False)
        text = paging.dumps({k: v for k, v in body.items() if k != "replayed"})  # a replay spools the same notes
        tokens = counter.text(text)
        digest = hashlib.sha256(f"{info.agent_id}\n{name}\n{text}".encode()).hexdigest()[:32]
        ids = []
        for i in range(0, len(text), SPOOL_CHUNK_CHARS):
            note = self.service.write_recall(
                info.agent_id,
                text[i : i + SPOOL_CHUNK_CHARS],
                role="tool",
                idempotency_key=f"spool:{digest}:{i // SPOOL_CHUNK_CHARS}",
                actor=actor,
            )
            ids.append(note.message_id)
        stub: dict[str, Any] = {
            "spooled": True,
            "message_ids": ids,
            "tokens": tokens,
            "preview": paging.preview(text, PREVIEW_TOKENS, counter),
            "note": f"the full output ({tokens} tokens) did not fit your context; it is stored in recall "
            "memory under message_ids (search_recall finds it)",
        }
        if body.get("next_cursor"):
            stub["next_cursor"] = body["next_cursor"]
        return mark_replayed(stub, replayed)
