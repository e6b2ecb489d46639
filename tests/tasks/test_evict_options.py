"""evict_fifo's options end to end on the cold path: a batch begun with ``summarize=false`` goes to
recall whole and leaves the recursive summary as it was; a token target evicts what brings the
context down to it, and a retry under the key is a replay of that batch."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.doubles.coldpath import MODEL, appended_ids, converse, make_deps
from vcm.hotpath.budget import Budget
from vcm.service import MemoryService
from vcm.tasks import evict
from vcm.tasks.deps import Deps

AGENT = "agent-1"


@pytest.fixture
def deps(tmp_path: Path) -> Iterator[Deps]:
    d = make_deps(tmp_path)
    service(d).create_agent(AGENT, model=MODEL, system_prompt="You are a careful assistant.")
    yield d
    d.store.close()


def service(d: Deps) -> MemoryService:
    return MemoryService(d.hot, d.store, d.dispatcher, embed=d.embed, clock=d.clock)


def warm(d: Deps) -> list[str]:
    """A conversation above the target line and below flush (no batch pending)."""
    target = Budget.for_window(d.hot.agent(AGENT).window, d.settings.budget).target
    ids: list[str] = []
    i = 0
    while d.hot.gauges(AGENT).total <= target + 40:
        ids += appended_ids(converse(d.hot, AGENT, 1, start=i))
        i += 1
    assert d.hot.pending_batches(AGENT) == []
    return ids


def test_summarize_false_keeps_the_summary_and_recall_gets_every_message(deps: Deps) -> None:
    warm(deps)
    svc = service(deps)
    _, first = svc.evict(AGENT, 2, summarize=True, idempotency_key="e1")
    assert first is not None
    assert evict.evict_batch(deps, AGENT, first.id).outcome == "committed"
    before = deps.store.get_summary(AGENT)
    assert before is not None and before.text

    _, batch = svc.evict(AGENT, 2, summarize=False, idempotency_key="e2")
    assert batch is not None and deps.hot.summary_skipped(AGENT, batch.id, batch.message_ids[0])
    assert evict.evict_batch(deps, AGENT, batch.id).outcome == "committed"
    after = deps.store.get_summary(AGENT)
    assert after is not None and after.batch_id == batch.id  # the batch committed ...
    assert (after.text, after.tokens) == (before.text, before.tokens)  # ... and the summary stayed
    stored = deps.store.get_messages(AGENT, list(batch.message_ids))
    assert [m.message_id for m in stored] == list(batch.message_ids)  # recall has every message
    assert deps.hot.summary(AGENT)[0] == before.text
    assert not deps.hot.summary_skipped(AGENT, batch.id, batch.message_ids[0])  # the flag went with the batch
    # A flag left behind by a batch that never finished marks no later batch of that number.
    deps.hot.skip_summary(AGENT, batch.id + 1, "m-of-a-batch-gone")
    _, later = svc.evict(AGENT, 1, idempotency_key="e3")
    assert later is not None and later.id == batch.id + 1
    assert not deps.hot.summary_skipped(AGENT, later.id, later.message_ids[0])
    (row,) = [e for e in deps.store.query_events(AGENT, ["evict"], limit=10).items if e.payload["batch_id"] == batch.id]
    assert row.payload["method"] == "skipped"


def test_a_token_target_evicts_down_to_it_and_a_retry_replays(deps: Deps) -> None:
    warm(deps)
    svc = service(deps)
    total = deps.hot.gauges(AGENT).total
    target = total - 60
    after, batch = svc.evict(AGENT, target_tokens=target, idempotency_key="t1")
    assert batch is not None and after <= target < total
    again = svc.evict(AGENT, target_tokens=target, idempotency_key="t1")[1]
    assert again is not None and again.id == batch.id  # the first call's batch, not a new plan
    nothing = svc.evict(AGENT, target_tokens=total * 10, idempotency_key="t2")
    assert nothing[1] is None  # already within the target: nothing evicted
