"""Where the context builder's layers go (pure): what changes only at an eviction before the
FIFO, the per-turn layers right before the latest user message, and never an injected message
between an assistant message with ``tool_calls`` and its tool results."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from vcm.prompt import layers
from vcm.prompt.layers import INJECTED, PER_TURN, Layer, assemble, turn_slot

CALL = {"id": "c1", "type": "function", "function": {"name": "search_recall", "arguments": "{}"}}


def user(text: str = "hi") -> dict[str, Any]:
    return {"role": "user", "content": text}


def calling(n: int = 1) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": [{**CALL, "id": f"c{i}"} for i in range(n)]}


def result(i: int = 0) -> dict[str, Any]:
    return {"role": "tool", "content": "found", "tool_call_id": f"c{i}"}


def hot(fifo: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str], list[int]]:
    head = [{"role": "system", "content": "sys"}, {"role": "system", "content": "<working_block/>"},
            {"role": "system", "content": "<summary/>"}]  # fmt: skip
    return head + fifo, ["system", "working", "summary"] + ["fifo"] * len(fifo), [1] * (3 + len(fifo))


LAYERS = [Layer(name, f"[{name}]", 5) for name in INJECTED]


def test_stable_layers_first_then_the_fifo_then_the_per_turn_layers_before_the_latest_user_message() -> None:
    fifo = [user("a"), {"role": "assistant", "content": "b"}, user("c"), {"role": "assistant", "content": "d"},
            user("latest")]  # fmt: skip
    built = assemble(*hot(fifo), LAYERS)
    assert built.layers == [
        "system", "identity", "tools_hint", "working", "sticky", "summary",
        "fifo", "fifo", "fifo", "fifo", "state", "memory", "skills", "fifo",
    ]  # fmt: skip
    assert built.messages[-1] == user("latest")


def test_a_tool_flow_after_the_latest_user_message_keeps_its_calls_and_results_together() -> None:
    # A heartbeat chain in progress: the user asked, the model called two tools, the results came.
    fifo = [user("a"), {"role": "assistant", "content": "b"}, user("latest"), calling(2), result(0), result(1)]
    built = assemble(*hot(fifo), LAYERS)
    at = built.layers.index("state")
    assert built.layers[at : at + 4] == ["state", "memory", "skills", "fifo"]
    assert built.messages[at + 3] == user("latest")
    assert [m["role"] for m in built.messages[-3:]] == ["assistant", "tool", "tool"]


def test_without_a_user_message_the_layers_go_where_they_split_no_tool_call() -> None:
    messages, layers, _ = hot([calling(), result(0), {"role": "assistant", "content": "done"}, calling(2), result(0)])
    # After the last complete exchange: never after a call whose results are (partly) still to come.
    assert turn_slot(messages, layers) == 6
    messages, layers, _ = hot([calling(2), result(0), result(1)])
    assert turn_slot(messages, layers) == 6
    only_calls, layers, _ = hot([calling(), result(0), calling()])
    assert turn_slot(only_calls, layers) == 5
    messages, layers, _ = hot([])
    assert turn_slot(messages, layers) == 3
    # A user message right after calls without results: not there either.
    messages, layers, _ = hot([user("a"), calling(), user("b")])
    assert turn_slot(messages, layers) == 3


MESSAGES = st.sampled_from(["user", "assistant", "system", "calls", "calls"])


def open_call(messages: list[dict[str, Any]], j: int) -> bool:
    """Whether index ``j`` lies inside a tool exchange: after a call, among or before its results,
    or after results that do not yet answer every call."""
    if j < len(messages) and messages[j].get("role") == "tool":
        return True
    answered: set[str] = set()
    while j > 0 and messages[j - 1].get("role") == "tool":
        answered.add(messages[j - 1]["tool_call_id"])
        j -= 1
    calls = messages[j - 1].get("tool_calls") if j > 0 else None
    return bool(calls) and not {c["id"] for c in calls} <= answered


@given(st.lists(st.tuples(MESSAGES, st.integers(1, 3), st.integers(0, 3)), max_size=14))
def test_no_injected_layer_ever_sits_between_a_tool_call_and_its_results(
    steps: list[tuple[str, int, int]],
) -> None:
    fifo: list[dict[str, Any]] = []
    for kind, calls, results in steps:
        if kind == "calls":
            fifo.append(calling(calls))
            fifo.extend(result(i) for i in range(min(calls, results)))  # fewer: the rest still to come
        else:
            fifo.append({"role": kind, "content": kind})
    built = assemble(*hot(fifo), LAYERS)
    # The hot messages keep their order, with every layer inserted once.
    assert [m for m, name in zip(built.messages, built.layers, strict=True) if name not in INJECTED] == hot(fifo)[0]
    for j, name in enumerate(built.layers):
        if name in INJECTED:
            assert not open_call(built.messages[:j] + built.messages[j + 1 :], j), built.layers
    # The per-turn layers sit together, after the summary.
    turn = [j for j, name in enumerate(built.layers) if name in PER_TURN]
    assert turn == list(range(turn[0], turn[0] + 3)) and turn[0] > built.layers.index("summary")


def _count() -> Any:
    from vcm.hotpath.tokens import TokenCounter
    from vcm.settings.context import TokenSettings

    return TokenCounter("gpt-4o", TokenSettings()).message


@settings(deadline=None)  # the first example loads the encoding
@given(
    lines=st.lists(st.text(alphabet="ab cd,.\n0123456789XYZ", min_size=1, max_size=80), min_size=1, max_size=25),
    budget=st.integers(min_value=0, max_value=400),
)
def test_a_fitted_layer_is_counted_exactly_and_within_its_budget(lines: list[str], budget: int) -> None:
    """fit chooses by per-line counts but holds to the count of the whole text: a tokenizer may
    merge tokens across a join, so only the whole is exact."""
    from vcm.prompt.layers import Item, fit

    count = _count()
    items = [Item(line, {"kind": "message", "id": str(i)}) for i, line in enumerate(lines)]
    layer = fit("memory", items, budget, count)
    if layer is None:
        return
    assert layer.tokens == count(layer.text) <= budget
    assert layer.items >= 1 and layer.items + layer.dropped == len(lines)


def test_a_fact_repeats_a_message_that_holds_all_its_words() -> None:
    said = ["Priya: The Porto office door code is 4412 since Monday."]
    assert layers.repeats("Priya: the Porto office door code is 4412", said)
    assert not layers.repeats("Priya: Porto door code 4412 since 13 November 2023", said)  # a resolved date
    assert not layers.repeats("Ann: The Porto office door code is 4412", said)  # someone else said it
    assert not layers.repeats("", said) and not layers.repeats("Priya: code 4412", [])


def test_a_wording_said_again_is_one_group_in_the_order_of_its_best_rank() -> None:
    texts = ["Sounds good!", "I moved to Porto.", "sounds   GOOD!", "Sounds good", "I moved to Porto."]
    assert layers.same_words(texts) == [[0, 2], [1, 4], [3]]
    assert layers.same_words([]) == []
    may = 1_683_554_160.0  # 8 May 2023
    assert layers.also_said([]) == ""
    assert layers.also_said([may]) == "; the same words 1 more time, 8 May 2023"
    assert layers.also_said([may + 30 * 86400, may]) == "; the same words 2 more times, 8 May 2023 to 7 June 2023"


def test_the_identity_says_when_the_messages_begin_only_on_another_day() -> None:
    now = 1_701_000_000.0  # Sun 26 November 2023, 12:00 UTC
    assert layers.identity(now, None, "a").endswith("Agent: a.")
    assert layers.identity(now, "Priya", "a", begins=now - 3600).endswith("You are talking with Priya.")
    assert layers.identity(now, None, "a", begins=1_683_547_200.0).endswith(
        "Agent: a. The messages below begin on Mon 8 May 2023."
    )
