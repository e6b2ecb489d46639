"""Conversation traffic the way the hot path will drive it: append, then hand the cold work to a
dispatcher (spool every new message, evict every begun batch)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.doubles.coldpath import line
from vcm.dispatch import Dispatcher
from vcm.hotpath.state import HotState
from vcm.store.port import MemoryStore


@dataclass
class Traffic:
    hot: HotState
    dispatcher: Dispatcher
    agent_id: str
    message_ids: list[str] = field(default_factory=list)
    batches: list[int] = field(default_factory=list)  # begun by appends (follow-ups come from finishes)

    def send(self, count: int, on_each: Callable[[int], None] | None = None) -> None:
        for _ in range(count):
            i = len(self.message_ids)
            role = "user" if i % 2 == 0 else "assistant"
            r = self.hot.append(self.agent_id, role, line(i), name="alice" if i % 4 == 0 else None)
            new = [r.message_id] + ([r.pressure_message_id] if r.pressure_message_id else [])
            self.message_ids += new
            self.dispatcher.spool(self.agent_id, new)
            if r.batch is not None:
                self.batches.append(r.batch.id)
                self.dispatcher.evict(self.agent_id, r.batch.id)
            if on_each is not None:
                on_each(i)


def all_message_ids(hot: HotState, agent_id: str) -> list[str]:
    """Every message the agent ever had, including notices vcm itself appended (ids are m<seq>)."""
    return [f"m{i}" for i in range(1, int(hot.snapshot(agent_id).meta["msg_seq"]) + 1)]


def settled(hot: HotState, store: MemoryStore, agent_id: str, message_ids: list[str]) -> bool:
    expected = max(len(message_ids), len(all_message_ids(hot, agent_id)))
    return not hot.pending_batches(agent_id) and store.count_messages(agent_id) >= expected


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting until {what}")
        time.sleep(0.1)


def assert_exactly_once(hot: HotState, store: MemoryStore, agent_id: str, message_ids: list[str]) -> None:
    """Every appended message stored once; every batch committed once, in order; summaries agree."""
    everything = all_message_ids(hot, agent_id)
    assert set(message_ids) <= set(everything) and len(message_ids) == len(set(message_ids))
    assert store.count_messages(agent_id) == len(everything)
    assert [m.message_id for m in store.get_messages(agent_id, everything)] == everything
    last_batch = int(hot.snapshot(agent_id).meta["batch_seq"])
    assert last_batch > 0, "the traffic must have caused evictions"
    assert store.committed_batches(agent_id) == list(range(1, last_batch + 1))
    assert hot.pending_batches(agent_id) == []
    evicts = [e.payload["batch_id"] for e in store.query_events(agent_id, ["evict"], limit=1000).items]
    assert evicts == list(range(1, last_batch + 1))
    summary = store.get_summary(agent_id)
    assert summary is not None and summary.batch_id == last_batch
    assert hot.summary(agent_id)[0] == summary.text and hot.summary(agent_id)[3] == last_batch
