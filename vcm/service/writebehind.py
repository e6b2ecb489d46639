"""Write-behind's loss window, held to a bound by writing through.

In write-behind mode an append is acknowledged once Redis holds it; the cold path's spool writes
it to the store later. What Redis would take with it if lost (a ``FLUSHDB``, a failover to an
empty replica) is the *backlog*: per agent, the appends acknowledged and not yet in the store
(:mod:`vcm.hotpath.backlog`, tracked by the append script). Its bound, per agent:

* an append whose reply shows the agent's backlog past ``[durability] write_behind_max_messages``
  or older than ``write_behind_max_s`` writes the whole backlog to the store **before** it is
  acknowledged (the write-through a worker would have done; idempotent by message id);
* an agent that stops appending is watched here: once its oldest backlog message passes
  ``write_behind_max_s`` and no worker spooled it, this process writes the backlog through from a
  background thread (checked again at that deadline, so a healthy spool costs nothing).

So, while the API process that acknowledged them lives, an agent's acknowledged messages are in
the store within ``write_behind_max_s`` (plus one store write), and never more than
``write_behind_max_messages`` of them are outside it. Workers that keep up never trigger either.
"""

from __future__ import annotations

import heapq
import logging
import threading
from collections.abc import Callable, Mapping, Sequence

from vcm.durable import append_event, append_records, stored_message
from vcm.errors import NotFound
from vcm.hotpath.state import HotState
from vcm.obs import metrics
from vcm.store.port import MemoryStore
from vcm.store.types import IdempotencyRecord
from vcm.types import AppendResult, Backlog, Message

log = logging.getLogger(__name__)

# Most backlog ids one write-through reads (the size bound keeps it far below in practice).
_BATCH = 10_000


