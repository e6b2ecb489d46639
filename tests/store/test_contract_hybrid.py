"""Contract for vector and hybrid recall (``put_message_vectors``, ``search_recall_hybrid``),
run against every adapter through the port (the ArangoDB leg needs VCM_TEST_ARANGO_URL)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.store.factories import msg
from vcm.errors import ValidationError
from vcm.store.fusion import hybrid
from vcm.store.port import MemoryStore

A, B = "agent-a", "agent-b"
V = "test-v1"


def axis(i: int, dim: int = 4, tilt: float = 0.0) -> list[float]:
    v = np.zeros(dim)
    v[i % dim] = 1.0
    v[(i + 1) % dim] = tilt
    return [float(x) for x in v]


def ids(page: object) -> list[str]:
    return [h.message.message_id for h in page.items]  # type: ignore[attr-defined]


def test_put_message_vectors_is_idempotent_and_skips_unknown_messages(store: MemoryStore) -> None:
    store.spool_messages([msg(A, 0, "alpha"), msg(A, 1, "beta")])
    assert store.put_message_vectors(A, [("m0000", axis(0)), ("m0001", axis(1)), ("m0099", axis(2))], V) == 2
    assert store.put_message_vectors(A, [("m0000", axis(3)), ("m0001", axis(1))], V) == 0
    assert store.message_vector_ids(A, ["m0000", "m0001", "m0099"], V) == {"m0000", "m0001"}
    assert store.message_vector_ids(A, ["m0000"], "other-version") == set()
    assert store.message_vector_ids("someone-else", ["m0000"], V) == set()
    assert store.put_message_vectors(A, [], V) == 0
    # The first write stays: m0000 still answers to axis 0.
    hits = store.search_recall_hybrid(A, "anything", axis(0), mode="vector", limit=1).items
    assert [h.message.message_id for h in hits] == ["m0000"]
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)


def test_a_new_embedding_version_can_be_put_and_searched(store: MemoryStore) -> None:
    """A model change: messages embedded under the old version get vectors of the new one."""
    store.spool_messages([msg(A, 0, "alpha"), msg(A, 1, "beta")])
    store.put_message_vectors(A, [("m0000", axis(0)), ("m0001", axis(1))], V)

    assert store.put_message_vectors(A, [("m0000", axis(2)), ("m0001", axis(3))], "test-v2") == 2
    assert store.message_vector_ids(A, ["m0000", "m0001"], "test-v2") == {"m0000", "m0001"}
    assert store.put_message_vectors(A, [("m0000", axis(1))], "test-v2") == 0  # first write of v2 stays
    page = store.search_recall_hybrid(A, "x", axis(2), mode="vector", embedding_version="test-v2")
    assert ids(page)[0] == "m0000" and page.items[0].score == pytest.approx(1.0, abs=1e-5)


def test_put_message_vectors_rejects_bad_vectors(store: MemoryStore) -> None:
    store.spool_messages([msg(A, 0, "alpha"), msg(A, 1, "beta")])
    store.put_message_vectors(A, [("m0000", axis(0))], V)
    for bad in ([0.0, 0.0, 0.0, 0.0], [1.0, float("nan"), 0.0, 0.0], [], "abcd", [1.0, 0.0]):
        with pytest.raises(ValidationError):
            store.put_message_vectors(A, [("m0001", bad)], V)  # type: ignore[list-item]
    with pytest.raises(ValidationError):
        store.put_message_vectors(A, [("m0001", axis(0))], "")


def test_vector_mode_ranks_by_cosine_within_the_agent(store: MemoryStore) -> None:
    store.spool_messages([msg(A, i, f"note {i}") for i in range(4)] + [msg(B, 9, "note 9")])
    store.put_message_vectors(A, [(f"m{i:04d}", axis(0, tilt=i * 0.5)) for i in range(4)], V)
    store.put_message_vectors(B, [("m0009", axis(0))], V)

    page = store.search_recall_hybrid(A, "unrelated words", axis(0), mode="vector", limit=10)

    assert ids(page) == ["m0000", "m0001", "m0002", "m0003"]
    scores = [h.score for h in page.items]
    assert scores == sorted(scores, reverse=True) and scores[0] == pytest.approx(1.0, abs=1e-5)


def test_hybrid_fuses_text_and_vector_ranks(store: MemoryStore) -> None:
    store.spool_messages(
        [
            msg(A, 0, "the quarterly budget review"),  # text only
            msg(A, 1, "a walk on the beach"),  # vector only
            msg(A, 2, "budget for the beach house"),  # both
            msg(A, 3, "nothing relevant here"),
        ]
    )
    store.put_message_vectors(
        A, [("m0000", axis(2)), ("m0001", axis(0)), ("m0002", axis(0, tilt=0.6)), ("m0003", [0.5, 0.0, 0.0, 0.9])], V
    )

    text_page = store.search_recall_hybrid(A, "budget", axis(0), mode="text")
    vector_page = store.search_recall_hybrid(A, "budget", axis(0), mode="vector")
    fused = store.search_recall_hybrid(A, "budget", axis(0), mode="hybrid")

    assert set(ids(text_page)) == {"m0000", "m0002"}
    assert ids(vector_page) == ["m0001", "m0002", "m0003", "m0000"]
    assert ids(fused)[0] == "m0002"  # found by both
    assert set(ids(fused)) == {"m0000", "m0001", "m0002", "m0003"}
    # Min-max convex fusion of the two lists' scores, then neighbour spreading by seq.
    expected = dict(
        hybrid(
            [(h.message.message_id, h.score) for h in text_page.items],
            [(h.message.message_id, h.score) for h in vector_page.items],
            {f"m{i:04d}": i for i in range(4)},
        )
    )
    assert [h.score for h in fused.items] == pytest.approx([expected[i] for i in ids(fused)])
    assert ids(store.search_recall_hybrid(A, "budget", None, mode="text")) == ids(store.search_recall(A, "budget"))


def test_hybrid_lifts_the_neighbour_of_a_strong_match(store: MemoryStore) -> None:
    store.spool_messages(
        [
            msg(A, 0, "where did you put the passport"),
            msg(A, 1, "in the blue drawer, under the maps"),  # the answer: no query word
            msg(A, 5, "the drawer is stuck again"),
            msg(A, 9, "a passport photo booth"),
        ]
    )
    store.put_message_vectors(
        A, [("m0000", axis(0)), ("m0001", axis(1)), ("m0005", [0.1, 1.0, 0.0, 0.0]), ("m0009", axis(0, tilt=1.0))], V
    )
    ranked = ids(store.search_recall_hybrid(A, "passport", axis(0), mode="hybrid"))
    # m0005 is a little closer to the query than m0001, but m0001 follows the best match.
    assert ranked[0] == "m0000"
    assert ranked.index("m0001") < ranked.index("m0005")


def test_messages_without_vectors_are_found_by_text_only(store: MemoryStore) -> None:
    store.spool_messages([msg(A, 0, "zebra crossing"), msg(A, 1, "other")])
    store.put_message_vectors(A, [("m0001", axis(1))], V)
    assert sorted(ids(store.search_recall_hybrid(A, "zebra", axis(1)))) == ["m0000", "m0001"]
    assert ids(store.search_recall_hybrid(A, "zebra", axis(1), mode="vector")) == ["m0001"]
    assert ids(store.search_recall_hybrid("agent-none", "zebra", axis(1), mode="vector")) == []


def test_a_text_hit_without_a_vector_is_not_buried_by_embedded_ones(store: MemoryStore) -> None:
    """Partial vector coverage (a message not embedded yet, or a failed embedding): the text hit
    with no vector keeps its text score for the vector part instead of 0."""
    store.spool_messages(
        [
            msg(A, 0, "the zebra crossing near the school"),  # keyword match, no vector
            msg(A, 10, "zebra zebra"),  # keyword match with a vector
            *(msg(A, n, f"unrelated note {n}") for n in (20, 30, 40)),  # vector-only matches
            msg(A, 50, "far away"),
        ]
    )
    vectors = [("m0010", axis(0)), *((f"m{n:04d}", axis(0, tilt=0.05)) for n in (20, 30, 40))]
    store.put_message_vectors(A, [*vectors, ("m0050", axis(2))], V)

    def scored(vector: list[float] | None, mode: str) -> list[tuple[str, float]]:
        page = store.search_recall_hybrid(A, "zebra", vector, mode=mode)
        return [(h.message.message_id, h.score) for h in page.items]

    text, vec = scored(None, "text"), scored(axis(0), "vector")
    fused = store.search_recall_hybrid(A, "zebra", axis(0), limit=20)

    assert "m0000" in dict(text) and "m0000" not in dict(vec)
    seq = {f"m{n:04d}": n for n in (0, 10, 20, 30, 40, 50)}
    expected = dict(hybrid(text, vec, seq, unembedded={"m0000"}))
    assert [h.score for h in fused.items] == pytest.approx([expected[i] for i in ids(fused)])
    # its fused score is its normalised text score, not half of it
    assert expected["m0000"] == pytest.approx(dict(text)["m0000"] / max(s for _, s in text))


def test_hybrid_without_any_vectors_ranks_as_text_does(store: MemoryStore) -> None:
    # turns far apart, so neighbour spreading has nothing to add
    texts = ["red apple", "apple apple pie", "green pear", "apple"]
    store.spool_messages([msg(B, 10 * n, t) for n, t in enumerate(texts)])
    text = store.search_recall_hybrid(B, "apple", None, mode="text").items
    fused = store.search_recall_hybrid(B, "apple", axis(0), mode="hybrid").items
    assert [h.message.message_id for h in fused] == [h.message.message_id for h in text]
    assert [h.score for h in fused] == pytest.approx([h.score / text[0].score for h in text])


def test_hybrid_time_window(store: MemoryStore) -> None:
    store.spool_messages([msg(A, i, "apple pie", created_at=1000.0 + i) for i in range(10)])
    store.put_message_vectors(A, [(f"m{i:04d}", axis(i)) for i in range(10)], V)
    for mode in ("vector", "hybrid"):
        page = store.search_recall_hybrid(A, "apple", axis(0), mode=mode, limit=20, since=1003.0, until=1007.0)
        assert sorted(ids(page)) == [f"m{i:04d}" for i in range(3, 7)], mode


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_hybrid_cursor_is_stable_while_new_messages_arrive(store: MemoryStore, mode: str) -> None:
    store.spool_messages([msg(A, i, f"the meeting about project {i}") for i in range(25)])
    store.put_message_vectors(A, [(f"m{i:04d}", axis(0, tilt=(i + 1) / 10)) for i in range(25)], V)
    first = store.search_recall_hybrid(A, "meeting project", axis(0), mode=mode, limit=10)
    seen = ids(first)
    cursor = first.next_cursor
    n = 100
    while cursor is not None:
        store.spool_messages([msg(A, n, "meeting meeting project project")])
        store.put_message_vectors(A, [(f"m{n:04d}", axis(0))], V)  # better on both legs
        n += 1
        page = store.search_recall_hybrid(A, "meeting project", axis(0), mode=mode, limit=10, cursor=cursor)
        seen += ids(page)
        cursor = page.next_cursor
    assert len(seen) == len(set(seen)) == 25
    assert set(seen) == {f"m{i:04d}" for i in range(25)}
    assert ids(store.search_recall_hybrid(A, "meeting project", axis(0), mode=mode, limit=1))[0] >= "m0100"
    with pytest.raises(ValidationError):  # a cursor belongs to its search
        store.search_recall_hybrid(A, "meeting project", axis(1), mode=mode, limit=10, cursor=first.next_cursor)


@pytest.mark.parametrize("mode", ["text", "vector", "hybrid"])
def test_excluded_messages_are_left_out_of_the_ranking_and_its_pages(store: MemoryStore, mode: str) -> None:
    """A prompt build's FIFO: the page holds the best ``limit`` of the other messages, and a cursor
    continues the same exclusion (and only with it)."""
    store.spool_messages([msg(A, i, f"the meeting about project {i}") for i in range(25)] + [msg(B, 0, "meeting")])
    store.put_message_vectors(A, [(f"m{i:04d}", axis(0, tilt=(i + 1) / 10)) for i in range(25)], V)
    everything = ids(store.search_recall_hybrid(A, "meeting project", axis(0), mode=mode, limit=25))
    left_out = [*everything[:8:2], "m0999", "not-a-stored-id"]
    rest = [m for m in everything if m not in left_out]
    first = store.search_recall_hybrid(A, "meeting project", axis(0), mode=mode, limit=10, exclude=left_out)
    assert ids(first) == rest[:10]
    seen, cursor = ids(first), first.next_cursor
    while cursor is not None:
        page = store.search_recall_hybrid(
            A, "meeting project", axis(0), mode=mode, limit=10, cursor=cursor, exclude=left_out
        )
        seen += ids(page)
        cursor = page.next_cursor
    assert seen == rest
    with pytest.raises(ValidationError):  # the exclusion is part of the search
        store.search_recall_hybrid(A, "meeting project", axis(0), mode=mode, limit=10, cursor=first.next_cursor)
    # Another agent's ids exclude nothing of A's.
    assert ids(store.search_recall_hybrid(B, "meeting", axis(0), mode=mode, limit=5, exclude=rest)) == (
        ["m0000"] if mode != "vector" else []
    )


def test_hybrid_argument_errors(store: MemoryStore) -> None:
    store.spool_messages([msg(A, 0, "alpha")])
    store.put_message_vectors(A, [("m0000", axis(0))], V)
    with pytest.raises(ValidationError):
        store.search_recall_hybrid(A, "alpha", axis(0), mode="fuzzy")
    with pytest.raises(ValidationError):
        store.search_recall_hybrid(A, "alpha", None, mode="hybrid")
    with pytest.raises(ValidationError):
        store.search_recall_hybrid(A, "alpha", [1.0, 0.0], mode="vector")  # wrong dimension
    with pytest.raises(ValidationError):
        store.search_recall_hybrid(A, "  ", axis(0), mode="hybrid")


def test_hybrid_anchors_on_the_author_a_query_names(store: MemoryStore) -> None:
    """Two messages by two authors match alike (Melanie's a little better); a query naming
    Caroline ranks hers first ([recall] other_author_weight), one naming nobody or everybody as
    fused. Far apart, so neighbour spreading links neither to the other."""
    named = [
        dataclasses.replace(msg(A, 0, "the lake trip"), name="Melanie"),
        dataclasses.replace(msg(A, 40, "the lake trip"), name="Caroline"),
        msg(A, 80, "groceries and the weather"),
    ]
    store.spool_messages(named)
    store.put_message_vectors(A, [("m0000", axis(0)), ("m0040", axis(0, tilt=0.05)), ("m0080", axis(2))], V)
    assert store.message_authors(A) == ["Caroline", "Melanie"]

    def top(query: str) -> list[str]:
        return ids(store.search_recall_hybrid(A, query, axis(0), limit=2))

    assert top("the lake trip") == ["m0000", "m0040"]
    assert top("Caroline's lake trip") == ["m0040", "m0000"]
    assert top("Melanie's lake trip") == ["m0000", "m0040"]
    assert top("Caroline and Melanie: the lake trip") == ["m0000", "m0040"]
    store.recall_author_weight = 1.0  # type: ignore[attr-defined]
    assert top("Caroline's lake trip") == ["m0000", "m0040"]
