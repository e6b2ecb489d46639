"""The store contract: one suite, run against every adapter through the port API only."""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from tests.store.factories import (
    FaultSwitch,
    chunk,
    clustered,
    doc_nodes,
    eviction,
    msg,
    snapshot,
)
from vcm.errors import (
    ErrorCode,
    IdempotencyMismatch,
    InjectedFailure,
    NotFound,
    RevConflict,
    ValidationError,
    VcmError,
)
from vcm.store.port import MemoryStore
from vcm.store.types import (
    SUMMARY_BLOCK_ID,
    CoreBlockWrite,
    Edge,
    MemoryEvent,
    NodeRef,
    chunk_node,
    core_node,
    message_node,
    summary_node,
)

A, B = "agent-a", "agent-b"


def block(content: str = "hello", block_id: str = "persona", agent: str = A) -> CoreBlockWrite:
    return CoreBlockWrite(agent, block_id, "system", content, tokens=len(content.split()))


def key() -> str:
    return uuid.uuid4().hex


# --- core memory ---------------------------------------------------------------------------
def test_core_create_get_list(store: MemoryStore) -> None:
    created = store.put_core(block("I am helpful"), None, key())
    other = store.put_core(block("notes", "scratch"), None, key())

    assert created.rev and created.content == "I am helpful" and created.updated_at > 0
    assert store.get_core(A, "persona") == created
    assert {b.block_id for b in store.list_core(A)} == {"persona", "scratch"}
    assert store.list_core(B) == []
    assert created.rev != other.rev


def test_core_get_missing_raises_not_found(store: MemoryStore) -> None:
    with pytest.raises(NotFound) as info:
        store.get_core(A, "nope")
    assert info.value.code is ErrorCode.NOT_FOUND


def test_core_create_when_it_exists_conflicts_with_current_rev(store: MemoryStore) -> None:
    first = store.put_core(block("one"), None, key())

    with pytest.raises(RevConflict) as info:
        store.put_core(block("two"), None, key())

    assert info.value.details["current_rev"] == first.rev
    assert store.get_core(A, "persona").content == "one"


def test_core_replace_needs_the_current_rev(store: MemoryStore) -> None:
    first = store.put_core(block("one"), None, key())
    second = store.put_core(block("two"), first.rev, key())

    with pytest.raises(RevConflict) as info:
        store.put_core(block("three"), first.rev, key())

    assert second.rev != first.rev
    assert info.value.details["current_rev"] == second.rev
    assert store.get_core(A, "persona") == second


def test_core_idempotent_replay_returns_first_result(store: MemoryStore) -> None:
    k = key()
    first = store.put_core(block("one"), None, k)
    later = store.put_core(block("two"), first.rev, key())

    replay = store.put_core(block("one"), None, k)  # a retry after a lost reply

    assert replay == first
    assert store.get_core(A, "persona") == later


def test_core_same_key_other_content_is_a_mismatch(store: MemoryStore) -> None:
    k = key()
    first = store.put_core(block("one"), None, k)

    with pytest.raises(IdempotencyMismatch) as info:
        store.put_core(block("other"), first.rev, k)

    assert info.value.code is ErrorCode.IDEMPOTENCY_MISMATCH
    assert store.get_core(A, "persona") == first


def test_core_delete_checks_rev(store: MemoryStore) -> None:
    first = store.put_core(block("one"), None, key())
    second = store.put_core(block("two"), first.rev, key())

    with pytest.raises(RevConflict):
        store.delete_core(A, "persona", first.rev)
    assert store.get_core(A, "persona") == second

    store.delete_core(A, "persona", second.rev)
    with pytest.raises(NotFound):
        store.get_core(A, "persona")
    with pytest.raises(NotFound):
        store.delete_core(A, "persona", second.rev)


def test_core_rev_of_deleted_block_conflicts_and_revs_are_not_reused(store: MemoryStore) -> None:
    first = store.put_core(block("one"), None, key())
    store.delete_core(A, "persona", first.rev)

    with pytest.raises(RevConflict) as info:
        store.put_core(block("two"), first.rev, key())
    recreated = store.put_core(block("three"), None, key())

    assert info.value.details["current_rev"] is None
    assert recreated.rev != first.rev


def test_summary_block_is_not_writable_through_put_core(store: MemoryStore) -> None:
    with pytest.raises(ValidationError):
        store.put_core(block("x", SUMMARY_BLOCK_ID), None, key())
    assert store.get_summary(A) is None


