"""Author anchoring of hybrid recall (vcm.store.authors): the pure rules, their place in
fusion.hybrid, the embedded store's author listing over a real SQLite file, and the ArangoDB
adapter's queries as text and over the in-memory fake."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Collection
from pathlib import Path
from typing import Any, cast

import pytest

from tests.store.factories import FaultSwitch, msg
from tests.store.fake_arango import FakeDB
from vcm.store import authors, open_store
from vcm.store.arango import documents, names
from vcm.store.arango.adapter import ArangoStore
from vcm.store.arango.aql import messages as aql_messages
from vcm.store.arango.aql import recall_vectors as aql_recall_vectors
from vcm.store.embedded import EmbeddedStore
from vcm.store.fusion import hybrid
from vcm.store.types import StoredMessage

KNOWN = ["Caroline", "Melanie", "mary_jane"]


def by(author: str | None, i: int, content: str | None = None, agent: str = "a") -> StoredMessage:
    return dataclasses.replace(msg(agent, i, content), name=author)


# --- pure --------------------------------------------------------------------------------------


def test_a_name_is_mentioned_by_its_analysed_terms() -> None:
    assert authors.mentioned("What is Caroline's identity?", KNOWN) == {"Caroline"}
    assert authors.mentioned("did caroline and MELANIE meet?", KNOWN) == {"Caroline", "Melanie"}
    assert authors.mentioned("What did Mary Jane say?", KNOWN) == {"mary_jane"}
    assert authors.mentioned("What did Mary say?", KNOWN) == frozenset()  # every term of the name
    assert authors.mentioned("Where is Carol?", KNOWN) == frozenset()
    assert authors.mentioned("", KNOWN) == frozenset()
    assert authors.mentioned("Caroline", []) == frozenset()


def test_names_leave_the_query_with_their_possessive() -> None:
    assert authors.without_names("What is Caroline's identity?", {"Caroline"}) == "What is identity?"
    assert authors.without_names("Did Caroline and Melanie meet?", {"Caroline", "Melanie"}) == "Did and meet?"
    assert authors.without_names("What did Mary Jane say?", {"mary_jane"}) == "What did say?"
    # nothing named, nothing removed, or nothing left: the query as it was
    assert authors.without_names("What is Caroline's identity?", set()) == "What is Caroline's identity?"
    assert authors.without_names("How are you?", {"Caroline"}) == "How are you?"
    assert authors.without_names("Caroline?", {"Caroline"}) == "Caroline?"


def test_only_a_query_naming_some_but_not_all_authors_is_anchored() -> None:
    assert authors.anchored(KNOWN, {"Caroline"}, 0.9)
    assert authors.anchored(KNOWN, {"Caroline", "Melanie"}, 0.9)  # mary_jane's are others
    assert not authors.anchored(KNOWN, set(KNOWN), 0.9)
    assert not authors.anchored(KNOWN, set(), 0.9)
    assert not authors.anchored(KNOWN, {"Caroline"}, 1.0)
    crowd = [f"p{i}" for i in range(authors.MAX_AUTHORS + 1)]
    assert not authors.anchored(crowd, {"p1"}, 0.9)  # too many to anchor on


def test_anchor_weights_other_authors_only() -> None:
    scores = {"c": 0.5, "m": 1.0, "x": 0.8, "gone": 0.7}
    author_of = {"c": "Caroline", "m": "Melanie", "x": None}
    out = authors.anchor(scores, author_of, {"Caroline"}, 0.5)
    assert out == pytest.approx({"c": 0.5, "m": 0.5, "x": 0.8, "gone": 0.7})
    assert list(out) == list(scores)
    with pytest.raises(ValueError):
        authors.anchor(scores, author_of, {"Caroline"}, 1.5)


def test_hybrid_anchors_after_spreading() -> None:
    text = [("m", 2.0), ("c", 2.0)]
    vector = [("m", 0.9), ("c", 0.9), ("far", 0.1)]
    seq = {"m": 1, "c": 50, "far": 100}
    assert [k for k, _ in hybrid(text, vector, seq)][:2] == ["m", "c"]  # a tie: first appearance
    anchor = authors.Anchor(frozenset({"Caroline"}), lambda _: {"m": "Melanie", "c": "Caroline"}, 0.9)
    ranked = hybrid(text, vector, seq, anchor=anchor)
    assert [k for k, _ in ranked][:2] == ["c", "m"]
    assert dict(ranked)["m"] == pytest.approx(0.9 * dict(ranked)["c"])


def test_anchoring_reads_only_the_authors_that_can_reach_the_exact_head() -> None:
    scores = {"m1": 1.0, "c1": 0.99, "m2": 0.95, "c2": 0.92, "m3": 0.5, "c3": 0.2}
    who = {k: "Melanie" if k.startswith("m") else "Caroline" for k in scores}
    read: list[set[str]] = []

    def authors_of(items: Collection[str]) -> dict[str, str | None]:
        read.append(set(items))
        return {k: who[k] for k in items}

    spec = authors.Anchor(frozenset({"Caroline"}), authors_of, 0.9, exact=2)
    out = authors.anchor_ranking(scores, spec)
    # The 2nd best scores 0.99: below 0.9 x 0.99 nothing can reach the best 2, so not read.
    assert read == [{"m1", "c1", "m2", "c2"}]
    assert sorted(out, key=lambda k: -out[k])[:2] == ["c1", "c2"]
    whole = authors.anchor_ranking(scores, dataclasses.replace(spec, exact=None))
    assert read[-1] == set(scores)
    # The exact head agrees with anchoring everything.
    assert sorted(whole, key=lambda k: -whole[k])[:2] == ["c1", "c2"]
    for k in read[0]:
        assert out[k] == pytest.approx(whole[k])


def test_the_setting_reaches_the_store_opened_for_it(tmp_path: Path) -> None:
    from vcm.settings import load_settings
    from vcm.workers.runtime import open_configured_store

    settings = load_settings(
        environ={},
        overrides={"store_url": f"sqlite:///{tmp_path / 'vcm.db'}", "recall": {"other_author_weight": 0.5}},
    )
    store = open_configured_store(settings)
    try:
        assert store.recall_author_weight == 0.5  # type: ignore[attr-defined]
    finally:
        store.close()
    default = open_store(str(tmp_path / "other.db"))
    try:
        assert default.recall_author_weight == authors.OTHER_AUTHOR_WEIGHT  # type: ignore[attr-defined]
        recall = load_settings(environ={}).recall
        assert recall.other_author_weight == authors.OTHER_AUTHOR_WEIGHT
        assert recall.query_vector_without_authors is authors.QUERY_VECTOR_WITHOUT_AUTHORS
    finally:
        default.close()
    with pytest.raises(ValueError):
        open_store(str(tmp_path / "bad.db"), other_author_weight=-0.1)


# --- embedded store, a real SQLite file --------------------------------------------------------


def test_the_embedded_store_lists_an_agents_authors_by_index_seeks(tmp_path: Path) -> None:
    path = tmp_path / "vcm.db"
    store = EmbeddedStore(str(path))
    try:
        assert store.message_authors("a") == []
        store.spool_messages(
            [by("Melanie", 0), by(None, 1), by("Caroline", 2), by("Melanie", 3), by("Zed", 4, agent="b")]
        )
        assert store.message_authors("a") == ["Caroline", "Melanie"]
        assert store.message_authors("b") == ["Zed"]
        crowd = [by(f"p{i:03d}", 10 + i, agent="crowd") for i in range(authors.MAX_AUTHORS + 5)]
        store.spool_messages(crowd)
        listed = store.message_authors("crowd")
        assert len(listed) == authors.MAX_AUTHORS + 1 and listed == sorted(listed)
    finally:
        store.close()
    with sqlite3.connect(path) as conn:
        plan = " ".join(
            str(r[-1])
            for r in conn.execute(
                "EXPLAIN QUERY PLAN SELECT name FROM messages WHERE agent_id = ? AND name > ? ORDER BY name LIMIT 1",
                ("a", ""),
            )
        )
        assert "messages_agent_name" in plan and "TEMP B-TREE" not in plan
        # A database made before the index exists gets it when opened.
        conn.execute("DROP INDEX messages_agent_name")
    EmbeddedStore(str(path)).close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'messages_agent_name'").fetchone()


# --- ArangoDB: AQL as text, the adapter over the fake ------------------------------------------


def test_the_author_listing_aql_is_one_seek_of_the_sparse_name_index() -> None:
    q = aql_messages.message_author_after("a", "Caroline")
    assert q.bind_vars == {"agent_id": "a", "after": "Caroline"}
    assert f"FOR d IN {names.MESSAGES}" in q.text
    assert "d.agent_id == @agent_id AND d.name != null AND d.name > @after" in q.text
    assert "SORT d.agent_id, d.name" in q.text and "LIMIT 1" in q.text and "RETURN d.name" in q.text
    assert "Caroline" not in q.text
    from vcm.store.arango.schema import load_schema

    spec = next(i for i in load_schema().indexes[names.MESSAGES] if i["name"] == "messages_agent_name")
    assert spec["fields"] == ["agent_id", "name"] and spec["sparse"] is True


def test_recall_positions_read_the_authors_only_when_asked() -> None:
    assert "author" not in aql_recall_vectors.recall_positions("a", ["k1"], "v1").text
    q = aql_recall_vectors.recall_positions("a", ["k1"], "v1", authors=True)
    assert "author: d.name" in q.text and "seq: d.seq" in q.text and "embedded:" in q.text


def test_the_arango_adapter_lists_authors_once_per_recheck_and_anchors_hybrid(
    world: tuple[ArangoStore, FakeDB, FaultSwitch],
) -> None:
    store, _, _ = world
    # Melanie's and Caroline's messages match the query alike, far apart in the conversation.
    store.spool_messages([by("Melanie", 0, "the lake trip"), by("Caroline", 50, "the lake trip"), by(None, 99)])
    km, kc, kx = (documents.message_key("a", f"m{i:04d}") for i in (0, 50, 99))
    author = {km: "Melanie", kc: "Caroline", kx: None}
    seqs = {km: 0, kc: 50, kx: 99}
    stored = ["Caroline", "Melanie"]
    listed: list[str] = []
    positions: list[str] = []

    def answers(query: str, bind: dict[str, Any]) -> list[Any] | None:
        if "RETURN d.name" in query:
            listed.append(bind["after"])
            return [n for n in stored if n > bind["after"]][:1]
        if "seq: d.seq" in query:
            positions.append(query)
            rows = []
            for doc_id in bind["ids"]:
                key = doc_id.split("/")[1]
                row: dict[str, Any] = {"key": key, "seq": seqs[key], "embedded": True}
                if "author: d.name" in query:
                    row["author"] = author[key]
                rows.append(row)
            return rows
        if "WITH COUNT INTO n" in query and "version" in query:
            return [{"version": "v1", "dimension": 4, "n": 3}]
        if "BM25" in query:
            return [{"key": km, "score": 2.0}, {"key": kc, "score": 2.0}]
        if "COSINE_SIMILARITY" in query:
            return [{"key": km, "score": 0.9}, {"key": kc, "score": 0.9}, {"key": kx, "score": 0.1}]
        return None

    cast(FakeDB, store._ro).on_query = answers
    assert store.message_authors("a") == ["Caroline", "Melanie"]
    assert listed == ["", "Caroline", "Melanie"]
    assert store.message_authors("a") == ["Caroline", "Melanie"] and len(listed) == 3  # cached

    def top(query: str) -> list[str]:
        page = store.search_recall_hybrid("a", query, [1.0, 0.0, 0.0, 0.0], limit=2, embedding_version="v1")
        return [h.message.message_id for h in page.items]

    assert top("where did Caroline go?") == ["m0050", "m0000"]  # anchored on Caroline
    assert "author: d.name" in positions[-1]
    assert top("where did Melanie go?") == ["m0000", "m0050"]
    assert top("where did they go?") == ["m0000", "m0050"]  # no name: as fused (a tie, text order)
    assert "author: d.name" not in positions[-1]
    assert top("did Caroline and Melanie go?") == ["m0000", "m0050"]  # every author named
    store.recall_author_weight = 1.0
    assert top("where did Caroline go?") == ["m0000", "m0050"]
