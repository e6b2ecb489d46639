"""Control flow of ArangoStore against an in-memory FAKE of the python-arango surface.

This is NOT evidence that the adapter works with ArangoDB: the fake executes no AQL (it
recognises the handful of generic insert/lookup queries by shape and answers the others with
nothing) and its transactions are copy-on-commit snapshots. It checks only what the adapter
decides on its own: which collections a stream transaction declares, that every failure
(injected faults, stale revs, driver errors) aborts and leaves no trace, how big eviction
batches are split, replay handling, read-only vs read-write handles, error translation. The
real proof is the contract suite against a server (``VCM_TEST_ARANGO_URL``).
"""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from arango.exceptions import (
    DocumentInsertError,
)

from tests.store.factories import FaultSwitch
from tests.store.fake_arango import FakeDB, Store, server_error
from vcm.errors import (
    IdempotencyMismatch,
    InjectedFailure,
    NotFound,
    RevConflict,
    StoreUnavailable,
    ValidationError,
    VcmError,
)
from vcm.store.arango import documents, names
from vcm.store.arango.adapter import ArangoStore, order_traversal
from vcm.store.types import ArchivalChunk, CoreBlockWrite, EvictionCommit, NodeRef, StoredMessage, SummaryVersion


def msg(agent: str, i: int, content: str = "hello") -> StoredMessage:
    return StoredMessage(agent, f"m{i}", i, "user", f"{content} {i}", 3, 100.0 + i)


def commit(agent: str, batch: int, n: int, rev: str | None) -> EvictionCommit:
    return EvictionCommit(agent, batch, [msg(agent, i) for i in range(n)], "summary", 7, rev, {"why": "flush"})


def test_bootstrap_creates_every_collection_view_and_graph(world: tuple[ArangoStore, FakeDB, FaultSwitch]) -> None:
    store, rw, _ = world
    assert set(names.ALL_COLLECTIONS) <= set(rw.data)
    created = store.bootstrap_report.created
    assert "view messages_view" in created and "graph g_mem" in created
    assert any(c.startswith("index messages.messages_agent_ingested") for c in created)


def test_commit_eviction_declares_all_collections_and_commits_once(
    world: tuple[ArangoStore, FakeDB, FaultSwitch],
) -> None:
    store, rw, faults = world
    result = store.commit_eviction(commit("a", 1, 3, None))
    assert not result.replayed and result.messages_committed == 3
    assert rw.log == [f"begin {sorted(names.EVICTION_WRITE)}", "commit"]
    assert faults.seen == ["commit_eviction.after_recall_append", "commit_eviction.before_commit"]
    assert len(rw.data[names.MESSAGES]) == 3 and len(rw.data[names.RECALL_LOG]) == 3
    summary = store.get_summary("a")
    assert summary is not None and summary.rev == result.summary_rev and summary.batch_id == 1
    event = next(iter(rw.data[names.EVENTS].values()))
    assert event["kind"] == "evict" and event["payload"]["summary_rev"] == result.summary_rev
    assert event["payload"]["why"] == "flush"


def test_commit_eviction_replay_is_a_no_op(world: tuple[ArangoStore, FakeDB, FaultSwitch]) -> None:
    store, rw, _ = world
    first = store.commit_eviction(commit("a", 1, 2, None))
    rw.log.clear()
    again = store.commit_eviction(commit("a", 1, 2, None))
    assert again.replayed and again.summary_rev == first.summary_rev
    assert rw.log == []  # answered from the batch marker, no transaction at all


@pytest.mark.parametrize("point", ["commit_eviction.after_recall_append", "commit_eviction.before_commit"])
def test_commit_eviction_fault_aborts_and_leaves_nothing(
    world: tuple[ArangoStore, FakeDB, FaultSwitch], point: str
) -> None:
    store, rw, faults = world
    faults.armed.add(point)
    with pytest.raises(InjectedFailure):
        store.commit_eviction(commit("a", 1, 3, None))
    assert rw.log[-1] == "abort" and "commit" not in rw.log
    for coll in (names.MESSAGES, names.RECALL_LOG, names.CORE, names.EVENTS, names.BATCHES):
        assert rw.data.get(coll, {}) == {}, coll
    faults.armed.clear()
    assert not store.commit_eviction(commit("a", 1, 3, None)).replayed  # the retry commits


