"""Appending a list of messages (an imported conversation) through the façade: in order, each
as ``append`` does it; bad input anywhere in the list appends nothing; a refusal past the checks
says how far it got, and a keyed retry replays what went in and goes on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import fakeredis
import pytest

from tests.doubles.clock import Clock
from vcm.dispatch import RecordingDispatcher
from vcm.errors import TokenBudgetExceeded, ValidationError
from vcm.hotpath.state import HotState
from vcm.service import MemoryService
from vcm.settings import load_settings
from vcm.store import open_store

MAY8 = 1_683_547_200.0  # Mon 8 May 2023, noon UTC
DAY = 86_400.0


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[MemoryService]:
    settings = load_settings(environ={})
    clock = Clock(now=MAY8 + 400 * DAY, step=0.01)
    store = open_store(f"sqlite:///{tmp_path / 'vcm.db'}", text_index_lag_ok=False)
    service = MemoryService(
        HotState(fakeredis.FakeRedis(decode_responses=True), settings, clock=clock), store, RecordingDispatcher(),
        clock=clock,
    )  # fmt: skip
    service.create_agent("ann", model="vcm-demo-2k")
    yield service
    store.close()


def chat() -> list[dict[str, object]]:
    return [
        {"role": "user", "content": "I moved to Porto.", "name": "Ann", "created_at": MAY8},
        {"role": "assistant", "content": "How is it?", "created_at": MAY8 + 60},
        {"role": "user", "content": "Sunny, every day.", "name": "Ann", "created_at": MAY8 + 3 * DAY},
    ]


def fifo(svc: MemoryService) -> list[tuple[str, str | None]]:
    return [(m.content, m.marker) for m in svc.hot.snapshot("ann").fifo]


def test_a_list_goes_in_in_order_with_its_times(svc: MemoryService) -> None:
    results = svc.append_many("ann", chat(), idempotency_key="import-1")
    assert [r.seq for r in results] == sorted(r.seq for r in results) and len(results) == 3
    assert fifo(svc) == [("I moved to Porto.", None), ("How is it?", None),
                         ("Sunny, every day.", "[Thu 11 May 2023, 2 days later]")]  # fmt: skip
    stored = svc.store.get_messages("ann", [r.message_id for r in results])
    assert sorted(m.created_at for m in stored) == [MAY8, MAY8 + 60, MAY8 + 3 * DAY]
    assert svc.agent_stats("ann")["last_activity"] >= MAY8 + 400 * DAY  # the import is activity now
    # Recall's time filters read when the words were said.
    early = svc.search_recall("ann", "Porto sunny", mode="text", until=MAY8 + DAY).page.items
    late = svc.search_recall("ann", "Porto sunny", mode="text", since=MAY8 + DAY).page.items
    assert [h.message.content for h in early] == ["I moved to Porto."]
    assert [h.message.content for h in late] == ["Sunny, every day."]
    # The whole list again under its key: a replay of every message, nothing twice.
    again = svc.append_many("ann", chat(), idempotency_key="import-1")
    assert [r.message_id for r in again] == [r.message_id for r in results] and all(r.replayed for r in again)
    assert len(fifo(svc)) == 3


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"content": 7}, "messages.2.content"),
        ({"role": "robot"}, "messages.2.role"),
        ({"created_at": MAY8 + 1000 * DAY}, "messages.2.created_at"),
        ({"colour": "red"}, "messages.2.colour"),
        ({"name": "two words"}, "messages.2.name"),
    ],
)
def test_bad_input_anywhere_in_the_list_appends_nothing(
    svc: MemoryService, change: dict[str, object], field: str
) -> None:
    listed = chat()
    listed[2] = {**listed[2], **change}
    with pytest.raises(ValidationError) as refused:
        svc.append_many("ann", listed, idempotency_key="import-2")
    assert refused.value.details["field"] == field
    assert fifo(svc) == []
    for bad in ([], "not a list", [{"role": "user"}], [chat()[0]] * 1001):
        with pytest.raises(ValidationError):
            svc.append_many("ann", bad)  # type: ignore[arg-type]
    assert fifo(svc) == []


def test_a_refusal_past_the_checks_says_how_far_it_got_and_a_keyed_retry_goes_on(svc: MemoryService) -> None:
    listed = chat()
    listed[2] = {**listed[2], "content": "word " * 5000}  # larger than the 2k window
    with pytest.raises(TokenBudgetExceeded) as refused:
        svc.append_many("ann", listed, idempotency_key="import-3")
    details = refused.value.details
    assert (details["index"], details["appended"], len(details["message_ids"])) == (2, 2, 2)
    assert [c for c, _ in fifo(svc)] == ["I moved to Porto.", "How is it?"]
    done = svc.append_many("ann", chat(), idempotency_key="import-3")  # the list, mended
    assert [r.replayed for r in done] == [True, True, False]
    assert [r.message_id for r in done[:2]] == details["message_ids"]
    assert [c for c, _ in fifo(svc)] == ["I moved to Porto.", "How is it?", "Sunny, every day."]


def test_every_message_is_in_the_store_before_the_call_returns_and_the_id_floor_stays_ahead(tmp_path: Path) -> None:
    """The write-throughs of a list go to the store together (a transaction per few dozen
    messages), all before the caller hears of any; with a small id reserve the floor a rebuilt
    hot state hands ids out from still stays ahead of every id given."""
    settings = load_settings({"durability": {"messages": "write_through", "id_reserve": 64}}, environ={})
    clock = Clock(now=MAY8 + 400 * DAY, step=0.01)
    store = open_store(f"sqlite:///{tmp_path / 'vcm.db'}", text_index_lag_ok=False)
    try:
        svc = MemoryService(HotState(fakeredis.FakeRedis(decode_responses=True), settings, clock=clock), store,
                            RecordingDispatcher(), clock=clock)  # fmt: skip
        svc.create_agent("ann", model="gpt-4o")
        listed = [{"role": "user", "content": f"line {i}", "created_at": MAY8 + i} for i in range(300)]
        results = svc.append_many("ann", listed)
        stored = store.get_messages("ann", [r.message_id for r in results])
        assert len(stored) == 300  # the dispatcher ran no spool: this is the write-through
        assert store.get_agent("ann").id_floor > max(r.seq for r in results)
        events = store.query_events("ann", ["append"], limit=1000).items
        assert {e.payload["message_id"] for e in events} >= {r.message_id for r in results}
    finally:
        store.close()


def test_a_conversation_sent_again_in_lists_of_another_size_replays_each_message(svc: MemoryService) -> None:
    """``first_index`` keys message n of the conversation ``<key>:<n>`` whatever list it is in:
    the first run sent a list of 2 and stopped; the retry, in lists of 3 and 1, replays those two
    and appends the rest once."""
    talk = [*chat(), {"role": "assistant", "content": "Lucky you.", "created_at": MAY8 + 3 * DAY + 60}]
    first = svc.append_many("ann", talk[:2], idempotency_key="conv", first_index=0)
    again = svc.append_many("ann", talk[:3], idempotency_key="conv", first_index=0)
    rest = svc.append_many("ann", talk[3:], idempotency_key="conv", first_index=3)
    assert [r.replayed for r in again + rest] == [True, True, False, False]
    assert [r.message_id for r in again[:2]] == [r.message_id for r in first]
    assert [content for content, _ in fifo(svc)] == [str(m["content"]) for m in talk]


@pytest.mark.parametrize(("key", "first_index"), [(None, 2), ("k", -1), ("k", True), ("k", 10**10), ("k", "3")])
def test_a_bad_first_index_is_refused_and_appends_nothing(
    svc: MemoryService, key: str | None, first_index: object
) -> None:
    with pytest.raises(ValidationError) as refused:
        svc.append_many("ann", chat(), idempotency_key=key, first_index=first_index)  # type: ignore[arg-type]
    assert refused.value.details["field"] == "first_index"
    assert fifo(svc) == []