class WriteBehindBound:
    """The loss-window bound of one process (one per :class:`~vcm.durable.Durability`)."""

    def __init__(self, hot: HotState, store: MemoryStore, *, clock: Callable[[], float] | None = None) -> None:
        self.hot = hot
        self.store = store
        self.clock = clock or hot.clock
        d = hot.settings.durability
        self.max_s = d.write_behind_max_s
        self.max_messages = d.write_behind_max_messages
        self._ttl_s = hot.settings.maintenance.recall_ttl_s
        self._due: list[tuple[float, str]] = []  # (deadline, agent): a heap
        self._watched: dict[str, float] = {}  # agent -> its deadline in _due
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def after_append(self, agent_id: str, backlog: Backlog, appended: AppendResult | None = None) -> None:
        """An acknowledged-to-be append reported ``backlog``: past a bound, write it through now
        (the caller answers after this returns); else watch its age. ``appended``: that append's
        result, whose message is written even if Redis has lost it since (see :meth:`write_through`)."""
        now = self.clock()
        if backlog.over(self.max_messages, self.max_s, now):
            by_size = self.max_messages > 0 and backlog.messages > self.max_messages
            message = None if appended is None else appended.message
            key = None if message is None else message.idempotency_key
            record = None if appended is None else appended.record
            self.write_through(
                agent_id,
                "size" if by_size else "age",
                incarnation=None if appended is None else appended.incarnation,
                known=() if message is None else (message,),
                records={key: record} if key and record else None,
            )
            return
        if self.max_s > 0 and backlog.oldest_at is not None:
            self._watch(agent_id, backlog.oldest_at + self.max_s)

    def write_through(
        self,
        agent_id: str,
        reason: str,
        *,
        incarnation: str | None = None,
        known: Sequence[Message] = (),
        records: Mapping[str, tuple[str, str]] | None = None,
    ) -> int:
        """Write the agent's backlog to the store (with its appends' idempotency records and audit
        rows, as the spool would) and take it out of the backlog; how many messages were written.
        Ids whose message left Redis meanwhile (a committed batch, a forget) just leave the backlog.

        Fenced as the spool is (``vcm.tasks.fence``): the backlog is read between two reads of the
        agent's incarnation and written under it (``incarnation``: the one the calling append ran
        under, when there is one), so a delete (or a delete and re-create) racing this write lands
        nothing of the old agent; the new one's own appends handle its backlog.

        ``known``: messages the caller holds (the append that found the backlog over its bound,
        and ``records``, their keys' idempotency records as its reply gave them). If Redis lost the
        agent after that append (a FLUSHDB, a failover to an empty replica), they are written
        anyway, with whatever of the backlog was read before: the store's incarnation fence tells
        that loss from a delete, whose record is gone. Without this the triggering append would be
        acknowledged and in neither Redis nor the store, one past the size bound."""
        fence, ids = incarnation, []
        messages: list[Message] = []
        kept: list[IdempotencyRecord] = []
        try:
            read = self.hot.incarnation(agent_id)
            fence = read if fence is None else fence
            ids = self.hot.backlog.ids(agent_id, _BATCH)
            messages = self.hot.get_messages(agent_id, ids) if ids else []
            # Read with the messages, inside the fence: a record lost with Redis cannot be copied.
            kept = append_records(self.hot, agent_id, messages, held=records)
            if read != fence or self.hot.incarnation(agent_id) != fence:
                return 0  # re-created since: the backlog read may be the new agent's
        except NotFound:  # the agent left Redis: deleted, or Redis lost it
            if fence is None:
                return 0  # no incarnation to fence by: a deleted agent's backlog went with it
            messages, kept = self._rescued(agent_id, messages, kept, known, records)
        else:
            if not ids:
                return 0
        try:
            if messages:
                self.store.spool_messages(
                    [stored_message(agent_id, m, ttl_s=self._ttl_s) for m in messages],
                    events=[append_event(agent_id, m) for m in messages],
                    idempotency=kept,
                    incarnation=fence,
                )
        except NotFound:  # deleted (AgentFenced): its backlog went with it
            return 0
        if ids:
            self.hot.backlog.done(agent_id, ids)
        metrics.write_behind_forced(reason, len(messages))
        return len(messages)

    def _rescued(
        self,
        agent_id: str,
        messages: list[Message],
        kept: list[IdempotencyRecord],
        known: Sequence[Message],
        records: Mapping[str, tuple[str, str]] | None,
    ) -> tuple[list[Message], list[IdempotencyRecord]]:
        """What can still be written after Redis lost the agent: the backlog read before it did,
        and the caller's own messages. A keyed message whose record went with Redis is left out:
        its retry could not be told from a new request, and would append it a second time."""
        have = {m.id for m in messages}
        extra = [m for m in known if m.id not in have]
        messages = messages + extra
        kept = kept + append_records(self.hot, agent_id, extra, held=records)
        recorded = {r.key for r in kept}
        return [m for m in messages if not m.idempotency_key or m.idempotency_key in recorded], kept

    def check(self, agent_id: str) -> float | None:
        """The idle check: write the agent's backlog through when its oldest message is past
        ``max_s``; the next deadline to look again at (None: nothing left to watch)."""
        backlog = self.hot.backlog.read(agent_id)
        if backlog.oldest_at is None:
            return None
        if backlog.over(0, self.max_s, self.clock()):
            self.write_through(agent_id, "idle")
            return None
        return backlog.oldest_at + self.max_s

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(5)

    # --- the idle check's thread ------------------------------------------------------------------
    def _watch(self, agent_id: str, deadline: float) -> None:
        with self._cond:
            if self._closed or agent_id in self._watched:
                return  # its earlier deadline comes first, and re-reads the backlog then
            self._watched[agent_id] = deadline
            heapq.heappush(self._due, (deadline, agent_id))
            if self._thread is None or not self._thread.is_alive():
                # Only while something is watched: the thread ends when nothing is.
                self._thread = threading.Thread(target=self._run, name="vcm-write-behind", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._closed or not self._due:
                        self._thread = None
                        return
                    deadline, agent_id = self._due[0]
                    wait = deadline - self.clock()
                    if wait <= 0:
                        heapq.heappop(self._due)
                        self._watched.pop(agent_id, None)
                        break
                    self._cond.wait(wait)
            try:
                again = self.check(agent_id)
            except Exception as exc:  # Redis or the store down: look again a bound later
                log.warning("could not check the write-behind backlog of %s: %r", agent_id, exc)
                again = self.clock() + max(self.max_s, 1.0)
            if again is not None:
                self._watch(agent_id, again)