def test_commit_eviction_stale_rev_raises_and_writes_nothing(
    world: tuple[ArangoStore, FakeDB, FaultSwitch],
) -> None:
    store, rw, _ = world
    first = store.commit_eviction(commit("a", 1, 1, None))
    with pytest.raises(RevConflict) as info:
        store.commit_eviction(commit("a", 2, 1, "stale"))
    assert info.value.details["current_rev"] == first.summary_rev
    assert rw.log[-1] == "abort"
    assert len(rw.data[names.BATCHES]) == 1
    with pytest.raises(RevConflict):  # a first summary when one exists
        store.commit_eviction(commit("a", 3, 1, None))


def test_commit_eviction_driver_error_is_translated_and_aborted(
    world: tuple[ArangoStore, FakeDB, FaultSwitch],
) -> None:
    store, rw, _ = world

    def boom(query: str, bind: dict[str, Any]) -> list[Any] | None:
        if bind.get("@collection") == names.RECALL_LOG:
            raise ConnectionAbortedError("Can't connect to host(s) within limit (3)")
        return None

    rw.on_query = boom
    with pytest.raises(StoreUnavailable):
        store.commit_eviction(commit("a", 1, 2, None))
    assert rw.log[-1] == "abort"
    assert rw.data.get(names.MESSAGES, {}) == {}


def test_big_batch_is_split_and_the_final_part_stays_atomic(
    world: tuple[ArangoStore, FakeDB, FaultSwitch],
) -> None:
    store, rw, faults = world
    store._cap = 8192  # a few messages per chunk
    big = EvictionCommit("a", 1, [msg("a", i, "x" * 900) for i in range(12)], "summary", 7, None, {})
    faults.armed.add("commit_eviction.before_commit")
    with pytest.raises(InjectedFailure):
        store.commit_eviction(big)
    # The pre-written messages are plain spooled rows; nothing marks the batch committed.
    assert len(rw.data[names.MESSAGES]) == 12
    for coll in (names.RECALL_LOG, names.CORE, names.EVENTS, names.BATCHES):
        assert rw.data.get(coll, {}) == {}, coll
    final_begins = [entry for entry in rw.log if entry.startswith("begin")]
    assert final_begins == [f"begin {sorted(names.EVICTION_WRITE)}"]
    faults.armed.clear()
    result = store.commit_eviction(big)
    assert result.messages_committed == 12 and not result.replayed
    assert len(rw.data[names.RECALL_LOG]) == 12 and len(rw.data[names.BATCHES]) == 1


def test_put_core_is_idempotent_and_rev_checked(world: tuple[ArangoStore, FakeDB, FaultSwitch]) -> None:
    store, rw, faults = world
    block = CoreBlockWrite("a", "persona", "system", "I help.", 3)
    first = store.put_core(block, None, "k1")
    assert store.put_core(block, None, "k1") == first  # replay, even though the rev would fail now
    with pytest.raises(IdempotencyMismatch):
        store.put_core(CoreBlockWrite("a", "persona", "system", "changed", 3), first.rev, "k1")
    second = store.put_core(CoreBlockWrite("a", "persona", "system", "v2", 3), first.rev, "k2")
    assert second.rev != first.rev and store.get_core("a", "persona").content == "v2"
    with pytest.raises(RevConflict):
        store.put_core(CoreBlockWrite("a", "persona", "system", "v3", 3), first.rev, "k3")
    faults.armed.add("put_core.before_commit")
    with pytest.raises(InjectedFailure):
        store.put_core(CoreBlockWrite("a", "persona", "system", "v4", 3), second.rev, "k4")
    assert store.get_core("a", "persona").content == "v2"
    assert "k4" not in json.dumps(rw.data[names.IDEMPOTENCY])
    with pytest.raises(ValidationError):
        store.put_core(CoreBlockWrite("a", "queue_head_summary", "system", "x", 1), None, "k5")


