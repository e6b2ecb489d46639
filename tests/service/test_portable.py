"""Portable export and import (issue 34, item 4): an agent moves from an embedded data directory
(fakeredis, SQLite) to a Redis-backed stack (the real Redis at ``VCM_TEST_REDIS_URL``, the real
Celery worker in a thread over memory://, a SQLite store of its own) and back, and nothing is lost: both
sides compare equal on messages (ids, seq, metadata), summary and versions, facts with evidence,
state, blocks, archival chunks and the built context. Bad files are refused with the line's
number and write nothing; a file imports once; an existing agent is never merged into."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis

from tests.doubles.coldpath import MODEL, line, make_deps, small_settings
from tests.doubles.dispatcher import InlineDispatcher
from tests.doubles.embedder import word_embed
from tests.doubles.ingester import SentenceIngest
from tests.redis_legs import REDIS_URL
from tests.workers.traffic import wait_until
from vcm.errors import ConfigError, Conflict, ValidationError
from vcm.service import MemoryService
from vcm.service import portable_format as fmt
from vcm.store.types import FactQuery
from vcm.tasks import evict
from vcm.tasks.deps import Deps
from vcm.workers import runtime
from vcm.workers.build import build
from vcm.workers.dispatch import CeleryDispatcher
from vcm.workers.embedded import embedded_worker

AGENT = "porter"
ALL = FactQuery(statuses=("active", "shadow", "archived", "expired"), limit=1000)


@dataclasses.dataclass
class Side:
    deps: Deps
    svc: MemoryService

    def drain(self) -> None:
        """Until every eviction batch the hot path handed over is committed: by the real Celery
        worker where there is one, else here with the worker's own task code, in order."""
        dispatcher = self.svc.dispatcher
        if not isinstance(dispatcher, InlineDispatcher):
            wait_until(lambda: not any(self.deps.hot.pending_batches(a) for a in self.svc.agents()), 60, "drained")
            return
        while dispatcher.evictions:
            agent, batch = dispatcher.evictions.pop(0)
            evict.evict_batch(self.deps, agent, batch)


def side(tmp: Path, client: redis.Redis | fakeredis.FakeRedis) -> Side:
    tmp.mkdir(parents=True, exist_ok=True)
    settings = small_settings(durability={"messages": "write_through"})
    deps = make_deps(tmp, settings=settings, client=client)
    deps.dispatcher = InlineDispatcher(deps.hot, deps.store, SentenceIngest(deps.store))
    return Side(deps, MemoryService(deps.hot, deps.store, deps.dispatcher, embed=word_embed))


@contextmanager
def production(tmp: Path, client: redis.Redis) -> Iterator[Side]:
    """A Redis-backed stack: the hot state on the real Redis, the cold path on the real Celery
    worker (in a thread, over memory://, as vcm.workers.embedded runs it) with its own store."""
    tmp.mkdir(parents=True, exist_ok=True)
    store_url = f"sqlite:///{tmp / 'vcm.db'}"
    settings = small_settings(durability={"messages": "write_through"}, broker_url="memory://", store_url=store_url)
    app = build(settings).app
    dispatcher = CeleryDispatcher(app)
    deps = make_deps(tmp, settings=settings, client=client, dispatcher=dispatcher)
    runtime.install(deps, runtime.LocalDeliveryLog())
    try:
        with embedded_worker(app):
            yield Side(deps, MemoryService(deps.hot, deps.store, dispatcher, embed=word_embed))
    finally:
        runtime.reset()


@pytest.fixture
def real_redis() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[Side]:
    s = side(tmp_path / "embedded", fakeredis.FakeRedis(decode_responses=True))
    yield s
    s.deps.store.close()


