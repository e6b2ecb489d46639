"""Forgetting a message wherever it is, with what was derived from it (issue 28, item 4): the
façade over fakeredis and the embedded store, the real eviction task and its extractive fact
extraction; the receipt's re-check is what proves each case."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import fakeredis
import pytest

from tests.doubles.coldpath import line
from tests.doubles.embedder import word_embed
from tests.hotstate import policy_view, recount
from tests.store.factories import chunk
from vcm.dispatch import RecordingDispatcher
from vcm.durable import stored_message
from vcm.errors import Conflict
from vcm.hotpath.context import assemble
from vcm.hotpath.state import HotState
from vcm.service import MemoryService
from vcm.settings import load_settings
from vcm.store import open_store
from vcm.store.types import Fact, FactQuery
from vcm.tasks.deps import Deps
from vcm.tasks.evict import evict_batch
from vcm.tasks.summary.recursive import extractive
from vcm.workers.summaries import LocalSummaries

MODEL = "vcm-demo-2k"
WORDS = ("zanzibar", "quokka")  # the forgotten message's own words; no other message has them
ALL = ("active", "shadow", "archived", "expired")


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[MemoryService]:
    settings = load_settings(overrides={"durability": {"messages": "write_through"}}, environ={})
    store = open_store(f"sqlite:///{tmp_path / 'vcm.db'}", text_index_lag_ok=False)
    service = MemoryService(
        HotState(fakeredis.FakeRedis(decode_responses=True), settings), store, RecordingDispatcher(), embed=word_embed
    )
    service.create_agent("ann", model=MODEL, system_prompt="Be brief.")
    yield service
    store.close()


def deps_of(svc: MemoryService) -> Deps:
    return Deps(settings=svc.settings, hot=svc.hot, store=svc.store, dispatcher=svc.dispatcher, embed=word_embed,
                summarizer=extractive)  # fmt: skip


@pytest.fixture
def wired(svc: MemoryService) -> MemoryService:
    """The service as entry points build it: the cold path's summariser wired in for forgets."""
    return MemoryService(svc.hot, svc.store, svc.dispatcher, embed=word_embed, summaries=LocalSummaries(deps_of(svc)))


def commit_pending(svc: MemoryService) -> None:
    deps = deps_of(svc)
    while pending := svc.hot.pending_batches("ann"):
        for batch in pending:
            assert evict_batch(deps, "ann", batch).outcome in ("committed", "replayed")


def leaks(text: str) -> list[str]:
    return [w for w in WORDS if w in text.lower()]


def assert_words_gone(svc: MemoryService, *, but_summary: bool = False) -> None:
    """Facts search (every status), the working set and the built prompt hold none of WORDS;
    ``but_summary``: the summary layer may (re-summarising is not part of a forget yet)."""
    hits = svc.search_facts("ann", "zanzibar quokka", filters=FactQuery(statuses=ALL, limit=50))
    assert not [h.fact.value for h in hits if leaks(h.fact.value)]
    assert not [f.value for f in svc.list_facts("ann", FactQuery(statuses=ALL, limit=1000)) if leaks(f.value)]
    assert not leaks(json.dumps(svc.working_set("ann", "zanzibar quokka").as_dict()))
    built = svc.build_context("ann", query="zanzibar quokka")
    layers = zip(built.messages, built.layers, strict=True)
    shown = [m for m, layer in layers if not (but_summary and layer == "summary")]
    assert not leaks(json.dumps(shown))