def test_delete_core_checks_rev(world: tuple[ArangoStore, FakeDB, FaultSwitch]) -> None:
    store, _, _ = world
    block = store.put_core(CoreBlockWrite("a", "notes", "system", "n", 1), None, "k1")
    with pytest.raises(RevConflict):
        store.delete_core("a", "notes", "wrong")
    store.delete_core("a", "notes", block.rev)
    with pytest.raises(NotFound):
        store.get_core("a", "notes")
    with pytest.raises(NotFound):
        store.delete_core("a", "notes", block.rev)


def test_spool_faults_abort_and_retries_count_only_new(world: tuple[ArangoStore, FakeDB, FaultSwitch]) -> None:
    store, rw, faults = world
    faults.armed.add("spool_messages.before_commit")
    with pytest.raises(InjectedFailure):
        store.spool_messages([msg("a", 1), msg("a", 2)])
    assert rw.data.get(names.MESSAGES, {}) == {}
    faults.armed.clear()
    assert store.spool_messages([msg("a", 1), msg("a", 2), msg("a", 1)]) == 2
    assert store.spool_messages([msg("a", 2), msg("a", 3)]) == 1
    assert [m.message_id for m in store.get_messages("a", ["m3", "nope", "m1"])] == ["m3", "m1"]


def test_reads_never_use_the_read_write_handle_for_searches(
    world: tuple[ArangoStore, FakeDB, FaultSwitch],
) -> None:
    store, rw, _ = world
    rw.queries.clear()
    store.get_messages("a", ["m1"])
    store.list_core("a")
    store.count_messages("a")
    # the ro fake shares the data but has its own query log; rw saw none of these reads
    assert rw.queries == []


def test_order_traversal_rebuilds_refs_from_edges_breadth_first() -> None:
    start = NodeRef("core_memory", "a:queue_head_summary")
    sid = "core_memory/a_3aqueue_head_summary"

    def e(f: str, t: str, src: NodeRef, dst: NodeRef, kind: str = "recall_log") -> dict[str, Any]:
        return {"f": f, "t": t, "k": kind, "src": [src.collection, src.key], "dst": [dst.collection, dst.key]}

    m1, m2, c1 = NodeRef("messages", "a:m1"), NodeRef("messages", "a:m2"), NodeRef("archival_docs", "x")
    paths = [
        [e(sid, "messages/m2", start, m2)],
        [e(sid, "messages/m1", start, m1)],
        [e(sid, "messages/m1", start, m1), e("archival_docs/x", "messages/m1", c1, m1, "cites")],
    ]
    assert order_traversal(start, sid, paths) == [m1, m2, c1]


def test_bootstrap_is_idempotent(world: tuple[ArangoStore, FakeDB, FaultSwitch]) -> None:
    store, _, _ = world
    again = ArangoStore(store._conn, guard=False)
    assert [c for c in again.bootstrap_report.created if not c.startswith(("view", "graph"))] == []
    assert again._secret == store._secret  # the cursor secret is seeded once


def test_vector_index_is_created_lazily_then_used_with_exact_fallback(
    world: tuple[ArangoStore, FakeDB, FaultSwitch],
) -> None:
    store, rw, _ = world
    store._vector_threshold = 3
    seen: list[str] = []

    def answers(query: str, bind: dict[str, Any]) -> list[Any] | None:
        if query.startswith("RETURN LENGTH(archival_docs)"):
            return [len(rw.data.get(names.ARCHIVAL, {}))]
        if "COLLECT WITH COUNT INTO n" in query and "emb_cosine_2 != null" in query:
            return [len(rw.data.get(names.ARCHIVAL, {}))]
        if "APPROX_NEAR_COSINE" in query:
            seen.append("ann")
            raise server_error(DocumentInsertError, 400, 1554, "vector search not applied")
        if "COSINE_SIMILARITY" in query:
            seen.append("exact")
            return []
        return None

    rw.on_query = answers
    cast(FakeDB, store._ro).on_query = answers  # the read-only fake answers searches and counts

    def chunk(i: int) -> ArchivalChunk:
        return ArchivalChunk("a", "doc", i, f"t{i}", [1.0, float(i)], "cosine", "v1", "m", 0, 1)

    store.ingest_archival([chunk(0), chunk(1)])
    assert store.vector_index_state("cosine", 2) == "exact"
    assert not [i for i in rw.indexes.get(names.ARCHIVAL, []) if i.get("type") == "vector"]
    store._space_states.clear()  # skip the per-process recheck delay
    store.ingest_archival([chunk(2)])
    created = [i for i in rw.indexes[names.ARCHIVAL] if i.get("type") == "vector"]
    assert len(created) == 1
    definition = created[0]
    assert definition["name"] == "vec_cosine_2" and definition["fields"] == ["emb_cosine_2"]
    assert definition["sparse"] is True and definition["params"]["nLists"] >= 1
    assert store.vector_index_state("cosine", 2) == "ivf"
    # The fake answers APPROX_NEAR with 1554: the search falls back to exact and stays correct.
    page = store.search_archival("a", [1.0, 0.5], k=2)
    assert page.items == [] and seen == ["ann", "exact"]
    assert store.vector_index_state("cosine", 2) == "exact"


