"""Rewriting stored summary versions (a forgotten message's words leave every version of it)."""

from __future__ import annotations

from collections.abc import Sequence

from vcm.store import semantics, validation
from vcm.store.arango import documents, keys, names
from vcm.store.arango.base import ArangoBase
from vcm.store.types import Summary, SummaryVersion


class SummaryOps(ArangoBase):
    """``rewrite_summaries``: the versions live on the batch documents (``summary_text``), the
    current summary is the agent's summary document in ``core_memory``."""

    def rewrite_summaries(
        self, agent_id: str, versions: Sequence[SummaryVersion], *, expected_rev: str | None
    ) -> Summary | None:
        versions = validation.summary_rewrites(agent_id, versions)
        with self._transaction((names.CORE, names.BATCHES), "rewrite_summaries") as txn:
            core = txn.collection(names.CORE)
            current = core.get(documents.summary_key(agent_id))
            current_rev = None if current is None else str(current["_rev"])
            if current is not None and current_rev != expected_rev:
                raise semantics.rev_conflict(f"the summary of agent {agent_id!r}", expected_rev, current_rev)
            batches = txn.collection(names.BATCHES)
            now = self._clock()
            for v in versions:
                key = keys.batch_key(agent_id, v.batch_id)
                stored = batches.get(key)
                if not isinstance(stored, dict) or "summary_text" not in stored:
                    continue  # no such version (a batch document without a summary is not one)
                batches.replace({**stored, "summary_text": v.text, "summary_tokens": v.tokens}, check_rev=True)
                if current is not None and int(current["batch_id"]) == v.batch_id:
                    doc = documents.summary_doc(agent_id, v.text, v.tokens, v.batch_id, now)
                    meta = core.replace({**doc, "_rev": current["_rev"]}, check_rev=True)
                    current = {**doc, "_rev": meta["_rev"]}
            self._fault("rewrite_summaries.before_commit")
        return None if current is None else documents.summary_from_doc(current)
