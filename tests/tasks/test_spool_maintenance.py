"""Write-behind spooling, the sweeper's decisions and its repairs, TTL expiry."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.doubles.coldpath import DIM, MODEL, appended_ids, converse, create_agent, make_deps, small_settings
from tests.doubles.embedder import WordVectorizer, word_embed
from vcm.dispatch import RecordingDispatcher
from vcm.durable import VCM_METADATA, stored_message
from vcm.tasks import evict, maintenance
from vcm.tasks.deps import Deps
from vcm.tasks.recall.vectors import Turn
from vcm.tasks.spool import spool_messages
from vcm.tasks.summary.selection import Vectors
from vcm.types import Message

AGENT = "agent-s"


@pytest.fixture
def deps(tmp_path: Path) -> Iterator[Deps]:
    d = make_deps(tmp_path)
    create_agent(d.hot, d.store, AGENT, model=MODEL)
    yield d
    d.store.close()


def recorded(d: Deps) -> RecordingDispatcher:
    assert isinstance(d.dispatcher, RecordingDispatcher)
    return d.dispatcher


def test_stored_message_carries_hot_path_fields() -> None:
    m = Message(
        "m7",
        7,
        "tool",
        "42",
        4,
        100.0,
        pinned=True,
        name="calc",
        tool_call_id="c1",
        metadata={"k": 1},
        kind="message",
    )
    s = stored_message("a", m, ttl_s=60)
    assert (s.message_id, s.seq, s.role, s.name, s.expires_at) == ("m7", 7, "tool", "calc", 160.0)
    assert s.metadata == {"k": 1, VCM_METADATA: {"pinned": True, "tool_call_id": "c1"}}
    assert stored_message("a", m).expires_at is None


def test_spool_is_idempotent_and_skips_messages_gone_with_their_batch(deps: Deps) -> None:
    results = converse(deps.hot, AGENT, 3)
    ids = appended_ids(results)
    first = spool_messages(deps.hot, deps.store, AGENT, ids)
    assert (first.asked, first.found, first.written) == (3, 3, 3)
    again = spool_messages(deps.hot, deps.store, AGENT, ids)
    assert again.written == 0 and deps.store.count_messages(AGENT) == 3

    while not deps.hot.pending_batches(AGENT):
        ids += appended_ids(converse(deps.hot, AGENT, 1, start=len(ids)))
    evicted = deps.hot.batch_message_ids(AGENT)[1]
    evict.evict_batch(deps, AGENT, 1)
    late = spool_messages(deps.hot, deps.store, AGENT, evicted)
    assert late.found == 0 and late.written == 0  # committed by the eviction instead
    assert {m.message_id for m in deps.store.get_messages(AGENT, evicted)} == set(evicted)


class TwoSided(WordVectorizer):
    """Records what it was asked to embed, with which turns around it."""

    version = "word-hash:late1+2:v1"
    context = 1
    after = 2

    def __init__(self) -> None:
        self.asked: list[tuple[int, list[int]]] = []

    def embed(self, history: Sequence[Turn], targets: Sequence[Turn]) -> list[Vectors | None]:
        seqs = sorted({t.seq for t in [*history, *targets]})
        self.asked += [(t.seq, seqs) for t in targets]
        return super().embed(history, targets)


def test_a_message_is_embedded_once_the_turns_after_it_have_arrived(deps: Deps) -> None:
    vectorizer = TwoSided()
    ids: list[str] = []
    for i in range(5):
        new = appended_ids(converse(deps.hot, AGENT, 1, start=i))
        ids += new
        spool_messages(deps.hot, deps.store, AGENT, new, vectorizer=vectorizer)
    # Messages 1..3 have two followers each; 4 and 5 wait for theirs.
    assert [seq for seq, _ in vectorizer.asked] == [1, 2, 3]
    assert all(set(range(1, seq + 3)) <= set(seen) for seq, seen in vectorizer.asked)
    hits = deps.store.search_recall_hybrid(AGENT, "x", [1.0] * DIM, mode="vector", limit=10).items
    assert sorted(h.message.seq for h in hits) == [1, 2, 3]
    again = spool_messages(deps.hot, deps.store, AGENT, ids[-1:], vectorizer=vectorizer)
    assert again.embedded == 0  # a retried spool stores nothing twice


def test_heads_and_stuck_are_pure_decisions() -> None:
    assert maintenance.heads({"a": [3, 2], "b": [], "c": [7]}) == {"a": 2, "c": 7}
    assert maintenance.stuck({"a": 2, "c": 6}, {"a": 2, "c": 7, "d": 1}) == {"a": 2}


def test_sweeper_redrives_a_batch_that_did_not_move(deps: Deps) -> None:
    while not deps.hot.pending_batches(AGENT):
        converse(deps.hot, AGENT, 1, start=len(deps.hot.snapshot(AGENT).fifo) + 100)
    first = maintenance.observe(deps)
    assert first == {AGENT: 1}
    out = maintenance.redrive(deps, first)
    assert out.redriven == {AGENT: 1} and recorded(deps).evictions == [(AGENT, 1)]
    evict.evict_batch(deps, AGENT, 1)
    assert maintenance.redrive(deps, first).redriven == {}  # it moved: nothing to do


def test_sweeper_holds_back_a_recently_dead_lettered_batch(tmp_path: Path) -> None:
    for wait, expected in ((3600.0, {}), (0.0, {AGENT: 1})):
        d = make_deps(tmp_path / str(wait), settings=small_settings(maintenance={"redrive_dead_letters_after_s": wait}))
        create_agent(d.hot, d.store, AGENT, model=MODEL)
        while not d.hot.pending_batches(AGENT):
            converse(d.hot, AGENT, 1, start=len(d.hot.snapshot(AGENT).fifo) + 100)
        evict.dead_letter(d, AGENT, 1, reason="x", attempts=1, delivery="t")
        out = maintenance.redrive(d, maintenance.observe(d))
        assert out.redriven == expected
        assert out.held_back == ({AGENT: 1} if wait else {})


def test_reconcile_spools_only_missed_messages_past_the_grace(deps: Deps) -> None:
    ids = appended_ids(converse(deps.hot, AGENT, 4))
    spool_messages(deps.hot, deps.store, AGENT, ids[:1])
    newest = max(m.created_at for m in deps.hot.snapshot(AGENT).fifo)
    assert maintenance.reconcile_spool(deps, older_than=newest - 3600) == 0  # all too young
    assert maintenance.reconcile_spool(deps, older_than=newest) == 3
    assert deps.store.count_messages(AGENT) == 4
    assert maintenance.reconcile_spool(deps, older_than=newest) == 0


def test_expire_deletes_recall_past_its_ttl(tmp_path: Path) -> None:
    d = make_deps(tmp_path, settings=small_settings(maintenance={"recall_ttl_s": 60}))
    create_agent(d.hot, d.store, AGENT, model=MODEL)
    ids = appended_ids(converse(d.hot, AGENT, 3))
    spool_messages(d.hot, d.store, AGENT, ids, ttl_s=60)
    created = max(m.created_at for m in d.hot.snapshot(AGENT).fifo)
    d.clock = lambda: created + 30
    assert maintenance.expire(d).total == 0
    d.clock = lambda: created + 61
    assert maintenance.expire(d).messages == 3 and d.store.count_messages(AGENT) == 0


def test_expired_recall_vanishes_from_text_and_vector_search_and_the_rest_stays(tmp_path: Path) -> None:
    d = make_deps(tmp_path, settings=small_settings(maintenance={"recall_ttl_s": 60}))
    create_agent(d.hot, d.store, AGENT, model=MODEL)
    old = [d.hot.append(AGENT, "user", f"the otter swims in river {i}").message_id for i in range(3)]
    spool_messages(d.hot, d.store, AGENT, old, ttl_s=60)  # retention on: these expire
    kept = [d.hot.append(AGENT, "user", f"the otter sleeps in den {i}").message_id for i in range(2)]
    spool_messages(d.hot, d.store, AGENT, kept, ttl_s=0)  # written while retention was off: kept
    stored = d.store.get_messages(AGENT, old + kept)
    d.store.put_message_vectors(AGENT, [(m.message_id, word_embed([m.content])[0]) for m in stored], "w64")
    query = [float(x) for x in word_embed(["otter river"])[0]]

    def found(mode: str) -> set[str]:
        page = d.store.search_recall_hybrid(AGENT, "otter", query, limit=20, mode=mode, embedding_version="w64")
        return {h.message.message_id for h in page.items}

    assert found("text") == found("vector") == set(old + kept)
    created = max(m.created_at for m in stored)
    d.clock = lambda: created + 61

    assert maintenance.expire(d).messages == 3
    assert found("text") == found("vector") == set(kept)
    assert {h.message.message_id for h in d.store.search_recall(AGENT, "river").items} == set()
    (row,) = d.store.query_events("*", ["expire"]).items
    assert row.actor == "worker:expire"
    assert row.payload["footprint"] == {"op": "expire", "messages": -3, "before": created + 61}
    d.store.close()


def test_eviction_embeds_the_batch_messages_the_spool_never_reached(tmp_path: Path) -> None:
    # The spool lagged: the batch is committed by the eviction before any spool ran.
    vectorizer = TwoSided()
    d = make_deps(tmp_path / "lag", vectorizer=vectorizer)
    create_agent(d.hot, d.store, AGENT, model=MODEL, system_prompt="You are a careful assistant.")
    i = 0
    while not d.hot.pending_batches(AGENT):
        converse(d.hot, AGENT, 1, start=i)
        i += 1
    batch = d.hot.batch_message_ids(AGENT)[1]
    assert evict.evict_batch(d, AGENT, 1).outcome == "committed"

    assert d.store.message_vector_ids(AGENT, batch, vectorizer.version) == set(batch)
    # The batch's last messages were read with the FIFO turns after them as context.
    last_seq = max(seq for seq, _ in vectorizer.asked)
    assert any(s > last_seq for s in dict(vectorizer.asked)[last_seq])
    asked = len(vectorizer.asked)
    assert evict.evict_batch(d, AGENT, 1).outcome == "absent" and len(vectorizer.asked) == asked
    d.store.close()


def test_a_failing_model_never_fails_a_committed_eviction(tmp_path: Path) -> None:
    class Broken(WordVectorizer):
        def embed(self, history: Sequence[Turn], targets: Sequence[Turn]) -> list[Vectors | None]:
            raise RuntimeError("model fell over")

    d = make_deps(tmp_path / "broken", vectorizer=Broken())
    create_agent(d.hot, d.store, AGENT, model=MODEL)
    i = 0
    while not d.hot.pending_batches(AGENT):
        converse(d.hot, AGENT, 1, start=i)
        i += 1
    assert evict.evict_batch(d, AGENT, 1).outcome == "committed"
    assert d.store.committed_batches(AGENT) == [1] and d.hot.pending_batches(AGENT) == []
    d.store.close()


def test_reconcile_reads_only_messages_after_its_watermark(deps: Deps, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = appended_ids(converse(deps.hot, AGENT, 4))
    newest = max(m.created_at for m in deps.hot.snapshot(AGENT).fifo)
    assert maintenance.reconcile_spool(deps, older_than=newest - 3600) == 0
    assert deps.hot.reconciled_seq(AGENT) == 0  # nothing past its grace yet: no watermark
    assert maintenance.reconcile_spool(deps, older_than=newest) == 4
    assert deps.hot.reconciled_seq(AGENT) == maintenance.message_seq(ids[-1])

    later = appended_ids(converse(deps.hot, AGENT, 3, start=4))
    read: list[str] = []
    get_messages = deps.hot.get_messages

    def reading(agent: str, wanted: Sequence[str]) -> list[Message]:
        read.extend(wanted)
        return get_messages(agent, wanted)

    monkeypatch.setattr(deps.hot, "get_messages", reading)
    youngest = max(m.created_at for m in deps.hot.snapshot(AGENT).fifo)
    # the first two of the new ones are due, the last is still in its grace period
    due = sorted(m.created_at for m in deps.hot.get_messages(AGENT, later))[1]
    assert maintenance.reconcile_spool(deps, older_than=due) == 2
    assert read[: len(later)] == later  # the already reconciled four were not read again
    assert deps.hot.reconciled_seq(AGENT) == maintenance.message_seq(later[1])
    assert maintenance.reconcile_spool(deps, older_than=youngest) == 1
    assert deps.store.count_messages(AGENT) == 7 and deps.hot.reconciled_seq(AGENT) == maintenance.message_seq(later[2])


def test_message_seq_parses_hot_path_ids_only() -> None:
    assert maintenance.message_seq("m17") == 17
    assert [maintenance.message_seq(i) for i in ("x17", "m", "m1a", "17")] == [None, None, None, None]