class FakeClient:
    """An ArangoClient look-alike: ``db()`` hands out a fake handle per user (the ro user's
    refuses writes), and records who opened what."""

    def __init__(self, hosts: str, http_client: Any = None, request_timeout: Any = None) -> None:
        self.hosts = [hosts]
        self.data: Store = {}
        self.opened: dict[str, FakeDB] = {}

    def db(self, name: str, username: str = "", password: str = "", verify: bool = False) -> FakeDB:
        handle = FakeDB(self.data, read_only=username == "vcm_ro")
        self.opened[f"{username}:{password}"] = handle
        return handle

    def close(self) -> None:
        pass


def test_from_url_opens_separate_users_and_reads_go_through_the_read_only_one() -> None:
    clients: list[FakeClient] = []

    def factory(**kw: Any) -> FakeClient:
        clients.append(FakeClient(**kw))
        return clients[-1]

    store = ArangoStore.from_url(
        "arango+unix:///run/arangodb/arangod.sock/vcm",
        username="vcm_rw",
        password="rw-secret",
        ro_username="vcm_ro",
        ro_password="ro-secret",
        client_factory=factory,
        guard=False,
    )
    rw, ro = clients[0].opened["vcm_rw:rw-secret"], clients[0].opened["vcm_ro:ro-secret"]
    rw.queries.clear()
    store.spool_messages([msg("a", 1)])
    writes = len(rw.queries)
    store.search_recall("a", "hello")
    store.query_events("a", actor="cli")
    store.get_messages("a", ["m1"])
    store.count_messages("a")
    with pytest.raises(NotFound):
        store.get_core("a", "persona")

    assert writes > 0 and len(rw.queries) == writes  # the reads added nothing on the read-write handle
    assert any("memory_events" in q for q, _ in ro.queries) and any("FOR id IN @ids" in q for q, _ in ro.queries)


def test_uds_only_refuses_a_tcp_url_before_connecting() -> None:
    def factory(**kw: Any) -> FakeClient:
        raise AssertionError("no client may be built for a refused URL")

    for url in ("arango+http://db:8529/vcm", "arango+https://db/vcm"):
        with pytest.raises(VcmError) as refused:
            ArangoStore.from_url(url, username="u", password="p", uds_only=True, client_factory=factory)
        assert refused.value.code == "CONFIG_ERROR" and "uds_only" in refused.value.message
    opened = ArangoStore.from_url(
        "arango+unix:///run/arangodb/arangod.sock",
        username="u",
        password="p",
        uds_only=True,
        client_factory=lambda **kw: FakeClient(**kw),
        guard=False,
    )
    assert opened.backend == "arango"


class OldServerDB(FakeDB):
    def version(self) -> str:
        return "3.12.3"

    def options(self) -> dict[str, Any]:
        return {"vector-index": True}


class OldServerClient(FakeClient):
    def db(self, name: str, username: str = "", password: str = "", verify: bool = False) -> FakeDB:
        return OldServerDB(self.data)


