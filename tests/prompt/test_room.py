"""Where a prompt cuts the FIFO's oldest messages to give the per-turn layers room."""

from __future__ import annotations

import itertools

from vcm.prompt.room import Entry, left_out


def chat(*roles: str, tokens: int = 100) -> list[Entry]:
    return [Entry(r, tokens) for r in roles]


def test_no_shortfall_no_cut() -> None:
    fifo = chat("user", "assistant", "user", "assistant", "user")
    assert left_out(fifo, 0, 100) == 0 and left_out(fifo, -50, 100) == 0 and left_out([], 500, 100) == 0


def test_the_cut_frees_the_rounded_shortfall_and_keeps_a_user_message_first() -> None:
    fifo = chat("user", "assistant", "user", "assistant", "user", "assistant", "user")
    assert left_out(fifo, 150, 100) == 2  # 200 tokens wanted: the first exchange
    assert left_out(fifo, 201, 100) == 4  # 300 wanted: 400 freed at the next user message
    assert fifo[left_out(fifo, 201, 100)].role == "user"


def test_a_tool_exchange_is_never_split() -> None:
    fifo = [Entry("user", 100), Entry("assistant", 50), Entry("tool", 400), Entry("tool", 400),
            Entry("assistant", 50), Entry("user", 100), Entry("assistant", 100), Entry("user", 100)]  # fmt: skip
    cut = left_out(fifo, 120, 10)  # 150 freed after the tool call: the cut goes on to the user message
    assert cut == 5 and fifo[cut].role == "user"


def test_the_latest_user_message_and_pinned_messages_stay() -> None:
    fifo = chat("user", "assistant", "user", "assistant", "user", "assistant")
    assert left_out(fifo, 10_000, 100) == 4  # everything before the latest user message at most
    pinned = [Entry("user", 100), Entry("assistant", 100), Entry("user", 100, pinned=True), Entry("assistant", 100),
              Entry("user", 100)]  # fmt: skip
    assert left_out(pinned, 10_000, 100) == 2  # not past the pinned message
    assert left_out(chat("assistant", "user"), 500, 100) == 1


def test_the_cut_stays_put_while_the_fifo_grows() -> None:
    """Turn by turn the FIFO grows and the shortfall with it; the cut (the prompt's prefix) moves
    only when the rounded shortfall grows a step."""
    fifo = chat("user", "assistant") * 10
    cuts = []
    for turn in range(12):
        fifo = [*fifo, Entry("user", 30), Entry("assistant", 30)]
        cuts.append(left_out([*fifo, Entry("user", 30)], 100 + 60 * turn, 400))
    assert 2 <= len(set(cuts)) <= 3 and cuts == sorted(cuts)
    assert sum(a != b for a, b in itertools.pairwise(cuts)) <= 2
