"""Time in the prompt: the markers FIFO messages carry (``[context] time``), counted with them,
kept through a rebuild from the store, and what a retry on another day replays."""

from __future__ import annotations

import fakeredis
import pytest
import redis

from tests.doubles.clock import Clock
from vcm.durable import hot_message, stored_message
from vcm.errors import IdempotencyMismatch, ValidationError
from vcm.hotpath.context import assemble
from vcm.hotpath.state import HotState
from vcm.hotpath.timeline import marker, span, unmarked
from vcm.settings import Settings, load_settings
from vcm.types import marked

DAY = 86_400.0
MONDAY = 1_683_504_000.0  # 2023-05-08 00:00 UTC


def test_markers_where_the_day_changes_with_the_gap_when_long() -> None:
    noon = MONDAY + 12 * 3600
    assert marker(noon, None, "day") == ""  # an agent's first message: nothing to place it after
    assert marker(noon, noon - 60, "day") == ""  # the same conversation
    assert marker(noon, noon - 5 * 3600, "day") == "[12:00, 5 hours later]"  # a pause within the day
    assert marker(noon + DAY, noon, "day") == "[Tue 9 May 2023]"  # the next day needs no gap
    assert marker(noon + 23 * DAY, noon, "day") == "[Wed 31 May 2023, 3 weeks later]"
    assert marker(noon + 400 * DAY, noon, "day") == "[Tue 11 June 2024, 1 year later]"
    assert marker(noon, noon - 60, "message") == "[8 May 2023 12:00]"
    assert marker(noon, None, "off") == ""
    assert [span(s) for s in (60, 7200, 3 * DAY, 40 * DAY)] == ["1 hour", "2 hours", "3 days", "1 month"]
    for text in ("[Mon 8 May 2023]", "[Wed 31 May 2023, 3 weeks later]", "[12:00, 5 hours later]",
                 "[8 May 2023 12:00]"):  # fmt: skip
        assert unmarked(f"{text} I went to a support group yesterday.") == "I went to a support group yesterday."
    assert unmarked("[note] kept as written") == "[note] kept as written"


@pytest.fixture(params=["fakeredis", "redis"])
def client(request: pytest.FixtureRequest) -> redis.Redis:
    if request.param == "redis":
        from tests.redis_legs import real_redis

        c = real_redis()
    else:
        c = fakeredis.FakeRedis(decode_responses=True)
    c.flushdb()
    return c


def hot_with(client: redis.Redis, clock: Clock, time: str = "day") -> HotState:
    settings: Settings = load_settings({"context": {"time": time}}, environ={})
    return HotState(client, settings, clock=clock)


def test_the_fifo_is_dated_where_the_day_changes_and_counted(client: redis.Redis) -> None:
    clock = Clock(now=MONDAY - 3600)
    hot = hot_with(client, clock)
    hot.create_agent("a", model="vcm-demo-4k", system_prompt="Be brief.")
    counter = hot.counter("vcm-demo-4k")
    assert hot.append("a", "user", "Good night!").message.marker is None  # type: ignore[union-attr]
    clock.advance(10 * 3600)
    first = hot.append("a", "user", "I went to a support group yesterday.", name="Caroline")
    clock.advance(60)
    reply = hot.append("a", "assistant", "How was it?", name="Melanie")
    clock.advance(60)
    calls = hot.append("a", "assistant", "", tool_calls=[{"id": "c1", "type": "function",
                       "function": {"name": "search_recall", "arguments": "{}"}}])  # fmt: skip
    clock.advance(12 * DAY)
    result = hot.append("a", "tool", "nothing found", tool_call_id="c1")  # tool results carry none ...
    later = hot.append("a", "user", "We adopted a dog!", name="Caroline")  # ... the next text does
    assert first.message and reply.message and calls.message and result.message and later.message
    assert first.message.marker == "[Mon 8 May 2023]"
    assert reply.message.marker is None and calls.message.marker is None and result.message.marker is None
    assert later.message.marker == "[Sat 20 May 2023, 1 week later]"
    assert first.tokens == counter.message("[Mon 8 May 2023] I went to a support group yesterday.", name="Caroline")
    snap = hot.snapshot("a")
    contents = [m["content"] for m in assemble(snap).messages[2:]]
    assert contents == ["[Mon 8 May 2023] I went to a support group yesterday.", "How was it?", "",
                        "nothing found", "[Sat 20 May 2023, 1 week later] We adopted a dog!"]  # fmt: skip
    # The counters hold what the prompt holds; recall and the store keep the words apart.
    assert snap.counter("fifo") == sum(m.tokens for m in snap.fifo)
    assert snap.fifo[1].content == "I went to a support group yesterday."
    # Through the store and back (a rebuild): the same marker, the same count.
    back = hot_message(stored_message("a", later.message))
    assert (back.marker, back.tokens, back.chat()) == (later.message.marker, later.tokens, later.message.chat())


