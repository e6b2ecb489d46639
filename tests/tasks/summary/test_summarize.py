"""The earlier extractive recursive summariser (``by_centrality``, kept for comparison): cap,
provenance, salience, recursion. The fact-keeping default is tested in test_facts_summary.py."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.doubles.coldpath import line
from tests.doubles.embedder import word_embed
from vcm.settings.memory import DriftSettings
from vcm.tasks.summary import sentences
from vcm.tasks.summary.centrality import by_centrality as extractive
from vcm.tasks.summary.centrality import candidates
from vcm.tasks.summary.recursive import fit_text
from vcm.tasks.summary.request import Params, Request, Turn
from vcm.tasks.summary.selection import Vectors
from vcm.types import Message

HEADER = 8  # a stand-in for the rendered summary's framing


def count(text: str) -> int:
    return HEADER + len(text.split())


def request(previous: str, turns: list[Turn], cap: int) -> Request:
    return Request(previous, turns, cap, count, word_embed)


def turns(n: int, start: int = 0) -> list[Turn]:
    return [Turn("alice" if i % 2 else "user", line(i)) for i in range(start, start + n)]


def source_sentences(req: Request) -> set[str]:
    return set(candidates(req, Params()).texts)


def test_summary_is_whole_source_sentences_with_speakers_within_the_cap() -> None:
    req = request("", turns(12), 60)
    draft = extractive(req, Params())
    lines = draft.text.split("\n")
    assert draft.tokens == count(draft.text) <= 60
    assert lines and set(lines) <= source_sentences(req)
    assert all(line.split(": ", 1)[0] in {"alice", "user"} for line in lines)
    assert draft.method == "centrality" and 0.0 < draft.score <= 1.0


@given(st.integers(0, 30), st.integers(0, 120), st.integers(0, 3), st.floats(0, 1), st.floats(0, 1))
@settings(max_examples=80, deadline=None)
def test_never_above_the_cap(n: int, cap: int, prev_n: int, lam: float, share: float) -> None:
    previous = "\n".join(f"user: {line(100 + i)}" for i in range(prev_n))
    draft = extractive(request(previous, turns(n), cap), Params(mmr_lambda=lam, previous_share=share))
    assert draft.tokens == count(draft.text)
    assert draft.tokens <= max(cap, HEADER)  # an impossible cap yields the empty summary
    if draft.text:
        assert draft.tokens <= cap


def test_names_numbers_and_identifiers_win_over_filler() -> None:
    filler = [Turn("user", "That sounds good to me, thank you so much for all of that.") for _ in range(1)]
    filler += [Turn("bob", f"Sure, that sounds good, thank you {w}.") for w in ("again", "once more", "really")]
    key = Turn("bob", "Invoice INV-2041 for Dana goes out on March 14.")
    draft = extractive(request("", [*filler, key], HEADER + 12), Params(salience_boost=0.5))
    assert "INV-2041" in draft.text


def test_recursion_keeps_central_lines_of_the_previous_summary() -> None:
    first = extractive(request("", turns(12), 70), Params())
    second = extractive(request(first.text, turns(12, start=50), 70), Params(previous_share=0.4))
    kept = set(first.text.split("\n")) & set(second.text.split("\n"))
    assert kept, "the new summary must carry forward part of the old one"
    assert set(second.text.split("\n")) - kept, "and add something from the new batch"
    # previous lines come first, in their old order
    lines = second.text.split("\n")
    assert lines[: len(kept)] == [x for x in first.text.split("\n") if x in kept]


def test_no_previous_share_still_uses_leftover_room_for_old_lines() -> None:
    previous = "user: Alice owns the Falcon budget of 12000 euros."
    draft = extractive(request(previous, turns(1), 200), Params(previous_share=0.0))
    assert previous in draft.text.split("\n")  # room left after the batch goes to old lines


def test_pressure_notices_are_not_summarised_and_empty_input_gives_empty_summary() -> None:
    notice = Message("m1", 1, "system", "[vcm] Memory pressure", 5, 0.0, kind="pressure")
    assert Turn.of(notice) is None
    named = Message("m2", 2, "user", "hi there", 3, 0.0, name="zoe")
    assert Turn.of(named) == Turn("zoe", "hi there")
    # An unnamed user message is the user's when the name is known, never "user" then.
    unnamed = Message("m3", 3, "user", "hi", 2, 0.0)
    assert Turn.of(unnamed, "Priya") == Turn("Priya", "hi") and Turn.of(unnamed) == Turn("user", "hi")
    assert Turn.of(named, "Priya") == Turn("zoe", "hi there")
    assert Turn.of(Message("m4", 4, "assistant", "ok", 2, 0.0), "Priya") == Turn("assistant", "ok")
    draft = extractive(request("", [], 50), Params())
    assert (draft.text, draft.tokens, draft.method, draft.score) == ("", HEADER, "empty", 1.0)


def test_stronger_params_for_the_drift_retry() -> None:
    base = Params(mmr_lambda=0.7, previous_share=0.4)
    strong = base.stronger(DriftSettings(retry_mmr_lambda=0.9, retry_previous_share=0.2))
    assert (strong.mmr_lambda, strong.previous_share, strong.attempt) == (0.9, 0.2, 1)


def test_fit_text_keeps_a_prefix_of_whole_sentences() -> None:
    req = request("", [], HEADER + 7)
    assert fit_text("One two three. Four five six. Seven eight nine.", req, Params()) == [
        "One two three.",
        "Four five six.",
    ]


def test_big_batches_are_thinned_before_embedding_across_the_whole_batch() -> None:
    embedded: list[list[str]] = []

    def spy(texts: Sequence[str]) -> Vectors:
        embedded.append(list(texts))
        return word_embed(texts)

    previous = "\n".join(f"user: Old fact {i} about Falcon." for i in range(30))
    req = Request(previous, turns(120), 400, count, spy)
    source = candidates(req, Params(max_candidates=20, previous_share=0.25))
    assert len(embedded) == 1 and len(embedded[0]) == 20 == len(source.texts)
    assert source.from_previous == 5  # its share of the slots
    batch = source.texts[source.from_previous :]
    every = list(dict.fromkeys(f"{t.speaker}: {s}" for t in turns(120) for s in sentences.split(t.text, 400)))
    # each kept row stands for its part of the source, so the centroid keeps the true mix
    assert list(source.weights) == [30 / 5] * 5 + [len(every) / 15] * 15
    positions = [every.index(b) for b in batch]
    assert positions == sorted(positions)
    assert positions[0] < len(every) // 10 and positions[-1] > len(every) * 9 // 10  # spans the batch
    draft = extractive(req, Params(max_candidates=20))
    assert set(draft.text.split("\n")) <= set(candidates(req, Params(max_candidates=20)).texts)


def test_a_small_previous_summary_leaves_its_slots_to_the_batch() -> None:
    source = candidates(request("user: One old fact.", turns(40), 400), Params(max_candidates=16))
    assert source.from_previous == 1 and len(source.texts) == 16


def test_pleasantries_lose_to_content_even_when_they_are_cheap() -> None:
    chat = [
        Turn("mel", "Wow, Caroline!"),
        Turn("caroline", "Thanks, Mel!"),
        Turn("mel", "Sounds awesome, Caroline!"),
        Turn("caroline", "I joined the Connected Activists group last Tuesday and we plan a march in June."),
        Turn("mel", "That's awesome, Caroline!"),
        Turn("caroline", "Glad, Mel!"),
        Turn("mel", "My kids and I painted a sunset over the lake near our cabin last weekend."),
    ]
    draft = extractive(request("", chat, HEADER + 40), Params())
    lines = draft.text.split("\n")
    assert any("Connected Activists" in x for x in lines) and any("sunset" in x for x in lines)
    assert not any(x.endswith(("Wow, Caroline!", "Thanks, Mel!", "Glad, Mel!")) for x in lines)


def test_a_batch_of_pure_filler_gives_an_empty_summary_without_drift() -> None:
    draft = extractive(request("", [Turn("mel", "Wow!"), Turn("bob", "Thanks so much!")], 100), Params())
    assert (draft.text, draft.method, draft.score) == ("", "empty", 1.0)
