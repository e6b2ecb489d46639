"""An OpenAI Agents SDK session over vcm: virtual context for an Agents SDK app in one line::

    from agents import Agent, Runner
    from vcm import VcmClient
    from vcm.integrations.agents import VcmSession

    client = VcmClient("http://127.0.0.1:8080", token)
    result = await Runner.run(agent, "Hi!", session=VcmSession("alice", client))

The session implements the SDK's ``Session`` protocol (``agents.memory.session``: it is
structural, so this module never imports the SDK):

- ``get_items`` returns the agent's *managed* context: the prompt vcm builds (system prompt,
  identity, pinned blocks, sticky facts, summary, eviction placeholders, state header, relevant
  memory, skills) as system items, then the FIFO as conversation items. What vcm evicted is
  gone from it and summarised in it; the model reaches it through recall.
- ``add_items`` appends each item through vcm (budgeted, evicting as the window fills), tool
  calls and tool results as such; each append carries an idempotency key (``agent_items.item_key``).
- ``pop_item`` forgets the most recent message (``DELETE .../messages/{id}``: it leaves the
  context and recall) and returns its item; None when the session holds none.
- ``clear_session`` resets the agent (``POST .../reset``): the conversation starts over; the
  messages stay searchable in recall, and blocks, facts and state stay.

``client`` is a :class:`~vcm.client.VcmClient` (its calls run in a worker thread) or an
:class:`~vcm.client.AsyncVcmClient`; its token is the agent's (or the admin's).
"""

from __future__ import annotations

import asyncio
import secrets
from typing import TYPE_CHECKING, cast

from vcm.errors import NotFound
from vcm.integrations.agent_items import Append, Json, item_key, to_append, to_items
from vcm.integrations.bridge import Client, Flow, adrive, call

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import SessionSettings

# How far back pop_item looks for the newest append in the audit log (seconds before the time of
# the FIFO's newest message): vcm's own notices (memory pressure) can be newer than it.
POP_LOOKBACK_S = 3600.0


class VcmSession:
    """An Agents SDK session whose history is the vcm agent ``agent_id``'s managed context."""

    session_settings: SessionSettings | None = None

    def __init__(self, agent_id: str, client: Client, *, session_settings: SessionSettings | None = None) -> None:
        self.session_id = agent_id
        self.agent_id = agent_id
        self.session_settings = session_settings
        self._client = client
        # Chains the keys of items without an identity: a fresh session object starts a new chain.
        self._last_key = "start-" + secrets.token_hex(8)
        # The messages this object appended, newest last, with their items (pop_item returns the
        # item as the SDK gave it when it is one of these).
        self._journal: list[tuple[str, Json]] = []
        self._lock = asyncio.Lock()

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The managed context as input items; ``limit``: its latest ``limit`` items."""
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        ctx = await adrive(_read(self.agent_id, built=True), self._client)
        items = to_items(ctx["messages"])
        if limit is not None:
            items = items[max(0, len(items) - limit) :]
        return cast("list[TResponseInputItem]", items)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        async with self._lock:
            previous = self._last_key
            for raw in items:
                item = cast(Json, dict(raw))
                key = item_key(self.session_id, previous, item)
                previous = key
                message = to_append(item)
                if message is None:
                    continue
                reply = await adrive(_append(self.agent_id, message, key), self._client)
                if all(mid != reply["message_id"] for mid, _ in self._journal):
                    self._journal.append((reply["message_id"], item))
            # Only once all went in: a failed call retried with the same items replays what went in.
            self._last_key = previous

    async def pop_item(self) -> TResponseInputItem | None:
        async with self._lock:
            popped = await adrive(_pop(self.agent_id, [mid for mid, _ in self._journal]), self._client)
            if popped is None:
                return None
            message_id, fallback = popped
            mine = dict(self._journal)
            self._journal = [(mid, item) for mid, item in self._journal if mid != message_id]
            return cast("TResponseInputItem", mine.get(message_id, fallback))

    async def clear_session(self) -> None:
        async with self._lock:
            await adrive(_reset(self.agent_id), self._client)
            self._journal.clear()
            self._last_key = "start-" + secrets.token_hex(8)


def _read(agent_id: str, *, built: bool) -> Flow[Json]:
    return (yield call("context", agent_id, built=built))


def _append(agent_id: str, m: Append, key: str) -> Flow[Json]:
    return (
        yield call(
            "append", agent_id, m.role, m.content, metadata=m.metadata, tool_calls=m.tool_calls,
            tool_call_id=m.tool_call_id, idempotency_key=key,
        )
    )  # fmt: skip


def _reset(agent_id: str) -> Flow[Json]:
    return (yield call("reset", agent_id))


def _pop(agent_id: str, journal: list[str]) -> Flow[tuple[str, Json] | None]:
    """Forget the newest message of the conversation and return its id and the item of the FIFO's
    last message, read before it went. The newest message is the newest append in the audit log
    up to the time of the FIFO's newest message (a message popped before is newer than that;
    another process may have appended it), else, when the log has none yet (in write-behind mode
    it learns of an append when the message is spooled), the newest this object appended. An
    empty FIFO (a new or reset session) pops nothing."""
    ctx = yield call("context", agent_id)
    fifo = [m for m, layer in zip(ctx["messages"], ctx["layers"], strict=True) if layer == "fifo"]
    stats = yield call("stats", agent_id)
    if not fifo or stats.get("last_activity") is None:
        return None
    last = to_items(fifo[-1:], orphans=True)
    fallback: Json = last[-1] if last else {}
    newest = float(stats["last_activity"])
    candidates: list[str] = []
    cursor: str | None = None
    while True:
        page = yield call(
            "events", agent_id, kinds=["append"], since=newest - POP_LOOKBACK_S, until=newest + 0.001, limit=1000,
            cursor=cursor,
        )  # fmt: skip
        candidates += [e["payload"]["message_id"] for e in page["items"] if e["payload"].get("kind") == "message"]
        cursor = page.get("next_cursor")
        if not cursor:
            break
    order = list(reversed(candidates)) or list(reversed(journal))
    for message_id in order:
        try:
            yield call("forget_message", agent_id, message_id)
        except NotFound:
            continue  # forgotten by someone else meanwhile: the one before it is next
        return message_id, fallback
    return None