def test_forgetting_a_message_in_the_fifo_takes_it_and_its_facts_out_with_its_tokens(svc: MemoryService) -> None:
    first = svc.append("ann", "user", "Our trip: Zanzibar first, then we feed a quokka on Rottnest.").message_id
    other = svc.append("ann", "user", "I drink green tea every morning.").message_id
    svc.append("ann", "assistant", "Noted.", pinned=True)
    only = svc.remember("ann", "The trip starts in Zanzibar with a quokka", type="project",
                        evidence=[{"kind": "message", "id": first}]).fact  # fmt: skip
    both = svc.remember("ann", "Ann drinks green tea every morning", type="preference",
                        evidence=[{"kind": "message", "id": first}, {"kind": "message", "id": other}]).fact  # fmt: skip
    before = svc.gauges("ann")

    receipt = svc.forget("ann", first)

    assert receipt.removed["fifo"] == 1 and receipt.removed["messages"] == 1
    assert receipt.removed["fifo_tokens"] == before.fifo - svc.gauges("ann").fifo > 0
    assert receipt.facts_removed == (only.fact_id,) and receipt.facts_rewritten == (both.fact_id,)
    assert receipt.removed["edges"] >= 2  # both facts cited it
    assert first not in svc.fifo_ids("ann") and svc.hot.get_messages("ann", [first]) == []
    # Counters and gauges add up after the Lua removal, as the property tests check them.
    parts, _, _, _ = policy_view(svc.hot, "ann")
    counted = recount(svc.hot, "ann")
    assert (counted["fifo"], counted["pinned"], counted["summary"]) == (parts.fifo, parts.pinned, parts.summary)
    assert svc.hot.gauges("ann") == assemble(svc.hot.snapshot("ann")).gauges
    # The fact with other evidence stays, citing only that.
    kept = svc.get_fact("ann", both.fact_id)
    assert [e["id"] for e in kept.evidence] == [other] and kept.version == both.version + 1
    assert_words_gone(svc)
    assert svc.check_forget("ann", receipt.receipt).clean
    # The store's FIFO agrees: a rebuilt hot state does not bring it back.
    assert first not in [m.message_id for m in svc.durable.uncommitted("ann")]
    assert svc.forget_message("ann", first) == {}  # a repeat finds nothing left


def test_facts_extracted_at_eviction_go_with_their_message(svc: MemoryService) -> None:
    first = svc.append("ann", "user", "I love Zanzibar and I decided to adopt a quokka named Pip.").message_id
    for i in range(85):
        svc.append("ann", "user", line(i))
    commit_pending(svc)
    assert first not in svc.fifo_ids("ann")
    extracted = [f for f in svc.list_facts("ann", FactQuery(statuses=ALL, limit=1000)) if leaks(f.value)]
    assert extracted, "the extraction at eviction found nothing to forget"

    receipt = svc.forget("ann", first)

    assert set(receipt.facts_removed) >= {f.fact_id for f in extracted}
    assert "fifo" not in receipt.removed and receipt.removed["messages"] == 1
    assert_words_gone(svc, but_summary=True)
    assert not svc.search_recall("ann", "zanzibar quokka", mode="text").page.items
    assert svc.check_forget("ann", receipt.receipt).clean


def test_a_message_in_a_pending_batch_is_refused_until_its_batch_committed(svc: MemoryService) -> None:
    first = svc.append("ann", "user", "Zanzibar, then a quokka.").message_id
    for i in range(85):
        svc.append("ann", "user", line(i))
    batch = next(b for b, ids in svc.hot.batch_message_ids("ann").items() if first in ids)
    gauges = svc.hot.gauges("ann")
    with pytest.raises(Conflict) as err:
        svc.forget("ann", first)
    assert err.value.details["batch_id"] == batch and svc.hot.gauges("ann") == gauges
    commit_pending(svc)
    assert svc.forget("ann", first).removed["messages"] == 1


def test_the_receipt_check_reports_what_was_put_back_behind_its_back(svc: MemoryService) -> None:
    appended = svc.append("ann", "user", "Zanzibar, then a quokka.")
    assert appended.message is not None
    receipt = svc.forget("ann", appended.message_id)
    assert svc.check_forget("ann", receipt.receipt).clean
    # A late spool of the message finds its tombstone and writes nothing; a fact citing it is put
    # back behind the service's back.
    assert svc.store.spool_messages([stored_message("ann", appended.message)]) == 0
    pointer = {"kind": "message", "id": appended.message_id}
    fact = Fact("ann", "fback", "agent", "learned", "a quokka", evidence=(pointer,))
    svc.store.put_fact(replace(fact, embedding=[float(x) for x in word_embed(["a quokka"])[0]]), None)
    check = svc.check_forget("ann", receipt.receipt)
    assert not check.clean and check.left == {"facts": ["fback"]}


