"""evict_batch against fakeredis hot state and a real SQLite store: commit, order, replay,
faults at every step, drift events, dead letters."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.doubles.coldpath import MODEL, appended_ids, converse, create_agent, make_deps, small_settings
from vcm.dispatch import RecordingDispatcher
from vcm.durable import agent_config
from vcm.errors import InjectedFailure
from vcm.service import MemoryService
from vcm.tasks import evict
from vcm.tasks.deps import Deps
from vcm.tasks.facts import extraction as fact_extraction
from vcm.tasks.facts.extraction import Candidate
from vcm.tasks.faults import Faults, Rule
from vcm.tasks.spool import spool_messages
from vcm.tasks.summary.request import Draft, Params, Request
from vcm.tasks.summary.units import Scan
from vcm.types import Message

AGENT = "agent-1"


@pytest.fixture
def deps(tmp_path: Path) -> Iterator[Deps]:
    d = make_deps(tmp_path)
    create_agent(d.hot, d.store, AGENT, model=MODEL, system_prompt="You are a careful assistant.")
    yield d
    d.store.close()


def fill(d: Deps, agent: str = AGENT, *, batches: int = 1) -> list[str]:
    """Converse until at least ``batches`` eviction batches are pending; returns appended ids."""
    ids: list[str] = []
    i = 0
    while len(d.hot.pending_batches(agent)) < batches:
        ids += appended_ids(converse(d.hot, agent, 1, start=i))
        i += 1
    return ids


def events(d: Deps, kind: str, agent: str = AGENT) -> list[dict[str, object]]:
    return [dict(e.payload) for e in d.store.query_events(agent, [kind], limit=1000).items]


def assert_committed_once(d: Deps, agent: str, batches: list[int]) -> None:
    assert d.store.committed_batches(agent) == batches
    assert [e["batch_id"] for e in events(d, "evict", agent)] == batches
    assert d.hot.pending_batches(agent) == []
    stored = d.store.get_summary(agent)
    assert stored is not None and stored.batch_id == batches[-1]
    text, tokens, _, last = d.hot.summary(agent)
    assert (text, last) == (stored.text, batches[-1])
    assert tokens <= d.hot.snapshot(agent).counter("sum_cap")


def test_commit_moves_the_batch_to_the_store_and_installs_the_summary(deps: Deps) -> None:
    fill(deps)
    batch_ids = deps.hot.batch_message_ids(AGENT)[1]
    out = evict.evict_batch(deps, AGENT, 1)
    assert out.outcome == "committed" and out.drift is not None
    assert_committed_once(deps, AGENT, [1])
    assert [m.message_id for m in deps.store.get_messages(AGENT, batch_ids)] == batch_ids
    assert deps.hot.get_messages(AGENT, batch_ids) == []  # left Redis with the batch
    assert deps.hot.snapshot(AGENT).placeholders == []
    assert evict.evict_batch(deps, AGENT, 1).outcome == "absent"  # a redelivery finds nothing to do
    assert_committed_once(deps, AGENT, [1])


@pytest.mark.parametrize(
    ("said", "kept"),
    [
        # The relative-date rule matches "laſt ſunday" case-insensitively; reading its weekday raised.
        ("I saw Maya laſt ſunday at the Porto marathon expo.", "Maya"),
        # No calendar date ("1000000 days ago" is before year 1): anchoring it raised.
        ("Maya ran the Porto marathon 1000000 days ago, she says.", "1000000 days ago"),
    ],
)
def test_a_relative_date_anchoring_could_not_read_commits(deps: Deps, said: str, kept: str) -> None:
    """Each of these failed the job of its batch, and every retry of it, so the agent's
    summaries stopped at that batch."""
    deps.hot.append(AGENT, "user", said, name="Priya")
    fill(deps)
    assert evict.evict_batch(deps, AGENT, 1).outcome == "committed"
    stored = deps.store.get_summary(AGENT)
    assert stored is not None and kept in stored.text


def test_batches_commit_in_order_and_the_finisher_dispatches_the_next(deps: Deps) -> None:
    fill(deps, batches=2)
    assert deps.hot.pending_batches(AGENT)[:2] == [1, 2]
    out = evict.evict_batch(deps, AGENT, 2)
    assert (out.outcome, out.waiting_for) == ("deferred", 1)
    assert deps.store.committed_batches(AGENT) == []
    out = evict.evict_batch(deps, AGENT, 1)
    assert out.next_batch == 2
    dispatcher = deps.dispatcher
    assert isinstance(dispatcher, RecordingDispatcher) and dispatcher.evictions == [(AGENT, 2)]
    assert evict.evict_batch(deps, AGENT, 2).outcome == "committed"
    assert_committed_once(deps, AGENT, [1, 2])


POINTS = [
    "evict.before_summarize",
    "evict.after_summarize",
    "commit_eviction.after_recall_append",
    "commit_eviction.before_commit",
    "evict.after_commit",
]


@pytest.mark.parametrize("point", POINTS)
def test_a_failure_at_any_step_is_repaired_by_running_again(tmp_path: Path, point: str) -> None:
    clean = make_deps(tmp_path / "clean")
    faults = Faults([Rule(point, times=1)])
    faulty = make_deps(tmp_path / "faulty", faults=faults)
    for d in (clean, faulty):
        create_agent(d.hot, d.store, AGENT, model=MODEL)
        fill(d)
    evict.evict_batch(clean, AGENT, 1)

    with pytest.raises(InjectedFailure):
        evict.evict_batch(faulty, AGENT, 1)
    assert faults.fired(point, AGENT) == 1
    committed = point == "evict.after_commit"  # the only step after the store transaction
    assert faulty.store.committed_batches(AGENT) == ([1] if committed else [])
    assert (faulty.store.get_summary(AGENT) is not None) == committed
    assert faulty.hot.pending_batches(AGENT) == [1]  # never dropped from Redis

    out = evict.evict_batch(faulty, AGENT, 1)
    assert out.outcome == ("replayed" if committed else "committed")
    assert_committed_once(faulty, AGENT, [1])
    # same end state as a run that never failed
    assert faulty.hot.summary(AGENT)[0] == clean.hot.summary(AGENT)[0]
    assert faulty.store.count_messages(AGENT) == clean.store.count_messages(AGENT)


def test_drift_below_threshold_resummarises_logs_both_scores_and_alarms(tmp_path: Path) -> None:
    # Out of reach: the cap keeps only a few of the batch's lines.
    d = make_deps(tmp_path, settings=small_settings(drift={"threshold": 1.0}))
    create_agent(d.hot, d.store, AGENT, model=MODEL)
    fill(d)
    evict.evict_batch(d, AGENT, 1)
    [summarize] = events(d, "summarize")
    [alarm] = events(d, "drift_alarm")
    assert summarize["batch_id"] == 1 and 0 < float(summarize["first_score"]) <= 1  # type: ignore[arg-type]
    assert "retry_score" in summarize and alarm == summarize
    [evicted] = events(d, "evict")
    assert evicted["resummarized"] is True


def test_no_drift_events_above_threshold(tmp_path: Path) -> None:
    d = make_deps(tmp_path, settings=small_settings(drift={"threshold": -1.0}))
    create_agent(d.hot, d.store, AGENT, model=MODEL)
    fill(d)
    evict.evict_batch(d, AGENT, 1)
    assert events(d, "summarize") == [] and events(d, "drift_alarm") == []


def test_dead_letter_records_an_event_and_leaves_the_batch(deps: Deps) -> None:
    fill(deps)
    out = evict.dead_letter(deps, AGENT, 1, reason="StoreUnavailable: down", attempts=9, delivery="t-1")
    assert out.outcome == "dead_lettered"
    [event] = events(deps, "dead_letter")
    assert (event["batch_id"], event["attempts"]) == (1, 9)
    evict.dead_letter(deps, AGENT, 1, reason="again", attempts=9, delivery="t-1")  # same delivery: one row
    assert len(events(deps, "dead_letter")) == 1
    assert deps.hot.pending_batches(AGENT) == [1] and deps.store.committed_batches(AGENT) == []


def test_unknown_agent_or_batch_is_a_no_op(deps: Deps) -> None:
    assert evict.evict_batch(deps, "nobody", 1).outcome == "absent"
    assert evict.evict_batch(deps, AGENT, 99).outcome == "absent"


def test_a_notice_appended_by_a_finish_is_spooled_too(deps: Deps) -> None:
    """A new summary can push the window past warning; the notice it adds is recall like any message."""
    fill(deps)  # batch 1 begun: the window is back near target
    i = 1000
    while True:  # keep talking while batch 1 waits, up to just below warning
        meta = {k: int(v) for k, v in deps.hot.snapshot(AGENT).meta.items() if v.lstrip("-").isdigit()}
        total = sum(meta[k] for k in ("system", "working", "summary", "ph", "fifo"))
        if total + 45 > meta["warn"] or meta["warned"]:
            break
        converse(deps.hot, AGENT, 1, start=i)
        i += 1
    before = {m.id for m in deps.hot.snapshot(AGENT).fifo}
    evict.evict_batch(deps, AGENT, 1)
    notices = [m for m in deps.hot.snapshot(AGENT).fifo if m.id not in before and m.kind == "pressure"]
    assert len(notices) == 1, "the installed summary should have crossed warning"
    dispatcher = deps.dispatcher
    assert isinstance(dispatcher, RecordingDispatcher)
    assert (AGENT, (notices[0].id,)) in dispatcher.spooled


def test_every_committed_batch_has_exactly_one_flush_row(deps: Deps) -> None:
    # `fill` begins batches through the hot state alone, as a request that died right after its
    # Lua call would leave them: no flush row yet. The commit writes it; a replay adds nothing.
    fill(deps, batches=2)
    for batch in (1, 2):
        evict.evict_batch(deps, AGENT, batch)
    evict.evict_batch(deps, AGENT, 2)  # a redelivery
    flushes = events(deps, "flush")
    assert sorted(int(str(e["batch_id"])) for e in flushes) == [1, 2]
    assert all(e["footprint"]["op"] == "evict_begin" for e in flushes)  # type: ignore[index]


def test_a_batch_begun_by_a_summary_install_gets_its_flush_row(tmp_path: Path) -> None:
    from vcm.obs import audit

    d = make_deps(tmp_path)
    create_agent(d.hot, d.store, AGENT, model=MODEL, system_prompt="You are a careful assistant.")
    fill(d)
    # Fill the FIFO up to just below flush while batch 1 is pending: installing its summary then
    # pushes the context over flush, and the finish begins the next batch itself.
    i = 1000
    while not d.hot.pending_batches(AGENT)[1:]:
        snap = d.hot.gauges(AGENT)
        if snap.total + 60 >= int(d.hot.snapshot(AGENT).counter("flush")):
            break
        converse(d.hot, AGENT, 1, start=i)
        i += 1
    out = evict.evict_batch(d, AGENT, 1)
    begun = out.next_batch
    assert begun is not None, "the summary install was meant to push the context past flush"
    ids = {e.event_id for e in d.store.query_events(AGENT, ["flush"], limit=100).items}
    assert f"{AGENT}:flush:{begun}" in ids  # written at the finish, before batch 2 is committed
    assert audit.flush_event(AGENT, begun, messages=1, tokens=1, total_after=None, actor="x").event_id in ids
    d.store.close()


def test_a_rebuild_resumes_the_evicted_counter_from_the_committed_batches(deps: Deps) -> None:
    deps.store.put_agent(AGENT, agent_config(MODEL, "You are a careful assistant.", []))  # as the service does
    fill(deps, batches=2)
    assert evict.evict_batch(deps, AGENT, 1).outcome == "committed"
    (committed_ids,) = [e["message_ids"] for e in events(deps, "evict")]
    committed = len(committed_ids)  # type: ignore[arg-type]
    assert deps.hot.snapshot(AGENT).counter("evicted") > committed > 0  # batch 2 began, never committed
    # The write-behind caught up: every message the hot state holds is in the store too.
    held = deps.hot.batch_message_ids(AGENT)[2] + deps.hot.fifo_ids(AGENT)
    spool_messages(deps.hot, deps.store, AGENT, held)
    deps.hot.forget(AGENT)  # the hot state is lost; the store rebuilds it
    MemoryService(deps.hot, deps.store, RecordingDispatcher()).rebuild(AGENT)
    after = deps.hot.snapshot(AGENT)
    # Batch 2 never committed: its messages came back into the FIFO, batch 1's count as evicted, and
    # those the rebuilt context could not hold were evicted again in a new batch (counted as ever).
    begun = sum(len(ids) for ids in deps.hot.batch_message_ids(AGENT).values())
    assert after.counter("evicted") == committed + begun
    assert after.counter("appended") == after.counter("evicted") + len(deps.hot.fifo_ids(AGENT))


def test_an_eviction_scans_each_text_for_poisoning_once(deps: Deps, monkeypatch: pytest.MonkeyPatch) -> None:
    """The summary and the fact extraction read the same sentences: one job scans each once."""
    from collections import Counter

    from vcm import poisoning

    scanned: Counter[str] = Counter()
    real = poisoning.Filter.scan

    def counted(self: poisoning.Filter, text: str) -> poisoning.Verdict:
        scanned[text] += 1
        return real(self, text)

    fill(deps)
    monkeypatch.setattr(poisoning.Filter, "scan", counted)
    assert evict.evict_batch(deps, AGENT, 1).outcome == "committed"
    assert scanned and max(scanned.values()) == 1, scanned.most_common(3)


def _facts(d: Deps) -> int:
    return sum(sum(by.values()) for by in d.store.fact_counts(AGENT).values())


def test_batch_facts_are_written_beside_the_summary_and_their_failure_fails_the_job(deps: Deps) -> None:
    fill(deps)
    threads: list[str] = []

    def failing(messages: Sequence[Message], scan: Scan) -> list[Candidate]:
        threads.append(threading.current_thread().name)
        raise RuntimeError("the extractor broke")

    with pytest.raises(RuntimeError, match="extractor broke"):
        evict.evict_batch(dataclasses.replace(deps, extractor=failing), AGENT, 1)
    assert threads == ["vcm-batch-facts"]  # not the job's own thread
    assert deps.store.committed_batches(AGENT) == [] and deps.hot.pending_batches(AGENT) == [1]
    assert evict.evict_batch(deps, AGENT, 1).outcome == "committed"  # the retry, with facts
    assert _facts(deps) > 0


def test_a_failed_summary_waits_for_the_batch_facts(deps: Deps) -> None:
    """No fact write of a failed attempt may run on into its retry (dedup would race itself)."""
    fill(deps)

    def slow(messages: Sequence[Message], scan: Scan) -> list[Candidate]:
        time.sleep(0.3)  # still extracting when the summary fails
        return list(fact_extraction.extract(messages, scan))

    def broken(request: Request, params: Params) -> Draft:
        raise RuntimeError("the summarizer broke")

    with pytest.raises(RuntimeError, match="summarizer broke"):
        evict.evict_batch(dataclasses.replace(deps, extractor=slow, summarizer=broken), AGENT, 1)
    written = _facts(deps)
    assert written > 0  # the thread finished before the job raised
    time.sleep(0.4)
    assert _facts(deps) == written and deps.store.committed_batches(AGENT) == []