def test_concurrent_writers_lose_no_update(store: MemoryStore) -> None:
    store.put_core(block("0", "counter"), None, key())
    successes: list[int] = []
    conflicts: list[int] = []
    unexpected: list[BaseException] = []
    start = threading.Barrier(8)

    def writer() -> None:
        start.wait()
        for _ in range(20):
            current = store.get_core(A, "counter")
            try:
                store.put_core(block(str(int(current.content) + 1), "counter"), current.rev, key())
                successes.append(1)
            except RevConflict:
                conflicts.append(1)
            except BaseException as exc:  # any other error is a contract violation
                unexpected.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert unexpected == []
    assert len(successes) + len(conflicts) == 160
    assert int(store.get_core(A, "counter").content) == len(successes)
    assert len(successes) >= 20  # every round someone wins


# --- messages --------------------------------------------------------------------------------
def test_spool_is_idempotent_by_message_id(store: MemoryStore) -> None:
    batch = [msg(A, i) for i in range(5)]

    assert store.spool_messages([*batch, batch[0]]) == 5
    assert store.spool_messages(batch) == 0
    assert store.spool_messages([*batch[:2], msg(A, 5)]) == 1
    assert store.count_messages(A) == 6
    assert store.count_messages(B) == 0
    # By id prefix (the hot path's appends, without recall notes); "_" and "%" are no wildcards.
    store.spool_messages([replace(msg(A, 6), message_id="r_note"), replace(msg(A, 7), message_id="m%x")])
    assert store.count_messages(A, id_prefix="m") == 7 and store.count_messages(A, id_prefix="r_") == 1
    assert store.count_messages(A, id_prefix="m%") == 1 and store.count_messages(A, id_prefix="m_") == 0


def test_spool_keeps_the_first_write_of_a_message(store: MemoryStore) -> None:
    store.spool_messages([msg(A, 1, "original")])
    store.spool_messages([msg(A, 1, "rewritten")])

    assert [m.content for m in store.get_messages(A, ["m0001"])] == ["original"]


def test_get_messages_in_asked_order_without_missing(store: MemoryStore) -> None:
    store.spool_messages([msg(A, i) for i in range(4)] + [msg(B, 9)])

    got = store.get_messages(A, ["m0003", "nope", "m0000", "m0009"])

    assert [m.message_id for m in got] == ["m0003", "m0000"]
    assert got[0] == msg(A, 3)


def test_list_messages_pages_through_a_conversation_in_seq_order(store: MemoryStore) -> None:
    store.spool_messages([msg(A, i) for i in (7, 2, 9, 0, 4)] + [msg(B, 3)])

    first = store.list_messages(A, limit=2)
    rest = store.list_messages(A, after_seq=first[-1].seq, limit=10)

    assert [m.seq for m in first] == [0, 2] and [m.seq for m in rest] == [4, 7, 9]
    assert first[0] == msg(A, 0)
    assert store.list_messages(A, after_seq=9) == [] and store.list_messages("nobody") == []


# --- eviction ------------------------------------------------------------------------------
def test_commit_eviction_applies_everything(store: MemoryStore) -> None:
    batch = [msg(A, i) for i in range(3)]
    store.spool_messages(batch[:1])  # write-behind spool usually got there first

    result = store.commit_eviction(eviction(A, 1, batch, None))

    assert (result.agent_id, result.batch_id, result.replayed) == (A, 1, False)
    assert result.messages_committed == 3
    summary = store.get_summary(A)
    assert summary is not None
    assert (summary.text, summary.batch_id, summary.rev) == ("summary after batch 1", 1, result.summary_rev)
    assert store.count_messages(A) == 3
    assert store.committed_batches(A) == [1]
    linked = store.traverse(summary_node(A), ["recall_log"])
    assert set(linked) == {message_node(A, m.message_id) for m in batch}
    events = store.query_events(A, ["evict"]).items
    assert len(events) == 1
    assert {"reason": "flush", "drift": 0.93}.items() <= dict(events[0].payload).items()
    assert store.stats(A)["recall_log_edges"] == 3


def test_commit_eviction_replay_changes_nothing(store: MemoryStore) -> None:
    first = store.commit_eviction(eviction(A, 1, [msg(A, 0), msg(A, 1)], None))
    second = store.commit_eviction(eviction(A, 2, [msg(A, 2)], first.summary_rev))
    before = snapshot(store, [A], ["m0000", "m0001", "m0002"])

    replay = store.commit_eviction(eviction(A, 1, [msg(A, 0), msg(A, 1)], None))

    assert replay.replayed is True
    assert (replay.summary_rev, replay.messages_committed) == (first.summary_rev, 2)
    assert snapshot(store, [A], ["m0000", "m0001", "m0002"]) == before
    summary = store.get_summary(A)
    assert summary is not None and summary.rev == second.summary_rev
    assert store.committed_batches(A) == [1, 2]