def test_another_process_reads_the_latest_time_from_the_fifo(client: redis.Redis) -> None:
    clock = Clock(now=MONDAY + 9 * 3600)
    hot_with(client, clock).create_agent("a", model="vcm-demo-4k")
    hot_with(client, clock).append("a", "user", "first")
    clock.advance(60)
    # A second process: same day, no repeated date; a new day, a date.
    assert hot_with(client, clock).append("a", "user", "second").message.marker is None  # type: ignore[union-attr]
    clock.advance(DAY)
    assert hot_with(client, clock).append("a", "user", "third").message.marker == "[Tue 9 May 2023]"  # type: ignore[union-attr]


def test_message_mode_dates_every_message_and_off_none(client: redis.Redis) -> None:
    clock = Clock(now=MONDAY + 9 * 3600)
    hot = hot_with(client, clock, "message")
    hot.create_agent("a", model="vcm-demo-4k")
    stamps = [hot.append("a", "user", f"m{i}").message.marker for i in range(2)]  # type: ignore[union-attr]
    assert stamps == ["[8 May 2023 09:00]", "[8 May 2023 09:00]"]
    client.flushdb()
    off = hot_with(client, clock, "off")
    off.create_agent("a", model="vcm-demo-4k")
    r = off.append("a", "user", "plain")
    assert r.message is not None and r.message.marker is None
    assert r.tokens == off.counter("vcm-demo-4k").message("plain")


def test_a_keyed_retry_on_another_day_is_a_replay(client: redis.Redis) -> None:
    clock = Clock(now=MONDAY + 23 * 3600)
    hot = hot_with(client, clock)
    hot.create_agent("a", model="vcm-demo-4k")
    hot.append("a", "user", "earlier")
    clock.advance(61)
    first = hot.append("a", "user", "same words", idempotency_key="k")
    clock.advance(2 * 3600)  # past midnight: the retry would carry a date the first did not
    again = hot_with(client, clock).append("a", "user", "same words", idempotency_key="k")
    assert again.replayed and again.message_id == first.message_id
    assert marked(None, "x") == "x" and marked("[Mon 8 May 2023]", "x") == "[Mon 8 May 2023] x"


def test_history_imported_with_its_own_times_is_dated_by_them(client: redis.Redis) -> None:
    """``created_at``: the markers, the message's time and a keyed retry follow the caller's time;
    vcm's own time (idempotency, audit) is kept apart as ``appended_at``."""
    clock = Clock(now=MONDAY + 400 * DAY)  # the import runs a year after the conversation
    hot = hot_with(client, clock)
    hot.create_agent("a", model="vcm-demo-4k")
    noon = MONDAY + 12 * 3600
    said = [
        hot.append("a", "user", "I went to a support group yesterday.", name="Caroline", created_at=noon),
        hot.append("a", "assistant", "How was it?", name="Melanie", created_at=noon + 60, idempotency_key="k"),
        hot.append("a", "user", "We adopted a dog!", name="Caroline", created_at=noon + 12 * DAY),
    ]
    now = hot.append("a", "user", "Back again today.", name="Caroline")
    messages = [r.message for r in [*said, now]]
    assert all(m is not None for m in messages)
    assert [m.marker for m in messages if m] == [None, None, "[Sat 20 May 2023, 1 week later]",
                                                 "[Tue 11 June 2024, 1 year later]"]  # fmt: skip
    assert [m.created_at for m in messages if m][:3] == [noon, noon + 60, noon + 12 * DAY]
    assert (
        all(m.appended_at == clock.now for m in messages[:3] if m) and messages[3] and messages[3].appended_at is None
    )
    # The hot state and a rebuild from the store keep both times.
    held = hot.snapshot("a").fifo
    assert [(m.created_at, m.appended) for m in held] == [(m.created_at, m.appended) for m in messages if m]
    back = hot_message(stored_message("a", held[0]))
    assert (back.created_at, back.appended_at) == (noon, clock.now)
    # A keyed retry gives the same time: a replay; another time under the same key is refused.
    again = hot.append("a", "assistant", "How was it?", name="Melanie", created_at=noon + 60, idempotency_key="k")
    assert again.replayed and again.message_id == said[1].message_id
    with pytest.raises(IdempotencyMismatch):
        hot.append("a", "assistant", "How was it?", name="Melanie", created_at=noon + 61, idempotency_key="k")


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (float("nan"), "finite"),
        (float("inf"), "finite"),
        (True, "finite"),
        ("2023-05-08", "finite"),
        (-1.0, "after 1970"),
        (MONDAY + 3600, "ahead of the server's clock"),
    ],
)
def test_a_bad_created_at_is_refused_and_changes_nothing(client: redis.Redis, value: object, why: str) -> None:
    clock = Clock(now=MONDAY)
    hot = hot_with(client, clock)
    hot.create_agent("a", model="vcm-demo-4k")
    before = hot.snapshot("a")
    with pytest.raises(ValidationError, match=why) as refused:
        hot.append("a", "user", "hello", created_at=value)  # type: ignore[arg-type]
    assert refused.value.details["field"] == "created_at"
    after = hot.snapshot("a")
    assert (after.fifo, after.counter("fifo")) == (before.fifo, before.counter("fifo"))
    # Five minutes of clock skew are allowed.
    assert hot.append("a", "user", "hello", created_at=MONDAY + 299).message is not None
