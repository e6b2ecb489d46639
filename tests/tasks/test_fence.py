"""Delete is final: a cold-path job of an agent deleted (and re-created) while it runs writes
nothing, and the new agent of that id sees nothing of the old one (vcm.tasks.fence).

Real SQLite; the hot state on fakeredis and on the real Redis (``VCM_TEST_REDIS_URL``). The job
is held between its read and its writes by a fault point that deletes (and re-creates) the
agent "meanwhile" (:class:`tests.doubles.coldpath.Meanwhile`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import fakeredis
import pytest
import redis
from prometheus_client import REGISTRY

from tests.doubles.coldpath import MODEL, Meanwhile, line, make_deps, small_settings
from tests.doubles.embedder import WordVectorizer, word_embed
from tests.doubles.ingester import SentenceIngest
from tests.redis_legs import real_redis
from vcm.dispatch import RecordingDispatcher
from vcm.errors import NotFound
from vcm.service import MemoryService
from vcm.settings import Settings
from vcm.store.types import FactQuery, summary_node
from vcm.tasks import evict
from vcm.tasks.deps import Deps
from vcm.tasks.faults import Faults
from vcm.tasks.ingest.jobs import run_ingest_job
from vcm.tasks.recall.reembed import reembed_agent
from vcm.tasks.recall.vectors import Turn
from vcm.tasks.spool import spool_messages
from vcm.tasks.summary.selection import Vectors

AGENT = "fence-1"
ANY_STATUS = FactQuery(statuses=None, limit=1000)


@pytest.fixture(params=["fakeredis", "redis"])
def client(request: pytest.FixtureRequest) -> Iterator[redis.Redis]:
    c: redis.Redis = fakeredis.FakeRedis(decode_responses=True) if request.param == "fakeredis" else real_redis()
    c.flushdb()
    yield c
    c.flushdb()
    c.close()


class World:
    """The façade and the cold path over one hot state and one SQLite store."""

    def __init__(self, tmp_path: Path, client: redis.Redis, settings: Settings) -> None:
        self.deps = make_deps(tmp_path, client=client, settings=settings)
        self.svc = MemoryService(self.deps.hot, self.deps.store, RecordingDispatcher(), embed=word_embed)

    def cold(self, faults: Faults) -> Deps:
        d = self.deps
        return Deps(d.settings, d.hot, d.store, d.dispatcher, d.embed, d.summarizer, faults=faults)

    def fill(self, *, keyed: str = "") -> list[str]:
        """Keyed appends (keys ``<keyed><i>``) until an eviction batch is pending; their ids."""
        ids, i = [], 0
        while not self.svc.pending_batches(AGENT):
            key = f"{keyed}{i}" if keyed else None
            ids.append(self.svc.append(AGENT, "user", line(i), idempotency_key=key).message_id)
            i += 1
        return ids

    def recreate(self) -> None:
        self.svc.delete_agent(AGENT)
        self.svc.create_agent(AGENT, model=MODEL)

    def assert_nothing_of_the_old(self) -> None:
        """The store holds nothing of the agent but what creating it anew writes."""
        store = self.deps.store
        assert store.count_messages(AGENT) == 0
        assert store.committed_batches(AGENT) == []
        assert store.summary_versions(AGENT) == [] and store.get_summary(AGENT) is None
        assert store.query_facts(AGENT, ANY_STATUS) == []
        assert store.traverse(summary_node(AGENT)) == []
        assert {e.kind for e in store.query_events(AGENT, limit=1000).items} == {"agent_created"}
        assert store.list_idempotency(AGENT) == []
        assert store.search_recall(AGENT, "Falcon invoice contract").items == []


@pytest.fixture
def world(tmp_path: Path, client: redis.Redis) -> Iterator[World]:
    w = World(tmp_path, client, small_settings())
    w.svc.create_agent(AGENT, model=MODEL)
    yield w
    w.deps.store.close()


def fenced_count(task: str) -> float:
    return REGISTRY.get_sample_value("vcm_fenced_jobs_total", {"task": task}) or 0.0


def test_an_eviction_commits_its_summary_facts_and_recall_when_nobody_deletes(world: World) -> None:
    """The normal path, and the control of the test below: the same batch leaves rows everywhere."""
    world.fill(keyed="k")
    batch = world.svc.pending_batches(AGENT)[0]
    out = evict.evict_batch(world.cold(Faults()), AGENT, batch)
    store = world.deps.store
    assert out.outcome == "committed" and store.committed_batches(AGENT) == [batch]
    assert store.summary_versions(AGENT) and store.query_facts(AGENT, ANY_STATUS)
    assert store.traverse(summary_node(AGENT)) and store.list_idempotency(AGENT)
    assert world.svc.pending_batches(AGENT) == []


def test_an_agent_deleted_and_recreated_during_its_eviction_sees_nothing_of_the_old(world: World) -> None:
    old = world.fill(keyed="k")
    batch = world.svc.pending_batches(AGENT)[0]
    before = fenced_count("evict")
    out = evict.evict_batch(world.cold(Meanwhile("evict.after_summarize", world.recreate)), AGENT, batch)

    assert out.outcome == "fenced" and fenced_count("evict") == before + 1
    world.assert_nothing_of_the_old()
    hot = world.deps.hot
    assert hot.pending_batches(AGENT) == [] and hot.fifo_ids(AGENT) == []
    assert hot.summary(AGENT)[0] == ""

    # The new agent: an old key is new to it, its ids start again, and what it says reaches its
    # context, then recall through its own eviction.
    first = world.svc.append(AGENT, "user", "Dana booked the ferry to Hydra.", idempotency_key="k0")
    assert not first.replayed and first.message_id == old[0]  # same id, other message: no clash
    new = [first.message_id, *world.fill(keyed="n")]
    assert hot.fifo_ids(AGENT)[-1] == new[-1]
    batch = world.svc.pending_batches(AGENT)[0]
    assert evict.evict_batch(world.cold(Faults()), AGENT, batch).outcome == "committed"
    store = world.deps.store
    (hit,) = [h for h in store.search_recall(AGENT, "ferry Hydra").items if h.message.message_id == first.message_id]
    assert hit.message.content == "Dana booked the ferry to Hydra."
    assert store.committed_batches(AGENT) == [batch]
    assert [v.batch_id for v in store.summary_versions(AGENT)] == [batch]
    assert "Hydra" in store.get_summary(AGENT).text  # type: ignore[union-attr]
    assert set(hot.fifo_ids(AGENT)) | {m.message_id for m in store.list_messages(AGENT, limit=1000)} >= set(new)


def test_an_agent_deleted_during_its_eviction_is_not_written_back(world: World) -> None:
    world.fill()
    batch = world.svc.pending_batches(AGENT)[0]
    out = evict.evict_batch(
        world.cold(Meanwhile("evict.after_summarize", lambda: world.svc.delete_agent(AGENT))), AGENT, batch
    )
    assert out.outcome == "fenced"
    store = world.deps.store
    assert store.count_messages(AGENT) == 0 and store.committed_batches(AGENT) == []
    assert store.query_events(AGENT, limit=10).items == [] and store.query_facts(AGENT, ANY_STATUS) == []
    with pytest.raises(NotFound):
        store.get_agent(AGENT)


@pytest.fixture
def behind(tmp_path: Path, client: redis.Redis) -> Iterator[World]:
    """Write-behind: appends reach the store only through the spool."""
    w = World(tmp_path, client, small_settings(durability={"messages": "write_behind"}))
    w.svc.create_agent(AGENT, model=MODEL)
    yield w
    w.deps.store.close()


def test_a_spool_of_an_agent_deleted_and_recreated_meanwhile_writes_nothing(behind: World) -> None:
    ids = [behind.svc.append(AGENT, "user", line(i), idempotency_key=f"s{i}").message_id for i in range(3)]
    before = fenced_count("spool")
    out = spool_messages(
        behind.deps.hot, behind.deps.store, AGENT, ids, faults=Meanwhile("spool.before_write", behind.recreate)
    )
    assert out.as_dict()["outcome"] == "fenced" and out.written == 0 and fenced_count("spool") == before + 1
    behind.assert_nothing_of_the_old()


def test_a_spool_that_reads_across_a_recreation_stops(behind: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ids read may be the new agent's: the spool reads the incarnation before and after."""
    hot = behind.deps.hot
    ids = [behind.svc.append(AGENT, "user", line(i)).message_id for i in range(2)]
    read = hot.get_messages

    def across(agent_id: str, message_ids: list[str]) -> object:
        behind.recreate()
        behind.svc.append(AGENT, "user", "the new agent's first words")
        return read(agent_id, message_ids)

    monkeypatch.setattr(hot, "get_messages", across)
    out = spool_messages(hot, behind.deps.store, AGENT, ids)
    assert out.fenced and out.written == 0
    assert behind.deps.store.count_messages(AGENT) == 0  # the new agent's spool writes its own


