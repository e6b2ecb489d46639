"""Contract of the agent, lifecycle and snapshot operations, against every adapter."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.store.factories import chunk, eviction, msg
from vcm.errors import NotFound, RevConflict, ValidationError
from vcm.store.port import MemoryStore
from vcm.store.types import ContextReset, CoreBlockWrite, MemoryEvent, SnapshotRecord, message_node


def test_agent_records_keep_floor_token_and_creation_time(store: MemoryStore) -> None:
    with pytest.raises(NotFound):
        store.get_agent("a1")
    first = store.put_agent("a1", {"model": "m", "window": 2048})
    assert first.id_floor == 0 and first.token_sha256 is None
    assert store.advance_id_floor("a1", 1000) == 1000
    assert store.advance_id_floor("a1", 10) == 1000  # never lowered
    store.set_agent_token("a1", "ab" * 32)
    again = store.put_agent("a1", {"model": "m", "window": 4096})
    assert again.config["window"] == 4096
    assert (again.id_floor, again.token_sha256, again.created_at) == (1000, "ab" * 32, first.created_at)
    store.put_agent("a0", {"model": "m"})
    assert [r.agent_id for r in store.list_agents()] == ["a0", "a1"]
    assert store.list_core("a1") == []  # the agent record is not a block


def test_agent_operations_refuse_unknown_agents_and_bad_input(store: MemoryStore) -> None:
    with pytest.raises(NotFound):
        store.advance_id_floor("ghost", 5)
    with pytest.raises(NotFound):
        store.set_agent_token("ghost", "x")
    store.put_agent("a1", {})
    with pytest.raises(ValidationError):
        store.advance_id_floor("a1", -1)
    with pytest.raises(ValidationError):
        store.put_agent("a1", ["not", "a", "mapping"])  # type: ignore[arg-type]
    assert store.get_agent("a1").id_floor == 0


def test_uncommitted_messages_are_those_no_batch_folded(store: MemoryStore) -> None:
    store.put_agent("a1", {})
    messages = [msg("a1", i) for i in range(1, 8)]
    store.spool_messages(messages)
    store.commit_eviction(eviction("a1", 1, [messages[1], messages[2]], None))
    left = store.uncommitted_messages("a1")
    assert [m.message_id for m in left] == [messages[i].message_id for i in (0, 3, 4, 5, 6)]
    assert [m.message_id for m in store.uncommitted_messages("a1", after_seq=4, limit=2)] == ["m0005", "m0006"]


def test_summary_versions_are_the_history_of_commits(store: MemoryStore) -> None:
    messages = [msg("a1", i) for i in range(1, 5)]
    r1 = store.commit_eviction(eviction("a1", 1, messages[:2], None, text="first"))
    store.commit_eviction(eviction("a1", 2, messages[2:], r1.summary_rev, text="second"))
    versions = store.summary_versions("a1")
    assert [(v.batch_id, v.text) for v in versions] == [(2, "second"), (1, "first")]
    assert versions[1].rev == r1.summary_rev
    assert [v.batch_id for v in store.summary_versions("a1", limit=1)] == [2]


def test_rewriting_summaries_replaces_versions_and_the_current_summary_under_its_rev(store: MemoryStore) -> None:
    messages = [msg("a1", i) for i in range(1, 5)]
    r1 = store.commit_eviction(eviction("a1", 1, messages[:2], None, text="first secret"))
    r2 = store.commit_eviction(eviction("a1", 2, messages[2:], r1.summary_rev, text="second secret"))
    old = {v.batch_id: v for v in store.summary_versions("a1")}
    new = [replace(old[1], text="first", tokens=3), replace(old[2], text="second", tokens=4)]
    with pytest.raises(RevConflict):  # an eviction committed since the caller read the summary
        store.rewrite_summaries("a1", new, expected_rev=r1.summary_rev)
    assert [v.text for v in store.summary_versions("a1")] == ["second secret", "first secret"]
    with pytest.raises(ValidationError):
        store.rewrite_summaries("a1", [replace(old[1], agent_id="a2")], expected_rev=r2.summary_rev)

    current = store.rewrite_summaries("a1", new, expected_rev=r2.summary_rev)

    assert current is not None and (current.text, current.tokens, current.batch_id) == ("second", 4, 2)
    assert current.rev != r2.summary_rev
    stored = store.get_summary("a1")
    assert stored is not None and (stored.text, stored.rev) == ("second", current.rev)
    after = store.summary_versions("a1")
    assert [(v.batch_id, v.text, v.tokens) for v in after] == [(2, "second", 4), (1, "first", 3)]
    assert after[0].rev == current.rev and after[1].rev != old[1].rev
    # The next commit builds on the rewritten summary's rev.
    store.commit_eviction(eviction("a1", 3, [msg("a1", 9)], current.rev, text="third"))
    # A version the store does not hold is skipped.
    assert store.rewrite_summaries("a1", [replace(old[1], batch_id=7)], expected_rev=store.get_summary("a1").rev)
    assert [v.batch_id for v in store.summary_versions("a1")] == [3, 2, 1]


def test_delete_agent_removes_everything_of_it_and_nothing_else(store: MemoryStore) -> None:
    for agent in ("gone", "kept"):
        store.put_agent(agent, {"x": 1})
        messages = [msg(agent, i) for i in range(1, 5)]
        store.spool_messages(messages)
        store.put_message_vectors(agent, [(m.message_id, [1.0, 0.0, 0.0]) for m in messages], "v1")
        store.commit_eviction(eviction(agent, 1, messages[:2], None))
        store.put_core(CoreBlockWrite(agent, "persona", "working", "likes tea", 3), None, f"{agent}-k")
        store.ingest_archival([chunk(agent, "doc", i, [0.0, 1.0, 0.0]) for i in range(3)])
        store.append_event(MemoryEvent(agent, "note", {"n": 1}, event_id=f"{agent}:note"))
        store.put_snapshot(SnapshotRecord(agent, "s1", "manual", "", b"zz", "00", 2, 1.0))
    before_kept = store.stats("kept")
    forgotten = store.delete_agent("gone")
    assert forgotten.counts["messages"] == 4 and forgotten.counts.get("agents") == 1
    after = store.stats("gone")
    assert {k: v for k, v in after.items() if isinstance(v, int) and v} == {}
    with pytest.raises(NotFound):
        store.get_agent("gone")
    assert store.summary_versions("gone") == [] and store.list_snapshots("gone") == []
    assert store.search_recall("gone", "message").items == []
    assert store.search_archival("gone", [0.0, 1.0, 0.0], k=5).items == []
    assert store.stats("kept") == before_kept
    assert store.delete_agent("gone").total == 0  # idempotent


def test_forget_message_and_document(store: MemoryStore) -> None:
    messages = [msg("a1", i, f"porto lisbon {i}") for i in range(1, 4)]
    store.spool_messages(messages)
    store.commit_eviction(eviction("a1", 1, messages, None))
    store.ingest_archival([chunk("a1", "doc", i, [0.0, 1.0, 0.0]) for i in range(2)])
    store.ingest_archival([chunk("a1", "other", 0, [0.0, 1.0, 0.0])])
    assert store.forget_message("a1", "m0002").counts == {"messages": 1}
    assert store.get_messages("a1", ["m0002"]) == []
    assert store.traverse(message_node("a1", "m0002"), direction="any") == []
    assert "m0002" not in {h.message.message_id for h in store.search_recall("a1", "porto").items}
    assert store.forget_message("a1", "m0002").total == 0
    assert store.forget_document("a1", "doc").counts == {"archival_chunks": 2}
    assert store.get_archival("a1", "doc") == []
    assert [h.chunk.doc_id for h in store.search_archival("a1", [0.0, 1.0, 0.0], k=5).items] == ["other"]


def test_forgets_leave_tombstones_that_only_deleting_the_agent_removes(store: MemoryStore) -> None:
    for agent in ("a1", "a2"):
        store.put_agent(agent, {})
        store.spool_messages([msg(agent, i) for i in range(1, 3)])
        store.ingest_archival([chunk(agent, "doc", 0, [0.0, 1.0, 0.0])])
    assert store.tombstones("a1").messages == {} and store.tombstones("a1").documents == {}
    store.forget_message("a1", "m0001")
    store.forget_message("a1", "m0009")  # never stored (e.g. still in the hot state): named all the same
    store.forget_document("a1", "doc")
    store.forget_document("a1", "never")
    marks = store.tombstones("a1")
    assert set(marks.messages) == {"m0001", "m0009"} and set(marks.documents) == {"doc", "never"}
    first = marks.messages["m0001"]
    store.forget_message("a1", "m0001")  # a repeat keeps the first time
    assert store.tombstones("a1").messages["m0001"] == first
    assert store.tombstones("a2").messages == {} and store.tombstones("a2").documents == {}
    assert store.delete_agent("a1").counts.get("tombstones") == 4
    assert store.tombstones("a1").messages == {} and store.tombstones("a1").documents == {}


def test_a_spool_never_writes_a_forgotten_message_back(store: MemoryStore) -> None:
    store.put_agent("a1", {})
    store.spool_messages([msg("a1", 1)])
    store.forget_message("a1", "m0001")
    store.forget_message("a1", "m0002")  # forgotten while only the hot state held it
    # A write-behind spool that read both before the forgets lands after them: neither comes back.
    assert store.spool_messages([msg("a1", i) for i in (1, 2, 3)]) == 1
    assert [m.message_id for m in store.list_messages("a1")] == ["m0003"]
    assert store.spool_messages([msg("a2", 1)]) == 1  # another agent's m0001 is not forgotten


def test_snapshots_round_trip_list_without_payload_expire_and_delete(store: MemoryStore) -> None:
    now = 1_700_000_000.0
    live = SnapshotRecord("a1", "s1", "manual", "before upgrade", b"\x00\x01payload", "ab", 9, now, None)
    assert store.put_snapshot(live).payload == live.payload
    assert store.put_snapshot(live) == store.get_snapshot("a1", "s1")  # replay keeps the first
    dying = SnapshotRecord("a1", "s2", "periodic", "", b"x", "cd", 1, now + 1, expires_at=now + 2)
    store.put_snapshot(dying)
    assert [s.snapshot_id for s in store.list_snapshots("a1")] == ["s1"]  # s2 is past its expiry
    assert all(s.payload == b"" for s in store.list_snapshots("a1"))
    with pytest.raises(NotFound):
        store.get_snapshot("a1", "s2")
    store.expire(now + 10)
    assert store.delete_snapshot("a1", "s1") is True
    assert store.delete_snapshot("a1", "s1") is False
    with pytest.raises(NotFound):
        store.get_snapshot("a1", "s1")


def test_reset_context_sets_summary_fifo_and_blocks_in_one_step(store: MemoryStore) -> None:
    store.put_agent("a1", {})
    messages = [msg("a1", i) for i in range(1, 7)]
    store.spool_messages(messages)
    store.commit_eviction(eviction("a1", 1, messages[:3], None, text="old summary"))
    store.put_core(CoreBlockWrite("a1", "persona", "working", "old", 1), None, "k1")
    # Back to a state where m0002 and m0005 were the FIFO: m0002 returns from recall, the
    # others leave for it; the blocks become exactly the given ones.
    store.reset_context(
        ContextReset(
            "a1",
            batch_id=100,
            summary_text="restored summary",
            summary_tokens=4,
            fifo_ids=["m0002", "m0005"],
            blocks=[CoreBlockWrite("a1", "goals", "working", "ship it", 2, pinned=True)],
        )
    )
    assert [m.message_id for m in store.uncommitted_messages("a1")] == ["m0002", "m0005"]
    summary = store.get_summary("a1")
    assert summary is not None and (summary.text, summary.tokens, summary.batch_id) == ("restored summary", 4, 100)
    assert store.summary_versions("a1")[0].text == "restored summary"
    assert [(b.block_id, b.content, b.pinned) for b in store.list_core("a1")] == [("goals", "ship it", True)]
    assert store.count_messages("a1") == 6  # nothing leaves recall
    # A reset to an empty conversation keeps the blocks when none are given.
    store.reset_context(ContextReset("a1", batch_id=101, summary_text="", summary_tokens=0, fifo_ids=[]))
    assert store.uncommitted_messages("a1") == [] and [b.block_id for b in store.list_core("a1")] == ["goals"]
