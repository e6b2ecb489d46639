"""The executor's search tools: recall (with rehydration into the context) and archival, paged and
marked when retrieved text reads like instructions."""

from __future__ import annotations

from typing import Any

from vcm.errors import ValidationError, VcmError
from vcm.store.types import Page, StoredMessage
from vcm.tools import paging, results
from vcm.tools.calls import (
    DEFAULT_LIMIT,
    Reply,
    ToolCall,
)
from vcm.tools.pager import Pager


def _one_of(args: dict[str, Any], seed: str, vcm: str, default: Any) -> Any:
    """An argument seed 000 and vcm name differently (limit/k, page_token/cursor): either, not both."""
    if seed in args and vcm in args:
        raise ValidationError(f"send {seed} or {vcm}, not both (they mean the same)", field=seed)
    return args.get(seed, args.get(vcm, default))


class SearchHandlers(Pager):
    """search_recall and search_archival (a base of :class:`~vcm.tools.executor.ToolExecutor`)."""

    # --- searches -------------------------------------------------------------------------------------
    def _search_recall(self, call: ToolCall) -> Reply:
        a, agent = call.args, call.agent.agent_id
        since, until = a.get("since"), a.get("until")
        if since is not None and until is not None and since >= until:
            raise ValidationError("since must be before until", field="since")
        budget = self._page_budget(agent)
        mode = a.get("mode", "hybrid")
        bound = paging.scope(agent, "recall", a["query"], mode, since, until)
        used: list[str] = []
        partial: list[bool] = []  # a page ranked while the agent's vectors were still being indexed

        def fetch(cursor: str | None, n: int) -> Page[Any]:
            found = self.service.search_recall(
                agent, a["query"], limit=n, cursor=cursor, since=since, until=until, mode=mode
            )
            used.append(found.mode)
            partial.append(found.page.stats is not None and found.page.stats.partial)
            return found.page

        start = self._position(a.get("cursor"), bound)
        cands = paging.walk(
            fetch,
            start,
            a.get("limit", DEFAULT_LIMIT),
            cost=lambda hit: call.counter.text(paging.dumps(results.recall_item(hit))),
            budget=budget,
        )
        rendered = [results.recall_item(c.item) | self._taint(c.item.message.content) for c in cands]
        extra_fields: dict[str, Any] = {"mode": used[-1] if used else mode}
        if any(partial):  # older messages may be missing: their vectors are still being indexed
            extra_fields["partial"] = True
        body = self._page("recall", rendered, [c.after for c in cands], start, budget, bound, call, extra_fields)
        reply = Reply(body)
        if a.get("rehydrate"):
            taken = [c.item.message for c in cands[: len(body["results"])]]
            reply.extra = self._rehydrate(call, taken)
        return reply

    def _rehydrate(self, call: ToolCall, messages: list[StoredMessage]) -> dict[str, Any]:
        """Append found messages to the FIFO tail as recalled system messages (idempotent per message).

        Each append goes through the budget like any other: it may begin an eviction batch, or be
        refused with TOKEN_BUDGET_EXCEEDED (reported; earlier appends stay, and a retry skips them).
        """
        agent = call.agent.agent_id
        in_context = set(self.service.fifo_ids(agent))
        appended: list[str] = []
        skipped: list[str] = []
        tainted: list[str] = []
        for m in messages:
            if m.message_id in in_context:
                skipped.append(m.message_id)
                continue
            verdict = self.service.scan(m.content)
            meta: dict[str, Any] = {"kind": "rehydrated", "recalled_id": m.message_id}
            if verdict.tainted:
                meta["taint_reasons"] = list(verdict.reasons)
                tainted.append(m.message_id)
            try:
                self.service.append(
                    agent,
                    "system",
                    results.recalled_text(m.message_id, m.role, m.created_at, m.content, tainted=verdict.tainted),
                    metadata=meta,
                    idempotency_key=f"rehydrate:{m.message_id}",
                    actor=call.actor,
                )
            except VcmError as exc:
                out = {"rehydrated": appended, "already_in_context": skipped, "rehydrate_error": exc.to_dict()}
                return out | ({"tainted": tainted} if tainted else {})
            appended.append(m.message_id)
        return {"rehydrated": appended, "already_in_context": skipped} | ({"tainted": tainted} if tainted else {})

    def _search_archival(self, call: ToolCall) -> Reply:
        a, agent = call.args, call.agent.agent_id
        filters, vector, n_probe = a.get("filters"), a.get("query_vector"), a.get("nProbe")
        limit = _one_of(a, "limit", "k", DEFAULT_LIMIT)
        cursor = _one_of(a, "page_token", "cursor", None)
        if ("query" in a) == (vector is not None):
            raise ValidationError("send query (text) or query_vector (an embedding), one of them", field="query_vector")
        budget = self._page_budget(agent)
        # The cursor is bound to what was searched: a vector by its digest.
        what = a["query"] if vector is None else "vector:" + paging.scope(agent, "v", vector).hex()
        bound = paging.scope(agent, "archival", what, filters, n_probe)

        def fetch(store_cursor: str | None, n: int) -> Page[Any]:
            return self.service.search_archival(
                agent, a.get("query"), k=n, filters=filters, cursor=store_cursor, vector=vector, n_probe=n_probe
            ).page

        start = self._position(cursor, bound)
        cands = paging.walk(
            fetch,
            start,
            limit,
            cost=lambda hit: call.counter.text(paging.dumps(results.archival_item(hit))),
            budget=budget,
        )
        rendered = [results.archival_item(c.item) | self._taint(c.item.chunk.text) for c in cands]
        return Reply(self._page("archival", rendered, [c.after for c in cands], start, budget, bound, call))

    def _taint(self, text: str) -> dict[str, Any]:
        """``tainted``/``taint_reasons`` for retrieved text that reads like instructions; the
        model sees the mark next to the text, and store_core refuses it without a justification."""
        return self.service.mark(text)
