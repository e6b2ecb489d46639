"""Re-embedding a stored conversation (vcm.tasks.recall.reembed): the same in-context vectors the spool makes,
resumable and idempotent, on a real SQLite store."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import fakeredis
import pytest

from tests.doubles.coldpath import MODEL, small_settings
from tests.doubles.embedder import word_embed
from vcm.durable import agent_config
from vcm.errors import ValidationError
from vcm.hotpath.state import HotState
from vcm.store import open_store
from vcm.store.port import MemoryStore
from vcm.tasks.recall.reembed import reembed_agent
from vcm.tasks.recall.vectors import Turn, context_turns, later_turns
from vcm.tasks.spool import SpoolOutcome, spool_messages
from vcm.tasks.summary.selection import Vectors


class RecordingVectorizer:
    """Word-hash vectors of each message read with its context; remembers the context it used."""

    def __init__(self, version: str = "rec:late2+1:v1", context: int = 2, after: int = 1) -> None:
        self.version, self.context, self.after = version, context, after
        self.seen: dict[int, tuple[tuple[str, ...], str, tuple[str, ...]]] = {}

    def embed(self, history: Sequence[Turn], targets: Sequence[Turn]) -> list[Vectors | None]:
        pool = [*history, *targets]
        for t in targets:
            self.seen[t.seq] = (
                tuple(context_turns(pool, t, self.context)),
                t.text,
                tuple(later_turns(pool, t, self.after)),
            )
        rows = word_embed([" ".join([*self.seen[t.seq][0], t.text, *self.seen[t.seq][2]]) for t in targets])
        return list(rows)


def spool(hot: HotState, store: MemoryStore, agent: str, ids: Sequence[str], **kwargs: Any) -> SpoolOutcome:
    """The spool, into a store that knows the agent (its writes are for a known agent only)."""
    store.put_agent(agent, agent_config(MODEL, "", ()))
    return spool_messages(hot, store, agent, ids, **kwargs)


def conversation(hot: HotState, agent: str, n: int) -> list[str]:
    hot.create_agent(agent, model=MODEL)
    return [hot.append(agent, "user", f"turn {i} about topic {i % 5}").message_id for i in range(n)]


def test_reembedding_matches_what_the_spool_embeds_across_pages(tmp_path: Path) -> None:
    hot = HotState(fakeredis.FakeRedis(decode_responses=True), small_settings())
    ids = conversation(hot, "a1", 11)
    spooled_store = open_store(f"sqlite:///{tmp_path / 'spooled.db'}")
    bare_store = open_store(f"sqlite:///{tmp_path / 'bare.db'}")
    try:
        at_spool = RecordingVectorizer()
        for message_id in ids:  # one spool per append, as the hot path dispatches them
            spool(hot, spooled_store, "a1", [message_id], vectorizer=at_spool)
        spool(hot, bare_store, "a1", ids)  # vectors lost (say, written by an older model)

        later = RecordingVectorizer()
        outcome = reembed_agent(bare_store, "a1", later, page=3)

        assert outcome.scanned == 11 and outcome.embedded == 11
        # every message the spool embedded got the same context back; the newest, which the spool
        # leaves for its followers, are embedded too
        assert {s: later.seen[s] for s in at_spool.seen} == at_spool.seen
        assert len(at_spool.seen) == 10 and sorted(later.seen) == list(range(1, 12))  # seqs from 1
        assert bare_store.message_vector_ids("a1", ids, later.version) == set(ids)
        events = bare_store.query_events("a1", ["reembed"]).items
        assert [e.payload["embedded"] for e in events] == [11] and events[0].actor == "worker:reembed"
    finally:
        spooled_store.close()
        bare_store.close()


def test_reembedding_is_idempotent_and_resumes(tmp_path: Path) -> None:
    hot = HotState(fakeredis.FakeRedis(decode_responses=True), small_settings())
    ids = conversation(hot, "a2", 7)
    store = open_store(f"sqlite:///{tmp_path / 'vcm.db'}")
    try:
        spool(hot, store, "a2", ids)
        store.put_message_vectors("a2", [(ids[2], [1.0, 0.0]), (ids[5], [0.0, 1.0])], "old-model:v1")
        first = RecordingVectorizer(version="new:v2")
        # a run that already embedded three (stopped midway)
        store.put_message_vectors("a2", [(m, list(word_embed([m])[0])) for m in ids[:3]], "new:v2")
        assert reembed_agent(store, "a2", first, page=2).embedded == 4
        assert sorted(first.seen) == [4, 5, 6, 7]  # only the missing ones (seqs from 1)

        again = RecordingVectorizer(version="new:v2")
        outcome = reembed_agent(store, "a2", again)
        assert (outcome.scanned, outcome.embedded, again.seen) == (7, 0, {})
        assert len(store.query_events("a2", ["reembed"]).items) == 1  # nothing new: no event
        assert store.message_vector_ids("a2", ids, "old-model:v1") == {ids[2], ids[5]}  # untouched
    finally:
        store.close()


def test_an_unknown_agent_has_nothing_to_reembed_and_bad_pages_are_refused(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'vcm.db'}")
    try:
        assert reembed_agent(store, "nobody", RecordingVectorizer()).as_dict()["scanned"] == 0
        with pytest.raises(ValidationError):
            reembed_agent(store, "nobody", RecordingVectorizer(), page=0)
    finally:
        store.close()


def test_a_bounded_run_resumes_where_it_stopped_with_the_same_context(tmp_path: Path) -> None:
    hot = HotState(fakeredis.FakeRedis(decode_responses=True), small_settings())
    ids = conversation(hot, "a3", 13)
    whole = open_store(f"sqlite:///{tmp_path / 'whole.db'}")
    parts = open_store(f"sqlite:///{tmp_path / 'parts.db'}")
    try:
        for store in (whole, parts):
            spool(hot, store, "a3", ids)
        in_one = RecordingVectorizer()
        reembed_agent(whole, "a3", in_one, page=4)

        in_parts = RecordingVectorizer()
        after, runs, total = -1, 0, 0
        while True:
            outcome = reembed_agent(parts, "a3", in_parts, page=2, after_seq=after, max_embedded=3)
            runs, total, after = runs + 1, total + outcome.embedded, outcome.next_after_seq
            assert outcome.embedded >= 3 or outcome.done
            if outcome.done:
                break
        assert runs > 2 and total == 13
        assert in_parts.seen == in_one.seen
        assert parts.message_vector_ids("a3", ids, in_parts.version) == set(ids)
    finally:
        whole.close()
        parts.close()