def converse(svc: MemoryService, agent: str, count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        svc.append(agent, "user" if i % 2 == 0 else "assistant", line(i), name="alice" if i % 4 == 0 else None)


def populate(s: Side, agent: str = AGENT) -> None:
    """Every kind of memory: evicted batches (summary versions), a FIFO with metadata and names,
    a pinned block, facts with evidence and edges, state keys, a document, a snapshot."""
    svc = s.svc
    svc.create_agent(agent, model=MODEL, system_prompt="You help Alice.")
    svc.put_block(agent, "persona", "I am a careful assistant.", pinned=True)
    first = svc.append(agent, "user", "Alice works with Bob at Acme in Porto.", metadata={"source": "chat", "n": 1})
    evidence = [{"kind": "message", "id": first.message_id}]
    svc.remember(agent, "Alice works with Bob", type="relation", key="alice|works_with|bob", evidence=evidence)
    svc.remember(agent, "Alice prefers green tea", type="preference", evidence=evidence, ttl_s=3600)
    svc.set_state(agent, "plan", {"step": 2, "todo": ["call Bob"]})
    svc.ingest_archival(agent, "Acme sells anvils. Porto is in Portugal. Bob runs the Porto office.", doc_id="acme")
    converse(svc, agent, 40)
    s.drain()
    svc.reset(agent)  # a summary version no eviction made
    converse(svc, agent, 30, start=200)
    s.drain()
    svc.create_snapshot(agent, reason="before the move")
    secret = svc.hot.snapshot(agent).fifo[-1].id  # in the snapshot's FIFO, forgotten after it
    converse(svc, agent, 6, start=40)
    s.drain()
    svc.forget_message(agent, secret)


def export(s: Side, agent: str = AGENT, *, vectors: bool = True) -> list[str]:
    return list(s.svc.export_agent(agent, vectors=vectors))


def picture(s: Side, agent: str = AGENT) -> dict[str, Any]:
    """Everything the round trip must keep, as plain data."""
    svc, store = s.svc, s.deps.store
    messages, after = [], -1
    while page := store.list_messages(agent, after_seq=after, limit=500):
        messages += [(m.message_id, m.seq, m.role, m.content, m.tokens, m.name, dict(m.metadata)) for m in page]
        after = page[-1].seq
    summary = store.get_summary(agent)
    chunks = sorted(
        (c.doc_id, c.chunk_index, c.text, c.embedding_version, tuple(round(x, 5) for x in c.embedding))
        for c in store.get_archival(agent, "acme")
    )
    facts = {
        f.fact_id: (f.value, f.type, f.key, f.status, json.dumps(list(f.evidence), sort_keys=True), f.version)
        for f in svc.list_facts(agent, ALL)
    }
    return {
        "messages": messages,
        "fifo": [m.id for m in svc.hot.snapshot(agent).fifo],
        "summary": None if summary is None else (summary.text, summary.tokens, summary.batch_id),
        "versions": [(v.batch_id, v.text, v.tokens) for v in store.summary_versions(agent, limit=1000)],
        "committed": store.committed_batches(agent),
        "facts": facts,
        "state": {e.key: e.value for e in svc.list_state(agent)},
        "blocks": [b.as_json() for b in svc.list_blocks(agent)],
        "chunks": chunks,
        "snapshots": [(r.snapshot_id, r.reason) for r in svc.list_snapshots(agent)],
        "forgotten": sorted(store.tombstones(agent).messages),
        "context": _without_recall(svc, agent),
    }


def _without_recall(svc: MemoryService, agent: str) -> list[dict[str, Any]]:
    """The built prompt without recalled messages: message vectors travel only through a
    re-embedding after the import (it says so), so until then recall ranks by text alone and may
    pick other messages of the same words; everything else in the prompt must be the same."""
    settings = svc.core.settings
    svc.core.settings = settings.model_copy(
        update={"context": settings.context.model_copy(update={"memory_messages": 0})}
    )
    try:
        return svc.build_context(agent, record_use=False).messages
    finally:
        svc.core.settings = settings


def test_a_round_trip_embedded_to_redis_and_back_loses_nothing(
    embedded: Side, real_redis: redis.Redis, tmp_path: Path
) -> None:
    populate(embedded)
    before = picture(embedded)
    assert before["versions"] and before["facts"] and before["chunks"] and before["snapshots"]
    assert any(m[6].get("source") == "chat" for m in before["messages"])

    with production(tmp_path / "production", real_redis) as prod:
        result = prod.svc.import_agent(export(embedded))
        assert result["counts"]["messages"] == len(before["messages"]) and not result["replayed"]
        assert result["message_vectors"] == "not embedded: run vcm reembed"  # no bulk jobs wired here
        moved = picture(prod)
        assert moved == before
        # The imported agent lives on: appends past the flush line are evicted by the worker.
        converse(prod.svc, AGENT, 30, start=100)
        prod.drain()
        assert len(prod.deps.store.committed_batches(AGENT)) > len(before["committed"])
        back_file = export(prod)
        after = picture(prod)

    home = side(tmp_path / "home", fakeredis.FakeRedis(decode_responses=True))
    try:
        home.svc.import_agent(back_file)
        assert picture(home) == after
        # The snapshot taken before the move still restores on the far side, and what was
        # forgotten since stays forgotten.
        snapshot_id = next(sid for sid, reason in after["snapshots"] if reason == "before the move")
        home.svc.restore_snapshot(AGENT, snapshot_id)
        (secret,) = after["forgotten"]
        assert secret not in [m.id for m in home.svc.hot.snapshot(AGENT).fifo]
        assert home.deps.store.get_messages(AGENT, [secret]) == []
    finally:
        home.deps.store.close()


def test_the_same_file_imports_once_and_an_existing_agent_is_never_merged(embedded: Side, tmp_path: Path) -> None:
    populate(embedded)
    lines = export(embedded)
    other = side(tmp_path / "other", fakeredis.FakeRedis(decode_responses=True))
    try:
        first = other.svc.import_agent(lines)
        count = other.deps.store.count_messages(AGENT)
        again = other.svc.import_agent(lines)
        assert again["replayed"] and again["counts"] == first["counts"]
        assert other.deps.store.count_messages(AGENT) == count
        # Another file of the same agent is refused; under another id it goes in beside it.
        with pytest.raises(Conflict):
            other.svc.import_agent(export(embedded))
        renamed = other.svc.import_agent(export(embedded), as_id="porter-2")
        assert renamed["agent_id"] == "porter-2" and renamed["source_agent_id"] == AGENT
        assert picture(other, "porter-2")["messages"] == picture(other)["messages"]
        snapshot_id = other.svc.list_snapshots("porter-2")[0].snapshot_id
        other.svc.restore_snapshot("porter-2", snapshot_id)  # the payload was re-keyed to its new id
    finally:
        other.deps.store.close()


def test_without_vectors_facts_are_embedded_again_and_documents_ingested_again(embedded: Side, tmp_path: Path) -> None:
    populate(embedded)
    # Knowing the embedding version loads the model: a file without vectors never asks for it.
    asked: list[str] = []

    def version(side: str) -> Callable[[], str]:
        def ask() -> str:
            asked.append(side)
            return "v-test"

        return ask

    embedded.svc.recall_version = version("export")
    assert json.loads(export(embedded)[0])["embedding"]["version"] == "v-test" and asked == ["export"]
    lines = export(embedded, vectors=False)
    assert json.loads(lines[0])["embedding"]["version"] is None and asked == ["export"]
    assert all(json.loads(x).get("embedding") is None for x in lines if '"kind":"fact"' in x)
    other = side(tmp_path / "other", fakeredis.FakeRedis(decode_responses=True))
    other.svc.recall_version = version("import")
    try:
        result = other.svc.import_agent(lines)
        assert asked == ["export"]
        assert len(result["ingest_jobs"]) == 1
        assert picture(other)["chunks"] == picture(embedded)["chunks"]
        memory = other.deps.store.agent_memory(AGENT, other.svc.clock())
        assert memory.facts and all(f.embedding for f in memory.facts)
    finally:
        other.deps.store.close()


@pytest.mark.parametrize(
    ("change", "line"),
    [
        (lambda ls: ls[:-1], None),  # truncated: no end line
        (lambda ls: [ls[0], "{not json\n", *ls[1:]], 2),
        (lambda ls: [ls[0].replace('"version":1', '"version":9'), *ls[1:]], 1),
        (lambda ls: ls[1:], 1),  # no header
        (lambda ls: [*ls[:3], json.dumps({"kind": "message", "id": "m1"}) + "\n", *ls[3:]], 4),
        (lambda ls: [*ls[:3], json.dumps({"kind": "gossip"}) + "\n", *ls[3:]], 4),
    ],
)
def test_a_bad_file_is_refused_with_its_line_and_writes_nothing(
    embedded: Side, tmp_path: Path, change: Any, line: int | None
) -> None:
    populate(embedded)
    lines = change(export(embedded))
    other = side(tmp_path / "other", fakeredis.FakeRedis(decode_responses=True))
    try:
        with pytest.raises(ValidationError) as caught:
            other.svc.import_agent(lines)
        if line is not None:
            assert caught.value.details["line"] == line
        assert other.deps.store.list_agents() == [] and other.svc.agents() == []
    finally:
        other.deps.store.close()


def test_the_header_names_the_format_the_agent_and_the_embedding() -> None:
    head = fmt.header("e1", "a", vcm_version="1.0", embedding_version="v1", vectors=False, now=5.0)
    agent = {"kind": "agent", "config": {"model": None, "system_prompt": "", "tools": []}, "id_floor": 0}
    with pytest.raises(ValidationError, match="no agent line"):
        fmt.parse([fmt.line(head), fmt.line(fmt.end(1))])
    bundle = fmt.parse([fmt.line(head), fmt.line(agent), fmt.line(fmt.end(2))])
    assert (bundle.export_id, bundle.agent_id, bundle.header["embedding"]["version"]) == ("e1", "a", "v1")
    assert bundle.header["format"] == fmt.FORMAT and bundle.header["version"] == fmt.VERSION
    with pytest.raises(ValidationError, match="line 3"):
        fmt.parse([fmt.line(head), fmt.line(agent), fmt.line(fmt.end(5))])


def test_an_import_that_died_half_way_is_done_again_from_the_start(embedded: Side, tmp_path: Path) -> None:
    populate(embedded)
    lines = export(embedded)
    export_id = json.loads(lines[0])["export_id"]
    other = side(tmp_path / "other", fakeredis.FakeRedis(decode_responses=True))
    try:
        # What a crash after the first writes leaves: the record and the begun row.
        other.deps.store.put_agent(AGENT, {"model": MODEL, "system_prompt": "", "tools": []}, incarnation="x")
        other.svc.portable.mark(AGENT, export_id, "system", None)
        result = other.svc.import_agent(lines)
        assert not result["replayed"] and picture(other) == picture(embedded)
        with pytest.raises(Conflict):  # an agent no import of this file began is never touched
            other.svc.import_agent(export(embedded))
    finally:
        other.deps.store.close()


def test_a_model_this_deployment_does_not_know_is_refused_before_any_write(embedded: Side, tmp_path: Path) -> None:
    populate(embedded)
    lines = [x.replace(f'"model":"{MODEL}"', '"model":"no-such-model"') for x in export(embedded)]
    other = side(tmp_path / "other", fakeredis.FakeRedis(decode_responses=True))
    try:
        with pytest.raises(ConfigError, match="no-such-model"):
            other.svc.import_agent(lines)
        assert other.deps.store.list_agents() == []
    finally:
        other.deps.store.close()