def test_commit_eviction_stale_summary_rev_conflicts_and_writes_nothing(store: MemoryStore) -> None:
    first = store.commit_eviction(eviction(A, 1, [msg(A, 0)], None))
    before = snapshot(store, [A], ["m0000", "m0001"])

    with pytest.raises(RevConflict) as info:
        store.commit_eviction(eviction(A, 2, [msg(A, 1)], None))
    with pytest.raises(RevConflict):
        store.commit_eviction(eviction(A, 2, [msg(A, 1)], first.summary_rev + "x"))

    assert info.value.details["current_rev"] == first.summary_rev
    assert snapshot(store, [A], ["m0000", "m0001"]) == before


@pytest.mark.parametrize("point", ["commit_eviction.after_recall_append", "commit_eviction.before_commit"])
def test_commit_eviction_failure_leaves_store_as_before_then_retry_succeeds(
    store: MemoryStore, faults: FaultSwitch, point: str
) -> None:
    first = store.commit_eviction(eviction(A, 1, [msg(A, 0)], None))
    store.spool_messages([msg(A, 1)])
    ids = ["m0000", "m0001", "m0002", "m0003"]
    before = snapshot(store, [A, B], ids)
    commit = eviction(A, 2, [msg(A, 1), msg(A, 2), msg(A, 3)], first.summary_rev)

    faults.armed.add(point)
    with pytest.raises(InjectedFailure):
        store.commit_eviction(commit)
    faults.armed.clear()

    assert point in faults.seen
    assert snapshot(store, [A, B], ids) == before
    result = store.commit_eviction(commit)
    assert result.replayed is False
    assert store.committed_batches(A) == [1, 2]
    assert store.count_messages(A) == 4
    assert set(store.traverse(summary_node(A))) == {message_node(A, i) for i in ids}