def test_a_spool_without_interference_writes_and_a_deleted_agents_spool_finds_nothing(behind: World) -> None:
    ids = [behind.svc.append(AGENT, "user", line(i)).message_id for i in range(3)]
    out = spool_messages(behind.deps.hot, behind.deps.store, AGENT, ids)
    assert out.as_dict()["outcome"] == "spooled" and out.written == 3
    behind.svc.delete_agent(AGENT)
    assert spool_messages(behind.deps.hot, behind.deps.store, AGENT, ids).written == 0
    assert behind.deps.store.count_messages(AGENT) == 0


class LateDelete(SentenceIngest):
    """Runs ``meanwhile`` after the job's last check, right before the store write."""

    def __init__(self, world: World, meanwhile: Callable[[], object]) -> None:
        super().__init__(world.deps.store)
        self.meanwhile = meanwhile

    def __call__(self, *args: object, progress: object = None, **kwargs: object) -> object:  # type: ignore[override]
        def last(done: int, total: int) -> None:
            assert callable(progress)
            progress(done, total)
            self.meanwhile()

        return super().__call__(*args, progress=last, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("recreate", [False, True])
def test_an_ingestion_whose_agent_goes_after_its_last_check_stores_nothing(world: World, recreate: bool) -> None:
    dispatcher = RecordingDispatcher()
    svc = MemoryService(world.deps.hot, world.deps.store, dispatcher, embed=word_embed)
    svc.ingest_archival(AGENT, "Ferries leave at nine. The harbour closes at six.", doc_id="harbour")
    (request,) = dispatcher.ingests
    assert request.incarnation == world.deps.hot.incarnation(AGENT)
    gone = world.recreate if recreate else (lambda: world.svc.delete_agent(AGENT))
    before = fenced_count("ingest")
    out = run_ingest_job(world.deps.hot, world.deps.store, LateDelete(world, gone), request, clock=lambda: 1.0)
    assert out.outcome == "cancelled" and fenced_count("ingest") == before + 1
    assert world.deps.store.get_archival(AGENT, "harbour") == []


def test_an_ingestion_queued_for_an_earlier_agent_of_the_id_is_cancelled(world: World) -> None:
    dispatcher = RecordingDispatcher()
    svc = MemoryService(world.deps.hot, world.deps.store, dispatcher, embed=word_embed)
    svc.ingest_archival(AGENT, "Ferries leave at nine.", doc_id="harbour")
    world.recreate()
    out = run_ingest_job(
        world.deps.hot, world.deps.store, SentenceIngest(world.deps.store), dispatcher.ingests[0], clock=lambda: 1.0
    )
    assert out.outcome == "cancelled" and world.deps.store.get_archival(AGENT, "harbour") == []


def test_an_ingestion_without_interference_stores_its_chunks(world: World) -> None:
    dispatcher = RecordingDispatcher()
    svc = MemoryService(world.deps.hot, world.deps.store, dispatcher, embed=word_embed)
    svc.ingest_archival(AGENT, "Ferries leave at nine. The harbour closes at six.", doc_id="harbour")
    out = run_ingest_job(
        world.deps.hot, world.deps.store, SentenceIngest(world.deps.store), dispatcher.ingests[0], clock=lambda: 1.0
    )
    assert out.outcome == "done" and len(world.deps.store.get_archival(AGENT, "harbour")) == 2


def test_the_incarnation_is_new_for_a_recreated_id_and_survives_a_rebuild(world: World) -> None:
    hot, store = world.deps.hot, world.deps.store
    first = hot.incarnation(AGENT)
    assert len(first) == 32 and store.get_agent(AGENT).incarnation == first
    world.svc.create_agent(AGENT, model=MODEL)  # a replayed creation keeps it
    assert hot.incarnation(AGENT) == store.get_agent(AGENT).incarnation == first
    hot.forget(AGENT)  # the hot state lost (a flushed Redis): rebuilt from the record
    world.svc.gauges(AGENT)
    assert hot.incarnation(AGENT) == first
    world.recreate()
    assert hot.incarnation(AGENT) == store.get_agent(AGENT).incarnation != first


class RecreatingVectorizer(WordVectorizer):
    """Re-creates the agent while it embeds (the run read the old agent's messages first)."""

    def __init__(self, world: World) -> None:
        self.world = world

    def embed(self, history: Sequence[Turn], targets: Sequence[Turn]) -> list[Vectors | None]:
        self.world.recreate()
        self.world.svc.append(AGENT, "user", "the new agent's first words")
        return super().embed(history, targets)


def test_a_reembedding_run_across_a_recreation_stores_no_vector(world: World) -> None:
    for i in range(3):
        world.svc.append(AGENT, "user", line(i))  # written through: in the store
    store = world.deps.store
    before = fenced_count("reembed")
    out = reembed_agent(store, AGENT, RecreatingVectorizer(world))
    assert out.done and out.embedded == 0 and fenced_count("reembed") == before + 1
    assert store.message_vector_ids(AGENT, ["m1"], WordVectorizer.version) == set()  # the new m1: none
    assert reembed_agent(store, AGENT, WordVectorizer()).embedded == 1  # the new agent's own run
    world.svc.delete_agent(AGENT)
    assert reembed_agent(store, AGENT, WordVectorizer()).scanned == 0