def test_a_forgotten_message_leaves_the_summary_and_every_version_of_it(wired: MemoryService) -> None:
    svc = wired
    first = svc.append("ann", "user", "I love Zanzibar and I decided to adopt a quokka named Pip.").message_id
    for i in range(85):
        svc.append("ann", "user", line(i))
    commit_pending(svc)
    for i in range(85, 170):  # a second eviction folds the first summary into the next
        svc.append("ann", "user", line(i))
    commit_pending(svc)
    versions = svc.summary_versions("ann", limit=100)
    assert len(versions) >= 2 and all(leaks(v.text) for v in versions), "the words never reached the summary"
    kept = {v.batch_id: v.text for v in versions}

    receipt = svc.forget("ann", first)

    assert receipt.removed["summary_versions"] == len(versions)
    after = svc.summary_versions("ann", limit=100)
    assert [v.batch_id for v in after] == [v.batch_id for v in versions]
    assert not [v.batch_id for v in after if leaks(v.text)]
    # What remains is summarised still: the other messages' words stay.
    assert all(v.text for v in after) and any(set(v.text.split()) & set(kept[v.batch_id].split()) for v in after)
    stored = svc.store.get_summary("ann")
    text, tokens, _, _ = svc.hot.summary("ann")
    assert stored is not None and not leaks(stored.text) and text == stored.text
    assert tokens == svc.hot.summary_tokens("ann", text)
    assert_words_gone(svc)
    parts, _, _, _ = policy_view(svc.hot, "ann")
    counted = recount(svc.hot, "ann")
    assert (counted["fifo"], counted["summary"]) == (parts.fifo, parts.summary)
    assert svc.hot.gauges("ann") == assemble(svc.hot.snapshot("ann")).gauges
    # The next eviction builds on the rewritten summary.
    for i in range(170, 255):
        svc.append("ann", "user", line(i))
    commit_pending(svc)
    assert not [v.batch_id for v in svc.summary_versions("ann", limit=100) if leaks(v.text)]


def test_an_eviction_committing_during_the_rewrite_makes_it_start_over(wired: MemoryService) -> None:
    svc = wired
    first = svc.append("ann", "user", "Zanzibar first, then a quokka named Pip.").message_id
    for i in range(85):
        svc.append("ann", "user", line(i))
    commit_pending(svc)
    for i in range(85, 170):
        svc.append("ann", "user", line(i))
    pending = svc.hot.pending_batches("ann")
    assert pending
    deps = deps_of(svc)
    rewriter = svc.forgetting.redaction.rewriter
    assert rewriter is not None
    calls: list[int] = []

    def racing(agent_id: str, previous: str, messages: object) -> tuple[str, int]:
        if not calls:  # the pending batch commits while the first replay runs
            for batch in pending:
                evict_batch(deps, "ann", batch)
        calls.append(1)
        return rewriter(agent_id, previous, messages)  # type: ignore[arg-type]

    svc.forgetting.redaction.rewriter = racing
    svc.forget("ann", first)
    assert not [v.batch_id for v in svc.summary_versions("ann", limit=100) if leaks(v.text)]
    assert not leaks(svc.hot.summary("ann")[0])


def test_forgetting_a_document_takes_or_rewrites_the_facts_citing_it(svc: MemoryService) -> None:
    svc.store.ingest_archival([chunk("ann", "handbook", i, [1.0, 0.0, 0.0]) for i in range(2)])
    other = svc.append("ann", "user", "I drink green tea every morning.").message_id
    cited = {"kind": "document", "id": "handbook", "span": [0, 99]}
    only = svc.remember("ann", "The handbook places a quokka in Zanzibar", type="project", evidence=[cited]).fact
    both = svc.remember("ann", "Ann drinks green tea every morning", type="preference",
                        evidence=[cited, {"kind": "message", "id": other}]).fact  # fmt: skip
    untouched = svc.remember("ann", "Ann likes tea", type="preference",
                             evidence=[{"kind": "message", "id": other}]).fact  # fmt: skip

    counts = svc.forget_document("ann", "handbook")

    assert counts == {"archival_chunks": 2, "facts_removed": 1, "facts_rewritten": 1}
    live = {f.fact_id: f for f in svc.list_facts("ann", FactQuery(statuses=ALL, limit=1000))}
    assert only.fact_id not in live and untouched.fact_id in live
    assert [e["id"] for e in live[both.fact_id].evidence] == [other]
    assert_words_gone(svc)
    assert svc.forget_document("ann", "handbook") == {}  # a repeat finds nothing left


def test_restoring_a_snapshot_taken_before_a_forget_brings_back_the_rewritten_summary(wired: MemoryService) -> None:
    svc = wired
    first = svc.append("ann", "user", "I love Zanzibar and I decided to adopt a quokka named Pip.").message_id
    for i in range(170):
        svc.append("ann", "user", line(i))
    commit_pending(svc)
    assert leaks(svc.hot.summary("ann")[0])
    snap = svc.create_snapshot("ann")
    svc.forget("ann", first)
    for i in range(170, 200):
        svc.append("ann", "user", line(i))

    svc.restore_snapshot("ann", snap.snapshot_id)

    text, tokens, _, _ = svc.hot.summary("ann")
    assert text and not leaks(text) and tokens == svc.hot.summary_tokens("ann", text)
    assert not [v.batch_id for v in svc.summary_versions("ann", limit=100) if leaks(v.text)]
    assert_words_gone(svc)