def test_concurrent_commits_of_one_batch_apply_it_once(store: MemoryStore) -> None:
    commit = eviction(A, 1, [msg(A, i) for i in range(4)], None)
    results: list[Any] = []
    start = threading.Barrier(6)

    def commit_it() -> None:
        start.wait()
        results.append(store.commit_eviction(commit))

    threads = [threading.Thread(target=commit_it) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert len(results) == 6
    assert sorted(r.replayed for r in results) == [False, True, True, True, True, True]
    assert len({r.summary_rev for r in results}) == 1
    assert len(store.query_events(A, ["evict"]).items) == 1
    assert store.committed_batches(A) == [1]


def test_concurrent_writers_read_their_own_writes(store: MemoryStore) -> None:
    failures: list[str] = []

    def writer(w: int) -> None:
        for i in range(15):
            n = w * 100 + i
            store.spool_messages([msg(A, n, f"thread{w} wrote heron{n}")])
            found = [h.message.message_id for h in store.search_recall(A, f"heron{n}").items]
            if found != [f"m{n:04d}"]:
                failures.append(f"heron{n}: {found}")

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert failures == []
    assert store.count_messages(A) == 60


def test_commit_eviction_rejects_foreign_messages(store: MemoryStore) -> None:
    with pytest.raises(ValidationError):
        store.commit_eviction(eviction(A, 1, [msg(A, 0), msg(B, 1)], None))
    assert store.get_summary(A) is None
    assert store.count_messages(A) == 0


# --- recall search -------------------------------------------------------------------------
def test_search_recall_ranks_by_bm25_with_stemming(store: MemoryStore) -> None:
    store.spool_messages(
        [
            msg(A, 0, "We talked about the weather in Lisbon"),
            msg(A, 1, "My dog loves running on the beach; dogs run fast"),
            msg(A, 2, "The quarterly budget review is on Monday"),
            msg(A, 3, "She runs a small bakery"),
            msg(B, 4, "dogs running everywhere"),
        ]
    )

    page = store.search_recall(A, "Running dogs", limit=10)

    ids = [h.message.message_id for h in page.items]
    assert ids[0] == "m0001"
    assert set(ids) == {"m0001", "m0003"}  # stemmed "run"; other agents never leak
    assert page.items[0].score > page.items[1].score > 0
    assert page.next_cursor is None


def test_search_recall_reads_its_own_writes(store: MemoryStore) -> None:
    for i in range(5):
        store.spool_messages([msg(A, i, f"unique token zebra{i} appears here")])
        hits = store.search_recall(A, f"zebra{i}").items
        assert [h.message.message_id for h in hits] == [f"m{i:04d}"]


def test_search_recall_time_window(store: MemoryStore) -> None:
    store.spool_messages([msg(A, i, "apple pie recipe", created_at=1000.0 + i) for i in range(10)])

    page = store.search_recall(A, "apple", limit=20, since=1003.0, until=1007.0)

    assert sorted(h.message.message_id for h in page.items) == [f"m{i:04d}" for i in range(3, 7)]


def test_recall_cursor_is_stable_while_new_messages_arrive(store: MemoryStore) -> None:
    store.spool_messages([msg(A, i, f"the meeting about project {i}") for i in range(25)])
    first = store.search_recall(A, "meeting project", limit=10)
    seen = [h.message.message_id for h in first.items]
    cursor = first.next_cursor

    n = 100
    while cursor is not None:
        # Better-matching messages arrive between pages; they must not shift the pages.
        store.spool_messages([msg(A, n, "meeting meeting project project"), msg(A, n + 1, "meeting")])
        n += 2
        page = store.search_recall(A, "meeting project", limit=10, cursor=cursor)
        seen += [h.message.message_id for h in page.items]
        cursor = page.next_cursor

    assert len(seen) == len(set(seen)) == 25
    assert set(seen) == {f"m{i:04d}" for i in range(25)}
    fresh = store.search_recall(A, "meeting project", limit=10)
    assert fresh.items[0].message.message_id >= "m0100"  # new data is visible to new searches


def test_recall_cursor_bound_to_its_search(store: MemoryStore) -> None:
    store.spool_messages([msg(A, i, "alpha beta") for i in range(5)])
    cursor = store.search_recall(A, "alpha", limit=2).next_cursor
    assert cursor is not None

    tampered = cursor[:-3] + ("AAA" if not cursor.endswith("AAA") else "BBB")
    for bad in ("garbage", "", tampered):
        with pytest.raises(ValidationError):
            store.search_recall(A, "alpha", limit=2, cursor=bad)
    with pytest.raises(ValidationError):
        store.search_recall(A, "beta", limit=2, cursor=cursor)
    with pytest.raises(ValidationError):
        store.search_recall(B, "alpha", limit=2, cursor=cursor)
    assert len(store.search_recall(A, "alpha", limit=2, cursor=cursor).items) == 2


# --- archival ------------------------------------------------------------------------------
def _ingest_clusters(store: MemoryStore, agent: str = A, **kw: Any) -> tuple[np.ndarray, np.ndarray]:
    points, labels = clustered(4, 15, 16, **kw)
    chunks = [
        chunk(agent, f"doc{int(label)}", i % 15, p, metadata={"cluster": int(label), "odd": i % 2 == 1})
        for i, (p, label) in enumerate(zip(points, labels, strict=True))
    ]
    assert store.ingest_archival(chunks) == len(chunks)
    return points, labels


def test_ingest_archival_is_idempotent_and_links_chunks(store: MemoryStore) -> None:
    points, _ = clustered(1, 4, 8)
    chunks = [chunk(A, "doc", i, points[i]) for i in (0, 2, 3)]
    assert store.ingest_archival(chunks) == 3
    assert store.ingest_archival(chunks) == 0
    assert store.ingest_archival([chunk(A, "doc", 1, points[1])]) == 1  # fills the gap

    got = store.get_archival(A, "doc")

    assert [c.chunk_index for c in got] == [0, 1, 2, 3]
    assert np.allclose(got[2].embedding, points[2], atol=1e-6)
    assert got[2].char_start == 200 and got[2].source == "file://doc.txt"
    nodes = doc_nodes(A, "doc", 4)
    assert store.traverse(nodes[3], ["derived_from"], max_depth=3) == [nodes[2], nodes[1], nodes[0]]
    assert store.get_archival(B, "doc") == []


def test_search_archival_cosine_top_k(store: MemoryStore) -> None:
    points, _labels = _ingest_clusters(store)
    _ingest_clusters(store, B, seed=8)

    page = store.search_archival(A, points[20].tolist(), k=5)

    assert len(page.items) == 5
    assert page.items[0].chunk.doc_id == "doc1" and page.items[0].chunk.chunk_index == 5
    assert math.isclose(page.items[0].score, 1.0, abs_tol=1e-4)
    assert all(h.chunk.agent_id == A and h.chunk.metadata["cluster"] == 1 for h in page.items)
    scores = [h.score for h in page.items]
    assert scores == sorted(scores, reverse=True)


def test_search_archival_l2_orders_by_distance(store: MemoryStore) -> None:
    points, labels = clustered(3, 10, 8)
    store.ingest_archival(
        [chunk(A, f"d{int(lab)}", i, p, metric="l2") for i, (p, lab) in enumerate(zip(points, labels, strict=True))]
    )

    page = store.search_archival(A, points[0].tolist(), k=4, metric="l2")

    assert page.items[0].score == pytest.approx(0.0, abs=1e-3)
    assert [h.score for h in page.items] == sorted(h.score for h in page.items)
    assert all(h.chunk.doc_id == "d0" for h in page.items)
    assert store.search_archival(A, points[0].tolist(), k=4).items == []  # no cosine space


def test_search_archival_post_filters(store: MemoryStore) -> None:
    points, _ = _ingest_clusters(store)
    query = points[0].tolist()  # cluster 0

    by_doc = store.search_archival(A, query, k=5, filters={"doc_id": "doc3"}).items
    by_meta = store.search_archival(A, query, k=50, filters={"cluster": 2, "odd": True}).items
    missing = store.search_archival(A, query, k=5, filters={"nonexistent": 1}).items

    assert len(by_doc) == 5 and {h.chunk.doc_id for h in by_doc} == {"doc3"}
    assert len(by_meta) == 7  # every odd chunk of cluster 2, though all are far away
    assert all(h.chunk.metadata["cluster"] == 2 and h.chunk.metadata["odd"] for h in by_meta)
    assert missing == []


def test_search_archival_skips_stale_chunks_unless_asked(store: MemoryStore) -> None:
    points, _ = clustered(1, 6, 8)
    past, future = time.time() - 3600, time.time() + 3600
    store.ingest_archival([chunk(A, "doc", i, p, valid_until=past if i < 3 else future) for i, p in enumerate(points)])

    fresh = store.search_archival(A, points[0].tolist(), k=10).items
    everything = store.search_archival(A, points[0].tolist(), k=10, filters={"include_stale": True}).items

    assert sorted(h.chunk.chunk_index for h in fresh) == [3, 4, 5]
    assert sorted(h.chunk.chunk_index for h in everything) == [0, 1, 2, 3, 4, 5]
    assert len(store.get_archival(A, "doc")) == 6  # stale is not deleted


def test_archival_cursor_is_stable_while_chunks_arrive(store: MemoryStore) -> None:
    points, _ = _ingest_clusters(store)
    first = store.search_archival(A, points[0].tolist(), k=7)
    seen = [(h.chunk.doc_id, h.chunk.chunk_index) for h in first.items]
    cursor = first.next_cursor
    extra, _ = clustered(4, 15, 16, seed=99)
    n = 0
    while cursor is not None:
        store.ingest_archival([chunk(A, "late", n, points[0] + 0.001 * extra[n])])  # near-perfect matches
        n += 1
        page = store.search_archival(A, points[0].tolist(), k=7, cursor=cursor)
        seen += [(h.chunk.doc_id, h.chunk.chunk_index) for h in page.items]
        cursor = page.next_cursor

    assert len(seen) == len(set(seen)) == 60
    assert all(doc != "late" for doc, _ in seen)
    with pytest.raises(ValidationError):
        store.search_archival(A, points[0].tolist(), k=7, cursor="not-a-cursor")


def test_search_archival_bad_vectors(store: MemoryStore) -> None:
    points, _ = _ingest_clusters(store)
    good = points[0].tolist()

    bad_calls: list[Callable[[], object]] = [
        lambda: store.search_archival(A, good[:8], k=3),  # wrong dimension
        lambda: store.search_archival(A, [math.nan, *good[1:]], k=3),
        lambda: store.search_archival(A, [0.0] * len(good), k=3),  # no direction for cosine
        lambda: store.search_archival(A, good, k=0),
        lambda: store.search_archival(A, good, k=-1),
        lambda: store.search_archival(A, good, metric="dot"),
        lambda: store.search_archival("", good),
        lambda: store.search_archival(A, good, filters={"include_stale": "yes"}),
    ]
    for call in bad_calls:
        with pytest.raises(ValidationError):
            call()


def test_search_archival_with_nothing_ingested_is_empty(store: MemoryStore) -> None:
    page = store.search_archival(A, [0.1, 0.2, 0.3], k=3)
    assert page.items == [] and page.next_cursor is None


# --- events --------------------------------------------------------------------------------
def test_events_append_is_idempotent_and_fills_id_and_time(store: MemoryStore) -> None:
    stored = store.append_event(MemoryEvent(A, "heartbeat_end", {"depth": 3}))
    again = store.append_event(MemoryEvent(A, "heartbeat_end", {"depth": 3}, event_id="e1", created_at=50.0))
    replay = store.append_event(MemoryEvent(A, "heartbeat_end", {"depth": 4}, event_id="e1", created_at=60.0))

    assert stored.event_id and stored.created_at > 0
    assert replay == again and dict(replay.payload) == {"depth": 3} and replay.created_at == 50.0
    assert len(store.query_events(A).items) == 2


def test_events_query_oldest_first_with_filters_and_all_agents(store: MemoryStore) -> None:
    for i in range(6):
        store.append_event(
            MemoryEvent(
                A if i % 2 else B,
                "drift_alarm" if i % 3 else "append",
                {"i": i},
                event_id=f"e{i}",
                created_at=100.0 + i,
            )
        )

    all_agents = store.query_events(None)
    only_a = store.query_events(A, ["drift_alarm"])
    recent = store.query_events(None, since=103.0)

    assert [e.payload["i"] for e in all_agents.items] == [0, 1, 2, 3, 4, 5]
    assert [e.payload["i"] for e in only_a.items] == [1, 5]
    assert [e.payload["i"] for e in recent.items] == [3, 4, 5]


def test_events_query_filters_by_actor_window_and_key(store: MemoryStore) -> None:
    for i in range(6):
        store.append_event(
            MemoryEvent(
                A,
                "core_write",
                {"i": i},
                event_id=f"f{i}",
                created_at=100.0 + i,
                actor="cli" if i % 2 else "api:agent:agent-a",
                idempotency_key=f"k{i % 3}",
            )
        )

    by_actor = store.query_events(A, actor="cli")
    window = store.query_events(A, since=101.0, until=104.0)
    by_key = store.query_events(A, idempotency_key="k1")
    combined = store.query_events(A, ["core_write"], actor="cli", idempotency_key="k1", since=100.0, until=106.0)

    assert [e.payload["i"] for e in by_actor.items] == [1, 3, 5]
    assert [e.payload["i"] for e in window.items] == [1, 2, 3]  # since inclusive, until exclusive
    assert [e.payload["i"] for e in by_key.items] == [1, 4]
    assert [e.payload["i"] for e in combined.items] == [1]
    assert store.query_events(A, actor="nobody").items == []
    with pytest.raises(ValidationError):
        store.query_events(A, since=5.0, until=5.0)
    with pytest.raises(ValidationError):
        store.query_events(A, actor="")


def test_spool_writes_its_audit_rows_once_in_the_same_call(store: MemoryStore) -> None:
    batch = [msg(A, i) for i in range(3)]
    rows = [
        MemoryEvent(A, "append", {"message_id": m.message_id}, event_id=f"{A}:append:{m.message_id}", actor="cli")
        for m in batch
    ]

    assert store.spool_messages(batch, events=rows) == 3
    assert store.spool_messages(batch, events=rows) == 0  # replay: no second row either

    found = store.query_events(A, ["append"]).items
    assert [e.payload["message_id"] for e in found] == [m.message_id for m in batch]
    assert {e.actor for e in found} == {"cli"}
    with pytest.raises(ValidationError):  # an audit row riding along needs its own id
        store.spool_messages([msg(A, 7)], events=[MemoryEvent(A, "append", {})])
    assert store.get_messages(A, ["m0007"]) == []  # refused whole: the message was not written


def test_spool_audit_rows_roll_back_with_the_messages(store: MemoryStore, faults: FaultSwitch) -> None:
    row = MemoryEvent(A, "append", {"message_id": "m0001"}, event_id=f"{A}:append:m0001")
    faults.armed.add("spool_messages.before_commit")
    with pytest.raises(InjectedFailure):
        store.spool_messages([msg(A, 1)], events=[row])
    faults.armed.clear()

    assert store.query_events(A, ["append"]).items == []
    assert store.get_messages(A, ["m0001"]) == []


def test_commit_eviction_records_actor_and_its_extra_rows(store: MemoryStore) -> None:
    batch = [msg(A, 0), msg(A, 1)]
    rows = [
        MemoryEvent(A, "append", {"message_id": m.message_id}, event_id=f"{A}:append:{m.message_id}") for m in batch
    ]
    commit = replace(eviction(A, 1, batch, None), actor="worker:evict_batch", events=rows)

    store.commit_eviction(commit)
    store.commit_eviction(commit)  # replay

    evict = store.query_events(A, ["evict"]).items
    assert [e.actor for e in evict] == ["worker:evict_batch"]
    assert len(store.query_events(A, ["append"]).items) == 2


def test_events_cursor_pages_without_repeats(store: MemoryStore) -> None:
    for i in range(7):
        store.append_event(MemoryEvent(A, "append", {"i": i}, event_id=f"e{i}", created_at=100.0 + i))
    seen: list[int] = []
    page = store.query_events(A, limit=3)
    seen += [e.payload["i"] for e in page.items]
    store.append_event(MemoryEvent(A, "append", {"i": 99}, event_id="early", created_at=1.0))
    while page.next_cursor is not None:
        page = store.query_events(A, limit=3, cursor=page.next_cursor)
        seen += [e.payload["i"] for e in page.items]

    assert seen == [0, 1, 2, 3, 4, 5, 6]
    with pytest.raises(ValidationError):
        store.query_events(A, limit=3, cursor="bogus")


# --- graph ---------------------------------------------------------------------------------
def test_graph_edges_are_idempotent_and_traversable(store: MemoryStore) -> None:
    m1, m2, m3 = (message_node(A, f"m{i}") for i in range(3))
    doc = chunk_node(A, "doc", 0, "v1")
    core = core_node(A, "persona")
    for edge in (
        Edge("cites", m1, m2, A),
        Edge("cites", m1, m2, A),
        Edge("cites", m2, m3, A),
        Edge("derived_from", m3, doc, A),
        Edge("recall_log", core, m1, A, attributes={"batch_id": 1}),
    ):
        store.add_edge(edge)

    assert store.traverse(m1) == [m2]
    assert store.traverse(m1, max_depth=3) == [m2, m3, doc]
    assert store.traverse(m1, ["cites"], max_depth=5) == [m2, m3]
    assert store.traverse(m3, direction="inbound", max_depth=2) == [m2, m1]
    assert set(store.traverse(m2, direction="any")) == {m1, m3}
    assert store.traverse(doc, direction="inbound", max_depth=10) == [m3, m2, m1, core]
    assert store.stats(A)["edges"] == 4


def test_graph_bad_arguments(store: MemoryStore) -> None:
    node = message_node(A, "m1")
    with pytest.raises(ValidationError):
        store.traverse(node, direction="sideways")
    with pytest.raises(ValidationError):
        store.traverse(node, ["likes"])  # type: ignore[list-item]
    with pytest.raises(ValidationError):
        store.traverse(node, max_depth=0)
    with pytest.raises(ValidationError):
        store.add_edge(Edge("likes", node, node, A))  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        store.add_edge(Edge("cites", node, NodeRef("people", "x"), A))  # type: ignore[arg-type]
    assert store.stats(A)["edges"] == 0


# --- TTL -----------------------------------------------------------------------------------
def test_expire_deletes_expired_messages_their_edges_and_hits(store: MemoryStore) -> None:
    now = time.time()
    store.spool_messages(
        [
            msg(A, 0, "ephemeral otter note", expires_at=now - 10),
            msg(A, 1, "lasting otter note", expires_at=now + 3600),
            msg(A, 2, "forever otter note"),
        ]
    )
    store.add_edge(Edge("cites", message_node(A, "m0002"), message_node(A, "m0000"), A))
    points, _ = clustered(1, 2, 8)
    store.ingest_archival([chunk(A, "doc", 0, points[0], valid_until=now - 10)])

    assert store.expire(now) == 1
    assert store.expire(now) == 0

    assert store.count_messages(A) == 2
    assert store.get_messages(A, ["m0000"]) == []
    assert store.traverse(message_node(A, "m0002")) == []
    hits = {h.message.message_id for h in store.search_recall(A, "otter").items}
    assert hits == {"m0001", "m0002"}
    assert len(store.get_archival(A, "doc")) == 1


# --- health and stats ----------------------------------------------------------------------
def test_health_and_stats(store: MemoryStore) -> None:
    store.spool_messages([msg(A, i) for i in range(3)] + [msg(B, 9)])
    store.put_core(block("x"), None, key())
    store.append_event(MemoryEvent(A, "append", {}))
    points, _ = clustered(1, 2, 8)
    store.ingest_archival([chunk(A, "doc", i, p) for i, p in enumerate(points)])

    health = store.health()
    stats_a, stats_all = store.stats(A), store.stats()

    assert health.ok and health.backend
    assert (stats_a["messages"], stats_a["core_blocks"], stats_a["archival_chunks"]) == (3, 1, 2)
    assert (stats_a["events"], stats_a["edges"], stats_a["committed_batches"]) == (1, 1, 0)
    assert (stats_a["recall_log_edges"], stats_a["message_vectors"]) == (0, 0)
    assert stats_all["messages"] == 4

    store.put_message_vectors(A, [("m0000", [1.0, 0.0]), ("m0001", [0.0, 1.0])], "v1")
    assert store.stats(A)["message_vectors"] == 2
    assert store.stats(B)["message_vectors"] == 0


# --- bad input changes nothing -------------------------------------------------------------
V4 = [1.0, 2.0, 3.0, 4.0]
BAD_CALLS: dict[str, Any] = {
    "empty agent in spool": lambda s: s.spool_messages([msg(A, 0), msg("", 1)]),
    "negative tokens": lambda s: s.spool_messages([msg(A, 0), replace(msg(A, 1), tokens=-1)]),
    "nan created_at": lambda s: s.spool_messages([msg(A, 0, created_at=math.nan)]),
    "unserialisable metadata": lambda s: s.spool_messages([replace(msg(A, 0), metadata={"x": object()})]),
    "empty query": lambda s: s.search_recall(A, "   "),
    "limit 0": lambda s: s.search_recall(A, "hello", limit=0),
    "limit -1": lambda s: s.search_recall(A, "hello", limit=-1),
    "since after until": lambda s: s.search_recall(A, "hello", since=10.0, until=5.0),
    "empty block id": lambda s: s.put_core(block("x", ""), None, key()),
    "empty idempotency key": lambda s: s.put_core(block("x"), None, ""),
    "empty eviction": lambda s: s.commit_eviction(eviction(A, 1, [], None)),
    "nan in second chunk": lambda s: s.ingest_archival(
        [chunk(A, "doc", 0, V4), chunk(A, "doc", 1, [*V4[:3], math.nan])]
    ),
    "two dimensions in one version": lambda s: s.ingest_archival([chunk(A, "doc", 0, V4), chunk(A, "doc", 1, V4[:3])]),
    "dimension of existing version": lambda s: s.ingest_archival([chunk(A, "new", 0, [1.0, 2.0, 3.0, 4.0, 5.0])]),
    "negative chunk index": lambda s: s.ingest_archival([chunk(A, "doc", -1, V4)]),
    "char_end before char_start": lambda s: s.ingest_archival([replace(chunk(A, "doc", 0, V4), char_end=-1)]),
    "bad event payload": lambda s: s.append_event(MemoryEvent(A, "append", {"x": math.inf})),
    "empty event kind": lambda s: s.append_event(MemoryEvent(A, "", {})),
    "events limit 0": lambda s: s.query_events(A, limit=0),
    "empty agent in count": lambda s: s.count_messages(""),
    "list limit 0": lambda s: s.list_messages(A, limit=0),
    "list after_seq below -1": lambda s: s.list_messages(A, after_seq=-2),
    "list after_seq not an int": lambda s: s.list_messages(A, after_seq="3"),  # type: ignore[arg-type]
    "nan expire": lambda s: s.expire(math.nan),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_bad_input_raises_validation_error_and_changes_nothing(store: MemoryStore, case: str) -> None:
    store.spool_messages([msg(A, 5, "hello world")])
    store.ingest_archival([chunk(A, "seed", 0, [0.5, 0.5, 0.5, 0.5])])  # a 4-d "v1" space
    before = snapshot(store, [A], ["m0000", "m0001", "m0005"], doc_nodes(A, "doc", 2))

    with pytest.raises(ValidationError) as info:
        BAD_CALLS[case](store)

    assert info.value.code is ErrorCode.VALIDATION_ERROR
    assert info.value.message
    assert snapshot(store, [A], ["m0000", "m0001", "m0005"], doc_nodes(A, "doc", 2)) == before
    assert store.get_archival(A, "doc") == [] and store.get_archival(A, "new") == []


def test_every_error_is_a_coded_store_error(store: MemoryStore) -> None:
    raised: list[VcmError] = []
    for call in (
        lambda: store.get_core(A, "missing"),
        lambda: store.search_recall(A, "x", limit=0),
        lambda: store.delete_core(A, "missing", "1"),
    ):
        with pytest.raises(VcmError) as info:
            call()
        raised.append(info.value)
    assert [e.to_dict()["code"] for e in raised] == ["NOT_FOUND", "VALIDATION_ERROR", "NOT_FOUND"]