def test_the_guard_runs_when_the_adapter_starts() -> None:
    with pytest.raises(VcmError) as refused:
        ArangoStore.from_url(
            "arango+unix:///run/guard-test/arangod.sock",
            username="u",
            password="p",
            client_factory=lambda **kw: OldServerClient(**kw),
        )
    assert refused.value.code == "CONFIG_ERROR" and "3.12.4" in refused.value.message


def test_spool_writes_its_audit_rows_in_the_same_transaction(world: tuple[ArangoStore, FakeDB, FaultSwitch]) -> None:
    from vcm.store.types import MemoryEvent

    store, rw, faults = world
    rows = [MemoryEvent("a", "append", {"message_id": f"m{i}"}, event_id=f"a:append:m{i}") for i in (1, 2)]
    rw.log.clear()
    assert store.spool_messages([msg("a", 1), msg("a", 2)], events=rows) == 2
    assert rw.log == [f"begin {sorted([names.MESSAGES, names.EVENTS])}", "commit"]
    assert set(rw.data[names.EVENTS]) == {documents.event_key("a:append:m1"), documents.event_key("a:append:m2")}
    faults.armed.add("spool_messages.before_commit")
    with pytest.raises(InjectedFailure):
        store.spool_messages([msg("a", 3)], events=[MemoryEvent("a", "append", {}, event_id="a:append:m3")])
    assert documents.event_key("a:append:m3") not in rw.data[names.EVENTS]


def test_hybrid_asks_which_text_hits_have_vectors_through_the_read_only_handle(
    world: tuple[ArangoStore, FakeDB, FaultSwitch],
) -> None:
    store, rw, _ = world
    asked: list[dict[str, Any]] = []

    def answers(query: str, bind: dict[str, Any]) -> list[Any] | None:
        if "seq: d.seq" in query:
            asked.append(bind)
            embedded = "version" in bind
            return [
                {"key": k.split("/")[1], "seq": i, "embedded": embedded and k.endswith("k1")}
                for i, k in enumerate(bind["ids"])
            ]
        return None

    cast(FakeDB, store._ro).on_query = answers
    seq, embedded, author_of = store._positions("a", {"k0", "k1", "k2"}, "v1")
    assert {"k0", "k1", "k2"} - embedded == {"k0", "k2"} and seq == {"k0": 0, "k1": 1, "k2": 2}
    assert author_of == {}  # not asked for
    assert asked == [{"agent_id": "a", "ids": [f"{names.MESSAGES}/k{i}" for i in range(3)], "version": "v1"}]
    # no vector version: every hit is unembedded (one query for the positions still)
    assert store._positions("a", {"k0", "k1", "k2"}, None)[1] == set()
    assert store._positions("a", set(), "v1") == ({}, set(), {}) and len(asked) == 2
    assert rw.queries == []


def test_rewrite_summaries_declares_its_collections_and_checks_the_rev(
    world: tuple[ArangoStore, FakeDB, FaultSwitch],
) -> None:
    store, rw, faults = world
    first = store.commit_eviction(commit("a", 1, 2, None))
    second = store.commit_eviction(commit("a", 2, 2, first.summary_rev))
    # (The fake runs no AQL, so the versions are not read back through summary_versions.)
    rewrite = [SummaryVersion("a", 1, "one", 1, "", 0.0), SummaryVersion("a", 2, "two", 2, "", 0.0)]
    with pytest.raises(RevConflict):
        store.rewrite_summaries("a", rewrite, expected_rev=first.summary_rev)
    rw.log.clear()
    current = store.rewrite_summaries("a", rewrite, expected_rev=second.summary_rev)
    assert rw.log == [f"begin {sorted([names.CORE, names.BATCHES])}", "commit"]
    assert "rewrite_summaries.before_commit" in faults.seen
    assert current is not None and (current.text, current.tokens, current.batch_id) == ("two", 2, 2)
    stored = store.get_summary("a")
    assert stored is not None and stored.text == "two" and stored.rev == current.rev
    batches = rw.data[names.BATCHES]
    assert sorted(d["summary_text"] for d in batches.values()) == ["one", "two"]
